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

#include "access/xact.h"
#include "access/xlog.h"
#include "fmgr.h"
#include "utils/guc.h"

#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "fallback.h"
#include "limit.h"
#include "redis_conn.h"
#include "store_redis.h"

PG_MODULE_MAGIC;

static char *slidewin_redis_url = NULL;

typedef enum FailurePolicy
{
	POLICY_FALLBACK,
	POLICY_ALLOW,
	POLICY_DENY,
	POLICY_ERROR
} FailurePolicy;

static const struct config_enum_entry policy_options[] = {
	{"fallback", POLICY_FALLBACK, false},
	{"allow", POLICY_ALLOW, false},
	{"deny", POLICY_DENY, false},
	{"error", POLICY_ERROR, false},
	{NULL, 0, false}
};

static int	slidewin_on_redis_error = POLICY_FALLBACK;
static int	slidewin_redis_retry_interval = 1000;

PG_FUNCTION_INFO_V1(slidewin_attempt);
PG_FUNCTION_INFO_V1(slidewin_allow);
PG_FUNCTION_INFO_V1(slidewin_peek);
PG_FUNCTION_INFO_V1(slidewin_reset);

void		_PG_init(void);

/* ---------------------------------------------------------------------
 * Settings
 * ---------------------------------------------------------------------
 */

static bool
check_redis_url(char **newval, void **extra, GucSource source)
{
	RedisTarget *t;
	const char *why = NULL;

	t = (RedisTarget *) malloc(sizeof(RedisTarget));
	if (t == NULL)
		return false;
	if (!redis_parse_url(*newval, t, &why))
	{
		free(t);
		GUC_check_errdetail("%s", why);
		return false;
	}
	*extra = t;
	return true;
}

static void
assign_redis_url(const char *newval, void *extra)
{
	redis_set_target((const RedisTarget *) extra);
}

static bool
check_key_prefix(char **newval, void **extra, GucSource source)
{
	if (strlen(*newval) > 256)
	{
		GUC_check_errdetail("The prefix must be at most 256 bytes.");
		return false;
	}
	return true;
}

static void
define_settings(void)
{
	DefineCustomStringVariable("slidewin.redis_url",
							   gettext_noop("Redis server that holds the rate limits."),
							   gettext_noop("redis://[[user]:password@]host[:port][/db] or "
											"unix://[[user]:password@]/path/to/socket[?db=N]."),
							   &slidewin_redis_url,
							   "redis://127.0.0.1:6379",
							   PGC_SUSET,
							   GUC_SUPERUSER_ONLY,
							   check_redis_url, assign_redis_url, NULL);

	DefineCustomIntVariable("slidewin.connect_timeout",
							gettext_noop("Longest wait for a connection to Redis."),
							NULL,
							&slidewin_connect_timeout,
							200, 1, 60000,
							PGC_SUSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("slidewin.command_timeout",
							gettext_noop("Longest wait for Redis to answer one command."),
							NULL,
							&slidewin_command_timeout,
							100, 1, 60000,
							PGC_SUSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomStringVariable("slidewin.key_prefix",
							   gettext_noop("Prefix of every Redis key slidewin writes."),
							   gettext_noop("Changing it changes whose quota a key draws from."),
							   &slidewin_key_prefix,
							   "slidewin:",
							   PGC_SUSET,
							   GUC_SUPERUSER_ONLY,
							   check_key_prefix, NULL, NULL);

	DefineCustomStringVariable("slidewin.test_now",
							   gettext_noop("Fixed clock for tests; empty means Redis TIME."),
							   NULL,
							   &slidewin_test_now,
							   "",
							   PGC_SUSET,
							   0,
							   NULL, NULL, NULL);

	DefineCustomEnumVariable("slidewin.on_redis_error",
							 gettext_noop("What a call does when Redis cannot answer."),
							 gettext_noop("fallback uses the table store in this database; "
										  "allow and deny answer without a store; error raises an error."),
							 &slidewin_on_redis_error,
							 POLICY_FALLBACK,
							 policy_options,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("slidewin.redis_retry_interval",
							gettext_noop("How long a backend leaves Redis alone after a failure."),
							NULL,
							&slidewin_redis_retry_interval,
							1000, 0, 3600000,
							PGC_SUSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	MarkGUCPrefixReserved("slidewin");
}

void
_PG_init(void)
{
	define_settings();
	fallback_init();
}

/* ---------------------------------------------------------------------
 * Failure policy
 *
 * What a call does when Redis cannot answer. The setting is superuser-only;
 * a call site may choose for its own call through the trailing
 * on_redis_error argument, which governs nothing but that call.
 * ---------------------------------------------------------------------
 */

/*
 * Circuit breaker: after a failure this backend leaves Redis alone for
 * slidewin.redis_retry_interval, so that a dead Redis costs one connection
 * attempt per interval, not one per call. The failure time is kept rather
 * than a deadline, so that a changed interval takes effect at once.
 */
static TimestampTz redis_failed_at = 0;
static bool redis_has_failed = false;
static RedisStatus last_failure_status = RS_FAIL_CONNECT;
static char last_failure[256];

static const char *const policy_names[] = {"fallback", "allow", "deny", "error"};

static int
call_policy(FunctionCallInfo fcinfo, int argno)
{
	char	   *name;

	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return slidewin_on_redis_error;
	name = text_to_cstring(PG_GETARG_TEXT_PP(argno));
	for (int i = 0; i < lengthof(policy_names); i++)
		if (strcmp(name, policy_names[i]) == 0)
			return i;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("argument \"on_redis_error\" must be one of fallback, allow, deny, error"),
			 errdetail("Got \"%s\".", name)));
	return POLICY_ERROR;		/* keep compiler quiet */
}

static bool
redis_may_be_tried(RedisResult *r)
{
	if (!redis_has_failed ||
		GetCurrentTimestamp() >= TimestampTzPlusMilliseconds(redis_failed_at,
															 slidewin_redis_retry_interval))
		return true;
	r->status = last_failure_status;
	snprintf(r->message, sizeof(r->message),
			 "%s (not retried until slidewin.redis_retry_interval has passed)",
			 last_failure);
	return false;
}

static void
redis_failed(const RedisResult *r)
{
	last_failure_status = r->status;
	strlcpy(last_failure, r->message, sizeof(last_failure));
	redis_failed_at = GetCurrentTimestamp();
	redis_has_failed = true;
}

static void
redis_unavailable_error(const RedisResult *r)
{
	ereport(ERROR,
			(errcode(r->status == RS_FAIL_CONNECT ?
					 ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION :
					 ERRCODE_CONNECTION_FAILURE),
			 errmsg("slidewin could not reach Redis"),
			 errdetail_internal("%s", r->message)));
}

/* The outcome of the allow and deny policies: no store was consulted. */
static void
policy_outcome(bool allowed, RlOutcome *o)
{
	TimestampTz now = GetCurrentTimestamp();

	o->allowed = allowed;
	o->known = false;
	o->remaining = 0;
	o->reset_at_us = 0;
	o->used = 0;
	o->store = "none";
	o->retry_us = 0;
	if (!allowed && redis_has_failed)
	{
		TimestampTz retry_at = TimestampTzPlusMilliseconds(redis_failed_at,
														   slidewin_redis_retry_interval);

		if (retry_at > now)
			o->retry_us = retry_at - now;
	}
}

/*
 * Set once this backend has written to the fallback store. The store cleans
 * itself while it is used; when Redis answers again, this backend finishes
 * the job a few rows per call, so that the rows of an outage do not outlive
 * their windows. Never in a read-only transaction.
 */
static bool fallback_dirty = false;

static void
after_redis_success(void)
{
	if (fallback_dirty && !XactReadOnly && !RecoveryInProgress())
		fallback_dirty = fallback_sweep(64);
}

typedef bool (*RedisOp) (const RlArgs *args, RlOutcome *o, RedisResult *r);
typedef void (*FallbackOp) (const RlArgs *args, RlOutcome *o);

static void
run_with_policy(int policy, const RlArgs *args, RlOutcome *o,
				RedisOp redis_op, FallbackOp fallback_op)
{
	RedisResult r;

	if (redis_may_be_tried(&r))
	{
		if (redis_op(args, o, &r))
		{
			after_redis_success();
			return;
		}
		redis_failed(&r);
	}

	switch (policy)
	{
		case POLICY_FALLBACK:
			fallback_dirty = true;
			fallback_op(args, o);
			break;
		case POLICY_ALLOW:
			policy_outcome(true, o);
			break;
		case POLICY_DENY:
			policy_outcome(false, o);
			break;
		default:
			redis_unavailable_error(&r);
	}
}

/* ---------------------------------------------------------------------
 * SQL functions
 * ---------------------------------------------------------------------
 */

static void
do_attempt(FunctionCallInfo fcinfo, RlOutcome *o)
{
	RlArgs		args;

	limit_check_args(fcinfo, true, &args);
	run_with_policy(call_policy(fcinfo, 4), &args, o,
					redis_store_attempt, fallback_attempt);
}

Datum
slidewin_attempt(PG_FUNCTION_ARGS)
{
	RlOutcome	o;

	do_attempt(fcinfo, &o);
	return limit_result_datum(fcinfo, &o);
}

Datum
slidewin_allow(PG_FUNCTION_ARGS)
{
	RlOutcome	o;

	do_attempt(fcinfo, &o);
	PG_RETURN_BOOL(o.allowed);
}

Datum
slidewin_peek(PG_FUNCTION_ARGS)
{
	RlArgs		args;
	RlOutcome	o;

	limit_check_args(fcinfo, false, &args);
	run_with_policy(call_policy(fcinfo, 3), &args, &o,
					redis_store_peek, fallback_peek);
	return limit_result_datum(fcinfo, &o);
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

	limit_check_key(fcinfo, 0, &args);
	fallback_reset(&args);
	if (redis_may_be_tried(&r))
	{
		if (redis_store_reset(&args, &r))
			PG_RETURN_VOID();
		redis_failed(&r);
	}
	if (slidewin_on_redis_error == POLICY_ERROR)
		redis_unavailable_error(&r);
	ereport(WARNING,
			(errcode(ERRCODE_CONNECTION_FAILURE),
			 errmsg("the Redis entries of the key were not cleared"),
			 errdetail_internal("%s", r.message)));
	PG_RETURN_VOID();
}
