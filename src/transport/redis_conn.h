/*
 * redis_conn.h
 *		The per-backend Redis connection, as the rest of slidewin sees it:
 *		send a command where slidewin.redis_url points (redis_route.c: one
 *		server, or the master the sentinels name) over one connection
 *		(redis_conn.c: socket or TLS, latch-aware waits), reconnecting.
 *
 * This layer moves bytes. It never decides what a failure means for
 * admission; it reports what happened and lets the caller choose.
 */
#ifndef SLIDEWIN_REDIS_CONN_H
#define SLIDEWIN_REDIS_CONN_H

#include <hiredis/hiredis.h>

#include "datatype/timestamp.h"
#include "utils/guc.h"
#include "redis_url.h"

/* What went wrong with an exchange, from the caller's point of view. */
typedef enum RedisStatus
{
	RS_OK = 0,
	RS_FAIL_CONNECT,			/* could not connect, AUTH or SELECT */
	RS_FAIL_IO,				/* connection broke during the exchange */
	RS_FAIL_TIMEOUT,			/* command_timeout passed */
	RS_FAIL_REPLY,			/* Redis answered with an error reply */
	RS_FAIL_PROTOCOL,			/* the reply was malformed, too large, or not
								 * one the command can get: the server cannot
								 * be trusted, and the connection is gone */
	RS_FAIL_VERSION			/* the server is too old for slidewin */
} RedisStatus;

/*
 * Why a server could not be used, when the reason is its configuration or
 * slidewin's rather than an outage: set where the failure is seen (the
 * transport does not decide what it means; misconf.c warns about it).
 */
typedef enum RedisCause
{
	RC_NONE = 0,				/* an outage or a fault, not the configuration */
	RC_AUTH,					/* WRONGPASS, NOAUTH, invalid password */
	RC_ACL,						/* NOPERM: the user may not run a command */
	RC_TLS,						/* the certificate was refused, or the TLS
								 * settings' files cannot be used */
	RC_PASSWORD_FILE,			/* slidewin.redis_password_file unusable */
	RC_VERSION,					/* the server is older than 6.2 */
	RC_COUNT
} RedisCause;

typedef struct RedisResult
{
	RedisStatus status;
	RedisCause	cause;			/* when the status is a failure */
	redisReply *reply;			/* when RS_OK or RS_FAIL_REPLY; caller frees */
	char		message[256];	/* human-readable cause, for errdetail */
} RedisResult;


/* Changes whenever the place slidewin connects to changes. */
extern uint64 redis_target_generation;


extern void redis_set_target(const RedisTarget *target);
/* slidewin.redis_url's check hook: the URL parsed into *extra. */
extern bool redis_check_url_setting(char **newval, void **extra, GucSource source);
extern void redis_credentials_changed(void);

/*
 * Send one command and wait for its reply. A reused connection that turns out
 * to be dead before any reply is replaced and the command sent once more.
 * May ERROR only for interrupts (cancel, statement_timeout, termination);
 * the connection is then discarded.
 */
extern void redis_exec(int argc, const char **argv, const size_t *argvlen,
					   RedisResult *result);
/*
 * redis_exec of a command for the server that answered the last one (under
 * Redis Cluster, that node, which a redirection may have chosen; elsewhere
 * the one server).
 */
extern void redis_exec_same(int argc, const char **argv, const size_t *argvlen,
							RedisResult *result);
extern void redis_disconnect(void);

/*
 * Pipelined commands, whose replies are read later, in order.
 *
 * The hook runs inside redis_exec on every command, after connecting and
 * before the command is sent: it sends what it has queued and reads every
 * reply owed (redis_pipeline_write, redis_pipeline_read), returning RS_OK or
 * the failure that ends the call. It may ERROR only for interrupts.
 *
 * redis_pipeline_ready, _append and _push are safe in transaction abort:
 * no ERROR, no PostgreSQL memory, no WaitEventSet, no connecting; _push
 * waits in poll() for at most budget_ms, and leaves what it could not write
 * in the output buffer for the next command. A connection left in the middle
 * of an exchange (FATAL skips PG_CATCH) is discarded by _ready, without I/O.
 */
typedef RedisStatus (*RedisPipelineHook) (RedisResult *result);

extern void redis_set_pipeline_hook(RedisPipelineHook hook);

/*
 * Under Redis Cluster this hook runs instead of the pipeline hook, before
 * each command: it reads what was pipelined on each node's link
 * (redis_select_link) and sends the rest through redis_exec, routed like
 * any command. redis_exec does not run it again from inside itself.
 */
extern void redis_set_routed_hook(RedisPipelineHook hook);
extern bool redis_pipeline_ready(void);
extern bool redis_pipeline_append(int argc, const char **argv, const size_t *argvlen);
extern bool redis_pipeline_push(int budget_ms);
extern RedisStatus redis_pipeline_write(RedisResult *result);
extern RedisStatus redis_pipeline_read(redisReply **reply, RedisResult *result);
/*
 * In transaction abort or at backend exit: waits only in poll(), until
 * deadline (then takes only what has arrived), and goes on pushing out
 * commands appended earlier meanwhile; no ERROR, no PostgreSQL memory. On a
 * timeout the reply stays owed, to be read later.
 */
extern RedisStatus redis_pipeline_read_nowait(redisReply **reply, TimestampTz deadline,
											  RedisResult *result);
/* Replies still owed on the open connection. */
extern int	redis_pipelined(void);

/* Connect if needed and run the pipeline hook, without a command of its own. */
extern void redis_sync(RedisResult *result);

/*
 * Which connection is open (0: none); a new connection has a new number, so
 * that a caller can tell that replies owed on an earlier one are lost.
 */
extern uint64 redis_connection_id(void);
/* Links (connections) a backend may hold: one per cluster node at most. */
#define REDIS_MAX_LINK_COUNT 64

/*
 * Under Redis Cluster, the link to the node that serves a Redis key, by the
 * slot map this backend holds; -1 when it names none or no link goes there
 * yet. Safe in abort: no allocation, no ERROR, no I/O.
 */
extern int	redis_cluster_link_for_key(const char *key, size_t len);

/* Which link the pipeline functions act on (0: the only one outside Cluster). */
extern void redis_select_link(int i);

/* Does slidewin.redis_url name a Redis Cluster (redis-cluster://)? */
extern bool redis_target_is_cluster(void);

/*
 * Where slidewin.redis_url points, for a message: host:port (the sentinels
 * and the master's name, the cluster's seeds, or a socket's path), never
 * the user or the password. Truncated to size.
 */
extern void redis_target_describe(char *buf, size_t size);

/* Which server slidewin.redis_url names (0: none); changes with the URL. */
extern uint32 redis_target_id(void);

#endif
