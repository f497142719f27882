/* slidewin 1.5 -> 1.6 */
\echo Use "ALTER EXTENSION slidewin UPDATE TO '1.6'" to load this file. \quit

-- rl_result says what a call was judged against: lim and win (for
-- rl_attempt_multi, the window that decided: the first that denied, else
-- the one with the fewest units left). NULL when no store answered.
ALTER TYPE rl_result ADD ATTRIBUTE lim bigint, ADD ATTRIBUTE win interval;
COMMENT ON TYPE rl_result IS
'Outcome of a rate-limit check: whether it was admitted, units left, how long until a retry can pass, when the window empties, which store answered, and the limit and window it was judged against.';

-- The HTTP response header fields for a result: RateLimit-Policy and
-- RateLimit as draft-ietf-httpapi-ratelimit-headers-10 defines them, the
-- X-RateLimit-* fields most APIs send, and Retry-After on a denial.
CREATE FUNCTION rl_headers(r rl_result, name text DEFAULT 'default')
RETURNS jsonb
LANGUAGE plpgsql VOLATILE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    h jsonb := '{}';
    item text;
    now_at timestamptz;
BEGIN
    IF r IS NULL OR r.allowed IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'argument "r" must not be null';
    END IF;
    IF name IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'argument "name" must not be null';
    END IF;
    IF name !~ '^[ -~]+$' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = 'argument "name" must be one or more printable ASCII characters',
            DETAIL = 'It becomes the policy''s name, a structured-field string.';
    END IF;
    -- the clock slidewin answered with: slidewin.test_now when it is set
    now_at := coalesce(nullif(current_setting('slidewin.test_now', true), '')::timestamptz,
                       clock_timestamp());
    item := '"' || replace(replace(name, '\', '\\'), '"', '\"') || '"';
    IF r.lim IS NOT NULL THEN
        h := h || jsonb_build_object(
            'RateLimit-Policy', format('%s;q=%s;w=%s', item, r.lim,
                                       ceil(extract(epoch FROM r.win))::bigint),
            'X-RateLimit-Limit', r.lim::text);
    END IF;
    IF r.remaining IS NOT NULL AND r.reset_at IS NOT NULL THEN
        h := h || jsonb_build_object(
            'RateLimit', format('%s;r=%s;t=%s', item, r.remaining,
                                greatest(ceil(extract(epoch FROM r.reset_at - now_at)), 0)::bigint),
            'X-RateLimit-Remaining', r.remaining::text,
            'X-RateLimit-Reset', ceil(extract(epoch FROM r.reset_at))::bigint::text);
    END IF;
    IF NOT r.allowed THEN
        h := h || jsonb_build_object('Retry-After',
            greatest(ceil(extract(epoch FROM r.retry_after)), 0)::bigint::text);
    END IF;
    RETURN h;
END
$$;
COMMENT ON FUNCTION rl_headers(rl_result, text) IS
'HTTP response header fields for a rate-limit result, as jsonb: RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-headers-10), X-RateLimit-Limit, -Remaining and -Reset (Unix seconds), and Retry-After (seconds, rounded up) on a denial.';
