-- rl_headers finds a row type's fields once and keeps where they are for
-- the backend's life (denial.c); a change of the type must be seen at the
-- next call, or a field would be read from where it no longer is.
SET TimeZone = 'UTC';
SET slidewin.test_now = '2030-01-01 00:00:00+00';
CREATE TYPE regress_hl AS (allowed bool, remaining bigint, retry_after interval,
                           reset_at timestamptz, lim bigint, win interval);
SELECT rl_headers(ARRAY[ROW(true, 3, '0', '2030-01-01 00:01:00+00', 5, '1 minute')::regress_hl],
                  ARRAY['p']);
-- remaining moves to the end; the same result must give the same fields
ALTER TYPE regress_hl DROP ATTRIBUTE remaining;
ALTER TYPE regress_hl ADD ATTRIBUTE remaining bigint;
SELECT rl_headers(ARRAY[ROW(true, '0', '2030-01-01 00:01:00+00', 5, '1 minute', 3)::regress_hl],
                  ARRAY['p']);
-- and a field renamed away is missed, not read from its old place
ALTER TYPE regress_hl RENAME ATTRIBUTE lim TO lim_renamed;
SELECT rl_headers(ARRAY[ROW(true, '0', '2030-01-01 00:01:00+00', 5, '1 minute', 3)::regress_hl],
                  ARRAY['p']);
-- rl_result between them, in one statement: each row read by its own type
SELECT rl_headers(r, 'a') = rl_headers(ARRAY[r], ARRAY['a']) AS same_fields
  FROM (SELECT ROW(true, 3, '0', '2030-01-01 00:01:00+00', 'redis', 5, '1 minute',
                   NULL, NULL)::rl_result AS r) AS s;
DROP TYPE regress_hl;
