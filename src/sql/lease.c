/*-------------------------------------------------------------------------
 *
 * lease.c
 *		Concurrency slots: rl_acquire, rl_release, rl_renew, rl_holders.
 *
 * A slot bounds work in flight rather than arrivals: at most `max`
 * transactions hold one of a key's slots at once, across every server that
 * shares the Redis, and a slot is held until the top-level transaction
 * ends, however it ends.
 *
 * In Redis a key's holders are a sorted set (scripts.c): each member names
 * one holding, and its score is when the holding's lease ends, on the Redis
 * clock. A holding's name is this backend's random 64-bit nonce (drawn once
 * per backend from pg_strong_random), its pid and a counter of its
 * acquisitions, so two backends, two servers or two transactions never
 * collide. The release is queued with the refunds (refund.c), so it goes
 * out at COMMIT and at ROLLBACK (or at the ROLLBACK TO SAVEPOINT that undoes
 * the acquisition), pipelined, never raising, and sent again after a lost
 * connection. It is queued before the acquisition is sent, unconfirmed, so
 * that a reply lost to a timeout or an interrupt still gets its release
 * (releasing a holder Redis never added is harmless); a denial, or a
 * connection never made, takes it off. The transaction statements open a
 * connection for it when an earlier timeout dropped theirs (the utility
 * hook below; refund.c does the same at pre-commit and at backend exit).
 * Different max on one key: each call's max admits or denies it; a holder
 * acquiring again is renewed whatever max it passes (doc/semantics.md).
 * A release that is lost anyway (kill -9, a crash, a network
 * cut) is ended by the lease: a slot stays taken at most `lease` after its
 * holder died. A transaction that needs its slot longer renews it with
 * rl_renew(key) (or by acquiring the key again); nothing renews behind the
 * caller's back, so a holder that stopped making progress loses its slot
 * when its lease says, not never.
 *
 * A denied call with a timeout waits on the key's wake-up list (BLPOP),
 * onto which each release pushes one token: one waiter wakes as soon as a
 * slot is released, and the wait is also cut at the first lease's end,
 * when a slot may free without a release. Each BLPOP lasts at most a
 * second; its reply may take that long on top of slidewin.command_timeout.
 *
 * When Redis cannot answer, the call's failure policy decides (rl_renew,
 * which has no argument for it, follows slidewin.on_redis_error). The
 * fallback store's slots, in PostgreSQL's lock manager, are
 * lease_fallback.c's.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "enforce.h"
#include "lease.h"
#include "lease_fallback.h"
#include "settings.h"
#include "stats.h"
#include "store_redis.h"
#include "switch.h"

PG_FUNCTION_INFO_V1(slidewin_acquire);
PG_FUNCTION_INFO_V1(slidewin_release);
PG_FUNCTION_INFO_V1(slidewin_renew);
PG_FUNCTION_INFO_V1(slidewin_holders);

/* The most slots a key may have. */
#define RL_MAX_SLOTS 10000
/* The longest BLPOP of a wait (the loop checks the deadline between them). */
#define BLPOP_MAX_MS 1000

static uint64 backend_nonce = 0;
static uint64 acquisitions = 0;

static ProcessUtility_hook_type prev_process_utility = NULL;

/* ---------------------------------------------------------------------
 * Arguments
 * ---------------------------------------------------------------------
 */

static void
null_check(FunctionCallInfo fcinfo, int argno, const char *name)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"%s\" must not be null", name)));
}

/* An interval argument in microseconds: no months, within [lo, hi]. */
static int64
interval_arg(FunctionCallInfo fcinfo, int argno, const char *name, int64 lo, int64 hi)
{
	Interval   *iv;
	int64		us;

	null_check(fcinfo, argno, name);
	iv = PG_GETARG_INTERVAL_P(argno);
	if (iv->month != 0 || iv->day < -1 || iv->day > 366 ||
		(us = (int64) iv->day * USECS_PER_DAY + iv->time) < lo || us > hi)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" must be between %s and %s, without months", name,
						lo == 0 ? "0" : "1 millisecond",
						hi == RL_MAX_LEASE_US ? "1 day" : "1 hour")));
	return us;
}

static void
key_arg(FunctionCallInfo fcinfo, RlArgs *key)
{
	memset(key, 0, sizeof(RlArgs));
	null_check(fcinfo, 0, "key");
	limit_check_key(fcinfo, 0, key);
}

/* ---------------------------------------------------------------------
 * Holder names
 * ---------------------------------------------------------------------
 */

static char *
new_holder(void)
{
	if (backend_nonce == 0)
	{
		if (!pg_strong_random(&backend_nonce, sizeof(backend_nonce)))
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("could not generate a random holder name")));
		backend_nonce |= 1;		/* never 0, which means "not drawn" */
	}
	acquisitions++;
	return psprintf("%016llx:%d:%llu", (unsigned long long) backend_nonce, MyProcPid,
					(unsigned long long) acquisitions);
}

/* ---------------------------------------------------------------------
 * Transaction statements
 * ---------------------------------------------------------------------
 */

/*
 * COMMIT, ROLLBACK (to a savepoint, too) and PREPARE as statements: the
 * releases they end with are sent from callbacks that cannot connect, so
 * a connection that an earlier timeout dropped is opened here, before the
 * statement runs (refund.c). This also runs in an aborted transaction,
 * whose releases were queued when it aborted.
 */
static void
lease_process_utility(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
					  ProcessUtilityContext context, ParamListInfo params,
					  QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *parsetree = pstmt->utilityStmt;

	if (IsA(parsetree, TransactionStmt))
	{
		switch (((TransactionStmt *) parsetree)->kind)
		{
			case TRANS_STMT_COMMIT:
			case TRANS_STMT_ROLLBACK:
			case TRANS_STMT_ROLLBACK_TO:
			case TRANS_STMT_PREPARE:
				refund_before_xact_end();
				break;
			default:
				break;
		}
	}
	if (prev_process_utility)
		prev_process_utility(pstmt, queryString, readOnlyTree, context, params,
							 queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context, params,
								queryEnv, dest, qc);
}

void
lease_init(void)
{
	lease_fallback_init();
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = lease_process_utility;
}

/* ---------------------------------------------------------------------
 * Redis
 * ---------------------------------------------------------------------
 */

/*
 * One BLPOP of wait_ms on the key's wake-up list. Its reply is allowed
 * wait_ms more than command_timeout, plus the 100 ms by which Redis may
 * overrun a blocking command's timeout (it checks them ten times a second
 * by default); an interrupt still ends the wait at once (the connection is
 * then dropped, as for any command cut short).
 */
static bool
sem_wait(const RlArgs *key, int wait_ms, bool *woken, RedisResult *r)
{
	int			saved = slidewin_command_timeout;
	bool		ok;

	slidewin_command_timeout = saved + wait_ms + 100;
	PG_TRY();
	{
		ok = redis_store_sem_wait(key, wait_ms, woken, r);
	}
	PG_FINALLY();
	{
		slidewin_command_timeout = saved;
	}
	PG_END_TRY();
	return ok;
}

/*
 * Try Redis until acquired, denied at the deadline, or Redis fails (false,
 * the cause in *r). A denial waits for a release, or for the first lease
 * to end, in BLPOPs of at most half of command_timeout.
 */
static bool
redis_acquire(const LeaseArgs *a, TimestampTz deadline, LeaseResult *res, RedisResult *r)
{
	char	   *holder = refund_held_slot(&a->key, NULL, NULL);
	bool		held = holder != NULL;

	/*
	 * The release is remembered before the first command goes out: a reply
	 * lost to command_timeout, statement_timeout or a cancel may belong to
	 * an acquisition that Redis ran, or runs later (a frozen or sleeping
	 * Redis still holds the command), and nothing else would release it.
	 * Releasing a holder that Redis does not have changes nothing.
	 */
	if (!held)
	{
		holder = new_holder();
		refund_remember_release(&a->key, holder, a->lease_us);
	}
	res->store = "redis";
	res->known = true;
	for (;;)
	{
		RlSemReply rep;
		TimestampTz now;
		int64		wait_ms;
		bool		woken;

		if (!redis_store_sem_acquire(&a->key, holder, a->max, a->lease_us, &rep, r))
		{
			/* not connected: the command never went out */
			if (!held && r->status == RS_FAIL_CONNECT)
				pfree(refund_take_slot(&a->key));
			return false;
		}
		res->holders = rep.holders;
		res->leases_ended += rep.ended;
		if (rep.acquired)
		{
			res->acquired = true;
			refund_confirm_slot(&a->key);
			return true;
		}
		res->acquired = false;
		res->wait_us = rep.wait_us;
		now = GetCurrentTimestamp();
		if (now >= deadline)
		{
			/*
			 * Every command of this call was answered, the last with a
			 * denial: Redis has no holding of this call's name.
			 */
			if (!held)
				pfree(refund_take_slot(&a->key));
			return true;
		}
		wait_ms = Min((deadline - now + 999) / 1000, (rep.wait_us + 999) / 1000);
		wait_ms = Max(Min(wait_ms, BLPOP_MAX_MS), 1);
		res->waited = true;
		if (!sem_wait(&a->key, (int) wait_ms, &woken, r))
		{
			/* every acquisition sent was answered, with a denial */
			if (!held)
				pfree(refund_take_slot(&a->key));
			return false;
		}
		CHECK_FOR_INTERRUPTS();
	}
}

/* ---------------------------------------------------------------------
 * SQL functions
 * ---------------------------------------------------------------------
 */

static Datum
lease_datum(FunctionCallInfo fcinfo, const LeaseResult *res)
{
	TupleDesc	tupdesc;
	Datum		values[3];
	bool		nulls[3] = {false, !res->known, false};

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	values[0] = BoolGetDatum(res->acquired);
	values[1] = Int64GetDatum(res->holders);
	values[2] = CStringGetTextDatum(res->store);
	return HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), values, nulls));
}

/* rl_acquire(key, max, lease, timeout, on_redis_error, raise) */
Datum
slidewin_acquire(PG_FUNCTION_ARGS)
{
	LeaseArgs	a;
	LeaseResult res;
	TimestampTz deadline;
	RedisResult r;
	int			policy;

	memset(&res, 0, sizeof(res));
	key_arg(fcinfo, &a.key);
	null_check(fcinfo, 1, "max");
	a.max = PG_GETARG_INT64(1);
	if (a.max < 1 || a.max > RL_MAX_SLOTS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"max\" must be between 1 and %d", RL_MAX_SLOTS)));
	a.lease_us = interval_arg(fcinfo, 2, "lease", 1000, RL_MAX_LEASE_US);
	a.timeout_us = interval_arg(fcinfo, 3, "timeout", 0, USECS_PER_HOUR);
	a.policy = policy_from_name(PG_ARGISNULL(4) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(4)),
								"on_redis_error");
	null_check(fcinfo, 5, "raise");
	a.raise = PG_GETARG_BOOL(5);
	deadline = GetCurrentTimestamp() + a.timeout_us;
	policy = a.policy;

	if (policy_redis_may_be_tried(&r))
	{
		if (redis_acquire(&a, deadline, &res, &r))
			goto done;
		policy_redis_failed(&r);
	}
	switch (policy)
	{
		case POLICY_FALLBACK:
			lease_fallback_acquire(&a, deadline, &res);
			break;
		case POLICY_ALLOW:
		case POLICY_DENY:
			res.acquired = policy == POLICY_ALLOW;
			res.known = false;
			res.store = "none";
			break;
		default:
			policy_unavailable_error(&r);
	}
done:
	stats_count_slot(a.max, a.lease_us, res.acquired, res.known ? res.holders : -1,
					 res.waited, res.leases_ended);
	if (!res.acquired && a.raise)
		enforce_raise_slots(&a.key, a.max, res.known ? res.holders : -1,
							!res.known ? policy_redis_retry_us() :
							res.store[0] == 'r' ? res.wait_us : -1);
	return lease_datum(fcinfo, &res);
}

/*
 * rl_release(key): whether a slot was held. It is sent now; if Redis cannot
 * take it (no answer, the breaker open), the slot stays on this
 * transaction's list and is released at COMMIT or ROLLBACK like any other,
 * on the path that is retried after a lost connection (refund.c), and the
 * lease ends it if that fails too: a release is never simply dropped.
 */
Datum
slidewin_release(PG_FUNCTION_ARGS)
{
	RlArgs		key;
	char	   *holder;
	bool		confirmed = false;
	bool		released = false;

	key_arg(fcinfo, &key);
	holder = refund_held_slot(&key, NULL, &confirmed);
	if (holder != NULL)
	{
		RedisResult r;
		int64		n = 0;
		bool		sent = false;

		/* an unconfirmed one (its reply was lost): held if Redis had it */
		released = confirmed;
		if (policy_redis_may_be_tried(&r))
		{
			if (redis_store_sem_call(SCRIPT_SEM_RELEASE, &key, holder, 0, &n, &r))
				sent = true;
			else
				policy_redis_failed(&r);
		}
		if (sent)
		{
			pfree(refund_take_slot(&key));
			if (n == 1)
				released = true;
			if (released)
				stats_slot_released(true);
		}
		else if (confirmed)
			ereport(WARNING,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("slidewin could not release a concurrency slot now"),
					 errdetail_internal("%s", r.message),
					 errhint("The slot is released when the transaction ends, or by its lease.")));
	}
	if (lease_fallback_release(&key))
		released = true;
	PG_RETURN_BOOL(released);
}

/*
 * rl_renew(key, on_redis_error): whether this transaction still held its
 * slot (its lease starts again). When Redis cannot answer, the policy
 * decides, as for rl_acquire (NULL, or a 1.8 declaration without the
 * argument: slidewin.on_redis_error): error raises;
 * allow answers true and deny false; fallback answers NULL, not known,
 * since the fallback store has no lease to renew. Each but error warns
 * that the lease runs on unrenewed: a job's transaction is not aborted by a
 * short stall, and the next rl_renew renews it.
 */
Datum
slidewin_renew(PG_FUNCTION_ARGS)
{
	RlArgs		key;
	int64		lease_us;
	char	   *holder;
	bool		confirmed = false;
	bool		in_fallback;
	RedisResult r;
	int64		n = 0;
	int			policy;

	key_arg(fcinfo, &key);
	policy = policy_from_name(PG_NARGS() > 1 && !PG_ARGISNULL(1) ?
							  text_to_cstring(PG_GETARG_TEXT_PP(1)) : NULL,
							  "on_redis_error");
	holder = refund_held_slot(&key, &lease_us, &confirmed);
	/* a fallback slot has no lease: it is held to the end */
	in_fallback = lease_fallback_mine(lease_slot_hash(&key)) >= 0;
	if (holder == NULL)
		PG_RETURN_BOOL(in_fallback);
	if (policy_redis_may_be_tried(&r))
	{
		if (redis_store_sem_call(SCRIPT_SEM_RENEW, &key, holder, lease_us, &n, &r))
		{
			if (n == 1 && !confirmed)
				refund_confirm_slot(&key);
			PG_RETURN_BOOL(n == 1 || in_fallback);
		}
		policy_redis_failed(&r);
	}
	/* the slot that counts is in the fallback store (Redis's reply was lost) */
	if (in_fallback && !confirmed)
		PG_RETURN_BOOL(true);
	if (policy == POLICY_ERROR)
		policy_unavailable_error(&r);
	ereport(WARNING,
			(errcode(ERRCODE_CONNECTION_FAILURE),
			 errmsg("slidewin could not renew a concurrency slot's lease"),
			 errdetail_internal("%s", r.message),
			 errhint("Call rl_renew again once Redis answers; until then the lease runs on.")));
	if (policy == POLICY_ALLOW)
		PG_RETURN_BOOL(true);
	if (policy == POLICY_DENY)
		PG_RETURN_BOOL(false);
	PG_RETURN_NULL();
}

/* rl_holders(key, on_redis_error): the live holders of the key's slots. */
Datum
slidewin_holders(PG_FUNCTION_ARGS)
{
	RlArgs		key;
	RedisResult r;
	int64		n = 0;
	int			policy;

	key_arg(fcinfo, &key);
	policy = policy_from_name(PG_ARGISNULL(1) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(1)),
							  "on_redis_error");
	if (policy_redis_may_be_tried(&r))
	{
		if (redis_store_sem_call(SCRIPT_SEM_HOLDERS, &key, NULL, 0, &n, &r))
			PG_RETURN_INT64(n);
		policy_redis_failed(&r);
	}
	if (policy == POLICY_FALLBACK)
		PG_RETURN_INT64(lease_fallback_holders(lease_slot_hash(&key)));
	if (policy == POLICY_ERROR)
		policy_unavailable_error(&r);
	PG_RETURN_NULL();
}
