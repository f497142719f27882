/* slidewin 1.2 -> 1.3 */
\echo Use "ALTER EXTENSION slidewin UPDATE TO '1.3'" to load this file. \quit

-- The default of cost becomes a bigint constant. Declared as DEFAULT 1, it
-- was stored as a cast of the integer 1 to bigint, which every call that
-- leaves cost out read back, and which the planner then folded, once per
-- statement. A client that sends its calls as text (psql, psycopg2) pays
-- that on every call: about 6 % of PostgreSQL's work for a denied call
-- answered from the deny cache (doc/performance.md). The value is the same.
--
-- Only the stored defaults change: each function keeps its OID, owner,
-- grants, settings (ALTER FUNCTION ... SET) and dependents, as in
-- slidewin--1.0--1.1.sql. Each takes the defaults of a scratch function
-- declared the new way, which then goes.
CREATE FUNCTION slidewin_1_3_attempt(key text, lim bigint, win interval,
                                     cost bigint DEFAULT '1'::bigint,
                                     on_redis_error text DEFAULT NULL,
                                     refund_on_abort boolean DEFAULT NULL,
                                     algorithm text DEFAULT 'sliding_log')
RETURNS rl_result AS 'MODULE_PATHNAME', 'slidewin_attempt' LANGUAGE C;
CREATE FUNCTION slidewin_1_3_multi(key text, lims bigint[], wins interval[],
                                   cost bigint DEFAULT '1'::bigint,
                                   on_redis_error text DEFAULT NULL,
                                   refund_on_abort boolean DEFAULT NULL)
RETURNS rl_result AS 'MODULE_PATHNAME', 'slidewin_attempt_multi' LANGUAGE C;
CREATE FUNCTION slidewin_1_3_wait(key text, lim bigint, win interval,
                                  cost bigint DEFAULT '1'::bigint,
                                  timeout interval DEFAULT '5 seconds',
                                  on_redis_error text DEFAULT NULL,
                                  refund_on_abort boolean DEFAULT NULL,
                                  algorithm text DEFAULT 'sliding_log')
RETURNS rl_result AS 'MODULE_PATHNAME', 'slidewin_wait' LANGUAGE C;

UPDATE pg_catalog.pg_proc p
   SET proargdefaults = n.proargdefaults
  FROM pg_catalog.pg_proc n
 WHERE (p.oid, n.oid) IN
       (('rl_attempt(text, bigint, interval, bigint, text, boolean, text)'::regprocedure,
         'slidewin_1_3_attempt(text, bigint, interval, bigint, text, boolean, text)'::regprocedure),
        ('rl_allow(text, bigint, interval, bigint, text, boolean, text)'::regprocedure,
         'slidewin_1_3_attempt(text, bigint, interval, bigint, text, boolean, text)'::regprocedure),
        ('rl_enforce(text, bigint, interval, bigint, text, boolean, text)'::regprocedure,
         'slidewin_1_3_attempt(text, bigint, interval, bigint, text, boolean, text)'::regprocedure),
        ('rl_attempt_multi(text, bigint[], interval[], bigint, text, boolean)'::regprocedure,
         'slidewin_1_3_multi(text, bigint[], interval[], bigint, text, boolean)'::regprocedure),
        ('rl_wait(text, bigint, interval, bigint, interval, text, boolean, text)'::regprocedure,
         'slidewin_1_3_wait(text, bigint, interval, bigint, interval, text, boolean, text)'::regprocedure));

DROP FUNCTION slidewin_1_3_attempt(text, bigint, interval, bigint, text, boolean, text);
DROP FUNCTION slidewin_1_3_multi(text, bigint[], interval[], bigint, text, boolean);
DROP FUNCTION slidewin_1_3_wait(text, bigint, interval, bigint, interval, text, boolean, text);
