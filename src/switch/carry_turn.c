/*-------------------------------------------------------------------------
 *
 * carry_turn.c
 *		Carriers of one key take turns: what and why in carry_turn.h; the
 *		carry itself is carry.c's.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/spin.h"

#include "carry_turn.h"
#include "fallback.h"
#include "outage_int.h"
#include "settings.h"

static OutageSlot *
carry_record_slot(const RlArgs *args, uint64 *kh)
{
	if (!outage_seeds_active())
		return NULL;
	*kh = outage_keyhash(args);
	return &outage_shared->slots[*kh % slidewin_outage_keys];
}

/* Whether the last complete carry of the key began at this epoch. */
static bool
carry_done_at(const RlArgs *args, uint64 epoch)
{
	uint64		kh;
	OutageSlot *slot = carry_record_slot(args, &kh);
	bool		done;

	if (slot == NULL)
		return false;
	SpinLockAcquire(&slot->mutex);
	done = slot->carry_keyhash == kh && slot->carry_db == MyDatabaseId &&
		slot->carry_algo == (int) args->algorithm && slot->carry_epoch == epoch;
	SpinLockRelease(&slot->mutex);
	return done;
}

static void
carry_done_record(const RlArgs *args, uint64 epoch)
{
	uint64		kh;
	OutageSlot *slot = carry_record_slot(args, &kh);

	if (slot == NULL)
		return;
	SpinLockAcquire(&slot->mutex);
	slot->carry_keyhash = kh;
	slot->carry_db = MyDatabaseId;
	slot->carry_algo = (int) args->algorithm;
	slot->carry_epoch = epoch;
	SpinLockRelease(&slot->mutex);
}


/*
 * Take the key's turn, waiting at most wait_ms. False when the carry has
 * nothing to do: the last complete carry of the key began at the epoch read
 * here, and sent everything.
 */
bool
carry_turn_take(CarryTurn *t, const RlArgs *key, int wait_ms)
{
	t->locked = fallback_try_lock_carry(key, &t->tag, wait_ms);
	if (t->locked && carry_done_at(key, t->epoch))
	{
		fallback_unlock_key(&t->tag);
		t->locked = false;
		return false;
	}
	return true;
}

void
carry_turn_end(CarryTurn *t, const RlArgs *key, bool sent_all)
{
	if (!t->locked)
		return;
	if (sent_all)
		carry_done_record(key, t->epoch);
	fallback_unlock_key(&t->tag);
	t->locked = false;
}
