-- Refunds are exact: a log with entries given back answers every later call
-- exactly as a log in which those entries were never admitted. Key 'a' gets
-- refundable admissions that abort (in PL/pgSQL blocks, some nested so that
-- an older entry is given back after a newer one, which moves the newer
-- one's total in the ledger); key 'b' gets only what 'a' keeps, at the same
-- times. After every step both keys are asked the same question (attempt
-- and peek; the multi-window log too), and every field must match.
SET slidewin.key_prefix = 'regress:rx:';
SELECT count(rl_reset(k)) FROM unnest(ARRAY['a', 'b']) k;

CREATE FUNCTION pg_temp.at(s int) RETURNS void LANGUAGE sql AS $$
  SELECT set_config('slidewin.test_now',
                    (timestamptz '2030-01-01 00:00:00+00' + s * interval '1 second')::text, false);
$$;

-- Admit on 'a' (and, unless refundable, on 'b'), both logs.
CREATE FUNCTION pg_temp.take(s int, c int, refundable boolean) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_temp.at(s);
  PERFORM rl_attempt('a', 12, '60 seconds', c, refund_on_abort => refundable);
  PERFORM rl_attempt_multi('a', ARRAY[12, 30], ARRAY[interval '60 seconds', interval '150 seconds'], c,
                           refund_on_abort => refundable);
  IF NOT refundable THEN
    PERFORM rl_attempt('b', 12, '60 seconds', c);
    PERFORM rl_attempt_multi('b', ARRAY[12, 30], ARRAY[interval '60 seconds', interval '150 seconds'], c);
  END IF;
END $$;

CREATE TEMP TABLE mismatches (step int, what text, a text, b text);
CREATE TEMP TABLE answers (allowed boolean);

-- Ask both keys the same question at second s; record any difference.
-- (Their tickets differ, being signed for different keys: whether each
-- has one is compared.)
CREATE FUNCTION pg_temp.compare(step int, s int, c int) RETURNS void LANGUAGE plpgsql AS $$
DECLARE ra rl_result; rb rl_result;
BEGIN
  PERFORM pg_temp.at(s);
  ra := rl_peek('a', 12, '60 seconds'); rb := rl_peek('b', 12, '60 seconds');
  ra.ticket := (ra.ticket IS NOT NULL)::text; rb.ticket := (rb.ticket IS NOT NULL)::text;
  IF ra IS DISTINCT FROM rb THEN INSERT INTO mismatches VALUES (step, 'peek', ra::text, rb::text); END IF;
  ra := rl_attempt('a', 12, '60 seconds', c); rb := rl_attempt('b', 12, '60 seconds', c);
  ra.ticket := (ra.ticket IS NOT NULL)::text; rb.ticket := (rb.ticket IS NOT NULL)::text;
  IF ra IS DISTINCT FROM rb THEN INSERT INTO mismatches VALUES (step, 'attempt', ra::text, rb::text); END IF;
  INSERT INTO answers VALUES (ra.allowed);
  ra := rl_attempt_multi('a', ARRAY[12, 30], ARRAY[interval '60 seconds', interval '150 seconds'], c);
  rb := rl_attempt_multi('b', ARRAY[12, 30], ARRAY[interval '60 seconds', interval '150 seconds'], c);
  ra.ticket := (ra.ticket IS NOT NULL)::text; rb.ticket := (rb.ticket IS NOT NULL)::text;
  IF ra IS DISTINCT FROM rb THEN INSERT INTO mismatches VALUES (step, 'multi', ra::text, rb::text); END IF;
END $$;

DO $$
BEGIN
  FOR i IN 1..60 LOOP
    -- a kept admission, then a rolled-back one
    PERFORM pg_temp.take(10 * i, 1 + i % 2, false);
    BEGIN
      PERFORM pg_temp.take(10 * i + 1, 1 + i % 3, true);
      IF i % 4 = 0 THEN
        -- nested: the inner block aborts first (newer entry), then the
        -- outer one (older entry: lands before it in the ledger)
        BEGIN
          PERFORM pg_temp.take(10 * i + 2, 1, true);
          RAISE EXCEPTION 'inner';
        EXCEPTION WHEN raise_exception THEN NULL;
        END;
        PERFORM pg_temp.take(10 * i + 3, 2, true);
      END IF;
      RAISE EXCEPTION 'outer';
    EXCEPTION WHEN raise_exception THEN NULL;
    END;
    PERFORM pg_temp.compare(i, 10 * i + 5, 1 + i % 4);
  END LOOP;
END $$;

SELECT * FROM mismatches ORDER BY step, what;
-- the sequence reaches both answers
SELECT allowed, count(*) > 5 AS often FROM answers GROUP BY allowed ORDER BY allowed;
SELECT refunds_dropped FROM rl_backend_stats();

RESET slidewin.test_now;
SELECT count(rl_reset(k)) FROM unnest(ARRAY['a', 'b']) k;
