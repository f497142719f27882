/*-------------------------------------------------------------------------
 *
 * store_redis_int.h
 *		What store_redis.c offers the other files of the Redis store
 *		(store_redis_limit.c, store_redis_refund.c, store_redis_slots.c):
 *		the keys of a user key, the clock argument, and the sorting and
 *		refusal of a reply.
 *
 * No file outside src/store/redis may include it: the rest of the
 * extension goes through store_redis.h.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SLIDEWIN_STORE_REDIS_INT_H
#define SLIDEWIN_STORE_REDIS_INT_H

#include "lib/stringinfo.h"

#include "store_redis.h"

/* Redis key tags, one per algorithm: no algorithm reads another's data. */
extern const char *const redis_store_tags[ALGO_COUNT];

/* The Redis key of a user key under a tag, of its ledger, of its block. */
extern void redis_store_key(StringInfo buf, const char *tag, const RlArgs *args);
extern void redis_store_ledger_key(StringInfo buf, const char *tag, const RlArgs *args);
extern void redis_store_wait_key(StringInfo buf, const RlArgs *args);
extern void redis_store_block_key(StringInfo buf, const RlArgs *args);

/* The clock argument of a script: the test clock, or "" for Redis TIME. */
extern const char *redis_store_clock_arg(char *buf, size_t size);

/*
 * A finished exchange: true with a reply to use, false when Redis cannot
 * answer now; any other failure ERRORs.
 */
extern bool redis_store_settle(RedisResult *r);

/*
 * Refuse the reply in r (freed, its connection dropped): RS_FAIL_PROTOCOL
 * with the reason in r->message; returns false. Never ERRORs.
 */
extern bool redis_store_refuse(RedisResult *r, const char *fmt,...)
			pg_attribute_printf(2, 3);

/*
 * Read the reply to a refund script (log_refund.lua and its kin) in r:
 * true with *given when Redis took it, false when Redis cannot answer now
 * or the reply is not one such a script gives (refused as above). Frees
 * the reply.
 */
extern bool redis_store_read_refund(RedisResult *r, bool *given);

/*
 * Turn the reply to an outcome script for args (an attempt, or a peek) into
 * *o, or refuse it (false, RS_FAIL_PROTOCOL) if it is not one that script
 * could have given (reply_check.c). Frees the reply.
 */
extern bool redis_store_read_outcome(RedisResult *r, const RlArgs *args, bool peek,
									 RlOutcome *o);

/*
 * rl_attempt_all over keys in different slots of a Cluster
 * (store_redis_xslot.c): reserved slot by slot, then confirmed or
 * cancelled. run_slot runs log_all.lua or counter_all.lua on the keys of
 * one slot (store_redis_all.c passes its own), with reserve_us > 0 as
 * reservations that end that long after they are made unless confirmed
 * (the counting algorithms' named reserve_id, unique to the call); it is passed
 * rather than called, so that the two files do not depend on each other.
 */
typedef bool (*RedisRunAll) (int n, const RlArgs *args, int64 reserve_us,
							 const char *reserve_id, RlOutcome *o, RedisResult *r);
extern bool redis_store_attempt_xslot(int n, const RlArgs *args, RedisRunAll run_slot,
									  RlOutcome *o, RedisResult *r);

#endif
