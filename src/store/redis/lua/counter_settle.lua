--[[ The second step of rl_attempt_all over several hash slots of a Redis
Cluster (store_redis_xslot.c) for a counting algorithm, after
prelude_base.lua: confirm or cancel the reservations counter_all.lua made
on one slot (see counter_args.lua for the reservations hash).

KEYS: for each key of the slot, its state and its reservations (2m keys).
ARGV: mode ('c' confirm, 'x' cancel), the algorithm ('f' fixed_window,
's' sliding_counter, 't' token_bucket), the reservations' id, now (us; '':
Redis TIME), then for each key its limit and its window (us).
Confirm removes the reservation and charges its units as an admission
made when the reservation was, so that every reader counts them as
before: for the fixed windows into the bucket it was made in (nowhere if
the key has moved past that bucket's life, where they no longer count
anyway), for token_bucket as tokens taken now (they did not refill while
reserved). It answers 0 when the reservation is gone or has ended (it
counted until then and no longer does). Cancel removes the reservation,
which gives its units back at once; it answers 1 when one was removed. A
reservation already confirmed is not undone by a cancel: its units stay
counted, as an admission's. Returns m integers, one per key, 0 or 1. ]]

local mode, algo, id = ARGV[1], ARGV[2], ARGV[3]
local now = clock(ARGV[4])
local out = {}
for i = 1, #KEYS / 2 do
  local key, rk = KEYS[2 * i - 1], KEYS[2 * i]
  local lim, win = ARGV[3 + 2 * i] + 0, ARGV[4 + 2 * i] + 0
  local v = redis.call('HGET', rk, id)
  local e, c, b
  if v then e, c, b = string.match(v, '^(%d+):(%d+):(%d+)$') end
  out[i] = 0
  if v then redis.call('HDEL', rk, id) end
  if e and e + 0 > now then
    out[i] = 1
    c, b = c + 0, b + 0
    if mode == 'c' and algo == 't' then
      local tat = (redis.call('GET', key) or 0) + 0
      if tat < now then tat = now end
      local new = tat + c * (win / lim)
      redis.call('SET', key, string.format('%.17g', new), 'PX',
                 string.format('%d', math.ceil((new - now) / 1000) + 1))
    elseif mode == 'c' then
      -- the life of the bucket's units: to its end (fixed_window), or to
      -- the end of the next bucket, which still weighs it (sliding_counter)
      local span = win
      if algo == 's' then span = 2 * win end
      local h = redis.call('HMGET', key, 's', algo == 's' and 'c' or 'n', 'p')
      local s = h[1] and h[1] + 0
      local ttl = string.format('%d', math.ceil((b + span - now) / 1000) + 1)
      if s == b then
        redis.call('HSET', key, algo == 's' and 'c' or 'n', h[2] + c)
      elseif algo == 's' and s == b + win then
        redis.call('HSET', key, 'p', (h[3] or 0) + c)
      elseif b + span > now and (not s or s < b) then
        local p = 0
        if algo == 's' and s == b - win then p = h[2] + 0 end
        if algo == 's' then
          redis.call('HSET', key, 's', string.format('%d', b), 'c', c, 'p', p)
        else
          redis.call('HSET', key, 's', string.format('%d', b), 'n', c)
        end
        redis.call('PEXPIRE', key, ttl)
      end
    end
  end
end
return out
