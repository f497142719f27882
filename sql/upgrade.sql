-- The upgrade path: install 1.0, leave fallback rows in its layout, update
-- to the current version, and keep counting from those rows. (A fresh
-- install runs the same scripts: 1.0, then each update in turn.)
SET client_min_messages = warning;
DROP EXTENSION slidewin;
CREATE EXTENSION slidewin VERSION '1.0';
RESET client_min_messages;
SELECT extversion FROM pg_extension WHERE extname = 'slidewin';

SET slidewin.key_prefix = 'regress:up:';
SET TimeZone = 'UTC';
SET slidewin.redis_retry_interval = 0;
SET slidewin.redis_url = 'redis://127.0.0.1:1';
SET slidewin.test_now = '2032-01-01 00:10:00+00';
-- rows as 1.0 wrote them (key, ts, total): a base row that has left a
-- 10-minute window, then 3 live calls of costs 2, 1 and 4
INSERT INTO rl_fallback_log VALUES
  ('regress:up:k', 1956528000000000, 5),
  ('regress:up:k', 1956528060000000, 7),
  ('regress:up:k', 1956528120000000, 8),
  ('regress:up:k', 1956528180000000, 12);
-- this library needs the new layout, and says how to get it
SELECT * FROM rl_attempt('k', 10, '10 minutes');
\echo :LAST_ERROR_SQLSTATE

ALTER EXTENSION slidewin UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'slidewin';
SELECT ts, total, cost FROM rl_fallback_log ORDER BY ts;
-- 7 units live (2 + 1 + 4): 3 remain
SELECT allowed, remaining, retry_after, store FROM rl_attempt('k', 10, '10 minutes', 3);
SELECT allowed, remaining, retry_after, store FROM rl_attempt('k', 10, '10 minutes', 1);
SELECT indexrelid::regclass FROM pg_index WHERE indrelid = 'rl_fallback_log'::regclass ORDER BY indexrelid::regclass::text;

