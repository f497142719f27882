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
