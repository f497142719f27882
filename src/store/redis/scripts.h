/*
 * scripts.h
 *		The Lua scripts slidewin runs in Redis, and running them by EVALSHA.
 */
#ifndef SLIDEWIN_SCRIPTS_H
#define SLIDEWIN_SCRIPTS_H

#include "redis_conn.h"

typedef enum ScriptId
{
	SCRIPT_LOG_ATTEMPT,
	SCRIPT_LOG_PEEK,
	SCRIPT_LOG_REFUND,
	SCRIPT_LOG_REFUND_IMPORTED,
	SCRIPT_FIXED_WINDOW,
	SCRIPT_SLIDING_COUNTER,
	SCRIPT_TOKEN_BUCKET,
	SCRIPT_LOG_MULTI,
	SCRIPT_SEM_ACQUIRE,
	SCRIPT_SEM_RELEASE,
	SCRIPT_SEM_RENEW,
	SCRIPT_SEM_HOLDERS,
	SCRIPT_BLOCK,
	SCRIPT_LOG_IMPORT,
	SCRIPT_COUNTER_IMPORT,
	SCRIPT_LOG_ALL,
	SCRIPT_LOG_SETTLE,
	SCRIPT_FIXED_WINDOW_ALL,
	SCRIPT_SLIDING_COUNTER_ALL,
	SCRIPT_TOKEN_BUCKET_ALL,
	SCRIPT_COUNTER_SETTLE,
	NUM_SCRIPTS
} ScriptId;

/* slidewin.redis_functions: FCALL where the server has functions */

/*
 * rl_attempt_all names three keys and passes three arguments for each of
 * up to RL_MAX_KEYS (16) user keys, and three more: 48 keys, 51 arguments.
 * The counting algorithms' (counter_all.lua) name three keys for each. Every
 * other script names at most 4 keys. (The reservations, keys of one slot
 * of a call over several, pass one argument more to log_all.lua and two
 * more to counter_all.lua, for at most RL_MAX_KEYS - 1 keys.)
 */
#define MAX_SCRIPT_KEYS 48
#define MAX_SCRIPT_ARGS 51
/* Room for EVALSHA, the SHA1, numkeys, the keys and the arguments. */
#define SCRIPT_MAX_ARGV (MAX_SCRIPT_ARGS + MAX_SCRIPT_KEYS + 3)

/*
 * Run script `id` with `nkeys` keys and `nargs` arguments. The scripts that
 * decide a call run as functions of slidewin's library (FCALL, loaded with
 * FUNCTION LOAD where missing) when the server has them; otherwise, and for
 * the rest, EVALSHA first; on NOSCRIPT (script cache flushed, Redis
 * restarted) EVAL, which also caches it.
 */
extern void script_run(ScriptId id, int nkeys, const char **keys, const size_t *keylens,
					   int nargs, const char **args, RedisResult *result);

/*
 * The library of Redis Functions (FUNCTION LOAD text), and the name of
 * script id's function in it (NULL if the library does not hold it).
 */
extern const char *script_library(void);
extern const char *script_function_name(ScriptId id);

/* Compute every script's SHA1 now, so that script_command never has to. */
extern void scripts_prepare(void);

/* A script's SHA1 in hex, as Redis names it (after scripts_prepare). */
extern const char *script_sha1_hex(ScriptId id);
/* A script's Lua source. */
extern const char *script_source(ScriptId id);

/*
 * Fill argv/lens (SCRIPT_MAX_ARGV entries) with EVALSHA, or EVAL when
 * `eval`, of script `id`; returns argc. The arrays point into keys, args
 * and the script table. Allocates nothing and never ERRORs once
 * scripts_prepare has run, so it may be used in transaction abort.
 */
extern int	script_command(ScriptId id, bool eval, int nkeys, const char **keys,
						   const size_t *keylens, int nargs, const char **args,
						   const char **argv, size_t *lens);

#endif
