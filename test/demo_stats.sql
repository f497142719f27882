-- make demo, last scene: the statistics views over everything the demo did.
\echo
\echo '== 15. Watching slidewin: what it decided in this demo, from three views'
\echo 'rl_stats: every call of this server since it started (or since rl_stats_reset()),'
\echo 'the failover, cluster and slot scenes included.'
\x on
SELECT calls, admitted, denied, units_admitted, deny_cache_hits, shadow_denials,
       redis_calls, fallback_calls, policy_answers, redis_errors, redis_timeouts,
       reconnects, breaker_trips, refunds, refunds_dropped,
       redis_rtt_p50, redis_rtt_p99
  FROM rl_stats;
\x off
\echo 'rl_stats_rules: per rule (algorithm, lim, win), the rules that denied most first;'
\echo 'near_limit counts admissions that left at most 20 % of the limit.'
SELECT algorithm, lim, win, calls, admitted, denied, near_limit, shadow_denials
  FROM rl_stats_rules ORDER BY denied DESC, calls DESC LIMIT 6;
\echo 'rl_top_keys: the keys denied most (units), with the error bound of each count.'
\echo 'A superuser sees the keys; an ordinary role sees NULL unless it is in pg_read_all_stats.'
SELECT key, denied, admitted, error, last_retry_after FROM rl_top_keys LIMIT 5;
