-- 1.6: rl_result says the limit a call was judged against (lim, win; for
-- rl_attempt_multi the window that decided), and rl_headers turns a result
-- into HTTP response header fields. On the test clock, so that every
-- reset time and header value is fixed.
SET TimeZone = 'UTC';
SET slidewin.key_prefix = 'regress:hd:';
SET slidewin.test_now = '2031-03-01 12:00:00+00';
SELECT rl_reset(k) FROM unnest(ARRAY['k', 'm', 'm2', 'p', 'fb', 'fbm']) k;

-- Redis: lim and win of the call, and the headers of an admission
SELECT allowed, remaining, lim, win, store FROM rl_attempt('k', 3, '1 minute');
SELECT rl_headers(r) FROM rl_attempt('k', 3, '1 minute') r;
-- the last unit, then a denial: Retry-After in whole seconds, rounded up
SELECT rl_headers(r, 'per-key') FROM rl_attempt('k', 3, '1 minute') r;
SET slidewin.test_now = '2031-03-01 12:00:10.2+00';
SELECT allowed, remaining, retry_after, lim, win FROM rl_attempt('k', 3, '1 minute');
SELECT rl_headers(r) FROM rl_attempt('k', 3, '1 minute') r;
-- a peek is judged against its arguments too
SELECT allowed, remaining, lim, win FROM rl_peek('k', 5, '2 minutes');

-- rl_attempt_multi: the window that decided. Admitted: the one with the
-- fewest units left.
SET slidewin.test_now = '2031-03-01 12:00:00+00';
SELECT allowed, remaining, lim, win FROM rl_attempt_multi('m', ARRAY[5, 2], ARRAY['1 hour', '1 minute']::interval[]);
SELECT allowed, remaining, lim, win FROM rl_attempt_multi('m', ARRAY[5, 2], ARRAY['1 hour', '1 minute']::interval[]);
-- denied by the minute's limit
SELECT allowed, remaining, lim, win FROM rl_attempt_multi('m', ARRAY[5, 2], ARRAY['1 hour', '1 minute']::interval[]);
-- The window that denies, even when another (listed first) has fewer units
-- left: 8 units
-- two hours ago (only in the day), 8 now (in both); 3 more do not fit the
-- hour (10 - 8 = 2 left), and would fit the day (20 - 16 = 4 left, 1 after).
SET slidewin.test_now = '2031-03-01 10:00:00+00';
SELECT allowed FROM rl_attempt_multi('m2', ARRAY[20, 10], ARRAY['1 day', '1 hour']::interval[], 8);
SET slidewin.test_now = '2031-03-01 12:00:00+00';
SELECT allowed FROM rl_attempt_multi('m2', ARRAY[20, 10], ARRAY['1 day', '1 hour']::interval[], 8);
SELECT allowed, lim, win FROM rl_attempt_multi('m2', ARRAY[20, 10], ARRAY['1 day', '1 hour']::interval[], 3);

-- The fallback store says the same (Redis unreachable: a closed port).
SET slidewin.redis_url = 'redis://127.0.0.1:1';
SET slidewin.redis_retry_interval = 0;
SET client_min_messages = error;
SELECT allowed, remaining, lim, win, store FROM rl_attempt('fb', 2, '30 seconds');
SELECT rl_headers(r) FROM rl_attempt('fb', 2, '30 seconds') r;
SELECT allowed, remaining, lim, win, store FROM rl_attempt('fb', 2, '30 seconds');
SET slidewin.test_now = '2031-03-01 10:00:00+00';
SELECT allowed FROM rl_attempt_multi('fbm', ARRAY[20, 10], ARRAY['1 day', '1 hour']::interval[], 8);
SET slidewin.test_now = '2031-03-01 12:00:00+00';
SELECT allowed, lim, win FROM rl_attempt_multi('fbm', ARRAY[20, 10], ARRAY['1 day', '1 hour']::interval[], 8);
SELECT allowed, lim, win, store FROM rl_attempt_multi('fbm', ARRAY[20, 10], ARRAY['1 day', '1 hour']::interval[], 3);
-- No store answered (the allow policy): the call's own limit; none for
-- rl_attempt_multi, whose deciding window no store chose. Only the policy
-- fields then, without the counts no store gave.
SELECT allowed, remaining, lim, win, store FROM rl_attempt('p', 4, '1 minute', on_redis_error => 'allow');
SELECT rl_headers(r) FROM rl_attempt('p', 4, '1 minute', on_redis_error => 'allow') r;
SELECT allowed, lim, win, store FROM rl_attempt_multi('p', ARRAY[1, 2], ARRAY['1 minute', '1 hour']::interval[], on_redis_error => 'deny');
SELECT rl_headers(r) FROM rl_attempt_multi('p', ARRAY[1, 2], ARRAY['1 minute', '1 hour']::interval[], on_redis_error => 'deny') r;
RESET client_min_messages;
RESET slidewin.redis_url;
RESET slidewin.redis_retry_interval;

-- The policy name is a structured-field string: quotes and backslashes are
-- escaped; anything else but printable ASCII is refused.
SELECT rl_headers(r, 'say "hi" \ there') ->> 'RateLimit-Policy' AS policy FROM rl_peek('k', 3, '1 minute') r;
SELECT rl_headers(r, 'naïve') FROM rl_peek('k', 3, '1 minute') r;
\echo :LAST_ERROR_SQLSTATE
SELECT rl_headers(r, '') FROM rl_peek('k', 3, '1 minute') r;
\echo :LAST_ERROR_SQLSTATE
SELECT rl_headers(r, NULL) FROM rl_peek('k', 3, '1 minute') r;
\echo :LAST_ERROR_SQLSTATE
SELECT rl_headers(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT rl_headers(NULL::rl_result, 'x');
\echo :LAST_ERROR_SQLSTATE


-- A blocked key (rl_block): the quota is back when the block ends, not
-- when the (here empty) window is, so t and X-RateLimit-Reset count to the
-- block's end, as Retry-After does: 15 minutes, in both stores.
SET slidewin.test_now = '2031-03-01 13:00:00+00';
SELECT count(*) AS keys_cleared
  FROM unnest(ARRAY['blk', 'blk2']) k, LATERAL (SELECT rl_reset(k), rl_unblock(k)) r;
SELECT rl_block('blk', '15 minutes');
SELECT allowed, remaining, retry_after, reset_at FROM rl_attempt('blk', 5, '1 minute');
SELECT rl_headers(r) FROM rl_attempt('blk', 5, '1 minute') r;
SELECT rl_headers(r) FROM rl_peek('blk', 5, '1 minute') r;
-- a window that empties after the block ends: t counts to the window
SELECT allowed FROM rl_attempt('blk2', 5, '1 hour', 2);
SELECT rl_block('blk2', '10 minutes');
SELECT rl_headers(r) ->> 'RateLimit' AS ratelimit, rl_headers(r) ->> 'X-RateLimit-Reset' AS reset,
       rl_headers(r) ->> 'Retry-After' AS retry_after
  FROM rl_attempt('blk2', 5, '1 hour') r;
SET slidewin.redis_url = 'redis://127.0.0.1:1';
SET slidewin.redis_retry_interval = 0;
SET client_min_messages = error;
SELECT store, rl_headers(r) FROM rl_attempt('blk', 5, '1 minute') r;
RESET client_min_messages;
RESET slidewin.redis_url;
RESET slidewin.redis_retry_interval;

-- Rows built by hand: every field rl_headers reads is checked, and a bad
-- one is refused naming it (22004 for a NULL, 22023 for the rest), rather
-- than turned into a header value no client could use.
CREATE FUNCTION pg_temp.headers_of(r rl_result) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  st text; msg text;
BEGIN
  RETURN rl_headers(r)::text;
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
  RETURN st || ': ' || msg;
END $$;
SELECT what, pg_temp.headers_of(r) AS headers
  FROM (VALUES
    ('valid admission', ROW(true, 2, '0', '2031-03-01 13:01:00+00', 'redis', 3, '1 minute', NULL, '2031-03-01 13:00:20+00')::rl_result),
    ('valid denial', ROW(false, 0, '5 seconds', '2031-03-01 13:00:30+00', 'redis', 3, '1 minute', NULL, '2031-03-01 13:00:04+00')::rl_result),
    ('next_at past Retry-After', ROW(false, 0, '5 seconds', '2031-03-01 13:00:30+00', 'redis', 3, '1 minute', NULL, '2031-03-01 13:00:30+00')::rl_result),
    ('next_at NULL', ROW(true, 2, '0', '2031-03-01 13:01:00+00', 'redis', 3, '1 minute', NULL, NULL)::rl_result),
    ('next_at infinite', ROW(true, 2, '0', '2031-03-01 13:01:00+00', 'redis', 3, '1 minute', NULL, 'infinity')::rl_result),
    ('next_at before 1970', ROW(true, 2, '0', '2031-03-01 13:01:00+00', 'redis', 3, '1 minute', NULL, '1969-12-31 23:59:00+00')::rl_result),
    ('no store answered', ROW(false, NULL, '0', NULL, 'none', 3, '1 minute', NULL, NULL)::rl_result),
    ('multi, no store', ROW(false, NULL, '0', NULL, 'none', NULL, NULL, NULL, NULL)::rl_result),
    ('allowed NULL', ROW(NULL, 2, '0', '2031-03-01 13:01:00+00', 'redis', 3, '1 minute', NULL, NULL)::rl_result),
    ('negative lim and win', ROW(false, 0, '5 seconds', '2031-03-01 13:00:30+00', 'redis', -7, '-60 seconds', NULL, NULL)::rl_result),
    ('lim 0', ROW(false, 0, '5 seconds', '2031-03-01 13:00:30+00', 'redis', 0, '1 minute', NULL, NULL)::rl_result),
    ('negative win', ROW(false, 0, '5 seconds', '2031-03-01 13:00:30+00', 'redis', 3, '-60 seconds', NULL, NULL)::rl_result),
    ('win 0', ROW(false, 0, '5 seconds', '2031-03-01 13:00:30+00', 'redis', 3, '0', NULL, NULL)::rl_result),
    ('win NULL', ROW(false, 0, '5 seconds', '2031-03-01 13:00:30+00', 'redis', 3, NULL, NULL, NULL)::rl_result),
    ('lim NULL', ROW(false, 0, '5 seconds', '2031-03-01 13:00:30+00', 'redis', NULL, '1 minute', NULL, NULL)::rl_result),
    ('win in months', ROW(false, 0, '5 seconds', '2031-03-01 13:00:30+00', 'redis', 3, '1 month', NULL, NULL)::rl_result),
    ('negative remaining', ROW(false, -3, '5 seconds', '2031-03-01 13:00:30+00', 'redis', 3, '1 minute', NULL, NULL)::rl_result),
    ('remaining above lim', ROW(true, 4, '0', '2031-03-01 13:00:30+00', 'redis', 3, '1 minute', NULL, NULL)::rl_result),
    ('remaining NULL', ROW(false, NULL, '5 seconds', '2031-03-01 13:00:30+00', 'redis', 3, '1 minute', NULL, NULL)::rl_result),
    ('reset_at NULL', ROW(false, 0, '5 seconds', NULL, 'redis', 3, '1 minute', NULL, NULL)::rl_result),
    ('reset_at infinite', ROW(false, 0, '5 seconds', 'infinity', 'redis', 3, '1 minute', NULL, NULL)::rl_result),
    ('reset_at before 1970', ROW(false, 0, '5 seconds', '1969-12-31 23:59:00+00', 'redis', 3, '1 minute', NULL, NULL)::rl_result),
    ('retry_after NULL', ROW(false, 0, NULL, '2031-03-01 13:00:30+00', 'redis', 3, '1 minute', NULL, NULL)::rl_result),
    ('negative retry_after', ROW(false, 0, '-5 seconds', '2031-03-01 13:00:30+00', 'redis', 3, '1 minute', NULL, NULL)::rl_result),
    ('retry_after in months', ROW(false, 0, '1 month', '2031-03-01 13:00:30+00', 'redis', 3, '1 minute', NULL, NULL)::rl_result)
  ) AS v(what, r);
-- with the detail, for a pair of fields and for one beyond another
SELECT rl_headers(ROW(false, 0, '5 seconds', NULL, 'redis', 3, '1 minute', NULL, NULL)::rl_result);
\echo :LAST_ERROR_SQLSTATE
SELECT rl_headers(ROW(true, 4, '0', '2031-03-01 13:00:30+00', 'redis', 3, '1 minute', NULL, NULL)::rl_result);
\echo :LAST_ERROR_SQLSTATE

SELECT rl_unblock(k) FROM unnest(ARRAY['blk', 'blk2']) k;
SELECT rl_reset(k) FROM unnest(ARRAY['k', 'm', 'm2', 'p', 'fb', 'fbm', 'blk', 'blk2']) k;

-- 1.12: the header fields of a call over several keys, rl_headers(rows,
-- names [, pks]): every key's policy in RateLimit-Policy and RateLimit, each
-- under the name given (never the key), and Retry-After from the key that
-- denied. Three tiers: an address, an API key's route, a plan's day. The
-- prefix holds a hash tag, so that under Redis Cluster (the cluster pass of
-- test/run_all.sh) the three keys are in one slot, as rl_attempt_all needs.
SET slidewin.key_prefix = 'regress:{hd}:';
SET slidewin.test_now = '2031-03-01 14:00:00+00';
SELECT rl_reset(k) FROM unnest(ARRAY['t:ip', 't:route', 't:plan']) k;
CREATE TEMP TABLE tiers AS
  SELECT ARRAY['t:ip', 't:route', 't:plan'] AS keys, ARRAY[5, 2, 100]::bigint[] AS lims,
         ARRAY['1 minute', '10 seconds', '1 day']::interval[] AS wins,
         ARRAY['per-ip', 'per-route', 'plan'] AS names;
-- admitted: every policy, with its own q, w, r and t; the X-RateLimit-*
-- fields describe the key with the fewest units left (the route)
SELECT rl_headers(array_agg(a), names)
  FROM tiers, LATERAL rl_attempt_all_rows(keys, lims, wins) a GROUP BY names;
SET slidewin.test_now = '2031-03-01 14:00:03+00';
SELECT rl_headers(array_agg(a), names)
  FROM tiers, LATERAL rl_attempt_all_rows(keys, lims, wins) a GROUP BY names;
-- denied by the route (2 per 10 seconds), 4 seconds later: Retry-After is
-- the route's wait (6 s, until its first unit leaves), each r is what its
-- key had before the call, t is no later than Retry-After
SET slidewin.test_now = '2031-03-01 14:00:04+00';
SELECT rl_headers(array_agg(a ORDER BY a.ordinality), names) - 'RateLimit-Policy' AS denied,
       array_agg(a.retry_after ORDER BY a.ordinality) AS retry_after
  FROM tiers, LATERAL rl_attempt_all_rows(keys, lims, wins) WITH ORDINALITY AS a GROUP BY names;
-- and the denial charged neither the address nor the plan: the values
-- the headers gave, as rl_peek sees them
SELECT k, (rl_peek(k, l, w)).remaining
  FROM tiers, unnest(keys, lims, wins) AS u(k, l, w);
-- the route's denial is now known (the deny cache): the next call is denied
-- without asking Redis, with the route's answer alone, so RateLimit lists
-- the route only (the other keys were not asked: no r, no t)
SELECT h ->> 'RateLimit' AS ratelimit, h ->> 'Retry-After' AS retry_after, stores
  FROM (SELECT rl_headers(array_agg(a), names) AS h, array_agg(coalesce(a.store, '-')) AS stores
          FROM tiers, LATERAL rl_attempt_all_rows(keys, lims, wins) a GROUP BY names) s;
-- the rest asks Redis about every key
SET slidewin.deny_cache = off;
-- two keys deny: the call passes when both let it, so Retry-After is the
-- longer wait, the plan's (99 units of a day's 100, 2 of them spent), not
-- the route's, which denies first in the order given
SELECT rl_headers(array_agg(a), names) ->> 'Retry-After' AS retry_after,
       rl_headers(array_agg(a), names) ->> 'X-RateLimit-Limit' AS x_limit,
       array_agg(a.retry_after) AS waits
  FROM tiers, LATERAL rl_attempt_all_rows(keys, lims, wins, ARRAY[1, 1, 99]) a GROUP BY names;
-- partition keys per policy; a NULL element: that policy has none
SELECT h ->> 'RateLimit-Policy' AS policy, h ->> 'RateLimit' AS ratelimit
  FROM (SELECT rl_headers(array_agg(a), names, ARRAY[NULL, '\x0102', '\xff']::bytea[]) AS h
          FROM tiers, LATERAL rl_attempt_all_rows(keys, lims, wins) a GROUP BY names) s;
-- one result in an array is rl_headers(r, name); rl_result[] is taken too
SELECT rl_headers(ARRAY[r], ARRAY['one']) = rl_headers(r, 'one') AS same_as_one,
       rl_headers(ARRAY[r], ARRAY['one'], ARRAY['\x01'::bytea]) = rl_headers(r, 'one', '\x01') AS same_with_pk
  FROM rl_peek('t:ip', 5, '1 minute') r;
-- no store answered (Redis unreachable, the deny policy): the policies and
-- Retry-After only
SET slidewin.redis_url = 'redis://127.0.0.1:1';
SET slidewin.redis_retry_interval = 0;
SET client_min_messages = error;
SELECT rl_headers(array_agg(a), names)
  FROM tiers, LATERAL rl_attempt_all_rows(keys, lims, wins, on_redis_error => 'deny') a GROUP BY names;
RESET client_min_messages;
RESET slidewin.redis_url;
RESET slidewin.redis_retry_interval;
RESET slidewin.deny_cache;
-- Bad arguments, each refused naming it
SELECT rl_headers(NULL::record[], ARRAY['a']);
\echo :LAST_ERROR_SQLSTATE
SELECT rl_headers(ARRAY[r], NULL) FROM rl_peek('t:ip', 5, '1 minute') r;
\echo :LAST_ERROR_SQLSTATE
SELECT rl_headers(ARRAY[r], ARRAY['a'], NULL) FROM rl_peek('t:ip', 5, '1 minute') r;
\echo :LAST_ERROR_SQLSTATE
SELECT rl_headers(ARRAY[r, r], ARRAY['a']) FROM rl_peek('t:ip', 5, '1 minute') r;
\echo :LAST_ERROR_SQLSTATE
SELECT rl_headers(ARRAY[r, r], ARRAY['a', 'b'], ARRAY['\x01'::bytea]) FROM rl_peek('t:ip', 5, '1 minute') r;
\echo :LAST_ERROR_SQLSTATE
SELECT rl_headers(ARRAY[r, r], ARRAY['a', 'a']) FROM rl_peek('t:ip', 5, '1 minute') r;
\echo :LAST_ERROR_SQLSTATE
SELECT rl_headers(ARRAY[r, r], ARRAY['a', NULL]) FROM rl_peek('t:ip', 5, '1 minute') r;
\echo :LAST_ERROR_SQLSTATE
SELECT rl_headers(ARRAY[r, NULL], ARRAY['a', 'b']) FROM rl_peek('t:ip', 5, '1 minute') r;
\echo :LAST_ERROR_SQLSTATE
SELECT rl_headers(ARRAY[r, r], ARRAY['a', 'ä']) FROM rl_peek('t:ip', 5, '1 minute') r;
\echo :LAST_ERROR_SQLSTATE
SELECT rl_headers(ARRAY[r], ARRAY['a'], ARRAY[decode(repeat('ab', 65), 'hex')]) FROM rl_peek('t:ip', 5, '1 minute') r;
\echo :LAST_ERROR_SQLSTATE
SELECT rl_headers(ARRAY[[r], [r]], ARRAY[['a'], ['b']]) FROM rl_peek('t:ip', 5, '1 minute') r;
\echo :LAST_ERROR_SQLSTATE
SELECT rl_headers('{}'::rl_result[], '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT rl_headers(array_agg(r), array_agg(n::text))
  FROM generate_series(1, 17) n, rl_peek('t:ip', 5, '1 minute') r;
\echo :LAST_ERROR_SQLSTATE
-- a row that is not a result: each field rl_headers reads must be there,
-- with its type; the rows of rl_attempt_all_rows have them
SELECT rl_headers(ARRAY[ROW(true, 2)], ARRAY['a']);
\echo :LAST_ERROR_SQLSTATE
SELECT rl_headers(array_agg(a), ARRAY['a'])
  FROM (SELECT true AS allowed, 2::bigint AS remaining, '0'::interval AS retry_after,
               now() AS reset_at, 3 AS lim, '1 minute'::interval AS win) a;
\echo :LAST_ERROR_SQLSTATE
-- and a bad field of an element names the element
SELECT rl_headers(ARRAY[r, ROW(true, 4, '0', '2031-03-01 13:00:30+00', 'redis', 3, '1 minute', NULL, NULL)::rl_result],
                  ARRAY['a', 'b'])
  FROM rl_peek('t:ip', 5, '1 minute') r;
\echo :LAST_ERROR_SQLSTATE
DROP TABLE tiers;
SELECT rl_reset(k) FROM unnest(ARRAY['t:ip', 't:route', 't:plan']) k;
