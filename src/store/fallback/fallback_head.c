/*-------------------------------------------------------------------------
 *
 * fallback_head.c
 *		The heads of the fallback store's sliding logs: reading and claiming
 *		a key's head, and sweeping expired heads at commit.
 *
 * This file must not read or write the log's rows, decide a call, or talk
 * to Redis.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "common/pg_prng.h"
#include "replication/syncrep.h"
#include "replication/walsender.h"
#include "storage/bufmgr.h"

#include "compat.h"
#include "fallback_head.h"

/* ---------------------------------------------------------------------
 * Heads: one row (key, log, ts, total, expires) per key of each log in
 * rl_fallback_head, holding the key's newest admission (its time and
 * running total) and an expiry no row of the key outlives, plus a grace.
 *
 * An admission is decided without any lock and then claimed by updating
 * the head version it was decided on, in place (HOT: the only index is on
 * (key, log), which never changes). An update blocks on an in-progress
 * one, as any UPDATE does, and reports whether the version it targets is
 * still the latest: if another admission committed in between, its row is
 * not in the decision, and the call decides again from what is now
 * committed. So a key's admissions are still serialised, but the lock is
 * the row lock of the head, taken after the reads instead of before them,
 * and a call that the committed state already denies takes no lock at all
 * (in-progress admissions can only add units to that state; if they abort,
 * the state it read is the one that stands).
 *
 * A key without a head (never called twice within its window, or whose
 * head a sweep or rl_reset deleted) is written under the key's lock, held
 * until commit, with the newest row read from the log itself; the
 * admission that finds a row of the key still in the window creates the
 * head under that lock, so that two callers cannot both create one. So a
 * key called once per window never pays for a head.
 * ---------------------------------------------------------------------
 */

/*
 * The key's head in the log `kind`, as SnapshotSelf shows it: the latest
 * committed version, or this transaction's own. At most one is visible; if
 * a sweep aborts after deleting one that another head has since replaced,
 * the newer (greater total) is the key's.
 */
void
fallback_head_read(FbScan *h, int16 kind, FbHead *hd)
{
	IndexScanDesc scan = fallback_scan_begin_kind(h, kind);
	bool		isnull;

	memset(hd, 0, sizeof(FbHead));
	while (index_getnext_slot(scan, ForwardScanDirection, h->slot))
	{
		int64		total = DatumGetInt64(slot_getattr(h->slot, HD_ATT_TOTAL, &isnull));

		if (hd->found && total <= hd->total)
			continue;
		hd->found = true;
		hd->tid = h->slot->tts_tid;
		hd->ts = DatumGetInt64(slot_getattr(h->slot, HD_ATT_TS, &isnull));
		hd->total = total;
		hd->expires = DatumGetInt64(slot_getattr(h->slot, HD_ATT_EXPIRES, &isnull));
	}
	index_endscan(scan);
}

/*
 * Write the key's head: a new row if old is not found (the caller holds the
 * key's lock), else an update of that version. Returns TM_Ok, or what
 * stopped the update: TM_Updated or TM_Deleted when another transaction
 * committed a change to that version first, and the caller reads again.
 */
TM_Result
fallback_head_write(FbScan *h, int16 kind, const FbHead *old, int64 ts, int64 total, int64 expires)
{
	Datum		values[HD_NATTS];
	bool		nulls[HD_NATTS] = {false};
	HeapTuple	tup;
	Datum		ivalues[2];
	bool		inulls[2] = {false, false};

	/* never earlier than before */
	expires = (expires < PG_INT64_MAX - HEAD_GRACE_US) ? expires + HEAD_GRACE_US : PG_INT64_MAX;
	if (old->found && old->expires > expires)
		expires = old->expires;
	values[HD_ATT_KEY - 1] = PointerGetDatum(h->key);
	values[HD_ATT_LOG - 1] = Int16GetDatum(kind);
	values[HD_ATT_TS - 1] = Int64GetDatum(ts);
	values[HD_ATT_TOTAL - 1] = Int64GetDatum(total);
	values[HD_ATT_EXPIRES - 1] = Int64GetDatum(expires);
	tup = heap_form_tuple(RelationGetDescr(h->rel), values, nulls);
	if (old->found)
	{
		TM_FailureData tmfd;
		LockTupleMode lockmode;
		TM_Result	r;

		r = slidewin_heap_update(h->rel, (ItemPointer) &old->tid, tup, GetCurrentCommandId(true),
								 true, &tmfd, &lockmode);
		if (r == TM_SelfModified)
			elog(ERROR, "slidewin fallback head was changed twice in one command");
		if (r != TM_Ok || HeapTupleIsHeapOnly(tup))
		{
			heap_freetuple(tup);
			return r;
		}
	}
	else
		simple_heap_insert(h->rel, tup);
	ivalues[0] = values[HD_ATT_KEY - 1];
	ivalues[1] = values[HD_ATT_LOG - 1];
	index_insert(h->idx[IDX_KEY_TS], ivalues, inulls, &tup->t_self, h->rel,
				 UNIQUE_CHECK_NO, false, fallback_index_info(h, IDX_KEY_TS));
	heap_freetuple(tup);
	return TM_Ok;
}

/*
 * Heads a sweep found expired in this transaction, each with the cutoff it
 * was found under. They are deleted only just before the transaction
 * commits (delete_pending_heads), not when found: a head deleted by a
 * transaction still in progress makes the next admission on its key wait
 * for that transaction's end (its claim updates the head, and an update
 * waits for the deleter), and the sweeping transaction is any caller's:
 * an rl_wait that is denied for seconds, a session idle in its transaction,
 * a prepared transaction. Deleted at commit, the head stays deleted but
 * uncommitted only for the commit itself. A transaction that is prepared
 * or aborts forgets them, and later sweeps find them again.
 */
#define PENDING_HEADS_MAX 64

typedef struct PendingHead
{
	ItemPointerData tid;
	int64		cutoff;
} PendingHead;

static PendingHead pending_heads[PENDING_HEADS_MAX];
static int	n_pending_heads = 0;

static void
pending_head_add(ItemPointer tid, int64 cutoff)
{
	for (int i = 0; i < n_pending_heads; i++)
		if (ItemPointerEquals(&pending_heads[i].tid, tid))
			return;
	if (n_pending_heads < PENDING_HEADS_MAX)
	{
		pending_heads[n_pending_heads].tid = *tid;
		pending_heads[n_pending_heads].cutoff = cutoff;
		n_pending_heads++;
	}
}

/*
 * At PRE_COMMIT: delete the heads found expired, each if it is still the
 * version found (a claim since has replaced it, and a claim in progress
 * makes the delete fail without waiting) and still expired. It is skipped
 * (the heads are found again later) when the relations changed under us,
 * and when this commit may wait for a synchronous standby, as one that
 * wrote WAL does: the heads would stay deleted-but-uncommitted for as long.
 * Never raises in the ordinary case: every check that could fail is made
 * before the table is touched.
 */
static void
delete_pending_heads(void)
{
	int			n = n_pending_heads;
	Relation	rel;
	BlockNumber nblocks;
	TupleDesc	desc;

	n_pending_heads = 0;
	if (n == 0 || !fallback_oids_valid || RecoveryInProgress())
		return;
	if (XactLastRecEnd != 0 && SyncRepRequested() &&
		SyncRepStandbyNames != NULL && SyncRepStandbyNames[0] != '\0')
		return;
	rel = try_table_open(fallback_tables[TBL_HEAD].relid, RowExclusiveLock);
	if (rel == NULL)
		return;
	desc = RelationGetDescr(rel);
	nblocks = RelationGetNumberOfBlocks(rel);
	if (desc->natts == HD_NATTS)
	{
		for (int i = 0; i < n; i++)
		{
			HeapTupleData tup;
			Buffer		buf;
			bool		isnull;
			bool		expired;
			TM_FailureData tmfd;

			if (ItemPointerGetBlockNumber(&pending_heads[i].tid) >= nblocks)
				continue;
			tup.t_self = pending_heads[i].tid;
			if (!heap_fetch(rel, SnapshotSelf, &tup, &buf, false))
				continue;
			expired = DatumGetInt64(heap_getattr(&tup, HD_ATT_EXPIRES, desc, &isnull)) <
				pending_heads[i].cutoff;
			ReleaseBuffer(buf);
			if (expired)
				(void) slidewin_heap_delete(rel, &pending_heads[i].tid, GetCurrentCommandId(true),
										   false, &tmfd);
		}
	}
	table_close(rel, RowExclusiveLock);
}

void
fallback_heads_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_PRE_COMMIT)
		delete_pending_heads();
	else if (event != XACT_EVENT_PARALLEL_PRE_COMMIT)
		n_pending_heads = 0;	/* prepared, aborted, or done */
}

/*
 * Heads have no index on their expiry, so that no update of one changes an
 * indexed column and every update can be HOT. They are swept by walking the
 * table's pages instead: each sweep looks at `npages` pages from where this
 * backend's last one stopped (a random page at first, so that short-lived
 * connections do not all start at the same one) and marks the heads there
 * whose expiry is before `cutoff` for deletion at commit (see above).
 * Returns true unless this backend has now seen every page of the table in
 * a row without an expired head.
 */
static BlockNumber head_sweep_block = InvalidBlockNumber;
static BlockNumber head_clean_pages = 0;

bool
fallback_sweep_heads(FbScan *h, int64 cutoff, int npages)
{
	BlockNumber nblocks = RelationGetNumberOfBlocks(h->rel);
	TupleDesc	desc = RelationGetDescr(h->rel);

	if (nblocks == 0)
		return false;
	if (head_sweep_block == InvalidBlockNumber)
		head_sweep_block = pg_prng_uint32(&pg_global_prng_state) % nblocks;
	for (int p = 0; p < npages; p++)
	{
		ItemPointerData expired[MaxHeapTuplesPerPage];
		int			nexpired = 0;
		Buffer		buf;
		Page		page;
		OffsetNumber maxoff;

		if (head_sweep_block >= nblocks)
			head_sweep_block = 0;
		buf = ReadBufferExtended(h->rel, MAIN_FORKNUM, head_sweep_block, RBM_NORMAL, NULL);
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		maxoff = PageGetMaxOffsetNumber(page);
		for (OffsetNumber off = FirstOffsetNumber; off <= maxoff; off = OffsetNumberNext(off))
		{
			ItemId		lp = PageGetItemId(page, off);
			HeapTupleData tup;
			bool		isnull;

			if (!ItemIdIsNormal(lp))
				continue;
			tup.t_data = (HeapTupleHeader) PageGetItem(page, lp);
			tup.t_len = ItemIdGetLength(lp);
			tup.t_tableOid = RelationGetRelid(h->rel);
			ItemPointerSet(&tup.t_self, head_sweep_block, off);
			if (HeapTupleSatisfiesVisibility(&tup, SnapshotSelf, buf) &&
				DatumGetInt64(heap_getattr(&tup, HD_ATT_EXPIRES, desc, &isnull)) < cutoff)
				expired[nexpired++] = tup.t_self;
		}
		LockBuffer(buf, BUFFER_LOCK_UNLOCK);
		ReleaseBuffer(buf);
		for (int i = 0; i < nexpired; i++)
			pending_head_add(&expired[i], cutoff);
		head_clean_pages = nexpired > 0 ? 0 : head_clean_pages + 1;
		head_sweep_block++;
	}
	return head_clean_pages < nblocks;
}
