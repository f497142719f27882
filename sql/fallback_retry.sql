-- A denied call's retry_after in the fallback store: when the admissions
-- that must leave the window first have left it. Since 1.16 the row that
-- frees them is found through the (key, ts) index: walked from the window's
-- start for 32 rows, past that by halving the range of times. Every answer
-- here is checked against the admissions this test recorded itself, not
-- against the store's rows.
SET slidewin.key_prefix = 'regress:rt:';
SET TimeZone = 'UTC';
SET slidewin.redis_retry_interval = 0;
SET slidewin.redis_url = 'redis://127.0.0.1:1';
SET slidewin.test_now = '2031-01-01 00:00:00+00';
SELECT rl_reset(k) FROM unnest(ARRAY['r', 'm']) AS k;

-- 300 admissions of costs 1 to 5, 1 to 3 seconds apart, under a limit that
-- never binds (1,000,000 per 10,000 s).
CREATE TEMP TABLE adm (n int, ts timestamptz, cost int, ticket text);
SELECT setseed(0.16);
DO $$
DECLARE
  t timestamptz := '2031-01-01 00:00:00+00';
  c int;
  r rl_result;
BEGIN
  FOR i IN 1..300 LOOP
    t := t + make_interval(secs => 1 + floor(random() * 3));
    c := 1 + floor(random() * 5);
    PERFORM set_config('slidewin.test_now', t::text, false);
    SELECT * INTO r FROM rl_attempt('r', 1000000, '10000 seconds', c);
    IF NOT r.allowed OR r.store <> 'fallback' THEN
      RAISE EXCEPTION 'admission % not made by the fallback store', i;
    END IF;
    INSERT INTO adm VALUES (i, t, c, r.ticket);
  END LOOP;
  PERFORM set_config('slidewin.test_now', (t + interval '1 second')::text, false);
END $$;
SELECT count(*) AS admitted, sum(cost) AS units FROM adm;

-- What a call of cost c under limit lim must wait: until the oldest
-- admissions whose units, added up in time order, reach used + c - lim
-- have left the window.
CREATE FUNCTION pg_temp.expected_wait(need bigint) RETURNS interval
LANGUAGE sql AS $$
  SELECT min(ts) + interval '10000 seconds' - current_setting('slidewin.test_now')::timestamptz
    FROM (SELECT ts, sum(cost) OVER (ORDER BY ts) AS reached FROM adm) a
   WHERE reached >= need $$;
-- Needs met by the first row, within the 32 rows walked, just past them
-- (the 33rd row on), deep in the log, and by the newest row.
CREATE TEMP TABLE needs AS
  SELECT need FROM unnest(ARRAY[1, 2, 3, 40, 60, 90, 96, 100, 101, 120, 400, 555, 700]) AS need
  UNION ALL SELECT sum(cost) FROM adm;
CREATE FUNCTION pg_temp.check_waits() RETURNS TABLE (need bigint, row_reached bigint, exact boolean)
LANGUAGE sql AS $$
  SELECT n.need,
         (SELECT count(*) + 1 FROM (SELECT sum(cost) OVER (ORDER BY ts) AS reached FROM adm) a
           WHERE reached < n.need),
         r.retry_after = pg_temp.expected_wait(n.need) AND NOT r.allowed
    FROM needs n,
         LATERAL rl_attempt('r', (SELECT sum(cost) FROM adm) + 1 - n.need, '10000 seconds', 1) r
   ORDER BY n.need $$;
SELECT * FROM pg_temp.check_waits();

-- A refund of an admission in the middle moves every newer row's running
-- total down by its units: the answers still follow the admissions.
SELECT rl_refund('r', ticket) AS given FROM adm WHERE n = 20;
DELETE FROM adm WHERE n = 20;
SELECT rl_refund('r', ticket) AS given FROM adm WHERE n = 150;
DELETE FROM adm WHERE n = 150;
UPDATE needs SET need = (SELECT sum(cost) FROM adm) WHERE need > 700;
SELECT * FROM pg_temp.check_waits();

-- Later, with the oldest admissions out of the window: the window starts
-- after them, and so does the walk.
SELECT set_config('slidewin.test_now', (min(ts) + interval '10000 seconds' + interval '100 seconds')::text, false) IS NOT NULL AS moved
  FROM adm;
DELETE FROM adm WHERE ts <= current_setting('slidewin.test_now')::timestamptz - interval '10000 seconds';
SELECT count(*) AS still_live FROM adm;
DELETE FROM needs WHERE need > (SELECT sum(cost) FROM adm);
INSERT INTO needs SELECT sum(cost) FROM adm;
SELECT * FROM pg_temp.check_waits();

-- Several windows (rl_attempt_multi, its own table): each window's wait is
-- found the same way, and the call waits for the one that frees last.
SET slidewin.test_now = '2031-01-01 00:00:00+00';
CREATE TEMP TABLE madm (ts timestamptz, cost int);
DO $$
DECLARE
  t timestamptz := '2031-01-01 00:00:00+00';
BEGIN
  FOR i IN 1..80 LOOP
    t := t + interval '2 seconds';
    PERFORM set_config('slidewin.test_now', t::text, false);
    IF NOT (rl_attempt_multi('m', ARRAY[1000, 1000], ARRAY['100 seconds', '1000 seconds']::interval[], 1 + i % 3)).allowed THEN
      RAISE EXCEPTION 'multi admission % denied', i;
    END IF;
    INSERT INTO madm VALUES (t, 1 + i % 3);
  END LOOP;
  PERFORM set_config('slidewin.test_now', (t + interval '1 second')::text, false);
END $$;
-- used: 160 units in 1000 s, of which those of the last 100 s in the
-- other window; a call of cost 1 under limits that leave no room in either
WITH used AS (
  SELECT sum(cost) AS long_used,
         sum(cost) FILTER (WHERE ts > current_setting('slidewin.test_now')::timestamptz - interval '100 seconds') AS short_used
    FROM madm),
 r AS (
  SELECT x.*, u.* FROM used u,
         LATERAL rl_attempt_multi('m', ARRAY[u.short_used - 10, u.long_used - 70], ARRAY['100 seconds', '1000 seconds']::interval[]) x)
SELECT allowed,
       retry_after = greatest(
         (SELECT min(ts) FROM (SELECT ts, sum(cost) OVER (ORDER BY ts) AS reached FROM madm
                                WHERE ts > current_setting('slidewin.test_now')::timestamptz - interval '100 seconds') a
           WHERE reached >= 11) + interval '100 seconds',
         (SELECT min(ts) FROM (SELECT ts, sum(cost) OVER (ORDER BY ts) AS reached FROM madm) a
           WHERE reached >= 71) + interval '1000 seconds')
         - current_setting('slidewin.test_now')::timestamptz AS exact
  FROM r;

RESET slidewin.test_now;
