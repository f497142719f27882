/*
 * fallback_all.h
 *		The fallback store's side of rl_attempt_all (fallback_all.c): every
 *		key decided as rl_attempt's fallback call decides it, all admitted or
 *		none charged.
 */
#ifndef SLIDEWIN_FALLBACK_ALL_H
#define SLIDEWIN_FALLBACK_ALL_H

#include "limit.h"

/*
 * The n keys of args decided by the fallback store, each on top of what
 * Redis had counted for it (outage_seed), in one canonical order of their
 * locks: o[k] is key k's outcome, in the caller's order. Every key is
 * recorded, or (one denies) none; in shadow mode (force) every key is.
 */
extern void outage_fallback_attempt_all(int n, const RlArgs *args, RlOutcome *o);

#endif							/* SLIDEWIN_FALLBACK_ALL_H */
