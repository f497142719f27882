local function fmt(n) return string.format('%.0f', n) end
-- Under Redis Cluster the ledger is kept next to the log (keep: its key,
-- else false), so that a limiter's keys are all there or all absent, as a
-- slot being migrated requires of a command that names several keys.
local keep = false
local function clock(arg)
  if arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
-- The ledger key when it exists (most keys never had a refund).
local function ledger(lkey)
  if redis.call('EXISTS', lkey) == 1 then return lkey end
  return nil
end
-- Units the ledger gave back for entries scored at most s (O(log n)).
local function refunded_upto(lk, s)
  local r = redis.call('ZREVRANGEBYSCORE', lk, fmt(s), '-inf', 'LIMIT', 0, 1)
  if r[1] then return tonumber(r[1]) end
  return 0
end
-- The ledger's newest running total and the score it refunds (nil if none).
local function ledger_newest(lk, rb)
  local n = redis.call('ZRANGE', lk, -1, -1, 'WITHSCORES')
  if n[1] and n[2] ~= '-inf' then return tonumber(n[1]), tonumber(n[2]) end
  return rb, nil
end
-- The entry at a rank: the live units up to it, net of refunds, and its score.
local function net_at(key, lk, rank, base, rb)
  local e = redis.call('ZRANGE', key, rank, rank, 'WITHSCORES')
  local n, t = tonumber(e[1]) - base, tonumber(e[2])
  if lk then n = n - (refunded_upto(lk, t) - rb) end
  return n, t
end
-- Time at which the live entries from rank r0 on free `need` units, and
-- the time of the first of them (when the count may next change). Net
-- units never decrease with rank, so a binary search finds it: O(log n),
-- or O(log^2 n) when the key has a ledger.
local function freeing_time(key, lk, r0, base, rb, need)
  local v, first = net_at(key, lk, r0, base, rb)
  if v >= need then return first, first end
  local lo, hi = r0 + 1, redis.call('ZCARD', key) - 1
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if net_at(key, lk, mid, base, rb) >= need then hi = mid else lo = mid + 1 end
  end
  local e = redis.call('ZRANGE', key, lo, lo, 'WITHSCORES')
  return tonumber(e[2]), first
end
-- When the window holds none of the `used` units: the newest entry not
-- given back leaves it. Only a refund of the newest entry needs a search.
local function last_live(key, lk, r0, base, rb, used, last_ts, rlast)
  if not lk or rlast ~= last_ts then return last_ts end
  return (freeing_time(key, lk, r0, base, rb, used))
end
-- The log up to cutoff: its base (running total before the window), the
-- rank of the first live entry, and the ledger's base. When writing,
-- expired entries go and their totals are kept in one entry scored -inf,
-- in the log and in the ledger alike.
local function trim(key, lk, cutoff, write)
  -- the head of the log (O(1)): when its first timed entry is still in the
  -- window, nothing has expired and no search is needed
  local h = redis.call('ZRANGE', key, 0, 1, 'WITHSCORES')
  if not h[1] then return 0, 0, 0 end
  local rb = 0
  if lk then rb = refunded_upto(lk, cutoff) end
  local f = 2
  if h[2] == '-inf' then f = 4 end
  if not h[f] or tonumber(h[f]) > cutoff then
    if f == 4 then return tonumber(h[1]), 1, rb end
    return 0, 0, rb
  end
  local old = redis.call('ZREVRANGEBYSCORE', key, fmt(cutoff), '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if not old[1] then return 0, 0, rb end
  if old[2] ~= '-inf' and write then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(cutoff))
    redis.call('ZADD', key, '-inf', old[1])
    if lk then
      redis.call('ZREMRANGEBYSCORE', lk, '-inf', fmt(cutoff))
      if rb > 0 or keep then redis.call('ZADD', lk, '-inf', fmt(rb)) end
    end
  end
  return tonumber(old[1]), 1, rb
end
-- The newest running total and its time (nil if the log holds no entry).
local function newest(key, base)
  local n = redis.call('ZRANGE', key, 0, 0, 'REV', 'WITHSCORES')
  if n[1] and n[2] ~= '-inf' then return tonumber(n[1]), tonumber(n[2]) end
  return base, nil
end
-- Record cost units now (or 1 us after the newest entry); returns the score.
-- The key expires when its newest entry leaves the window, on the clock
-- that scored it, even if that entry is ahead of now.
local function record(key, lk, now, last_ts, total, base, r0, rb, cost, win)
  local ts = now
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
      redis.call('ZADD', key, all[i + 1], fmt(tonumber(all[i]) - base))
    end
    total = total - base
    if lk then
      local refs = redis.call('ZRANGEBYSCORE', lk, '(-inf', '+inf', 'WITHSCORES')
      redis.call('DEL', lk)
      for i = 1, #refs, 2 do
        redis.call('ZADD', lk, refs[i + 1], fmt(tonumber(refs[i]) - rb))
      end
    end
  end
  redis.call('ZADD', key, fmt(ts), fmt(total + cost))
  if keep and not lk then redis.call('ZADD', keep, '-inf', '0'); lk = keep end
  local ttl = fmt(math.ceil((ts + win - now) / 1000) + 1)
  redis.call('PEXPIRE', key, ttl)
  if lk then redis.call('PEXPIRE', lk, ttl) end
  return ts
end
local key = KEYS[1]
local lim, win, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local now = clock(ARGV[4])
local mode = ARGV[5]
local start = now - (now % win)
local reset = start + win
local v = redis.call('HMGET', key, 's', 'n')
local n = 0
if v[1] and tonumber(v[1]) == start then n = tonumber(v[2]) end
local ok = n + cost <= lim
if mode == 'p' or (not ok and mode ~= '1') then
  local rem = lim - n
  if rem < 0 then rem = 0 end
  local retry = 0
  if not ok then retry = reset - now end
  if n == 0 then reset = now end
  return {ok and 1 or 0, rem, retry, reset, n, -1}
end
redis.call('HSET', key, 's', fmt(start), 'n', fmt(n + cost))
redis.call('PEXPIRE', key, fmt(math.ceil((reset - now) / 1000) + 1))
if ok then return {1, lim - n - cost, 0, reset, n + cost, -1} end
return {0, 0, reset - now, reset, n + cost, -1}
