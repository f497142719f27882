/*
 * local_batch_int.h
 *		What local_batch.c shares with local_batch_fallback.c, the fallback
 *		store's batches: the shared table of batches and its slots. No file
 *		outside src/switch may include it.
 */
#ifndef SLIDEWIN_LOCAL_BATCH_INT_H
#define SLIDEWIN_LOCAL_BATCH_INT_H

#include "storage/latch.h"
#include "storage/lwlock.h"

#include "limit.h"

#define BATCH_SLOTS 32
/* room for a log key and its ledger key (a key, its prefix and tags) */
#define BATCH_KEY_BYTES 2560
/* the demand table's entries */
#define DEMAND_SLOTS 1024

typedef enum SlotState
{
	SLOT_FREE = 0,
	SLOT_LIVE,					/* may be taken from until its deadline */
	SLOT_ENDING,				/* the worker is giving its rest back */
	SLOT_PENDING				/* a fallback batch whose row is not committed:
								 * only its own backend takes from it (rule 6) */
} SlotState;

typedef struct BatchSlot
{
	SlotState	state;
	uint32		gen;			/* moves each time the slot is freed */
	Oid			dbid;			/* a fallback batch's database; else InvalidOid */
	int			owner;			/* PENDING: the pid of the backend that reserved */
	uint32		hash;			/* of the log key, lim, win and target */
	uint32		target;			/* hash of slidewin.redis_url */
	int64		lim;
	int64		win_us;
	int64		deadline;		/* sent + d, on the monotonic clock (us) */
	int64		give_until;		/* a fallback batch: its key's calls may give
								 * its rest back until then (rule 6) */
	int64		score;			/* the entry's score in the log (r + d); a
								 * fallback batch's: its row's time */
	int64		taken;			/* the entry's units */
	int64		left;			/* units not used yet */
	/* what Redis answered the reserve, for the calls served from it */
	int64		remaining;
	int64		reset_at_us;
	int64		next_us;
	int			loglen;
	int			ledgerlen;
	char		keys[BATCH_KEY_BYTES];	/* the log key, then the ledger key */
} BatchSlot;

/* One key's recent calls on this server (rule 5). */
typedef struct DemandEntry
{
	uint32		hash;			/* the key's slot hash (batch_key) */
	uint32		calls;			/* calls in the current run, 0: unused */
	uint64		check;			/* a second hash of the log key */
	int64		last_us;		/* the last call, on the monotonic clock */
	int64		gap_us;			/* moving average of the gaps between calls */
} DemandEntry;

typedef struct BatchShared
{
	LWLock	   *lock;
	Latch	   *worker_latch;	/* under lock; NULL until the worker runs */
	char		server[17];		/* this server's name in waiting marks */
	BatchSlot	slots[BATCH_SLOTS];
	DemandEntry demand[DEMAND_SLOTS];
} BatchShared;


/* The batch's keys of args (palloc'd), and the hash a slot is found by. */
typedef struct BatchKey
{
	char	   *log;
	char	   *ledger;
	int			loglen;
	int			ledgerlen;
	uint32		target;
	uint32		hash;
	uint64		check;			/* a second hash, for the demand table */
} BatchKey;

/* The table in shared memory; NULL without shared_preload_libraries. */
extern BatchShared *local_batch_table(void);

/* Free slot s (under the table's exclusive lock): its generation moves on. */
extern void local_batch_slot_free(BatchSlot *s);

/* The clock deadlines are kept on, in microseconds. */
extern int64 local_batch_mono_us(void);

/* The batch's keys of args (palloc'd), and the hash a slot is found by. */
extern void local_batch_key(const RlArgs *args, BatchKey *k);

/*
 * Under the table's exclusive lock: keep a batch of `taken` units in a free
 * slot, in state (SLOT_LIVE, or SLOT_PENDING for the calling backend), the
 * calling call's cost used, with o the reserve's outcome and dbid its
 * fallback store's database (InvalidOid: Redis's). The slot's index, or -1
 * when none is free.
 */
extern int	local_batch_keep(const RlArgs *args, const BatchKey *k, int64 deadline,
							 int64 taken, const RlOutcome *o, Oid dbid, SlotState state);

/*
 * The size local_batch_take chose, for a reserve in the fallback store
 * that follows it in the same call (local_batch_reserve_fallback).
 */
extern int64 local_batch_fallback_want;

/*
 * What an ended fallback batch did not use, taken out of its slot by a call
 * of its key (local_batch_take) for local_batch_give_back_fallback to give
 * back in that call's transaction; left is 0 when there is none.
 */
typedef struct FallbackRest
{
	int64		ts;				/* the batch's row */
	int64		taken;			/* its units */
	int64		left;			/* those not used: to give back */
} FallbackRest;

extern FallbackRest local_batch_fallback_rest;

#endif							/* SLIDEWIN_LOCAL_BATCH_INT_H */
