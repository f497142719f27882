--[[ The second step of rl_attempt_all over several hash slots of a Redis
Cluster (store_redis_xslot.c), after prelude_base.lua and prelude_log.lua:
confirm or cancel the reservations log_all.lua made on one slot.

KEYS: for each key of the slot, its log and its ledger (2m keys). ARGV:
mode ('c' confirm, 'x' cancel), then for each key the score of the entry
its reservation recorded and that entry's cost.
Confirm removes the reservation, and the entry stays, an ordinary entry of
the log at the reservation's time (refunds, tickets and the trim know it
as any other). A confirm sent again finds the entry there and not given
back, and answers 1 again, writing nothing. It answers 0 when the entry
was given back (its reservation ended first, or was cancelled) or is gone.
Cancel removes the reservation and gives the entry back at once, whether it
was confirmed or not (the undoing of a call whose confirm failed on another
slot); twice gives back once. It answers 1 when units were given back.
Returns m integers, one per key, 0 or 1. ]]

local mode = ARGV[1]
local out = {}
for i = 1, #KEYS / 2 do
  local key, lk = KEYS[2 * i - 1], KEYS[2 * i]
  local tsa, costa = ARGV[2 * i], ARGV[2 * i + 1]
  local held = 0
  for _, m in ipairs(reservations(lk)) do
    local ts, c = string.match(m, '^%d+:(%d+):(%d+)$')
    if ts == tsa and c == costa then held = redis.call('ZREM', lk, m) end
  end
  if mode == 'c' then
    out[i] = held
    if held == 0 and redis.call('ZCOUNT', key, tsa, tsa) == 1
       and redis.call('ZCOUNT', lk, tsa, tsa) == 0 then out[i] = 1 end
  else
    out[i] = give_back(key, lk, tsa, costa + 0)
  end
end
return out
