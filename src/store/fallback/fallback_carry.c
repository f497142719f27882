/*-------------------------------------------------------------------------
 *
 * fallback_carry.c
 *		The fallback store's admissions Redis has not learned of yet:
 *		rl_fallback_carry (key, plen, ts, cost, expires), one row per
 *		sliding-log admission of the fallback store, written with it.
 *
 * The switch (carry.c) carries the rows into Redis once it answers again, each named by
 * this server, this database and the row's time, and deletes them when
 * Redis has recorded them. Rows are written and deleted in the caller's
 * transaction: an admission that rolls back takes its row with it, and a
 * carry whose transaction rolls back leaves the rows to be sent again, which
 * Redis recognises by their names. Rows whose window has ended are never
 * sent: the next carry that passes them deletes them, and so do sweeps of a
 * page at a time, also while Redis is away (sweep_pages). The table is indexed
 * on (key, ts) only (1.13 dropped the index on expires, which every
 * admission paid for): a carry that looks for a key to carry walks its
 * prefix's keys in key order, and sweeps a few heap pages for ended rows of
 * any prefix.
 *
 * key is the stored key (key_prefix, then the user key) and plen the
 * prefix's length, so that a row is carried only under the prefix it was
 * admitted under. Readers and writers take no lock of their own and read
 * with SnapshotSelf, as the rest of the fallback store does; two backends
 * carrying the same rows both send them (Redis records them once), and a
 * row another transaction is deleting is left to it.
 *
 * A database whose extension predates the table (1.7 and before, not yet
 * updated) carries nothing. This file never talks to Redis.
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
#include "access/xlog.h"
#include "catalog/index.h"
#include "catalog/pg_collation_d.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "compat.h"
#include "fallback_block.h"
#include "fallback_table.h"
#include "fallback_carry.h"
#include "settings.h"

#define CA_ATT_KEY 1
#define CA_ATT_PLEN 2
#define CA_ATT_ALGO 3
#define CA_ATT_TS 4
#define CA_ATT_COST 5
#define CA_ATT_LIM 6
#define CA_ATT_WIN 7
#define CA_ATT_EXPIRES 8
#define CA_NATTS 8

/*
 * Ended rows one collection deletes, rows of other prefixes it steps over,
 * and heap pages it sweeps for ended rows of any prefix.
 */
#define CARRY_SWEEP 32
#define CARRY_MAX_FOREIGN 64
#define CARRY_SWEEP_PAGES 4

/*
 * While Redis is away nothing carries, and every admission adds a row: a
 * backend sweeps one page for ended rows every CARRY_ADD_SWEEP_EVERY rows it
 * adds, and every twice as many (CARRY_ADD_SWEEP_MAX) while its sweeps find
 * nothing to delete, as in an outage shorter than the windows. A page holds
 * about 80 rows, so the sweep goes round the table faster than rows fill
 * it, and the table holds a small multiple of the rows whose windows are
 * still open (about 2.3 times, when live and ended pages alternate in long
 * runs), however long the outage; without it, one row per admission stayed
 * until Redis answered again.
 */
#define CARRY_ADD_SWEEP_EVERY 32
#define CARRY_ADD_SWEEP_MAX 64

static bool oids_known = false;
static Oid	carry_rel = InvalidOid;
static Oid	carry_key_idx = InvalidOid;
static Oid	carry_expires_idx = InvalidOid;	/* dropped in 1.13 */
static IndexInfo *key_info = NULL;
static IndexInfo *expires_info = NULL;

static void
invalidate_oids(Datum arg, Oid relid)
{
	if (relid == InvalidOid || !OidIsValid(carry_rel) || relid == carry_rel ||
		relid == carry_key_idx || relid == carry_expires_idx)
		oids_known = false;
}

void
fallback_carry_init(void)
{
	CacheRegisterRelcacheCallback(invalidate_oids, (Datum) 0);
}

static bool
lookup_oids(void)
{
	if (!oids_known)
	{
		carry_rel = fallback_relid_if_any("rl_fallback_carry");
		carry_key_idx = fallback_relid_if_any("rl_fallback_carry_key_ts");
		carry_expires_idx = fallback_relid_if_any("rl_fallback_carry_expires");
		if (!OidIsValid(carry_key_idx))
			carry_rel = InvalidOid;
		if (key_info)
			pfree(key_info);
		if (expires_info)
			pfree(expires_info);
		key_info = expires_info = NULL;
		oids_known = true;
	}
	return OidIsValid(carry_rel);
}

bool
fallback_carry_available(void)
{
	return lookup_oids();
}

typedef struct CarryRel
{
	Relation	rel;
	Relation	key_idx;
	Relation	expires_idx;	/* NULL unless the database is still at 1.12 */
	TupleTableSlot *slot;
	LOCKMODE	mode;
} CarryRel;

static void
carry_open(CarryRel *c, LOCKMODE mode)
{
	c->mode = mode;
	c->rel = table_open(carry_rel, mode);
	if (RelationGetDescr(c->rel)->natts != CA_NATTS)
		elog(ERROR, "rl_fallback_carry has %d columns, not %d",
			 RelationGetDescr(c->rel)->natts, CA_NATTS);
	c->key_idx = index_open(carry_key_idx, mode);
	c->expires_idx = OidIsValid(carry_expires_idx) ? index_open(carry_expires_idx, mode) : NULL;
	c->slot = table_slot_create(c->rel, NULL);
}

/* Locks kept until the transaction ends, as fallback_scan_close() keeps them. */
static void
carry_close(CarryRel *c)
{
	ExecDropSingleTupleTableSlot(c->slot);
	if (c->expires_idx)
		index_close(c->expires_idx, NoLock);
	index_close(c->key_idx, NoLock);
	table_close(c->rel, NoLock);
}

static int64
slot_int8(TupleTableSlot *slot, int attno)
{
	bool		isnull;

	return DatumGetInt64(slot_getattr(slot, attno, &isnull));
}

static int16
slot_algo(TupleTableSlot *slot)
{
	bool		isnull;

	return DatumGetInt16(slot_getattr(slot, CA_ATT_ALGO, &isnull));
}

/*
 * Delete a row unless another transaction is deleting it; never waits.
 * Whether this transaction deleted it.
 */
static bool
try_delete(CarryRel *c, ItemPointer tid)
{
	TM_FailureData tmfd;

	return slidewin_heap_delete(c->rel, tid, GetCurrentCommandId(true), false, &tmfd) == TM_Ok;
}

/*
 * The rows of key: all of them (ts < 0), the one of time ts, or (after)
 * those of times past ts.
 */
static IndexScanDesc
scan_key_ts(CarryRel *c, text *key, int64 ts, bool after)
{
	ScanKeyData sk[2];
	int			nkeys = 1;
	IndexScanDesc scan;

	ScanKeyEntryInitialize(&sk[0], 0, 1, BTEqualStrategyNumber, InvalidOid,
						   C_COLLATION_OID, F_TEXTEQ, PointerGetDatum(key));
	if (ts >= 0 && after)
		ScanKeyEntryInitialize(&sk[nkeys++], 0, 2, BTGreaterStrategyNumber, InvalidOid,
							   InvalidOid, F_INT8GT, Int64GetDatum(ts));
	else if (ts >= 0)
		ScanKeyEntryInitialize(&sk[nkeys++], 0, 2, BTEqualStrategyNumber, InvalidOid,
							   InvalidOid, F_INT8EQ, Int64GetDatum(ts));
	scan = slidewin_index_beginscan(c->rel, c->key_idx, SnapshotSelf, nkeys, 0);
	index_rescan(scan, sk, nkeys, NULL, 0);
	return scan;
}

static IndexScanDesc
scan_key(CarryRel *c, text *key, int64 ts)
{
	return scan_key_ts(c, key, ts, false);
}

/*
 * The rows of the keys from `from` on, in key order: the key column has the
 * "C" collation, so the keys that begin with a prefix lie together.
 */
static IndexScanDesc
scan_keys_from(CarryRel *c, text *from)
{
	ScanKeyData sk;
	int			nkeys = 0;
	IndexScanDesc scan;

	if (VARSIZE_ANY_EXHDR(from) > 0)
		ScanKeyEntryInitialize(&sk, 0, 1, BTGreaterEqualStrategyNumber, InvalidOid,
							   C_COLLATION_OID, F_TEXT_GE, PointerGetDatum(from));
	nkeys = VARSIZE_ANY_EXHDR(from) > 0 ? 1 : 0;
	scan = slidewin_index_beginscan(c->rel, c->key_idx, SnapshotSelf, nkeys, 0);
	index_rescan(scan, &sk, nkeys, NULL, 0);
	return scan;
}

static int	sweep_pages(CarryRel *r, int64 now, int npages);
static uint32 adds_since_sweep = 0;
static uint32 adds_per_sweep = CARRY_ADD_SWEEP_EVERY;

bool
fallback_carry_add(const RlArgs *args, int64 ts, int64 cost, int64 expires)
{
	CarryRel	c;
	Datum		values[CA_NATTS];
	bool		nulls[CA_NATTS] = {false};
	HeapTuple	tup;
	MemoryContext old;

	if (!slidewin_outage_exact || !lookup_oids())
		return false;
	carry_open(&c, RowExclusiveLock);

	/*
	 * A row's time names it in Redis, so it must be the only one of its key
	 * and algorithm: the logs' times are (each admission is 1 us after the
	 * key's newest at least); a counting algorithm's admissions are written
	 * under the key's lock, and one in the same microsecond as the key's
	 * newest row (a frozen test clock) is moved 1 us later.
	 */
	if (args->algorithm != ALGO_SLIDING_LOG)
	{
		IndexScanDesc scan = scan_key(&c, fallback_stored_key(args), -1);

		while (index_getnext_slot(scan, BackwardScanDirection, c.slot))
			if (slot_algo(c.slot) == (int16) args->algorithm)
			{
				ts = Max(ts, slot_int8(c.slot, CA_ATT_TS) + 1);
				break;
			}
		index_endscan(scan);
	}
	if (key_info == NULL)
	{
		old = MemoryContextSwitchTo(TopMemoryContext);
		key_info = BuildIndexInfo(c.key_idx);
		expires_info = c.expires_idx ? BuildIndexInfo(c.expires_idx) : NULL;
		MemoryContextSwitchTo(old);
	}
	values[CA_ATT_KEY - 1] = PointerGetDatum(fallback_stored_key(args));
	values[CA_ATT_PLEN - 1] = Int32GetDatum(slidewin_key_prefix ? (int32) strlen(slidewin_key_prefix) : 0);
	values[CA_ATT_ALGO - 1] = Int16GetDatum((int16) args->algorithm);
	values[CA_ATT_TS - 1] = Int64GetDatum(ts);
	values[CA_ATT_COST - 1] = Int64GetDatum(cost);
	values[CA_ATT_LIM - 1] = Int64GetDatum(args->lim);
	values[CA_ATT_WIN - 1] = Int64GetDatum(args->win_us);
	values[CA_ATT_EXPIRES - 1] = Int64GetDatum(expires);
	tup = heap_form_tuple(RelationGetDescr(c.rel), values, nulls);
	simple_heap_insert(c.rel, tup);
	{
		Datum		kv[2] = {values[CA_ATT_KEY - 1], values[CA_ATT_TS - 1]};
		bool		kn[2] = {false, false};

		index_insert(c.key_idx, kv, kn, &tup->t_self, c.rel, UNIQUE_CHECK_NO, false, key_info);
		/* a database not yet updated to 1.13 still has the index: keep it whole */
		if (c.expires_idx)
			index_insert(c.expires_idx, &values[CA_ATT_EXPIRES - 1], &nulls[CA_ATT_EXPIRES - 1],
						 &tup->t_self, c.rel, UNIQUE_CHECK_NO, false, expires_info);
	}
	heap_freetuple(tup);
	if (++adds_since_sweep >= adds_per_sweep)
	{
		adds_since_sweep = 0;
		if (sweep_pages(&c, fallback_clock(), 1) > 0)
			adds_per_sweep = CARRY_ADD_SWEEP_EVERY;
		else
			adds_per_sweep = CARRY_ADD_SWEEP_MAX;
		CommandCounterIncrement();
	}
	carry_close(&c);
	return true;
}

bool
fallback_carry_forget(const RlArgs *args, int64 ts)
{
	CarryRel	c;
	IndexScanDesc scan;
	bool		found = false;

	if (!lookup_oids())
		return false;
	carry_open(&c, RowExclusiveLock);
	scan = scan_key(&c, fallback_stored_key(args), ts);
	while (index_getnext_slot(scan, ForwardScanDirection, c.slot))
		if (ts < 0 || slot_algo(c.slot) == (int16) args->algorithm)
		{
			try_delete(&c, &c.slot->tts_tid);
			found = true;
		}
	index_endscan(scan);
	carry_close(&c);
	return found;
}

/* This server and database, as the start of every row's name in Redis. */
static const char *
origin(void)
{
	static char buf[64];

	snprintf(buf, sizeof(buf), "%llx.%x", (unsigned long long) GetSystemIdentifier(),
			 (unsigned int) MyDatabaseId);
	return buf;
}

bool
fallback_carry_name(const RlArgs *args, int64 ts, char *buf, size_t size)
{
	if (!slidewin_outage_exact || !lookup_oids())
		return false;
	snprintf(buf, size, "%s.%d.%llx", origin(), (int) args->algorithm,
			 (unsigned long long) ts);
	return true;
}

/*
 * Collect the live rows of key (a stored key) and algorithm into c;
 * deletes ended ones. A row is named by this server, this database, its
 * algorithm and its time (unique per key and algorithm here).
 */
static void
collect_key(CarryRel *r, text *key, int16 algo, int64 now, int max, int64 after,
			const ItemPointerData *skip, int nskip, FallbackCarry *c)
{
	IndexScanDesc scan = scan_key_ts(r, key, after, true);
	const char *from = origin();

	while (c->n < max && index_getnext_slot(scan, ForwardScanDirection, r->slot))
	{
		int64		ts,
					cost,
					lim,
					win,
					expires;
		bool		skipped = false;

		ts = slot_int8(r->slot, CA_ATT_TS);
		c->last_ts = ts;
		for (int i = 0; i < nskip && !skipped; i++)
			skipped = ItemPointerEquals(&r->slot->tts_tid, (ItemPointer) &skip[i]);
		if (skipped)
			continue;
		cost = slot_int8(r->slot, CA_ATT_COST);
		lim = slot_int8(r->slot, CA_ATT_LIM);
		win = slot_int8(r->slot, CA_ATT_WIN);
		expires = slot_int8(r->slot, CA_ATT_EXPIRES);
		if (expires <= now)
		{
			try_delete(r, &r->slot->tts_tid);
			continue;
		}
		if (slot_algo(r->slot) != algo)
			continue;
		/*
		 * A sliding log's row may be scored ahead of now (a local batch's,
		 * or one admitted after it): its age is then negative, and Redis
		 * scores it as far ahead of its own clock (log_import.lua).
		 */
		appendStringInfo(&c->entries, "%s.%d.%llx,%lld,%lld,%lld,%lld,%lld;", from, (int) algo,
						 (unsigned long long) ts,
						 (long long) (algo == ALGO_SLIDING_LOG ? now - ts : Max(now - ts, 0)),
						 (long long) cost, (long long) win, (long long) lim,
						 (long long) (expires - ts));
		c->tids[c->n++] = r->slot->tts_tid;
	}
	index_endscan(scan);
}

/*
 * Ended rows of any prefix, npages heap pages from the server's sweep
 * cursor (fallback_sweep_heap), so that rows no carry will ever
 * send still go: those of a prefix no call uses any more (a carry that
 * finds nothing under its own prefix sweeps CARRY_SWEEP_PAGES pages), and
 * those that end while Redis stays away, when nothing carries at all
 * (every CARRY_ADD_SWEEP_EVERY-th row a backend adds, it sweeps a page).
 * An ended row is never sent, so deleting one is always safe; one another
 * transaction is deleting is left to it.
 */
static int
sweep_pages(CarryRel *r, int64 now, int npages)
{
	/* ended: expires <= now */
	return fallback_sweep_heap(r->rel, RelationGetNumberOfBlocks(r->rel), r->slot,
							   CA_ATT_EXPIRES, now + 1, FALLBACK_SWEEP_CARRY, npages, NULL);
}

bool
fallback_carry_collect(const RlArgs *args, int max, int64 after,
					   const ItemPointerData *skip, int nskip, FallbackCarry *c)
{
	CarryRel	r;
	int64		now;
	const char *prefix = slidewin_key_prefix ? slidewin_key_prefix : "";
	int			plen = strlen(prefix);
	text	   *key = NULL;
	int16		algo = 0;

	memset(c, 0, sizeof(*c));
	c->last_ts = -1;
	if (!lookup_oids())
		return false;
	carry_open(&r, RowExclusiveLock);
	/* a table that never held a row has no page: nothing to descend */
	if (RelationGetNumberOfBlocks(r.rel) == 0)
	{
		carry_close(&r);
		return false;
	}
	now = fallback_clock();
	if (args)
	{
		key = fallback_stored_key(args);
		c->args = *args;
		algo = (int16) args->algorithm;
	}
	else
	{
		IndexScanDesc scan;
		int			swept = 0;
		int			foreign = 0;
		bool		more = false;

		/*
		 * The first key under our prefix that has a live row, in key
		 * order. Ended rows met on the way are deleted, a few at a time
		 * (and then the caller comes back: `more`), and rows of other
		 * prefixes that begin with ours are stepped over.
		 */
		scan = scan_keys_from(&r, cstring_to_text(prefix));
		while (index_getnext_slot(scan, ForwardScanDirection, r.slot))
		{
			bool		isnull;
			text	   *k = DatumGetTextPP(slot_getattr(r.slot, CA_ATT_KEY, &isnull));
			int32		kplen = DatumGetInt32(slot_getattr(r.slot, CA_ATT_PLEN, &isnull));

			if (VARSIZE_ANY_EXHDR(k) < plen || memcmp(VARDATA_ANY(k), prefix, plen) != 0)
				break;			/* past the prefix's keys */
			if (slot_int8(r.slot, CA_ATT_EXPIRES) <= now)
			{
				try_delete(&r, &r.slot->tts_tid);
				if (++swept >= CARRY_SWEEP)
				{
					more = true;
					break;
				}
				continue;
			}
			if (kplen == plen)
			{
				key = DatumGetTextPCopy(slot_getattr(r.slot, CA_ATT_KEY, &isnull));
				algo = slot_algo(r.slot);
				break;
			}
			if (++foreign >= CARRY_MAX_FOREIGN)
				break;
		}
		index_endscan(scan);
		if (key == NULL)
			(void) sweep_pages(&r, now, CARRY_SWEEP_PAGES);
		if (key == NULL && more)
		{
			/* ended rows of the prefix remain: not done, come back */
			c->waiting = true;
			CommandCounterIncrement();
			carry_close(&r);
			return false;
		}
		if (key == NULL)
		{
			CommandCounterIncrement();
			carry_close(&r);
			return false;
		}
		c->waiting = true;
		memset(&c->args, 0, sizeof(c->args));
		c->args.algorithm = (RlAlgorithm) algo;
		c->args.keylen = VARSIZE_ANY_EXHDR(key) - plen;
		c->args.key = pnstrdup(VARDATA_ANY(key) + plen, c->args.keylen);
	}
	initStringInfo(&c->entries);
	c->tids = palloc(max * sizeof(ItemPointerData));
	collect_key(&r, key, algo, now, max, args ? after : -1, skip, nskip, c);
	CommandCounterIncrement();
	carry_close(&r);
	return c->n > 0;
}

int
fallback_carry_done(FallbackCarry *c, ItemPointerData *busy)
{
	CarryRel	r;
	int			nbusy = 0;

	if (!lookup_oids())
		return 0;
	carry_open(&r, RowExclusiveLock);
	for (int i = 0; i < c->n; i++)
		if (!try_delete(&r, &c->tids[i]))
			busy[nbusy++] = c->tids[i];
	CommandCounterIncrement();
	carry_close(&r);
	return nbusy;
}

/* Live rows of every prefix: a pass over the table (statistics only). */
int64
fallback_carry_pending(void)
{
	CarryRel	r;
	TableScanDesc scan;
	int64		now;
	int64		n = 0;

	if (!lookup_oids())
		return 0;
	carry_open(&r, AccessShareLock);
	now = fallback_clock();
	scan = table_beginscan_strat(r.rel, SnapshotSelf, 0, NULL, true, true);
	while (table_scan_getnextslot(scan, ForwardScanDirection, r.slot))
		if (slot_int8(r.slot, CA_ATT_EXPIRES) > now)
			n++;
	table_endscan(scan);
	carry_close(&r);
	return n;
}
