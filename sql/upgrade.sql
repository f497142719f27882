-- The upgrade path: install 1.0, leave fallback rows in its layout, update
-- to the current version, and keep counting from those rows. (A fresh
-- install runs the same scripts: 1.0, then each update in turn.)
SET client_min_messages = warning;
DROP EXTENSION slidewin;
CREATE EXTENSION slidewin VERSION '1.0';
RESET client_min_messages;
SELECT extversion FROM pg_extension WHERE extname = 'slidewin';

-- What the DBA did under 1.0 must survive the update: a REVOKE from PUBLIC,
-- a grant to one role, and a view that calls the functions.
CREATE ROLE regress_up_user;
REVOKE EXECUTE ON FUNCTION rl_attempt(text, bigint, interval, bigint, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION rl_allow(text, bigint, interval, bigint, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rl_allow(text, bigint, interval, bigint, text) TO regress_up_user;
CREATE VIEW regress_up_view AS
  SELECT (rl_attempt('view', 5, '1 hour')).allowed AS attempt_allowed,
         rl_allow('view', 5, '1 hour') AS allow_allowed,
         (rl_peek('view', 5, '1 hour')).remaining AS peek_remaining;

SET slidewin.key_prefix = 'regress:up:';
SET TimeZone = 'UTC';
SET slidewin.redis_retry_interval = 0;
SET slidewin.redis_url = 'redis://127.0.0.1:1';
SET slidewin.test_now = '2032-01-01 00:10:00+00';
-- rows as 1.0 wrote them (key, ts, total): a base row that has left a
-- 10-minute window, then 3 live calls of costs 2, 1 and 4
INSERT INTO rl_fallback_log VALUES
  ('regress:up:k', 1956528000000000, 5),
  ('regress:up:k', 1956528060000000, 7),
  ('regress:up:k', 1956528120000000, 8),
  ('regress:up:k', 1956528180000000, 12);
-- this library needs the new layout, and says how to get it
SELECT * FROM rl_attempt('k', 10, '10 minutes');
\echo :LAST_ERROR_SQLSTATE
-- a call that needs no store answers in 1.0's rl_result, of five columns
SELECT * FROM rl_attempt('five', 5, '1 hour', on_redis_error => 'allow');

ALTER EXTENSION slidewin UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'slidewin';
SELECT ts, total, cost FROM rl_fallback_log ORDER BY ts;
-- 1.4's head of the key: its newest row, and an expiry no row outlives
SELECT h.key, h.log, h.ts, h.total,
       h.expires = (SELECT max(expires) FROM rl_fallback_log) AS last_row_expiry
  FROM rl_fallback_head h;
-- 7 units live (2 + 1 + 4): 3 remain
SELECT allowed, remaining, retry_after, store FROM rl_attempt('k', 10, '10 minutes', 3);
SELECT allowed, remaining, retry_after, store FROM rl_attempt('k', 10, '10 minutes', 1);
SELECT indexrelid::regclass FROM pg_index WHERE indrelid = 'rl_fallback_log'::regclass ORDER BY indexrelid::regclass::text;


-- The functions are the same objects, with 1.1's parameters (as a fresh
-- install declares them), their grants and their dependent view.
SELECT p.oid::regprocedure AS function, pg_get_function_arguments(p.oid) AS arguments
  FROM pg_proc p WHERE proname IN ('rl_attempt', 'rl_allow', 'rl_peek') ORDER BY p.oid::regprocedure::text;
SELECT has_function_privilege('regress_up_user', 'rl_allow(text,bigint,interval,bigint,text,boolean,text)', 'EXECUTE') AS user_may_allow,
       has_function_privilege('regress_up_user', 'rl_attempt(text,bigint,interval,bigint,text,boolean,text)', 'EXECUTE') AS user_may_attempt,
       has_function_privilege('public', 'rl_allow(text,bigint,interval,bigint,text,boolean,text)', 'EXECUTE') AS public_may_allow,
       has_function_privilege('public', 'rl_peek(text,bigint,interval,text,text)', 'EXECUTE') AS public_may_peek;
SET ROLE regress_up_user;
SELECT rl_allow('granted', 5, '1 hour');
SELECT allowed FROM rl_attempt('revoked', 5, '1 hour');
RESET ROLE;
SELECT * FROM regress_up_view;
SELECT pg_get_viewdef('regress_up_view'::regclass) LIKE '%rl_attempt(%' AS view_calls_rl_attempt;
-- the new parameters work by name
SELECT allowed, store FROM rl_attempt('k2', 10, '10 minutes', algorithm => 'fixed_window');
SELECT allowed, store FROM rl_peek('k2', 10, '10 minutes', algorithm => 'fixed_window');
DROP VIEW regress_up_view;
REVOKE EXECUTE ON FUNCTION rl_allow(text, bigint, interval, bigint, text, boolean, text) FROM regress_up_user;
DROP ROLE regress_up_user;
GRANT EXECUTE ON FUNCTION rl_attempt(text, bigint, interval, bigint, text, boolean, text) TO PUBLIC;
GRANT EXECUTE ON FUNCTION rl_allow(text, bigint, interval, bigint, text, boolean, text) TO PUBLIC;

-- 1.2's statistics arrive with the update: the views answer, and the reset
-- is not PUBLIC's.
SELECT calls >= 0 AS stats_answer FROM rl_stats;
SELECT count(*) >= 0 AS rules_answer FROM rl_stats_rules;
SELECT count(*) >= 0 AS keys_answer FROM rl_top_keys;
SELECT has_function_privilege('public', 'rl_stats_reset()', 'EXECUTE') AS public_may_reset,
       has_table_privilege('public', 'rl_stats', 'SELECT') AS public_may_read;

-- 1.5's rl_check arrives with the update, and is not PUBLIC's.
SELECT has_function_privilege('public', 'rl_check()', 'EXECUTE') AS public_may_check,
       pg_get_function_result('rl_check()'::regprocedure) AS check_returns;

-- 1.6: rl_result says the limit a call was judged against, and rl_headers
-- arrives.
SELECT * FROM rl_attempt('six', 5, '1 hour', on_redis_error => 'allow');
SELECT rl_headers(r) FROM rl_attempt('six', 5, '1 hour', on_redis_error => 'allow') r;

-- 1.7: rl_result names the entry a call recorded (its ticket; NULL when
-- nothing was recorded), signed with a secret made by the update, which no
-- role but the owner may read.
SELECT ticket IS NULL AS no_entry_no_ticket
  FROM rl_attempt('seven', 5, '1 hour', on_redis_error => 'allow');
SELECT has_table_privilege('public', 'rl_ticket_secret', 'SELECT') AS public_may_read_secret,
       (SELECT count(*) FROM rl_ticket_secret) AS secrets,
       (SELECT length(secret) FROM rl_ticket_secret) AS secret_bytes;
SELECT has_function_privilege('public', 'rl_refund(text,text)', 'EXECUTE') AS public_may_refund,
       has_function_privilege('public', 'rl_penalize(text,bigint,interval,bigint,text)', 'EXECUTE') AS public_may_penalize;
-- 1.7: rl_block and rl_unblock, not PUBLIC's, and the fallback store's
-- table of blocks.
SELECT has_function_privilege('public', 'rl_block(text,interval)', 'EXECUTE') AS public_may_block,
       has_function_privilege('public', 'rl_unblock(text)', 'EXECUTE') AS public_may_unblock,
       has_table_privilege('public', 'rl_fallback_block', 'SELECT') AS public_may_read_blocks,
       pg_get_function_result('rl_block(text,interval)'::regprocedure) AS block_returns;

-- 1.8: the fallback store's admissions waiting for Redis, in a table no
-- role but the owner may read, and rl_stats's last columns counting them.
SELECT has_table_privilege('public', 'rl_fallback_carry', 'SELECT') AS public_may_read_carry,
       (SELECT string_agg(attname, ', ' ORDER BY attnum) FROM pg_attribute
         WHERE attrelid = 'rl_fallback_carry'::regclass AND attnum > 0) AS carry_columns;
SELECT outage_seeded_units >= 0 AND outage_carry_pending >= 0 AS outage_columns
  FROM rl_stats;

-- 1.9: rl_headers is the C function that also gives the json error
-- style's headers, with its default name and no settings of its own.
SELECT l.lanname AS headers_language, p.proconfig AS headers_settings,
       pg_get_function_arguments(p.oid) AS headers_arguments
  FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
 WHERE p.oid = 'rl_headers(rl_result,text)'::regprocedure;

-- 1.10: rl_stats's last column says since when Redis has been unreachable
-- (NULL while it answers), and everyone may read it, as the view.
SELECT pg_typeof(redis_unreachable_since) AS unreachable_since_type,
       has_function_privilege('public', 'rl_redis_outage()', 'EXECUTE') AS public_may_read_outage,
       (SELECT attname FROM pg_attribute WHERE attrelid = 'rl_stats'::regclass
         ORDER BY attnum DESC LIMIT 1) AS last_column
  FROM rl_stats;

-- 1.11: rl_result's last column says when the window next frees a unit
-- (NULL when no store answered), and rl_headers takes a partition key.
SELECT (SELECT attname FROM pg_attribute WHERE attrelid = 'rl_result'::regclass
         ORDER BY attnum DESC LIMIT 1) AS last_result_column,
       (r).next_at IS NULL AS next_at_null_without_a_store,
       rl_headers(r, 'p', '\x0102'::bytea) ->> 'RateLimit-Policy' AS policy_with_pk
  FROM (SELECT rl_attempt('eleven', 5, '1 hour', on_redis_error => 'allow') r) s;

-- 1.3 stores the default of cost as a bigint constant, not a cast of an
-- integer that every call reading it would fold again: no default of any
-- function is a function call.
SELECT p.oid::regprocedure AS function_with_a_call_in_its_defaults
  FROM pg_proc p
  JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
 WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'slidewin')
   AND p.proargdefaults IS NOT NULL
   AND p.proargdefaults::text LIKE '%FUNCEXPR%';
SELECT count(*) AS functions_with_cost_default
  FROM pg_proc p
 WHERE p.proname IN ('rl_attempt', 'rl_allow', 'rl_enforce', 'rl_attempt_multi', 'rl_wait')
   AND pg_get_function_arguments(p.oid) LIKE '%cost bigint DEFAULT ''1''::bigint%';

-- The updated extension has exactly the objects of a fresh install.
CREATE TEMP TABLE updated_objects AS
  SELECT pg_describe_object(classid, objid, objsubid) AS object
    FROM pg_depend
   WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
     AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'slidewin');
SET client_min_messages = warning;
DROP EXTENSION slidewin;
CREATE EXTENSION slidewin;
RESET client_min_messages;
SELECT extversion FROM pg_extension WHERE extname = 'slidewin';
SELECT object AS only_after_update FROM updated_objects
EXCEPT
SELECT pg_describe_object(classid, objid, objsubid)
  FROM pg_depend
 WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
   AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'slidewin');
SELECT pg_describe_object(classid, objid, objsubid) AS only_in_fresh_install
  FROM pg_depend
 WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
   AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'slidewin')
EXCEPT
SELECT object FROM updated_objects;
-- PostgreSQL 17 also records the row types of the extension's tables and
-- views, and every array type, as members of the extension: the count
-- leaves them out, so that it is the same on every major.
SELECT count(*) AS objects_compared FROM updated_objects
 WHERE object !~ '^type .*\[\]$'
   AND object NOT IN (SELECT 'type ' || c.relname FROM pg_class c
                       WHERE c.relkind IN ('r', 'v') AND c.relname LIKE 'rl\_%');

-- The update reaches the current version from every earlier one, each time
-- with exactly the objects of a fresh install (the one just made).
CREATE TEMP TABLE fresh_objects AS
  SELECT pg_describe_object(classid, objid, objsubid) AS object
    FROM pg_depend
   WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
     AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'slidewin');
CREATE FUNCTION pg_temp.update_from(v text)
RETURNS TABLE (from_version text, updated_to text, only_after_update bigint,
               only_in_fresh_install bigint, public_may_check boolean)
LANGUAGE plpgsql AS $$
BEGIN
  DROP EXTENSION slidewin;
  EXECUTE format('CREATE EXTENSION slidewin VERSION %L', v);
  ALTER EXTENSION slidewin UPDATE;
  CREATE TEMP TABLE updated AS
    SELECT pg_describe_object(classid, objid, objsubid) AS object
      FROM pg_depend
     WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
       AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'slidewin');
  RETURN QUERY
    SELECT v,
           (SELECT extversion FROM pg_extension WHERE extname = 'slidewin')::text,
           (SELECT count(*) FROM (SELECT object FROM updated EXCEPT SELECT object FROM fresh_objects) a),
           (SELECT count(*) FROM (SELECT object FROM fresh_objects EXCEPT SELECT object FROM updated) b),
           has_function_privilege('public', 'rl_check()', 'EXECUTE');
  DROP TABLE updated;
END $$;
SET client_min_messages = warning;
SELECT u.* FROM unnest(ARRAY['1.0', '1.1', '1.2', '1.3', '1.4', '1.5', '1.6', '1.7', '1.8', '1.9', '1.10', '1.11', '1.12', '1.13', '1.14', '1.15', '1.16', '1.17']) AS v,
       LATERAL pg_temp.update_from(v) AS u;
RESET client_min_messages;
-- 1.13 dropped the carry table's index on expires: updated from 1.13 just
-- now (installed through every update from 1.0), only (key, ts) is left, as in a fresh
-- install.
SELECT array_agg(indexrelid::regclass::text) AS carry_indexes
  FROM pg_index WHERE indrelid = 'rl_fallback_carry'::regclass;
-- 1.14 fills the heads' pages to a fifth: so after the update from 1.14
-- (which went through 1.13 to 1.14).
SELECT reloptions AS head_options FROM pg_class WHERE oid = 'rl_fallback_head'::regclass;
-- 1.15 dropped the logs' and the counting algorithms' indexes on expires,
-- 1.16 the logs' indexes on (key, total): after the update from 1.15, each
-- table keeps only its index on the key and the time (or algorithm).
SELECT indrelid::regclass::text AS tbl, array_agg(indexrelid::regclass::text ORDER BY indexrelid::regclass::text) AS indexes
  FROM pg_index
 WHERE indrelid IN ('rl_fallback_log'::regclass, 'rl_fallback_mlog'::regclass, 'rl_fallback_state'::regclass)
 GROUP BY 1 ORDER BY 1;

-- This library with a database not updated yet: 1.14's tables still have
-- the indexes on expires and on (key, total), and the library keeps them
-- whole until the update drops them. Each index, read alone (no sequential
-- or bitmap scan, so the plan must walk it), holds every row.
SET client_min_messages = warning;
DROP EXTENSION slidewin;
CREATE EXTENSION slidewin VERSION '1.14';
RESET client_min_messages;
SELECT count(*) FILTER (WHERE allowed) AS admitted_on_1_14
  FROM generate_series(1, 30) g,
       LATERAL rl_attempt('old' || (g % 7), 3, '1 hour') r;
SELECT (rl_attempt_multi('oldm' || g, ARRAY[2, 5], ARRAY['1 minute', '1 hour']::interval[])).allowed
  FROM generate_series(1, 3) g;
SELECT allowed, retry_after FROM rl_attempt('old1', 3, '1 hour');
SELECT (SELECT count(*) FROM rl_fallback_log) AS log_rows,
       (SELECT count(*) FROM rl_fallback_mlog) AS mlog_rows;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT (SELECT count(*) FROM (SELECT 1 FROM rl_fallback_log WHERE key >= '' ORDER BY key, total) i) AS in_key_total,
       (SELECT count(*) FROM (SELECT 1 FROM rl_fallback_log WHERE expires > 0 ORDER BY expires) i) AS in_expires,
       (SELECT count(*) FROM (SELECT 1 FROM rl_fallback_mlog WHERE key >= '' ORDER BY key, total) i) AS mlog_in_key_total;
EXPLAIN (COSTS OFF) SELECT 1 FROM rl_fallback_log WHERE key >= '' ORDER BY key, total;
RESET enable_seqscan;
RESET enable_bitmapscan;
SET client_min_messages = warning;
DROP EXTENSION slidewin;
CREATE EXTENSION slidewin;
RESET client_min_messages;
SELECT count(*) AS versions_shipped
  FROM pg_available_extension_versions WHERE name = 'slidewin';
