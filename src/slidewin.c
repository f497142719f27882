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

#include "fmgr.h"
#include "utils/guc.h"

#include "limit.h"
#include "redis_conn.h"
#include "store_redis.h"

PG_MODULE_MAGIC;

static char *slidewin_redis_url = NULL;

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

	MarkGUCPrefixReserved("slidewin");
}

void
_PG_init(void)
{
	define_settings();
}

/* ---------------------------------------------------------------------
 * Failure handling
 * ---------------------------------------------------------------------
 */

static void
redis_unavailable(const RedisResult *r)
{
	ereport(ERROR,
			(errcode(r->status == RS_FAIL_CONNECT ?
					 ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION :
					 ERRCODE_CONNECTION_FAILURE),
			 errmsg("slidewin could not reach Redis"),
			 errdetail_internal("%s", r->message)));
}

/* ---------------------------------------------------------------------
 * SQL functions
 * ---------------------------------------------------------------------
 */

static void
do_attempt(FunctionCallInfo fcinfo, RlOutcome *o)
{
	RlArgs		args;
	RedisResult r;

	limit_check_args(fcinfo, true, &args);
	if (!redis_store_attempt(&args, o, &r))
		redis_unavailable(&r);
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
	RedisResult r;

	limit_check_args(fcinfo, false, &args);
	if (!redis_store_peek(&args, &o, &r))
		redis_unavailable(&r);
	return limit_result_datum(fcinfo, &o);
}

Datum
slidewin_reset(PG_FUNCTION_ARGS)
{
	RlArgs		args;
	RedisResult r;

	limit_check_key(fcinfo, 0, &args);
	if (!redis_store_reset(&args, &r))
		redis_unavailable(&r);
	PG_RETURN_VOID();
}
