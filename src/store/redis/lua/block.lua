--[[ rl_block and rl_unblock, after prelude_base.lua: KEYS[1] the block key;
ARGV mode ('b' block, 'u' unblock), duration (us), now (us, or ''), and 'k'
under Redis Cluster. Block: the block ends at now + duration, or later if
it already does (a block extends, never shortens), and the key expires
then, or later if it already does; returns the end. Unblock: lifts the
block (under Cluster the key stays, holding 0, as long as it would have);
returns 1 if a block was in force, else 0. ]]

local bk, mode = KEYS[1], ARGV[1]
local now = clock(ARGV[3])
local e = block_end(bk)
local p = redis.call('PTTL', bk)
if mode == 'u' then
  if ARGV[4] == 'k' and p > 0 then redis.call('SET', bk, '0', 'PX', p)
  else redis.call('DEL', bk) end
  if e > now then return 1 end
  return 0
end
local want = now + tonumber(ARGV[2])
if e < want then e = want end
local ttl = math.ceil((e - now) / 1000) + 1
if p > ttl then ttl = p end
redis.call('SET', bk, e, 'PX', ttl)
return e
