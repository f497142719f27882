/*-------------------------------------------------------------------------
 *
 * local_batch.c
 *		Local batches (slidewin.local_batch, slidewin.local_batch_time): a
 *		sliding_log call on a hot key reserves several units from Redis at
 *		once, and this server's backends use them from shared memory, with
 *		no round trip, until the batch ends.
 *
 * Why this stays exact (doc/semantics.md, "Local batches", gives the whole
 * argument). A batch of n units that Redis reserves at its time r for d
 * is recorded as one entry of weight n scored r + d: the latest time at
 * which any of its units may be used. Every window that can hold a use of
 * one of them holds r + d or ends after it, and Redis counts an entry in
 * every window check from the moment it is written until it leaves the
 * window (a score ahead of now included), so the usual sliding-log bound
 * holds with each unit counted at r + d instead of its real use.
 *
 * The rules this file keeps:
 *
 *	1. A unit is taken from a batch only before the batch's local deadline:
 *	   the time the reserve was sent, on the monotonic clock (shared by
 *	   every process of the host; a step of the wall clock cannot stretch
 *	   a batch), plus d. Redis
 *	   ran the script after it was sent, so every such use comes before
 *	   r + d. The deadline is read under the table's lock, in the same hold
 *	   that takes the units.
 *
 *	2. The units a batch did not use go back to Redis once its deadline has
 *	   passed, as a partial refund of its entry (log_refund.lua), sent by
 *	   the worker of this file, which wakes at the earliest deadline. A
 *	   slot in the worker's hands (SLOT_ENDING) is never taken from. If the
 *	   refund cannot be sent, the units stay counted until the entry leaves
 *	   the window: the error denies, never admits. A batch is kept only
 *	   while the worker runs: one made while none does (between a worker's
 *	   exit and its restart) gives its rest back at once and is never taken
 *	   from, and no batch is asked for in single-user mode, which has none.
 *
 *	3. A batch is never asked for more than slidewin.local_batch units nor
 *	   more than the limit; Redis gives the window's rest when it has fewer
 *	   left, down to the call's own cost, and denies as it would deny the
 *	   call alone below that. A batch never denies what the call alone would
 *	   have been admitted. While another server's reserve of the key waits
 *	   (it was denied for want of room, and has not been admitted since),
 *	   Redis gives this server's reserves the call's own cost and no more,
 *	   so that one server cannot win batch after batch while the other is
 *	   denied; each server names itself by a random name drawn at start.
 *
 *	4. Batches are off without shared_preload_libraries, under
 *	   slidewin.test_now, in shadow mode, and for every algorithm but
 *	   sliding_log. A call served from a batch records no entry of its
 *	   own: it has no ticket and no refund on abort. Under Redis Cluster
 *	   they work as on one server: the reserve is an attempt as the store
 *	   sends it there (the key's ledger and block key kept beside its log,
 *	   so a migrating slot holds all of them or none; rl_attempt_all over
 *	   several slots counts the batch's entry as any other), and the
 *	   worker's refund is routed to the master of the key's slot as any
 *	   command is, following MOVED and ASK. The worker reaches the cluster
 *	   that the server's own slidewin.redis_url names.
 *
 *	5. A batch is sized from the key's recent rate on this server (the
 *	   demand table below): about the units this server's calls of the key
 *	   would use in d, within rule 3's bounds. The first calls of a run
 *	   (DEMAND_WARM_CALLS - 1 of them: a run starts when the key is first
 *	   seen, or seen again after more than DEMAND_IDLE_TIMES * d of
 *	   silence), and every call of a key called fewer than twice per d on
 *	   average, reserve nothing: they go to Redis alone, as ordinary calls
 *	   with their own entries, tickets and refunds on abort, so a key
 *	   called once never pays for a batch nor costs a refund. The
 *	   size changes only how many units one entry holds, never where it is
 *	   scored nor when its units may be used: the exactness argument above
 *	   does not depend on it.
 *
 *	6. While Redis cannot answer and the call's policy is fallback, a
 *	   reserve is made in the fallback store instead (doc/semantics.md,
 *	   "Local batches in the fallback store"): one admission of the batch's
 *	   units, its row scored d after the store's clock read after `sent'
 *	   (so after every use, as rule 1 has it for Redis), counted by every
 *	   later check of the key from its commit, and carried into Redis with
 *	   that score ahead of Redis's now when Redis answers again. Its slot
 *	   names the database whose store holds the row, and no other database
 *	   takes from it. The row commits or aborts with the reserving
 *	   transaction: until it commits the slot is SLOT_PENDING, taken from
 *	   only by that backend, whose units go with the row if it aborts; at
 *	   commit it becomes SLOT_LIVE, and an abort of the transaction, or of
 *	   the subtransaction that reserved, frees it. A prepared transaction's
 *	   batch is freed at PREPARE: its units stay counted, unused. The rest
 *	   of a committed batch goes back (1.18) by the next call of its key in
 *	   its database after the deadline and before give_until (4 d later):
 *	   that call frees the slot in the hold that checks deadlines, so no
 *	   unit is taken after, and refunds the rest of the batch's row in its
 *	   own transaction (local_batch_fallback.c). Otherwise the rest stays
 *	   counted until the row leaves the window (a denial, never an
 *	   admission), and the slot is freed at give_until by whichever
 *	   process sees it first.
 *	   A fallback reserve is all or nothing: denied, the call is decided
 *	   alone, as it would be without batches.
 *
 * The table is small and fixed (BATCH_SLOTS); when it is full, a call goes
 * to Redis as if batches were off. The demand table (DEMAND_SLOTS entries,
 * direct-mapped by a hash of the key, a second hash telling keys that share
 * an entry apart) keeps, per key, the last call's time on the monotonic
 * clock and a moving average of the gaps between calls; a key that takes
 * another's entry simply starts cold. One LWLock guards both tables: a call
 * notes its demand in the same exclusive hold that looks for a batch to
 * take from, so that sizing adds no lock of its own to the hot path.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "local_batch.h"
#include "local_batch_int.h"
#include "settings.h"
#include "scripts.h"
#include "shmem_parts.h"
#include "store_redis.h"

/* how soon the worker tries again a refund Redis could not take */
#define BATCH_RETRY_MS 100
/* the silence (in d) after which a key is cold */
#define DEMAND_IDLE_TIMES 16
/* the first call of a run that may reserve (a run: gaps of at most 16 d) */
#define DEMAND_WARM_CALLS 3

/*
 * The size local_batch_take chose for the reserve that follows it in the
 * same call (policy_run), as a RedisOp takes no argument for it.
 */
static int64 reserve_want = 0;

/* The same for a reserve in the fallback store (local_batch_fallback.c). */
int64		local_batch_fallback_want = 0;

/* What local_batch_take took out of an ended fallback batch, to give back. */
FallbackRest local_batch_fallback_rest;

static BatchShared *shared = NULL;

BatchShared *
local_batch_table(void)
{
	return shared;
}

void
local_batch_slot_free(BatchSlot *s)
{
	s->state = SLOT_FREE;
	s->gen++;
}

int64
local_batch_mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64) ts.tv_sec * USECS_PER_SEC + ts.tv_nsec / 1000;
}

PGDLLEXPORT void slidewin_batch_worker_main(Datum arg);

static Size
shmem_size(void)
{
	return sizeof(BatchShared);
}

static void
shmem_request(void)
{
	RequestNamedLWLockTranche("slidewin local batches", 1);
}

static void
shmem_attach(void *p, bool found)
{
	shared = (BatchShared *) p;
	if (!found)
	{
		uint64		name = 0;

		memset(shared, 0, sizeof(BatchShared));
		shared->lock = &(GetNamedLWLockTranche("slidewin local batches"))[0].lock;
		/* unique to this start of this server, as far as other servers go */
		if (!pg_strong_random(&name, sizeof(name)))
			name = (uint64) MyProcPid << 32 ^ (uint64) GetCurrentTimestamp();
		snprintf(shared->server, sizeof(shared->server), "%016llx",
				 (unsigned long long) name);
	}
}

static const ShmemPart shmem_part = {"slidewin local batches", shmem_size,
shmem_request, shmem_attach};

void
local_batch_init(void)
{
	BackgroundWorker worker;

	if (!process_shared_preload_libraries_in_progress)
		return;
	slidewin_shmem_register(&shmem_part);
	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS;
	worker.bgw_start_time = BgWorkerStart_ConsistentState;
	worker.bgw_restart_time = 1;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "slidewin");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "slidewin_batch_worker_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "slidewin local batch worker");
	snprintf(worker.bgw_type, BGW_MAXLEN, "slidewin local batch worker");
	RegisterBackgroundWorker(&worker);
}

static uint32
target_hash(void)
{
	const char *url = slidewin_redis_url ? slidewin_redis_url : "";

	return hash_bytes((const unsigned char *) url, strlen(url));
}

bool
local_batch_applies(const RlArgs *args)
{
	int64		now;

	/* no worker, no batch (rule 2): none runs in single-user mode */
	return shared != NULL && IsUnderPostmaster && slidewin_local_batch > 0 &&
		args->algorithm == ALGO_SLIDING_LOG && !args->force &&
		Min(slidewin_local_batch, args->lim) > args->cost &&
		!limit_test_clock(&now);
}

void
local_batch_key(const RlArgs *args, BatchKey *k)
{
	uint32		h;

	redis_store_log_keys(args, &k->log, &k->loglen, &k->ledger, &k->ledgerlen);
	k->target = target_hash();
	h = hash_bytes((const unsigned char *) k->log, k->loglen);
	h = hash_combine(h, hash_bytes_uint32((uint32) args->lim));
	h = hash_combine(h, hash_bytes_uint32((uint32) (args->lim >> 32)));
	h = hash_combine(h, hash_bytes_uint32((uint32) args->win_us));
	h = hash_combine(h, hash_bytes_uint32((uint32) (args->win_us >> 32)));
	k->hash = hash_combine(h, k->target);
	k->check = hash_bytes_extended((const unsigned char *) k->log, k->loglen, k->hash);
}

static bool
slot_matches(const BatchSlot *s, const RlArgs *args, const BatchKey *k)
{
	return s->hash == k->hash && s->target == k->target && s->lim == args->lim &&
		(s->dbid == InvalidOid || s->dbid == MyDatabaseId) &&
		s->win_us == args->win_us && s->loglen == k->loglen &&
		memcmp(s->keys, k->log, k->loglen) == 0;
}

/* A call's outcome served from slot s (under the lock). */
static void
outcome_from(const BatchSlot *s, const RlArgs *args, RlOutcome *o)
{
	o->allowed = true;
	o->blocked = false;
	o->known = true;
	o->store = s->dbid == InvalidOid ? "redis" : "fallback";
	o->remaining = s->remaining;
	o->used = args->lim - s->remaining;
	o->retry_us = 0;
	o->reset_at_us = s->reset_at_us;
	o->next_us = s->next_us;
	o->recorded_ts = -1;
	o->entry_ts = -1;
	o->shadowed = false;
	o->stable_us = 0;
	o->carry_units = 0;
	o->lim = args->lim;
	o->win_us = args->win_us;
}

/*
 * Note a call of the key now (under the exclusive lock) and return the
 * units a reserve should ask for (rule 5), or 0 when the call should go to
 * Redis alone. The rate is a moving average of the gaps between this
 * server's calls of the key; a call that finds the entry empty, another
 * key's, or silent for more than DEMAND_IDLE_TIMES * d starts a new run.
 */
static int64
demand_note(const RlArgs *args, const BatchKey *k, int64 now, int64 d_us)
{
	DemandEntry *e = &shared->demand[k->hash % DEMAND_SLOTS];
	int64		gap;
	int64		want;

	if (e->calls == 0 || e->hash != k->hash || e->check != k->check ||
		now - e->last_us > DEMAND_IDLE_TIMES * d_us)
	{
		e->hash = k->hash;
		e->check = k->check;
		e->calls = 1;
		e->last_us = now;
		e->gap_us = 0;
		return 0;
	}
	gap = Max(now - e->last_us, 0);
	e->gap_us = e->calls == 1 ? gap : e->gap_us + (gap - e->gap_us) / 4;
	e->last_us = now;
	if (e->calls < PG_UINT32_MAX)
		e->calls++;
	/* fewer than two calls per d: a batch would mostly go back unused */
	if (e->calls < DEMAND_WARM_CALLS || 2 * e->gap_us > d_us)
		return 0;
	/* cost < Min(setting, lim) <= 10^6 and d_us <= 10^7: no overflow */
	want = d_us * args->cost / Max(e->gap_us, 1);
	want = Min(want, Min((int64) slidewin_local_batch, args->lim));
	return want > args->cost ? want : 0;
}

/*
 * Slot s (under the exclusive lock) is a fallback batch past its deadline.
 * A committed one with units left waits until give_until for a call of its
 * key in its database (matches): that call frees it, in this hold, so no
 * unit is taken after, and keeps its rest in local_batch_fallback_rest for
 * local_batch_give_back_fallback (rule 6). Any other is freed. Whether the
 * rest was taken.
 */
static bool
fallback_ended(BatchSlot *s, int64 now, bool matches)
{
	if (s->state == SLOT_LIVE && s->left > 0 && now < s->give_until)
	{
		if (!matches || s->dbid != MyDatabaseId)
			return false;		/* left for a call of its key */
		local_batch_fallback_rest.ts = s->score;
		local_batch_fallback_rest.taken = s->taken;
		local_batch_fallback_rest.left = s->left;
		local_batch_slot_free(s);
		return true;
	}
	local_batch_slot_free(s);
	return false;
}

bool
local_batch_take(const RlArgs *args, RlOutcome *o, bool *reserve)
{
	BatchKey	k;
	bool		done = false;
	bool		room = false;
	int64		d_us = (int64) slidewin_local_batch_time * 1000;
	int64		now;
	int64		want;
	bool		give = false;

	local_batch_fallback_rest.left = 0;
	local_batch_key(args, &k);
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	/* rule 1: the clock is read in the hold that takes the units */
	now = local_batch_mono_us();
	want = demand_note(args, &k, now, d_us);
	for (int i = 0; i < BATCH_SLOTS && !done; i++)
	{
		BatchSlot  *s = &shared->slots[i];

		/* a fallback batch that ended: this call may give its rest back */
		if (s->dbid != InvalidOid && s->state != SLOT_FREE && now >= s->deadline &&
			fallback_ended(s, now, !give && slot_matches(s, args, &k)))
			give = true;
		if (s->state == SLOT_FREE)
			room = true;
		if (!(s->state == SLOT_LIVE ||
			  (s->state == SLOT_PENDING && s->owner == MyProcPid)) ||
			s->left < args->cost || !slot_matches(s, args, &k))
			continue;
		if (now >= s->deadline)
			continue;
		s->left -= args->cost;
		outcome_from(s, args, o);
		done = true;
	}
	LWLockRelease(shared->lock);
	pfree(k.log);
	pfree(k.ledger);

	/*
	 * With the table full (batches not yet given back), the call goes to
	 * Redis alone, rather than reserve a batch only to give it back.
	 */
	reserve_want = (done || !room) ? 0 : want;
	local_batch_fallback_want = reserve_want;
	*reserve = reserve_want > 0;
	return done;
}

/* Give back `part` units of a batch's entry now; false if Redis did not answer. */
static bool
give_back_part(const char *log, int loglen, const char *ledger, int ledgerlen,
			   int64 score, int64 taken, int64 part, int64 win_us)
{
	RedisResult r;
	bool		given;

	return redis_store_refund_part(log, loglen, ledger, ledgerlen, score, taken, part,
								   win_us, &given, &r);
}

bool
local_batch_reserve(const RlArgs *args, RlOutcome *o, RedisResult *r)
{
	int64		want = reserve_want;
	int64		d_us = (int64) slidewin_local_batch_time * 1000;
	int64		sent;
	int64		taken;
	BatchKey	k;
	Latch	   *wake = NULL;

	reserve_want = 0;
	want = Min(want, Min((int64) slidewin_local_batch, args->lim));
	if (want <= args->cost)
		return redis_store_attempt(args, o, r);

	/* rule 1: taken before the request leaves, so never after Redis's r */
	sent = local_batch_mono_us();
	if (!redis_store_batch_attempt(args, want, d_us, shared->server, o, &taken, r))
		return false;
	/* the call's own entry is the batch's: no ticket, no refund on abort */
	o->recorded_ts = -1;
	o->entry_ts = -1;
	if (taken <= args->cost)
		return true;

	local_batch_key(args, &k);
	if (k.loglen + k.ledgerlen <= BATCH_KEY_BYTES)
	{
		LWLockAcquire(shared->lock, LW_EXCLUSIVE);

		/*
		 * Kept only while a worker runs to give its rest back (rule 2); else
		 * it is given back below at once, and must then not be taken from.
		 */
		if (shared->worker_latch &&
			local_batch_keep(args, &k, sent + d_us, taken, o, InvalidOid, SLOT_LIVE) >= 0)
			wake = shared->worker_latch;
		LWLockRelease(shared->lock);
	}
	if (wake)
		SetLatch(wake);
	else

		/*
		 * Nowhere to keep the batch: its rest goes back at once. If Redis
		 * does not take it, it stays counted until it leaves the window.
		 */
		(void) give_back_part(k.log, k.loglen, k.ledger, k.ledgerlen,
							  o->reset_at_us - args->win_us, taken,
							  taken - args->cost, args->win_us);
	pfree(k.log);
	pfree(k.ledger);
	return true;
}

int
local_batch_keep(const RlArgs *args, const BatchKey *k, int64 deadline, int64 taken,
				 const RlOutcome *o, Oid dbid, SlotState state)
{
	for (int i = 0; i < BATCH_SLOTS; i++)
	{
		BatchSlot  *s = &shared->slots[i];

		if (s->state != SLOT_FREE)
			continue;
		s->dbid = dbid;
		s->owner = state == SLOT_PENDING ? MyProcPid : 0;
		s->hash = k->hash;
		s->target = k->target;
		s->lim = args->lim;
		s->win_us = args->win_us;
		s->deadline = deadline;
		s->score = o->reset_at_us - args->win_us;
		s->taken = taken;
		s->left = taken - args->cost;
		s->remaining = o->remaining;
		s->reset_at_us = o->reset_at_us;
		s->next_us = o->next_us;
		s->loglen = k->loglen;
		s->ledgerlen = k->ledgerlen;
		memcpy(s->keys, k->log, k->loglen);
		memcpy(s->keys + k->loglen, k->ledger, k->ledgerlen);
		s->state = state;
		return i;
	}
	return -1;
}

int64
local_batch_held(const RlArgs *args)
{
	BatchKey	k;
	int64		held = 0;

	if (shared == NULL)
		return 0;
	local_batch_key(args, &k);
	LWLockAcquire(shared->lock, LW_SHARED);
	for (int i = 0; i < BATCH_SLOTS; i++)
	{
		const BatchSlot *s = &shared->slots[i];

		if (s->state != SLOT_FREE && slot_matches(s, args, &k))
			held += s->left;
	}
	LWLockRelease(shared->lock);
	pfree(k.log);
	pfree(k.ledger);
	return held;
}

void
local_batch_end_key(const RlArgs *args)
{
	RlArgs		log_args = *args;
	char	   *log;
	char	   *ledger;
	int			loglen;
	int			ledgerlen;
	Latch	   *wake;

	if (shared == NULL)
		return;
	log_args.algorithm = ALGO_SLIDING_LOG;
	redis_store_log_keys(&log_args, &log, &loglen, &ledger, &ledgerlen);
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < BATCH_SLOTS; i++)
	{
		BatchSlot  *s = &shared->slots[i];

		if ((s->state == SLOT_LIVE || s->state == SLOT_PENDING) &&
			s->loglen == loglen && memcmp(s->keys, log, loglen) == 0)
			s->deadline = s->give_until = 0;
	}
	wake = shared->worker_latch;
	LWLockRelease(shared->lock);
	if (wake)
		SetLatch(wake);
	pfree(log);
	pfree(ledger);
}

/*
 * The worker's pass: every batch whose deadline has passed gives its rest
 * back (rule 2). Returns how long to sleep, in ms (-1: until woken).
 */
static long
end_batches(void)
{
	int64		now = local_batch_mono_us();
	int64		next = 0;
	uint32		target = target_hash();

	for (int i = 0; i < BATCH_SLOTS; i++)
	{
		BatchSlot  *s = &shared->slots[i];
		BatchSlot	copy;
		bool		ending = false;

		LWLockAcquire(shared->lock, LW_EXCLUSIVE);
		/* a fallback batch's rest goes back by a call of its key (rule 6) */
		if (s->dbid != InvalidOid && s->state != SLOT_FREE && now >= s->deadline)
			(void) fallback_ended(s, now, false);
		else if (s->state == SLOT_LIVE && now >= s->deadline)
			s->state = SLOT_ENDING;
		if (s->state == SLOT_ENDING)
		{
			memcpy(&copy, s, offsetof(BatchSlot, keys) + s->loglen + s->ledgerlen);
			ending = true;
		}
		LWLockRelease(shared->lock);
		if (!ending)
			continue;

		/*
		 * A batch of another Redis than this worker's, or whose entry has
		 * left the window, has nothing this worker can give back.
		 */
		if (copy.left == 0 || copy.target != target ||
			now - copy.deadline > copy.win_us ||
			give_back_part(copy.keys, copy.loglen, copy.keys + copy.loglen,
						   copy.ledgerlen, copy.score, copy.taken, copy.left,
						   copy.win_us))
		{
			LWLockAcquire(shared->lock, LW_EXCLUSIVE);
			local_batch_slot_free(s);
			LWLockRelease(shared->lock);
		}
		else
		{
			int64		retry = now + BATCH_RETRY_MS * 1000;

			if (next == 0 || retry < next)
				next = retry;
		}
	}


	/*
	 * The next deadline, read after every refund: a refund's wait may have
	 * reset the latch a backend set for a batch made meanwhile, and one
	 * made after this scan sets it again.
	 */
	LWLockAcquire(shared->lock, LW_SHARED);
	for (int i = 0; i < BATCH_SLOTS; i++)
	{
		BatchSlot  *s = &shared->slots[i];

		int64		at = s->deadline;

		/* an ended fallback batch waits for a call of its key until then */
		if (s->dbid != InvalidOid && s->state == SLOT_LIVE && now >= s->deadline)
			at = s->give_until;
		if ((s->state == SLOT_LIVE || s->state == SLOT_PENDING) &&
			(next == 0 || at < next))
			next = at;
	}
	LWLockRelease(shared->lock);
	if (next == 0)
		return -1;
	now = local_batch_mono_us();
	return next > now ? (long) ((next - now + 999) / 1000) : 0;
}

/* The worker leaves: batches made from now on are given back at once. */
static void
worker_gone(int code, Datum arg)
{
	/* an error may have left the lock held; nothing else is, in this worker */
	LWLockReleaseAll();
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	if (shared->worker_latch == MyLatch)
		shared->worker_latch = NULL;
	LWLockRelease(shared->lock);
}

void
slidewin_batch_worker_main(Datum arg)
{
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	/* the scripts' SHA1s are computed once, under a resource owner */
	CurrentResourceOwner = ResourceOwnerCreate(NULL, "slidewin local batch worker");
	scripts_prepare();
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	shared->worker_latch = MyLatch;
	LWLockRelease(shared->lock);
	before_shmem_exit(worker_gone, (Datum) 0);
	for (;;)
	{
		long		sleep_ms;

		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		/* allocates nothing: the refund is built on the stack */
		sleep_ms = end_batches();
		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_EXIT_ON_PM_DEATH | (sleep_ms >= 0 ? WL_TIMEOUT : 0),
						 sleep_ms, PG_WAIT_EXTENSION);
	}
}
