/*-------------------------------------------------------------------------
 *
 * outage.c
 *		Exactness across an outage: the fallback store starts from what
 *		Redis had counted, and Redis learns what the fallback store admitted.
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
 * Out of the outage. Every admission of the fallback store (rl_attempt's
 * algorithms) is also a row of rl_fallback_carry until Redis has it. Before
 * Redis decides a call of a key, the call carries that key's rows into its
 * Redis structure (lua_log_import, lua_counter_import), each with its age,
 * not its time, so that Redis's clock places it; and after Redis has
 * decided, so that keys nobody calls again are not left behind, the rows of
 * one other key, whose failure leaves the call's answer as it is. A peek
 * carries nothing (policy.c). The rows go in one script per key
 * and leave the table in the caller's transaction once Redis has answered.
 * Every row is named by the server, database and time that admitted it, and
 * Redis keeps the names it recorded for as long as their entries are in the
 * window, so a batch sent again, after a lost reply, a crash or a rolled-back
 * transaction, is recorded once. The work is done by the calls themselves,
 * not by a background worker: the fallback store is per database and is
 * read in the caller's transaction, which a worker would need a connection
 * to every database for, and the calls that need Redis exact are the ones
 * that find the rows first. The price: on a server where nothing calls
 * after an outage, nothing is carried until something does.
 *
 * Whether this database may have rows to carry is known without a lookup:
 * a counter in shared memory moves on every fallback admission on the
 * server, and again when its transaction commits, and a backend looks at
 * the table only when it has moved since it last found the table empty, or
 * when it wrote a row itself. So the normal path, with nothing waiting,
 * reads one atomic and makes no round trip.
 *
 * This file decides nothing about policy and formats no Redis command.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "common/hashfn.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "tcop/utility.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "fallback.h"
#include "fallback_block.h"
#include "fallback_carry.h"
#include "outage.h"
#include "settings.h"
#include "stats.h"
#include "store_redis.h"


typedef struct OutageSlot
{
	slock_t		mutex;
	bool		applied;		/* a fallback call has counted them (for rl_stats) */
	int			algorithm;
	uint64		keyhash;		/* of prefix and key; 0: empty */
	int64		lim;
	int64		win_us;
	int64		seen_at;		/* fallback clock: when this server asked Redis */
	int64		units;			/* units Redis counted in the window */
	int64		frees_at;		/* fallback clock: the newest of them leaves the window */
	int64		redis_frees;	/* the same on Redis's clock, as Redis answered it */
	int64		inflight;		/* units of calls of the key sent to Redis, not yet noted */
	int64		inflight_other; /* the same, of sliding-log calls of keys the
								 * slot does not hold (one Redis never answered
								 * here, or that another key displaced) */
	int64		fb_pending;		/* units of fallback admissions not yet committed
								 * (of any key of this slot: see outage_fallback_wrote) */
	uint64		fb_written;		/* fallback admissions ever counted in fb_pending */

	/*
	 * Which of the fallback store's rows the answer above stands in for
	 * (see "Which rows an answer stands for" in the header): those of
	 * database carried_db admitted before carried_to (fallback clock), when
	 * no COMMIT PREPARED has run since carried_gen. Only a call that carried
	 * the key completely before Redis decided it moves them.
	 */
	Oid			carried_db;		/* InvalidOid: no database's rows */
	int64		carried_to;
	uint64		carried_gen;
} OutageSlot;

typedef struct OutageShared
{
	pg_atomic_uint64 epoch;		/* moves on every fallback admission */
	pg_atomic_uint64 prepared_gen;	/* moves at every COMMIT PREPARED */
	OutageSlot	slots[FLEXIBLE_ARRAY_MEMBER];
} OutageShared;

static OutageShared *shared = NULL;
static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/*
 * Redis's clock less this server's, as the last admission Redis recorded
 * for this backend showed it (0 until then, and under the test clock).
 */
static int64 redis_offset_us = 0;

/*
 * This backend's call in flight (outage_asking): the slot it counted its
 * units in, and how many. A call that Redis has answered but whose answer
 * is not yet noted here may have been admitted: a fallback decision of
 * another backend meanwhile counts its units as spent.
 */
static OutageSlot *inflight_slot = NULL;
static int64 inflight_units = 0;
static bool inflight_other = false; /* counted in inflight_other */

static void
inflight_end(void)
{
	if (inflight_slot)
	{
		SpinLockAcquire(&inflight_slot->mutex);
		if (inflight_other)
			inflight_slot->inflight_other -= inflight_units;
		else
			inflight_slot->inflight -= inflight_units;
		SpinLockRelease(&inflight_slot->mutex);
		inflight_other = false;
		inflight_slot = NULL;
		inflight_units = 0;
	}
}

/*
 * This backend's fallback admissions not yet committed, per slot: counted
 * in the slot's fb_pending until the transaction ends (see
 * outage_fallback_wrote). A few slots at most in practice; the array grows.
 */
typedef struct PendingSlot
{
	OutageSlot *slot;
	int64		units;
} PendingSlot;

static PendingSlot *pending = NULL;
static int	n_pending = 0;
static int	max_pending = 0;

static void
pending_end(void)
{
	for (int i = 0; i < n_pending; i++)
	{
		SpinLockAcquire(&pending[i].slot->mutex);
		pending[i].slot->fb_pending -= pending[i].units;
		SpinLockRelease(&pending[i].slot->mutex);
	}
	n_pending = 0;
}

static int64
pending_mine(OutageSlot *slot)
{
	for (int i = 0; i < n_pending; i++)
		if (pending[i].slot == slot)
			return pending[i].units;
	return 0;
}

/* Whether this transaction wrote rows to carry (outage_fallback_wrote). */
static bool wrote_in_xact = false;

/* The carry-back state of this backend (see the header comment). */
static bool carry_maybe = true;
static uint64 carry_epoch_seen = 0;

/*
 * Rows deleted by a carry in the current transaction: if it (or the
 * subtransaction) aborts they come back, and must be looked for again.
 */
static bool carried_in_xact = false;

/* The key's fallback lock, held from the carry to the end of the decision. */
static bool key_locked = false;
static LOCKTAG key_lock;

/*
 * The call being decided carried every row of its key in this database
 * that an answer could stand in for (outage_carry), and the COMMIT PREPARED
 * generation it read before looking: outage_remember may then move the
 * slot's carried_to. Cleared by outage_carry_end.
 */
static bool carry_complete = false;
static uint64 carry_gen = 0;

static void
outage_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
		inflight_end();			/* a call that ERRORed in flight */
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
		carry_maybe = carry_maybe || carried_in_xact;
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_PREPARE)
	{
		/* at COMMIT the rows are visible to every backend by now */
		pending_end();

		/*
		 * The epoch moved when the rows were written, and a backend that
		 * looked meanwhile found none (not yet committed) and stopped
		 * looking: move it again now that they can be found.
		 */
		if (wrote_in_xact && shared != NULL &&
			(event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT ||
			 event == XACT_EVENT_PREPARE))
			pg_atomic_fetch_add_u64(&shared->epoch, 1);
		wrote_in_xact = false;
		carried_in_xact = false;
		key_locked = false;		/* a transaction's lock: gone with it */
	}
}

static void
outage_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB && carried_in_xact)
		carry_maybe = true;
}

static Size
shared_size(void)
{
	return add_size(offsetof(OutageShared, slots),
					mul_size(sizeof(OutageSlot), slidewin_outage_keys));
}

static void
shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(shared_size()));
}

static void
shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = ShmemInitStruct("slidewin outage", shared_size(), &found);
	if (!found)
	{
		pg_atomic_init_u64(&shared->epoch, 1);
		pg_atomic_init_u64(&shared->prepared_gen, 1);
		for (int i = 0; i < slidewin_outage_keys; i++)
		{
			memset(&shared->slots[i], 0, sizeof(OutageSlot));
			SpinLockInit(&shared->slots[i].mutex);
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

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

	if (prev_process_utility)
		prev_process_utility(pstmt, queryString, readOnlyTree, context, params,
							 queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context, params,
								queryEnv, dest, qc);
	if (commit_prepared && shared != NULL)
	{
		pg_atomic_fetch_add_u64(&shared->prepared_gen, 1);
		pg_atomic_fetch_add_u64(&shared->epoch, 1);
	}
}

void
outage_init(void)
{
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = outage_process_utility;
	RegisterXactCallback(outage_xact_callback, NULL);
	RegisterSubXactCallback(outage_subxact_callback, NULL);
	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = shmem_startup;
}

/* rl_attempt's algorithms; rl_attempt_multi's log is not covered. */
static bool
covered(const RlArgs *args)
{
	return args->algorithm != ALGO_MULTI_LOG;
}

static bool
seeds_active(void)
{
	return shared != NULL && slidewin_outage_keys > 0;
}

/* The key's identity in the table: its prefix and the key itself. */
static uint64
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

void
outage_asking(const RlArgs *args)
{
	uint64		kh;
	OutageSlot *slot;

	inflight_end();
	if (!slidewin_outage_exact || !seeds_active() || !covered(args))
		return;
	kh = outage_keyhash(args);
	slot = &shared->slots[kh % slidewin_outage_keys];
	SpinLockAcquire(&slot->mutex);
	if (slot->keyhash == kh)
	{
		slot->inflight += args->cost;
		inflight_slot = slot;
		inflight_units = args->cost;
	}
	else if (args->algorithm == ALGO_SLIDING_LOG)
	{
		/*
		 * A key the slot does not hold: its fallback calls have no answer to
		 * start from, but must still count this call, which carried the
		 * key's rows before Redis decides it (outage_seed).
		 */
		slot->inflight_other += args->cost;
		inflight_slot = slot;
		inflight_units = args->cost;
		inflight_other = true;
	}
	SpinLockRelease(&slot->mutex);
}

void
outage_answered(void)
{
	inflight_end();
}

void
outage_remember(const RlArgs *args, int64 asked_at, const RlOutcome *o)
{
	uint64		kh;
	OutageSlot *slot;
	int64		frees_at;

	if (!slidewin_outage_exact || !covered(args) || !o->known || o->store[0] != 'r')
		return;
	if (o->recorded_ts >= 0)
		redis_offset_us = o->recorded_ts - outage_clock();
	if (!seeds_active())
		return;
	kh = outage_keyhash(args);
	slot = &shared->slots[kh % slidewin_outage_keys];
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
	if (carry_complete)
	{
		slot->carried_db = MyDatabaseId;
		slot->carried_to = asked_at;
		slot->carried_gen = carry_gen;
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
	if (!slidewin_outage_exact || !seeds_active() || !covered(args))
		return false;
	kh = outage_keyhash(args);
	slot = &shared->slots[kh % slidewin_outage_keys];
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
		copy.carried_gen == pg_atomic_read_u64(&shared->prepared_gen))
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

	if (!seeds_active())
		return;
	kh = outage_keyhash(args);
	slot = &shared->slots[kh % slidewin_outage_keys];
	SpinLockAcquire(&slot->mutex);
	if (slot->keyhash == kh)
		slot->keyhash = 0;
	SpinLockRelease(&slot->mutex);
}

/*
 * A call decided by the fallback store: what Redis had counted for the key
 * goes in with it (the seed, read once per call, before the key's lock is
 * taken: an older answer than the newest only counts fewer of this
 * database's rows as carried), and what it wrote for Redis to learn of is
 * then waited for by carries of the key (outage_fallback_wrote).
 */
void
outage_fallback_attempt(const RlArgs *args, RlOutcome *o)
{
	FallbackSeed seed;

	(void) outage_seed(args, &seed);
	fallback_attempt(args, &seed, o);
	if (o->carry_units > 0)
		outage_fallback_wrote(args, o->carry_units);
}

void
outage_fallback_peek(const RlArgs *args, RlOutcome *o)
{
	FallbackSeed seed;

	(void) outage_seed(args, &seed);
	fallback_peek(args, &seed, o);
}

/*
 * The fallback store wrote the carry row of an admission of args' key (cost
 * units). Until the transaction commits, a call that carries the key cannot
 * see the row, and Redis would decide without it: the units are counted in
 * the key's slot (fb_pending) meanwhile, so that such a call waits for the
 * commit (outage_carry). Counted by slot, whatever key holds it: another
 * key of the same slot can only make a carry wait, never miss a row.
 */
void
outage_fallback_wrote(const RlArgs *args, int64 cost)
{
	OutageSlot *slot;
	int			i;

	carry_maybe = true;
	wrote_in_xact = true;
	if (shared == NULL)
		return;
	pg_atomic_fetch_add_u64(&shared->epoch, 1);
	if (!seeds_active() || args->algorithm != ALGO_SLIDING_LOG)
		return;
	slot = &shared->slots[outage_keyhash(args) % slidewin_outage_keys];
	for (i = 0; i < n_pending; i++)
		if (pending[i].slot == slot)
			break;
	if (i == n_pending)
	{
		if (n_pending == max_pending)
		{
			int			n = Max(8, 2 * max_pending);

			pending = pending
				? repalloc(pending, n * sizeof(PendingSlot))
				: MemoryContextAlloc(TopMemoryContext, n * sizeof(PendingSlot));
			max_pending = n;
		}
		pending[i].slot = slot;
		pending[i].units = 0;
		n_pending++;
	}
	SpinLockAcquire(&slot->mutex);
	slot->fb_pending += cost;
	slot->fb_written++;
	SpinLockRelease(&slot->mutex);
	pending[i].units += cost;
}

/*
 * The longest a carrying call waits for other backends' fallback admissions
 * of its key to commit. They commit within their statement, in microseconds;
 * a transaction left open after one (or a prepared one) would otherwise
 * hold every carry of the key: past this, the carry goes on without it, and
 * that admission reaches Redis with the next call after its commit.
 */
#define PENDING_WAIT_MS 100

/*
 * A wait that ran out: on this slot, after this many admissions. While no
 * new one comes, what is left uncommitted is what the wait gave up on, and
 * this backend does not wait for it again (one long-open transaction must
 * not cost every later call of the key the whole wait).
 */
static OutageSlot *gave_up_slot = NULL;
static uint64 gave_up_written = 0;

/*
 * Before a sliding log's carry: wait until no other backend holds an
 * uncommitted fallback admission of the key's slot (at most PENDING_WAIT_MS,
 * interruptibly), so that the rows read next hold every admission made so
 * far. A fallback admission that starts after that counts this call as in
 * flight (outage_asking), so none slips between the carry and the decision.
 * False when it gave up on some (the carry is then not complete).
 */
static bool
wait_pending(const RlArgs *args)
{
	OutageSlot *slot = &shared->slots[outage_keyhash(args) % slidewin_outage_keys];
	int64		mine = pending_mine(slot);
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), PENDING_WAIT_MS);

	for (;;)
	{
		int64		others;
		uint64		written;

		SpinLockAcquire(&slot->mutex);
		others = slot->fb_pending - mine;
		written = slot->fb_written;
		SpinLockRelease(&slot->mutex);
		if (others <= 0)
			return true;
		if (slot == gave_up_slot && written == gave_up_written)
			return false;
		if (GetCurrentTimestamp() >= deadline)
		{
			gave_up_slot = slot;
			gave_up_written = written;
			return false;
		}
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 1, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * Rows carried per script: one round trip carries at most this many, and
 * as many as fit in a quarter of slidewin.command_timeout at the cost per
 * row the backend's earlier carries took (a row placed in the past of a
 * long log moves every later entry, so a hot key's rows cost far more than
 * a quiet key's). A carry whose script timed out would make its call fall
 * back; the first batch of a backend is small until a cost is known.
 */
#define CARRY_BATCH 64
#define CARRY_FIRST_BATCH 8

static double carry_us_per_row = 0;	/* 0: not measured yet */

static int
carry_batch(void)
{
	double		budget_us = (double) slidewin_command_timeout * 1000.0 / 4.0;
	double		n;

	if (carry_us_per_row <= 0)
		return CARRY_FIRST_BATCH;
	n = budget_us / carry_us_per_row;
	return (int) Max(1, Min(n, CARRY_BATCH));
}

static void
carry_measured(int rows, TimestampTz started)
{
	long		us = (long) (GetCurrentTimestamp() - started);
	double		per_row = (double) Max(us, 1) / rows;

	/* recent batches weigh most; a slower one counts at once */
	if (carry_us_per_row <= 0 || per_row > carry_us_per_row)
		carry_us_per_row = per_row;
	else
		carry_us_per_row = 0.7 * carry_us_per_row + 0.3 * per_row;
}

/*
 * Carry the rows of one key into Redis: of args' key, or (args NULL) of
 * whichever key has the oldest row waiting. *found: whether there was
 * anything. False when Redis could not answer (r filled in): the rows stay.
 */
static bool
carry_one(const RlArgs *args, bool *found, RedisResult *r)
{
	FallbackCarry c;
	RlArgs		same;
	int64		recorded;
	ItemPointerData *skip = NULL;
	int			nskip = 0;

	*found = false;
	for (;;)
	{
		/*
		 * Rows another backend is carrying at the same time are visible
		 * until it commits, and it sent them to Redis before deleting them:
		 * they are left out of the next batch. Without that, two backends
		 * carrying one key of more than a batch of rows, each holding rows
		 * the other had deleted first, would collect the same batch again and
		 * again, neither ever committing (TAP 090's pgbench hung so).
		 */
		int			batch = carry_batch();
		TimestampTz started;

		if (!fallback_carry_collect(args, batch, skip, nskip, &c))
		{
			/*
			 * Another key's rows that another backend carried (and deleted)
			 * between finding them and reading them: others may still wait.
			 * Only a table with no row waiting lets this backend stop
			 * looking (outage_carry_other); when it concluded so from a race
			 * like this one, a key's next call went to Redis without its
			 * rows, and Redis admitted over the fallback store's 20 of 20 (a
			 * window of 21 in TAP 057, after a restart).
			 */
			if (c.waiting)
				*found = true;
			return true;
		}
		*found = true;
		started = GetCurrentTimestamp();
		if (!redis_store_import(&c.args, c.entries.data, c.n, &recorded, r))
			return false;
		carry_measured(c.n, started);
		skip = skip ? repalloc(skip, (nskip + c.n) * sizeof(ItemPointerData))
			: palloc(c.n * sizeof(ItemPointerData));
		nskip += fallback_carry_done(&c, skip + nskip);
		carried_in_xact = true;
		stats_outage(STATS_OUTAGE_CARRIED, recorded);
		if (c.n < batch)
			return true;
		same = c.args;			/* more of the same key */
		args = &same;
	}
}

/* Whether this backend should look for rows to carry (see the header). */
static bool
carry_wanted(uint64 *epoch)
{
	*epoch = 0;
	if (!slidewin_outage_exact)
		return false;
	if (shared != NULL)
	{
		*epoch = pg_atomic_read_u64(&shared->epoch);
		if (*epoch != carry_epoch_seen)
			carry_maybe = true;
	}
	if (!carry_maybe)
		return false;
	/* A standby's fallback store is empty, and could not be written. */
	if (RecoveryInProgress() || !fallback_carry_available())
	{
		carry_maybe = false;
		carry_epoch_seen = *epoch;
		return false;
	}
	return true;
}

bool
outage_carry(const RlArgs *args, RedisResult *r)
{
	uint64		epoch;
	bool		found;
	bool		complete = true;

	carry_complete = false;
	if (!covered(args))
		return true;
	/* read before looking: a COMMIT PREPARED after this may add rows */
	carry_gen = shared != NULL ? pg_atomic_read_u64(&shared->prepared_gen) : 0;
	if (!carry_wanted(&epoch))
	{
		carry_complete = slidewin_outage_exact;
		return true;
	}

	/*
	 * A counting algorithm's fallback admission is written under the key's
	 * lock, held until its commit. Taking that lock here waits for one in
	 * progress, whose row is then read and carried; and one that starts
	 * while Redis decides waits for the decision, and then finds Redis's
	 * new count in shared memory. Without it, an admission committed just
	 * after the rows were read would be missing from that decision. Only
	 * while admissions may wait to be carried, that is, around an outage.
	 * The wait is bounded as the sliding log's is, and never queues (a
	 * transaction left open since the outage holds the lock, and two such
	 * transactions calling each other's keys would deadlock): past it, the
	 * call carries what it can see and goes on without the lock, the carry
	 * is not complete, and the admission still open reaches Redis with a
	 * call after its commit. (The logs' admissions claim the key's head
	 * instead, and are waited for through their slot's count of
	 * uncommitted admissions.)
	 */
	if (args->algorithm != ALGO_SLIDING_LOG)
	{
		if (fallback_try_lock_key(args, &key_lock, PENDING_WAIT_MS))
			key_locked = true;
		else
			complete = false;
	}
	else if (seeds_active())
		complete = wait_pending(args);
	if (!carry_one(args, &found, r))
		return false;
	carry_complete = complete && slidewin_outage_exact;
	return true;
}

void
outage_carry_end(void)
{
	carry_complete = false;
	if (key_locked)
	{
		key_locked = false;
		fallback_unlock_key(&key_lock);
	}
}

void
outage_carry_other(void)
{
	uint64		epoch;
	bool		found;
	RedisResult r;

	if (!carry_wanted(&epoch))
		return;

	/*
	 * Another key's rows may live on another Redis Cluster node, which may
	 * be the one that cannot answer: this call's answer stands, and the
	 * rows wait for a later call.
	 */
	if (!carry_one(NULL, &found, &r))
	{
		if (r.reply)
			freeReplyObject(r.reply);
		return;
	}
	if (!found)
	{
		carry_maybe = false;
		carry_epoch_seen = epoch;
	}
}
