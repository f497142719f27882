/*-------------------------------------------------------------------------
 *
 * fallback.c
 *		The fallback store: an exact sliding log per key in the unlogged
 *		table rl_fallback_log, used while Redis cannot answer.
 *
 * Layout: each admitted call is one row (key, ts, total, cost, expires):
 * its admission time in Unix microseconds, strictly increasing per key; the
 * key's running total of units including this row, so also strictly
 * increasing; its own cost; and ts + the window it was admitted under.
 * Units in the window are newest.total - (first.total - first.cost), where
 * first is the oldest row still in the window, so no expired row is ever
 * read. Three btrees serve the three questions a call asks, each in one
 * descent: (key, ts) finds the newest and the first live row, (key, total)
 * finds the row whose expiry frees enough units for a denied call, and
 * (expires) finds rows any key has left behind.
 *
 * Cleanup: an admitting call deletes its own key's expired rows, and a few
 * expired rows of any other key (sweep), so the table stays bounded by the live windows even for keys
 * that are never called again, without a separate job. Because no lookup
 * reads an expired row, a sweep needs no lock on the keys it cleans; its
 * deletes never wait, and a row another transaction is deleting is simply
 * left to it. A sweep runs without the key's lock, so it can commit the
 * deletion of a row while the key's lock holder is reading: the holder
 * therefore counts the rows live at the clock read before its scan, and
 * admits at the clock read after it. Any row a sweep removed before the
 * scan expired before that second reading, so the holder may over-count
 * by the rows of those few microseconds, but never under-count.
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

/* Columns of rl_fallback_log. */
#define FB_ATT_KEY 1
#define FB_ATT_TS 2
#define FB_ATT_TOTAL 3
#define FB_ATT_COST 4
#define FB_ATT_EXPIRES 5
#define FB_NATTS 5

/* Expired rows an admitting call deletes, and the most it looks at. */
#define SWEEP_PER_CALL 4
#define SWEEP_MAX_VISITS 64

/* Totals restart once a key's window is empty and they have grown this far. */
#define TOTAL_RESTART (INT64CONST(1) << 62)

typedef enum FbIndex
{
	IDX_KEY_TS,
	IDX_KEY_TOTAL,
	IDX_EXPIRES,
	IDX_COUNT
} FbIndex;

static const char *const index_names[IDX_COUNT] = {
	"rl_fallback_log_key_ts",
	"rl_fallback_log_key_total",
	"rl_fallback_log_expires",
};

static Oid	log_relid = InvalidOid;
static Oid	index_oids[IDX_COUNT];

typedef struct FbEntry
{
	bool		found;
	int64		ts;
	int64		total;
	int64		cost;
	ItemPointerData tid;
} FbEntry;

typedef struct FbScan
{
	Relation	rel;
	Relation	idx[IDX_COUNT];
	TupleTableSlot *slot;
	text	   *key;
	LOCKMODE	mode;
} FbScan;

static void
invalidate_oids(Datum arg, Oid relid)
{
	bool		ours = (relid == InvalidOid || relid == log_relid);

	for (int i = 0; i < IDX_COUNT; i++)
		ours = ours || relid == index_oids[i];
	if (ours)
		log_relid = InvalidOid;
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
	bool		missing;

	if (OidIsValid(log_relid))
		return;
	ext = get_extension_oid("slidewin", true);
	if (!OidIsValid(ext))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension \"slidewin\" is not installed in this database")));
	nsp = extension_schema(ext);
	missing = !OidIsValid(get_relname_relid("rl_fallback_log", nsp));
	for (int i = 0; i < IDX_COUNT; i++)
	{
		index_oids[i] = get_relname_relid(index_names[i], nsp);
		missing = missing || !OidIsValid(index_oids[i]);
	}
	if (missing)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("the slidewin fallback table or one of its indexes is missing"),
				 errhint("Update the extension with ALTER EXTENSION slidewin UPDATE, or recreate it.")));
	log_relid = get_relname_relid("rl_fallback_log", nsp);
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
lock_key(text *key, LOCKTAG *tag)
{
	uint64		h = hash_bytes_extended((const unsigned char *) VARDATA_ANY(key),
										VARSIZE_ANY_EXHDR(key), 0);

	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (h >> 32), (uint32) h,
						 FALLBACK_LOCK_CLASS);
	(void) LockAcquire(tag, ExclusiveLock, false, false);
}

static void
scan_open(FbScan *s, text *key, LOCKMODE mode)
{
	lookup_oids();
	s->mode = mode;
	s->rel = table_open(log_relid, mode);
	if (RelationGetDescr(s->rel)->natts != FB_NATTS)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the slidewin fallback table has the layout of an older version"),
				 errhint("Update the extension with ALTER EXTENSION slidewin UPDATE.")));
	for (int i = 0; i < IDX_COUNT; i++)
		s->idx[i] = index_open(index_oids[i], mode);
	s->slot = table_slot_create(s->rel, NULL);
	s->key = key;
}

static void
scan_close(FbScan *s)
{
	ExecDropSingleTupleTableSlot(s->slot);
	for (int i = IDX_COUNT - 1; i >= 0; i--)
		index_close(s->idx[i], s->mode);
	table_close(s->rel, s->mode);
}

/*
 * Start a scan of index `which`: over the rows of the key, optionally
 * bounded on the index's bigint column by (strategy, bound); the expires
 * index has no key column, only the bound.
 */
static IndexScanDesc
scan_begin(FbScan *s, FbIndex which, StrategyNumber strategy, int64 bound)
{
	ScanKeyData sk[2];
	int			nkeys = 0;
	IndexScanDesc scan;

	if (which != IDX_EXPIRES)
		ScanKeyEntryInitialize(&sk[nkeys++], 0, 1, BTEqualStrategyNumber, InvalidOid,
							   C_COLLATION_OID, F_TEXTEQ, PointerGetDatum(s->key));
	if (strategy != InvalidStrategy)
	{
		RegProcedure proc;

		switch (strategy)
		{
			case BTLessStrategyNumber:
				proc = F_INT8LT;
				break;
			case BTLessEqualStrategyNumber:
				proc = F_INT8LE;
				break;
			case BTGreaterEqualStrategyNumber:
				proc = F_INT8GE;
				break;
			default:
				proc = F_INT8GT;
				break;
		}
		ScanKeyEntryInitialize(&sk[nkeys], 0, nkeys + 1, strategy, InvalidOid,
							   InvalidOid, proc, Int64GetDatum(bound));
		nkeys++;
	}
	scan = index_beginscan(s->rel, s->idx[which], SnapshotSelf, nkeys, 0);
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
	e->ts = DatumGetInt64(slot_getattr(s->slot, FB_ATT_TS, &isnull));
	e->total = DatumGetInt64(slot_getattr(s->slot, FB_ATT_TOTAL, &isnull));
	e->cost = DatumGetInt64(slot_getattr(s->slot, FB_ATT_COST, &isnull));
	e->tid = s->slot->tts_tid;
	return true;
}

/* The first row found scanning index `which` in `dir` under the bound. */
static void
scan_first(FbScan *s, FbIndex which, ScanDirection dir,
		   StrategyNumber strategy, int64 bound, FbEntry *e)
{
	IndexScanDesc scan = scan_begin(s, which, strategy, bound);

	scan_next(s, scan, dir, e);
	index_endscan(scan);
}

/*
 * Delete a row unless another transaction is deleting it already; never
 * waits. Only used on rows that no lookup needs any more (expired, or of a
 * key being reset), so leaving one to its other deleter is harmless.
 */
static bool
try_delete(FbScan *s, ItemPointer tid)
{
	TM_FailureData tmfd;

	return heap_delete(s->rel, tid, GetCurrentCommandId(true), InvalidSnapshot,
					   false, &tmfd, false) == TM_Ok;
}

/* Delete every row of the key. The caller holds the key's lock. */
static void
delete_key(FbScan *s)
{
	IndexScanDesc scan = scan_begin(s, IDX_KEY_TS, InvalidStrategy, 0);
	FbEntry		e;

	while (scan_next(s, scan, ForwardScanDirection, &e))
		try_delete(s, &e.tid);
	index_endscan(scan);
}

/* Delete the rows of the key that left its window. The caller holds its lock. */
static void
delete_expired(FbScan *s, int64 cutoff)
{
	IndexScanDesc scan = scan_begin(s, IDX_KEY_TS, BTLessEqualStrategyNumber, cutoff);
	FbEntry		e;

	while (scan_next(s, scan, ForwardScanDirection, &e))
		try_delete(s, &e.tid);
	index_endscan(scan);
}

/*
 * Delete up to `want` rows of any key whose window ended before now, looking
 * at no more than SWEEP_MAX_VISITS candidates. Returns true if it stopped
 * at one of those bounds, that is, if expired rows may remain.
 */
static bool
sweep(FbScan *s, int64 now, int want)
{
	IndexScanDesc scan = scan_begin(s, IDX_EXPIRES, BTLessStrategyNumber, now);
	FbEntry		e;
	int			deleted = 0;
	int			visits = 0;
	bool		more = false;

	while (scan_next(s, scan, ForwardScanDirection, &e))
	{
		if (try_delete(s, &e.tid))
			deleted++;
		if (deleted >= want || ++visits >= SWEEP_MAX_VISITS)
		{
			more = true;
			break;
		}
	}
	index_endscan(scan);
	return more;
}

bool
fallback_sweep(int want)
{
	FbScan		s;
	bool		more;

	scan_open(&s, NULL, RowExclusiveLock);
	more = sweep(&s, fallback_now(), want);
	scan_close(&s);
	return more;
}

typedef struct FbState
{
	int64		now;			/* the clock before reading: defines the window */
	int64		now_after;		/* the clock after reading: admission time */
	int64		cutoff;
	FbEntry		first;			/* oldest row inside the window */
	FbEntry		newest;			/* newest row, inside the window or not */
	int64		base;			/* running total before the window */
	int64		used;
} FbState;

static void
read_state(FbScan *s, const RlArgs *args, FbState *st)
{
	st->now = fallback_now();
	st->cutoff = st->now - args->win_us;
	scan_first(s, IDX_KEY_TS, ForwardScanDirection, BTGreaterStrategyNumber,
			   st->cutoff, &st->first);
	scan_first(s, IDX_KEY_TS, BackwardScanDirection, InvalidStrategy, 0, &st->newest);
	if (st->first.found)
	{
		st->base = st->first.total - st->first.cost;
		st->used = st->newest.total - st->base;
	}
	else
	{
		st->base = st->newest.found ? st->newest.total : 0;
		st->used = 0;
	}
	st->now_after = fallback_now();
}

/*
 * When the window next admits `need` more units: the expiry of the live row
 * whose running total reaches base + need, found in one descent of the
 * (key, total) index. Rows before the window all have totals <= base, so
 * the row found is a live one.
 */
static int64
retry_after(FbScan *s, const RlArgs *args, const FbState *st, int64 need)
{
	FbEntry		e;

	scan_first(s, IDX_KEY_TOTAL, ForwardScanDirection, BTGreaterEqualStrategyNumber,
			   st->base + need, &e);
	if (!e.found || e.ts <= st->cutoff)
		elog(ERROR, "slidewin fallback log is inconsistent");
	return e.ts + args->win_us - st->now;
}

static void
insert_row(FbScan *s, int64 ts, int64 total, int64 cost, int64 expires)
{
	Datum		values[FB_NATTS];
	bool		nulls[FB_NATTS] = {false};
	HeapTuple	tup;

	values[FB_ATT_KEY - 1] = PointerGetDatum(s->key);
	values[FB_ATT_TS - 1] = Int64GetDatum(ts);
	values[FB_ATT_TOTAL - 1] = Int64GetDatum(total);
	values[FB_ATT_COST - 1] = Int64GetDatum(cost);
	values[FB_ATT_EXPIRES - 1] = Int64GetDatum(expires);
	tup = heap_form_tuple(RelationGetDescr(s->rel), values, nulls);
	simple_heap_insert(s->rel, tup);
	for (int i = 0; i < IDX_COUNT; i++)
	{
		Datum		ivalues[2];
		bool		inulls[2] = {false, false};

		if (i == IDX_EXPIRES)
			ivalues[0] = values[FB_ATT_EXPIRES - 1];
		else
		{
			ivalues[0] = values[FB_ATT_KEY - 1];
			ivalues[1] = values[i == IDX_KEY_TS ? FB_ATT_TS - 1 : FB_ATT_TOTAL - 1];
		}
		index_insert(s->idx[i], ivalues, inulls, &tup->t_self, s->rel,
					 UNIQUE_CHECK_NO, false, BuildIndexInfo(s->idx[i]));
	}
	heap_freetuple(tup);
}

void
fallback_attempt(const RlArgs *args, RlOutcome *o)
{
	FbScan		s;
	FbState		st;
	text	   *key = stored_key(args);
	LOCKTAG		tag;

	lock_key(key, &tag);
	scan_open(&s, key, RowExclusiveLock);
	read_state(&s, args, &st);

	o->store = "fallback";
	o->recorded_ts = -1;		/* rows go with an aborted transaction anyway */
	o->shadowed = false;
	o->allowed = (st.used + args->cost <= args->lim);
	o->known = true;
	if (!o->allowed)
	{
		o->remaining = Max(args->lim - st.used, 0);
		o->retry_us = retry_after(&s, args, &st, st.used + args->cost - args->lim);
		o->reset_at_us = st.newest.ts + args->win_us;
		o->used = st.used;
	}
	if (o->allowed || args->force)
	{
		int64		ts = st.now_after;
		int64		base = st.base;

		if (st.newest.found && ts <= st.newest.ts)
			ts = st.newest.ts + 1;
		/* This key's expired rows go at once, other keys' a few at a time. */
		delete_expired(&s, st.cutoff);
		if (st.used == 0 && base >= TOTAL_RESTART)
			base = 0;
		sweep(&s, ts, SWEEP_PER_CALL);
		insert_row(&s, ts, base + st.used + args->cost, args->cost, ts + args->win_us);
		/* Later calls in this same command must see it. */
		CommandCounterIncrement();

		o->remaining = Max(args->lim - st.used - args->cost, 0);
		if (o->allowed)
			o->retry_us = 0;
		o->reset_at_us = ts + args->win_us;
		o->used = st.used + args->cost;
	}
	scan_close(&s);

	/*
	 * A denied call wrote nothing, so it gives up its hold on the key at once
	 * (a caller that waits for capacity must not block the key meanwhile).
	 * The lock stays if this transaction took it before, for earlier rows.
	 */
	if (!o->allowed && !args->force)
		LockRelease(&tag, ExclusiveLock, false);
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
	o->recorded_ts = -1;
	o->shadowed = false;
	o->used = st.used;
	o->remaining = Max(args->lim - st.used, 0);
	o->reset_at_us = st.used > 0 ? st.newest.ts + args->win_us : st.now;
	o->allowed = (st.used + 1 <= args->lim);
	o->retry_us = o->allowed ? 0 : retry_after(&s, args, &st, st.used + 1 - args->lim);
	scan_close(&s);
}

void
fallback_reset(const RlArgs *args)
{
	FbScan		s;
	text	   *key = stored_key(args);
	LOCKTAG		tag;

	lock_key(key, &tag);
	scan_open(&s, key, RowExclusiveLock);
	delete_key(&s);
	CommandCounterIncrement();
	scan_close(&s);
}
