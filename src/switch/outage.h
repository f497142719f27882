/*
 * outage.h
 *		The outage memory (outage.c): what Redis last counted, kept for the
 *		fallback store. Carrying the fallback store's admissions back into
 *		Redis is carry.h's.
 */
#ifndef SLIDEWIN_OUTAGE_H
#define SLIDEWIN_OUTAGE_H

#include "fallback_seed.h"
#include "limit.h"

/* Off: the fallback store and Redis count apart, as before 1.8. */

/* Called from _PG_init: sets up shared memory when preloaded. */
extern void outage_init(void);

/* The fallback store's clock, Unix microseconds (the test clock if set). */
extern int64 outage_clock(void);

/*
 * A call of the key is about to be sent to Redis (outage_asking), and its
 * answer, or its failure, is in (outage_answered): in between, a fallback
 * decision of another backend counts its units as spent.
 */
extern void outage_asking(const RlArgs *args);
/* The same for each of rl_attempt_all's n keys. */
extern void outage_asking_all(int n, const RlArgs *args);
extern void outage_answered(void);

/*
 * What Redis last counted for the key and window on this server, for the
 * fallback store to add to its own rows (FallbackSeed, fallback.h). False
 * when nothing is kept for it.
 */
extern bool outage_seed(const RlArgs *args, FallbackSeed *seed);

/* rl_reset: what Redis had counted for the key no longer holds. */
extern void outage_forget(const RlArgs *args);

#endif
