--[[ rl_attempt_all on the sliding log, after prelude_base.lua and
prelude_log.lua (also a function of the library): several keys, each
with its own limit, all admitted or none charged.

KEYS: for each of the n user keys, its log, its ledger and its block
(3n keys). ARGV: n, then lim1..limn, win1..winn (us), cost1..costn, then
flags ('f' force: record every key whatever the answer, for shadow mode;
'k' under Redis Cluster, as in log_attempt.lua; 'r' reserve: each entry
recorded is a reservation, see below) and now (us; '': Redis TIME; both
left out when empty), then
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
peek says, and retry_after 0). When every key is admitted and the call
is neither forced nor a reservation, the reply is 3n integers instead, for
each key {remaining, recorded, next_us} as an admission of log_attempt.lua
answers: a reply of 24 numbers cost Redis more than the third key's read. ]]

local n = ARGV[1] + 0
local flags = ARGV[3 * n + 2] or ''
local force = string.find(flags, 'f', 1, true) ~= nil
local cluster = string.find(flags, 'k', 1, true) ~= nil
local now = clock(ARGV[3 * n + 3])
local reserve = string.find(flags, 'r', 1, true) ~= nil
local life = reserve and ARGV[3 * n + 4] + 0
local ks, all = {}, true
-- Most keys have neither a ledger nor a block: one EXISTS over all of them
-- answers for every key at once, and a key is asked alone only when some
-- key has one.
local aux = {}
for i = 1, n do aux[2 * i - 1] = KEYS[3 * i - 1]; aux[2 * i] = KEYS[3 * i] end
local any_aux = redis.call('EXISTS', unpack(aux)) > 0
for i = 1, n do
  if cluster then keep = KEYS[3 * i - 1]; bkeep = KEYS[3 * i] end
  local key, lk, bend = KEYS[3 * i - 2], nil, 0
  if any_aux then lk, bend = ledger_block(KEYS[3 * i - 1], KEYS[3 * i], key, now) end
  local lim, win, cost = ARGV[1 + i] + 0, ARGV[1 + n + i] + 0, ARGV[1 + 2 * n + i] + 0
  local base, r0, rb = trim(key, lk, now - win, true)
  local total, last_ts = newest(key, base)
  local rt, rlast = rb, nil
  if lk then rt, rlast = ledger_newest(lk, rb) end
  local used = total - base - (rt - rb)
  local nxt, v0, t0 = next_free(key, lk, r0, base, rb, used, win)
  if nxt and bend > nxt then nxt = bend end
  local ok = used + cost <= lim
  if not ok or bend > now then all = false end
  -- one constructor: the table is sized once for every field
  ks[i] = {key = key, lk = lk, bend = bend, lim = lim, win = win, cost = cost,
    base = base, r0 = r0, rb = rb, total = total, last_ts = last_ts,
    rlast = rlast, used = used, nxt = nxt, ok = ok, v0 = v0, t0 = t0}
end
local out = {}
-- Every key admitted, none blocked, not forced, no reservation (most
-- calls): for each key the three fields an admission of log_attempt.lua
-- answers, {remaining, recorded, next_us}; the rest follows from them.
local short = all and not force and not reserve
for i = 1, n do
  local s = ks[i]
  local key, lk, r0, base, rb, used, win = s.key, s.lk, s.r0, s.base, s.rb, s.used, s.win
  local r
  if cluster then keep = KEYS[3 * i - 1]; bkeep = KEYS[3 * i] end
  if short then
    local ts = record(key, lk, now, s.last_ts, s.total, base, r0, rb, s.cost, win)
    out[3 * i - 2], out[3 * i - 1] = s.lim - used - s.cost, ts
    out[3 * i] = s.nxt or math.max(ts + win, s.bend)
  elseif all or force then
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
      -- nothing was recorded: the first entry next_free read still stands
      if not s.ok then
        local free_at
        free_at, first = freeing_time(key, lk, r0, base, rb, used + s.cost - s.lim, s.v0, s.t0)
        retry = free_at + win - now
      elseif used > 0 then
        first = s.t0
      end
      r = blocked({0, rem, retry, reset, used, -1, 0}, s.bend, now)
      r[7] = r[3]
      if first then r[7] = math.min(first + win - now, r[3]) end
    end
    r[8] = s.nxt or math.max(now + win, s.bend)
  end
  if not short then
    for j = 1, 8 do out[8 * (i - 1) + j] = r[j] end
  end
end
return out
