-- The boundary experiment on the test clock, for the chart of the four
-- algorithms (test/bench/charts.sh boundary). Limit 50 per 10 s; one call
-- every 10 ms from 9 s to 11 s after a time that is a multiple of 10 s since
-- the Unix epoch, so fixed windows turn over at 10 s. Prints, per algorithm
-- and call, the call's time in ms and the calls admitted so far, tab
-- separated. Needs a superuser (slidewin.test_now, rl_reset) and a Redis.
SET client_min_messages = warning;
SET TimeZone = 'UTC';
CREATE TEMP TABLE chart_boundary (algorithm text, t_ms int, admitted int);
DO $$
DECLARE
  a text;
  n int;
BEGIN
  FOREACH a IN ARRAY ARRAY['fixed_window', 'sliding_log', 'sliding_counter', 'token_bucket'] LOOP
    PERFORM rl_reset('chart:boundary:' || a);
    n := 0;
    FOR i IN 0..199 LOOP
      PERFORM set_config('slidewin.test_now',
                         (timestamptz '2030-01-01 00:00:00+00' + make_interval(secs => 9 + i * 0.01))::text,
                         true);
      IF rl_allow('chart:boundary:' || a, 50, '10 seconds', 1, algorithm => a) THEN
        n := n + 1;
      END IF;
      INSERT INTO chart_boundary VALUES (a, 9000 + i * 10, n);
    END LOOP;
    PERFORM rl_reset('chart:boundary:' || a);
  END LOOP;
END $$;
SELECT algorithm, t_ms, admitted FROM chart_boundary
 ORDER BY array_position(ARRAY['fixed_window', 'sliding_log', 'sliding_counter', 'token_bucket'], algorithm), t_ms;
