/*
 * outage_log.h
 *		The server log of an outage (outage_log.c): one WARNING when the
 *		server's calls first fail over, repeated at most once per
 *		slidewin.outage_log_interval, and one LOG line when Redis answers
 *		again; and since when Redis has been unreachable, for rl_stats.
 */
#ifndef SLIDEWIN_OUTAGE_LOG_H
#define SLIDEWIN_OUTAGE_LOG_H

#include "datatype/timestamp.h"
#include "redis_conn.h"

/* What answered a call that Redis could not answer. */
typedef enum OutageAnswer
{
	OUTAGE_FALLBACK,			/* the fallback store */
	OUTAGE_ALLOW,				/* the allow policy */
	OUTAGE_DENY,				/* the deny policy */
	OUTAGE_ERROR,				/* the error policy: the call raised */
	OUTAGE_KNOWN_DENIAL,		/* a denial Redis gave earlier (deny_cache.c) */
	OUTAGE_NANSWERS
} OutageAnswer;

/* Called from _PG_init: sets up shared memory when preloaded. */
extern void outage_log_init(void);

/* Redis could not answer a call (policy_redis_failed): the outage begins, or goes on. */
extern void outage_log_failed(const RedisResult *r);

/* A call Redis could not answer was answered thus (policy_run). */
extern void outage_log_answer(OutageAnswer a, const RedisResult *r);

/* Redis answered a call: the outage, if there was one, is over. */
extern void outage_log_answered(void);

/* Since when Redis has been unreachable; 0 when it is not. */
extern TimestampTz outage_log_since(void);

#endif
