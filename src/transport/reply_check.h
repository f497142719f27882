/*
 * reply_check.h
 *		Whether a reply from Redis is one that slidewin's scripts and
 *		commands could have given. Pure: hiredis's reply tree and the call's
 *		arguments in, a verdict and a sentence out; no PostgreSQL, no server.
 */
#ifndef SLIDEWIN_REPLY_CHECK_H
#define SLIDEWIN_REPLY_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "algorithm.h"

/*
 * PostgreSQL's timestamp range and epoch, in microseconds; store_redis.c
 * checks at compile time that they are the server's.
 */
#define REPLY_PG_MIN_TIMESTAMP	INT64_C(-211813488000000000)
#define REPLY_PG_END_TIMESTAMP	INT64_C(9223371331200000000)
#define REPLY_PG_EPOCH_UNIX_US	INT64_C(946684800000000)

/*
 * The fields of an outcome reply, in order; then stable_us only in
 * sliding_log attempts, window (the deciding window, 1..n) only in
 * rl_attempt_multi's replies, each as the seventh element; then next_us,
 * last in every reply: when the window next frees a unit (the end of the
 * effective window of draft-ietf-httpapi-ratelimit-headers-11).
 */
typedef enum ReplyField
{
	RF_ALLOWED, RF_REMAINING, RF_RETRY, RF_RESET, RF_USED, RF_RECORDED, RF_STABLE,
	RF_WINDOW, RF_NEXT,
	RF_COUNT
} ReplyField;

/* The call a reply answers: what the script was asked. */
typedef struct ReplyCall
{
	RlAlgorithm algorithm;
	const char *algorithm_name; /* for messages */
	bool		peek;
	int64_t		lim;			/* multi: the smallest limit */
	int64_t		win_us;			/* multi: the longest window */
	int64_t		cost;			/* ignored for a peek, which asks about 1 unit */
	bool		force;
	int			nwin;			/* multi: how many windows, and their limits */
	const int64_t *lims;
	bool		clock_set;		/* the test clock was passed, as clock_us */
	int64_t		clock_us;
} ReplyCall;

/*
 * The reply to an outcome script (attempt or peek, any algorithm). True with
 * the fields in v (stable_us 0 where the reply has none); false with the
 * first rule the reply breaks, a sentence, in why. The reply is not freed.
 */
extern bool reply_check_outcome(const redisReply *reply, const ReplyCall *call,
								int64_t v[RF_COUNT], char *why, size_t whysize);

/*
 * rl_attempt_all's reply (log_all.lua, counter_all.lua): 8 integers per key,
 * the fields of a sliding-log attempt (stable_us 0 for the counting
 * algorithms), allowed 3 meaning "room, not charged". calls[k] is what key
 * k was asked (algorithm, lim, win_us, cost, force, the clock). True with
 * key k's fields in v[k]; false with the first rule broken in why.
 */
extern bool reply_check_all(const redisReply *reply, int n, const ReplyCall *calls,
							int64_t (*v)[RF_COUNT], char *why, size_t whysize);

/*
 * The reply to log_settle.lua, the second step of rl_attempt_all over
 * several slots of a Redis Cluster, for m keys of one slot: m integers,
 * each 0 or 1 (confirmed, or given back, for each key).
 */
extern bool reply_check_settle(const redisReply *reply, int m, bool confirm,
							   char *why, size_t whysize);

/* What the block script (rl_block, rl_unblock) was asked. */
typedef struct ReplyBlockCall
{
	bool		unblock;
	int64_t		duration_us;	/* rl_block: the block asked for */
	bool		clock_set;		/* the test clock was passed, as clock_us */
	int64_t		clock_us;
} ReplyBlockCall;

/*
 * The reply to the block script: rl_block's is the block's end, a time at
 * least duration_us after the test clock when that was passed; rl_unblock's
 * is 1 (a block was lifted) or 0. True with the value in *v.
 */
extern bool reply_check_block(const redisReply *reply, const ReplyBlockCall *call,
							  int64_t *v, char *why, size_t whysize);

/* The reply to DEL of at most `most` keys: how many it removed. */
extern bool reply_check_del(const redisReply *reply, int most, char *why, size_t whysize);

/* An error reply that means "not now": the store is busy or degraded. */
extern bool reply_is_transient(const char *msg);

/*
 * An error reply that means "not with this configuration": the credentials
 * (WRONGPASS, NOAUTH, invalid password) or the ACL (NOPERM).
 */
typedef enum ReplyConfigError
{
	REPLY_CONFIG_NONE,
	REPLY_CONFIG_AUTH,
	REPLY_CONFIG_ACL
} ReplyConfigError;

extern ReplyConfigError reply_config_error(const char *msg);

/* What a refund's reply says, and why one was refused (for a warning). */
typedef enum RefundVerdict
{
	REFUND_GIVEN,				/* units given back */
	REFUND_NOTHING,				/* nothing left to give back (expired, gone,
								 * or given back already) */
	REFUND_NOSCRIPT,			/* send again with EVAL */
	REFUND_RETRY,				/* Redis is busy or degraded: try later */
	REFUND_FAILED				/* any other reply: give up */
} RefundVerdict;

extern RefundVerdict reply_refund_verdict(const redisReply *reply);
extern void reply_refund_describe(const redisReply *reply, char *buf, size_t size);

/*
 * The reply to carrying n admissions back (switch/carry.c): {recorded, already
 * recorded, outside their window}, three integers from 0 to n whose sum is
 * n. False with the reason in why otherwise.
 */
extern bool reply_check_import(const redisReply *reply, long long n, long long counts[3],
							   char *why, size_t size);

/* "an integer", "an array", ... for messages. */
extern const char *reply_type_name(const redisReply *reply);

#endif
