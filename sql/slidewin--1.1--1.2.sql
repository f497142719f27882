/* slidewin 1.1 -> 1.2 */
\echo Use "ALTER EXTENSION slidewin UPDATE TO '1.2'" to load this file. \quit

-- What the limiter decided, server-wide, since the last rl_stats_reset().
-- The counters live in shared memory: they need
-- shared_preload_libraries = 'slidewin', and without it these raise
-- SQLSTATE 55000. rl_backend_stats() stays as this backend's own view of
-- its refunds.

CREATE FUNCTION rl_stats(
    OUT calls bigint,
    OUT admitted bigint,
    OUT denied bigint,
    OUT units_admitted bigint,
    OUT deny_cache_hits bigint,
    OUT shadow_denials bigint,
    OUT redis_calls bigint,
    OUT fallback_calls bigint,
    OUT policy_answers bigint,
    OUT redis_errors bigint,
    OUT redis_timeouts bigint,
    OUT reconnects bigint,
    OUT breaker_trips bigint,
    OUT refunds bigint,
    OUT refunds_dropped bigint,
    OUT redis_rtt_p50 interval,
    OUT redis_rtt_p99 interval,
    OUT stats_reset timestamptz)
RETURNS record
AS 'MODULE_PATHNAME', 'slidewin_stats_fn'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;
COMMENT ON FUNCTION rl_stats() IS
'slidewin''s server-wide counters since stats_reset; the rl_stats view reads them.';

CREATE VIEW rl_stats AS SELECT * FROM rl_stats();
COMMENT ON VIEW rl_stats IS
'What slidewin decided on this server since stats_reset: calls and outcomes, who answered, Redis faults and latency, refunds.';

CREATE FUNCTION rl_stats_rules(
    OUT algorithm text,
    OUT lim bigint,
    OUT win interval,
    OUT calls bigint,
    OUT admitted bigint,
    OUT denied bigint,
    OUT units_admitted bigint,
    OUT near_limit bigint,
    OUT shadow_denials bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'slidewin_stats_rules'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;
COMMENT ON FUNCTION rl_stats_rules() IS
'slidewin''s counters per rule (algorithm, lim, win); the rl_stats_rules view reads them.';

CREATE VIEW rl_stats_rules AS SELECT * FROM rl_stats_rules();
COMMENT ON VIEW rl_stats_rules IS
'slidewin''s counters per rule (algorithm, lim, win), at most slidewin.stats_max_rules rows; a row with a NULL rule counts the rules that found no room.';

CREATE FUNCTION rl_top_keys(
    OUT key text,
    OUT denied bigint,
    OUT admitted bigint,
    OUT last_denied_at timestamptz,
    OUT last_retry_after interval,
    OUT error bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'slidewin_top_keys'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;
COMMENT ON FUNCTION rl_top_keys() IS
'The keys with the most units denied (Space-Saving); the rl_top_keys view reads them.';

CREATE VIEW rl_top_keys AS
  SELECT * FROM rl_top_keys() ORDER BY denied DESC, error, last_denied_at DESC;
COMMENT ON VIEW rl_top_keys IS
'The keys with the most units denied, at most slidewin.track_keys of them; denied over-counts by at most error. key is NULL unless the reader is a superuser or a member of pg_read_all_stats.';

CREATE FUNCTION rl_stats_reset()
RETURNS void
AS 'MODULE_PATHNAME', 'slidewin_stats_reset'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;
COMMENT ON FUNCTION rl_stats_reset() IS
'Start every slidewin counter again from zero (rl_stats, rl_stats_rules, rl_top_keys).';
REVOKE EXECUTE ON FUNCTION rl_stats_reset() FROM PUBLIC;

GRANT SELECT ON rl_stats, rl_stats_rules, rl_top_keys TO PUBLIC;
