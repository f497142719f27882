/*
 * lease_fallback.h
 *		The fallback store's concurrency slots (lease_fallback.c), and the
 *		arguments and result of a call for a slot, whichever store answers.
 */
#ifndef SLIDEWIN_LEASE_FALLBACK_H
#define SLIDEWIN_LEASE_FALLBACK_H

#include "datatype/timestamp.h"

#include "limit.h"

typedef struct LeaseArgs
{
	RlArgs		key;			/* the key (key, keylen) */
	int64		max;
	int64		lease_us;
	int64		timeout_us;
	int			policy;
	bool		raise;
} LeaseArgs;

typedef struct LeaseResult
{
	bool		acquired;
	bool		known;			/* holders known */
	int64		holders;
	const char *store;
	int64		wait_us;		/* a denial: until a slot may free (0: unknown) */
	bool		waited;			/* the call waited at least once */
	int64		leases_ended;	/* ended leases the store found and removed */
} LeaseResult;

/* From lease_init: the transaction callbacks that end the slots. */
extern void lease_fallback_init(void);

/* The key's identity in the lock tags: a hash of the prefix and the key. */
extern uint32 lease_slot_hash(const RlArgs *key);

/* This backend's fallback slot of the key: its index, or -1. */
extern int	lease_fallback_mine(uint32 hash);

/* The key's slots held now, in every database, from the lock table. */
extern int64 lease_fallback_holders(uint32 hash);

/*
 * A slot of a->key in the fallback store, waiting (polling) until the
 * deadline for one to free; res says what came of it.
 */
extern void lease_fallback_acquire(const LeaseArgs *a, TimestampTz deadline,
								   LeaseResult *res);

/* rl_release's fallback side: whether this backend held a slot of the key. */
extern bool lease_fallback_release(const RlArgs *key);

#endif
