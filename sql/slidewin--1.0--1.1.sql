/* slidewin 1.0 -> 1.1 */
\echo Use "ALTER EXTENSION slidewin UPDATE TO '1.1'" to load this file. \quit

-- Fallback store: every row carries its own cost and the end of the window it
-- was admitted under, so that no lookup reads an expired row and expired rows
-- of keys that are never called again can be found and deleted.
ALTER TABLE rl_fallback_log ADD COLUMN cost bigint, ADD COLUMN expires bigint;
-- 1.0 rows: the cost is the step in the running total; the window they were
-- admitted under was not stored, so they get the longest one allowed (their
-- own key's later calls delete them as soon as they leave its window).
UPDATE rl_fallback_log l
   SET cost = l.total - coalesce(p.prev, 0),
       expires = l.ts + 3650::bigint * 86400 * 1000000
  FROM (SELECT ctid AS row_id, lag(total) OVER (PARTITION BY key ORDER BY ts) AS prev
          FROM rl_fallback_log) p
 WHERE l.ctid = p.row_id;
ALTER TABLE rl_fallback_log ALTER COLUMN cost SET NOT NULL,
                            ALTER COLUMN expires SET NOT NULL;
CREATE INDEX rl_fallback_log_key_total ON rl_fallback_log (key, total);
CREATE INDEX rl_fallback_log_expires ON rl_fallback_log (expires);
COMMENT ON TABLE rl_fallback_log IS
'slidewin fallback store: one row per admitted call while Redis was unreachable (key, admission time, running total, cost, window end). Internal; do not modify.';
