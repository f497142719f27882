/*-------------------------------------------------------------------------
 *
 * store_redis.c
 *		The Redis store: turns checked arguments into one script call and
 *		its reply into an outcome.
 *
 * It tells "Redis cannot answer now" (reported to the caller, whose failure
 * policy decides) from "this cannot work" (a wrong-type key or an error
 * reply it does not know: always an ERROR). A reply that is not one the
 * script could have given (a proxy, another program on the port, keys
 * edited by someone else) counts as "cannot answer": it is never believed,
 * and the connection that carried it is dropped (which replies those are is
 * decided in reply_check.c, which is pure). It does not decide policy.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <stdarg.h>

#include "datatype/timestamp.h"
#include "lib/stringinfo.h"

#include "misconf.h"
#include "settings.h"
#include "store_redis.h"


/*
 * FNV-1a, 32 bits: fixed by its definition, so that every server computes
 * the same hash tag for a key whatever its platform.
 */
static uint32
fnv1a32(const char *p, size_t len)
{
	uint32		h = 2166136261u;

	for (size_t i = 0; i < len; i++)
	{
		h ^= (unsigned char) p[i];
		h *= 16777619u;
	}
	return h;
}

/*
 * The Redis key for a user key: the prefix, a tag naming the data structure,
 * then the key itself. The tag keeps algorithms from reading each other's data.
 *
 * Under Redis Cluster a hash tag follows the prefix: "{" eight hex digits of
 * the user key's FNV-1a "}". Every key slidewin writes for one user key (each
 * algorithm's, and the logs' ledgers) then shares everything up to and
 * including that "}", and the tag's digits hold no brace, so they all hash to
 * one slot whatever braces the user key or the prefix contain: a prefix with
 * a complete {tag} of its own puts every limiter in its slot, still one slot
 * per limiter, and a lone "{" in the prefix only lengthens the tag.
 */
static void
build_key(StringInfo buf, const char *tag, const RlArgs *args)
{
	initStringInfo(buf);
	appendStringInfoString(buf, slidewin_key_prefix ? slidewin_key_prefix : "");
	if (redis_target_is_cluster())
		appendStringInfo(buf, "{%08x}", fnv1a32(args->key, args->keylen));
	appendStringInfoString(buf, tag);
	appendStringInfoChar(buf, ':');
	appendBinaryStringInfo(buf, args->key, args->keylen);
}

/*
 * The ledger of refunds next to a log: the log's tag followed by "r"
 * ("logr:K" next to "log:K", "mlogr:K" next to "mlog:K"). No tag is another
 * tag plus "r", so a ledger never meets another structure's key.
 */
static void
build_ledger_key(StringInfo buf, const char *tag, const RlArgs *args)
{
	char		ltag[16];

	snprintf(ltag, sizeof(ltag), "%sr", tag);
	build_key(buf, ltag, args);
}

/*
 * The block of a user key (rl_block): "blk:K", whatever the algorithm, so
 * that one block denies the key in all of them. No algorithm's tag, nor a
 * ledger's, is "blk".
 */
static void
build_block_key(StringInfo buf, const RlArgs *args)
{
	build_key(buf, "blk", args);
}

/*
 * Sort a finished exchange: true when a reply is there to use, false when
 * Redis could not answer now. Every other failure ERRORs.
 */
static bool
settle(RedisResult *r)
{
	if (r->status == RS_OK)
		return true;
	/* Not a passing state: a server that is too old stays too old. */
	if (r->status == RS_FAIL_VERSION)
	{
		misconf_warn(r);
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("slidewin cannot use this Redis server"),
				 errdetail_internal("%s", r->message)));
	}
	if (r->status == RS_FAIL_REPLY)
	{
		char	   *msg = pstrdup(r->reply->str);

		freeReplyObject(r->reply);
		r->reply = NULL;
		if (reply_is_transient(msg))
			return false;
		if (strncmp(msg, "WRONGTYPE", 9) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_WRONG_OBJECT_TYPE),
					 errmsg("the Redis key for this rate limit holds a value of another type"),
					 errdetail_internal("%s", msg),
					 errhint("Check slidewin.key_prefix: another application may use the same keys.")));
		ereport(ERROR,
				(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
				 errmsg("Redis rejected a slidewin command"),
				 errdetail_internal("%s", msg)));
	}
	return false;
}

/* reply_check.c cannot include PostgreSQL's headers: keep its copy right. */
StaticAssertDecl(REPLY_PG_MIN_TIMESTAMP == MIN_TIMESTAMP, "reply_check.h: MIN_TIMESTAMP");
StaticAssertDecl(REPLY_PG_END_TIMESTAMP == END_TIMESTAMP, "reply_check.h: END_TIMESTAMP");
StaticAssertDecl(REPLY_PG_EPOCH_UNIX_US ==
				 (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY,
				 "reply_check.h: the PostgreSQL epoch");

/*
 * Refuse the reply in r: free it, drop the connection that carried it (the
 * server on the other end cannot be trusted with the next command either),
 * and report RS_FAIL_PROTOCOL with the reason, a sentence, in r->message.
 * Never ERRORs: refunds call it from abort callbacks.
 */
static bool
refuse_reply(RedisResult *r, const char *fmt,...) pg_attribute_printf(2, 3);

static bool
refuse_reply(RedisResult *r, const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(r->message, sizeof(r->message), fmt, ap);
	va_end(ap);
	if (r->reply)
	{
		freeReplyObject(r->reply);
		r->reply = NULL;
	}
	redis_disconnect();
	r->status = RS_FAIL_PROTOCOL;
	return false;
}

/*
 * Turn the reply in r into *o, or refuse it (false, RS_FAIL_PROTOCOL) if it
 * is not one the script for args could have given (reply_check.c). Frees the
 * reply.
 */
static bool
read_outcome(RedisResult *r, const RlArgs *args, bool peek, RlOutcome *o)
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
		return refuse_reply(r, "%s", why);
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
	if (!settle(r))
		return false;
	return read_outcome(r, args, peek, o);
}

static const char *
clock_arg(char *buf, size_t size)
{
	int64		now_us;

	if (!limit_test_clock(&now_us))
		return "";
	snprintf(buf, size, INT64_FORMAT, now_us);
	return buf;
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
	const char *now = clock_arg(nowbuf, nowsize);

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

	build_key(&keys[0], "log", args);
	build_ledger_key(&keys[1], "log", args);
	build_block_key(&keys[2], args);
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
		argv[n++] = clock_arg(now, sizeof(now));

	return run_outcome_script(id, args, !with_cost, 3, keys, n, argv, o, r);
}

/* Redis key tags, one per algorithm: no algorithm reads another's data. */
static const char *const algorithm_tags[ALGO_COUNT] = {
	[ALGO_SLIDING_LOG] = "log",
	[ALGO_SLIDING_COUNTER] = "sc",
	[ALGO_FIXED_WINDOW] = "fw",
	[ALGO_TOKEN_BUCKET] = "tb",
	[ALGO_MULTI_LOG] = "mlog",
};

static const ScriptId counter_scripts[ALGO_COUNT] = {
	[ALGO_SLIDING_COUNTER] = SCRIPT_SLIDING_COUNTER,
	[ALGO_FIXED_WINDOW] = SCRIPT_FIXED_WINDOW,
	[ALGO_TOKEN_BUCKET] = SCRIPT_TOKEN_BUCKET,
};

/*
 * A counting algorithm: ARGV lim, win, cost, then the optional flags ('f'
 * forced, 'p' peek, 'k' under Cluster) and clock (add_flags).
 */
static bool
run_counter_script(const RlArgs *args, bool peek, RlOutcome *o, RedisResult *r)
{
	StringInfoData keys[2];
	char		lim[24],
				win[24],
				cost[24],
				now[24];
	const char *argv[6];
	int			n;

	build_key(&keys[0], algorithm_tags[args->algorithm], args);
	build_block_key(&keys[1], args);
	snprintf(lim, sizeof(lim), INT64_FORMAT, args->lim);
	snprintf(win, sizeof(win), INT64_FORMAT, args->win_us);
	snprintf(cost, sizeof(cost), INT64_FORMAT, peek ? 1 : args->cost);
	argv[0] = lim;
	argv[1] = win;
	argv[2] = cost;
	n = add_flags(argv, 3, peek ? "p" : args->force ? "f" : "",
				  !peek && redis_target_is_cluster(), now, sizeof(now));
	return run_outcome_script(counter_scripts[args->algorithm], args, peek, 2, keys,
							  n, argv, o, r);
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

	build_key(&keys[0], algorithm_tags[ALGO_MULTI_LOG], args);
	build_ledger_key(&keys[1], algorithm_tags[ALGO_MULTI_LOG], args);
	build_block_key(&keys[2], args);
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
	argv[n++] = clock_arg(now, sizeof(now));
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
 * Every structure of the key, in every algorithm, the logs' ledgers, and
 * the names of the fallback admissions carried into each (a reset key
 * starts anew: a later admission of the same name must count).
 */
bool
redis_store_reset(const RlArgs *args, RedisResult *r)
{
	StringInfoData keys[2 * ALGO_COUNT + 2];
	const char *argv[2 * ALGO_COUNT + 3];
	size_t		lens[2 * ALGO_COUNT + 3];
	char		why[sizeof(r->message)];
	int			n = 0;

	for (int i = 0; i < ALGO_COUNT; i++)
	{
		build_key(&keys[n++], algorithm_tags[i], args);
		if (i != ALGO_MULTI_LOG)
		{
			char		itag[16];

			snprintf(itag, sizeof(itag), "%si", algorithm_tags[i]);
			build_key(&keys[n++], itag, args);
		}
	}
	build_ledger_key(&keys[n++], algorithm_tags[ALGO_SLIDING_LOG], args);
	build_ledger_key(&keys[n++], algorithm_tags[ALGO_MULTI_LOG], args);
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
	if (!settle(r))
		return false;
	if (!reply_check_del(r->reply, n, why, sizeof(why)))
		return refuse_reply(r, "%s", why);
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

	build_block_key(&key, args);
	snprintf(dur, sizeof(dur), INT64_FORMAT, duration_us);
	argv[n++] = "b";
	argv[n++] = dur;
	argv[n++] = clock_arg(now, sizeof(now));
	if (redis_target_is_cluster())
		argv[n++] = "k";
	run_block_script(&key, n, argv, r);
	if (!settle(r))
		return false;
	call.unblock = false;
	call.duration_us = duration_us;
	call.clock_set = limit_test_clock(&call.clock_us);
	if (!reply_check_block(r->reply, &call, end_us, why, sizeof(why)))
		return refuse_reply(r, "%s", why);
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

	build_block_key(&key, args);
	argv[n++] = "u";
	argv[n++] = "0";
	argv[n++] = clock_arg(now, sizeof(now));
	if (redis_target_is_cluster())
		argv[n++] = "k";
	run_block_script(&key, n, argv, r);
	if (!settle(r))
		return false;
	memset(&call, 0, sizeof(call));
	call.unblock = true;
	if (!reply_check_block(r->reply, &call, &v, why, sizeof(why)))
		return refuse_reply(r, "%s", why);
	freeReplyObject(r->reply);
	r->reply = NULL;
	*lifted = (v == 1);
	return true;
}

/*
 * Refunds. These run in transaction abort as well as in normal context, so
 * they never ERROR and never allocate PostgreSQL memory: the command is
 * built in stack buffers and queued on the connection's pipeline; its reply
 * is sorted later by redis_store_refund_verdict.
 */
bool
redis_store_refund_clock(char *buf, size_t size)
{
	int64		now_us;
	bool		is_set;

	if (!limit_test_clock_parsed(&now_us, &is_set))
		return false;
	if (is_set)
		snprintf(buf, size, INT64_FORMAT, now_us);
	else
		buf[0] = '\0';
	return true;
}

bool
redis_store_refund_append(const char *rkey, int rkeylen, const char *lkey, int lkeylen,
						  int64 ts, int64 cost, int64 win_us, const char *now, bool eval)
{
	char		tsbuf[24],
				costbuf[24],
				winbuf[24];
	const char *args[4];
	const char *keys[2];
	size_t		keylens[2];
	const char *argv[SCRIPT_MAX_ARGV];
	size_t		lens[SCRIPT_MAX_ARGV];
	int			argc;

	snprintf(tsbuf, sizeof(tsbuf), INT64_FORMAT, ts);
	snprintf(costbuf, sizeof(costbuf), INT64_FORMAT, cost);
	snprintf(winbuf, sizeof(winbuf), INT64_FORMAT, win_us);
	args[0] = tsbuf;
	args[1] = costbuf;
	args[2] = winbuf;
	args[3] = now;
	keys[0] = rkey;
	keylens[0] = rkeylen;
	keys[1] = lkey;
	keylens[1] = lkeylen;
	argc = script_command(SCRIPT_LOG_REFUND, eval, 2, keys, keylens, 4, args, argv, lens);
	return redis_pipeline_append(argc, argv, lens);
}

/*
 * The same refund as redis_store_refund_append, sent now and routed like
 * any command (Redis Cluster: to the node of its key), its reply in *r.
 */
void
redis_store_refund_exec(const char *rkey, int rkeylen, const char *lkey, int lkeylen,
						int64 ts, int64 cost, int64 win_us, const char *now,
						RedisResult *r)
{
	char		tsbuf[24],
				costbuf[24],
				winbuf[24];
	const char *args[4] = {tsbuf, costbuf, winbuf, now};
	const char *keys[2] = {rkey, lkey};
	size_t		keylens[2] = {rkeylen, lkeylen};

	snprintf(tsbuf, sizeof(tsbuf), INT64_FORMAT, ts);
	snprintf(costbuf, sizeof(costbuf), INT64_FORMAT, cost);
	snprintf(winbuf, sizeof(winbuf), INT64_FORMAT, win_us);
	script_run(SCRIPT_LOG_REFUND, 2, keys, keylens, 4, args, r);
}

/*
 * rl_refund: give back the entry (ts, cost) of args' log now, in normal
 * context; or, with import_id, the entry a carry imported under that name
 * (a fallback admission carried into Redis). True with *given set when
 * Redis answered; false when it could not answer now (the cause in *r). A
 * reply the refund script could not have given is refused like any other.
 */
static bool
refund_now(const RlArgs *args, int64 ts, const char *import_id, int64 cost,
		   int64 win_us, bool *given, RedisResult *r)
{
	char	   *log;
	char	   *ledger;
	int			loglen;
	int			ledgerlen;
	char		now[24];
	int64		dummy;
	char		why[sizeof(r->message)];

	(void) limit_test_clock(&dummy);	/* parsed here, where that may ERROR */
	if (!redis_store_refund_clock(now, sizeof(now)))
		elog(ERROR, "slidewin.test_now could not be read");
	redis_store_log_keys(args, &log, &loglen, &ledger, &ledgerlen);
	if (import_id == NULL)
		redis_store_refund_exec(log, loglen, ledger, ledgerlen, ts, cost, win_us, now, r);
	else
	{
		StringInfoData ikey;
		char		itag[16];
		char		costbuf[24],
					winbuf[24];
		const char *argv[5] = {"0", costbuf, winbuf, now, import_id};
		const char *keys[3];
		size_t		keylens[3];

		snprintf(itag, sizeof(itag), "%si", algorithm_tags[args->algorithm]);
		build_key(&ikey, itag, args);
		keys[0] = log;
		keys[1] = ledger;
		keys[2] = ikey.data;
		keylens[0] = loglen;
		keylens[1] = ledgerlen;
		keylens[2] = ikey.len;
		snprintf(costbuf, sizeof(costbuf), INT64_FORMAT, cost);
		snprintf(winbuf, sizeof(winbuf), INT64_FORMAT, win_us);
		script_run(SCRIPT_LOG_REFUND_IMPORTED, 3, keys, keylens, 5, argv, r);
		pfree(ikey.data);
	}
	pfree(log);
	pfree(ledger);
	if (!settle(r))
		return false;
	switch (reply_refund_verdict(r->reply))
	{
		case REFUND_GIVEN:
			*given = true;
			break;
		case REFUND_NOTHING:
			*given = false;
			break;
		default:
			reply_refund_describe(r->reply, why, sizeof(why));
			return refuse_reply(r, "%s", why);
	}
	freeReplyObject(r->reply);
	r->reply = NULL;
	return true;
}

bool
redis_store_refund_now(const RlArgs *args, int64 ts, int64 cost, int64 win_us,
					   bool *given, RedisResult *r)
{
	return refund_now(args, ts, NULL, cost, win_us, given, r);
}

bool
redis_store_refund_imported(const RlArgs *args, const char *import_id, int64 cost,
							int64 win_us, bool *given, RedisResult *r)
{
	return refund_now(args, 0, import_id, cost, win_us, given, r);
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
	const char *tag = algorithm_tags[args->algorithm];

	Assert(args->algorithm != ALGO_MULTI_LOG);
	/* the names of the admissions recorded: the structure's tag, then "i" */
	snprintf(itag, sizeof(itag), "%si", tag);
	build_key(&keys[0], tag, args);
	if (args->algorithm == ALGO_SLIDING_LOG)
	{
		build_ledger_key(&keys[1], tag, args);
		build_block_key(&keys[2], args);
		build_key(&keys[3], itag, args);
		nkeys = 4;
	}
	else
	{
		build_block_key(&keys[1], args);
		build_key(&keys[2], itag, args);
		nkeys = 3;
	}
	for (int i = 0; i < nkeys; i++)
	{
		k[i] = keys[i].data;
		klens[i] = keys[i].len;
	}
	argv[nargs++] = clock_arg(now, sizeof(now));
	argv[nargs++] = redis_target_is_cluster() ? "k" : "";
	if (args->algorithm != ALGO_SLIDING_LOG)
		argv[nargs++] = tag;
	argv[nargs++] = entries;
	script_run(args->algorithm == ALGO_SLIDING_LOG ? SCRIPT_LOG_IMPORT : SCRIPT_COUNTER_IMPORT,
			   nkeys, k, klens, nargs, argv, r);
	for (int i = 0; i < nkeys; i++)
		pfree(keys[i].data);
	if (!settle(r))
		return false;
	if (!reply_check_import(r->reply, n, counts, why, sizeof(why)))
		return refuse_reply(r, "%s", why);
	freeReplyObject(r->reply);
	r->reply = NULL;
	*recorded = counts[0];
	return true;
}

RefundVerdict
redis_store_refund_verdict(const redisReply *reply)
{
	return reply_refund_verdict(reply);
}

/* Why a refund reply was refused, for the warning; never allocates. */
void
redis_store_refund_describe(const redisReply *reply, char *buf, size_t size)
{
	reply_refund_describe(reply, buf, size);
}

/* The Redis keys of a user key's log and ledger, in the caller's context. */
void
redis_store_log_keys(const RlArgs *args, char **log, int *loglen,
					 char **ledger, int *ledgerlen)
{
	StringInfoData key;

	build_key(&key, algorithm_tags[args->algorithm], args);
	*log = key.data;
	*loglen = key.len;
	build_ledger_key(&key, algorithm_tags[args->algorithm], args);
	*ledger = key.data;
	*ledgerlen = key.len;
}

/* ---------------------------------------------------------------------
 * Concurrency slots (lease.c): the key's holders and its wake-up list.
 * ---------------------------------------------------------------------
 */

void
redis_store_sem_keys(const RlArgs *args, char **holders, int *holderslen,
					 char **wake, int *wakelen)
{
	StringInfoData key;

	build_key(&key, "sem", args);
	*holders = key.data;
	*holderslen = key.len;
	build_key(&key, "semw", args);
	*wake = key.data;
	*wakelen = key.len;
}

/* Run a slot script on the key's two keys; false when Redis cannot answer now. */
static bool
run_sem_script(ScriptId id, const RlArgs *args, int nargs, const char **argv,
			   RedisResult *r)
{
	char	   *keys[2];
	int			lens[2];
	const char *k[2];
	size_t		kl[2];

	redis_store_sem_keys(args, &keys[0], &lens[0], &keys[1], &lens[1]);
	for (int i = 0; i < 2; i++)
	{
		k[i] = keys[i];
		kl[i] = lens[i];
	}
	script_run(id, 2, k, kl, nargs, argv, r);
	pfree(keys[0]);
	pfree(keys[1]);
	return settle(r);
}

bool
redis_store_sem_acquire(const RlArgs *args, const char *holder, int64 max,
						int64 lease_us, RlSemReply *out, RedisResult *r)
{
	char		maxbuf[24],
				leasebuf[24],
				now[24];
	const char *argv[4];
	redisReply *rep;
	int64		v[5];

	snprintf(maxbuf, sizeof(maxbuf), INT64_FORMAT, max);
	snprintf(leasebuf, sizeof(leasebuf), INT64_FORMAT, lease_us);
	argv[0] = holder;
	argv[1] = maxbuf;
	argv[2] = leasebuf;
	argv[3] = clock_arg(now, sizeof(now));
	if (!run_sem_script(SCRIPT_SEM_ACQUIRE, args, 4, argv, r))
		return false;
	rep = r->reply;
	if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 5)
		return refuse_reply(r, "The slot script answered %s, not an array of 5 integers.",
							reply_type_name(rep));
	for (int i = 0; i < 5; i++)
	{
		if (rep->element[i]->type != REDIS_REPLY_INTEGER)
			return refuse_reply(r, "Field %d of the slot script's answer is %s, not an integer.",
								i + 1, reply_type_name(rep->element[i]));
		v[i] = rep->element[i]->integer;
	}
	/*
	 * What the script can answer, and nothing else. A key's holders may
	 * have taken it with different max: a new holder is admitted only below
	 * this call's max, but a holder that renews (already) is renewed
	 * whatever max it passes, so it may count more holders than that.
	 */
	if ((v[0] != 0 && v[0] != 1) || v[1] < 0 || v[2] < 0 || v[3] < 0 ||
		(v[4] != 0 && v[4] != 1) ||
		(v[0] == 1 && (v[1] < 1 || (v[1] > max && v[4] != 1) || v[3] != 0)) ||
		(v[0] == 0 && (v[1] < max || v[4] != 0 || v[3] > RL_MAX_LEASE_US)))
		return refuse_reply(r, "The slot script answered values it cannot give (acquired " INT64_FORMAT
							", holders " INT64_FORMAT ", wait " INT64_FORMAT ").", v[0], v[1], v[3]);
	out->acquired = v[0] == 1;
	out->holders = v[1];
	out->ended = v[2];
	out->wait_us = v[3];
	out->already = v[4] == 1;
	freeReplyObject(r->reply);
	r->reply = NULL;
	return true;
}

/*
 * Release (sync), renew or count: *result is the script's integer (release
 * and renew: 1 or 0; holders: the count). False when Redis cannot answer now.
 */
bool
redis_store_sem_call(ScriptId id, const RlArgs *args, const char *holder,
					 int64 lease_us, int64 *result, RedisResult *r)
{
	char		leasebuf[24],
				now[24];
	const char *argv[3];
	int			n = 0;
	redisReply *rep;

	if (id == SCRIPT_SEM_HOLDERS)
		argv[n++] = clock_arg(now, sizeof(now));
	else
	{
		argv[n++] = holder;
		if (id == SCRIPT_SEM_RENEW)
		{
			snprintf(leasebuf, sizeof(leasebuf), INT64_FORMAT, lease_us);
			argv[n++] = leasebuf;
			argv[n++] = clock_arg(now, sizeof(now));
		}
	}
	if (!run_sem_script(id, args, n, argv, r))
		return false;
	rep = r->reply;
	if (rep->type != REDIS_REPLY_INTEGER || rep->integer < 0 ||
		(id != SCRIPT_SEM_HOLDERS && rep->integer > 1))
		return refuse_reply(r, "The slot script answered %s, not what it can answer.",
							reply_type_name(rep));
	*result = rep->integer;
	freeReplyObject(r->reply);
	r->reply = NULL;
	return true;
}

/*
 * Wait up to wait_ms for a release of the key (a token on its wake-up
 * list): *woken says whether one came. False when Redis cannot answer now.
 * wait_ms must leave room within command_timeout for the reply.
 */
bool
redis_store_sem_wait(const RlArgs *args, int wait_ms, bool *woken, RedisResult *r)
{
	char	   *holders;
	char	   *wake;
	int			hl;
	int			wl;
	char		secs[32];
	const char *argv[3];
	size_t		lens[3];
	redisReply *rep;

	redis_store_sem_keys(args, &holders, &hl, &wake, &wl);
	snprintf(secs, sizeof(secs), "%d.%03d", wait_ms / 1000, wait_ms % 1000);
	argv[0] = "BLPOP";
	lens[0] = 5;
	argv[1] = wake;
	lens[1] = wl;
	argv[2] = secs;
	lens[2] = strlen(secs);
	redis_exec(3, argv, lens, r);
	pfree(holders);
	pfree(wake);
	if (!settle(r))
		return false;
	rep = r->reply;
	if (rep->type == REDIS_REPLY_NIL)
		*woken = false;
	else if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 2)
		*woken = true;
	else
		return refuse_reply(r, "BLPOP answered %s, not nil or a pair.", reply_type_name(rep));
	freeReplyObject(r->reply);
	r->reply = NULL;
	return true;
}

/* The release of a slot, queued on the pipeline (abort-safe, like the refunds). */
bool
redis_store_release_append(const char *hkey, int hkeylen, const char *wkey, int wkeylen,
						   const char *holder, bool eval)
{
	const char *args[1] = {holder};
	const char *keys[2] = {hkey, wkey};
	size_t		keylens[2] = {hkeylen, wkeylen};
	const char *argv[SCRIPT_MAX_ARGV];
	size_t		lens[SCRIPT_MAX_ARGV];
	int			argc;

	argc = script_command(SCRIPT_SEM_RELEASE, eval, 2, keys, keylens, 1, args, argv, lens);
	return redis_pipeline_append(argc, argv, lens);
}

/* The same, sent now and routed (Redis Cluster), its reply in *r. */
void
redis_store_release_exec(const char *hkey, int hkeylen, const char *wkey, int wkeylen,
						 const char *holder, RedisResult *r)
{
	const char *args[1] = {holder};
	const char *keys[2] = {hkey, wkey};
	size_t		keylens[2] = {hkeylen, wkeylen};

	script_run(SCRIPT_SEM_RELEASE, 2, keys, keylens, 1, args, r);
}
