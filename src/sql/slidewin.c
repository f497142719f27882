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
#include "deny_cache.h"
#include "enforce.h"
#include "fallback.h"
#include "fallback_block.h"
#include "fallback_carry.h"
#include "lease.h"
#include "limit.h"
#include "outage.h"
#include "policy.h"
#include "redis_conn.h"
#include "redis_tls.h"
#include "refund.h"
#include "scripts.h"
#include "stats.h"
#include "store_redis.h"
#include "ticket.h"

PG_MODULE_MAGIC;

static char *slidewin_redis_url = NULL;

PG_FUNCTION_INFO_V1(slidewin_attempt);
PG_FUNCTION_INFO_V1(slidewin_allow);
PG_FUNCTION_INFO_V1(slidewin_peek);
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
 * Sources whose values land in a catalog every role can read:
 * pg_db_role_setting (ALTER ROLE/DATABASE ... SET) and pg_proc.proconfig
 * (CREATE/ALTER FUNCTION ... SET), which are validated as PGC_S_TEST.
 */
static bool
source_is_catalog(GucSource source)
{
	return source == PGC_S_TEST || source == PGC_S_GLOBAL ||
		source == PGC_S_DATABASE || source == PGC_S_USER ||
		source == PGC_S_DATABASE_USER;
}

/*
 * The messages never repeat the value: it may hold a password, and the
 * default message of a failed check would print it to the client and log.
 */
static bool
check_redis_url(char **newval, void **extra, GucSource source)
{
	RedisTarget *t;
	const char *why = NULL;

	t = (RedisTarget *) slidewin_guc_malloc(sizeof(RedisTarget));
	if (t == NULL)
		return false;
	if (!redis_parse_url(*newval, t, &why))
	{
		slidewin_guc_free(t);
		GUC_check_errcode(ERRCODE_INVALID_PARAMETER_VALUE);
		GUC_check_errmsg("invalid value for parameter \"slidewin.redis_url\"");
		GUC_check_errdetail("%s", why);
		return false;
	}
	if (t->password[0] != '\0' && source_is_catalog(source))
	{
		explicit_bzero(t, sizeof(RedisTarget));
		slidewin_guc_free(t);
		GUC_check_errcode(ERRCODE_INVALID_PARAMETER_VALUE);
		GUC_check_errmsg("slidewin.redis_url must not contain a password here");
		GUC_check_errdetail("Values set with ALTER ROLE, ALTER DATABASE or a function's SET clause are stored in catalogs that every role can read.");
		GUC_check_errhint("Put the password in the file named by slidewin.redis_password_file, or set the URL in postgresql.conf.");
		return false;
	}
	*extra = t;
	return true;
}

static void
assign_redis_url(const char *newval, void *extra)
{
	redis_set_target((const RedisTarget *) extra);
	deny_cache_forget_all();
}

/* Like a password in the URL: never where every role can read it. */
static bool
check_sentinel_password(char **newval, void **extra, GucSource source)
{
	if (*newval && (*newval)[0] != '\0' && source_is_catalog(source))
	{
		GUC_check_errcode(ERRCODE_INVALID_PARAMETER_VALUE);
		GUC_check_errmsg("slidewin.redis_sentinel_password cannot be set here");
		GUC_check_errdetail("Values set with ALTER ROLE, ALTER DATABASE or a function's SET clause are stored in catalogs that every role can read.");
		GUC_check_errhint("Set it in postgresql.conf or with ALTER SYSTEM.");
		return false;
	}
	return true;
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
							   gettext_noop("redis://[[user]:password@]host[:port][/db], rediss:// (TLS), "
											"redis-sentinel://[[user]:password@]host[:port][,...]/master[/db], "
											"rediss-sentinel:// or unix://[[user]:password@]/path/to/socket[?db=N]."),
							   &slidewin_redis_url,
							   "redis://127.0.0.1:6379",
							   PGC_SUSET,
							   GUC_SUPERUSER_ONLY,
							   check_redis_url, assign_redis_url, NULL);

	DefineCustomStringVariable("slidewin.redis_password_file",
							   gettext_noop("File holding the Redis password, in libpq's .pgpass format."),
							   gettext_noop("Lines host:port:user:password, * matching any value; used when "
											"slidewin.redis_url carries no password. The file must not be "
											"readable by group or others."),
							   &slidewin_redis_password_file,
							   "",
							   PGC_SUSET,
							   GUC_SUPERUSER_ONLY,
							   NULL, assign_password_file, NULL);

	DefineCustomStringVariable("slidewin.redis_sentinel_password",
							   gettext_noop("Password of the sentinels of a redis-sentinel:// URL."),
							   gettext_noop("The URL's user and password are the master's."),
							   &slidewin_redis_sentinel_password,
							   "",
							   PGC_SUSET,
							   GUC_SUPERUSER_ONLY,
							   check_sentinel_password, assign_password_file, NULL);

	DefineCustomStringVariable("slidewin.redis_tls_ca_file",
							   gettext_noop("CA bundle that a rediss:// server's certificate must chain to."),
							   gettext_noop("Empty means the system's default trust store."),
							   &slidewin_redis_tls_ca_file,
							   "",
							   PGC_SUSET,
							   0,
							   NULL, assign_tls_file, NULL);

	DefineCustomStringVariable("slidewin.redis_tls_cert_file",
							   gettext_noop("Client certificate (PEM chain) for mutual TLS with Redis."),
							   NULL,
							   &slidewin_redis_tls_cert_file,
							   "",
							   PGC_SUSET,
							   0,
							   NULL, assign_tls_file, NULL);

	DefineCustomStringVariable("slidewin.redis_tls_key_file",
							   gettext_noop("Private key of slidewin.redis_tls_cert_file."),
							   gettext_noop("It must not be readable by group or others."),
							   &slidewin_redis_tls_key_file,
							   "",
							   PGC_SUSET,
							   0,
							   NULL, assign_tls_file, NULL);

	DefineCustomEnumVariable("slidewin.redis_tls_verify",
							 gettext_noop("How a rediss:// server's certificate is checked."),
							 gettext_noop("full: the chain and the host name; ca: the chain only; none: nothing."),
							 &slidewin_redis_tls_verify,
							 TLS_VERIFY_FULL,
							 tls_verify_options,
							 PGC_SUSET,
							 0,
							 NULL, assign_tls_verify, NULL);

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
							   check_key_prefix, assign_key_prefix, NULL);

	DefineCustomStringVariable("slidewin.test_now",
							   gettext_noop("Fixed clock for tests; empty means Redis TIME."),
							   NULL,
							   &slidewin_test_now,
							   "",
							   PGC_SUSET,
							   0,
							   NULL, NULL, NULL);

	DefineCustomIntVariable("slidewin.test_pause_lock",
							gettext_noop("For tests: an advisory lock key the fallback store waits on between reading a key and deciding."),
							gettext_noop("0 means never. A session holding pg_advisory_lock(N) stops other "
										 "sessions' fallback calls there, so that a test can change the key meanwhile."),
							&slidewin_test_pause_lock,
							0, 0, INT_MAX,
							PGC_SUSET,
							GUC_NOT_IN_SAMPLE,
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

	DefineCustomEnumVariable("slidewin.standby_fallback",
							 gettext_noop("What the fallback policy does on a hot standby while Redis cannot answer."),
							 gettext_noop("A standby cannot write the fallback store: allow or deny answer "
										  "without a store, error raises SQLSTATE 25006. Denials Redis gave "
										  "are honoured first."),
							 &slidewin_standby_fallback,
							 POLICY_ERROR,
							 standby_fallback_options,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomBoolVariable("slidewin.outage_exact",
							 gettext_noop("Keep the fallback store and Redis exact across an outage."),
							 gettext_noop("On: the fallback store counts what Redis last counted (needs shared_preload_libraries), and its admissions are carried into Redis once it answers again. Off: each store counts apart."),
							 &slidewin_outage_exact,
							 true,
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

	DefineCustomBoolVariable("slidewin.redis_functions",
							 gettext_noop("Run the deciding scripts as Redis Functions (FCALL) where the server has them."),
							 gettext_noop("On: slidewin loads its library (FUNCTION LOAD) and calls it with FCALL, which costs Redis less per call; "
										  "a server without functions, or a user not allowed them, gets EVALSHA. Off: EVALSHA always."),
							 &slidewin_redis_functions,
							 true,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomBoolVariable("slidewin.enforce",
							 gettext_noop("Whether denials are enforced; off is shadow mode."),
							 gettext_noop("In shadow mode a call that would be denied is recorded and "
										  "admitted, and reports the retry_after it would have had."),
							 &slidewin_enforce,
							 true,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomEnumVariable("slidewin.log_denials",
							 gettext_noop("Message level at which denials, and would-be denials in shadow mode, are logged."),
							 NULL,
							 &slidewin_log_denials,
							 -1,
							 log_denials_options,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomEnumVariable("slidewin.error_style",
							 gettext_noop("How rl_enforce and rl_trigger report a denial."),
							 gettext_noop("postgres raises SQLSTATE RL429 with an English detail; json "
										  "raises RL429 with a JSON detail; postgrest raises PGRST with "
										  "the JSON PostgREST turns into an HTTP 429 response."),
							 &slidewin_error_style,
							 ERROR_STYLE_POSTGRES,
							 error_style_options,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);

	/*
	 * SUSET: keys may be built from what a client must not see (an API key's
	 * row, an address), and a denial's text can reach that client.
	 */
	DefineCustomBoolVariable("slidewin.error_show_key",
							 gettext_noop("Whether a denial's message names the key."),
							 gettext_noop("The message, detail and hint of a denial can reach the client; "
										  "slidewin.log_denials names the key in the log either way."),
							 &slidewin_error_show_key,
							 false,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomBoolVariable("slidewin.refund_on_abort",
							 gettext_noop("Give back units admitted by Redis when the transaction aborts."),
							 NULL,
							 &slidewin_refund_on_abort,
							 false,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("slidewin.refund_confirm_timeout",
							gettext_noop("Longest wait at transaction abort for Redis to confirm "
										 "the refunds it sent."),
							gettext_noop("Refunds still unconfirmed then are confirmed at the "
										 "backend's next call to Redis; capped by "
										 "slidewin.command_timeout; 0 does not wait."),
							&slidewin_refund_confirm_timeout,
							50, 0, 60000,
							PGC_SUSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("slidewin.deny_cache",
							 gettext_noop("Answer a sliding_log key known to be denied until time T "
										  "from backend memory until T."),
							 gettext_noop("Needs shared_preload_libraries = 'slidewin'; without it "
										  "every call goes to Redis."),
							 &slidewin_deny_cache,
							 true,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomBoolVariable("slidewin.stats",
							 gettext_noop("Count what the limiter decides, for the rl_stats views."),
							 gettext_noop("Needs shared_preload_libraries = 'slidewin'."),
							 &slidewin_stats,
							 true,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);

	/*
	 * Sizes of shared memory: settable only at server start, and defined
	 * only when the library is preloaded (PostgreSQL refuses postmaster
	 * settings from a library loaded later).
	 */
	if (process_shared_preload_libraries_in_progress)
	{
		DefineCustomIntVariable("slidewin.stats_max_rules",
								gettext_noop("Rules (algorithm, lim, win) counted apart in rl_stats_rules."),
								gettext_noop("Rules beyond it are counted together in one overflow row."),
								&slidewin_stats_max_rules,
								1000, 0, 100000,
								PGC_POSTMASTER,
								0,
								NULL, NULL, NULL);

		DefineCustomIntVariable("slidewin.outage_keys",
								gettext_noop("Keys whose last Redis answer is kept for the fallback store; 0 turns it off."),
								gettext_noop("When Redis cannot answer, the fallback store counts the units Redis had counted for these keys."),
								&slidewin_outage_keys,
								4096, 0, 1048576,
								PGC_POSTMASTER,
								0,
								NULL, NULL, NULL);

		DefineCustomIntVariable("slidewin.track_keys",
								gettext_noop("Keys with the most denials kept in rl_top_keys; 0 turns it off."),
								NULL,
								&slidewin_track_keys,
								1000, 0, 100000,
								PGC_POSTMASTER,
								0,
								NULL, NULL, NULL);
	}

	MarkGUCPrefixReserved("slidewin");
}

void
_PG_init(void)
{
	define_settings();
	deny_cache_init();
	stats_init();
	fallback_init();
	fallback_block_init();
	refund_init();
	check_init();
	lease_init();
	outage_init();
	fallback_carry_init();
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
	return limit_result_datum(fcinfo, &args, &o);
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
	return limit_result_datum(fcinfo, &args, &o);
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
	return limit_result_datum(fcinfo, &args, &o);
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
			   redis_store_peek, fallback_peek);
	return limit_result_datum(fcinfo, &args, &o);
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
	return limit_result_datum(fcinfo, &args, &o);
}

/*
 * rl_refund(key, ticket): give back the units of the entry a ticket names,
 * now, in the store that recorded it. Idempotent: a ticket handed in twice,
 * or the entry already given back at ROLLBACK, gives back once; an entry
 * that has left its window, or that an rl_reset removed, has nothing to
 * give back (false). A Redis entry is given back at once, whatever becomes
 * of this transaction, like the entry's admission; a fallback entry with
 * this transaction, like every fallback write. When Redis cannot answer,
 * the refund cannot be made (or known to be unneeded), whatever the
 * failure policy: an ERROR, and the ticket stays good for a retry.
 */
Datum
slidewin_refund(PG_FUNCTION_ARGS)
{
	RlArgs		args;
	RlTicket	t;
	bool		given = false;

	memset(&args, 0, sizeof(args));
	limit_check_key(fcinfo, 0, &args);
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"ticket\" must not be null"),
				 errhint("A result has no ticket when it recorded nothing: a denial, an answer of the allow or deny policy, or one of the counting algorithms (sliding_counter, fixed_window, token_bucket), which keep counts, not entries.")));
	ticket_read(text_to_cstring(PG_GETARG_TEXT_PP(1)), &args, &t);
	args.algorithm = t.multi ? ALGO_MULTI_LOG : ALGO_SLIDING_LOG;
	args.cost = t.cost;
	args.win_us = t.win_us;

	if (t.fallback)
	{
		bool		carried;
		char		id[96];

		PreventCommandDuringRecovery("rl_refund of an entry of the fallback store");
		given = fallback_refund(&args, t.ts, t.cost, t.win_us, &carried);

		/*
		 * An admission already carried into Redis counts there too: it is
		 * given back there now, as a Redis entry is (whatever becomes of
		 * this transaction), or, when Redis cannot answer, not at all: an
		 * ERROR, which takes the fallback store's refund back with it.
		 */
		if (given && carried && fallback_carry_name(&args, t.ts, id, sizeof(id)))
		{
			RedisResult r;
			bool		in_redis;

			if (!policy_redis_may_be_tried(&r))
				policy_unavailable_error(&r);
			if (!redis_store_refund_imported(&args, id, t.cost, t.win_us, &in_redis, &r))
			{
				policy_redis_failed(&r);
				policy_unavailable_error(&r);
			}
		}
	}
	else
	{
		RedisResult r;

		if (!policy_redis_may_be_tried(&r))
			policy_unavailable_error(&r);
		if (!redis_store_refund_now(&args, t.ts, t.cost, t.win_us, &given, &r))
		{
			policy_redis_failed(&r);
			policy_unavailable_error(&r);
		}
	}
	/* After the refund: see deny_cache.c. */
	if (given)
	{
		deny_cache_invalidate(deny_cache_key_hash(args.key, args.keylen));
		stats_refund(true);
	}
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
	policy_run(policy, &charge, &o, redis_store_attempt, fallback_attempt);
	/* cached denials of the key may now say too little */
	deny_cache_invalidate(deny_cache_key_hash(args.key, args.keylen));

	peek = args;
	peek.cost = 1;
	peek.force = false;
	limit_outcome_judged(&peek, &p);
	policy_run(policy, &peek, &p, redis_store_peek, fallback_peek);
	if (o.entry_ts >= 0)
	{
		p.entry_ts = o.entry_ts;
		p.store = o.store;		/* the ticket names the store that recorded it */
	}
	return limit_result_datum(fcinfo, &args, &p);
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
		fallback_reset(&args);
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
