/*
 * fallback_carry.h
 *		The fallback store's admissions that Redis has not learned of yet
 *		(rl_fallback_carry), carried back by the switch (carry.c).
 */
#ifndef SLIDEWIN_FALLBACK_CARRY_H
#define SLIDEWIN_FALLBACK_CARRY_H

#include "lib/stringinfo.h"
#include "storage/itemptr.h"

#include "limit.h"

extern void fallback_carry_init(void);

/* Whether this database has the table (1.8 and later). */
extern bool fallback_carry_available(void);

/*
 * An admission of the fallback store (ts, cost) under args' rule, which
 * counts until expires (then it is never sent). False when nothing was
 * written (slidewin.outage_exact off, or no carry table): the caller adds
 * cost to RlOutcome.carry_units when true.
 */
extern bool fallback_carry_add(const RlArgs *args, int64 ts, int64 cost, int64 expires);

/*
 * Forget the key's row admitted at ts (-1: every row of the key); whether
 * there was one (else it had been carried, or was never written).
 */
extern bool fallback_carry_forget(const RlArgs *args, int64 ts);

/*
 * The name in Redis of the key's row admitted at ts, as a carry imports it
 * (false, nothing written: this database carries nothing).
 */
extern bool fallback_carry_name(const RlArgs *args, int64 ts, char *buf, size_t size);

/* One key's rows on their way to Redis. */
typedef struct FallbackCarry
{
	RlArgs		args;			/* the key (user key, under today's prefix) */
	StringInfoData entries;		/* "id,age,cost,win,lim,reach;" each (lua_log_import) */
	int			n;
	ItemPointerData *tids;
	bool		waiting;		/* args NULL: a key had rows waiting (even if
								 * they were gone by the time they were read) */
	int64		last_ts;		/* time of the last row the collection passed
								 * (-1: none), to go on from (see below) */
} FallbackCarry;

/*
 * Up to max rows of args' key, or (args NULL) of the key with the row
 * that leaves its window first, among the keys under today's prefix,
 * leaving out the nskip rows of skip. Rows already out of their windows are
 * deleted on the way. False: none (with args NULL, c->waiting says whether
 * the table had rows of some key waiting all the same).
 *
 * after >= 0 (args set): only rows admitted after that time, so that the
 * next batch of a key goes on where the last one stopped (its c->last_ts)
 * instead of stepping again over the index entries of every row this
 * transaction has deleted, which made carrying n rows cost n^2/batch.
 */
extern bool fallback_carry_collect(const RlArgs *args, int max, int64 after,
								   const ItemPointerData *skip, int nskip,
								   FallbackCarry *c);

/*
 * Redis has them: delete the rows, in the caller's transaction. Rows that
 * another transaction is deleting (another backend carrying the same key,
 * which sent them to Redis before deleting them) are left to it, and copied
 * to busy (room for c->n); returns how many.
 */
extern int	fallback_carry_done(FallbackCarry *c, ItemPointerData *busy);

/* Rows of this database still inside their windows (0 without the table). */
extern int64 fallback_carry_pending(void);

#endif
