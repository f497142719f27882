/*
 * fallback_log.h
 *		The fallback store's sliding logs, of rl_attempt and rl_attempt_multi
 *		(fallback_log.c).
 */
#ifndef SLIDEWIN_FALLBACK_LOG_H
#define SLIDEWIN_FALLBACK_LOG_H

#include "fallback_seed.h"
#include "fallback_table_int.h"

/* ahead_us: the row is scored that long after its admission (fallback.h) */
extern void fallback_log_attempt(FbTableId t, const RlArgs *args, FallbackSeedFn seed,
								 int64 ahead_us, RlOutcome *o);
extern void fallback_log_peek(FbTableId t, const RlArgs *args, FallbackSeedFn seed,
							  RlOutcome *o);

#endif							/* SLIDEWIN_FALLBACK_LOG_H */
