-- The seams of exactness across an outage (issue 35): an answer of Redis
-- stands in for the fallback store's own rows only if those rows are in
-- Redis. On the test clock, lim 5 (or 3) per minute.
SET slidewin.key_prefix = 'regress:seam:';
SET TimeZone = 'UTC';
SET slidewin.redis_retry_interval = 0;
SELECT count(rl_reset(k)) FROM unnest(ARRAY['p', 'q', 'r', 'r2', 's']) k;
TRUNCATE rl_fallback_carry;
\set regdb :DBNAME
CREATE FUNCTION pg_temp.at(s int) RETURNS void LANGUAGE sql AS $$
  SELECT set_config('slidewin.test_now',
                    (timestamptz '2031-01-01 00:00:00+00' + s * interval '1 second')::text, false);
$$;
CREATE FUNCTION pg_temp.down() RETURNS void LANGUAGE sql AS $$
  SELECT set_config('slidewin.redis_url', 'redis://127.0.0.1:1', false);
$$;
CREATE FUNCTION pg_temp.up() RETURNS void LANGUAGE sql AS $$
  SELECT set_config('slidewin.redis_url', current_setting('regress.redis_url'), false);
$$;
SELECT set_config('regress.redis_url', current_setting('slidewin.redis_url'), false) IS NOT NULL AS saved;

-- F1, a peek between two outages. Redis admits 1 at 0 s; in the outage at
-- 10 s the fallback store admits 4 (5 of 5); at 20 s Redis is back and a
-- peek answers (it carries nothing: Redis still has 1); at 30 s Redis is
-- gone again. The peek's answer does not stand in for the 4 rows, which
-- Redis never saw: the window holds 5, so no more is admitted.
SELECT pg_temp.at(0);
SELECT allowed, remaining, store FROM rl_attempt('p', 5, '1 minute');
SELECT pg_temp.down(), pg_temp.at(10);
SELECT count(*) FILTER (WHERE (rl_attempt('p', 5, '1 minute')).allowed) AS admitted FROM generate_series(1, 4);
SELECT pg_temp.up(), pg_temp.at(20);
SELECT allowed, remaining, store FROM rl_peek('p', 5, '1 minute');
SELECT pg_temp.down(), pg_temp.at(30);
SELECT allowed, remaining, store FROM rl_attempt('p', 5, '1 minute');
-- back at 40 s: the 4 are carried before Redis decides, so Redis holds 5
SELECT pg_temp.up(), pg_temp.at(40);
SELECT allowed, remaining, store FROM rl_attempt('p', 5, '1 minute');

-- F1, another database between two outages. A second database carries
-- only its own rows, so its answer stands in for none of this one's.
SELECT pg_temp.at(100);
SELECT allowed, remaining, store FROM rl_attempt('q', 5, '1 minute');
SELECT pg_temp.down(), pg_temp.at(110);
SELECT count(*) FILTER (WHERE (rl_attempt('q', 5, '1 minute')).allowed) AS admitted FROM generate_series(1, 4);
SET client_min_messages = warning;
DROP DATABASE IF EXISTS slidewin_seam_other;
CREATE DATABASE slidewin_seam_other;
RESET client_min_messages;
\c slidewin_seam_other
SET client_min_messages = warning;
CREATE EXTENSION slidewin;
RESET client_min_messages;
SET slidewin.key_prefix = 'regress:seam:';
SET slidewin.redis_retry_interval = 0;
SELECT set_config('slidewin.test_now', '2031-01-01 00:02:00+00', false) IS NOT NULL AS at_120;
-- Redis decides without the first database's 4 rows (the bound of
-- doc/failure-modes.md: each database is a fallback store of its own)
SELECT allowed, remaining, store FROM rl_attempt('q', 5, '1 minute');
\c :regdb
SET slidewin.key_prefix = 'regress:seam:';
SET TimeZone = 'UTC';
SET slidewin.redis_retry_interval = 0;
SELECT set_config('regress.redis_url', current_setting('slidewin.redis_url'), false) IS NOT NULL AS saved;
CREATE FUNCTION pg_temp.at(s int) RETURNS void LANGUAGE sql AS $$
  SELECT set_config('slidewin.test_now',
                    (timestamptz '2031-01-01 00:00:00+00' + s * interval '1 second')::text, false);
$$;
CREATE FUNCTION pg_temp.down() RETURNS void LANGUAGE sql AS $$
  SELECT set_config('slidewin.redis_url', 'redis://127.0.0.1:1', false);
$$;
CREATE FUNCTION pg_temp.up() RETURNS void LANGUAGE sql AS $$
  SELECT set_config('slidewin.redis_url', current_setting('regress.redis_url'), false);
$$;
SELECT pg_temp.down(), pg_temp.at(130);
-- Redis's 2 and this database's own 4: none more
SELECT allowed, remaining, store FROM rl_attempt('q', 5, '1 minute');
SET client_min_messages = warning;
DROP DATABASE slidewin_seam_other;
RESET client_min_messages;

-- F2, a prepared transaction. Its 3 fallback admissions become visible at
-- COMMIT PREPARED; a backend that looked for rows to carry before that
-- (here, this one, through another key's call) looks again after it, so
-- Redis has them before it decides: lim 3, denied.
SELECT pg_temp.down(), pg_temp.at(200);
BEGIN;
SELECT count(*) FILTER (WHERE (rl_attempt('r', 3, '1 minute')).allowed) AS admitted FROM generate_series(1, 3);
PREPARE TRANSACTION 'slidewin_seam';
SELECT pg_temp.up(), pg_temp.at(201);
SELECT allowed, store FROM rl_attempt('r2', 3, '1 minute');
SELECT count(*) AS waiting FROM rl_fallback_carry;
COMMIT PREPARED 'slidewin_seam';
SELECT count(*) AS waiting FROM rl_fallback_carry;
SELECT allowed, remaining, store FROM rl_attempt('r', 3, '1 minute');
SELECT count(*) AS waiting FROM rl_fallback_carry;

-- F6, a refund after the carry. 3 of 3 admitted in the fallback store and
-- carried into Redis; the first one's ticket then gives its unit back in
-- Redis too, at once.
SELECT pg_temp.down(), pg_temp.at(300);
SELECT ticket AS s_ticket FROM rl_attempt('s', 3, '1 minute') \gset
SELECT count(*) FILTER (WHERE (rl_attempt('s', 3, '1 minute')).allowed) AS admitted FROM generate_series(1, 2);
SELECT pg_temp.up(), pg_temp.at(301);
SELECT allowed, remaining, store FROM rl_peek('s', 3, '1 minute');
SELECT allowed, remaining, store FROM rl_attempt('s', 3, '1 minute');
SELECT count(*) AS waiting FROM rl_fallback_carry;
SELECT rl_refund('s', :'s_ticket') AS given;
SELECT allowed, remaining, store FROM rl_peek('s', 3, '1 minute');
-- handed in again: nothing more to give back, in either store
SELECT rl_refund('s', :'s_ticket') AS given;
SELECT allowed, remaining, store FROM rl_attempt('s', 3, '1 minute');
SELECT allowed, remaining, store FROM rl_attempt('s', 3, '1 minute');
-- a carried entry cannot be given back while Redis cannot answer: an
-- ERROR, and the ticket stays good
SELECT pg_temp.down(), pg_temp.at(302);
SELECT ticket AS s2_ticket FROM rl_attempt('s2', 3, '1 minute') \gset
SELECT pg_temp.up(), pg_temp.at(303);
SELECT allowed, remaining, store FROM rl_attempt('s2', 3, '1 minute');
SELECT pg_temp.down();
\set VERBOSITY terse
SELECT rl_refund('s2', :'s2_ticket') AS given;
\set VERBOSITY default
SELECT pg_temp.up();
SELECT rl_refund('s2', :'s2_ticket') AS given;
SELECT allowed, remaining, store FROM rl_peek('s2', 3, '1 minute');

RESET slidewin.test_now;
RESET slidewin.redis_url;
SELECT count(rl_reset(k)) FROM unnest(ARRAY['p', 'q', 'r', 'r2', 's', 's2']) k;
