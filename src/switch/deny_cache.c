/*-------------------------------------------------------------------------
 *
 * deny_cache.c
 *		Backend-local memory of sliding-log denials.
 *
 * When Redis denies a sliding-log call and says capacity returns in R
 * microseconds, the same call (same key, lim, win and cost) stays denied
 * for R: entries only leave the window as time passes. Redis also says for
 * how long S <= R its answer stays the same to the unit (until the oldest
 * entry in the window leaves it); until then the cache gives that very
 * answer, with retry_after counting down. What can change it sooner is a
 * write to the key: rl_reset and the refund of an aborted transaction free
 * units, and an entry admitted under another cost or limit (or in shadow
 * mode) moves the denial later. So the cache keeps, per key, the end of the
 * answer's life and a generation number read before Redis was asked; every
 * such write bumps that number after it is done, and a cached denial whose
 * number has moved is void.
 *
 * The generation numbers live in shared memory, one per bucket of key
 * hashes (a bump voids every key of the bucket; that only costs a round
 * trip). Shared memory needs shared_preload_libraries = 'slidewin'; without
 * it the cache stays off and every call goes to Redis. A reset or refund in
 * another backend of this server is therefore seen by the very next call.
 * One made elsewhere (another PostgreSQL server or an application sharing
 * the Redis keys), or Redis losing data, is seen when the cached answer
 * ends at the latest; until then an admission elsewhere can make the cached
 * retry_after too early (the call is still denied, rightly) and a refund or
 * reset elsewhere can keep a call denied that Redis would admit. The cache
 * only ever denies: it never admits.
 *
 * Under local batches a denial is kept for at most slidewin.local_batch_time
 * (see deny_cache_remember): other servers' batches give units back within
 * that time.
 *
 * A denial because the key is blocked (rl_block) is kept like any other,
 * but for at most BLOCK_CACHE_US: an rl_unblock in this server voids it at
 * once (it bumps the generation, as a reset does), and one made through
 * another server sharing the Redis is seen within that time, however long
 * the block was to last.
 *
 * The end of a denial is measured on the monotonic clock from a reading
 * taken before the request was sent, so it can only come before the moment
 * Redis computed, never after; a step of the wall clock does not move it.
 * Under slidewin.test_now the test clock is used instead.
 *
 * Known denials. The local cache serves one backend; when Redis becomes
 * unreachable, every other backend of the server would go to the fallback
 * store, whose log knows nothing of what Redis counted, and admit a key that
 * Redis had just denied. So every denial Redis gives (any algorithm) is also
 * kept in a small direct-mapped table in the same shared memory: the key
 * (a 64-bit hash of the prefix and key), its rule (algorithm, lim, win), the
 * cost denied, the generation read before Redis was asked, and when capacity
 * returns. The fallback path consults it first (policy.c) and denies a call
 * of that rule and at least that cost until then, unless a reset or refund
 * has bumped the generation since. A newer denial of another key that lands
 * on the same slot replaces the older one: the table bounds memory, not the
 * number of keys, and a forgotten denial only means the fallback decides
 * alone, as it did before. Each slot has a spinlock; writers hold it for a
 * copy of a few words, and the hot path takes it only when Redis denies.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <time.h>

#include "common/hashfn.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "deny_cache.h"
#include "local_batch.h"
#include "settings.h"
#include "shmem_parts.h"


/* Shared: generation numbers, one per bucket of key hashes. */
#define GEN_BUCKETS 4096

/* Shared: denials Redis gave, for the fallback path of every backend. */
#define KNOWN_SLOTS 1024

typedef struct KnownDenial
{
	slock_t		mutex;
	uint64		keyhash;		/* of prefix and key; 0: empty slot */
	uint32		hash;			/* the key's deny_cache_key_hash, for gen */
	uint64		gen;
	int			algorithm;
	int64		lim;
	int64		win_us;
	int64		cost;			/* calls of at least this cost are denied */
	bool		test_clock;
	int64		until_us;		/* on cache_clock(): capacity returns */
	int64		remaining;
	int64		used;
	int64		reset_at_us;
	bool		blocked;		/* by rl_block: denied whatever the cost */
} KnownDenial;

typedef struct DenyShared
{
	pg_atomic_uint64 gen[GEN_BUCKETS];
	/* refunds queued or in flight for keys of the bucket (see below) */
	pg_atomic_uint32 refunding[GEN_BUCKETS];
	KnownDenial known[KNOWN_SLOTS];
} DenyShared;

static DenyShared *shared = NULL;

/* The longest a denial by a block is answered from the cache (see above). */
#define BLOCK_CACHE_US USECS_PER_SEC

/* Local: a direct-mapped table, one entry per slot; a new key evicts. */
#define SLOTS 1024

typedef struct DenyEntry
{
	char	   *key;			/* NULL: empty slot */
	int			keylen;
	int			keycap;			/* bytes allocated at key */
	uint32		hash;
	uint64		gen;
	int64		lim;
	int64		win_us;
	int64		cost;
	int64		until_us;		/* the answer holds while the clock is before this */
	int64		free_at_us;		/* when the call can pass: retry_after runs to it */
	bool		test_clock;		/* both are on the test clock */
	int64		remaining;
	int64		used;
	int64		reset_at_us;
	bool		blocked;
} DenyEntry;

static DenyEntry *slots = NULL;
static MemoryContext cache_cxt = NULL;

static Size
shmem_size(void)
{
	return sizeof(DenyShared);
}

static void
shmem_attach(void *p, bool found)
{
	shared = p;
	if (!found)
	{
		for (int i = 0; i < GEN_BUCKETS; i++)
		{
			pg_atomic_init_u64(&shared->gen[i], 0);
			pg_atomic_init_u32(&shared->refunding[i], 0);
		}
		memset(shared->known, 0, sizeof(shared->known));
		for (int i = 0; i < KNOWN_SLOTS; i++)
			SpinLockInit(&shared->known[i].mutex);
	}
}

static const ShmemPart shmem_part = {"slidewin deny cache", shmem_size, NULL, shmem_attach};

void
deny_cache_init(void)
{
	slidewin_shmem_register(&shmem_part);
}

bool
deny_cache_active(void)
{
	return slidewin_deny_cache && shared != NULL;
}

uint32
deny_cache_key_hash(const char *key, int keylen)
{
	return hash_bytes((const unsigned char *) key, keylen);
}

static int64
mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64) ts.tv_sec * USECS_PER_SEC + ts.tv_nsec / 1000;
}

/* The clock the cache measures by, and whether it is the test clock. */
static int64
cache_clock(bool *test_clock)
{
	int64		now;

	*test_clock = limit_test_clock(&now);
	return *test_clock ? now : mono_us();
}

/*
 * A time t on the cache's clock, now being its present reading, as Unix
 * microseconds (the test clock already is).
 */
static int64
cache_time_as_unix(int64 t, int64 now, bool test_clock)
{
	if (test_clock)
		return t;
	return GetCurrentTimestamp() + UNIX_TO_PG_US + (t - now);
}

static void
clear_slot(DenyEntry *e)
{
	if (e->key)
		pfree(e->key);
	memset(e, 0, sizeof(DenyEntry));
}

bool
deny_cache_lookup(const RlArgs *args, RlOutcome *o)
{
	uint32		h;
	DenyEntry  *e;
	bool		test_clock;
	int64		now;

	if (!deny_cache_active() || args->algorithm != ALGO_SLIDING_LOG || slots == NULL)
		return false;
	h = deny_cache_key_hash(args->key, args->keylen);
	e = &slots[h % SLOTS];
	if (e->key == NULL || e->hash != h || e->keylen != args->keylen ||
		e->lim != args->lim || e->win_us != args->win_us || e->cost != args->cost ||
		memcmp(e->key, args->key, args->keylen) != 0)
		return false;
	now = cache_clock(&test_clock);
	if (pg_atomic_read_u32(&shared->refunding[h % GEN_BUCKETS]) != 0)
		return false;			/* a refund may be changing the answer */
	pg_read_barrier();
	if (test_clock != e->test_clock || now >= e->until_us ||
		pg_atomic_read_u64(&shared->gen[h % GEN_BUCKETS]) != e->gen)
	{
		clear_slot(e);
		return false;
	}
	o->allowed = false;
	o->known = true;
	o->remaining = e->remaining;
	o->used = e->used;
	o->retry_us = e->free_at_us - now;
	o->reset_at_us = e->reset_at_us;
	o->store = "redis";
	o->recorded_ts = -1;
	o->shadowed = false;
	o->stable_us = e->until_us - now;
	o->blocked = e->blocked;
	/* the answer holds until the oldest unit leaves, or the block ends */
	o->next_us = cache_time_as_unix(e->blocked ? e->free_at_us : e->until_us, now, test_clock);
	return true;
}

void
deny_cache_stamp(const RlArgs *args, DenyStamp *s)
{
	s->known = shared != NULL && !args->force;
	/* Writes are tracked whatever this backend's setting: others may cache. */
	s->track = shared != NULL && args->algorithm == ALGO_SLIDING_LOG;
	s->usable = s->track && slidewin_deny_cache && !args->force;
	if (!s->track && !s->known)
		return;
	s->hash = deny_cache_key_hash(args->key, args->keylen);
	/* Read the generation before the request goes out (see the header). */
	pg_memory_barrier();
	s->gen = pg_atomic_read_u64(&shared->gen[s->hash % GEN_BUCKETS]);
	if (s->usable || s->known)
		s->clock_us = cache_clock(&s->test_clock);
}

/* The known-denial identity of a key: its prefix and the key itself. */
static uint64
known_keyhash(const RlArgs *args)
{
	const char *prefix = slidewin_key_prefix ? slidewin_key_prefix : "";
	uint64		h;

	h = hash_bytes_extended((const unsigned char *) prefix, strlen(prefix), 0);
	h = hash_bytes_extended((const unsigned char *) args->key, args->keylen, h);
	return h == 0 ? 1 : h;
}

static void
remember_known(const RlArgs *args, const DenyStamp *s, const RlOutcome *o)
{
	uint64		kh = known_keyhash(args);
	KnownDenial *k = &shared->known[kh % KNOWN_SLOTS];

	SpinLockAcquire(&k->mutex);
	k->keyhash = kh;
	k->hash = s->hash;
	k->gen = s->gen;
	k->algorithm = (int) args->algorithm;
	k->lim = args->lim;
	k->win_us = args->win_us;
	k->cost = o->blocked ? 1 : args->cost;
	k->test_clock = s->test_clock;
	k->until_us = s->clock_us + o->retry_us;
	k->remaining = o->remaining;
	k->used = o->used;
	k->reset_at_us = o->reset_at_us;
	k->blocked = o->blocked;
	SpinLockRelease(&k->mutex);
}

bool
deny_cache_known_denial(const RlArgs *args, RlOutcome *o)
{
	uint64		kh;
	KnownDenial *k;
	KnownDenial copy;
	bool		test_clock;
	int64		now;

	if (shared == NULL)
		return false;
	kh = known_keyhash(args);
	k = &shared->known[kh % KNOWN_SLOTS];
	SpinLockAcquire(&k->mutex);
	copy = *k;
	SpinLockRelease(&k->mutex);

	if (copy.keyhash != kh || copy.algorithm != (int) args->algorithm ||
		copy.lim != args->lim || copy.win_us != args->win_us ||
		args->cost < copy.cost)
		return false;
	/* rl_attempt_multi: every window must match, not just the summary */
	if (args->algorithm == ALGO_MULTI_LOG)
		return false;
	now = cache_clock(&test_clock);
	if (test_clock != copy.test_clock || now >= copy.until_us ||
		pg_atomic_read_u64(&shared->gen[copy.hash % GEN_BUCKETS]) != copy.gen)
		return false;
	o->allowed = false;
	o->known = true;
	o->remaining = copy.remaining;
	o->used = copy.used;
	o->retry_us = copy.until_us - now;
	o->reset_at_us = copy.reset_at_us;
	o->store = "fallback";
	o->recorded_ts = -1;
	o->shadowed = false;
	o->stable_us = 0;
	o->blocked = copy.blocked;
	o->next_us = cache_time_as_unix(copy.until_us, now, test_clock);
	return true;
}

void
deny_cache_remember(const RlArgs *args, const DenyStamp *s, const RlOutcome *o)
{
	DenyEntry  *e;

	if ((!s->track && !s->known) || strcmp(o->store, "redis") != 0)
		return;
	if (s->known && !o->allowed && o->known && o->retry_us > 0 &&
		args->algorithm != ALGO_MULTI_LOG)
		remember_known(args, s, o);
	if (!s->track)
		return;

	/*
	 * An entry written moves the denials of other costs and limits on the
	 * key later (and changes their figures): void them, after the write.
	 */
	if (o->recorded_ts >= 0)
	{
		deny_cache_invalidate(s->hash);
		return;
	}
	if (!s->usable || o->allowed || !o->known || o->retry_us <= 0 || o->stable_us <= 0)
		return;
	if (slots == NULL)
	{
		cache_cxt = AllocSetContextCreate(TopMemoryContext, "slidewin deny cache",
										  ALLOCSET_SMALL_SIZES);
		slots = MemoryContextAllocZero(cache_cxt, SLOTS * sizeof(DenyEntry));
	}
	e = &slots[s->hash % SLOTS];
	if (e->key != NULL && e->keycap < args->keylen)
		clear_slot(e);
	if (e->key == NULL)
	{
		e->key = MemoryContextAlloc(cache_cxt, args->keylen);
		e->keycap = args->keylen;
	}
	memcpy(e->key, args->key, args->keylen);
	e->keylen = args->keylen;
	e->hash = s->hash;
	e->gen = s->gen;
	e->lim = args->lim;
	e->win_us = args->win_us;
	e->cost = args->cost;
	e->until_us = s->clock_us + Min(o->retry_us, o->stable_us);

	/*
	 * Under local batches, other servers give back their batches' unused
	 * units within slidewin.local_batch_time of reserving them, a write this
	 * cache cannot see: a denial is kept no longer than that, so that this
	 * backend asks Redis again, and, still denied, names this server in the
	 * key's waiting mark (local_batch.c, rule 3) instead of leaving every
	 * unit that comes back to the server that is asking.
	 */
	if (local_batch_applies(args))
		e->until_us = Min(e->until_us, s->clock_us + (int64) slidewin_local_batch_time * 1000);
	if (o->blocked)
		e->until_us = Min(e->until_us, s->clock_us + BLOCK_CACHE_US);
	e->free_at_us = s->clock_us + o->retry_us;
	e->test_clock = s->test_clock;
	e->remaining = o->remaining;
	e->used = o->used;
	e->reset_at_us = o->reset_at_us;
	e->blocked = o->blocked;
}

void
deny_cache_invalidate(uint32 h)
{
	if (shared != NULL)
		pg_atomic_fetch_add_u64(&shared->gen[h % GEN_BUCKETS], 1);
	if (slots != NULL)
		clear_slot(&slots[h % SLOTS]);
}

/*
 * Refunds travel asynchronously (refund.c): queued at abort, confirmed by
 * Redis's reply, read at abort within a bounded wait or else at a later
 * command of the refunding backend. While one is on its way, no backend serves a cached denial of the key's bucket, so a
 * denial that Redis gave just before the refund landed is never kept past
 * it; when it is confirmed the generation moves (after Redis has applied
 * it, never before) and only then does the bucket count go down. Both are
 * atomics: safe in transaction abort.
 */
void
deny_cache_refund_begin(uint32 h)
{
	if (shared != NULL)
		pg_atomic_fetch_add_u32(&shared->refunding[h % GEN_BUCKETS], 1);
}

void
deny_cache_refund_end(uint32 h, bool maybe_applied)
{
	if (shared == NULL)
		return;
	if (maybe_applied)
		pg_atomic_fetch_add_u64(&shared->gen[h % GEN_BUCKETS], 1);
	pg_atomic_fetch_sub_u32(&shared->refunding[h % GEN_BUCKETS], 1);
}

void
deny_cache_forget_all(void)
{
	if (slots == NULL)
		return;
	for (int i = 0; i < SLOTS; i++)
		clear_slot(&slots[i]);
}
