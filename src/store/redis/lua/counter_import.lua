--[[ The counting algorithms' admissions carried back (outage.c), after
prelude_base.lua: KEYS[1] the algorithm's state, KEYS[2] block, KEYS[3] its
imports; ARGV now (us, or ''), 'k' under Redis Cluster (keep the block
key), the algorithm ('fw', 'sc' or 'tb') and the entries as for
log_import.lua. Each entry not recorded before is added to the state as the
algorithm would have counted it, had Redis decided it at its time (now -
age):
  fixed_window:    its units count if it fell in the current window;
  sliding_counter: in the current bucket, or in the previous one;
  token_bucket:    its reach is how far the fallback store's own tat
                   stood ahead of it once it was admitted (the
                   admissions before it included), so where that tat
                   stood, s + reach, is the furthest among one
                   database's new entries (the source: the id less its
                   time). What the source's admissions still owe the
                   bucket is that end less now, less what an earlier
                   carry of the source already added: the end it
                   reached, kept in the imports set as the member
                   '>' .. source until it passes. The rest is added to
                   the tat: more than GCRA would hold had one store
                   decided them all, never less. (A source's rows can
                   come in several scripts, and each script's furthest
                   end includes the rows of the scripts before it:
                   added whole, those were counted again, 64 units of
                   one key carried in two scripts counted 128.)
An entry that no longer counts is "outside its window". Returns as
log_import.lua. ]]

local key, ik = KEYS[1], KEYS[3]
if ARGV[2] == 'k' then bkeep = KEYS[2] end
local now, algo = clock(ARGV[1]), ARGV[3]
local done, dup, old, until_, debt = 0, 0, 0, 0, 0
local ends = {}
for id, age, cost, win, reach in string.gmatch(ARGV[4], '([^,;]+),(%d+),(%d+),(%d+),%d+,(%d+);') do
  local s = now - tonumber(age)
  cost, win, reach = tonumber(cost), tonumber(win), tonumber(reach)
  local start = now - (now % win)
  local counts, exp = false, 0
  if algo == 'fw' then counts, exp = s >= start, start + win
  elseif algo == 'sc' then counts, exp = s >= start - win, start + 2 * win
  else counts, exp = s + reach > now, s + reach end
  if not counts then old = old + 1
  elseif redis.call('ZSCORE', ik, id) then dup = dup + 1
  else
    if algo == 'fw' then
      local v = redis.call('HMGET', key, 's', 'n')
      local n = 0
      if v[1] and tonumber(v[1]) == start then n = tonumber(v[2]) end
      redis.call('HSET', key, 's', start, 'n', n + cost)
    elseif algo == 'sc' then
      local v = redis.call('HMGET', key, 's', 'c', 'p')
      local st, c, p = tonumber(v[1]), tonumber(v[2]) or 0, tonumber(v[3]) or 0
      if not st then c, p = 0, 0
      elseif st == start - win then p, c = c, 0
      elseif st < start - win then p, c = 0, 0
      elseif st > start then start = st end
      if s >= start then c = c + cost else p = p + cost end
      redis.call('HSET', key, 's', start, 'c', c, 'p', p)
      exp = start + 2 * win
    else
      local src = string.match(id, '^(.*)%.[^.]*$') or id
      if s + reach > (ends[src] or 0) then ends[src] = s + reach end
    end
    -- kept while a copy sent again could still count
    local keep_id = s + win
    if algo == 'sc' then keep_id = s + 2 * win elseif algo == 'tb' then keep_id = s + reach end
    redis.call('ZADD', ik, keep_id, id)
    if exp > until_ then until_ = exp end
    if keep_id > until_ then until_ = keep_id end
    done = done + 1
  end
end
for src, e in pairs(ends) do
  local from = tonumber(redis.call('ZSCORE', ik, '>' .. src) or '0')
  if from < now then from = now end
  if e > from then
    debt = debt + (e - from)
    redis.call('ZADD', ik, e, '>' .. src)
  end
end
if debt > 0 then
  local tat = tonumber(redis.call('GET', key) or '0')
  if tat < now then tat = now end
  tat = tat + debt
  redis.call('SET', key, string.format('%.17g', tat))
  if tat > until_ then until_ = tat end
end
if done > 0 then
  redis.call('ZREMRANGEBYSCORE', ik, '-inf', now)
  local ttl = math.ceil((until_ - now) / 1000) + 1
  for _, k in ipairs({key, ik}) do
    local t = redis.call('PTTL', k)
    if t == -1 or (t >= 0 and t < ttl) then redis.call('PEXPIRE', k, ttl) end
  end
  keep_block(ttl)
end
return {done, dup, old}
