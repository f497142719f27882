--[[ fixed_window, after prelude_base.lua, counter_args.lua and
counter_window.lua (also a function of the library): windows aligned to
multiples of win since the Unix epoch. Every reply ends with next_us. ]]

local reset = start + win
-- when a unit next comes back: the window ends (or the key's block)
local nxt = math.max(reset, bend)
local v = redis.call('HMGET', key, 's', 'n')
local n = 0
if v[1] and v[1] + 0 == start then n = v[2] + 0 end
-- n0: the units stored; n adds the live reservations made in this window
local n0 = n
if rkey then n = n + held_in(start, math.huge) end
local ok = n + cost <= lim
if mode == 'p' or ((not ok or bend > now) and mode ~= '1') then
  local rem = lim - n
  if rem < 0 then rem = 0 end
  local retry = 0
  if not ok then retry = reset - now end
  if n == 0 then reset = now end
  return blocked({ok and 1 or 0, rem, retry, reset, n, -1, nxt}, bend, now)
end
local ttl = math.ceil((reset - now) / 1000) + 1
-- in the window the key already counts, only the count changes, and the
-- expiry, set by the window's first call to its end, stands (HSET, not
-- HINCRBY: the ACL of doc/installing.md has the one, not the other)
if n0 > 0 then redis.call('HSET', key, 'n', n0 + cost)
else
  redis.call('HSET', key, 's', string.format('%d', start), 'n', ARGV[3])
  redis.call('PEXPIRE', key, string.format('%d', ttl))
end
keep_block(ttl)
if ok and bend <= now then return {lim - n - cost, reset, n + cost, nxt} end
if ok then return blocked({1, lim - n - cost, 0, reset, n + cost, -1, nxt}, bend, now) end
return blocked({0, 0, reset - now, reset, n + cost, -1, nxt}, bend, now)
