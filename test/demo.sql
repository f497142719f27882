-- The scenario `make demo` runs against a throwaway PostgreSQL and Redis.
\set ON_ERROR_STOP on
\pset footer off
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS slidewin;

\echo
\echo '== 1. Allow and deny: 3 requests per 10 seconds for one API key'
-- one call per row: the volatile call in the select list of a subquery
SELECT request, (r).allowed, (r).remaining, (r).retry_after, (r).store
FROM (SELECT n AS request, rl_attempt('demo:api:alice', 3, '10 seconds') AS r
      FROM generate_series(1, 5) AS n) AS calls;
\echo 'The usage endpoint reads the state without spending anything:'
SELECT * FROM rl_peek('demo:api:alice', 3, '10 seconds');

\echo
\echo '== 2. Weighted costs: a search costs 100 units, a list 1, against 9,500 units per hour'
SELECT count(*) FILTER (WHERE rl_allow('demo:budget:acme', 9500, '1 hour', 100)) AS searches_admitted
FROM generate_series(1, 90);
SELECT count(*) FILTER (WHERE rl_allow('demo:budget:acme', 9500, '1 hour', 1)) AS lists_admitted
FROM generate_series(1, 499);
\echo 'One unit is left: another search is refused, a list still fits.'
SELECT 'search' AS call, allowed, remaining FROM rl_attempt('demo:budget:acme', 9500, '1 hour', 100)
UNION ALL
SELECT 'list', allowed, remaining FROM rl_attempt('demo:budget:acme', 9500, '1 hour', 1);

\echo
\echo '== 3. A per-tenant trigger rejects an expensive insert (3 reports per minute per tenant)'
CREATE TABLE demo_reports (tenant text NOT NULL, title text NOT NULL);
CREATE FUNCTION demo_reports_quota() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT rl_allow('demo:reports:' || NEW.tenant, 3, '1 minute') THEN
        RAISE EXCEPTION 'report quota exceeded for tenant %', NEW.tenant
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER reports_quota BEFORE INSERT ON demo_reports
    FOR EACH ROW EXECUTE FUNCTION demo_reports_quota();
INSERT INTO demo_reports VALUES ('acme', 'q1'), ('acme', 'q2'), ('acme', 'q3');
\set ON_ERROR_STOP off
INSERT INTO demo_reports VALUES ('acme', 'q4');
\set ON_ERROR_STOP on
INSERT INTO demo_reports VALUES ('globex', 'q1');
SELECT tenant, count(*) AS reports FROM demo_reports GROUP BY tenant ORDER BY tenant;

\echo
\echo '== 4. A procedure stops its ingestion loop cleanly when the budget is spent'
\echo '(12 units per hour, 5 per region; rl_enforce raises RL429 when the budget is spent)'
CREATE TABLE demo_ingested (region int);
CREATE PROCEDURE demo_ingest(budget_key text) LANGUAGE plpgsql AS $$
DECLARE
    done int := 0;
    hint text;
BEGIN
    FOR region IN 1..20 LOOP
        BEGIN
            PERFORM rl_enforce(budget_key, 12, '1 hour', 5);
        EXCEPTION WHEN SQLSTATE 'RL429' THEN
            GET STACKED DIAGNOSTICS hint = PG_EXCEPTION_HINT;
            RAISE NOTICE 'budget spent: % of 20 regions ingested, stopping. %', done, hint;
            RETURN;
        END;
        INSERT INTO demo_ingested VALUES (region);
        COMMIT;                 -- each region is kept, whatever happens next
        done := done + 1;
    END LOOP;
    RAISE NOTICE 'all 20 regions ingested';
END $$;
SET client_min_messages = notice;
CALL demo_ingest('demo:upstream:geo');
SELECT count(*) AS regions_ingested FROM demo_ingested;

\echo
\echo '== 5. A statement-level quota trigger: 100 export rows per tenant per hour, all or nothing'
CREATE TABLE demo_exports (tenant text NOT NULL, item int NOT NULL);
CREATE TRIGGER exports_quota AFTER INSERT ON demo_exports
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION rl_trigger('tenant', '100', '1 hour');
\echo 'A bulk insert for three tenants: one charge per tenant, of its number of rows.'
INSERT INTO demo_exports
SELECT tenant, item
FROM (VALUES ('acme', 40), ('globex', 30), ('initech', 20)) AS t(tenant, n),
     generate_series(1, n) AS item;
SELECT tenant, (rl_peek('public.demo_exports:' || tenant, 100, '1 hour')).remaining
FROM (VALUES ('acme'), ('globex'), ('initech')) AS t(tenant);
\echo 'The next bulk insert needs 50 + 80 + 10 rows; globex has room for 70 only.'
\echo 'The whole statement is rejected, and what it had charged to acme is given back:'
\set ON_ERROR_STOP off
INSERT INTO demo_exports
SELECT tenant, item
FROM (VALUES ('acme', 50), ('globex', 80), ('initech', 10)) AS t(tenant, n),
     generate_series(1, n) AS item;
\set ON_ERROR_STOP on
SELECT tenant, count(*) AS rows_stored,
       (rl_peek('public.demo_exports:' || tenant, 100, '1 hour')).remaining
FROM demo_exports GROUP BY tenant ORDER BY tenant;

\echo
\echo '== 6. Refund on rollback: by default units are spent at once; refund_on_abort gives them back'
BEGIN;
SELECT 'spent at once' AS call, allowed, remaining
FROM rl_attempt('demo:render:globex', 10, '1 hour', 3);
SELECT 'refund_on_abort' AS call, allowed, remaining
FROM rl_attempt('demo:render:globex', 10, '1 hour', 4, refund_on_abort => true);
ROLLBACK;
\echo 'After ROLLBACK only the 4 refundable units are back:'
SELECT remaining FROM rl_peek('demo:render:globex', 10, '1 hour');
\echo 'This backend has given back two admissions: that one, and acme''s charge in section 5.'
SELECT * FROM rl_backend_stats();

\echo
\echo '== 7. Denials as errors: rl_enforce raises RL429 (with a JSON detail if asked), or the JSON PostgREST turns into HTTP 429'
SELECT allowed, remaining FROM rl_enforce('demo:api:erin', 1, '1 minute');
\set ON_ERROR_STOP off
SELECT allowed, remaining FROM rl_enforce('demo:api:erin', 1, '1 minute');
\set ON_ERROR_STOP on
\echo 'With slidewin.error_style = postgrest (any role may set it):'
SET slidewin.error_style = postgrest;
DO $$
DECLARE
    state text;
    msg text;
    detail text;
BEGIN
    PERFORM rl_enforce('demo:api:erin', 1, '1 minute');
    RAISE EXCEPTION 'the call was admitted, but a denial was expected';
EXCEPTION WHEN SQLSTATE 'PGRST' THEN
    GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
                            detail = PG_EXCEPTION_DETAIL;
    RAISE NOTICE 'SQLSTATE: %', state;
    RAISE NOTICE 'message, the response body: %', msg;
    RAISE NOTICE 'detail, the status and headers: %', detail;
END $$;
\echo 'With slidewin.error_style = json: still RL429, and a DETAIL a program can parse:'
SET slidewin.error_style = json;
DO $$
DECLARE
    detail jsonb;
BEGIN
    PERFORM rl_enforce('demo:api:erin', 1, '1 minute');
    RAISE EXCEPTION 'the call was admitted, but a denial was expected';
EXCEPTION WHEN SQLSTATE 'RL429' THEN
    GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
    RAISE NOTICE 'retry_after_ms %, Retry-After %, the whole detail: %',
        detail ->> 'retry_after_ms', detail -> 'headers' ->> 'Retry-After', detail;
END $$;
RESET slidewin.error_style;

\echo
\echo '== 8. Redis goes away: the fallback store in PostgreSQL takes over, per the call site policy'
\echo '(simulated by pointing this session at a closed port; only a superuser can do that)'
\echo 'Bob may make 3 requests a minute. Redis admits his first; then Redis goes away.'
SELECT allowed, remaining, store FROM rl_attempt('demo:api:bob', 3, '1 minute');
SET slidewin.redis_url = 'redis://127.0.0.1:1';
SET slidewin.redis_retry_interval = 0;
\echo 'The fallback store starts from what Redis counted (kept in shared memory): 2 more pass, not 3.'
SELECT n AS request, (r).allowed, (r).remaining, (r).store
FROM (SELECT n, rl_attempt('demo:api:bob', 3, '1 minute') AS r
      FROM generate_series(1, 3) AS n) AS calls;
\echo 'The server knows since when Redis has been unreachable (and said so once in its log, shown below):'
SELECT redis_unreachable_since IS NOT NULL AS redis_unreachable, redis_unreachable_since > now() - interval '1 minute' AS since_moments_ago FROM rl_stats;
\echo 'Each call site may choose its own policy: fail open for a cheap call, closed for an expensive one.'
SELECT 'cheap, fail open'   AS call_site, allowed, store FROM rl_attempt('demo:api:carol', 100, '1 minute', 1, 'allow')
UNION ALL
SELECT 'costly, fail closed', allowed, store FROM rl_attempt('demo:api:carol', 100, '1 minute', 100, 'deny');
\set ON_ERROR_STOP off
SELECT * FROM rl_attempt('demo:api:carol', 100, '1 minute', 1, 'error');
\set ON_ERROR_STOP on
\echo 'Fallback units are transactional: a rolled-back admission gives its unit back.'
BEGIN;
SELECT allowed, remaining, store FROM rl_attempt('demo:api:dave', 5, '1 minute', 3);
ROLLBACK;
SELECT allowed, remaining, store FROM rl_peek('demo:api:dave', 5, '1 minute');
RESET slidewin.redis_url;
\echo 'Redis is back: the next call uses it again, with no manual step. Before Redis decides, the'
\echo 'fallback admissions of the key are carried into it with their ages, so it denies Bob too:'
\echo 'no minute holds more than 3 of his requests, across both switches.'
SELECT allowed, remaining, store FROM rl_attempt('demo:api:bob', 3, '1 minute');
SELECT count(*) AS waiting_to_be_carried FROM rl_fallback_carry WHERE key = 'slidewin:demo:api:bob';

\echo
\echo '== 9. Denials without a round trip: a client hammering an exhausted key'
\echo 'Redis denies once and says until when; the backend answers the same call from memory until'
\echo 'then (this server preloads slidewin, which the deny cache needs).'
SELECT count(*) FILTER (WHERE allowed) AS admitted_of_6
FROM (SELECT (rl_attempt('demo:hammer', 5, '1 minute')).allowed FROM generate_series(1, 6) OFFSET 0) AS calls;
DO $$
DECLARE
  t0 timestamptz;
  ms numeric;
  setting text;
BEGIN
  FOREACH setting IN ARRAY ARRAY['on', 'off'] LOOP
    PERFORM set_config('slidewin.deny_cache', setting, true);
    t0 := clock_timestamp();
    FOR i IN 1..20000 LOOP
      PERFORM rl_attempt('demo:hammer', 5, '1 minute');
    END LOOP;
    ms := extract(epoch FROM clock_timestamp() - t0) * 1000;
    RAISE NOTICE 'deny_cache %: 20,000 denied calls in % ms, % us per call', setting, round(ms), round(ms * 1000 / 20000, 2);
  END LOOP;
END $$;
\echo 'rl_reset (or a refund) in any backend ends the cached denial at the next call:'
SELECT rl_reset('demo:hammer');
SELECT allowed, remaining, store FROM rl_attempt('demo:hammer', 5, '1 minute');
\echo 'A client that keeps hammering can be shut out for a while, whatever the limit it is called'
\echo 'with: rl_block (not granted to PUBLIC; GRANT EXECUTE to your API role) denies every call on'
\echo 'the key until the block ends, with a retry_after that runs to its end, and spends nothing.'
SELECT rl_block('demo:hammer', '15 minutes') > now() + interval '14 minutes' AS blocked_for_15_minutes;
SELECT algorithm, allowed, remaining, retry_after
FROM unnest(ARRAY['sliding_log', 'token_bucket']) AS algorithm,
     LATERAL rl_attempt('demo:hammer', 5, '1 minute', algorithm => algorithm);
\echo 'rl_unblock lifts it at once (in every backend of this server, and in Redis for the others):'
SELECT rl_unblock('demo:hammer') AS lifted;
SELECT allowed, remaining, store FROM rl_attempt('demo:hammer', 5, '1 minute');


\echo
\echo '== 10. In a web stack: headers for every response, refunds and penalties after the transaction,'
\echo 'several limits in one call'
\echo 'rl_headers turns any result into the response headers (IETF RateLimit draft and X-RateLimit-*):'
SELECT allowed, rl_headers(r) AS headers FROM rl_attempt('demo:web:acme', 2, '1 minute') r;
SELECT allowed, ticket FROM rl_attempt('demo:web:acme', 2, '1 minute') \gset demo_
SELECT allowed, rl_headers(r) AS headers FROM rl_attempt('demo:web:acme', 2, '1 minute') r;
\echo 'The upstream call of the second request failed: its ticket gives the unit back, once.'
SELECT rl_refund('demo:web:acme', :'demo_ticket') AS given_back,
       rl_refund('demo:web:acme', :'demo_ticket') AS given_back_again;
SELECT allowed, remaining FROM rl_attempt('demo:web:acme', 2, '1 minute');
\echo 'A client sent garbage: a penalty of 10 units keeps it out for the whole minute.'
SELECT allowed, remaining, retry_after FROM rl_penalize('demo:web:mallory', 2, '1 minute', 10);
\echo 'Several limits per request, all or nothing: an address, a route of an API key and a plan in'
\echo 'one rl_attempt_all. The route allows 2 a minute, so it alone refuses the third request.'
SELECT n AS request, (r).allowed, (r).lim AS limit_that_decided, (r).retry_after
FROM (SELECT n, rl_attempt_all(ARRAY['demo:ip:203.0.113.7', 'demo:route:/export:key:7', 'demo:plan:key:7'],
                               ARRAY[100, 2, 1000], ARRAY['1 minute', '1 minute', '1 day']::interval[]) AS r
      FROM generate_series(1, 3) AS n) AS calls;
\echo 'The refused request charged no tier: the address and the plan have 2 units used, not 3.'
SELECT k AS key, l - (rl_peek(k, l, w)).remaining AS used
FROM unnest(ARRAY['demo:ip:203.0.113.7', 'demo:route:/export:key:7', 'demo:plan:key:7'],
            ARRAY[100, 2, 1000], ARRAY['1 minute', '1 minute', '1 day']::interval[]) AS t(k, l, w);
\echo 'Its headers list every tier under a name of its own (never the key), Retry-After from the route:'
SELECT h ->> 'RateLimit' AS "RateLimit", h ->> 'Retry-After' AS "Retry-After"
FROM (SELECT rl_headers(array_agg(a ORDER BY a.ordinality), ARRAY['per-ip', 'per-route', 'plan']) AS h
      FROM rl_attempt_all_rows(ARRAY['demo:ip:203.0.113.7', 'demo:route:/export:key:7', 'demo:plan:key:7'],
                               ARRAY[100, 2, 1000], ARRAY['1 minute', '1 minute', '1 day']::interval[])
           WITH ORDINALITY AS a) AS s;
