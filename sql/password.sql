-- The Redis password never lands in a catalog that every role can read:
-- ALTER ROLE/DATABASE ... SET and a function's SET clause are refused when
-- the URL carries one, and no message repeats the URL. The password belongs
-- in postgresql.conf or in slidewin.redis_password_file (TAP 061).
CREATE ROLE regress_pw_role;
\set VERBOSITY default
ALTER ROLE regress_pw_role SET slidewin.redis_url = 'redis://:s3cret@127.0.0.1:1';
\echo :LAST_ERROR_SQLSTATE
ALTER ROLE regress_pw_role SET slidewin.redis_url = 'redis://user:s3cret@127.0.0.1:1/2';
ALTER ROLE ALL SET slidewin.redis_url = 'unix://:s3cret@/var/run/redis.sock';
DO $$ BEGIN
  EXECUTE format('ALTER DATABASE %I SET slidewin.redis_url = %L',
                 current_database(), 'redis://:s3cret@127.0.0.1:1');
END $$;
ALTER ROLE regress_pw_role IN DATABASE postgres SET slidewin.redis_url = 'redis://:s3cret@127.0.0.1:1';
CREATE FUNCTION regress_pw_f() RETURNS int LANGUAGE sql
  SET slidewin.redis_url = 'redis://:s3cret@127.0.0.1:1' AS 'SELECT 1';
-- nothing of it was stored
SELECT count(*) AS stored FROM pg_db_role_setting
 WHERE array_to_string(setconfig, ' ') LIKE '%s3cret%';
SELECT count(*) AS stored FROM pg_proc
 WHERE array_to_string(proconfig, ' ') LIKE '%s3cret%';
-- a URL without a password may be stored there
ALTER ROLE regress_pw_role SET slidewin.redis_url = 'redis://127.0.0.1:1';
SELECT setconfig FROM pg_db_role_setting
 WHERE setrole = 'regress_pw_role'::regrole;
ALTER ROLE regress_pw_role RESET slidewin.redis_url;
-- so may a user name with the password left to the file
ALTER ROLE regress_pw_role SET slidewin.redis_url = 'redis://alice:@127.0.0.1:1';
ALTER ROLE regress_pw_role RESET slidewin.redis_url;
-- a session's own SET is not stored, and may carry one
SET slidewin.redis_url = 'redis://:s3cret@127.0.0.1:1';
RESET slidewin.redis_url;
-- a malformed URL is refused without repeating it
SET slidewin.redis_url = 'redis://:s3cret@127.0.0.1:99999';
-- the password file setting is for superusers only, and hidden from others
SET ROLE regress_pw_role;
-- (expected/password_1.out: PostgreSQL 16 reworded this refusal, "permission
-- denied to examine", with a DETAIL)
SHOW slidewin.redis_password_file;
SET slidewin.redis_password_file = '/nonexistent/redis.pass';
SELECT name FROM pg_settings WHERE name LIKE 'slidewin.redis_%' ORDER BY 1;
RESET ROLE;
DROP ROLE regress_pw_role;
