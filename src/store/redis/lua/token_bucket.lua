--[[ token_bucket, after prelude_base.lua and counter_args.lua (also a
function of the library), as GCRA: the key holds the theoretical arrival
time (tat) in microseconds. Each unit moves it win / lim later; a call
passes if the new tat is at most win ahead of now, so lim units can come in
one burst and are then refilled evenly over win. The 1e-3 us slack absorbs
the rounding of win / lim in doubles. ]]

local t = win / lim
-- When the next whole unit comes back, with the bucket's tat at tt: its
-- tokens (win - (tt - now)) / t reach the next integer (or the key's block
-- ends). Every reply ends with it.
local function next_token(tt)
  local have = math.floor((win - (tt - now)) / t + 1e-9)
  if have < 0 then have = 0 end
  return math.max(math.ceil(tt - win + (have + 1) * t), now + 1, bend)
end
local tat = (redis.call('GET', key) or 0) + 0
if tat < now then tat = now end
-- tat0: the state stored; tat adds the live reservations, which take
-- their tokens when confirmed and do not refill meanwhile
local tat0 = tat
if rkey then tat = tat + held_in(-math.huge, math.huge) * t end
local new = tat + cost * t
local ok = new - now <= win + 1e-3
local used = math.ceil((tat - now) / t - 1e-9)
if mode == 'p' or ((not ok or bend > now) and mode ~= '1') then
  local rem = math.floor((win - (tat - now)) / t + 1e-9)
  if rem < 0 then rem = 0 end
  local retry = 0
  if not ok then retry = math.max(1, math.ceil(new - win - now - 1e-3)) end
  return blocked({ok and 1 or 0, rem, retry, math.ceil(tat), used, -1, next_token(tat)}, bend, now)
end
local new0 = tat0 + cost * t
local ttl = string.format('%d', math.ceil((new0 - now) / 1000) + 1)
redis.call('SET', key, string.format('%.17g', new0), 'PX', ttl)
keep_block(ttl)
if ok then
  local rem = math.floor((win - (new - now)) / t + 1e-9)
  if rem < 0 then rem = 0 end
  if bend <= now then return {rem, math.ceil(new), used + cost, next_token(new)} end
  return blocked({1, rem, 0, math.ceil(new), used + cost, -1, next_token(new)}, bend, now)
end
local retry = math.max(1, math.ceil(new - win - now - 1e-3))
return blocked({0, 0, retry, math.ceil(new), used + cost, -1, next_token(new)}, bend, now)
