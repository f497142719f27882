/* slidewin 1.17 -> 1.18 */
\echo Use "ALTER EXTENSION slidewin UPDATE TO '1.18'" to load this file. \quit

-- 1.18 changes the library only: what a local batch of the fallback store
-- did not use is given back, by the next call of its key in its database
-- after the batch ends, as a partial refund of the batch's row of
-- rl_fallback_log; and a key of the fallback store gets a head only once
-- two of its writers meet (slidewin.fallback_heads). No table, index or
-- function changes.
