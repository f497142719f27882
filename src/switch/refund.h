/*
 * refund.h
 *		Giving back Redis units admitted in a transaction that aborts, when
 *		refund_on_abort is on.
 */
#ifndef SLIDEWIN_REFUND_H
#define SLIDEWIN_REFUND_H

#include "limit.h"

/* How long an abort waits for Redis to confirm its refunds (ms). */

extern void refund_init(void);

/* Remember an entry recorded in Redis by this (sub)transaction. */
extern void refund_remember(const RlArgs *args, int64 recorded_ts);

/* Number of entries remembered so far, and giving back those from `mark` on now. */
extern int	refund_mark(void);
extern void refund_since(int mark);
/* Stop remembering the entries from `mark` on, keeping their units spent. */
extern void refund_forget_since(int mark);

/*
 * Send the queued refunds and read the replies owed, now (normal context;
 * may ERROR only for interrupts). Does nothing if Redis is not to be tried.
 */
extern void refund_settle(void);

/* Units given back, refunds dropped because Redis could not be reached. */
extern int64 refund_done_count;
extern int64 refund_dropped_count;

/*
 * Concurrency slots held in Redis by this transaction (lease.c). A slot is
 * remembered before its acquisition is sent (unconfirmed), so that a lost
 * reply still gets its release; confirmed once Redis said it is held.
 */
extern void refund_remember_release(const RlArgs *args, const char *holder, int64 lease_us);
extern void refund_confirm_slot(const RlArgs *args);
extern char *refund_held_slot(const RlArgs *args, int64 *lease_us, bool *confirmed);
extern char *refund_take_slot(const RlArgs *args);

/*
 * Before COMMIT or ROLLBACK ends the transaction (normal context): open a
 * connection if a slot's release needs one. Never raises but for interrupts.
 */
extern void refund_before_xact_end(void);

#endif
