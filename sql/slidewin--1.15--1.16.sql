/* slidewin 1.15 -> 1.16 */
\echo Use "ALTER EXTENSION slidewin UPDATE TO '1.16'" to load this file. \quit

-- Every fallback admission inserted into an index on (key, total), and only
-- a denied call read it, to find the row whose expiry frees the units it
-- asked for (retry_after). That row is now found through the (key, ts)
-- index: it is nearly always the window's first row, and past the first 32
-- rows the running totals, which never fall as times grow, are searched by
-- halving the range of times. So the logs lose that index.
DROP INDEX rl_fallback_log_key_total;
DROP INDEX rl_fallback_mlog_key_total;
