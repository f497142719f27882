/*
 * enforce.h
 *		Charging a call (failure policy, shadow mode, denial logging,
 *		refund registration), raising on denial, and waiting for capacity.
 */
#ifndef SLIDEWIN_ENFORCE_H
#define SLIDEWIN_ENFORCE_H

#include "compat.h"
#include "limit.h"
#include "utils/guc.h"


/*
 * Charge args->cost units under the failure policy. In shadow mode
 * (slidewin.enforce off) a call that would be denied is recorded and comes
 * back allowed, with remaining 0 and the retry_after it would have had. With
 * refund, units admitted by Redis are given back if the (sub)transaction
 * aborts.
 */
extern void enforce_charge(const RlArgs *args, int policy, bool refund, RlOutcome *o);

/*
 * rl_attempt_all: the n keys of args charged all or none (policy_run_all),
 * with shadow mode, refunds and the deny cache as enforce_charge has them
 * (a known denial of any key denies the call unasked), each key's
 * outcome in o[k]. Returns the key that decided: the first that denied,
 * else the one with the least room left (the first of equals).
 */
extern int	enforce_charge_all(int n, const RlArgs *args, int policy, bool refund,
							   RlOutcome *o);

/*
 * Raise SQLSTATE RL429 (or PGRST, under error_style postgrest). The text
 * names the key only under slidewin.error_show_key.
 */
SLIDEWIN_NORETURN extern void enforce_raise_denied(const RlArgs *args, const RlOutcome *o);

/*
 * The same for a call that needs more units than its limit, so that no
 * retry can pass; detail and hint are the default style's.
 */
SLIDEWIN_NORETURN extern void enforce_raise_never(const RlArgs *args, const char *detail,
												  const char *hint);

/*
 * rl_acquire(raise => true): no slot free. holders -1: no store answered;
 * retry_us -1: nobody can say when a retry may pass.
 */
SLIDEWIN_NORETURN extern void enforce_raise_slots(const RlArgs *key, int64 max, int64 holders,
												  int64 retry_us);

/* Charge, sleeping on the latch until admitted or timeout_us has passed. */
extern void enforce_wait(const RlArgs *args, int policy, bool refund,
						 int64 timeout_us, RlOutcome *o);

#endif
