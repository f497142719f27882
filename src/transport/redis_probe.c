/*-------------------------------------------------------------------------
 *
 * redis_probe.c
 *		For rl_check: every server slidewin.redis_url names, opened on a
 *		link of its own (REDIS_PROBE_LINK), logged in as a call would be, and
 *		described: reachable, authenticated, version, role, TLS.
 *
 * It walks the servers as redis_route.c does (one server, the sentinels
 * and their master, a cluster's seeds) through the same one-connection
 * layer (redis_conn.c), so its waits are the calls' waits: bounded by the
 * timeouts and interruptible. It never touches the backend's own links,
 * the circuit breaker, or the pipelined replies they owe, and it decides
 * nothing about admission.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "redis_conn_open.h"
#include "redis_probe.h"
#include "settings.h"

static void
probe_init(RedisProbe *p, const char *host, int port)
{
	memset(p, 0, sizeof(*p));
	if (port == 0)
		strlcpy(p->target, host, sizeof(p->target));
	else if (strchr(host, ':') != NULL)
		snprintf(p->target, sizeof(p->target), "[%s]:%d", host, port);
	else
		snprintf(p->target, sizeof(p->target), "%s:%d", host, port);
	p->authenticated = -1;
	p->tls_verified = -1;
	p->scripts_loaded = -1;
}

/* Open the probe link to host:port (port 0: a socket path); false with r set. */
static bool
probe_open(const char *host, int port, const char *role, RedisProbe *p, RedisResult *r)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													   slidewin_connect_timeout);
	RedisLinkState st;
	bool		ok;

	if (!redis_link_reserve_fd(r))
		return false;
	ok = port == 0 ? redis_link_open_socket(host, 0, host, deadline, r) :
		redis_link_open_server(host, port, role, deadline, r);
	redis_link_state(&st);
	p->reachable = st.reached;
	if (redis_target.tls)
	{
		if (ok)
			p->tls_verified = slidewin_redis_tls_verify != TLS_VERIFY_NONE;
		else if (r->cause == RC_TLS)
			p->tls_verified = 0;
	}
	return ok;
}

static void
probe_failed(RedisProbe *p, const RedisResult *r)
{
	strlcpy(p->last_error, r->message, sizeof(p->last_error));
}

/* A data server: open, log in as a call would, and let the caller ask more. */
static void
probe_server(const char *host, int port, RedisProbe *p, RedisProbeHook hook)
{
	RedisResult r = {0};
	RedisLinkState st;
	bool		logged_in;

	probe_init(p, host, port);
	if (!probe_open(host, port, "", p, &r))
	{
		probe_failed(p, &r);
		redis_link_drop();
		return;
	}
	logged_in = redis_link_log_in(host, port, &r);
	redis_link_state(&st);
	strlcpy(p->version, st.version, sizeof(p->version));
	strlcpy(p->role, st.role, sizeof(p->role));
	if (logged_in || r.status == RS_FAIL_VERSION || r.cause == RC_ACL)
		p->authenticated = 1;
	else if (r.cause == RC_AUTH || r.cause == RC_PASSWORD_FILE)
		p->authenticated = 0;
	if (!logged_in)
		probe_failed(p, &r);
	else if (hook)
		hook(p);
	redis_link_drop();
}

/*
 * A sentinel: open, AUTH with slidewin.redis_sentinel_password, HELLO, and
 * ask where the master is. True with its address in *master.
 */
static bool
probe_sentinel(const RedisHostPort *s, RedisProbe *p, RedisHostPort *master)
{
	RedisResult r = {0};
	RedisLinkState st;
	const char *argv[3] = {"SENTINEL", "GET-MASTER-ADDR-BY-NAME", redis_target.master};
	size_t		lens[3] = {8, 23, strlen(redis_target.master)};
	redisReply *reply;
	const char *why = NULL;
	bool		found = false;

	probe_init(p, s->host, s->port);
	strlcpy(p->role, "sentinel", sizeof(p->role));
	if (!probe_open(s->host, s->port, "the sentinel ", p, &r))
	{
		probe_failed(p, &r);
		redis_link_drop();
		return false;
	}
	if (slidewin_redis_sentinel_password && slidewin_redis_sentinel_password[0])
	{
		const char *auth[2] = {"AUTH", slidewin_redis_sentinel_password};

		if (!redis_link_setup_command(2, auth, &r))
		{
			p->authenticated = r.cause == RC_AUTH ? 0 : -1;
			probe_failed(p, &r);
			redis_link_drop();
			return false;
		}
	}
	if (redis_link_hello(&r))
	{
		redis_link_state(&st);
		strlcpy(p->version, st.version, sizeof(p->version));
	}
	else if (r.cause == RC_AUTH)
	{
		p->authenticated = 0;
		probe_failed(p, &r);
		redis_link_drop();
		return false;
	}
	reply = redis_link_command(3, argv, lens, "the sentinel could not say where the master is", &r);
	if (reply == NULL)
	{
		if (r.cause == RC_AUTH)
			p->authenticated = 0;
		probe_failed(p, &r);
		redis_link_drop();
		return false;
	}
	p->authenticated = 1;
	found = redis_sentinel_master_reply(reply, master, &why);
	freeReplyObject(reply);
	if (!found)
		snprintf(p->last_error, sizeof(p->last_error),
				 "the sentinel could not say where master \"%s\" is: %s",
				 redis_target.master, why);
	redis_link_drop();
	return found;
}

static int
probe_walk(RedisProbe *out, int max, RedisProbeHook hook)
{
	int			n = 0;

	if (!redis_target_set)
		return 0;
	if (redis_target.nsentinels > 0)
	{
		RedisHostPort master;
		bool		have_master = false;

		for (int i = 0; i < redis_target.nsentinels && n < max; i++)
		{
			RedisHostPort named;

			if (probe_sentinel(&redis_target.sentinels[i], &out[n++], &named) && !have_master)
			{
				master = named;
				have_master = true;
			}
		}
		if (have_master && n < max)
			probe_server(master.host, master.port, &out[n++], hook);
	}
	else if (redis_target.cluster)
	{
		for (int i = 0; i < redis_target.nseeds && n < max; i++)
			probe_server(redis_target.seeds[i].host, redis_target.seeds[i].port,
						 &out[n++], hook);
	}
	else if (redis_target.is_unix)
		probe_server(redis_target.path, 0, &out[n++], hook);
	else
		probe_server(redis_target.host, redis_target.port, &out[n++], hook);
	return n;
}

int
redis_probe_all(RedisProbe *out, int max, RedisProbeHook hook)
{
	int			prev = redis_link_current();
	int			n = 0;

	redis_link_select(REDIS_PROBE_LINK);
	PG_TRY();
	{
		n = probe_walk(out, max, hook);
	}
	PG_CATCH();
	{
		redis_link_select(REDIS_PROBE_LINK);
		redis_link_drop();
		redis_link_select(prev);
		PG_RE_THROW();
	}
	PG_END_TRY();
	redis_link_select(prev);
	return n;
}

redisReply *
redis_probe_command(int argc, const char **argv, const size_t *lens, RedisResult *result)
{
	Assert(redis_link_current() == REDIS_PROBE_LINK);
	return redis_link_command(argc, argv, lens, "the server could not answer", result);
}
