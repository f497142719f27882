/*
 * fallback_table.h
 *		The fallback store's tables as other folders see them: a relation of
 *		the extension by name, a key as the store keeps it, the store's clock,
 *		and the key's lock (fallback_table.c).
 */
#ifndef SLIDEWIN_FALLBACK_TABLE_H
#define SLIDEWIN_FALLBACK_TABLE_H

#include "storage/block.h"
#include "executor/tuptable.h"
#include "storage/lock.h"
#include "utils/relcache.h"

#include "limit.h"

/* Drop the OIDs kept of the store's relations when one changes (fallback_init). */
extern void fallback_table_init(void);

/* A relation of the extension, by name; 42P01 if it is missing. */
extern Oid	fallback_relid(const char *relname);
/* The same, InvalidOid if it is missing. */
extern Oid	fallback_relid_if_any(const char *relname);

/* The key as the store keeps it (under slidewin.key_prefix). */
extern text *fallback_stored_key(const RlArgs *args);
/* The store's clock: Unix microseconds (slidewin.test_now in tests). */
extern int64 fallback_clock(void);

/*
 * Delete rel's rows whose int8 column att is below `before`, reading
 * npages heap pages from a sweep cursor the server's backends share
 * (FALLBACK_SWEEP_CARRY for rl_fallback_carry); fallback_table.c says more.
 */
#define FALLBACK_SWEEP_CARRY (-1)
extern int	fallback_sweep_heap(Relation rel, BlockNumber nblocks, TupleTableSlot *slot,
								AttrNumber att, int64 before, int cursor, int npages,
								BlockNumber *clean_run);

/*
 * The lock under which a counting algorithm's fallback admissions of the
 * key are written (held by each until its commit): the switch (carry.c) holds it while
 * it carries the key's admissions and Redis decides.
 */
extern void fallback_lock_key(const RlArgs *args, LOCKTAG *tag);
extern bool fallback_try_lock_key(const RlArgs *args, LOCKTAG *tag, int timeout_ms);
extern void fallback_unlock_key(LOCKTAG *tag);

/*
 * The lock a carry of the key's rows into Redis holds while it sends them,
 * so that carriers of one key take turns (carry.c); released with
 * fallback_unlock_key.
 */
extern bool fallback_try_lock_carry(const RlArgs *args, LOCKTAG *tag, int timeout_ms);

/*
 * The order in which a call over several keys takes their locks (by the
 * lock tag, then by the stored key): order[] gets the indexes of args.
 * Every such call takes them in this one order, whatever the caller's, so
 * that two calls over overlapping keys cannot deadlock.
 */
extern void fallback_lock_order(int n, const RlArgs *args, int *order);

#endif							/* SLIDEWIN_FALLBACK_TABLE_H */
