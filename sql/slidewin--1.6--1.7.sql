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
