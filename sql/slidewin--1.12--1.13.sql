/* slidewin 1.12 -> 1.13 */
\echo Use "ALTER EXTENSION slidewin UPDATE TO '1.13'" to load this file. \quit

-- Every fallback admission paid for a btree entry on rl_fallback_carry's
-- expires, which only the carry after an outage read: it now walks the
-- (key, ts) index in key order, and sweeps ended rows from the heap.
DROP INDEX rl_fallback_carry_expires;
