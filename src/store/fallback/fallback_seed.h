/*
 * fallback_seed.h
 *		What Redis had counted for a key, which the fallback store asks its
 *		caller (the switch) for with each call.
 */
#ifndef SLIDEWIN_FALLBACK_SEED_H
#define SLIDEWIN_FALLBACK_SEED_H

#include "limit.h"

/*
 * What another store (Redis) had counted for the key and window, given by
 * the caller: `units` spent until frees_at, counting every row of this
 * store up to seen_at, and the rows of this database before carried_to (all
 * on this store's clock). This store adds them to its own rows; it never
 * learns where they came from. found false: nothing to add.
 */
typedef struct FallbackSeed
{
	bool		found;
	int64		seen_at;
	int64		carried_to;		/* rows of this database before it are in
								 * Redis's units; PG_INT64_MIN: none known */
	int64		units;
	int64		frees_at;
} FallbackSeed;

/*
 * Where the caller's seed comes from: it fills *seed for the key (found
 * false: nothing). The store asks once per call, at the moment its decision
 * starts, so that the seed is no older than the state it is added to: for
 * the counting algorithms under the key's lock, after any call that held it
 * (a carry holds it until Redis has decided); for the logs before the key's
 * rows are read.
 */
typedef bool (*FallbackSeedFn) (const RlArgs *args, FallbackSeed *seed);

#endif							/* SLIDEWIN_FALLBACK_SEED_H */
