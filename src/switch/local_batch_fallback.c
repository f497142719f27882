/*-------------------------------------------------------------------------
 *
 * local_batch_fallback.c
 *		Local batches reserved from the fallback store while Redis cannot
 *		answer (rule 6 of local_batch.c, whose table they share): one
 *		admission of the batch's units, its row scored at the batch's end,
 *		and the batch kept in a slot of its database, pending until the
 *		reserving transaction commits.
 *
 * A slot of this file's is SLOT_PENDING from the reserve until the end of
 * the reserving transaction: only the backend that reserved takes from it
 * (local_batch_take), since its units stand on a row no other backend can
 * see yet, and go with it if the transaction aborts. At commit it becomes
 * SLOT_LIVE for every backend of the database; at an abort, at PREPARE, or
 * at the abort of the subtransaction that reserved it, it is freed. A slot
 * remembers its generation, which moves each time a slot is freed, so that
 * a transaction's end never touches a slot that its deadline freed and
 * another batch took meanwhile.
 *
 * What a committed batch did not use goes back by the next call of its key
 * in its database after its deadline, within GIVE_TIMES * d of it: that
 * call frees the slot, in the same hold of the table's lock in which takes
 * check the deadline (so no unit is taken after it), and gives the rest back
 * in its own transaction, as a partial refund of the batch's row
 * (fallback_refund_part). Then the row counts the units that were used, all
 * before its time. The give-back runs in a subtransaction: if it fails, or
 * the call's transaction aborts, the units stay counted until the row
 * leaves the window, as they did before 1.18 (a denial, never an
 * admission). A batch whose key is not called in time, or that a
 * prepared transaction reserved, gives nothing back; its slot is freed by
 * whichever process sees it first.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "miscadmin.h"
#include "storage/lwlock.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

#include "carry.h"
#include "deny_cache.h"
#include "fallback.h"
#include "local_batch_fallback.h"
#include "local_batch_int.h"
#include "settings.h"

/*
 * This backend's fallback batches whose rows its transaction has not
 * committed yet (rule 6): the slot, its generation then, and the
 * subtransaction that reserved it.
 */
#define MY_PENDING 8
static struct
{
	int			slot;
	uint32		gen;
	SubTransactionId subid;
}			my_pending[MY_PENDING];
static int	n_my_pending = 0;
static bool xact_callbacks_set = false;

/* how long after its deadline an ended batch waits for a call of its key, in d */
#define GIVE_TIMES 4
/* and at least (us) */
#define GIVE_MIN_US 100000


/*
 * The end of the transaction, or of a subtransaction, that reserved
 * fallback batches (rule 6): at commit they may be taken from by every
 * backend of the database; at an abort, or at PREPARE, nobody takes from
 * them again. A slot freed meanwhile (its deadline passed, by another
 * process) has moved on to another generation and is left alone.
 */
static void
pending_end(bool live, SubTransactionId from)
{
	BatchShared *shared = local_batch_table();
	int			kept = 0;

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < n_my_pending; i++)
	{
		BatchSlot  *s = &shared->slots[my_pending[i].slot];

		if (my_pending[i].subid < from)
		{
			my_pending[kept++] = my_pending[i];
			continue;
		}
		if (s->state != SLOT_PENDING || s->gen != my_pending[i].gen)
			continue;
		if (live)
		{
			s->state = SLOT_LIVE;
			s->owner = 0;
		}
		else
			local_batch_slot_free(s);
	}
	LWLockRelease(shared->lock);
	n_my_pending = kept;
}

static void
pending_xact_callback(XactEvent event, void *arg)
{
	if (n_my_pending == 0)
		return;
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			pending_end(true, InvalidSubTransactionId);
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			pending_end(false, InvalidSubTransactionId);
			break;
		default:
			break;
	}
}

/*
 * A subtransaction that aborts takes with it the rows of the batches that
 * it, or a subtransaction inside it, reserved: those began after it, so
 * their ids are at least its own.
 */
static void
pending_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						 SubTransactionId parentSubid, void *arg)
{
	if (n_my_pending > 0 && event == SUBXACT_EVENT_ABORT_SUB)
		pending_end(false, mySubid);
}

/*
 * Forget this backend's pending batches that can serve no call: used up, or
 * past their deadline (freed, whoever saw it, or freed now). Their rows
 * stay counted; a transaction that calls a hot key thousands of times then
 * keeps reserving, instead of stopping at MY_PENDING batches.
 */
static void
pending_prune(void)
{
	BatchShared *shared = local_batch_table();
	int64		now = local_batch_mono_us();
	int			kept = 0;

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < n_my_pending; i++)
	{
		BatchSlot  *s = &shared->slots[my_pending[i].slot];

		if (s->state != SLOT_PENDING || s->gen != my_pending[i].gen)
			continue;
		if (s->left == 0 || now >= s->deadline)
		{
			local_batch_slot_free(s);
			continue;
		}
		my_pending[kept++] = my_pending[i];
	}
	LWLockRelease(shared->lock);
	n_my_pending = kept;
}

void
local_batch_reserve_fallback(const RlArgs *args, RlOutcome *o)
{
	BatchShared *shared = local_batch_table();
	int64		want = local_batch_fallback_want;
	int64		d_us = (int64) slidewin_local_batch_time * 1000;
	int64		sent;
	int64		row_ts;
	RlArgs		batch = *args;
	BatchKey	k;
	int			free_slot = -1;

	local_batch_fallback_want = 0;
	want = Min(want, Min((int64) slidewin_local_batch, args->lim));
	if (n_my_pending == MY_PENDING)
		pending_prune();
	if (want <= args->cost || n_my_pending == MY_PENDING)
	{
		outage_fallback_attempt(args, o);
		return;
	}

	/* rule 1: read before the store reads its clock, so before any use */
	sent = local_batch_mono_us();
	batch.cost = want;
	outage_fallback_reserve(&batch, d_us, o);
	if (!o->allowed)
	{
		/* rule 6: the call alone, as without batches (nothing was written) */
		outage_fallback_attempt(args, o);
		return;
	}
	/* the call's row is the batch's: no ticket (its abort takes the row) */
	row_ts = o->entry_ts;
	o->entry_ts = -1;
	o->recorded_ts = -1;

	if (!xact_callbacks_set)
	{
		RegisterXactCallback(pending_xact_callback, NULL);
		RegisterSubXactCallback(pending_subxact_callback, NULL);
		xact_callbacks_set = true;
	}
	local_batch_key(args, &k);
	if (k.loglen + k.ledgerlen <= BATCH_KEY_BYTES)
	{
		LWLockAcquire(shared->lock, LW_EXCLUSIVE);
		free_slot = local_batch_keep(args, &k, sent + d_us, want, o, MyDatabaseId,
									 SLOT_PENDING);
		if (free_slot >= 0)
		{
			BatchSlot  *s = &shared->slots[free_slot];

			s->score = row_ts;
			s->give_until = s->deadline + Max(GIVE_TIMES * d_us, GIVE_MIN_US);
			my_pending[n_my_pending].slot = free_slot;
			my_pending[n_my_pending].gen = shared->slots[free_slot].gen;
			my_pending[n_my_pending].subid = GetCurrentSubTransactionId();
			n_my_pending++;
		}
		LWLockRelease(shared->lock);
	}
	/* with nowhere to keep it, the rest stays counted, unused (rule 6) */
	pfree(k.log);
	pfree(k.ledger);
}

/*
 * Give the rest of an ended fallback batch of args' key back, in this
 * call's transaction (see the header), if local_batch_take took one out. An error on the way is this
 * function's alone: the units stay counted and the call goes on, unless it
 * is a cancel or a shutdown, which goes on up.
 */
void
local_batch_give_back_fallback(const RlArgs *args)
{
	FallbackRest rest = local_batch_fallback_rest;
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	RlArgs		key = *args;
	bool		carried;
	volatile bool given = false;

	if (rest.left == 0)
		return;
	local_batch_fallback_rest.left = 0;
	if (RecoveryInProgress() || !IsTransactionState())
		return;
	key.algorithm = ALGO_SLIDING_LOG;
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		given = fallback_refund_part(&key, rest.ts, rest.taken, rest.left, key.win_us,
									 &carried);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
	}
	PG_CATCH();
	{
		ErrorData  *e;

		MemoryContextSwitchTo(cxt);
		e = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		if (e->sqlerrcode == ERRCODE_QUERY_CANCELED || e->sqlerrcode == ERRCODE_ADMIN_SHUTDOWN)
			ReThrowError(e);
		ereport(DEBUG1,
				(errmsg_internal("slidewin: an ended local batch's rest was not given back: %s",
								 e->message)));
		FreeErrorData(e);
	}
	PG_END_TRY();
	/* units given back: a denial the deny cache keeps may be out of date */
	if (given)
		deny_cache_invalidate(deny_cache_key_hash(args->key, args->keylen));
}
