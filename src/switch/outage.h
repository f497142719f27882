/*
 * outage.h
 *		Exactness across an outage (outage.c): what Redis last counted, kept
 *		for the fallback store, and the fallback store's admissions carried
 *		back into Redis.
 */
#ifndef SLIDEWIN_OUTAGE_H
#define SLIDEWIN_OUTAGE_H

#include "fallback_seed.h"
#include "limit.h"
#include "redis_conn.h"

/* Off: the fallback store and Redis count apart, as before 1.8. */

/* Called from _PG_init: sets up shared memory when preloaded. */
extern void outage_init(void);

/* The fallback store's clock, Unix microseconds (the test clock if set). */
extern int64 outage_clock(void);

/*
 * A call of the key is about to be sent to Redis (outage_asking), and its
 * answer, or its failure, is in (outage_answered): in between, a fallback
 * decision of another backend counts its units as spent.
 */
extern void outage_asking(const RlArgs *args);
extern void outage_answered(void);

/*
 * Redis answered a call that was sent at asked_at (outage_clock): keep what
 * it counted for the key, for the fallback store. Sliding log only.
 */
extern void outage_remember(const RlArgs *args, int64 asked_at, const RlOutcome *o);

/*
 * What Redis last counted for the key and window on this server, for the
 * fallback store to add to its own rows (FallbackSeed, fallback.h). False
 * when nothing is kept for it.
 */
extern bool outage_seed(const RlArgs *args, FallbackSeed *seed);

/* rl_reset: what Redis had counted for the key no longer holds. */
extern void outage_forget(const RlArgs *args);

/*
 * The fallback store's side of policy_run (policy.h's FallbackOp): the call
 * decided by the fallback store, on top of what Redis had counted for the
 * key (outage_seed); an admission it wrote for Redis to learn of is waited
 * for by the carry of the key (outage_fallback_wrote).
 */
extern void outage_fallback_attempt(const RlArgs *args, RlOutcome *o);
extern void outage_fallback_peek(const RlArgs *args, RlOutcome *o);

/*
 * The fallback store wrote the row of an admission (cost units) that Redis
 * must learn of; until the transaction ends, a carry of the key waits for it.
 */
extern void outage_fallback_wrote(const RlArgs *args, int64 cost);

/*
 * Before Redis decides a call: carry the fallback store's admissions of the
 * key into Redis. False when Redis could not answer (r filled in); the call
 * then follows its policy.
 */
extern bool outage_carry(const RlArgs *args, RedisResult *r);

/* After Redis decided (or failed): what outage_carry held is let go. */
extern void outage_carry_end(void);

/*
 * After Redis decided a call: carry the admissions of one other key, so
 * that keys nobody calls again are not left behind. Never fails the call.
 */
extern void outage_carry_other(void);

#endif
