/*
 * store_redis.h
 *		The Redis store: the sliding log kept in Redis sorted sets.
 */
#ifndef SLIDEWIN_STORE_REDIS_H
#define SLIDEWIN_STORE_REDIS_H

#include "limit.h"
#include "redis_conn.h"

extern char *slidewin_key_prefix;

/*
 * Each returns true with *o filled in, or false when Redis cannot answer now
 * (unreachable, timed out, a "not now" error reply such as OOM or LOADING,
 * or a reply the script could not have given: RS_FAIL_PROTOCOL), with the
 * cause in *failure. Any other failure is an ERROR.
 */
extern bool redis_store_attempt(const RlArgs *args, RlOutcome *o, RedisResult *failure);
extern bool redis_store_peek(const RlArgs *args, RlOutcome *o, RedisResult *failure);
extern bool redis_store_reset(const RlArgs *args, RedisResult *failure);

/* Refunds (never ERROR; see store_redis.c) and the key they need. */
extern bool redis_store_refund(const char *rkey, int rkeylen, int64 ts, int64 cost,
							   int64 win_us, bool *given_back, RedisResult *r);
extern char *redis_store_log_key(const RlArgs *args, int *len);

#endif
