/* slidewin 1.8 -> 1.9 */
\echo Use "ALTER EXTENSION slidewin UPDATE TO '1.9'" to load this file. \quit

-- rl_headers is the C code that also gives a denial's header fields under
-- slidewin.error_style = json, so the two cannot drift apart. It checks
-- every field it reads, as a row may be built by hand, and on a denial its
-- reset is no sooner than the end of retry_after (a blocked key).
CREATE OR REPLACE FUNCTION rl_headers(r rl_result, name text DEFAULT 'default')
RETURNS jsonb
AS 'MODULE_PATHNAME', 'slidewin_headers'
LANGUAGE C VOLATILE PARALLEL SAFE;
COMMENT ON FUNCTION rl_headers(rl_result, text) IS
'HTTP response header fields for a rate-limit result, as jsonb: RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-headers-10), X-RateLimit-Limit, -Remaining and -Reset (Unix seconds; on a denial, no sooner than the retry), and Retry-After (seconds, rounded up) on a denial. A field out of range is refused, naming it.';

-- rl_renew takes the failure policy per call, as rl_acquire does (NULL:
-- slidewin.on_redis_error). A renewal Redis cannot answer no longer has to
-- abort the job's transaction.
DROP FUNCTION rl_renew(text);
CREATE FUNCTION rl_renew(key text, on_redis_error text DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'slidewin_renew'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION rl_renew(text, text) IS
'Start the lease of this transaction''s slot of key again; false if it no longer holds one (its lease ended). When Redis cannot answer, on_redis_error decides: error raises, allow answers true, deny false, fallback NULL (not known); each but error warns.';
