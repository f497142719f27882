-- Core sliding-log semantics on the Redis store, on a fixed test clock.
SET slidewin.key_prefix = 'regress:core:';
SET slidewin.test_now = '2030-01-01 00:00:00+00';
SET TimeZone = 'UTC';
SELECT rl_reset(k) FROM unnest(ARRAY['k1','k2','k3','k4','k5','k6','k7']) AS k;

-- 3 per 10 seconds: three admitted, the fourth denied until the oldest leaves.
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('k1', 3, '10 seconds');
SET slidewin.test_now = '2030-01-01 00:00:02+00';
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('k1', 3, '10 seconds');
SET slidewin.test_now = '2030-01-01 00:00:04+00';
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('k1', 3, '10 seconds');
SET slidewin.test_now = '2030-01-01 00:00:05+00';
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('k1', 3, '10 seconds');
-- one microsecond before the oldest entry leaves the window
SET slidewin.test_now = '2030-01-01 00:00:09.999999+00';
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('k1', 3, '10 seconds');
-- the entry of 00:00:00 leaves at exactly 00:00:10
SET slidewin.test_now = '2030-01-01 00:00:10+00';
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('k1', 3, '10 seconds');
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('k1', 3, '10 seconds');
-- a window later everything has left
SET slidewin.test_now = '2030-01-01 00:00:20+00';
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_peek('k1', 3, '10 seconds');
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('k1', 3, '10 seconds');

-- Weighted cost: a denied call records nothing, and retry_after waits for
-- exactly the units it needs.
SET slidewin.test_now = '2030-01-01 00:00:00+00';
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('k2', 10, '1 minute', 4);
SET slidewin.test_now = '2030-01-01 00:00:10+00';
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('k2', 10, '1 minute', 5);
SET slidewin.test_now = '2030-01-01 00:00:20+00';
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('k2', 10, '1 minute', 2);
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('k2', 10, '1 minute', 1);
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('k2', 10, '1 minute', 1);
-- needs 5: the 4 of 00:00:00 are not enough, the 5 of 00:00:10 are
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('k2', 10, '1 minute', 5);
SET slidewin.test_now = '2030-01-01 00:01:00+00';
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('k2', 10, '1 minute', 5);
SET slidewin.test_now = '2030-01-01 00:01:10+00';
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('k2', 10, '1 minute', 5);

-- rl_allow is the same decision as a boolean.
SET slidewin.test_now = '2030-01-01 00:00:00+00';
SELECT rl_allow('k3', 2, '1 hour') AS a1, rl_allow('k3', 2, '1 hour') AS a2,
       rl_allow('k3', 2, '1 hour') AS a3;
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_peek('k3', 2, '1 hour');

-- A window with many entries (past Redis's small-set encoding): 200 calls
-- of cost 5, 10 ms apart, fill a 1000-unit budget.
DO $$
BEGIN
  FOR i IN 0..199 LOOP
    PERFORM set_config('slidewin.test_now',
                       (timestamptz '2030-01-01 00:00:00+00' + i * interval '10 ms')::text, false);
    IF NOT rl_allow('k4', 1000, '1 minute', 5) THEN
      RAISE EXCEPTION 'call % was denied', i;
    END IF;
  END LOOP;
END $$;
SET slidewin.test_now = '2030-01-01 00:00:02+00';
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_peek('k4', 1000, '1 minute');
-- 500 units free up when the 100th entry (00:00:00.99) leaves: 58.99 s
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('k4', 1000, '1 minute', 500);
-- at 00:01:00.5 the 51 entries up to 00:00:00.50 have left: 255 units free
SET slidewin.test_now = '2030-01-01 00:01:00.5+00';
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_peek('k4', 1000, '1 minute');
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('k4', 1000, '1 minute', 255);
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('k4', 1000, '1 minute', 1);
-- reset forgets the key
SELECT rl_reset('k4');
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_peek('k4', 1000, '1 minute');

-- Consumption is spent at once, like a sequence: ROLLBACK does not undo it.
BEGIN;
SELECT allowed, remaining FROM rl_attempt('k5', 5, '1 hour', 3);
ROLLBACK;
SELECT allowed, remaining FROM rl_peek('k5', 5, '1 hour');

-- Calls in the same microsecond are all recorded (members are unique).
SELECT count(*) FILTER (WHERE rl_allow('k6', 1000, '1 hour')) AS admitted
FROM generate_series(1, 300);
SELECT allowed, remaining FROM rl_peek('k6', 1000, '1 hour');

-- Huge limits stay exact: running totals are renumbered before they would
-- lose precision as doubles in Redis Lua. With cost 2^50 - 1 the totals pass
-- 2^53 within ten steps, where odd numbers are no longer doubles.
DO $$
DECLARE
  r rl_result;
  c constant bigint := 1125899906842623;
  l constant bigint := 2251799813685248;
BEGIN
  FOR i IN 0..11 LOOP
    PERFORM set_config('slidewin.test_now',
                       (timestamptz '2030-01-01 00:00:00+00' + i * interval '1 second')::text, false);
    r := rl_attempt('k7', l, '2 seconds', c);
    IF NOT r.allowed OR r.remaining <> (CASE WHEN i = 0 THEN l - c ELSE l - 2 * c END) THEN
      RAISE EXCEPTION 'step %: %', i, r;
    END IF;
    IF i > 0 THEN
      r := rl_attempt('k7', l, '2 seconds', c);
      IF r.allowed OR r.remaining <> 2 OR r.retry_after <> interval '1 second' THEN
        RAISE EXCEPTION 'step % (second call): %', i, r;
      END IF;
    END IF;
  END LOOP;
END $$;
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_peek('k7', 2251799813685248, '2 seconds');
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('k7', 2251799813685248, '2 seconds', 2);
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('k7', 2251799813685248, '2 seconds', 1);
