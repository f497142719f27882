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

/*
 * rl_attempt_all's ticket, naming the entry of each of its n keys (NULL
 * unless every key recorded one), and reading one back for the n keys of
 * args, in the call's order: 22023 naming argument "ticket" if it is not
 * one this database issued, or was issued for other keys; t[k] is key k's.
 */
extern char *ticket_make_all(int n, const RlArgs *args, const RlOutcome *o);
extern void ticket_read_all(const char *text, int n, const RlArgs *args, RlTicket *t);

/*
 * Give back the units of the entry t names, for args' key, in the store
 * that recorded it: true if given back, false if there was nothing to give
 * back. An ERROR when Redis cannot answer (the ticket stays good).
 */
extern bool ticket_give_back(RlArgs *args, const RlTicket *t);

#endif
