/*
 * fallback_seed.h
 *		What Redis had counted for a key, handed into the fallback store by its
 *		caller (the switch) with each call.
 */
#ifndef SLIDEWIN_FALLBACK_SEED_H
#define SLIDEWIN_FALLBACK_SEED_H

#include "limit.h"

/*
 * What another store (Redis) had counted for the key and window, handed in
 * by the caller: `units` spent until frees_at, counting every row of this
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

#endif							/* SLIDEWIN_FALLBACK_SEED_H */
