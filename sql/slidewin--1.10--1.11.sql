/* slidewin 1.10 -> 1.11 */
\echo Use "ALTER EXTENSION slidewin UPDATE TO '1.11'" to load this file. \quit

-- rl_result gains next_at: when the window next frees a unit, had the
-- caller spent all it has left; NULL when no store answered. It is the
-- end of the effective window of draft-ietf-httpapi-ratelimit-headers-11,
-- which t in rl_headers' RateLimit field now counts to (1.10 counted to
-- reset_at, when the whole window is empty).
ALTER TYPE rl_result ADD ATTRIBUTE next_at timestamptz;
COMMENT ON TYPE rl_result IS
'Outcome of a rate-limit check: whether it was admitted, units left, how long until a retry can pass, when the window empties, which store answered, the limit and window it was judged against, its ticket, and when the window next frees a unit.';

COMMENT ON FUNCTION rl_headers(rl_result, text) IS
'HTTP response header fields for a rate-limit result, as jsonb: RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-headers-11; t counts to next_at, the end of the effective window), X-RateLimit-Limit, -Remaining and -Reset (Unix seconds: when the window is empty; on a denial, no sooner than the retry), and Retry-After (seconds, rounded up) on a denial. A field out of range is refused, naming it.';

-- The same with the draft's partition key: pk, a byte sequence the caller
-- chooses (say, a keyed hash of the key), added to both fields.
CREATE FUNCTION rl_headers(r rl_result, name text, pk bytea)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'slidewin_headers'
LANGUAGE C VOLATILE PARALLEL SAFE;
COMMENT ON FUNCTION rl_headers(rl_result, text, bytea) IS
'rl_headers(r, name) with the partition key pk (at most 64 bytes) as the pk parameter of RateLimit-Policy and RateLimit, a structured-field byte sequence.';
