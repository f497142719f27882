/*
 * misconf.h
 *		Telling a configuration error from an outage, and saying so in the
 *		server log (misconf.c).
 */
#ifndef SLIDEWIN_MISCONF_H
#define SLIDEWIN_MISCONF_H

#include "redis_conn.h"

/*
 * Redis could not be used: when the cause is a configuration error (its
 * RedisCause), a WARNING naming it, at most once per cause per
 * slidewin.redis_retry_interval in this backend. Otherwise nothing. It
 * decides nothing about the call, which follows its policy as before.
 */
extern void misconf_warn(const RedisResult *r);

/* The cause in a few words ("authentication"), for rl_check and messages. */
extern const char *misconf_cause_name(RedisCause cause);

#endif
