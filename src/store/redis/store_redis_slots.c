/*-------------------------------------------------------------------------
 *
 * store_redis_slots.c
 *		The Redis store's concurrency slots (sql/lease.c): acquiring,
 *		renewing, counting and releasing a holder of a key, waiting for a
 *		release, and the release queued on the pipeline in abort.
 *
 * The keys, the clock argument and the sorting of a reply are store_redis.c's
 * (store_redis_int.h).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "store_redis.h"
#include "store_redis_int.h"

/* ---------------------------------------------------------------------
 * Concurrency slots (lease.c): the key's holders and its wake-up list.
 * ---------------------------------------------------------------------
 */

void
redis_store_sem_keys(const RlArgs *args, char **holders, int *holderslen,
					 char **wake, int *wakelen)
{
	StringInfoData key;

	redis_store_key(&key, "sem", args);
	*holders = key.data;
	*holderslen = key.len;
	redis_store_key(&key, "semw", args);
	*wake = key.data;
	*wakelen = key.len;
}

/* Run a slot script on the key's two keys; false when Redis cannot answer now. */
static bool
run_sem_script(ScriptId id, const RlArgs *args, int nargs, const char **argv,
			   RedisResult *r)
{
	char	   *keys[2];
	int			lens[2];
	const char *k[2];
	size_t		kl[2];

	redis_store_sem_keys(args, &keys[0], &lens[0], &keys[1], &lens[1]);
	for (int i = 0; i < 2; i++)
	{
		k[i] = keys[i];
		kl[i] = lens[i];
	}
	script_run(id, 2, k, kl, nargs, argv, r);
	pfree(keys[0]);
	pfree(keys[1]);
	return redis_store_settle(r);
}

bool
redis_store_sem_acquire(const RlArgs *args, const char *holder, int64 max,
						int64 lease_us, RlSemReply *out, RedisResult *r)
{
	char		maxbuf[24],
				leasebuf[24],
				now[24];
	const char *argv[4];
	redisReply *rep;
	int64		v[5];

	snprintf(maxbuf, sizeof(maxbuf), INT64_FORMAT, max);
	snprintf(leasebuf, sizeof(leasebuf), INT64_FORMAT, lease_us);
	argv[0] = holder;
	argv[1] = maxbuf;
	argv[2] = leasebuf;
	argv[3] = redis_store_clock_arg(now, sizeof(now));
	if (!run_sem_script(SCRIPT_SEM_ACQUIRE, args, 4, argv, r))
		return false;
	rep = r->reply;
	if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 5)
		return redis_store_refuse(r, "The slot script answered %s, not an array of 5 integers.",
								  reply_type_name(rep));
	for (int i = 0; i < 5; i++)
	{
		if (rep->element[i]->type != REDIS_REPLY_INTEGER)
			return redis_store_refuse(r, "Field %d of the slot script's answer is %s, not an integer.",
									  i + 1, reply_type_name(rep->element[i]));
		v[i] = rep->element[i]->integer;
	}
	/*
	 * What the script can answer, and nothing else. A key's holders may
	 * have taken it with different max: a new holder is admitted only below
	 * this call's max, but a holder that renews (already) is renewed
	 * whatever max it passes, so it may count more holders than that.
	 */
	if ((v[0] != 0 && v[0] != 1) || v[1] < 0 || v[2] < 0 || v[3] < 0 ||
		(v[4] != 0 && v[4] != 1) ||
		(v[0] == 1 && (v[1] < 1 || (v[1] > max && v[4] != 1) || v[3] != 0)) ||
		(v[0] == 0 && (v[1] < max || v[4] != 0 || v[3] > RL_MAX_LEASE_US)))
		return redis_store_refuse(r, "The slot script answered values it cannot give (acquired " INT64_FORMAT
								  ", holders " INT64_FORMAT ", wait " INT64_FORMAT ").", v[0], v[1], v[3]);
	out->acquired = v[0] == 1;
	out->holders = v[1];
	out->ended = v[2];
	out->wait_us = v[3];
	out->already = v[4] == 1;
	freeReplyObject(r->reply);
	r->reply = NULL;
	return true;
}

/*
 * Release (sync), renew or count: *result is the script's integer (release
 * and renew: 1 or 0; holders: the count). False when Redis cannot answer now.
 */
bool
redis_store_sem_call(ScriptId id, const RlArgs *args, const char *holder,
					 int64 lease_us, int64 *result, RedisResult *r)
{
	char		leasebuf[24],
				now[24];
	const char *argv[3];
	int			n = 0;
	redisReply *rep;

	if (id == SCRIPT_SEM_HOLDERS)
		argv[n++] = redis_store_clock_arg(now, sizeof(now));
	else
	{
		argv[n++] = holder;
		if (id == SCRIPT_SEM_RENEW)
		{
			snprintf(leasebuf, sizeof(leasebuf), INT64_FORMAT, lease_us);
			argv[n++] = leasebuf;
			argv[n++] = redis_store_clock_arg(now, sizeof(now));
		}
	}
	if (!run_sem_script(id, args, n, argv, r))
		return false;
	rep = r->reply;
	if (rep->type != REDIS_REPLY_INTEGER || rep->integer < 0 ||
		(id != SCRIPT_SEM_HOLDERS && rep->integer > 1))
		return redis_store_refuse(r, "The slot script answered %s, not what it can answer.",
								  reply_type_name(rep));
	*result = rep->integer;
	freeReplyObject(r->reply);
	r->reply = NULL;
	return true;
}

/*
 * Wait up to wait_ms for a release of the key (a token on its wake-up
 * list): *woken says whether one came. False when Redis cannot answer now.
 * wait_ms must leave room within command_timeout for the reply.
 */
bool
redis_store_sem_wait(const RlArgs *args, int wait_ms, bool *woken, RedisResult *r)
{
	char	   *holders;
	char	   *wake;
	int			hl;
	int			wl;
	char		secs[32];
	const char *argv[3];
	size_t		lens[3];
	redisReply *rep;

	redis_store_sem_keys(args, &holders, &hl, &wake, &wl);
	snprintf(secs, sizeof(secs), "%d.%03d", wait_ms / 1000, wait_ms % 1000);
	argv[0] = "BLPOP";
	lens[0] = 5;
	argv[1] = wake;
	lens[1] = wl;
	argv[2] = secs;
	lens[2] = strlen(secs);
	redis_exec(3, argv, lens, r);
	pfree(holders);
	pfree(wake);
	if (!redis_store_settle(r))
		return false;
	rep = r->reply;
	if (rep->type == REDIS_REPLY_NIL)
		*woken = false;
	else if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 2)
		*woken = true;
	else
		return redis_store_refuse(r, "BLPOP answered %s, not nil or a pair.", reply_type_name(rep));
	freeReplyObject(r->reply);
	r->reply = NULL;
	return true;
}

/* The release of a slot, queued on the pipeline (abort-safe, like the refunds). */
bool
redis_store_release_append(const char *hkey, int hkeylen, const char *wkey, int wkeylen,
						   const char *holder, bool eval)
{
	const char *args[1] = {holder};
	const char *keys[2] = {hkey, wkey};
	size_t		keylens[2] = {hkeylen, wkeylen};
	const char *argv[SCRIPT_MAX_ARGV];
	size_t		lens[SCRIPT_MAX_ARGV];
	int			argc;

	argc = script_command(SCRIPT_SEM_RELEASE, eval, 2, keys, keylens, 1, args, argv, lens);
	return redis_pipeline_append(argc, argv, lens);
}

/* The same, sent now and routed (Redis Cluster), its reply in *r. */
void
redis_store_release_exec(const char *hkey, int hkeylen, const char *wkey, int wkeylen,
						 const char *holder, RedisResult *r)
{
	const char *args[1] = {holder};
	const char *keys[2] = {hkey, wkey};
	size_t		keylens[2] = {hkeylen, wkeylen};

	script_run(SCRIPT_SEM_RELEASE, 2, keys, keylens, 1, args, r);
}
