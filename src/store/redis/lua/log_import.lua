--[[ Carrying the fallback store's admissions back (outage.c), after
prelude_base.lua: KEYS[1] log, KEYS[2] ledger, KEYS[3] block, KEYS[4] the
log's imports; ARGV now (us, or ''), 'k' under Redis Cluster (keep the
ledger and the block key), and the entries, "id,age,cost,win,lim,reach;"
each: a name no other admission anywhere has (the server, database,
algorithm and time that admitted it), how long ago it was admitted (us, on
the clock of the server that admitted it, so that no clock but Redis's
places it), its units, the window and limit it was admitted under, and how
long after its time it still counts (see counter_import.lua). An age below
0 is an entry scored ahead of its server's now (a local batch's, whose units
are used until then, or one admitted after it), and it is scored as far
ahead of Redis's now. Each entry
still inside its window at Redis's now - age and not imported before is
recorded at that score (or the next free microsecond after it, which can
only make it expire later), and every newer entry's running total moves up
by its cost, newest first, so that no moved total meets one not yet moved:
O(k log n) for the k entries newer than it, once, when an outage ends. The
imports set holds the names recorded, scored by when their entry leaves its
window, so a batch sent twice (a lost reply, a crash before the fallback
store forgot it, a rolled-back transaction) is recorded once. The ledger is
left as it is: refunds name scores, and no score moves. Returns {recorded,
already recorded, outside their window}. ]]

local key, lk, ik = KEYS[1], KEYS[2], KEYS[4]
if ARGV[2] == 'k' then keep = KEYS[2]; bkeep = KEYS[3] end
local now = clock(ARGV[1])
local done, dup, old, until_ = 0, 0, 0, 0
for id, age, cost, win in string.gmatch(ARGV[3], '([^,;]+),(-?%d+),(%d+),(%d+),%d+,%d+;') do
  local s = now - tonumber(age)
  cost, win = tonumber(cost), tonumber(win)
  if s <= now - win then old = old + 1
  elseif redis.call('ZSCORE', ik, id) then dup = dup + 1
  else
    while redis.call('ZCOUNT', key, s, s) > 0 do s = s + 1 end
    local p = redis.call('ZREVRANGEBYSCORE', key, '(' .. fmt(s), '-inf', 'LIMIT', '0', '1')
    local prev = 0
    if p[1] then prev = tonumber(p[1]) end
    local later = redis.call('ZRANGEBYSCORE', key, '(' .. fmt(s), '+inf', 'WITHSCORES')
    for j = #later - 1, 1, -2 do
      redis.call('ZREM', key, later[j])
      redis.call('ZADD', key, later[j + 1], tonumber(later[j]) + cost)
    end
    redis.call('ZADD', key, s, prev + cost)
    redis.call('ZADD', ik, s + win, id)
    if s + win > until_ then until_ = s + win end
    done = done + 1
  end
end
if done > 0 then
  redis.call('ZREMRANGEBYSCORE', ik, '-inf', now)
  local ttl = math.ceil((until_ - now) / 1000) + 1
  for _, k in ipairs({key, lk, ik}) do
    local t = redis.call('PTTL', k)
    if t == -2 and k == lk and keep then redis.call('ZADD', lk, '-inf', '0'); t = 0 end
    if t >= 0 and t < ttl then redis.call('PEXPIRE', k, ttl) end
  end
  keep_block(ttl)
end
return {done, dup, old}
