-- The algorithm argument, and rl_attempt_multi, in both stores.
SET slidewin.key_prefix = 'regress:algo:';
SET TimeZone = 'UTC';
SET slidewin.redis_retry_interval = 0;
SELECT rl_reset(k) FROM unnest(ARRAY['k', 'shared', 'm', 'mdeny', 'fbk', 'fbm']) AS k;

-- Limit 3 per 10 s, four calls at 00:00:09.9, then a peek at 00:00:13.5.
SET slidewin.test_now = '2030-01-01 00:00:09.9+00';
SELECT a AS algorithm, (r).allowed, (r).remaining, (r).retry_after, (r).reset_at, (r).store, (r).lim, (r).win
  FROM unnest(ARRAY['sliding_log', 'sliding_counter', 'fixed_window', 'token_bucket']) a,
       LATERAL (SELECT rl_attempt('k', 3, '10 seconds', 1, algorithm => a) AS r
                  FROM generate_series(1, 4) OFFSET 0) calls;
SET slidewin.test_now = '2030-01-01 00:00:13.5+00';
SELECT a AS algorithm, (rl_peek('k', 3, '10 seconds', algorithm => a)).*
  FROM unnest(ARRAY['sliding_log', 'sliding_counter', 'fixed_window', 'token_bucket']) a;
-- weighted calls
SELECT a AS algorithm, (rl_attempt('k', 3, '10 seconds', 3, algorithm => a)).allowed
  FROM unnest(ARRAY['sliding_log', 'sliding_counter', 'fixed_window', 'token_bucket']) a;

-- An unknown name is an error listing the valid ones.
SELECT rl_attempt('k', 3, '10 seconds', algorithm => 'leaky');
\echo :LAST_ERROR_SQLSTATE
SELECT rl_peek('k', 3, '10 seconds', algorithm => 'SLIDING_LOG');
SELECT rl_allow('k', 3, '10 seconds', algorithm => NULL);

-- One key used with every algorithm: each keeps its own storage, so none
-- disturbs another. Exhaust the key under sliding_log; the others are full.
SET slidewin.test_now = '2030-01-01 01:00:00+00';
SELECT count(*) FILTER (WHERE rl_allow('shared', 5, '1 minute')) FROM generate_series(1, 9);
SELECT a AS algorithm, (rl_peek('shared', 5, '1 minute', algorithm => a)).remaining
  FROM unnest(ARRAY['sliding_log', 'sliding_counter', 'fixed_window', 'token_bucket']) a;
SELECT count(*) FILTER (WHERE rl_allow('shared', 5, '1 minute', algorithm => 'token_bucket')) FROM generate_series(1, 9);
SELECT (rl_peek('shared', 5, '1 minute')).remaining AS sliding_log_remaining;
-- rl_reset forgets the key under every algorithm
SELECT rl_reset('shared');
SELECT a AS algorithm, (rl_peek('shared', 5, '1 minute', algorithm => a)).remaining
  FROM unnest(ARRAY['sliding_log', 'sliding_counter', 'fixed_window', 'token_bucket']) a;

-- rl_enforce, rl_wait and the trigger take the algorithm too.
SELECT (rl_enforce('shared', 1, '1 minute', algorithm => 'fixed_window')).allowed;
SELECT (rl_enforce('shared', 1, '1 minute', algorithm => 'fixed_window')).allowed;
SELECT (rl_wait('shared', 1, '1 minute', 1, '0 seconds', algorithm => 'fixed_window')).allowed;
CREATE TABLE tb_rows (tenant int);
CREATE TRIGGER tb_rows_quota BEFORE INSERT ON tb_rows
  FOR EACH ROW EXECUTE FUNCTION rl_trigger('tenant', '2', '1 hour', '1', 'algorithm=token_bucket');
INSERT INTO tb_rows VALUES (1), (1);
INSERT INTO tb_rows VALUES (1);
SELECT (rl_peek('public.tb_rows:1', 2, '1 hour', algorithm => 'token_bucket')).remaining;
DROP TABLE tb_rows;
SELECT rl_reset('public.tb_rows:1');

-- rl_attempt_multi: 2 per second and 3 per minute. Admitted only if every
-- window admits; the result describes the most constraining window.
SET slidewin.test_now = '2030-01-01 02:00:00+00';
SELECT g, (r).allowed, (r).remaining, (r).retry_after, (r).reset_at, (r).store, (r).lim, (r).win FROM (SELECT g, rl_attempt_multi('m', ARRAY[2, 3], ARRAY['1 second', '1 minute']::interval[]) AS r
                        FROM generate_series(1, 3) g OFFSET 0) calls;
SET slidewin.test_now = '2030-01-01 02:00:01.5+00';
SELECT g, (r).allowed, (r).remaining, (r).retry_after, (r).reset_at, (r).store, (r).lim, (r).win FROM (SELECT g, rl_attempt_multi('m', ARRAY[2, 3], ARRAY['1 second', '1 minute']::interval[]) AS r
                        FROM generate_series(1, 2) g OFFSET 0) calls;
-- A denied call spends nothing in any window: 2 units fit the minute but
-- not the second, and the minute still has room for them afterwards.
SET slidewin.test_now = '2030-01-01 02:00:10+00';
SELECT allowed, remaining FROM rl_attempt_multi('mdeny', ARRAY[1, 10], ARRAY['1 second', '1 minute']::interval[], 1);
SELECT allowed, remaining FROM rl_attempt_multi('mdeny', ARRAY[2, 10], ARRAY['1 second', '1 minute']::interval[], 2);
SET slidewin.test_now = '2030-01-01 02:00:12+00';
SELECT allowed, remaining FROM rl_attempt_multi('mdeny', ARRAY[2, 10], ARRAY['1 second', '1 minute']::interval[], 2);
-- the minute holds 3 units (1 + 2), not 5: one more fits a limit of 4
SELECT allowed, remaining FROM rl_attempt_multi('mdeny', ARRAY[10, 4], ARRAY['1 second', '1 minute']::interval[], 1);
-- bad input
SELECT rl_attempt_multi('m', ARRAY[2], ARRAY['1 second', '1 minute']::interval[]);
SELECT rl_attempt_multi('m', ARRAY[]::bigint[], ARRAY[]::interval[]);
SELECT rl_attempt_multi('m', ARRAY[1,1,1,1,1,1,1,1,1], array_fill('1 second'::interval, ARRAY[9]));
SELECT rl_attempt_multi('m', ARRAY[2, NULL], ARRAY['1 second', '1 minute']::interval[]);
SELECT rl_attempt_multi('m', ARRAY[2, 3], ARRAY['1 second', NULL]::interval[]);
SELECT rl_attempt_multi('m', ARRAY[2, 0], ARRAY['1 second', '1 minute']::interval[]);
SELECT rl_attempt_multi('m', ARRAY[2, 3], ARRAY['1 second', '1 month']::interval[]);
SELECT rl_attempt_multi('m', ARRAY[2, 5], ARRAY['1 second', '1 minute']::interval[], 3);
SELECT rl_attempt_multi('m', NULL, ARRAY['1 second']::interval[]);
\echo :LAST_ERROR_SQLSTATE
SELECT rl_attempt_multi('m', ARRAY[[1, 2]], ARRAY[['1 second', '1 minute']]::interval[]);

-- The fallback store gives the same answers.
SET slidewin.redis_url = 'redis://127.0.0.1:1';
SET slidewin.test_now = '2030-01-01 00:00:09.9+00';
SELECT a AS algorithm, (r).allowed, (r).remaining, (r).retry_after, (r).reset_at, (r).store, (r).lim, (r).win
  FROM unnest(ARRAY['sliding_log', 'sliding_counter', 'fixed_window', 'token_bucket']) a,
       LATERAL (SELECT rl_attempt('fbk', 3, '10 seconds', 1, algorithm => a) AS r
                  FROM generate_series(1, 4) OFFSET 0) calls;
SET slidewin.test_now = '2030-01-01 00:00:13.5+00';
SELECT a AS algorithm, (rl_peek('fbk', 3, '10 seconds', algorithm => a)).*
  FROM unnest(ARRAY['sliding_log', 'sliding_counter', 'fixed_window', 'token_bucket']) a;
SET slidewin.test_now = '2030-01-01 02:00:00+00';
SELECT g, (r).allowed, (r).remaining, (r).retry_after, (r).reset_at, (r).store, (r).lim, (r).win FROM (SELECT g, rl_attempt_multi('fbm', ARRAY[2, 3], ARRAY['1 second', '1 minute']::interval[]) AS r
                        FROM generate_series(1, 3) g OFFSET 0) calls;
SET slidewin.test_now = '2030-01-01 02:00:01.5+00';
SELECT g, (r).allowed, (r).remaining, (r).retry_after, (r).reset_at, (r).store, (r).lim, (r).win FROM (SELECT g, rl_attempt_multi('fbm', ARRAY[2, 3], ARRAY['1 second', '1 minute']::interval[]) AS r
                        FROM generate_series(1, 2) g OFFSET 0) calls;
SELECT count(*) FROM rl_fallback_state WHERE key = 'regress:algo:fbk';
SELECT count(*) FROM rl_fallback_mlog WHERE key = 'regress:algo:fbm';
SELECT rl_reset('fbk'), rl_reset('fbm');
SELECT (SELECT count(*) FROM rl_fallback_state WHERE key = 'regress:algo:fbk') AS state_rows,
       (SELECT count(*) FROM rl_fallback_mlog WHERE key = 'regress:algo:fbm') AS mlog_rows;
RESET slidewin.redis_url;
SELECT rl_reset(k) FROM unnest(ARRAY['k', 'shared', 'm', 'mdeny']) AS k;
