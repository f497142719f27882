/*-------------------------------------------------------------------------
 *
 * settings.c
 *		Every slidewin.* setting, defined in one place (settings.h says why
 *		here): the variables with their defaults, the values of the enums,
 *		the checks that need only the value, and the definitions.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/guc.h"

#include "compat.h"
#include "settings.h"

char	   *slidewin_redis_url = NULL;
char	   *slidewin_redis_password_file = NULL;
char	   *slidewin_redis_sentinel_password = NULL;
char	   *slidewin_redis_tls_ca_file = NULL;
char	   *slidewin_redis_tls_cert_file = NULL;
char	   *slidewin_redis_tls_key_file = NULL;
int			slidewin_redis_tls_verify = TLS_VERIFY_FULL;
int			slidewin_connect_timeout = 200;
int			slidewin_command_timeout = 100;
int			slidewin_redis_retry_interval = 1000;

char	   *slidewin_key_prefix = NULL;
bool		slidewin_redis_functions = true;

char	   *slidewin_test_now = NULL;
int			slidewin_test_pause_lock = 0;

int			slidewin_on_redis_error = POLICY_FALLBACK;
int			slidewin_standby_fallback = POLICY_ERROR;
bool		slidewin_outage_exact = true;
int			slidewin_fallback_heads = FALLBACK_HEADS_CONTENDED;
int			slidewin_outage_keys = 4096;
bool		slidewin_deny_cache = true;
int			slidewin_local_batch = 0;
int			slidewin_local_batch_time = 20;
bool		slidewin_refund_on_abort = false;
int			slidewin_refund_confirm_timeout = 50;
int			slidewin_outage_log_interval = 60000;

bool		slidewin_enforce = true;
int			slidewin_log_denials = -1;
int			slidewin_error_style = ERROR_STYLE_POSTGRES;
bool		slidewin_error_show_key = false;

bool		slidewin_stats = true;
int			slidewin_stats_max_rules = 1000;
int			slidewin_track_keys = 1000;

const struct config_enum_entry tls_verify_options[] = {
	{"full", TLS_VERIFY_FULL, false},
	{"ca", TLS_VERIFY_CA, false},
	{"none", TLS_VERIFY_NONE, false},
	{NULL, 0, false}
};

const struct config_enum_entry policy_options[] = {
	{"fallback", POLICY_FALLBACK, false},
	{"allow", POLICY_ALLOW, false},
	{"deny", POLICY_DENY, false},
	{"error", POLICY_ERROR, false},
	{NULL, 0, false}
};

/* What the fallback policy means on a hot standby, where no store can write. */
const struct config_enum_entry fallback_heads_options[] = {
	{"contended", FALLBACK_HEADS_CONTENDED, false},
	{"always", FALLBACK_HEADS_ALWAYS, false},
	{NULL, 0, false}
};

const struct config_enum_entry standby_fallback_options[] = {
	{"allow", POLICY_ALLOW, false},
	{"deny", POLICY_DENY, false},
	{"error", POLICY_ERROR, false},
	{NULL, 0, false}
};

/* -1 means off: no message at all. */
const struct config_enum_entry log_denials_options[] = {
	{"off", -1, false},
	{"debug", DEBUG1, false},
	{"log", LOG, false},
	{"info", INFO, false},
	{"notice", NOTICE, false},
	{"warning", WARNING, false},
	{NULL, 0, false}
};

const struct config_enum_entry error_style_options[] = {
	{"postgres", ERROR_STYLE_POSTGRES, false},
	{"postgrest", ERROR_STYLE_POSTGREST, false},
	{"json", ERROR_STYLE_JSON, false},
	{NULL, 0, false}
};

/*
 * Sources whose values land in a catalog every role can read:
 * pg_db_role_setting (ALTER ROLE/DATABASE ... SET) and pg_proc.proconfig
 * (CREATE/ALTER FUNCTION ... SET), which are validated as PGC_S_TEST.
 */
bool
settings_source_is_catalog(GucSource source)
{
	return source == PGC_S_TEST || source == PGC_S_GLOBAL ||
		source == PGC_S_DATABASE || source == PGC_S_USER ||
		source == PGC_S_DATABASE_USER;
}

/* Like a password in the URL: never where every role can read it. */
static bool
check_sentinel_password(char **newval, void **extra, GucSource source)
{
	if (*newval && (*newval)[0] != '\0' && settings_source_is_catalog(source))
	{
		GUC_check_errcode(ERRCODE_INVALID_PARAMETER_VALUE);
		GUC_check_errmsg("slidewin.redis_sentinel_password cannot be set here");
		GUC_check_errdetail("Values set with ALTER ROLE, ALTER DATABASE or a function's SET clause are stored in catalogs that every role can read.");
		GUC_check_errhint("Set it in postgresql.conf or with ALTER SYSTEM.");
		return false;
	}
	return true;
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

void
settings_define(const SettingsHooks *hooks)
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
							   hooks->check_redis_url, hooks->assign_redis_url, NULL);

	DefineCustomStringVariable("slidewin.redis_password_file",
							   gettext_noop("File holding the Redis password, in libpq's .pgpass format."),
							   gettext_noop("Lines host:port:user:password, * matching any value; used when "
											"slidewin.redis_url carries no password. The file must not be "
											"readable by group or others."),
							   &slidewin_redis_password_file,
							   "",
							   PGC_SUSET,
							   GUC_SUPERUSER_ONLY,
							   NULL, hooks->assign_credentials, NULL);

	DefineCustomStringVariable("slidewin.redis_sentinel_password",
							   gettext_noop("Password of the sentinels of a redis-sentinel:// URL."),
							   gettext_noop("The URL's user and password are the master's."),
							   &slidewin_redis_sentinel_password,
							   "",
							   PGC_SUSET,
							   GUC_SUPERUSER_ONLY,
							   check_sentinel_password, hooks->assign_credentials, NULL);

	DefineCustomStringVariable("slidewin.redis_tls_ca_file",
							   gettext_noop("CA bundle that a rediss:// server's certificate must chain to."),
							   gettext_noop("Empty means the system's default trust store."),
							   &slidewin_redis_tls_ca_file,
							   "",
							   PGC_SUSET,
							   0,
							   NULL, hooks->assign_tls_file, NULL);

	DefineCustomStringVariable("slidewin.redis_tls_cert_file",
							   gettext_noop("Client certificate (PEM chain) for mutual TLS with Redis."),
							   NULL,
							   &slidewin_redis_tls_cert_file,
							   "",
							   PGC_SUSET,
							   0,
							   NULL, hooks->assign_tls_file, NULL);

	DefineCustomStringVariable("slidewin.redis_tls_key_file",
							   gettext_noop("Private key of slidewin.redis_tls_cert_file."),
							   gettext_noop("It must not be readable by group or others."),
							   &slidewin_redis_tls_key_file,
							   "",
							   PGC_SUSET,
							   0,
							   NULL, hooks->assign_tls_file, NULL);

	DefineCustomEnumVariable("slidewin.redis_tls_verify",
							 gettext_noop("How a rediss:// server's certificate is checked."),
							 gettext_noop("full: the chain and the host name; ca: the chain only; none: nothing."),
							 &slidewin_redis_tls_verify,
							 TLS_VERIFY_FULL,
							 tls_verify_options,
							 PGC_SUSET,
							 0,
							 NULL, hooks->assign_tls_verify, NULL);

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
							   check_key_prefix, hooks->assign_key_prefix, NULL);

	DefineCustomStringVariable("slidewin.test_now",
							   gettext_noop("Fixed clock for tests; empty means Redis TIME."),
							   NULL,
							   &slidewin_test_now,
							   "",
							   PGC_SUSET,
							   0,
							   NULL, NULL, NULL);

	DefineCustomIntVariable("slidewin.test_pause_lock",
							gettext_noop("For tests: an advisory lock key the fallback store waits on between reading a key and deciding, and rl_attempt_all over several Redis Cluster slots between reserving and confirming."),
							gettext_noop("0 means never. A session holding pg_advisory_lock(N) stops other "
										 "sessions' calls there, so that a test can change the key, or stop the backend, meanwhile."),
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

	DefineCustomIntVariable("slidewin.outage_log_interval",
							gettext_noop("How often the warning that Redis cannot be reached is repeated while it lasts."),
							gettext_noop("The first call of the server that Redis cannot answer logs one warning; "
										 "it is repeated at most once per this interval, and a line is logged "
										 "when Redis answers again. 0 never repeats it."),
							&slidewin_outage_log_interval,
							60000, 0, 86400000,
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

	/*
	 * Userset: a batch never admits over the limit (doc/semantics.md,
	 * "Local batches"), so a tenant gains nothing by choosing its own.
	 */
	DefineCustomIntVariable("slidewin.local_batch",
							gettext_noop("Most units a sliding_log call reserves from Redis at once, for this server's backends to use without a round trip (0: off)."),
							gettext_noop("Needs shared_preload_libraries = 'slidewin'; without it, and under "
										 "slidewin.test_now, batches are off."),
							&slidewin_local_batch,
							0, 0, 1000000,
							PGC_USERSET,
							0,
							NULL, NULL, NULL);

	DefineCustomEnumVariable("slidewin.fallback_heads",
							 gettext_noop("When a key of the fallback store gets a head."),
							 gettext_noop("contended: once two of its writers meet, so that a key called by one "
										  "writer at a time writes no head; always: at its second admission "
										  "in a window, so that a call the committed units deny never waits."),
							 &slidewin_fallback_heads,
							 FALLBACK_HEADS_CONTENDED,
							 fallback_heads_options,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("slidewin.local_batch_time",
							gettext_noop("How long a local batch may be used; Redis counts its units until a window after its end."),
							NULL,
							&slidewin_local_batch_time,
							20, 1, 10000,
							PGC_USERSET,
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

/*
 * slidewin.test_pause_lock: wait while a session holds
 * pg_advisory_lock(N), so that a test can act at the point where this is
 * called (between a call's lock-free reads and its decision in the fallback
 * store; between reserving and confirming over Cluster slots). Off (0)
 * unless a superuser sets it.
 */
void
settings_test_pause(void)
{
	LOCKTAG		tag;

	if (slidewin_test_pause_lock == 0)
		return;
	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, 0, (uint32) slidewin_test_pause_lock, 1);
	(void) LockAcquire(&tag, ShareLock, false, false);
	LockRelease(&tag, ShareLock, false);
}
