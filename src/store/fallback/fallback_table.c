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
 * Shared by every backend of the server: for each table swept by heap page
 * (the logs, the counting algorithms' state, and the carry table), the next
 * page a sweep reads (see "Sweeping expired rows" below). Without
 * shared_preload_libraries it is absent, and each backend keeps its own.
 */
typedef struct SweepShared
{
	/* one cursor per table of fallback_tables, then rl_fallback_carry's */
	pg_atomic_uint32 block[TBL_COUNT + 1];
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
	if (!found)
	{
		for (int t = 0; t <= TBL_COUNT; t++)
			pg_atomic_init_u32(&sweep_shared->block[t], 0);
	}
}

/*
 * The next page of a table of nblocks pages (> 0) for a sweep to read,
 * from the cursor `shared` (or this backend's `mine` without shared
 * memory): together the server's backends go round the table page by page,
 * in any database, a cursor past a smaller table's end starting again at
 * its first page.
 */
static BlockNumber
next_sweep_block(pg_atomic_uint32 *shared, uint32 *mine, BlockNumber nblocks)
{
	uint32		cur;

	if (shared == NULL)
	{
		cur = *mine < nblocks ? *mine : 0;
		*mine = cur + 1;
		return cur;
	}
	cur = pg_atomic_read_u32(shared);
	for (;;)
	{
		uint32		pick = cur < nblocks ? cur : 0;

		if (pg_atomic_compare_exchange_u32(shared, &cur, pick + 1))
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
			/*
			 * The expires indexes went with 1.15, the (key, total) ones with
			 * 1.16; one still there is kept whole.
			 */
			missing = missing || (i == IDX_KEY_TS && fallback_tables[t].index_names[i] &&
								  !OidIsValid(fallback_tables[t].index_oids[i]));
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

/*
 * Serialise writers of one key until the end of the transaction. Whether
 * another transaction held the lock, so that this one had to wait for it.
 */
bool
fallback_lock_stored_key(text *key, LOCKTAG *tag)
{
	uint64		h = fallback_key_hash(key);

	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (h >> 32), (uint32) h,
						 FALLBACK_LOCK_CLASS);
	if (LockAcquire(tag, ExclusiveLock, false, true) != LOCKACQUIRE_NOT_AVAIL)
		return false;
	(void) LockAcquire(tag, ExclusiveLock, false, false);
	return true;
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
 * (hi_strategy, hi).
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
	IndexScanDesc scan;

	Assert(which != IDX_EXPIRES);
	ScanKeyEntryInitialize(&sk[nkeys++], 0, 1, BTEqualStrategyNumber, InvalidOid,
						   C_COLLATION_OID, F_TEXTEQ, PointerGetDatum(s->key));
	if (lo_strategy != InvalidStrategy)
		ScanKeyEntryInitialize(&sk[nkeys++], 0, 2, lo_strategy, InvalidOid,
							   InvalidOid, bound_proc(lo_strategy), Int64GetDatum(lo));
	if (hi_strategy != InvalidStrategy)
		ScanKeyEntryInitialize(&sk[nkeys++], 0, 2, hi_strategy, InvalidOid,
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

		if (s->idx[i] == NULL)
			continue;
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
 * Sweeping expired rows. A key's own calls delete its rows as they leave
 * its longest window (fallback_log.c, read_first), and the counting
 * algorithms replace a key's row at each write; the rows of a key that no
 * one calls any more are deleted by sweeps of heap pages. Every
 * SWEEP_EVERY-th admitting call of a backend reads one page of the table,
 * from a cursor the server's backends share, and deletes the rows whose
 * expiry has passed; while its sweeps find nothing, every SWEEP_EVERY_MAX-
 * th. An expired row no longer counts in any window, and no lookup reads
 * one (fallback_log.c), so a sweep needs no key's lock; a row another
 * transaction is deleting is left to it.
 *
 * Until 1.15 the sweep went through an index on expires, which kept the
 * table at exactly the live windows but cost every admission an index
 * insert (about 9k instructions of about 119k). The pages bound the table
 * instead: under admissions at a rate r, each page is read at least once
 * per SWEEP_EVERY_MAX * (pages) admissions, so an idle key's rows stay at
 * most that long past their expiry, and the table holds, besides the live
 * windows, at most about as many rows as were written in one such lap.
 */
static uint32 calls_to_wait[TBL_COUNT];
/* This backend's pages read in a row that held no expired row (fallback_sweep_lap). */
static BlockNumber clean_pages[TBL_COUNT];

/*
 * Read npages pages of rel (of nblocks pages), each the next one of the
 * server's sweep cursor `cursor` (a table of fallback_tables, or
 * FALLBACK_SWEEP_CARRY), deleting the rows whose int8 column `att` is below
 * `before`. Returns how many such rows were seen, those another
 * transaction is deleting included (an ended row is never read again, so
 * leaving one to its other deleter is harmless). With clean_run, counts
 * there the pages read in a row that held none.
 */
int
fallback_sweep_heap(Relation rel, BlockNumber nblocks, TupleTableSlot *slot, AttrNumber att,
					int64 before, int cursor, int npages, BlockNumber *clean_run)
{
	static uint32 mine[TBL_COUNT + 1];
	int			c = cursor == FALLBACK_SWEEP_CARRY ? TBL_COUNT : cursor;
	int			seen = 0;

	Assert(c >= 0 && c <= TBL_COUNT);
	for (int i = 0; i < npages && i < (int) nblocks; i++)
	{
		TableScanDesc scan = table_beginscan_strat(rel, SnapshotSelf, 0, NULL, true, false);
		int			earlier = seen;

		heap_setscanlimits(scan, next_sweep_block(sweep_shared ? &sweep_shared->block[c] : NULL,
												  &mine[c], nblocks), 1);
		while (table_scan_getnextslot(scan, ForwardScanDirection, slot))
		{
			bool		isnull;
			TM_FailureData tmfd;

			if (DatumGetInt64(slot_getattr(slot, att, &isnull)) < before)
			{
				seen++;
				(void) slidewin_heap_delete(rel, &slot->tts_tid, GetCurrentCommandId(true),
											false, &tmfd);
			}
		}
		table_endscan(scan);
		if (clean_run)
			*clean_run = seen > earlier ? 0 : *clean_run + 1;
	}
	return seen;
}

/* One of the store's tables: the rows whose expiry is before now. */
static int
sweep_table(FbScan *s, BlockNumber nblocks, int64 now, int npages)
{
	int			t = s->tbl - fallback_tables;

	Assert(s->tbl != &fallback_tables[TBL_HEAD]);
	return fallback_sweep_heap(s->rel, nblocks, s->slot,
							   s->tbl == &fallback_tables[TBL_STATE] ? ST_ATT_EXPIRES : FB_ATT_EXPIRES,
							   now, t, npages, &clean_pages[t]);
}

/* At an admitting call: a page, at a backend's first and then in turn. */
void
fallback_sweep_due(FbScan *s, int64 now)
{
	int			t = s->tbl - fallback_tables;

	if (calls_to_wait[t] > 0)
	{
		calls_to_wait[t]--;
		return;
	}
	calls_to_wait[t] = (sweep_table(s, RelationGetNumberOfBlocks(s->rel), now, 1) > 0 ?
						SWEEP_EVERY : SWEEP_EVERY_MAX) - 1;
}

/*
 * After an outage (fallback_sweep): npages pages; false once this backend
 * has read as many pages in a row without an expired row as the table has.
 */
bool
fallback_sweep_lap(FbScan *s, int64 now, int npages)
{
	int			t = s->tbl - fallback_tables;
	BlockNumber nblocks = RelationGetNumberOfBlocks(s->rel);

	(void) sweep_table(s, nblocks, now, npages);
	return clean_pages[t] < nblocks;
}
