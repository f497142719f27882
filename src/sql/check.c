/*-------------------------------------------------------------------------
 *
 * check.c
 *		rl_check(): one row per server slidewin.redis_url names, saying what
 *		works (reachable, authenticated, TLS verified, the scripts cached)
 *		and the last error, for a new installation to be checked from SQL.
 *
 * The servers are opened on a link of their own (redis_probe.c), so that a
 * check never disturbs the backend's connections or its circuit breaker.
 * Nothing here shows a password: a row names a server by host and port (or
 * socket path) only, and the messages come from the connection layer, which
 * never prints one. EXECUTE is not granted to PUBLIC (the targets are where
 * slidewin.redis_url points, a superuser-only setting).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"

#include "check.h"
#include "redis_probe.h"
#include "scripts.h"

PG_FUNCTION_INFO_V1(slidewin_check);

static bool preloaded = false;

void
check_init(void)
{
	preloaded = process_shared_preload_libraries_in_progress;
}

/*
 * Whether Redis holds every script in its cache, after loading those it did
 * not (SCRIPT EXISTS, SCRIPT LOAD: what a call's EVAL would load, once). A
 * user that may not run SCRIPT leaves it unknown: calls do not need it, as
 * they load a script with EVAL. A server that refuses a script otherwise
 * says why in last_error.
 */
static void
check_scripts(RedisProbe *p)
{
	const char *argv[2 + NUM_SCRIPTS];
	size_t		lens[2 + NUM_SCRIPTS];
	RedisResult r = {0};
	redisReply *reply;
	bool		all = true;

	argv[0] = "SCRIPT";
	lens[0] = 6;
	argv[1] = "EXISTS";
	lens[1] = 6;
	for (int i = 0; i < NUM_SCRIPTS; i++)
	{
		argv[2 + i] = script_sha1_hex((ScriptId) i);
		lens[2 + i] = strlen(argv[2 + i]);
	}
	reply = redis_probe_command(2 + NUM_SCRIPTS, argv, lens, &r);
	if (reply == NULL)
		return;
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != NUM_SCRIPTS)
	{
		freeReplyObject(reply);
		return;
	}
	for (int i = 0; i < NUM_SCRIPTS; i++)
	{
		const char *load[3] = {"SCRIPT", "LOAD", script_source((ScriptId) i)};
		size_t		loadlens[3] = {6, 4, strlen(load[2])};
		redisReply *loaded;

		if (reply->element[i]->type == REDIS_REPLY_INTEGER &&
			reply->element[i]->integer == 1)
			continue;
		loaded = redis_probe_command(3, load, loadlens, &r);
		if (loaded == NULL)
		{
			all = false;
			if (r.cause != RC_ACL)
				strlcpy(p->last_error, r.message, sizeof(p->last_error));
			break;
		}
		freeReplyObject(loaded);
	}
	freeReplyObject(reply);
	/* NOPERM on SCRIPT LOAD: the user loads scripts through EVAL only */
	if (all || r.cause != RC_ACL)
		p->scripts_loaded = all;
}

static Datum
tri(int v, bool *isnull)
{
	*isnull = v < 0;
	return BoolGetDatum(v > 0);
}

static Datum
text_or_null(const char *s, bool *isnull)
{
	*isnull = s[0] == '\0';
	return *isnull ? (Datum) 0 : CStringGetTextDatum(s);
}

Datum
slidewin_check(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	RedisProbe *rows;
	int			n;

	InitMaterializedSRF(fcinfo, 0);
	rows = palloc(sizeof(RedisProbe) * REDIS_PROBE_MAX);
	scripts_prepare();
	n = redis_probe_all(rows, REDIS_PROBE_MAX, check_scripts);
	for (int i = 0; i < n; i++)
	{
		RedisProbe *p = &rows[i];
		Datum		values[9];
		bool		nulls[9] = {0};

		values[0] = CStringGetTextDatum(p->target);
		values[1] = BoolGetDatum(p->reachable > 0);
		values[2] = tri(p->authenticated, &nulls[2]);
		values[3] = text_or_null(p->version, &nulls[3]);
		values[4] = text_or_null(p->role, &nulls[4]);
		values[5] = tri(p->tls_verified, &nulls[5]);
		values[6] = tri(p->scripts_loaded, &nulls[6]);
		values[7] = text_or_null(p->last_error, &nulls[7]);
		values[8] = BoolGetDatum(preloaded);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
