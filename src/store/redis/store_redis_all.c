/*-------------------------------------------------------------------------
 *
 * store_redis_all.c
 *		rl_attempt_all in the Redis store: several user keys, each with its
 *		own limit, checked and charged by one script call (log_all.lua for
 *		the sliding log, counter_all.lua for the counting algorithms), so
 *		that every key is charged or none is.
 *
 * One script sees every key, so the all-or-nothing rule needs no lock and
 * no second step on one Redis, or under Sentinel (the same connection).
 * Under Redis Cluster a script may only name keys of one hash slot: keys in
 * different slots are reserved slot by slot, then confirmed or cancelled
 * (store_redis_xslot.c), each slot's keys by this file's script, for every
 * algorithm.
 *
 * Like the rest of the store, this file knows nothing of failure policy.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/builtins.h"

#include "cluster_slots.h"
#include "store_redis.h"
#include "store_redis_int.h"

/* Under Cluster: do the Redis keys keys[0..nkeys-1] lie in one hash slot? */
static bool
one_slot(int nkeys, const StringInfoData *keys)
{
	int			slot;

	if (!redis_target_is_cluster())
		return true;
	slot = cluster_key_slot(keys[0].data, keys[0].len);
	for (int i = 1; i < nkeys; i++)
		if (cluster_key_slot(keys[i].data, keys[i].len) != slot)
			return false;
	return true;
}

/*
 * Turn the reply in r into o[0..n-1], or refuse it (reply_check_all). o[k]
 * of a key that had room but was not charged (allowed 3 in the reply) is a
 * denial that asks no wait of its own: allowed false, retry 0. Frees the
 * reply.
 */
static bool
read_outcomes(RedisResult *r, int n, const RlArgs *args, RlOutcome *o)
{
	ReplyCall	calls[RL_MAX_KEYS];
	int64		v[RL_MAX_KEYS][RF_COUNT];
	char		why[sizeof(r->message)];
	int64		clock_us;
	bool		clock_set = limit_test_clock(&clock_us);

	for (int k = 0; k < n; k++)
	{
		memset(&calls[k], 0, sizeof(ReplyCall));
		calls[k].algorithm = args[k].algorithm;
		calls[k].algorithm_name = "rl_attempt_all";
		calls[k].lim = args[k].lim;
		calls[k].win_us = args[k].win_us;
		calls[k].cost = args[k].cost;
		calls[k].force = args[k].force;
		calls[k].clock_set = clock_set;
		calls[k].clock_us = clock_us;
	}
	if (!reply_check_all(r->reply, n, calls, v, why, sizeof(why)))
		return redis_store_refuse(r, "%s", why);
	freeReplyObject(r->reply);
	r->reply = NULL;

	for (int k = 0; k < n; k++)
	{
		o[k].allowed = (v[k][RF_ALLOWED] == 1);
		o[k].blocked = (v[k][RF_ALLOWED] == 2);
		o[k].remaining = v[k][RF_REMAINING];
		o[k].retry_us = v[k][RF_RETRY];
		o[k].reset_at_us = v[k][RF_RESET];
		o[k].used = v[k][RF_USED];
		o[k].recorded_ts = v[k][RF_RECORDED];
		/* as in rl_attempt: the counting algorithms keep no entry to name */
		o[k].entry_ts = args[k].algorithm == ALGO_SLIDING_LOG ? v[k][RF_RECORDED] : -1;
		o[k].stable_us = v[k][RF_STABLE];
		o[k].next_us = v[k][RF_NEXT];
		o[k].shadowed = false;
		o[k].store = "redis";
		o[k].known = true;
	}
	return true;
}

/* The script for each algorithm rl_attempt_all takes. */
static const ScriptId all_scripts[ALGO_COUNT] = {
	[ALGO_SLIDING_LOG] = SCRIPT_LOG_ALL,
	[ALGO_FIXED_WINDOW] = SCRIPT_FIXED_WINDOW_ALL,
	[ALGO_SLIDING_COUNTER] = SCRIPT_SLIDING_COUNTER_ALL,
	[ALGO_TOKEN_BUCKET] = SCRIPT_TOKEN_BUCKET_ALL,
};

/*
 * KEYS: for each user key, its structures as rl_attempt names them: the
 * log, its ledger and the block for the sliding log, the state, the block
 * and the reservations for the counting algorithms (3 a key). ARGV: n,
 * the limits, the windows, the costs, flags and the clock.
 */

static bool run_all(int n, const RlArgs *args, int64 reserve_us,
					const char *reserve_id, RlOutcome *o, RedisResult *r);

bool
redis_store_attempt_all(int n, const RlArgs *args, RlOutcome *o, RedisResult *r)
{
	return run_all(n, args, 0, NULL, o, r);
}

/*
 * The algorithm's script over args[0..n-1]; with reserve_us > 0 (keys of
 * one slot, see store_redis_xslot.c) what it records for each key is a
 * reservation that ends that long after it is made, unless confirmed (for
 * the counting algorithms, named reserve_id).
 */
static bool
run_all(int n, const RlArgs *args, int64 reserve_us, const char *reserve_id,
		RlOutcome *o, RedisResult *r)
{
	StringInfoData keys[3 * RL_MAX_KEYS];
	const char *k[3 * RL_MAX_KEYS];
	size_t		klens[3 * RL_MAX_KEYS];
	char		nums[3 * RL_MAX_KEYS + 1][24];
	char		now[24];
	char		flags[4];
	char		life[24];
	const char *argv[3 * RL_MAX_KEYS + 5];
	int			nargs = 0;
	RlAlgorithm algorithm = args[0].algorithm;
	bool		logs = (algorithm == ALGO_SLIDING_LOG);
	int			per = 3;
	const char *tag = redis_store_tags[algorithm];

	Assert(n >= 1 && n <= RL_MAX_KEYS);
	Assert(algorithm == ALGO_SLIDING_LOG || algorithm == ALGO_FIXED_WINDOW ||
		   algorithm == ALGO_SLIDING_COUNTER || algorithm == ALGO_TOKEN_BUCKET);
	for (int i = 0; i < n; i++)
	{
		Assert(args[i].algorithm == algorithm);
		redis_store_key(&keys[per * i], tag, &args[i]);
		/* the log's ledger; a counting state's reservations */
		redis_store_ledger_key(&keys[per * i + (logs ? 1 : 2)], tag, &args[i]);
		redis_store_block_key(&keys[per * i + (logs ? 2 : 1)], &args[i]);
	}
	if (reserve_us == 0 && !one_slot(per * n, keys))
	{
		for (int i = 0; i < per * n; i++)
			pfree(keys[i].data);
		return redis_store_attempt_xslot(n, args, run_all, o, r);
	}
	for (int i = 0; i < per * n; i++)
	{
		k[i] = keys[i].data;
		klens[i] = keys[i].len;
	}
	/* pg_lltoa: snprintf cost a tenth of this file's work */
	pg_lltoa(n, nums[0]);
	argv[nargs++] = nums[0];
	for (int i = 0; i < n; i++)
	{
		pg_lltoa(args[i].lim, nums[1 + i]);
		pg_lltoa(args[i].win_us, nums[1 + n + i]);
		pg_lltoa(args[i].cost, nums[1 + 2 * n + i]);
	}
	for (int i = 0; i < 3 * n; i++)
		argv[nargs++] = nums[1 + i];
	snprintf(flags, sizeof(flags), "%s%s%s", args[0].force ? "f" : "",
			 redis_target_is_cluster() ? "k" : "", reserve_us > 0 ? "r" : "");
	argv[nargs++] = flags;
	argv[nargs++] = redis_store_clock_arg(now, sizeof(now));
	/*
	 * No flags and Redis's own clock (most calls): both are left out, which
	 * the scripts read as empty, as each argument costs Redis some work.
	 */
	if (flags[0] == '\0' && argv[nargs - 1][0] == '\0')
		nargs -= 2;
	if (reserve_us > 0)
	{
		snprintf(life, sizeof(life), INT64_FORMAT, reserve_us);
		argv[nargs++] = life;
		if (!logs)
			argv[nargs++] = reserve_id;
	}

	script_run(all_scripts[algorithm], per * n, k, klens, nargs, argv, r);
	for (int i = 0; i < per * n; i++)
		pfree(keys[i].data);
	if (!redis_store_settle(r))
		return false;
	return read_outcomes(r, n, args, o);
}
