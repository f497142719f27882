/* slidewin 1.14 -> 1.15 */
\echo Use "ALTER EXTENSION slidewin UPDATE TO '1.15'" to load this file. \quit

-- Every fallback admission inserted into an index on expires, and only the
-- sweep of other keys' expired rows read it. The sweep now reads heap
-- pages instead (a page every 32 to 64 admissions of a backend), so the
-- logs' and the counting algorithms' tables lose that index, as the carry
-- table did in 1.13.
DROP INDEX rl_fallback_log_expires;
DROP INDEX rl_fallback_mlog_expires;
DROP INDEX rl_fallback_state_expires;
