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

-- Not STRICT: a NULL argument is an error naming it, never a silent NULL.
CREATE FUNCTION rl_attempt(key text, lim bigint, win interval, cost bigint DEFAULT 1)
RETURNS rl_result
AS 'MODULE_PATHNAME', 'slidewin_attempt'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION rl_attempt(text, bigint, interval, bigint) IS
'Admit cost units for key if the last win holds at most lim - cost admitted units (exact sliding log); an admitted call records its units at once.';

CREATE FUNCTION rl_allow(key text, lim bigint, win interval, cost bigint DEFAULT 1)
RETURNS boolean
AS 'MODULE_PATHNAME', 'slidewin_allow'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION rl_allow(text, bigint, interval, bigint) IS
'Same as rl_attempt, returning only whether the call was admitted: for WHERE clauses and IF tests.';

CREATE FUNCTION rl_peek(key text, lim bigint, win interval)
RETURNS rl_result
AS 'MODULE_PATHNAME', 'slidewin_peek'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION rl_peek(text, bigint, interval) IS
'State of key without consuming anything; allowed tells whether a call of cost 1 would pass now.';

CREATE FUNCTION rl_reset(key text)
RETURNS void
AS 'MODULE_PATHNAME', 'slidewin_reset'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION rl_reset(text) IS
'Forget everything recorded for key. Not granted to PUBLIC.';
REVOKE EXECUTE ON FUNCTION rl_reset(text) FROM PUBLIC;
