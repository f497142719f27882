-- Server-wide counters: rl_stats, rl_stats_rules, rl_top_keys. Nothing else
-- runs on the server while the regression suite does, so the counts after
-- rl_stats_reset() are exactly this file's calls.
SET slidewin.key_prefix = 'regress:stats:';
SET slidewin.test_now = '2030-01-01 00:00:00+00';
SET TimeZone = 'UTC';
SELECT count(rl_reset(k)) FROM unnest(ARRAY['a', 'b', 's', 'f', 'm', 'r']) k;
SELECT rl_stats_reset();
SELECT calls, admitted, denied, redis_calls, redis_rtt_p50 IS NULL AS no_rtt,
       stats_reset > now() - interval '1 minute' AS just_reset
  FROM rl_stats;
SELECT count(*) FROM rl_stats_rules;
SELECT count(*) FROM rl_top_keys;

-- 50 calls on lim 20: 20 admitted, 30 denied; the deny cache answers the
-- denials after the first one Redis gave.
SELECT count(*) FILTER (WHERE a) AS admitted, count(*) FILTER (WHERE NOT a) AS denied
  FROM (SELECT rl_allow('a', 20, '1 minute') AS a FROM generate_series(1, 50) OFFSET 0) s;
SELECT calls, admitted, denied, units_admitted, deny_cache_hits, redis_calls,
       fallback_calls, policy_answers, shadow_denials,
       calls = redis_calls + fallback_calls + policy_answers + deny_cache_hits AS sources_add_up,
       redis_rtt_p50 > interval '0' AND redis_rtt_p50 <= redis_rtt_p99 AS rtt_ordered
  FROM rl_stats;
-- near_limit: admissions that left at most 4 of 20 (the 16th to the 20th)
SELECT * FROM rl_stats_rules;

-- Weighted by cost: 3 + 3 + 3 admitted, 3 denied, 1 admitted, 2 denied.
SELECT allowed FROM rl_attempt('b', 10, '1 minute', 3);
SELECT allowed FROM rl_attempt('b', 10, '1 minute', 3);
SELECT allowed FROM rl_attempt('b', 10, '1 minute', 3);
SELECT allowed FROM rl_attempt('b', 10, '1 minute', 3);
SELECT allowed FROM rl_attempt('b', 10, '1 minute', 1);
SELECT allowed FROM rl_attempt('b', 10, '1 minute', 2);
SELECT calls, admitted, denied, units_admitted FROM rl_stats;
-- Top keys, most units denied first; exact (error 0) while the table has
-- room. Admitted units count from a key's first denial.
SELECT key, denied, admitted, error, last_retry_after,
       last_denied_at > now() - interval '1 minute' AS recent
  FROM rl_top_keys;

-- Other algorithms and rl_attempt_multi are rules of their own; the
-- multi rule is (multi, its smallest limit, its longest window).
SELECT allowed FROM rl_attempt('r', 2, '1 minute', algorithm => 'fixed_window');
SELECT allowed FROM rl_attempt('r', 2, '1 minute', algorithm => 'token_bucket');
SELECT allowed FROM rl_attempt_multi('m', ARRAY[5, 50], ARRAY[interval '1 second', '1 hour']);
SELECT algorithm, lim, win, calls, admitted FROM rl_stats_rules
 WHERE algorithm <> 'sliding_log' ORDER BY algorithm;

-- Shadow mode: the would-be denial is admitted, counted in shadow_denials
-- and not in denied.
SET slidewin.enforce = off;
SELECT allowed, remaining FROM rl_attempt('s', 2, '1 minute');
SELECT allowed, remaining FROM rl_attempt('s', 2, '1 minute');
SELECT allowed, remaining FROM rl_attempt('s', 2, '1 minute');
RESET slidewin.enforce;
SELECT calls, admitted, denied, shadow_denials FROM rl_stats;
SELECT lim, calls, admitted, denied, near_limit, shadow_denials FROM rl_stats_rules WHERE lim = 2 AND algorithm = 'sliding_log';

-- rl_wait is one call, counted once, with the answer it ends with.
SELECT allowed FROM rl_wait('a', 20, '1 minute', 1, interval '30 milliseconds');
SELECT calls, denied FROM rl_stats;

-- Without Redis: the fallback store and the allow/deny policies answer,
-- and each failed attempt is a Redis error. With no breaker, every call
-- tries Redis.
SET slidewin.redis_url = 'redis://127.0.0.1:1';
SET slidewin.redis_retry_interval = 0;
SELECT allowed, store FROM rl_attempt('f', 5, '1 minute', 1, 'fallback');
SELECT allowed, store FROM rl_attempt('f', 5, '1 minute', 1, 'allow');
SELECT allowed, store FROM rl_attempt('f', 5, '1 minute', 1, 'deny');
SELECT calls, fallback_calls, policy_answers, redis_errors, redis_timeouts, breaker_trips FROM rl_stats;
-- The breaker: the first failure trips it, and the calls that follow do
-- not try Redis (no new error). A new URL closes it again.
SET slidewin.redis_url = 'redis://127.0.0.1:2';
SET slidewin.redis_retry_interval = '1h';
SELECT allowed, store FROM rl_attempt('f', 5, '1 minute', 1, 'allow');
SELECT allowed, store FROM rl_attempt('f', 5, '1 minute', 1, 'allow');
SELECT allowed, store FROM rl_attempt('f', 5, '1 minute', 1, 'fallback');
SELECT policy_answers, fallback_calls, redis_errors, breaker_trips, reconnects FROM rl_stats;
RESET slidewin.redis_retry_interval;
RESET slidewin.redis_url;
-- Back on Redis: the connection is made again.
SELECT allowed, store FROM rl_attempt('f', 5, '1 minute');
SELECT redis_calls, reconnects FROM rl_stats;

-- A refund is counted once the backend has given it back.
BEGIN;
SELECT allowed FROM rl_attempt('f', 5, '1 minute', refund_on_abort => true);
ROLLBACK;
SELECT refunded FROM rl_backend_stats();
SELECT refunds, refunds_dropped FROM rl_stats;

-- slidewin.stats = off: nothing is counted.
SET slidewin.stats = off;
SELECT allowed FROM rl_attempt('f', 5, '1 minute');
RESET slidewin.stats;
SELECT calls FROM rl_stats;

-- Privileges: the counters are public, key text is not, reset is not.
CREATE ROLE regress_stats_user;
SET ROLE regress_stats_user;
SELECT calls > 0 AS sees_calls FROM rl_stats;
SELECT key, denied FROM rl_top_keys;
SELECT rl_stats_reset();
RESET ROLE;
GRANT pg_read_all_stats TO regress_stats_user;
SET ROLE regress_stats_user;
SELECT key, denied FROM rl_top_keys;
RESET ROLE;
DROP ROLE regress_stats_user;
-- slidewin.stats is a superuser setting
CREATE ROLE regress_stats_user2;
SET ROLE regress_stats_user2;
SET slidewin.stats = off;
RESET ROLE;
DROP ROLE regress_stats_user2;

SELECT rl_stats_reset();
SELECT calls, denied FROM rl_stats;
SELECT count(*) FROM rl_stats_rules;
SELECT count(*) FROM rl_top_keys;
SELECT count(rl_reset(k)) FROM unnest(ARRAY['a', 'b', 's', 'f', 'm', 'r']) k;
