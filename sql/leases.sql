-- Concurrency slots (rl_acquire): held until the transaction, or the
-- subtransaction that took them, ends. Several holders at once are in the
-- isolation spec leases and TAP 056.
SET slidewin.key_prefix = 'regress:ls:';
SET TimeZone = 'UTC';
SELECT slot_acquisitions, slot_denials, slot_waits, slot_releases, slot_leases_ended,
       slot_releases_lost FROM rl_stats \gset before_
SELECT coalesce(sum(calls), 0) AS calls, coalesce(sum(admitted), 0) AS admitted
  FROM rl_stats_rules WHERE algorithm = 'concurrency' AND lim = 2 AND win = '2 seconds' \gset rule_

-- Bad input: 22004 or 22023, naming the argument.
SELECT * FROM rl_acquire(NULL, 3);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rl_acquire('', 3);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rl_acquire('k', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rl_acquire('k', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rl_acquire('k', 10001);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rl_acquire('k', 3, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rl_acquire('k', 3, '-1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rl_acquire('k', 3, '0');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rl_acquire('k', 3, '1 month');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rl_acquire('k', 3, '2 days');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rl_acquire('k', 3, timeout => '-1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rl_acquire('k', 3, timeout => NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rl_acquire('k', 3, timeout => '2 hours');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rl_acquire('k', 3, on_redis_error => 'maybe');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rl_acquire('k', 3, raise => NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT rl_release(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT rl_renew('');
\echo :LAST_ERROR_SQLSTATE
SELECT rl_holders(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT rl_holders('k', 'maybe');
\echo :LAST_ERROR_SQLSTATE

-- Held until COMMIT; a second acquire of the key in the same transaction
-- holds no second slot (and says acquired, with the holders as they are).
BEGIN;
SELECT * FROM rl_acquire('a', 2);
SELECT * FROM rl_acquire('a', 2);
SELECT rl_holders('a') AS holders_inside;
COMMIT;
SELECT rl_holders('a') AS holders_after_commit;

-- ... and until ROLLBACK
BEGIN;
SELECT acquired, holders FROM rl_acquire('a', 2);
ROLLBACK;
SELECT rl_holders('a') AS holders_after_rollback;

-- A slot taken in a subtransaction goes with its ROLLBACK TO SAVEPOINT, and
-- stays with its parent when it is released (RELEASE SAVEPOINT).
BEGIN;
SAVEPOINT s;
SELECT acquired FROM rl_acquire('a', 2);
ROLLBACK TO SAVEPOINT s;
SELECT rl_holders('a') AS holders_after_rollback_to;
SAVEPOINT t;
SELECT acquired FROM rl_acquire('a', 2);
RELEASE SAVEPOINT t;
SELECT rl_holders('a') AS holders_after_release_savepoint;
COMMIT;
SELECT rl_holders('a') AS holders_after_commit;

-- An error in a PL/pgSQL block with an exception handler undoes the block:
-- its slot goes.
DO $$
BEGIN
  BEGIN
    PERFORM rl_acquire('a', 2);
    RAISE NOTICE 'inside the block: % holder(s)', rl_holders('a');
    RAISE EXCEPTION 'failed';
  EXCEPTION WHEN raise_exception THEN
    RAISE NOTICE 'after the error: % holder(s)', rl_holders('a');
  END;
END $$;

-- A single-statement transaction releases at its end too.
SELECT acquired, holders FROM rl_acquire('a', 2);
SELECT rl_holders('a') AS holders_after_autocommit;

-- rl_release gives the slot back at once, and says whether there was one.
BEGIN;
SELECT acquired FROM rl_acquire('a', 2);
SELECT rl_release('a') AS released, rl_holders('a') AS holders;
SELECT rl_release('a') AS released_again;
SELECT acquired, holders FROM rl_acquire('a', 2);
COMMIT;
SELECT rl_holders('a') AS holders_after_commit;

-- Leases, on the test clock: a holder that outlives its lease loses its
-- slot unless it renews it.
SET slidewin.test_now = '2030-01-01 00:00:00+00';
BEGIN;
SELECT acquired FROM rl_acquire('b', 2, lease => '2 seconds');
SET LOCAL slidewin.test_now = '2030-01-01 00:00:01.5+00';
SELECT rl_renew('b') AS renewed;
SET LOCAL slidewin.test_now = '2030-01-01 00:00:03+00';
SELECT rl_holders('b') AS holders_renewed;
SET LOCAL slidewin.test_now = '2030-01-01 00:00:03.6+00';
SELECT rl_holders('b') AS holders_after_lease;
SELECT rl_renew('b') AS renewed_too_late;
-- a new acquisition takes a slot again (the old holding is gone)
SELECT acquired, holders FROM rl_acquire('b', 2, lease => '2 seconds');
COMMIT;
SELECT rl_holders('b') AS holders_after_commit;
RESET slidewin.test_now;
SELECT rl_renew('b') AS renew_without_slot;

-- Two-phase commit cannot carry a slot: PREPARE refuses it.
BEGIN;
SELECT acquired FROM rl_acquire('c', 2);
PREPARE TRANSACTION 'regress_ls';
SELECT rl_holders('c') AS holders_after_refused_prepare;

-- Redis unreachable: the call's policy. The fallback holds slots in
-- PostgreSQL's lock manager, until the transaction ends.
SET slidewin.redis_retry_interval = 0;
SET slidewin.redis_url = 'redis://127.0.0.1:1';
BEGIN;
SELECT * FROM rl_acquire('f', 1, on_redis_error => 'fallback');
SELECT * FROM rl_acquire('f', 1, on_redis_error => 'fallback');
SELECT rl_holders('f', 'fallback') AS holders;
SELECT rl_renew('f') AS fallback_renew;
SELECT rl_release('f') AS released, rl_holders('f', 'fallback') AS holders;
SELECT * FROM rl_acquire('f', 1, on_redis_error => 'fallback');
COMMIT;
SELECT rl_holders('f', 'fallback') AS holders_after_commit;
BEGIN;
SAVEPOINT s;
SELECT acquired FROM rl_acquire('f', 1, on_redis_error => 'fallback');
ROLLBACK TO SAVEPOINT s;
SELECT rl_holders('f', 'fallback') AS holders_after_rollback_to;
COMMIT;
SELECT * FROM rl_acquire('f', 1, on_redis_error => 'allow');
SELECT * FROM rl_acquire('f', 1, on_redis_error => 'deny');
SELECT * FROM rl_acquire('f', 1, on_redis_error => 'deny', raise => true);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rl_acquire('f', 1, on_redis_error => 'error');
\echo :LAST_ERROR_SQLSTATE
SELECT rl_holders('f', 'allow') IS NULL AS holders_unknown;
RESET slidewin.redis_url;

-- rl_stats counts what happened here: acquisitions (the repeated ones too),
-- denials, releases (by COMMIT, ROLLBACK, ROLLBACK TO, rl_release, in either
-- store), the lease found ended; rl_stats_rules has the rule (concurrency,
-- max, lease).
SELECT slot_acquisitions - :before_slot_acquisitions AS acquisitions,
       slot_denials - :before_slot_denials AS denials,
       slot_waits - :before_slot_waits AS waits,
       slot_releases - :before_slot_releases AS releases,
       slot_leases_ended - :before_slot_leases_ended AS leases_ended,
       slot_releases_lost - :before_slot_releases_lost AS releases_lost
  FROM rl_stats;
SELECT algorithm, lim, win, calls - :rule_calls AS calls, admitted - :rule_admitted AS admitted
  FROM rl_stats_rules WHERE algorithm = 'concurrency' AND lim = 2 AND win = '2 seconds';
