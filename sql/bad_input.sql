-- Bad input: a clear ERROR naming the argument, never a NULL or an admission.
SET slidewin.key_prefix = 'regress:bad:';
SET slidewin.test_now = '2030-01-01 00:00:00+00';
SELECT rl_reset('b');

-- NULL anywhere: 22004
SELECT rl_attempt(NULL, 1, '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT rl_attempt('b', NULL, '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT rl_attempt('b', 1, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT rl_attempt('b', 1, '1 minute', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT rl_allow('b', 1, '1 minute', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT rl_peek('b', 1, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT rl_batch_held(NULL, 1, '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT rl_reset(NULL);
\echo :LAST_ERROR_SQLSTATE

-- out of range: 22023
SELECT rl_attempt('b', 0, '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT rl_attempt('b', -5, '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT rl_attempt('b', 2251799813685249, '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT rl_attempt('b', 10, '1 minute', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT rl_attempt('b', 10, '1 minute', -1);
\echo :LAST_ERROR_SQLSTATE
SELECT rl_attempt('b', 10, '1 minute', 11);
\echo :LAST_ERROR_SQLSTATE
SELECT rl_attempt('b', 10, '0 seconds');
\echo :LAST_ERROR_SQLSTATE
SELECT rl_attempt('b', 10, '-1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT rl_attempt('b', 10, '1 day -24 hours');
\echo :LAST_ERROR_SQLSTATE
SELECT rl_attempt('b', 10, '1 month');
\echo :LAST_ERROR_SQLSTATE
SELECT rl_attempt('b', 10, '1 year');
\echo :LAST_ERROR_SQLSTATE
SELECT rl_attempt('b', 10, '3651 days');
\echo :LAST_ERROR_SQLSTATE
SELECT rl_peek('b', 10, '1 mon');
\echo :LAST_ERROR_SQLSTATE
SELECT rl_batch_held('b', 0, '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT rl_batch_held('b', 10, '-1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT rl_attempt('', 10, '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT rl_attempt(repeat('x', 1025), 10, '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT rl_reset('');
\echo :LAST_ERROR_SQLSTATE

-- none of the above recorded anything
SELECT allowed, remaining FROM rl_peek('b', 10, '1 minute');

-- the edges that are allowed
SELECT allowed, remaining FROM rl_attempt(repeat('x', 1024), 10, '1 minute');
SELECT allowed, remaining FROM rl_attempt('b', 10, '1 minute', 10);
SELECT allowed, remaining FROM rl_attempt('b2', 1, '1 microsecond');
SELECT allowed, remaining FROM rl_attempt('b3', 1, '3650 days');
SELECT allowed, remaining FROM rl_attempt('b4', 1, '1 day 2 hours');
SELECT rl_reset(repeat('x', 1024)), rl_reset('b'), rl_reset('b2'), rl_reset('b3'), rl_reset('b4');

-- a bad test clock is reported, not ignored
SET slidewin.test_now = 'not a time';
SELECT rl_attempt('b', 10, '1 minute');
\echo :LAST_ERROR_SQLSTATE
SET slidewin.test_now = 'infinity';
SELECT rl_attempt('b', 10, '1 minute');
\echo :LAST_ERROR_SQLSTATE
