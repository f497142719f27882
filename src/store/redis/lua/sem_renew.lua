--[[ Concurrency slots (see sem_acquire.lua), a script on its own. Renew:
KEYS[1] holders; ARGV holder, lease (us), now (us, or ''). Returns 1 if the
holder still held its slot (its lease now ends lease from now), 0 if it had
lost it (the lease ended, or it was released). ]]

local function fmt(n) return string.format('%.0f', n) end
local key = KEYS[1]
local now
if ARGV[3] ~= '' then now = tonumber(ARGV[3]) else
  local t = redis.call('TIME'); now = tonumber(t[1]) * 1000000 + tonumber(t[2]) end
local s = redis.call('ZSCORE', key, ARGV[1])
if not s or tonumber(s) <= now then return 0 end
redis.call('ZADD', key, fmt(now + tonumber(ARGV[2])), ARGV[1])
local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', key, fmt(math.ceil((tonumber(last[2]) - now) / 1000) + 1))
return 1
