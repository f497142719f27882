--[[ What both refunds do once their head (log_refund.lua,
log_refund_imported.lua) has set key, lk, tsa, ts, cost, win and now.

Gives the entry's units back by adding it to the key's ledger: a sorted set
whose scores are the refunded entries' scores and whose members are the
ledger's own running total of refunded units. The log is left as it is, so
the units in a window are (log newest - log base) - (ledger newest - ledger
base), and a refund costs O(log n), plus O(k) for the k refunds already in
the ledger scored after this one (their totals move up by cost; refunds
sent in score order append, k = 0). An entry that has left the window, is
gone (reset, or the key expired), is not the one recorded (cost differs),
or was given back already has nothing to give back: a refund sent twice
gives back once. Returns 1 if units were given back, 0 if there was nothing
to give back. ]]

if ts <= now - win then return 0 end
if part and (part < 1 or part > cost) then return 0 end
return give_back(key, lk, tsa, cost, part)
