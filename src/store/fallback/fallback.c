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
 *    (rl_fallback_head, see "Heads" in fallback_head.c) with its newest
 *    admission. A call on such a key reads without a lock and
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
 * Files, from the bottom up: fallback_table.c the tables, their scans, the
 * sweep of expired rows and the key's lock (fallback_table_int.h is for the
 * files of this folder only); fallback_head.c the logs' heads;
 * fallback_log.c the sliding logs; fallback_counter.c the counting
 * algorithms; fallback_block.c the table of blocks; fallback_carry.c the
 * table of admissions Redis has not learned of; and this one, the store's
 * entry points (attempt, peek, refund, reset) and its sweeps.
 *
 * This store must not talk to Redis, decide when it is used, or call the
 * switch that does (src/switch): what Redis had counted is asked of the
 * seed source a call brings (FallbackSeedFn, fallback_seed.h), and what
 * this store wrote for Redis to learn of goes back out in
 * RlOutcome.carry_units.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"

#include "fallback.h"
#include "fallback_block.h"
#include "fallback_carry.h"
#include "fallback_counter.h"
#include "fallback_head.h"
#include "fallback_log.h"

static void fallback_peek_unblocked(const RlArgs *args, FallbackSeedFn seed,
									RlOutcome *o);

void
fallback_init(void)
{
	fallback_table_init();
	RegisterXactCallback(fallback_heads_xact_callback, NULL);
}

/*
 * After an outage: expired rows of every table, npages heap pages of each
 * at a time, until this backend has read a clean lap of each; and the
 * heads whose rows have all expired (without the grace that serves keys
 * called again), more pages of them: a page of heads holds about 23 rows
 * (fillfactor 20), one of the logs about 90.
 */
#define HEAD_PAGES_PER_PAGE 16

bool
fallback_sweep(int npages)
{
	bool		more = false;
	int64		now = fallback_now();

	for (int t = 0; t < TBL_COUNT; t++)
	{
		FbScan		s;

		fallback_scan_open(&s, (FbTableId) t, NULL, RowExclusiveLock);
		if (t == TBL_HEAD)
			more = fallback_sweep_heads(&s, now < PG_INT64_MAX - HEAD_GRACE_US ? now + HEAD_GRACE_US : now,
										npages * HEAD_PAGES_PER_PAGE) || more;
		else
			more = fallback_sweep_lap(&s, now, npages) || more;
		fallback_scan_close(&s);
	}
	return more;
}

/*
 * A call on a key that the table of blocks (fallback_block.c) says is
 * blocked is answered like a peek, so that it records nothing, and then
 * denied until the block ends; in shadow mode it is recorded, as a denial
 * is.
 */
void
fallback_attempt(const RlArgs *args, FallbackSeedFn seed, RlOutcome *o)
{
	fallback_attempt_ahead(args, seed, 0, o);
}

void
fallback_attempt_ahead(const RlArgs *args, FallbackSeedFn seed, int64 ahead_us,
					   RlOutcome *o)
{
	int64		block_us = fallback_block_left(args);

	o->carry_units = 0;
	if (block_us > 0 && !args->force)
		fallback_peek_unblocked(args, seed, o);
	else if (args->algorithm == ALGO_SLIDING_LOG)
		fallback_log_attempt(TBL_LOG, args, seed, ahead_us, o);
	else if (args->algorithm == ALGO_MULTI_LOG)
		fallback_log_attempt(TBL_MLOG, args, seed, ahead_us, o);
	else
		fallback_counter_attempt(args, seed, o);
	if (block_us > 0)
		fallback_block_outcome(block_us, o);
}

void
fallback_peek(const RlArgs *args, FallbackSeedFn seed, RlOutcome *o)
{
	int64		block_us = fallback_block_left(args);

	o->carry_units = 0;
	fallback_peek_unblocked(args, seed, o);
	if (block_us > 0)
		fallback_block_outcome(block_us, o);
}

/*
 * Decide a call of args->cost without recording it: 1 for rl_peek, the
 * call's own for an attempt on a blocked key (its retry_after then counts
 * the limit's wait too).
 */
static void
fallback_peek_unblocked(const RlArgs *args, FallbackSeedFn seed, RlOutcome *o)
{
	if (args->algorithm == ALGO_SLIDING_LOG)
		fallback_log_peek(TBL_LOG, args, seed, o);
	else if (args->algorithm == ALGO_MULTI_LOG)
		fallback_log_peek(TBL_MLOG, args, seed, o);
	else
		fallback_counter_peek(args, seed, o);
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
 *
 * fallback_refund_part gives back `part` units of such a row (0 < part <=
 * cost): with part < cost the row stays, with its cost and running total
 * less `part`. Its carry row, if it still has one, is left as it is: Redis,
 * once it learns of the row, counts the whole cost (an over-count, never an
 * under-count: a carry row deleted and written again in this transaction
 * could be missed by a carry that reads the two at the wrong moments), and
 * *carried is false, as Redis has nothing to give back. That is how an
 * ended local batch's unused units go back (switch/local_batch_fallback.c).
 */
bool
fallback_refund(const RlArgs *args, int64 ts, int64 cost, int64 win_us, bool *carried)
{
	return fallback_refund_part(args, ts, cost, cost, win_us, carried);
}

bool
fallback_refund_part(const RlArgs *args, int64 ts, int64 cost, int64 part, int64 win_us,
					 bool *carried)
{
	FbTableId	t = args->algorithm == ALGO_MULTI_LOG ? TBL_MLOG : TBL_LOG;
	int16		kind = (t == TBL_LOG) ? 1 : 2;
	text	   *key = fallback_stored_key(args);
	FbScan		s;
	FbScan		hs;
	FbHead		hd;
	FbEntry		e;
	LOCKTAG		tag;
	bool		locked = false;
	bool		given = false;

	*carried = false;
	fallback_scan_open(&s, t, key, RowExclusiveLock);
	fallback_scan_open(&hs, TBL_HEAD, key, RowExclusiveLock);
	for (;;)
	{
		IndexScanDesc scan;
		FbEntry		later;
		int64		e_expires;
		bool		e_isnull;
		FbEntry    *moved = NULL;
		int64	   *expires = NULL;
		int			nmoved = 0;
		int			maxmoved = 0;

		CHECK_FOR_INTERRUPTS();
		fallback_head_read(&hs, kind, &hd);
		if (!hd.found && !locked)
		{
			fallback_lock_stored_key(key, &tag);
			locked = true;
			continue;
		}
		fallback_scan_first_range(&s, IDX_KEY_TS, ForwardScanDirection,
								  BTGreaterEqualStrategyNumber, ts, BTLessEqualStrategyNumber, ts, &e);
		if (!e.found || e.cost != cost || e.ts <= fallback_now() - win_us)
			break;
		e_expires = DatumGetInt64(slot_getattr(s.slot, FB_ATT_EXPIRES, &e_isnull));
		if (hd.found &&
			fallback_head_write(&hs, kind, &hd, hd.ts, hd.total - part, hd.expires) != TM_Ok)
			continue;

		/* Nobody else writes the key now: move the newer rows down. */
		scan = fallback_scan_begin(&s, IDX_KEY_TS, BTGreaterStrategyNumber, ts);
		while (fallback_scan_next(&s, scan, ForwardScanDirection, &later))
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
		 * A key without a head (since 1.18, one whose writers never met)
		 * gets one now, holding the newest time of its rows before the
		 * refund: the key's next admission then still comes after the row
		 * given back, so that a ticket never names another row. The key's
		 * lock, taken above, is held until commit.
		 */
		if (!hd.found)
		{
			int64		newest_exp = e_expires;

			for (int i = 0; i < nmoved; i++)
				newest_exp = Max(newest_exp, expires[i]);
			(void) fallback_head_write(&hs, kind, &hd,
									   nmoved > 0 ? moved[nmoved - 1].ts : e.ts,
									   (nmoved > 0 ? moved[nmoved - 1].total : e.total) - part,
									   newest_exp);
		}

		/*
		 * A row deleted by someone else meanwhile can only have been swept,
		 * having left its window: its units no longer count, and moving the
		 * newer rows down changes no window's units either.
		 */
		if (fallback_try_delete(&s, &e.tid) && part < cost)
			fallback_insert_row(&s, e.ts, e.total - part, cost - part, e_expires);
		/* a part leaves the carry row whole: Redis will count every unit */
		if (t == TBL_LOG && part == cost)
			*carried = !fallback_carry_forget(args, ts);
		for (int i = 0; i < nmoved; i++)
			if (fallback_try_delete(&s, &moved[i].tid))
				fallback_insert_row(&s, moved[i].ts, moved[i].total - part, moved[i].cost, expires[i]);
		CommandCounterIncrement();
		given = true;
		break;
	}
	fallback_scan_close(&hs);
	fallback_scan_close(&s);
	if (locked && !given)
		LockRelease(&tag, ExclusiveLock, false);
	return given;
}

/* Delete every row of the key. The caller holds the key's lock. */
static void
delete_key(FbScan *s)
{
	IndexScanDesc scan = fallback_scan_begin(s, IDX_KEY_TS, InvalidStrategy, 0);
	FbEntry		e;

	while (fallback_scan_next(s, scan, ForwardScanDirection, &e))
		fallback_try_delete(s, &e.tid);
	index_endscan(scan);
}

/* Forget the key in every table, whatever the algorithm. */
void
fallback_reset(const RlArgs *args)
{
	text	   *key = fallback_stored_key(args);
	LOCKTAG		tag;

	fallback_lock_stored_key(key, &tag);
	for (int t = 0; t < TBL_COUNT; t++)
	{
		FbScan		s;

		fallback_scan_open(&s, (FbTableId) t, key, RowExclusiveLock);
		delete_key(&s);
		fallback_scan_close(&s);
	}
	(void) fallback_carry_forget(args, -1);
	CommandCounterIncrement();
}
