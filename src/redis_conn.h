/*
 * redis_conn.h
 *		The per-backend Redis connection: URL parsing, non-blocking exchange
 *		with latch-aware waits, reconnecting.
 *
 * This layer moves bytes. It never decides what a failure means for
 * admission; it reports what happened and lets the caller choose.
 */
#ifndef SLIDEWIN_REDIS_CONN_H
#define SLIDEWIN_REDIS_CONN_H

#include <hiredis/hiredis.h>

#include "redis_url.h"

/* What went wrong with an exchange, from the caller's point of view. */
typedef enum RedisStatus
{
	RS_OK = 0,
	RS_FAIL_CONNECT,			/* could not connect, AUTH or SELECT */
	RS_FAIL_IO,				/* connection broke during the exchange */
	RS_FAIL_TIMEOUT,			/* command_timeout passed */
	RS_FAIL_REPLY,			/* Redis answered with an error reply */
	RS_FAIL_VERSION			/* the server is too old for slidewin */
} RedisStatus;

typedef struct RedisResult
{
	RedisStatus status;
	redisReply *reply;			/* when RS_OK or RS_FAIL_REPLY; caller frees */
	char		message[256];	/* human-readable cause, for errdetail */
} RedisResult;

extern int	slidewin_connect_timeout;
extern int	slidewin_command_timeout;

/* Changes whenever the place slidewin connects to changes. */
extern uint64 redis_target_generation;

extern char *slidewin_redis_password_file;

extern void redis_set_target(const RedisTarget *target);
extern void redis_credentials_changed(void);

/*
 * Send one command and wait for its reply. A reused connection that turns out
 * to be dead before any reply is replaced and the command sent once more.
 * May ERROR only for interrupts (cancel, statement_timeout, termination);
 * the connection is then discarded.
 */
extern void redis_exec(int argc, const char **argv, const size_t *argvlen,
					   RedisResult *result);
extern void redis_disconnect(void);

#endif
