/* slidewin 1.0: exact sliding-window rate limiting, backed by Redis */
\echo Use "CREATE EXTENSION slidewin" to load this file. \quit

CREATE TYPE rl_result AS (
    allowed     boolean,
    remaining   bigint,
    retry_after interval,
    reset_at    timestamptz,
    store       text
);
COMMENT ON TYPE rl_result IS
'Outcome of a rate-limit check: whether it was admitted, units left, how long until a retry can pass, when the window empties, and which store answered.';

-- The fallback store, used while Redis cannot answer. The C code reaches it
-- directly; no role needs, or gets, any privilege on it.
CREATE UNLOGGED TABLE rl_fallback_log (
    key   text COLLATE "C" NOT NULL,   -- key_prefix || key
    ts    bigint NOT NULL,             -- admission time, Unix microseconds
    total bigint NOT NULL              -- running total of the key's units, this row included
);
CREATE INDEX rl_fallback_log_key_ts ON rl_fallback_log (key, ts);
REVOKE ALL ON rl_fallback_log FROM PUBLIC;
COMMENT ON TABLE rl_fallback_log IS
'slidewin fallback store: one row per admitted call while Redis was unreachable. Internal; do not modify.';

-- Not STRICT: a NULL argument is an error naming it, never a silent NULL.
-- on_redis_error: NULL means the setting slidewin.on_redis_error.
CREATE FUNCTION rl_attempt(key text, lim bigint, win interval, cost bigint DEFAULT 1,
                           on_redis_error text DEFAULT NULL)
RETURNS rl_result
AS 'MODULE_PATHNAME', 'slidewin_attempt'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION rl_attempt(text, bigint, interval, bigint, text) IS
'Admit cost units for key if the last win holds at most lim - cost admitted units (exact sliding log); an admitted call records its units at once. on_redis_error (fallback, allow, deny, error) chooses what this call does when Redis cannot answer.';

CREATE FUNCTION rl_allow(key text, lim bigint, win interval, cost bigint DEFAULT 1,
                         on_redis_error text DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'slidewin_allow'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION rl_allow(text, bigint, interval, bigint, text) IS
'Same as rl_attempt, returning only whether the call was admitted: for WHERE clauses and IF tests.';

CREATE FUNCTION rl_peek(key text, lim bigint, win interval, on_redis_error text DEFAULT NULL)
RETURNS rl_result
AS 'MODULE_PATHNAME', 'slidewin_peek'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION rl_peek(text, bigint, interval, text) IS
'State of key without consuming anything; allowed tells whether a call of cost 1 would pass now.';

CREATE FUNCTION rl_reset(key text)
RETURNS void
AS 'MODULE_PATHNAME', 'slidewin_reset'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION rl_reset(text) IS
'Forget everything recorded for key, in Redis and in the fallback store. Not granted to PUBLIC.';
REVOKE EXECUTE ON FUNCTION rl_reset(text) FROM PUBLIC;
