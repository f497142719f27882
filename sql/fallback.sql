-- The fallback store and the failure policy, with Redis unreachable.
SET slidewin.key_prefix = 'regress:fb:';
SET slidewin.test_now = '2030-01-01 00:00:00+00';
SET TimeZone = 'UTC';
SET slidewin.redis_retry_interval = 0;
SELECT rl_reset(k) FROM unnest(ARRAY['f1','f2','f3','f4','both']) AS k;
-- nothing listens on port 1: Redis is "down" for this session
SET slidewin.redis_url = 'redis://127.0.0.1:1';

-- Same semantics as the Redis store: 3 per 10 s, weighted, sliding.
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('f1', 3, '10 seconds');
SET slidewin.test_now = '2030-01-01 00:00:02+00';
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('f1', 3, '10 seconds', 2);
SET slidewin.test_now = '2030-01-01 00:00:05+00';
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('f1', 3, '10 seconds');
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_peek('f1', 3, '10 seconds');
SET slidewin.test_now = '2030-01-01 00:00:10+00';
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('f1', 3, '10 seconds', 2);
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('f1', 3, '10 seconds');
SET slidewin.test_now = '2030-01-01 00:00:12+00';
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('f1', 3, '10 seconds', 2);
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('f1', 3, '10 seconds', 2);

-- Many entries: 200 calls of cost 5, 10 ms apart, fill 1000 units.
DO $$
BEGIN
  FOR i IN 0..199 LOOP
    PERFORM set_config('slidewin.test_now',
                       (timestamptz '2030-01-01 00:00:00+00' + i * interval '10 ms')::text, false);
    IF NOT rl_allow('f2', 1000, '1 minute', 5) THEN
      RAISE EXCEPTION 'call % was denied', i;
    END IF;
  END LOOP;
END $$;
SET slidewin.test_now = '2030-01-01 00:00:02+00';
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('f2', 1000, '1 minute', 500);
SET slidewin.test_now = '2030-01-01 00:01:00.5+00';
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_peek('f2', 1000, '1 minute');
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('f2', 1000, '1 minute', 255);
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('f2', 1000, '1 minute', 1);
-- expired rows are deleted by normal calls: only the 150 live ones remain
-- (149 of cost 5 and the one of cost 255)
SELECT count(*) FROM rl_fallback_log WHERE key = 'regress:fb:f2';

-- Fallback consumption is transactional.
SET slidewin.test_now = '2030-01-01 00:00:00+00';
BEGIN;
SELECT allowed, remaining, store FROM rl_attempt('f3', 5, '1 hour', 3);
ROLLBACK;
SELECT allowed, remaining FROM rl_peek('f3', 5, '1 hour');
BEGIN;
SELECT allowed, remaining FROM rl_attempt('f3', 5, '1 hour', 1);
SAVEPOINT s;
SELECT allowed, remaining FROM rl_attempt('f3', 5, '1 hour', 2);
ROLLBACK TO SAVEPOINT s;
SELECT allowed, remaining FROM rl_attempt('f3', 5, '1 hour', 1);
COMMIT;
SELECT allowed, remaining FROM rl_peek('f3', 5, '1 hour');

-- The policy, per call and per setting.
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('f4', 5, '1 hour', 1, 'allow');
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('f4', 5, '1 hour', 1, 'deny');
SELECT rl_allow('f4', 5, '1 hour', 1, 'deny') AS denied, rl_allow('f4', 5, '1 hour', 1, 'allow') AS allowed;
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('f4', 5, '1 hour', 1, 'error');
\echo :LAST_ERROR_SQLSTATE
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_peek('f4', 5, '1 hour', 'error');
\echo :LAST_ERROR_SQLSTATE
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('f4', 5, '1 hour', 1, 'nope');
\echo :LAST_ERROR_SQLSTATE
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('f4', 5, '1 hour', 1, NULL);
SET slidewin.on_redis_error = 'deny';
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('f4', 5, '1 hour');
-- the call site's own choice wins over the setting, for its own call
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('f4', 5, '1 hour', 1, 'fallback');
SET slidewin.on_redis_error = 'error';
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('f4', 5, '1 hour');
\echo :LAST_ERROR_SQLSTATE
SET slidewin.on_redis_error = 'maybe';
RESET slidewin.on_redis_error;
-- none of allow/deny/error recorded anything: only the two fallback calls
SELECT allowed, remaining FROM rl_peek('f4', 5, '1 hour');

-- Circuit breaker: after a failure, the server is left alone for the
-- interval: even a call under the error policy fails without trying it.
-- (TAP 020 shows a Redis that comes back being tried again after the interval.)
SET slidewin.redis_retry_interval = '1h';
SELECT store FROM rl_attempt('f4', 5, '1 hour');
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('f4', 5, '1 hour', 1, 'error');
-- A failure belongs to the server it happened on: once the URL points
-- elsewhere, that server is tried at once.
RESET slidewin.redis_url;
SELECT store FROM rl_attempt('f4', 5, '1 hour');
SET slidewin.redis_retry_interval = 0;
SELECT store FROM rl_attempt('f4', 5, '1 hour');

-- An ordinary role gets the fallback without any privilege on its table,
-- but cannot read the table or loosen the policy.
CREATE ROLE regress_fb_user;
SET slidewin.redis_url = 'redis://127.0.0.1:1';
SET ROLE regress_fb_user;
-- (Redis holds all 5 units: the fallback's 3, carried back before its first
-- answer, and its own 2; the fallback store starts from them: denied.)
SELECT allowed, remaining, store FROM rl_attempt('f4', 5, '1 hour');
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('f4', 5, '1 hour', 1, 'allow');
SELECT count(*) FROM rl_fallback_log;
DELETE FROM rl_fallback_log;
SET slidewin.on_redis_error = 'allow';
SET slidewin.redis_retry_interval = 0;
RESET ROLE;
DROP ROLE regress_fb_user;

-- peek and reset reach both stores: 2 units in Redis, 1 in the fallback,
-- which counts Redis's 2 as well (3 used, 7 remain)
RESET slidewin.redis_url;
SELECT store FROM rl_attempt('both', 10, '1 hour', 2);
SET slidewin.redis_url = 'redis://127.0.0.1:1';
SELECT store FROM rl_attempt('both', 10, '1 hour', 1);
SELECT remaining, store FROM rl_peek('both', 10, '1 hour');
-- with Redis down, reset clears the fallback and warns about Redis
SELECT rl_reset('both');
SELECT remaining, store FROM rl_peek('both', 10, '1 hour');
RESET slidewin.redis_url;
SELECT remaining, store FROM rl_peek('both', 10, '1 hour');
SELECT rl_reset('both');
SELECT remaining, store FROM rl_peek('both', 10, '1 hour');
SELECT count(*) FROM rl_fallback_log WHERE key = 'regress:fb:both';
SELECT rl_reset(k) FROM unnest(ARRAY['f1','f2','f3','f4']) AS k;
