-- rl_trigger: quotas charged by the rows a statement writes.
-- The denials below name their key (slidewin.error_show_key), so that each
-- shows which tenant's quota refused the row.
SET slidewin.error_show_key = on;
SET slidewin.key_prefix = 'regress:trg:';
SET slidewin.test_now = '2030-01-01 00:00:00+00';
SET slidewin.redis_retry_interval = 0;
SELECT rl_reset(k) FROM unnest(ARRAY['public.jobs:1', 'public.jobs:2', 'public.jobs:5',
  'public.jobs:7', 'public.weighted:1', 'public.events:a', 'public.events:b',
  'public.events:c', 'public.events:d']) AS k;

-- Row level: 3 rows per tenant per minute, for INSERT, UPDATE and DELETE.
CREATE TABLE jobs (id int PRIMARY KEY, tenant int, payload text);
CREATE TRIGGER jobs_quota BEFORE INSERT OR UPDATE OR DELETE ON jobs
  FOR EACH ROW EXECUTE FUNCTION rl_trigger('tenant', '3', '1 minute');
INSERT INTO jobs VALUES (1, 1, 'a'), (2, 1, 'b');
INSERT INTO jobs VALUES (3, 1, 'c');
INSERT INTO jobs VALUES (4, 1, 'd');
\echo :LAST_ERROR_SQLSTATE
INSERT INTO jobs VALUES (5, 2, 'e');
-- an update is charged to the row's new tenant
UPDATE jobs SET tenant = 2 WHERE id = 1;
SELECT remaining FROM rl_peek('public.jobs:2', 3, '1 minute');
UPDATE jobs SET tenant = 2 WHERE id = 2;
UPDATE jobs SET payload = 'x' WHERE id = 3;
\echo :LAST_ERROR_SQLSTATE
-- a delete is charged to the old row's tenant
DELETE FROM jobs WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
-- a rejected multi-row statement leaves none of its rows
INSERT INTO jobs VALUES (10, 5, 'x'), (11, 5, 'y'), (12, 5, 'z'), (13, 5, 'w');
SELECT count(*) FROM jobs WHERE tenant = 5;
-- a NULL tenant names no quota
INSERT INTO jobs VALUES (20, NULL, 'n');
\echo :LAST_ERROR_SQLSTATE
SELECT id, tenant, payload FROM jobs ORDER BY id;

-- cost from an integer column; an option turns on refunds
CREATE TABLE weighted (tenant int, weight int);
CREATE TRIGGER weighted_quota AFTER INSERT ON weighted
  FOR EACH ROW EXECUTE FUNCTION rl_trigger('tenant', '10', '1 hour', 'weight', 'refund_on_abort');
INSERT INTO weighted VALUES (1, 4), (1, 5);
INSERT INTO weighted VALUES (1, 2);
BEGIN;
INSERT INTO weighted VALUES (1, 1);
SELECT remaining FROM rl_peek('public.weighted:1', 10, '1 hour');
ROLLBACK;
SELECT remaining FROM rl_peek('public.weighted:1', 10, '1 hour');
INSERT INTO weighted VALUES (1, NULL);
INSERT INTO weighted VALUES (1, 0);

-- Statement level: each distinct tenant is charged once, with its number of
-- rows, all or nothing.
CREATE TABLE events (tenant text, n int);
CREATE TRIGGER events_quota AFTER INSERT ON events
  REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION rl_trigger('tenant', '6000', '1 hour');
INSERT INTO events SELECT (ARRAY['a', 'b', 'c'])[1 + g % 3], g FROM generate_series(1, 5000) g;
SELECT k, remaining FROM unnest(ARRAY['a', 'b', 'c']) AS k,
  rl_peek('public.events:' || k, 6000, '1 hour') ORDER BY k;
-- 'a' has room for 1000 more, 'c' has not for 5000: the statement is
-- rejected whole, and what it had charged to 'a' is given back
INSERT INTO events SELECT CASE WHEN g <= 1000 THEN 'a' ELSE 'c' END, g FROM generate_series(1, 6000) g;
SELECT k, remaining FROM unnest(ARRAY['a', 'b', 'c']) AS k,
  rl_peek('public.events:' || k, 6000, '1 hour') ORDER BY k;
SELECT count(*) FROM events;
-- a statement that needs more than the limit for one tenant
INSERT INTO events SELECT 'd', g FROM generate_series(1, 6001) g;
\echo :LAST_ERROR_SQLSTATE

-- With Redis down the fallback store counts the calls: one per tenant.
SET slidewin.redis_url = 'redis://127.0.0.1:1';
SET slidewin.key_prefix = 'regress:trg-fb:';
INSERT INTO events SELECT (ARRAY['a', 'b', 'c'])[1 + g % 3], g FROM generate_series(1, 5000) g;
SELECT key, count(*) AS calls, max(total) AS units FROM rl_fallback_log
 WHERE key LIKE 'regress:trg-fb:%' GROUP BY key ORDER BY key;
SELECT rl_reset('public.events:' || k) FROM unnest(ARRAY['a', 'b', 'c']) AS k;
RESET slidewin.redis_url;
SET slidewin.key_prefix = 'regress:trg:';

-- A statement-level cost column: every row pays at least 1, so a negative
-- cost cannot offset the others; the PostgREST style applies here too.
SELECT rl_reset('public.costed:' || k) FROM unnest(ARRAY['a', 'b']) AS k;
CREATE TABLE costed (tenant text, units int);
CREATE TRIGGER costed_quota AFTER INSERT ON costed
  REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION rl_trigger('tenant', '10', '1 hour', 'units');
INSERT INTO costed VALUES ('a', 4), ('a', 5);
SELECT remaining FROM rl_peek('public.costed:a', 10, '1 hour');
INSERT INTO costed VALUES ('a', 1000), ('a', -995);
\echo :LAST_ERROR_SQLSTATE
SET slidewin.error_style = postgrest;
INSERT INTO costed VALUES ('b', 6), ('b', 5);
\echo :LAST_ERROR_SQLSTATE
RESET slidewin.error_style;
SELECT count(*) FROM costed;
DROP TABLE costed;
SELECT rl_reset('public.costed:' || k) FROM unnest(ARRAY['a', 'b']) AS k;

-- Shadow mode: nothing is rejected, every row is recorded.
SET slidewin.enforce = off;
INSERT INTO jobs VALUES (30, 7, 'a'), (31, 7, 'b'), (32, 7, 'c'), (33, 7, 'd');
SET slidewin.enforce = on;
SELECT allowed, remaining FROM rl_peek('public.jobs:7', 4, '1 minute');

-- The tenant's text does not depend on the session's settings: a date
-- written under three DateStyles is one tenant, with one quota (2 of 6 rows
-- admitted), and its key spells the date in ISO.
SELECT rl_reset(k) FROM unnest(ARRAY['public.dated:2030-01-01',
  'public.stamped:2030-01-01 00:00:00+00', 'public.floats:0.3333333333333333',
  'public.flags:t', 'public.flags:true', 'public.spans:1 day 02:00:00',
  'public.blobs:\x6162', 'public.padded:ab']) AS k;
CREATE TABLE dated (id int, tenant date);
CREATE TRIGGER dated_quota BEFORE INSERT ON dated
  FOR EACH ROW EXECUTE FUNCTION rl_trigger('tenant', '2', '1 minute');
SET DateStyle = 'ISO';
INSERT INTO dated VALUES (1, '2030-01-01');
SET DateStyle = 'German';
-- the trigger's own settings do not leak into the statement or the session
BEGIN;
INSERT INTO dated VALUES (2, '2030-01-01') RETURNING tenant;
SHOW DateStyle;
COMMIT;
INSERT INTO dated VALUES (3, '2030-01-01');
\echo :LAST_ERROR_SQLSTATE
SET DateStyle = 'SQL, DMY';
INSERT INTO dated VALUES (4, '2030-01-01');
\echo :LAST_ERROR_SQLSTATE
SET DateStyle = 'Postgres';
INSERT INTO dated VALUES (5, '2030-01-01'), (6, '2030-01-01');
\echo :LAST_ERROR_SQLSTATE
RESET DateStyle;
SELECT count(*) AS admitted FROM dated;
SELECT remaining FROM rl_peek('public.dated:2030-01-01', 2, '1 minute');

-- A timestamptz through a statement trigger: the same instant under two
-- TimeZones is one tenant, named in UTC.
CREATE TABLE stamped (tenant timestamptz);
CREATE TRIGGER stamped_quota AFTER INSERT ON stamped
  REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION rl_trigger('tenant', '3', '1 minute');
SET TimeZone = 'UTC';
INSERT INTO stamped VALUES ('2030-01-01 00:00:00+00'), ('2030-01-01 09:00:00+09');
SET TimeZone = 'Asia/Tokyo';
BEGIN;
INSERT INTO stamped VALUES ('2030-01-01 00:00:00+00');
SHOW TimeZone;
COMMIT;
SELECT remaining FROM rl_peek('public.stamped:2030-01-01 00:00:00+00', 3, '1 minute');
INSERT INTO stamped VALUES ('2030-01-01 09:00:00+09');
\echo :LAST_ERROR_SQLSTATE
-- nor when the trigger fails and a block catches the error
DO $$
BEGIN
  INSERT INTO stamped VALUES (NULL);
EXCEPTION WHEN null_value_not_allowed THEN
  RAISE NOTICE 'caught: %', SQLERRM;
END $$;
SHOW TimeZone;
RESET TimeZone;
SELECT count(*) AS admitted FROM stamped;

-- A float printed with more or fewer digits is still one tenant.
CREATE TABLE floats (tenant float8);
CREATE TRIGGER floats_quota BEFORE INSERT ON floats
  FOR EACH ROW EXECUTE FUNCTION rl_trigger('tenant', '1', '1 minute');
SET extra_float_digits = 3;
INSERT INTO floats VALUES (1.0 / 3);
SET extra_float_digits = -10;
INSERT INTO floats VALUES (1.0 / 3);
\echo :LAST_ERROR_SQLSTATE
RESET extra_float_digits;
SELECT count(*) AS admitted FROM floats;
SELECT remaining FROM rl_peek('public.floats:0.3333333333333333', 1, '1 minute');

-- So are an interval under two IntervalStyles, a bytea under both
-- bytea_outputs, and a char(n) tenant from the row and the statement path
-- (its trailing spaces are not part of its text).
CREATE TABLE spans (tenant interval);
CREATE TRIGGER spans_quota BEFORE INSERT ON spans
  FOR EACH ROW EXECUTE FUNCTION rl_trigger('tenant', '1', '1 minute');
SET IntervalStyle = 'sql_standard';
INSERT INTO spans VALUES ('1 day 2 hours');
SET IntervalStyle = 'iso_8601';
INSERT INTO spans VALUES ('1 day 2 hours');
\echo :LAST_ERROR_SQLSTATE
RESET IntervalStyle;
CREATE TABLE blobs (tenant bytea);
CREATE TRIGGER blobs_quota BEFORE INSERT ON blobs
  FOR EACH ROW EXECUTE FUNCTION rl_trigger('tenant', '1', '1 minute');
SET bytea_output = 'escape';
INSERT INTO blobs VALUES ('ab');
SET bytea_output = 'hex';
INSERT INTO blobs VALUES ('ab');
\echo :LAST_ERROR_SQLSTATE
RESET bytea_output;
CREATE TABLE padded (id int, tenant char(4));
CREATE TRIGGER padded_row BEFORE INSERT ON padded
  FOR EACH ROW EXECUTE FUNCTION rl_trigger('tenant', '2', '1 minute');
CREATE TRIGGER padded_stmt AFTER UPDATE ON padded
  REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION rl_trigger('tenant', '2', '1 minute');
INSERT INTO padded VALUES (1, 'ab');
UPDATE padded SET id = 2;
UPDATE padded SET id = 3;
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS admitted FROM spans
UNION ALL SELECT count(*) FROM blobs
UNION ALL SELECT count(*) FROM padded WHERE id = 2;
SELECT k, remaining FROM unnest(ARRAY['public.spans:1 day 02:00:00', 'public.blobs:\x6162',
  'public.padded:ab']) AS k, rl_peek(k, 2, '1 minute') ORDER BY k;

-- A boolean tenant: a row trigger (INSERT) and a statement trigger (UPDATE)
-- on one table draw from one quota, spelled t.
CREATE TABLE flags (id int, tenant boolean);
CREATE TRIGGER flags_row BEFORE INSERT ON flags
  FOR EACH ROW EXECUTE FUNCTION rl_trigger('tenant', '3', '1 minute');
CREATE TRIGGER flags_stmt AFTER UPDATE ON flags
  REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION rl_trigger('tenant', '3', '1 minute');
INSERT INTO flags VALUES (1, true), (2, true);
UPDATE flags SET id = id + 10;
\echo :LAST_ERROR_SQLSTATE
UPDATE flags SET id = id + 10 WHERE id = 1;
SELECT k, remaining FROM unnest(ARRAY['public.flags:t', 'public.flags:true']) AS k,
  rl_peek(k, 3, '1 minute') ORDER BY k;
SELECT id, tenant FROM flags ORDER BY id;
-- a NULL tenant is an error on both paths
INSERT INTO flags VALUES (3, NULL);
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE flags DISABLE TRIGGER flags_row;
INSERT INTO flags VALUES (4, NULL);
ALTER TABLE flags ENABLE TRIGGER flags_row;
UPDATE flags SET id = id + 1 WHERE tenant IS NULL;
\echo :LAST_ERROR_SQLSTATE
DROP TABLE dated, stamped, floats, spans, blobs, padded, flags;
SELECT rl_reset(k) FROM unnest(ARRAY['public.dated:2030-01-01',
  'public.stamped:2030-01-01 00:00:00+00', 'public.floats:0.3333333333333333',
  'public.flags:t', 'public.flags:true', 'public.spans:1 day 02:00:00',
  'public.blobs:\x6162', 'public.padded:ab']) AS k;

-- Bad arguments: a clear error at the first firing, naming the trigger.
CREATE TABLE bad (tenant int, w text);
CREATE TRIGGER bad_col BEFORE INSERT ON bad FOR EACH ROW EXECUTE FUNCTION rl_trigger('tenant_id', '3', '1 minute');
INSERT INTO bad VALUES (1, 'x');
DROP TRIGGER bad_col ON bad;
CREATE TRIGGER bad_lim BEFORE INSERT ON bad FOR EACH ROW EXECUTE FUNCTION rl_trigger('tenant', 'lots', '1 minute');
INSERT INTO bad VALUES (1, 'x');
DROP TRIGGER bad_lim ON bad;
CREATE TRIGGER bad_zero BEFORE INSERT ON bad FOR EACH ROW EXECUTE FUNCTION rl_trigger('tenant', '0', '1 minute');
INSERT INTO bad VALUES (1, 'x');
DROP TRIGGER bad_zero ON bad;
CREATE TRIGGER bad_win BEFORE INSERT ON bad FOR EACH ROW EXECUTE FUNCTION rl_trigger('tenant', '3', 'soon');
INSERT INTO bad VALUES (1, 'x');
DROP TRIGGER bad_win ON bad;
CREATE TRIGGER bad_month BEFORE INSERT ON bad FOR EACH ROW EXECUTE FUNCTION rl_trigger('tenant', '3', '1 month');
INSERT INTO bad VALUES (1, 'x');
DROP TRIGGER bad_month ON bad;
CREATE TRIGGER bad_cost BEFORE INSERT ON bad FOR EACH ROW EXECUTE FUNCTION rl_trigger('tenant', '3', '1 minute', 'w');
INSERT INTO bad VALUES (1, 'x');
DROP TRIGGER bad_cost ON bad;
CREATE TRIGGER bad_opt BEFORE INSERT ON bad FOR EACH ROW EXECUTE FUNCTION rl_trigger('tenant', '3', '1 minute', '1', 'refund');
INSERT INTO bad VALUES (1, 'x');
DROP TRIGGER bad_opt ON bad;
CREATE TRIGGER bad_nargs BEFORE INSERT ON bad FOR EACH ROW EXECUTE FUNCTION rl_trigger('tenant');
INSERT INTO bad VALUES (1, 'x');
DROP TRIGGER bad_nargs ON bad;
CREATE TRIGGER bad_stmt AFTER INSERT ON bad FOR EACH STATEMENT EXECUTE FUNCTION rl_trigger('tenant', '3', '1 minute');
INSERT INTO bad VALUES (1, 'x');
DROP TRIGGER bad_stmt ON bad;
SELECT rl_trigger();

DROP TABLE jobs, weighted, events, bad;
SELECT rl_reset(k) FROM unnest(ARRAY['public.jobs:1', 'public.jobs:2', 'public.jobs:5',
  'public.jobs:7', 'public.weighted:1', 'public.events:a', 'public.events:b',
  'public.events:c', 'public.events:d']) AS k;
