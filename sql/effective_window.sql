-- 1.11: next_at, when the window next frees a unit: the end of the
-- effective window of draft-ietf-httpapi-ratelimit-headers-11, which t in
-- rl_headers' RateLimit counts to. Checked for what it claims, on the test
-- clock, for every algorithm and both stores: until next_at the key has no
-- more units left than now (a peek a microsecond before says so), and at
-- next_at it has more. Also with the units spent: a caller that spends all
-- it has left gets nothing more before next_at.
SET TimeZone = 'UTC';
SET slidewin.key_prefix = 'regress:ew:';
SET slidewin.redis_retry_interval = 0;
SELECT rl_reset(a || s) FROM unnest(ARRAY['sliding_log', 'sliding_counter', 'fixed_window', 'token_bucket']) a,
       unnest(ARRAY[':redis', ':fallback']) s;
SELECT rl_reset(k) FROM unnest(ARRAY['deny:sliding_log', 'deny:sliding_counter', 'deny:fixed_window',
                                     'deny:token_bucket', 'pk']) k;

-- Calls of cost 1 or 2 at the given offsets (seconds after T0), limit 5 per
-- 10 s; then, at `at`, a peek, and the checks.
SELECT current_setting('slidewin.redis_url') AS redis_url \gset
CREATE FUNCTION pg_temp.ew(a text, store text, offsets numeric[], at numeric, url text)
RETURNS TABLE (remaining bigint, t_after_s numeric, same_just_before boolean,
               more_at_next_at boolean, spent_until_next_at boolean, t_header text)
LANGUAGE plpgsql AS $$
DECLARE
  t0 timestamptz := '2030-06-01 00:00:00+00';
  k text := a || ':' || store;
  pol text := CASE store WHEN 'redis' THEN 'error' ELSE 'fallback' END;
  r rl_result;
  p rl_result;
  o numeric;
  i int := 0;
BEGIN
  -- the fallback store: Redis at a port where nothing listens
  PERFORM set_config('slidewin.redis_url',
                     CASE store WHEN 'fallback' THEN 'redis://127.0.0.1:1' ELSE url END, true);
  FOREACH o IN ARRAY offsets LOOP
    i := i + 1;
    PERFORM set_config('slidewin.test_now', (t0 + o * interval '1 second')::text, true);
    PERFORM rl_attempt(k, 5, '10 seconds', 1 + i % 2, pol, algorithm => a);
  END LOOP;
  PERFORM set_config('slidewin.test_now', (t0 + at * interval '1 second')::text, true);
  r := rl_peek(k, 5, '10 seconds', pol, algorithm => a);
  remaining := r.remaining;
  t_after_s := round(extract(epoch FROM r.next_at - (t0 + at * interval '1 second')), 6);
  t_header := rl_headers(r) ->> 'RateLimit';
  PERFORM set_config('slidewin.test_now', (r.next_at - interval '1 microsecond')::text, true);
  p := rl_peek(k, 5, '10 seconds', pol, algorithm => a);
  same_just_before := p.remaining = r.remaining;
  PERFORM set_config('slidewin.test_now', r.next_at::text, true);
  p := rl_peek(k, 5, '10 seconds', pol, algorithm => a);
  more_at_next_at := p.remaining > r.remaining;
  -- spend what is left at `at`, one unit at a time: nothing more passes
  -- before next_at, and a unit does at next_at
  PERFORM set_config('slidewin.test_now', (t0 + at * interval '1 second')::text, true);
  FOR i IN 1 .. r.remaining LOOP
    PERFORM rl_attempt(k, 5, '10 seconds', 1, pol, algorithm => a);
  END LOOP;
  PERFORM set_config('slidewin.test_now', (r.next_at - interval '1 microsecond')::text, true);
  spent_until_next_at := NOT (rl_attempt(k, 5, '10 seconds', 1, pol, algorithm => a)).allowed;
  PERFORM set_config('slidewin.test_now', r.next_at::text, true);
  spent_until_next_at := spent_until_next_at AND (rl_attempt(k, 5, '10 seconds', 1, pol, algorithm => a)).allowed;
  RETURN NEXT;
END $$;

SELECT a AS algorithm, s AS store, e.*
  FROM unnest(ARRAY['sliding_log', 'sliding_counter', 'fixed_window', 'token_bucket']) a,
       unnest(ARRAY['redis', 'fallback']) s,
       LATERAL pg_temp.ew(a, s, ARRAY[1.5, 3.25, 8.0], 9.0, :'redis_url') e
 ORDER BY 1, 2;

-- An empty key: a unit spent now is back win later (the log), when the
-- window ends (fixed_window), after one token's time (token_bucket).
SET slidewin.test_now = '2030-06-01 00:01:03.5+00';
SELECT a AS algorithm, (r).remaining,
       extract(epoch FROM (r).next_at - '2030-06-01 00:01:03.5+00'::timestamptz) AS t_after_s
  FROM unnest(ARRAY['sliding_log', 'sliding_counter', 'fixed_window', 'token_bucket']) a,
       LATERAL (SELECT rl_peek('empty:' || a, 5, '10 seconds', algorithm => a) r) s;

-- A denial: t is no later than Retry-After (draft -11, section 6).
SELECT a AS algorithm, rl_headers(r) ->> 'RateLimit' AS ratelimit, rl_headers(r) ->> 'Retry-After' AS retry_after
  FROM unnest(ARRAY['sliding_log', 'sliding_counter', 'fixed_window', 'token_bucket']) a,
       LATERAL (SELECT rl_attempt('deny:' || a, 1, '10 seconds', algorithm => a) r
                  FROM generate_series(1, 2) OFFSET 1) s;

-- On the real clock too, when the deny cache answers (the third and fourth
-- call: the second's denial is cached), next_at is ahead, within the window.
RESET slidewin.test_now;
SELECT rl_reset('realclock');
SELECT i, (r).allowed, (r).next_at > clock_timestamp() AND (r).next_at <= clock_timestamp() + interval '1 hour'
         AS next_at_ahead_within_the_window
  FROM generate_series(1, 4) i, LATERAL (SELECT rl_attempt('realclock', 1, '1 hour', 1 + 0 * i) r) s;
SELECT rl_reset('realclock');
SET slidewin.test_now = '2030-06-01 00:01:03.5+00';

-- The partition key, a byte sequence (RFC 9651), in both fields.
SELECT rl_headers(r, 'per-user', sha256('regress:user:42'::bytea)) FROM rl_attempt('pk', 5, '10 seconds') r;
SELECT rl_headers(r, 'per-user', '') ->> 'RateLimit' FROM rl_attempt('pk', 5, '10 seconds') r;
SELECT rl_headers(r, 'per-user', NULL) FROM rl_attempt('pk', 5, '10 seconds') r;
\echo :LAST_ERROR_SQLSTATE
SELECT rl_headers(r, 'per-user', decode(repeat('ab', 65), 'hex')) FROM rl_attempt('pk', 5, '10 seconds') r;
\echo :LAST_ERROR_SQLSTATE

RESET slidewin.test_now;
SELECT rl_reset(a || s) FROM unnest(ARRAY['sliding_log', 'sliding_counter', 'fixed_window', 'token_bucket']) a,
       unnest(ARRAY[':redis', ':fallback']) s;
SELECT rl_reset(k) FROM unnest(ARRAY['deny:sliding_log', 'deny:sliding_counter', 'deny:fixed_window',
                                     'deny:token_bucket', 'pk']) k;
