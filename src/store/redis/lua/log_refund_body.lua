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
local e = redis.call('ZRANGEBYSCORE', key, tsa, tsa)
if not e[1] then return 0 end
local p = redis.call('ZREVRANGEBYSCORE', key, '(' .. tsa, '-inf', 'LIMIT', '0', '1')
local prev = 0
if p[1] then prev = tonumber(p[1]) end
if tonumber(e[1]) - prev ~= cost then return 0 end
if redis.call('ZCOUNT', lk, tsa, tsa) > 0 then return 0 end
local r = refunded_upto(lk, ts)
-- later refunds move up by cost, newest first, so that no moved total
-- ever meets one not yet moved
local later = redis.call('ZRANGEBYSCORE', lk, '(' .. tsa, '+inf', 'WITHSCORES')
for i = #later - 1, 1, -2 do
  redis.call('ZREM', lk, later[i])
  redis.call('ZADD', lk, later[i + 1], tonumber(later[i]) + cost)
end
redis.call('ZADD', lk, tsa, r + cost)
local ttl = redis.call('PTTL', key)
if ttl > 0 then redis.call('PEXPIRE', lk, ttl) end
return 1
