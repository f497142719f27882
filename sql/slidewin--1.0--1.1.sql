/* slidewin 1.0 -> 1.1 */
\echo Use "ALTER EXTENSION slidewin UPDATE TO '1.1'" to load this file. \quit

-- Fallback store: every row carries its own cost and the end of the window it
-- was admitted under, so that no lookup reads an expired row and expired rows
-- of keys that are never called again can be found and deleted.
ALTER TABLE rl_fallback_log ADD COLUMN cost bigint, ADD COLUMN expires bigint;
-- 1.0 rows: the cost is the step in the running total; the window they were
-- admitted under was not stored, so they get the longest one allowed (their
-- own key's later calls delete them as soon as they leave its window).
UPDATE rl_fallback_log l
   SET cost = l.total - coalesce(p.prev, 0),
       expires = l.ts + 3650::bigint * 86400 * 1000000
  FROM (SELECT ctid AS row_id, lag(total) OVER (PARTITION BY key ORDER BY ts) AS prev
          FROM rl_fallback_log) p
 WHERE l.ctid = p.row_id;
ALTER TABLE rl_fallback_log ALTER COLUMN cost SET NOT NULL,
                            ALTER COLUMN expires SET NOT NULL;
CREATE INDEX rl_fallback_log_key_total ON rl_fallback_log (key, total);
CREATE INDEX rl_fallback_log_expires ON rl_fallback_log (expires);
COMMENT ON TABLE rl_fallback_log IS
'slidewin fallback store: one row per admitted call while Redis was unreachable (key, admission time, running total, cost, window end). Internal; do not modify.';

-- rl_attempt and rl_allow gain refund_on_abort.
DROP FUNCTION rl_attempt(text, bigint, interval, bigint, text);
DROP FUNCTION rl_allow(text, bigint, interval, bigint, text);

CREATE FUNCTION rl_attempt(key text, lim bigint, win interval, cost bigint DEFAULT 1,
                           on_redis_error text DEFAULT NULL,
                           refund_on_abort boolean DEFAULT NULL)
RETURNS rl_result
AS 'MODULE_PATHNAME', 'slidewin_attempt'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION rl_attempt(text, bigint, interval, bigint, text, boolean) IS
'Admit cost units for key if the last win holds at most lim - cost admitted units (exact sliding log); an admitted call records its units at once. on_redis_error (fallback, allow, deny, error) chooses what this call does when Redis cannot answer; refund_on_abort (NULL: the setting) gives the units back if the transaction or savepoint aborts.';

CREATE FUNCTION rl_allow(key text, lim bigint, win interval, cost bigint DEFAULT 1,
                         on_redis_error text DEFAULT NULL,
                         refund_on_abort boolean DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'slidewin_allow'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION rl_allow(text, bigint, interval, bigint, text, boolean) IS
'Same as rl_attempt, returning only whether the call was admitted: for WHERE clauses and IF tests.';

CREATE FUNCTION rl_enforce(key text, lim bigint, win interval, cost bigint DEFAULT 1,
                           on_redis_error text DEFAULT NULL,
                           refund_on_abort boolean DEFAULT NULL)
RETURNS rl_result
AS 'MODULE_PATHNAME', 'slidewin_enforce_fn'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION rl_enforce(text, bigint, interval, bigint, text, boolean) IS
'Same as rl_attempt, but a denied call raises SQLSTATE RL429 (rate limit exceeded) with the units used and a Retry after hint; with slidewin.error_style = postgrest, it raises what PostgREST turns into HTTP 429.';

CREATE FUNCTION rl_wait(key text, lim bigint, win interval, cost bigint DEFAULT 1,
                        timeout interval DEFAULT '5 seconds',
                        on_redis_error text DEFAULT NULL,
                        refund_on_abort boolean DEFAULT NULL)
RETURNS rl_result
AS 'MODULE_PATHNAME', 'slidewin_wait'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION rl_wait(text, bigint, interval, bigint, interval, text, boolean) IS
'Like rl_attempt, but while denied it sleeps until the computed retry time and tries again, until admitted or timeout has passed (then it returns the denied result). Interruptible by cancel and statement_timeout.';

CREATE FUNCTION rl_trigger()
RETURNS trigger
AS 'MODULE_PATHNAME', 'slidewin_trigger'
LANGUAGE C;
COMMENT ON FUNCTION rl_trigger() IS
'Quota trigger: rl_trigger(tenant_column, lim, win [, cost [, option ...]]). FOR EACH ROW charges each row; FOR EACH STATEMENT with a transition table charges each tenant once, all or nothing. cost is a constant or an integer column; options: refund_on_abort[=on|off], on_redis_error=<policy>.';

CREATE FUNCTION rl_backend_stats(OUT refunded bigint, OUT refunds_dropped bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'slidewin_backend_stats'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;
COMMENT ON FUNCTION rl_backend_stats() IS
'This backend''s refund counters: Redis entries given back after an abort, and refunds dropped because Redis could not be reached.';
