/*-------------------------------------------------------------------------
 *
 * lease_fallback.c
 *		The fallback store's concurrency slots: held in PostgreSQL's lock
 *		manager when Redis cannot answer and the call's policy is fallback.
 *
 * The fallback store holds slots in PostgreSQL's lock manager: slot i of a key
 * is a lock on (hash of the key, i) in a lock class of our own, with a
 * "userlock" tag in the default lock method, so that no SQL function
 * (pg_advisory_unlock_all) can free it, and no database in the tag, so that
 * a server's databases share a key's slots as they share its Redis key. A
 * call admits by counting the key's holders against its own max once it
 * holds a slot. It is taken as a
 * session lock, so that rl_release can give it back at any point of the
 * transaction (a transaction lock can only be released by the resource
 * owner that took it, which the statement that took it no longer is), and
 * released by this file's transaction callbacks at COMMIT, at ROLLBACK and
 * at the abort of the subtransaction that took it (PostgreSQL's abort
 * would release the default lock method's session locks too, after us);
 * the backend's exit releases any left, and a crash restarts the lock
 * table. It is exact
 * within one server; across a switch between Redis and the fallback, the
 * two sets of holders add up (at most 2 x max), as the rate limits' two
 * stores do. Waiting there polls every 10 ms.
 *
 * What a slot is, and how Redis holds them, is said at the head of lease.c,
 * which calls this file; this file never calls it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/hashfn.h"
#include "common/pg_prng.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lock.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "lease_fallback.h"
#include "settings.h"
#include "stats.h"

/* The lock class of fallback slots (field 4 of their lock tags). */
#define SLOT_LOCK_CLASS 0x534C
/* How often a fallback wait tries again. */
#define FALLBACK_POLL_MS 10

/* Fallback slots this backend holds (session locks), oldest first. */
typedef struct FallbackSlot
{
	uint32		hash;
	uint32		slot;
	SubTransactionId subid;
} FallbackSlot;

static FallbackSlot *fb_slots = NULL;
static int	n_fb_slots = 0;
static int	max_fb_slots = 0;

static bool exit_registered = false;

static void lease_at_exit(int code, Datum arg);

/* ---------------------------------------------------------------------
 * The fallback: slots in the lock manager
 * ---------------------------------------------------------------------
 */

uint32
lease_slot_hash(const RlArgs *key)
{
	StringInfoData buf;
	uint32		h;

	initStringInfo(&buf);
	appendStringInfoString(&buf, slidewin_key_prefix ? slidewin_key_prefix : "");
	appendBinaryStringInfo(&buf, key->key, key->keylen);
	h = hash_bytes((const unsigned char *) buf.data, buf.len);
	pfree(buf.data);
	return h;
}

/*
 * Slot `slot` of the key whose hash is `hash`. Not an advisory lock: those
 * are the users' (pg_advisory_unlock_all() would free a slot its caller
 * does not own). A "userlock" tag in the default lock method, which no
 * SQL function takes or releases. No database in it: the slots of a key
 * are shared by every database of the server, as the key is in Redis.
 */
static void
slot_tag(LOCKTAG *tag, uint32 hash, uint32 slot)
{
	tag->locktag_field1 = 0;
	tag->locktag_field2 = hash;
	tag->locktag_field3 = slot;
	tag->locktag_field4 = SLOT_LOCK_CLASS;
	tag->locktag_type = LOCKTAG_USERLOCK;
	tag->locktag_lockmethodid = DEFAULT_LOCKMETHOD;
}

/* This backend's fallback slot of the key: its index in fb_slots, or -1. */
int
lease_fallback_mine(uint32 hash)
{
	for (int i = 0; i < n_fb_slots; i++)
		if (fb_slots[i].hash == hash)
			return i;
	return -1;
}

static void
fallback_unlock(int i)
{
	LOCKTAG		tag;

	slot_tag(&tag, fb_slots[i].hash, fb_slots[i].slot);
	(void) LockRelease(&tag, ExclusiveLock, true);
	stats_slot_released(true);
	memmove(fb_slots + i, fb_slots + i + 1, (n_fb_slots - i - 1) * sizeof(FallbackSlot));
	n_fb_slots--;
}

/* The key's slots held now, in every database, from the lock table. */
int64
lease_fallback_holders(uint32 hash)
{
	LockData   *ld = GetLockStatusData();
	int64		holders = 0;

	for (int i = 0; i < ld->nelements; i++)
	{
		LockInstanceData *li = &ld->locks[i];

		if (li->locktag.locktag_type != LOCKTAG_USERLOCK ||
			li->locktag.locktag_lockmethodid != DEFAULT_LOCKMETHOD ||
			li->locktag.locktag_field1 != 0 ||
			li->locktag.locktag_field2 != hash ||
			li->locktag.locktag_field4 != SLOT_LOCK_CLASS ||
			li->holdMask == 0)
			continue;
		holders++;
	}
	return holders;
}

/*
 * One try: a free slot, starting at a random one so that tries stay few.
 * Slot numbers only keep holders apart; what admits is the count, as in
 * Redis: a call whose max is below another holder's may find slot 0 free
 * while max holders hold others, so once it holds a slot it counts the
 * key's holders, and gives the slot back if they are more than its max.
 * Two such calls racing may both give back (a denial, the safe direction).
 * *holders is the key's holders afterwards.
 */
static bool
fallback_try(uint32 hash, int64 max, int64 *holders)
{
	uint32		start = (uint32) (pg_prng_uint64(&pg_global_prng_state) % (uint64) max);

	if (n_fb_slots == max_fb_slots)
	{
		int			n = Max(8, max_fb_slots * 2);

		fb_slots = fb_slots ? repalloc(fb_slots, n * sizeof(FallbackSlot)) :
			MemoryContextAlloc(TopMemoryContext, n * sizeof(FallbackSlot));
		max_fb_slots = n;
	}
	for (int64 i = 0; i < max; i++)
	{
		LOCKTAG		tag;
		uint32		slot = (uint32) ((start + i) % max);

		slot_tag(&tag, hash, slot);
		if (LockAcquire(&tag, ExclusiveLock, true, true) != LOCKACQUIRE_NOT_AVAIL)
		{
			*holders = lease_fallback_holders(hash);
			if (*holders > max)
			{
				(void) LockRelease(&tag, ExclusiveLock, true);
				(*holders)--;
				return false;
			}
			fb_slots[n_fb_slots].hash = hash;
			fb_slots[n_fb_slots].slot = slot;
			fb_slots[n_fb_slots].subid = GetCurrentSubTransactionId();
			n_fb_slots++;
			if (!exit_registered)
			{
				on_shmem_exit(lease_at_exit, (Datum) 0);
				exit_registered = true;
			}
			return true;
		}
	}
	*holders = -1;
	return false;
}

void
lease_fallback_acquire(const LeaseArgs *a, TimestampTz deadline, LeaseResult *res)
{
	uint32		hash = lease_slot_hash(&a->key);

	res->store = "fallback";
	res->known = true;
	if (lease_fallback_mine(hash) >= 0)
	{
		res->acquired = true;
		res->holders = lease_fallback_holders(hash);
		return;
	}
	for (;;)
	{
		int64		holders;

		if (fallback_try(hash, a->max, &holders))
		{
			res->acquired = true;
			res->holders = holders;
			return;
		}
		if (GetCurrentTimestamp() >= deadline)
			break;
		res->waited = true;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 FALLBACK_POLL_MS, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	res->acquired = false;
	res->holders = lease_fallback_holders(hash);
	res->wait_us = 0;
}

bool
lease_fallback_release(const RlArgs *key)
{
	int			i = lease_fallback_mine(lease_slot_hash(key));

	if (i < 0)
		return false;
	fallback_unlock(i);
	return true;
}

/* ---------------------------------------------------------------------
 * Transaction callbacks: the fallback's session locks end with the
 * transaction, or with the subtransaction that took them.
 * ---------------------------------------------------------------------
 */

static void
lease_xact_callback(XactEvent event, void *arg)
{
	if (n_fb_slots == 0)
		return;
	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("cannot PREPARE a transaction that holds a slidewin concurrency slot"),
					 errhint("Release it with rl_release first, or commit without two-phase commit.")));
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			while (n_fb_slots > 0)
				fallback_unlock(n_fb_slots - 1);
			break;
		default:
			break;
	}
}

static void
lease_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg)
{
	for (int i = n_fb_slots - 1; i >= 0; i--)
	{
		if (fb_slots[i].subid != mySubid)
			continue;
		if (event == SUBXACT_EVENT_ABORT_SUB)
			fallback_unlock(i);
		else if (event == SUBXACT_EVENT_COMMIT_SUB)
			fb_slots[i].subid = parentSubid;
	}
}

/*
 * Backend exit: the transaction callbacks released every fallback slot
 * when the last transaction ended (an exit mid-transaction aborts it
 * first). A lock left by a path that missed them would outlive the slot's
 * bookkeeping, since the default lock method's session locks are released
 * at exit by nothing else; release it here.
 */
static void
lease_at_exit(int code, Datum arg)
{
	while (n_fb_slots > 0)
		fallback_unlock(n_fb_slots - 1);
}

void
lease_fallback_init(void)
{
	RegisterXactCallback(lease_xact_callback, NULL);
	RegisterSubXactCallback(lease_subxact_callback, NULL);
}
