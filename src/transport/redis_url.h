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

/* The most sentinels a redis-sentinel:// URL may list. */
#define REDIS_MAX_SENTINELS 8

/* The most seed nodes a redis-cluster:// URL may list. */
#define REDIS_MAX_SEEDS 16

typedef struct RedisHostPort
{
	char		host[256];
	int			port;
} RedisHostPort;

/* Parsed form of slidewin.redis_url; lives in malloc'd GUC "extra" memory. */
typedef struct RedisTarget
{
	bool		is_unix;
	bool		tls;			/* rediss://, rediss-sentinel://, rediss-cluster:// */
	/* redis-sentinel://: the sentinels and the master's name */
	int			nsentinels;		/* 0: not a sentinel URL */
	RedisHostPort sentinels[REDIS_MAX_SENTINELS];
	char		master[256];
	/* redis-cluster://: the seed nodes, where slot discovery starts */
	bool		cluster;
	int			nseeds;
	RedisHostPort seeds[REDIS_MAX_SEEDS];
	char		host[256];			/* the first sentinel or seed, for messages */
	int			port;
	char		path[1024];
	char		user[128];
	char		password[512];	/* empty: none, or from the password file */
	int			db;
} RedisTarget;

/*
 * Parse redis://[[user]:password@]host[:port][/db] (rediss:// for TLS),
 * redis-sentinel://[[user]:password@]host[:port][,host[:port]...]/master[/db]
 * (rediss-sentinel:// for TLS; the hosts are sentinels, port 26379 unless
 * given, and the user and password are the master's),
 * redis-cluster://[[user]:password@]host[:port][,host[:port]...][/0]
 * (rediss-cluster:// for TLS; the hosts are seed nodes, port 6379 unless
 * given, and the user and password are every node's) or
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
 * A sentinel's answer for the master's address: the host (an address or a
 * name, as the sentinels announce it) and its port, as two strings. False
 * with a sentence in *why unless both are well formed.
 */
extern bool redis_parse_master_addr(const char *host, size_t hostlen,
									const char *port, size_t portlen,
									RedisHostPort *out, const char **why);

/*
 * A sentinel's reply to SENTINEL GET-MASTER-ADDR-BY-NAME: an array of the
 * master's host and port, or nil for a name it does not know. True with the
 * address in *out; false with a sentence in *why for anything else.
 */
struct redisReply;
extern bool redis_sentinel_master_reply(const struct redisReply *r,
										RedisHostPort *out, const char **why);

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

/*
 * The value of a bulk-string field of a HELLO 2 reply ("role", "mode"), at
 * most size - 1 bytes of it, in out; "" and false when there is none.
 */
extern bool redis_hello_field(const struct redisReply *reply, const char *field,
							  char *out, size_t size);

/* Digits only, at most nine of them, within [lo, hi]: a port, a slot, a db. */
extern bool redis_parse_int_range(const char *s, size_t len, int lo, int hi, int *out);

/* The oldest server slidewin supports: ZRANGE ... REV came with 6.2. */
#define REDIS_MIN_MAJOR 6
#define REDIS_MIN_MINOR 2

#endif
