/* slidewin 1.11 -> 1.12 */
\echo Use "ALTER EXTENSION slidewin UPDATE TO '1.12'" to load this file. \quit

-- Several keys, all or nothing (issue 38, first part): one call admits
-- every key, each against its own limit, window and cost, or charges none.
-- The arguments after the arrays are rl_attempt's. At most 16 keys, each
-- once; any algorithm rl_attempt takes, one for all the keys; Redis (one
-- server or Sentinel, or the keys of one slot of a Cluster) decides in one
-- script, keys of several Cluster slots are reserved and then confirmed or
-- cancelled, and the fallback store decides inside the caller's
-- transaction.
CREATE FUNCTION rl_attempt_all(keys text[], lims bigint[], wins interval[],
                               costs bigint[] DEFAULT NULL,
                               on_redis_error text DEFAULT NULL,
                               refund_on_abort boolean DEFAULT NULL,
                               algorithm text DEFAULT 'sliding_log')
RETURNS rl_result
AS 'MODULE_PATHNAME', 'slidewin_attempt_all'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION rl_attempt_all(text[], bigint[], interval[], bigint[], text, boolean, text) IS
'Admit costs[i] units for every keys[i] if each last wins[i] holds at most lims[i] - costs[i] units, or charge none (costs NULL: 1 each). Returns the rl_result of the key that decided: the first that denied, else the one with the least room. At most 16 keys, each once, all on one algorithm; Redis decides in one script (under Redis Cluster, keys of several slots are reserved slot by slot, then confirmed or cancelled); when Redis cannot answer, the fallback store decides every key inside the transaction.';

CREATE FUNCTION rl_allow_all(keys text[], lims bigint[], wins interval[],
                             costs bigint[] DEFAULT NULL,
                             on_redis_error text DEFAULT NULL,
                             refund_on_abort boolean DEFAULT NULL,
                             algorithm text DEFAULT 'sliding_log')
RETURNS boolean
AS 'MODULE_PATHNAME', 'slidewin_allow_all'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION rl_allow_all(text[], bigint[], interval[], bigint[], text, boolean, text) IS
'Same as rl_attempt_all, returning only whether the call was admitted.';

CREATE FUNCTION rl_enforce_all(keys text[], lims bigint[], wins interval[],
                               costs bigint[] DEFAULT NULL,
                               on_redis_error text DEFAULT NULL,
                               refund_on_abort boolean DEFAULT NULL,
                               algorithm text DEFAULT 'sliding_log')
RETURNS rl_result
AS 'MODULE_PATHNAME', 'slidewin_enforce_all'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION rl_enforce_all(text[], bigint[], interval[], bigint[], text, boolean, text) IS
'Same as rl_attempt_all, but a denial raises RL429 as rl_enforce does, describing the key that decided.';

CREATE FUNCTION rl_attempt_all_rows(keys text[], lims bigint[], wins interval[],
                                    costs bigint[] DEFAULT NULL,
                                    on_redis_error text DEFAULT NULL,
                                    refund_on_abort boolean DEFAULT NULL,
                                    algorithm text DEFAULT 'sliding_log')
RETURNS TABLE (key text, allowed boolean, remaining bigint, retry_after interval,
               reset_at timestamptz, store text, lim bigint, win interval,
               ticket text, next_at timestamptz)
AS 'MODULE_PATHNAME', 'slidewin_attempt_all_rows'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE ROWS 4;
COMMENT ON FUNCTION rl_attempt_all_rows(text[], bigint[], interval[], bigint[], text, boolean, text) IS
'Same as rl_attempt_all, returning one row per key in the order given: the key and its rl_result. On a denial, a key that had room but was not charged has allowed false and retry_after zero.';

-- The header fields of a call over several keys (issue 38, headers):
-- RateLimit-Policy and RateLimit list one policy per key, each under the
-- name the caller gives (never the key), and Retry-After comes from the key
-- with the longest wait. rows: array_agg of rl_attempt_all_rows' rows, or
-- rl_results.
CREATE FUNCTION rl_headers(rows record[], names text[])
RETURNS jsonb
AS 'MODULE_PATHNAME', 'slidewin_headers_all'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL SAFE;
COMMENT ON FUNCTION rl_headers(record[], text[]) IS
'The HTTP header fields of several results, one policy each, named names[i]: RateLimit-Policy and RateLimit list every policy; the X-RateLimit-* fields and Retry-After describe the one that decided (on a denial the longest wait, else the fewest units left). rows: array_agg of rl_attempt_all_rows'' rows, or rl_result[].';

CREATE FUNCTION rl_headers(rows record[], names text[], pks bytea[])
RETURNS jsonb
AS 'MODULE_PATHNAME', 'slidewin_headers_all'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL SAFE;
COMMENT ON FUNCTION rl_headers(record[], text[], bytea[]) IS
'rl_headers(rows, names) with pks[i] (at most 64 bytes; NULL for none) as the partition key of policy i, the pk parameter of its RateLimit-Policy and RateLimit members.';

-- rl_attempt_all's ticket names every key's entry of an admitted call
-- (sliding_log): handed back with the call's keys, in its order, it gives
-- back every key's units, as rl_refund does one key's. Signed, and bound to
-- the keys and their order, so PUBLIC may run it, as rl_refund.
CREATE FUNCTION rl_refund_all(keys text[], ticket text)
RETURNS integer
AS 'MODULE_PATHNAME', 'slidewin_refund_all'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION rl_refund_all(text[], text) IS
'Give back, now, the units of every key''s entry that ticket (from rl_attempt_all) names; keys are the call''s, in its order. Returns how many keys had units given back: 0 when there was nothing left to give back (given back already, rolled back, reset, or out of the window).';

-- What this server's local batches of a key hold unused (issue 40): rl_peek,
-- as Redis, counts a batch's units as used from its reserve until the
-- worker gives the rest back. The caller names the key, as for rl_peek.
CREATE FUNCTION rl_batch_held(key text, lim bigint, win interval)
RETURNS bigint
AS 'MODULE_PATHNAME', 'slidewin_batch_held'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL SAFE;
COMMENT ON FUNCTION rl_batch_held(text, bigint, interval) IS
'The units this server''s local batches (slidewin.local_batch) of the sliding-log key with this lim and win hold and have not used yet: rl_peek counts them as used, as Redis does, until they are used or given back. 0 when this server holds none.';
