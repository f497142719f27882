/*-------------------------------------------------------------------------
 *
 * policy.c
 *		The failure policy: what a call does when Redis cannot answer, and
 *		the circuit breaker that keeps a dead Redis from costing every call
 *		a connection attempt.
 *
 * The setting slidewin.on_redis_error is superuser-only; a call site may
 * choose for its own call through an on_redis_error argument, which governs
 * nothing but that call. This file decides; it never formats a Redis
 * command (the stores do).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "carry.h"
#include "deny_cache.h"
#include "fallback.h"
#include "fallback_all.h"
#include "local_batch.h"
#include "local_batch_fallback.h"
#include "misconf.h"
#include "outage.h"
#include "outage_log.h"
#include "policy.h"
#include "settings.h"
#include "stats.h"
#include "store_redis.h"


int
policy_from_name(const char *name, const char *argname)
{
	if (name == NULL)
		return slidewin_on_redis_error;
	for (int i = 0; policy_options[i].name; i++)
		if (strcmp(name, policy_options[i].name) == 0)
			return policy_options[i].val;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("argument \"%s\" must be one of fallback, allow, deny, error", argname),
			 errdetail("Got \"%s\".", name)));
	return POLICY_ERROR;		/* keep compiler quiet */
}

/*
 * Circuit breaker: after a failure this backend leaves Redis alone for
 * slidewin.redis_retry_interval, so that a dead Redis costs one connection
 * attempt per interval, not one per call. The failure time is kept rather
 * than a deadline, so that a changed interval takes effect at once. A
 * failure belongs to the target it happened on: once slidewin.redis_url
 * (or anything else that says where to connect) changes, the breaker is
 * clean again.
 */
static TimestampTz redis_failed_at = 0;
static bool redis_has_failed = false;
static uint64 redis_failed_generation = 0;
static RedisStatus last_failure_status = RS_FAIL_CONNECT;
static char last_failure[256];

bool
policy_redis_may_be_tried(RedisResult *r)
{
	r->cause = RC_NONE;
	/* Under Redis Cluster each node has its breaker (redis_cluster.c). */
	if (redis_target_is_cluster())
		return true;
	if (redis_has_failed && redis_failed_generation != redis_target_generation)
		redis_has_failed = false;
	if (!redis_has_failed ||
		GetCurrentTimestamp() >= TimestampTzPlusMilliseconds(redis_failed_at,
															 slidewin_redis_retry_interval))
		return true;
	r->status = last_failure_status;
	r->reply = NULL;
	snprintf(r->message, sizeof(r->message),
			 "%s (not retried until slidewin.redis_retry_interval has passed)",
			 last_failure);
	return false;
}

void
policy_redis_failed(const RedisResult *r)
{
	misconf_warn(r);
	outage_log_failed(r);
	stats_redis_failed(r->status == RS_FAIL_TIMEOUT);
	/* Under Cluster the breakers are per node (redis_cluster.c). */
	if (!redis_target_is_cluster() && slidewin_redis_retry_interval > 0)
		stats_breaker_trip();
	last_failure_status = r->status;
	strlcpy(last_failure, r->message, sizeof(last_failure));
	redis_failed_at = GetCurrentTimestamp();
	redis_has_failed = true;
	redis_failed_generation = redis_target_generation;
}

void
policy_unavailable_error(const RedisResult *r)
{
	if (r->status == RS_FAIL_PROTOCOL)
		ereport(ERROR,
				(errcode(ERRCODE_PROTOCOL_VIOLATION),
				 errmsg("slidewin received an invalid reply from Redis"),
				 errdetail_internal("%s", r->message)));
	ereport(ERROR,
			(errcode(r->status == RS_FAIL_CONNECT ?
					 ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION :
					 ERRCODE_CONNECTION_FAILURE),
			 errmsg("slidewin could not reach Redis"),
			 errdetail_internal("%s", r->message)));
}

int64
policy_redis_retry_us(void)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz retry_at;

	if (!redis_has_failed)
		return 0;
	retry_at = TimestampTzPlusMilliseconds(redis_failed_at, slidewin_redis_retry_interval);
	return retry_at > now ? retry_at - now : 0;
}

/* The outcome of the allow and deny policies: no store was consulted. */
static void
policy_outcome(bool allowed, RlOutcome *o)
{
	o->allowed = allowed;
	o->known = false;
	o->remaining = 0;
	o->reset_at_us = 0;
	o->used = 0;
	o->store = "none";
	o->retry_us = 0;
	o->recorded_ts = -1;
	o->shadowed = false;
	if (!allowed)
		o->retry_us = policy_redis_retry_us();
}

/*
 * Set once this backend has written to the fallback store. The store cleans
 * itself while it is used; when Redis answers again, this backend finishes
 * the job a heap page of each table per call, so that the rows of an outage do not
 * outlive their windows. Read-only transactions sweep too, as they write
 * fallback rows: both are the limiter's own bookkeeping in an unlogged
 * table, not the user's data (README, "When Redis cannot answer").
 */
static bool fallback_dirty = false;

static void
after_redis_success(void)
{
	if (fallback_dirty && !RecoveryInProgress())
		fallback_dirty = fallback_sweep(1);
}

void
policy_run(int policy, const RlArgs *args, RlOutcome *o,
		   RedisOp redis_op, FallbackOp fallback_op)
{
	RedisResult r;

	/*
	 * A call that may use a local batch takes its units from a live one of
	 * its key, or asks Redis for one if its key is called often enough on
	 * this server, or goes alone (local_batch.c). The units of a live
	 * batch were counted by Redis, whether it answers now or not.
	 */
	if (redis_op == redis_store_attempt && local_batch_applies(args))
	{
		bool		reserve;
		bool		served = local_batch_take(args, o, &reserve);

		/* an ended fallback batch of the key gives its rest back (rule 6) */
		local_batch_give_back_fallback(args);
		if (served)
			return;
		if (reserve)
			redis_op = local_batch_reserve;
	}

	if (policy_redis_may_be_tried(&r))
	{
		int64		asked_at = outage_clock();
		bool		decides = (redis_op == redis_store_attempt ||
							   redis_op == local_batch_reserve);

		/*
		 * The fallback store's admissions of the key reach Redis before
		 * Redis decides (carry.c); a peek decides nothing and only reads,
		 * so that it is answered even by a Redis that refuses writes. What
		 * Redis then counted is kept for the fallback store, should the
		 * next call need it, and the admissions of one other key follow,
		 * whatever becomes of them.
		 */
		if (decides)
			outage_asking(args);
		if ((!decides || outage_carry(args, &r)) && redis_op(args, o, &r))
		{
			outage_remember(args, asked_at, o);
			outage_answered();
			outage_carry_end();
			if (decides)
				outage_carry_other();
			outage_log_answered();
			after_redis_success();
			return;
		}
		outage_answered();
		outage_carry_end();
		policy_redis_failed(&r);
	}

	/*
	 * The fallback store cannot see what Redis counted, but it must not
	 * admit a call Redis has just denied (deny_cache.c, "Known denials").
	 */
	if (policy == POLICY_FALLBACK && deny_cache_known_denial(args, o))
	{
		outage_log_answer(OUTAGE_KNOWN_DENIAL, &r);
		return;
	}

	/*
	 * A hot standby cannot write its unlogged tables (they have no data
	 * there), so the fallback becomes what slidewin.standby_fallback says.
	 */
	if (policy == POLICY_FALLBACK && RecoveryInProgress())
	{
		policy = slidewin_standby_fallback;
		if (policy == POLICY_ERROR)
			outage_log_answer(OUTAGE_ERROR, &r);
		if (policy == POLICY_ERROR)
			ereport(ERROR,
					(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
					 errmsg("slidewin cannot use its fallback store on a standby"),
					 errdetail_internal("%s", r.message),
					 errhint("Set slidewin.standby_fallback to allow or deny to choose the answer a standby gives while Redis cannot answer.")));
	}

	switch (policy)
	{
		case POLICY_FALLBACK:
			outage_log_answer(OUTAGE_FALLBACK, &r);
			fallback_dirty = true;
			/* a batch the call asked Redis for is reserved there instead */
			if (redis_op == local_batch_reserve && fallback_op == outage_fallback_attempt)
				local_batch_reserve_fallback(args, o);
			else
				fallback_op(args, o);
			break;
		case POLICY_ALLOW:
			outage_log_answer(OUTAGE_ALLOW, &r);
			policy_outcome(true, o);
			break;
		case POLICY_DENY:
			outage_log_answer(OUTAGE_DENY, &r);
			policy_outcome(false, o);
			break;
		default:
			outage_log_answer(OUTAGE_ERROR, &r);
			policy_unavailable_error(&r);
	}
}

/*
 * rl_attempt_all. Redis decides every key in one script, or no key is
 * decided by it: the failure policy then answers for the whole call, the
 * fallback store keeping the all-or-nothing rule inside the transaction
 * (fallback_all.c). Each key is treated as rl_attempt treats its one: in
 * flight while Redis decides, its fallback admissions carried into Redis
 * before, and what Redis counted for it kept in the outage memory after,
 * standing in for its fallback rows only if its own carry was complete.
 * The deny cache is consulted and filled by the caller
 * (enforce_charge_all), key by key.
 */
void
policy_run_all(int policy, int n, const RlArgs *args, RlOutcome *o)
{
	RedisResult r;

	if (policy_redis_may_be_tried(&r))
	{
		int64		asked_at = outage_clock();

		/*
		 * What the fallback store admitted of any of the keys during an
		 * outage reaches Redis before Redis decides (carry.c), as for
		 * rl_attempt: else Redis would decide without those units.
		 */
		outage_asking_all(n, args);
		if (outage_carry_all(n, args, &r) && redis_store_attempt_all(n, args, o, &r))
		{
			outage_remember_all(n, args, asked_at, o);
			outage_answered();
			outage_carry_end();
			outage_carry_other();
			outage_log_answered();
			after_redis_success();
			return;
		}
		outage_answered();
		outage_carry_end();
		policy_redis_failed(&r);
	}
	if (policy == POLICY_FALLBACK && RecoveryInProgress())
		policy = slidewin_standby_fallback;
	switch (policy)
	{
		case POLICY_ALLOW:
			outage_log_answer(OUTAGE_ALLOW, &r);
			for (int i = 0; i < n; i++)
				policy_outcome(true, &o[i]);
			break;
		case POLICY_DENY:
			outage_log_answer(OUTAGE_DENY, &r);
			for (int i = 0; i < n; i++)
				policy_outcome(false, &o[i]);
			break;
		case POLICY_FALLBACK:
			outage_log_answer(OUTAGE_FALLBACK, &r);
			fallback_dirty = true;
			outage_fallback_attempt_all(n, args, o);
			break;
		default:
			outage_log_answer(OUTAGE_ERROR, &r);
			policy_unavailable_error(&r);
	}
}
