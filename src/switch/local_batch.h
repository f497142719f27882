/*
 * local_batch.h
 *		Local batches of a hot sliding_log key: units reserved from Redis
 *		at once, used by this server's backends from shared memory.
 */
#ifndef SLIDEWIN_LOCAL_BATCH_H
#define SLIDEWIN_LOCAL_BATCH_H

#include "limit.h"
#include "redis_conn.h"

/* From _PG_init: the shared table and its worker (preloaded only). */
extern void local_batch_init(void);

/* Whether the call may be served from, or reserve, a local batch. */
extern bool local_batch_applies(const RlArgs *args);

/*
 * Note the call in its key's recent rate, and take its units from a live
 * batch of the key: true with *o filled. Otherwise *reserve says whether
 * the call should reserve a batch (local_batch_reserve, sized from that
 * rate) or go to Redis alone.
 */
extern bool local_batch_take(const RlArgs *args, RlOutcome *o, bool *reserve);

/*
 * A RedisOp (policy.h), right after local_batch_take asked for it: ask
 * Redis for a batch, the call's own units included; keep what the call
 * does not use for this server's backends.
 */
extern bool local_batch_reserve(const RlArgs *args, RlOutcome *o, RedisResult *r);

/*
 * rl_reset and rl_block: this server's live batches of the key end now,
 * their unused units given back by the worker.
 */
extern void local_batch_end_key(const RlArgs *args);

/*
 * rl_batch_held: the units this server's batches of the key (with this lim
 * and win, under the caller's redis_url) hold and have not used yet, the
 * ones a worker is giving back included; 0 without batches.
 */
extern int64 local_batch_held(const RlArgs *args);

#endif							/* SLIDEWIN_LOCAL_BATCH_H */
