-- The boundary experiment, on real time. Limit 50 per 10 s. A full burst
-- of 50 lands just before a 10-second boundary (fixed windows are aligned
-- to multiples of the window since the Unix epoch), another just after it.
\echo
\echo '== Algorithms: the boundary experiment (limit 50 per 10 s, real time) =='
SELECT rl_reset('boundary:' || a)
  FROM unnest(ARRAY['fixed_window', 'sliding_log', 'sliding_counter', 'token_bucket']) a \g /dev/null
-- sleep until 0.3 s before the next boundary
SELECT pg_sleep(10 - mod(extract(epoch FROM clock_timestamp())::numeric, 10) - 0.3) \g /dev/null
CREATE TEMP TABLE burst AS
SELECT a AS algorithm, 1 AS burst, count(*) FILTER (WHERE (r).allowed) AS admitted
  FROM unnest(ARRAY['fixed_window', 'sliding_log', 'sliding_counter', 'token_bucket']) a,
       LATERAL (SELECT rl_attempt('boundary:' || a, 50, '10 seconds', 1, algorithm => a) AS r
                  FROM generate_series(1, 50) OFFSET 0) calls
 GROUP BY a;
SELECT pg_sleep(0.6) \g /dev/null
INSERT INTO burst
SELECT a, 2, count(*) FILTER (WHERE (r).allowed)
  FROM unnest(ARRAY['fixed_window', 'sliding_log', 'sliding_counter', 'token_bucket']) a,
       LATERAL (SELECT rl_attempt('boundary:' || a, 50, '10 seconds', 1, algorithm => a) AS r
                  FROM generate_series(1, 50) OFFSET 0) calls
 GROUP BY a;
SELECT algorithm,
       sum(admitted) FILTER (WHERE burst = 1) AS "before boundary",
       sum(admitted) FILTER (WHERE burst = 2) AS "after boundary",
       sum(admitted) AS "admitted within 0.6 s"
  FROM burst
 GROUP BY algorithm
 ORDER BY sum(admitted) DESC, algorithm;
\echo 'fixed_window lets 2 x the limit through around the boundary; sliding_log never'
\echo 'more than the limit in any 10 s; sliding_counter and token_bucket land close to it.'
DROP TABLE burst;
