/*
 * lease.h
 *		Concurrency slots: rl_acquire, rl_release, rl_renew, rl_holders.
 */
#ifndef SLIDEWIN_LEASE_H
#define SLIDEWIN_LEASE_H

/* Register the transaction callbacks of the fallback's slots. */
extern void lease_init(void);

#endif
