/*
 * carry.h
 *		Carrying the fallback store's admissions back into Redis (carry.c),
 *		and the fallback store's side of a call, whose admissions are what
 *		is carried.
 */
#ifndef SLIDEWIN_CARRY_H
#define SLIDEWIN_CARRY_H

#include "limit.h"
#include "redis_conn.h"

/*
 * Called from _PG_init, before outage_init: the transaction callbacks of
 * the carry (PostgreSQL runs the newest first, so the outage memory's run
 * before them, as when they were one).
 */
extern void carry_init(void);

/*
 * Redis answered a call that was sent at asked_at (outage_clock): keep what
 * it counted for the key, for the fallback store. Sliding log only.
 */
extern void outage_remember(const RlArgs *args, int64 asked_at, const RlOutcome *o);
/* The same for each of rl_attempt_all's n keys (after outage_carry_all). */
extern void outage_remember_all(int n, const RlArgs *args, int64 asked_at,
								const RlOutcome *o);

/*
 * The fallback store's side of policy_run (policy.h's FallbackOp): the call
 * decided by the fallback store, on top of what Redis had counted for the
 * key (outage_seed); an admission it wrote for Redis to learn of is waited
 * for by the carry of the key (outage_fallback_wrote).
 */
extern void outage_fallback_attempt(const RlArgs *args, RlOutcome *o);
extern void outage_fallback_peek(const RlArgs *args, RlOutcome *o);

/*
 * The same attempt for a local batch's reserve in the fallback store
 * (local_batch.c): args->cost is the batch's units, and its row is scored
 * ahead_us after its admission, when its last unit may be used.
 */
extern void outage_fallback_reserve(const RlArgs *args, int64 ahead_us, RlOutcome *o);

/*
 * The fallback store wrote the row of an admission (cost units) that Redis
 * must learn of; until the transaction ends, a carry of the key waits for it.
 */
extern void outage_fallback_wrote(const RlArgs *args, int64 cost);
/* An admission counted so was rolled back before its transaction ended. */
extern void outage_fallback_unwrote(const RlArgs *args, int64 cost);

/*
 * Before Redis decides a call: carry the fallback store's admissions of the
 * key into Redis. False when Redis could not answer (r filled in); the call
 * then follows its policy.
 */
extern bool outage_carry(const RlArgs *args, RedisResult *r);
/*
 * The same for rl_attempt_all's n keys, each before Redis decides; what
 * each key's carry achieved is kept for outage_remember_all.
 */
extern bool outage_carry_all(int n, const RlArgs *args, RedisResult *r);

/* After Redis decided (or failed): what outage_carry held is let go. */
extern void outage_carry_end(void);

/*
 * After Redis decided a call: carry the admissions of one other key, so
 * that keys nobody calls again are not left behind. Never fails the call.
 */
extern void outage_carry_other(void);

#endif
