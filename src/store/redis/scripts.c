/*-------------------------------------------------------------------------
 *
 * scripts.c
 *		The Lua scripts slidewin runs in Redis, put together out of the
 *		files of src/lua, and EVALSHA with the NOSCRIPT fallback.
 *
 * Every admission decision is one script, so that reading the log, deciding
 * and writing happen atomically in Redis, against one clock (Redis TIME).
 *
 * Sliding log layout (one sorted set per key):
 *   score  = admission time in microseconds, strictly increasing per key
 *            (a call in the same microsecond as the newest entry is recorded
 *            1 us later, which can only make it expire later);
 *   member = the key's running total of admitted units, including this entry.
 * One member per admitted call, whatever its cost. Because the running total
 * strictly increases, members are unique without any random suffix, and the
 * units inside the window are simply newest.member - base, where base is the
 * member of the newest entry that has left the window. When entries expire,
 * every one of them but the newest is removed, and that one stays first in
 * the log as the base; so every call costs O(log n) in the entries of the
 * key, never O(n), and a busy key, one entry leaving per call, is trimmed by
 * one write. (Earlier builds moved the base to a member scored -inf, which
 * took a second write; the scripts read both forms, and the next trim of an
 * old log drops the -inf member.)
 *
 * Refunds (lua_log_refund) never rewrite the log: a second sorted set per
 * key, the ledger, holds one member per entry given back, scored like that
 * entry, whose member is the ledger's own running total of units given
 * back, trimmed and renumbered together with the log. Every script that
 * counts units subtracts the ledger's units over the same range of scores.
 * Most keys never have a ledger, and pay one EXISTS for it.
 *
 * Blocks (rl_block): one string key per user key, holding the block's end in
 * microseconds on the clock of the script that set it, and expiring then.
 * Every outcome script names it as its last key: a call on a key whose block
 * has not ended is denied, reported with allowed = 2 (denied by a block),
 * remaining 0 and a retry_after that runs at least to the block's end, and
 * records nothing (shadow mode records it, as it records any denial). The
 * logs ask for it in the EXISTS they already make for the ledger, which
 * costs the same with two keys; the counting algorithms add one GET. A key
 * never blocked pays nothing more.
 *
 * Numbers in Redis Lua are doubles. redis.call prints a number argument
 * itself, exactly for every integer up to 2^53 (with %.17g in Redis 6.2
 * and 7.0, in the shortest exact form from 7.2 on, and in Valkey), which
 * covers every number slidewin passes. Printing a double costs Redis 7.0
 * about 2,000 instructions, so the two numbers every admission passes (the
 * new running total and the expiry) go as string.format('%d'), an integer
 * printed for about a third of that. Lua's own tostring, used when a number
 * is concatenated into a string, prints %.14g and would round a
 * microsecond timestamp: fmt() is kept for that.
 *
 * A string becomes a number by arithmetic (s + 0), not by tonumber(s):
 * Lua 5.1's tonumber converts its argument twice (lua_isnumber, then
 * lua_tonumber), each a strtod of up to 16 digits; on the admitting path
 * that was a tenth of what the attempt cost Redis.
 *
 * This file knows nothing of PostgreSQL types or policy.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/cryptohash.h"
#include "common/sha1.h"
#include "lib/stringinfo.h"
#include "utils/memutils.h"

#include "scripts.h"

/*
 * The Lua itself lives in src/lua, one file per piece, each opening with
 * what it takes (keys, arguments) and what it returns; lua_scripts.h, made
 * by src/lua/lua2c.pl at build time, holds each file as a string macro
 * (src/lua/log_attempt.lua is LUA_LOG_ATTEMPT). Here the pieces are put
 * together into the scripts Redis runs: a script's text, and so its SHA1,
 * is the concatenation below, byte for byte. test/bench/lua_source.pl
 * prints any of them, to read or to run with redis-cli --eval.
 *
 * The preludes: what every script shares (the clock, numbers printed
 * exactly, the block key), and what the logs add (the ledger of refunds,
 * the trim, the search). Each call of a script runs its prelude again,
 * making every function it defines anew, so a script takes only the part
 * it uses.
 */
#include "lua_scripts.h"
#include "settings.h"

#define LUA_PRELUDE LUA_PRELUDE_BASE LUA_PRELUDE_LOG

/* The sliding log: attempt, refunds, peek, and rl_attempt_multi. */
static const char lua_log_attempt[] = LUA_PRELUDE LUA_LOG_ATTEMPT;
static const char lua_log_refund[] = LUA_PRELUDE LUA_LOG_REFUND LUA_LOG_REFUND_BODY;
static const char lua_log_refund_imported[] = LUA_PRELUDE LUA_LOG_REFUND_IMPORTED LUA_LOG_REFUND_BODY;
static const char lua_log_peek[] = LUA_PRELUDE LUA_LOG_PEEK;
static const char lua_log_multi[] = LUA_PRELUDE LUA_LOG_MULTI;
/* rl_attempt_all: several keys, all or nothing. */
static const char lua_log_all[] = LUA_PRELUDE LUA_LOG_ALL;
/* Its second step over several slots of a Cluster: confirm or cancel. */
static const char lua_log_settle[] = LUA_PRELUDE LUA_LOG_SETTLE;

/*
 * The counting algorithms: one head that reads the arguments, and the
 * window's start for the two that count in fixed windows. The library
 * holds these bodies too (see library_build).
 */
#define LUA_FIXED_WINDOW_BODY LUA_COUNTER_ARGS LUA_COUNTER_WINDOW LUA_FIXED_WINDOW
#define LUA_SLIDING_COUNTER_BODY LUA_COUNTER_ARGS LUA_COUNTER_WINDOW LUA_SLIDING_COUNTER
#define LUA_TOKEN_BUCKET_BODY LUA_COUNTER_ARGS LUA_TOKEN_BUCKET

static const char lua_fixed_window[] = LUA_PRELUDE_BASE LUA_FIXED_WINDOW_BODY;
static const char lua_sliding_counter[] = LUA_PRELUDE_BASE LUA_SLIDING_COUNTER_BODY;
static const char lua_token_bucket[] = LUA_PRELUDE_BASE LUA_TOKEN_BUCKET_BODY;

/*
 * rl_attempt_all on a counting algorithm: the algorithm's body, unchanged,
 * becomes a local function of KEYS and ARGV, which counter_all.lua calls
 * once per key (a peek, then the attempt), so that each key is decided by
 * the very code rl_attempt runs. Its returns return from the function.
 */
#define LUA_ONE_OPEN "local function one(KEYS, ARGV)\n"
#define LUA_ONE_CLOSE "end\n"
#define LUA_FIXED_WINDOW_ALL_BODY LUA_ONE_OPEN LUA_FIXED_WINDOW_BODY LUA_ONE_CLOSE LUA_COUNTER_ALL
#define LUA_SLIDING_COUNTER_ALL_BODY LUA_ONE_OPEN LUA_SLIDING_COUNTER_BODY LUA_ONE_CLOSE LUA_COUNTER_ALL
#define LUA_TOKEN_BUCKET_ALL_BODY LUA_ONE_OPEN LUA_TOKEN_BUCKET_BODY LUA_ONE_CLOSE LUA_COUNTER_ALL

static const char lua_fixed_window_all[] = LUA_PRELUDE_BASE LUA_FIXED_WINDOW_ALL_BODY;
static const char lua_sliding_counter_all[] = LUA_PRELUDE_BASE LUA_SLIDING_COUNTER_ALL_BODY;
static const char lua_token_bucket_all[] = LUA_PRELUDE_BASE LUA_TOKEN_BUCKET_ALL_BODY;

/* Their second step over several slots of a Cluster: confirm or cancel. */
static const char lua_counter_settle[] = LUA_PRELUDE_BASE LUA_COUNTER_SETTLE;

/* Carrying the fallback store's admissions back (switch/carry.c). */
static const char lua_log_import[] = LUA_PRELUDE_BASE LUA_LOG_IMPORT;
static const char lua_counter_import[] = LUA_PRELUDE_BASE LUA_COUNTER_IMPORT;

/* rl_block and rl_unblock. */
static const char lua_block[] = LUA_PRELUDE_BASE LUA_BLOCK;

/* Concurrency slots (rl_acquire, lease.c): scripts of their own, no prelude. */
static const char lua_sem_acquire[] = LUA_SEM_ACQUIRE;
static const char lua_sem_release[] = LUA_SEM_RELEASE;
static const char lua_sem_renew[] = LUA_SEM_RENEW;
static const char lua_sem_holders[] = LUA_SEM_HOLDERS;

typedef struct Script
{
	const char *source;
	/* for the scripts the library holds too: the part after the prelude */
	const char *body;
	/* and its function's name, after the library's (see library_build) */
	const char *fname;
	char		sha1[SHA1_DIGEST_LENGTH * 2 + 1];
} Script;

static Script scripts[NUM_SCRIPTS] = {
	[SCRIPT_LOG_ATTEMPT] = {lua_log_attempt, LUA_LOG_ATTEMPT, "log_attempt"},
	[SCRIPT_LOG_PEEK] = {lua_log_peek, LUA_LOG_PEEK, "log_peek"},
	[SCRIPT_LOG_REFUND] = {lua_log_refund},
	[SCRIPT_LOG_REFUND_IMPORTED] = {lua_log_refund_imported},
	[SCRIPT_FIXED_WINDOW] = {lua_fixed_window, LUA_FIXED_WINDOW_BODY, "fixed_window"},
	[SCRIPT_SLIDING_COUNTER] = {lua_sliding_counter, LUA_SLIDING_COUNTER_BODY, "sliding_counter"},
	[SCRIPT_TOKEN_BUCKET] = {lua_token_bucket, LUA_TOKEN_BUCKET_BODY, "token_bucket"},
	[SCRIPT_LOG_MULTI] = {lua_log_multi, LUA_LOG_MULTI, "log_multi"},
	[SCRIPT_SEM_ACQUIRE] = {lua_sem_acquire},
	[SCRIPT_SEM_RELEASE] = {lua_sem_release},
	[SCRIPT_SEM_RENEW] = {lua_sem_renew},
	[SCRIPT_SEM_HOLDERS] = {lua_sem_holders},
	[SCRIPT_BLOCK] = {lua_block},
	[SCRIPT_LOG_IMPORT] = {lua_log_import},
	[SCRIPT_COUNTER_IMPORT] = {lua_counter_import},
	[SCRIPT_LOG_ALL] = {lua_log_all, LUA_LOG_ALL, "log_all"},
	[SCRIPT_LOG_SETTLE] = {lua_log_settle},
	[SCRIPT_FIXED_WINDOW_ALL] = {lua_fixed_window_all, LUA_FIXED_WINDOW_ALL_BODY, "fixed_window_all"},
	[SCRIPT_SLIDING_COUNTER_ALL] = {lua_sliding_counter_all, LUA_SLIDING_COUNTER_ALL_BODY, "sliding_counter_all"},
	[SCRIPT_TOKEN_BUCKET_ALL] = {lua_token_bucket_all, LUA_TOKEN_BUCKET_ALL_BODY, "token_bucket_all"},
	[SCRIPT_COUNTER_SETTLE] = {lua_counter_settle},
};

/* Hex SHA1 of the script, as Redis names it; computed once per backend. */
static const char *
script_sha1(Script *s)
{
	if (s->sha1[0] == '\0')
	{
		pg_cryptohash_ctx *ctx = pg_cryptohash_create(PG_SHA1);
		uint8		digest[SHA1_DIGEST_LENGTH];

		if (ctx == NULL ||
			pg_cryptohash_init(ctx) < 0 ||
			pg_cryptohash_update(ctx, (const uint8 *) s->source, strlen(s->source)) < 0 ||
			pg_cryptohash_final(ctx, digest, sizeof(digest)) < 0)
			elog(ERROR, "could not compute SHA1 of a slidewin script");
		pg_cryptohash_free(ctx);
		for (int i = 0; i < SHA1_DIGEST_LENGTH; i++)
			snprintf(s->sha1 + 2 * i, 3, "%02x", digest[i]);
	}
	return s->sha1;
}

const char *
script_sha1_hex(ScriptId id)
{
	return script_sha1(&scripts[id]);
}

const char *
script_source(ScriptId id)
{
	return scripts[id].source;
}

void
scripts_prepare(void)
{
	for (int i = 0; i < NUM_SCRIPTS; i++)
		(void) script_sha1(&scripts[i]);
}

/* numkeys, the keys and the arguments after argv[0..n-1]; the new argc */
static int
add_keys_args(const char **argv, size_t *lens, int n, int nkeys,
			  const char **keys, const size_t *keylens, int nargs,
			  const char **args)
{
	static const char *const numkeys[] = {"0", "1", "2", "3", "4"};
	/* more than 4 keys only from rl_attempt_all, never in transaction abort */
	static char manykeys[4];

	if (nkeys <= 4)
		argv[n] = numkeys[nkeys];
	else
	{
		snprintf(manykeys, sizeof(manykeys), "%d", nkeys);
		argv[n] = manykeys;
	}
	lens[n] = strlen(argv[n]);
	n++;
	for (int i = 0; i < nkeys; i++)
	{
		argv[n] = keys[i];
		lens[n++] = keylens[i];
	}
	for (int i = 0; i < nargs; i++)
	{
		argv[n] = args[i];
		lens[n++] = strlen(args[i]);
	}
	return n;
}

int
script_command(ScriptId id, bool eval, int nkeys, const char **keys,
			   const size_t *keylens, int nargs, const char **args,
			   const char **argv, size_t *lens)
{
	Script	   *s = &scripts[id];
	int			n = 0;

	Assert(nkeys >= 1 && nkeys <= MAX_SCRIPT_KEYS && nargs <= MAX_SCRIPT_ARGS);
	Assert(eval || s->sha1[0] != '\0');
	if (eval)
	{
		argv[n] = "EVAL";
		lens[n++] = 4;
		argv[n] = s->source;
		lens[n++] = strlen(s->source);
	}
	else
	{
		argv[n] = "EVALSHA";
		lens[n++] = 7;
		argv[n] = s->sha1;
		lens[n++] = SHA1_DIGEST_LENGTH * 2;
	}
	return add_keys_args(argv, lens, n, nkeys, keys, keylens, nargs, args);
}

/*
 * The library of Redis Functions (Redis 7 and later, Valkey): the prelude
 * once, and each script that decides a call as a function of its own, so
 * that FCALL runs only the script's body. Under EVALSHA every call runs
 * the prelude again, making each of its functions anew (about a tenth of
 * what the attempt costs Redis). The library's name, and so its
 * functions', carries 16 hex digits of the SHA1 of what it holds: servers
 * of different slidewin versions sharing one Redis each find their own,
 * and loading it twice is harmless ("already exists"). The prelude's
 * state (keep, bkeep, clock_s) lives as long as the library, so each
 * function resets it first.
 */

static char *library;
static size_t library_len;
static char library_fnames[NUM_SCRIPTS][64];

/* Whether this backend gave up on functions, and for which target. */
static bool functions_off = false;
static uint64 functions_off_generation = 0;

static void
library_build(void)
{
	pg_cryptohash_ctx *ctx;
	uint8		digest[SHA1_DIGEST_LENGTH];
	char		tag[17];
	StringInfoData lib;
	MemoryContext old;

	if (library != NULL)
		return;
	ctx = pg_cryptohash_create(PG_SHA1);
	if (ctx == NULL || pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, (const uint8 *) LUA_PRELUDE, strlen(LUA_PRELUDE)) < 0)
		elog(ERROR, "could not compute SHA1 of the slidewin library");
	for (int i = 0; i < NUM_SCRIPTS; i++)
		if (scripts[i].fname &&
			(pg_cryptohash_update(ctx, (const uint8 *) scripts[i].fname, strlen(scripts[i].fname)) < 0 ||
			 pg_cryptohash_update(ctx, (const uint8 *) scripts[i].body, strlen(scripts[i].body)) < 0))
			elog(ERROR, "could not compute SHA1 of the slidewin library");
	if (pg_cryptohash_final(ctx, digest, sizeof(digest)) < 0)
		elog(ERROR, "could not compute SHA1 of the slidewin library");
	pg_cryptohash_free(ctx);
	for (int i = 0; i < 8; i++)
		snprintf(tag + 2 * i, 3, "%02x", digest[i]);

	old = MemoryContextSwitchTo(TopMemoryContext);
	initStringInfo(&lib);
	appendStringInfo(&lib, "#!lua name=slidewin_%s\n%s", tag, LUA_PRELUDE);
	for (int i = 0; i < NUM_SCRIPTS; i++)
	{
		if (!scripts[i].fname)
			continue;
		snprintf(library_fnames[i], sizeof(library_fnames[i]), "slidewin_%s_%s",
				 tag, scripts[i].fname);
		appendStringInfo(&lib,
						 "redis.register_function('%s', function(KEYS, ARGV)\n"
						 "keep, bkeep, clock_s = false, false, nil\n%send)\n",
						 library_fnames[i], scripts[i].body);
	}
	MemoryContextSwitchTo(old);
	library = lib.data;
	library_len = lib.len;
}

const char *
script_library(void)
{
	library_build();
	return library;
}

const char *
script_function_name(ScriptId id)
{
	library_build();
	return scripts[id].fname ? library_fnames[id] : NULL;
}

/*
 * NOPERM for the command itself (FCALL or FUNCTION LOAD), not for a key:
 * a key outside the user's patterns is refused by EVALSHA just the same.
 */
static bool
refused_functions(const RedisResult *result)
{
	return result->status == RS_FAIL_REPLY && result->reply &&
		strncmp(result->reply->str, "NOPERM", 6) == 0 &&
		(strstr(result->reply->str, "'fcall'") != NULL ||
		 strstr(result->reply->str, "'function") != NULL);
}

/* Whether a failure reply starts with prefix. */
static bool
reply_starts(const RedisResult *result, const char *prefix)
{
	size_t		n = strlen(prefix);

	return result->status == RS_FAIL_REPLY && result->reply &&
		result->reply->len >= n && strncmp(result->reply->str, prefix, n) == 0;
}

static void
drop_reply(RedisResult *result)
{
	if (result->reply)
		freeReplyObject(result->reply);
	result->reply = NULL;
}

/*
 * FCALL of script id's function. True when its result stands (an answer,
 * or a failure to reach Redis); false when the script should run by
 * EVALSHA instead: the server has no functions (Redis 6.2), the user may
 * not call or load them, or Redis refuses writes for now (out of memory, a
 * failed snapshot, too few replicas): a function that may write is refused
 * before it runs, where a script runs until it writes, so that a call that
 * writes nothing (a denial, a peek) still gets its answer.
 */
static bool
run_function(ScriptId id, int nkeys, const char **keys, const size_t *keylens,
			 int nargs, const char **args, RedisResult *result)
{
	const char *argv[SCRIPT_MAX_ARGV];
	size_t		lens[SCRIPT_MAX_ARGV];
	int			argc = 0;

	library_build();
	argv[argc] = "FCALL";
	lens[argc++] = 5;
	argv[argc] = library_fnames[id];
	lens[argc++] = strlen(library_fnames[id]);
	argc = add_keys_args(argv, lens, argc, nkeys, keys, keylens, nargs, args);

	for (int attempt = 0;; attempt++)
	{
		redis_exec(argc, argv, lens, result);
		if (result->status != RS_FAIL_REPLY)
			return true;
		if (reply_starts(result, "OOM") || reply_starts(result, "MISCONF") ||
			reply_starts(result, "NOREPLICAS"))
		{
			drop_reply(result);
			return false;
		}
		if (reply_starts(result, "ERR Function not found") && attempt == 0)
		{
			/*
			 * A server that never had it, or lost it: load it, once, on the
			 * server that said so (under Cluster, the node a redirection
			 * may have led to).
			 */
			const char *load[3] = {"FUNCTION", "LOAD", library};
			size_t		loadlens[3] = {8, 4, library_len};

			drop_reply(result);
			redis_exec_same(3, load, loadlens, result);
			if (result->status == RS_OK ||
				reply_starts(result, "ERR Library") /* already exists */ )
			{
				drop_reply(result);
				continue;
			}
			if (result->status != RS_FAIL_REPLY)
				return true;
			/* refused (NOPERM, or a server that will not take it): scripts */
			ereport(DEBUG1,
					(errmsg_internal("slidewin: Redis refused FUNCTION LOAD: %s; using EVALSHA",
									 result->reply->str)));
		}
		else if (!reply_starts(result, "ERR unknown command") &&
				 !refused_functions(result) &&
				 !reply_starts(result, "ERR Function not found"))
			return true;
		drop_reply(result);
		functions_off = true;
		functions_off_generation = redis_target_generation;
		return false;
	}
}

void
script_run(ScriptId id, int nkeys, const char **keys, const size_t *keylens,
		   int nargs, const char **args, RedisResult *result)
{
	const char *argv[SCRIPT_MAX_ARGV];
	size_t		lens[SCRIPT_MAX_ARGV];
	int			argc;

	if (functions_off && functions_off_generation != redis_target_generation)
		functions_off = false;
	if (scripts[id].fname && !functions_off && slidewin_redis_functions &&
		run_function(id, nkeys, keys, keylens, nargs, args, result))
		return;
	(void) script_sha1(&scripts[id]);
	argc = script_command(id, false, nkeys, keys, keylens, nargs, args, argv, lens);
	redis_exec(argc, argv, lens, result);
	if (result->status == RS_FAIL_REPLY &&
		strncmp(result->reply->str, "NOSCRIPT", 8) == 0)
	{
		freeReplyObject(result->reply);
		result->reply = NULL;
		argc = script_command(id, true, nkeys, keys, keylens, nargs, args, argv, lens);
		redis_exec(argc, argv, lens, result);
	}
}
