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
 * This file is the sink: every layer bumps these counters, so it includes
 * nothing above the base layer and formats no SQL result. The functions
 * behind the views, which read the counters and reset them, are in
 * stats_views.c; the layout of shared memory they share is in stats_shared.h.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/twophase.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "port/pg_bitutils.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "settings.h"
#include "shmem_parts.h"
#include "stats.h"
#include "stats_shared.h"


/* The shared memory; stats_views.c reads it through stats_shared.h. */
StatsShared *stats_shared = NULL;
char	   *stats_slots_base = NULL;
RuleEntry  *stats_rules = NULL;
KeyEntry   *stats_keys = NULL;
pg_atomic_uint32 *stats_key_filter = NULL;
HTAB	   *stats_rule_hash = NULL;
HTAB	   *stats_key_hash = NULL;


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

static Size
stats_shmem_size(void)
{
	return add_size(stats_struct_size(), PG_CACHE_LINE_SIZE);
}

static void
stats_shmem_request(void)
{
	RequestAddinShmemSpace(add_size(hash_estimate_size(Max(slidewin_stats_max_rules, 1),
													   sizeof(RuleHashEntry)),
									hash_estimate_size(Max(slidewin_track_keys, 1),
													   sizeof(KeyHashEntry))));
	RequestNamedLWLockTranche("slidewin stats", 1);
}

static void
stats_shmem_attach(void *start, bool found)
{
	HASHCTL		info;
	char	   *p = start;

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
}

static const ShmemPart stats_part = {"slidewin stats", stats_shmem_size, stats_shmem_request,
									 stats_shmem_attach};

void
stats_init(void)
{
	slidewin_shmem_register(&stats_part);
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
stats_redis_failed(bool timed_out)
{
	if (!stats_on())
		return;
	bump(C_REDIS_ERRORS, 1);
	if (timed_out)
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
