/* slidewin 1.17 -> 1.18 */
\echo Use "ALTER EXTENSION slidewin UPDATE TO '1.18'" to load this file. \quit

-- 1.18 changes the library only: what a local batch of the fallback store
-- did not use is given back, by the next call of its key in its database
-- after the batch ends, as a partial refund of the batch's row of
-- rl_fallback_log. No table, index or function changes.
