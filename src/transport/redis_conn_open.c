/*-------------------------------------------------------------------------
 *
 * redis_conn_open.c
 *		Opening one connection to one server: resolving its name without
 *		blocking, the socket, the TLS handshake, and logging in (AUTH or
 *		the password file, SELECT, the HELLO version check).
 *
 * Every wait here is latch-aware and bounded by the connect deadline or by
 * slidewin.command_timeout, as in redis_conn.c, whose link (redis_cur) and
 * socket wait it uses through redis_conn_int.h. Which server to open, and
 * when, is redis_route.c's business; like redis_conn.c, this file must not
 * decide what a failure means for admission.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/fd.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "redis_conn_int.h"
#include "redis_conn_open.h"
#include "settings.h"

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

	/*
	 * A numeric address (127.0.0.1, ::1) needs no lookup: getaddrinfo with
	 * AI_NUMERICHOST only parses it, never asks a resolver, so it cannot
	 * wait. Only names go through the thread and the deadline below, which
	 * a busy machine could make miss a lookup that costs nothing.
	 */
	{
		struct addrinfo hints;

		memset(&hints, 0, sizeof(hints));
		hints.ai_family = AF_UNSPEC;
		hints.ai_socktype = SOCK_STREAM;
		hints.ai_flags = AI_NUMERICHOST;
		if (getaddrinfo(host, NULL, &hints, &res) == 0)
			return res;
	}

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
