/* slidewin 1.9 -> 1.10 */
\echo Use "ALTER EXTENSION slidewin UPDATE TO '1.10'" to load this file. \quit

-- rl_stats gains since when Redis has been unreachable (NULL while it
-- answers), as its last column: the outage that the server log reports
-- once per server (slidewin.outage_log_interval).
CREATE FUNCTION rl_redis_outage(OUT redis_unreachable_since timestamptz)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'slidewin_redis_outage_fn'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;
COMMENT ON FUNCTION rl_redis_outage() IS
'Since when Redis has been unreachable from this server (the first call it could not answer), NULL while it answers; the rl_stats view reads it.';
CREATE OR REPLACE VIEW rl_stats AS
    SELECT s.*, l.*, o.*, u.* FROM rl_stats() s, rl_slot_stats() l, rl_outage_stats() o,
                                    rl_redis_outage() u;
