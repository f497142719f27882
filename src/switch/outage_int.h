/*-------------------------------------------------------------------------
 *
 * outage_int.h
 *		What the outage memory (outage.c) offers carry.c: the table in
 *		shared memory and its slots, a key's place in it, and the note of an
 *		answer with what the carry before it achieved.
 *
 * No file outside src/switch may include it: the rest of the extension
 * goes through outage.h and carry.h. What the table means is said at the
 * head of outage.c.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SLIDEWIN_OUTAGE_INT_H
#define SLIDEWIN_OUTAGE_INT_H

#include "port/atomics.h"
#include "storage/spin.h"

#include "limit.h"

typedef struct OutageSlot
{
	slock_t		mutex;
	bool		applied;		/* a fallback call has counted them (for rl_stats) */
	int			algorithm;
	uint64		keyhash;		/* of prefix and key; 0: empty */
	int64		lim;
	int64		win_us;
	int64		seen_at;		/* fallback clock: when this server asked Redis */
	int64		units;			/* units Redis counted in the window */
	int64		frees_at;		/* fallback clock: the newest of them leaves the window */
	int64		redis_frees;	/* the same on Redis's clock, as Redis answered it */
	int64		inflight;		/* units of calls of the key sent to Redis, not yet noted */
	int64		inflight_other; /* the same, of sliding-log calls of keys the
								 * slot does not hold (one Redis never answered
								 * here, or that another key displaced) */
	int64		fb_pending;		/* units of fallback admissions not yet committed
								 * (of any key of this slot: see outage_fallback_wrote) */
	uint64		fb_written;		/* fallback admissions ever counted in fb_pending */

	/*
	 * Which of the fallback store's rows the answer above stands in for
	 * (see "Which rows an answer stands for" at the head of outage.c): those of
	 * database carried_db admitted before carried_to (fallback clock), when
	 * no COMMIT PREPARED has run since carried_gen. Only a call that carried
	 * the key completely before Redis decided it moves them.
	 */
	Oid			carried_db;		/* InvalidOid: no database's rows */
	int64		carried_to;
	uint64		carried_gen;

	/*
	 * The last carry of a key of this slot that sent every row it could see
	 * (carry.c, carry_one): of the key carry_keyhash (0: none) and algorithm
	 * carry_algo in database carry_db, which read the epoch carry_epoch before
	 * it looked. A carry of the same key that finds the epoch still there has
	 * nothing to send: no row was written or committed since.
	 */
	uint64		carry_keyhash;
	Oid			carry_db;
	int			carry_algo;
	uint64		carry_epoch;
} OutageSlot;

/*
 * A backend's sliding-log fallback calls of its transaction that have not
 * ended (carry.c, pending_add): the announcement number of the oldest of
 * them, plus one (0: none), and the slot of their key (MARK_ANY_SLOT when
 * they are of keys in more than one slot). A carry waits for the calls
 * announced before it looked, and for no later one (wait_pending).
 */
#define MARK_ANY_SLOT PG_UINT32_MAX

typedef struct PendingMark
{
	pg_atomic_uint64 seq1;
	pg_atomic_uint32 slot;
} PendingMark;

typedef struct OutageShared
{
	pg_atomic_uint64 epoch;		/* moves on every fallback admission */
	pg_atomic_uint64 prepared_gen;	/* moves at every COMMIT PREPARED */
	pg_atomic_uint64 announce_seq;	/* numbers the fallback calls' announcements */
	pg_atomic_uint32 marks_set;	/* marks with seq1 set, or being set or cleared */
	PendingMark *marks;			/* one per process (outage_marks_n), after the slots */
	OutageSlot	slots[FLEXIBLE_ARRAY_MEMBER];
} OutageShared;

/* The table (outage.c); NULL unless slidewin is preloaded. */
extern OutageShared *outage_shared;

/* How many marks there are: one per process that can run SQL. */
extern int	outage_marks_n(void);

/* rl_attempt's algorithms; rl_attempt_multi's log is not covered. */
extern bool outage_covered(const RlArgs *args);

/* Whether the table is there, with slots. */
extern bool outage_seeds_active(void);

/*
 * The key's identity in the table (never 0): its slot is this modulo
 * slidewin.outage_keys.
 */
extern uint64 outage_keyhash(const RlArgs *args);

/*
 * Redis answered a call that was sent at asked_at (outage_clock): keep what
 * it counted for the key, for the fallback store. carried_complete: the call
 * carried every row of its key in this database before Redis decided it,
 * having read carried_gen (the COMMIT PREPARED generation) before looking;
 * the slot's carried_to then moves to asked_at.
 */
extern void outage_note_answer(const RlArgs *args, int64 asked_at,
							   const RlOutcome *o, bool carried_complete,
							   uint64 carried_gen);

#endif							/* SLIDEWIN_OUTAGE_INT_H */
