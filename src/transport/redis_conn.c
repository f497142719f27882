/*-------------------------------------------------------------------------
 *
 * redis_conn.c
 *		One connection to one server: socket or TLS, waits, timeouts,
 *		logging in, and pipelined commands.
 *
 * One connection per backend, opened on first use and kept for the life of
 * the backend; which server it goes to is redis_route.c's business. Everything goes through hiredis's non-blocking calls, and
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
 * Opening a connection (resolving the name, the socket, the TLS handshake,
 * logging in) is in redis_conn_open.c; what both files share of a link is
 * in redis_conn_int.h.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>
#include <poll.h>
#include <time.h>

#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/fd.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include <hiredis/sds.h>

#include "compat.h"
#include "redis_conn.h"
#include "redis_conn_int.h"
#include "reply_cap.h"
#include "reply_check.h"
#include "settings.h"
#include "stats.h"

/* Where slidewin.redis_url points: set by redis_set_target (redis_route.c). */
RedisTarget redis_target;
bool		redis_target_set = false;


/*
 * One link per server: a single one for a single server or Sentinel, one
 * per node under Redis Cluster. `redis_cur` is the one the functions below act
 * on; redis_route.c selects it.
 */
static RedisConn links[REDIS_MAX_LINKS + 1];	/* + REDIS_PROBE_LINK */
RedisConn  *redis_cur = &links[0];
static uint64 connections_opened = 0;

/* Microseconds on the monotonic clock, for round-trip times. */
static int64
mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ---------------------------------------------------------------------
 * Connection life cycle
 * ---------------------------------------------------------------------
 */

/* Close the socket (and its TLS session and wait set), keeping the fd slot. */
void
redis_link_close(void)
{
	if (redis_cur->ssl)
	{
		tls_close(redis_cur->ssl);
		redis_cur->ssl = NULL;
	}
	if (redis_cur->wes)
	{
		FreeWaitEventSet(redis_cur->wes);
		redis_cur->wes = NULL;
	}
	if (redis_cur->ctx)
	{
		redisFree(redis_cur->ctx);
		redis_cur->ctx = NULL;
	}
	redis_cur->mid_exchange = false;
	redis_cur->peer[0] = '\0';
}

/* Close the current link and give its fd slot back. */
void
redis_link_drop(void)
{
	redis_link_close();
	if (redis_cur->fd_reserved)
	{
		ReleaseExternalFD();
		redis_cur->fd_reserved = false;
	}
	redis_cur->mid_exchange = false;
	redis_cur->pipelined = 0;
	redis_cur->id = 0;
}

/* Close every link; the first is current again. */
void
redis_disconnect(void)
{
	for (int i = 0; i <= REDIS_PROBE_LINK; i++)
	{
		redis_cur = &links[i];
		redis_link_drop();
	}
	redis_cur = &links[0];
}

void
redis_link_select(int i)
{
	Assert(i >= 0 && i <= REDIS_PROBE_LINK);
	redis_cur = &links[i];
}

int
redis_link_current(void)
{
	return (int) (redis_cur - links);
}

void
redis_link_state(RedisLinkState *state)
{
	state->reached = redis_cur->reached;
	state->tls = redis_cur->ssl != NULL;
	state->version = redis_cur->version;
	state->role = redis_cur->role;
}

void
redis_select_link(int i)
{
	redis_link_select(i);
}

/* Wait until the socket is ready for `events`, the deadline passes, or an
 * interrupt is raised (which ERRORs out of here through CHECK_FOR_INTERRUPTS). */
WaitOutcome
redis_wait_socket(uint32 events, TimestampTz deadline)
{
	if (redis_cur->sock_events != events)
	{
		ModifyWaitEvent(redis_cur->wes, redis_cur->sock_pos, events, NULL);
		redis_cur->sock_events = events;
	}

	for (;;)
	{
		WaitEvent	ev;
		long		timeout;
		int			n;

		timeout = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
		if (timeout <= 0)
			return WAIT_TIMEOUT;

		n = WaitEventSetWait(redis_cur->wes, timeout, &ev, 1, PG_WAIT_EXTENSION);
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

/* ---------------------------------------------------------------------
 * Moving bytes, over the socket itself or through its TLS session.
 * hiredis formats commands into its output buffer and parses what is fed
 * to its reader; these move the bytes between those and the connection,
 * never waiting: "would block" comes back with the socket event to wait
 * for. They never raise an ERROR, so the abort path may use them too.
 * ---------------------------------------------------------------------
 */
#define READ_CHUNK 4096

static bool
would_block(int e)
{
	return e == EAGAIN || e == EWOULDBLOCK || e == EINTR;
}

/*
 * Send what the output buffer holds: 1 when all of it is sent, 0 when the
 * connection would block (*wait: the event), -1 on failure (cause in err).
 */
static int
conn_send(int *wait, char *err, size_t errsize)
{
	redisContext *c = redis_cur->ctx;

	while (sdslen(c->obuf) > 0)
	{
		ssize_t		n;

		if (redis_cur->ssl)
			n = tls_write(redis_cur->ssl, c->obuf, sdslen(c->obuf), wait, err, errsize);
		else
		{
			n = write(c->fd, c->obuf, sdslen(c->obuf));
			if (n < 0 && would_block(errno))
			{
				*wait = WL_SOCKET_WRITEABLE;
				n = 0;
			}
			else if (n < 0)
				snprintf(err, errsize, "%s", strerror(errno));
		}
		if (n <= 0)
			return (int) n;
		sdsrange(c->obuf, n, -1);
	}
	return 1;
}

/*
 * Feed what has arrived to the reply reader: the bytes read (> 0), 0 when
 * nothing has (*wait: the event), -1 on failure or when the server closed
 * the connection (cause in err).
 */
static ssize_t
conn_recv(int *wait, char *err, size_t errsize)
{
	char		buf[READ_CHUNK];
	ssize_t		n;

	if (redis_cur->ssl)
		n = tls_read(redis_cur->ssl, buf, sizeof(buf), wait, err, errsize);
	else
	{
		n = read(redis_cur->ctx->fd, buf, sizeof(buf));
		if (n == 0)
		{
			snprintf(err, errsize, "the server closed the connection");
			return -1;
		}
		if (n < 0 && would_block(errno))
		{
			*wait = WL_SOCKET_READABLE;
			return 0;
		}
		if (n < 0)
		{
			snprintf(err, errsize, "%s", strerror(errno));
			return -1;
		}
	}
	if (n > 0 && redisReaderFeed(redis_cur->ctx->reader, buf, n) != REDIS_OK)
	{
		snprintf(err, errsize, "%s", redis_cur->ctx->reader->errstr);
		return -1;
	}
	return n;
}

/*
 * Whether bytes can be read without waiting on the socket: OpenSSL may hold
 * decrypted bytes of a record it has already taken off the socket, which
 * the socket will never announce again. Every read loop asks this before it
 * waits.
 */
static bool
conn_pending(void)
{
	return redis_cur->ssl != NULL && tls_pending(redis_cur->ssl);
}

/*
 * A command in RESP, appended to the connection's output buffer. Written
 * here into a buffer kept for the backend's life, rather than by hiredis's
 * redisAppendCommandArgv, which counts every argument's digits, allocates
 * the command and copies it twice: that was a sixth of rl_attempt's own
 * CPU time in the backend (doc/performance.md, "The web route"). The bytes
 * sent are the same.
 */
static int
append_command(redisContext *c, int argc, const char **argv, const size_t *argvlen)
{
	static StringInfo cmd = NULL;
	char		num[MAXINT8LEN + 1];

	if (cmd == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		cmd = makeStringInfo();
		MemoryContextSwitchTo(old);
	}
	resetStringInfo(cmd);
	appendStringInfoChar(cmd, '*');
	appendBinaryStringInfo(cmd, num, pg_ulltoa_n((uint64) argc, num));
	appendBinaryStringInfo(cmd, "\r\n", 2);
	for (int i = 0; i < argc; i++)
	{
		appendStringInfoChar(cmd, '$');
		appendBinaryStringInfo(cmd, num, pg_ulltoa_n((uint64) argvlen[i], num));
		appendBinaryStringInfo(cmd, "\r\n", 2);
		appendBinaryStringInfo(cmd, argv[i], argvlen[i]);
		appendBinaryStringInfo(cmd, "\r\n", 2);
	}
	return redisAppendFormattedCommand(c, cmd->data, cmd->len);
}

/*
 * One request/reply exchange on the open connection. On anything but a
 * reply (error replies included) the connection must be discarded by the
 * caller.
 */
RedisStatus
redis_link_exchange(int argc, const char **argv, const size_t *argvlen,
		 TimestampTz deadline, RedisResult *result)
{
	redisContext *c = redis_cur->ctx;
	void	   *reply = NULL;
	int			done = 0;
	size_t		received = 0;
	char		detail[128];
	char		ioerr[256];
	int			wait_for = WL_SOCKET_READABLE;
	int64		sent_at;

	if (redis_cur->pipelined > 0)
	{
		/* The next reply belongs to a pipelined command: not ours to read. */
		redis_link_message(result, RS_FAIL_IO, "replies to pipelined commands are still owed", NULL);
		return RS_FAIL_IO;
	}
	result->cause = RC_NONE;
	redis_cur->mid_exchange = true;
	sent_at = mono_us();
	if (append_command(c, argc, argv, argvlen) != REDIS_OK)
	{
		redis_link_message(result, RS_FAIL_IO, "could not format command", c->errstr);
		return RS_FAIL_IO;
	}

	for (;;)
	{
		int			wait = WL_SOCKET_WRITEABLE;

		done = conn_send(&wait, ioerr, sizeof(ioerr));
		if (done < 0)
		{
			redis_link_message(result, RS_FAIL_IO, "could not send to Redis", ioerr);
			return RS_FAIL_IO;
		}
		if (done)
			break;
		if (redis_wait_socket(wait, deadline) == WAIT_TIMEOUT)
		{
			redis_link_message(result, RS_FAIL_TIMEOUT, "timed out sending to Redis", NULL);
			return RS_FAIL_TIMEOUT;
		}
	}

	reply_cap_next(c->reader);
	for (;;)
	{
		ssize_t		n;

		if (redisGetReplyFromReader(c, &reply) != REDIS_OK)
		{
			if (reply_cap_exceeded())
			{
				snprintf(detail, sizeof(detail),
						 "it announces more than %d array elements",
						 REPLY_MAX_ELEMENTS);
				redis_link_message(result, RS_FAIL_PROTOCOL,
							"oversized reply from Redis", detail);
				return RS_FAIL_PROTOCOL;
			}
			if (c->err == REDIS_ERR_PROTOCOL)
			{
				redis_link_message(result, RS_FAIL_PROTOCOL,
							"malformed reply from Redis", c->errstr);
				return RS_FAIL_PROTOCOL;
			}
			redis_link_message(result, RS_FAIL_IO, "could not parse the Redis reply", c->errstr);
			return RS_FAIL_IO;
		}
		if (reply != NULL)
			break;
		if (received > REPLY_MAX_BYTES)
		{
			snprintf(detail, sizeof(detail),
					 "%zu bytes received and the reply is not complete",
					 received);
			redis_link_message(result, RS_FAIL_PROTOCOL,
						"oversized reply from Redis", detail);
			return RS_FAIL_PROTOCOL;
		}
		if (!conn_pending() && redis_wait_socket(wait_for, deadline) == WAIT_TIMEOUT)
		{
			redis_link_message(result, RS_FAIL_TIMEOUT, "timed out waiting for Redis", NULL);
			return RS_FAIL_TIMEOUT;
		}
		n = conn_recv(&wait_for, ioerr, sizeof(ioerr));
		if (n < 0)
		{
			redis_link_message(result, RS_FAIL_IO, "lost the connection to Redis", ioerr);
			return RS_FAIL_IO;
		}
		if (n > 0)
			wait_for = WL_SOCKET_READABLE;
		received += n;
	}

	redis_cur->mid_exchange = false;
	stats_redis_rtt(mono_us() - sent_at);
	result->reply = (redisReply *) reply;
	if (result->reply->type == REDIS_REPLY_ERROR)
	{
		switch (reply_config_error(result->reply->str))
		{
			case REPLY_CONFIG_AUTH:
				result->cause = RC_AUTH;
				break;
			case REPLY_CONFIG_ACL:
				result->cause = RC_ACL;
				break;
			case REPLY_CONFIG_NONE:
				break;
		}
		redis_link_message(result, RS_FAIL_REPLY, NULL, result->reply->str);
		return RS_FAIL_REPLY;
	}
	result->status = RS_OK;
	return RS_OK;
}


void
redis_link_message(RedisResult *result, RedisStatus status, const char *what,
			const char *detail)
{
	const char *where = "";
	char		addr[300];

	result->status = status;
	if (status != RS_FAIL_REPLY && redis_cur->peer[0])
	{
		snprintf(addr, sizeof(addr), " at %s", redis_cur->peer);
		where = addr;
	}
	else if (status != RS_FAIL_REPLY && redis_target_set && redis_target.nsentinels == 0)
	{
		if (redis_target.is_unix)
			snprintf(addr, sizeof(addr), " at %s", redis_target.path);
		else
			snprintf(addr, sizeof(addr), " at %s:%d", redis_target.host, redis_target.port);
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

bool
redis_link_is_open(void)
{
	return redis_cur->ctx != NULL;
}

bool
redis_link_reserve_fd(RedisResult *result)
{
	if (redis_cur->fd_reserved)
		return true;
	if (!AcquireExternalFD())
	{
		redis_link_message(result, RS_FAIL_CONNECT, "could not connect to Redis",
						   "This backend has no file descriptor to spare.");
		return false;
	}
	redis_cur->fd_reserved = true;
	return true;
}

void
redis_link_opened(void)
{
	redis_cur->id = ++connections_opened;
	if (redis_cur->was_open)
		stats_reconnect();
	redis_cur->was_open = true;
}

/* ---------------------------------------------------------------------
 * Pipelined commands
 *
 * A caller may queue commands whose replies it reads later, in order
 * (refunds sent from transaction abort). Queuing and pushing bytes out are
 * safe in abort processing: they never ERROR, never allocate PostgreSQL
 * memory, never touch the WaitEventSet (ModifyWaitEvent can elog) and wait
 * only in poll(), for a bounded time. Reading the replies happens in normal
 * context, from the hook that redis_exec runs before each command, with the
 * usual latch-aware waits, so it can be interrupted.
 * ---------------------------------------------------------------------
 */


uint64
redis_connection_id(void)
{
	return redis_cur->ctx ? redis_cur->id : 0;
}


int
redis_pipelined(void)
{
	return redis_cur->ctx ? redis_cur->pipelined : 0;
}

bool
redis_pipeline_ready(void)
{
	if (redis_cur->ctx == NULL)
		return false;
	if (redis_cur->mid_exchange || redis_cur->ctx->err)
	{
		/*
		 * Left in the middle of an exchange by an interrupt that never
		 * reached PG_CATCH (FATAL): the next reply belongs to a command whose
		 * caller is gone. Discard the connection, without any I/O.
		 */
		redis_disconnect();
		return false;
	}
	return true;
}

bool
redis_pipeline_append(int argc, const char **argv, const size_t *argvlen)
{
	if (!redis_pipeline_ready())
		return false;
	if (append_command(redis_cur->ctx, argc, argv, argvlen) != REDIS_OK)
	{
		redis_disconnect();
		return false;
	}
	redis_cur->pipelined++;
	return true;
}

/* Milliseconds left until deadline, clamped to [0, INT_MAX]. */
static int
ms_left(TimestampTz deadline)
{
	long		ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);

	return (int) Min(ms, (long) INT_MAX);
}

/*
 * Wait for the socket with poll(): no latch, no WaitEventSet, no ERROR. Once
 * the deadline has passed it still looks, without waiting, so that what has
 * already arrived is read.
 */
static bool
poll_socket(short events, TimestampTz deadline)
{
	for (;;)
	{
		struct pollfd p;
		int			timeout = Max(ms_left(deadline), 0);
		int			rc;

		p.fd = redis_cur->ctx->fd;
		p.events = events;
		p.revents = 0;
		rc = poll(&p, 1, timeout);
		if (rc > 0)
			return true;
		if (rc == 0 && timeout == 0)
			return false;
		if (rc < 0 && errno != EINTR)
			return false;
	}
}

bool
redis_pipeline_push(int budget_ms)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), budget_ms);

	if (!redis_pipeline_ready())
		return false;
	for (;;)
	{
		int			wait = WL_SOCKET_WRITEABLE;
		char		ioerr[256];
		int			done = conn_send(&wait, ioerr, sizeof(ioerr));

		if (done < 0)
		{
			redis_disconnect();
			return false;
		}
		/* What is not written now stays in hiredis's buffer for later. */
		if (done || !poll_socket(wait == WL_SOCKET_READABLE ? POLLIN : POLLOUT, deadline))
			return true;
	}
}

RedisStatus
redis_pipeline_write(RedisResult *result)
{
	if (redis_cur->ctx == NULL)
	{
		redis_link_message(result, RS_FAIL_IO, "lost the connection to Redis", NULL);
		return RS_FAIL_IO;
	}
	for (;;)
	{
		int			wait = WL_SOCKET_WRITEABLE;
		char		ioerr[256];
		int			done = conn_send(&wait, ioerr, sizeof(ioerr));

		if (done < 0)
		{
			redis_link_message(result, RS_FAIL_IO, "could not send to Redis", ioerr);
			return RS_FAIL_IO;
		}
		if (done)
			return RS_OK;

		/*
		 * The deadline restarts whenever Redis takes bytes: a Redis that is
		 * working through a long pipeline is slow, not gone.
		 */
		if (redis_wait_socket(wait,
						TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													slidewin_command_timeout)) == WAIT_TIMEOUT)
		{
			redis_link_message(result, RS_FAIL_TIMEOUT, "timed out sending to Redis", NULL);
			return RS_FAIL_TIMEOUT;
		}
	}
}

/*
 * Read the next reply owed to a pipelined command. In normal context
 * (interruptible) unless nowait_deadline is set, in which case only poll()
 * waits, until then: for transaction abort and backend exit, where the latch
 * must not be used and nothing may raise an ERROR.
 */
static RedisStatus
pipeline_read(redisReply **reply, RedisResult *result, TimestampTz nowait_deadline)
{
	void	   *r = NULL;
	int			wait_for = WL_SOCKET_READABLE;
	char		ioerr[256];

	*reply = NULL;
	if (redis_cur->ctx == NULL || redis_cur->pipelined <= 0)
	{
		redis_link_message(result, RS_FAIL_IO, "no reply is owed", NULL);
		return RS_FAIL_IO;
	}
	for (;;)
	{
		if (redisGetReplyFromReader(redis_cur->ctx, &r) != REDIS_OK)
		{
			redis_link_message(result, RS_FAIL_IO, "could not parse the Redis reply", redis_cur->ctx->errstr);
			return RS_FAIL_IO;
		}
		if (r != NULL)
			break;
		if (conn_pending())
			;					/* bytes are there already */
		else if (nowait_deadline != 0)
		{
			short		events = wait_for == WL_SOCKET_WRITEABLE ? POLLOUT : POLLIN;

			/*
			 * Commands pushed only in part go on out while we wait, so that
			 * the replies to the rest can come too.
			 */
			if (sdslen(redis_cur->ctx->obuf) > 0)
			{
				int			w = WL_SOCKET_WRITEABLE;
				int			done = conn_send(&w, ioerr, sizeof(ioerr));

				if (done < 0)
				{
					redis_link_message(result, RS_FAIL_IO, "could not send to Redis", ioerr);
					return RS_FAIL_IO;
				}
				if (done == 0)
					events |= w == WL_SOCKET_READABLE ? POLLIN : POLLOUT;
			}
			if (!poll_socket(events, nowait_deadline))
			{
				redis_link_message(result, RS_FAIL_TIMEOUT, "timed out waiting for Redis", NULL);
				return RS_FAIL_TIMEOUT;
			}
		}
		else if (redis_wait_socket(wait_for,
							 TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														 slidewin_command_timeout)) == WAIT_TIMEOUT)
		{
			redis_link_message(result, RS_FAIL_TIMEOUT, "timed out waiting for Redis", NULL);
			return RS_FAIL_TIMEOUT;
		}
		{
			ssize_t		n = conn_recv(&wait_for, ioerr, sizeof(ioerr));

			if (n < 0)
			{
				redis_link_message(result, RS_FAIL_IO, "lost the connection to Redis", ioerr);
				return RS_FAIL_IO;
			}
			if (n > 0)
				wait_for = WL_SOCKET_READABLE;
		}
	}
	redis_cur->pipelined--;
	*reply = (redisReply *) r;
	return RS_OK;
}

RedisStatus
redis_pipeline_read(redisReply **reply, RedisResult *result)
{
	return pipeline_read(reply, result, 0);
}

RedisStatus
redis_pipeline_read_nowait(redisReply **reply, TimestampTz deadline, RedisResult *result)
{
	return pipeline_read(reply, result, deadline);
}
