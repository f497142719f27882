-- Tickets: rl_result.ticket names the entry a call recorded, and
-- rl_refund(key, ticket) gives its units back outside any transaction.
-- rl_penalize charges units even over the limit.
SET slidewin.key_prefix = 'regress:tk:';
SET slidewin.test_now = '2030-01-01 00:00:00+00';
SET TimeZone = 'UTC';
SELECT rl_reset(k) FROM unnest(ARRAY['a', 'b', 'c', 'd', 'm', 'p', 'q', 'f', 'g', 'hx', 'pen']) AS k;
CREATE TEMP TABLE t (name text PRIMARY KEY, ticket text);

SELECT refunds AS refunds_before FROM rl_stats \gset
-- A ticket is 64 characters of base64url; a denial records nothing.
INSERT INTO t SELECT 'a1', ticket FROM rl_attempt('a', 3, '1 hour', 2);
SELECT length(ticket) AS ticket_length, ticket ~ '^[A-Za-z0-9_-]+$' AS base64url FROM t WHERE name = 'a1';
SELECT allowed, ticket IS NULL AS no_ticket FROM rl_attempt('a', 3, '1 hour', 2);
-- given back once: the units return, a second refund finds nothing
SELECT rl_refund('a', ticket) AS given FROM t WHERE name = 'a1';
SELECT allowed, remaining FROM rl_peek('a', 3, '1 hour');
SELECT rl_refund('a', ticket) AS given_again FROM t WHERE name = 'a1';
SELECT remaining FROM rl_peek('a', 3, '1 hour');

-- A refund in the middle of the window: the units of the entries on each
-- side still leave when they would have, and retry_after stays exact.
SET slidewin.test_now = '2030-01-01 00:00:00+00';
INSERT INTO t SELECT 'b0', ticket FROM rl_attempt('b', 3, '10 seconds');
SET slidewin.test_now = '2030-01-01 00:00:01+00';
INSERT INTO t SELECT 'b1', ticket FROM rl_attempt('b', 3, '10 seconds');
SET slidewin.test_now = '2030-01-01 00:00:02+00';
INSERT INTO t SELECT 'b2', ticket FROM rl_attempt('b', 3, '10 seconds');
SELECT allowed, retry_after FROM rl_attempt('b', 3, '10 seconds');
SELECT rl_refund('b', ticket) AS given FROM t WHERE name = 'b1';
SELECT allowed, remaining FROM rl_attempt('b', 3, '10 seconds');
-- full again: the first entry (0 s) frees the next unit at 10 s
SELECT allowed, remaining, retry_after FROM rl_attempt('b', 3, '10 seconds');
SELECT allowed, retry_after FROM rl_attempt('b', 3, '10 seconds', 2);
SET slidewin.test_now = '2030-01-01 00:00:10+00';
SELECT allowed, remaining FROM rl_attempt('b', 3, '10 seconds');
-- an entry that has left its window has nothing to give back, and says so
SET slidewin.test_now = '2030-01-01 00:00:11+00';
SELECT rl_refund('b', ticket) AS given_after_window FROM t WHERE name = 'b0';
SELECT remaining FROM rl_peek('b', 3, '10 seconds');

-- after rl_reset, nothing to give back
SET slidewin.test_now = '2030-01-01 00:00:00+00';
INSERT INTO t SELECT 'c1', ticket FROM rl_attempt('c', 3, '1 hour');
SELECT rl_reset('c');
SELECT rl_refund('c', ticket) AS given_after_reset FROM t WHERE name = 'c1';
SELECT remaining FROM rl_peek('c', 3, '1 hour');

-- an entry given back at ROLLBACK (refund_on_abort) is not given back twice
BEGIN;
SELECT ticket AS d1 FROM rl_attempt('d', 3, '1 hour', 2, refund_on_abort => true) \gset
ROLLBACK;
SELECT rl_refund('d', :'d1') AS given_after_rollback;
INSERT INTO t SELECT 'd2', ticket FROM rl_attempt('d', 3, '1 hour', 2, refund_on_abort => true);
BEGIN;
SELECT rl_refund('d', ticket) AS given FROM t WHERE name = 'd2';
ROLLBACK;
-- a Redis refund is not undone by the caller's ROLLBACK
SELECT remaining FROM rl_peek('d', 3, '1 hour');
SELECT rl_refund('d', ticket) AS given_again FROM t WHERE name = 'd2';

-- rl_attempt_multi: the ticket names the entry of its log
INSERT INTO t SELECT 'm1', ticket FROM rl_attempt_multi('m', ARRAY[2, 5], ARRAY[interval '1 minute', '1 hour']);
SELECT allowed FROM rl_attempt_multi('m', ARRAY[2, 5], ARRAY[interval '1 minute', '1 hour']);
SELECT allowed FROM rl_attempt_multi('m', ARRAY[2, 5], ARRAY[interval '1 minute', '1 hour']);
SELECT rl_refund('m', ticket) AS given FROM t WHERE name = 'm1';
SELECT allowed, remaining FROM rl_attempt_multi('m', ARRAY[2, 5], ARRAY[interval '1 minute', '1 hour']);

-- The counting algorithms keep counts, not entries: no ticket.
SELECT a AS algorithm, (SELECT ticket IS NULL FROM rl_attempt('q', 5, '1 hour', algorithm => a)) AS no_ticket
  FROM unnest(ARRAY['sliding_counter', 'fixed_window', 'token_bucket']) AS a;

-- Bad tickets: 22023 naming the argument, never a refund.
INSERT INTO t SELECT 'p1', ticket FROM rl_attempt('p', 3, '1 hour');
SELECT rl_refund('a', ticket) FROM t WHERE name = 'p1';
\echo :LAST_ERROR_SQLSTATE
SET slidewin.key_prefix = 'regress:tk2:';
SELECT rl_refund('p', ticket) FROM t WHERE name = 'p1';
\echo :LAST_ERROR_SQLSTATE
SET slidewin.key_prefix = 'regress:tk:';
-- one character changed, anywhere: altered
SELECT rl_refund('p', overlay(ticket PLACING (CASE WHEN substr(ticket, i, 1) = 'A' THEN 'B' ELSE 'A' END) FROM i FOR 1))
  FROM t, (VALUES (1), (2), (20), (40), (64)) AS v(i) WHERE name = 'p1' AND i = 2;
\echo :LAST_ERROR_SQLSTATE
DO $$
DECLARE
  tk text := (SELECT ticket FROM t WHERE name = 'p1');
  n int := 0;
BEGIN
  FOR i IN 1..64 LOOP
    BEGIN
      PERFORM rl_refund('p', overlay(tk PLACING (CASE WHEN substr(tk, i, 1) = 'A' THEN 'B' ELSE 'A' END) FROM i FOR 1));
    EXCEPTION WHEN invalid_parameter_value THEN
      n := n + 1;
    END;
  END LOOP;
  RAISE NOTICE 'altered tickets refused: % of 64', n;
END $$;
SELECT rl_refund('p', left(ticket, 63)) FROM t WHERE name = 'p1';
SELECT rl_refund('p', ticket || 'A') FROM t WHERE name = 'p1';
SELECT rl_refund('p', replace(ticket, substr(ticket, 5, 1), '+')) FROM t WHERE name = 'p1';
SELECT rl_refund('p', 'not a ticket');
SELECT rl_refund('p', '');
SELECT rl_refund('p', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT rl_refund(NULL, ticket) FROM t WHERE name = 'p1';
\echo :LAST_ERROR_SQLSTATE
SELECT rl_refund('', ticket) FROM t WHERE name = 'p1';
-- none of that gave anything back
SELECT remaining FROM rl_peek('p', 3, '1 hour');
SELECT rl_refund('p', ticket) AS genuine_given FROM t WHERE name = 'p1';

-- rl_penalize: charges even over the limit, reports the key as rl_peek
-- would, and its ticket forgives it.
SET slidewin.test_now = '2030-01-01 00:00:00+00';
SELECT allowed, remaining, retry_after, reset_at, store, lim, win, ticket IS NOT NULL AS has_ticket
  FROM rl_penalize('pen', 3, '1 hour', 2);
SET slidewin.test_now = '2030-01-01 00:10:00+00';
-- over the limit, and more than the limit: denied until it leaves the window
INSERT INTO t SELECT 'pen1', ticket FROM rl_penalize('pen', 3, '1 hour', 5);
SELECT allowed, remaining, retry_after, reset_at FROM rl_peek('pen', 3, '1 hour');
SELECT allowed, retry_after FROM rl_attempt('pen', 3, '1 hour');
-- forgiven: the first penalty alone is left
SELECT rl_refund('pen', ticket) AS forgiven FROM t WHERE name = 'pen1';
SELECT allowed, remaining FROM rl_attempt('pen', 3, '1 hour');
SELECT * FROM rl_penalize('pen', 3, '1 hour', 0);
SELECT * FROM rl_penalize('pen', 3, '1 hour', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rl_penalize('pen', 3, '1 hour', 2251799813685249);
SELECT * FROM rl_penalize('pen', 3, '-1 hour');

-- Privileges: anyone may hand a ticket in, which only the secret can make;
-- nobody but the owner reads the secret; penalties are the DBA's to grant.
CREATE ROLE regress_tk_user;
GRANT SELECT ON t TO regress_tk_user;
INSERT INTO t SELECT 'u1', ticket FROM rl_attempt('a', 3, '1 hour');
SET ROLE regress_tk_user;
SELECT rl_refund('a', ticket) AS user_given FROM t WHERE name = 'u1';
SELECT * FROM rl_ticket_secret;
SELECT allowed FROM rl_penalize('a', 3, '1 hour');
RESET ROLE;
REVOKE SELECT ON t FROM regress_tk_user;
DROP ROLE regress_tk_user;

-- The fallback store: the ticket says so, and the refund goes there even
-- once Redis is back. The row goes, the newer rows' running totals move
-- down by its cost, and the head's with them.
SET slidewin.redis_retry_interval = 0;
SET slidewin.redis_url = 'redis://127.0.0.1:1';
SET slidewin.test_now = '2030-01-01 00:00:00+00';
INSERT INTO t SELECT 'f0', ticket FROM rl_attempt('f', 5, '10 seconds', 1, 'fallback');
SET slidewin.test_now = '2030-01-01 00:00:01+00';
INSERT INTO t SELECT 'f1', ticket FROM rl_attempt('f', 5, '10 seconds', 2, 'fallback');
SET slidewin.test_now = '2030-01-01 00:00:02+00';
INSERT INTO t SELECT 'f2', ticket FROM rl_attempt('f', 5, '10 seconds', 1, 'fallback');
SET slidewin.test_now = '2030-01-01 00:00:03+00';
INSERT INTO t SELECT 'f3', ticket FROM rl_attempt('f', 5, '10 seconds', 1, 'fallback');
SELECT allowed, retry_after, store FROM rl_attempt('f', 5, '10 seconds', 1, 'fallback');
SELECT to_timestamp(ts / 1e6) AS at, total, cost FROM rl_fallback_log WHERE key = 'regress:tk:f' ORDER BY ts;
SELECT rl_refund('f', ticket) AS given FROM t WHERE name = 'f1';
SELECT to_timestamp(ts / 1e6) AS at, total, cost FROM rl_fallback_log WHERE key = 'regress:tk:f' ORDER BY ts;
SELECT to_timestamp(ts / 1e6) AS head_at, total FROM rl_fallback_head WHERE key = 'regress:tk:f';
SELECT rl_refund('f', ticket) AS given_again FROM t WHERE name = 'f1';
-- 3 units live (0 s, 2 s, 3 s): 2 more fit, then the 0 s entry frees one at 10 s
SELECT allowed, remaining, store FROM rl_attempt('f', 5, '10 seconds', 2, 'fallback');
SELECT allowed, retry_after, store FROM rl_attempt('f', 5, '10 seconds', 1, 'fallback');
SELECT allowed, retry_after, store FROM rl_attempt('f', 5, '10 seconds', 2, 'fallback');
-- the newest entry given back: the next admission still comes after it
INSERT INTO t SELECT 'g1', ticket FROM rl_attempt('g', 5, '10 seconds', 1, 'fallback');
INSERT INTO t SELECT 'g2', ticket FROM rl_attempt('g', 5, '10 seconds', 3, 'fallback');
SELECT rl_refund('g', ticket) AS given FROM t WHERE name = 'g2';
SELECT remaining FROM rl_attempt('g', 5, '10 seconds', 1, 'fallback');
SELECT count(*) AS rows, count(DISTINCT ts) AS times, max(total) AS newest_total
  FROM rl_fallback_log WHERE key = 'regress:tk:g';
-- a key whose writers never met has no head (1.18): giving back its newest
-- entry gives it one, so that the next admission, in the same microsecond
-- of this frozen clock, still comes after the entry given back, and that
-- entry's ticket, handed in again, names no other entry
INSERT INTO t SELECT 'hx1', ticket FROM rl_attempt('hx', 5, '10 seconds', 1, 'fallback');
INSERT INTO t SELECT 'hx2', ticket FROM rl_attempt('hx', 5, '10 seconds', 2, 'fallback');
SELECT count(*) AS heads_before FROM rl_fallback_head WHERE key = 'regress:tk:hx';
SELECT rl_refund('hx', ticket) AS given FROM t WHERE name = 'hx2';
INSERT INTO t SELECT 'hx3', ticket FROM rl_attempt('hx', 5, '10 seconds', 2, 'fallback');
SELECT rl_refund('hx', ticket) AS given_again FROM t WHERE name = 'hx2';
SELECT count(*) AS rows, count(DISTINCT ts) AS times, max(total) AS newest_total
  FROM rl_fallback_log WHERE key = 'regress:tk:hx';
-- a Redis entry cannot be given back while Redis cannot answer, whatever
-- the policy: an error, never "nothing to give back"
SELECT rl_refund('p', ticket) FROM t WHERE name = 'p1';
\echo :LAST_ERROR_SQLSTATE
-- the ticket of one store never reaches the other's entries
RESET slidewin.redis_url;
SELECT rl_refund('g', ticket) AS given_again FROM t WHERE name = 'g2';
SELECT rl_refund('g', ticket) AS given_with_redis_back FROM t WHERE name = 'g1';
SELECT count(*) AS rows FROM rl_fallback_log WHERE key = 'regress:tk:g';
INSERT INTO t SELECT 'h1', ticket FROM rl_attempt('g', 5, '10 seconds');
SELECT store FROM rl_peek('g', 5, '10 seconds');
DROP TABLE t;

-- rl_stats counts the entries given back: by rl_refund (a1, b1, d2, m1,
-- p1, pen1, u1, f1, g2, g1) and at ROLLBACK (d1)
SELECT refunds - :refunds_before AS refunds_counted FROM rl_stats;

-- A new secret makes earlier tickets invalid (in sessions that start after).
CREATE TABLE regress_tk_old AS SELECT ticket FROM rl_attempt('a', 100, '1 hour');
UPDATE rl_ticket_secret SET secret = decode(repeat('ab', 32), 'hex');
\c
SET slidewin.key_prefix = 'regress:tk:';
SELECT rl_refund('a', ticket) FROM regress_tk_old;
SELECT rl_refund('a', ticket) AS new_secret_given FROM rl_attempt('a', 100, '1 hour');
DROP TABLE regress_tk_old;
