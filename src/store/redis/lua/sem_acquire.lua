--[[ Concurrency slots (rl_acquire), a script on its own. KEYS[1] is the
key's holders: a sorted set whose members name the holders (a backend's
transaction, see lease.c) and whose scores are their leases' ends on the
Redis clock; KEYS[2] the key's wake-up list, which a release pushes one
token onto so that one waiter (BLPOP) tries again at once. A holder whose
lease ended is removed by the next script that looks at the key.

Acquire: ARGV holder, max, lease (us), now (us, or ''). Returns {acquired,
holders (with this one, if acquired), leases that had ended, wait_us (a
denial: until the first lease ends), already (1: this holder held a slot
already, whose lease is renewed)}. ]]

local function fmt(n) return string.format('%.0f', n) end
local key = KEYS[1]
local max, lease = tonumber(ARGV[2]), tonumber(ARGV[3])
local now
if ARGV[4] ~= '' then now = tonumber(ARGV[4]) else
  local t = redis.call('TIME'); now = tonumber(t[1]) * 1000000 + tonumber(t[2]) end
local ended = redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now))
local mine = redis.call('ZSCORE', key, ARGV[1])
local n = redis.call('ZCARD', key)
if not mine and n >= max then
  local first = redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')
  return {0, n, ended, tonumber(first[2]) - now, 0}
end
redis.call('ZADD', key, fmt(now + lease), ARGV[1])
if not mine then n = n + 1 end
local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', key, fmt(math.ceil((tonumber(last[2]) - now) / 1000) + 1))
return {1, n, ended, 0, mine and 1 or 0}
