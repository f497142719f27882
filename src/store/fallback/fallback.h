/*
 * fallback.h
 *		The fallback store: the sliding log in an unlogged table, used when
 *		Redis cannot answer.
 */
#ifndef SLIDEWIN_FALLBACK_H
#define SLIDEWIN_FALLBACK_H

#include "storage/lock.h"

#include "fallback_seed.h"
#include "fallback_table.h"
#include "limit.h"

/* A relation of the extension, by name; 42P01 if it is missing. */
extern Oid	fallback_relid(const char *relname);

/* Register the store's callbacks (_PG_init). */
extern void fallback_init(void);

extern void fallback_attempt(const RlArgs *args, FallbackSeedFn seed, RlOutcome *o);

/*
 * The same, with a sliding log's row scored ahead_us after its admission
 * (a local batch's entry, whose units are used until then: switch/
 * local_batch.c). The row counts from its admission, as every row ahead of
 * a checking call's clock does, until ahead_us plus the window; a later
 * admission of the key is scored after it. The counting algorithms take
 * no ahead_us (it must be 0).
 */
extern void fallback_attempt_ahead(const RlArgs *args, FallbackSeedFn seed,
								   int64 ahead_us, RlOutcome *o);
extern void fallback_peek(const RlArgs *args, FallbackSeedFn seed, RlOutcome *o);
extern void fallback_reset(const RlArgs *args);
/* rl_refund: give back the entry (ts, cost) of args' log; whether it was. */
extern bool fallback_refund(const RlArgs *args, int64 ts, int64 cost, int64 win_us,
							 bool *carried);
/* The same for `part` units of the row's `cost` (an ended local batch's rest). */
extern bool fallback_refund_part(const RlArgs *args, int64 ts, int64 cost, int64 part,
								 int64 win_us, bool *carried);


/* Sweep npages heap pages of each table for expired rows; true if some may remain. */
extern bool fallback_sweep(int npages);

#endif
