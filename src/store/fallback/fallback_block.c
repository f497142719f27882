/*-------------------------------------------------------------------------
 *
 * fallback_block.c
 *		The fallback store's table of blocks: rl_fallback_block (key, until),
 *		one row per blocked key with the block's end in Unix microseconds on
 *		the fallback store's clock.
 *
 * rl_block writes a block here as well as in Redis, so that it still holds
 * while Redis cannot answer and this store decides; rl_unblock deletes it.
 * Rows of blocks that have ended are ignored by readers and deleted by later
 * rl_block and rl_unblock calls (a few dozen each), so the table holds the
 * live blocks and those ended since the last such call.
 *
 * Concurrency: writers of one key (rl_block, rl_unblock) hold a lock on it
 * until commit (an advisory-type tag of our own), read its rows, delete them
 * and insert the new one. Readers take no lock and read with SnapshotSelf,
 * as the rest of the fallback store does (see fallback.c): a block becomes
 * visible when its transaction commits, and a reader sees either the old row
 * or the new one. Deletions of ended rows never wait: a row another
 * transaction is deleting is left to it.
 *
 * Most calls need no look at the table: a backend keeps the latest end of
 * any block the table holds, read with the generation of the shared counter
 * below, and while that counter has not moved and that end has passed, no
 * key is blocked and the call reads nothing (an atomic read and a clock
 * reading). Every rl_block moves the counter after inserting its row, so a
 * backend that kept an end before the row existed reads again at its next
 * call. The end is the latest of every row the until index leads to,
 * committed or not (SnapshotAny): a row of a transaction still in progress,
 * or prepared and committed later by a backend without our callbacks,
 * already counts, and a deleted one counts until it is pruned, which only
 * makes a call look at its key in vain. Rows written into the table other
 * than by rl_block (by hand) are seen once the table's relcache entry is
 * invalidated or the backend starts again. Without shared_preload_libraries
 * there is no counter, and every call looks: one relation open, and while
 * the table has a page, one descent of the (key) index. A database whose
 * extension predates the table (1.6 and before, not yet updated) has no
 * blocks.
 *
 * Like fallback.c, the table is reached through heap and index calls, not
 * SQL, so no role needs a privilege on it. This file never talks to Redis.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/relscan.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/pg_collation_d.h"
#include "common/hashfn.h"
#include "common/int.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "compat.h"
#include "fallback_block.h"
#include "fallback_table.h"
#include "shmem_parts.h"

/* Our lock tags: not fallback_table.c's (0x5357), nor user advisory locks (1, 2). */
#define BLOCK_LOCK_CLASS 0x5342

#define BK_ATT_KEY 1
#define BK_ATT_UNTIL 2
#define BK_NATTS 2

/* Rows of ended blocks one rl_block or rl_unblock deletes, at most. */
#define BLOCK_SWEEP 32

/*
 * The table and its indexes, looked up once and kept until a relcache
 * invalidation names one of them; "known missing" is kept too, and forgotten
 * at any invalidation, so that an update that creates the table is seen.
 */
static bool oids_known = false;
static Oid	block_rel = InvalidOid;
static Oid	block_key_idx = InvalidOid;
static Oid	block_until_idx = InvalidOid;

/* Moved by every rl_block, after its row is in the table and its indexes. */
typedef struct BlockShared
{
	pg_atomic_uint64 generation;
} BlockShared;

static BlockShared *block_shared = NULL;

/*
 * This backend's knowledge (see the header): at generation ends_gen, no row
 * of the table ended later than latest_end (PG_INT64_MIN: the table had no
 * row). Kept only with block_shared.
 */
static bool ends_known = false;
static uint64 ends_gen = 0;
static int64 latest_end = PG_INT64_MIN;

static Size
shmem_size(void)
{
	return sizeof(BlockShared);
}

static void
shmem_attach(void *p, bool found)
{
	block_shared = p;
	if (!found)
		pg_atomic_init_u64(&block_shared->generation, 1);
}

static const ShmemPart shmem_part = {"slidewin blocks", shmem_size, NULL, shmem_attach};

static void
invalidate_oids(Datum arg, Oid relid)
{
	if (relid == InvalidOid || !OidIsValid(block_rel) || relid == block_rel ||
		relid == block_key_idx || relid == block_until_idx)
	{
		oids_known = false;
		ends_known = false;
	}
}

void
fallback_block_init(void)
{
	CacheRegisterRelcacheCallback(invalidate_oids, (Datum) 0);
	slidewin_shmem_register(&shmem_part);
}

/* Whether the table and its indexes exist (after the lookup, cached). */
static bool
lookup_oids(void)
{
	if (!oids_known)
	{
		block_rel = fallback_relid_if_any("rl_fallback_block");
		block_key_idx = fallback_relid_if_any("rl_fallback_block_key");
		block_until_idx = fallback_relid_if_any("rl_fallback_block_until");
		if (!OidIsValid(block_key_idx) || !OidIsValid(block_until_idx))
			block_rel = InvalidOid;
		oids_known = true;
	}
	return OidIsValid(block_rel);
}

/* Scan the rows of one key with SnapshotSelf. */
static IndexScanDesc
scan_key(Relation rel, Relation idx, text *key)
{
	ScanKeyData sk;
	IndexScanDesc scan;

	ScanKeyEntryInitialize(&sk, 0, 1, BTEqualStrategyNumber, InvalidOid,
						   C_COLLATION_OID, F_TEXTEQ, PointerGetDatum(key));
	scan = slidewin_index_beginscan(rel, idx, SnapshotSelf, 1, 0);
	index_rescan(scan, &sk, 1, NULL, 0);
	return scan;
}

static int64
slot_until(TupleTableSlot *slot)
{
	bool		isnull;

	return DatumGetInt64(slot_getattr(slot, BK_ATT_UNTIL, &isnull));
}

/*
 * The latest end of any row the until index leads to, whether its
 * transaction committed, is in progress or aborted (SnapshotAny): one
 * backward descent. PG_INT64_MIN if there is none.
 */
static int64
read_latest_end(Relation rel)
{
	Relation	idx = index_open(block_until_idx, AccessShareLock);
	TupleTableSlot *slot = table_slot_create(rel, NULL);
	IndexScanDesc scan = slidewin_index_beginscan(rel, idx, SnapshotAny, 0, 0);
	int64		end = PG_INT64_MIN;

	index_rescan(scan, NULL, 0, NULL, 0);
	if (index_getnext_slot(scan, BackwardScanDirection, slot))
		end = slot_until(slot);
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	index_close(idx, AccessShareLock);
	return end;
}

int64
fallback_block_left(const RlArgs *args)
{
	Relation	rel;
	Relation	idx;
	TupleTableSlot *slot;
	IndexScanDesc scan;
	int64		until = PG_INT64_MIN;
	int64		now;
	uint64		gen = 0;

	if (!lookup_oids())
		return 0;
	if (block_shared != NULL)
	{
		/* read before the table, so that a later rl_block moves it past us */
		gen = pg_atomic_read_u64(&block_shared->generation);
		pg_read_barrier();
		if (ends_known && gen == ends_gen && fallback_clock() >= latest_end)
			return 0;
	}
	rel = table_open(block_rel, AccessShareLock);
	/* a table that never held a block has no page: no index to descend */
	if (RelationGetNumberOfBlocks(rel) == 0)
	{
		table_close(rel, AccessShareLock);
		if (block_shared != NULL)
		{
			ends_known = true;
			ends_gen = gen;
			latest_end = PG_INT64_MIN;
		}
		return 0;
	}
	if (block_shared != NULL && !(ends_known && gen == ends_gen))
	{
		latest_end = read_latest_end(rel);
		ends_gen = gen;
		ends_known = true;
		if (fallback_clock() >= latest_end)
		{
			table_close(rel, AccessShareLock);
			return 0;
		}
	}
	idx = index_open(block_key_idx, AccessShareLock);
	slot = table_slot_create(rel, NULL);
	scan = scan_key(rel, idx, fallback_stored_key(args));
	while (index_getnext_slot(scan, ForwardScanDirection, slot))
		until = Max(until, slot_until(slot));
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	index_close(idx, AccessShareLock);
	table_close(rel, AccessShareLock);

	now = fallback_clock();
	return until > now ? until - now : 0;
}

void
fallback_block_outcome(int64 block_us, RlOutcome *o)
{
	o->allowed = false;
	o->blocked = true;
	o->remaining = 0;
	o->retry_us = Max(o->retry_us, block_us);
	/* no unit comes back before the block ends */
	o->next_us = Max(o->next_us, fallback_clock() + block_us);
}

/* The tables a writer opens, with the key's lock held until commit. */
typedef struct BlockWrite
{
	Relation	rel;
	Relation	key_idx;
	Relation	until_idx;
	TupleTableSlot *slot;
	text	   *key;
	int64		now;
} BlockWrite;

static void
write_begin(BlockWrite *w, const RlArgs *args)
{
	LOCKTAG		tag;
	uint64		h;

	if (!lookup_oids())
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("slidewin's table rl_fallback_block is missing"),
				 errhint("Update the extension with ALTER EXTENSION slidewin UPDATE, or recreate it.")));
	w->key = fallback_stored_key(args);
	h = hash_bytes_extended((const unsigned char *) VARDATA_ANY(w->key),
							VARSIZE_ANY_EXHDR(w->key), 0);
	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) (h >> 32), (uint32) h, BLOCK_LOCK_CLASS);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);
	w->rel = table_open(block_rel, RowExclusiveLock);
	if (RelationGetDescr(w->rel)->natts != BK_NATTS)
		elog(ERROR, "rl_fallback_block has %d columns, not %d",
			 RelationGetDescr(w->rel)->natts, BK_NATTS);
	w->key_idx = index_open(block_key_idx, RowExclusiveLock);
	w->until_idx = index_open(block_until_idx, RowExclusiveLock);
	w->slot = table_slot_create(w->rel, NULL);
	/* read after the lock: every earlier writer of the key has committed */
	w->now = fallback_clock();
}

/* Delete a row unless another transaction is deleting it; never waits. */
static void
try_delete(BlockWrite *w, ItemPointer tid)
{
	TM_FailureData tmfd;

	(void) slidewin_heap_delete(w->rel, tid, GetCurrentCommandId(true), false, &tmfd);
}

/* Delete the key's rows; the latest end among them (PG_INT64_MIN: none). */
static int64
delete_key(BlockWrite *w)
{
	IndexScanDesc scan = scan_key(w->rel, w->key_idx, w->key);
	int64		until = PG_INT64_MIN;

	while (index_getnext_slot(scan, ForwardScanDirection, w->slot))
	{
		until = Max(until, slot_until(w->slot));
		try_delete(w, &w->slot->tts_tid);
	}
	index_endscan(scan);
	return until;
}

/* Delete up to BLOCK_SWEEP rows of any key whose block has ended. */
static void
sweep(BlockWrite *w)
{
	ScanKeyData sk;
	IndexScanDesc scan;
	int			n = 0;

	ScanKeyEntryInitialize(&sk, 0, 1, BTLessEqualStrategyNumber, InvalidOid,
						   InvalidOid, F_INT8LE, Int64GetDatum(w->now));
	scan = slidewin_index_beginscan(w->rel, w->until_idx, SnapshotSelf, 1, 0);
	index_rescan(scan, &sk, 1, NULL, 0);
	while (n++ < BLOCK_SWEEP && index_getnext_slot(scan, ForwardScanDirection, w->slot))
		try_delete(w, &w->slot->tts_tid);
	index_endscan(scan);
}

static void
write_end(BlockWrite *w)
{
	sweep(w);
	CommandCounterIncrement();
	ExecDropSingleTupleTableSlot(w->slot);
	index_close(w->until_idx, RowExclusiveLock);
	index_close(w->key_idx, RowExclusiveLock);
	table_close(w->rel, RowExclusiveLock);
}

int64
fallback_block_set(const RlArgs *args, int64 duration_us, int64 at_least_us)
{
	BlockWrite	w;
	int64		until;
	int64		old_until;
	Datum		values[BK_NATTS];
	bool		nulls[BK_NATTS] = {false, false};
	HeapTuple	tup;
	IndexInfo  *info;

	write_begin(&w, args);
	if (pg_add_s64_overflow(w.now, duration_us, &until))
		until = PG_INT64_MAX;
	until = Max(until, at_least_us);
	/* a block extends, never shortens */
	old_until = delete_key(&w);
	until = Max(until, old_until);

	values[BK_ATT_KEY - 1] = PointerGetDatum(w.key);
	values[BK_ATT_UNTIL - 1] = Int64GetDatum(until);
	tup = heap_form_tuple(RelationGetDescr(w.rel), values, nulls);
	simple_heap_insert(w.rel, tup);
	info = BuildIndexInfo(w.key_idx);
	index_insert(w.key_idx, &values[BK_ATT_KEY - 1], &nulls[BK_ATT_KEY - 1], &tup->t_self,
				 w.rel, UNIQUE_CHECK_NO, false, info);
	info = BuildIndexInfo(w.until_idx);
	index_insert(w.until_idx, &values[BK_ATT_UNTIL - 1], &nulls[BK_ATT_UNTIL - 1], &tup->t_self,
				 w.rel, UNIQUE_CHECK_NO, false, info);
	heap_freetuple(tup);
	/* after the row: every backend that read the table before it looks again */
	if (block_shared != NULL)
		pg_atomic_fetch_add_u64(&block_shared->generation, 1);
	write_end(&w);
	return until;
}

bool
fallback_block_lift(const RlArgs *args)
{
	BlockWrite	w;
	bool		lifted;

	write_begin(&w, args);
	lifted = delete_key(&w) > w.now;
	write_end(&w);
	return lifted;
}
