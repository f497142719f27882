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
 *  - Sliding logs: a key called again within its window has a head row
 *    (rl_fallback_head, see "Heads" below) with its newest admission. A
 *    call on such a key reads without a lock and
 *    decides; an admission then updates the head version it decided on,
 *    which waits for an admission in progress and fails if another one
 *    committed since the read, in which case the call decides again. So
 *    admissions on one key are serialised by the head's row lock, held
 *    until commit, and every admission builds on committed ones. Writes of
 *    a key without a head, and of the counting algorithms, are made under
 *    a transaction-level lock on the key (an advisory-type lock tag of our
 *    own), held until commit.
 *  - Rows are read with SnapshotSelf, not the caller's snapshot: it shows
 *    exactly the committed rows plus our own, and the claim above (or the
 *    key's lock) makes sure no admission committed after the read. A caller
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

#include <math.h>

#include "access/genam.h"
#include "access/heapam.h"
#include "access/relscan.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/index.h"
#include "catalog/pg_collation_d.h"
#include "catalog/pg_extension.h"
#include "access/htup_details.h"
#include "commands/extension.h"
#include "common/hashfn.h"
#include "common/pg_prng.h"
#include "executor/tuptable.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "replication/syncrep.h"
#include "replication/walsender.h"
#include "storage/bufmgr.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "compat.h"
#include "fallback.h"
#include "fallback_block.h"
#include "fallback_carry.h"
#include "outage.h"
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

/* Columns of rl_fallback_head: one row per key of each log. */
#define HD_ATT_KEY 1
#define HD_ATT_LOG 2
#define HD_ATT_TS 3
#define HD_ATT_TOTAL 4
#define HD_ATT_EXPIRES 5
#define HD_NATTS 5

/*
 * A head outlives its key's last row by this much, so that a key called
 * again within it is claimed, not created anew.
 */
#define HEAD_GRACE_US INT64CONST(10000000)

/* Columns of rl_fallback_state (see "The counting algorithms" below). */
#define ST_ATT_KEY 1
#define ST_ATT_ALGO 2
#define ST_ATT_S 3
#define ST_ATT_A 4
#define ST_ATT_B 5
#define ST_ATT_EXPIRES 6

/* Expired rows an admitting call deletes, and the most it looks at. */
#define SWEEP_PER_CALL 4
#define SWEEP_MAX_VISITS 64

/* Totals restart once a key's window is empty and they have grown this far. */
#define TOTAL_RESTART (INT64CONST(1) << 62)

typedef enum FbIndex
{
	IDX_KEY_TS,					/* rl_fallback_state: (key, algo); head: (key, log) */
	IDX_KEY_TOTAL,				/* rl_fallback_state: none */
	IDX_EXPIRES,
	IDX_COUNT
} FbIndex;

/*
 * The tables: the sliding log, the log of rl_attempt_multi (same layout, so
 * that its keys never meet rl_attempt's), and the state of the counting
 * algorithms: one row per key and algorithm.
 */
typedef enum FbTableId
{
	TBL_LOG,
	TBL_MLOG,
	TBL_STATE,
	TBL_HEAD,
	TBL_COUNT
} FbTableId;

typedef struct FbTable
{
	const char *relname;
	const char *index_names[IDX_COUNT];
	int			natts;
	Oid			relid;
	Oid			index_oids[IDX_COUNT];
	IndexInfo  *index_infos[IDX_COUNT]; /* built at first insert, in TopMemoryContext */
} FbTable;

static FbTable tables[TBL_COUNT] = {
	{"rl_fallback_log", {"rl_fallback_log_key_ts", "rl_fallback_log_key_total", "rl_fallback_log_expires"}, FB_NATTS},
	{"rl_fallback_mlog", {"rl_fallback_mlog_key_ts", "rl_fallback_mlog_key_total", "rl_fallback_mlog_expires"}, FB_NATTS},
	{"rl_fallback_state", {"rl_fallback_state_key", NULL, "rl_fallback_state_expires"}, 6},
	{"rl_fallback_head", {"rl_fallback_head_key", NULL, NULL}, HD_NATTS},
};

static bool oids_valid = false;

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
	FbTable    *tbl;
	Relation	rel;
	Relation	idx[IDX_COUNT];
	TupleTableSlot *slot;
	text	   *key;
	LOCKMODE	mode;
} FbScan;

static void
invalidate_oids(Datum arg, Oid relid)
{
	for (int t = 0; t < TBL_COUNT; t++)
	{
		bool		ours = (relid == InvalidOid || relid == tables[t].relid);

		for (int i = 0; i < IDX_COUNT; i++)
			ours = ours || relid == tables[t].index_oids[i];
		if (ours)
			oids_valid = false;
	}
}

static void heads_xact_callback(XactEvent event, void *arg);
static void fallback_peek_unblocked(const RlArgs *args, RlOutcome *o);

void
fallback_init(void)
{
	CacheRegisterRelcacheCallback(invalidate_oids, (Datum) 0);
	RegisterXactCallback(heads_xact_callback, NULL);
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

static Oid
extension_oid(void)
{
	Oid			ext = get_extension_oid("slidewin", true);

	if (!OidIsValid(ext))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension \"slidewin\" is not installed in this database")));
	return ext;
}

/* A relation of the extension, by name; an ERROR if it is missing. */
Oid
fallback_relid(const char *relname)
{
	Oid			relid = get_relname_relid(relname, extension_schema(extension_oid()));

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("slidewin's table %s is missing", relname),
				 errhint("Update the extension with ALTER EXTENSION slidewin UPDATE, or recreate it.")));
	return relid;
}

static void
lookup_oids(void)
{
	Oid			ext;
	Oid			nsp;
	bool		missing = false;

	if (oids_valid)
		return;
	ext = extension_oid();
	nsp = extension_schema(ext);
	for (int t = 0; t < TBL_COUNT; t++)
	{
		for (int i = 0; i < IDX_COUNT; i++)
		{
			if (tables[t].index_infos[i])
				pfree(tables[t].index_infos[i]);
			tables[t].index_infos[i] = NULL;
		}
		tables[t].relid = get_relname_relid(tables[t].relname, nsp);
		missing = missing || !OidIsValid(tables[t].relid);
		for (int i = 0; i < IDX_COUNT; i++)
		{
			tables[t].index_oids[i] = tables[t].index_names[i] ?
				get_relname_relid(tables[t].index_names[i], nsp) : InvalidOid;
			missing = missing || (tables[t].index_names[i] && !OidIsValid(tables[t].index_oids[i]));
		}
	}
	if (missing)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("the slidewin fallback table or one of its indexes is missing"),
				 errhint("Update the extension with ALTER EXTENSION slidewin UPDATE, or recreate it.")));
	oids_valid = true;
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

/* A key's hash: its lock tag, and the hint of read_state. */
static uint64
key_hash(text *key)
{
	return hash_bytes_extended((const unsigned char *) VARDATA_ANY(key),
							   VARSIZE_ANY_EXHDR(key), 0);
}

/* Serialise writers of one key until the end of the transaction. */
static void
lock_key(text *key, LOCKTAG *tag)
{
	uint64		h = key_hash(key);

	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (h >> 32), (uint32) h,
						 FALLBACK_LOCK_CLASS);
	(void) LockAcquire(tag, ExclusiveLock, false, false);
}

static void
scan_open(FbScan *s, FbTableId t, text *key, LOCKMODE mode)
{
	lookup_oids();
	s->tbl = &tables[t];
	s->mode = mode;
	s->rel = table_open(s->tbl->relid, mode);
	if (RelationGetDescr(s->rel)->natts != s->tbl->natts)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the slidewin fallback table has the layout of an older version"),
				 errhint("Update the extension with ALTER EXTENSION slidewin UPDATE.")));
	for (int i = 0; i < IDX_COUNT; i++)
		s->idx[i] = OidIsValid(s->tbl->index_oids[i]) ?
			index_open(s->tbl->index_oids[i], mode) : NULL;
	s->slot = table_slot_create(s->rel, NULL);
	s->key = key;
}

static void
scan_close(FbScan *s)
{
	ExecDropSingleTupleTableSlot(s->slot);
	for (int i = IDX_COUNT - 1; i >= 0; i--)
		if (s->idx[i])
			index_close(s->idx[i], s->mode);
	table_close(s->rel, s->mode);
}

/* The btree operator for an int8 bound of the given strategy. */
static RegProcedure
bound_proc(StrategyNumber strategy)
{
	switch (strategy)
	{
		case BTLessStrategyNumber:
			return F_INT8LT;
		case BTLessEqualStrategyNumber:
			return F_INT8LE;
		case BTGreaterEqualStrategyNumber:
			return F_INT8GE;
		default:
			return F_INT8GT;
	}
}

/*
 * Start a scan of index `which`: over the rows of the key, optionally
 * bounded on the index's bigint column by (lo_strategy, lo) and by
 * (hi_strategy, hi); the expires index has no key column, only the bounds.
 *
 * Bounds on both sides matter for speed, not only for meaning: a btree scan
 * reads every matching item of the leaf page it lands on before returning
 * the first, so a scan that wants one row near the start of a long run of
 * a hot key's entries is cheapest when a bound ends the run there.
 */
static IndexScanDesc
scan_begin_range(FbScan *s, FbIndex which, StrategyNumber lo_strategy, int64 lo,
				 StrategyNumber hi_strategy, int64 hi)
{
	ScanKeyData sk[3];
	int			nkeys = 0;
	int			col = which == IDX_EXPIRES ? 1 : 2;
	IndexScanDesc scan;

	if (which != IDX_EXPIRES)
		ScanKeyEntryInitialize(&sk[nkeys++], 0, 1, BTEqualStrategyNumber, InvalidOid,
							   C_COLLATION_OID, F_TEXTEQ, PointerGetDatum(s->key));
	if (lo_strategy != InvalidStrategy)
		ScanKeyEntryInitialize(&sk[nkeys++], 0, col, lo_strategy, InvalidOid,
							   InvalidOid, bound_proc(lo_strategy), Int64GetDatum(lo));
	if (hi_strategy != InvalidStrategy)
		ScanKeyEntryInitialize(&sk[nkeys++], 0, col, hi_strategy, InvalidOid,
							   InvalidOid, bound_proc(hi_strategy), Int64GetDatum(hi));
	scan = slidewin_index_beginscan(s->rel, s->idx[which], SnapshotSelf, nkeys, 0);
	index_rescan(scan, sk, nkeys, NULL, 0);
	return scan;
}

/*
 * Start a scan of the rows of the key with the given smallint second column:
 * (key, algo) of rl_fallback_state, (key, log) of rl_fallback_head.
 */
static IndexScanDesc
scan_begin_kind(FbScan *s, int16 kind)
{
	ScanKeyData sk[2];
	IndexScanDesc scan;

	ScanKeyEntryInitialize(&sk[0], 0, 1, BTEqualStrategyNumber, InvalidOid,
						   C_COLLATION_OID, F_TEXTEQ, PointerGetDatum(s->key));
	ScanKeyEntryInitialize(&sk[1], 0, 2, BTEqualStrategyNumber, InvalidOid,
						   InvalidOid, F_INT2EQ, Int16GetDatum(kind));
	scan = slidewin_index_beginscan(s->rel, s->idx[IDX_KEY_TS], SnapshotSelf, 2, 0);
	index_rescan(scan, sk, 2, NULL, 0);
	return scan;
}

static IndexScanDesc
scan_begin(FbScan *s, FbIndex which, StrategyNumber strategy, int64 bound)
{
	return scan_begin_range(s, which, strategy, bound, InvalidStrategy, 0);
}

static bool
scan_next(FbScan *s, IndexScanDesc scan, ScanDirection dir, FbEntry *e)
{
	bool		isnull;

	if (!index_getnext_slot(scan, dir, s->slot))
	{
		memset(e, 0, sizeof(FbEntry));
		return false;
	}
	e->found = true;
	e->tid = s->slot->tts_tid;
	if (s->tbl == &tables[TBL_STATE] || s->tbl == &tables[TBL_HEAD])
		return true;			/* callers want only the row's tid */
	e->ts = DatumGetInt64(slot_getattr(s->slot, FB_ATT_TS, &isnull));
	e->total = DatumGetInt64(slot_getattr(s->slot, FB_ATT_TOTAL, &isnull));
	e->cost = DatumGetInt64(slot_getattr(s->slot, FB_ATT_COST, &isnull));
	return true;
}

/* The first row found scanning index `which` in `dir` within the bounds. */
static void
scan_first_range(FbScan *s, FbIndex which, ScanDirection dir,
				 StrategyNumber lo_strategy, int64 lo,
				 StrategyNumber hi_strategy, int64 hi, FbEntry *e)
{
	IndexScanDesc scan = scan_begin_range(s, which, lo_strategy, lo, hi_strategy, hi);

	scan_next(s, scan, dir, e);
	index_endscan(scan);
}

static void
scan_first(FbScan *s, FbIndex which, ScanDirection dir,
		   StrategyNumber strategy, int64 bound, FbEntry *e)
{
	scan_first_range(s, which, dir, strategy, bound, InvalidStrategy, 0, e);
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

	return slidewin_heap_delete(s->rel, tid, GetCurrentCommandId(true), false, &tmfd) == TM_Ok;
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

/*
 * Per table, for this backend: the expiry below which the rows have been
 * swept already (or left to another deleter), so that a sweep starts there
 * instead of stepping over the index entries of every row deleted since the
 * last VACUUM. Rows are written with an expiry after the clock, so none can
 * appear below it later, unless the clock goes back (slidewin.test_now),
 * which starts the sweep from the beginning again.
 */
static int64 swept_to[TBL_COUNT];

/*
 * Delete up to `want` rows of any key whose window ended before now, looking
 * at no more than SWEEP_MAX_VISITS candidates. Returns true if it stopped
 * at one of those bounds, that is, if expired rows may remain.
 */
static bool
sweep(FbScan *s, int64 now, int want)
{
	int64	   *mark = &swept_to[s->tbl - tables];
	int			attno = s->tbl == &tables[TBL_STATE] ? ST_ATT_EXPIRES :
		s->tbl == &tables[TBL_HEAD] ? HD_ATT_EXPIRES : FB_ATT_EXPIRES;
	IndexScanDesc scan;
	FbEntry		e;
	int			deleted = 0;
	int			visits = 0;
	bool		more = false;

	if (s->idx[IDX_EXPIRES] == NULL)
		return false;			/* heads: see sweep_heads */
	if (*mark >= now)
		*mark = PG_INT64_MIN;	/* the clock went back */
	scan = scan_begin_range(s, IDX_EXPIRES, BTGreaterStrategyNumber, *mark,
							BTLessStrategyNumber, now);
	while (scan_next(s, scan, ForwardScanDirection, &e))
	{
		bool		isnull;
		int64		expires = DatumGetInt64(slot_getattr(s->slot, attno, &isnull));

		if (expires >= now)
			break;
		if (try_delete(s, &e.tid))
			deleted++;
		if (deleted >= want || ++visits >= SWEEP_MAX_VISITS)
		{
			/* rows of this very expiry may remain: start at it next time */
			*mark = expires - 1;
			more = true;
			break;
		}
	}
	if (!more)
		*mark = now - 1;
	index_endscan(scan);
	return more;
}

static bool sweep_heads(FbScan *h, int64 cutoff, int npages);

/*
 * After an outage: expired rows of every table, and the heads whose rows
 * have all expired (without the grace that serves keys called again).
 */
bool
fallback_sweep(int want)
{
	bool		more = false;
	int64		now = fallback_now();

	for (int t = 0; t < TBL_COUNT; t++)
	{
		FbScan		s;

		scan_open(&s, (FbTableId) t, NULL, RowExclusiveLock);
		if (t == TBL_HEAD)
			more = sweep_heads(&s, now < PG_INT64_MAX - HEAD_GRACE_US ? now + HEAD_GRACE_US : now,
							   Max(want / 4, 1)) || more;
		else
			more = sweep(&s, now, want) || more;
		scan_close(&s);
	}
	return more;
}

/* One (lim, win) pair of a log: rl_attempt has one, rl_attempt_multi several. */
typedef struct FbWindow
{
	int64		lim;
	int64		win;
	int64		cutoff;
	int64		base;			/* running total before this window */
	int64		used;			/* seeded included */
	int64		seeded;			/* units Redis had counted, still spent (outage.c) */
	int64		seed_frees;		/* when they free */
} FbWindow;

typedef struct FbState
{
	int64		now;			/* the clock before reading: defines the windows */
	int64		now_after;		/* the clock after reading: admission time */
	int64		maxwin;
	FbEntry		newest;			/* newest row, inside the windows or not */
	int			n;
	FbWindow	w[RL_MAX_WINDOWS];
} FbState;

/*
 * Per backend: the key it last read (by hash, with its table) and the time
 * of that key's newest row then. When a call comes for the same key again,
 * as under a hot key, its rows are dense, so read_state first looks only
 * at the rows since that time for the newest row, and only at the first
 * `probe_us` of the window for the oldest live one. Either bounded scan
 * finds exactly what the unbounded one would, if it finds anything; when it
 * finds nothing (a quiet key, a reset, a hash collision) the unbounded scan
 * follows. So the hint costs a wrong guess one more index descent, and
 * never changes an answer. probe_us adapts to the key's pace: it doubles
 * after a miss and shrinks by a sixteenth after a hit, so that about one
 * probe in twenty misses.
 */
#define PROBE_MIN_US 64
#define PROBE_MAX_US (INT64CONST(1) << 40)

static struct
{
	const FbTable *tbl;
	uint64		keyhash;
	int64		newest_ts;
	int64		probe_us;
} last_read = {NULL, 0, 0, 1000};

/* The key's newest row, looking first since the hint's time if it applies. */
static void
read_newest(FbScan *s, bool hinted, FbEntry *newest)
{
	if (hinted && last_read.newest_ts != PG_INT64_MIN)
	{
		scan_first_range(s, IDX_KEY_TS, BackwardScanDirection,
						 BTGreaterEqualStrategyNumber, last_read.newest_ts,
						 InvalidStrategy, 0, newest);
		if (newest->found)
			return;
	}
	scan_first(s, IDX_KEY_TS, BackwardScanDirection, InvalidStrategy, 0, newest);
}

/*
 * The first row with ts > cutoff among those with ts in (lo, hi] (hi
 * unbounded with InvalidStrategy). Rows at or before cutoff that the scan
 * passes are deleted: there are some only when lo < cutoff, which only a
 * caller holding the key's lock asks for.
 */
static void
first_live(FbScan *s, int64 lo, StrategyNumber hi_strategy, int64 hi, int64 cutoff,
		   FbEntry *e)
{
	IndexScanDesc scan = scan_begin_range(s, IDX_KEY_TS, BTGreaterStrategyNumber, lo,
										  hi_strategy, hi);

	while (scan_next(s, scan, ForwardScanDirection, e) && e->ts <= cutoff)
		try_delete(s, &e->tid);
	index_endscan(scan);
}

/*
 * The oldest row after cutoff, looking first just after it if hinted.
 *
 * A writer passes clean_from, the newest row's time less the longest window:
 * the scan then starts there, and deletes the rows it passes on its way to
 * the first live one, which are the rows that left the window since the
 * newest row was written. That is the same descent that finds the first
 * live row, instead of one more. It starts at clean_from rather than at the
 * key's first index entry because what lies before are the entries of rows
 * that earlier calls deleted, which stay in the index until a VACUUM:
 * stepping over them on every call would make each call slower than the
 * last. An expired row older than clean_from (left by a call with a longer
 * window) harms no lookup, and sweep() deletes it by its expiry. A call
 * that is then denied keeps its deletions, and may still give up the key's
 * lock before commit: no lookup reads an expired row, which is also why a
 * sweep may delete one without the lock.
 */
static void
read_first(FbScan *s, bool hinted, int64 cutoff, int64 clean_from, FbEntry *first)
{
	int64		lo = Min(clean_from, cutoff);

	if (hinted && cutoff < PG_INT64_MAX - last_read.probe_us)
	{
		first_live(s, lo, BTLessEqualStrategyNumber, cutoff + last_read.probe_us,
				   cutoff, first);
		if (first->found)
		{
			last_read.probe_us = Max(last_read.probe_us - last_read.probe_us / 16, PROBE_MIN_US);
			return;
		}
		last_read.probe_us = Min(last_read.probe_us * 2, PROBE_MAX_US);
	}
	first_live(s, lo, InvalidStrategy, 0, cutoff, first);
}

/* A key's head: its newest row's time and running total (see log_attempt). */
typedef struct FbHead
{
	bool		found;
	ItemPointerData tid;
	int64		ts;
	int64		total;
	int64		expires;
} FbHead;

/*
 * Read the key's state for every window. clean: the caller may write, so
 * the scan for the longest window's first live row also deletes the rows
 * that left it (read_first). head: the key's head as read just before, or
 * NULL to find the newest row in the log itself.
 *
 * Returns false if what was read is not a state the key ever had: the log
 * holds a row newer than the head (the head was read before that row's
 * admission committed), or an rl_reset committed between the reads. The
 * caller then reads again.
 */
static bool
read_state(FbScan *s, const RlArgs *args, bool clean, const FbHead *head,
		   const OutageSeed *seed, FbState *st)
{
	uint64		h = key_hash(s->key);
	bool		hinted = last_read.tbl == s->tbl && last_read.keyhash == h;
	int64		clean_from = PG_INT64_MAX;

	st->now = fallback_now();
	if (args->algorithm == ALGO_MULTI_LOG)
	{
		st->n = args->nwin;
		for (int i = 0; i < st->n; i++)
		{
			st->w[i].lim = args->lims[i];
			st->w[i].win = args->wins_us[i];
		}
	}
	else
	{
		st->n = 1;
		st->w[0].lim = args->lim;
		st->w[0].win = args->win_us;
	}
	st->maxwin = 0;
	for (int i = 0; i < st->n; i++)
		st->maxwin = Max(st->maxwin, st->w[i].win);
	if (head)
	{
		memset(&st->newest, 0, sizeof(FbEntry));
		st->newest.found = head->found;
		st->newest.ts = head->ts;
		st->newest.total = head->total;
	}
	else
		read_newest(s, hinted, &st->newest);
	if (clean && st->newest.found)
		clean_from = st->newest.ts - st->maxwin - 1;
	for (int i = 0; i < st->n; i++)
	{
		FbWindow   *w = &st->w[i];
		FbEntry		first;		/* oldest row inside the window */

		w->cutoff = st->now - w->win;
		w->seeded = 0;
		w->seed_frees = 0;
		if (seed && seed->found)
		{
			/*
			 * What Redis counted (outage.c): its units stay spent until the
			 * newest of them leaves the window, and this database's rows
			 * that a call had carried into Redis before Redis answered it
			 * are among them, so only rows from then on are counted here
			 * (one admitted in that very microsecond, or carried by a later
			 * call, may be counted twice: an over-count). A peek's answer,
			 * or another database's, carried none of this database's rows:
			 * it moves the units, never that time (outage.c).
			 * Rows between the window's start and that answer are left in
			 * place (no clean-up from a raised cutoff): if the answer is
			 * forgotten, they count again.
			 */
			if (seed->frees_at > st->now)
			{
				w->seeded = seed->units;
				w->seed_frees = seed->frees_at;
			}
			if (seed->carried_to != PG_INT64_MIN && seed->carried_to - 1 > w->cutoff)
				w->cutoff = seed->carried_to - 1;
		}
		read_first(s, hinted, w->cutoff,
				   w->win == st->maxwin && w->cutoff == st->now - w->win ? clean_from : PG_INT64_MAX,
				   &first);

		/*
		 * A peek holds no key lock, so a writer may commit between the
		 * scans: a first row newer than the newest means the newest must be
		 * read again (totals only grow, so it is then at least first's).
		 * Newer by time with a smaller total means an rl_reset restarted
		 * the totals in between: the same.
		 */
		if (first.found && (!st->newest.found || first.total > st->newest.total ||
							first.ts > st->newest.ts))
		{
			if (head)
				return false;
			read_newest(s, hinted, &st->newest);
		}
		w->used = first.found ? 1 : 0; /* marks a window with a live row */
		w->base = first.found ? first.total - first.cost : -1;
	}
	/* Only now is the newest row final. */
	for (int i = 0; i < st->n; i++)
	{
		FbWindow   *w = &st->w[i];

		if (w->used)
		{
			/*
			 * A live row's units are in the newest total unless an
			 * rl_reset came between the two reads: then read again.
			 */
			w->used = st->newest.total - w->base;
			if (w->used <= 0)
				return false;
		}
		else
			w->base = st->newest.found ? st->newest.total : 0;
		w->used += w->seeded;
	}
	st->now_after = fallback_now();
	last_read.tbl = s->tbl;
	last_read.keyhash = h;
	last_read.newest_ts = st->newest.found ? st->newest.ts : PG_INT64_MIN;
	return true;
}

/*
 * slidewin.test_pause_lock: wait until no session holds the advisory lock
 * pg_advisory_lock(N), so that an isolation test can change a key between a
 * call's lock-free reads and its decision. Off (0) unless a superuser sets it.
 */
static void
test_pause(void)
{
	LOCKTAG		tag;

	if (slidewin_test_pause_lock == 0)
		return;
	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, 0, (uint32) slidewin_test_pause_lock, 1);
	(void) LockAcquire(&tag, ShareLock, false, false);
	LockRelease(&tag, ShareLock, false);
}

/*
 * When window w next admits `need` more units: the expiry of the live row
 * whose running total reaches base + need, found in one descent of the
 * (key, total) index. Rows before the window all have totals <= base, so
 * the row found is a live one, no newer than the newest row read.
 *
 * Returns false if the log no longer holds such a row: the state was read
 * without a lock, and an rl_reset (or anything else that rewrote the key)
 * committed since. The caller then reads the key again.
 */
static bool
retry_after(FbScan *s, const FbState *st, const FbWindow *w, int64 need, int64 *wait)
{
	FbEntry		e;

	scan_first(s, IDX_KEY_TOTAL, ForwardScanDirection, BTGreaterEqualStrategyNumber,
			   w->base + need, &e);
	if (!e.found || e.ts <= w->cutoff || e.ts > st->newest.ts)
		return false;
	*wait = e.ts + w->win - st->now;
	return true;
}

/*
 * When window w frees `need` units, counting what Redis had counted (all of
 * it freed at once, at seed_frees) as well as the rows: the sooner of
 * freeing them from the rows alone, if they hold that many, and of waiting
 * for Redis's units and then for the rest from the rows. False as for
 * retry_after.
 */
static bool
window_wait(FbScan *s, const FbState *st, const FbWindow *w, int64 need, int64 *wait)
{
	int64		rows = w->used - w->seeded;
	int64		best = PG_INT64_MAX;

	if (need <= rows && !retry_after(s, st, w, need, &best))
		return false;
	if (w->seeded > 0)
	{
		int64		t = w->seed_frees - st->now;
		int64		rest = need - w->seeded;

		if (rest > 0 && rest <= rows)
		{
			int64		t_rows;

			if (!retry_after(s, st, w, rest, &t_rows))
				return false;
			t = Max(t, t_rows);
		}
		best = Min(best, t);
	}
	*wait = best;
	return true;
}

/*
 * Decide a call of `cost` against every window: allowed only if each admits
 * it. remaining and used describe the most constraining window, retry_us
 * the longest wait; lim and win_us name the deciding window: the first
 * that denies, else the most constraining one. Returns false if the state
 * read is no longer the key's (see retry_after): the caller reads again and
 * decides anew.
 */
static bool
decide(FbScan *s, const FbState *st, int64 cost, bool peek, RlOutcome *o)
{
	bool		first = true;

	test_pause();

	o->allowed = true;
	o->retry_us = 0;
	for (int i = 0; i < st->n; i++)
	{
		const FbWindow *w = &st->w[i];
		int64		rem = w->lim - w->used - cost;
		bool		denies = rem < 0;
		bool		newmin;

		if (denies)
		{
			int64		wait;

			if (!window_wait(s, st, w, w->used + cost - w->lim, &wait))
				return false;
			o->retry_us = Max(o->retry_us, wait);
		}
		/* A peek reports the units left, not those left after a call. */
		if (denies || peek)
			rem = Max(w->lim - w->used, 0);
		newmin = first || rem < o->remaining;
		if (newmin)
		{
			o->remaining = rem;
			o->used = w->used;
		}
		if (first || (o->allowed && (denies || newmin)))
		{
			o->lim = w->lim;
			o->win_us = w->win;
		}
		if (denies)
			o->allowed = false;
		first = false;
	}
	return true;
}

/*
 * What index_insert needs to know of an index: it depends only on the
 * index's definition, so it is built once per backend instead of at every
 * insert, and dropped with the OIDs when a relcache invalidation names one
 * of our relations (lookup_oids).
 */
static IndexInfo *
index_info(FbScan *s, FbIndex i)
{
	IndexInfo **info = &s->tbl->index_infos[i];

	if (*info == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		*info = BuildIndexInfo(s->idx[i]);
		MemoryContextSwitchTo(old);
	}
	return *info;
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
					 UNIQUE_CHECK_NO, false, index_info(s, i));
	}
	heap_freetuple(tup);
}

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
static void
head_read(FbScan *h, int16 kind, FbHead *hd)
{
	IndexScanDesc scan = scan_begin_kind(h, kind);
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
static TM_Result
head_write(FbScan *h, int16 kind, const FbHead *old, int64 ts, int64 total, int64 expires)
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
				 UNIQUE_CHECK_NO, false, index_info(h, IDX_KEY_TS));
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
	if (n == 0 || !oids_valid || RecoveryInProgress())
		return;
	if (XactLastRecEnd != 0 && SyncRepRequested() &&
		SyncRepStandbyNames != NULL && SyncRepStandbyNames[0] != '\0')
		return;
	rel = try_table_open(tables[TBL_HEAD].relid, RowExclusiveLock);
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

static void
heads_xact_callback(XactEvent event, void *arg)
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

static bool
sweep_heads(FbScan *h, int64 cutoff, int npages)
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

/* Calls per backend, so that a page of heads is swept at the first and every 16th. */
static uint32 head_sweep_clock = 0;

static void
log_attempt(FbTableId t, const RlArgs *args, RlOutcome *o)
{
	FbScan		s;
	FbScan		hs;
	FbState		st;
	FbHead		hd;
	text	   *key = stored_key(args);
	int16		kind = (t == TBL_LOG) ? 1 : 2;
	LOCKTAG		tag;
	bool		locked = false;
	bool		wrote = false;
	int64		now;
	OutageSeed	seed;

	(void) outage_seed(args, &seed);
	scan_open(&s, t, key, RowExclusiveLock);
	scan_open(&hs, TBL_HEAD, key, RowExclusiveLock);
	/* other keys' expired rows go a few at a time, without any lock */
	now = fallback_now();
	sweep(&s, now, SWEEP_PER_CALL);
	if (head_sweep_clock++ % 16 == 0)
		(void) sweep_heads(&hs, now, 1);

	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		head_read(&hs, kind, &hd);
		if (!hd.found && !locked)
		{
			/* a first admission: read again once earlier creators are done */
			lock_key(key, &tag);
			locked = true;
			continue;
		}
		if (!read_state(&s, args, true, hd.found ? &hd : NULL, &seed, &st) ||
			!decide(&s, &st, args->cost, false, o))
			continue;
		o->store = "fallback";
		o->recorded_ts = -1;	/* rows go with an aborted transaction anyway */
		o->shadowed = false;
		o->known = true;
		o->reset_at_us = Max(st.newest.ts + st.maxwin, st.w[0].seed_frees);
		if (o->allowed || args->force)
		{
			int64		ts = st.now_after;
			int64		total = st.newest.found ? st.newest.total : 0;

			if (st.newest.found && ts <= st.newest.ts)
				ts = st.newest.ts + 1;
			if (total >= TOTAL_RESTART && st.newest.ts <= st.now - st.maxwin)
				total = 0;
			/*
			 * The claim: fails if another admission committed since the read.
			 * A key without a head gets one only if it has a row in the
			 * window, that is, once it is called again within it: until
			 * then, the key's lock, held until commit, serialises its writers.
			 */
			if (hd.found)
			{
				if (head_write(&hs, kind, &hd, ts, total + args->cost, ts + st.maxwin) != TM_Ok)
					continue;
			}
			else if (st.newest.found && st.newest.ts > st.now - st.maxwin)
				(void) head_write(&hs, kind, &hd, ts, total + args->cost, ts + st.maxwin);
			insert_row(&s, ts, total + args->cost, args->cost, ts + st.maxwin);
			/* Redis must learn of it once it answers again (outage.c) */
			if (t == TBL_LOG)
				fallback_carry_add(args, ts, args->cost, ts + st.maxwin);
			last_read.newest_ts = ts;
			o->entry_ts = ts;
			/* Later calls in this same command must see it. */
			CommandCounterIncrement();
			wrote = true;

			if (!o->allowed)
				o->remaining = 0;
			/* the newest entry: what Redis had counted frees no later */
			o->reset_at_us = ts + st.maxwin;
			o->used += args->cost;
		}
		break;
	}
	scan_close(&hs);
	scan_close(&s);

	/*
	 * The key's lock serialises the creation of its head only: it is kept
	 * until commit by a call that created one, and given up at once
	 * otherwise (it stays if this transaction took it before).
	 */
	if (locked && !(wrote && !hd.found))
		LockRelease(&tag, ExclusiveLock, false);
}

static void
log_peek(FbTableId t, const RlArgs *args, RlOutcome *o)
{
	FbScan		s;
	FbState		st;
	int64		used_longest = 0;
	OutageSeed	seed;

	(void) outage_seed(args, &seed);
	scan_open(&s, t, stored_key(args), AccessShareLock);
	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		if (read_state(&s, args, false, NULL, &seed, &st) &&
			decide(&s, &st, args->cost, true, o))
			break;
	}
	for (int i = 0; i < st.n; i++)
		used_longest = Max(used_longest, st.w[i].used);
	o->store = "fallback";
	o->known = true;
	o->recorded_ts = -1;
	o->shadowed = false;
	o->reset_at_us = used_longest > 0 ?
		Max(st.newest.ts + st.maxwin, st.w[0].seed_frees) : st.now;
	scan_close(&s);
}

/* ---------------------------------------------------------------------
 * The counting algorithms: one row (key, algo, s, a, b, expires) per key
 * and algorithm in rl_fallback_state, replaced on each write. The same
 * arithmetic as their Redis scripts (scripts.c), on the PostgreSQL clock.
 *   fixed_window:    s = window start, a = units in it
 *   sliding_counter: s = current bucket start, a = its units, b = previous bucket's
 *   token_bucket:    a = theoretical arrival time (us, fractional)
 * ---------------------------------------------------------------------
 */

/* Rows of one key a reader may see at once: the live one plus expired ones
 * that sweeps are deleting; more would mean sweeps are failing for good. */
#define ST_MAX_SEEN 16

typedef struct StRow
{
	bool		found;			/* a live row was seen; s, a, b are its values */
	int64		s;
	double		a;
	double		b;
	int			nseen;			/* every row seen, live or expired */
	ItemPointerData seen[ST_MAX_SEEN];
} StRow;

/*
 * The key's state: the one live row (expires > now) of (key, algo).
 *
 * Writers hold the key's lock and replace the row, but a sweep deletes
 * expired rows without that lock, so an expired row can still be visible
 * (SnapshotSelf shows a row whose deleter has not committed, and a sweep
 * that aborts brings it back) next to the row that replaced it. An expired
 * row says nothing a missing row would not (every algorithm's window or
 * bucket has moved past it), so readers skip it, and no key is ever
 * readable in two versions. Should two live rows ever be visible (a sweep
 * whose clock ran microseconds ahead of the writer's), the state only moves
 * forward, so the greater (s, a) is the newer one. Every row seen is listed
 * in *r so that the writer can delete them all.
 */
static void
state_read(FbScan *s, int algo, int64 now, StRow *r)
{
	IndexScanDesc scan = scan_begin_kind(s, (int16) algo);
	bool		isnull;

	memset(r, 0, sizeof(StRow));
	while (index_getnext_slot(scan, ForwardScanDirection, s->slot))
	{
		int64		rs = DatumGetInt64(slot_getattr(s->slot, ST_ATT_S, &isnull));
		double		ra = DatumGetFloat8(slot_getattr(s->slot, ST_ATT_A, &isnull));
		double		rb = DatumGetFloat8(slot_getattr(s->slot, ST_ATT_B, &isnull));
		int64		rexp = DatumGetInt64(slot_getattr(s->slot, ST_ATT_EXPIRES, &isnull));

		if (r->nseen < ST_MAX_SEEN)
			r->seen[r->nseen++] = s->slot->tts_tid;
		if (rexp <= now)
			continue;
		if (!r->found || rs > r->s || (rs == r->s && ra > r->a))
		{
			r->found = true;
			r->s = rs;
			r->a = ra;
			r->b = rb;
		}
	}
	index_endscan(scan);
}

/*
 * Replace the key's state. The caller holds the key's lock, so no other
 * writer can be deleting these rows; a delete that fails is a sweep's, on
 * an expired row that readers skip anyway.
 */
static void
state_write(FbScan *s, int algo, const StRow *old, int64 st, double a, double b, int64 expires)
{
	Datum		values[6];
	bool		nulls[6] = {false};
	HeapTuple	tup;
	Datum		ivalues[2];
	bool		inulls[2] = {false, false};

	for (int i = 0; i < old->nseen; i++)
		(void) try_delete(s, (ItemPointer) &old->seen[i]);
	values[ST_ATT_KEY - 1] = PointerGetDatum(s->key);
	values[ST_ATT_ALGO - 1] = Int16GetDatum((int16) algo);
	values[ST_ATT_S - 1] = Int64GetDatum(st);
	values[ST_ATT_A - 1] = Float8GetDatum(a);
	values[ST_ATT_B - 1] = Float8GetDatum(b);
	values[ST_ATT_EXPIRES - 1] = Int64GetDatum(expires);
	tup = heap_form_tuple(RelationGetDescr(s->rel), values, nulls);
	simple_heap_insert(s->rel, tup);
	ivalues[0] = values[ST_ATT_KEY - 1];
	ivalues[1] = values[ST_ATT_ALGO - 1];
	index_insert(s->idx[IDX_KEY_TS], ivalues, inulls, &tup->t_self, s->rel,
				 UNIQUE_CHECK_NO, false, index_info(s, IDX_KEY_TS));
	ivalues[0] = values[ST_ATT_EXPIRES - 1];
	index_insert(s->idx[IDX_EXPIRES], ivalues, inulls, &tup->t_self, s->rel,
				 UNIQUE_CHECK_NO, false, index_info(s, IDX_EXPIRES));
	heap_freetuple(tup);
	CommandCounterIncrement();
}

/* Euclidean remainder: window starts are aligned even before the epoch. */
static int64
floor_mod(int64 a, int64 b)
{
	int64		m = a % b;

	return m < 0 ? m + b : m;
}

/*
 * One call of a counting algorithm. peek: decide for cost, write nothing.
 * Otherwise write when admitted, or when forced (shadow mode).
 */
static void
counter_call(FbScan *s, const RlArgs *args, int64 cost, bool peek, RlOutcome *o)
{
	int			algo = (int) args->algorithm;
	int64		now = fallback_now();
	int64		lim = args->lim;
	int64		win = args->win_us;
	int64		start = now - floor_mod(now, win);
	bool		write = false;
	StRow		r;
	int64		ns = 0;
	double		na = 0,
				nb = 0;
	int64		expires = 0;
	int64		carry_until = now + win;
	OutageSeed	seed;
	bool		live;

	/*
	 * What Redis last counted for the key (outage.c) is added to this
	 * store's own state for the decision, and not written into it (the
	 * token bucket's, a maximum, may be): as if Redis's units had all come
	 * when this server last asked, the latest they could have (see
	 * doc/failure-modes.md).
	 */
	live = outage_seed(args, &seed) && seed.frees_at > now;
	state_read(s, algo, now, &r);
	o->store = "fallback";
	o->known = true;
	o->recorded_ts = -1;
	o->shadowed = false;
	o->retry_us = 0;

	if (args->algorithm == ALGO_FIXED_WINDOW)
	{
		int64		reset = start + win;
		int64		own = (r.found && r.s == start) ? (int64) r.a : 0;
		int64		n = own;

		if (live && seed.seen_at - floor_mod(seed.seen_at, win) == start)
			n += seed.units;
		o->allowed = (n + cost <= lim);
		write = !peek && (o->allowed || args->force);
		o->remaining = Max(lim - n - (write ? cost : 0), 0);
		o->used = n + (write ? cost : 0);
		o->retry_us = o->allowed ? 0 : reset - now;
		o->reset_at_us = (o->used > 0) ? reset : now;
		ns = start;
		na = (double) (own + cost);
		expires = reset;
		carry_until = reset;
	}
	else if (args->algorithm == ALGO_SLIDING_COUNTER)
	{
		double		c = 0,
					p = 0,
					own_c,
					own_p,
					est;
		int64		e;

		if (r.found)
		{
			if (r.s == start)
				c = r.a, p = r.b;
			else if (r.s == start - win)
				p = r.a;
			else if (r.s > start)
				start = r.s, c = r.a, p = r.b;
		}
		own_c = c;
		own_p = p;
		if (live)
		{
			int64		sb = seed.seen_at - floor_mod(seed.seen_at, win);

			if (sb == start)
				c += seed.units;
			else if (sb == start - win)
				p += seed.units;
		}
		e = Max(now - start, 0);
		est = p * (double) (win - e) / (double) win + c;
		o->allowed = (est + cost <= lim);
		if (!o->allowed)
		{
			if (c + cost <= lim && p > 0)
				o->retry_us = (int64) ceil(win - (lim - c - cost) * (double) win / p) - e;
			else
			{
				double		cn = c + (args->force && !peek ? cost : 0);
				int64		e2 = 0;

				if (cost >= lim)
					e2 = win;
				else if (cn > 0)
					e2 = (int64) ceil(win - (lim - cost) * (double) win / cn);
				o->retry_us = (win - e) + Max(e2, 0);
			}
			o->retry_us = Max(o->retry_us, 1);
		}
		write = !peek && (o->allowed || args->force);
		if (write)
		{
			est += cost;
			c += cost;
		}
		o->remaining = Max((int64) floor(lim - est), 0);
		if (!o->allowed)
			o->remaining = write ? 0 : Max((int64) floor(lim - est), 0);
		o->used = (int64) ceil(est);
		o->reset_at_us = c > 0 ? start + 2 * win : p > 0 ? start + win : now;
		ns = start;
		na = own_c + (write ? cost : 0);
		nb = own_p;
		expires = start + 2 * win;
		carry_until = expires;
	}
	else						/* ALGO_TOKEN_BUCKET */
	{
		double		t = (double) win / (double) lim;
		/*
		 * This store's bucket stands where Redis's stood, if that is
		 * later: a maximum, so taking it again at every call, and writing
		 * what was built on it, never counts Redis's units twice.
		 */
		double		tat = r.found ? Max(r.a, (double) now) : (double) now;
		double		nt;

		if (live)
			tat = Max(tat, (double) seed.frees_at);
		nt = tat + cost * t;

		o->allowed = (nt - now <= win + 1e-3);
		write = !peek && (o->allowed || args->force);
		o->used = (int64) ceil((tat - now) / t - 1e-9) + (write ? cost : 0);
		if (o->allowed)
			o->remaining = Max((int64) floor((win - ((write ? nt : tat) - now)) / t + 1e-9), 0);
		else
		{
			o->remaining = write ? 0 : Max((int64) floor((win - (tat - now)) / t + 1e-9), 0);
			o->retry_us = Max((int64) ceil(nt - win - now - 1e-3), 1);
		}
		o->reset_at_us = (int64) ceil(write ? nt : tat);
		na = nt;
		expires = (int64) ceil(na);
		/* carried with how far the tat then stood (lua_counter_import) */
		carry_until = expires;
	}
	if (write)
	{
		state_write(s, algo, &r, ns, na, nb, expires);
		/* Redis must learn of it once it answers again (outage.c) */
		if (o->allowed || args->force)
			fallback_carry_add(args, now, cost, carry_until);
	}
}

static void
counter_attempt(const RlArgs *args, RlOutcome *o)
{
	FbScan		s;
	text	   *key = stored_key(args);
	LOCKTAG		tag;

	lock_key(key, &tag);
	scan_open(&s, TBL_STATE, key, RowExclusiveLock);
	counter_call(&s, args, args->cost, false, o);
	if (o->allowed || args->force)
		sweep(&s, fallback_now(), SWEEP_PER_CALL);
	scan_close(&s);
	if (!o->allowed && !args->force)
		LockRelease(&tag, ExclusiveLock, false);
}

static void
counter_peek(const RlArgs *args, RlOutcome *o)
{
	FbScan		s;

	scan_open(&s, TBL_STATE, stored_key(args), AccessShareLock);
	counter_call(&s, args, args->cost, true, o);
	scan_close(&s);
}

/*
 * A call on a key that the table of blocks (fallback_block.c) says is
 * blocked is answered like a peek, so that it records nothing, and then
 * denied until the block ends; in shadow mode it is recorded, as a denial
 * is.
 */
void
fallback_attempt(const RlArgs *args, RlOutcome *o)
{
	int64		block_us = fallback_block_left(args);

	if (block_us > 0 && !args->force)
		fallback_peek_unblocked(args, o);
	else if (args->algorithm == ALGO_SLIDING_LOG)
		log_attempt(TBL_LOG, args, o);
	else if (args->algorithm == ALGO_MULTI_LOG)
		log_attempt(TBL_MLOG, args, o);
	else
		counter_attempt(args, o);
	if (block_us > 0)
		fallback_block_outcome(block_us, o);
}

void
fallback_peek(const RlArgs *args, RlOutcome *o)
{
	int64		block_us = fallback_block_left(args);

	fallback_peek_unblocked(args, o);
	if (block_us > 0)
		fallback_block_outcome(block_us, o);
}

/*
 * Decide a call of args->cost without recording it: 1 for rl_peek, the
 * call's own for an attempt on a blocked key (its retry_after then counts
 * the limit's wait too).
 */
static void
fallback_peek_unblocked(const RlArgs *args, RlOutcome *o)
{
	if (args->algorithm == ALGO_SLIDING_LOG)
		log_peek(TBL_LOG, args, o);
	else if (args->algorithm == ALGO_MULTI_LOG)
		log_peek(TBL_MLOG, args, o);
	else
		counter_peek(args, o);
}

/*
 * rl_refund of an entry of the fallback store: give back the units of the
 * row (key, ts), if it is still in its window, costs `cost` and was not
 * given back before. The row is deleted, and every newer row of the key and
 * its head lose `cost` from their running totals, so that the units of any
 * window, newest.total - (first.total - first.cost), no longer count it,
 * and a denial's search over (key, total) stays exact. The head keeps its
 * time, so the key's next admission is still later than the row given back
 * and a ticket can never name another row. Writes are made as an admission
 * makes them: under the claim of the key's head (which waits for an
 * admission in progress and fails if one committed since the read), or,
 * for a key without a head, under the key's lock held until commit. Like
 * every fallback write, it commits or aborts with the transaction. Returns
 * whether units were given back; *carried says whether the row's admission
 * had been carried into Redis (its carry row gone), where the caller must
 * give it back too.
 */
bool
fallback_refund(const RlArgs *args, int64 ts, int64 cost, int64 win_us, bool *carried)
{
	FbTableId	t = args->algorithm == ALGO_MULTI_LOG ? TBL_MLOG : TBL_LOG;
	int16		kind = (t == TBL_LOG) ? 1 : 2;
	text	   *key = stored_key(args);
	FbScan		s;
	FbScan		hs;
	FbHead		hd;
	FbEntry		e;
	LOCKTAG		tag;
	bool		locked = false;
	bool		given = false;

	*carried = false;
	scan_open(&s, t, key, RowExclusiveLock);
	scan_open(&hs, TBL_HEAD, key, RowExclusiveLock);
	for (;;)
	{
		IndexScanDesc scan;
		FbEntry		later;
		FbEntry    *moved = NULL;
		int64	   *expires = NULL;
		int			nmoved = 0;
		int			maxmoved = 0;

		CHECK_FOR_INTERRUPTS();
		head_read(&hs, kind, &hd);
		if (!hd.found && !locked)
		{
			lock_key(key, &tag);
			locked = true;
			continue;
		}
		scan_first_range(&s, IDX_KEY_TS, ForwardScanDirection,
						 BTGreaterEqualStrategyNumber, ts, BTLessEqualStrategyNumber, ts, &e);
		if (!e.found || e.cost != cost || e.ts <= fallback_now() - win_us)
			break;
		if (hd.found &&
			head_write(&hs, kind, &hd, hd.ts, hd.total - cost, hd.expires) != TM_Ok)
			continue;

		/* Nobody else writes the key now: move the newer rows down. */
		scan = scan_begin(&s, IDX_KEY_TS, BTGreaterStrategyNumber, ts);
		while (scan_next(&s, scan, ForwardScanDirection, &later))
		{
			bool		isnull;

			if (nmoved == maxmoved)
			{
				maxmoved = Max(16, maxmoved * 2);
				moved = moved ? repalloc(moved, maxmoved * sizeof(FbEntry)) :
					palloc(maxmoved * sizeof(FbEntry));
				expires = expires ? repalloc(expires, maxmoved * sizeof(int64)) :
					palloc(maxmoved * sizeof(int64));
			}
			expires[nmoved] = DatumGetInt64(slot_getattr(s.slot, FB_ATT_EXPIRES, &isnull));
			moved[nmoved++] = later;
		}
		index_endscan(scan);

		/*
		 * A row deleted by someone else meanwhile can only have been swept,
		 * having left its window: its units no longer count, and moving the
		 * newer rows down changes no window's units either.
		 */
		(void) try_delete(&s, &e.tid);
		if (t == TBL_LOG)
			*carried = !fallback_carry_forget(args, ts);
		for (int i = 0; i < nmoved; i++)
			if (try_delete(&s, &moved[i].tid))
				insert_row(&s, moved[i].ts, moved[i].total - cost, moved[i].cost, expires[i]);
		CommandCounterIncrement();
		given = true;
		break;
	}
	scan_close(&hs);
	scan_close(&s);
	if (locked && !given)
		LockRelease(&tag, ExclusiveLock, false);
	return given;
}

/* Forget the key in every table, whatever the algorithm. */
void
fallback_reset(const RlArgs *args)
{
	text	   *key = stored_key(args);
	LOCKTAG		tag;

	lock_key(key, &tag);
	for (int t = 0; t < TBL_COUNT; t++)
	{
		FbScan		s;

		scan_open(&s, (FbTableId) t, key, RowExclusiveLock);
		delete_key(&s);
		scan_close(&s);
	}
	(void) fallback_carry_forget(args, -1);
	outage_forget(args);
	CommandCounterIncrement();
}

/*
 * For outage.c: the lock a counting algorithm's admissions of the key are
 * written under, until their commit; taken here until fallback_unlock_key.
 */
void
fallback_lock_key(const RlArgs *args, LOCKTAG *tag)
{
	lock_key(stored_key(args), tag);
}

/*
 * The same lock, waited for at most timeout_ms, interruptibly, and never
 * queued for (no deadlock can involve it): false if it was not had.
 */
bool
fallback_try_lock_key(const RlArgs *args, LOCKTAG *tag, int timeout_ms)
{
	uint64		h = key_hash(stored_key(args));
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);

	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (h >> 32), (uint32) h,
						 FALLBACK_LOCK_CLASS);
	for (;;)
	{
		if (LockAcquire(tag, ExclusiveLock, false, true) != LOCKACQUIRE_NOT_AVAIL)
			return true;
		if (GetCurrentTimestamp() >= deadline)
			return false;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 1, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

void
fallback_unlock_key(LOCKTAG *tag)
{
	LockRelease(tag, ExclusiveLock, false);
}

/*
 * For the table of blocks (fallback_block.c): the key as this store keeps
 * it, its clock, and a relation of the extension that may be missing (the
 * table of blocks came with 1.7; a database not yet updated has none).
 */
text *
fallback_stored_key(const RlArgs *args)
{
	return stored_key(args);
}

int64
fallback_clock(void)
{
	return fallback_now();
}

Oid
fallback_relid_if_any(const char *relname)
{
	Oid			ext = get_extension_oid("slidewin", true);

	if (!OidIsValid(ext))
		return InvalidOid;
	return get_relname_relid(relname, extension_schema(ext));
}
