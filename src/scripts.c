/*-------------------------------------------------------------------------
 *
 * scripts.c
 *		The Lua sources slidewin runs in Redis, and EVALSHA with the NOSCRIPT
 *		fallback.
 *
 * Every admission decision is one script, so that reading the log, deciding
 * and writing happen atomically in Redis, against one clock (Redis TIME).
 *
 * Sliding log layout (one sorted set per key):
 *   score  = admission time in microseconds, strictly increasing per key
 *            (a call in the same microsecond as the newest entry is recorded
 *            1 us later, which can only make it expire later);
 *   member = the key's running total of admitted units, including this entry.
 * One member per admitted call, whatever its cost. Because the running total
 * strictly increases, members are unique without any random suffix, and the
 * units inside the window are simply newest.member - base, where base is the
 * member of the newest entry that has left the window. When entries expire,
 * every one of them but the newest is removed, and that one stays first in
 * the log as the base; so every call costs O(log n) in the entries of the
 * key, never O(n), and a busy key, one entry leaving per call, is trimmed by
 * one write. (Earlier builds moved the base to a member scored -inf, which
 * took a second write; the scripts read both forms, and the next trim of an
 * old log drops the -inf member.)
 *
 * Refunds (lua_log_refund) never rewrite the log: a second sorted set per
 * key, the ledger, holds one member per entry given back, scored like that
 * entry, whose member is the ledger's own running total of units given
 * back, trimmed and renumbered together with the log. Every script that
 * counts units subtracts the ledger's units over the same range of scores.
 * Most keys never have a ledger, and pay one EXISTS for it.
 *
 * Blocks (rl_block): one string key per user key, holding the block's end in
 * microseconds on the clock of the script that set it, and expiring then.
 * Every outcome script names it as its last key: a call on a key whose block
 * has not ended is denied, reported with allowed = 2 (denied by a block),
 * remaining 0 and a retry_after that runs at least to the block's end, and
 * records nothing (shadow mode records it, as it records any denial). The
 * logs ask for it in the EXISTS they already make for the ledger, which
 * costs the same with two keys; the counting algorithms add one GET. A key
 * never blocked pays nothing more.
 *
 * Numbers in Redis Lua are doubles. redis.call prints a number argument
 * itself, exactly for every integer up to 2^53 (with %.17g in Redis 6.2
 * and 7.0, in the shortest exact form from 7.2 on, and in Valkey), which
 * covers every number slidewin passes. Printing a double costs Redis 7.0
 * about 2,000 instructions, so the two numbers every admission passes (the
 * new running total and the expiry) go as string.format('%d'), an integer
 * printed for about a third of that. Lua's own tostring, used when a number
 * is concatenated into a string, prints %.14g and would round a
 * microsecond timestamp: fmt() is kept for that.
 *
 * A string becomes a number by arithmetic (s + 0), not by tonumber(s):
 * Lua 5.1's tonumber converts its argument twice (lua_isnumber, then
 * lua_tonumber), each a strtod of up to 16 digits; on the admitting path
 * that was a tenth of what the attempt cost Redis.
 *
 * This file knows nothing of PostgreSQL types or policy.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/cryptohash.h"
#include "common/sha1.h"
#include "lib/stringinfo.h"
#include "utils/memutils.h"

#include "scripts.h"

/*
 * What every script shares: the clock, numbers printed exactly, and the
 * block key. Each call of a script runs its prelude again, making every
 * function it defines anew, so a script takes only the part it uses.
 */
#define LUA_PRELUDE_BASE \
"local function fmt(n) return string.format('%.0f', n) end\n" \
"-- Under Redis Cluster the ledger is kept next to the log (keep: its key,\n" \
"-- else false), so that a limiter's keys are all there or all absent, as a\n" \
"-- slot being migrated requires of a command that names several keys.\n" \
"local keep = false\n" \
"-- The clock, and (clock_s) the same time as the string Redis reads, so\n" \
"-- that a score of now is passed without printing a number.\n" \
"local clock_s\n" \
"local function clock(arg)\n" \
"  if arg and arg ~= '' then clock_s = arg; return arg + 0 end\n" \
"  local t = redis.call('TIME')\n" \
"  if #t[2] == 6 then clock_s = t[1] .. t[2]\n" \
"  else clock_s = t[1] .. string.rep('0', 6 - #t[2]) .. t[2] end\n" \
"  return t[1] * 1000000 + t[2]\n" \
"end\n" \
"-- Under Cluster the block key is kept too (bkeep: its key, else false),\n" \
"-- holding 0 until a block is set, for as long as any structure of its\n" \
"-- user key lives (keep_block).\n" \
"local bkeep = false\n" \
"-- The end of the key's block (0: never blocked; it has ended once the\n" \
"-- clock passes it).\n" \
"local function block_end(bk)\n" \
"  return (redis.call('GET', bk) or 0) + 0\n" \
"end\n" \
"-- Under Cluster: the block key lives at least ttl ms more.\n" \
"local function keep_block(ttl)\n" \
"  if not bkeep then return end\n" \
"  local p = redis.call('PTTL', bkeep)\n" \
"  if p == -2 then redis.call('SET', bkeep, '0', 'PX', ttl)\n" \
"  elseif p >= 0 and p < tonumber(ttl) then redis.call('PEXPIRE', bkeep, ttl) end\n" \
"end\n" \
"-- The reply r of a call on a key blocked until bend, if that is after now:\n" \
"-- denied by the block (2), nothing left, no retry before the block ends.\n" \
"local function blocked(r, bend, now)\n" \
"  if bend > now then r[1], r[2], r[3] = 2, 0, math.max(r[3], bend - now) end\n" \
"  return r\n" \
"end\n"

/* What the logs add: the ledger of refunds, the trim, the search. */
#define LUA_PRELUDE_LOG \
"-- The ledger key when it exists (most keys never had a refund), and the\n" \
"-- end of the key's block: one EXISTS for both, as most keys have neither.\n" \
"local function ledger_block(lkey, bk)\n" \
"  local n = redis.call('EXISTS', lkey, bk)\n" \
"  if n == 0 then return nil, 0 end\n" \
"  local b = redis.call('GET', bk)\n" \
"  if not b then return lkey, 0 end\n" \
"  if n == 2 then return lkey, tonumber(b) end\n" \
"  return nil, tonumber(b)\n" \
"end\n" \
"-- Units the ledger gave back for entries scored at most s (O(log n)).\n" \
"local function refunded_upto(lk, s)\n" \
"  local r = redis.call('ZREVRANGEBYSCORE', lk, s, '-inf', 'LIMIT', '0', '1')\n" \
"  if r[1] then return tonumber(r[1]) end\n" \
"  return 0\n" \
"end\n" \
"-- The ledger's newest running total and the score it refunds (nil if none).\n" \
"local function ledger_newest(lk, rb)\n" \
"  local n = redis.call('ZRANGE', lk, -1, -1, 'WITHSCORES')\n" \
"  if n[1] and n[2] ~= '-inf' then return tonumber(n[1]), tonumber(n[2]) end\n" \
"  return rb, nil\n" \
"end\n" \
"-- The entry at a rank: the live units up to it, net of refunds, and its score.\n" \
"local function net_at(key, lk, rank, base, rb)\n" \
"  local e = redis.call('ZRANGE', key, rank, rank, 'WITHSCORES')\n" \
"  local n, t = e[1] - base, e[2] + 0\n" \
"  if lk then n = n - (refunded_upto(lk, t) - rb) end\n" \
"  return n, t\n" \
"end\n" \
"-- Time at which the live entries from rank r0 on free `need` units, and\n" \
"-- the time of the first of them (when the count may next change). Net\n" \
"-- units never decrease with rank, so a binary search finds it: O(log n),\n" \
"-- or O(log^2 n) when the key has a ledger.\n" \
"local function freeing_time(key, lk, r0, base, rb, need)\n" \
"  local v, first = net_at(key, lk, r0, base, rb)\n" \
"  if v >= need then return first, first end\n" \
"  local lo, hi = r0 + 1, redis.call('ZCARD', key) - 1\n" \
"  while lo < hi do\n" \
"    local mid = math.floor((lo + hi) / 2)\n" \
"    if net_at(key, lk, mid, base, rb) >= need then hi = mid else lo = mid + 1 end\n" \
"  end\n" \
"  local e = redis.call('ZRANGE', key, lo, lo, 'WITHSCORES')\n" \
"  return tonumber(e[2]), first\n" \
"end\n" \
"-- When the window holds none of the `used` units: the newest entry not\n" \
"-- given back leaves it. Only a refund of the newest entry needs a search.\n" \
"local function last_live(key, lk, r0, base, rb, used, last_ts, rlast)\n" \
"  if not lk or rlast ~= last_ts then return last_ts end\n" \
"  return (freeing_time(key, lk, r0, base, rb, used))\n" \
"end\n" \
"-- The log up to cutoff: its base (running total before the window), the\n" \
"-- rank of the first live entry, and the ledger's base. The base is the\n" \
"-- newest entry that has left the window (an entry scored -inf, as earlier\n" \
"-- builds wrote the base, is among them). When writing, every entry that has\n" \
"-- left but that one goes, and it stays first in the log: one write (not\n" \
"-- two) trims a busy key, one entry leaving per call. The entries that have\n" \
"-- left are read by score, members only (O(log n)): Redis 7.0 prints every\n" \
"-- score it returns with %.17g, which cost more than the rest of the read.\n" \
"-- The ledger keeps its base in a member scored -inf.\n" \
"local function trim(key, lk, cutoff, write)\n" \
"  local c = string.format('%d', cutoff)\n" \
"  local x = redis.call('ZRANGE', key, c, '-inf', 'BYSCORE', 'REV', 'LIMIT', '0', '8')\n" \
"  local nx = #x\n" \
"  local rb = 0\n" \
"  if lk then rb = refunded_upto(lk, cutoff) end\n" \
"  if nx == 0 then return 0, 0, rb end\n" \
"  if nx > 1 and write then\n" \
"    if nx < 8 then redis.call('ZREM', key, unpack(x, 2))\n" \
"    else\n" \
"      -- eight or more have left: all before the newest of them, by its score\n" \
"      local o = redis.call('ZRANGE', key, c, '-inf', 'BYSCORE', 'REV', 'LIMIT', '0', '1', 'WITHSCORES')\n" \
"      redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. o[2])\n" \
"    end\n" \
"    if lk then\n" \
"      redis.call('ZREMRANGEBYSCORE', lk, '-inf', cutoff)\n" \
"      if rb > 0 or keep then redis.call('ZADD', lk, '-inf', rb) end\n" \
"    end\n" \
"  end\n" \
"  return x[1] + 0, 1, rb\n" \
"end\n" \
"-- The newest running total and its time (nil if the log holds no entry).\n" \
"local function newest(key, base)\n" \
"  local n = redis.call('ZRANGE', key, '0', '0', 'REV', 'WITHSCORES')\n" \
"  if n[1] and n[2] ~= '-inf' then return n[1] + 0, n[2] + 0 end\n" \
"  return base, nil\n" \
"end\n" \
"-- Record cost units now (or 1 us after the newest entry); returns the score.\n" \
"-- The key expires when its newest entry leaves the window, on the clock\n" \
"-- that scored it, even if that entry is ahead of now.\n" \
"local function record(key, lk, now, last_ts, total, base, r0, rb, cost, win)\n" \
"  local ts = now\n" \
"  if last_ts and ts <= last_ts then ts = last_ts + 1 end\n" \
"  if total == base then\n" \
"    if base > 0 then redis.call('DEL', key) end\n" \
"    if lk then redis.call('DEL', lk); lk = nil end\n" \
"    total = 0\n" \
"  elseif total + cost > 4503599627370496 then\n" \
"    -- keep running totals exact as doubles: renumber the live entries\n" \
"    -- (the ledger's totals never exceed the log's, and are renumbered too)\n" \
"    local all = redis.call('ZRANGE', key, r0, -1, 'WITHSCORES')\n" \
"    redis.call('DEL', key)\n" \
"    for i = 1, #all, 2 do\n" \
"      redis.call('ZADD', key, all[i + 1], tonumber(all[i]) - base)\n" \
"    end\n" \
"    total = total - base\n" \
"    if lk then\n" \
"      local refs = redis.call('ZRANGEBYSCORE', lk, '(-inf', '+inf', 'WITHSCORES')\n" \
"      redis.call('DEL', lk)\n" \
"      for i = 1, #refs, 2 do\n" \
"        redis.call('ZADD', lk, refs[i + 1], tonumber(refs[i]) - rb)\n" \
"      end\n" \
"    end\n" \
"  end\n" \
"  if ts == now then redis.call('ZADD', key, clock_s, string.format('%d', total + cost))\n" \
"  else redis.call('ZADD', key, ts, total + cost) end\n" \
"  if keep and not lk then redis.call('ZADD', keep, '-inf', '0'); lk = keep end\n" \
"  local ttl = string.format('%d', math.ceil((ts + win - now) / 1000) + 1)\n" \
"  redis.call('PEXPIRE', key, ttl)\n" \
"  if lk then redis.call('PEXPIRE', lk, ttl) end\n" \
"  keep_block(ttl)\n" \
"  return ts\n" \
"end\n"

#define LUA_PRELUDE LUA_PRELUDE_BASE LUA_PRELUDE_LOG

/*
 * KEYS[1] log, KEYS[2] ledger, KEYS[3] block; ARGV lim, win (us), cost, and
 * only when needed flags and now: flags holds 'f' (force: record the call
 * even if it is over the limit or blocked, for shadow mode) and 'k' under
 * Redis Cluster (keep the ledger and the block key, see keep); now is the
 * time in us (absent or '': Redis TIME). Each argument costs Redis about a
 * thousand instructions, so most calls send the first three alone.
 * Returns {allowed, remaining, retry_after_us, reset_at_us, used, recorded,
 * stable_us}, where recorded is the score of the entry written, or -1, and
 * stable_us (on a denial) is how long the same call would get the same answer
 * if nothing else wrote to the key: until the oldest entry in the window
 * leaves it, or retry_after, whichever comes first. A forced call over the
 * limit reports allowed = 0 with the retry_after it would have had; a call
 * on a blocked key, allowed = 2 (see blocked). A call admitted on a key not
 * blocked returns only {remaining, recorded}: the rest follows (allowed 1,
 * retry_after 0, reset_at recorded + win, used lim - remaining, stable 0),
 * and a reply of seven numbers costs Redis about 3 % more of the call.
 */
#define LUA_LOG_ATTEMPT_BODY \
"local key, lk, bend = KEYS[1], ledger_block(KEYS[2], KEYS[3])\n" \
"local lim, win, cost = ARGV[1] + 0, ARGV[2] + 0, ARGV[3] + 0\n" \
"local flags, force = ARGV[4], false\n" \
"if flags and flags ~= '' then\n" \
"  force = string.find(flags, 'f', 1, true) ~= nil\n" \
"  if string.find(flags, 'k', 1, true) then keep = KEYS[2]; bkeep = KEYS[3] end\n" \
"end\n" \
"local now = clock(ARGV[5])\n" \
"local base, r0, rb = trim(key, lk, now - win, true)\n" \
"local total, last_ts = newest(key, base)\n" \
"local rt, rlast = rb, nil\n" \
"if lk then rt, rlast = ledger_newest(lk, rb) end\n" \
"local used = total - base - (rt - rb)\n" \
"local ok = used + cost <= lim\n" \
"local retry, rem = 0, lim - used - cost\n" \
"if not ok or bend > now then\n" \
"  rem = lim - used\n" \
"  if rem < 0 then rem = 0 end\n" \
"  local first = nil\n" \
"  if not ok then\n" \
"    local free_at\n" \
"    free_at, first = freeing_time(key, lk, r0, base, rb, used + cost - lim)\n" \
"    retry = free_at + win - now\n" \
"  elseif used > 0 then\n" \
"    first = select(2, net_at(key, lk, r0, base, rb))\n" \
"  end\n" \
"  if not force then\n" \
"    local reset = now\n" \
"    if used > 0 then reset = last_live(key, lk, r0, base, rb, used, last_ts, rlast) + win end\n" \
"    local r = blocked({0, rem, retry, reset, used, -1, 0}, bend, now)\n" \
"    r[7] = r[3]\n" \
"    if first then r[7] = math.min(first + win - now, r[3]) end\n" \
"    return r\n" \
"  end\n" \
"  rem = 0\n" \
"end\n" \
"local ts = record(key, lk, now, last_ts, total, base, r0, rb, cost, win)\n" \
"-- admitted (most calls): the two fields the others follow from\n" \
"if ok and bend <= now then return {rem, ts} end\n" \
"return blocked({ok and 1 or 0, rem, retry, ts + win, used + cost, ts, 0}, bend, now)\n"

static const char lua_log_attempt[] = LUA_PRELUDE LUA_LOG_ATTEMPT_BODY;

/*
 * KEYS[1] log, KEYS[2] ledger; ARGV ts (the score of an entry this backend
 * recorded), cost, win (us), now (us, or ''). Gives the entry's units back by
 * adding it to the key's ledger: a sorted set whose scores are the refunded
 * entries' scores and whose members are the ledger's own running total of
 * refunded units. The log is left as it is, so the units in a window are
 * (log newest - log base) - (ledger newest - ledger base), and a refund costs
 * O(log n), plus O(k) for the k refunds already in the ledger scored after
 * this one (their totals move up by cost; refunds sent in score order
 * append, k = 0). An entry that has left the window, is gone (reset, or the
 * key expired), is not the one recorded (cost differs), or was given back
 * already has nothing to give back: a refund sent twice gives back once.
 * Returns 1 if units were given back, 0 if there was nothing to give back.
 */
#define LUA_LOG_REFUND_BODY \
"if ts <= now - win then return 0 end\n" \
"local e = redis.call('ZRANGEBYSCORE', key, tsa, tsa)\n" \
"if not e[1] then return 0 end\n" \
"local p = redis.call('ZREVRANGEBYSCORE', key, '(' .. tsa, '-inf', 'LIMIT', '0', '1')\n" \
"local prev = 0\n" \
"if p[1] then prev = tonumber(p[1]) end\n" \
"if tonumber(e[1]) - prev ~= cost then return 0 end\n" \
"if redis.call('ZCOUNT', lk, tsa, tsa) > 0 then return 0 end\n" \
"local r = refunded_upto(lk, ts)\n" \
"-- later refunds move up by cost, newest first, so that no moved total\n" \
"-- ever meets one not yet moved\n" \
"local later = redis.call('ZRANGEBYSCORE', lk, '(' .. tsa, '+inf', 'WITHSCORES')\n" \
"for i = #later - 1, 1, -2 do\n" \
"  redis.call('ZREM', lk, later[i])\n" \
"  redis.call('ZADD', lk, later[i + 1], tonumber(later[i]) + cost)\n" \
"end\n" \
"redis.call('ZADD', lk, tsa, r + cost)\n" \
"local ttl = redis.call('PTTL', key)\n" \
"if ttl > 0 then redis.call('PEXPIRE', lk, ttl) end\n" \
"return 1\n"

static const char lua_log_refund[] = LUA_PRELUDE
"local key, lk = KEYS[1], KEYS[2]\n"
"local tsa = ARGV[1]\n"
"local ts, cost, win = tonumber(tsa), tonumber(ARGV[2]), tonumber(ARGV[3])\n"
"local now = clock(ARGV[4])\n"
LUA_LOG_REFUND_BODY;

/*
 * The same refund for an entry the fallback store admitted and a carry
 * imported (lua_log_import): KEYS[3] the imports, ARGV[5] the name the
 * entry was imported under. Its score is found from the import's
 * (score + win); a name not among the imports (never carried, or its
 * window over) has nothing to give back. Returns as lua_log_refund.
 */
static const char lua_log_refund_imported[] = LUA_PRELUDE
"local key, lk = KEYS[1], KEYS[2]\n"
"local sc = redis.call('ZSCORE', KEYS[3], ARGV[5])\n"
"if not sc then return 0 end\n"
"local tsa = fmt(sc - ARGV[3])\n"
"local ts, cost, win = tonumber(tsa), tonumber(ARGV[2]), tonumber(ARGV[3])\n"
"local now = clock(ARGV[4])\n"
LUA_LOG_REFUND_BODY;

/*
 * KEYS[1] log, KEYS[2] ledger, KEYS[3] block; ARGV lim, win (us), now (us,
 * or ''). Reads only. Returns the same fields as an attempt of cost 1 would,
 * without recording.
 */
#define LUA_LOG_PEEK_BODY \
"local key, lk, bend = KEYS[1], ledger_block(KEYS[2], KEYS[3])\n" \
"local lim, win = ARGV[1] + 0, ARGV[2] + 0\n" \
"local now = clock(ARGV[3])\n" \
"local r = (function()\n" \
"local cutoff = now - win\n" \
"local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')\n" \
"if not newest[1] or newest[2] == '-inf' or newest[2] + 0 <= cutoff then\n" \
"  return {1, lim, 0, now, 0, -1}\n" \
"end\n" \
"local base = 0\n" \
"local old = redis.call('ZREVRANGEBYSCORE', key, cutoff, '-inf', 'LIMIT', '0', '1')\n" \
"if old[1] then base = old[1] + 0 end\n" \
"local rb, rt, rlast = 0, 0, nil\n" \
"if lk then\n" \
"  rb = refunded_upto(lk, cutoff)\n" \
"  rt, rlast = ledger_newest(lk, rb)\n" \
"end\n" \
"local used = newest[1] - base - (rt - rb)\n" \
"if used <= 0 then return {1, lim, 0, now, 0, -1} end\n" \
"local r0 = redis.call('ZCOUNT', key, '-inf', cutoff)\n" \
"local reset = last_live(key, lk, r0, base, rb, used, newest[2] + 0, rlast) + win\n" \
"if used + 1 <= lim then return {1, lim - used, 0, reset, used, -1} end\n" \
"local rem = lim - used\n" \
"if rem < 0 then rem = 0 end\n" \
"return {0, rem, freeing_time(key, lk, r0, base, rb, used + 1 - lim) + win - now, reset, used, -1}\n" \
"end)()\n" \
"return blocked(r, bend, now)\n"

static const char lua_log_peek[] = LUA_PRELUDE LUA_LOG_PEEK_BODY;

/*
 * The counting algorithms keep O(1) state per key in a hash (or a string),
 * never a log. Each script serves attempt, forced attempt and peek:
 * KEYS[1] state, KEYS[2] block; ARGV lim, win (us), cost, and only when
 * needed flags and now (as for the log): flags holds 'f' (record even if over
 * the limit or blocked: shadow mode), 'p' (peek: decide for the given cost,
 * write nothing) and 'k' under Redis Cluster (keep the block key, see bkeep);
 * without flags, an attempt. Same reply as the log
 * scripts; recorded is always -1 (these algorithms keep no entry a refund
 * could remove). An admission on a key not blocked answers {remaining,
 * reset_at, used} only (allowed 1, retry_after 0, recorded -1).
 */
#define LUA_COUNTER_ARGS \
"local key = KEYS[1]\n" \
"local lim, win, cost = ARGV[1] + 0, ARGV[2] + 0, ARGV[3] + 0\n" \
"local flags, mode = ARGV[4], '0'\n" \
"if flags and flags ~= '' then\n" \
"  if string.find(flags, 'p', 1, true) then mode = 'p'\n" \
"  elseif string.find(flags, 'f', 1, true) then mode = '1' end\n" \
"  if string.find(flags, 'k', 1, true) then bkeep = KEYS[2] end\n" \
"end\n" \
"local now = clock(ARGV[5])\n" \
"local bend = block_end(KEYS[2])\n"

/* ... and the window's start, for the two that count in fixed windows */
#define LUA_COUNTER_HEAD LUA_COUNTER_ARGS \
"local start = now - (now % win)\n"

/* fixed_window: windows aligned to multiples of win since the Unix epoch. */
#define LUA_FIXED_WINDOW_BODY \
LUA_COUNTER_HEAD \
"local reset = start + win\n" \
"local v = redis.call('HMGET', key, 's', 'n')\n" \
"local n = 0\n" \
"if v[1] and v[1] + 0 == start then n = v[2] + 0 end\n" \
"local ok = n + cost <= lim\n" \
"if mode == 'p' or ((not ok or bend > now) and mode ~= '1') then\n" \
"  local rem = lim - n\n" \
"  if rem < 0 then rem = 0 end\n" \
"  local retry = 0\n" \
"  if not ok then retry = reset - now end\n" \
"  if n == 0 then reset = now end\n" \
"  return blocked({ok and 1 or 0, rem, retry, reset, n, -1}, bend, now)\n" \
"end\n" \
"local ttl = math.ceil((reset - now) / 1000) + 1\n" \
"-- in the window the key already counts, only the count changes, and the\n" \
"-- expiry, set by the window's first call to its end, stands (HSET, not\n" \
"-- HINCRBY: the ACL of doc/installing.md has the one, not the other)\n" \
"if n > 0 then redis.call('HSET', key, 'n', n + cost)\n" \
"else\n" \
"  redis.call('HSET', key, 's', string.format('%d', start), 'n', ARGV[3])\n" \
"  redis.call('PEXPIRE', key, string.format('%d', ttl))\n" \
"end\n" \
"keep_block(ttl)\n" \
"if ok and bend <= now then return {lim - n - cost, reset, n + cost} end\n" \
"if ok then return blocked({1, lim - n - cost, 0, reset, n + cost, -1}, bend, now) end\n" \
"return blocked({0, 0, reset - now, reset, n + cost, -1}, bend, now)\n"

static const char lua_fixed_window[] = LUA_PRELUDE_BASE LUA_FIXED_WINDOW_BODY;

/*
 * sliding_counter: the current fixed bucket's count c plus the previous
 * bucket's count p weighted by the share of the window that still overlaps
 * it: estimate = p * (win - elapsed) / win + c.
 */
#define LUA_SLIDING_COUNTER_BODY \
LUA_COUNTER_HEAD \
"local v = redis.call('HMGET', key, 's', 'c', 'p')\n" \
"local s, c, p = v[1] and v[1] + 0, v[2] and v[2] + 0 or 0, v[3] and v[3] + 0 or 0\n" \
"if not s then c, p = 0, 0\n" \
"elseif s == start - win then p, c = c, 0\n" \
"elseif s < start - win then p, c = 0, 0\n" \
"elseif s > start then start = s end\n" \
"local e = now - start\n" \
"if e < 0 then e = 0 end\n" \
"local est = p * (win - e) / win + c\n" \
"local ok = est + cost <= lim\n" \
"local retry = 0\n" \
"if not ok then\n" \
"  if c + cost <= lim and p > 0 then\n" \
"    retry = math.ceil(win - (lim - c - cost) * win / p) - e\n" \
"  else\n" \
"    local cn = c\n" \
"    if mode == '1' then cn = c + cost end\n" \
"    local e2 = 0\n" \
"    if cn > 0 and cost < lim then e2 = math.ceil(win - (lim - cost) * win / cn) end\n" \
"    if cost >= lim then e2 = win end\n" \
"    retry = (win - e) + e2\n" \
"  end\n" \
"  if retry < 1 then retry = 1 end\n" \
"end\n" \
"local function answer(allowed, est_after, c_after)\n" \
"  local rem = math.floor(lim - est_after)\n" \
"  if rem < 0 or not allowed then rem = math.max(0, math.floor(lim - est_after)) end\n" \
"  local reset = now\n" \
"  if c_after > 0 then reset = start + 2 * win elseif p > 0 then reset = start + win end\n" \
"  return {allowed and 1 or 0, rem, retry, reset, math.ceil(est_after), -1}\n" \
"end\n" \
"if mode == 'p' or ((not ok or bend > now) and mode ~= '1') then\n" \
"  return blocked(answer(ok, est, c), bend, now)\n" \
"end\n" \
"local ttl = math.ceil((start + 2 * win - now) / 1000) + 1\n" \
"-- in the bucket the key already counts, the units are added and the\n" \
"-- expiry, set by the bucket's first call, stands (as in fixed_window)\n" \
"if s == start and c > 0 then redis.call('HSET', key, 'c', c + cost)\n" \
"else\n" \
"  redis.call('HSET', key, 's', string.format('%d', start), 'c', c + cost, 'p', p)\n" \
"  redis.call('PEXPIRE', key, string.format('%d', ttl))\n" \
"end\n" \
"keep_block(ttl)\n" \
"if ok and bend <= now then\n" \
"  return {math.floor(lim - est - cost), start + 2 * win, math.ceil(est + cost)}\n" \
"end\n" \
"if ok then return blocked(answer(true, est + cost, c + cost), bend, now) end\n" \
"local r = answer(false, est + cost, c + cost)\n" \
"r[2] = 0\n" \
"return blocked(r, bend, now)\n"

static const char lua_sliding_counter[] = LUA_PRELUDE_BASE LUA_SLIDING_COUNTER_BODY;

/*
 * token_bucket, as GCRA: the key holds the theoretical arrival time (tat)
 * in microseconds. Each unit moves it win / lim later; a call passes if
 * the new tat is at most win ahead of now, so lim units can come in one
 * burst and are then refilled evenly over win. The 1e-3 us slack absorbs
 * the rounding of win / lim in doubles.
 */
#define LUA_TOKEN_BUCKET_BODY LUA_COUNTER_ARGS \
"local t = win / lim\n" \
"local tat = (redis.call('GET', key) or 0) + 0\n" \
"if tat < now then tat = now end\n" \
"local new = tat + cost * t\n" \
"local ok = new - now <= win + 1e-3\n" \
"local used = math.ceil((tat - now) / t - 1e-9)\n" \
"if mode == 'p' or ((not ok or bend > now) and mode ~= '1') then\n" \
"  local rem = math.floor((win - (tat - now)) / t + 1e-9)\n" \
"  if rem < 0 then rem = 0 end\n" \
"  local retry = 0\n" \
"  if not ok then retry = math.max(1, math.ceil(new - win - now - 1e-3)) end\n" \
"  return blocked({ok and 1 or 0, rem, retry, math.ceil(tat), used, -1}, bend, now)\n" \
"end\n" \
"local ttl = string.format('%d', math.ceil((new - now) / 1000) + 1)\n" \
"redis.call('SET', key, string.format('%.17g', new), 'PX', ttl)\n" \
"keep_block(ttl)\n" \
"if ok then\n" \
"  local rem = math.floor((win - (new - now)) / t + 1e-9)\n" \
"  if rem < 0 then rem = 0 end\n" \
"  if bend <= now then return {rem, math.ceil(new), used + cost} end\n" \
"  return blocked({1, rem, 0, math.ceil(new), used + cost, -1}, bend, now)\n" \
"end\n" \
"return blocked({0, 0, math.max(1, math.ceil(new - win - now - 1e-3)), math.ceil(new), used + cost, -1}, bend, now)\n"

static const char lua_token_bucket[] = LUA_PRELUDE_BASE LUA_TOKEN_BUCKET_BODY;

/*
 * rl_attempt_multi: KEYS[1] log, KEYS[2] ledger, KEYS[3] block; ARGV n,
 * lim1..limn, win1..winn (us), cost, now, mode ('0', '1' force, 'p' peek),
 * and 'k' under Redis Cluster. The sliding log above, with one
 * entry per admitted call, checked against every (lim, win): admitted only
 * if every window admits it, and then recorded once, so in all of them.
 * Entries are kept for the longest window. The reply describes the most
 * constraining window: the smallest remaining, the largest retry_after; its
 * last field is the deciding window's number (1..n): the first that denies,
 * else the one with the smallest remaining.
 */
#define LUA_LOG_MULTI_BODY \
"local key, lk, bend = KEYS[1], ledger_block(KEYS[2], KEYS[3])\n" \
"local n = ARGV[1] + 0\n" \
"if ARGV[5 + 2 * n] == 'k' then keep = KEYS[2]; bkeep = KEYS[3] end\n" \
"local cost = ARGV[2 + 2 * n] + 0\n" \
"local now = clock(ARGV[3 + 2 * n])\n" \
"local mode = ARGV[4 + 2 * n]\n" \
"local maxwin = 0\n" \
"for i = 1, n do maxwin = math.max(maxwin, ARGV[1 + n + i] + 0) end\n" \
"local base, r0, rb = trim(key, lk, now - maxwin, mode ~= 'p')\n" \
"local total, last_ts = newest(key, base)\n" \
"local rt, rlast = rb, nil\n" \
"if lk then rt, rlast = ledger_newest(lk, rb) end\n" \
"local ok, rem, retry, used, wi = true, nil, 0, 0, 1\n" \
"for i = 1, n do\n" \
"  local lim, win = ARGV[1 + i] + 0, ARGV[1 + n + i] + 0\n" \
"  local bi, rbi = base, 0\n" \
"  local o = redis.call('ZREVRANGEBYSCORE', key, now - win, '-inf', 'LIMIT', '0', '1')\n" \
"  if o[1] then bi = o[1] + 0 end\n" \
"  if lk then rbi = refunded_upto(lk, now - win) end\n" \
"  local ui = total - bi - (rt - rbi)\n" \
"  local ri = lim - ui - cost\n" \
"  local den = ri < 0\n" \
"  if den then\n" \
"    local ri0 = redis.call('ZCOUNT', key, '-inf', now - win)\n" \
"    retry = math.max(retry, freeing_time(key, lk, ri0, bi, rbi, ui + cost - lim) + win - now)\n" \
"  end\n" \
"  -- a peek reports the units left, not those left after a call\n" \
"  if den or mode == 'p' then ri = math.max(lim - ui, 0) end\n" \
"  local newmin = rem == nil or ri < rem\n" \
"  if newmin then rem, used = ri, ui end\n" \
"  -- the deciding window: the first that denies, else the tightest\n" \
"  if ok and (den or newmin) then wi = i end\n" \
"  if den then ok = false end\n" \
"end\n" \
"if mode == 'p' or ((not ok or bend > now) and mode ~= '1') then\n" \
"  local reset = now\n" \
"  if last_ts then\n" \
"    local umax = total - base - (rt - rb)\n" \
"    if lk and rlast == last_ts then\n" \
"      if umax > 0 then\n" \
"        local rm = redis.call('ZCOUNT', key, '-inf', now - maxwin)\n" \
"        reset = last_live(key, lk, rm, base, rb, umax, last_ts, rlast) + maxwin\n" \
"      end\n" \
"    else\n" \
"      reset = last_ts + maxwin\n" \
"    end\n" \
"  end\n" \
"  return blocked({ok and 1 or 0, rem, retry, reset, used, -1, wi}, bend, now)\n" \
"end\n" \
"local ts = record(key, lk, now, last_ts, total, base, r0, rb, cost, maxwin)\n" \
"if ok then return blocked({1, rem, 0, ts + maxwin, used + cost, ts, wi}, bend, now) end\n" \
"return blocked({0, 0, retry, ts + maxwin, used + cost, ts, wi}, bend, now)\n"

static const char lua_log_multi[] = LUA_PRELUDE LUA_LOG_MULTI_BODY;

/*
 * Carrying the fallback store's admissions back (outage.c): KEYS[1] log,
 * KEYS[2] ledger, KEYS[3] block, KEYS[4] the log's imports; ARGV now (us,
 * or ''), 'k' under Redis Cluster (keep the ledger and the block key), and
 * the entries, "id,age,cost,win,lim,reach;" each: a name no other
 * admission anywhere has (the server, database, algorithm and time that
 * admitted it), how long ago it was admitted (us, on the clock of the
 * server that admitted it, so that no clock but Redis's places it), its
 * units, the window and limit it was admitted under, and how long after
 * its time it still counts (see lua_counter_import). Each entry still inside its window at Redis's now - age and not
 * imported before is recorded at that score (or the next free microsecond
 * after it, which can only make it expire later), and every newer entry's
 * running total moves up by its cost, newest first, so that no moved total
 * meets one not yet moved: O(k log n) for the k entries newer than it,
 * once, when an outage ends. The imports set holds the names recorded,
 * scored by when their entry leaves its window, so a batch sent twice (a
 * lost reply, a crash before the fallback store forgot it, a rolled-back
 * transaction) is recorded once. The ledger is left as it is: refunds name
 * scores, and no score moves. Returns {recorded, already recorded,
 * outside their window}.
 */
static const char lua_log_import[] = LUA_PRELUDE_BASE
"local key, lk, ik = KEYS[1], KEYS[2], KEYS[4]\n"
"if ARGV[2] == 'k' then keep = KEYS[2]; bkeep = KEYS[3] end\n"
"local now = clock(ARGV[1])\n"
"local done, dup, old, until_ = 0, 0, 0, 0\n"
"for id, age, cost, win in string.gmatch(ARGV[3], '([^,;]+),(%d+),(%d+),(%d+),%d+,%d+;') do\n"
"  local s = now - tonumber(age)\n"
"  cost, win = tonumber(cost), tonumber(win)\n"
"  if s <= now - win then old = old + 1\n"
"  elseif redis.call('ZSCORE', ik, id) then dup = dup + 1\n"
"  else\n"
"    while redis.call('ZCOUNT', key, s, s) > 0 do s = s + 1 end\n"
"    local p = redis.call('ZREVRANGEBYSCORE', key, '(' .. fmt(s), '-inf', 'LIMIT', '0', '1')\n"
"    local prev = 0\n"
"    if p[1] then prev = tonumber(p[1]) end\n"
"    local later = redis.call('ZRANGEBYSCORE', key, '(' .. fmt(s), '+inf', 'WITHSCORES')\n"
"    for j = #later - 1, 1, -2 do\n"
"      redis.call('ZREM', key, later[j])\n"
"      redis.call('ZADD', key, later[j + 1], tonumber(later[j]) + cost)\n"
"    end\n"
"    redis.call('ZADD', key, s, prev + cost)\n"
"    redis.call('ZADD', ik, s + win, id)\n"
"    if s + win > until_ then until_ = s + win end\n"
"    done = done + 1\n"
"  end\n"
"end\n"
"if done > 0 then\n"
"  redis.call('ZREMRANGEBYSCORE', ik, '-inf', now)\n"
"  local ttl = math.ceil((until_ - now) / 1000) + 1\n"
"  for _, k in ipairs({key, lk, ik}) do\n"
"    local t = redis.call('PTTL', k)\n"
"    if t == -2 and k == lk and keep then redis.call('ZADD', lk, '-inf', '0'); t = 0 end\n"
"    if t >= 0 and t < ttl then redis.call('PEXPIRE', k, ttl) end\n"
"  end\n"
"  keep_block(ttl)\n"
"end\n"
"return {done, dup, old}\n";

/*
 * The counting algorithms' admissions carried back (outage.c): KEYS[1] the
 * algorithm's state, KEYS[2] block, KEYS[3] its imports; ARGV now (us, or
 * ''), 'k' under Redis Cluster (keep the block key), the algorithm ('fw',
 * 'sc' or 'tb') and the entries as for lua_log_import. Each entry not
 * recorded before is added to the state as the algorithm would have counted
 * it, had Redis decided it at its time (now - age):
 *   fixed_window:    its units count if it fell in the current window;
 *   sliding_counter: in the current bucket, or in the previous one;
 *   token_bucket:    its reach is how far the fallback store's own tat
 *                    stood ahead of it once it was admitted (the
 *                    admissions before it included), so what the fallback
 *                    store's admissions still owe the bucket is the
 *                    largest s + reach - now among the new ones; that is
 *                    added to the tat: more than GCRA would hold had one
 *                    store decided them all, never less.
 * An entry that no longer counts is "outside its window". Returns as
 * lua_log_import.
 */
static const char lua_counter_import[] = LUA_PRELUDE_BASE
"local key, ik = KEYS[1], KEYS[3]\n"
"if ARGV[2] == 'k' then bkeep = KEYS[2] end\n"
"local now, algo = clock(ARGV[1]), ARGV[3]\n"
"local done, dup, old, until_, debt = 0, 0, 0, 0, 0\n"
"for id, age, cost, win, reach in string.gmatch(ARGV[4], '([^,;]+),(%d+),(%d+),(%d+),%d+,(%d+);') do\n"
"  local s = now - tonumber(age)\n"
"  cost, win, reach = tonumber(cost), tonumber(win), tonumber(reach)\n"
"  local start = now - (now % win)\n"
"  local counts, exp = false, 0\n"
"  if algo == 'fw' then counts, exp = s >= start, start + win\n"
"  elseif algo == 'sc' then counts, exp = s >= start - win, start + 2 * win\n"
"  else counts, exp = s + reach > now, s + reach end\n"
"  if not counts then old = old + 1\n"
"  elseif redis.call('ZSCORE', ik, id) then dup = dup + 1\n"
"  else\n"
"    if algo == 'fw' then\n"
"      local v = redis.call('HMGET', key, 's', 'n')\n"
"      local n = 0\n"
"      if v[1] and tonumber(v[1]) == start then n = tonumber(v[2]) end\n"
"      redis.call('HSET', key, 's', start, 'n', n + cost)\n"
"    elseif algo == 'sc' then\n"
"      local v = redis.call('HMGET', key, 's', 'c', 'p')\n"
"      local st, c, p = tonumber(v[1]), tonumber(v[2]) or 0, tonumber(v[3]) or 0\n"
"      if not st then c, p = 0, 0\n"
"      elseif st == start - win then p, c = c, 0\n"
"      elseif st < start - win then p, c = 0, 0\n"
"      elseif st > start then start = st end\n"
"      if s >= start then c = c + cost else p = p + cost end\n"
"      redis.call('HSET', key, 's', start, 'c', c, 'p', p)\n"
"      exp = start + 2 * win\n"
"    elseif s + reach - now > debt then debt = s + reach - now end\n"
"    -- kept while a copy sent again could still count\n"
"    local keep_id = s + win\n"
"    if algo == 'sc' then keep_id = s + 2 * win elseif algo == 'tb' then keep_id = s + reach end\n"
"    redis.call('ZADD', ik, keep_id, id)\n"
"    if exp > until_ then until_ = exp end\n"
"    if keep_id > until_ then until_ = keep_id end\n"
"    done = done + 1\n"
"  end\n"
"end\n"
"if debt > 0 then\n"
"  local tat = tonumber(redis.call('GET', key) or '0')\n"
"  if tat < now then tat = now end\n"
"  tat = tat + debt\n"
"  redis.call('SET', key, string.format('%.17g', tat))\n"
"  if tat > until_ then until_ = tat end\n"
"end\n"
"if done > 0 then\n"
"  redis.call('ZREMRANGEBYSCORE', ik, '-inf', now)\n"
"  local ttl = math.ceil((until_ - now) / 1000) + 1\n"
"  for _, k in ipairs({key, ik}) do\n"
"    local t = redis.call('PTTL', k)\n"
"    if t == -1 or (t >= 0 and t < ttl) then redis.call('PEXPIRE', k, ttl) end\n"
"  end\n"
"  keep_block(ttl)\n"
"end\n"
"return {done, dup, old}\n";

/*
 * rl_block and rl_unblock: KEYS[1] the block key; ARGV mode ('b' block, 'u'
 * unblock), duration (us), now (us, or ''), and 'k' under Redis Cluster.
 * Block: the block ends at now + duration, or later if it already does (a
 * block extends, never shortens), and the key expires then, or later if it
 * already does; returns the end. Unblock: lifts the block (under Cluster the
 * key stays, holding 0, as long as it would have); returns 1 if a block was
 * in force, else 0.
 */
static const char lua_block[] = LUA_PRELUDE_BASE
"local bk, mode = KEYS[1], ARGV[1]\n"
"local now = clock(ARGV[3])\n"
"local e = block_end(bk)\n"
"local p = redis.call('PTTL', bk)\n"
"if mode == 'u' then\n"
"  if ARGV[4] == 'k' and p > 0 then redis.call('SET', bk, '0', 'PX', p)\n"
"  else redis.call('DEL', bk) end\n"
"  if e > now then return 1 end\n"
"  return 0\n"
"end\n"
"local want = now + tonumber(ARGV[2])\n"
"if e < want then e = want end\n"
"local ttl = math.ceil((e - now) / 1000) + 1\n"
"if p > ttl then ttl = p end\n"
"redis.call('SET', bk, e, 'PX', ttl)\n"
"return e\n";

/*
 * Concurrency slots (rl_acquire). KEYS[1] is the key's holders: a sorted
 * set whose members name the holders (a backend's transaction, see
 * lease.c) and whose scores are their leases' ends on the Redis clock;
 * KEYS[2] the key's wake-up list, which a release pushes one token onto so
 * that one waiter (BLPOP) tries again at once. A holder whose lease ended
 * is removed by the next script that looks at the key.
 *
 * Acquire: ARGV holder, max, lease (us), now (us, or ''). Returns {acquired,
 * holders (with this one, if acquired), leases that had ended, wait_us (a
 * denial: until the first lease ends), already (1: this holder held a slot
 * already, whose lease is renewed)}.
 */
static const char lua_sem_acquire[] =
"local function fmt(n) return string.format('%.0f', n) end\n"
"local key = KEYS[1]\n"
"local max, lease = tonumber(ARGV[2]), tonumber(ARGV[3])\n"
"local now\n"
"if ARGV[4] ~= '' then now = tonumber(ARGV[4]) else\n"
"  local t = redis.call('TIME'); now = tonumber(t[1]) * 1000000 + tonumber(t[2]) end\n"
"local ended = redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now))\n"
"local mine = redis.call('ZSCORE', key, ARGV[1])\n"
"local n = redis.call('ZCARD', key)\n"
"if not mine and n >= max then\n"
"  local first = redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')\n"
"  return {0, n, ended, tonumber(first[2]) - now, 0}\n"
"end\n"
"redis.call('ZADD', key, fmt(now + lease), ARGV[1])\n"
"if not mine then n = n + 1 end\n"
"local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')\n"
"redis.call('PEXPIRE', key, fmt(math.ceil((tonumber(last[2]) - now) / 1000) + 1))\n"
"return {1, n, ended, 0, mine and 1 or 0}\n";

/*
 * Release: ARGV holder. Returns 1 if the holder held a slot (then one
 * waiter is woken), 0 if not (released already, or its lease ended).
 * Idempotent, so that a release sent twice (a lost connection) releases
 * once.
 */
static const char lua_sem_release[] =
"if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end\n"
"redis.call('LPUSH', KEYS[2], '1')\n"
"redis.call('LTRIM', KEYS[2], '0', '63')\n"
"redis.call('PEXPIRE', KEYS[2], '10000')\n"
"return 1\n";

/*
 * Renew: ARGV holder, lease (us), now (us, or ''). Returns 1 if the holder
 * still held its slot (its lease now ends lease from now), 0 if it had lost
 * it (the lease ended, or it was released).
 */
static const char lua_sem_renew[] =
"local function fmt(n) return string.format('%.0f', n) end\n"
"local key = KEYS[1]\n"
"local now\n"
"if ARGV[3] ~= '' then now = tonumber(ARGV[3]) else\n"
"  local t = redis.call('TIME'); now = tonumber(t[1]) * 1000000 + tonumber(t[2]) end\n"
"local s = redis.call('ZSCORE', key, ARGV[1])\n"
"if not s or tonumber(s) <= now then return 0 end\n"
"redis.call('ZADD', key, fmt(now + tonumber(ARGV[2])), ARGV[1])\n"
"local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')\n"
"redis.call('PEXPIRE', key, fmt(math.ceil((tonumber(last[2]) - now) / 1000) + 1))\n"
"return 1\n";

/* Holders: ARGV now (us, or ''). The holders whose lease has not ended. Reads only. */
static const char lua_sem_holders[] =
"local now\n"
"if ARGV[1] ~= '' then now = tonumber(ARGV[1]) else\n"
"  local t = redis.call('TIME'); now = tonumber(t[1]) * 1000000 + tonumber(t[2]) end\n"
"return redis.call('ZCOUNT', KEYS[1], '(' .. string.format('%.0f', now), '+inf')\n";

typedef struct Script
{
	const char *source;
	/* for the scripts the library holds too: the part after the prelude */
	const char *body;
	/* and its function's name, after the library's (see library_build) */
	const char *fname;
	char		sha1[SHA1_DIGEST_LENGTH * 2 + 1];
} Script;

static Script scripts[NUM_SCRIPTS] = {
	[SCRIPT_LOG_ATTEMPT] = {lua_log_attempt, LUA_LOG_ATTEMPT_BODY, "log_attempt"},
	[SCRIPT_LOG_PEEK] = {lua_log_peek, LUA_LOG_PEEK_BODY, "log_peek"},
	[SCRIPT_LOG_REFUND] = {lua_log_refund},
	[SCRIPT_LOG_REFUND_IMPORTED] = {lua_log_refund_imported},
	[SCRIPT_FIXED_WINDOW] = {lua_fixed_window, LUA_FIXED_WINDOW_BODY, "fixed_window"},
	[SCRIPT_SLIDING_COUNTER] = {lua_sliding_counter, LUA_SLIDING_COUNTER_BODY, "sliding_counter"},
	[SCRIPT_TOKEN_BUCKET] = {lua_token_bucket, LUA_TOKEN_BUCKET_BODY, "token_bucket"},
	[SCRIPT_LOG_MULTI] = {lua_log_multi, LUA_LOG_MULTI_BODY, "log_multi"},
	[SCRIPT_SEM_ACQUIRE] = {lua_sem_acquire},
	[SCRIPT_SEM_RELEASE] = {lua_sem_release},
	[SCRIPT_SEM_RENEW] = {lua_sem_renew},
	[SCRIPT_SEM_HOLDERS] = {lua_sem_holders},
	[SCRIPT_BLOCK] = {lua_block},
	[SCRIPT_LOG_IMPORT] = {lua_log_import},
	[SCRIPT_COUNTER_IMPORT] = {lua_counter_import},
};

/* Hex SHA1 of the script, as Redis names it; computed once per backend. */
static const char *
script_sha1(Script *s)
{
	if (s->sha1[0] == '\0')
	{
		pg_cryptohash_ctx *ctx = pg_cryptohash_create(PG_SHA1);
		uint8		digest[SHA1_DIGEST_LENGTH];

		if (ctx == NULL ||
			pg_cryptohash_init(ctx) < 0 ||
			pg_cryptohash_update(ctx, (const uint8 *) s->source, strlen(s->source)) < 0 ||
			pg_cryptohash_final(ctx, digest, sizeof(digest)) < 0)
			elog(ERROR, "could not compute SHA1 of a slidewin script");
		pg_cryptohash_free(ctx);
		for (int i = 0; i < SHA1_DIGEST_LENGTH; i++)
			snprintf(s->sha1 + 2 * i, 3, "%02x", digest[i]);
	}
	return s->sha1;
}

const char *
script_sha1_hex(ScriptId id)
{
	return script_sha1(&scripts[id]);
}

const char *
script_source(ScriptId id)
{
	return scripts[id].source;
}

void
scripts_prepare(void)
{
	for (int i = 0; i < NUM_SCRIPTS; i++)
		(void) script_sha1(&scripts[i]);
}

/* numkeys, the keys and the arguments after argv[0..n-1]; the new argc */
static int
add_keys_args(const char **argv, size_t *lens, int n, int nkeys,
			  const char **keys, const size_t *keylens, int nargs,
			  const char **args)
{
	static const char *const numkeys[] = {"0", "1", "2", "3", "4"};

	argv[n] = numkeys[nkeys];
	lens[n++] = 1;
	for (int i = 0; i < nkeys; i++)
	{
		argv[n] = keys[i];
		lens[n++] = keylens[i];
	}
	for (int i = 0; i < nargs; i++)
	{
		argv[n] = args[i];
		lens[n++] = strlen(args[i]);
	}
	return n;
}

int
script_command(ScriptId id, bool eval, int nkeys, const char **keys,
			   const size_t *keylens, int nargs, const char **args,
			   const char **argv, size_t *lens)
{
	Script	   *s = &scripts[id];
	int			n = 0;

	Assert(nkeys >= 1 && nkeys <= 4 && nargs <= MAX_SCRIPT_ARGS);
	Assert(eval || s->sha1[0] != '\0');
	if (eval)
	{
		argv[n] = "EVAL";
		lens[n++] = 4;
		argv[n] = s->source;
		lens[n++] = strlen(s->source);
	}
	else
	{
		argv[n] = "EVALSHA";
		lens[n++] = 7;
		argv[n] = s->sha1;
		lens[n++] = SHA1_DIGEST_LENGTH * 2;
	}
	return add_keys_args(argv, lens, n, nkeys, keys, keylens, nargs, args);
}

/*
 * The library of Redis Functions (Redis 7 and later, Valkey): the prelude
 * once, and each script that decides a call as a function of its own, so
 * that FCALL runs only the script's body. Under EVALSHA every call runs
 * the prelude again, making each of its functions anew (about a tenth of
 * what the attempt costs Redis). The library's name, and so its
 * functions', carries 16 hex digits of the SHA1 of what it holds: servers
 * of different slidewin versions sharing one Redis each find their own,
 * and loading it twice is harmless ("already exists"). The prelude's
 * state (keep, bkeep, clock_s) lives as long as the library, so each
 * function resets it first.
 */
bool		slidewin_redis_functions = true;

static char *library;
static size_t library_len;
static char library_fnames[NUM_SCRIPTS][64];

/* Whether this backend gave up on functions, and for which target. */
static bool functions_off = false;
static uint64 functions_off_generation = 0;

static void
library_build(void)
{
	pg_cryptohash_ctx *ctx;
	uint8		digest[SHA1_DIGEST_LENGTH];
	char		tag[17];
	StringInfoData lib;
	MemoryContext old;

	if (library != NULL)
		return;
	ctx = pg_cryptohash_create(PG_SHA1);
	if (ctx == NULL || pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, (const uint8 *) LUA_PRELUDE, strlen(LUA_PRELUDE)) < 0)
		elog(ERROR, "could not compute SHA1 of the slidewin library");
	for (int i = 0; i < NUM_SCRIPTS; i++)
		if (scripts[i].fname &&
			(pg_cryptohash_update(ctx, (const uint8 *) scripts[i].fname, strlen(scripts[i].fname)) < 0 ||
			 pg_cryptohash_update(ctx, (const uint8 *) scripts[i].body, strlen(scripts[i].body)) < 0))
			elog(ERROR, "could not compute SHA1 of the slidewin library");
	if (pg_cryptohash_final(ctx, digest, sizeof(digest)) < 0)
		elog(ERROR, "could not compute SHA1 of the slidewin library");
	pg_cryptohash_free(ctx);
	for (int i = 0; i < 8; i++)
		snprintf(tag + 2 * i, 3, "%02x", digest[i]);

	old = MemoryContextSwitchTo(TopMemoryContext);
	initStringInfo(&lib);
	appendStringInfo(&lib, "#!lua name=slidewin_%s\n%s", tag, LUA_PRELUDE);
	for (int i = 0; i < NUM_SCRIPTS; i++)
	{
		if (!scripts[i].fname)
			continue;
		snprintf(library_fnames[i], sizeof(library_fnames[i]), "slidewin_%s_%s",
				 tag, scripts[i].fname);
		appendStringInfo(&lib,
						 "redis.register_function('%s', function(KEYS, ARGV)\n"
						 "keep, bkeep, clock_s = false, false, nil\n%send)\n",
						 library_fnames[i], scripts[i].body);
	}
	MemoryContextSwitchTo(old);
	library = lib.data;
	library_len = lib.len;
}

const char *
script_library(void)
{
	library_build();
	return library;
}

const char *
script_function_name(ScriptId id)
{
	library_build();
	return scripts[id].fname ? library_fnames[id] : NULL;
}

/*
 * NOPERM for the command itself (FCALL or FUNCTION LOAD), not for a key:
 * a key outside the user's patterns is refused by EVALSHA just the same.
 */
static bool
refused_functions(const RedisResult *result)
{
	return result->status == RS_FAIL_REPLY && result->reply &&
		strncmp(result->reply->str, "NOPERM", 6) == 0 &&
		(strstr(result->reply->str, "'fcall'") != NULL ||
		 strstr(result->reply->str, "'function") != NULL);
}

/* Whether a failure reply starts with prefix. */
static bool
reply_starts(const RedisResult *result, const char *prefix)
{
	size_t		n = strlen(prefix);

	return result->status == RS_FAIL_REPLY && result->reply &&
		result->reply->len >= n && strncmp(result->reply->str, prefix, n) == 0;
}

static void
drop_reply(RedisResult *result)
{
	if (result->reply)
		freeReplyObject(result->reply);
	result->reply = NULL;
}

/*
 * FCALL of script id's function. True when its result stands (an answer,
 * or a failure to reach Redis); false when the script should run by
 * EVALSHA instead: the server has no functions (Redis 6.2), the user may
 * not call or load them, or Redis refuses writes for now (out of memory, a
 * failed snapshot, too few replicas): a function that may write is refused
 * before it runs, where a script runs until it writes, so that a call that
 * writes nothing (a denial, a peek) still gets its answer.
 */
static bool
run_function(ScriptId id, int nkeys, const char **keys, const size_t *keylens,
			 int nargs, const char **args, RedisResult *result)
{
	const char *argv[SCRIPT_MAX_ARGV];
	size_t		lens[SCRIPT_MAX_ARGV];
	int			argc = 0;

	library_build();
	argv[argc] = "FCALL";
	lens[argc++] = 5;
	argv[argc] = library_fnames[id];
	lens[argc++] = strlen(library_fnames[id]);
	argc = add_keys_args(argv, lens, argc, nkeys, keys, keylens, nargs, args);

	for (int attempt = 0;; attempt++)
	{
		redis_exec(argc, argv, lens, result);
		if (result->status != RS_FAIL_REPLY)
			return true;
		if (reply_starts(result, "OOM") || reply_starts(result, "MISCONF") ||
			reply_starts(result, "NOREPLICAS"))
		{
			drop_reply(result);
			return false;
		}
		if (reply_starts(result, "ERR Function not found") && attempt == 0)
		{
			/*
			 * A server that never had it, or lost it: load it, once, on the
			 * server that said so (under Cluster, the node a redirection
			 * may have led to).
			 */
			const char *load[3] = {"FUNCTION", "LOAD", library};
			size_t		loadlens[3] = {8, 4, library_len};

			drop_reply(result);
			redis_exec_same(3, load, loadlens, result);
			if (result->status == RS_OK ||
				reply_starts(result, "ERR Library") /* already exists */ )
			{
				drop_reply(result);
				continue;
			}
			if (result->status != RS_FAIL_REPLY)
				return true;
			/* refused (NOPERM, or a server that will not take it): scripts */
			ereport(DEBUG1,
					(errmsg_internal("slidewin: Redis refused FUNCTION LOAD: %s; using EVALSHA",
									 result->reply->str)));
		}
		else if (!reply_starts(result, "ERR unknown command") &&
				 !refused_functions(result) &&
				 !reply_starts(result, "ERR Function not found"))
			return true;
		drop_reply(result);
		functions_off = true;
		functions_off_generation = redis_target_generation;
		return false;
	}
}

void
script_run(ScriptId id, int nkeys, const char **keys, const size_t *keylens,
		   int nargs, const char **args, RedisResult *result)
{
	const char *argv[SCRIPT_MAX_ARGV];
	size_t		lens[SCRIPT_MAX_ARGV];
	int			argc;

	if (functions_off && functions_off_generation != redis_target_generation)
		functions_off = false;
	if (scripts[id].fname && !functions_off && slidewin_redis_functions &&
		run_function(id, nkeys, keys, keylens, nargs, args, result))
		return;
	(void) script_sha1(&scripts[id]);
	argc = script_command(id, false, nkeys, keys, keylens, nargs, args, argv, lens);
	redis_exec(argc, argv, lens, result);
	if (result->status == RS_FAIL_REPLY &&
		strncmp(result->reply->str, "NOSCRIPT", 8) == 0)
	{
		freeReplyObject(result->reply);
		result->reply = NULL;
		argc = script_command(id, true, nkeys, keys, keylens, nargs, args, argv, lens);
		redis_exec(argc, argv, lens, result);
	}
}
