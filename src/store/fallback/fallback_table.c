/*-------------------------------------------------------------------------
 *
 * fallback_table.c
 *		The fallback store's tables: finding them and their indexes, the
 *		store's clock and stored keys, the key's lock, and the index scans,
 *		deletes and inserts that the rest of the store is built from.
 *
 * Every read here uses SnapshotSelf and every write goes through heap and
 * index calls, not SQL (see the rules at the head of fallback.c). This file
 * must not decide a call, know an algorithm, or talk to Redis.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "catalog/index.h"
#include "catalog/pg_collation_d.h"
#include "catalog/pg_extension.h"
#include "commands/extension.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/bufmgr.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"

#include "compat.h"
#include "fallback_table_int.h"
#include "settings.h"
#include "shmem_parts.h"

/* Distinguishes our lock tags from user advisory locks (which use 1 and 2). */
#define FALLBACK_LOCK_CLASS 0x5357
#define CARRY_LOCK_CLASS 0x5343


FbTable fallback_tables[TBL_COUNT] = {
	{"rl_fallback_log", {"rl_fallback_log_key_ts", "rl_fallback_log_key_total", "rl_fallback_log_expires"}, FB_NATTS},
	{"rl_fallback_mlog", {"rl_fallback_mlog_key_ts", "rl_fallback_mlog_key_total", "rl_fallback_mlog_expires"}, FB_NATTS},
	{"rl_fallback_state", {"rl_fallback_state_key", NULL, "rl_fallback_state_expires"}, 6},
	{"rl_fallback_head", {"rl_fallback_head_key", NULL, NULL}, HD_NATTS},
};

bool fallback_oids_valid = false;

static void
invalidate_oids(Datum arg, Oid relid)
{
	for (int t = 0; t < TBL_COUNT; t++)
	{
		bool		ours = (relid == InvalidOid || relid == fallback_tables[t].relid);

		for (int i = 0; i < IDX_COUNT; i++)
			ours = ours || relid == fallback_tables[t].index_oids[i];
		if (ours)
			fallback_oids_valid = false;
	}
}

/*
 * Shared by every backend of the server (see "Skipping a sweep" below): per
 * table, the least lead of a new row's expiry over its writer's clock, of
 * any row written since the server started, in any database. It only goes
 * down. Without shared_preload_libraries it is absent, and
 * every call sweeps, as before.
 */
typedef struct SweepShared
{
	pg_atomic_uint64 min_ahead[TBL_COUNT];
	pg_atomic_uint32 carry_block;	/* the next heap page of the carry sweep */
} SweepShared;

static SweepShared *sweep_shared = NULL;

static Size
sweep_shmem_size(void)
{
	return sizeof(SweepShared);
}

static void
sweep_shmem_attach(void *p, bool found)
{
	sweep_shared = p;
	/*
	 * Only the logs' writers note their lead (fallback_note_lead): the
	 * other tables keep 0, which never lets a sweep be skipped.
	 */
	if (!found)
		for (int t = 0; t < TBL_COUNT; t++)
			pg_atomic_init_u64(&sweep_shared->min_ahead[t],
							   (uint64) (t == TBL_LOG || t == TBL_MLOG ? PG_INT64_MAX : 0));
	if (!found)
		pg_atomic_init_u32(&sweep_shared->carry_block, 0);
}

/*
 * The next page of rl_fallback_carry for a sweep of ended rows to read, of
 * a table of nblocks pages (> 0): one cursor shared by the server's
 * backends, so that together they go round the table page by page (in any
 * database: a cursor past a smaller table's end starts it again at its
 * first page). Without shared_preload_libraries, each backend keeps its own.
 */
BlockNumber
fallback_carry_sweep_block(BlockNumber nblocks)
{
	static uint32 mine = 0;
	uint32		cur;

	if (sweep_shared == NULL)
	{
		cur = mine < nblocks ? mine : 0;
		mine = cur + 1;
		return cur;
	}
	cur = pg_atomic_read_u32(&sweep_shared->carry_block);
	for (;;)
	{
		uint32		pick = cur < nblocks ? cur : 0;

		if (pg_atomic_compare_exchange_u32(&sweep_shared->carry_block, &cur, pick + 1))
			return pick;
	}
}

static const ShmemPart sweep_shmem_part = {"slidewin fallback sweeps", sweep_shmem_size, NULL,
sweep_shmem_attach};

void
fallback_table_init(void)
{
	CacheRegisterRelcacheCallback(invalidate_oids, (Datum) 0);
	slidewin_shmem_register(&sweep_shmem_part);
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

	if (fallback_oids_valid)
		return;
	ext = extension_oid();
	nsp = extension_schema(ext);
	for (int t = 0; t < TBL_COUNT; t++)
	{
		for (int i = 0; i < IDX_COUNT; i++)
		{
			if (fallback_tables[t].index_infos[i])
				pfree(fallback_tables[t].index_infos[i]);
			fallback_tables[t].index_infos[i] = NULL;
		}
		fallback_tables[t].relid = get_relname_relid(fallback_tables[t].relname, nsp);
		missing = missing || !OidIsValid(fallback_tables[t].relid);
		for (int i = 0; i < IDX_COUNT; i++)
		{
			fallback_tables[t].index_oids[i] = fallback_tables[t].index_names[i] ?
				get_relname_relid(fallback_tables[t].index_names[i], nsp) : InvalidOid;
			missing = missing || (fallback_tables[t].index_names[i] && !OidIsValid(fallback_tables[t].index_oids[i]));
		}
	}
	if (missing)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("the slidewin fallback table or one of its indexes is missing"),
				 errhint("Update the extension with ALTER EXTENSION slidewin UPDATE, or recreate it.")));
	fallback_oids_valid = true;
}

int64
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
uint64
fallback_key_hash(text *key)
{
	return hash_bytes_extended((const unsigned char *) VARDATA_ANY(key),
							   VARSIZE_ANY_EXHDR(key), 0);
}

/* Serialise writers of one key until the end of the transaction. */
void
fallback_lock_stored_key(text *key, LOCKTAG *tag)
{
	uint64		h = fallback_key_hash(key);

	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (h >> 32), (uint32) h,
						 FALLBACK_LOCK_CLASS);
	(void) LockAcquire(tag, ExclusiveLock, false, false);
}

void
fallback_scan_open(FbScan *s, FbTableId t, text *key, LOCKMODE mode)
{
	lookup_oids();
	s->tbl = &fallback_tables[t];
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

/*
 * The relations' locks are kept until the transaction ends, as the
 * executor keeps those of the tables a statement touched: releasing each
 * of them on every call cost more than the bulk release at commit, and a
 * transaction's next call on the store finds them already held.
 */
void
fallback_scan_close(FbScan *s)
{
	ExecDropSingleTupleTableSlot(s->slot);
	for (int i = IDX_COUNT - 1; i >= 0; i--)
		if (s->idx[i])
			index_close(s->idx[i], NoLock);
	table_close(s->rel, NoLock);
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
IndexScanDesc
fallback_scan_begin_range(FbScan *s, FbIndex which, StrategyNumber lo_strategy, int64 lo,
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
IndexScanDesc
fallback_scan_begin_kind(FbScan *s, int16 kind)
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

IndexScanDesc
fallback_scan_begin(FbScan *s, FbIndex which, StrategyNumber strategy, int64 bound)
{
	return fallback_scan_begin_range(s, which, strategy, bound, InvalidStrategy, 0);
}

bool
fallback_scan_next(FbScan *s, IndexScanDesc scan, ScanDirection dir, FbEntry *e)
{
	bool		isnull;

	if (!index_getnext_slot(scan, dir, s->slot))
	{
		memset(e, 0, sizeof(FbEntry));
		return false;
	}
	e->found = true;
	e->tid = s->slot->tts_tid;
	if (s->tbl == &fallback_tables[TBL_STATE] || s->tbl == &fallback_tables[TBL_HEAD])
		return true;			/* callers want only the row's tid */
	e->ts = DatumGetInt64(slot_getattr(s->slot, FB_ATT_TS, &isnull));
	e->total = DatumGetInt64(slot_getattr(s->slot, FB_ATT_TOTAL, &isnull));
	e->cost = DatumGetInt64(slot_getattr(s->slot, FB_ATT_COST, &isnull));
	return true;
}

/* The first row found scanning index `which` in `dir` within the bounds. */
void
fallback_scan_first_range(FbScan *s, FbIndex which, ScanDirection dir,
						  StrategyNumber lo_strategy, int64 lo,
						  StrategyNumber hi_strategy, int64 hi, FbEntry *e)
{
	IndexScanDesc scan = fallback_scan_begin_range(s, which, lo_strategy, lo, hi_strategy, hi);

	fallback_scan_next(s, scan, dir, e);
	index_endscan(scan);
}

void
fallback_scan_first(FbScan *s, FbIndex which, ScanDirection dir,
					StrategyNumber strategy, int64 bound, FbEntry *e)
{
	fallback_scan_first_range(s, which, dir, strategy, bound, InvalidStrategy, 0, e);
}

/*
 * Delete a row unless another transaction is deleting it already; never
 * waits. Only used on rows that no lookup needs any more (expired, or of a
 * key being reset), so leaving one to its other deleter is harmless.
 */
bool
fallback_try_delete(FbScan *s, ItemPointer tid)
{
	TM_FailureData tmfd;

	return slidewin_heap_delete(s->rel, tid, GetCurrentCommandId(true), false, &tmfd) == TM_Ok;
}

/*
 * What index_insert needs to know of an index: it depends only on the
 * index's definition, so it is built once per backend instead of at every
 * insert, and dropped with the OIDs when a relcache invalidation names one
 * of our relations (lookup_oids).
 */
IndexInfo *
fallback_index_info(FbScan *s, FbIndex i)
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

/*
 * A row is about to be written at a clock no earlier than its writer's
 * reading now, with an expiry at least `ahead` later (see "Skipping a
 * sweep" below): lower the table's least lead first. The compare-and-
 * exchange is a full barrier, so the store is visible before the row is.
 */
void
fallback_note_lead(FbTableId t, int64 ahead)
{
	pg_atomic_uint64 *least;
	uint64		seen;

	if (sweep_shared == NULL)
		return;
	least = &sweep_shared->min_ahead[t];
	ahead = Max(ahead, 0);
	seen = pg_atomic_read_u64(least);
	while ((int64) seen > ahead)
		if (pg_atomic_compare_exchange_u64(least, &seen, (uint64) ahead))
			break;
}

void
fallback_insert_row(FbScan *s, int64 ts, int64 total, int64 cost, int64 expires)
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
					 UNIQUE_CHECK_NO, false, fallback_index_info(s, i));
	}
	heap_freetuple(tup);
}

/*
 * For the switch (carry.c): the lock a counting algorithm's admissions of the key are
 * written under, until their commit; taken here until fallback_unlock_key.
 */
void
fallback_lock_key(const RlArgs *args, LOCKTAG *tag)
{
	fallback_lock_stored_key(stored_key(args), tag);
}

/*
 * The same lock, waited for at most timeout_ms, interruptibly, and never
 * queued for (no deadlock can involve it): false if it was not had.
 */
static bool
try_lock_class(const RlArgs *args, LOCKTAG *tag, int timeout_ms, uint16 lock_class)
{
	uint64		h = fallback_key_hash(stored_key(args));
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);

	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (h >> 32), (uint32) h, lock_class);
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

bool
fallback_try_lock_key(const RlArgs *args, LOCKTAG *tag, int timeout_ms)
{
	return try_lock_class(args, tag, timeout_ms, FALLBACK_LOCK_CLASS);
}

/*
 * The lock that one carrier of the key at a time holds while it sends the
 * key's rows (carry.c): another lock than the admissions', taken the same
 * way, and released when the rows are sent, not at commit.
 */
bool
fallback_try_lock_carry(const RlArgs *args, LOCKTAG *tag, int timeout_ms)
{
	return try_lock_class(args, tag, timeout_ms, CARRY_LOCK_CLASS);
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

/*
 * The canonical order of several keys' locks (rl_attempt_all): by the lock
 * tag, which is the stored key's hash, then by the stored key's bytes, so
 * that keys whose hashes collide, and share one lock, still come in one
 * order. order[] receives the indexes of args, sorted.
 */
typedef struct KeyRank
{
	uint64		hash;
	text	   *key;
	int			index;
} KeyRank;

static int
key_rank_cmp(const void *a, const void *b)
{
	const KeyRank *x = a;
	const KeyRank *y = b;
	int			lx = VARSIZE_ANY_EXHDR(x->key);
	int			ly = VARSIZE_ANY_EXHDR(y->key);
	int			c;

	if (x->hash != y->hash)
		return x->hash < y->hash ? -1 : 1;
	c = memcmp(VARDATA_ANY(x->key), VARDATA_ANY(y->key), Min(lx, ly));
	if (c != 0)
		return c;
	return lx < ly ? -1 : (lx > ly ? 1 : 0);
}

void
fallback_lock_order(int n, const RlArgs *args, int *order)
{
	KeyRank    *ranks = palloc(n * sizeof(KeyRank));

	for (int i = 0; i < n; i++)
	{
		ranks[i].key = stored_key(&args[i]);
		ranks[i].hash = fallback_key_hash(ranks[i].key);
		ranks[i].index = i;
	}
	qsort(ranks, n, sizeof(KeyRank), key_rank_cmp);
	for (int i = 0; i < n; i++)
	{
		order[i] = ranks[i].index;
		pfree(ranks[i].key);
	}
	pfree(ranks);
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
 * Skipping a sweep. An admitting call sweeps a few expired rows of other
 * keys, and it used to start an index scan for them at every call, even when
 * none could have expired since its backend last looked (many keys with a
 * long window, as at the start of an outage). Now a sweep that found every
 * expired row (it did not stop at its quota) notes, per table: swept_at, the
 * clock it ran at; and next_expiry, the expiry of the first row it saw still
 * live, or its scan's upper bound when none was below it. The scan reaches
 * past now by look_us, at most min_ahead, the least lead of any row's
 * expiry over its writer's clock so far (SweepShared). look_us doubles when
 * the scan found no row in that reach and halves when it did: a btree scan
 * reads every matching entry of the leaf page it lands on, so under a hot
 * key, whose rows expire one after another, a long reach would cost a page
 * of entries at every call for nothing. A later call of this backend at
 * `now` skips the sweep while
 *
 *		swept_at <= now < next_expiry  and  now < swept_at + min_ahead,
 *
 * min_ahead read anew at every call. Why that loses no row:
 *
 * - A row the sweep could see (committed, or this transaction's) and that
 *   no one has deleted since expires at next_expiry or later: it was not
 *   below the scan's start, it was not expired, and the first such row in
 *   the index within the scan's reach gave next_expiry (or there was none
 *   before the reach's end, which next_expiry then is).
 * - A new row (fallback_log_attempt) whose writer read its clock at t >=
 *   swept_at expires at t + lead or later, and its writer lowered
 *   min_ahead to at most that lead before inserting it. So it expires no
 *   sooner than swept_at + min_ahead, when this backend sweeps again. (A
 *   value of min_ahead read just before another backend's store delays at
 *   most that backend's rows, by one call: the next read sees it.) A row
 *   moved by a refund (fallback.c) keeps the expiry of the row it replaces,
 *   whose own writing was covered in the same way, and notes nothing.
 * - A row whose writer read its clock before the sweep but which the
 *   sweep did not see (not yet inserted or committed) may expire before
 *   next_expiry. A sweep that is never skipped passes it too if it expired
 *   before the sweep (swept_to), leaving it to another backend or to the
 *   sweep after an outage; this backend meets it no later than swept_at +
 *   min_ahead.
 *
 * So no expired row stays longer than it did before, except that last
 * kind, which stays at most one min_ahead longer in this backend's view,
 * and the table stays bounded by the live windows as before. A clock that
 * goes back (slidewin.test_now) or a sweep that stopped at its quota sweeps
 * at the next call. Each backend keeps its own swept_at and next_expiry;
 * only min_ahead is shared, and it only goes down (compare-and-exchange),
 * so no lock is needed.
 */
static int64 swept_at[TBL_COUNT];
static int64 next_expiry[TBL_COUNT];
static int64 look_us[TBL_COUNT];

#define LOOK_MIN_US 1000

/*
 * Delete up to `want` rows of any key whose window ended before now, looking
 * at no more than SWEEP_MAX_VISITS candidates. Returns true if it stopped
 * at one of those bounds, that is, if expired rows may remain.
 */
bool
fallback_sweep_rows(FbScan *s, int64 now, int want)
{
	int			t = s->tbl - fallback_tables;
	int64	   *mark = &swept_to[t];
	int			attno = s->tbl == &fallback_tables[TBL_STATE] ? ST_ATT_EXPIRES :
		s->tbl == &fallback_tables[TBL_HEAD] ? HD_ATT_EXPIRES : FB_ATT_EXPIRES;
	IndexScanDesc scan;
	FbEntry		e;
	int			deleted = 0;
	int			visits = 0;
	bool		more = false;
	int64		ahead = PG_INT64_MAX;
	int64		upto = now;
	int64		next;

	if (s->idx[IDX_EXPIRES] == NULL)
		return false;			/* heads: see fallback_sweep_heads */
	if (*mark >= now)
		*mark = PG_INT64_MIN;	/* the clock went back */
	if (sweep_shared != NULL)
	{
		ahead = (int64) pg_atomic_read_u64(&sweep_shared->min_ahead[t]);
		if (*mark != PG_INT64_MIN && swept_at[t] <= now && now < next_expiry[t] &&
			(ahead > PG_INT64_MAX - swept_at[t] || now < swept_at[t] + ahead))
			return false;
		look_us[t] = Min(Max(look_us[t], LOOK_MIN_US), ahead);
		upto = look_us[t] > PG_INT64_MAX - now ? PG_INT64_MAX : now + look_us[t];
	}
	next = upto;
	scan = fallback_scan_begin_range(s, IDX_EXPIRES, BTGreaterStrategyNumber, *mark,
									 BTLessStrategyNumber, upto);
	while (fallback_scan_next(s, scan, ForwardScanDirection, &e))
	{
		bool		isnull;
		int64		expires = DatumGetInt64(slot_getattr(s->slot, attno, &isnull));

		if (expires >= now)
		{
			next = expires;
			break;
		}
		if (fallback_try_delete(s, &e.tid))
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
	{
		*mark = now - 1;
		swept_at[t] = now;
		next_expiry[t] = next;
		if (next < upto)
			look_us[t] /= 2;
		else if (look_us[t] < PG_INT64_MAX / 2)
			look_us[t] *= 2;
	}
	else
		next_expiry[t] = PG_INT64_MIN;
	index_endscan(scan);
	return more;
}
