--[[ Concurrency slots (see sem_acquire.lua), a script on its own. Holders:
KEYS[1] holders; ARGV now (us, or ''). The holders whose lease has not
ended. Reads only. ]]

local now
if ARGV[1] ~= '' then now = tonumber(ARGV[1]) else
  local t = redis.call('TIME'); now = tonumber(t[1]) * 1000000 + tonumber(t[2]) end
return redis.call('ZCOUNT', KEYS[1], '(' .. string.format('%.0f', now), '+inf')
