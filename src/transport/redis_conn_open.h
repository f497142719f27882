/*
 * redis_conn_open.h
 *		Opening a link to one server (redis_conn_open.c): the socket, TLS,
 *		logging in. For the files of the transport only.
 */
#ifndef SLIDEWIN_REDIS_CONN_OPEN_H
#define SLIDEWIN_REDIS_CONN_OPEN_H

#include "redis_conn_int.h"

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
/* A set-up command whose reply does not matter (AUTH, SELECT). */
extern bool redis_link_setup_command(int argc, const char **argv, RedisResult *result);
/* A command of the connect path: its reply (caller frees), or NULL. */
extern redisReply *redis_link_command(int argc, const char **argv, const size_t *lens,
									  const char *what, RedisResult *result);

#endif							/* SLIDEWIN_REDIS_CONN_OPEN_H */
