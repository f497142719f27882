--[[ rl_attempt_all on the sliding log, after prelude_base.lua and
prelude_log.lua (also a function of the library): several keys, each
with its own limit, all admitted or none charged.

KEYS: for each of the n user keys, its log, its ledger and its block
(3n keys). ARGV: n, then lim1..limn, win1..winn (us), cost1..costn, then
flags ('f' force: record every key whatever the answer, for shadow mode;
'k' under Redis Cluster, as in log_attempt.lua; 'r' reserve: each entry
recorded is a reservation, see below) and now (us; '': Redis TIME), then
with 'r' the reservations' life (us). Every key is read first; only if
every one has room, and none is blocked, is every one recorded.
A reservation (keys of one hash slot of a call over several slots, see
store_redis_xslot.c) is an ordinary entry of the key's log, so that it
counts for every caller at once, and a member 'end:score:cost' of the
log's ledger scored +inf (see reservations): it is confirmed by removing
that member (log_settle.lua), and an entry whose reservation ended first
is given back (end_reservations).
Returns 8n integers, for each key in order {allowed, remaining,
retry_after_us, reset_at_us, used, recorded, stable_us, next_us} as
log_attempt.lua's full reply, where allowed is 1 (recorded, within its
limit), 0 (no room: this key denies), 2 (blocked) or 3 (room, but not
charged because another key denied; remaining is then lim - used, as a
peek says, and retry_after 0). ]]

local n = ARGV[1] + 0
local flags = ARGV[3 * n + 2] or ''
local force = string.find(flags, 'f', 1, true) ~= nil
local cluster = string.find(flags, 'k', 1, true) ~= nil
local now = clock(ARGV[3 * n + 3])
local reserve = string.find(flags, 'r', 1, true) ~= nil
local life = reserve and ARGV[3 * n + 4] + 0
local ks, all = {}, true
for i = 1, n do
  if cluster then keep = KEYS[3 * i - 1]; bkeep = KEYS[3 * i] end
  local s = {key = KEYS[3 * i - 2]}
  s.lk, s.bend = ledger_block(KEYS[3 * i - 1], KEYS[3 * i], s.key, now)
  s.lim, s.win, s.cost = ARGV[1 + i] + 0, ARGV[1 + n + i] + 0, ARGV[1 + 2 * n + i] + 0
  s.base, s.r0, s.rb = trim(s.key, s.lk, now - s.win, true)
  s.total, s.last_ts = newest(s.key, s.base)
  local rt = s.rb
  if s.lk then rt, s.rlast = ledger_newest(s.lk, s.rb) end
  s.used = s.total - s.base - (rt - s.rb)
  s.nxt = next_free(s.key, s.lk, s.r0, s.base, s.rb, s.used, s.win)
  if s.nxt and s.bend > s.nxt then s.nxt = s.bend end
  s.ok = s.used + s.cost <= s.lim
  if not s.ok or s.bend > now then all = false end
  ks[i] = s
end
local out = {}
for i = 1, n do
  local s = ks[i]
  local key, lk, r0, base, rb, used, win = s.key, s.lk, s.r0, s.base, s.rb, s.used, s.win
  local r
  if cluster then keep = KEYS[3 * i - 1]; bkeep = KEYS[3 * i] end
  if all or force then
    local ts = record(key, lk, now, s.last_ts, s.total, base, r0, rb, s.cost, win)
    if reserve then
      local lkey = KEYS[3 * i - 1]
      redis.call('ZADD', lkey, '+inf', string.format('%d:%d:', now + life, ts) .. ARGV[1 + 2 * n + i])
      redis.call('PEXPIRE', lkey, redis.call('PTTL', key))
    end
    local nxt = s.nxt or math.max(ts + win, s.bend)
    if s.ok and s.bend <= now then
      r = {1, s.lim - used - s.cost, 0, ts + win, used + s.cost, ts, 0, nxt}
    else
      local retry = 0
      if not s.ok then
        local free_at = freeing_time(key, lk, r0, base, rb, used + s.cost - s.lim)
        retry = free_at + win - now
      end
      r = blocked({0, 0, retry, ts + win, used + s.cost, ts, 0}, s.bend, now)
      r[8] = nxt
    end
  else
    local reset = now
    if used > 0 then reset = last_live(key, lk, r0, base, rb, used, s.last_ts, s.rlast) + win end
    local rem = s.lim - used
    if rem < 0 then rem = 0 end
    if s.ok and s.bend <= now then
      r = {3, rem, 0, reset, used, -1, 0}
    else
      local retry, first = 0, nil
      if not s.ok then
        local free_at
        free_at, first = freeing_time(key, lk, r0, base, rb, used + s.cost - s.lim)
        retry = free_at + win - now
      elseif used > 0 then
        first = select(2, net_at(key, lk, r0, base, rb))
      end
      r = blocked({0, rem, retry, reset, used, -1, 0}, s.bend, now)
      r[7] = r[3]
      if first then r[7] = math.min(first + win - now, r[3]) end
    end
    r[8] = s.nxt or math.max(now + win, s.bend)
  end
  for j = 1, 8 do out[8 * (i - 1) + j] = r[j] end
end
return out
