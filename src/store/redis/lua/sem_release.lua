--[[ Concurrency slots (see sem_acquire.lua), a script on its own. Release:
KEYS[1] holders, KEYS[2] wake-up list; ARGV holder. Returns 1 if the holder
held a slot (then one waiter is woken), 0 if not (released already, or its
lease ended). Idempotent, so that a release sent twice (a lost connection)
releases once. ]]

if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('LPUSH', KEYS[2], '1')
redis.call('LTRIM', KEYS[2], '0', '63')
redis.call('PEXPIRE', KEYS[2], '10000')
return 1
