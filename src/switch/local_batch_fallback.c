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
 * another batch took meanwhile. Nothing is given back: a fallback batch's
 * slot is freed at its deadline by whichever process sees it first.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "storage/lwlock.h"

#include "carry.h"
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
