/*
 * fallback.h
 *		The fallback store: the sliding log in an unlogged table, used when
 *		Redis cannot answer.
 */
#ifndef SLIDEWIN_FALLBACK_H
#define SLIDEWIN_FALLBACK_H

#include "storage/lock.h"

#include "limit.h"

extern void fallback_init(void);
/* A relation of the extension, by name; 42P01 if it is missing. */
extern Oid	fallback_relid(const char *relname);
extern void fallback_attempt(const RlArgs *args, RlOutcome *o);
extern void fallback_peek(const RlArgs *args, RlOutcome *o);
extern void fallback_reset(const RlArgs *args);
/* rl_refund: give back the entry (ts, cost) of args' log; whether it was. */
extern bool fallback_refund(const RlArgs *args, int64 ts, int64 cost, int64 win_us,
							 bool *carried);

/*
 * The lock under which a counting algorithm's fallback admissions of the
 * key are written (held by each until its commit): outage.c holds it while
 * it carries the key's admissions and Redis decides.
 */
extern void fallback_lock_key(const RlArgs *args, LOCKTAG *tag);
extern bool fallback_try_lock_key(const RlArgs *args, LOCKTAG *tag, int timeout_ms);
extern void fallback_unlock_key(LOCKTAG *tag);

/* Delete up to `want` expired rows; true if some may remain. */
extern bool fallback_sweep(int want);

#endif
