-- While Redis stays away, nothing carries, yet every fallback admission adds
-- a row to rl_fallback_carry. The rows that end in the meantime still go:
-- every 32nd row a backend adds (every 64th while its sweeps find nothing),
-- it sweeps one heap page for ended rows (fallback_carry.c, sweep_pages),
-- from a cursor the server's backends share, so a long outage does not
-- leave one row per admission behind. On the test clock.
SET TimeZone = 'UTC';
SET slidewin.redis_retry_interval = 0;
SET slidewin.redis_url = 'redis://127.0.0.1:1';
SET slidewin.on_redis_error = 'fallback';
TRUNCATE rl_fallback_carry;
-- 3,000 admissions with a 10 s window (about 40 pages of the table)
SET slidewin.test_now = '2030-01-01 00:10:00+00';
SELECT count(*) FILTER (WHERE (r).allowed AND (r).store = 'fallback') AS admitted
  FROM (SELECT rl_attempt('bound:a' || n, 5, '10 seconds') r FROM generate_series(1, 3000) n) s;
SELECT count(*) AS waiting FROM rl_fallback_carry;
-- A minute later, Redis still away: 8,000 more. Their sweeps go round the
-- whole table wherever the shared cursor stood (8,000 rows are enough from
-- any page of it), and every row of the first 3,000 has ended by then.
SET slidewin.test_now = '2030-01-01 00:11:00+00';
SELECT count(*) FILTER (WHERE (r).allowed AND (r).store = 'fallback') AS admitted
  FROM (SELECT rl_attempt('bound:b' || n, 5, '10 seconds') r FROM generate_series(1, 8000) n) s;
SELECT count(*) FILTER (WHERE key LIKE '%bound:a%') AS ended_left,
       count(*) FILTER (WHERE key LIKE '%bound:b%') AS live
  FROM rl_fallback_carry;
-- A row whose window is still open is never swept: 5 s later, with the
-- second 8,000 still in their 10 s window, a third batch's sweeps leave
-- every one of them.
SET slidewin.test_now = '2030-01-01 00:11:05+00';
SELECT count(*) FILTER (WHERE (r).allowed AND (r).store = 'fallback') AS admitted
  FROM (SELECT rl_attempt('bound:c' || n, 5, '10 seconds') r FROM generate_series(1, 3000) n) s;
SELECT count(*) FILTER (WHERE key LIKE '%bound:b%') AS live_kept,
       count(*) FILTER (WHERE key LIKE '%bound:c%') AS live_new
  FROM rl_fallback_carry;
TRUNCATE rl_fallback_carry;
RESET slidewin.test_now;
