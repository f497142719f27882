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

/* What went wrong with an exchange, from the caller's point of view. */
typedef enum RedisStatus
{
	RS_OK = 0,
	RS_FAIL_CONNECT,			/* could not connect, AUTH or SELECT */
	RS_FAIL_IO,				/* connection broke during the exchange */
	RS_FAIL_TIMEOUT,			/* command_timeout passed */
	RS_FAIL_REPLY,			/* Redis answered with an error reply */
	RS_FAIL_PROTOCOL			/* the reply was malformed, too large, or not
								 * one the command can get: the server cannot
								 * be trusted, and the connection is gone */
} RedisStatus;

typedef struct RedisResult
{
	RedisStatus status;
	redisReply *reply;			/* when RS_OK or RS_FAIL_REPLY; caller frees */
	char		message[256];	/* human-readable cause, for errdetail */
} RedisResult;

/* Parsed form of slidewin.redis_url; lives in malloc'd GUC "extra" memory. */
typedef struct RedisTarget
{
	bool		is_unix;
	char		host[256];
	int			port;
	char		path[1024];
	char		user[128];
	char		password[512];
	int			db;
} RedisTarget;

extern int	slidewin_connect_timeout;
extern int	slidewin_command_timeout;

extern bool redis_parse_url(const char *url, RedisTarget *target,
							const char **why);
extern void redis_set_target(const RedisTarget *target);

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
