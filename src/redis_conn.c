/*-------------------------------------------------------------------------
 *
 * redis_conn.c
 *		The per-backend Redis connection.
 *
 * One connection per backend, opened on first use and kept for the life of
 * the backend. Everything goes through hiredis's non-blocking calls, and
 * every wait is a WaitEventSetWait on the backend latch plus the socket, so
 * that a silent Redis ends at slidewin.command_timeout and pg_cancel_backend,
 * statement_timeout and backend termination take effect at once.
 *
 * A connection that has seen any failure, or that an interrupt left in the
 * middle of an exchange, is discarded: a half-read reply would desynchronise
 * the next command.
 *
 * This file must not decide what a failure means for admission, and must not
 * know what the commands it carries mean.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/socket.h>

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/fd.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "redis_conn.h"

int			slidewin_connect_timeout = 200;
int			slidewin_command_timeout = 100;

typedef struct RedisConn
{
	redisContext *ctx;
	WaitEventSet *wes;
	int			sock_pos;		/* position of the socket in wes */
	uint32		sock_events;	/* what we currently wait for on it */
	bool		fd_reserved;	/* holds an AcquireExternalFD slot */
} RedisConn;

static RedisConn conn;

/* Where to connect; copied from the GUC's parsed value by its assign hook. */
static RedisTarget target;
static bool target_set = false;

typedef enum WaitOutcome
{
	WAIT_READY,
	WAIT_TIMEOUT
} WaitOutcome;

static void set_message(RedisResult *result, RedisStatus status,
						const char *what, const char *detail);

/* ---------------------------------------------------------------------
 * URL parsing
 * ---------------------------------------------------------------------
 */

static int
hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Copy [src, src+len) into dst, undoing %XX escapes. */
static bool
copy_decoded(char *dst, size_t dstsize, const char *src, size_t len)
{
	size_t		o = 0;

	for (size_t i = 0; i < len; i++)
	{
		char		c = src[i];

		if (c == '%')
		{
			int			hi,
						lo;

			if (i + 2 >= len)
				return false;
			hi = hexval(src[i + 1]);
			lo = hexval(src[i + 2]);
			if (hi < 0 || lo < 0)
				return false;
			c = (char) (hi * 16 + lo);
			i += 2;
		}
		if (o + 1 >= dstsize)
			return false;
		dst[o++] = c;
	}
	dst[o] = '\0';
	return true;
}

static bool
parse_int_range(const char *s, size_t len, int lo, int hi, int *out)
{
	long		v = 0;

	if (len == 0 || len > 9)
		return false;
	for (size_t i = 0; i < len; i++)
	{
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (s[i] - '0');
	}
	if (v < lo || v > hi)
		return false;
	*out = (int) v;
	return true;
}

/* "user:password", ":password" or "password" */
static bool
parse_userinfo(const char *s, size_t len, RedisTarget *t)
{
	const char *colon = memchr(s, ':', len);

	if (colon == NULL)
		return copy_decoded(t->password, sizeof(t->password), s, len);
	if (!copy_decoded(t->user, sizeof(t->user), s, colon - s))
		return false;
	return copy_decoded(t->password, sizeof(t->password), colon + 1,
						len - (colon - s) - 1);
}

/*
 * Parse redis://[[user]:password@]host[:port][/db] or
 * unix://[[user]:password@]/path/to/socket[?db=N].
 * Runs in a GUC check hook: no palloc'd results, no ereport.
 */
bool
redis_parse_url(const char *url, RedisTarget *t, const char **why)
{
	const char *p;
	const char *at;

	memset(t, 0, sizeof(*t));
	t->port = 6379;

	if (strncmp(url, "redis://", 8) == 0)
	{
		const char *end;
		const char *slash;
		const char *hostend;

		p = url + 8;
		end = p + strlen(p);
		slash = strchr(p, '/');
		at = NULL;
		for (const char *q = p; q < (slash ? slash : end); q++)
			if (*q == '@')
				at = q;
		if (at)
		{
			if (!parse_userinfo(p, at - p, t))
			{
				*why = "The user or password part is malformed or too long.";
				return false;
			}
			p = at + 1;
			slash = strchr(p, '/');
		}
		hostend = slash ? slash : end;
		if (*p == '[')
		{
			const char *rb = memchr(p, ']', hostend - p);

			if (rb == NULL || rb - p - 1 <= 0 || (size_t) (rb - p - 1) >= sizeof(t->host))
			{
				*why = "The bracketed IPv6 host is malformed.";
				return false;
			}
			memcpy(t->host, p + 1, rb - p - 1);
			p = rb + 1;
			if (p < hostend && *p != ':')
			{
				*why = "Expected \":port\" after the IPv6 host.";
				return false;
			}
		}
		else
		{
			const char *colon = memchr(p, ':', hostend - p);
			const char *hend = colon ? colon : hostend;

			if (hend == p || (size_t) (hend - p) >= sizeof(t->host))
			{
				*why = "The host is empty or too long.";
				return false;
			}
			memcpy(t->host, p, hend - p);
			p = hend;
		}
		if (p < hostend && *p == ':')
		{
			if (!parse_int_range(p + 1, hostend - p - 1, 1, 65535, &t->port))
			{
				*why = "The port must be a number from 1 to 65535.";
				return false;
			}
		}
		if (slash && slash[1] != '\0')
		{
			if (!parse_int_range(slash + 1, strlen(slash + 1), 0, 1000000, &t->db))
			{
				*why = "The database must be a non-negative number.";
				return false;
			}
		}
		return true;
	}

	if (strncmp(url, "unix://", 7) == 0)
	{
		const char *q;

		p = url + 7;
		at = NULL;
		if (*p != '/')
		{
			at = strchr(p, '@');
			if (at == NULL || !parse_userinfo(p, at - p, t))
			{
				*why = "Expected unix:///path/to/socket or unix://:password@/path.";
				return false;
			}
			p = at + 1;
		}
		if (*p != '/')
		{
			*why = "The socket path must be absolute.";
			return false;
		}
		q = strchr(p, '?');
		if ((size_t) ((q ? q : p + strlen(p)) - p) >= sizeof(t->path))
		{
			*why = "The socket path is too long.";
			return false;
		}
		memcpy(t->path, p, (q ? q : p + strlen(p)) - p);
		if (q)
		{
			if (strncmp(q, "?db=", 4) != 0 ||
				!parse_int_range(q + 4, strlen(q + 4), 0, 1000000, &t->db))
			{
				*why = "The only query parameter is db=N, a non-negative number.";
				return false;
			}
		}
		t->is_unix = true;
		return true;
	}

	*why = "The URL must start with redis:// or unix://.";
	return false;
}

void
redis_set_target(const RedisTarget *t)
{
	if (t == NULL)
	{
		target_set = false;
		redis_disconnect();
		return;
	}
	if (target_set && memcmp(&target, t, sizeof(target)) == 0)
		return;
	target = *t;
	target_set = true;
	/* The next call connects to the new place. */
	redis_disconnect();
}

/* ---------------------------------------------------------------------
 * Connection life cycle
 * ---------------------------------------------------------------------
 */

void
redis_disconnect(void)
{
	if (conn.wes)
	{
		FreeWaitEventSet(conn.wes);
		conn.wes = NULL;
	}
	if (conn.ctx)
	{
		redisFree(conn.ctx);
		conn.ctx = NULL;
	}
	if (conn.fd_reserved)
	{
		ReleaseExternalFD();
		conn.fd_reserved = false;
	}
}

/* Wait until the socket is ready for `events`, the deadline passes, or an
 * interrupt is raised (which ERRORs out of here through CHECK_FOR_INTERRUPTS). */
static WaitOutcome
wait_socket(uint32 events, TimestampTz deadline)
{
	if (conn.sock_events != events)
	{
		ModifyWaitEvent(conn.wes, conn.sock_pos, events, NULL);
		conn.sock_events = events;
	}

	for (;;)
	{
		WaitEvent	ev;
		long		timeout;
		int			n;

		timeout = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
		if (timeout <= 0)
			return WAIT_TIMEOUT;

		n = WaitEventSetWait(conn.wes, timeout, &ev, 1, PG_WAIT_EXTENSION);
		if (n == 0)
			continue;			/* loop re-checks the deadline */
		if (ev.events & WL_LATCH_SET)
		{
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
			continue;
		}
		if (ev.events & (WL_SOCKET_READABLE | WL_SOCKET_WRITEABLE))
			return WAIT_READY;
	}
}

/*
 * Bounds on one reply. hiredis buffers a bulk string until all of it has
 * arrived and allocates an array's element table when it reads the header,
 * so a broken or hostile server could otherwise make the backend allocate
 * whatever it announces or streams until the command timeout. slidewin's
 * commands get back a few integers; these bounds leave room for any command
 * a connection may need, and no more.
 */
#define REPLY_MAX_BYTES		(4 * 1024 * 1024)
#define REPLY_MAX_ELEMENTS	(256 * 1024)	/* summed over all its arrays */

static redisReplyObjectFunctions *hiredis_reply_fns;
static redisReplyObjectFunctions capped_reply_fns;
static int	reply_elements_left;
static bool reply_too_many_elements;

/* hiredis takes NULL for out of memory and stops with a reader error. */
static void *
capped_create_array(const redisReadTask *task, int elements)
{
	if (elements > reply_elements_left)
	{
		reply_too_many_elements = true;
		return NULL;
	}
	reply_elements_left -= elements;
	return hiredis_reply_fns->createArray(task, elements);
}

/* Start a reply's budget; the reader's object functions become the capped ones. */
static void
cap_next_reply(redisReader *reader)
{
	if (reader->fn != &capped_reply_fns)
	{
		if (hiredis_reply_fns == NULL)
		{
			hiredis_reply_fns = reader->fn;
			capped_reply_fns = *reader->fn;
			capped_reply_fns.createArray = capped_create_array;
		}
		reader->fn = &capped_reply_fns;
	}
	reply_elements_left = REPLY_MAX_ELEMENTS;
	reply_too_many_elements = false;
}

/*
 * One request/reply exchange on the open connection. On anything but a
 * reply (error replies included) the connection must be discarded by the
 * caller.
 */
static RedisStatus
exchange(int argc, const char **argv, const size_t *argvlen,
		 TimestampTz deadline, RedisResult *result)
{
	redisContext *c = conn.ctx;
	void	   *reply = NULL;
	int			done = 0;
	size_t		received = 0;
	char		detail[128];

	if (redisAppendCommandArgv(c, argc, argv, argvlen) != REDIS_OK)
	{
		set_message(result, RS_FAIL_IO, "could not format command", c->errstr);
		return RS_FAIL_IO;
	}

	for (;;)
	{
		if (redisBufferWrite(c, &done) != REDIS_OK)
		{
			set_message(result, RS_FAIL_IO, "could not send to Redis", c->errstr);
			return RS_FAIL_IO;
		}
		if (done)
			break;
		if (wait_socket(WL_SOCKET_WRITEABLE, deadline) == WAIT_TIMEOUT)
		{
			set_message(result, RS_FAIL_TIMEOUT, "timed out sending to Redis", NULL);
			return RS_FAIL_TIMEOUT;
		}
	}

	cap_next_reply(c->reader);
	for (;;)
	{
		size_t		buffered;

		if (redisGetReplyFromReader(c, &reply) != REDIS_OK)
		{
			if (reply_too_many_elements)
			{
				snprintf(detail, sizeof(detail),
						 "it announces more than %d array elements",
						 REPLY_MAX_ELEMENTS);
				set_message(result, RS_FAIL_PROTOCOL,
							"oversized reply from Redis", detail);
				return RS_FAIL_PROTOCOL;
			}
			if (c->err == REDIS_ERR_PROTOCOL)
			{
				set_message(result, RS_FAIL_PROTOCOL,
							"malformed reply from Redis", c->errstr);
				return RS_FAIL_PROTOCOL;
			}
			set_message(result, RS_FAIL_IO, "could not parse the Redis reply", c->errstr);
			return RS_FAIL_IO;
		}
		if (reply != NULL)
			break;
		if (received > REPLY_MAX_BYTES)
		{
			snprintf(detail, sizeof(detail),
					 "%zu bytes received and the reply is not complete",
					 received);
			set_message(result, RS_FAIL_PROTOCOL,
						"oversized reply from Redis", detail);
			return RS_FAIL_PROTOCOL;
		}
		if (wait_socket(WL_SOCKET_READABLE, deadline) == WAIT_TIMEOUT)
		{
			set_message(result, RS_FAIL_TIMEOUT, "timed out waiting for Redis", NULL);
			return RS_FAIL_TIMEOUT;
		}
		buffered = c->reader->len;
		if (redisBufferRead(c) != REDIS_OK)
		{
			set_message(result, RS_FAIL_IO, "lost the connection to Redis", c->errstr);
			return RS_FAIL_IO;
		}
		received += c->reader->len - buffered;
	}

	result->reply = (redisReply *) reply;
	if (result->reply->type == REDIS_REPLY_ERROR)
	{
		set_message(result, RS_FAIL_REPLY, NULL, result->reply->str);
		return RS_FAIL_REPLY;
	}
	result->status = RS_OK;
	return RS_OK;
}

/* Run a set-up command (AUTH, SELECT) right after connecting. */
static bool
setup_command(int argc, const char **argv, RedisResult *result)
{
	size_t		lens[3];
	RedisStatus st;

	for (int i = 0; i < argc; i++)
		lens[i] = strlen(argv[i]);
	st = exchange(argc, argv, lens,
				  TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
											  slidewin_command_timeout),
				  result);
	if (result->reply)
	{
		freeReplyObject(result->reply);
		result->reply = NULL;
	}
	if (st != RS_OK)
	{
		char		cause[sizeof(result->message)];

		strlcpy(cause, result->message, sizeof(cause));
		set_message(result, RS_FAIL_CONNECT,
					strcmp(argv[0], "AUTH") == 0 ?
					"could not authenticate to Redis" :
					"could not select the Redis database", cause);
		return false;
	}
	return true;
}

static bool
connect_redis(RedisResult *result)
{
	TimestampTz deadline;
	int			soerr = 0;
	socklen_t	len = sizeof(soerr);

	if (!target_set)
	{
		set_message(result, RS_FAIL_CONNECT, "slidewin.redis_url is not set", NULL);
		return false;
	}

	if (!AcquireExternalFD())
	{
		set_message(result, RS_FAIL_CONNECT, "could not connect to Redis",
					"This backend has no file descriptor to spare.");
		return false;
	}
	conn.fd_reserved = true;

	if (target.is_unix)
		conn.ctx = redisConnectUnixNonBlock(target.path);
	else
		conn.ctx = redisConnectNonBlock(target.host, target.port);
	if (conn.ctx == NULL || conn.ctx->err)
	{
		set_message(result, RS_FAIL_CONNECT, "could not connect to Redis",
					conn.ctx ? conn.ctx->errstr : "out of memory");
		redis_disconnect();
		return false;
	}

	conn.wes = CreateWaitEventSet(TopMemoryContext, 3);
	AddWaitEventToSet(conn.wes, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(conn.wes, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	conn.sock_pos = AddWaitEventToSet(conn.wes, WL_SOCKET_WRITEABLE,
									  conn.ctx->fd, NULL, NULL);
	conn.sock_events = WL_SOCKET_WRITEABLE;

	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
										   slidewin_connect_timeout);
	if (wait_socket(WL_SOCKET_WRITEABLE, deadline) == WAIT_TIMEOUT)
	{
		set_message(result, RS_FAIL_CONNECT, "could not connect to Redis",
					"The connection attempt timed out (slidewin.connect_timeout).");
		redis_disconnect();
		return false;
	}
	if (getsockopt(conn.ctx->fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0 || soerr != 0)
	{
		set_message(result, RS_FAIL_CONNECT, "could not connect to Redis",
					strerror(soerr ? soerr : errno));
		redis_disconnect();
		return false;
	}

	if (target.password[0] != '\0')
	{
		const char *auth[3];
		int			n = 0;

		auth[n++] = "AUTH";
		if (target.user[0] != '\0')
			auth[n++] = target.user;
		auth[n++] = target.password;
		if (!setup_command(n, auth, result))
		{
			redis_disconnect();
			return false;
		}
	}
	if (target.db != 0)
	{
		char		dbbuf[16];
		const char *sel[2];

		snprintf(dbbuf, sizeof(dbbuf), "%d", target.db);
		sel[0] = "SELECT";
		sel[1] = dbbuf;
		if (!setup_command(2, sel, result))
		{
			redis_disconnect();
			return false;
		}
	}
	return true;
}

static void
set_message(RedisResult *result, RedisStatus status, const char *what,
			const char *detail)
{
	const char *where = "";
	char		addr[300];

	result->status = status;
	if (status != RS_FAIL_REPLY && target_set)
	{
		if (target.is_unix)
			snprintf(addr, sizeof(addr), " at %s", target.path);
		else
			snprintf(addr, sizeof(addr), " at %s:%d", target.host, target.port);
		where = addr;
	}
	if (what && detail && detail[0])
		snprintf(result->message, sizeof(result->message), "%s%s: %s",
				 what, where, detail);
	else if (what)
		snprintf(result->message, sizeof(result->message), "%s%s", what, where);
	else
		snprintf(result->message, sizeof(result->message), "%s",
				 detail ? detail : "unknown error");
}

/* ---------------------------------------------------------------------
 * The entry point
 * ---------------------------------------------------------------------
 */

void
redis_exec(int argc, const char **argv, const size_t *argvlen,
		   RedisResult *result)
{
	bool		reused;
	RedisStatus st;

	result->status = RS_OK;
	result->reply = NULL;
	result->message[0] = '\0';

	PG_TRY();
	{
		for (int attempt = 0;; attempt++)
		{
			reused = (conn.ctx != NULL);
			if (!reused && !connect_redis(result))
				break;

			st = exchange(argc, argv, argvlen,
						  TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													  slidewin_command_timeout),
						  result);
			if (st == RS_OK || st == RS_FAIL_REPLY)
				break;

			/* Anything else leaves the connection in an unknown state. */
			if (result->reply)
			{
				freeReplyObject(result->reply);
				result->reply = NULL;
			}
			redis_disconnect();

			/*
			 * A connection kept from an earlier call may have gone stale
			 * (Redis restarted, CLIENT KILL). Try once more on a fresh one.
			 * A timeout is not retried: that would double the wait.
			 */
			if (!(st == RS_FAIL_IO && reused && attempt == 0))
				break;
		}
	}
	PG_CATCH();
	{
		/* Interrupted mid-exchange: the connection cannot be trusted. */
		if (result->reply)
		{
			freeReplyObject(result->reply);
			result->reply = NULL;
		}
		redis_disconnect();
		PG_RE_THROW();
	}
	PG_END_TRY();
}
