/*-------------------------------------------------------------------------
 *
 * stats.c
 *		What the limiter decided, server-wide: the counters behind the
 *		rl_stats, rl_stats_rules and rl_top_keys views, in shared memory.
 *
 * Three structures, each built so that a call adds to it without taking a
 * lock that every backend shares:
 *
 * Counters (rl_stats). Every process has a slot of its own, indexed by its
 * PGPROC number, and is the only one that writes it: an increment is a plain
 * read and write of a 64-bit atomic, without a lock or a bus-locked
 * instruction. A reader sums the slots. Slots outlive the backends that
 * used them (a new backend in the same PGPROC carries on adding), so the
 * sums only grow; rl_stats_reset records the sums as a baseline that the
 * view subtracts, rather than writing other backends' slots. A process
 * without a PGPROC (none calls slidewin today) adds to one extra slot with
 * atomic additions. Redis latency is a histogram in the same slots: fixed
 * buckets, four per power of two of microseconds, so no sample is kept and
 * a percentile is known to within a quarter of an octave.
 *
 * Rules (rl_stats_rules), in the manner of pg_stat_statements: a shared
 * hash from (algorithm, lim, win) to an entry of a fixed array, bounded by
 * slidewin.stats_max_rules, under one LWLock; each entry's counts under its
 * own spinlock. Entries are never evicted: a rule that finds the array full
 * is counted in the overflow entry, the last one. A backend remembers which
 * entry its recent rules have, so that after the first call of a rule it
 * takes only the entry's spinlock; the entry says under that spinlock which
 * rule it holds, so a reset that reassigned it in between is noticed and
 * the rule looked up again.
 *
 * Top keys (rl_top_keys): the Space-Saving algorithm (Metwally, Agrawal and
 * El Abbadi, 2005) over the units denied, in slidewin.track_keys entries.
 * A denied key that is not tracked takes a free entry or, when none is
 * free, replaces the entry with the fewest units denied, m: it starts at m
 * plus its cost, with m as its error bound, since up to m of those units
 * may belong to keys it replaced. A key's true count is between its count
 * minus its error and its count. Lookups, insertions and replacements are
 * under the LWLock; counts under each entry's spinlock, and a backend that
 * knows where a key is goes straight to the entry, as for rules. A filter of
 * counts per bucket of key hashes, changed under the LWLock and read without
 * it, tells an admitted call whose key is not tracked (nearly every one) that
 * it has nothing to count. Admitted
 * units are counted for tracked keys only, from when they were tracked.
 * Denials by the deny policy while Redis is down are not a key's doing and
 * are left out; those of every store (and the deny cache) count.
 *
 * None of this survives a restart: after a crash the postmaster makes
 * shared memory anew, and every count starts again from zero.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/htup_details.h"
#include "access/twophase.h"
#include "catalog/pg_authid.h"
#include "common/hashfn.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "port/pg_bitutils.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "compat.h"
#include "fallback_carry.h"
#include "stats.h"

bool		slidewin_stats = true;
int			slidewin_stats_max_rules = 1000;
int			slidewin_track_keys = 1000;

PG_FUNCTION_INFO_V1(slidewin_stats_fn);
PG_FUNCTION_INFO_V1(slidewin_slot_stats_fn);
PG_FUNCTION_INFO_V1(slidewin_outage_stats_fn);
PG_FUNCTION_INFO_V1(slidewin_stats_rules);
PG_FUNCTION_INFO_V1(slidewin_top_keys);
PG_FUNCTION_INFO_V1(slidewin_stats_reset);

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

static StatsShared *stats_shared = NULL;
static char *stats_slots_base = NULL;
static RuleEntry *stats_rules = NULL;
static KeyEntry *stats_keys = NULL;
static pg_atomic_uint32 *stats_key_filter = NULL;
static HTAB *stats_rule_hash = NULL;
static HTAB *stats_key_hash = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* ---------------------------------------------------------------------
 * Shared memory
 * ---------------------------------------------------------------------
 */

static int
process_slots(void)
{
	return MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts;
}

static Size
slot_stride(void)
{
	return TYPEALIGN(PG_CACHE_LINE_SIZE, sizeof(StatsSlot));
}

/*
 * Entries of the filter of tracked keys: counts of tracked keys per bucket
 * of key hashes, at least 16 buckets per key so that an admitted key that is
 * not tracked is almost always told so without the LWLock.
 */
static uint32
filter_entries(void)
{
	uint32		n = 1024;

	while (n < (uint32) slidewin_track_keys * 16 && n < (1U << 20))
		n <<= 1;
	return n;
}

static Size
stats_struct_size(void)
{
	Size		size = MAXALIGN(sizeof(StatsShared));

	size = add_size(size, mul_size(process_slots() + 1, slot_stride()));
	size = add_size(size, mul_size(slidewin_stats_max_rules + 1, MAXALIGN(sizeof(RuleEntry))));
	size = add_size(size, mul_size(slidewin_track_keys, MAXALIGN(sizeof(KeyEntry))));
	size = add_size(size, mul_size(filter_entries(), sizeof(pg_atomic_uint32)));
	return size;
}

static void
stats_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(add_size(add_size(stats_struct_size(), PG_CACHE_LINE_SIZE),
									add_size(hash_estimate_size(Max(slidewin_stats_max_rules, 1),
																sizeof(RuleHashEntry)),
											 hash_estimate_size(Max(slidewin_track_keys, 1),
																sizeof(KeyHashEntry)))));
	RequestNamedLWLockTranche("slidewin stats", 1);
}

static void
stats_shmem_startup(void)
{
	bool		found;
	HASHCTL		info;
	char	   *p;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	p = ShmemInitStruct("slidewin stats", add_size(stats_struct_size(), PG_CACHE_LINE_SIZE),
						&found);
	stats_shared = (StatsShared *) p;
	p += MAXALIGN(sizeof(StatsShared));
	stats_slots_base = (char *) TYPEALIGN(PG_CACHE_LINE_SIZE, p);
	p = stats_slots_base + (process_slots() + 1) * slot_stride();
	stats_rules = (RuleEntry *) p;
	p += (slidewin_stats_max_rules + 1) * MAXALIGN(sizeof(RuleEntry));
	stats_keys = (KeyEntry *) p;
	p += slidewin_track_keys * MAXALIGN(sizeof(KeyEntry));
	stats_key_filter = (pg_atomic_uint32 *) p;
	if (!found)
	{
		memset(stats_shared, 0, sizeof(StatsShared));
		stats_shared->lock = &(GetNamedLWLockTranche("slidewin stats"))->lock;
		pg_atomic_init_u64(&stats_shared->reset_gen, 1);
		pg_atomic_init_u64(&stats_shared->keys_gen, 1);
		stats_shared->stats_reset = GetCurrentTimestamp();
		stats_shared->nslots = process_slots();
		stats_shared->slot_stride = slot_stride();
		stats_shared->max_rules = slidewin_stats_max_rules;
		stats_shared->max_keys = slidewin_track_keys;
		for (int i = 0; i <= stats_shared->nslots; i++)
		{
			StatsSlot  *s = (StatsSlot *) (stats_slots_base + i * stats_shared->slot_stride);

			for (int c = 0; c < NCOUNTERS; c++)
				pg_atomic_init_u64(&s->c[c], 0);
			for (int b = 0; b < RTT_BUCKETS; b++)
				pg_atomic_init_u64(&s->rtt[b], 0);
		}
		for (int i = 0; i <= stats_shared->max_rules; i++)
		{
			memset(&stats_rules[i], 0, sizeof(RuleEntry));
			SpinLockInit(&stats_rules[i].mutex);
		}
		stats_rules[stats_shared->max_rules].in_use = true; /* the overflow row */
		for (int i = 0; i < stats_shared->max_keys; i++)
		{
			memset(&stats_keys[i], 0, offsetof(KeyEntry, key));
			SpinLockInit(&stats_keys[i].mutex);
		}
		stats_shared->filter_mask = filter_entries() - 1;
		for (uint32 i = 0; i <= stats_shared->filter_mask; i++)
			pg_atomic_init_u32(&stats_key_filter[i], 0);
	}

	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(RuleKey);
	info.entrysize = sizeof(RuleHashEntry);
	stats_rule_hash = slidewin_shmem_init_hash("slidewin stats rules", Max(slidewin_stats_max_rules, 1),
										 &info, HASH_ELEM | HASH_BLOBS);
	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(uint64);
	info.entrysize = sizeof(KeyHashEntry);
	stats_key_hash = slidewin_shmem_init_hash("slidewin stats keys", Max(slidewin_track_keys, 1),
										&info, HASH_ELEM | HASH_BLOBS);
	LWLockRelease(AddinShmemInitLock);
}

void
stats_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = stats_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = stats_shmem_startup;
}

static inline bool
stats_on(void)
{
	return stats_shared != NULL && slidewin_stats;
}

/* ---------------------------------------------------------------------
 * Counters
 * ---------------------------------------------------------------------
 */

static inline StatsSlot *
slot_at(int i)
{
	return (StatsSlot *) (stats_slots_base + i * stats_shared->slot_stride);
}

/*
 * Our own slot, written by nobody else; NULL when we have no PGPROC (or it
 * has been released at exit), in which case the shared extra slot is used.
 */
static inline StatsSlot *
own_slot(void)
{
	int			procno = SLIDEWIN_MY_PROC_NUMBER();

	if (procno >= 0 && procno < stats_shared->nslots)
		return slot_at(procno);
	return NULL;
}

static inline void
add_to(pg_atomic_uint64 *own, pg_atomic_uint64 *shared_one, uint64 n)
{
	if (own)
		pg_atomic_write_u64(own, pg_atomic_read_u64(own) + n);
	else
		pg_atomic_fetch_add_u64(shared_one, n);
}

static inline void
bump(Counter c, uint64 n)
{
	StatsSlot  *s = own_slot();

	add_to(s ? &s->c[c] : NULL, &slot_at(stats_shared->nslots)->c[c], n);
}

static int
rtt_bucket(int64 us)
{
	int			msb;
	int			b;

	if (us < 4)
		return us < 0 ? 0 : (int) us;
	msb = pg_leftmost_one_pos64((uint64) us);
	b = 4 * (msb - 1) + (int) ((us >> (msb - 2)) & 3);
	return Min(b, RTT_BUCKETS - 1);
}

/* The least value of bucket b (b may be RTT_BUCKETS: the end of the last). */
static int64
rtt_bucket_floor(int b)
{
	if (b < 4)
		return b;
	return (int64) (4 + b % 4) << (b / 4 - 1);
}

void
stats_redis_rtt(int64 us)
{
	StatsSlot  *s;
	int			b;

	if (!stats_on())
		return;
	s = own_slot();
	b = rtt_bucket(us);
	add_to(s ? &s->rtt[b] : NULL, &slot_at(stats_shared->nslots)->rtt[b], 1);
}

void
stats_redis_failed(RedisStatus status)
{
	if (!stats_on())
		return;
	bump(C_REDIS_ERRORS, 1);
	if (status == RS_FAIL_TIMEOUT)
		bump(C_REDIS_TIMEOUTS, 1);
}

void
stats_breaker_trip(void)
{
	if (stats_on())
		bump(C_BREAKER_TRIPS, 1);
}

void
stats_reconnect(void)
{
	if (stats_on())
		bump(C_RECONNECTS, 1);
}

void
stats_refund(bool done)
{
	if (stats_on())
		bump(done ? C_REFUNDS : C_REFUNDS_DROPPED, 1);
}

void
stats_outage(StatsOutage what, int64 n)
{
	static const Counter counters[] = {
		[STATS_OUTAGE_SEEDED_UNITS] = C_OUTAGE_SEEDED_UNITS,
		[STATS_OUTAGE_UNSEEDED_CALL] = C_OUTAGE_UNSEEDED_CALLS,
		[STATS_OUTAGE_CARRIED] = C_OUTAGE_CARRIED,
	};

	if (stats_on() && n > 0)
		bump(counters[what], (uint64) n);
}

void
stats_slot_released(bool delivered)
{
	if (stats_on())
		bump(delivered ? C_SLOT_RELEASES : C_SLOT_RELEASES_LOST, 1);
}

/* ---------------------------------------------------------------------
 * Rules
 * ---------------------------------------------------------------------
 */

#define RULE_CACHE 256

typedef struct RuleCacheEntry
{
	RuleKey		key;
	int			index;			/* -1: empty */
	uint64		gen;			/* reset_gen when looked up */
} RuleCacheEntry;

static RuleCacheEntry rule_cache[RULE_CACHE];
static bool rule_cache_ready = false;

/* The entry of a rule, found or made under the LWLock; the overflow one if full. */
static int
rule_lookup(const RuleKey *key)
{
	RuleHashEntry *h;
	bool		found;
	int			index;

	LWLockAcquire(stats_shared->lock, LW_SHARED);
	h = hash_search(stats_rule_hash, key, HASH_FIND, NULL);
	index = h ? h->index : -1;
	LWLockRelease(stats_shared->lock);
	if (index >= 0)
		return index;

	LWLockAcquire(stats_shared->lock, LW_EXCLUSIVE);
	h = hash_search(stats_rule_hash, key, HASH_FIND, NULL);
	if (h)
		index = h->index;
	else if (stats_shared->rules_used < stats_shared->max_rules &&
			 (h = hash_search(stats_rule_hash, key, HASH_ENTER_NULL, &found)) != NULL)
	{
		RuleEntry  *e;

		index = stats_shared->rules_used++;
		h->index = index;
		e = &stats_rules[index];
		SpinLockAcquire(&e->mutex);
		e->in_use = true;
		e->key = *key;
		e->calls = e->admitted = e->denied = 0;
		e->units_admitted = e->near_limit = e->shadow_denials = 0;
		SpinLockRelease(&e->mutex);
	}
	else
		index = stats_shared->max_rules;
	LWLockRelease(stats_shared->lock);
	return index;
}

/*
 * Count one call of a rule: admitted (with its units) or denied, near the
 * limit (an admission that left at most a fifth of it), shadowed.
 */
static void
count_rule_key(const RuleKey *rkey, bool admitted, int64 units, bool near, bool shadowed)
{
	RuleKey		key = *rkey;
	RuleCacheEntry *lc;
	uint64		gen = pg_atomic_read_u64(&stats_shared->reset_gen);

	if (!rule_cache_ready)
	{
		for (int i = 0; i < RULE_CACHE; i++)
			rule_cache[i].index = -1;
		rule_cache_ready = true;
	}
	lc = &rule_cache[hash_bytes((const unsigned char *) &key, sizeof(key)) % RULE_CACHE];

	for (int attempt = 0;; attempt++)
	{
		RuleEntry  *e;
		int			index;
		bool		counted = false;

		if (lc->index >= 0 && lc->gen == gen && memcmp(&lc->key, &key, sizeof(key)) == 0)
			index = lc->index;
		else
		{
			index = rule_lookup(&key);
			lc->key = key;
			lc->index = index;
			lc->gen = gen;
		}
		/* After a second miss (a reset in between) the overflow row takes it. */
		if (attempt > 0)
			index = stats_shared->max_rules;
		e = &stats_rules[index];
		SpinLockAcquire(&e->mutex);
		if (index == stats_shared->max_rules ||
			(e->in_use && memcmp(&e->key, &key, sizeof(key)) == 0))
		{
			e->calls++;
			if (admitted)
			{
				e->admitted++;
				e->units_admitted += units;
			}
			else
				e->denied++;
			if (near)
				e->near_limit++;
			if (shadowed)
				e->shadow_denials++;
			counted = true;
		}
		SpinLockRelease(&e->mutex);
		if (counted)
			return;
		lc->index = -1;
		gen = pg_atomic_read_u64(&stats_shared->reset_gen);
	}
}

static void
count_rule(const RlArgs *args, const RlOutcome *o)
{
	RuleKey		key;

	memset(&key, 0, sizeof(key));
	key.algorithm = args->algorithm;
	key.lim = args->lim;
	key.win_us = args->win_us;
	count_rule_key(&key, o->allowed, args->cost,
				   o->allowed && !o->shadowed && o->known && o->remaining * 5 <= args->lim,
				   o->shadowed);
}

/*
 * An rl_acquire call, counted once whatever it waited: acquired or denied,
 * whether it waited, the leases the store found ended, and its rule
 * (concurrency, max, lease), where an acquisition that left at most a fifth
 * of the slots free is near the limit. holders < 0: unknown.
 */
void
stats_count_slot(int64 max, int64 lease_us, bool acquired, int64 holders, bool waited,
				 int64 leases_ended)
{
	RuleKey		key;

	if (!stats_on())
		return;
	bump(acquired ? C_SLOT_ACQUISITIONS : C_SLOT_DENIALS, 1);
	if (waited)
		bump(C_SLOT_WAITS, 1);
	if (leases_ended > 0)
		bump(C_SLOT_LEASES_ENDED, leases_ended);
	memset(&key, 0, sizeof(key));
	key.algorithm = RULE_CONCURRENCY;
	key.lim = max;
	key.win_us = lease_us;
	count_rule_key(&key, acquired, acquired ? 1 : 0,
				   acquired && holders >= 0 && (max - holders) * 5 <= max, false);
}

/* ---------------------------------------------------------------------
 * Top keys
 * ---------------------------------------------------------------------
 */

#define KEY_CACHE 256

typedef struct KeyCacheEntry
{
	uint64		hash;			/* 0: empty */
	int			index;			/* -1: not tracked as of gen */
	uint64		gen;			/* keys_gen when found untracked */
} KeyCacheEntry;

static KeyCacheEntry key_cache[KEY_CACHE];

static inline bool
key_is(const KeyEntry *e, uint64 hash, const RlArgs *args)
{
	return e->hash == hash && e->keylen == args->keylen &&
		memcmp(e->key, args->key, args->keylen) == 0;
}

static inline void
key_add(KeyEntry *e, const RlArgs *args, const RlOutcome *o, TimestampTz now)
{
	if (o->allowed)
		e->admitted += args->cost;
	else
	{
		e->denied += args->cost;
		e->last_denied_at = now;
		e->last_retry_us = o->retry_us;
	}
}

/* Count into entry i if it still holds the key. */
static bool
key_try(int i, uint64 hash, const RlArgs *args, const RlOutcome *o, TimestampTz now)
{
	KeyEntry   *e = &stats_keys[i];
	bool		ok;

	SpinLockAcquire(&e->mutex);
	ok = key_is(e, hash, args);
	if (ok)
		key_add(e, args, o, now);
	SpinLockRelease(&e->mutex);
	return ok;
}

/*
 * A denial of a key that is not tracked (under the LWLock, exclusive): a
 * free entry, or Space-Saving's replacement of the smallest count.
 */
static int
key_track(uint64 hash, const RlArgs *args, const RlOutcome *o, TimestampTz now)
{
	KeyHashEntry *h;
	KeyEntry   *e;
	int			victim;
	int64		least = 0;
	bool		found;

	if (stats_shared->keys_used < stats_shared->max_keys)
		victim = stats_shared->keys_used++;
	else
	{
		victim = 0;
		for (int i = 0; i < stats_shared->max_keys; i++)
		{
			int64		d;

			SpinLockAcquire(&stats_keys[i].mutex);
			d = stats_keys[i].denied;
			SpinLockRelease(&stats_keys[i].mutex);
			if (i == 0 || d < least)
			{
				least = d;
				victim = i;
			}
		}
		hash_search(stats_key_hash, &stats_keys[victim].hash, HASH_REMOVE, NULL);
		pg_atomic_fetch_sub_u32(&stats_key_filter[stats_keys[victim].hash & stats_shared->filter_mask], 1);
	}
	h = hash_search(stats_key_hash, &hash, HASH_ENTER_NULL, &found);
	if (h == NULL)
		return -1;				/* cannot happen: one out, one in */
	h->index = victim;
	pg_atomic_fetch_add_u32(&stats_key_filter[hash & stats_shared->filter_mask], 1);
	e = &stats_keys[victim];
	SpinLockAcquire(&e->mutex);
	e->hash = hash;
	e->keylen = args->keylen;
	memcpy(e->key, args->key, args->keylen);
	e->denied = least;
	e->error = least;
	e->admitted = 0;
	key_add(e, args, o, now);
	SpinLockRelease(&e->mutex);
	pg_atomic_fetch_add_u64(&stats_shared->keys_gen, 1);
	return victim;
}

static void
count_key(const RlArgs *args, const RlOutcome *o)
{
	uint64		hash = hash_bytes_extended((const unsigned char *) args->key, args->keylen, 0);
	KeyCacheEntry *lc;
	TimestampTz now = o->allowed ? 0 : GetCurrentTimestamp();
	KeyHashEntry *h;
	uint64		gen;
	int			index;
	bool		found;

	if (hash == 0)
		hash = 1;
	/* No tracked key in the bucket: an admission has nothing to count. */
	if (o->allowed && pg_atomic_read_u32(&stats_key_filter[hash & stats_shared->filter_mask]) == 0)
		return;
	lc = &key_cache[hash % KEY_CACHE];
	if (lc->hash == hash)
	{
		if (lc->index >= 0 && key_try(lc->index, hash, args, o, now))
			return;
		/* Known untracked, and no key has been tracked since. */
		if (lc->index < 0 && o->allowed && lc->gen == pg_atomic_read_u64(&stats_shared->keys_gen))
			return;
	}

	gen = pg_atomic_read_u64(&stats_shared->keys_gen);
	LWLockAcquire(stats_shared->lock, LW_SHARED);
	h = hash_search(stats_key_hash, &hash, HASH_FIND, NULL);
	found = h != NULL;
	index = h ? h->index : -1;
	if (index >= 0 && !key_try(index, hash, args, o, now))
		index = -1;				/* another key with the same 64-bit hash */
	LWLockRelease(stats_shared->lock);

	/* A denied key that is not tracked: track it (exclusive). */
	if (!found && !o->allowed)
	{
		LWLockAcquire(stats_shared->lock, LW_EXCLUSIVE);
		h = hash_search(stats_key_hash, &hash, HASH_FIND, NULL);
		if (h == NULL)
			index = key_track(hash, args, o, now);
		else if (key_try(h->index, hash, args, o, now))
			index = h->index;
		LWLockRelease(stats_shared->lock);
	}
	lc->hash = hash;
	lc->index = index;
	lc->gen = gen;
}

/* ---------------------------------------------------------------------
 * A call's answer
 * ---------------------------------------------------------------------
 */

void
stats_count_call(const RlArgs *args, const RlOutcome *o, StatsSource source)
{
	static const Counter by_source[] = {
		[STATS_REDIS] = C_REDIS_CALLS,
		[STATS_FALLBACK] = C_FALLBACK_CALLS,
		[STATS_POLICY] = C_POLICY_ANSWERS,
		[STATS_DENY_CACHE] = C_DENY_CACHE_HITS,
	};

	if (!stats_on())
		return;
	bump(by_source[source], 1);
	if (o->allowed)
	{
		bump(C_ADMITTED, 1);
		bump(C_UNITS_ADMITTED, args->cost);
		if (o->shadowed)
			bump(C_SHADOW_DENIALS, 1);
	}
	else
		bump(C_DENIED, 1);
	bump(C_CALLS, 1);
	count_rule(args, o);
	/* A key is limited by a store; the deny policy's answers are outages. */
	if (stats_shared->max_keys > 0 && source != STATS_POLICY)
		count_key(args, o);
}

/* ---------------------------------------------------------------------
 * The views
 * ---------------------------------------------------------------------
 */

static void
require_shared(void)
{
	if (stats_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("slidewin statistics need the library to be preloaded"),
				 errhint("Add slidewin to shared_preload_libraries and restart the server.")));
}

static Datum
interval_us(int64 us)
{
	Interval   *iv = palloc0(sizeof(Interval));

	iv->time = us;
	return IntervalPGetDatum(iv);
}

/* The upper edge of the bucket holding the p-th fraction of n samples. */
static Datum
rtt_percentile(const uint64 *hist, uint64 n, double p, bool *isnull)
{
	uint64		rank = (uint64) ceil(p * n);
	uint64		seen = 0;

	*isnull = (n == 0);
	if (n == 0)
		return (Datum) 0;
	rank = Max(rank, 1);
	for (int b = 0; b < RTT_BUCKETS; b++)
	{
		seen += hist[b];
		if (seen >= rank)
			return interval_us(rtt_bucket_floor(b + 1));
	}
	return interval_us(rtt_bucket_floor(RTT_BUCKETS));
}

/* The counters and round-trip histogram summed over every slot, less the reset's baseline. */
static void
read_counters(uint64 *sum, uint64 *hist, uint64 *n, TimestampTz *reset)
{
	memset(sum, 0, NCOUNTERS * sizeof(uint64));
	memset(hist, 0, RTT_BUCKETS * sizeof(uint64));
	*n = 0;
	LWLockAcquire(stats_shared->lock, LW_SHARED);
	for (int i = 0; i <= stats_shared->nslots; i++)
	{
		StatsSlot  *s = slot_at(i);

		for (int c = 0; c < NCOUNTERS; c++)
			sum[c] += pg_atomic_read_u64(&s->c[c]);
		for (int b = 0; b < RTT_BUCKETS; b++)
			hist[b] += pg_atomic_read_u64(&s->rtt[b]);
	}
	for (int c = 0; c < NCOUNTERS; c++)
		sum[c] -= stats_shared->base[c];
	for (int b = 0; b < RTT_BUCKETS; b++)
	{
		hist[b] -= stats_shared->base_rtt[b];
		*n += hist[b];
	}
	*reset = stats_shared->stats_reset;
	LWLockRelease(stats_shared->lock);
}

/* rl_stats(): the rate limits' counters, round trips and the reset time. */
Datum
slidewin_stats_fn(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[NCOUNTERS_RATE + 3];
	bool		nulls[NCOUNTERS_RATE + 3] = {0};
	uint64		sum[NCOUNTERS];
	uint64		hist[RTT_BUCKETS];
	uint64		n;
	TimestampTz reset;

	require_shared();
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	read_counters(sum, hist, &n, &reset);
	for (int c = 0; c < NCOUNTERS_RATE; c++)
		values[c] = Int64GetDatum((int64) sum[c]);
	values[NCOUNTERS_RATE] = rtt_percentile(hist, n, 0.50, &nulls[NCOUNTERS_RATE]);
	values[NCOUNTERS_RATE + 1] = rtt_percentile(hist, n, 0.99, &nulls[NCOUNTERS_RATE + 1]);
	values[NCOUNTERS_RATE + 2] = TimestampTzGetDatum(reset);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), values, nulls)));
}

/* rl_slot_stats(): the concurrency slots' counters (1.7), the last columns of rl_stats. */
Datum
slidewin_slot_stats_fn(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[NCOUNTERS_SLOTS - NCOUNTERS_RATE];
	bool		nulls[NCOUNTERS_SLOTS - NCOUNTERS_RATE] = {0};
	uint64		sum[NCOUNTERS];
	uint64		hist[RTT_BUCKETS];
	uint64		n;
	TimestampTz reset;

	require_shared();
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	read_counters(sum, hist, &n, &reset);
	for (int c = NCOUNTERS_RATE; c < NCOUNTERS_SLOTS; c++)
		values[c - NCOUNTERS_RATE] = Int64GetDatum((int64) sum[c]);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), values, nulls)));
}

/*
 * rl_outage_stats(): the counters of exactness across an outage (1.8), and
 * the admissions of this database's fallback store still waiting to be
 * carried back (counted in its table now, not kept in shared memory).
 */
Datum
slidewin_outage_stats_fn(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[4];
	bool		nulls[4] = {0};
	uint64		sum[NCOUNTERS];
	uint64		hist[RTT_BUCKETS];
	uint64		n;
	TimestampTz reset;

	require_shared();
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	read_counters(sum, hist, &n, &reset);
	values[0] = Int64GetDatum((int64) sum[C_OUTAGE_SEEDED_UNITS]);
	values[1] = Int64GetDatum((int64) sum[C_OUTAGE_UNSEEDED_CALLS]);
	values[2] = Int64GetDatum((int64) sum[C_OUTAGE_CARRIED]);
	values[3] = Int64GetDatum(fallback_carry_pending());
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), values, nulls)));
}

/* rl_stats_rules(): one row per rule; the overflow row has a NULL rule. */
Datum
slidewin_stats_rules(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			used;

	require_shared();
	InitMaterializedSRF(fcinfo, 0);

	LWLockAcquire(stats_shared->lock, LW_SHARED);
	used = stats_shared->rules_used;
	for (int i = 0; i <= stats_shared->max_rules; i++)
	{
		RuleEntry	copy;
		Datum		values[9];
		bool		nulls[9] = {0};

		if (i >= used && i != stats_shared->max_rules)
			continue;
		SpinLockAcquire(&stats_rules[i].mutex);
		copy = stats_rules[i];
		SpinLockRelease(&stats_rules[i].mutex);
		if (!copy.in_use || (i == stats_shared->max_rules && copy.calls == 0))
			continue;
		if (i == stats_shared->max_rules)
			nulls[0] = nulls[1] = nulls[2] = true;
		else
		{
			values[0] = CStringGetTextDatum(copy.key.algorithm == RULE_CONCURRENCY ? "concurrency" :
											limit_algorithm_name(copy.key.algorithm));
			values[1] = Int64GetDatum(copy.key.lim);
			values[2] = interval_us(copy.key.win_us);
		}
		values[3] = Int64GetDatum(copy.calls);
		values[4] = Int64GetDatum(copy.admitted);
		values[5] = Int64GetDatum(copy.denied);
		values[6] = Int64GetDatum(copy.units_admitted);
		values[7] = Int64GetDatum(copy.near_limit);
		values[8] = Int64GetDatum(copy.shadow_denials);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	LWLockRelease(stats_shared->lock);
	return (Datum) 0;
}

/* rl_top_keys(): every tracked key; the key itself only for readers of all stats. */
Datum
slidewin_top_keys(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	bool		show_key = is_member_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS);
	char	   *buf = palloc(RL_MAX_KEY_BYTES);

	require_shared();
	InitMaterializedSRF(fcinfo, 0);

	LWLockAcquire(stats_shared->lock, LW_SHARED);
	for (int i = 0; i < stats_shared->keys_used; i++)
	{
		KeyEntry   *e = &stats_keys[i];
		Datum		values[6];
		bool		nulls[6] = {0};
		int			len;
		int64		denied,
					admitted,
					error,
					retry;
		TimestampTz at;

		SpinLockAcquire(&e->mutex);
		if (e->hash == 0)
		{
			SpinLockRelease(&e->mutex);
			continue;
		}
		denied = e->denied;
		admitted = e->admitted;
		error = e->error;
		at = e->last_denied_at;
		retry = e->last_retry_us;
		len = e->keylen;
		if (show_key)
			memcpy(buf, e->key, len);
		SpinLockRelease(&e->mutex);
		if (show_key)
			values[0] = PointerGetDatum(cstring_to_text_with_len(buf, len));
		else
			nulls[0] = true;
		values[1] = Int64GetDatum(denied);
		values[2] = Int64GetDatum(admitted);
		values[3] = TimestampTzGetDatum(at);
		values[4] = interval_us(retry);
		values[5] = Int64GetDatum(error);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	LWLockRelease(stats_shared->lock);
	return (Datum) 0;
}

/* rl_stats_reset(): everything starts again; not granted to PUBLIC. */
Datum
slidewin_stats_reset(PG_FUNCTION_ARGS)
{
	HASH_SEQ_STATUS seq;
	void	   *h;

	require_shared();
	LWLockAcquire(stats_shared->lock, LW_EXCLUSIVE);
	memset(stats_shared->base, 0, sizeof(stats_shared->base));
	memset(stats_shared->base_rtt, 0, sizeof(stats_shared->base_rtt));
	for (int i = 0; i <= stats_shared->nslots; i++)
	{
		StatsSlot  *s = slot_at(i);

		for (int c = 0; c < NCOUNTERS; c++)
			stats_shared->base[c] += pg_atomic_read_u64(&s->c[c]);
		for (int b = 0; b < RTT_BUCKETS; b++)
			stats_shared->base_rtt[b] += pg_atomic_read_u64(&s->rtt[b]);
	}

	hash_seq_init(&seq, stats_rule_hash);
	while ((h = hash_seq_search(&seq)) != NULL)
		hash_search(stats_rule_hash, h, HASH_REMOVE, NULL);
	for (int i = 0; i <= stats_shared->max_rules; i++)
	{
		RuleEntry  *e = &stats_rules[i];

		SpinLockAcquire(&e->mutex);
		e->in_use = (i == stats_shared->max_rules);
		e->calls = e->admitted = e->denied = 0;
		e->units_admitted = e->near_limit = e->shadow_denials = 0;
		SpinLockRelease(&e->mutex);
	}
	stats_shared->rules_used = 0;

	hash_seq_init(&seq, stats_key_hash);
	while ((h = hash_seq_search(&seq)) != NULL)
		hash_search(stats_key_hash, h, HASH_REMOVE, NULL);
	for (int i = 0; i < stats_shared->max_keys; i++)
	{
		KeyEntry   *e = &stats_keys[i];

		SpinLockAcquire(&e->mutex);
		e->hash = 0;
		e->denied = e->error = e->admitted = 0;
		SpinLockRelease(&e->mutex);
	}
	stats_shared->keys_used = 0;
	for (uint32 i = 0; i <= stats_shared->filter_mask; i++)
		pg_atomic_write_u32(&stats_key_filter[i], 0);

	pg_atomic_fetch_add_u64(&stats_shared->reset_gen, 1);
	pg_atomic_fetch_add_u64(&stats_shared->keys_gen, 1);
	stats_shared->stats_reset = GetCurrentTimestamp();
	LWLockRelease(stats_shared->lock);
	PG_RETURN_VOID();
}
