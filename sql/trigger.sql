-- rl_trigger: quotas charged by the rows a statement writes.
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
