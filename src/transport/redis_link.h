/*
 * redis_link.h
 *		One connection to one server (redis_conn.c, opened by
 *		redis_conn_open.c), as the routing layer (redis_route.c) drives
 *		it. Internal to those files.
 *
 * A link is a socket, or a TLS session on one, to the server being opened
 * or open; every wait on it is latch-aware and bounded by the deadline
 * given or by slidewin.command_timeout. Failures come back in a
 * RedisResult, whose message names the server concerned.
 */
#ifndef SLIDEWIN_REDIS_LINK_H
#define SLIDEWIN_REDIS_LINK_H

#include "redis_conn.h"

/* Where slidewin.redis_url points (redis_route.c owns it). */
extern RedisTarget redis_target;
extern bool redis_target_set;

/* Links a backend may hold: one per cluster node at most. */
#define REDIS_MAX_LINKS REDIS_MAX_LINK_COUNT

/*
 * One more link, beside those: rl_check's, which opens a connection of its
 * own to each server it checks, leaving the backend's as they are.
 */
#define REDIS_PROBE_LINK REDIS_MAX_LINKS

/* Which link the functions below act on (0: the only one outside Cluster). */
extern void redis_link_select(int i);
extern int	redis_link_current(void);

/* What the last opening of the current link learnt (for rl_check). */
typedef struct RedisLinkState
{
	bool		reached;		/* the socket connected (TLS aside) */
	bool		tls;			/* a TLS session is open */
	const char *version;		/* HELLO's version, "" when not known */
	const char *role;			/* HELLO's role, "" when not known */
} RedisLinkState;

extern void redis_link_state(RedisLinkState *state);
extern bool redis_link_is_open(void);
/* The file descriptor budget: one slot for the backend's connection. */
extern bool redis_link_reserve_fd(RedisResult *result);
/* The connection is set up; it gets a new number (redis_connection_id). */
extern void redis_link_opened(void);
extern void redis_link_close(void);
/* Close the current link and release its file descriptor slot. */
extern void redis_link_drop(void);

/*
 * Open a connection to host:port, every address of the name in turn, then
 * TLS when the URL asks for it; `role` prefixes the server in messages
 * ("the sentinel "). open_socket takes one numeric address or, with port 0,
 * a Unix socket path; `name` is what the certificate must name.
 */
extern bool redis_link_open_server(const char *host, int port, const char *role,
								   TimestampTz deadline, RedisResult *result);
extern bool redis_link_open_socket(const char *addr, int port, const char *name,
								   TimestampTz deadline, RedisResult *result);
/* AUTH (URL or password file), SELECT, and the HELLO version check. */
extern bool redis_link_log_in(const char *host, int port, RedisResult *result);
/* HELLO 2 alone, any version accepted (a sentinel's). */
extern bool redis_link_hello(RedisResult *result);

/* One command and its reply; on anything but a reply, close the link. */
extern RedisStatus redis_link_exchange(int argc, const char **argv,
									   const size_t *argvlen, TimestampTz deadline,
									   RedisResult *result);
/* A set-up command whose reply does not matter (AUTH, SELECT). */
extern bool redis_link_setup_command(int argc, const char **argv, RedisResult *result);
/* A command of the connect path: its reply (caller frees), or NULL. */
extern redisReply *redis_link_command(int argc, const char **argv, const size_t *lens,
									  const char *what, RedisResult *result);

extern void redis_link_message(RedisResult *result, RedisStatus status,
							   const char *what, const char *detail);

#endif
