/*-------------------------------------------------------------------------
 *
 * slidewin.c
 *		Module entry: _PG_init, the settings, and the SQL-callable functions.
 *
 * The SQL functions check their arguments (limit.c), ask a store, and turn
 * a store that cannot answer into the caller's chosen outcome. They never
 * format Redis commands themselves.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "access/htup_details.h"
#include "access/xlog.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "check.h"
#include "compat.h"
#include "enforce.h"
#include "fallback.h"
#include "fallback_block.h"
#include "fallback_carry.h"
#include "lease.h"
#include "local_batch.h"
#include "redis_tls.h"
#include "result.h"
#include "settings.h"
#include "stats.h"
#include "store_redis.h"
#include "switch.h"
#include "ticket.h"

PG_MODULE_MAGIC;


PG_FUNCTION_INFO_V1(slidewin_attempt);
PG_FUNCTION_INFO_V1(slidewin_allow);
PG_FUNCTION_INFO_V1(slidewin_peek);
PG_FUNCTION_INFO_V1(slidewin_batch_held);
PG_FUNCTION_INFO_V1(slidewin_reset);
PG_FUNCTION_INFO_V1(slidewin_enforce_fn);
PG_FUNCTION_INFO_V1(slidewin_wait);
PG_FUNCTION_INFO_V1(slidewin_backend_stats);
PG_FUNCTION_INFO_V1(slidewin_attempt_multi);
PG_FUNCTION_INFO_V1(slidewin_refund);
PG_FUNCTION_INFO_V1(slidewin_penalize);

void		_PG_init(void);

/* ---------------------------------------------------------------------
 * Settings
 * ---------------------------------------------------------------------
 */

/*
 * What a setting's change means to the layers above the settings: each
 * hook here tells the parts that keep state derived from it.
 */
static void
assign_redis_url(const char *newval, void *extra)
{
	redis_set_target((const RedisTarget *) extra);
	deny_cache_forget_all();
}

static void
assign_password_file(const char *newval, void *extra)
{
	redis_credentials_changed();
}

/* A TLS setting changed: a new context, and a new connection made with it. */
static void
assign_tls_file(const char *newval, void *extra)
{
	tls_settings_changed();
	redis_credentials_changed();
}

static void
assign_tls_verify(int newval, void *extra)
{
	tls_settings_changed();
	redis_credentials_changed();
}

/* Denials cached under the old prefix are about other Redis keys. */
static void
assign_key_prefix(const char *newval, void *extra)
{
	deny_cache_forget_all();
}

static const SettingsHooks settings_hooks = {
	.check_redis_url = redis_check_url_setting,
	.assign_redis_url = assign_redis_url,
	.assign_credentials = assign_password_file,
	.assign_tls_file = assign_tls_file,
	.assign_tls_verify = assign_tls_verify,
	.assign_key_prefix = assign_key_prefix,
};

void
_PG_init(void)
{
	settings_define(&settings_hooks);
	deny_cache_init();
	stats_init();
	fallback_init();
	fallback_block_init();
	refund_init();
	check_init();
	lease_init();
	carry_init();			/* before outage_init: see carry.h */
	outage_init();
	outage_log_init();
	fallback_carry_init();
	local_batch_init();
}

/* ---------------------------------------------------------------------
 * SQL functions
 *
 * Optional trailing arguments are read by position; each function's SQL
 * declaration fixes them.
 * ---------------------------------------------------------------------
 */

static const char *
opt_text(FunctionCallInfo fcinfo, int argno)
{
	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return NULL;
	return text_to_cstring(PG_GETARG_TEXT_PP(argno));
}

static bool
opt_refund(FunctionCallInfo fcinfo, int argno)
{
	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return slidewin_refund_on_abort;
	return PG_GETARG_BOOL(argno);
}

/*
 * rl_attempt, rl_allow, rl_enforce:
 * (key, lim, win, cost, on_redis_error, refund_on_abort, algorithm)
 */
static void
do_attempt(FunctionCallInfo fcinfo, RlArgs *args, RlOutcome *o)
{
	limit_check_args(fcinfo, true, args);
	args->algorithm = limit_algorithm(opt_text(fcinfo, 6));
	enforce_charge(args, policy_from_name(opt_text(fcinfo, 4), "on_redis_error"),
				   opt_refund(fcinfo, 5), o);
}

Datum
slidewin_attempt(PG_FUNCTION_ARGS)
{
	RlArgs		args;
	RlOutcome	o;

	do_attempt(fcinfo, &args, &o);
	return result_datum(fcinfo, &args, &o);
}

Datum
slidewin_allow(PG_FUNCTION_ARGS)
{
	RlArgs		args;
	RlOutcome	o;

	do_attempt(fcinfo, &args, &o);
	PG_RETURN_BOOL(o.allowed);
}

Datum
slidewin_enforce_fn(PG_FUNCTION_ARGS)
{
	RlArgs		args;
	RlOutcome	o;

	do_attempt(fcinfo, &args, &o);
	if (!o.allowed)
		enforce_raise_denied(&args, &o);
	return result_datum(fcinfo, &args, &o);
}

/* rl_wait(key, lim, win, cost, timeout, on_redis_error, refund_on_abort, algorithm) */
Datum
slidewin_wait(PG_FUNCTION_ARGS)
{
	RlArgs		args;
	RlOutcome	o;
	Interval   *timeout;
	int64		timeout_us;

	limit_check_args(fcinfo, true, &args);
	args.algorithm = limit_algorithm(opt_text(fcinfo, 7));
	if (PG_ARGISNULL(4))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"timeout\" must not be null")));
	timeout = PG_GETARG_INTERVAL_P(4);
	if (timeout->month != 0 || timeout->day > 366 || timeout->day < 0 ||
		(timeout_us = (int64) timeout->day * USECS_PER_DAY + timeout->time) < 0 ||
		timeout_us > (int64) 366 * USECS_PER_DAY)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"timeout\" must be between 0 and 366 days, without months")));
	enforce_wait(&args, policy_from_name(opt_text(fcinfo, 5), "on_redis_error"),
				 opt_refund(fcinfo, 6), timeout_us, &o);
	return result_datum(fcinfo, &args, &o);
}

/* rl_peek(key, lim, win, on_redis_error, algorithm) */
Datum
slidewin_peek(PG_FUNCTION_ARGS)
{
	RlArgs		args;
	RlOutcome	o;

	limit_check_args(fcinfo, false, &args);
	args.algorithm = limit_algorithm(opt_text(fcinfo, 4));
	limit_outcome_judged(&args, &o);
	policy_run(policy_from_name(opt_text(fcinfo, 3), "on_redis_error"), &args, &o,
			   redis_store_peek, outage_fallback_peek);
	return result_datum(fcinfo, &args, &o);
}

/*
 * rl_batch_held(key, lim, win): the units this server's local batches of the
 * key hold unused (rl_peek counts them as used, as Redis does).
 */
Datum
slidewin_batch_held(PG_FUNCTION_ARGS)
{
	RlArgs		args;

	limit_check_args(fcinfo, false, &args);
	args.algorithm = ALGO_SLIDING_LOG;
	PG_RETURN_INT64(local_batch_held(&args));
}

/* rl_attempt_multi(key, lims, wins, cost, on_redis_error, refund_on_abort) */
Datum
slidewin_attempt_multi(PG_FUNCTION_ARGS)
{
	RlArgs		args;
	RlOutcome	o;

	limit_check_multi(fcinfo, &args);
	enforce_charge(&args, policy_from_name(opt_text(fcinfo, 4), "on_redis_error"),
				   opt_refund(fcinfo, 5), &o);
	return result_datum(fcinfo, &args, &o);
}

/*
 * rl_refund(key, ticket): give back the units of the entry a ticket names,
 * now, in the store that recorded it (ticket_give_back says how).
 */
Datum
slidewin_refund(PG_FUNCTION_ARGS)
{
	RlArgs		args;
	RlTicket	t;
	bool		given;

	memset(&args, 0, sizeof(args));
	limit_check_key(fcinfo, 0, &args);
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"ticket\" must not be null"),
				 errhint("A result has no ticket when it recorded nothing: a denial, an answer of the allow or deny policy, or one of the counting algorithms (sliding_counter, fixed_window, token_bucket), which keep counts, not entries.")));
	ticket_read(text_to_cstring(PG_GETARG_TEXT_PP(1)), &args, &t);
	given = ticket_give_back(&args, &t);
	PG_RETURN_BOOL(given);
}

/*
 * rl_penalize(key, lim, win, cost, on_redis_error): record cost units on
 * the key's sliding log even over the limit (as shadow mode records a
 * would-be denial), then report the key as rl_peek sees it afterwards,
 * with the penalty's ticket (so that it can be forgiven with rl_refund).
 * cost may exceed lim: the key then stays denied until the penalty leaves
 * the window.
 */
Datum
slidewin_penalize(PG_FUNCTION_ARGS)
{
	RlArgs		args;
	RlArgs		charge;
	RlArgs		peek;
	RlOutcome	o;
	RlOutcome	p;
	int64		cost;
	int			policy;

	limit_check_args(fcinfo, false, &args);
	if (PG_ARGISNULL(3))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"cost\" must not be null")));
	cost = PG_GETARG_INT64(3);
	if (cost < 1 || cost > RL_MAX_LIMIT)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"cost\" must be between 1 and " INT64_FORMAT, RL_MAX_LIMIT)));
	args.cost = cost;
	args.force = true;
	args.algorithm = ALGO_SLIDING_LOG;
	policy = policy_from_name(opt_text(fcinfo, 4), "on_redis_error");

	/*
	 * Recorded whatever it meets. A limit of at least cost keeps the
	 * store's arithmetic for the call itself (its retry_after, which this
	 * reports nothing of) defined when cost exceeds lim.
	 */
	charge = args;
	charge.lim = Max(args.lim, cost);
	limit_outcome_judged(&charge, &o);
	policy_run(policy, &charge, &o, redis_store_attempt, outage_fallback_attempt);
	/* cached denials of the key may now say too little */
	deny_cache_invalidate(deny_cache_key_hash(args.key, args.keylen));

	peek = args;
	peek.cost = 1;
	peek.force = false;
	limit_outcome_judged(&peek, &p);
	policy_run(policy, &peek, &p, redis_store_peek, outage_fallback_peek);
	if (o.entry_ts >= 0)
	{
		p.entry_ts = o.entry_ts;
		p.store = o.store;		/* the ticket names the store that recorded it */
	}
	return result_datum(fcinfo, &args, &p);
}

/*
 * Forget the key in both stores. The fallback rows go with this transaction;
 * if Redis cannot be reached its entries stay, and the caller is warned
 * (or, under the error policy, the whole reset fails).
 */
Datum
slidewin_reset(PG_FUNCTION_ARGS)
{
	RlArgs		args;
	RedisResult r;

	bool		done = false;

	limit_check_key(fcinfo, 0, &args);
	/* A standby's fallback store is empty, and cannot be written. */
	if (!RecoveryInProgress())
	{
		fallback_reset(&args);
		outage_forget(&args);
	}
	local_batch_end_key(&args);
	if (policy_redis_may_be_tried(&r))
	{
		done = redis_store_reset(&args, &r);
		if (!done)
			policy_redis_failed(&r);
	}
	/* After the DEL: see deny_cache.c. */
	deny_cache_invalidate(deny_cache_key_hash(args.key, args.keylen));
	if (done)
		PG_RETURN_VOID();
	if (slidewin_on_redis_error == POLICY_ERROR)
		policy_unavailable_error(&r);
	ereport(WARNING,
			(errcode(ERRCODE_CONNECTION_FAILURE),
			 errmsg("the Redis entries of the key were not cleared"),
			 errdetail_internal("%s", r.message)));
	PG_RETURN_VOID();
}

/* rl_backend_stats(): this backend's refund counters, after settling its refunds in flight. */
Datum
slidewin_backend_stats(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[2];
	bool		nulls[2] = {false, false};

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	/* Refunds in flight are settled first, so that the counts are current. */
	refund_settle();
	values[0] = Int64GetDatum(refund_done_count);
	values[1] = Int64GetDatum(refund_dropped_count);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), values, nulls)));
}
