/* slidewin 1.13 -> 1.14 */
\echo Use "ALTER EXTENSION slidewin UPDATE TO '1.14'" to load this file. \quit

-- A key's head is updated in place (HOT) by each of its fallback admissions,
-- and every read of a page with too little free space prunes it, which
-- costs in proportion to the rows the page holds. Packed (fillfactor 100),
-- a page of heads held about 110 and was pruned at most reads; with pages
-- filled to a fifth by new heads, the updates have room on their page and
-- a prune reads about 20 rows. The pages already written keep their rows.
ALTER TABLE rl_fallback_head SET (fillfactor = 20);
