/*
 * policy.h
 *		What a call does when Redis cannot answer: the failure policy and the
 *		circuit breaker.
 */
#ifndef SLIDEWIN_POLICY_H
#define SLIDEWIN_POLICY_H

#include "limit.h"
#include "redis_conn.h"
#include "utils/guc.h"


/* The policy named by `name`, or the setting when name is NULL. */
extern int	policy_from_name(const char *name, const char *argname);

typedef bool (*RedisOp) (const RlArgs *args, RlOutcome *o, RedisResult *r);
typedef void (*FallbackOp) (const RlArgs *args, RlOutcome *o);

/* Ask Redis; if it cannot answer, do what the policy says. */
extern void policy_run(int policy, const RlArgs *args, RlOutcome *o,
					   RedisOp redis_op, FallbackOp fallback_op);

/* The circuit breaker, for callers that talk to Redis outside policy_run. */
/*
 * rl_attempt_all: the n keys of args, all charged or none, by Redis, or when
 * Redis cannot answer by the fallback store (all or none inside the
 * transaction), or by the allow, deny or error policy, the same for every
 * key.
 */
extern void policy_run_all(int policy, int n, const RlArgs *args, RlOutcome *o);

extern bool policy_redis_may_be_tried(RedisResult *r);
extern void policy_redis_failed(const RedisResult *r);
extern void policy_unavailable_error(const RedisResult *r);
/* When this backend tries Redis again (0: at its next call), in microseconds. */
extern int64 policy_redis_retry_us(void);

#endif
