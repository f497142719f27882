/*
 * redis_url.h
 *		Where slidewin connects: the grammar of slidewin.redis_url and of the
 *		password file, and the server's version. Pure functions over strings: no server, no backend,
 *		no allocation, so that they can be tested and fuzzed on their own.
 */
#ifndef SLIDEWIN_REDIS_URL_H
#define SLIDEWIN_REDIS_URL_H

#include <stdbool.h>
#include <stddef.h>

/* Parsed form of slidewin.redis_url; lives in malloc'd GUC "extra" memory. */
typedef struct RedisTarget
{
	bool		is_unix;
	char		host[256];
	int			port;
	char		path[1024];
	char		user[128];
	char		password[512];	/* empty: none, or from the password file */
	int			db;
} RedisTarget;

/*
 * Parse redis://[[user]:password@]host[:port][/db] or
 * unix://[[user]:password@]/path/to/socket[?db=N] into *target. On failure
 * returns false with a sentence for errdetail in *why.
 */
extern bool redis_parse_url(const char *url, RedisTarget *target,
							const char **why);

/*
 * One line of a password file, libpq's .pgpass format:
 *   host:port:user:password
 * '*' in one of the first three fields matches anything; a backslash makes
 * the next character (':' or '\') literal; blank lines and lines starting
 * with '#' match nothing, and so does a line with fewer than four fields.
 * For a Unix socket the host field is the socket's path and the port "*".
 * Returns true and copies the password (NUL-terminated) when the line
 * matches and the password fits in pwsize.
 */
extern bool redis_passfile_match(const char *line, size_t len,
								 const char *host, int port, const char *user,
								 char *password, size_t pwsize);

/*
 * "7.0.15" -> 7, 0. False unless the text starts with two dot-separated
 * numbers of at most four digits each.
 */
extern bool redis_parse_version(const char *s, size_t len, int *major, int *minor);

/*
 * The version a HELLO 2 reply names: its first "version" field whose value
 * is a bulk string, read by redis_parse_version. That value, as text of at
 * most 60 bytes, goes to found whenever there is one (for a message); found
 * is "" otherwise. False when there is no such field or it does not read as
 * a version. Pure like the rest: it looks at hiredis's reply tree only.
 */
struct redisReply;
extern bool redis_hello_version(const struct redisReply *reply, int *major, int *minor,
								char *found, size_t foundsize);

/* The oldest server slidewin supports: ZRANGE ... REV came with 6.2. */
#define REDIS_MIN_MAJOR 6
#define REDIS_MIN_MINOR 2

#endif
