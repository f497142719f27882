-- slidewin.error_style = json: SQLSTATE RL429 with a DETAIL a program can
-- parse; and, in every style, no key in the text a client sees unless
-- slidewin.error_show_key is on. On the test clock, so that every number
-- below is fixed.
SET TimeZone = 'UTC';
SET slidewin.key_prefix = 'regress:es:';
SET slidewin.test_now = '2030-01-01 00:00:00+00';
SET slidewin.redis_retry_interval = 0;
SELECT count(rl_reset(k)) FROM unnest(ARRAY['j1', 'w', 'sliding_log', 'sliding_counter',
  'fixed_window', 'token_bucket', 'fb', 'tenant-42-secret', 'public.es_jobs:7',
  'public.es_rows:7', 'blk', 'one']) AS k;

-- What a denial raised: SQLSTATE, message, detail and hint. Only RL429 and
-- PGRST are caught; any other error shows as itself.
CREATE FUNCTION pg_temp.denial(call text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  st text; msg text; det text; hnt text;
BEGIN
  EXECUTE call;
  RETURN jsonb_build_object('admitted', true);
EXCEPTION WHEN SQLSTATE 'RL429' OR SQLSTATE 'PGRST' THEN
  GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
                          det = PG_EXCEPTION_DETAIL, hnt = PG_EXCEPTION_HINT;
  RETURN jsonb_build_object('sqlstate', st, 'message', msg, 'detail', det, 'hint', hnt);
END $$;
-- The same under an error style and error_show_key, for this transaction.
CREATE FUNCTION pg_temp.denial_as(style text, show_key text, call text) RETURNS jsonb
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM set_config('slidewin.error_style', style, true),
          set_config('slidewin.error_show_key', show_key, true);
  RETURN pg_temp.denial(call);
END $$;

-- Every field of a json-style DETAIL against the rl_result of the same call
-- on the same clock (the call is denied and records nothing, so the two
-- see the same state): each field that disagrees is listed, with what
-- rl_result says. The headers must equal rl_headers(r).
CREATE FUNCTION pg_temp.disagreements(d jsonb, r rl_result, algorithm text) RETURNS text[]
LANGUAGE sql AS $$
  SELECT coalesce(array_agg(f || ': ' || coalesce(d -> f, 'null'::jsonb)::text
                            || ' <> ' || coalesce(want, 'null'::jsonb)::text ORDER BY f), '{}')
    FROM (VALUES
      ('limit', to_jsonb(r.lim)),
      ('remaining', to_jsonb(r.remaining)),
      ('retry_after_ms', to_jsonb(ceil(extract(epoch FROM r.retry_after) * 1000)::bigint)),
      -- on a denial, no sooner than the retry (a blocked key)
      ('reset_after_ms', CASE WHEN r.reset_at IS NOT NULL THEN to_jsonb(greatest(ceil(extract(epoch FROM
          greatest(r.reset_at - current_setting('slidewin.test_now')::timestamptz,
                   CASE WHEN NOT r.allowed THEN r.retry_after ELSE '0' END)) * 1000), 0)::bigint) END),
      ('window_ms', to_jsonb(ceil(extract(epoch FROM r.win) * 1000)::bigint)),
      ('algorithm', to_jsonb(algorithm)),
      ('headers', rl_headers(r))) AS want_(f, want)
   WHERE (d -> f) IS DISTINCT FROM coalesce(want, 'null'::jsonb)
$$;

-- The default style: the message names no key; DETAIL and HINT as ever.
SELECT allowed FROM rl_enforce('j1', 2, '1 minute');
SELECT allowed FROM rl_enforce('j1', 2, '1 minute');
SET slidewin.test_now = '2030-01-01 00:00:20.2+00';
SELECT rl_enforce('j1', 2, '1 minute');
\echo :LAST_ERROR_SQLSTATE

-- The json style: the same SQLSTATE and message, and a JSON DETAIL.
SET slidewin.error_style = json;
SELECT rl_enforce('j1', 2, '1 minute');
\echo :LAST_ERROR_SQLSTATE
-- each field, with its JSON type; then the headers object's fields
SELECT f.key, CASE jsonb_typeof(f.value) WHEN 'object' THEN '{...}' ELSE f.value::text END AS value,
       jsonb_typeof(f.value) AS type
  FROM jsonb_each((pg_temp.denial($$SELECT rl_enforce('j1', 2, '1 minute')$$) ->> 'detail')::jsonb) f
 ORDER BY f.key;
SELECT h.key, h.value, jsonb_typeof(h.value) AS type
  FROM jsonb_each((pg_temp.denial($$SELECT rl_enforce('j1', 2, '1 minute')$$) ->> 'detail')::jsonb
                  -> 'headers') h
 ORDER BY h.key;
-- the message and hint as the default style's
SELECT e ->> 'sqlstate' AS sqlstate, e ->> 'message' AS message, e ->> 'hint' AS hint
  FROM pg_temp.denial($$SELECT rl_enforce('j1', 2, '1 minute')$$) e;
-- and the same as rl_result and rl_headers say
SELECT pg_temp.disagreements((pg_temp.denial($$SELECT rl_enforce('j1', 2, '1 minute')$$) ->> 'detail')::jsonb,
                             rl_attempt('j1', 2, '1 minute'), 'sliding_log');

-- A weighted call, with units left that are too few: remaining 3, cost 4.
SELECT allowed FROM rl_enforce('w', 10, '1 hour 30 seconds 0.5 ms', 7);
SET slidewin.test_now = '2030-01-01 00:10:00.0004+00';
SELECT (pg_temp.denial($$SELECT rl_enforce('w', 10, '1 hour 30 seconds 0.5 ms', 4)$$) ->> 'detail')::jsonb
       - 'headers' AS detail;
SELECT pg_temp.disagreements((pg_temp.denial($$SELECT rl_enforce('w', 10, '1 hour 30 seconds 0.5 ms', 4)$$) ->> 'detail')::jsonb,
                             rl_attempt('w', 10, '1 hour 30 seconds 0.5 ms', 4), 'sliding_log');

-- Every algorithm: lim 3 per 10 seconds, 3 admitted, the 4th denied 2.5 s later.
SET slidewin.test_now = '2030-01-01 00:00:00+00';
SELECT a, count(*) FILTER (WHERE (rl_enforce(a, 3, '10 seconds', algorithm => a)).allowed) AS admitted
  FROM unnest(ARRAY['sliding_log', 'sliding_counter', 'fixed_window', 'token_bucket']) a,
       generate_series(1, 3)
 GROUP BY a ORDER BY a;
SET slidewin.test_now = '2030-01-01 00:00:02.5+00';
SELECT a, d -> 'algorithm' AS algorithm, d -> 'used' AS used, d -> 'remaining' AS remaining,
       d -> 'retry_after_ms' AS retry_after_ms, d -> 'reset_after_ms' AS reset_after_ms,
       pg_temp.disagreements(d, rl_attempt(a, 3, '10 seconds', algorithm => a), a) AS disagreements
  FROM unnest(ARRAY['sliding_log', 'sliding_counter', 'fixed_window', 'token_bucket']) a,
       LATERAL (SELECT (pg_temp.denial(format('SELECT rl_enforce(%L, 3, %L, algorithm => %L)',
                                              a, '10 seconds', a)) ->> 'detail')::jsonb) AS x(d)
 ORDER BY a;

-- Redis unreachable and the failure policy denies: no store counted, so
-- remaining, used and reset_after_ms are null, and so are the header fields
-- that need them; what the call was judged against is still known.
-- retry_after_ms is when this backend tries Redis again (here at once:
-- redis_retry_interval is 0).
SET slidewin.redis_url = 'redis://127.0.0.1:1';
SET client_min_messages = error;
SELECT rl_enforce('fb', 4, '1 minute', 1, 'deny');
\echo :LAST_ERROR_SQLSTATE
SELECT pg_temp.disagreements((pg_temp.denial($$SELECT rl_enforce('fb', 4, '1 minute', 1, 'deny')$$) ->> 'detail')::jsonb,
                             rl_attempt('fb', 4, '1 minute', 1, 'deny'), 'sliding_log');
RESET client_min_messages;
RESET slidewin.redis_url;

-- A blocked key (rl_block), its window empty: every call is denied until
-- the block ends, so the quota is back then, not now. reset_after_ms and
-- the headers' t and X-RateLimit-Reset count to the block's end, as
-- retry_after_ms and Retry-After do; "used" is what the window holds (0),
-- and "blocked" says why nothing is left.
SET slidewin.test_now = '2030-01-01 00:00:00+00';
SELECT count(*) AS keys_cleared FROM (SELECT rl_reset('blk'), rl_unblock('blk')) r;
SELECT rl_block('blk', '15 minutes');
SELECT (pg_temp.denial($$SELECT rl_enforce('blk', 5, '1 minute')$$) ->> 'detail')::jsonb AS detail;
SELECT pg_temp.disagreements((pg_temp.denial($$SELECT rl_enforce('blk', 5, '1 minute')$$) ->> 'detail')::jsonb,
                             rl_attempt('blk', 5, '1 minute'), 'sliding_log');
-- a key not blocked says so
SELECT (pg_temp.denial($$SELECT rl_enforce('j1', 2, '1 minute')$$) ->> 'detail')::jsonb -> 'blocked' AS blocked;
SELECT rl_unblock('blk');
RESET slidewin.error_style;

-- The hint counts in the singular when it is 1 second, in the log's DETAIL
-- too: 1 unit per second, spent.
SELECT allowed FROM rl_enforce('one', 1, '1 second');
SELECT rl_enforce('one', 1, '1 second');
SET slidewin.log_denials = notice;
SELECT rl_enforce('one', 1, '1 second');
RESET slidewin.log_denials;
SET slidewin.error_style = json;

-- A denied rl_acquire(raise => true): retry_after_ms and Retry-After are
-- the same time, or both absent when nobody can say. Under the deny policy
-- no store answered: the retry is when this backend tries Redis again (at
-- once here), and the hint says nothing of holders.
SET slidewin.redis_url = 'redis://127.0.0.1:1';
SET client_min_messages = error;
SELECT pg_temp.denial($$SELECT rl_acquire('slot', 1, on_redis_error => 'deny', raise => true)$$) - 'message';
SELECT pg_temp.denial_as('postgres', 'off', $$SELECT rl_acquire('slot', 1, on_redis_error => 'deny', raise => true)$$) - 'message';
-- The fallback store's slots have no lease: one frees when its holder's
-- transaction ends, which nobody can time, so there is no retry time. The
-- holder is another session (dblink), on the same unreachable Redis.
CREATE EXTENSION IF NOT EXISTS dblink;
SELECT format('dbname=%s port=%s host=%s options=''-c slidewin.key_prefix=%s -c slidewin.redis_url=%s''',
              current_database(), current_setting('port'),
              split_part(current_setting('unix_socket_directories'), ',', 1),
              current_setting('slidewin.key_prefix'), current_setting('slidewin.redis_url')) AS fb_conn \gset
SELECT dblink_connect('holder', :'fb_conn');
SELECT dblink_exec('holder', 'BEGIN');
SELECT * FROM dblink('holder', $$SELECT acquired, store FROM rl_acquire('slot', 1, on_redis_error => 'fallback')$$)
  AS t(acquired boolean, store text);
SELECT pg_temp.denial($$SELECT rl_acquire('slot', 1, on_redis_error => 'fallback', raise => true)$$) - 'message';
SELECT pg_temp.denial_as('postgrest', 'off', $$SELECT rl_acquire('slot', 1, on_redis_error => 'fallback', raise => true)$$);
SELECT dblink_exec('holder', 'COMMIT');
SELECT dblink_disconnect('holder');
RESET client_min_messages;
RESET slidewin.redis_url;
-- Redis: the holder's lease (10 minutes) ends at the latest; the two say
-- the same time, rounded up to the millisecond and to the second. (Leases
-- run on Redis's clock, which the other session has: no test clock here.)
RESET slidewin.test_now;
SELECT format('dbname=%s port=%s host=%s options=''-c slidewin.key_prefix=%s''',
              current_database(), current_setting('port'),
              split_part(current_setting('unix_socket_directories'), ',', 1),
              current_setting('slidewin.key_prefix')) AS redis_conn \gset
SELECT dblink_connect('holder', :'redis_conn');
SELECT dblink_exec('holder', 'BEGIN');
SELECT * FROM dblink('holder', $$SELECT acquired, store FROM rl_acquire('slot', 1, '10 minutes')$$)
  AS t(acquired boolean, store text);
SELECT d ->> 'holders' AS holders,
       (d ->> 'retry_after_ms')::bigint BETWEEN 590000 AND 600000 AS retry_within_the_lease,
       (d -> 'headers' ->> 'Retry-After')::bigint = ceil((d ->> 'retry_after_ms')::bigint / 1000.0) AS same_retry,
       e ->> 'hint' AS hint
  FROM pg_temp.denial($$SELECT rl_acquire('slot', 1, raise => true)$$) e,
       LATERAL (SELECT (e ->> 'detail')::jsonb) AS x(d);
SELECT dblink_exec('holder', 'ROLLBACK');
SELECT dblink_disconnect('holder');
DROP EXTENSION dblink;
SET slidewin.test_now = '2030-01-01 00:00:02.5+00';

-- rl_trigger raises the same. A row trigger:
CREATE TABLE es_jobs (tenant int);
CREATE TRIGGER es_jobs_quota BEFORE INSERT ON es_jobs
  FOR EACH ROW EXECUTE FUNCTION rl_trigger('tenant', '1', '1 minute');
INSERT INTO es_jobs VALUES (7);
INSERT INTO es_jobs VALUES (7);
\echo :LAST_ERROR_SQLSTATE
-- A statement that needs more units than the limit: no retry can pass, so
-- retry_after_ms is null and there is no Retry-After; nothing was counted.
CREATE TABLE es_rows (tenant int, units int);
CREATE TRIGGER es_rows_quota AFTER INSERT ON es_rows
  REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION rl_trigger('tenant', '10', '1 hour', 'units');
INSERT INTO es_rows VALUES (7, 6), (7, 5);
\echo :LAST_ERROR_SQLSTATE
SELECT remaining FROM rl_peek('public.es_rows:7', 10, '1 hour');

-- No style shows the key to the client unless slidewin.error_show_key is
-- on; slidewin.log_denials still names it.
SET slidewin.test_now = '2030-01-01 00:00:00+00';
SELECT allowed FROM rl_enforce('tenant-42-secret', 1, '1 minute');
SELECT s AS style, show_key,
       e ->> 'sqlstate' AS sqlstate,
       (e ->> 'message') || (e ->> 'detail') || coalesce(e ->> 'hint', '') LIKE '%tenant-42-secret%' AS names_key,
       e ->> 'message' AS message
  FROM unnest(ARRAY['postgres', 'postgrest', 'json']) s,
       unnest(ARRAY['off', 'on']) show_key,
       LATERAL pg_temp.denial_as(s, show_key, $$SELECT rl_enforce('tenant-42-secret', 1, '1 minute')$$) e
 ORDER BY s, show_key;
-- the same through the triggers
SELECT s AS style, show_key, e ->> 'sqlstate' AS sqlstate,
       (e ->> 'message') || (e ->> 'detail') || coalesce(e ->> 'hint', '') LIKE '%es_jobs:7%' AS row_names_key,
       (f ->> 'message') || (f ->> 'detail') || coalesce(f ->> 'hint', '') LIKE '%es_rows:7%' AS statement_names_key
  FROM unnest(ARRAY['postgres', 'postgrest', 'json']) s,
       unnest(ARRAY['off', 'on']) show_key,
       LATERAL pg_temp.denial_as(s, show_key, 'INSERT INTO es_jobs VALUES (7)') e,
       LATERAL pg_temp.denial_as(s, show_key, 'INSERT INTO es_rows VALUES (7, 11)') f
 ORDER BY s, show_key;
-- with the key shown, the json style names it in the message and the DETAIL
SET slidewin.error_show_key = on;
SELECT rl_enforce('tenant-42-secret', 1, '1 minute');
SET slidewin.error_style = postgrest;
SELECT rl_enforce('tenant-42-secret', 1, '1 minute');
RESET slidewin.error_show_key;
SELECT rl_enforce('tenant-42-secret', 1, '1 minute');
SET slidewin.log_denials = notice;
SET slidewin.error_style = json;
SELECT rl_enforce('tenant-42-secret', 1, '1 minute');
RESET slidewin.log_denials;

-- Only a superuser decides whether keys are shown (keys may be built from
-- secrets): an ordinary role may choose the style, not error_show_key,
-- not even for itself with ALTER ROLE.
SELECT current_user AS superuser \gset
CREATE ROLE regress_es_user LOGIN;
SET ROLE regress_es_user;
SET slidewin.error_style = json;
SET slidewin.error_show_key = on;
\echo :LAST_ERROR_SQLSTATE
SELECT set_config('slidewin.error_show_key', 'on', true);
\echo :LAST_ERROR_SQLSTATE
-- (only the SQLSTATE: the wording of this refusal is PostgreSQL's to change)
\set VERBOSITY sqlstate
ALTER ROLE regress_es_user SET slidewin.error_show_key = on;
\set VERBOSITY default
SHOW slidewin.error_show_key;
RESET ROLE;
SELECT count(*) AS role_settings FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole
 WHERE r.rolname = 'regress_es_user';
-- a superuser may, for a role
ALTER ROLE regress_es_user SET slidewin.error_show_key = on;
\c - regress_es_user
SHOW slidewin.error_show_key;
\c - :superuser
ALTER ROLE regress_es_user RESET slidewin.error_show_key;
DROP ROLE regress_es_user;

SET slidewin.key_prefix = 'regress:es:';
SELECT count(rl_reset(k)) FROM unnest(ARRAY['j1', 'w', 'sliding_log', 'sliding_counter',
  'fixed_window', 'token_bucket', 'fb', 'tenant-42-secret', 'public.es_jobs:7',
  'public.es_rows:7', 'blk', 'one']) AS k;
DROP TABLE es_jobs, es_rows;
