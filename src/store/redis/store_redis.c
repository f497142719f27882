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
 * Files: this one holds what every call shares: the Redis keys of a user
 * key, the clock argument, and the sorting of a finished exchange (a reply
 * to read, "cannot answer now", or an ERROR) and the refusal of a reply.
 * store_redis_limit.c makes the calls of the limits (attempt, peek, reset,
 * block, the carry of fallback admissions), store_redis_refund.c those of
 * the refunds, store_redis_slots.c those of the concurrency slots. They
 * use this file through store_redis_int.h, and none of them uses another.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <stdarg.h>

#include "datatype/timestamp.h"

#include "misconf.h"
#include "settings.h"
#include "store_redis.h"
#include "store_redis_int.h"

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
void
redis_store_key(StringInfo buf, const char *tag, const RlArgs *args)
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
void
redis_store_ledger_key(StringInfo buf, const char *tag, const RlArgs *args)
{
	char		ltag[16];
	size_t		len = strlen(tag);

	Assert(len + 2 <= sizeof(ltag));
	memcpy(ltag, tag, len);
	ltag[len] = 'r';
	ltag[len + 1] = '\0';
	redis_store_key(buf, ltag, args);
}

/*
 * The block of a user key (rl_block): "blk:K", whatever the algorithm, so
 * that one block denies the key in all of them. No algorithm's tag, nor a
 * ledger's, is "blk".
 */
void
redis_store_block_key(StringInfo buf, const RlArgs *args)
{
	redis_store_key(buf, "blk", args);
}

/*
 * The waiting mark of a sliding log's local batches (log_attempt.lua):
 * "logw:K", which no tag, ledger or import key is.
 */
void
redis_store_wait_key(StringInfo buf, const RlArgs *args)
{
	redis_store_key(buf, "logw", args);
}

/*
 * Sort a finished exchange: true when a reply is there to use, false when
 * Redis could not answer now. Every other failure ERRORs.
 */
bool
redis_store_settle(RedisResult *r)
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
bool
redis_store_refuse(RedisResult *r, const char *fmt,...)
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

const char *
redis_store_clock_arg(char *buf, size_t size)
{
	int64		now_us;

	if (!limit_test_clock(&now_us))
		return "";
	snprintf(buf, size, INT64_FORMAT, now_us);
	return buf;
}

/* Redis key tags, one per algorithm: no algorithm reads another's data. */
const char *const redis_store_tags[ALGO_COUNT] = {
	[ALGO_SLIDING_LOG] = "log",
	[ALGO_SLIDING_COUNTER] = "sc",
	[ALGO_FIXED_WINDOW] = "fw",
	[ALGO_TOKEN_BUCKET] = "tb",
	[ALGO_MULTI_LOG] = "mlog",
};
