/* slidewin 1.7 -> 1.8: exact across an outage */
\echo Use "ALTER EXTENSION slidewin UPDATE TO '1.8'" to load this file. \quit

-- ---------------------------------------------------------------------
-- The fallback store's admissions (rl_attempt's algorithms) that Redis has
-- not learned of yet: one row per admission, written with it, and deleted
-- once the admission has been carried into the key's Redis structure (with
-- its age) when Redis answers again. Rows whose window has ended are never
-- sent.
-- ---------------------------------------------------------------------
CREATE UNLOGGED TABLE rl_fallback_carry (
    key     text COLLATE "C" NOT NULL,   -- key_prefix || key
    plen    integer NOT NULL,            -- length of key_prefix in key
    algo    smallint NOT NULL,           -- the algorithm (its number in the library)
    ts      bigint NOT NULL,             -- admission time, Unix microseconds
    cost    bigint NOT NULL,             -- its units
    lim     bigint NOT NULL,             -- the limit it was admitted under
    win     bigint NOT NULL,             -- and the window, microseconds
    expires bigint NOT NULL              -- until when it counts (then it is not sent)
);
CREATE INDEX rl_fallback_carry_key_ts ON rl_fallback_carry (key, ts);
CREATE INDEX rl_fallback_carry_expires ON rl_fallback_carry (expires);
REVOKE ALL ON rl_fallback_carry FROM PUBLIC;
COMMENT ON TABLE rl_fallback_carry IS
'slidewin fallback store: sliding-log admissions waiting to be carried into Redis once it answers again. Internal; do not modify.';

-- rl_stats gains the outage's counters, as its last columns.
CREATE FUNCTION rl_outage_stats(
    OUT outage_seeded_units bigint,
    OUT outage_unseeded_calls bigint,
    OUT outage_carried bigint,
    OUT outage_carry_pending bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'slidewin_outage_stats_fn'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;
COMMENT ON FUNCTION rl_outage_stats() IS
'slidewin''s server-wide counters of exactness across an outage since stats_reset, and the admissions of this database''s fallback store still waiting to be carried into Redis; the rl_stats view reads them.';
CREATE OR REPLACE VIEW rl_stats AS
    SELECT s.*, l.*, o.* FROM rl_stats() s, rl_slot_stats() l, rl_outage_stats() o;
