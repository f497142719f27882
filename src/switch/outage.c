/*-------------------------------------------------------------------------
 *
 * outage.c
 *		The outage memory: what Redis last counted per key, kept in shared
 *		memory so that the fallback store starts from it.
 *
 * Into the outage. Every answer Redis gives to a call of rl_attempt's
 * algorithms (attempt or peek) is noted in a direct-mapped table in shared
 * memory, slidewin.outage_keys slots of a few words, one per key: the key (a
 * 64-bit hash of the prefix and the key) and rule, when this server asked
 * (on the fallback store's clock), the units Redis counted in the window,
 * and when the newest of them leaves it, moved onto this server's clock. The fallback store
 * (fallback.c) reads it for the key: it counts those units as spent until
 * then, as if all of them had been admitted with the newest (never fewer
 * than Redis had counted, and never freed sooner), and counts its own rows
 * from the time up to which they are known to be in Redis (carried_to).
 *
 * Which rows an answer stands for. An answer may stand in for the fallback
 * store's own rows only if those rows are in Redis. So the slot keeps,
 * beside Redis's count, carried_to and carried_db: the rows of that
 * database admitted before that time are among Redis's units. They move
 * only with the answer to a call that carried its key completely before
 * Redis decided it (outage_carry: nothing left uncommitted that it gave up
 * waiting for, the counting algorithms' lock had). A peek carries nothing,
 * and a call from another database carries only that database's rows:
 * their answers move the count, never carried_to, and another database's
 * carry leaves this one counting all its rows in the window (an
 * over-count where some were carried). A prepared transaction's rows turn
 * visible at COMMIT PREPARED, in whatever backend runs it: that moves
 * prepared_gen, and a carried_to read before it no longer stands. A key whose slot another
 * key took since (the table bounds memory, not keys), or that Redis never
 * answered on this server, falls back as before, counted in rl_stats.
 * Writers hold the slot's spinlock for a copy of a few words.
 *
 * Carrying the fallback store's admissions back into Redis (out of the
 * outage) is carry.c's; this file never calls it. What carry.c needs of the
 * memory (the table, its slots, a key's slot) is in outage_int.h.
 *
 * This file decides nothing about policy and formats no Redis command.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/twophase.h"
#include "access/xact.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "tcop/utility.h"

#include "fallback.h"
#include "outage.h"
#include "outage_int.h"
#include "settings.h"
#include "shmem_parts.h"
#include "stats.h"
#include "store_redis.h"


/* The table in shared memory (outage_int.h); NULL unless preloaded. */
OutageShared *outage_shared = NULL;

/*
 * Redis's clock less this server's, as the last admission Redis recorded
 * for this backend showed it (0 until then, and under the test clock).
 */
static int64 redis_offset_us = 0;

/*
 * This backend's call in flight (outage_asking): per key (one, or each of
 * rl_attempt_all's), the slot it counted its units in, and how many. A call
 * that Redis has answered but whose answer is not yet noted here may have
 * been admitted: a fallback decision of another backend meanwhile counts
 * its units as spent.
 */
typedef struct Inflight
{
	OutageSlot *slot;
	int64		units;
	bool		other;			/* counted in inflight_other */
} Inflight;

static Inflight inflight[RL_MAX_KEYS];
static int	n_inflight = 0;

static void
inflight_end(void)
{
	for (int i = 0; i < n_inflight; i++)
	{
		SpinLockAcquire(&inflight[i].slot->mutex);
		if (inflight[i].other)
			inflight[i].slot->inflight_other -= inflight[i].units;
		else
			inflight[i].slot->inflight -= inflight[i].units;
		SpinLockRelease(&inflight[i].slot->mutex);
	}
	n_inflight = 0;
}

static void
outage_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
		inflight_end();			/* a call that ERRORed in flight */
}

int
outage_marks_n(void)
{
	return MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts;
}

static Size
slots_size(void)
{
	return add_size(offsetof(OutageShared, slots),
					mul_size(sizeof(OutageSlot), slidewin_outage_keys));
}

static Size
shared_size(void)
{
	return add_size(MAXALIGN(slots_size()),
					mul_size(sizeof(PendingMark), outage_marks_n()));
}

static void
shmem_attach(void *p, bool found)
{
	outage_shared = p;
	if (!found)
	{
		PendingMark *marks = (PendingMark *) ((char *) p + MAXALIGN(slots_size()));

		pg_atomic_init_u64(&outage_shared->epoch, 1);
		pg_atomic_init_u64(&outage_shared->prepared_gen, 1);
		pg_atomic_init_u64(&outage_shared->announce_seq, 1);
		pg_atomic_init_u32(&outage_shared->marks_set, 0);
		for (int i = 0; i < slidewin_outage_keys; i++)
		{
			memset(&outage_shared->slots[i], 0, sizeof(OutageSlot));
			SpinLockInit(&outage_shared->slots[i].mutex);
		}
		for (int i = 0; i < outage_marks_n(); i++)
		{
			pg_atomic_init_u64(&marks[i].seq1, 0);
			pg_atomic_init_u32(&marks[i].slot, 0);
		}
		outage_shared->marks = marks;
	}
}

static const ShmemPart shmem_part = {"slidewin outage", shared_size, NULL, shmem_attach};

/*
 * COMMIT PREPARED makes a prepared transaction's fallback admissions
 * visible, in a backend that never wrote them and whose transaction
 * callbacks know nothing of them. So every COMMIT PREPARED moves the epoch
 * (every backend looks for rows to carry again) and the generation that
 * the slots' carried_to depends on (no answer given before it stands in
 * for rows that were invisible then). Rare enough that all keys may pay.
 */
static ProcessUtility_hook_type prev_process_utility = NULL;

static void
outage_process_utility(PlannedStmt *pstmt, const char *queryString,
					   bool readOnlyTree, ProcessUtilityContext context,
					   ParamListInfo params, QueryEnvironment *queryEnv,
					   DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *parsetree = pstmt->utilityStmt;
	bool		commit_prepared = parsetree != NULL && IsA(parsetree, TransactionStmt) &&
		((TransactionStmt *) parsetree)->kind == TRANS_STMT_COMMIT_PREPARED;

	/*
	 * Moved before as well: a carry that begins while the rows become
	 * visible must not take the key for carried by one that began before
	 * (carry.c, carry_done_at), between the commit and the move after it.
	 */
	if (commit_prepared && outage_shared != NULL)
		pg_atomic_fetch_add_u64(&outage_shared->epoch, 1);
	if (prev_process_utility)
		prev_process_utility(pstmt, queryString, readOnlyTree, context, params,
							 queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context, params,
								queryEnv, dest, qc);
	if (commit_prepared && outage_shared != NULL)
	{
		pg_atomic_fetch_add_u64(&outage_shared->prepared_gen, 1);
		pg_atomic_fetch_add_u64(&outage_shared->epoch, 1);
	}
}

void
outage_init(void)
{
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = outage_process_utility;
	RegisterXactCallback(outage_xact_callback, NULL);
	slidewin_shmem_register(&shmem_part);
}

/* rl_attempt's algorithms; rl_attempt_multi's log is not covered. */
bool
outage_covered(const RlArgs *args)
{
	return args->algorithm != ALGO_MULTI_LOG;
}

bool
outage_seeds_active(void)
{
	return outage_shared != NULL && slidewin_outage_keys > 0;
}

/* The key's identity in the table: its prefix and the key itself. */
uint64
outage_keyhash(const RlArgs *args)
{
	const char *prefix = slidewin_key_prefix ? slidewin_key_prefix : "";
	uint64		h;

	h = hash_bytes_extended((const unsigned char *) prefix, strlen(prefix), 0x5eed);
	h = hash_bytes_extended((const unsigned char *) args->key, args->keylen, h);
	return h == 0 ? 1 : h;
}

int64
outage_clock(void)
{
	return fallback_clock();
}

static void
inflight_add(const RlArgs *args)
{
	uint64		kh;
	OutageSlot *slot;
	Inflight   *f = &inflight[n_inflight];

	if (!slidewin_outage_exact || !outage_seeds_active() || !outage_covered(args) ||
		n_inflight >= RL_MAX_KEYS)
		return;
	kh = outage_keyhash(args);
	slot = &outage_shared->slots[kh % slidewin_outage_keys];
	SpinLockAcquire(&slot->mutex);
	if (slot->keyhash == kh)
	{
		slot->inflight += args->cost;
		f->slot = slot;
		f->units = args->cost;
		f->other = false;
		n_inflight++;
	}
	else if (args->algorithm == ALGO_SLIDING_LOG)
	{
		/*
		 * A key the slot does not hold: its fallback calls have no answer to
		 * start from, but must still count this call, which carried the
		 * key's rows before Redis decides it (outage_seed).
		 */
		slot->inflight_other += args->cost;
		f->slot = slot;
		f->units = args->cost;
		f->other = true;
		n_inflight++;
	}
	SpinLockRelease(&slot->mutex);
}

void
outage_asking(const RlArgs *args)
{
	inflight_end();
	inflight_add(args);
}

/*
 * rl_attempt_all: each key is in flight, as if it were asked alone; two
 * keys of one slot are both counted there.
 */
void
outage_asking_all(int n, const RlArgs *args)
{
	inflight_end();
	for (int k = 0; k < n; k++)
		inflight_add(&args[k]);
}

void
outage_answered(void)
{
	inflight_end();
}

/*
 * Whether the answer stands for this database's rows (carried_complete) is
 * the carry's to say: the memory only keeps it (see "Which rows an answer
 * stands for" above).
 */
void
outage_note_answer(const RlArgs *args, int64 asked_at, const RlOutcome *o,
				   bool carried_complete, uint64 carried_gen)
{
	uint64		kh;
	OutageSlot *slot;
	int64		frees_at;

	if (!slidewin_outage_exact || !outage_covered(args) || !o->known || o->store[0] != 'r')
		return;
	if (o->recorded_ts >= 0)
		redis_offset_us = o->recorded_ts - outage_clock();
	if (!outage_seeds_active())
		return;
	kh = outage_keyhash(args);
	slot = &outage_shared->slots[kh % slidewin_outage_keys];
	frees_at = o->used > 0 ? o->reset_at_us - redis_offset_us : asked_at;
	SpinLockAcquire(&slot->mutex);

	/*
	 * Answers of one key reach their backends, and this table, in any
	 * order: one Redis gave later is never replaced by one it gave before.
	 * Later means a newest entry (or window, or bucket) no earlier, and as
	 * many units or more when that is the same; only a refund or a reset
	 * moves either back (a reset forgets the slot; after a refund the older
	 * answer is kept, an over-count). Compared on Redis's clock, as Redis
	 * answered: each backend moves it onto this server's clock by its own
	 * offset, which differs from another backend's by the latencies each
	 * measured, far more than the microsecond between two entries (an
	 * earlier answer taken for a later one lost a unit, TAP 057 on sid).
	 */
	if (slot->keyhash == kh && slot->algorithm == (int) args->algorithm &&
		slot->lim == args->lim && slot->win_us == args->win_us &&
		(o->reset_at_us < slot->redis_frees ||
		 (o->reset_at_us == slot->redis_frees && o->used < slot->units)))
	{
		SpinLockRelease(&slot->mutex);
		return;
	}
	if (slot->keyhash != kh)
		slot->inflight = 0;		/* another key's calls no longer count here */
	if (slot->keyhash != kh || slot->algorithm != (int) args->algorithm)
		slot->carried_db = InvalidOid;	/* its rows: another key's, or kind's */
	if (carried_complete)
	{
		slot->carried_db = MyDatabaseId;
		slot->carried_to = asked_at;
		slot->carried_gen = carried_gen;
	}
	slot->keyhash = kh;
	slot->algorithm = (int) args->algorithm;
	slot->lim = args->lim;
	slot->win_us = args->win_us;
	slot->seen_at = asked_at;
	slot->units = o->used;
	slot->frees_at = frees_at;
	slot->redis_frees = o->reset_at_us;
	slot->applied = false;
	SpinLockRelease(&slot->mutex);
}

bool
outage_seed(const RlArgs *args, FallbackSeed *seed)
{
	uint64		kh;
	OutageSlot *slot;
	OutageSlot	copy;
	bool		matches;
	bool		first_use;

	memset(seed, 0, sizeof(*seed));
	if (!slidewin_outage_exact || !outage_seeds_active() || !outage_covered(args))
		return false;
	kh = outage_keyhash(args);
	slot = &outage_shared->slots[kh % slidewin_outage_keys];
	SpinLockAcquire(&slot->mutex);
	copy = *slot;
	/* the same rule: a token bucket's state means nothing under another lim */
	matches = copy.keyhash == kh && copy.algorithm == (int) args->algorithm &&
		copy.win_us == args->win_us &&
		(args->algorithm != ALGO_TOKEN_BUCKET || copy.lim == args->lim);
	first_use = matches && !copy.applied;
	if (first_use)
		slot->applied = true;
	SpinLockRelease(&slot->mutex);
	if (!matches)
	{
		stats_outage(STATS_OUTAGE_UNSEEDED_CALL, 1);
		if (args->algorithm != ALGO_SLIDING_LOG || copy.inflight_other <= 0)
			return false;

		/*
		 * Nothing Redis counted is kept for the key, but calls of a key of
		 * this slot are on their way to Redis, each having carried its
		 * key's rows before this call's admission could be among them:
		 * counted as admitted now, for a whole window (an over-count when
		 * they are another key's, or denied).
		 */
		seed->found = true;
		seed->seen_at = outage_clock();
		seed->carried_to = PG_INT64_MIN;
		seed->units = copy.inflight_other;
		seed->frees_at = seed->seen_at + args->win_us;
		return true;
	}
	if (first_use)
		stats_outage(STATS_OUTAGE_SEEDED_UNITS, copy.units);
	seed->found = true;
	seed->seen_at = copy.seen_at;
	seed->carried_to = PG_INT64_MIN;
	if (copy.carried_db == MyDatabaseId &&
		copy.carried_gen == pg_atomic_read_u64(&outage_shared->prepared_gen))
		seed->carried_to = copy.carried_to;
	/* calls of other backends in flight may have been admitted */
	seed->units = copy.units + Max(copy.inflight, 0);
	seed->frees_at = copy.frees_at;
	if (args->algorithm == ALGO_SLIDING_LOG &&
		Max(copy.inflight, 0) + Max(copy.inflight_other, 0) > 0)
	{
		/* a call in flight is admitted now, and counts for a whole window */
		seed->units += Max(copy.inflight_other, 0);
		seed->frees_at = Max(seed->frees_at, outage_clock() + args->win_us);
	}
	return true;
}

void
outage_forget(const RlArgs *args)
{
	uint64		kh;
	OutageSlot *slot;

	if (!outage_seeds_active())
		return;
	kh = outage_keyhash(args);
	slot = &outage_shared->slots[kh % slidewin_outage_keys];
	SpinLockAcquire(&slot->mutex);
	if (slot->keyhash == kh)
		slot->keyhash = 0;
	SpinLockRelease(&slot->mutex);
}
