--[[ The sliding log's attempt, after prelude_base.lua and prelude_log.lua
(also a function of the library, see library_build in src/scripts.c).

KEYS[1] log, KEYS[2] ledger, KEYS[3] block; ARGV lim, win (us), cost, and
only when needed flags and now: flags holds 'f' (force: record the call
even if it is over the limit or blocked, for shadow mode) and 'k' under
Redis Cluster (keep the ledger and the block key, see keep); now is the
time in us (absent or '': Redis TIME). Each argument costs Redis about a
thousand instructions, so most calls send the first three alone.
Returns {allowed, remaining, retry_after_us, reset_at_us, used, recorded,
stable_us, next_us}, where recorded is the score of the entry written, or
-1, stable_us (on a denial) is how long the same call would get the same
answer if nothing else wrote to the key: until the oldest entry in the
window leaves it, or retry_after, whichever comes first, and next_us is
when the window next frees a unit (next_free; on a blocked key not before
the block ends; with nothing in the window, win after now or after the
entry this call wrote). A forced call over the
limit reports allowed = 0 with the retry_after it would have had; a call
on a blocked key, allowed = 2 (see blocked). A call admitted on a key not
blocked returns only {remaining, recorded, next_us}: the rest follows
(allowed 1, retry_after 0, reset_at recorded + win, used lim - remaining,
stable 0), and a reply of eight numbers costs Redis about 3 % more of the
call.

A local batch (flag 'b', src/switch/local_batch.c; never with 'f'): ARGV[6]
ahead (us), ARGV[7] least and ARGV[8] the asking server's name, KEYS[4]
the key's waiting mark; cost is the most units asked for. The call
takes min(cost, what the window has left) units, but never fewer than
least (the cost of the call that asks), and records them as one entry
scored ahead after now: the latest time at which any of them may be used,
so that every window that can hold one of their uses counts them all. With
less than least left it is denied as a call of least units would be. An
admission answers {remaining, recorded, next_us, taken}.
The waiting mark keeps one server from winning batch after batch while
another's are denied: a reserve denied for want of room (not for a block)
names its server in the mark, unless another server's name is there, for
its retry_after and two aheads; while it names another server, a reserve
takes least units and no more (what the call alone would take), and the
named server's next admission clears it. Only sizes change, never where an
entry is scored: the exactness argument does not depend on them. ]]

local key = KEYS[1]
local lim, win, cost = ARGV[1] + 0, ARGV[2] + 0, ARGV[3] + 0
local flags, force, ahead = ARGV[4], false, nil
if flags and flags ~= '' then
  force = string.find(flags, 'f', 1, true) ~= nil
  if string.find(flags, 'b', 1, true) then ahead = ARGV[6] + 0 end
  if string.find(flags, 'k', 1, true) then keep = KEYS[2]; bkeep = KEYS[3] end
end
local now = clock(ARGV[5])
local lk, bend = ledger_block(KEYS[2], KEYS[3], key, now)
local base, r0, rb = trim(key, lk, now - win, true)
local total, last_ts = newest(key, base)
local rt, rlast = rb, nil
if lk then rt, rlast = ledger_newest(lk, rb) end
local used = total - base - (rt - rb)
local nxt, v0, t0 = next_free(key, lk, r0, base, rb, used, win)
if nxt and bend > nxt then nxt = bend end
local me, waiter = nil, nil
if ahead then
  local least = ARGV[7] + 0
  me = ARGV[8]
  waiter = redis.call('GET', KEYS[4])
  if bend > now or lim - used < least or (waiter and waiter ~= me) then cost = least
  elseif lim - used < cost then cost = lim - used end
end
local ok = used + cost <= lim
local retry, rem = 0, lim - used - cost
if not ok or bend > now then
  rem = lim - used
  if rem < 0 then rem = 0 end
  local first = nil
  if not ok then
    local free_at
    free_at, first = freeing_time(key, lk, r0, base, rb, used + cost - lim, v0, t0)
    retry = free_at + win - now
    if ahead and bend <= now and (not waiter or waiter == me) then
      redis.call('SET', KEYS[4], me, 'PX', math.max(1, math.ceil((retry + 2 * ahead) / 1000)))
    end
  elseif used > 0 then
    first = t0
  end
  if not force then
    local reset = now
    if used > 0 then reset = last_live(key, lk, r0, base, rb, used, last_ts, rlast) + win end
    local r = blocked({0, rem, retry, reset, used, -1, 0}, bend, now)
    r[7] = r[3]
    if first then r[7] = math.min(first + win - now, r[3]) end
    r[8] = nxt or math.max(now + win, bend)
    return r
  end
  rem = 0
end
local ts = record(key, lk, now, last_ts, total, base, r0, rb, cost, win, ahead)
if waiter and waiter == me then redis.call('DEL', KEYS[4]) end
-- nothing was in the window: this call's entry is the oldest
if not nxt then nxt = math.max(ts + win, bend) end
-- admitted (most calls): the three fields the others follow from
if ok and bend <= now then
  if ahead then return {rem, ts, nxt, cost} end
  return {rem, ts, nxt}
end
local r = blocked({ok and 1 or 0, rem, retry, ts + win, used + cost, ts, 0}, bend, now)
r[8] = nxt
return r
