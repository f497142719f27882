/*-------------------------------------------------------------------------
 *
 * store_redis_limit.c
 *		The Redis store's calls on a key's limit: the attempt and the peek of
 *		each algorithm (one script call each, its reply read into an
 *		outcome), rl_reset, rl_block and rl_unblock, and the carry of the
 *		fallback store's admissions into Redis.
 *
 * The keys, the clock argument and the sorting of a reply are store_redis.c's
 * (store_redis_int.h), and so are the rules the store keeps.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "store_redis.h"
#include "store_redis_int.h"

/*
 * Turn the reply in r into *o, or refuse it (false, RS_FAIL_PROTOCOL) if it
 * is not one the script for args could have given (reply_check.c). Frees the
 * reply.
 */
bool
redis_store_read_outcome(RedisResult *r, const RlArgs *args, bool peek, RlOutcome *o)
{
	int64		v[RF_COUNT];
	char		why[sizeof(r->message)];
	ReplyCall	call;

	call.algorithm = args->algorithm;
	call.algorithm_name = limit_algorithm_name(args->algorithm);
	call.peek = peek;
	call.lim = args->lim;
	call.win_us = args->win_us;
	call.cost = args->cost;
	call.force = args->force;
	call.nwin = args->nwin;
	call.lims = args->lims;
	call.clock_set = limit_test_clock(&call.clock_us);

	if (!reply_check_outcome(r->reply, &call, v, why, sizeof(why)))
		return redis_store_refuse(r, "%s", why);
	freeReplyObject(r->reply);
	r->reply = NULL;

	o->allowed = (v[RF_ALLOWED] == 1);
	o->blocked = (v[RF_ALLOWED] == 2);
	o->remaining = v[RF_REMAINING];
	o->retry_us = v[RF_RETRY];
	o->reset_at_us = v[RF_RESET];
	o->used = v[RF_USED];
	o->recorded_ts = v[RF_RECORDED];
	/* the counting algorithms keep no entries, so nothing a ticket could name */
	o->entry_ts = (args->algorithm == ALGO_SLIDING_LOG || args->algorithm == ALGO_MULTI_LOG) ?
		v[RF_RECORDED] : -1;
	o->stable_us = v[RF_STABLE];
	o->next_us = v[RF_NEXT];
	if (args->algorithm == ALGO_MULTI_LOG)
	{
		o->lim = args->lims[v[RF_WINDOW] - 1];
		o->win_us = args->wins_us[v[RF_WINDOW] - 1];
	}
	o->shadowed = false;
	o->store = "redis";
	o->known = true;
	return true;
}

/*
 * Run a script that answers with an outcome, on the nkeys keys built in
 * keys[] (the structure, for the logs its ledger, and last the block key),
 * which are freed. False when Redis cannot answer now, or answered what the
 * script could not have.
 */
static bool
run_outcome_script(ScriptId id, const RlArgs *args, bool peek,
				   int nkeys, StringInfoData *keys,
				   int nargs, const char **argv, RlOutcome *o, RedisResult *r)
{
	const char *k[3];
	size_t		klens[3];

	Assert(nkeys <= 3);
	for (int i = 0; i < nkeys; i++)
	{
		k[i] = keys[i].data;
		klens[i] = keys[i].len;
	}
	script_run(id, nkeys, k, klens, nargs, argv, r);
	for (int i = 0; i < nkeys; i++)
		pfree(keys[i].data);
	if (!redis_store_settle(r))
		return false;
	return redis_store_read_outcome(r, args, peek, o);
}

/*
 * The optional arguments of an attempt, after lim, win and cost: flags
 * (mode, and 'k' under Cluster), then the test clock; each only when it or
 * one after it is needed. Returns the new argc.
 */
static int
add_flags(const char **argv, int n, const char *mode, bool cluster,
		  char *nowbuf, size_t nowsize)
{
	static char flags[4];
	const char *now = redis_store_clock_arg(nowbuf, nowsize);

	snprintf(flags, sizeof(flags), "%s%s", mode, cluster ? "k" : "");
	if (flags[0] != '\0' || now[0] != '\0')
		argv[n++] = flags;
	if (now[0] != '\0')
		argv[n++] = now;
	return n;
}

/*
 * Run one sliding-log script: ARGV is lim, win, then for an attempt cost
 * and the optional flags and clock (add_flags), for a peek now ('' for
 * Redis TIME).
 */
static bool
run_log_script(ScriptId id, const RlArgs *args, bool with_cost,
			   RlOutcome *o, RedisResult *r)
{
	StringInfoData keys[3];
	char		lim[24],
				win[24],
				cost[24],
				now[24];
	const char *argv[6];
	int			n = 0;

	redis_store_key(&keys[0], "log", args);
	redis_store_ledger_key(&keys[1], "log", args);
	redis_store_block_key(&keys[2], args);
	snprintf(lim, sizeof(lim), INT64_FORMAT, args->lim);
	snprintf(win, sizeof(win), INT64_FORMAT, args->win_us);
	argv[n++] = lim;
	argv[n++] = win;
	if (with_cost)
	{
		snprintf(cost, sizeof(cost), INT64_FORMAT, args->cost);
		argv[n++] = cost;
		n = add_flags(argv, n, args->force ? "f" : "", redis_target_is_cluster(),
					  now, sizeof(now));
	}
	else
		argv[n++] = redis_store_clock_arg(now, sizeof(now));

	return run_outcome_script(id, args, !with_cost, 3, keys, n, argv, o, r);
}

static const ScriptId counter_scripts[ALGO_COUNT] = {
	[ALGO_SLIDING_COUNTER] = SCRIPT_SLIDING_COUNTER,
	[ALGO_FIXED_WINDOW] = SCRIPT_FIXED_WINDOW,
	[ALGO_TOKEN_BUCKET] = SCRIPT_TOKEN_BUCKET,
};

/*
 * A counting algorithm: ARGV lim, win, cost, then the optional flags ('f'
 * forced, 'p' peek, 'k' under Cluster) and clock (add_flags). Under
 * Cluster the key's reservations (rl_attempt_all over several slots, see
 * counter_args.lua) are the third key, and count for attempts and peeks
 * alike; elsewhere no reservation is ever made, and no third key named.
 */
static bool
run_counter_script(const RlArgs *args, bool peek, RlOutcome *o, RedisResult *r)
{
	StringInfoData keys[3];
	char		lim[24],
				win[24],
				cost[24],
				now[24];
	const char *argv[6];
	int			n;
	bool		cluster = redis_target_is_cluster();
	const char *tag = redis_store_tags[args->algorithm];
	const char *mode;

	redis_store_key(&keys[0], tag, args);
	redis_store_block_key(&keys[1], args);
	if (cluster)
		redis_store_ledger_key(&keys[2], tag, args);
	snprintf(lim, sizeof(lim), INT64_FORMAT, args->lim);
	snprintf(win, sizeof(win), INT64_FORMAT, args->win_us);
	snprintf(cost, sizeof(cost), INT64_FORMAT, peek ? 1 : args->cost);
	argv[0] = lim;
	argv[1] = win;
	argv[2] = cost;
	if (cluster)
		mode = peek ? "pv" : args->force ? "fv" : "v";
	else
		mode = peek ? "p" : args->force ? "f" : "";
	n = add_flags(argv, 3, mode, !peek && cluster, now, sizeof(now));
	return run_outcome_script(counter_scripts[args->algorithm], args, peek,
							  cluster ? 3 : 2, keys, n, argv, o, r);
}

/*
 * rl_attempt_multi: ARGV n, lim1..limn, win1..winn, cost, now, force, mode.
 * One log serves every window; a call is recorded once, in all of them.
 */
static bool
run_multi_script(const RlArgs *args, bool peek, RlOutcome *o, RedisResult *r)
{
	StringInfoData keys[3];
	char		bufs[2 * RL_MAX_WINDOWS + 2][24];
	char		now[24];
	const char *argv[2 * RL_MAX_WINDOWS + 6];
	int			n = 0;

	redis_store_key(&keys[0], redis_store_tags[ALGO_MULTI_LOG], args);
	redis_store_ledger_key(&keys[1], redis_store_tags[ALGO_MULTI_LOG], args);
	redis_store_block_key(&keys[2], args);
	snprintf(bufs[0], 24, "%d", args->nwin);
	argv[n++] = bufs[0];
	for (int i = 0; i < args->nwin; i++)
	{
		snprintf(bufs[1 + i], 24, INT64_FORMAT, args->lims[i]);
		argv[n++] = bufs[1 + i];
	}
	for (int i = 0; i < args->nwin; i++)
	{
		snprintf(bufs[1 + args->nwin + i], 24, INT64_FORMAT, args->wins_us[i]);
		argv[n++] = bufs[1 + args->nwin + i];
	}
	snprintf(bufs[1 + 2 * args->nwin], 24, INT64_FORMAT, peek ? 1 : args->cost);
	argv[n++] = bufs[1 + 2 * args->nwin];
	argv[n++] = redis_store_clock_arg(now, sizeof(now));
	argv[n++] = peek ? "p" : args->force ? "1" : "0";
	if (!peek && redis_target_is_cluster())
		argv[n++] = "k";
	return run_outcome_script(SCRIPT_LOG_MULTI, args, peek, 3, keys, n, argv, o, r);
}

bool
redis_store_attempt(const RlArgs *args, RlOutcome *o, RedisResult *r)
{
	if (args->algorithm == ALGO_SLIDING_LOG)
		return run_log_script(SCRIPT_LOG_ATTEMPT, args, true, o, r);
	if (args->algorithm == ALGO_MULTI_LOG)
		return run_multi_script(args, false, o, r);
	return run_counter_script(args, false, o, r);
}

bool
redis_store_peek(const RlArgs *args, RlOutcome *o, RedisResult *r)
{
	if (args->algorithm == ALGO_SLIDING_LOG)
		return run_log_script(SCRIPT_LOG_PEEK, args, false, o, r);
	if (args->algorithm == ALGO_MULTI_LOG)
		return run_multi_script(args, true, o, r);
	return run_counter_script(args, true, o, r);
}

/*
 * Every structure of the key, in every algorithm, the logs' ledgers, the
 * names of the fallback admissions carried into each (a reset key starts
 * anew: a later admission of the same name must count), and the waiting
 * mark of the key's local batches.
 */
bool
redis_store_reset(const RlArgs *args, RedisResult *r)
{
	StringInfoData keys[2 * ALGO_COUNT + 5];
	const char *argv[2 * ALGO_COUNT + 6];
	size_t		lens[2 * ALGO_COUNT + 6];
	char		why[sizeof(r->message)];
	int			n = 0;

	for (int i = 0; i < ALGO_COUNT; i++)
	{
		redis_store_key(&keys[n++], redis_store_tags[i], args);
		if (i != ALGO_MULTI_LOG)
		{
			char		itag[16];

			snprintf(itag, sizeof(itag), "%si", redis_store_tags[i]);
			redis_store_key(&keys[n++], itag, args);
		}
	}
	redis_store_ledger_key(&keys[n++], redis_store_tags[ALGO_SLIDING_LOG], args);
	redis_store_ledger_key(&keys[n++], redis_store_tags[ALGO_MULTI_LOG], args);
	/* the counting algorithms' reservations (counter_args.lua) */
	redis_store_ledger_key(&keys[n++], redis_store_tags[ALGO_FIXED_WINDOW], args);
	redis_store_ledger_key(&keys[n++], redis_store_tags[ALGO_SLIDING_COUNTER], args);
	redis_store_ledger_key(&keys[n++], redis_store_tags[ALGO_TOKEN_BUCKET], args);
	/* the local batches' waiting mark: a reset key has no reserve waiting */
	redis_store_wait_key(&keys[n++], args);
	Assert(n <= lengthof(keys));
	argv[0] = "DEL";
	lens[0] = 3;
	for (int i = 0; i < n; i++)
	{
		argv[1 + i] = keys[i].data;
		lens[1 + i] = keys[i].len;
	}
	redis_exec(n + 1, argv, lens, r);
	for (int i = 0; i < n; i++)
		pfree(keys[i].data);
	if (!redis_store_settle(r))
		return false;
	if (!reply_check_del(r->reply, n, why, sizeof(why)))
		return redis_store_refuse(r, "%s", why);
	freeReplyObject(r->reply);
	r->reply = NULL;
	return true;
}

/* The block script on the key built in *key, which is freed. */
static void
run_block_script(StringInfo key, int nargs, const char **argv, RedisResult *r)
{
	const char *k[1] = {key->data};
	size_t		klen[1] = {key->len};

	script_run(SCRIPT_BLOCK, 1, k, klen, nargs, argv, r);
	pfree(key->data);
}

/*
 * rl_block: the key's block ends duration_us from now on the script's clock,
 * or later if it already does; its end in *end_us (Unix microseconds).
 */
bool
redis_store_block(const RlArgs *args, int64 duration_us, int64 *end_us, RedisResult *r)
{
	StringInfoData key;
	char		dur[24],
				now[24];
	const char *argv[4];
	int			n = 0;
	char		why[sizeof(r->message)];
	ReplyBlockCall call;

	redis_store_block_key(&key, args);
	snprintf(dur, sizeof(dur), INT64_FORMAT, duration_us);
	argv[n++] = "b";
	argv[n++] = dur;
	argv[n++] = redis_store_clock_arg(now, sizeof(now));
	if (redis_target_is_cluster())
		argv[n++] = "k";
	run_block_script(&key, n, argv, r);
	if (!redis_store_settle(r))
		return false;
	call.unblock = false;
	call.duration_us = duration_us;
	call.clock_set = limit_test_clock(&call.clock_us);
	if (!reply_check_block(r->reply, &call, end_us, why, sizeof(why)))
		return redis_store_refuse(r, "%s", why);
	freeReplyObject(r->reply);
	r->reply = NULL;
	return true;
}

/* rl_unblock: *lifted says whether a block was in force. */
bool
redis_store_unblock(const RlArgs *args, bool *lifted, RedisResult *r)
{
	StringInfoData key;
	char		now[24];
	const char *argv[4];
	int			n = 0;
	char		why[sizeof(r->message)];
	ReplyBlockCall call;
	int64		v;

	redis_store_block_key(&key, args);
	argv[n++] = "u";
	argv[n++] = "0";
	argv[n++] = redis_store_clock_arg(now, sizeof(now));
	if (redis_target_is_cluster())
		argv[n++] = "k";
	run_block_script(&key, n, argv, r);
	if (!redis_store_settle(r))
		return false;
	memset(&call, 0, sizeof(call));
	call.unblock = true;
	if (!reply_check_block(r->reply, &call, &v, why, sizeof(why)))
		return redis_store_refuse(r, "%s", why);
	freeReplyObject(r->reply);
	r->reply = NULL;
	*lifted = (v == 1);
	return true;
}

bool
redis_store_import(const RlArgs *args, const char *entries, int n,
				   int64 *recorded, RedisResult *r)
{
	StringInfoData keys[4];
	const char *k[4];
	size_t		klens[4];
	char		now[24];
	const char *argv[4];
	int			nkeys;
	int			nargs = 0;
	long long	counts[3];
	char		why[sizeof(r->message)];
	char		itag[16];
	const char *tag = redis_store_tags[args->algorithm];

	Assert(args->algorithm != ALGO_MULTI_LOG);
	/* the names of the admissions recorded: the structure's tag, then "i" */
	snprintf(itag, sizeof(itag), "%si", tag);
	redis_store_key(&keys[0], tag, args);
	if (args->algorithm == ALGO_SLIDING_LOG)
	{
		redis_store_ledger_key(&keys[1], tag, args);
		redis_store_block_key(&keys[2], args);
		redis_store_key(&keys[3], itag, args);
		nkeys = 4;
	}
	else
	{
		redis_store_block_key(&keys[1], args);
		redis_store_key(&keys[2], itag, args);
		nkeys = 3;
	}
	for (int i = 0; i < nkeys; i++)
	{
		k[i] = keys[i].data;
		klens[i] = keys[i].len;
	}
	argv[nargs++] = redis_store_clock_arg(now, sizeof(now));
	argv[nargs++] = redis_target_is_cluster() ? "k" : "";
	if (args->algorithm != ALGO_SLIDING_LOG)
		argv[nargs++] = tag;
	argv[nargs++] = entries;
	script_run(args->algorithm == ALGO_SLIDING_LOG ? SCRIPT_LOG_IMPORT : SCRIPT_COUNTER_IMPORT,
			   nkeys, k, klens, nargs, argv, r);
	for (int i = 0; i < nkeys; i++)
		pfree(keys[i].data);
	if (!redis_store_settle(r))
		return false;
	if (!reply_check_import(r->reply, n, counts, why, sizeof(why)))
		return redis_store_refuse(r, "%s", why);
	freeReplyObject(r->reply);
	r->reply = NULL;
	*recorded = counts[0];
	return true;
}
