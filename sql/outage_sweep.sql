-- Ended rows of a key prefix that no call uses any more leave
-- rl_fallback_carry all the same: a carry that finds nothing to carry under
-- its own prefix sweeps a few heap pages for ended rows of any prefix
-- (fallback_carry.c, sweep_pages), from the server's sweep cursor, which
-- starts again at the first page of a table it has gone past the end of.
-- On the test clock.
SET TimeZone = 'UTC';
SET slidewin.redis_retry_interval = 0;
TRUNCATE rl_fallback_carry;
-- 20 fallback admissions under one prefix, each with a 10 s window
SET slidewin.key_prefix = 'regress:gone:';
SET slidewin.test_now = '2030-01-01 00:10:00+00';
SET slidewin.redis_url = 'redis://127.0.0.1:1';
SELECT count(*) FILTER (WHERE (r).allowed AND (r).store = 'fallback') AS admitted
  FROM (SELECT rl_attempt('g' || n, 5, '10 seconds') r FROM generate_series(1, 20) n) s;
SELECT count(*) AS waiting, min(key) AS first_key FROM rl_fallback_carry;
\c
-- A new session under another prefix, a minute later, with Redis: every
-- one of those rows has ended, and no call will ever name their prefix.
SET TimeZone = 'UTC';
SET slidewin.key_prefix = 'regress:sweep:';
SET slidewin.test_now = '2030-01-01 00:11:00+00';
SELECT count(*) AS rows_before FROM rl_fallback_carry;
-- Redis decides; then, with nothing of its prefix to carry, the call
-- sweeps four pages of the table (here, the whole table)
SELECT allowed, remaining, store FROM rl_attempt('s', 5, '1 minute');
SELECT count(*) AS rows_after FROM rl_fallback_carry;
SELECT rl_reset('s');
RESET slidewin.test_now;
