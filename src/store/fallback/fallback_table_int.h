/*-------------------------------------------------------------------------
 *
 * fallback_table_int.h
 *		The fallback store's tables as the files of the store use them: the
 *		layout of the tables (their columns, indexes and OIDs), the scan over
 *		them, and the rows (fallback_table.c).
 *
 * No file of another folder may include it: the rest of the extension
 * reaches the fallback store through fallback.h and fallback_table.h. The
 * rules the store keeps are at the head of fallback.c.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SLIDEWIN_FALLBACK_TABLE_INT_H
#define SLIDEWIN_FALLBACK_TABLE_INT_H

#include "access/genam.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "executor/tuptable.h"
#include "nodes/execnodes.h"
#include "storage/itemptr.h"
#include "storage/lock.h"
#include "utils/relcache.h"

#include "fallback_table.h"
#include "limit.h"

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

/* Columns of rl_fallback_state (see "The counting algorithms" in fallback_counter.c). */
#define ST_ATT_KEY 1
#define ST_ATT_ALGO 2
#define ST_ATT_S 3
#define ST_ATT_A 4
#define ST_ATT_B 5
#define ST_ATT_EXPIRES 6

/* An admitting call sweeps a page every this many calls, this many at most. */
#define SWEEP_EVERY 32
#define SWEEP_EVERY_MAX 64

typedef enum FbIndex
{
	IDX_KEY_TS,					/* rl_fallback_state: (key, algo); head: (key, log) */
	IDX_KEY_TOTAL,				/* before 1.16 only; rl_fallback_state: none */
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


/* fallback_table.c: the tables, the clock, keys, the key's lock, scans and rows. */
extern FbTable fallback_tables[TBL_COUNT];
extern bool fallback_oids_valid;
extern int64 fallback_now(void);
extern uint64 fallback_key_hash(text *key);
extern bool fallback_lock_stored_key(text *key, LOCKTAG *tag);
extern void fallback_scan_open(FbScan *s, FbTableId t, text *key, LOCKMODE mode);
extern void fallback_scan_close(FbScan *s);
extern IndexScanDesc fallback_scan_begin_range(FbScan *s, FbIndex which, StrategyNumber lo_strategy, int64 lo,
											   StrategyNumber hi_strategy, int64 hi);
extern IndexScanDesc fallback_scan_begin_kind(FbScan *s, int16 kind);
extern IndexScanDesc fallback_scan_begin(FbScan *s, FbIndex which, StrategyNumber strategy, int64 bound);
extern bool fallback_scan_next(FbScan *s, IndexScanDesc scan, ScanDirection dir, FbEntry *e);
extern void fallback_scan_first_range(FbScan *s, FbIndex which, ScanDirection dir,
									  StrategyNumber lo_strategy, int64 lo,
									  StrategyNumber hi_strategy, int64 hi, FbEntry *e);
extern void fallback_scan_first(FbScan *s, FbIndex which, ScanDirection dir,
								StrategyNumber strategy, int64 bound, FbEntry *e);
extern bool fallback_try_delete(FbScan *s, ItemPointer tid);
extern IndexInfo *fallback_index_info(FbScan *s, FbIndex i);
extern void fallback_insert_row(FbScan *s, int64 ts, int64 total, int64 cost, int64 expires);
/* Expired rows of any key, a heap page at a time (fallback_table.c, "Sweeping expired rows"). */
extern void fallback_sweep_due(FbScan *s, int64 now);
extern bool fallback_sweep_lap(FbScan *s, int64 now, int npages);





#endif
