-- rl_attempt_all in the fallback store (1.12), on the test clock: every key
-- decided as rl_attempt's fallback call decides it, all admitted or none
-- charged; what Redis counted for each key is where a later fallback call
-- of it starts; and what the fallback store admitted of each key reaches
-- Redis before Redis decides one of them again.
SET slidewin.key_prefix = 'regress:{allfb}:';
SET TimeZone = 'UTC';
SET slidewin.redis_retry_interval = 0;
SELECT count(rl_reset(k)) FROM unnest(ARRAY['a', 'b', 'c', 'd1', 'd2', 'd3', 's1', 's2', 'c1', 'c2', 'k1', 'k2', 'tb:y1']) k;
-- what earlier tests' fallback calls left waiting (on their test clocks)
TRUNCATE rl_fallback_carry;
CREATE FUNCTION pg_temp.at(s int) RETURNS void LANGUAGE sql AS $$
  SELECT set_config('slidewin.test_now',
                    (timestamptz '2030-01-01 00:00:00+00' + s * interval '1 second')::text, false);
$$;
CREATE FUNCTION pg_temp.down() RETURNS void LANGUAGE sql AS $$
  SELECT set_config('slidewin.redis_url', 'redis://127.0.0.1:1', false);
$$;
CREATE FUNCTION pg_temp.up() RETURNS void LANGUAGE sql AS $$
  SELECT set_config('slidewin.redis_url', current_setting('regress.redis_url'), false);
$$;
-- each key's units in the fallback store's log, and its rows waiting for Redis
CREATE FUNCTION pg_temp.rows(keys text[]) RETURNS TABLE (key text, logged bigint, waiting bigint)
LANGUAGE sql AS $$
  SELECT k, (SELECT coalesce(sum(cost), 0) FROM rl_fallback_log l
              WHERE l.key = current_setting('slidewin.key_prefix') || k),
            (SELECT coalesce(sum(cost), 0) FROM rl_fallback_carry c
              WHERE c.key = current_setting('slidewin.key_prefix') || k)
    FROM unnest(keys) k ORDER BY k;
$$;
SELECT set_config('regress.redis_url', current_setting('slidewin.redis_url'), false) IS NOT NULL AS saved;
CREATE TEMP TABLE s0 AS SELECT fallback_calls, policy_answers FROM rl_stats;

-- Redis cannot answer: the fallback store admits every key, each charged
-- its own cost, each with its carry row. The result is the key with the
-- least room left: 'c' (2 - 1 = 1).
SELECT pg_temp.down(), pg_temp.at(0);
SELECT key, allowed, remaining, store, lim, ticket IS NOT NULL AS ticket
  FROM rl_attempt_all_rows(ARRAY['a', 'b', 'c'], ARRAY[3, 5, 2],
                           ARRAY['1 minute', '1 minute', '1 minute']::interval[], ARRAY[1, 2, 1],
                           on_redis_error => 'fallback');
SELECT * FROM pg_temp.rows(ARRAY['a', 'b', 'c']);
-- rl_stats counts each key's call as the fallback store's
SELECT r.fallback_calls - s0.fallback_calls AS fallback_calls,
       r.policy_answers - s0.policy_answers AS policy_answers
  FROM rl_stats r, s0;
SELECT allowed, remaining, store, lim
  FROM rl_attempt_all(ARRAY['a', 'b', 'c'], ARRAY[3, 5, 2],
                      ARRAY['1 minute', '1 minute', '1 minute']::interval[],
                      on_redis_error => 'fallback');
-- 'c' is full now (2 of 2): a call needing it is denied, and neither 'a'
-- nor 'b' is charged. 'c' decides; the others have room, and are not
-- charged. (What is committed denies it: answered without a write. A denial
-- found only while recording, in a race, is isolation fallback_all_order's.)
SELECT pg_temp.at(5);
SELECT key, allowed, remaining, retry_after, store, lim
  FROM rl_attempt_all_rows(ARRAY['b', 'c', 'a'], ARRAY[5, 2, 3],
                           ARRAY['1 minute', '1 minute', '1 minute']::interval[],
                           on_redis_error => 'fallback');
SELECT allowed, remaining, retry_after, store, lim
  FROM rl_attempt_all(ARRAY['a', 'b', 'c'], ARRAY[3, 5, 2],
                      ARRAY['1 minute', '1 minute', '1 minute']::interval[],
                      on_redis_error => 'fallback');
SELECT * FROM pg_temp.rows(ARRAY['a', 'b', 'c']);
SELECT k, (rl_peek(k, l, '1 minute')).remaining
  FROM unnest(ARRAY['a', 'b', 'c'], ARRAY[3, 5, 2]) AS t(k, l) ORDER BY k;
-- Each of three keys denies in turn, the others having room: none of the
-- others is charged. Each holds 1 of 2 before and after.
SELECT rl_allow_all(ARRAY['d1', 'd2', 'd3'], ARRAY[2, 2, 2],
                    ARRAY['1 minute', '1 minute', '1 minute']::interval[],
                    on_redis_error => 'fallback') AS admitted;
SELECT costs, r.allowed, r.remaining, r.retry_after
  FROM (VALUES (1, ARRAY[2, 1, 1]::bigint[]), (2, ARRAY[1, 2, 1]), (3, ARRAY[1, 1, 2])) AS t(n, costs),
       LATERAL rl_attempt_all(ARRAY['d1', 'd2', 'd3'], ARRAY[2, 2, 2],
                              ARRAY['1 minute', '1 minute', '1 minute']::interval[], costs,
                              on_redis_error => 'fallback') r
  ORDER BY n;
SELECT * FROM pg_temp.rows(ARRAY['d1', 'd2', 'd3']);
-- rl_enforce_all raises RL429 for the key that decided, in the fallback store too
SELECT rl_enforce_all(ARRAY['a', 'c'], ARRAY[3, 2], ARRAY['1 minute', '1 minute']::interval[],
                      on_redis_error => 'fallback');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM pg_temp.rows(ARRAY['a', 'c']);
-- the transaction's end decides for every key: a rolled-back admission
-- leaves none
BEGIN;
SELECT rl_allow_all(ARRAY['a', 'b'], ARRAY[3, 5], ARRAY['1 minute', '1 minute']::interval[],
                    on_redis_error => 'fallback') AS admitted;
ROLLBACK;
SELECT * FROM pg_temp.rows(ARRAY['a', 'b']);
-- a call inside a PL/pgSQL block whose exception handler runs: the
-- fallback store's subtransaction nests in it
DO $$
BEGIN
  PERFORM rl_enforce_all(ARRAY['a', 'c'], ARRAY[3, 2], ARRAY['1 minute', '1 minute']::interval[],
                         on_redis_error => 'fallback');
EXCEPTION WHEN SQLSTATE 'RL429' THEN
  RAISE NOTICE 'denied';
END $$;
SELECT * FROM pg_temp.rows(ARRAY['a', 'c']);
-- shadow mode: every key recorded, whatever the answer
SET slidewin.enforce = off;
SELECT key, allowed, remaining, store FROM rl_attempt_all_rows(ARRAY['a', 'c'], ARRAY[3, 2],
    ARRAY['1 minute', '1 minute']::interval[], on_redis_error => 'fallback');
RESET slidewin.enforce;
SELECT * FROM pg_temp.rows(ARRAY['a', 'c']);

-- Into an outage, per key: Redis admits s1 (2 of 3) and s2 (3 of 4) in one
-- call at 100 s; at 110 s Redis is away, and the fallback store starts from
-- each key's own count: one more unit of each fits, then none.
SELECT pg_temp.up(), pg_temp.at(100);
SELECT key, allowed, remaining, store FROM rl_attempt_all_rows(ARRAY['s1', 's2'], ARRAY[3, 4],
    ARRAY['1 minute', '1 minute']::interval[], ARRAY[2, 3]);
SELECT pg_temp.down(), pg_temp.at(110);
SELECT key, allowed, remaining, store FROM rl_attempt_all_rows(ARRAY['s1', 's2'], ARRAY[3, 4],
    ARRAY['1 minute', '1 minute']::interval[], on_redis_error => 'fallback');
SELECT key, allowed, remaining, store FROM rl_attempt_all_rows(ARRAY['s1', 's2'], ARRAY[3, 4],
    ARRAY['1 minute', '1 minute']::interval[], on_redis_error => 'fallback');
-- rl_attempt of one of them starts from the same count
SELECT allowed, remaining, store FROM rl_attempt('s2', 4, '1 minute', on_redis_error => 'fallback');

-- Out of the outage: the fallback store admits c1 (1 of 2) and c2 (2 of 3)
-- at 200 s; at 210 s Redis answers again and learns of both before it
-- decides a call over them: 1 more of each fits, then none. Nothing waits.
SELECT pg_temp.down(), pg_temp.at(200);
SELECT allowed, store FROM rl_attempt_all(ARRAY['c1', 'c2'], ARRAY[2, 3],
    ARRAY['1 minute', '1 minute']::interval[], ARRAY[1, 2], on_redis_error => 'fallback');
SELECT * FROM pg_temp.rows(ARRAY['c1', 'c2']);
SELECT pg_temp.up(), pg_temp.at(210);
SELECT key, allowed, remaining, store FROM rl_attempt_all_rows(ARRAY['c2', 'c1'], ARRAY[3, 2],
    ARRAY['1 minute', '1 minute']::interval[]);
SELECT key, allowed, remaining, store FROM rl_attempt_all_rows(ARRAY['c2', 'c1'], ARRAY[3, 2],
    ARRAY['1 minute', '1 minute']::interval[]);
SELECT * FROM pg_temp.rows(ARRAY['c1', 'c2']);

-- Which rows an answer stands for, per key: k1's fallback row of 300 s is
-- carried by a Redis call over k1 and k2 at 310 s, whose answer (2 of 3
-- for k1) then stands in for it. At 320 s Redis is away again: k1 has room
-- for exactly one more (2 + 1 = 3), not none (the carried row counted
-- again) and not two.
SELECT pg_temp.down(), pg_temp.at(300);
SELECT allowed, store FROM rl_attempt_all(ARRAY['k1'], ARRAY[3], ARRAY['1 minute']::interval[],
    on_redis_error => 'fallback');
SELECT pg_temp.up(), pg_temp.at(310);
SELECT key, allowed, remaining, store FROM rl_attempt_all_rows(ARRAY['k2', 'k1'], ARRAY[5, 3],
    ARRAY['1 minute', '1 minute']::interval[]);
SELECT pg_temp.down(), pg_temp.at(320);
SELECT allowed, remaining, store FROM rl_attempt('k1', 3, '1 minute', on_redis_error => 'fallback');
SELECT allowed, remaining, store FROM rl_attempt('k1', 3, '1 minute', on_redis_error => 'fallback');

-- The counting algorithms in the fallback store: two calls over x1 (lim 2)
-- and x2 (lim 5) are admitted, the third is denied by x1 and charges x2
-- nothing (a peek of x2 in the fallback store still finds 3 left), and each
-- admitted key has its row to carry. Back on Redis, one call carries the
-- rows of both keys first: x1 is full there too, so the call is denied,
-- and x2 has 3 left, not charged.
CREATE FUNCTION pg_temp.counting(algo text, t int) RETURNS TABLE (step text, key text, allowed boolean, remaining bigint, store text)
LANGUAGE plpgsql AS $$
DECLARE
  ks text[] := ARRAY[algo || ':x1', algo || ':x2'];
  i int;
BEGIN
  PERFORM pg_temp.down(), pg_temp.at(t);
  FOR i IN 1 .. 3 LOOP
    RETURN QUERY SELECT 'fallback ' || i, a.key, a.allowed, a.remaining, a.store
      FROM rl_attempt_all_rows(ks, ARRAY[2, 5], ARRAY['1 hour', '1 hour']::interval[],
                               on_redis_error => 'fallback', algorithm => algo) a;
  END LOOP;
  RETURN QUERY SELECT 'peek', ks[2], p.allowed, p.remaining, p.store
    FROM rl_peek(ks[2], 5, '1 hour', on_redis_error => 'fallback', algorithm => algo) p;
  RETURN QUERY SELECT 'to carry', r.key, NULL::boolean, r.waiting, NULL FROM pg_temp.rows(ks) r;
  PERFORM pg_temp.up(), pg_temp.at(t + 1);
  RETURN QUERY SELECT 'redis', a.key, a.allowed, a.remaining, a.store
    FROM rl_attempt_all_rows(ks, ARRAY[2, 5], ARRAY['1 hour', '1 hour']::interval[],
                             algorithm => algo) a;
  RETURN QUERY SELECT 'to carry', r.key, NULL::boolean, r.waiting, NULL FROM pg_temp.rows(ks) r;
END $$;
SELECT * FROM pg_temp.counting('fixed_window', 1000);
SELECT * FROM pg_temp.counting('sliding_counter', 2000);
SELECT * FROM pg_temp.counting('token_bucket', 3000);

-- A token bucket's rows carried in several scripts (a script takes 64 rows
-- at most, and a backend's first only 8): each script adds to Redis's
-- bucket only what its rows owe beyond the scripts before it, whose rows
-- its furthest end includes. 70 fallback admissions of one unit, 1 s apart,
-- lim 100 a day; back on Redis, a call of one more unit finds the 70 (less
-- the 0.08 refilled) and leaves 29. (Before, each script added its whole
-- reach: the first script's rows counted twice, and Redis denied.)
SELECT pg_temp.down();
DO $$
BEGIN
  FOR i IN 1 .. 70 LOOP
    PERFORM pg_temp.at(4000 + i);
    PERFORM rl_attempt_all(ARRAY['tb:y1'], ARRAY[100], ARRAY['1 day']::interval[],
                           on_redis_error => 'fallback', algorithm => 'token_bucket');
  END LOOP;
END $$;
SELECT * FROM pg_temp.rows(ARRAY['tb:y1']);
SELECT pg_temp.up(), pg_temp.at(4100);
SELECT key, allowed, remaining, store FROM rl_attempt_all_rows(ARRAY['tb:y1'], ARRAY[100],
    ARRAY['1 day']::interval[], algorithm => 'token_bucket');
SELECT * FROM pg_temp.rows(ARRAY['tb:y1']);

SELECT pg_temp.up();
SELECT count(rl_reset(k)) FROM unnest(ARRAY['a', 'b', 'c', 'd1', 'd2', 'd3', 's1', 's2', 'c1', 'c2', 'k1', 'k2', 'tb:y1']) k;
SELECT count(rl_reset(a || k)) FROM unnest(ARRAY['fixed_window', 'sliding_counter', 'token_bucket']) a,
       unnest(ARRAY[':x1', ':x2']) k;
RESET slidewin.test_now;
