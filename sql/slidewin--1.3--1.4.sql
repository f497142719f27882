/* slidewin 1.3 -> 1.4 */
\echo Use "ALTER EXTENSION slidewin UPDATE TO '1.4'" to load this file. \quit

-- The sliding logs of the fallback store gain a head per key: its newest
-- admission's time and running total, and an expiry that no row of the key
-- outlives.
-- An admission decides from the committed rows without any lock, then claims
-- the head version it decided on with an in-place update, which blocks on
-- an in-progress claim as any UPDATE does; if another admission committed in
-- between, it decides again. The key's lock now only serialises the creation
-- of a head (src/fallback.c, doc/data-layout.md).
CREATE UNLOGGED TABLE rl_fallback_head (
    key     text COLLATE "C" NOT NULL,   -- key_prefix || key
    log     smallint NOT NULL,           -- 1 rl_fallback_log, 2 rl_fallback_mlog
    ts      bigint NOT NULL,             -- the newest row's admission time, Unix microseconds
    total   bigint NOT NULL,             -- the newest row's running total
    expires bigint NOT NULL              -- no row of the key matters after this
);
-- The only index: an update that changes no indexed column can be HOT, so
-- claiming a head writes no index entry. Expired heads are found by walking
-- the table's pages, a page at a time.
CREATE INDEX rl_fallback_head_key ON rl_fallback_head (key, log);
REVOKE ALL ON rl_fallback_head FROM PUBLIC;
COMMENT ON TABLE rl_fallback_head IS
'slidewin fallback store: the newest admission of each key of rl_fallback_log (log 1) and rl_fallback_mlog (log 2). Internal; do not modify.';

-- The keys that have rows now: the newest row of each, and the latest expiry
-- of any of its rows.
INSERT INTO rl_fallback_head (key, log, ts, total, expires)
SELECT DISTINCT ON (key) key, 1, ts, total,
       (SELECT max(e.expires) FROM rl_fallback_log e WHERE e.key = l.key)
  FROM rl_fallback_log l
 ORDER BY key, ts DESC;
INSERT INTO rl_fallback_head (key, log, ts, total, expires)
SELECT DISTINCT ON (key) key, 2, ts, total,
       (SELECT max(e.expires) FROM rl_fallback_mlog e WHERE e.key = l.key)
  FROM rl_fallback_mlog l
 ORDER BY key, ts DESC;
