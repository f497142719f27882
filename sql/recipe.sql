-- The recipe "Layered API limits" (doc/recipe.md): the statements it shows,
-- verbatim (only the grantee role is regress_recipe_web instead of web_anon,
-- and the keys are test keys), then a check of each tier.
\set SHOW_CONTEXT never
-- The prefix holds a hash tag, so that under Redis Cluster (the cluster
-- pass of test/run_all.sh) the tiers' keys are in one slot, which
-- rl_enforce_all needs there (doc/api.md).
SET slidewin.key_prefix = 'regress:{recipe}:';
SET slidewin.test_now = '2030-03-01 12:00:00+00';
SET TimeZone = 'UTC';
SELECT rl_reset(k) FROM unnest(ARRAY['ip:203.0.113.10', 'ip:198.51.100.7',
  'ip:192.0.2.20', 'ip:192.0.2.99', 'ip:203.0.113.50', 'ip:2001:db8:1:2::/64',
  'key:1', 'key:2', 'endpoint:/rpc/export_report:key:2']) AS k;

-- ---- the recipe ----
CREATE SCHEMA ratelimit;

CREATE TABLE ratelimit.plans (
    plan        text PRIMARY KEY,
    daily_limit bigint NOT NULL CHECK (daily_limit > 0)
);
INSERT INTO ratelimit.plans VALUES ('free', 100), ('paid', 10000);

-- Only a hash of each API key is stored; key_id names the key in the limiter.
CREATE TABLE ratelimit.api_keys (
    key_id   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key_hash bytea NOT NULL UNIQUE,
    plan     text NOT NULL REFERENCES ratelimit.plans
);

-- Routes with a tighter limit of their own, per API key.
CREATE TABLE ratelimit.route_limits (
    endpoint   text PRIMARY KEY,
    per_minute bigint NOT NULL CHECK (per_minute > 0)
);
INSERT INTO ratelimit.route_limits VALUES ('/rpc/export_report', 30);

CREATE FUNCTION ratelimit.check_request(client_ip inet, api_key text, endpoint text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    -- IPv6 clients are counted per /64.
    ip_key text := 'ip:' || CASE family(client_ip)
                               WHEN 6 THEN network(set_masklen(client_ip, 64))::text
                               ELSE host(client_ip) END;
    k record;
    route_limit bigint;
    keys text[];
    lims bigint[];
    wins interval[];
BEGIN
    -- 1. Which key is this, and on which plan? An unknown key still costs
    --    its address a unit, which slows down anyone guessing keys.
    SELECT a.key_id, p.daily_limit INTO k
      FROM ratelimit.api_keys a JOIN ratelimit.plans p USING (plan)
     WHERE a.key_hash = sha256(convert_to(api_key, 'UTF8'));
    IF NOT FOUND THEN
        PERFORM rl_enforce(ip_key, 120, '1 minute', refund_on_abort => false);
        RAISE EXCEPTION 'unknown API key'
            USING ERRCODE = 'invalid_authorization_specification';
    END IF;

    -- 2. The tiers: the client address, an expensive route's own limit
    --    per key (if the route has one), the plan's daily quota.
    keys := ARRAY[ip_key];
    lims := ARRAY[120];
    wins := ARRAY[interval '1 minute'];
    SELECT r.per_minute INTO route_limit
      FROM ratelimit.route_limits r
     WHERE r.endpoint = check_request.endpoint;
    IF FOUND THEN
        keys := keys || ('endpoint:' || endpoint || ':key:' || k.key_id);
        lims := lims || route_limit;
        wins := wins || interval '1 minute';
    END IF;
    keys := keys || ('key:' || k.key_id);
    lims := lims || k.daily_limit;
    wins := wins || interval '1 day';

    -- 3. One call: every tier admits the request, or none is charged.
    PERFORM rl_enforce_all(keys, lims, wins, refund_on_abort => false);
END $$;

-- For PostgREST: db-pre-request = "ratelimit.pre_request"
CREATE FUNCTION ratelimit.pre_request()
RETURNS void
LANGUAGE sql
SET slidewin.error_style = postgrest
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT ratelimit.check_request(
        (current_setting('request.headers', true)::json ->> 'x-real-ip')::inet,
        current_setting('request.headers', true)::json ->> 'x-api-key',
        current_setting('request.path', true));
$$;

-- Only the roles granted below may call these two functions, and no caller
-- may use the limiter directly.
REVOKE ALL ON FUNCTION ratelimit.check_request(inet, text, text),
                       ratelimit.pre_request() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION rl_attempt, rl_attempt_multi, rl_allow, rl_enforce,
                           rl_wait, rl_peek, rl_attempt_all, rl_allow_all,
                           rl_enforce_all, rl_attempt_all_rows FROM PUBLIC;

CREATE ROLE regress_recipe_web LOGIN;
GRANT USAGE ON SCHEMA ratelimit TO regress_recipe_web;
GRANT EXECUTE ON FUNCTION ratelimit.check_request(inet, text, text),
                          ratelimit.pre_request() TO regress_recipe_web;

INSERT INTO ratelimit.api_keys (key_hash, plan)
VALUES (sha256(convert_to('k-free-1', 'UTF8')), 'free');
INSERT INTO ratelimit.api_keys (key_hash, plan)
VALUES (sha256(convert_to('k-paid-1', 'UTF8')), 'paid');
-- ---- end of the recipe ----

-- What is left in each tier, read without spending anything.
CREATE FUNCTION pg_temp.left_in(k text) RETURNS bigint LANGUAGE sql AS $$
  SELECT remaining FROM rl_peek(k,
    CASE WHEN k LIKE 'ip:%' THEN 120 WHEN k LIKE 'endpoint:%' THEN 30
         WHEN k = 'key:1' THEN 100 ELSE 10000 END,
    CASE WHEN k LIKE 'key:%' THEN interval '1 day' ELSE interval '1 minute' END)
$$;

-- The free plan: 100 requests a day. The 101st is refused by the daily
-- tier; the paid key, from the same address, still passes. The refused
-- request charged no tier: its address has 101 of 120 used (the free key's
-- 100 and the paid key's 1), not 102.
DO $$
BEGIN
  FOR i IN 1..100 LOOP
    PERFORM ratelimit.check_request('203.0.113.10', 'k-free-1', '/rpc/list_reports');
  END LOOP;
END $$;
SELECT ratelimit.check_request('203.0.113.10', 'k-free-1', '/rpc/list_reports');
\echo :LAST_ERROR_SQLSTATE
SELECT ratelimit.check_request('203.0.113.10', 'k-paid-1', '/rpc/list_reports');
SELECT k, pg_temp.left_in(k) FROM unnest(ARRAY['ip:203.0.113.10', 'key:1', 'key:2']) AS k;

-- The address tier: the 121st request in a minute from one address is
-- refused, and the daily quota is not charged for it (120 of 10000 used).
DO $$
BEGIN
  FOR i IN 1..120 LOOP
    PERFORM ratelimit.check_request('198.51.100.7', 'k-paid-1', '/rpc/list_reports');
  END LOOP;
END $$;
SELECT ratelimit.check_request('198.51.100.7', 'k-paid-1', '/rpc/list_reports');
\echo :LAST_ERROR_SQLSTATE
SELECT k, pg_temp.left_in(k) FROM unnest(ARRAY['ip:198.51.100.7', 'key:2']) AS k;
-- a minute later the address may call again
SET slidewin.test_now = '2030-03-01 12:01:01+00';
SELECT ratelimit.check_request('198.51.100.7', 'k-paid-1', '/rpc/list_reports');

-- The expensive route: 30 a minute per key. The 31st is refused and
-- charges neither the address nor the daily quota; another route of the
-- same key still passes (the address then has 31 of 120 used, not 32).
DO $$
BEGIN
  FOR i IN 1..30 LOOP
    PERFORM ratelimit.check_request('192.0.2.20', 'k-paid-1', '/rpc/export_report');
  END LOOP;
END $$;
SELECT ratelimit.check_request('192.0.2.20', 'k-paid-1', '/rpc/export_report');
\echo :LAST_ERROR_SQLSTATE
SELECT ratelimit.check_request('192.0.2.20', 'k-paid-1', '/rpc/list_reports');
SELECT k, pg_temp.left_in(k)
  FROM unnest(ARRAY['ip:192.0.2.20', 'endpoint:/rpc/export_report:key:2', 'key:2']) AS k;

-- An unknown or missing key is refused cleanly; the attempt still counts
-- against the address.
SELECT ratelimit.check_request('192.0.2.99', 'k-guess-1', '/rpc/list_reports');
\echo :LAST_ERROR_SQLSTATE
SELECT ratelimit.check_request('192.0.2.99', NULL, '/rpc/list_reports');
SELECT pg_temp.left_in('ip:192.0.2.99');

-- Moving the free key to the paid plan takes effect on its next request;
-- the 100 units it spent today still count.
UPDATE ratelimit.api_keys SET plan = 'paid' WHERE key_id = 1;
SELECT ratelimit.check_request('203.0.113.10', 'k-free-1', '/rpc/list_reports');
SELECT remaining FROM rl_peek('key:1', 10000, '1 day');

-- IPv6 clients share one limit per /64.
SELECT ratelimit.check_request('2001:db8:1:2::10', 'k-paid-1', '/rpc/list_reports');
SELECT ratelimit.check_request('2001:db8:1:2:aaaa::20', 'k-paid-1', '/rpc/list_reports');
SELECT pg_temp.left_in('ip:2001:db8:1:2::/64');

-- An ordinary role with only the recipe's grants: the function works; the
-- tables and the limiter's own functions are closed to it.
SET ROLE regress_recipe_web;
SELECT ratelimit.check_request('203.0.113.50', 'k-paid-1', '/rpc/list_reports');
SELECT * FROM ratelimit.api_keys;
SELECT * FROM ratelimit.plans;
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_attempt('key:1', 1000000, '1 day', 1000000);
SELECT allowed, remaining, retry_after, reset_at, store, lim, win FROM rl_peek('key:2', 10000, '1 day');
SELECT rl_allow_all(ARRAY['key:1'], ARRAY[1000000], ARRAY['1 day']::interval[]);
SELECT rl_reset('key:1');
-- Through PostgREST's pre-request hook: the request settings PostgREST
-- sets, and a refusal in the form PostgREST answers with HTTP 429.
-- (RateLimit-Reset is 61, not 60: with the clock fixed, each of the 30
-- admitted calls was recorded 1 microsecond after the one before.)
SELECT set_config('request.headers',
                  '{"x-real-ip": "192.0.2.20", "x-api-key": "k-paid-1"}', false),
       set_config('request.path', '/rpc/export_report', false);
SELECT ratelimit.pre_request();
\echo :LAST_ERROR_SQLSTATE
-- the style applies inside the hook only
SHOW slidewin.error_style;
SELECT set_config('request.path', '/rpc/list_reports', false);
SELECT ratelimit.pre_request();
RESET ROLE;
SELECT k, pg_temp.left_in(k)
  FROM unnest(ARRAY['ip:203.0.113.50', 'ip:192.0.2.20', 'key:2']) AS k;

-- In a new session, the hook may be the first use of slidewin: the style it
-- sets still applies.
\c -
SET slidewin.key_prefix = 'regress:{recipe}:';
SET slidewin.test_now = '2030-03-01 12:01:01+00';
SET ROLE regress_recipe_web;
SELECT set_config('request.headers',
                  '{"x-real-ip": "192.0.2.20", "x-api-key": "k-paid-1"}', false),
       set_config('request.path', '/rpc/export_report', false);
SELECT ratelimit.pre_request();
RESET ROLE;
SELECT remaining FROM rl_peek('ip:192.0.2.20', 120, '1 minute');

SELECT rl_reset(k) FROM unnest(ARRAY['ip:203.0.113.10', 'ip:198.51.100.7',
  'ip:192.0.2.20', 'ip:192.0.2.99', 'ip:203.0.113.50', 'ip:2001:db8:1:2::/64',
  'key:1', 'key:2', 'endpoint:/rpc/export_report:key:2']) AS k;
DROP SCHEMA ratelimit CASCADE;
DROP ROLE regress_recipe_web;
GRANT EXECUTE ON FUNCTION rl_attempt, rl_attempt_multi, rl_allow, rl_enforce,
                          rl_wait, rl_peek, rl_attempt_all, rl_allow_all,
                          rl_enforce_all, rl_attempt_all_rows TO PUBLIC;
