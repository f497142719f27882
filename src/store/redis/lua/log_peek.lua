--[[ The sliding log's peek, after prelude_base.lua and prelude_log.lua (also
a function of the library). KEYS[1] log, KEYS[2] ledger, KEYS[3] block; ARGV
lim, win (us), now (us, or ''). Reads only, but for giving back the
entries of reservations that have ended (ledger_block). Returns the fields
an attempt of cost 1 would, without recording, but stable_us: {allowed,
remaining, retry_after_us, reset_at_us, used, -1, next_us}. ]]

local key = KEYS[1]
local lim, win = ARGV[1] + 0, ARGV[2] + 0
local now = clock(ARGV[3])
local lk, bend = ledger_block(KEYS[2], KEYS[3], key, now)
local r = (function()
local cutoff = now - win
local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
if not newest[1] or newest[2] == '-inf' or newest[2] + 0 <= cutoff then
  return {1, lim, 0, now, 0, -1, now + win}
end
local base = 0
local old = redis.call('ZREVRANGEBYSCORE', key, cutoff, '-inf', 'LIMIT', '0', '1')
if old[1] then base = old[1] + 0 end
local rb, rt, rlast = 0, 0, nil
if lk then
  rb = refunded_upto(lk, cutoff)
  rt, rlast = ledger_newest(lk, rb)
end
local used = newest[1] - base - (rt - rb)
if used <= 0 then return {1, lim, 0, now, 0, -1, now + win} end
local r0 = redis.call('ZCOUNT', key, '-inf', cutoff)
local reset = last_live(key, lk, r0, base, rb, used, newest[2] + 0, rlast) + win
local nxt, v0, t0 = next_free(key, lk, r0, base, rb, used, win)
if used + 1 <= lim then return {1, lim - used, 0, reset, used, -1, nxt} end
local rem = lim - used
if rem < 0 then rem = 0 end
return {0, rem, freeing_time(key, lk, r0, base, rb, used + 1 - lim, v0, t0) + win - now, reset, used, -1, nxt}
end)()
if bend > r[7] then r[7] = bend end
return blocked(r, bend, now)
