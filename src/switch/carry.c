/*-------------------------------------------------------------------------
 *
 * carry.c
 *		Carrying the fallback store's admissions back into Redis, so that
 *		Redis learns what the fallback store admitted during an outage.
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
 * What Redis counted, and which rows an answer stands for, is the outage
 * memory's (outage.c, through outage_int.h): this file reads its slots and
 * hands it each answer with what the carry before it achieved
 * (outage_remember); the memory never calls back.
 *
 * This file decides nothing about policy and formats no Redis command.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/spin.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "carry.h"
#include "carry_turn.h"
#include "compat.h"
#include "fallback.h"
#include "fallback_carry.h"
#include "outage.h"
#include "outage_int.h"
#include "settings.h"
#include "stats.h"
#include "store_redis.h"


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

/*
 * This backend's mark (outage_int.h, PendingMark): set while it has a
 * sliding-log fallback call whose transaction has not ended, so that a carry
 * of the key waits for it if it was announced before the carry looked.
 */
static PendingMark *my_mark = NULL;
static bool mark_set = false;
static uint32 mark_slot = 0;

static void
mark_clear(void)
{
	if (!mark_set)
		return;
	pg_atomic_write_u64(&my_mark->seq1, 0);
	/* a full barrier: the mark is cleared before it leaves the count */
	(void) pg_atomic_fetch_sub_u32(&outage_shared->marks_set, 1);
	mark_set = false;
}

/*
 * Announce a call of the slot: the mark keeps the oldest announcement of
 * the transaction, and the slot (any slot, once there are two). Then a
 * full barrier: the mark is seen by any carry that reads the slot after
 * this backend reads it (the spinlock) for the seed.
 */
static void
mark_announce(uint32 slot_index)
{
	int			me = SLIDEWIN_MY_PROC_NUMBER();

	if (me < 0 || me >= outage_marks_n())
		elog(ERROR, "slidewin: process number %d has no mark in the outage table", me);
	my_mark = &outage_shared->marks[me];
	if (!mark_set)
	{
		uint64		seq;

		/*
		 * Counted before it takes its number (both full barriers): a carry
		 * that reads a later number finds the count above 0 (wait_pending).
		 */
		(void) pg_atomic_fetch_add_u32(&outage_shared->marks_set, 1);
		seq = pg_atomic_fetch_add_u64(&outage_shared->announce_seq, 1);

		mark_slot = slot_index;
		pg_atomic_write_u32(&my_mark->slot, slot_index);
		pg_write_barrier();
		pg_atomic_write_u64(&my_mark->seq1, seq + 1);
		mark_set = true;
	}
	else if (mark_slot != slot_index && mark_slot != MARK_ANY_SLOT)
	{
		mark_slot = MARK_ANY_SLOT;
		pg_atomic_write_u32(&my_mark->slot, MARK_ANY_SLOT);
	}
	pg_memory_barrier();
}

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
	mark_clear();
}

static int64 pending_add(const RlArgs *args, int64 units);
static void outage_wrote_rows(void);

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

/*
 * The keys' fallback locks, held from the carry to the end of the decision:
 * one for rl_attempt, one per key of a counting algorithm for rl_attempt_all.
 */
static int	n_key_locked = 0;
static LOCKTAG key_locks[RL_MAX_KEYS];

/*
 * The call being decided carried every row of its key in this database
 * that an answer could stand in for (outage_carry), and the COMMIT PREPARED
 * generation it read before looking: outage_remember may then move the
 * slot's carried_to. Cleared by outage_carry_end.
 */
static bool carry_complete = false;
static uint64 carry_gen = 0;

/*
 * The same for each key of an rl_attempt_all (outage_carry_all), whose
 * answer is noted key by key: the first n_carried_all keys were carried.
 */
static int	n_carried_all = 0;
static bool carry_complete_all[RL_MAX_KEYS];
static uint64 carry_gen_all[RL_MAX_KEYS];

/*
 * A carry's deletions rolled back: its rows are back in the table, though
 * Redis has them. Moving the epoch makes the next call of their key carry
 * them again (and delete them) rather than take the key as carried
 * already (carry_turn.c, carry_done_at).
 */
static void
carried_rows_back(void)
{
	carry_maybe = true;
	if (outage_shared != NULL)
		pg_atomic_fetch_add_u64(&outage_shared->epoch, 1);
}

static void
carry_xact_callback(XactEvent event, void *arg)
{
	if ((event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT) && carried_in_xact)
		carried_rows_back();
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_PREPARE)
	{
		/*
		 * At COMMIT the rows are visible to every backend by now. The epoch
		 * moved when the rows were written, and a backend that looked
		 * meanwhile found none (not yet committed) and stopped looking: move
		 * it again now that they can be found. Before the marks are
		 * cleared (a full barrier): a carry that waited for this backend's
		 * mark then reads the new epoch, and cannot take the key for
		 * carried by a carry that began before these rows could be seen
		 * (carry_turn.c, carry_done_at).
		 */
		if (wrote_in_xact && outage_shared != NULL &&
			(event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT ||
			 event == XACT_EVENT_PREPARE))
			pg_atomic_fetch_add_u64(&outage_shared->epoch, 1);
		pending_end();
		wrote_in_xact = false;
		carried_in_xact = false;
		n_key_locked = 0;		/* a transaction's locks: gone with it */
		n_carried_all = 0;
	}
}

static void
carry_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB && carried_in_xact)
		carried_rows_back();
}

void
carry_init(void)
{
	RegisterXactCallback(carry_xact_callback, NULL);
	RegisterSubXactCallback(carry_subxact_callback, NULL);
}

/*
 * Redis answered: the outage memory keeps what it counted, and whether the
 * carry before it took every row of the key (outage_carry) with the
 * COMMIT PREPARED generation it read.
 */
void
outage_remember(const RlArgs *args, int64 asked_at, const RlOutcome *o)
{
	outage_note_answer(args, asked_at, o, carry_complete, carry_gen);
}

/*
 * rl_attempt_all: the same for every key, each with what its own carry
 * achieved (outage_carry_all). An answer of a key whose carry was not
 * complete moves its count, never the rows it stands in for.
 */
void
outage_remember_all(int n, const RlArgs *args, int64 asked_at, const RlOutcome *o)
{
	for (int k = 0; k < n; k++)
		outage_note_answer(&args[k], asked_at, &o[k],
						   k < n_carried_all && carry_complete_all[k],
						   k < n_carried_all ? carry_gen_all[k] : 0);
}

/*
 * A call decided by the fallback store: what Redis had counted for the key
 * goes in with it (the seed: the store reads it through outage_seed at the
 * moment its decision starts, for the counting algorithms under the key's
 * lock, which a carry holds until Redis has decided), and what it wrote for
 * Redis to learn of is waited for by carries of the key.
 *
 * A sliding log's call is announced before it reads the seed or the clock:
 * counted in its slot's fb_pending as if it would admit its whole cost (the
 * count is set to what it wrote once it has decided), and marked with the
 * number of its announcement (mark_announce). Announced only after the
 * write, an admission could slip between a carry and the answer it stands
 * behind: a carry's wait (wait_pending) passed before the count moved, its
 * scan missed the uncommitted row, and Redis decided without it; the answer
 * then set carried_to past the row's time, so that later fallback calls
 * took the row for one of Redis's units, and every call of the key through
 * either store was free to admit its units again (TAP 057_partial_outage,
 * 1 ms command_timeouts: 61 to 86 units admitted for a lim of 60).
 * Announced first, a call either is marked before a carry looks, and the
 * carry waits for its commit and carries its row; or after, and then it
 * finds the carrying call in flight (outage_asking precedes the wait) and
 * its row's time is later than the answer's carried_to, which was read
 * before the carry. The mark is set before a full barrier and the seed is
 * read under the slot's spinlock, which the carrying call took to count
 * itself in flight before it reads the marks: one of the two orders holds.
 */
/*
 * A sliding log's call in the fallback store, its row scored ahead_us after
 * its admission (0 but for a local batch's reserve, local_batch.c).
 */
static void
fallback_attempt_announced(const RlArgs *args, int64 ahead_us, RlOutcome *o)
{
	int64		announced = pending_add(args, args->cost);

	if (announced == 0)
	{
		fallback_attempt_ahead(args, outage_seed, ahead_us, o);
		if (o->carry_units > 0)
			outage_fallback_wrote(args, o->carry_units);
		return;
	}
	PG_TRY();
	{
		fallback_attempt_ahead(args, outage_seed, ahead_us, o);
	}
	PG_CATCH();
	{
		/* the row, if any, goes with the (sub)transaction */
		(void) pending_add(args, -announced);
		PG_RE_THROW();
	}
	PG_END_TRY();
	/* the announcement becomes the count of what was written */
	(void) pending_add(args, o->carry_units - announced);
	if (o->carry_units > 0)
		outage_wrote_rows();
}

void
outage_fallback_attempt(const RlArgs *args, RlOutcome *o)
{
	fallback_attempt_announced(args, 0, o);
}

void
outage_fallback_reserve(const RlArgs *args, int64 ahead_us, RlOutcome *o)
{
	Assert(args->algorithm == ALGO_SLIDING_LOG);
	fallback_attempt_announced(args, ahead_us, o);
}

void
outage_fallback_peek(const RlArgs *args, RlOutcome *o)
{
	fallback_peek(args, outage_seed, o);
}

/*
 * This transaction wrote carry rows: look for rows again, and make every
 * backend look (the epoch moves again at commit, see carry_xact_callback).
 */
static void
outage_wrote_rows(void)
{
	carry_maybe = true;
	wrote_in_xact = true;
	if (outage_shared != NULL)
		pg_atomic_fetch_add_u64(&outage_shared->epoch, 1);
}

/*
 * Add units (or take them back, units < 0) to this backend's uncommitted
 * fallback admissions of args' slot, counted in its fb_pending. Sliding log
 * only (the counting algorithms are waited for through the key's lock).
 * Returns the units added: 0 where nothing is counted.
 */
static int64
pending_add(const RlArgs *args, int64 units)
{
	OutageSlot *slot;
	int			i;

	if (units == 0 || !slidewin_outage_exact || !outage_seeds_active() ||
		args->algorithm != ALGO_SLIDING_LOG)
		return 0;
	slot = &outage_shared->slots[outage_keyhash(args) % slidewin_outage_keys];
	for (i = 0; i < n_pending; i++)
		if (pending[i].slot == slot)
			break;
	if (i == n_pending)
	{
		if (units < 0)
			return 0;
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
	if (units < 0)
		units = -Min(-units, pending[i].units);
	if (units > 0)
		mark_announce((uint32) (slot - outage_shared->slots));
	SpinLockAcquire(&slot->mutex);
	slot->fb_pending += units;
	if (units > 0)
		slot->fb_written++;
	SpinLockRelease(&slot->mutex);
	pending[i].units += units;
	if (units < 0)
	{
		/* nothing of the transaction left to wait for: no mark */
		int64		left = 0;

		for (int j = 0; j < n_pending; j++)
			left += pending[j].units;
		if (left == 0)
			mark_clear();
	}
	return units;
}

/*
 * The fallback store wrote the carry row of an admission of args' key (cost
 * units). Until the transaction commits, a call that carries the key cannot
 * see the row, and Redis would decide without it: the units are counted in
 * the key's slot (fb_pending) meanwhile, so that such a call waits for the
 * commit (outage_carry). Counted by slot, whatever key holds it: another
 * key of the same slot can only make a carry wait, never miss a row.
 * (outage_fallback_attempt counts a sliding log's call before it decides;
 * this is for a call the outage memory did not count then.)
 */
void
outage_fallback_wrote(const RlArgs *args, int64 cost)
{
	outage_wrote_rows();
	(void) pending_add(args, cost);
}

/*
 * An admission counted by outage_fallback_wrote was undone before its
 * transaction ended (rl_attempt_all rolled back the subtransaction of a
 * denied call): its units no longer make carries of the key wait.
 */
void
outage_fallback_unwrote(const RlArgs *args, int64 cost)
{
	(void) pending_add(args, -cost);
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
 * far. A fallback call is counted there before it decides
 * (outage_fallback_attempt); one counted after this looked finds this call
 * in flight (outage_asking), and admits later than the time the answer will
 * stand for, so none slips between the carry and the decision. False when
 * it gave up on some (the carry is then not complete).
 */
/*
 * Whether another backend has a mark of the slot announced before
 * `before`: a call it may still admit, which a carry must wait for.
 */
static bool
marked_before(uint32 slot_index, uint64 before)
{
	int			me = SLIDEWIN_MY_PROC_NUMBER();
	int			n = outage_marks_n();

	for (int i = 0; i < n; i++)
	{
		PendingMark *m = &outage_shared->marks[i];
		uint64		seq1;
		uint32		s;

		if (i == me)
			continue;
		seq1 = pg_atomic_read_u64(&m->seq1);
		if (seq1 == 0 || seq1 - 1 >= before)
			continue;
		pg_read_barrier();
		s = pg_atomic_read_u32(&m->slot);
		if (s == slot_index || s == MARK_ANY_SLOT)
			return true;
	}
	return false;
}

/*
 * Calls announced after this carry looked are not waited for: they read
 * the outage memory after this call was counted in flight (outage_asking
 * comes first), so they count it, and their rows' times are later than the
 * answer's carried_to. Waiting for every call of the slot instead let a stream of fallback calls of a busy key hold a carry
 * for its whole 100 ms, after which Redis decided without the ones then in
 * progress (the likely cause of 66 units of 60 in one of six runs of TAP
 * 057_partial_outage under the sanitizer).
 */
static bool
wait_pending(const RlArgs *args)
{
	uint32		slot_index = (uint32) (outage_keyhash(args) % slidewin_outage_keys);
	OutageSlot *slot = &outage_shared->slots[slot_index];
	TimestampTz deadline;
	uint64		before;

	/* after outage_asking's spinlock: every mark set before it is seen */
	pg_memory_barrier();
	before = pg_atomic_read_u64(&outage_shared->announce_seq);

	/*
	 * No mark set anywhere: none announced before `before` is left, since a
	 * call counts itself in marks_set before it takes its number, and leaves
	 * the count only after clearing its mark. The common case, outside an
	 * outage, and it spares every call the scan of all processes' marks.
	 */
	pg_read_barrier();
	if (pg_atomic_read_u32(&outage_shared->marks_set) == 0)
		return true;
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), PENDING_WAIT_MS);
	for (;;)
	{
		uint64		written;

		SpinLockAcquire(&slot->mutex);
		written = slot->fb_written;
		SpinLockRelease(&slot->mutex);
		if (!marked_before(slot_index, before))
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
 * the first key, in key order under this backend's prefix, with a row
 * waiting (fallback_carry_collect). *found: whether there was
 * anything. False when Redis could not answer (r filled in): the rows stay.
 * The key's turn is waited for (args set), or only tried once the key is
 * known (args NULL: that carry only tidies up after the call, and leaves a
 * key another backend is carrying to it). An error gives the turn up with
 * the (sub)transaction.
 */
static bool
carry_one(const RlArgs *args, bool *found, RedisResult *r)
{
	CarryTurn	turn = {0};
	FallbackCarry c;
	RlArgs		same;
	int64		recorded;
	ItemPointerData *skip = NULL;
	int			nskip = 0;
	int64		after = -1;		/* the next batch's rows come after this time */

	*found = false;
	if (outage_shared != NULL)
	{
		turn.active = true;
		/* read before looking: a row written after it moves it */
		turn.epoch = pg_atomic_read_u64(&outage_shared->epoch);
		if (args != NULL && !carry_turn_take(&turn, args, CARRY_TURN_WAIT_MS))
		{
			*found = true;
			return true;
		}
	}
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

		if (!fallback_carry_collect(args, batch, after, skip, nskip, &c))
		{
			if (after >= 0)
			{
				after = -1;		/* the last look goes over the whole key */
				continue;
			}
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
			carry_turn_end(&turn, args, true);
			return true;
		}
		*found = true;
		if (args == NULL && turn.active)
		{
			/* the key is known now: its turn, if nobody else has it */
			if (!carry_turn_take(&turn, &c.args, 0) || !turn.locked)
				return true;
		}
		started = GetCurrentTimestamp();
		if (!redis_store_import(&c.args, c.entries.data, c.n, &recorded, r))
		{
			carry_turn_end(&turn, &c.args, false);
			return false;
		}
		carry_measured(c.n, started);
		skip = skip ? repalloc(skip, (nskip + c.n) * sizeof(ItemPointerData))
			: palloc(c.n * sizeof(ItemPointerData));
		nskip += fallback_carry_done(&c, skip + nskip);
		carried_in_xact = true;
		stats_outage(STATS_OUTAGE_CARRIED, recorded);
		if (c.n < batch)
		{
			if (after < 0)
			{
				carry_turn_end(&turn, &c.args, true);
				return true;
			}

			/*
			 * The key's rows from where the batches went on: a row of another
			 * backend committed meanwhile may lie before that point. The whole
			 * key is looked over once more, as the first batch did.
			 */
			after = -1;
		}
		else
			after = c.last_ts;
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
	if (outage_shared != NULL)
	{
		*epoch = pg_atomic_read_u64(&outage_shared->epoch);
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
	bool		waited = false;

	carry_complete = false;
	if (!outage_covered(args))
		return true;
	/* read before looking: a COMMIT PREPARED after this may add rows */
	carry_gen = outage_shared != NULL ? pg_atomic_read_u64(&outage_shared->prepared_gen) : 0;
	if (!carry_wanted(&epoch))
	{
		/*
		 * Nothing was waiting when this backend last looked, and no
		 * fallback admission has been made since. But a sliding log's
		 * fallback call announced before this call looked may still be
		 * deciding: it read the outage memory before this call was counted
		 * in flight, so it does not count this call, and its row is not
		 * written yet, so the counter has not moved. Skipping the wait here
		 * let Redis decide without it (63 units of 60 in one run of TAP
		 * 057_partial_outage). Wait for it as a carry does, then look
		 * again: its admission moves the counter.
		 */
		if (args->algorithm != ALGO_SLIDING_LOG || !slidewin_outage_exact ||
			!outage_seeds_active())
		{
			carry_complete = slidewin_outage_exact;
			return true;
		}
		complete = wait_pending(args);
		waited = true;
		if (!carry_wanted(&epoch))
		{
			carry_complete = complete;
			return true;
		}
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
		if (n_key_locked < RL_MAX_KEYS &&
			fallback_try_lock_key(args, &key_locks[n_key_locked], PENDING_WAIT_MS))
			n_key_locked++;
		else
			complete = false;
	}
	else if (!waited && outage_seeds_active())
		complete = wait_pending(args);
	if (!carry_one(args, &found, r))
		return false;
	carry_complete = complete && slidewin_outage_exact;
	return true;
}

/*
 * rl_attempt_all: carry every key's rows before Redis decides, keeping what
 * each carry achieved for outage_remember_all. The locks of the counting
 * algorithms' keys are all held until outage_carry_end; they are only
 * tried (never queued for), so the keys' order cannot deadlock.
 */
bool
outage_carry_all(int n, const RlArgs *args, RedisResult *r)
{
	n_carried_all = 0;
	for (int k = 0; k < n; k++)
	{
		if (!outage_carry(&args[k], r))
			return false;
		carry_complete_all[k] = carry_complete;
		carry_gen_all[k] = carry_gen;
		n_carried_all = k + 1;
	}
	return true;
}

void
outage_carry_end(void)
{
	carry_complete = false;
	n_carried_all = 0;
	while (n_key_locked > 0)
		fallback_unlock_key(&key_locks[--n_key_locked]);
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
