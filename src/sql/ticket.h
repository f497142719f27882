/*
 * ticket.h
 *		Tickets: the opaque text in rl_result.ticket that names the log entry
 *		a call recorded, so that rl_refund can give its units back later,
 *		outside the transaction that spent them.
 */
#ifndef SLIDEWIN_TICKET_H
#define SLIDEWIN_TICKET_H

#include "limit.h"

typedef struct RlTicket
{
	bool		fallback;		/* the entry is in the fallback store, not Redis */
	bool		multi;			/* rl_attempt_multi's log */
	int64		ts;				/* the entry's score (Redis) or ts (fallback) */
	int64		cost;
	int64		win_us;			/* the longest window it was admitted under */
} RlTicket;

/* The ticket of the entry o recorded for args (palloc'd), or NULL if none. */
extern char *ticket_make(const RlArgs *args, const RlOutcome *o);

/*
 * Read a ticket for args' key: 22023 naming argument "ticket" if it is not
 * one this database issued, or was issued for another key.
 */
extern void ticket_read(const char *text, const RlArgs *args, RlTicket *t);

#endif
