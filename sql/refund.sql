-- refund_on_abort: Redis units admitted in an aborted (sub)transaction are
-- given back; by default they stay spent, like a sequence value.
SET slidewin.key_prefix = 'regress:ref:';
SET slidewin.test_now = '2030-01-01 00:00:00+00';
SELECT rl_reset('r' || i) FROM generate_series(1, 10) i;
SELECT * FROM rl_backend_stats();

-- default: spent at once, whatever happens to the transaction
BEGIN;
SELECT remaining, store FROM rl_attempt('r1', 5, '1 hour', 2);
ROLLBACK;
SELECT remaining FROM rl_peek('r1', 5, '1 hour');

-- per call: rollback gives back, commit keeps
BEGIN;
SELECT remaining FROM rl_attempt('r2', 5, '1 hour', 2, refund_on_abort => true);
SELECT remaining FROM rl_attempt('r2', 5, '1 hour', 1, refund_on_abort => true);
ROLLBACK;
SELECT remaining FROM rl_peek('r2', 5, '1 hour');
BEGIN;
SELECT remaining FROM rl_attempt('r2', 5, '1 hour', 2, refund_on_abort => true);
COMMIT;
SELECT remaining FROM rl_peek('r2', 5, '1 hour');

-- ROLLBACK TO SAVEPOINT gives back only what was admitted after it
BEGIN;
SELECT remaining FROM rl_attempt('r3', 5, '1 hour', 1, refund_on_abort => true);
SAVEPOINT s;
SELECT remaining FROM rl_attempt('r3', 5, '1 hour', 2, refund_on_abort => true);
SAVEPOINT t;
SELECT remaining FROM rl_attempt('r3', 5, '1 hour', 1, refund_on_abort => true);
RELEASE SAVEPOINT t;
ROLLBACK TO SAVEPOINT s;
SELECT remaining FROM rl_attempt('r3', 5, '1 hour', 1, refund_on_abort => true);
COMMIT;
SELECT remaining FROM rl_peek('r3', 5, '1 hour');

-- An error inside a PL/pgSQL EXCEPTION block gives back that block's units.
DO $$
BEGIN
  PERFORM rl_attempt('r4', 5, '1 hour', 1, refund_on_abort => true);
  BEGIN
    PERFORM rl_attempt('r4', 5, '1 hour', 3, refund_on_abort => true);
    RAISE EXCEPTION 'the work failed';
  EXCEPTION WHEN raise_exception THEN
    RAISE NOTICE 'block failed; % units left', (rl_peek('r4', 5, '1 hour')).remaining;
  END;
END $$;
SELECT remaining FROM rl_peek('r4', 5, '1 hour');

-- A refund from the middle of the log leaves later entries counted exactly:
-- 1 kept, 2 given back, 3 kept (no refund asked), so 4 of 10 are used.
BEGIN;
SELECT remaining FROM rl_attempt('r5', 10, '1 hour', 1);
SAVEPOINT s;
SELECT remaining FROM rl_attempt('r5', 10, '1 hour', 2, refund_on_abort => true);
SELECT remaining FROM rl_attempt('r5', 10, '1 hour', 3);
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT remaining FROM rl_peek('r5', 10, '1 hour');
SELECT allowed, remaining FROM rl_attempt('r5', 10, '1 hour', 6);
SELECT allowed, remaining FROM rl_attempt('r5', 10, '1 hour', 1);

-- The setting turns it on for every call; the argument overrides it.
SET slidewin.refund_on_abort = on;
BEGIN;
SELECT remaining FROM rl_attempt('r6', 5, '1 hour', 2);
SELECT remaining FROM rl_attempt('r6', 5, '1 hour', 1, refund_on_abort => false);
ROLLBACK;
SELECT remaining FROM rl_peek('r6', 5, '1 hour');
RESET slidewin.refund_on_abort;

-- A prepared transaction keeps its units, whatever its fate.
BEGIN;
SELECT remaining FROM rl_attempt('r7', 5, '1 hour', 2, refund_on_abort => true);
PREPARE TRANSACTION 'regress_slidewin_refund';
ROLLBACK PREPARED 'regress_slidewin_refund';
SELECT remaining FROM rl_peek('r7', 5, '1 hour');

-- A unit that has left the window has nothing to give back (the abort sees
-- the transaction's own clock).
BEGIN;
SELECT remaining FROM rl_attempt('r8', 5, '1 second', 1, refund_on_abort => true);
SET LOCAL slidewin.test_now = '2030-01-01 00:00:10+00';
SELECT remaining FROM rl_attempt('r8', 5, '1 second', 1);
ROLLBACK;
-- back at the original clock, the first unit is still there
SELECT remaining FROM rl_peek('r8', 5, '1 second');

-- rl_enforce and rl_wait take the argument too.
BEGIN;
SELECT remaining FROM rl_enforce('r9', 3, '1 hour', 2, refund_on_abort => true);
SELECT remaining FROM rl_wait('r9', 3, '1 hour', 1, '0 seconds', refund_on_abort => true);
ROLLBACK;
SELECT remaining FROM rl_peek('r9', 3, '1 hour');

-- A refund that cannot be sent at abort (no connection is open: here the
-- transaction pointed slidewin at another server, which closed the
-- connection) waits in this backend and goes first at its next command:
-- the units come back. (The abort sees the transaction's own settings.)
SET slidewin.redis_retry_interval = 0;
BEGIN;
SELECT remaining FROM rl_attempt('r10', 5, '1 hour', 2, refund_on_abort => true);
SET LOCAL slidewin.redis_url = 'redis://127.0.0.1:1';
ROLLBACK;
SELECT remaining FROM rl_peek('r10', 5, '1 hour');

-- A waiting refund whose server is no longer the one slidewin.redis_url
-- names (here: another database of the same Redis; under a Redis Cluster,
-- which has database 0 only, the same seeds named in the other order, which
-- slidewin cannot tell from another cluster) is dropped, so the units stay
-- spent: the safe direction. A WARNING says so, and it is counted.
SELECT CASE WHEN current_setting('slidewin.redis_url') LIKE 'redis-cluster://%'
       THEN regexp_replace(current_setting('slidewin.redis_url'),
                           '^redis-cluster://([^,]*),(.*)$', 'redis-cluster://\2,\1')
       ELSE current_setting('slidewin.redis_url') || '/1' END AS other_db \gset
BEGIN;
SELECT remaining FROM rl_attempt('r10', 5, '1 hour', 2, refund_on_abort => true);
SET LOCAL slidewin.redis_url = 'redis://127.0.0.1:1';
ROLLBACK;
SET slidewin.redis_url = :'other_db';
\set VERBOSITY terse
-- any call to the other server runs the refund hook, which drops the refund
-- (a key of its own: under Cluster the "other server" holds r10 too)
SELECT remaining FROM rl_peek('r10:elsewhere', 5, '1 hour');
\set VERBOSITY default
RESET slidewin.redis_url;
SELECT remaining FROM rl_peek('r10', 5, '1 hour');

SELECT * FROM rl_backend_stats();
SELECT rl_reset('r' || i) FROM generate_series(1, 10) i;
