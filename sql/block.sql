-- rl_block and rl_unblock: a block denies every call on its key, in every
-- algorithm and entry point, until it ends, and spends nothing; rl_unblock
-- lifts it. On a fixed test clock, in both stores.
SET slidewin.key_prefix = 'regress:block:';
SET slidewin.test_now = '2030-01-01 00:00:00+00';
SET TimeZone = 'UTC';
SET slidewin.redis_retry_interval = 0;
-- a run that failed half-way may have left blocks behind
SELECT count(*) AS keys_cleared
  FROM unnest(ARRAY['b1', 'b2', 'b3', 'b4', 'b5', 'b6', 'b7', 'b8', 'b9', 'algo', 'multi',
                    'wait', 'shadow', 'f1', 'f2', 'f3', 'f4', 'f5']) AS k,
       LATERAL (SELECT rl_reset(k), rl_unblock(k)) r;

-- A sliding log with 2 of 5 units used, blocked for 10 minutes: the block's
-- end comes back, and every call until then is denied with nothing left and
-- a retry_after that runs to the end, and records nothing.
SELECT allowed, remaining FROM rl_attempt('b1', 5, '1 hour', 2);
SELECT rl_block('b1', '10 minutes');
SELECT allowed, remaining, retry_after, reset_at, store, lim, win, ticket
  FROM rl_attempt('b1', 5, '1 hour');
SELECT allowed, remaining, retry_after, reset_at, store FROM rl_peek('b1', 5, '1 hour');
SELECT rl_allow('b1', 5, '1 hour');
SET slidewin.test_now = '2030-01-01 00:09:59.999999+00';
SELECT allowed, remaining, retry_after FROM rl_attempt('b1', 5, '1 hour');
-- the block ends at 00:10:00 exactly; the denied calls spent nothing: 3 left
SET slidewin.test_now = '2030-01-01 00:10:00+00';
SELECT allowed, remaining, retry_after, store FROM rl_peek('b1', 5, '1 hour');
SELECT allowed, remaining, retry_after, store FROM rl_attempt('b1', 5, '1 hour', 3);
-- an ended block has nothing to lift
SELECT rl_unblock('b1');

-- Every algorithm, and rl_attempt_multi: one call admitted, then the block
-- (it blocks the key, whatever algorithm it is called with), then denied;
-- rl_unblock lifts it at once and the next call is admitted.
SET slidewin.test_now = '2030-01-01 01:00:00+00';
SELECT a AS algorithm, allowed, remaining
  FROM unnest(ARRAY['sliding_log', 'sliding_counter', 'fixed_window', 'token_bucket']) a,
       LATERAL rl_attempt('algo', 3, '1 minute', 1, algorithm => a);
SELECT allowed, remaining FROM rl_attempt_multi('multi', ARRAY[3, 10], ARRAY['1 minute', '1 hour']::interval[]);
SELECT rl_block('algo', '90 seconds'), rl_block('multi', '90 seconds');
SELECT a AS algorithm, r.allowed, r.remaining, r.retry_after, r.store,
       p.allowed AS peek_allowed, p.remaining AS peek_remaining, p.retry_after AS peek_retry_after
  FROM unnest(ARRAY['sliding_log', 'sliding_counter', 'fixed_window', 'token_bucket']) a,
       LATERAL rl_attempt('algo', 3, '1 minute', 1, algorithm => a) r,
       LATERAL rl_peek('algo', 3, '1 minute', algorithm => a) p;
SELECT allowed, remaining, retry_after, store, lim, win
  FROM rl_attempt_multi('multi', ARRAY[3, 10], ARRAY['1 minute', '1 hour']::interval[]);
SELECT rl_unblock('algo'), rl_unblock('multi');
SELECT rl_unblock('algo');
-- nothing was spent while blocked: each has 2 left before this call
SELECT a AS algorithm, allowed, remaining
  FROM unnest(ARRAY['sliding_log', 'sliding_counter', 'fixed_window', 'token_bucket']) a,
       LATERAL rl_attempt('algo', 3, '1 minute', 1, algorithm => a);
SELECT allowed, remaining, lim, win
  FROM rl_attempt_multi('multi', ARRAY[3, 10], ARRAY['1 minute', '1 hour']::interval[]);

-- retry_after is never shorter than the block, nor than the limit's own
-- wait: 1 unit per hour, spent at 02:00, blocked for 10 minutes at 02:30.
SET slidewin.test_now = '2030-01-01 02:00:00+00';
SELECT allowed FROM rl_attempt('b2', 1, '1 hour');
SET slidewin.test_now = '2030-01-01 02:30:00+00';
SELECT rl_block('b2', '10 minutes');
SELECT allowed, remaining, retry_after FROM rl_attempt('b2', 1, '1 hour');
SELECT allowed, remaining, retry_after FROM rl_attempt('b2', 1, '1 hour', algorithm => 'fixed_window');
-- the fixed window of 02:00 is empty: only the block denies it
SELECT allowed, remaining, retry_after FROM rl_peek('b2', 1, '1 hour', algorithm => 'fixed_window');

-- A block extends, never shortens: a shorter one leaves the end where it
-- is, a longer one moves it later.
SET slidewin.test_now = '2030-01-01 03:00:00+00';
SELECT rl_block('b3', '1 hour');
SELECT rl_block('b3', '10 minutes');
SET slidewin.test_now = '2030-01-01 03:30:00+00';
SELECT rl_block('b3', '5 minutes');
SELECT retry_after FROM rl_peek('b3', 5, '1 minute');
SELECT rl_block('b3', '2 hours');
SELECT retry_after FROM rl_peek('b3', 5, '1 minute');
-- to shorten one, lift it and block again
SELECT rl_unblock('b3'), rl_block('b3', '1 minute');
SELECT retry_after FROM rl_peek('b3', 5, '1 minute');

-- A denial of the blocked key is cached (the deny cache: the same call is
-- answered without asking Redis); rl_unblock voids it, so the next call is
-- admitted at once.
SET slidewin.test_now = '2030-01-01 04:00:00+00';
SELECT rl_block('b4', '1 day');
SELECT allowed, retry_after FROM rl_attempt('b4', 5, '1 minute');
SELECT allowed, retry_after FROM rl_attempt('b4', 5, '1 minute');
SELECT rl_unblock('b4');
SELECT allowed, remaining FROM rl_attempt('b4', 5, '1 minute');

-- rl_enforce raises RL429 on a blocked key, saying so.
SELECT rl_block('b5', '30 seconds');
SELECT allowed FROM rl_enforce('b5', 5, '1 minute');
\echo :LAST_ERROR_SQLSTATE
-- and so does a trigger
CREATE TABLE block_jobs (tenant text);
CREATE TRIGGER block_jobs_quota BEFORE INSERT ON block_jobs
  FOR EACH ROW EXECUTE FUNCTION rl_trigger('tenant', '5', '1 minute');
INSERT INTO block_jobs VALUES ('t');
SELECT rl_block('public.block_jobs:t', '1 minute');
INSERT INTO block_jobs VALUES ('t');
\echo :LAST_ERROR_SQLSTATE
SELECT rl_unblock('public.block_jobs:t');
INSERT INTO block_jobs VALUES ('t');
SELECT count(*) FROM block_jobs;
DROP TABLE block_jobs;
SELECT rl_reset('public.block_jobs:t');

-- The block's end is on the call's clock: it expires when the clock passes it.
SET slidewin.test_now = '2030-01-01 05:00:00+00';
SELECT rl_block('b6', '1 minute');
SET slidewin.test_now = '2030-01-01 05:01:00+00';
SELECT allowed, remaining FROM rl_attempt('b6', 5, '1 minute');
SELECT rl_unblock('b6');

-- rl_wait on a blocked key, on Redis's clock: a timeout shorter than the
-- block ends denied, with a retry_after that runs to the block's end; a
-- longer one is admitted once the block has ended.
RESET slidewin.test_now;
SELECT clock_timestamp() AS t0 \gset
SELECT rl_block('wait', '2 seconds') > now() AS ends_later;
SELECT allowed, retry_after > '1 second' AS retry_runs_to_the_end
  FROM rl_wait('wait', 5, '1 minute', timeout => '100 milliseconds');
SELECT allowed, remaining FROM rl_wait('wait', 5, '1 minute', timeout => '10 seconds');
SELECT clock_timestamp() - :'t0' >= '1.9 seconds' AS admitted_after_the_block;

-- Shadow mode (slidewin.enforce = off) enforces no denial, a block's
-- neither: the call is admitted and recorded, and reports the wait it would
-- have had.
SET slidewin.test_now = '2030-01-01 06:00:00+00';
SELECT rl_block('shadow', '1 minute');
SET slidewin.enforce = off;
SELECT allowed, remaining, retry_after FROM rl_attempt('shadow', 5, '1 minute');
RESET slidewin.enforce;
SELECT rl_unblock('shadow');
SELECT remaining FROM rl_peek('shadow', 5, '1 minute');

-- Bad input: 22004 for a NULL, 22023 for the rest, each naming the argument.
SELECT rl_block(NULL, '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT rl_block('b7', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT rl_block('', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT rl_block(repeat('x', 1025), '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT rl_block('b7', '0');
\echo :LAST_ERROR_SQLSTATE
SELECT rl_block('b7', '-1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT rl_block('b7', '1 month');
\echo :LAST_ERROR_SQLSTATE
SELECT rl_block('b7', '3651 days');
\echo :LAST_ERROR_SQLSTATE
SELECT rl_unblock(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT rl_unblock('');
\echo :LAST_ERROR_SQLSTATE
-- the longest block is 3650 days
SELECT rl_block('b7', '3650 days');
SELECT rl_unblock('b7');

-- Not PUBLIC's: an ordinary role gets 42501 until it is granted EXECUTE.
CREATE ROLE regress_block_user;
SELECT has_function_privilege('public', 'rl_block(text, interval)', 'EXECUTE') AS public_may_block,
       has_function_privilege('public', 'rl_unblock(text)', 'EXECUTE') AS public_may_unblock;
SET ROLE regress_block_user;
SELECT rl_block('b8', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT rl_unblock('b8');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
GRANT EXECUTE ON FUNCTION rl_block(text, interval), rl_unblock(text) TO regress_block_user;
SET ROLE regress_block_user;
SELECT rl_block('b8', '1 minute');
SELECT rl_unblock('b8');
RESET ROLE;
REVOKE EXECUTE ON FUNCTION rl_block(text, interval), rl_unblock(text) FROM regress_block_user;
DROP ROLE regress_block_user;

-- The fallback store. A block set while Redis answers is written to both
-- stores, so it still holds while Redis cannot answer.
SET slidewin.test_now = '2030-01-01 07:00:00+00';
SELECT rl_block('f1', '10 minutes'), rl_block('f4', '2 hours');
SELECT key, until FROM rl_fallback_block WHERE key = 'regress:block:f1';
SET slidewin.redis_url = 'redis://127.0.0.1:1';
SET slidewin.test_now = '2030-01-01 07:05:00+00';
SELECT a AS algorithm, r.allowed, r.remaining, r.retry_after, r.store,
       p.allowed AS peek_allowed, p.retry_after AS peek_retry_after, p.store AS peek_store
  FROM unnest(ARRAY['sliding_log', 'sliding_counter', 'fixed_window', 'token_bucket']) a,
       LATERAL rl_attempt('f1', 3, '1 minute', 1, algorithm => a) r,
       LATERAL rl_peek('f1', 3, '1 minute', algorithm => a) p;
SELECT allowed, remaining, retry_after, store
  FROM rl_attempt_multi('f1', ARRAY[3, 10], ARRAY['1 minute', '1 hour']::interval[]);
-- nothing was recorded in the fallback store either
SELECT (SELECT count(*) FROM rl_fallback_log WHERE key = 'regress:block:f1') AS log_rows,
       (SELECT count(*) FROM rl_fallback_mlog WHERE key = 'regress:block:f1') AS mlog_rows,
       (SELECT count(*) FROM rl_fallback_state WHERE key = 'regress:block:f1') AS state_rows;
-- Redis cannot answer: rl_block writes the block to the fallback store
-- alone, with a WARNING (like rl_reset), and returns its end. The limit's
-- own wait counts there too: 1 per hour, spent, then blocked for 1 minute.
SELECT allowed, store FROM rl_attempt('f2', 1, '1 hour');
SELECT rl_block('f2', '1 minute');
SELECT allowed, remaining, retry_after, store FROM rl_attempt('f2', 1, '1 hour');
-- it extends, never shortens, there too
SELECT rl_block('f3', '2 minutes');
SELECT rl_block('f3', '30 seconds');
SELECT allowed, remaining, retry_after, store FROM rl_peek('f3', 1, '1 hour');
-- an ended block is ignored
SET slidewin.test_now = '2030-01-01 07:07:00+00';
SELECT allowed, store FROM rl_attempt('f3', 1, '1 hour');
-- rl_unblock lifts the fallback store's block of f4 (set at 07:00, while
-- Redis answered), and warns that Redis's stays
SELECT allowed, store FROM rl_attempt('f4', 5, '1 hour');
SELECT rl_unblock('f4');
SELECT allowed, store FROM rl_attempt('f4', 5, '1 hour');
SELECT rl_unblock('f4');
-- rl_block deletes the rows of blocks that have ended (f2's and f3's, at
-- 07:07): f1 is the only one left
SELECT rl_block('f5', '1 minute');
SELECT rl_unblock('f5');
SELECT key FROM rl_fallback_block WHERE key LIKE 'regress:block:%' ORDER BY key;
-- under on_redis_error = error, rl_block and rl_unblock fail, and write nothing
SET slidewin.on_redis_error = error;
SELECT rl_block('f5', '1 hour');
\echo :LAST_ERROR_SQLSTATE
SELECT rl_unblock('f1');
\echo :LAST_ERROR_SQLSTATE
RESET slidewin.on_redis_error;
SELECT key FROM rl_fallback_block WHERE key LIKE 'regress:block:%' ORDER BY key;
-- Redis again: f1's block is there too, and so is f4's, which rl_unblock
-- could not lift in Redis during the outage
RESET slidewin.redis_url;
SET slidewin.test_now = '2030-01-01 07:08:00+00';
SELECT allowed, retry_after, store FROM rl_attempt('f1', 100, '1 hour', 1, algorithm => 'fixed_window');
SELECT allowed, retry_after, store FROM rl_attempt('f4', 100, '1 hour', 1, algorithm => 'fixed_window');
SELECT rl_unblock('f4');
SELECT count(*) AS keys_cleared
  FROM unnest(ARRAY['f1', 'f2', 'f3', 'f4', 'f5']) AS k,
       LATERAL (SELECT rl_reset(k), rl_unblock(k)) r;
SELECT count(*) AS rows_left FROM rl_fallback_block WHERE key LIKE 'regress:block:%';
