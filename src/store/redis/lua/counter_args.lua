--[[ The head of the counting algorithms' scripts, after prelude_base.lua.

The counting algorithms keep O(1) state per key in a hash (or a string),
never a log. Each script serves attempt, forced attempt and peek: KEYS[1]
state, KEYS[2] block; ARGV lim, win (us), cost, and only when needed flags
and now (as for the log): flags holds 'f' (record even if over the limit or
blocked: shadow mode), 'p' (peek: decide for the given cost, write nothing),
'k' under Redis Cluster (keep the block key, see bkeep) and 'v' under
Redis Cluster (KEYS[3] holds the key's reservations, see below); without
flags, an attempt. Same reply as the log scripts; recorded is always -1
(these algorithms keep no entry a refund could remove). An admission on a
key not blocked answers {remaining, reset_at, used} only (allowed 1,
retry_after 0, recorded -1). ]]

local key = KEYS[1]
local lim, win, cost = ARGV[1] + 0, ARGV[2] + 0, ARGV[3] + 0
local flags, mode = ARGV[4], '0'
local rkey = false
if flags and flags ~= '' then
  if string.find(flags, 'p', 1, true) then mode = 'p'
  elseif string.find(flags, 'f', 1, true) then mode = '1' end
  if string.find(flags, 'k', 1, true) then bkeep = KEYS[2] end
  if string.find(flags, 'v', 1, true) then rkey = KEYS[3] end
end
local now = clock(ARGV[5])
local bend = block_end(KEYS[2])
-- The live reservations of rl_attempt_all over several slots of a Cluster
-- (counter_all.lua's reserve mode, counter_settle.lua): a hash next to the
-- state, field the reservation's id, value 'end:cost:bucket' (bucket: the
-- start of the fixed window it was made in). Each counts as used until it
-- is confirmed, cancelled or its end passes; an ended one is dropped here
-- (by a call that writes; a peek only leaves it out).
-- Outside Cluster (no 'v') neither the list nor the function is made: a
-- table and a closure for every call would cost the hot path.
local held_in
if rkey then
  local held = {}
  local h = redis.call('HGETALL', rkey)
  for i = 1, #h, 2 do
    local e, c, b = string.match(h[i + 1], '^(%d+):(%d+):(%d+)$')
    if e and e + 0 > now then held[#held + 1] = {c + 0, b + 0}
    elseif mode ~= 'p' then redis.call('HDEL', rkey, h[i]) end
  end
  -- the units the live reservations made in the buckets from b0 to b1 hold
  held_in = function(b0, b1)
    local u = 0
    for _, r in ipairs(held) do
      if r[2] >= b0 and r[2] <= b1 then u = u + r[1] end
    end
    return u
  end
end
