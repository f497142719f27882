/* slidewin 1.16 -> 1.17 */
\echo Use "ALTER EXTENSION slidewin UPDATE TO '1.17'" to load this file. \quit

-- 1.17 changes the library only: while Redis cannot answer, a hot key's
-- local batch is reserved from the fallback store, as one row of
-- rl_fallback_log scored at the batch's end, and carried into Redis with
-- that score when Redis answers again. No table, index or function changes.
