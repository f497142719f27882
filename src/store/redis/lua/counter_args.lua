--[[ The head of the counting algorithms' scripts, after prelude_base.lua.

The counting algorithms keep O(1) state per key in a hash (or a string),
never a log. Each script serves attempt, forced attempt and peek: KEYS[1]
state, KEYS[2] block; ARGV lim, win (us), cost, and only when needed flags
and now (as for the log): flags holds 'f' (record even if over the limit or
blocked: shadow mode), 'p' (peek: decide for the given cost, write nothing)
and 'k' under Redis Cluster (keep the block key, see bkeep); without flags,
an attempt. Same reply as the log scripts; recorded is always -1 (these
algorithms keep no entry a refund could remove). An admission on a key not
blocked answers {remaining, reset_at, used} only (allowed 1, retry_after 0,
recorded -1). ]]

local key = KEYS[1]
local lim, win, cost = ARGV[1] + 0, ARGV[2] + 0, ARGV[3] + 0
local flags, mode = ARGV[4], '0'
if flags and flags ~= '' then
  if string.find(flags, 'p', 1, true) then mode = 'p'
  elseif string.find(flags, 'f', 1, true) then mode = '1' end
  if string.find(flags, 'k', 1, true) then bkeep = KEYS[2] end
end
local now = clock(ARGV[5])
local bend = block_end(KEYS[2])
