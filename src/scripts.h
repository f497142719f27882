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
	SCRIPT_FIXED_WINDOW,
	SCRIPT_SLIDING_COUNTER,
	SCRIPT_TOKEN_BUCKET,
	SCRIPT_LOG_MULTI,
	NUM_SCRIPTS
} ScriptId;

/*
 * Run script `id` with one key and `nargs` arguments. EVALSHA first; on
 * NOSCRIPT (script cache flushed, Redis restarted) EVAL, which also caches it.
 */
extern void script_run(ScriptId id, const char *key, size_t keylen,
					   int nargs, const char **args, RedisResult *result);

#endif
