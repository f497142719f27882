/*
 * fallback_counter.h
 *		The fallback store's counting algorithms: fixed_window, sliding_counter,
 *		token_bucket (fallback_counter.c).
 */
#ifndef SLIDEWIN_FALLBACK_COUNTER_H
#define SLIDEWIN_FALLBACK_COUNTER_H

#include "fallback_seed.h"
#include "limit.h"

extern void fallback_counter_attempt(const RlArgs *args, FallbackSeedFn seed,
									 RlOutcome *o);
extern void fallback_counter_peek(const RlArgs *args, FallbackSeedFn seed,
								  RlOutcome *o);

#endif							/* SLIDEWIN_FALLBACK_COUNTER_H */
