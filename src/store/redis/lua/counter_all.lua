--[[ rl_attempt_all on a counting algorithm (fixed_window, sliding_counter,
token_bucket), after prelude_base.lua and, wrapped by scripts.c into the
local function one(KEYS, ARGV), that algorithm's own single-key body
(counter_args.lua and the rest, unchanged): several keys, each with its
own limit, all admitted or none charged.

KEYS: for each of the n user keys, its state, its block and its
reservations (3n keys; the reservations are read under Cluster only).
ARGV: n, then lim1..limn, win1..winn (us), cost1..costn, then flags ('f'
force: record every key whatever the answer, for shadow mode; 'k' under
Redis Cluster; 'r' reserve: record reservations, not units, see below)
and now (us; '': Redis TIME, read once here; both left out when
empty), then with 'r' the
reservations' life (us) and their id. Every key is first peeked at for
its cost, which writes nothing; only if every one would be admitted
(allowed 1, not blocked) is each attempted, with the same clock, so that
each key's reply is the very one rl_attempt would give it alone.
A reservation (keys of one hash slot of a call over several, see
store_redis_xslot.c) is a field of the key's reservations hash (see
counter_args.lua) that every script counting the key adds to what it
holds while it lives; counter_settle.lua confirms or cancels it. The
reply of a key reserved is then a peek for no cost after it, which counts
it. Returns 8n integers in log_all.lua's layout: for each key {allowed,
remaining, retry_after_us, reset_at_us, used, recorded (-1), stable_us
(0), next_us}, allowed 3 meaning room but not charged because another key
denied. ]]

local n = ARGV[1] + 0
local flags = ARGV[3 * n + 2] or ''
local force = string.find(flags, 'f', 1, true) ~= nil
local reserve = string.find(flags, 'r', 1, true) ~= nil
local k = ''
if string.find(flags, 'k', 1, true) then k = 'kv' end
-- one clock for every key, passed to each as the test clock is
local now = clock(ARGV[3 * n + 3])
local now_s = clock_s
local function call(i, mode, cost)
  return one({KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]},
             {ARGV[1 + i], ARGV[1 + n + i], cost or ARGV[1 + 2 * n + i], mode .. k, now_s})
end
local peeks, all = {}, true
if reserve or not force then
  for i = 1, n do
    peeks[i] = call(i, 'p')
    if peeks[i][1] ~= 1 then all = false end
  end
end
local out = {}
for i = 1, n do
  local r
  if reserve and (force or all) then
    local win, rk = ARGV[1 + n + i] + 0, KEYS[3 * i]
    local life = ARGV[3 * n + 4] + 0
    redis.call('HSET', rk, ARGV[3 * n + 5], string.format('%d:%d:%d', now + life,
               ARGV[1 + 2 * n + i] + 0, now - now % win))
    local want = math.ceil((life + 2 * win) / 1000) + 1
    if redis.call('PTTL', rk) < want then redis.call('PEXPIRE', rk, want) end
    r = call(i, 'p', '0')
    if peeks[i][1] ~= 1 then r[1], r[2], r[3] = peeks[i][1], 0, peeks[i][3] end
  elseif force or all then
    r = call(i, force and 'f' or '')
    -- the short form of an admission on a key not blocked
    if #r == 4 then r = {1, r[1], 0, r[2], r[3], -1, r[4]} end
  else
    r = peeks[i]
    if r[1] == 1 then r[1] = 3 end
  end
  for j = 1, 6 do out[8 * (i - 1) + j] = r[j] end
  out[8 * i - 1] = 0
  out[8 * i] = r[7]
end
return out
