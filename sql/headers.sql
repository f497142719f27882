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
