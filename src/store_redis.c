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
 * and the connection that carried it is dropped. It does not decide policy.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <stdarg.h>

#include "datatype/timestamp.h"
#include "lib/stringinfo.h"

#include "scripts.h"
#include "store_redis.h"

char	   *slidewin_key_prefix = NULL;

/* Error replies that mean "not now": the store is busy or degraded. */
static const char *const transient_errors[] = {
	"OOM", "LOADING", "BUSY", "READONLY", "MASTERDOWN", "TRYAGAIN",
	"NOREPLICAS", "CLUSTERDOWN", "MISCONF", NULL
};

static bool
is_transient(const char *msg)
{
	for (int i = 0; transient_errors[i]; i++)
	{
		size_t		n = strlen(transient_errors[i]);

		if (strncmp(msg, transient_errors[i], n) == 0 &&
			(msg[n] == ' ' || msg[n] == '\0'))
			return true;
	}
	return false;
}

/*
 * The Redis key for a user key: the prefix, a tag naming the data structure,
 * then the key itself. The tag keeps algorithms from reading each other's data.
 */
static void
build_key(StringInfo buf, const char *tag, const RlArgs *args)
{
	initStringInfo(buf);
	appendStringInfoString(buf, slidewin_key_prefix ? slidewin_key_prefix : "");
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
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("slidewin cannot use this Redis server"),
				 errdetail_internal("%s", r->message)));
	if (r->status == RS_FAIL_REPLY)
	{
		char	   *msg = pstrdup(r->reply->str);

		freeReplyObject(r->reply);
		r->reply = NULL;
		if (is_transient(msg))
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

/* Unix epoch to PostgreSQL epoch, in microseconds */
#define UNIX_TO_PG_US ((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY)

static const char *const reply_type_names[] = {
	[REDIS_REPLY_STRING] = "a bulk string",
	[REDIS_REPLY_ARRAY] = "an array",
	[REDIS_REPLY_INTEGER] = "an integer",
	[REDIS_REPLY_NIL] = "a nil",
	[REDIS_REPLY_STATUS] = "a status reply",
	[REDIS_REPLY_ERROR] = "an error reply",
};

static const char *
reply_type_name(const redisReply *rep)
{
	if (rep->type >= 0 && rep->type < lengthof(reply_type_names) &&
		reply_type_names[rep->type] != NULL)
		return reply_type_names[rep->type];
	return "an unknown type";
}

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

/* The fields of an outcome reply, in order; stable_us only in sliding_log attempts. */
enum
{
	F_ALLOWED, F_REMAINING, F_RETRY, F_RESET, F_USED, F_RECORDED, F_STABLE,
	N_FIELDS
};

static const char *const field_names[N_FIELDS] = {
	"allowed", "remaining", "retry_after", "reset_at", "used", "recorded", "stable_us"
};

/* Checking one reply: the first rule it breaks is the one reported. */
typedef struct ReplyCheck
{
	RedisResult *r;
	const char *algorithm;
	const char *call;			/* "attempt" or "peek" */
	const int64 *v;
	bool		ok;
} ReplyCheck;

static void
expect(ReplyCheck *ck, bool holds, int field, const char *rule,...) pg_attribute_printf(4, 5);

static void
expect(ReplyCheck *ck, bool holds, int field, const char *rule,...)
{
	va_list		ap;
	char		why[160];

	if (holds || !ck->ok)
		return;
	va_start(ap, rule);
	vsnprintf(why, sizeof(why), rule, ap);
	va_end(ap);
	ck->ok = refuse_reply(ck->r,
						  "Field \"%s\" of the %s %s reply is " INT64_FORMAT ", but %s.",
						  field_names[field], ck->algorithm, ck->call,
						  ck->v[field], why);
}

/* A time, in Unix microseconds, that rl_result can hold. */
static bool
valid_time(int64 us)
{
	return us >= MIN_TIMESTAMP + UNIX_TO_PG_US && us - UNIX_TO_PG_US < END_TIMESTAMP;
}

/*
 * Whether v is a reply the script for args could have given. The rules come
 * from the scripts in scripts.c, and only rules that hold there exactly are
 * checked: a legitimate reply refused here would turn into the failure
 * policy, and under "allow" into an admission. Where a script computes in
 * doubles (sliding_counter, token_bucket) only the bounds it clamps to are
 * used.
 */
static bool
check_outcome(ReplyCheck *ck, const RlArgs *args, bool peek)
{
	const int64 *v = ck->v;
	RlAlgorithm algo = args->algorithm;
	bool		allowed = (v[F_ALLOWED] == 1);
	bool		written = !peek && (allowed || args->force);
	int64		cost = peek ? 1 : args->cost;
	int64		lim = args->lim;	/* multi: the smallest limit */
	int64		maxlim = args->lim;
	bool		exact = (algo == ALGO_SLIDING_LOG || algo == ALGO_FIXED_WINDOW);
	bool		logs = (algo == ALGO_SLIDING_LOG || algo == ALGO_MULTI_LOG);
	int64		clock_floor;

	if (algo == ALGO_MULTI_LOG)
		for (int i = 0; i < args->nwin; i++)
			maxlim = Max(maxlim, args->lims[i]);
	/* a recorded entry is at "now" or later; Redis TIME is positive */
	if (!limit_test_clock(&clock_floor))
		clock_floor = 1;

	expect(ck, v[F_ALLOWED] == 0 || v[F_ALLOWED] == 1, F_ALLOWED, "it must be 0 or 1");

	expect(ck, v[F_REMAINING] >= 0 && v[F_REMAINING] <= lim, F_REMAINING,
		   "it must be between 0 and " INT64_FORMAT, lim);
	if (!allowed && written)
		expect(ck, v[F_REMAINING] == 0, F_REMAINING,
			   "it must be 0 for a call recorded over the limit");
	if (peek && allowed && algo != ALGO_SLIDING_COUNTER && algo != ALGO_TOKEN_BUCKET)
		expect(ck, v[F_REMAINING] >= 1, F_REMAINING,
			   "it must be at least 1 when a call would be admitted");

	if (allowed)
		expect(ck, v[F_RETRY] == 0, F_RETRY, "it must be 0 when the call is admitted");
	else
		expect(ck, v[F_RETRY] >= 1, F_RETRY, "it must be positive when the call is denied");
	if (!allowed && algo == ALGO_FIXED_WINDOW)
		expect(ck, v[F_RETRY] <= args->win_us, F_RETRY,
			   "it must be at most the window, " INT64_FORMAT, args->win_us);
	if (!allowed && algo == ALGO_SLIDING_COUNTER)
		expect(ck, v[F_RETRY] <= 2 * args->win_us, F_RETRY,
			   "it must be at most two windows, " INT64_FORMAT, 2 * args->win_us);

	expect(ck, v[F_USED] >= 0, F_USED, "it must not be negative");
	if (allowed && algo != ALGO_TOKEN_BUCKET)
		expect(ck, v[F_USED] <= maxlim, F_USED,
			   "it must be at most " INT64_FORMAT " when the call is admitted", maxlim);
	if (written)
		expect(ck, v[F_USED] >= cost, F_USED,
			   "it must include the " INT64_FORMAT " units recorded", cost);
	if (exact)
	{
		/* the units before this call, and the decision they lead to */
		int64		before = written ? v[F_USED] - cost : v[F_USED];

		expect(ck, v[F_REMAINING] == Max(lim - v[F_USED], 0), F_REMAINING,
			   "with " INT64_FORMAT " units used it must be " INT64_FORMAT,
			   v[F_USED], Max(lim - v[F_USED], 0));
		if (allowed)
			expect(ck, before <= lim - cost, F_USED,
				   "then a call of " INT64_FORMAT " units does not fit in the limit of " INT64_FORMAT " and is denied",
				   cost, lim);
		else
			expect(ck, before > lim - cost, F_USED,
				   "then a call of " INT64_FORMAT " units fits in the limit of " INT64_FORMAT " and is admitted",
				   cost, lim);
	}

	expect(ck, valid_time(v[F_RESET]), F_RESET, "it is not a valid time");

	if (logs && written)
	{
		expect(ck, v[F_RECORDED] >= clock_floor && valid_time(v[F_RECORDED]),
			   F_RECORDED, "it must be the time of the entry recorded, at least " INT64_FORMAT,
			   clock_floor);
		/* both are valid times, so the sum cannot overflow */
		if (ck->ok)
			expect(ck, v[F_RESET] == v[F_RECORDED] + args->win_us, F_RESET,
				   "it must be the recorded time plus the window, " INT64_FORMAT,
				   v[F_RECORDED] + args->win_us);
	}
	else
		expect(ck, v[F_RECORDED] == -1, F_RECORDED,
			   "it must be -1 when nothing was recorded");

	if (algo == ALGO_SLIDING_LOG && !peek)
	{
		if (written)
			expect(ck, v[F_STABLE] == 0, F_STABLE,
				   "it must be 0 when the call was recorded");
		else
			expect(ck, v[F_STABLE] >= 1 && v[F_STABLE] <= v[F_RETRY], F_STABLE,
				   "it must be between 1 and retry_after, " INT64_FORMAT, v[F_RETRY]);
	}
	return ck->ok;
}

/*
 * Turn the reply in r into *o, or refuse it (false, RS_FAIL_PROTOCOL) if it
 * is not one the script for args could have given. Frees the reply.
 */
static bool
read_outcome(RedisResult *r, const RlArgs *args, bool peek, RlOutcome *o)
{
	redisReply *rep = r->reply;
	int64		v[N_FIELDS];
	size_t		n = (args->algorithm == ALGO_SLIDING_LOG && !peek) ? 7 : 6;
	ReplyCheck	ck;

	ck.r = r;
	ck.algorithm = limit_algorithm_name(args->algorithm);
	ck.call = peek ? "peek" : "attempt";
	ck.v = v;
	ck.ok = true;

	if (rep->type != REDIS_REPLY_ARRAY)
		return refuse_reply(r, "The %s %s reply is %s, not an array of %zu integers.",
							ck.algorithm, ck.call, reply_type_name(rep), n);
	if (rep->elements != n)
		return refuse_reply(r, "The %s %s reply has %zu elements, not %zu.",
							ck.algorithm, ck.call, rep->elements, n);
	for (size_t i = 0; i < n; i++)
	{
		if (rep->element[i]->type != REDIS_REPLY_INTEGER)
			return refuse_reply(r, "Field \"%s\" of the %s %s reply is %s, not an integer.",
								field_names[i], ck.algorithm, ck.call,
								reply_type_name(rep->element[i]));
		v[i] = rep->element[i]->integer;
	}
	if (n == 6)
		v[F_STABLE] = 0;
	freeReplyObject(rep);
	r->reply = NULL;

	if (!check_outcome(&ck, args, peek))
		return false;

	o->allowed = (v[F_ALLOWED] == 1);
	o->remaining = v[F_REMAINING];
	o->retry_us = v[F_RETRY];
	o->reset_at_us = v[F_RESET];
	o->used = v[F_USED];
	o->recorded_ts = v[F_RECORDED];
	o->stable_us = v[F_STABLE];
	o->shadowed = false;
	o->store = "redis";
	o->known = true;
	return true;
}

/*
 * Run a script that answers with an outcome, on the key built in *key and,
 * for the logs, the ledger built in *ledger (NULL for the counting
 * algorithms); both are freed. False when Redis cannot answer now, or
 * answered what the script could not have.
 */
static bool
run_outcome_script(ScriptId id, const RlArgs *args, bool peek,
				   StringInfo key, StringInfo ledger,
				   int nargs, const char **argv, RlOutcome *o, RedisResult *r)
{
	const char *keys[2] = {key->data, ledger ? ledger->data : NULL};
	size_t		keylens[2] = {key->len, ledger ? ledger->len : 0};

	script_run(id, ledger ? 2 : 1, keys, keylens, nargs, argv, r);
	pfree(key->data);
	if (ledger)
		pfree(ledger->data);
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
 * Run one sliding-log script: ARGV is lim, win, [cost,] now[, force]. Attempt
 * and peek differ only in the script and in whether a cost is passed.
 */
static bool
run_log_script(ScriptId id, const RlArgs *args, bool with_cost,
			   RlOutcome *o, RedisResult *r)
{
	StringInfoData key;
	StringInfoData ledger;
	char		lim[24],
				win[24],
				cost[24],
				now[24];
	const char *argv[5];
	int			n = 0;

	build_key(&key, "log", args);
	build_ledger_key(&ledger, "log", args);
	snprintf(lim, sizeof(lim), INT64_FORMAT, args->lim);
	snprintf(win, sizeof(win), INT64_FORMAT, args->win_us);
	argv[n++] = lim;
	argv[n++] = win;
	if (with_cost)
	{
		snprintf(cost, sizeof(cost), INT64_FORMAT, args->cost);
		argv[n++] = cost;
	}
	argv[n++] = clock_arg(now, sizeof(now));
	if (with_cost)
		argv[n++] = args->force ? "1" : "0";

	return run_outcome_script(id, args, !with_cost, &key, &ledger, n, argv, o, r);
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

/* A counting algorithm: ARGV lim, win, cost, now, mode ('0', '1' or 'p'). */
static bool
run_counter_script(const RlArgs *args, bool peek, RlOutcome *o, RedisResult *r)
{
	StringInfoData key;
	char		lim[24],
				win[24],
				cost[24],
				now[24];
	const char *argv[5];

	build_key(&key, algorithm_tags[args->algorithm], args);
	snprintf(lim, sizeof(lim), INT64_FORMAT, args->lim);
	snprintf(win, sizeof(win), INT64_FORMAT, args->win_us);
	snprintf(cost, sizeof(cost), INT64_FORMAT, peek ? 1 : args->cost);
	argv[0] = lim;
	argv[1] = win;
	argv[2] = cost;
	argv[3] = clock_arg(now, sizeof(now));
	argv[4] = peek ? "p" : args->force ? "1" : "0";
	return run_outcome_script(counter_scripts[args->algorithm], args, peek, &key, NULL,
							  5, argv, o, r);
}

/*
 * rl_attempt_multi: ARGV n, lim1..limn, win1..winn, cost, now, force, mode.
 * One log serves every window; a call is recorded once, in all of them.
 */
static bool
run_multi_script(const RlArgs *args, bool peek, RlOutcome *o, RedisResult *r)
{
	StringInfoData key;
	StringInfoData ledger;
	char		bufs[2 * RL_MAX_WINDOWS + 2][24];
	char		now[24];
	const char *argv[2 * RL_MAX_WINDOWS + 5];
	int			n = 0;

	build_key(&key, algorithm_tags[ALGO_MULTI_LOG], args);
	build_ledger_key(&ledger, algorithm_tags[ALGO_MULTI_LOG], args);
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
	return run_outcome_script(SCRIPT_LOG_MULTI, args, peek, &key, &ledger, n, argv, o, r);
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

/* Every structure of the key, in every algorithm, and the logs' ledgers. */
bool
redis_store_reset(const RlArgs *args, RedisResult *r)
{
	StringInfoData keys[ALGO_COUNT + 2];
	const char *argv[ALGO_COUNT + 3];
	size_t		lens[ALGO_COUNT + 3];
	int			n = 0;

	for (int i = 0; i < ALGO_COUNT; i++)
		build_key(&keys[n++], algorithm_tags[i], args);
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
	/* DEL answers how many of the keys it removed */
	if (r->reply->type != REDIS_REPLY_INTEGER)
		return refuse_reply(r, "The reply to DEL is %s, not an integer.",
							reply_type_name(r->reply));
	if (r->reply->integer < 0 || r->reply->integer > ALGO_COUNT)
		return refuse_reply(r, "The reply to DEL is %lld, but it must be between 0 and %d.",
							r->reply->integer, ALGO_COUNT);
	freeReplyObject(r->reply);
	r->reply = NULL;
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

RefundVerdict
redis_store_refund_verdict(const redisReply *reply)
{
	/* the refund script answers 1 (given back) or 0 (nothing to give back) */
	if (reply->type == REDIS_REPLY_INTEGER &&
		(reply->integer == 0 || reply->integer == 1))
		return reply->integer == 1 ? REFUND_GIVEN : REFUND_NOTHING;
	if (reply->type == REDIS_REPLY_ERROR)
	{
		if (strncmp(reply->str, "NOSCRIPT", 8) == 0)
			return REFUND_NOSCRIPT;
		if (is_transient(reply->str))
			return REFUND_RETRY;
	}
	return REFUND_FAILED;
}

/* Why a refund reply was refused, for the warning; never allocates. */
void
redis_store_refund_describe(const redisReply *reply, char *buf, size_t size)
{
	if (reply->type == REDIS_REPLY_ERROR)
		snprintf(buf, size, "%s", reply->str);
	else if (reply->type == REDIS_REPLY_INTEGER)
		snprintf(buf, size, "The refund reply is %lld, but it must be 0 or 1.",
				 reply->integer);
	else
		snprintf(buf, size, "The refund reply is %s, not an integer.",
				 reply_type_name(reply));
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
