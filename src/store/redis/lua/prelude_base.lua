--[[ What every script shares: the clock, numbers printed exactly, and the
block key. Each call of a script runs its prelude again, making every
function it defines anew, so a script takes only the part it uses. Every
script but the concurrency slots' (sem_*.lua) starts with this file. ]]

local function fmt(n) return string.format('%.0f', n) end
-- Under Redis Cluster the ledger is kept next to the log (keep: its key,
-- else false), so that a limiter's keys are all there or all absent, as a
-- slot being migrated requires of a command that names several keys.
local keep = false
-- The clock, and (clock_s) the same time as the string Redis reads, so
-- that a score of now is passed without printing a number.
local clock_s
local function clock(arg)
  if arg and arg ~= '' then clock_s = arg; return arg + 0 end
  local t = redis.call('TIME')
  if #t[2] == 6 then clock_s = t[1] .. t[2]
  else clock_s = t[1] .. string.rep('0', 6 - #t[2]) .. t[2] end
  return t[1] * 1000000 + t[2]
end
-- Under Cluster the block key is kept too (bkeep: its key, else false),
-- holding 0 until a block is set, for as long as any structure of its
-- user key lives (keep_block).
local bkeep = false
-- The end of the key's block (0: never blocked; it has ended once the
-- clock passes it).
local function block_end(bk)
  return (redis.call('GET', bk) or 0) + 0
end
-- Under Cluster: the block key lives at least ttl ms more.
local function keep_block(ttl)
  if not bkeep then return end
  local p = redis.call('PTTL', bkeep)
  if p == -2 then redis.call('SET', bkeep, '0', 'PX', ttl)
  elseif p >= 0 and p < tonumber(ttl) then redis.call('PEXPIRE', bkeep, ttl) end
end
-- The reply r of a call on a key blocked until bend, if that is after now:
-- denied by the block (2), nothing left, no retry before the block ends.
local function blocked(r, bend, now)
  if bend > now then r[1], r[2], r[3] = 2, 0, math.max(r[3], bend - now) end
  return r
end
