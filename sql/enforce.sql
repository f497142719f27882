-- rl_enforce: the result when admitted, SQLSTATE RL429 when denied; the
-- PostgREST error style; shadow mode and denial logging.
SET slidewin.key_prefix = 'regress:enf:';
SET slidewin.test_now = '2030-01-01 00:00:00+00';
SET TimeZone = 'UTC';
SELECT rl_reset(k) FROM unnest(ARRAY['e1', 'e2', 'e3', 'we"ird\key', 'fb']) AS k;

SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_enforce('e1', 2, '1 minute');
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_enforce('e1', 2, '1 minute');
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_enforce('e1', 2, '1 minute');
\echo :LAST_ERROR_SQLSTATE
-- the hint rounds up, and never says 0 seconds
SET slidewin.test_now = '2030-01-01 00:00:59.5+00';
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_enforce('e1', 2, '1 minute');
-- weighted: the detail says what the call needed
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_enforce('e2', 10, '1 hour', 7);
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_enforce('e2', 10, '1 hour', 4);
-- a procedure can catch it by SQLSTATE
DO $$
BEGIN
  PERFORM rl_enforce('e2', 10, '1 hour', 4);
EXCEPTION WHEN SQLSTATE 'RL429' THEN
  RAISE NOTICE 'caught RL429, % units left', (rl_peek('e2', 10, '1 hour')).remaining;
END $$;

-- error_style = postgrest: SQLSTATE PGRST, JSON message and detail, which
-- PostgREST answers with HTTP 429 and these headers.
SET slidewin.error_style = postgrest;
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_enforce('e1', 2, '1 minute');
\echo :LAST_ERROR_SQLSTATE
-- with slidewin.error_show_key on, the message names the key, escaped
SET slidewin.error_show_key = on;
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_enforce('we"ird\key', 1, '10 seconds');
SELECT rl_enforce('we"ird\key', 1, '10 seconds');
DO $$
DECLARE
  st text; msg text; det text;
BEGIN
  PERFORM rl_enforce('we"ird\key', 1, '10 seconds');
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL;
  RAISE NOTICE 'sqlstate: %', st;
  RAISE NOTICE 'message: %', msg;
  RAISE NOTICE 'detail: %', det;
  RAISE NOTICE 'parsed: code=% status=% retry-after=% policy=% ratelimit=%',
    msg::json ->> 'code', det::json ->> 'status',
    det::json -> 'headers' ->> 'Retry-After', det::json -> 'headers' ->> 'RateLimit-Policy',
    det::json -> 'headers' ->> 'RateLimit';
END $$;
RESET slidewin.error_show_key;
SET slidewin.error_style = 'graphql';
RESET slidewin.error_style;

-- Shadow mode: a call that would be denied is recorded and admitted, with
-- remaining 0 and the retry_after it would have had.
SET slidewin.test_now = '2030-01-01 01:00:00+00';
SET slidewin.enforce = off;
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('e3', 2, '1 minute');
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('e3', 2, '1 minute');
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('e3', 2, '1 minute');
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_enforce('e3', 2, '1 minute');
SELECT rl_allow('e3', 2, '1 minute') AS allowed;
-- would-be denials are logged at the chosen level
SET slidewin.log_denials = notice;
SELECT allowed, remaining, retry_after FROM rl_attempt('e3', 2, '1 minute');
SET slidewin.enforce = on;
-- every over-limit call was recorded: 6 units are in the window
SELECT allowed, remaining, retry_after FROM rl_attempt('e3', 6, '1 minute');
SELECT allowed, remaining, retry_after FROM rl_attempt('e3', 7, '1 minute');
RESET slidewin.log_denials;
SELECT allowed FROM rl_attempt('e3', 2, '1 minute');

-- Shadow mode in the fallback store, too.
SET slidewin.redis_retry_interval = 0;
SET slidewin.redis_url = 'redis://127.0.0.1:1';
SET slidewin.enforce = off;
SELECT (r).allowed, (r).remaining, (r).retry_after, (r).store
  FROM (SELECT rl_attempt('fb', 2, '1 minute') AS r FROM generate_series(1, 3) OFFSET 0) calls;
SET slidewin.enforce = on;
SELECT allowed, remaining, retry_after, store FROM rl_attempt('fb', 4, '1 minute');
SELECT count(*) FROM rl_fallback_log WHERE key = 'regress:enf:fb';
-- the allow and deny policies answer without a store; shadow mode admits
-- what deny would refuse
SET slidewin.enforce = off;
SELECT allowed, remaining, store FROM rl_attempt('fb', 4, '1 minute', 1, 'deny');
SET slidewin.enforce = on;
SELECT allowed, remaining, store FROM rl_attempt('fb', 4, '1 minute', 1, 'deny');
SELECT rl_enforce('fb', 4, '1 minute', 1, 'deny');
RESET slidewin.redis_url;
SELECT rl_reset(k) FROM unnest(ARRAY['e1', 'e2', 'e3', 'we"ird\key', 'fb']) AS k;
