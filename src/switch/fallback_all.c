/*-------------------------------------------------------------------------
 *
 * fallback_all.c
 *		The fallback store's side of rl_attempt_all: several keys, each
 *		decided as rl_attempt's fallback call decides it, all admitted or
 *		none charged.
 *
 * Denials first. Every key is first peeked with its cost (outage_fallback_peek:
 * what is committed, plus the seed, without a lock or a write). If one
 * denies, that is the answer: a call denied by what is committed is denied
 * whatever the admissions in progress do (they can only add units), and it
 * writes nothing, takes no lock and opens no subtransaction. Only a call
 * that every key would admit goes on to record. Without this, a denied call
 * wrote, and rolled back, the admissions of the keys before the one that
 * denied: dead rows and index entries in the store for every denial, and a
 * denial three times as slow as an admission.
 *
 * All or nothing. The keys are attempted one at a time inside a
 * subtransaction, each by outage_fallback_attempt, the very path of
 * rl_attempt's fallback calls: the same algorithm code, the same seed from
 * the outage memory, the same carry row for Redis to learn of. When a key
 * denies, the subtransaction is rolled back, and with it every row, head
 * claim, carry row and lock written for the keys before it; the count of
 * uncommitted admissions that carries wait for (outage_fallback_wrote) is
 * taken back too. Only when every key admits is the subtransaction
 * released into the caller's transaction, whose commit or abort then keeps
 * or drops them together. A rollback rather than checking every key before
 * recording any: a sliding log's admission is claimed after it is decided
 * (fallback_head.c), and a claim that finds another admission committed
 * meanwhile decides again, so a check made first could be overtaken before
 * the recording. Undone by the rollback, nothing of a denied call stays.
 *
 * One order of locks. An admission holds its key's head (or the key's
 * lock) until the transaction ends. Two calls over overlapping keys taking
 * them in their callers' orders could each hold a key the other waits for.
 * So every call attempts its keys in one canonical order
 * (fallback_lock_order: by lock tag, then by stored key), and stops at its
 * first denial, taking nothing after it: a call that waits for a key holds
 * only keys before it in that order, so no two calls can wait for each
 * other.
 *
 * The answer of a denied call is what the Redis script gives: every key as
 * a peek of its cost finds it (after the rollback, when the denial came
 * while recording), the keys that deny with their waits, a key with room
 * reported as not charged (allowed false, no wait of its own). The key
 * that denied while recording keeps the outcome it denied with, unpeeked.
 *
 * Shadow mode (force) records every key whatever the answer, as the script
 * does, so there is nothing to undo and no subtransaction; the keys are
 * still taken in the canonical order.
 *
 * This file decides nothing about policy and formats no Redis command.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

#include "carry.h"
#include "fallback.h"
#include "fallback_all.h"


/* Take back the fb_pending counts of the first `done` keys of order. */
static void
unwrite(const RlArgs *args, const RlOutcome *o, const int *order, int done)
{
	for (int i = 0; i < done; i++)
	{
		int			k = order[i];

		if (o[k].carry_units > 0)
			outage_fallback_unwrote(&args[k], o[k].carry_units);
	}
}

/*
 * Every key peeked, in o; whether every key has room. skip: a key whose
 * outcome o already holds (-1: none).
 */
static bool
peek_all(int n, const RlArgs *args, const RlOutcome *judged, int skip, RlOutcome *o)
{
	bool		room = true;

	for (int k = 0; k < n; k++)
	{
		if (k == skip)
			continue;
		o[k] = judged[k];
		outage_fallback_peek(&args[k], &o[k]);
		if (!o[k].allowed)
			room = false;
	}
	return room;
}

/* A denied call: each key with room is reported as not charged. */
static void
not_charged(int n, RlOutcome *o)
{
	for (int k = 0; k < n; k++)
	{
		if (o[k].allowed)
		{
			o[k].allowed = false;
			o[k].retry_us = 0;
		}
	}
}

void
outage_fallback_attempt_all(int n, const RlArgs *args, RlOutcome *o)
{
	int			order[RL_MAX_KEYS];
	RlOutcome	judged[RL_MAX_KEYS];
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	volatile int done = 0;
	volatile int denied = -1;

	Assert(n >= 1 && n <= RL_MAX_KEYS);
	memcpy(judged, o, n * sizeof(RlOutcome));
	fallback_lock_order(n, args, order);

	if (args[0].force)
	{
		for (int i = 0; i < n; i++)
			outage_fallback_attempt(&args[order[i]], &o[order[i]]);
		return;
	}

	if (!peek_all(n, args, judged, -1, o))
	{
		not_charged(n, o);
		return;
	}
	memcpy(o, judged, n * sizeof(RlOutcome));

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		for (int i = 0; i < n && denied < 0; i++)
		{
			int			k = order[i];

			outage_fallback_attempt(&args[k], &o[k]);
			done = i + 1;
			if (!o[k].allowed)
				denied = k;
		}
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		/* an error (a cancel, a timeout): nothing of the call stays */
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		unwrite(args, o, order, done);
		ReThrowError(edata);
	}
	PG_END_TRY();

	if (denied < 0)
	{
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		return;
	}
	RollbackAndReleaseCurrentSubTransaction();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	unwrite(args, o, order, done);

	o[denied].carry_units = 0;
	(void) peek_all(n, args, judged, denied, o);
	not_charged(n, o);
}
