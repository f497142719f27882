/*-------------------------------------------------------------------------
 *
 * store_redis_refund.c
 *		The Redis store's refunds: giving back one entry of a key's log,
 *		queued on the pipeline in abort (switch/refund_send.c) or sent at
 *		once (rl_refund, and a fallback admission carried into Redis), and
 *		the verdict on the reply.
 *
 * The keys, the clock argument and the sorting of a reply are store_redis.c's
 * (store_redis_int.h).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "store_redis.h"
#include "store_redis_int.h"

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

		snprintf(itag, sizeof(itag), "%si", redis_store_tags[args->algorithm]);
		redis_store_key(&ikey, itag, args);
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
	return redis_store_read_refund(r, given);
}

bool
redis_store_read_refund(RedisResult *r, bool *given)
{
	char		why[sizeof(r->message)];

	if (!redis_store_settle(r))
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
			return redis_store_refuse(r, "%s", why);
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

	redis_store_key(&key, redis_store_tags[args->algorithm], args);
	*log = key.data;
	*loglen = key.len;
	redis_store_ledger_key(&key, redis_store_tags[args->algorithm], args);
	*ledger = key.data;
	*ledgerlen = key.len;
}
