/*
 * stats.h
 *		Server-wide counters of what the limiter decided, per rule and for
 *		the keys denied most (stats.c), read through the rl_stats,
 *		rl_stats_rules and rl_top_keys views (stats_views.c).
 *
 * Every function here is cheap, never ERRORs, takes no lock that all
 * backends share on the deny cache's path, and does nothing when the
 * library was not preloaded or slidewin.stats is off. The recording
 * functions are safe in transaction abort and at backend exit.
 */
#ifndef SLIDEWIN_STATS_H
#define SLIDEWIN_STATS_H

#include "limit.h"


/* Who gave a call its answer. */
typedef enum StatsSource
{
	STATS_REDIS,
	STATS_FALLBACK,
	STATS_POLICY,				/* allow or deny without a store */
	STATS_DENY_CACHE
} StatsSource;

extern void stats_init(void);

/* A charging call's final answer (rl_wait: once, after its last try). */
extern void stats_count_call(const RlArgs *args, const RlOutcome *o, StatsSource source);

/* Redis could not answer a call (it goes to the failure policy). */
extern void stats_redis_failed(bool timed_out);
extern void stats_breaker_trip(void);
extern void stats_reconnect(void);
extern void stats_refund(bool done);
/* Concurrency slots (lease.c, refund.c). */
extern void stats_count_slot(int64 max, int64 lease_us, bool acquired, int64 holders,
							 bool waited, int64 leases_ended);
extern void stats_slot_released(bool delivered);
/* Exactness across an outage (outage.c, fallback.c). */
typedef enum StatsOutage
{
	STATS_OUTAGE_SEEDED_UNITS,	/* units Redis had counted, carried into the fallback store */
	STATS_OUTAGE_UNSEEDED_CALL, /* a fallback call on a key Redis's answers were not kept for */
	STATS_OUTAGE_CARRIED		/* fallback admissions Redis recorded when carried back */
} StatsOutage;
extern void stats_outage(StatsOutage what, int64 n);

/* One request answered by Redis, in microseconds from sending to reply. */
extern void stats_redis_rtt(int64 us);

#endif
