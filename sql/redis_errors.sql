-- Redis failures under the error policy: an ERROR with SQLSTATE
-- 08001/08006 and the cause in DETAIL; the next call works once Redis is back.
SET slidewin.key_prefix = 'regress:errors:';
-- the error policy, and no circuit breaker: every call tries Redis
SET slidewin.on_redis_error = 'error';
SET slidewin.redis_retry_interval = 0;
SELECT rl_reset('e');

-- nothing listens on port 1
SET slidewin.redis_url = 'redis://127.0.0.1:1';
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('e', 5, '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_peek('e', 5, '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT rl_reset('e');
\echo :LAST_ERROR_SQLSTATE
-- the password never shows in a message
SET slidewin.redis_url = 'redis://:s3cret@127.0.0.1:1';
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('e', 5, '1 minute');
SET slidewin.redis_url = 'unix:///nonexistent/redis.sock?db=2';
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('e', 5, '1 minute');
\echo :LAST_ERROR_SQLSTATE

-- back to the configured server: works at once
RESET slidewin.redis_url;
SELECT allowed, remaining, store FROM rl_attempt('e', 5, '1 minute');

-- malformed URLs are refused when set
SET slidewin.redis_url = 'http://127.0.0.1';
SET slidewin.redis_url = 'redis://127.0.0.1:99999';
SET slidewin.redis_url = 'redis://127.0.0.1:6379/x';
SET slidewin.redis_url = 'redis://';
SET slidewin.redis_url = 'unix://relative/path';
SET slidewin.redis_url = 'unix:///tmp/r.sock?database=1';
SET slidewin.redis_url = 'redis://[::1';
-- well-formed ones are accepted
SET slidewin.redis_url = 'redis://user:p%40ss@[::1]:6380/3';
SET slidewin.redis_url = 'unix://:pw@/var/run/redis.sock?db=1';
RESET slidewin.redis_url;

-- timeouts have bounds
-- (expected/redis_errors_1.out: PostgreSQL 16 prints the range's units)
SET slidewin.command_timeout = 0;
SET slidewin.connect_timeout = '2min';
SHOW slidewin.command_timeout;
SHOW slidewin.connect_timeout;

-- the circuit breaker belongs to the server that failed: once the URL points
-- elsewhere, the next call tries the new server at once
SET slidewin.on_redis_error = 'fallback';
SET slidewin.redis_retry_interval = '1h';
SET slidewin.redis_url = 'redis://127.0.0.1:1';
SELECT allowed, store FROM rl_attempt('breaker', 5, '1 minute');
-- the same server: the breaker holds
SELECT allowed, store FROM rl_attempt('breaker', 5, '1 minute');
RESET slidewin.redis_url;
SELECT allowed, store FROM rl_attempt('breaker', 5, '1 minute');
SELECT rl_reset('breaker');
RESET slidewin.redis_retry_interval;
RESET slidewin.on_redis_error;
