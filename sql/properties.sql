-- Property test of the four algorithms, deterministic through
-- slidewin.test_now: 1,500 calls at random times (a Poisson stretch, then
-- bursts), costs 1 to 3, limit 20 per second, in the Redis store and again
-- in the fallback store.
SET slidewin.key_prefix = 'regress:prop:';
SET TimeZone = 'UTC';
SET slidewin.redis_retry_interval = 0;
SELECT setseed(0.42);

-- Call times in microseconds from 2030-01-01, strictly increasing.
CREATE TEMP TABLE times (i int PRIMARY KEY, t bigint NOT NULL, cost int NOT NULL);
DO $$
DECLARE
  t bigint := 0;
BEGIN
  FOR i IN 1..1500 LOOP
    IF i <= 750 THEN
      -- Poisson arrivals at 60 per second, three times the limit's rate
      t := t + 1 + floor(-ln(1 - random()) * 1000000 / 60)::bigint;
    ELSIF i % 25 = 0 THEN
      -- bursts of 25 calls within a few milliseconds, 0.2 to 2 s apart
      t := t + 200000 + floor(random() * 1800000)::bigint;
    ELSE
      t := t + 1 + floor(random() * 200)::bigint;
    END IF;
    INSERT INTO times VALUES (i, t, 1 + floor(random() * 3)::int);
  END LOOP;
END $$;

CREATE TEMP TABLE calls (store text, algo text, i int, t bigint, cost int,
                         allowed boolean, retry bigint, adm bigint);
CREATE FUNCTION pg_temp.run(store text, algo text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  c record;
  r rl_result;
BEGIN
  PERFORM rl_reset('p');
  FOR c IN SELECT * FROM times ORDER BY i LOOP
    PERFORM set_config('slidewin.test_now',
                       (timestamptz '2030-01-01 00:00:00+00' + c.t * interval '1 microsecond')::text, false);
    r := rl_attempt('p', 20, '1 second', c.cost, algorithm => algo);
    IF r.store <> store THEN
      RAISE EXCEPTION 'call % answered by %, not %', c.i, r.store, store;
    END IF;
    INSERT INTO calls VALUES (store, algo, c.i, c.t, c.cost, r.allowed,
      (extract(epoch FROM r.retry_after) * 1000000)::bigint,
      CASE WHEN algo = 'sliding_log' AND r.allowed
           THEN (extract(epoch FROM r.reset_at - timestamptz '2030-01-01 00:00:00+00') * 1000000)::bigint - 1000000 END);
  END LOOP;
  PERFORM rl_reset('p');
END $$;

SELECT pg_temp.run('redis', a) FROM unnest(ARRAY['sliding_log', 'sliding_counter', 'fixed_window', 'token_bucket']) a;
SET slidewin.redis_url = 'redis://127.0.0.1:1';
SELECT pg_temp.run('fallback', a) FROM unnest(ARRAY['sliding_log', 'sliding_counter', 'fixed_window', 'token_bucket']) a;
RESET slidewin.redis_url;
RESET slidewin.test_now;

-- Both stores decide every call the same way, with the same retry_after.
SELECT algo, count(*) AS calls, count(*) FILTER (WHERE r.allowed) AS admitted,
       count(*) FILTER (WHERE r.allowed IS DISTINCT FROM f.allowed OR r.retry IS DISTINCT FROM f.retry) AS stores_disagree
  FROM calls r JOIN calls f USING (algo, i)
 WHERE r.store = 'redis' AND f.store = 'fallback'
 GROUP BY algo ORDER BY algo;

-- sliding_log: every interval of 1 s that starts at an admission holds at
-- most 20 units (the admission time is the one the store recorded) ...
SELECT store, max(units) AS worst_window, max(units) <= 20 AS never_over
  FROM (SELECT a.store, sum(b.cost) AS units
          FROM calls a JOIN calls b ON b.store = a.store AND b.algo = a.algo AND b.allowed
                                   AND b.adm >= a.adm AND b.adm < a.adm + 1000000
         WHERE a.algo = 'sliding_log' AND a.allowed
         GROUP BY a.store, a.i) w
 GROUP BY store ORDER BY store;
-- ... and no call is denied while the exact count would admit it.
SELECT d.store, count(*) AS denied,
       count(*) FILTER (WHERE coalesce(u.units, 0) + d.cost <= 20) AS wrongly_denied
  FROM calls d
  LEFT JOIN LATERAL (SELECT sum(b.cost) AS units FROM calls b
                      WHERE b.store = d.store AND b.algo = d.algo AND b.allowed
                        AND b.adm > d.t - 1000000 AND b.adm <= d.t) u ON true
 WHERE d.algo = 'sliding_log' AND NOT d.allowed
 GROUP BY d.store ORDER BY d.store;

-- token_bucket matches a reference GCRA computed here with exact numerics:
-- 20 units of burst, one unit refilled every 50 ms.
CREATE TEMP TABLE reference (i int, allowed boolean, retry bigint);
DO $$
DECLARE
  c record;
  tat numeric := 0;
  nxt numeric;
BEGIN
  FOR c IN SELECT * FROM times ORDER BY i LOOP
    tat := greatest(tat, c.t);
    nxt := tat + c.cost * 50000;
    IF nxt - c.t <= 1000000 THEN
      tat := nxt;
      INSERT INTO reference VALUES (c.i, true, 0);
    ELSE
      INSERT INTO reference VALUES (c.i, false, greatest(ceil(nxt - 1000000 - c.t), 1));
    END IF;
  END LOOP;
END $$;
SELECT store, count(*) FILTER (WHERE c.allowed) AS admitted,
       count(*) FILTER (WHERE c.allowed <> ref.allowed OR c.retry <> ref.retry) AS differ_from_reference
  FROM calls c JOIN reference ref USING (i)
 WHERE c.algo = 'token_bucket'
 GROUP BY store ORDER BY store;

-- sliding_counter is approximate. The documented bound: an interval of 1 s
-- holds at most 2 x 20 units, and a call may be denied although the exact
-- count would admit it. Report the worst of each observed.
SELECT a.store,
       max(w.units) - 20 AS worst_over_admission,
       max(w.units) <= 40 AS within_bound
  FROM calls a
  JOIN LATERAL (SELECT sum(b.cost) AS units FROM calls b
                 WHERE b.store = a.store AND b.algo = a.algo AND b.allowed
                   AND b.t >= a.t AND b.t < a.t + 1000000) w ON true
 WHERE a.algo = 'sliding_counter' AND a.allowed
 GROUP BY a.store ORDER BY a.store;
SELECT d.store, count(*) AS denied,
       count(*) FILTER (WHERE coalesce(u.units, 0) + d.cost <= 20) AS denied_though_exact_admits,
       max(20 - coalesce(u.units, 0) - d.cost) FILTER (WHERE coalesce(u.units, 0) + d.cost <= 20) AS worst_units_refused
  FROM calls d
  LEFT JOIN LATERAL (SELECT sum(b.cost) AS units FROM calls b
                      WHERE b.store = d.store AND b.algo = d.algo AND b.allowed
                        AND b.t > d.t - 1000000 AND b.t <= d.t) u ON true
 WHERE d.algo = 'sliding_counter' AND NOT d.allowed
 GROUP BY d.store ORDER BY d.store;

-- fixed_window: what the others avoid. Some interval of 1 s holds more than
-- 20 units (up to 2 x 20, around a window boundary).
SELECT a.store, max(w.units) AS worst_window, max(w.units) > 20 AS exceeds_limit, max(w.units) <= 40 AS within_two_limits
  FROM calls a
  JOIN LATERAL (SELECT sum(b.cost) AS units FROM calls b
                 WHERE b.store = a.store AND b.algo = a.algo AND b.allowed
                   AND b.t >= a.t AND b.t < a.t + 1000000) w ON true
 WHERE a.algo = 'fixed_window' AND a.allowed
 GROUP BY a.store ORDER BY a.store;
