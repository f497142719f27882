/*-------------------------------------------------------------------------
 *
 * reply_check.c
 *		Whether a reply is one the command that got it could have been given.
 *
 * A reply that is not (a proxy, another program on the port, keys edited
 * by someone else) must never be believed: store_redis.c refuses it, drops
 * the connection and lets the call's failure policy decide. This file only
 * tells the two apart, and says why in a sentence for errdetail.
 *
 * It must stay pure: hiredis's reply tree and plain values in, no
 * PostgreSQL header or function, no allocation, no connection. The backend
 * and the fuzzers run the very same code, on replies that hiredis's reader
 * parsed from the bytes the server sent.
 *
 *-------------------------------------------------------------------------
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "reply_check.h"

#define CHECK_PRINTF(f, a) __attribute__((format(printf, f, a)))

static const char *const transient_errors[] = {
	"OOM", "LOADING", "BUSY", "READONLY", "MASTERDOWN", "TRYAGAIN",
	"NOREPLICAS", "CLUSTERDOWN", "MISCONF", NULL
};

bool
reply_is_transient(const char *msg)
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

ReplyConfigError
reply_config_error(const char *msg)
{
	static const char *const auth_errors[] = {
		"WRONGPASS ", "NOAUTH ", "ERR invalid password",
		"ERR AUTH <password> called without any password configured",
		"ERR Client sent AUTH, but no password is set", NULL
	};

	for (int i = 0; auth_errors[i]; i++)
		if (strncmp(msg, auth_errors[i], strlen(auth_errors[i])) == 0)
			return REPLY_CONFIG_AUTH;
	if (strncmp(msg, "NOPERM ", 7) == 0)
		return REPLY_CONFIG_ACL;
	return REPLY_CONFIG_NONE;
}

static const char *const reply_type_names[] = {
	[REDIS_REPLY_STRING] = "a bulk string",
	[REDIS_REPLY_ARRAY] = "an array",
	[REDIS_REPLY_INTEGER] = "an integer",
	[REDIS_REPLY_NIL] = "a nil",
	[REDIS_REPLY_STATUS] = "a status reply",
	[REDIS_REPLY_ERROR] = "an error reply",
};

const char *
reply_type_name(const redisReply *rep)
{
	if (rep->type >= 0 &&
		rep->type < (int) (sizeof(reply_type_names) / sizeof(reply_type_names[0])) &&
		reply_type_names[rep->type] != NULL)
		return reply_type_names[rep->type];
	return "an unknown type";
}

static bool refuse(char *why, size_t whysize, const char *fmt,...) CHECK_PRINTF(3, 4);

static bool
refuse(char *why, size_t whysize, const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(why, whysize, fmt, ap);
	va_end(ap);
	return false;
}

static const char *const field_names[RF_COUNT] = {
	"allowed", "remaining", "retry_after", "reset_at", "used", "recorded", "stable_us", "window",
	"next_us"
};


/* Checking one reply: the first rule it breaks is the one reported. */
typedef struct OutcomeCheck
{
	const ReplyCall *call;
	const char *kind;			/* "attempt" or "peek" */
	const int64_t *v;
	bool		ok;
	char	   *why;
	size_t		whysize;
} OutcomeCheck;

static void expect(OutcomeCheck *ck, bool holds, int field, const char *rule,...) CHECK_PRINTF(4, 5);

static void
expect(OutcomeCheck *ck, bool holds, int field, const char *rule,...)
{
	va_list		ap;
	char		rule_text[160];

	if (holds || !ck->ok)
		return;
	va_start(ap, rule);
	vsnprintf(rule_text, sizeof(rule_text), rule, ap);
	va_end(ap);
	ck->ok = refuse(ck->why, ck->whysize,
					"Field \"%s\" of the %s %s reply is %" PRId64 ", but %s.",
					field_names[field], ck->call->algorithm_name, ck->kind,
					ck->v[field], rule_text);
}

static int64_t
max64(int64_t a, int64_t b)
{
	return a > b ? a : b;
}

/* A time, in Unix microseconds, that rl_result can hold. */
static bool
valid_time(int64_t us)
{
	return us >= REPLY_PG_MIN_TIMESTAMP + REPLY_PG_EPOCH_UNIX_US &&
		us - REPLY_PG_EPOCH_UNIX_US < REPLY_PG_END_TIMESTAMP;
}

/*
 * Whether v is a reply the script for the call could have given. The rules
 * come from the scripts in scripts.c, and only rules that hold there exactly
 * are checked: a legitimate reply refused here would turn into the failure
 * policy, and under "allow" into an admission. Where a script computes in
 * doubles (sliding_counter, token_bucket) only the bounds it clamps to are
 * used.
 */
static bool
check_fields(OutcomeCheck *ck)
{
	const ReplyCall *call = ck->call;
	const int64_t *v = ck->v;
	RlAlgorithm algo = call->algorithm;
	bool		peek = call->peek;
	bool		allowed = (v[RF_ALLOWED] == 1);
	/* 2: denied because the key is blocked (rl_block), whatever its units */
	bool		blocked = (v[RF_ALLOWED] == 2);
	bool		written = !peek && (allowed || call->force);
	int64_t		cost = peek ? 1 : call->cost;
	int64_t		lim = call->lim;
	int64_t		maxlim = call->lim;
	bool		exact = (algo == ALGO_SLIDING_LOG || algo == ALGO_FIXED_WINDOW);
	bool		logs = (algo == ALGO_SLIDING_LOG || algo == ALGO_MULTI_LOG);
	/* a recorded entry is at "now" or later; Redis TIME is positive */
	int64_t		clock_floor = call->clock_set ? call->clock_us : 1;

	if (algo == ALGO_MULTI_LOG)
		for (int i = 0; i < call->nwin; i++)
			maxlim = max64(maxlim, call->lims[i]);

	expect(ck, v[RF_ALLOWED] >= 0 && v[RF_ALLOWED] <= 2, RF_ALLOWED, "it must be 0, 1 or 2");
	if (algo == ALGO_MULTI_LOG)
		expect(ck, v[RF_WINDOW] >= 1 && v[RF_WINDOW] <= call->nwin, RF_WINDOW,
			   "it must be between 1 and %d", call->nwin);

	expect(ck, v[RF_REMAINING] >= 0 && v[RF_REMAINING] <= lim, RF_REMAINING,
		   "it must be between 0 and %" PRId64, lim);
	if (!allowed && written)
		expect(ck, v[RF_REMAINING] == 0, RF_REMAINING,
			   "it must be 0 for a call recorded over the limit");
	if (blocked)
		expect(ck, v[RF_REMAINING] == 0, RF_REMAINING,
			   "it must be 0 when the key is blocked");
	if (peek && allowed && algo != ALGO_SLIDING_COUNTER && algo != ALGO_TOKEN_BUCKET)
		expect(ck, v[RF_REMAINING] >= 1, RF_REMAINING,
			   "it must be at least 1 when a call would be admitted");

	if (allowed)
		expect(ck, v[RF_RETRY] == 0, RF_RETRY, "it must be 0 when the call is admitted");
	else
		expect(ck, v[RF_RETRY] >= 1, RF_RETRY, "it must be positive when the call is denied");
	/* a block may outlast any window */
	if (!allowed && !blocked && algo == ALGO_FIXED_WINDOW)
		expect(ck, v[RF_RETRY] <= call->win_us, RF_RETRY,
			   "it must be at most the window, %" PRId64, call->win_us);
	if (!allowed && !blocked && algo == ALGO_SLIDING_COUNTER)
		expect(ck, v[RF_RETRY] <= 2 * call->win_us, RF_RETRY,
			   "it must be at most two windows, %" PRId64, 2 * call->win_us);

	expect(ck, v[RF_USED] >= 0, RF_USED, "it must not be negative");
	if (allowed && algo != ALGO_TOKEN_BUCKET)
		expect(ck, v[RF_USED] <= maxlim, RF_USED,
			   "it must be at most %" PRId64 " when the call is admitted", maxlim);
	if (written)
		expect(ck, v[RF_USED] >= cost, RF_USED,
			   "it must include the %" PRId64 " units recorded", cost);
	/*
	 * Only once used is known not to be negative: lim - used must not
	 * overflow, whatever a hostile reply holds.
	 */
	if (exact && ck->ok && !blocked)
	{
		/* the units before this call, and the decision they lead to */
		int64_t		before = written ? v[RF_USED] - cost : v[RF_USED];

		expect(ck, v[RF_REMAINING] == max64(lim - v[RF_USED], 0), RF_REMAINING,
			   "with %" PRId64 " units used it must be %" PRId64,
			   v[RF_USED], max64(lim - v[RF_USED], 0));
		if (allowed)
			expect(ck, before <= lim - cost, RF_USED,
				   "then a call of %" PRId64 " units does not fit in the limit of %" PRId64 " and is denied",
				   cost, lim);
		else
			expect(ck, before > lim - cost, RF_USED,
				   "then a call of %" PRId64 " units fits in the limit of %" PRId64 " and is admitted",
				   cost, lim);
	}

	expect(ck, valid_time(v[RF_RESET]), RF_RESET, "it is not a valid time");

	if (logs && written)
	{
		expect(ck, v[RF_RECORDED] >= clock_floor && valid_time(v[RF_RECORDED]),
			   RF_RECORDED, "it must be the time of the entry recorded, at least %" PRId64,
			   clock_floor);
		/*
		 * A valid time may be as late as int64 goes (valid_time bounds it
		 * below only), so the sum is checked for overflow: past the top, no
		 * reset_at can follow.
		 */
		if (ck->ok)
		{
			int64_t		want;

			if (__builtin_add_overflow(v[RF_RECORDED], call->win_us, &want))
				expect(ck, false, RF_RECORDED,
					   "the window after it would end past the last valid time");
			else
				expect(ck, v[RF_RESET] == want, RF_RESET,
					   "it must be the recorded time plus the window, %" PRId64, want);
		}
	}
	else
		expect(ck, v[RF_RECORDED] == -1, RF_RECORDED,
			   "it must be -1 when nothing was recorded");

	if (algo == ALGO_SLIDING_LOG && !peek)
	{
		if (written)
			expect(ck, v[RF_STABLE] == 0, RF_STABLE,
				   "it must be 0 when the call was recorded");
		else
			expect(ck, v[RF_STABLE] >= 1 && v[RF_STABLE] <= v[RF_RETRY], RF_STABLE,
				   "it must be between 1 and retry_after, %" PRId64, v[RF_RETRY]);
	}

	/*
	 * A unit frees later than now; in a log, no later than the newest entry
	 * leaves (a block may last longer).
	 */
	expect(ck, valid_time(v[RF_NEXT]) && v[RF_NEXT] > clock_floor - (call->clock_set ? 0 : 1) &&
		   v[RF_NEXT] > 0,
		   RF_NEXT, "it must be a valid time after now");
	if (logs && !blocked && v[RF_USED] > 0)
		expect(ck, v[RF_NEXT] <= v[RF_RESET], RF_NEXT,
			   "it must be at most reset_at, %" PRId64, v[RF_RESET]);
	return ck->ok;
}

bool
reply_check_outcome(const redisReply *rep, const ReplyCall *call,
					int64_t v[RF_COUNT], char *why, size_t whysize)
{
	bool		multi = call->algorithm == ALGO_MULTI_LOG;
	size_t		n = ((call->algorithm == ALGO_SLIDING_LOG && !call->peek) || multi) ? 7 : 6;
	/* the fields at positions 6 and 7, when the reply has them */
	int			extra[2] = {RF_STABLE, RF_NEXT};
	const char *kind = call->peek ? "peek" : "attempt";
	OutcomeCheck ck;

	if (multi)
		extra[0] = RF_WINDOW;
	else if (n == 6)
		extra[0] = RF_NEXT;
	n++;						/* next_us, last */

	if (rep->type != REDIS_REPLY_ARRAY)
		return refuse(why, whysize, "The %s %s reply is %s, not an array of %zu integers.",
					  call->algorithm_name, kind, reply_type_name(rep), n);
	v[RF_STABLE] = 0;
	v[RF_WINDOW] = 0;
	v[RF_NEXT] = 0;
	/*
	 * The sliding log's attempt answers an admission on a key not blocked
	 * with {remaining, recorded, next_us}; the other fields follow from
	 * them, and every check below still applies to the whole.
	 */
	if (call->algorithm == ALGO_SLIDING_LOG && !call->peek && rep->elements == 3)
	{
		static const int fields[3] = {RF_REMAINING, RF_RECORDED, RF_NEXT};

		for (size_t i = 0; i < 3; i++)
		{
			if (rep->element[i]->type != REDIS_REPLY_INTEGER)
				return refuse(why, whysize, "Field \"%s\" of the %s %s reply is %s, not an integer.",
							  field_names[fields[i]], call->algorithm_name, kind,
							  reply_type_name(rep->element[i]));
			v[fields[i]] = rep->element[i]->integer;
		}
		v[RF_ALLOWED] = 1;
		v[RF_RETRY] = 0;
		/* out of range sums become values the checks refuse */
		if (__builtin_sub_overflow(call->lim, v[RF_REMAINING], &v[RF_USED]))
			v[RF_USED] = -1;
		if (__builtin_add_overflow(v[RF_RECORDED], call->win_us, &v[RF_RESET]))
			v[RF_RESET] = -1;
	}
	/*
	 * The counting algorithms answer an admission on a key not blocked with
	 * {remaining, reset_at, used, next_us}.
	 */
	else if (call->algorithm != ALGO_SLIDING_LOG && !multi && !call->peek &&
			 rep->elements == 4)
	{
		static const int fields[4] = {RF_REMAINING, RF_RESET, RF_USED, RF_NEXT};

		for (size_t i = 0; i < 4; i++)
		{
			if (rep->element[i]->type != REDIS_REPLY_INTEGER)
				return refuse(why, whysize, "Field \"%s\" of the %s %s reply is %s, not an integer.",
							  field_names[fields[i]], call->algorithm_name, kind,
							  reply_type_name(rep->element[i]));
			v[fields[i]] = rep->element[i]->integer;
		}
		v[RF_ALLOWED] = 1;
		v[RF_RETRY] = 0;
		v[RF_RECORDED] = -1;
	}
	else if (rep->elements != n)
		return refuse(why, whysize, "The %s %s reply has %zu elements, not %zu%s.",
					  call->algorithm_name, kind, rep->elements, n,
					  call->peek || multi ? "" :
					  call->algorithm == ALGO_SLIDING_LOG ? " (or 3 for an admission)" :
					  " (or 4 for an admission)");
	else
		for (size_t i = 0; i < n; i++)
		{
			int			f = i < 6 ? (int) i : extra[i - 6];

			if (rep->element[i]->type != REDIS_REPLY_INTEGER)
				return refuse(why, whysize, "Field \"%s\" of the %s %s reply is %s, not an integer.",
							  field_names[f], call->algorithm_name, kind,
							  reply_type_name(rep->element[i]));
			v[f] = rep->element[i]->integer;
		}
	ck.call = call;
	ck.kind = kind;
	ck.v = v;
	ck.ok = true;
	ck.why = why;
	ck.whysize = whysize;
	return check_fields(&ck);
}

/*
 * rl_attempt_all's reply: 8 integers per key (log_all.lua, counter_all.lua),
 * or 3 per key for the sliding log when every key is admitted.
 * Each key's fields pass the checks of an attempt of the call's algorithm;
 * a key that had room but was not charged (3) passes those of a peek, with
 * room for its cost where the algorithm counts exactly. The counting
 * algorithms have no stable_us: it is 0. And
 * the keys agree: unless forced, every key is recorded (1) or none is,
 * and a call not recorded has a key that denies it (0 or 2).
 */
/* The algorithm's name, for a message (the pure code has no limit.c). */
static const char *
algorithm_label(RlAlgorithm algorithm)
{
	switch (algorithm)
	{
		case ALGO_SLIDING_LOG:
			return "sliding_log";
		case ALGO_SLIDING_COUNTER:
			return "sliding_counter";
		case ALGO_FIXED_WINDOW:
			return "fixed_window";
		case ALGO_TOKEN_BUCKET:
			return "token_bucket";
		default:
			return "this algorithm";
	}
}

bool
reply_check_all(const redisReply *rep, int n, const ReplyCall *calls,
				int64_t (*v)[RF_COUNT], char *why, size_t whysize)
{
	static const int fields[8] = {RF_ALLOWED, RF_REMAINING, RF_RETRY, RF_RESET,
	RF_USED, RF_RECORDED, RF_STABLE, RF_NEXT};
	int			admitted = 0,
				deciders = 0;
	bool		force = n > 0 && calls[0].force;

	/*
	 * The sliding log answers an admission of every key, not forced, with
	 * {remaining, recorded, next_us} for each (log_all.lua); the other
	 * fields follow as in reply_check_attempt, and every check below still
	 * applies to the whole.
	 */
	bool		short_form = n > 0 && calls[0].algorithm == ALGO_SLIDING_LOG && !force &&
		rep->type == REDIS_REPLY_ARRAY && rep->elements == (size_t) (3 * n);

	if (rep->type != REDIS_REPLY_ARRAY)
		return refuse(why, whysize, "The rl_attempt_all reply is %s, not an array of %d integers.",
					  reply_type_name(rep), 8 * n);
	if (!short_form && rep->elements != (size_t) (8 * n))
		return refuse(why, whysize, "The rl_attempt_all reply has %zu elements, not %d (8 for each of %d keys)%s.",
					  rep->elements, 8 * n, n,
					  calls[0].algorithm == ALGO_SLIDING_LOG && !force ? " or 3 for each key when all are admitted" : "");
	for (int k = 0; k < n; k++)
	{
		ReplyCall	c = calls[k];
		OutcomeCheck ck;
		bool		spare;

		v[k][RF_WINDOW] = 0;
		if (short_form)
		{
			static const int sfields[3] = {RF_REMAINING, RF_RECORDED, RF_NEXT};

			for (int i = 0; i < 3; i++)
			{
				const redisReply *e = rep->element[3 * k + i];

				if (e->type != REDIS_REPLY_INTEGER)
					return refuse(why, whysize, "Field \"%s\" of key %d of the rl_attempt_all reply is %s, not an integer.",
								  field_names[sfields[i]], k + 1, reply_type_name(e));
				v[k][sfields[i]] = e->integer;
			}
			v[k][RF_ALLOWED] = 1;
			v[k][RF_RETRY] = 0;
			v[k][RF_STABLE] = 0;
			/* out of range sums become values the checks refuse */
			if (__builtin_sub_overflow(c.lim, v[k][RF_REMAINING], &v[k][RF_USED]))
				v[k][RF_USED] = -1;
			if (__builtin_add_overflow(v[k][RF_RECORDED], c.win_us, &v[k][RF_RESET]))
				v[k][RF_RESET] = -1;
		}
		else
			for (int i = 0; i < 8; i++)
			{
				const redisReply *e = rep->element[8 * k + i];

				if (e->type != REDIS_REPLY_INTEGER)
					return refuse(why, whysize, "Field \"%s\" of key %d of the rl_attempt_all reply is %s, not an integer.",
								  field_names[fields[i]], k + 1, reply_type_name(e));
				v[k][fields[i]] = e->integer;
			}
		if (v[k][RF_ALLOWED] < 0 || v[k][RF_ALLOWED] > 3 || (force && v[k][RF_ALLOWED] == 3))
			return refuse(why, whysize, "Field \"allowed\" of key %d of the rl_attempt_all reply is %" PRId64 ", but it must be 0, 1 or 2, or 3 when not forced.",
						  k + 1, v[k][RF_ALLOWED]);
		spare = v[k][RF_ALLOWED] == 3;
		admitted += v[k][RF_ALLOWED] == 1;
		deciders += v[k][RF_ALLOWED] == 0 || v[k][RF_ALLOWED] == 2;
		c.algorithm_name = "rl_attempt_all";
		c.peek = spare;
		if (c.algorithm != ALGO_SLIDING_LOG && v[k][RF_STABLE] != 0)
			return refuse(why, whysize, "Field \"stable_us\" of key %d of the rl_attempt_all reply is %" PRId64 ", but it must be 0 for %s.",
						  k + 1, v[k][RF_STABLE], algorithm_label(c.algorithm));
		if (spare)
		{
			v[k][RF_ALLOWED] = 1;
			/* sliding_counter and token_bucket count in doubles: no exact bound */
			if ((c.algorithm == ALGO_SLIDING_LOG || c.algorithm == ALGO_FIXED_WINDOW) &&
				v[k][RF_USED] > c.lim - c.cost)
				return refuse(why, whysize, "Field \"used\" of key %d of the rl_attempt_all reply is %" PRId64 ", but a key said to have room for %" PRId64 " units within %" PRId64 " must have used at most the difference.",
							  k + 1, v[k][RF_USED], c.cost, c.lim);
			if (v[k][RF_STABLE] != 0)
				return refuse(why, whysize, "Field \"stable_us\" of key %d of the rl_attempt_all reply is %" PRId64 ", but it must be 0 for a key that had room.",
							  k + 1, v[k][RF_STABLE]);
		}
		ck.call = &c;
		ck.kind = "attempt";
		ck.v = v[k];
		ck.ok = true;
		ck.why = why;
		ck.whysize = whysize;
		if (!check_fields(&ck))
			return false;
		if (spare)
			v[k][RF_ALLOWED] = 3;
	}
	if (!force && admitted != 0 && admitted != n)
		return refuse(why, whysize, "The rl_attempt_all reply admits %d of %d keys, but it must admit all of them or none.",
					  admitted, n);
	if (!force && admitted == 0 && deciders == 0)
		return refuse(why, whysize, "The rl_attempt_all reply admits no key, but no key denies.");
	return true;
}

bool
reply_check_block(const redisReply *rep, const ReplyBlockCall *call,
				  int64_t *v, char *why, size_t whysize)
{
	const char *what = call->unblock ? "rl_unblock" : "rl_block";

	if (rep->type != REDIS_REPLY_INTEGER)
		return refuse(why, whysize, "The %s reply is %s, not an integer.",
					  what, reply_type_name(rep));
	*v = rep->integer;
	if (call->unblock)
	{
		if (*v != 0 && *v != 1)
			return refuse(why, whysize, "The rl_unblock reply is %" PRId64 ", but it must be 0 or 1.",
						  *v);
		return true;
	}
	if (!valid_time(*v) || *v < 1)
		return refuse(why, whysize, "The rl_block reply is %" PRId64 ", which is not a valid time.",
					  *v);
	if (call->clock_set)
	{
		int64_t		want;

		if (__builtin_add_overflow(call->clock_us, call->duration_us, &want))
			return refuse(why, whysize, "The rl_block reply is %" PRId64 ", but the block asked for ends past the last valid time.",
						  *v);
		if (*v < want)
			return refuse(why, whysize, "The rl_block reply is %" PRId64 ", but the block must end at %" PRId64 " or later.",
						  *v, want);
	}
	return true;
}

bool
reply_check_del(const redisReply *rep, int most, char *why, size_t whysize)
{
	/* DEL answers how many of the keys it removed */
	if (rep->type != REDIS_REPLY_INTEGER)
		return refuse(why, whysize, "The reply to DEL is %s, not an integer.",
					  reply_type_name(rep));
	if (rep->integer < 0 || rep->integer > most)
		return refuse(why, whysize, "The reply to DEL is %lld, but it must be between 0 and %d.",
					  rep->integer, most);
	return true;
}

RefundVerdict
reply_refund_verdict(const redisReply *reply)
{
	/* the refund script answers 1 (given back) or 0 (nothing to give back) */
	if (reply->type == REDIS_REPLY_INTEGER &&
		(reply->integer == 0 || reply->integer == 1))
		return reply->integer == 1 ? REFUND_GIVEN : REFUND_NOTHING;
	if (reply->type == REDIS_REPLY_ERROR)
	{
		if (strncmp(reply->str, "NOSCRIPT", 8) == 0)
			return REFUND_NOSCRIPT;
		if (reply_is_transient(reply->str))
			return REFUND_RETRY;
	}
	return REFUND_FAILED;
}

void
reply_refund_describe(const redisReply *reply, char *buf, size_t size)
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

bool
reply_check_import(const redisReply *reply, long long n, long long counts[3],
				   char *why, size_t size)
{
	static const char *const names[3] = {"recorded", "already recorded", "outside the window"};
	long long	sum = 0;

	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 3)
	{
		snprintf(why, size, "The import reply is %s, not an array of 3 integers.",
				 reply_type_name(reply));
		return false;
	}
	for (int i = 0; i < 3; i++)
	{
		const redisReply *e = reply->element[i];

		if (e->type != REDIS_REPLY_INTEGER || e->integer < 0 || e->integer > n)
		{
			snprintf(why, size, "Field \"%s\" of the import reply is not an integer from 0 to %lld.",
					 names[i], n);
			return false;
		}
		counts[i] = e->integer;
		sum += e->integer;
	}
	if (sum != n)
	{
		snprintf(why, size, "The import reply accounts for %lld entries, but %lld were sent.",
				 sum, n);
		return false;
	}
	return true;
}

bool
reply_check_settle(const redisReply *rep, int m, bool confirm, char *why,
				   size_t whysize)
{
	const char *what = confirm ? "confirm" : "cancel";

	if (rep->type != REDIS_REPLY_ARRAY)
		return refuse(why, whysize, "The %s reply of rl_attempt_all's reservations is %s, not an array of %d integers.",
					  what, reply_type_name(rep), m);
	if (rep->elements != (size_t) m)
		return refuse(why, whysize, "The %s reply of rl_attempt_all's reservations has %zu elements, not %d (one for each key of the slot).",
					  what, rep->elements, m);
	for (int k = 0; k < m; k++)
	{
		const redisReply *e = rep->element[k];

		if (e->type != REDIS_REPLY_INTEGER || (e->integer != 0 && e->integer != 1))
			return refuse(why, whysize, "Element %d of the %s reply of rl_attempt_all's reservations is not 0 or 1.",
						  k + 1, what);
	}
	return true;
}
