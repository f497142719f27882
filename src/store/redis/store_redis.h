/*
 * store_redis.h
 *		The Redis store: the sliding log kept in Redis sorted sets.
 */
#ifndef SLIDEWIN_STORE_REDIS_H
#define SLIDEWIN_STORE_REDIS_H

#include "limit.h"
#include "redis_conn.h"
#include "reply_check.h"
#include "scripts.h"


/*
 * Each returns true with *o filled in, or false when Redis cannot answer now
 * (unreachable, timed out, a "not now" error reply such as OOM or LOADING,
 * or a reply the script could not have given: RS_FAIL_PROTOCOL), with the
 * cause in *failure. Any other failure is an ERROR.
 */
extern bool redis_store_attempt(const RlArgs *args, RlOutcome *o, RedisResult *failure);
extern bool redis_store_peek(const RlArgs *args, RlOutcome *o, RedisResult *failure);
extern bool redis_store_reset(const RlArgs *args, RedisResult *failure);
/*
 * rl_attempt_all: the n keys of args (1..RL_MAX_KEYS, distinct, all of one
 * algorithm: sliding_log, fixed_window, sliding_counter or token_bucket),
 * all charged or none, in one script call; o[k] is key k's outcome. Under
 * Redis Cluster, keys in different hash slots are reserved slot by slot,
 * then confirmed or cancelled (store_redis_xslot.c).
 */
extern bool redis_store_attempt_all(int n, const RlArgs *args, RlOutcome *o,
									RedisResult *failure);

/*
 * rl_block: block the key for duration_us from now (or keep a block that
 * ends later); *end_us is the block's end, in Unix microseconds on the
 * clock of the scripts. rl_unblock: *lifted says whether a block was in
 * force. Both return false when Redis cannot answer now, as above.
 */
extern bool redis_store_block(const RlArgs *args, int64 duration_us, int64 *end_us,
							  RedisResult *failure);
extern bool redis_store_unblock(const RlArgs *args, bool *lifted, RedisResult *failure);

/*
 * Refunds, usable in transaction abort (no ERROR, no PostgreSQL memory).
 * redis_store_refund_clock writes the clock argument (empty: Redis TIME);
 * false when the test clock is on but not parsed yet.
 * redis_store_refund_append queues the refund of one entry on the open
 * connection's pipeline (false: no usable connection). The verdict on its
 * reply (RefundVerdict) is reply_check.c's.
 */
extern bool redis_store_refund_clock(char *buf, size_t size);
extern bool redis_store_refund_append(const char *rkey, int rkeylen,
									  const char *lkey, int lkeylen,
									  int64 ts, int64 cost, int64 win_us,
									  const char *now, bool eval);
extern void redis_store_refund_exec(const char *rkey, int rkeylen, const char *lkey,
									int lkeylen, int64 ts, int64 cost, int64 win_us,
									const char *now, RedisResult *r);
/* rl_refund's refund, sent now (normal context; false: Redis cannot answer now). */
extern bool redis_store_refund_now(const RlArgs *args, int64 ts, int64 cost, int64 win_us,
								   bool *given, RedisResult *r);
/* The same for a fallback admission a carry imported under import_id. */
extern bool redis_store_refund_imported(const RlArgs *args, const char *import_id,
										int64 cost, int64 win_us, bool *given,
										RedisResult *r);
extern RefundVerdict redis_store_refund_verdict(const redisReply *reply);
extern void redis_store_refund_describe(const redisReply *reply, char *buf, size_t size);
/*
 * Local batches (switch/local_batch.c, store_redis_batch.c): reserve up to
 * want units of a sliding log (at least args->cost) as one entry scored
 * ahead_us after Redis's now, *taken the units reserved (0: denied, as a
 * call of args->cost units); and give back part of such an entry, named by
 * its Redis keys. False when Redis cannot answer now, as above.
 */
extern bool redis_store_batch_attempt(const RlArgs *args, int64 want, int64 ahead_us,
									  const char *server, RlOutcome *o,
									  int64 *taken, RedisResult *r);
extern bool redis_store_refund_part(const char *rkey, int rkeylen, const char *lkey,
									int lkeylen, int64 ts, int64 cost, int64 part,
									int64 win_us, bool *given, RedisResult *r);
/* The Redis keys of a user key's log and of its ledger of refunds (palloc'd). */
extern void redis_store_log_keys(const RlArgs *args, char **log, int *loglen,
								 char **ledger, int *ledgerlen);

/*
 * Carry n admissions of the fallback store back into the key's Redis log
 * (switch/carry.c): entries is "id,age,cost,win;" each (see lua_log_import).
 * *recorded: how many Redis had not recorded yet. False when Redis cannot
 * answer now, as above.
 */
extern bool redis_store_import(const RlArgs *args, const char *entries, int n,
							   int64 *recorded, RedisResult *failure);

/* Concurrency slots (lease.c). */
typedef struct RlSemReply
{
	bool		acquired;
	int64		holders;		/* live holders, this one included if acquired */
	int64		ended;			/* leases the script found ended, and removed */
	int64		wait_us;		/* a denial: until the first lease ends */
	bool		already;		/* this holder held a slot already (renewed) */
} RlSemReply;

extern void redis_store_sem_keys(const RlArgs *args, char **holders, int *holderslen,
								 char **wake, int *wakelen);
extern bool redis_store_sem_acquire(const RlArgs *args, const char *holder, int64 max,
									int64 lease_us, RlSemReply *out, RedisResult *r);
extern bool redis_store_sem_call(ScriptId id, const RlArgs *args, const char *holder,
								 int64 lease_us, int64 *result, RedisResult *r);
extern bool redis_store_sem_wait(const RlArgs *args, int wait_ms, bool *woken, RedisResult *r);
extern bool redis_store_release_append(const char *hkey, int hkeylen, const char *wkey,
									   int wkeylen, const char *holder, bool eval);
extern void redis_store_release_exec(const char *hkey, int hkeylen, const char *wkey,
									 int wkeylen, const char *holder, RedisResult *r);

#endif
