--[[ sliding_counter, after prelude_base.lua, counter_args.lua and
counter_window.lua (also a function of the library): the current fixed
bucket's count c plus the previous bucket's count p weighted by the share
of the window that still overlaps it: estimate = p * (win - elapsed) / win
+ c. Its replies carry one more field, last: next_us (next_unit). ]]

local v = redis.call('HMGET', key, 's', 'c', 'p')
local s, c, p = v[1] and v[1] + 0, v[2] and v[2] + 0 or 0, v[3] and v[3] + 0 or 0
if not s then c, p = 0, 0
elseif s == start - win then p, c = c, 0
elseif s < start - win then p, c = 0, 0
elseif s > start then start = s end
-- c0, p0: the units stored; c and p add the live reservations made in
-- the current bucket and in the one before it
local c0, p0 = c, p
if rkey then c, p = c + held_in(start, math.huge), p + held_in(start - win, start - 1) end
local e = now - start
if e < 0 then e = 0 end
local est = p * (win - e) / win + c
local ok = est + cost <= lim
local retry = 0
if not ok then
  if c + cost <= lim and p > 0 then
    retry = math.ceil(win - (lim - c - cost) * win / p) - e
  else
    local cn = c
    if mode == '1' then cn = c + cost end
    local e2 = 0
    if cn > 0 and cost < lim then e2 = math.ceil(win - (lim - cost) * win / cn) end
    if cost >= lim then e2 = win end
    retry = (win - e) + e2
  end
  if retry < 1 then retry = 1 end
end
-- When one more unit is next available (the end of the effective window of
-- draft-ietf-httpapi-ratelimit-headers-11), had the caller spent all it has
-- left now: the estimate must fall by d, at p / win per us in this bucket,
-- then at (c + what is left) / win in the next. Not before a block ends.
local function next_unit(c_after, est_after)
  local avail = lim - est_after
  local r, d = 0, est_after - lim + 1
  if avail >= 0 then r = math.floor(avail); d = 1 - (avail - r) end
  local decay = p * (win - e) / win
  local t
  if p > 0 and d <= decay then t = now + math.ceil(d * win / p)
  elseif c_after + r > 0 then t = start + win + math.ceil((d - decay) * win / (c_after + r))
  else t = start + win end
  return math.max(t, bend)
end
local function answer(allowed, est_after, c_after)
  local rem = math.floor(lim - est_after)
  if rem < 0 or not allowed then rem = math.max(0, math.floor(lim - est_after)) end
  local reset = now
  if c_after > 0 then reset = start + 2 * win elseif p > 0 then reset = start + win end
  return {allowed and 1 or 0, rem, retry, reset, math.ceil(est_after), -1, next_unit(c_after, est_after)}
end
if mode == 'p' or ((not ok or bend > now) and mode ~= '1') then
  return blocked(answer(ok, est, c), bend, now)
end
local ttl = math.ceil((start + 2 * win - now) / 1000) + 1
-- in the bucket the key already counts, the units are added and the
-- expiry, set by the bucket's first call, stands (as in fixed_window)
if s == start and c0 > 0 then redis.call('HSET', key, 'c', c0 + cost)
else
  redis.call('HSET', key, 's', string.format('%d', start), 'c', c0 + cost, 'p', p0)
  redis.call('PEXPIRE', key, string.format('%d', ttl))
end
keep_block(ttl)
if ok and bend <= now then
  return {math.floor(lim - est - cost), start + 2 * win, math.ceil(est + cost),
          next_unit(c + cost, est + cost)}
end
if ok then return blocked(answer(true, est + cost, c + cost), bend, now) end
local r = answer(false, est + cost, c + cost)
r[2] = 0
return blocked(r, bend, now)
