-- The benchmark's baseline: what a competent PostgreSQL user would write
-- without slidewin. An exact sliding log in an unlogged table: one row per
-- admitted call, the window summed on every call, and the calls of one key
-- serialised by a transaction-level advisory lock, so that concurrent
-- callers cannot both see room for the last unit. Expired rows of the key
-- are deleted by the call that finds them.
CREATE SCHEMA IF NOT EXISTS plbase;
DROP TABLE IF EXISTS plbase.log;
CREATE UNLOGGED TABLE plbase.log (
    key  text        NOT NULL,
    ts   timestamptz NOT NULL,
    cost bigint      NOT NULL
);
CREATE INDEX log_key_ts ON plbase.log (key, ts);

CREATE OR REPLACE FUNCTION plbase.attempt(p_key text, p_lim bigint, p_win interval,
                                          p_cost bigint DEFAULT 1)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    t    timestamptz;
    used bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(p_key, 0));
    -- read the clock once the lock is held: earlier holders have committed
    t := clock_timestamp();
    DELETE FROM plbase.log WHERE key = p_key AND ts <= t - p_win;
    SELECT coalesce(sum(cost), 0) INTO used
      FROM plbase.log WHERE key = p_key AND ts > t - p_win;
    IF used + p_cost > p_lim THEN
        RETURN false;
    END IF;
    INSERT INTO plbase.log (key, ts, cost) VALUES (p_key, t, p_cost);
    RETURN true;
END
$$;
