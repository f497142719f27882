/*-------------------------------------------------------------------------
 *
 * carry_turn.h
 *		Carriers of one key take turns (carry_turn.c), for carry.c: the
 *		key's carry lock, and the note of the last complete carry of a key
 *		in the outage memory's slot.
 *
 * No file outside src/switch includes it.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SLIDEWIN_CARRY_TURN_H
#define SLIDEWIN_CARRY_TURN_H

#include "storage/lock.h"

#include "limit.h"

/*
 * Carriers of one key take turns. When a key's first call after an outage
 * comes from many backends at once, each used to send every row of the key,
 * batch for batch in step with the others (Redis recorded each row once, but
 * was sent it by every one of them): 20 backends and 30,000 rows made each
 * of those calls wait 11 s (TAP 112). So a carry of the key holds its carry
 * lock while it sends the rows, and the carry that follows it sends nothing
 * when no fallback row was written or committed on the server since the one
 * before began to look (the epoch), for then every row it could see was sent
 * already; its deletions only wait for their commit. The lock is never
 * held while waiting for another lock, and each of the holder's round trips
 * ends within slidewin.command_timeout; still, the wait for it is bounded
 * (and interruptible): past it the call carries beside the other, as
 * before.
 */
#define CARRY_TURN_WAIT_MS 10000

/* A carry's turn at its key: the lock held, and the epoch it read first. */
typedef struct CarryTurn
{
	bool		active;			/* turns are kept (the outage table exists) */
	bool		locked;
	LOCKTAG		tag;
	uint64		epoch;
} CarryTurn;

/*
 * Take the key's turn, waiting at most wait_ms (t->epoch read before the
 * carry looks). False when the carry has nothing to do: the last complete
 * carry of the key began at that epoch, and sent everything. True
 * otherwise, with t->locked saying whether the turn is held (not when the
 * wait ran out: the carry then goes on beside the other).
 */
extern bool carry_turn_take(CarryTurn *t, const RlArgs *key, int wait_ms);

/*
 * Give the turn up, if held; sent_all: the carry sent every row it could
 * see, and is noted as the key's last complete carry.
 */
extern void carry_turn_end(CarryTurn *t, const RlArgs *key, bool sent_all);

#endif							/* SLIDEWIN_CARRY_TURN_H */
