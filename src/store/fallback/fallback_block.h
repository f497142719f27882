/*
 * fallback_block.h
 *		The fallback store's table of blocks (rl_block), read while Redis
 *		cannot answer.
 */
#ifndef SLIDEWIN_FALLBACK_BLOCK_H
#define SLIDEWIN_FALLBACK_BLOCK_H

#include "limit.h"

extern void fallback_block_init(void);

/* Microseconds left on the key's block on the fallback store's clock; 0: none. */
extern int64 fallback_block_left(const RlArgs *args);

/* A call on a blocked key: denied, nothing left, no retry before the end. */
extern void fallback_block_outcome(int64 block_us, RlOutcome *o);

/*
 * Block the key until duration_us from now, or until at_least_us (Unix
 * microseconds; 0: no such bound), or later if it already is; returns the
 * block's end. Lift the key's block; returns whether one was in force.
 * Both are transactional, and need the table (ERROR if it is missing).
 */
extern int64 fallback_block_set(const RlArgs *args, int64 duration_us, int64 at_least_us);
extern bool fallback_block_lift(const RlArgs *args);

#endif
