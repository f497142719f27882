/*-------------------------------------------------------------------------
 *
 * redis_cluster.c
 *		Redis Cluster: send each command to the node that serves its key.
 *
 * The slot map comes from CLUSTER SLOTS, asked of a node we know or else
 * of the URL's seeds, the first that answers. Each command goes to the
 * master of its key's slot, over one link per node (opened when first
 * needed, kept, at most one per node per backend). A node that answers
 * MOVED serves the slot no more: the slot is patched in the map, a full
 * refresh is due (at most one per CLUSTER_REFRESH_MS), and the command goes
 * to the node named. ASK sends this one command there, after ASKING, and
 * leaves the map alone. A call follows at most CLUSTER_MAX_REDIRECTS
 * redirections, all within one deadline; past that, or when a node cannot
 * be reached, the call fails as "Redis cannot answer now" and its policy
 * applies. TRYAGAIN is waited out, 10 ms at a time, within the same
 * deadline. Error replies that say "not now" (TRYAGAIN past the deadline,
 * CLUSTERDOWN, LOADING, MASTERDOWN) reach the caller as replies, which
 * store_redis.c treats so.
 *
 * The pure rules (slots, the map's reply, redirections) are in
 * cluster_slots.c, unit tested and fuzzed.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/timestamp.h"

#include "cluster_slots.h"
#include "redis_cluster.h"
#include "redis_conn_open.h"
#include "settings.h"
#include "stats.h"

#define CLUSTER_MAX_REDIRECTS 5
#define CLUSTER_REFRESH_MS 250
#define CLUSTER_TRYAGAIN_MS 10

static ClusterMap *map = NULL;		/* malloc'd once, 49 kB */
static ClusterMap *scratch = NULL;	/* a refresh is read here first */
static bool map_loaded = false;
static bool map_stale = false;
static TimestampTz next_refresh = 0;

/* The node each link goes to: link i talks to link_node[i]. */
static RedisHostPort link_node[REDIS_MAX_LINKS];
static int	n_links = 0;

/*
 * A circuit breaker per node: after a node failed (could not connect, timed
 * out, broke), calls whose slot it serves fail at once for
 * slidewin.redis_retry_interval instead of each paying for a connection
 * attempt, while the other nodes go on answering. (policy.c's breaker, which
 * covers a whole server or Sentinel discovery, stays out of the way under
 * Cluster.) 0: not failed.
 */
static TimestampTz link_failed_at[REDIS_MAX_LINKS];

static void
node_failed(int i)
{
	if (slidewin_redis_retry_interval > 0)
		stats_breaker_trip();
	link_failed_at[i] = GetCurrentTimestamp();
	if (link_failed_at[i] == 0)
		link_failed_at[i] = 1;
}

/* Forget the map and which link goes where (the links are closed). */
void
redis_cluster_forget(void)
{
	map_loaded = false;
	map_stale = false;
	next_refresh = 0;
	n_links = 0;
	memset(link_failed_at, 0, sizeof(link_failed_at));
}

int
redis_cluster_link_for_key(const char *key, size_t len)
{
	int			owner;

	if (!map_loaded)
		return -1;
	owner = map->owner[cluster_key_slot(key, len)];
	if (owner < 0)
		return -1;
	for (int i = 0; i < n_links; i++)
		if (link_node[i].port == map->nodes[owner].port &&
			strcmp(link_node[i].host, map->nodes[owner].host) == 0)
			return i;
	return -1;
}

static TimestampTz
earlier(TimestampTz a, TimestampTz b)
{
	return a < b ? a : b;
}

static TimestampTz
ms_from_now(int ms)
{
	return TimestampTzPlusMilliseconds(GetCurrentTimestamp(), ms);
}

/*
 * Make the link to host:port current, connecting and logging in when it is
 * not open. *reused tells whether it was open already.
 */
static bool
use_node(const char *host, int port, TimestampTz deadline, bool *reused,
		 int *index, RedisResult *result)
{
	int			i;

	for (i = 0; i < n_links; i++)
		if (link_node[i].port == port && strcmp(link_node[i].host, host) == 0)
			break;
	if (i == n_links)
	{
		if (n_links == REDIS_MAX_LINKS)
		{
			redis_link_message(result, RS_FAIL_CONNECT, "could not connect to a cluster node",
							   "This backend already holds a connection to each of 64 nodes.");
			return false;
		}
		strlcpy(link_node[i].host, host, sizeof(link_node[i].host));
		link_node[i].port = port;
		link_failed_at[i] = 0;
		n_links++;
	}
	*index = i;
	redis_link_select(i);
	*reused = redis_link_is_open();
	if (*reused)
		return true;
	if (link_failed_at[i] != 0 &&
		GetCurrentTimestamp() < TimestampTzPlusMilliseconds(link_failed_at[i],
															slidewin_redis_retry_interval))
	{
		char		what[320];

		snprintf(what, sizeof(what), "the cluster node %s:%d failed", host, port);
		redis_link_message(result, RS_FAIL_CONNECT, what,
						   "It is not tried again until slidewin.redis_retry_interval has passed.");
		return false;
	}
	if (!redis_link_reserve_fd(result))
		return false;
	if (!redis_link_open_server(host, port, "the cluster node ",
								earlier(ms_from_now(slidewin_connect_timeout), deadline),
								result) ||
		!redis_link_log_in(host, port, result))
	{
		redis_link_drop();
		node_failed(i);
		return false;
	}
	link_failed_at[i] = 0;
	redis_link_opened();
	return true;
}

/* Ask one node for the slot map; true when *map holds a new one. */
static bool
ask_for_map(const char *host, int port, TimestampTz deadline, RedisResult *result)
{
	const char *argv[2] = {"CLUSTER", "SLOTS"};
	size_t		lens[2] = {7, 5};
	redisReply *r;
	const char *why = NULL;
	bool		reused;
	int			index;
	bool		ok;

	if (!use_node(host, port, deadline, &reused, &index, result))
		return false;
	r = redis_link_command(2, argv, lens, "could not read the cluster's slot map", result);
	if (r == NULL)
	{
		redis_link_drop();
		node_failed(index);
		return false;
	}
	ok = cluster_parse_slots(r, host, scratch, &why);
	freeReplyObject(r);
	if (ok)
	{
		ok = false;
		for (int s = 0; s < CLUSTER_NSLOTS && !ok; s++)
			ok = scratch->owner[s] >= 0;
		if (!ok)
			why = "No slot is served: the cluster is not set up yet.";
	}
	if (!ok)
	{
		redis_link_message(result, RS_FAIL_CONNECT,
						   "a cluster node gave no usable slot map", why);
		return false;
	}
	memcpy(map, scratch, sizeof(ClusterMap));
	map_loaded = true;
	map_stale = false;
	return true;
}

/* Read the slot map: from the nodes we know first, then from the seeds. */
static bool
load_map(TimestampTz deadline, RedisResult *result)
{
	if (map == NULL)
	{
		map = malloc(sizeof(ClusterMap));
		scratch = malloc(sizeof(ClusterMap));
		if (map == NULL || scratch == NULL)
		{
			free(map);
			free(scratch);
			map = scratch = NULL;
			redis_link_message(result, RS_FAIL_CONNECT, "could not read the cluster's slot map",
							   "out of memory");
			return false;
		}
	}
	next_refresh = ms_from_now(CLUSTER_REFRESH_MS);
	if (map_loaded)
	{
		int			n = map->nnodes;
		RedisHostPort known[CLUSTER_MAX_NODES];

		memcpy(known, map->nodes, n * sizeof(RedisHostPort));
		for (int i = 0; i < n; i++)
			if (ask_for_map(known[i].host, known[i].port, deadline, result))
				return true;
	}
	for (int i = 0; i < redis_target.nseeds; i++)
		if (ask_for_map(redis_target.seeds[i].host, redis_target.seeds[i].port,
						deadline, result))
			return true;
	return false;
}

/*
 * The node that answered the last command (its reply, not a redirection):
 * where a command that names no key of its own but must follow one goes
 * (FUNCTION LOAD, after the FCALL that found no function there, which may
 * have been sent on by ASK to a node that the map does not name yet).
 */
static char last_host[256];
static int	last_port = -1;

/*
 * The slot a command's key is in: the first key of EVALSHA/EVAL/FCALL, the
 * first argument of anything else that has one; -1 for a command without a
 * key.
 */
static int
command_slot(int argc, const char **argv, const size_t *lens)
{
	if (argc >= 4 && (pg_strcasecmp(argv[0], "EVALSHA") == 0 ||
					  pg_strcasecmp(argv[0], "EVAL") == 0 ||
					  pg_strcasecmp(argv[0], "FCALL") == 0))
		return atoi(argv[2]) > 0 ? cluster_key_slot(argv[3], lens[3]) : -1;
	if (argc >= 2)
		return cluster_key_slot(argv[1], lens[1]);
	return -1;
}

/* ASKING before a command sent on an ASK redirection. */
static RedisStatus
send_asking(TimestampTz deadline, RedisResult *result)
{
	const char *argv[1] = {"ASKING"};
	size_t		lens[1] = {6};
	RedisStatus st = redis_link_exchange(1, argv, lens, deadline, result);

	if (result->reply)
	{
		freeReplyObject(result->reply);
		result->reply = NULL;
	}
	if (st == RS_FAIL_REPLY)
	{
		redis_link_message(result, RS_FAIL_IO, "a cluster node refused ASKING", NULL);
		st = RS_FAIL_IO;
	}
	return st;
}

void
redis_cluster_exec(int argc, const char **argv, const size_t *argvlen,
				   bool same_node, RedisResult *result)
{
	TimestampTz deadline = ms_from_now(slidewin_connect_timeout + slidewin_command_timeout);
	int			slot = same_node ? -1 : command_slot(argc, argv, argvlen);
	int			node;
	char		host[256];
	int			port;
	bool		asking = false;
	bool		refreshed = false;

	if ((!map_loaded || (map_stale && GetCurrentTimestamp() >= next_refresh)) &&
		!load_map(deadline, result) && !map_loaded)
		return;
	/* a refresh that failed leaves the old map, which may still serve */
	result->status = RS_OK;
	result->message[0] = '\0';

	node = slot >= 0 ? map->owner[slot] : -1;
	for (int s = 0; node < 0 && slot < 0 && s < CLUSTER_NSLOTS; s++)
		node = map->owner[s];
	if (node < 0)
	{
		char		why[64];

		map_stale = true;
		snprintf(why, sizeof(why), "No node serves slot %d.", slot);
		redis_link_message(result, RS_FAIL_CONNECT, "the cluster cannot take this key now", why);
		return;
	}
	strlcpy(host, map->nodes[node].host, sizeof(host));
	port = map->nodes[node].port;
	if (same_node && last_port > 0)
	{
		strlcpy(host, last_host, sizeof(host));
		port = last_port;
	}

	for (int hop = 0;; hop++)
	{
		bool		reused = false;
		int			index = -1;
		RedisStatus st = RS_OK;
		TimestampTz until;
		ClusterRedirect rd;
		const char *why = NULL;

		if (!use_node(host, port, deadline, &reused, &index, result))
		{
			/*
			 * The node is gone (a master that died, a failover): read the
			 * map again (at most every CLUSTER_REFRESH_MS), and try the
			 * slot's owner in it, once.
			 */
			map_stale = true;
			if (refreshed || slot < 0 || GetCurrentTimestamp() < next_refresh ||
				!load_map(deadline, result) || map->owner[slot] < 0)
				return;
			refreshed = true;
			asking = false;
			strlcpy(host, map->nodes[map->owner[slot]].host, sizeof(host));
			port = map->nodes[map->owner[slot]].port;
			continue;
		}
		until = earlier(ms_from_now(slidewin_command_timeout), deadline);
		if (asking)
			st = send_asking(until, result);
		if (st == RS_OK && argc > 0)
			st = redis_link_exchange(argc, argv, argvlen, until, result);

		if (st == RS_FAIL_REPLY &&
			(cluster_reply_is(result->reply->str, result->reply->len, "MOVED") ||
			 cluster_reply_is(result->reply->str, result->reply->len, "ASK")))
		{
			bool		ok = cluster_parse_redirect(result->reply->str, result->reply->len,
													host, &rd, &why);

			freeReplyObject(result->reply);
			result->reply = NULL;
			if (!ok)
			{
				redis_link_message(result, RS_FAIL_PROTOCOL,
								   "a cluster node sent a redirection slidewin cannot read", why);
				redis_link_drop();
				return;
			}
			if (hop >= CLUSTER_MAX_REDIRECTS)
			{
				redis_link_message(result, RS_FAIL_CONNECT, "the cluster kept redirecting the call",
								   "slidewin follows at most 5 redirections in a call.");
				map_stale = true;
				return;
			}
			if (!rd.ask)
			{
				int			n = cluster_map_node(map, rd.to.host, rd.to.port);

				if (n >= 0)
					map->owner[rd.slot] = n;
				map_stale = true;
			}
			asking = rd.ask;
			strlcpy(host, rd.to.host, sizeof(host));
			port = rd.to.port;
			continue;
		}
		/*
		 * TRYAGAIN: a command naming several keys, some of them missing,
		 * met a slot being migrated. Redis says to wait a little: within
		 * the call's deadline, interruptibly; then the reply stands.
		 */
		if (st == RS_FAIL_REPLY &&
			cluster_reply_is(result->reply->str, result->reply->len, "TRYAGAIN") &&
			GetCurrentTimestamp() + CLUSTER_TRYAGAIN_MS * 1000 < deadline)
		{
			freeReplyObject(result->reply);
			result->reply = NULL;
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 CLUSTER_TRYAGAIN_MS, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
			hop--;				/* not a redirection */
			continue;
		}
		if (st == RS_OK || st == RS_FAIL_REPLY)
		{
			strlcpy(last_host, host, sizeof(last_host));
			last_port = port;
			return;
		}

		/* Anything else leaves the link in an unknown state. */
		if (result->reply)
		{
			freeReplyObject(result->reply);
			result->reply = NULL;
		}
		redis_link_drop();
		map_stale = true;
		/* a kept link that turned out stale gets its one retry below */
		if (!(st == RS_FAIL_IO && reused && hop == 0))
			node_failed(index);
		/* a link kept from an earlier call may have gone stale: once more */
		if (!(st == RS_FAIL_IO && reused && hop == 0))
			return;
	}
}
