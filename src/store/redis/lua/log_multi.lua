--[[ rl_attempt_multi, after prelude_base.lua and prelude_log.lua (also a
function of the library): KEYS[1] log, KEYS[2] ledger, KEYS[3] block; ARGV
n, lim1..limn, win1..winn (us), cost, now, mode ('0', '1' force, 'p' peek),
and 'k' under Redis Cluster. The sliding log of log_attempt.lua, with one
entry per admitted call, checked against every (lim, win): admitted only if
every window admits it, and then recorded once, so in all of them. Entries
are kept for the longest window. The reply describes the most constraining
window: the smallest remaining, the largest retry_after; its last field is
the deciding window's number (1..n): the first that denies, else the one
with the smallest remaining; then next_us, when the window whose remaining
the reply gives next frees a unit (next_free; win after the entry this
call wrote, or after now, when that window held nothing). ]]

local key, lk, bend = KEYS[1], ledger_block(KEYS[2], KEYS[3])
local n = ARGV[1] + 0
if ARGV[5 + 2 * n] == 'k' then keep = KEYS[2]; bkeep = KEYS[3] end
local cost = ARGV[2 + 2 * n] + 0
local now = clock(ARGV[3 + 2 * n])
local mode = ARGV[4 + 2 * n]
local maxwin = 0
for i = 1, n do maxwin = math.max(maxwin, ARGV[1 + n + i] + 0) end
local base, r0, rb = trim(key, lk, now - maxwin, mode ~= 'p')
local total, last_ts = newest(key, base)
local rt, rlast = rb, nil
if lk then rt, rlast = ledger_newest(lk, rb) end
local ok, rem, retry, used, wi = true, nil, 0, 0, 1
local nxt, nwin = nil, 0
for i = 1, n do
  local lim, win = ARGV[1 + i] + 0, ARGV[1 + n + i] + 0
  local bi, rbi = base, 0
  local o = redis.call('ZREVRANGEBYSCORE', key, now - win, '-inf', 'LIMIT', '0', '1')
  if o[1] then bi = o[1] + 0 end
  if lk then rbi = refunded_upto(lk, now - win) end
  local ui = total - bi - (rt - rbi)
  local ri = lim - ui - cost
  local den = ri < 0
  if den then
    local ri0 = redis.call('ZCOUNT', key, '-inf', now - win)
    retry = math.max(retry, freeing_time(key, lk, ri0, bi, rbi, ui + cost - lim) + win - now)
  end
  -- a peek reports the units left, not those left after a call
  if den or mode == 'p' then ri = math.max(lim - ui, 0) end
  local newmin = rem == nil or ri < rem
  if newmin then
    rem, used, nwin = ri, ui, win
    nxt = nil
    if ui > 0 then
      nxt = next_free(key, lk, redis.call('ZCOUNT', key, '-inf', now - win), bi, rbi, ui, win)
    end
  end
  -- the deciding window: the first that denies, else the tightest
  if ok and (den or newmin) then wi = i end
  if den then ok = false end
end
if mode == 'p' or ((not ok or bend > now) and mode ~= '1') then
  local reset = now
  if last_ts then
    local umax = total - base - (rt - rb)
    if lk and rlast == last_ts then
      if umax > 0 then
        local rm = redis.call('ZCOUNT', key, '-inf', now - maxwin)
        reset = last_live(key, lk, rm, base, rb, umax, last_ts, rlast) + maxwin
      end
    else
      reset = last_ts + maxwin
    end
  end
  return blocked({ok and 1 or 0, rem, retry, reset, used, -1, wi, math.max(nxt or now + nwin, bend)}, bend, now)
end
local ts = record(key, lk, now, last_ts, total, base, r0, rb, cost, maxwin)
nxt = math.max(nxt or ts + nwin, bend)
if ok then return blocked({1, rem, 0, ts + maxwin, used + cost, ts, wi, nxt}, bend, now) end
return blocked({0, 0, retry, ts + maxwin, used + cost, ts, wi, nxt}, bend, now)
