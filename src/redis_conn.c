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
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <arpa/inet.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include "common/hashfn.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/fd.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include <hiredis/sds.h>

#include "compat.h"
#include "redis_conn.h"
#include "redis_link.h"
#include "redis_tls.h"
#include "reply_cap.h"
#include "reply_check.h"
#include "stats.h"

int			slidewin_connect_timeout = 200;
int			slidewin_command_timeout = 100;
char	   *slidewin_redis_password_file = NULL;

typedef struct RedisConn
{
	redisContext *ctx;
	SSL		   *ssl;			/* the TLS session on ctx's socket, if any */
	WaitEventSet *wes;
	int			sock_pos;		/* position of the socket in wes */
	uint32		sock_events;	/* what we currently wait for on it */
	bool		fd_reserved;	/* holds an AcquireExternalFD slot */
	bool		mid_exchange;	/* a command was sent whose reply was not read */
	uint64		id;				/* which connection this is (see redis_connection_id) */
	int			pipelined;		/* replies owed to redis_pipeline_append */
	bool		was_open;		/* a connection was open here before */
	char		peer[300];		/* the server being opened or open, for messages */
	/* what the last opening learnt, for rl_check (redis_link_state) */
	bool		reached;		/* the socket connected */
	char		version[64];	/* HELLO's version and role, "" until known */
	char		role[16];
} RedisConn;

/*
 * One link per server: a single one for a single server or Sentinel, one
 * per node under Redis Cluster. `redis_cur` is the one the functions below act
 * on; redis_route.c selects it.
 */
static RedisConn links[REDIS_MAX_LINKS + 1];	/* + REDIS_PROBE_LINK */
static RedisConn *redis_cur = &links[0];
static uint64 connections_opened = 0;

/* Where to connect; copied from the GUC's parsed value by its assign hook. */
typedef enum WaitOutcome
{
	WAIT_READY,
	WAIT_TIMEOUT
} WaitOutcome;

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
static WaitOutcome
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
	if (redisAppendCommandArgv(c, argc, argv, argvlen) != REDIS_OK)
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

/* Run a set-up command (AUTH, SELECT) right after connecting. */
bool
redis_link_setup_command(int argc, const char **argv, RedisResult *result)
{
	size_t		lens[3];
	RedisStatus st;

	for (int i = 0; i < argc; i++)
		lens[i] = strlen(argv[i]);
	st = redis_link_exchange(argc, argv, lens,
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
		redis_link_message(result, RS_FAIL_CONNECT,
					strcmp(argv[0], "AUTH") == 0 ?
					"could not authenticate to Redis" :
					"could not select the Redis database", cause);
		return false;
	}
	return true;
}

/*
 * The password for the target from slidewin.redis_password_file: 1 found,
 * 0 none (no file set, or no line matches), -1 the file cannot be used
 * (cause in *result). Like libpq's password file, it must not be readable
 * by group or others; it is read on every connect, so a new password takes
 * effect at the next connection.
 */
static int
password_from_file(const char *host, int port, char *out, size_t outsize,
				   RedisResult *result)
{
	const char *path = slidewin_redis_password_file;
	FILE	   *f;
	struct stat st;
	char		line[2048];
	int			found = 0;
	bool		skipping = false;

	if (path == NULL || path[0] == '\0')
		return 0;
	f = AllocateFile(path, "r");
	if (f == NULL)
	{
		char		why[300];

		snprintf(why, sizeof(why), "%s: %s", path, strerror(errno));
		redis_link_message(result, RS_FAIL_CONNECT,
					"could not read slidewin.redis_password_file", why);
		result->cause = RC_PASSWORD_FILE;
		return -1;
	}
	if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) ||
		(st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
	{
		char		why[300];

		snprintf(why, sizeof(why),
				 "%s must be a regular file without group or world access (chmod 0600).",
				 path);
		redis_link_message(result, RS_FAIL_CONNECT,
					"refused slidewin.redis_password_file", why);
		result->cause = RC_PASSWORD_FILE;
		FreeFile(f);
		return -1;
	}
	while (fgets(line, sizeof(line), f) != NULL)
	{
		size_t		len = strlen(line);
		bool		whole = (len > 0 && line[len - 1] == '\n') || feof(f);

		/* a line longer than the buffer matches nothing */
		if (skipping || !whole)
		{
			skipping = !whole;
			continue;
		}
		if (redis_passfile_match(line, len, host, port,
								 redis_target.user[0] ? redis_target.user : "default",
								 out, outsize))
		{
			found = 1;
			break;
		}
	}
	explicit_bzero(line, sizeof(line));
	FreeFile(f);
	return found;
}

/* ---------------------------------------------------------------------
 * Resolving host names without blocking
 *
 * hiredis resolves with a blocking getaddrinfo(), which can hold the
 * backend far beyond connect_timeout, deaf to cancel and terminate. So
 * slidewin resolves with glibc's getaddrinfo_a, which runs the lookup in a
 * helper thread, and waits on the latch meanwhile; hiredis then only sees
 * numeric addresses. The name is resolved on every connect: managed Redis
 * endpoints move to other addresses on failover. The helper thread is
 * created with every signal blocked, so that PostgreSQL's signal handlers
 * only ever run in the backend's own thread.
 * ---------------------------------------------------------------------
 */

/*
 * A lookup that glibc could not cancel still owns its request: it is parked
 * here and freed once it has finished. While all slots are taken, new
 * lookups are refused rather than piling up threads.
 */
#define MAX_ABANDONED_LOOKUPS 8

typedef struct Lookup
{
	struct gaicb cb;
	struct addrinfo hints;
	char		name[256];
} Lookup;

static Lookup *abandoned[MAX_ABANDONED_LOOKUPS];
static int	n_abandoned = 0;

static void
free_lookup(Lookup *l)
{
	if (l->cb.ar_result)
		freeaddrinfo(l->cb.ar_result);
	free(l);
}

static void
reap_abandoned(void)
{
	int			keep = 0;

	for (int i = 0; i < n_abandoned; i++)
	{
		if (gai_error(&abandoned[i]->cb) == EAI_INPROGRESS)
			abandoned[keep++] = abandoned[i];
		else
			free_lookup(abandoned[i]);
	}
	n_abandoned = keep;
}

static void
give_up_lookup(Lookup *l)
{
	int			rc = gai_cancel(&l->cb);

	if (rc == EAI_CANCELED || rc == EAI_ALLDONE ||
		gai_error(&l->cb) != EAI_INPROGRESS)
		free_lookup(l);
	else
		abandoned[n_abandoned++] = l;
}

static struct addrinfo *
resolve_host(const char *host, TimestampTz deadline, RedisResult *result)
{
	Lookup	   *volatile l;
	struct gaicb *list[1];
	sigset_t	all,
				old;
	int			rc;
	volatile long step_ms = 1;
	struct addrinfo *res;

	reap_abandoned();
	if (n_abandoned >= MAX_ABANDONED_LOOKUPS)
	{
		redis_link_message(result, RS_FAIL_CONNECT, "could not resolve the Redis host name",
					"Earlier lookups of this backend have not finished yet.");
		return NULL;
	}
	l = calloc(1, sizeof(Lookup));
	if (l == NULL)
	{
		redis_link_message(result, RS_FAIL_CONNECT, "could not resolve the Redis host name",
					"out of memory");
		return NULL;
	}
	strlcpy(l->name, host, sizeof(l->name));
	l->hints.ai_family = AF_UNSPEC;
	l->hints.ai_socktype = SOCK_STREAM;
	l->cb.ar_name = l->name;
	l->cb.ar_request = &l->hints;
	list[0] = &l->cb;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = getaddrinfo_a(GAI_NOWAIT, list, 1, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0)
	{
		redis_link_message(result, RS_FAIL_CONNECT, "could not resolve the Redis host name",
					gai_strerror(rc));
		free(l);
		return NULL;
	}

	PG_TRY();
	{
		while ((rc = gai_error(&l->cb)) == EAI_INPROGRESS)
		{
			long		left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
															   deadline);

			if (left <= 0)
				break;
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 Min(step_ms, left), PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
			step_ms = Min(step_ms * 2, 16);
		}
	}
	PG_CATCH();
	{
		give_up_lookup(l);
		PG_RE_THROW();
	}
	PG_END_TRY();

	if (rc == EAI_INPROGRESS)
	{
		give_up_lookup(l);
		redis_link_message(result, RS_FAIL_CONNECT, "could not resolve the Redis host name",
					"The lookup timed out (slidewin.connect_timeout).");
		return NULL;
	}
	if (rc != 0)
	{
		redis_link_message(result, RS_FAIL_CONNECT, "could not resolve the Redis host name",
					rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
		free_lookup(l);
		return NULL;
	}
	res = l->cb.ar_result;
	l->cb.ar_result = NULL;
	free_lookup(l);
	if (res == NULL)
		redis_link_message(result, RS_FAIL_CONNECT, "could not resolve the Redis host name",
					"The name has no address.");
	return res;
}

/*
 * Open a socket to one numeric address (or a Unix socket path, port 0) and
 * wait until it is connected. On failure the socket and its wait set are
 * gone again, and the file descriptor reservation is kept for the next try.
 */
/*
 * The TLS handshake on the connected socket, within the connect deadline
 * (connect_timeout bounds the TCP connect and the handshake together), on
 * the same latch-aware waits as everything else.
 */
static bool
tls_start(const char *name, TimestampTz deadline, char *err, size_t errsize)
{
	redis_cur->ssl = tls_open(redis_cur->ctx->fd, name, err, errsize);
	if (redis_cur->ssl == NULL)
		return false;
	for (;;)
	{
		int			rc = tls_handshake(redis_cur->ssl, err, errsize);

		if (rc == 0)
			return true;
		if (rc < 0)
			return false;
		if (redis_wait_socket(rc, deadline) == WAIT_TIMEOUT)
		{
			snprintf(err, errsize,
					 "The TLS handshake timed out (slidewin.connect_timeout).");
			return false;
		}
	}
}

bool
redis_link_open_socket(const char *addr, int port, const char *name, TimestampTz deadline,
			RedisResult *result)
{
	int			soerr = 0;
	socklen_t	len = sizeof(soerr);
	const char *why = NULL;
	char		tlserr[512];
	RedisCause	cause = RC_NONE;

	result->cause = RC_NONE;
	redis_cur->reached = false;
	redis_cur->version[0] = '\0';
	redis_cur->role[0] = '\0';
	redis_cur->ctx = port == 0 ? redisConnectUnixNonBlock(addr) : redisConnectNonBlock(addr, port);
	if (redis_cur->ctx == NULL || redis_cur->ctx->err)
	{
		redis_link_message(result, RS_FAIL_CONNECT, "could not connect to Redis",
					redis_cur->ctx ? redis_cur->ctx->errstr : "out of memory");
		goto fail;
	}

	/*
	 * The wait set needs a descriptor of its own (epoll), and raises an
	 * ERROR when none is left: make sure one is, so that a backend short
	 * of descriptors fails over to its policy instead.
	 */
	if (!AcquireExternalFD())
	{
		redis_link_message(result, RS_FAIL_CONNECT, "could not connect to Redis",
					"This backend has no file descriptor to spare.");
		goto fail;
	}
	ReleaseExternalFD();
	redis_cur->wes = slidewin_create_wait_event_set(3);
	AddWaitEventToSet(redis_cur->wes, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	/* As WaitLatchOrSocket does: a single-user backend has no postmaster. */
	if (IsUnderPostmaster)
		AddWaitEventToSet(redis_cur->wes, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	redis_cur->sock_pos = AddWaitEventToSet(redis_cur->wes, WL_SOCKET_WRITEABLE,
									  redis_cur->ctx->fd, NULL, NULL);
	redis_cur->sock_events = WL_SOCKET_WRITEABLE;

	if (redis_wait_socket(WL_SOCKET_WRITEABLE, deadline) == WAIT_TIMEOUT)
		why = "The connection attempt timed out (slidewin.connect_timeout).";
	else if (getsockopt(redis_cur->ctx->fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0 || soerr != 0)
		why = strerror(soerr ? soerr : errno);
	else
	{
		redis_cur->reached = true;
		if (redis_target.tls && !tls_start(name, deadline, tlserr, sizeof(tlserr)))
		{
			why = tlserr;
			/* no session: the context (CA bundle, client pair) is unusable */
			if (redis_cur->ssl == NULL || tls_verify_refused(redis_cur->ssl))
				cause = RC_TLS;
		}
	}
	if (why == NULL)
		return true;
	redis_link_message(result, RS_FAIL_CONNECT, "could not connect to Redis", why);
	result->cause = cause;

fail:
	if (result->cause != RC_TLS)
		result->cause = RC_NONE;
	redis_link_close();
	return false;
}

/*
 * Ask the server who it is (HELLO 2, which also keeps the RESP2 replies the
 * scripts are read in) and, when `enforce`, refuse one older than slidewin
 * supports, with a message that names its version. A server without HELLO
 * predates 6.0. Its version and role are kept for redis_link_state.
 */
static bool
hello(RedisResult *result, bool enforce)
{
	const char *argv[2] = {"HELLO", "2"};
	size_t		lens[2] = {5, 1};
	RedisStatus st;
	redisReply *r;
	int			major = -1,
				minor = -1;
	char		found[64] = "";

	st = redis_link_exchange(2, argv, lens,
				  TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
											  slidewin_command_timeout),
				  result);
	r = result->reply;
	result->reply = NULL;
	if (st == RS_FAIL_REPLY && r != NULL &&
		strncmp(r->str, "ERR unknown command", 19) == 0)
	{
		freeReplyObject(r);
		if (!enforce)
			return true;
		redis_link_message(result, RS_FAIL_VERSION, "the Redis server is too old for slidewin",
					"It does not know HELLO, so it is older than Redis 6.0; slidewin needs Redis 6.2 or later.");
		result->cause = RC_VERSION;
		return false;
	}
	if (st != RS_OK)
	{
		char		cause[sizeof(result->message)];

		if (r)
			freeReplyObject(r);
		strlcpy(cause, result->message, sizeof(cause));
		redis_link_message(result, st == RS_FAIL_REPLY ? RS_FAIL_CONNECT : st,
					"could not ask Redis for its version (HELLO)", cause);
		return false;
	}
	if (!redis_hello_version(r, &major, &minor, found, sizeof(found)))
		major = -1;
	strlcpy(redis_cur->version, found, sizeof(redis_cur->version));
	(void) redis_hello_field(r, "role", redis_cur->role, sizeof(redis_cur->role));
	freeReplyObject(r);
	if (!enforce)
		return true;
	if (major < 0)
	{
		redis_link_message(result, RS_FAIL_VERSION, "the Redis server did not say which version it is",
					"Its answer to HELLO has no readable version; slidewin needs Redis 6.2 or later.");
		result->cause = RC_VERSION;
		return false;
	}
	if (major < REDIS_MIN_MAJOR || (major == REDIS_MIN_MAJOR && minor < REDIS_MIN_MINOR))
	{
		char		why[200];

		snprintf(why, sizeof(why),
				 "It is version %s; slidewin needs Redis 6.2 or later.", found);
		redis_link_message(result, RS_FAIL_VERSION, "the Redis server is too old for slidewin", why);
		result->cause = RC_VERSION;
		return false;
	}
	return true;
}

bool
redis_link_hello(RedisResult *result)
{
	return hello(result, false);
}

/*
 * Open a connection to host:port: every address of the name in turn, then
 * TLS when the URL asks for it (the certificate must name `host`).
 */
bool
redis_link_open_server(const char *host, int port, const char *role, TimestampTz deadline,
			RedisResult *result)
{
	bool		connected = false;
	struct addrinfo *addrs;

	snprintf(redis_cur->peer, sizeof(redis_cur->peer), "%s%s:%d", role, host, port);
	addrs = resolve_host(host, deadline, result);

	for (struct addrinfo *ai = addrs; ai != NULL && !connected; ai = ai->ai_next)
	{
		char		ip[INET6_ADDRSTRLEN];
		const void *a = ai->ai_family == AF_INET6 ?
			(const void *) &((struct sockaddr_in6 *) ai->ai_addr)->sin6_addr :
			(const void *) &((struct sockaddr_in *) ai->ai_addr)->sin_addr;

		if ((ai->ai_family != AF_INET && ai->ai_family != AF_INET6) ||
			inet_ntop(ai->ai_family, a, ip, sizeof(ip)) == NULL)
			continue;
		connected = redis_link_open_socket(ip, port, host, deadline, result);
	}
	if (addrs)
		freeaddrinfo(addrs);
	return connected;
}

/*
 * Log in to the data server at host:port (AUTH with the URL's password or
 * the password file's, SELECT) and check its version.
 */
bool
redis_link_log_in(const char *host, int port, RedisResult *result)
{
	char		password[sizeof(redis_target.password)];
	bool		ok = true;

	strlcpy(password, redis_target.password, sizeof(password));
	if (password[0] == '\0' &&
		password_from_file(host, port, password, sizeof(password), result) < 0)
		ok = false;
	else if (password[0] != '\0')
	{
		const char *auth[3];
		int			n = 0;

		auth[n++] = "AUTH";
		if (redis_target.user[0] != '\0')
			auth[n++] = redis_target.user;
		auth[n++] = password;
		ok = redis_link_setup_command(n, auth, result);
	}
	explicit_bzero(password, sizeof(password));
	if (ok && redis_target.db != 0)
	{
		char		dbbuf[16];
		const char *sel[2];

		snprintf(dbbuf, sizeof(dbbuf), "%d", redis_target.db);
		sel[0] = "SELECT";
		sel[1] = dbbuf;
		ok = redis_link_setup_command(2, sel, result);
	}
	return ok && hello(result, true);
}

/*
 * One command of the connect path (within command_timeout): its reply, which
 * the caller frees, or NULL with the cause in *result under `what`.
 */
redisReply *
redis_link_command(int argc, const char **argv, const size_t *lens, const char *what,
				RedisResult *result)
{
	RedisStatus st = redis_link_exchange(argc, argv, lens,
							  TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														  slidewin_command_timeout),
							  result);
	redisReply *r = result->reply;

	result->reply = NULL;
	if (st != RS_OK)
	{
		char		cause[sizeof(result->message)];

		if (r)
			freeReplyObject(r);
		strlcpy(cause, result->message, sizeof(cause));
		redis_link_message(result, RS_FAIL_CONNECT, what, cause);
		return NULL;
	}
	return r;
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
	if (redisAppendCommandArgv(redis_cur->ctx, argc, argv, argvlen) != REDIS_OK)
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

