-- Ordinary roles can rate-limit, but cannot see or move the Redis server,
-- change the key prefix or the clock, or forget a key.
CREATE ROLE regress_slidewin_user LOGIN;
SELECT current_user AS superuser \gset
SET slidewin.key_prefix = 'regress:priv:';
SELECT rl_reset('p');

SET ROLE regress_slidewin_user;
-- (expected/privileges_1.out: PostgreSQL 16 reworded these refusals,
-- "permission denied to examine", with a DETAIL)
SHOW slidewin.redis_url;
SHOW slidewin.key_prefix;
SELECT current_setting('slidewin.redis_url');
SELECT count(*) FROM pg_settings WHERE name IN ('slidewin.redis_url', 'slidewin.key_prefix');
-- the other settings are visible (none of them is a secret)
SELECT name FROM pg_settings WHERE name LIKE 'slidewin.%' ORDER BY name;
SET slidewin.redis_url = 'redis://127.0.0.1:1';
SET slidewin.key_prefix = 'elsewhere:';
SET slidewin.test_now = '2030-01-01 00:00:00+00';
SET slidewin.command_timeout = 1;
SET slidewin.connect_timeout = 1;
SET slidewin.refund_confirm_timeout = 0;
-- nor switch off enforcement, turn on refunds, or silence denial logging
SET slidewin.enforce = off;
SET slidewin.refund_on_abort = on;
SET slidewin.log_denials = off;
SELECT set_config('slidewin.enforce', 'off', true);
-- the error style only changes how a denial is spelled: anyone may choose it
SET slidewin.error_style = postgrest;
RESET slidewin.error_style;
SELECT set_config('slidewin.key_prefix', 'elsewhere:', false);
SELECT rl_reset('p');
\echo :LAST_ERROR_SQLSTATE
-- but may use the limiter itself
SELECT allowed, remaining, store FROM rl_attempt('p', 2, '1 hour');
RESET ROLE;
SELECT allowed, remaining FROM rl_peek('p', 2, '1 hour');

-- This server preloads the library (shared_preload_libraries), so the
-- settings exist before the session starts and an ordinary role's SET is
-- refused at once. (Without preloading, a value set before the library
-- loads is a placeholder that loading must not let through: TAP 040 checks
-- that on a server that does not preload.) Either way the call below draws
-- from the configured server and prefix.
RESET slidewin.key_prefix;
SELECT rl_reset('p-placeholder');
\c - regress_slidewin_user
SET slidewin.redis_url = 'redis://127.0.0.1:1';
SET slidewin.key_prefix = 'regress:priv:';
SELECT allowed, remaining, store FROM rl_attempt('p-placeholder', 2, '1 hour');
SHOW slidewin.key_prefix;
\c - :superuser
-- the unit went to the configured prefix, not the one the role asked for
SELECT allowed, remaining FROM rl_peek('p-placeholder', 2, '1 hour');
SELECT rl_reset('p-placeholder');
SET slidewin.key_prefix = 'regress:priv:';
SELECT allowed, remaining FROM rl_peek('p-placeholder', 2, '1 hour');
SELECT rl_reset('p');
DROP ROLE regress_slidewin_user;
