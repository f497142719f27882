-- The fallback table stays bounded by the live windows, and a denied call
-- costs a few index descents whatever the units it asks for.
SET slidewin.key_prefix = 'regress:fbc:';
SET TimeZone = 'UTC';
SET slidewin.redis_retry_interval = 0;
SET slidewin.redis_url = 'redis://127.0.0.1:1';
-- start from an empty store, so that only this file's rows are counted
TRUNCATE rl_fallback_log, rl_fallback_head;
-- Since 1.18 a key gets a head only once two of its writers meet
-- (slidewin.fallback_heads = contended, the default): one session calling
-- 20 keys 3 times each writes none.
SELECT count(*) FILTER (WHERE rl_allow('lone' || (g % 20), 100, '1 hour')) AS admitted
  FROM generate_series(1, 60) g;
SELECT count(*) AS lone_heads FROM rl_fallback_head;
TRUNCATE rl_fallback_log, rl_fallback_head;
-- The rest of this file counts heads and the index entries read beside
-- them: each key gets its head at its second admission in a window, as
-- before 1.18.
SET slidewin.fallback_heads = always;

-- Two keys that are never called again: 20 calls with a 1 s window,
-- 10 with a 1 h window.
SET slidewin.test_now = '2031-01-01 00:00:00+00';
SELECT count(*) FILTER (WHERE rl_allow('idle_short', 100, '1 second')) FROM generate_series(1, 20);
SELECT count(*) FILTER (WHERE rl_allow('idle_long', 100, '1 hour')) FROM generate_series(1, 10);
SELECT key, count(*) FROM rl_fallback_log GROUP BY key ORDER BY key;
-- Ten seconds later, calls on another key delete the rows of idle_short
-- (a backend sweeps a heap page every 32 to 64 admitting calls: within
-- 64 calls, the table's one page), and leave idle_long, whose window is
-- still open.
SET slidewin.test_now = '2031-01-01 00:00:10+00';
SELECT count(*) FILTER (WHERE rl_allow('busy', 100, '1 second')) FROM generate_series(1, 64);
SELECT key, count(*) FROM rl_fallback_log GROUP BY key ORDER BY key;

-- Under steady load on rotating keys, the table never holds more than the
-- live windows: 3,000 calls 10 ms apart on 50 keys with a 1 s window keep
-- about 100 rows alive; idle keys' rows left over from earlier go too.
DO $$
DECLARE
  most bigint := 0;
  n bigint;
BEGIN
  FOR i IN 0..2999 LOOP
    PERFORM set_config('slidewin.test_now',
                       (timestamptz '2031-01-01 01:00:00+00' + i * interval '10 ms')::text, false);
    IF NOT rl_allow('rot' || (i % 50), 1000, '1 second') THEN
      RAISE EXCEPTION 'call % was denied', i;
    END IF;
    IF i % 100 = 99 THEN
      SELECT count(*) INTO n FROM rl_fallback_log;
      most := greatest(most, n);
    END IF;
  END LOOP;
  RAISE NOTICE 'most rows seen: %', most;
END $$;
SELECT count(*) AS rows_left, count(*) FILTER (WHERE key LIKE '%idle%') AS idle_rows_left
  FROM rl_fallback_log;
-- and the keys' heads likewise: one per live key, none for the idle ones
SELECT count(*) AS heads_left, count(*) FILTER (WHERE key LIKE '%idle%') AS idle_heads_left
  FROM rl_fallback_head;
-- A key whose head was swept gets a new one at its next call, which
-- counts from the log as before: idle_short, 3 calls at a limit of 2.
SELECT count(*) FILTER (WHERE rl_allow('idle_short', 2, '1 second')) AS admitted FROM generate_series(1, 3);
SELECT log, total > 0 AS continues FROM rl_fallback_head WHERE key = 'regress:fbc:idle_short';

-- A denied call finds its retry time without a walk over the units it
-- needs: 1,000 rows of cost 1, then a call of cost 500. Since 1.16 the
-- (key, ts) index returns the window's first row (for the state; the newest
-- row's total comes from the key's head), then at most 32 rows walked, then
-- one row per halving of the times between the last row walked and the
-- newest (the rows span 1 ms here: about 10 halvings), not 500 rows.
SET slidewin.test_now = '2031-01-02 00:00:00+00';
SELECT count(*) FILTER (WHERE rl_allow('deep', 1000, '1 hour')) FROM generate_series(1, 1000);
BEGIN;
SELECT pg_stat_get_xact_tuples_returned('rl_fallback_log_key_ts'::regclass) AS ts_before \gset
SELECT allowed, remaining, retry_after FROM rl_attempt('deep', 1000, '1 hour', 500);
SELECT pg_stat_get_xact_tuples_returned('rl_fallback_log_key_ts'::regclass) - :ts_before AS key_ts_entries_read,
       pg_stat_get_xact_tuples_returned('rl_fallback_log_key_ts'::regclass) - :ts_before <= 1 + 32 + 11 AS bounded;
COMMIT;
SELECT allowed, remaining, retry_after FROM rl_peek('deep', 1000, '1 hour');

-- Totals keep growing across an emptied window (they never restart under
-- rows a concurrent sweep may still be deleting), and counting stays exact.
SET slidewin.test_now = '2031-01-02 02:00:00+00';
SELECT allowed, remaining FROM rl_attempt('deep', 1000, '1 hour', 999);
SELECT allowed, remaining FROM rl_attempt('deep', 1000, '1 hour', 2);
SELECT count(*), min(total), max(total) FROM rl_fallback_log WHERE key = 'regress:fbc:deep';

-- Once Redis answers again, the backend that wrote fallback rows deletes the
-- expired ones, a heap page of each table per Redis call, until it has read
-- as many pages in a row without one as the table has: 600 rows fill
-- several pages, and as many calls as there are pages read them all (the
-- server's backends share the cursor, which no other backend moves here).
-- Were the backend to stop before a clean lap, rows would stay.
TRUNCATE rl_fallback_log, rl_fallback_head;
SET slidewin.redis_url = 'redis://127.0.0.1:1';
SET slidewin.test_now = '2031-01-03 00:00:00+00';
SELECT store, count(*) FROM generate_series(1, 600) g, rl_attempt('outage' || g % 7, 1000, '1 second') GROUP BY store;
RESET slidewin.redis_url;
SET slidewin.test_now = '2031-01-03 00:00:05+00';
SELECT pg_relation_size('rl_fallback_log') / current_setting('block_size')::int AS log_pages \gset
SELECT :log_pages >= 4 AS several_pages;
DO $$
DECLARE
  calls int := 0;
BEGIN
  LOOP
    PERFORM rl_attempt('after', 1000, '1 second');
    calls := calls + 1;
    EXIT WHEN calls >= 30 OR NOT EXISTS (SELECT FROM rl_fallback_log);
    COMMIT;   -- each call its own transaction, as a client's would be
  END LOOP;
  PERFORM set_config('fbc.calls', calls::text, false);
END $$;
SELECT count(*) AS rows_left FROM rl_fallback_log;
SELECT current_setting('fbc.calls')::int BETWEEN 2 AND :log_pages AS calls_within_a_lap;
-- the outage keys' heads went with their rows
SELECT count(*) AS outage_heads_left FROM rl_fallback_head WHERE key LIKE '%outage%';
SELECT rl_reset('after');

-- READ ONLY transactions (PostgREST runs GET requests in them) are counted
-- like any other: the fallback writes its rows there, and so does the sweep
-- that follows an outage. Both are internal bookkeeping of an unlogged table,
-- as Redis's own writes are; a limiter that stopped counting in read-only
-- transactions would let every GET through.
TRUNCATE rl_fallback_log;
SET slidewin.redis_url = 'redis://127.0.0.1:1';
SET slidewin.test_now = '2031-01-04 00:00:00+00';
BEGIN READ ONLY;
SELECT store, count(*) FILTER (WHERE allowed) AS admitted
  FROM generate_series(1, 80) g, rl_attempt('ro' || g % 2, 30, '1 second') GROUP BY store;
COMMIT;
BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY;
SELECT allowed, remaining, store FROM rl_attempt('ro0', 31, '1 second');
COMMIT;
SELECT count(*) AS rows_kept FROM rl_fallback_log;
RESET slidewin.redis_url;
SET slidewin.test_now = '2031-01-04 00:00:05+00';
BEGIN READ ONLY;
SELECT store FROM rl_attempt('after_ro', 10, '1 second');
SELECT count(*) AS rows_left FROM rl_fallback_log;
COMMIT;
SELECT rl_reset('after_ro');
RESET slidewin.test_now;

-- A call deletes every row its own key has left behind, in the scan that
-- finds the key's first live row, where a sweep would take only a few: 20
-- rows, then one call ten seconds later leaves only its own row.
RESET slidewin.redis_url;
SET slidewin.redis_url = 'redis://127.0.0.1:1';
TRUNCATE rl_fallback_log;
SET slidewin.test_now = '2031-01-04 00:00:00+00';
SELECT count(*) FILTER (WHERE rl_allow('own', 100, '1 second')) FROM generate_series(1, 20);
SET slidewin.test_now = '2031-01-04 00:00:10+00';
SELECT allowed, remaining FROM rl_attempt('own', 100, '1 second');
SELECT count(*) AS own_rows FROM rl_fallback_log WHERE key = 'regress:fbc:own';
-- A denied call does it too: 3 units at 0 s and 2 at 0.9 s fill a limit of
-- 5 per second; at 1.5 s the first three have left the window, a call of 4
-- is denied (2 + 4 > 5), and only the two live rows remain.
SET slidewin.test_now = '2031-01-04 00:01:00+00';
SELECT count(*) FILTER (WHERE rl_allow('full', 5, '1 second')) FROM generate_series(1, 3);
SET slidewin.test_now = '2031-01-04 00:01:00.9+00';
SELECT count(*) FILTER (WHERE rl_allow('full', 5, '1 second')) FROM generate_series(1, 2);
SET slidewin.test_now = '2031-01-04 00:01:01.5+00';
SELECT allowed, remaining, retry_after FROM rl_attempt('full', 5, '1 second', 4);
SELECT count(*) AS full_rows FROM rl_fallback_log WHERE key = 'regress:fbc:full';
SELECT allowed, remaining FROM rl_peek('full', 5, '1 second');
RESET slidewin.test_now;

-- Keys that are never called again, one per hour, each with a 1 s window:
-- no key's own call deletes its rows, so only the sweeps of heap pages do.
-- 400 such calls never leave more than three sweep intervals' worth of
-- rows (64 calls each at most) in the table; without the sweeps all 400
-- would stay.
TRUNCATE rl_fallback_log, rl_fallback_head;
DO $$
DECLARE
  most bigint := 0;
  n bigint;
BEGIN
  FOR i IN 0..399 LOOP
    PERFORM set_config('slidewin.test_now',
                       (timestamptz '2031-02-01 00:00:00+00' + i * interval '1 hour')::text, false);
    PERFORM rl_allow('hourly' || i, 10, '1 second');
    SELECT count(*) INTO n FROM rl_fallback_log;
    most := greatest(most, n);
  END LOOP;
  PERFORM set_config('fbc.most', most::text, false);
END $$;
SELECT current_setting('fbc.most')::int <= 3 * 64 AS bounded;
RESET slidewin.test_now;
