--[[ What the logs add to prelude_base.lua: the ledger of refunds, the trim,
the search. The scripts of the sliding log start with prelude_base.lua and
this file. ]]

-- Units the ledger gave back for entries scored at most s (O(log n)).
local function refunded_upto(lk, s)
  local r = redis.call('ZREVRANGEBYSCORE', lk, s, '-inf', 'LIMIT', '0', '1')
  if r[1] then return tonumber(r[1]) end
  return 0
end
-- The ledger's newest running total and the score it refunds (nil if none).
local function ledger_newest(lk, rb)
  local n = redis.call('ZRANGE', lk, -1, -1, 'WITHSCORES')
  if n[2] == 'inf' then
    -- reservations are there, scored +inf: the newest refund is below them
    n = redis.call('ZRANGE', lk, '(+inf', '-inf', 'BYSCORE', 'REV', 'LIMIT', '0', '1', 'WITHSCORES')
  end
  if n[1] and n[2] ~= '-inf' then return tonumber(n[1]), tonumber(n[2]) end
  return rb, nil
end
-- Give back `part` (default: all) of the units of the log entry scored tsa
-- (a string, as recorded) of `cost` units, by adding it to the ledger lk
-- (see log_refund_body.lua). A part is what a local batch (see
-- log_attempt.lua) did not use. Returns 1, or 0 when there is nothing to
-- give back: the entry is gone, holds another cost, or was given back
-- already, in whole or in part (so twice gives back once).
local function give_back(key, lk, tsa, cost, part)
  part = part or cost
  local e = redis.call('ZRANGEBYSCORE', key, tsa, tsa)
  if not e[1] then return 0 end
  local p = redis.call('ZREVRANGEBYSCORE', key, '(' .. tsa, '-inf', 'LIMIT', '0', '1')
  local prev = 0
  if p[1] then prev = tonumber(p[1]) end
  if tonumber(e[1]) - prev ~= cost then return 0 end
  if redis.call('ZCOUNT', lk, tsa, tsa) > 0 then return 0 end
  local r = refunded_upto(lk, tonumber(tsa))
  -- later refunds move up by cost, newest first, so that no moved total
  -- ever meets one not yet moved
  local later = redis.call('ZRANGEBYSCORE', lk, '(' .. tsa, '(+inf', 'WITHSCORES')
  for i = #later - 1, 1, -2 do
    redis.call('ZREM', lk, later[i])
    redis.call('ZADD', lk, later[i + 1], tonumber(later[i]) + part)
  end
  redis.call('ZADD', lk, tsa, r + part)
  local ttl = redis.call('PTTL', key)
  if ttl > 0 then redis.call('PEXPIRE', lk, ttl) end
  return 1
end
-- The reservations of a log (rl_attempt_all over several hash slots of a
-- Redis Cluster, store_redis_xslot.c) are members of its ledger scored
-- +inf, out of the way of the refunds' scores: 'end:score:cost', each an
-- entry of the log recorded by a reservation not yet confirmed, and the
-- time (us) at which the reservation ends. The ledger is one of the keys
-- every script names, so a slot being migrated finds them where it finds
-- the log. Each is a string that no refund's member (a number) can be.
local function reservations(lk)
  return redis.call('ZRANGEBYSCORE', lk, '+inf', '+inf')
end
-- The entries whose reservation ended before now stop counting: given back
-- through the ledger, as a refund would, before anything reads the log.
local function end_reservations(key, lk, now)
  for _, m in ipairs(reservations(lk)) do
    local e, ts, c = string.match(m, '^(%d+):(%d+):(%d+)$')
    if e and e + 0 <= now then
      give_back(key, lk, ts, c + 0)
      redis.call('ZREM', lk, m)
    end
  end
end
-- The ledger key when it exists (most keys never had a refund), and the
-- end of the key's block: one EXISTS for both, as most keys have neither.
-- Given the log's key and now, the ended reservations of a sliding log are
-- given back first; only a key with a ledger can have any (one ZRANGE more).
local function ledger_block(lkey, bk, key, now)
  local n = redis.call('EXISTS', lkey, bk)
  if n == 0 then return nil, 0 end
  local b = redis.call('GET', bk)
  if b then n = n - 1 end
  if b then b = tonumber(b) else b = 0 end
  if n == 0 then return nil, b end
  if key then end_reservations(key, lkey, now) end
  return lkey, b
end
-- The entry at a rank: the live units up to it, net of refunds, and its score.
local function net_at(key, lk, rank, base, rb)
  local e = redis.call('ZRANGE', key, rank, rank, 'WITHSCORES')
  local n, t = e[1] - base, e[2] + 0
  if lk then n = n - (refunded_upto(lk, t) - rb) end
  return n, t
end
-- Time at which the live entries from rank r0 on free `need` units, and
-- the time of the first of them (when the count may next change), then
-- the first's net units. Net units never decrease with rank, so a binary
-- search finds it: O(log n), or O(log^2 n) when the key has a ledger. A
-- caller that read the first entry already (next_free's v and first, with
-- nothing written since) passes them, which saves a read.
local function freeing_time(key, lk, r0, base, rb, need, v, first)
  if not v then v, first = net_at(key, lk, r0, base, rb) end
  if v >= need then return first, first, v end
  local lo, hi = r0 + 1, redis.call('ZCARD', key) - 1
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if net_at(key, lk, mid, base, rb) >= need then hi = mid else lo = mid + 1 end
  end
  local e = redis.call('ZRANGE', key, lo, lo, 'WITHSCORES')
  return tonumber(e[2]), first, v
end
-- When the window next frees a unit (the end of the effective window of
-- draft-ietf-httpapi-ratelimit-headers-11): the oldest unit still in it
-- leaves, win after the first live entry not wholly given back. nil when
-- the window holds none of the key's units. Then the first live entry's
-- net units and time, for freeing_time while nothing has been written.
local function next_free(key, lk, r0, base, rb, used, win)
  if used <= 0 then return nil end
  local t, first, v = freeing_time(key, lk, r0, base, rb, 1)
  return t + win, v, first
end
-- When the window holds none of the `used` units: the newest entry not
-- given back leaves it. Only a refund of the newest entry needs a search.
local function last_live(key, lk, r0, base, rb, used, last_ts, rlast)
  if not lk or rlast ~= last_ts then return last_ts end
  return (freeing_time(key, lk, r0, base, rb, used))
end
-- The log up to cutoff: its base (running total before the window), the
-- rank of the first live entry, and the ledger's base. The base is the
-- newest entry that has left the window (an entry scored -inf, as earlier
-- builds wrote the base, is among them). When writing, every entry that has
-- left but that one goes, and it stays first in the log: one write (not
-- two) trims a busy key, one entry leaving per call. The entries that have
-- left are read by score, members only (O(log n)): Redis 7.0 prints every
-- score it returns with %.17g, which cost more than the rest of the read.
-- The ledger keeps its base in a member scored -inf.
local function trim(key, lk, cutoff, write)
  local c = string.format('%d', cutoff)
  local x = redis.call('ZRANGE', key, c, '-inf', 'BYSCORE', 'REV', 'LIMIT', '0', '8')
  local nx = #x
  local rb = 0
  if lk then rb = refunded_upto(lk, cutoff) end
  if nx == 0 then return 0, 0, rb end
  if nx > 1 and write then
    if nx < 8 then redis.call('ZREM', key, unpack(x, 2))
    else
      -- eight or more have left: all before the newest of them, by its score
      local o = redis.call('ZRANGE', key, c, '-inf', 'BYSCORE', 'REV', 'LIMIT', '0', '1', 'WITHSCORES')
      redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. o[2])
    end
    if lk then
      redis.call('ZREMRANGEBYSCORE', lk, '-inf', cutoff)
      if rb > 0 or keep then redis.call('ZADD', lk, '-inf', rb) end
    end
  end
  return x[1] + 0, 1, rb
end
-- The newest running total and its time (nil if the log holds no entry).
local function newest(key, base)
  local n = redis.call('ZRANGE', key, '0', '0', 'REV', 'WITHSCORES')
  if n[1] and n[2] ~= '-inf' then return n[1] + 0, n[2] + 0 end
  return base, nil
end
-- Record cost units now, or `ahead` us after now (a local batch, see
-- log_attempt.lua), or 1 us after the newest entry if that is later;
-- returns the score. The key expires when its newest entry leaves the
-- window, on the clock that scored it, even if that entry is ahead of now.
local function record(key, lk, now, last_ts, total, base, r0, rb, cost, win, ahead)
  local ts = now
  if ahead then ts = now + ahead end
  if last_ts and ts <= last_ts then ts = last_ts + 1 end
  if total == base then
    if base > 0 then redis.call('DEL', key) end
    if lk then redis.call('DEL', lk); lk = nil end
    total = 0
  elseif total + cost > 4503599627370496 then
    -- keep running totals exact as doubles: renumber the live entries
    -- (the ledger's totals never exceed the log's, and are renumbered too)
    local all = redis.call('ZRANGE', key, r0, -1, 'WITHSCORES')
    redis.call('DEL', key)
    for i = 1, #all, 2 do
      redis.call('ZADD', key, all[i + 1], tonumber(all[i]) - base)
    end
    total = total - base
    if lk then
      local refs = redis.call('ZRANGEBYSCORE', lk, '(-inf', '(+inf', 'WITHSCORES')
      local held = reservations(lk)
      redis.call('DEL', lk)
      for i = 1, #refs, 2 do
        redis.call('ZADD', lk, refs[i + 1], tonumber(refs[i]) - rb)
      end
      for _, m in ipairs(held) do redis.call('ZADD', lk, '+inf', m) end
    end
  end
  if ts == now then redis.call('ZADD', key, clock_s, string.format('%d', total + cost))
  else redis.call('ZADD', key, ts, total + cost) end
  if keep and not lk then redis.call('ZADD', keep, '-inf', '0'); lk = keep end
  local ttl = string.format('%d', math.ceil((ts + win - now) / 1000) + 1)
  redis.call('PEXPIRE', key, ttl)
  if lk then redis.call('PEXPIRE', lk, ttl) end
  keep_block(ttl)
  return ts
end
