/*-------------------------------------------------------------------------
 *
 * redis_route.c
 *		Which server to talk to: the one slidewin.redis_url names, or the
 *		master that the sentinels name; and the entry point that sends a
 *		command there, connecting first when needed.
 *
 * The bytes move in redis_conn.c (one connection: socket or TLS, waits,
 * timeouts, logging in); this file decides where that connection goes and
 * when a call may try again on a new one: once, after a kept connection
 * turned out dead, or under Sentinel after the server said READONLY.
 * Policy and stores see neither file, only redis_exec's result.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "redis_cluster.h"
#include "redis_conn_open.h"
#include "settings.h"

static uint32 current_target_id = 0;
static RedisPipelineHook pipeline_hook = NULL;
static RedisPipelineHook routed_hook = NULL;
static bool in_routed_hook = false;

/* Bumped whenever the target changes, so that callers can tell (see policy.c). */
uint64		redis_target_generation = 0;

/*
 * The messages never repeat the value: it may hold a password, and the
 * default message of a failed check would print it to the client and log.
 */
bool
redis_check_url_setting(char **newval, void **extra, GucSource source)
{
	RedisTarget *t;
	const char *why = NULL;

	t = (RedisTarget *) slidewin_guc_malloc(sizeof(RedisTarget));
	if (t == NULL)
		return false;
	if (!redis_parse_url(*newval, t, &why))
	{
		slidewin_guc_free(t);
		GUC_check_errcode(ERRCODE_INVALID_PARAMETER_VALUE);
		GUC_check_errmsg("invalid value for parameter \"slidewin.redis_url\"");
		GUC_check_errdetail("%s", why);
		return false;
	}
	if (t->password[0] != '\0' && settings_source_is_catalog(source))
	{
		explicit_bzero(t, sizeof(RedisTarget));
		slidewin_guc_free(t);
		GUC_check_errcode(ERRCODE_INVALID_PARAMETER_VALUE);
		GUC_check_errmsg("slidewin.redis_url must not contain a password here");
		GUC_check_errdetail("Values set with ALTER ROLE, ALTER DATABASE or a function's SET clause are stored in catalogs that every role can read.");
		GUC_check_errhint("Put the password in the file named by slidewin.redis_password_file, or set the URL in postgresql.conf.");
		return false;
	}
	*extra = t;
	return true;
}

/* The credentials may have changed: the next call connects and logs in anew. */
void
redis_credentials_changed(void)
{
	redis_target_generation++;
	redis_disconnect();
	redis_cluster_forget();
}

void
redis_set_target(const RedisTarget *t)
{
	if (t == NULL)
	{
		redis_target_set = false;
		redis_target_generation++;
		current_target_id = 0;
		redis_disconnect();
		redis_cluster_forget();
		return;
	}
	if (redis_target_set && memcmp(&redis_target, t, sizeof(redis_target)) == 0)
		return;
	redis_target = *t;
	redis_target_set = true;
	redis_target_generation++;
	current_target_id = hash_bytes((const unsigned char *) &redis_target, sizeof(redis_target));
	if (current_target_id == 0)
		current_target_id = 1;
	/* The next call connects to the new place. */
	redis_disconnect();
	redis_cluster_forget();
}

bool
redis_target_is_cluster(void)
{
	return redis_target_set && redis_target.cluster;
}

/* host:port, with an IPv6 address in brackets, appended at buf + *len. */
static void
describe_host_port(char *buf, size_t size, size_t *len, const char *host, int port)
{
	if (*len >= size)
		return;
	*len += snprintf(buf + *len, size - *len,
					 strchr(host, ':') != NULL ? "[%s]:%d" : "%s:%d", host, port);
}

void
redis_target_describe(char *buf, size_t size)
{
	size_t		len = 0;
	const RedisTarget *t = &redis_target;

	if (size == 0)
		return;
	buf[0] = '\0';
	if (!redis_target_set)
		snprintf(buf, size, "(no server)");
	else if (t->is_unix)
		snprintf(buf, size, "unix:%s", t->path);
	else if (t->nsentinels > 0)
	{
		len = snprintf(buf, size, "master \"%s\" of the sentinels ", t->master);
		for (int i = 0; i < t->nsentinels && len < size; i++)
		{
			if (i > 0 && len < size)
				len += snprintf(buf + len, size - len, ",");
			describe_host_port(buf, size, &len, t->sentinels[i].host, t->sentinels[i].port);
		}
	}
	else if (t->cluster)
	{
		len = snprintf(buf, size, "the cluster of seeds ");
		for (int i = 0; i < t->nseeds && len < size; i++)
		{
			if (i > 0 && len < size)
				len += snprintf(buf + len, size - len, ",");
			describe_host_port(buf, size, &len, t->seeds[i].host, t->seeds[i].port);
		}
	}
	else
		describe_host_port(buf, size, &len, t->host, t->port);
}

/* ---------------------------------------------------------------------
 * Sentinel: which server is the master
 *
 * The client protocol of Redis Sentinel: ask the sentinels in turn, each
 * within the timeouts, for the master's address (SENTINEL
 * GET-MASTER-ADDR-BY-NAME), starting with the one that answered last time;
 * connect there and confirm with ROLE that it is a master. A master is never
 * kept across a reconnect: every connection asks again, so a failover is
 * followed at the next connection. The circuit breaker (policy.c) sees the
 * whole discovery as one attempt.
 * ---------------------------------------------------------------------
 */
static int	sentinel_first = 0;

/*
 * Make a failure's message name the sentinel, at whatever stage it failed
 * (connect, TLS, AUTH, the query): a connection already gone when the
 * message was made (a TLS sentinel resetting plain text, for one) would
 * leave it nameless.
 */
static void
blame_sentinel(const RedisHostPort *s, RedisResult *result)
{
	char		where[300];
	char		msg[sizeof(result->message)];

	snprintf(where, sizeof(where), "the sentinel %s:%d", s->host, s->port);
	if (strstr(result->message, where) != NULL)
		return;
	snprintf(msg, sizeof(msg), "at %s: %s", where, result->message);
	strlcpy(result->message, msg, sizeof(result->message));
}

/* One sentinel's answer for the master's address; false with a cause. */
static bool
ask_sentinel(const RedisHostPort *s, RedisHostPort *master, RedisResult *result)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													   slidewin_connect_timeout);
	const char *argv[3] = {"SENTINEL", "GET-MASTER-ADDR-BY-NAME", redis_target.master};
	size_t		lens[3] = {8, 23, strlen(redis_target.master)};
	redisReply *r;
	const char *why = NULL;
	bool		ok;

	if (!redis_link_open_server(s->host, s->port, "the sentinel ", deadline, result))
	{
		blame_sentinel(s, result);
		return false;
	}
	if (slidewin_redis_sentinel_password && slidewin_redis_sentinel_password[0])
	{
		const char *auth[2] = {"AUTH", slidewin_redis_sentinel_password};

		if (!redis_link_setup_command(2, auth, result))
		{
			redis_link_close();
			blame_sentinel(s, result);
			return false;
		}
	}
	r = redis_link_command(3, argv, lens, "a sentinel could not say where the master is", result);
	redis_link_close();
	if (r == NULL)
	{
		blame_sentinel(s, result);
		return false;
	}
	ok = redis_sentinel_master_reply(r, master, &why);
	freeReplyObject(r);
	if (!ok)
	{
		char		where[300];

		snprintf(where, sizeof(where), "a sentinel at %s:%d could not say where master \"%s\" is",
				 s->host, s->port, redis_target.master);
		redis_link_message(result, RS_FAIL_CONNECT, where, why);
		return false;
	}
	return true;
}

/* Is the server we are logged in to a master? */
static bool
check_master(RedisResult *result)
{
	const char *argv[1] = {"ROLE"};
	size_t		lens[1] = {4};
	redisReply *r;
	bool		master;

	r = redis_link_command(1, argv, lens, "could not ask the server its role (ROLE)", result);
	if (r == NULL)
		return false;
	master = r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
		r->element[0]->type == REDIS_REPLY_STRING &&
		r->element[0]->len == 6 && memcmp(r->element[0]->str, "master", 6) == 0;
	freeReplyObject(r);
	if (!master)
		redis_link_message(result, RS_FAIL_CONNECT, "the server the sentinels named is not a master",
					"It reports another role; a failover is under way.");
	return master;
}

/* Find the master through the sentinels, connect, log in, confirm it. */
static bool
connect_sentinel(RedisResult *result)
{
	/* once, and once more if the server named is not (or no longer) a master */
	for (int round = 0; round < 2; round++)
	{
		RedisHostPort master;
		bool		found = false;

		for (int k = 0; k < redis_target.nsentinels && !found; k++)
		{
			int			i = (sentinel_first + k) % redis_target.nsentinels;

			if (ask_sentinel(&redis_target.sentinels[i], &master, result))
			{
				sentinel_first = i;
				found = true;
			}
		}
		if (!found)
			return false;
		if (redis_link_open_server(master.host, master.port, "",
						TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													slidewin_connect_timeout),
						result) &&
			redis_link_log_in(master.host, master.port, result) && check_master(result))
			return true;
		redis_link_close();
	}
	return false;
}

static bool
connect_redis(RedisResult *result)
{
	bool		connected;

	if (!redis_target_set)
	{
		redis_link_message(result, RS_FAIL_CONNECT, "slidewin.redis_url is not set", NULL);
		return false;
	}

	if (!redis_link_reserve_fd(result))
		return false;

	if (redis_target.nsentinels > 0)
		connected = connect_sentinel(result);
	else if (redis_target.is_unix)
		connected = redis_link_open_socket(redis_target.path, 0, redis_target.path,
								TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
															slidewin_connect_timeout),
								result) &&
			redis_link_log_in(redis_target.path, 0, result);
	else
		connected = redis_link_open_server(redis_target.host, redis_target.port, "",
								TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
															slidewin_connect_timeout),
								result) &&
			redis_link_log_in(redis_target.host, redis_target.port, result);
	if (!connected)
	{
		redis_link_drop();
		return false;
	}
	redis_link_opened();
	return true;
}

/* ---------------------------------------------------------------------
 * The entry point
 * ---------------------------------------------------------------------
 */

static void redis_exec_where(bool same_node, int argc, const char **argv,
							 const size_t *argvlen, RedisResult *result);

/* Interrupted mid-exchange: the reply and the connection cannot be trusted. */
static void
drop_interrupted(RedisResult *result)
{
	if (result->reply)
	{
		freeReplyObject(result->reply);
		result->reply = NULL;
	}
	redis_link_drop();
}

void
redis_exec(int argc, const char **argv, const size_t *argvlen,
		   RedisResult *result)
{
	redis_exec_where(false, argc, argv, argvlen, result);
}

void
redis_exec_same(int argc, const char **argv, const size_t *argvlen,
				RedisResult *result)
{
	redis_exec_where(true, argc, argv, argvlen, result);
}

static void
redis_exec_where(bool same_node, int argc, const char **argv,
				 const size_t *argvlen, RedisResult *result)
{
	bool		reused;
	RedisStatus st;

	result->status = RS_OK;
	result->cause = RC_NONE;
	result->reply = NULL;
	result->message[0] = '\0';

	if (redis_target_is_cluster())
	{
		PG_TRY();
		{
			st = RS_OK;
			if (routed_hook && !in_routed_hook)
			{
				in_routed_hook = true;
				st = routed_hook(result);
				in_routed_hook = false;
			}
			if (st == RS_OK && argc > 0)
				redis_cluster_exec(argc, argv, argvlen, same_node, result);
		}
		PG_CATCH();
		{
			in_routed_hook = false;
			drop_interrupted(result);
			PG_RE_THROW();
		}
		PG_END_TRY();
		return;
	}

	PG_TRY();
	{
		for (int attempt = 0;; attempt++)
		{
			reused = redis_link_is_open();
			if (!reused && !connect_redis(result))
				break;

			/* Whatever was pipelined goes first, and its replies are read. */
			st = pipeline_hook ? pipeline_hook(result) : RS_OK;
			if (st == RS_OK && argc > 0)
				st = redis_link_exchange(argc, argv, argvlen,
							  TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														  slidewin_command_timeout),
							  result);
			/*
			 * Under Sentinel, READONLY means the server is no longer the
			 * master (a failover): ask the sentinels again, once, now.
			 */
			if (st == RS_FAIL_REPLY && redis_target.nsentinels > 0 && attempt == 0 &&
				strncmp(result->reply->str, "READONLY", 8) == 0)
			{
				freeReplyObject(result->reply);
				result->reply = NULL;
				redis_link_drop();
				continue;
			}
			if (st == RS_OK || st == RS_FAIL_REPLY)
				break;

			/* Anything else leaves the connection in an unknown state. */
			if (result->reply)
			{
				freeReplyObject(result->reply);
				result->reply = NULL;
			}
			redis_link_drop();

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
		drop_interrupted(result);
		PG_RE_THROW();
	}
	PG_END_TRY();
}

void
redis_set_pipeline_hook(RedisPipelineHook hook)
{
	pipeline_hook = hook;
}

void
redis_set_routed_hook(RedisPipelineHook hook)
{
	routed_hook = hook;
}

uint32
redis_target_id(void)
{
	return current_target_id;
}

void
redis_sync(RedisResult *result)
{
	redis_exec(0, NULL, NULL, result);
}
