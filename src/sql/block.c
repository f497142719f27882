/*-------------------------------------------------------------------------
 *
 * block.c
 *		rl_block(key, duration) and rl_unblock(key): denying every call on a
 *		key until a time, and lifting that.
 *
 * A block is written to both stores, as rl_reset clears both: to Redis, which
 * every server sharing it reads, and to this database's fallback store, so
 * that it holds while Redis cannot answer (a server's fallback store knows
 * only the blocks set through that server). Redis goes first: its end,
 * which may be later than asked when a longer block was already there,
 * bounds the fallback's. When Redis cannot answer, the fallback store alone
 * is written and the caller is warned; under on_redis_error = error the
 * call fails instead, writing nothing. Redis's side is not undone by a
 * rollback; the fallback's is.
 *
 * A block extends, never shortens: rl_block keeps a block that ends later
 * than the one asked for. To shorten one, rl_unblock and block again.
 *
 * The calls themselves (every algorithm, peeks, rl_attempt_multi) meet the
 * block inside the stores: the Redis scripts (scripts.c) and fallback.c.
 * This file decides what to do when Redis cannot answer; it formats no
 * Redis command.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "fmgr.h"
#include "utils/timestamp.h"

#include "fallback_block.h"
#include "settings.h"
#include "store_redis.h"
#include "switch.h"


PG_FUNCTION_INFO_V1(slidewin_block);
PG_FUNCTION_INFO_V1(slidewin_unblock);

/*
 * Try Redis through the circuit breaker; false when it could not answer,
 * with the cause in *r. Under on_redis_error = error that is an ERROR, and
 * on a standby too, where the fallback store cannot be written: then the
 * call would change nothing.
 */
static bool
redis_done(bool ok, bool tried, RedisResult *r)
{
	if (tried && !ok)
		policy_redis_failed(r);
	if (ok)
		return true;
	if (slidewin_on_redis_error == POLICY_ERROR || RecoveryInProgress())
		policy_unavailable_error(r);
	return false;
}

/* rl_block(key text, duration interval) returns timestamptz */
Datum
slidewin_block(PG_FUNCTION_ARGS)
{
	RlArgs		args;
	RlArgs		dur;
	RedisResult r;
	int64		end_us = 0;
	bool		tried;
	bool		ok = false;

	memset(&args, 0, sizeof(args));
	limit_check_key(fcinfo, 0, &args);
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"duration\" must not be null")));
	/* a window's bounds: more than zero, at most 3650 days, no months */
	limit_set_win(PG_GETARG_INTERVAL_P(1), "duration", &dur);

	/* this server's batches of the key take no more units (local_batch.c) */
	local_batch_end_key(&args);
	tried = policy_redis_may_be_tried(&r);
	if (tried)
		ok = redis_store_block(&args, dur.win_us, &end_us, &r);
	ok = redis_done(ok, tried, &r);
	if (!RecoveryInProgress())
	{
		int64		fb_end = fallback_block_set(&args, dur.win_us, ok ? end_us : 0);

		if (!ok)
			end_us = fb_end;
	}
	/* cached denials of the key would show a retry_after before its end */
	deny_cache_invalidate(deny_cache_key_hash(args.key, args.keylen));
	if (!ok)
		ereport(WARNING,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("the block was set in the fallback store only, not in Redis"),
				 errdetail_internal("%s", r.message)));
	PG_RETURN_TIMESTAMPTZ(end_us - UNIX_TO_PG_US);
}

/* rl_unblock(key text) returns boolean: whether a block was in force */
Datum
slidewin_unblock(PG_FUNCTION_ARGS)
{
	RlArgs		args;
	RedisResult r;
	bool		tried;
	bool		ok = false;
	bool		lifted = false;

	memset(&args, 0, sizeof(args));
	limit_check_key(fcinfo, 0, &args);

	tried = policy_redis_may_be_tried(&r);
	if (tried)
		ok = redis_store_unblock(&args, &lifted, &r);
	ok = redis_done(ok, tried, &r);
	if (!RecoveryInProgress() && fallback_block_lift(&args))
		lifted = true;
	/* After Redis lifted it: an unblocked key is admitted at once (deny_cache.c). */
	deny_cache_invalidate(deny_cache_key_hash(args.key, args.keylen));
	if (!ok)
		ereport(WARNING,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("the block was lifted in the fallback store only, not in Redis"),
				 errdetail_internal("%s", r.message)));
	PG_RETURN_BOOL(lifted);
}
