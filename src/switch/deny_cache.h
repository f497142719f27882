/*
 * deny_cache.h
 *		Answering a sliding-log key that Redis has denied until time T from
 *		backend-local memory until T, without a round trip.
 */
#ifndef SLIDEWIN_DENY_CACHE_H
#define SLIDEWIN_DENY_CACHE_H

#include "limit.h"


/* What a call notes before asking the store: the key's generation and clock. */
typedef struct DenyStamp
{
	bool		known;			/* a denial may be kept for the fallback path */
	bool		track;			/* a write to the key must void cached denials */
	bool		usable;			/* a denial may be kept */
	uint32		hash;
	uint64		gen;
	int64		clock_us;
	bool		test_clock;
} DenyStamp;

/* Called from _PG_init: sets up shared memory when preloaded. */
extern void deny_cache_init(void);

/* True when the cache can work at all (preloaded and switched on). */
extern bool deny_cache_active(void);

/*
 * A denial of exactly this call (key, lim, win, cost), still valid: fills *o
 * and returns true. Sliding-log calls only; false for anything else.
 */
extern bool deny_cache_lookup(const RlArgs *args, RlOutcome *o);

/* Before asking the store; then deny_cache_remember with the outcome. */
extern void deny_cache_stamp(const RlArgs *args, DenyStamp *s);
extern void deny_cache_remember(const RlArgs *args, const DenyStamp *s, const RlOutcome *o);

/*
 * A denial Redis gave to this key and rule (in any backend of this server)
 * that still holds for a call of this cost: fills *o (store "fallback") and
 * returns true. For the fallback path, which cannot see Redis's counts.
 */
extern bool deny_cache_known_denial(const RlArgs *args, RlOutcome *o);

/* The hash of a user's key (not the Redis key) that the cache goes by. */
extern uint32 deny_cache_key_hash(const char *key, int keylen);

/*
 * Units of the key with this hash may have been freed (reset, refund):
 * every backend's cached denial of it is void from now on.
 */
extern void deny_cache_invalidate(uint32 key_hash);

/*
 * A refund of the key with this hash is queued (begin), then confirmed or
 * given up (end; maybe_applied when Redis may have applied it). In between,
 * no backend answers the key's bucket from its cache. Safe in abort.
 */
extern void deny_cache_refund_begin(uint32 key_hash);
extern void deny_cache_refund_end(uint32 key_hash, bool maybe_applied);

/* The Redis server or the key prefix changed: forget this backend's entries. */
extern void deny_cache_forget_all(void);

#endif
