-- Exact across an outage, on one server, on the test clock: the fallback
-- store starts from what Redis had counted for the key (kept in shared
-- memory from Redis's last answer), and Redis learns of what the fallback
-- store admitted before it decides the key again. lim 5 per minute.
SET slidewin.key_prefix = 'regress:out:';
SET TimeZone = 'UTC';
SET slidewin.redis_retry_interval = 0;
SELECT count(rl_reset(k)) FROM unnest(ARRAY['a', 'b', 'c', 'd']) k;
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
SELECT set_config('regress.redis_url', current_setting('slidewin.redis_url'), false) IS NOT NULL AS saved;
CREATE TEMP TABLE s0 AS SELECT outage_seeded_units, outage_unseeded_calls, outage_carried FROM rl_stats;
CREATE FUNCTION pg_temp.delta() RETURNS TABLE (seeded bigint, unseeded bigint, carried bigint, pending bigint)
LANGUAGE sql AS $$
  SELECT r.outage_seeded_units - s0.outage_seeded_units, r.outage_unseeded_calls - s0.outage_unseeded_calls,
         r.outage_carried - s0.outage_carried, r.outage_carry_pending
    FROM rl_stats r, s0;
$$;

-- Into the outage: Redis admits 3 at 0 s, 10 s and 20 s.
SELECT pg_temp.at(0);
SELECT allowed, remaining, store FROM rl_attempt('a', 5, '1 minute');
SELECT pg_temp.at(10);
SELECT allowed, remaining, store FROM rl_attempt('a', 5, '1 minute');
SELECT pg_temp.at(20);
SELECT allowed, remaining, store FROM rl_attempt('a', 5, '1 minute');
-- Redis goes away at 30 s: the fallback store counts Redis's 3 as spent
-- until the newest of them leaves (80 s), so 2 more pass, and then the
-- wait is until 80 s (a denial's retry_after is 50 s from 30 s).
SELECT pg_temp.down(), pg_temp.at(30);
SELECT allowed, remaining, store FROM rl_attempt('a', 5, '1 minute');
SELECT allowed, remaining, store FROM rl_attempt('a', 5, '1 minute');
SELECT allowed, remaining, retry_after, reset_at, store FROM rl_attempt('a', 5, '1 minute');
SELECT allowed, remaining, store FROM rl_peek('a', 5, '1 minute');
-- A key Redis never answered on this server falls back as before, counted.
SELECT allowed, remaining, store FROM rl_attempt('b', 5, '1 minute');
SELECT seeded, unseeded, carried, pending FROM pg_temp.delta();
-- the admissions waiting for Redis: a's two and b's one
SELECT key, cost, expires - ts AS win_us FROM rl_fallback_carry ORDER BY key, ts;

-- Out of the outage at 40 s: before Redis decides a's next call, the
-- fallback store's admissions reach it with their ages (10 s), so Redis
-- counts 3 + 2 = 5: denied until 0 s's entry leaves (60 s).
SELECT pg_temp.up(), pg_temp.at(40);
SELECT allowed, remaining, retry_after, store FROM rl_attempt('a', 5, '1 minute');
SELECT seeded, unseeded, carried, pending FROM pg_temp.delta();
-- b's row went with a's call too (one other key per call): nothing waits.
SELECT count(*) AS waiting FROM rl_fallback_carry;
SELECT allowed, remaining, store FROM rl_peek('b', 5, '1 minute');
-- At 60 s the entry of 0 s has left: one passes, in Redis, and then the
-- wait is until 10 s's entry leaves.
SELECT pg_temp.at(60);
SELECT allowed, remaining, store FROM rl_attempt('a', 5, '1 minute');
SELECT allowed, remaining, retry_after, store FROM rl_attempt('a', 5, '1 minute');

-- Sent twice (the reply lost, the backend terminated, the carrying
-- transaction rolled back): Redis records each admission once. lim 10.
SELECT pg_temp.down(), pg_temp.at(100);
SELECT allowed, remaining, store FROM rl_attempt('c', 10, '1 minute');
SELECT allowed, remaining, store FROM rl_attempt('c', 10, '1 minute');
-- a peek carries nothing (it decides nothing): Redis has none of them yet
SELECT pg_temp.up(), pg_temp.at(101);
SELECT allowed, remaining, store FROM rl_peek('c', 10, '1 minute');
SELECT count(*) AS waiting FROM rl_fallback_carry;
-- the attempt carries them, then is admitted (3 used), but its transaction
-- rolls back: Redis keeps what it recorded, and the rows come back
BEGIN;
SELECT allowed, remaining, store FROM rl_attempt('c', 10, '1 minute');
SELECT count(*) AS waiting FROM rl_fallback_carry;
ROLLBACK;
SELECT count(*) AS waiting FROM rl_fallback_carry;
-- sent again, they are recognised: only the call's own unit is added
SELECT allowed, remaining, store FROM rl_attempt('c', 10, '1 minute');
SELECT count(*) AS waiting FROM rl_fallback_carry;

-- An admission whose window ended before Redis came back is not sent.
SELECT pg_temp.down(), pg_temp.at(200);
SELECT allowed, remaining, store FROM rl_attempt('d', 5, '1 minute');
SELECT pg_temp.up(), pg_temp.at(261);
SELECT allowed, remaining, store FROM rl_attempt('d', 5, '1 minute');
SELECT count(*) AS waiting FROM rl_fallback_carry;

-- A rolled-back fallback admission was never spent: nothing to carry.
SELECT pg_temp.down(), pg_temp.at(300);
BEGIN;
SELECT allowed, remaining, store FROM rl_attempt('d', 5, '1 minute');
ROLLBACK;
SELECT count(*) AS waiting FROM rl_fallback_carry;

-- rl_reset forgets what Redis counted, and what waits to be carried.
SELECT pg_temp.up(), pg_temp.at(400);
SELECT allowed, remaining, store FROM rl_attempt('a', 5, '1 minute', 5);
SELECT pg_temp.down();
SELECT allowed, remaining, store FROM rl_attempt('a', 5, '1 minute');
SELECT rl_reset('a');
SELECT allowed, remaining, store FROM rl_attempt('a', 5, '1 minute');
SELECT count(*) AS waiting FROM rl_fallback_carry;

-- The counting algorithms, lim 5 per minute: Redis admits 3 (0 s, 10 s,
-- 20 s), Redis goes away at 30 s, comes back at 40 s, and at 70 s.
CREATE FUNCTION pg_temp.counting(algo text) RETURNS TABLE (at int, store text, allowed boolean, remaining bigint, retry_after interval)
LANGUAGE plpgsql AS $$
DECLARE r rl_result; t int;
BEGIN
  PERFORM pg_temp.up();
  PERFORM rl_reset(algo);
  FOREACH t IN ARRAY ARRAY[0, 10, 20, 30, 30, 30, 30, 30, 30, 40, 40, 70, 70, 70] LOOP
    PERFORM pg_temp.at(t);
    IF t = 30 THEN PERFORM pg_temp.down(); ELSE PERFORM pg_temp.up(); END IF;
    r := rl_attempt(algo, 5, '1 minute', algorithm => algo);
    at := t; store := r.store; allowed := r.allowed; remaining := r.remaining; retry_after := r.retry_after;
    RETURN NEXT;
  END LOOP;
END $$;
-- fixed_window: the fallback store adds Redis's 3 of the window (2 pass),
-- Redis then holds all 5 until the window ends at 60 s.
SELECT * FROM pg_temp.counting('fixed_window');
-- sliding_counter: likewise within the bucket; at 70 s the previous
-- bucket's 5 still weigh 5 x 50/60.
SELECT * FROM pg_temp.counting('sliding_counter');
-- token_bucket (one unit per 12 s, 5 at most): Redis's 3 leave the bucket
-- full again at 36 s; at 30 s the fallback store, starting from that,
-- admits 4 more, as Redis would have (full again at 84 s); at 40 s Redis
-- has them back, and admits 1 more, as one store would have (84 + 12 - 40
-- = 56 s ahead, within 60), then no more.
SELECT * FROM pg_temp.counting('token_bucket');
SELECT count(*) AS waiting FROM rl_fallback_carry;
-- sent twice: a counting algorithm's admissions are recorded once too
SELECT pg_temp.down(), pg_temp.at(500);
SELECT allowed, remaining, store FROM rl_attempt('fwd', 5, '1 minute', algorithm => 'fixed_window');
SELECT pg_temp.up(), pg_temp.at(501);
BEGIN;
SELECT allowed, remaining, store FROM rl_attempt('fwd', 5, '1 minute', algorithm => 'fixed_window');
ROLLBACK;
SELECT count(*) AS waiting FROM rl_fallback_carry;
SELECT allowed, remaining, store FROM rl_attempt('fwd', 5, '1 minute', algorithm => 'fixed_window');
SELECT count(*) AS waiting FROM rl_fallback_carry;

RESET slidewin.test_now;
SELECT pg_temp.up();
SELECT count(rl_reset(k)) FROM unnest(ARRAY['a', 'b', 'c', 'd', 'fixed_window', 'sliding_counter', 'token_bucket', 'fwd']) k;
