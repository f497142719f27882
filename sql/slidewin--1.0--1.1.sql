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
-- rl_attempt_multi's log: the same layout, kept apart so that a key used by
-- both functions never mixes the two.
CREATE UNLOGGED TABLE rl_fallback_mlog (
    key     text COLLATE "C" NOT NULL,
    ts      bigint NOT NULL,
    total   bigint NOT NULL,
    cost    bigint NOT NULL,
    expires bigint NOT NULL
);
CREATE INDEX rl_fallback_mlog_key_ts ON rl_fallback_mlog (key, ts);
CREATE INDEX rl_fallback_mlog_key_total ON rl_fallback_mlog (key, total);
CREATE INDEX rl_fallback_mlog_expires ON rl_fallback_mlog (expires);
REVOKE ALL ON rl_fallback_mlog FROM PUBLIC;
COMMENT ON TABLE rl_fallback_mlog IS
'slidewin fallback store for rl_attempt_multi: one row per admitted call. Internal; do not modify.';

-- The counting algorithms (sliding_counter, fixed_window, token_bucket):
-- one row of state per key and algorithm.
CREATE UNLOGGED TABLE rl_fallback_state (
    key     text COLLATE "C" NOT NULL,   -- key_prefix || key
    algo    smallint NOT NULL,           -- 1 sliding_counter, 2 fixed_window, 3 token_bucket
    s       bigint NOT NULL,             -- window or bucket start, Unix microseconds
    a       float8 NOT NULL,             -- units in it (token_bucket: theoretical arrival time)
    b       float8 NOT NULL,             -- sliding_counter: units in the previous bucket
    expires bigint NOT NULL              -- when the row no longer matters
);
CREATE INDEX rl_fallback_state_key ON rl_fallback_state (key, algo);
CREATE INDEX rl_fallback_state_expires ON rl_fallback_state (expires);
REVOKE ALL ON rl_fallback_state FROM PUBLIC;
COMMENT ON TABLE rl_fallback_state IS
'slidewin fallback store for the counting algorithms: one row per key and algorithm. Internal; do not modify.';

COMMENT ON TABLE rl_fallback_log IS
'slidewin fallback store: one row per admitted call while Redis was unreachable (key, admission time, running total, cost, window end). Internal; do not modify.';

-- rl_attempt, rl_allow and rl_peek gain refund_on_abort and algorithm.
--
-- Dropping and recreating them would lose what the DBA did to them (a
-- REVOKE EXECUTE ... FROM PUBLIC is the recipe's protection) and would fail
-- on any view that calls them. So each keeps its OID, owner, grants and
-- dependents, and only its parameter list changes: it takes the parameter
-- columns of a scratch function declared the new way, which then goes. The
-- C functions read their trailing arguments by position and treat missing
-- ones as NULL, so a view that stored a 5-argument call keeps working.
CREATE FUNCTION slidewin_1_1_attempt(key text, lim bigint, win interval, cost bigint DEFAULT 1,
                                     on_redis_error text DEFAULT NULL,
                                     refund_on_abort boolean DEFAULT NULL,
                                     algorithm text DEFAULT 'sliding_log')
RETURNS rl_result AS 'MODULE_PATHNAME', 'slidewin_attempt' LANGUAGE C;
CREATE FUNCTION slidewin_1_1_peek(key text, lim bigint, win interval, on_redis_error text DEFAULT NULL,
                                  algorithm text DEFAULT 'sliding_log')
RETURNS rl_result AS 'MODULE_PATHNAME', 'slidewin_peek' LANGUAGE C;

UPDATE pg_catalog.pg_proc p
   SET pronargs = n.pronargs,
       pronargdefaults = n.pronargdefaults,
       proargtypes = n.proargtypes,
       proallargtypes = n.proallargtypes,
       proargmodes = n.proargmodes,
       proargnames = n.proargnames,
       proargdefaults = n.proargdefaults
  FROM pg_catalog.pg_proc n
 WHERE (p.oid, n.oid) IN
       (('rl_attempt(text, bigint, interval, bigint, text)'::regprocedure,
         'slidewin_1_1_attempt(text, bigint, interval, bigint, text, boolean, text)'::regprocedure),
        ('rl_allow(text, bigint, interval, bigint, text)'::regprocedure,
         'slidewin_1_1_attempt(text, bigint, interval, bigint, text, boolean, text)'::regprocedure),
        ('rl_peek(text, bigint, interval, text)'::regprocedure,
         'slidewin_1_1_peek(text, bigint, interval, text, text)'::regprocedure));

DROP FUNCTION slidewin_1_1_attempt(text, bigint, interval, bigint, text, boolean, text);
DROP FUNCTION slidewin_1_1_peek(text, bigint, interval, text, text);

COMMENT ON FUNCTION rl_attempt(text, bigint, interval, bigint, text, boolean, text) IS
'Admit cost units for key if the last win holds at most lim - cost admitted units (exact sliding log); an admitted call records its units at once. on_redis_error (fallback, allow, deny, error) chooses what this call does when Redis cannot answer; refund_on_abort (NULL: the setting) gives the units back if the transaction or savepoint aborts (sliding_log only). algorithm: sliding_log (exact), sliding_counter, fixed_window or token_bucket.';
COMMENT ON FUNCTION rl_allow(text, bigint, interval, bigint, text, boolean, text) IS
'Same as rl_attempt, returning only whether the call was admitted: for WHERE clauses and IF tests.';
COMMENT ON FUNCTION rl_peek(text, bigint, interval, text, text) IS
'State of key under algorithm without consuming anything; allowed tells whether a call of cost 1 would pass now.';

CREATE FUNCTION rl_attempt_multi(key text, lims bigint[], wins interval[], cost bigint DEFAULT 1,
                                 on_redis_error text DEFAULT NULL,
                                 refund_on_abort boolean DEFAULT NULL)
RETURNS rl_result
AS 'MODULE_PATHNAME', 'slidewin_attempt_multi'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION rl_attempt_multi(text, bigint[], interval[], bigint, text, boolean) IS
'Check several (lim, win) pairs at once, for example 10 per second and 600 per minute, in one Redis call: admitted only if every window admits it, and then recorded in all of them; a denied call spends nothing. The result describes the most constraining window.';

CREATE FUNCTION rl_enforce(key text, lim bigint, win interval, cost bigint DEFAULT 1,
                           on_redis_error text DEFAULT NULL,
                           refund_on_abort boolean DEFAULT NULL,
    algorithm text DEFAULT 'sliding_log')
RETURNS rl_result
AS 'MODULE_PATHNAME', 'slidewin_enforce_fn'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION rl_enforce(text, bigint, interval, bigint, text, boolean, text) IS
'Same as rl_attempt, but a denied call raises SQLSTATE RL429 (rate limit exceeded) with the units used and a Retry after hint; with slidewin.error_style = postgrest, it raises what PostgREST turns into HTTP 429.';

CREATE FUNCTION rl_wait(key text, lim bigint, win interval, cost bigint DEFAULT 1,
                        timeout interval DEFAULT '5 seconds',
                        on_redis_error text DEFAULT NULL,
                        refund_on_abort boolean DEFAULT NULL,
    algorithm text DEFAULT 'sliding_log')
RETURNS rl_result
AS 'MODULE_PATHNAME', 'slidewin_wait'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION rl_wait(text, bigint, interval, bigint, interval, text, boolean, text) IS
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
