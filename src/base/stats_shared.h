/*
 * stats_shared.h
 *		The layout of the statistics' shared memory: the sink counts into it
 *		(base/stats.c), and the SQL functions behind the views read and
 *		reset it (sql/stats_views.c).
 *
 * Only those two files include this header; every other file bumps the
 * counters through stats.h and must not touch these structures. The
 * locking rules are in stats.c's header comment.
 */
#ifndef SLIDEWIN_STATS_SHARED_H
#define SLIDEWIN_STATS_SHARED_H

#include "port/atomics.h"
#include "storage/lwlock.h"
#include "storage/spin.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"

#include "limit.h"

typedef enum Counter
{
	C_CALLS,
	C_ADMITTED,
	C_DENIED,
	C_UNITS_ADMITTED,
	C_DENY_CACHE_HITS,
	C_SHADOW_DENIALS,
	C_REDIS_CALLS,
	C_FALLBACK_CALLS,
	C_POLICY_ANSWERS,
	C_REDIS_ERRORS,
	C_REDIS_TIMEOUTS,
	C_RECONNECTS,
	C_BREAKER_TRIPS,
	C_REFUNDS,
	C_REFUNDS_DROPPED,
	/* concurrency slots (1.7): rl_slot_stats(), the last columns of rl_stats */
	C_SLOT_ACQUISITIONS,
	C_SLOT_DENIALS,
	C_SLOT_WAITS,
	C_SLOT_RELEASES,
	C_SLOT_LEASES_ENDED,
	C_SLOT_RELEASES_LOST,
	/* exactness across an outage (1.8): rl_outage_stats(), after them */
	C_OUTAGE_SEEDED_UNITS,
	C_OUTAGE_UNSEEDED_CALLS,
	C_OUTAGE_CARRIED,
	NCOUNTERS
} Counter;

/* rl_slot_stats()'s counters end where the outage's begin. */
#define NCOUNTERS_SLOTS (C_SLOT_RELEASES_LOST + 1)

/* rl_stats()'s counters, the columns it has had since 1.2. */
#define NCOUNTERS_RATE (C_REFUNDS_DROPPED + 1)

/* The rule "algorithm" of concurrency slots in rl_stats_rules (lim: max, win: lease). */
#define RULE_CONCURRENCY 100

/* Four buckets per power of two; the last one holds everything from 2^25 us (~34 s). */
#define RTT_BUCKETS 100

typedef struct StatsSlot
{
	pg_atomic_uint64 c[NCOUNTERS];
	pg_atomic_uint64 rtt[RTT_BUCKETS];
} StatsSlot;

typedef struct RuleKey
{
	int32		algorithm;
	int32		pad;			/* zero: keys are compared as bytes */
	int64		lim;
	int64		win_us;
} RuleKey;

typedef struct RuleEntry
{
	slock_t		mutex;
	bool		in_use;			/* key is the rule counted here */
	RuleKey		key;
	int64		calls;
	int64		admitted;
	int64		denied;
	int64		units_admitted;
	int64		near_limit;
	int64		shadow_denials;
} RuleEntry;

typedef struct RuleHashEntry
{
	RuleKey		key;
	int			index;
} RuleHashEntry;

typedef struct KeyEntry
{
	slock_t		mutex;
	uint64		hash;			/* 0: free */
	int			keylen;
	int64		denied;			/* units, an over-estimate by at most error */
	int64		error;
	int64		admitted;		/* units, since the key was tracked */
	TimestampTz last_denied_at;
	int64		last_retry_us;
	char		key[RL_MAX_KEY_BYTES];
} KeyEntry;

typedef struct KeyHashEntry
{
	uint64		hash;
	int			index;
} KeyHashEntry;

typedef struct StatsShared
{
	LWLock	   *lock;			/* the hashes, the baseline, the reset */
	pg_atomic_uint64 reset_gen; /* bumped by every reset */
	pg_atomic_uint64 keys_gen;	/* bumped whenever a key is tracked anew */
	TimestampTz stats_reset;
	uint64		base[NCOUNTERS];
	uint64		base_rtt[RTT_BUCKETS];
	int			nslots;			/* per-process slots; one more for the rest */
	Size		slot_stride;
	int			max_rules;
	int			rules_used;
	int			max_keys;
	int			keys_used;
	uint32		filter_mask;	/* filter entries - 1 */
	/* then: slots, rules (max_rules + 1, the last the overflow), keys, filter */
} StatsShared;

/* Set up by stats.c at shared memory startup; NULL when not preloaded. */
extern StatsShared *stats_shared;
extern char *stats_slots_base;
extern RuleEntry *stats_rules;
extern KeyEntry *stats_keys;
extern pg_atomic_uint32 *stats_key_filter;
extern HTAB *stats_rule_hash;
extern HTAB *stats_key_hash;

static inline StatsSlot *
slot_at(int i)
{
	return (StatsSlot *) (stats_slots_base + i * stats_shared->slot_stride);
}

#endif
