-- A ticket's key tags and signature are HMAC-SHA256 under the database's
-- secret, as ticket.c's header says. Recomputed here in SQL, from sha256()
-- and the secret in rl_ticket_secret, so that a faster HMAC in C is held
-- to the same bytes: tickets issued before an update of the library stay
-- good after it.
SET slidewin.key_prefix = 'regress:tm:';
SELECT rl_reset(k) FROM unnest(ARRAY['a', 'b', 'c']) AS k;

-- the key, zero-padded to SHA-256's block of 64 bytes, xor p
CREATE FUNCTION regress_tm_pad(k bytea, p int) RETURNS bytea LANGUAGE sql AS $$
  SELECT string_agg(set_byte('\x00'::bytea, 0,
           (CASE WHEN i < length(k) THEN get_byte(k, i) ELSE 0 END) # p), '' ORDER BY i)
    FROM generate_series(0, 63) AS i $$;
-- RFC 2104 over SHA-256
CREATE FUNCTION regress_tm_hmac(k bytea, m bytea) RETURNS bytea LANGUAGE sql AS $$
  SELECT sha256(regress_tm_pad(k, 92) || sha256(regress_tm_pad(k, 54) || m)) $$;
-- ticket.c's labels end in their NUL
CREATE FUNCTION regress_tm_mac(label text, m bytea) RETURNS bytea LANGUAGE sql AS $$
  SELECT regress_tm_hmac((SELECT secret FROM rl_ticket_secret),
                         convert_to(label, 'UTF8') || '\x00'::bytea || m) $$;
CREATE FUNCTION regress_tm_bytes(ticket text) RETURNS bytea LANGUAGE sql AS $$
  SELECT decode(translate(ticket, '-_', '+/'), 'base64') $$;
-- a ticket of one key: the tag (bytes 26-31) and the signature (32-47)
CREATE FUNCTION regress_tm_check(key text, ticket text) RETURNS TABLE (tag_ok bool, mac_ok bool)
LANGUAGE sql AS $$
  SELECT substr(b, 27, 6) = substr(regress_tm_mac('key', convert_to(current_setting('slidewin.key_prefix') || key, 'UTF8')), 1, 6),
         substr(b, 33, 16) = substr(regress_tm_mac('ticket', substr(b, 1, 32)), 1, 16)
    FROM regress_tm_bytes(ticket) AS b $$;

SELECT * FROM regress_tm_check('a', (SELECT ticket FROM rl_attempt('a', 5, '1 hour')));
SELECT * FROM regress_tm_check('b', (SELECT ticket FROM rl_attempt('b', 5, '1 hour', 2,
                                                                  algorithm => 'sliding_log')));
-- a ticket of rl_attempt_all: each key's tag (8 bytes at 25 of its record
-- of 33, after a head of 2), then the signature over all before it
WITH t AS (SELECT regress_tm_bytes(ticket) AS b
             FROM rl_attempt_all(ARRAY['a', 'c'], ARRAY[5, 5], ARRAY['1 hour', '1 hour']::interval[]))
SELECT substr(b, 3 + 25, 8) = substr(regress_tm_mac('key', convert_to('regress:tm:a', 'UTF8')), 1, 8) AS tag_a_ok,
       substr(b, 3 + 33 + 25, 8) = substr(regress_tm_mac('key', convert_to('regress:tm:c', 'UTF8')), 1, 8) AS tag_c_ok,
       substr(b, length(b) - 15, 16) = substr(regress_tm_mac('tickets', substr(b, 1, length(b) - 16)), 1, 16) AS mac_ok
  FROM t;

-- A new secret is read again after a relation cache invalidation (any
-- relation's, here a temporary table's), as in the next session: the next
-- ticket is signed with it, not with what was keyed for the old one.
CREATE TEMP TABLE regress_tm_inval (a int);
BEGIN;
UPDATE rl_ticket_secret SET secret = decode(repeat('5a', 32), 'hex');
ALTER TABLE regress_tm_inval ADD COLUMN b int;
SELECT * FROM regress_tm_check('a', (SELECT ticket FROM rl_attempt('a', 5, '1 hour')));
ROLLBACK;
-- and the old one is back with the rollback
SELECT * FROM regress_tm_check('a', (SELECT ticket FROM rl_attempt('a', 5, '1 hour')));

SELECT rl_reset(k) FROM unnest(ARRAY['a', 'b', 'c']) AS k;
DROP TABLE regress_tm_inval;
DROP FUNCTION regress_tm_check(text, text);
DROP FUNCTION regress_tm_bytes(text);
DROP FUNCTION regress_tm_mac(text, bytea);
DROP FUNCTION regress_tm_hmac(bytea, bytea);
DROP FUNCTION regress_tm_pad(bytea, int);
