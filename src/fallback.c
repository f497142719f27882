/*-------------------------------------------------------------------------
 *
 * fallback.c
 *		The fallback store: an exact sliding log per key in the unlogged
 *		table rl_fallback_log, used while Redis cannot answer.
 *
 * Layout: the same as in Redis (see scripts.c). Each admitted call is one
 * row (key, ts, total): its admission time in Unix microseconds, strictly
 * increasing per key, and the key's running total of units including this
 * row. Units in the window are newest.total - base.total, where base is the
 * newest row that has left the window; older rows are deleted as calls go.
 * Every call is a few btree descents: O(log n) in the rows of the key.
 *
 * Concurrency rules:
 *  - A call that may write takes a transaction-level lock on the key (an
 *    advisory-type lock tag of our own), held until commit, so admissions
 *    on one key are serialised and every admission builds on committed ones.
 *  - Rows are read with SnapshotSelf, not the caller's snapshot: once the
 *    lock is ours, every earlier holder has committed or aborted, and
 *    SnapshotSelf shows exactly the committed rows plus our own. A caller
 *    in REPEATABLE READ or SERIALIZABLE therefore cannot be let through by
 *    a snapshot taken before another backend's admission committed, and as
 *    the reads are not MVCC reads they take no SSI predicate locks and can
 *    cause no serialisation failure.
 *  - The table is reached directly through heap and index calls, not SQL,
 *    so a role needs no privilege on it: EXECUTE on the functions is enough.
 *  - Consumption is transactional: an aborted transaction's rows vanish.
 *
 * This file must not talk to Redis or decide when it is used.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/relscan.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/pg_collation_d.h"
#include "catalog/pg_extension.h"
#include "access/htup_details.h"
#include "commands/extension.h"
#include "common/hashfn.h"
#include "executor/tuptable.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "fallback.h"
#include "store_redis.h"

/* Distinguishes our lock tags from user advisory locks (which use 1 and 2). */
#define FALLBACK_LOCK_CLASS 0x5357

#define UNIX_TO_PG_US ((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY)

static Oid	log_relid = InvalidOid;
static Oid	log_indexid = InvalidOid;

typedef struct FbEntry
{
	bool		found;
	int64		ts;
	int64		total;
	ItemPointerData tid;
} FbEntry;

typedef struct FbScan
{
	Relation	rel;
	Relation	idx;
	TupleTableSlot *slot;
	text	   *key;
} FbScan;

static void
invalidate_oids(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == log_relid || relid == log_indexid)
	{
		log_relid = InvalidOid;
		log_indexid = InvalidOid;
	}
}

void
fallback_init(void)
{
	CacheRegisterRelcacheCallback(invalidate_oids, (Datum) 0);
}

/* The schema the extension lives in (PostgreSQL 15 has no exported helper). */
static Oid
extension_schema(Oid ext)
{
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	Oid			nsp = InvalidOid;

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_oid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(ext));
	scan = systable_beginscan(rel, ExtensionOidIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
		nsp = ((Form_pg_extension) GETSTRUCT(tup))->extnamespace;
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return nsp;
}

static void
lookup_oids(void)
{
	Oid			ext;
	Oid			nsp;

	if (OidIsValid(log_relid) && OidIsValid(log_indexid))
		return;
	ext = get_extension_oid("slidewin", true);
	if (!OidIsValid(ext))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension \"slidewin\" is not installed in this database")));
	nsp = extension_schema(ext);
	log_relid = get_relname_relid("rl_fallback_log", nsp);
	log_indexid = get_relname_relid("rl_fallback_log_key_ts", nsp);
	if (!OidIsValid(log_relid) || !OidIsValid(log_indexid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("the slidewin fallback table is missing"),
				 errhint("Recreate the extension with DROP EXTENSION slidewin; CREATE EXTENSION slidewin;")));
}

static int64
fallback_now(void)
{
	int64		now_us;

	if (limit_test_clock(&now_us))
		return now_us;
	return GetCurrentTimestamp() + UNIX_TO_PG_US;
}

/* The stored key: the same prefix as the Redis store, then the user key. */
static text *
stored_key(const RlArgs *args)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoString(&buf, slidewin_key_prefix ? slidewin_key_prefix : "");
	appendBinaryStringInfo(&buf, args->key, args->keylen);
	return cstring_to_text_with_len(buf.data, buf.len);
}

/* Serialise writers of one key until the end of the transaction. */
static void
lock_key(text *key)
{
	LOCKTAG		tag;
	uint64		h = hash_bytes_extended((const unsigned char *) VARDATA_ANY(key),
										VARSIZE_ANY_EXHDR(key), 0);

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) (h >> 32), (uint32) h,
						 FALLBACK_LOCK_CLASS);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);
}

static void
scan_open(FbScan *s, text *key, LOCKMODE mode)
{
	lookup_oids();
	s->rel = table_open(log_relid, mode);
	s->idx = index_open(log_indexid, mode);
	s->slot = table_slot_create(s->rel, NULL);
	s->key = key;
}

static void
scan_close(FbScan *s, LOCKMODE mode)
{
	ExecDropSingleTupleTableSlot(s->slot);
	index_close(s->idx, mode);
	table_close(s->rel, mode);
}

/*
 * Start an index scan over the rows of the key, optionally bounded on ts by
 * (strategy, bound).
 */
static IndexScanDesc
scan_begin(FbScan *s, StrategyNumber strategy, int64 bound)
{
	ScanKeyData sk[2];
	int			nkeys = 1;
	IndexScanDesc scan;

	ScanKeyEntryInitialize(&sk[0], 0, 1, BTEqualStrategyNumber, InvalidOid,
						   C_COLLATION_OID, F_TEXTEQ, PointerGetDatum(s->key));
	if (strategy != InvalidStrategy)
	{
		RegProcedure proc = (strategy == BTLessEqualStrategyNumber) ? F_INT8LE :
		(strategy == BTLessStrategyNumber) ? F_INT8LT : F_INT8GT;

		ScanKeyEntryInitialize(&sk[1], 0, 2, strategy, InvalidOid,
							   InvalidOid, proc, Int64GetDatum(bound));
		nkeys = 2;
	}
	scan = index_beginscan(s->rel, s->idx, SnapshotSelf, nkeys, 0);
	index_rescan(scan, sk, nkeys, NULL, 0);
	return scan;
}

static bool
scan_next(FbScan *s, IndexScanDesc scan, ScanDirection dir, FbEntry *e)
{
	bool		isnull;

	if (!index_getnext_slot(scan, dir, s->slot))
	{
		e->found = false;
		return false;
	}
	e->found = true;
	e->ts = DatumGetInt64(slot_getattr(s->slot, 2, &isnull));
	e->total = DatumGetInt64(slot_getattr(s->slot, 3, &isnull));
	e->tid = s->slot->tts_tid;
	return true;
}

/* The first row found scanning in `dir` under the given bound. */
static void
scan_first(FbScan *s, ScanDirection dir, StrategyNumber strategy, int64 bound,
		   FbEntry *e)
{
	IndexScanDesc scan = scan_begin(s, strategy, bound);

	scan_next(s, scan, dir, e);
	index_endscan(scan);
}

/*
 * Time at which the live rows (ts > cutoff) free `need` units: the ts of the
 * first live row whose running total reaches base + need. Walks at most as
 * many rows as units are needed.
 */
static int64
freeing_time(FbScan *s, int64 cutoff, int64 base, int64 need)
{
	IndexScanDesc scan = scan_begin(s, BTGreaterStrategyNumber, cutoff);
	FbEntry		e;
	int64		ts = -1;

	while (scan_next(s, scan, ForwardScanDirection, &e))
	{
		CHECK_FOR_INTERRUPTS();
		if (e.total - base >= need)
		{
			ts = e.ts;
			break;
		}
	}
	index_endscan(scan);
	if (ts < 0)
		elog(ERROR, "slidewin fallback log is inconsistent");
	return ts;
}

typedef struct FbState
{
	int64		now;
	int64		cutoff;
	FbEntry		base;			/* newest row at or before the cutoff */
	FbEntry		newest;
	int64		base_total;
	int64		used;
} FbState;

static void
read_state(FbScan *s, const RlArgs *args, FbState *st)
{
	st->now = fallback_now();
	st->cutoff = st->now - args->win_us;
	scan_first(s, BackwardScanDirection, BTLessEqualStrategyNumber, st->cutoff, &st->base);
	scan_first(s, BackwardScanDirection, InvalidStrategy, 0, &st->newest);
	st->base_total = st->base.found ? st->base.total : 0;
	st->used = st->newest.found ? st->newest.total - st->base_total : 0;
}

static void
insert_row(FbScan *s, int64 ts, int64 total)
{
	Datum		values[3];
	bool		nulls[3] = {false, false, false};
	HeapTuple	tup;
	IndexInfo  *ii;

	values[0] = PointerGetDatum(s->key);
	values[1] = Int64GetDatum(ts);
	values[2] = Int64GetDatum(total);
	tup = heap_form_tuple(RelationGetDescr(s->rel), values, nulls);
	simple_heap_insert(s->rel, tup);
	ii = BuildIndexInfo(s->idx);
	index_insert(s->idx, values, nulls, &tup->t_self, s->rel,
				 UNIQUE_CHECK_NO, false, ii);
	heap_freetuple(tup);
}

/* Delete the rows of the key with ts < bound (all of them if bound is max). */
static void
delete_before(FbScan *s, int64 bound)
{
	IndexScanDesc scan = scan_begin(s, BTLessStrategyNumber, bound);
	FbEntry		e;

	while (scan_next(s, scan, ForwardScanDirection, &e))
		simple_heap_delete(s->rel, &e.tid);
	index_endscan(scan);
}

void
fallback_attempt(const RlArgs *args, RlOutcome *o)
{
	FbScan		s;
	FbState		st;
	text	   *key = stored_key(args);

	lock_key(key);
	scan_open(&s, key, RowExclusiveLock);
	read_state(&s, args, &st);

	o->store = "fallback";
	if (st.used + args->cost <= args->lim)
	{
		int64		ts = st.now;
		int64		total;

		if (st.newest.found && ts <= st.newest.ts)
			ts = st.newest.ts + 1;
		if (st.used == 0)
		{
			/* Window empty: forget the history, restart the running total. */
			if (st.newest.found)
				delete_before(&s, PG_INT64_MAX);
			total = args->cost;
		}
		else
		{
			/* Keep the base row; older expired rows are no longer needed. */
			if (st.base.found)
				delete_before(&s, st.base.ts);
			total = st.newest.total + args->cost;
		}
		insert_row(&s, ts, total);
		/* Later calls in this same command must see, and may delete, it. */
		CommandCounterIncrement();

		o->allowed = true;
		o->remaining = args->lim - st.used - args->cost;
		o->retry_us = 0;
		o->reset_at_us = ts + args->win_us;
		o->used = st.used + args->cost;
	}
	else
	{
		o->allowed = false;
		o->remaining = Max(args->lim - st.used, 0);
		o->retry_us = freeing_time(&s, st.cutoff, st.base_total,
								   st.used + args->cost - args->lim)
			+ args->win_us - st.now;
		o->reset_at_us = st.newest.ts + args->win_us;
		o->used = st.used;
	}
	o->known = true;
	scan_close(&s, RowExclusiveLock);
}

void
fallback_peek(const RlArgs *args, RlOutcome *o)
{
	FbScan		s;
	FbState		st;

	scan_open(&s, stored_key(args), AccessShareLock);
	read_state(&s, args, &st);

	o->store = "fallback";
	o->known = true;
	o->used = st.used;
	o->remaining = Max(args->lim - st.used, 0);
	o->reset_at_us = st.used > 0 ? st.newest.ts + args->win_us : st.now;
	o->allowed = (st.used + 1 <= args->lim);
	o->retry_us = o->allowed ? 0 :
		freeing_time(&s, st.cutoff, st.base_total, st.used + 1 - args->lim)
		+ args->win_us - st.now;
	scan_close(&s, AccessShareLock);
}

void
fallback_reset(const RlArgs *args)
{
	FbScan		s;
	text	   *key = stored_key(args);

	lock_key(key);
	scan_open(&s, key, RowExclusiveLock);
	delete_before(&s, PG_INT64_MAX);
	CommandCounterIncrement();
	scan_close(&s, RowExclusiveLock);
}
