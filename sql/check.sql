-- rl_check(): one row per server slidewin.redis_url names, with what works
-- and the last error; never a password. Only the servers that cannot
-- answer here are deterministic (TAP 064 checks real and misconfigured ones).
SET slidewin.connect_timeout = 200;
SET slidewin.redis_url = 'redis://someone:s3cret@127.0.0.1:1/3';
SELECT target, reachable, authenticated, server_version, role, tls_verified,
       scripts_loaded, last_error, preloaded
  FROM rl_check();
-- a sentinel URL: the sentinels, and no master when none of them answers
SET slidewin.redis_url = 'redis-sentinel://:s3cret@127.0.0.1:1,127.0.0.1:2/mymaster';
SELECT target, role, reachable, last_error FROM rl_check();
-- a cluster URL: its seed nodes
SET slidewin.redis_url = 'redis-cluster://:s3cret@127.0.0.1:1,127.0.0.1:2';
SELECT target, role, reachable, last_error FROM rl_check();
-- a Unix socket: its path
SET slidewin.redis_url = 'unix://:s3cret@/nonexistent/redis.sock';
SELECT target, reachable, last_error FROM rl_check();
RESET slidewin.redis_url;
RESET slidewin.connect_timeout;

-- Not PUBLIC's: the targets are where slidewin.redis_url points, which only
-- superusers may read.
SELECT has_function_privilege('public', 'rl_check()', 'EXECUTE') AS public_may_check;
CREATE ROLE regress_check_role;
SET ROLE regress_check_role;
SELECT * FROM rl_check();
RESET ROLE;
DROP ROLE regress_check_role;
SELECT provolatile, proisstrict, proparallel, proretset
  FROM pg_proc WHERE proname = 'rl_check';
SELECT obj_description('rl_check()'::regprocedure, 'pg_proc') IS NOT NULL AS has_comment;
