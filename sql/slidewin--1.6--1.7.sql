/* slidewin 1.6 -> 1.7 */
\echo Use "ALTER EXTENSION slidewin UPDATE TO '1.7'" to load this file. \quit

-- rl_result names the entry a call recorded: an opaque ticket that
-- rl_refund takes back (NULL when the call recorded nothing).
ALTER TYPE rl_result ADD ATTRIBUTE ticket text;
COMMENT ON TYPE rl_result IS
'Outcome of a rate-limit check: whether it was admitted, units left, how long until a retry can pass, when the window empties, which store answered, the limit and window it was judged against, and a ticket naming the entry it recorded (for rl_refund).';

-- The secret that signs tickets: 32 random bytes, made here, so each
-- database (and each restore of it) has its own. No role but the owner may
-- read it; the library reads it without SQL. Not dumped: a restored
-- database makes a new one, and tickets issued before stop being accepted.
CREATE TABLE rl_ticket_secret (
    secret bytea NOT NULL CHECK (length(secret) = 32)
);
REVOKE ALL ON rl_ticket_secret FROM PUBLIC;
INSERT INTO rl_ticket_secret
  SELECT decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex');
COMMENT ON TABLE rl_ticket_secret IS
'The secret that signs rl_result tickets (see rl_refund). Replacing it makes every ticket issued before invalid.';

-- Refunds and penalties outside a transaction: an HTTP request is not one.
CREATE FUNCTION rl_refund(key text, ticket text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'slidewin_refund'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION rl_refund(text, text) IS
'Give back the units of the entry that ticket (from rl_result) names, now: true if they were given back, false if there was nothing to give back (the entry left its window, was reset, or was given back already).';

CREATE FUNCTION rl_penalize(key text, lim bigint, win interval, cost bigint DEFAULT '1'::bigint,
                            on_redis_error text DEFAULT NULL)
RETURNS rl_result
AS 'MODULE_PATHNAME', 'slidewin_penalize'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION rl_penalize(text, bigint, interval, bigint, text) IS
'Charge cost units to key''s sliding log even over lim (cost may exceed lim), then report the key as rl_peek does, with the penalty''s ticket.';
-- Charging another tenant's key over its limit is the DBA's to grant.
REVOKE EXECUTE ON FUNCTION rl_penalize(text, bigint, interval, bigint, text) FROM PUBLIC;

-- Concurrency slots: at most max holders of a key at once, each until its
-- top-level transaction ends (or its lease does, if it dies).
CREATE TYPE rl_lease AS (acquired boolean, holders bigint, store text);
COMMENT ON TYPE rl_lease IS
'Outcome of rl_acquire: whether a slot is held, how many holders the key has (NULL when no store answered), and which store answered.';

CREATE FUNCTION rl_acquire(key text, max bigint, lease interval DEFAULT '10 minutes',
                           timeout interval DEFAULT '0', on_redis_error text DEFAULT NULL,
                           raise boolean DEFAULT false)
RETURNS rl_lease
AS 'MODULE_PATHNAME', 'slidewin_acquire'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION rl_acquire(text, bigint, interval, interval, text, boolean) IS
'Take one of max slots of key until the transaction ends (COMMIT, ROLLBACK, or the ROLLBACK TO SAVEPOINT that undoes it), waiting up to timeout for one to free; a dead holder''s slot frees when its lease ends. With raise, no free slot raises RL429.';

CREATE FUNCTION rl_release(key text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'slidewin_release'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION rl_release(text) IS
'Give this transaction''s slot of key back now; whether it held one.';

CREATE FUNCTION rl_renew(key text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'slidewin_renew'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION rl_renew(text) IS
'Start the lease of this transaction''s slot of key again; false if it no longer holds one (its lease ended).';

CREATE FUNCTION rl_holders(key text, on_redis_error text DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'slidewin_holders'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION rl_holders(text, text) IS
'The number of live holders of key''s slots.';

-- rl_stats gains the slots' counters, as its last columns (a view's
-- columns can only be added at the end; rl_stats() keeps its own).
CREATE FUNCTION rl_slot_stats(
    OUT slot_acquisitions bigint,
    OUT slot_denials bigint,
    OUT slot_waits bigint,
    OUT slot_releases bigint,
    OUT slot_leases_ended bigint,
    OUT slot_releases_lost bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'slidewin_slot_stats_fn'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;
COMMENT ON FUNCTION rl_slot_stats() IS
'slidewin''s server-wide counters of concurrency slots since stats_reset; the rl_stats view reads them.';
CREATE OR REPLACE VIEW rl_stats AS SELECT s.*, l.* FROM rl_stats() s, rl_slot_stats() l;
-- ---------------------------------------------------------------------
-- Blocks: rl_block(key, duration) denies every call on the key until the
-- block ends; rl_unblock(key) lifts it. A block lives in Redis (one key per
-- user key) and, so that it still holds while Redis cannot answer, in the
-- fallback table below.
-- ---------------------------------------------------------------------
CREATE UNLOGGED TABLE rl_fallback_block (
    key     text COLLATE "C" NOT NULL,   -- key_prefix || key
    until   bigint NOT NULL              -- the block's end, Unix microseconds
);
CREATE INDEX rl_fallback_block_key ON rl_fallback_block (key);
CREATE INDEX rl_fallback_block_until ON rl_fallback_block (until);
REVOKE ALL ON rl_fallback_block FROM PUBLIC;
COMMENT ON TABLE rl_fallback_block IS
'slidewin fallback store: the blocks set by rl_block, one row per key, with the block''s end. Internal; do not modify.';

CREATE FUNCTION rl_block(key text, duration interval)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'slidewin_block'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION rl_block(text, interval) IS
'Deny every call on key, whatever its algorithm and limit, for duration (at most 3650 days), in Redis and in the fallback store; a block already longer is kept. Returns when the block ends. Not granted to PUBLIC.';
REVOKE EXECUTE ON FUNCTION rl_block(text, interval) FROM PUBLIC;

CREATE FUNCTION rl_unblock(key text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'slidewin_unblock'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION rl_unblock(text) IS
'Lift the block of key, in Redis and in the fallback store. Returns whether a block was in force. Not granted to PUBLIC.';
REVOKE EXECUTE ON FUNCTION rl_unblock(text) FROM PUBLIC;
