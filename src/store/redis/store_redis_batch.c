/*-------------------------------------------------------------------------
 *
 * store_redis_batch.c
 *		The Redis store's side of local batches (switch/local_batch.c): the
 *		attempt that reserves a batch as one entry of the key's sliding log,
 *		scored at the batch's end, and the refund of the part of that entry
 *		the batch did not use.
 *
 * Where batches are kept, who may take from them and when they end is the
 * switch's business; this file only formats the two script calls and
 * checks their replies.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "store_redis.h"
#include "store_redis_int.h"

/*
 * Reserve up to want units (at least args->cost) of args' sliding log as
 * one entry scored ahead_us after Redis's now (log_attempt.lua, flag 'b'),
 * for the server named server (the key's waiting mark, "logw:K", names the
 * server whose reserve is waiting: another server's reserve then takes the
 * call's own cost and no more).
 * Under Redis Cluster it sends what an ordinary attempt sends there (flag
 * 'k': the ledger and the block key are kept beside the log), so that a
 * slot being migrated finds all of the key's structures or none; the entry
 * it writes is then read by every script of the key, rl_attempt_all over
 * several slots included, as any other.
 * True with *o filled in, as an attempt of *taken units; *taken is 0 on a
 * denial, which is the denial a call of args->cost units would get. False
 * when Redis cannot answer now, or answered what the script could not have.
 */
bool
redis_store_batch_attempt(const RlArgs *args, int64 want, int64 ahead_us,
						  const char *server, RlOutcome *o, int64 *taken,
						  RedisResult *r)
{
	StringInfoData keys[4];
	const char *k[4];
	size_t		klens[4];
	char		lim[24],
				win[24],
				most[24],
				ahead[24],
				least[24];
	const char *argv[8];
	RlArgs		judged = *args;
	redisReply *rep;

	Assert(args->algorithm == ALGO_SLIDING_LOG && !args->force);
	Assert(want >= args->cost && ahead_us > 0);
	redis_store_key(&keys[0], "log", args);
	redis_store_ledger_key(&keys[1], "log", args);
	redis_store_block_key(&keys[2], args);
	redis_store_wait_key(&keys[3], args);
	snprintf(lim, sizeof(lim), INT64_FORMAT, args->lim);
	snprintf(win, sizeof(win), INT64_FORMAT, args->win_us);
	snprintf(most, sizeof(most), INT64_FORMAT, want);
	snprintf(ahead, sizeof(ahead), INT64_FORMAT, ahead_us);
	snprintf(least, sizeof(least), INT64_FORMAT, args->cost);
	argv[0] = lim;
	argv[1] = win;
	argv[2] = most;
	/* batches are off under the test clock: Redis TIME */
	argv[3] = redis_target_is_cluster() ? "bk" : "b";
	argv[4] = "";
	argv[5] = ahead;
	argv[6] = least;
	argv[7] = server;
	for (int i = 0; i < 4; i++)
	{
		k[i] = keys[i].data;
		klens[i] = keys[i].len;
	}
	script_run(SCRIPT_LOG_ATTEMPT, 4, k, klens, 8, argv, r);
	for (int i = 0; i < 4; i++)
		pfree(keys[i].data);
	if (!redis_store_settle(r))
		return false;

	/*
	 * An admission answers four numbers: the three of an ordinary one, then
	 * the units taken. Once those are known to lie between the call's cost
	 * and want, the first three are checked as the reply to an attempt of
	 * that many units; any other reply is checked as one to the call alone,
	 * and must be a denial.
	 */
	rep = r->reply;
	*taken = 0;
	if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 4)
	{
		redisReply *t = rep->element[3];

		if (t->type != REDIS_REPLY_INTEGER || t->integer < args->cost || t->integer > want)
			return redis_store_refuse(r, "The units a local batch took must be an integer between %lld and %lld.",
									  (long long) args->cost, (long long) want);
		judged.cost = t->integer;
		freeReplyObject(t);
		rep->element[3] = NULL;
		rep->elements = 3;
	}
	else if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 3)
		return redis_store_refuse(r, "The reply to a local batch's admission has 3 elements, not 4.");
	if (!redis_store_read_outcome(r, &judged, false, o))
		return false;
	if (o->allowed)
		*taken = judged.cost;
	return true;
}

/*
 * Give back part of the units of the entry (ts, cost) of a sliding log,
 * named by its Redis keys, now (no test clock: batches are off under it).
 * Routed like any command: under Redis Cluster to the master of the keys'
 * slot, following MOVED and ASK (a slot moved since the reserve). Nothing
 * to keep: the reserve under Cluster made the ledger beside the log, and
 * the refund writes no other key. True with *given set when Redis
 * answered; false when it could not answer now, or answered what the
 * refund script could not have.
 */
bool
redis_store_refund_part(const char *rkey, int rkeylen, const char *lkey, int lkeylen,
						int64 ts, int64 cost, int64 part, int64 win_us,
						bool *given, RedisResult *r)
{
	char		tsbuf[24],
				costbuf[24],
				winbuf[24],
				partbuf[24];
	const char *args[5] = {tsbuf, costbuf, winbuf, "", partbuf};
	const char *keys[2] = {rkey, lkey};
	size_t		keylens[2] = {rkeylen, lkeylen};

	snprintf(tsbuf, sizeof(tsbuf), INT64_FORMAT, ts);
	snprintf(costbuf, sizeof(costbuf), INT64_FORMAT, cost);
	snprintf(winbuf, sizeof(winbuf), INT64_FORMAT, win_us);
	snprintf(partbuf, sizeof(partbuf), INT64_FORMAT, part);
	script_run(SCRIPT_LOG_REFUND, 2, keys, keylens, 5, args, r);
	return redis_store_read_refund(r, given);
}
