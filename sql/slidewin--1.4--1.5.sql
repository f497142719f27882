/* slidewin 1.4 -> 1.5 */
\echo Use "ALTER EXTENSION slidewin UPDATE TO '1.5'" to load this file. \quit

-- rl_check(): one row per Redis server slidewin.redis_url names (the
-- server; the sentinels and the master they name; a cluster's seed nodes),
-- saying what works from this backend and the last error. It opens a
-- connection of its own to each, bounded by slidewin.connect_timeout and
-- slidewin.command_timeout, and interruptible.
CREATE FUNCTION rl_check(
    OUT target text,
    OUT reachable boolean,
    OUT authenticated boolean,
    OUT server_version text,
    OUT role text,
    OUT tls_verified boolean,
    OUT scripts_loaded boolean,
    OUT last_error text,
    OUT preloaded boolean)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'slidewin_check'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED ROWS 4;

-- The targets are where slidewin.redis_url points, which only superusers
-- may read; grant it to a monitoring role if that role may know them.
REVOKE ALL ON FUNCTION rl_check() FROM PUBLIC;

COMMENT ON FUNCTION rl_check() IS
'slidewin: for each Redis server slidewin.redis_url names, whether it can be reached, logged in to and verified, its version and role, whether the scripts are cached, and the last error; never a password';
