/*
 * unit_cluster.c
 *		Unit tests for the pure parts of the Redis Cluster router: the CRC and
 *		key slots, the slot map from CLUSTER SLOTS, MOVED and ASK, reply
 *		prefixes (src/cluster_slots.c) and the redis-cluster:// URL grammar
 *		(src/redis_url.c). No server, no PostgreSQL: test/unit/run.sh builds
 *		it with the pure sources and hiredis.
 *
 * Replies are built the way the backend gets them, by feeding RESP text to
 * hiredis's reader. The slots of keys and the replies marked "captured" come
 * from a throwaway Redis 7.0 cluster (CLUSTER KEYSLOT, CLUSTER SLOTS under
 * each cluster-preferred-endpoint-type, and the redirections it sent).
 *
 * One line for each failed check; the last line is
 * "unit_cluster: N checks, M failed", and the exit status is 1 on a failure.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "cluster_slots.h"
#include "redis_url.h"

static int	nchecks;
static int	nfailed;

static bool
check_at(bool ok, const char *what, int line)
{
	nchecks++;
	if (!ok)
	{
		nfailed++;
		printf("unit_cluster: line %d: check failed: %s\n", line, what);
	}
	return ok;
}

#define CHECK(cond) check_at((cond), #cond, __LINE__)

/* A refusal that says why, in a sentence holding the given words. */
#define CHECK_WHY(why, words) \
	check_at((why) != NULL && strstr((why), (words)) != NULL, \
			 "why mentions \"" words "\"", __LINE__)

/* The one reply in [buf, buf+len), read by hiredis. */
static redisReply *
resp_raw(const char *buf, size_t len)
{
	redisReader *reader = redisReaderCreate();
	void	   *reply = NULL;

	if (reader == NULL)
		abort();
	if (redisReaderFeed(reader, buf, len) != REDIS_OK ||
		redisReaderGetReply(reader, &reply) != REDIS_OK || reply == NULL)
	{
		printf("unit_cluster: the test's own RESP does not parse: %.*s\n", (int) len, buf);
		exit(1);
	}
	redisReaderFree(reader);
	return reply;
}

/*
 * RESP from a compact spelling: '|' ends a line; a token "=text" is the bulk
 * string text with its length filled in; any other token is sent as it is.
 */
static redisReply *
resp(const char *spec)
{
	size_t		cap = strlen(spec) * 2 + 64;
	char	   *buf = malloc(cap);
	size_t		o = 0;
	const char *p = spec;
	redisReply *reply;

	if (buf == NULL)
		abort();
	while (*p)
	{
		const char *bar = strchr(p, '|');
		size_t		n = bar ? (size_t) (bar - p) : strlen(p);

		if (o + n + 32 > cap)
			abort();
		if (*p == '=')
			o += snprintf(buf + o, cap - o, "$%zu\r\n%.*s\r\n", n - 1, (int) (n - 1), p + 1);
		else
			o += snprintf(buf + o, cap - o, "%.*s\r\n", (int) n, p);
		p += n + (bar ? 1 : 0);
	}
	reply = resp_raw(buf, o);
	free(buf);
	return reply;
}

/* ---- CRC16 and key slots ------------------------------------------------ */

static int
slot_of(const char *key)
{
	return cluster_key_slot(key, strlen(key));
}

static void
test_slots(void)
{
	CHECK(cluster_crc16("123456789", 9) == 0x31C3);
	CHECK(cluster_crc16("", 0) == 0);

	/* captured: CLUSTER KEYSLOT on Redis 7.0.15 */
	CHECK(slot_of("foo") == 12182);
	CHECK(slot_of("bar") == 5061);
	CHECK(slot_of("123456789") == 12739);
	CHECK(slot_of("{user1000}.following") == 3443);
	CHECK(slot_of("{user1000}.followers") == 3443);
	CHECK(slot_of("foo{}{bar}") == 8363);	/* empty tag: the whole key */
	CHECK(slot_of("foo{{bar}}zap") == 4015);	/* the tag is "{bar" */
	CHECK(slot_of("{bar") == 4015);
	CHECK(slot_of("foo{bar}{zap}") == 5061);	/* the tag is "bar" */
	CHECK(slot_of("") == 0);
	CHECK(slot_of("{}") == 15257);
	CHECK(slot_of("{") == 4092);
	CHECK(slot_of("}") == 12090);
	CHECK(slot_of("a{b}") == 3300 && slot_of("b") == 3300);
	CHECK(slot_of("{a}b") == 15495 && slot_of("a") == 15495);

	/* by length, not by NUL */
	CHECK(cluster_key_slot("{b}\0x", 5) == 3300);
	CHECK(cluster_key_slot("x\0{a}", 5) == 15495);
	CHECK(cluster_key_slot("foo\0", 3) == 12182);
	/* a '}' before the '{' does not close it */
	CHECK(slot_of("}{a") == cluster_crc16("}{a", 3) % 16384);
	CHECK(slot_of("}a{") == cluster_crc16("}a{", 3) % 16384);
}

/* ---- the slot map ------------------------------------------------------- */

/* captured: cluster-preferred-endpoint-type ip, the default */
static const char *slots_plain =
"*3|*3|:0|:5460|*4|$9|127.0.0.1|:29101|$40|9f34fa71c33d7bf275becd022919b3dbe2f0026e|*0|"
"*3|:5461|:10922|*4|$9|127.0.0.1|:29102|$40|0ad64aa42785d86509cdf938474a90297a80d694|*0|"
"*3|:10923|:16383|*4|$9|127.0.0.1|:29103|$40|bc5fe293d24fa0b461700ebf8dcf7baa16998dbe|*0|";

/* captured: one node with cluster-announce-hostname: its metadata map */
static const char *slots_meta =
"*3|*3|:0|:5460|*4|$9|127.0.0.1|:29101|$40|9f34fa71c33d7bf275becd022919b3dbe2f0026e|*0|"
"*3|:5461|:10922|*4|$9|127.0.0.1|:29102|$40|0ad64aa42785d86509cdf938474a90297a80d694|*2|$8|hostname|$13|node2.example|"
"*3|:10923|:16383|*4|$9|127.0.0.1|:29103|$40|bc5fe293d24fa0b461700ebf8dcf7baa16998dbe|*0|";

/* captured: endpoint type hostname, two nodes without one announce "?" */
static const char *slots_hostname =
"*3|*3|:0|:5460|*4|$1|?|:29101|$40|9f34fa71c33d7bf275becd022919b3dbe2f0026e|*2|$2|ip|$9|127.0.0.1|"
"*3|:5461|:10922|*4|$13|node2.example|:29102|$40|0ad64aa42785d86509cdf938474a90297a80d694|*2|$2|ip|$9|127.0.0.1|"
"*3|:10923|:16383|*4|$1|?|:29103|$40|bc5fe293d24fa0b461700ebf8dcf7baa16998dbe|*2|$2|ip|$9|127.0.0.1|";

/* captured: endpoint type unknown-endpoint, every host NULL */
static const char *slots_unknown =
"*3|*3|:0|:5460|*4|$-1|:29101|$40|9f34fa71c33d7bf275becd022919b3dbe2f0026e|*2|$2|ip|$9|127.0.0.1|"
"*3|:5461|:10922|*4|$-1|:29102|$40|0ad64aa42785d86509cdf938474a90297a80d694|*4|$2|ip|$9|127.0.0.1|$8|hostname|$13|node2.example|"
"*3|:10923|:16383|*4|$-1|:29103|$40|bc5fe293d24fa0b461700ebf8dcf7baa16998dbe|*2|$2|ip|$9|127.0.0.1|";

/* Parse spec into m; the result, with *why set on a refusal. */
static bool
slots(const char *spec, const char *asked, ClusterMap *m, const char **why)
{
	redisReply *r = resp(spec);
	bool		ok;

	*why = NULL;
	ok = cluster_parse_slots(r, asked, m, why);
	freeReplyObject(r);
	if (ok)
		CHECK(*why == NULL);
	else
		CHECK(*why != NULL && (*why)[0] != '\0');
	return ok;
}

static bool
node_is(const ClusterMap *m, int slot, const char *host, int port)
{
	int			i = m->owner[slot];

	return i >= 0 && i < m->nnodes && strcmp(m->nodes[i].host, host) == 0 &&
		m->nodes[i].port == port;
}

/* Every field of m as cluster_map_clear leaves it. */
static bool
map_is_clear(const ClusterMap *m)
{
	static ClusterMap clear;
	static bool made;

	if (!made)
	{
		cluster_map_clear(&clear);
		made = true;
	}
	return memcmp(m, &clear, sizeof(clear)) == 0;
}

/*
 * A hostile reply: refused, why mentioning words, and m cleared (it holds a
 * good map first, so that a refusal must clear it).
 */
#define CHECK_SLOTS_REFUSED(spec, words) \
	do { \
		const char *why_; \
		CHECK(slots(slots_plain, "10.0.0.9", m, &why_)); \
		CHECK(!slots((spec), "10.0.0.9", m, &why_)); \
		CHECK_WHY(why_, words); \
		CHECK(map_is_clear(m)); \
	} while (0)

static void
test_map_basics(ClusterMap *m)
{
	cluster_map_clear(m);
	CHECK(m->nnodes == 0 && m->owner[0] == -1 && m->owner[16383] == -1);
	CHECK(cluster_map_node(m, "a", 1) == 0);
	CHECK(cluster_map_node(m, "b", 1) == 1);
	CHECK(cluster_map_node(m, "a", 2) == 2);
	CHECK(cluster_map_node(m, "a", 1) == 0);
	CHECK(m->nnodes == 3);
	for (int i = 3; i < CLUSTER_MAX_NODES; i++)
		cluster_map_node(m, "n", 1000 + i);
	CHECK(m->nnodes == CLUSTER_MAX_NODES);
	CHECK(cluster_map_node(m, "new", 1) == -1);
	CHECK(cluster_map_node(m, "b", 1) == 1);	/* found, even when full */
	cluster_map_clear(m);
	CHECK(map_is_clear(m));
	{
		char		big[300];

		memset(big, 'h', sizeof(big) - 1);
		big[sizeof(big) - 1] = '\0';
		CHECK(cluster_map_node(m, big, 1) == -1);
		big[255] = '\0';
		CHECK(cluster_map_node(m, big, 1) == 0);
	}
}

static void
test_map_good(ClusterMap *m)
{
	const char *why;

	CHECK(slots(slots_plain, "127.0.0.1", m, &why));
	CHECK(m->nnodes == 3);
	CHECK(node_is(m, 0, "127.0.0.1", 29101) && node_is(m, 5460, "127.0.0.1", 29101));
	CHECK(node_is(m, 5461, "127.0.0.1", 29102) && node_is(m, 10922, "127.0.0.1", 29102));
	CHECK(node_is(m, 10923, "127.0.0.1", 29103) && node_is(m, 16383, "127.0.0.1", 29103));
	CHECK(node_is(m, 12182, "127.0.0.1", 29103));	/* "foo" */

	/* metadata after the id changes nothing */
	CHECK(slots(slots_meta, "127.0.0.1", m, &why));
	CHECK(m->nnodes == 3 && node_is(m, 5461, "127.0.0.1", 29102));

	/* "?": no owner, not an error, and not the host asked */
	CHECK(slots(slots_hostname, "127.0.0.1", m, &why));
	CHECK(m->nnodes == 1);
	CHECK(m->owner[0] == -1 && m->owner[5460] == -1);
	CHECK(node_is(m, 5461, "node2.example", 29102) && node_is(m, 10922, "node2.example", 29102));
	CHECK(m->owner[10923] == -1 && m->owner[16383] == -1);

	/* NULL host: the host asked, with each node's port */
	CHECK(slots(slots_unknown, "lb.example", m, &why));
	CHECK(m->nnodes == 3);
	CHECK(node_is(m, 0, "lb.example", 29101) && node_is(m, 5461, "lb.example", 29102) &&
		  node_is(m, 16383, "lb.example", 29103));

	/* empty host: the same */
	CHECK(slots("*1|*3|:0|:16383|*3|=|:7000|=id", "10.1.2.3", m, &why));
	CHECK(m->nnodes == 1 && node_is(m, 0, "10.1.2.3", 7000) && node_is(m, 16383, "10.1.2.3", 7000));

	/* IPv6, stored bare; an old server's [host, port] without an id */
	CHECK(slots("*2|*3|:0|:99|*2|=::1|:7000|*3|:100|:16383|*2|=2001:db8::7|:7001", "x", m, &why));
	CHECK(node_is(m, 0, "::1", 7000) && node_is(m, 99, "::1", 7000));
	CHECK(node_is(m, 100, "2001:db8::7", 7001) && node_is(m, 16383, "2001:db8::7", 7001));

	/* replicas are ignored; a master with two ranges is one node; gaps stay -1 */
	CHECK(slots("*2|*5|:0|:9|*3|=m1|:1|=id1|*3|=r1|:2|=id2|*3|=r2|:3|=id3|"
				"*4|:20|:29|*3|=m1|:1|=id1|*2|=r1|:2", "x", m, &why));
	CHECK(m->nnodes == 1);
	CHECK(node_is(m, 0, "m1", 1) && node_is(m, 9, "m1", 1) && node_is(m, 20, "m1", 1) && node_is(m, 29, "m1", 1));
	CHECK(m->owner[10] == -1 && m->owner[19] == -1 && m->owner[30] == -1);

	/* whatever follows the port is not read, whatever its type */
	CHECK(slots("*1|*3|:5|:5|*5|=h|:1|:42|$-1|*1|*1|*0", "x", m, &why));
	CHECK(node_is(m, 5, "h", 1) && m->owner[4] == -1 && m->owner[6] == -1);

	/* no ranges: well formed, nothing served */
	CHECK(slots("*0", "x", m, &why));
	CHECK(map_is_clear(m));

	/* exactly 64 masters fit; one slot each */
	{
		char		spec[8192];
		size_t		o = 0;

		o += snprintf(spec + o, sizeof(spec) - o, "*64");
		for (int i = 0; i < 64; i++)
			o += snprintf(spec + o, sizeof(spec) - o, "|*3|:%d|:%d|*2|=h%d|:%d", i, i, i, 1000 + i);
		CHECK(slots(spec, "x", m, &why));
		CHECK(m->nnodes == 64 && node_is(m, 63, "h63", 1063) && m->owner[64] == -1);
	}
}

static void
test_map_hostile(ClusterMap *m)
{
	char		spec[8192];
	size_t		o = 0;

	CHECK_SLOTS_REFUSED("+OK", "not an array");
	CHECK_SLOTS_REFUSED(":3", "not an array");
	CHECK_SLOTS_REFUSED("$-1", "not an array");
	CHECK_SLOTS_REFUSED("-ERR This instance has cluster support disabled", "with an error");
	CHECK_SLOTS_REFUSED("*1|$-1", "is not an array of a start, an end and a master");
	CHECK_SLOTS_REFUSED("*1|*-1", "is not an array of a start, an end and a master");
	CHECK_SLOTS_REFUSED("*1|:0", "is not an array of a start, an end and a master");
	CHECK_SLOTS_REFUSED("*1|*2|:0|:10", "is not an array of a start, an end and a master");
	CHECK_SLOTS_REFUSED("*1|*0", "is not an array of a start, an end and a master");

	/* the bounds of a range */
	CHECK_SLOTS_REFUSED("*1|*3|:10|:9|*2|=h|:1", "from one slot to a later one");
	CHECK_SLOTS_REFUSED("*1|*3|:0|:16384|*2|=h|:1", "from one slot to a later one");
	CHECK_SLOTS_REFUSED("*1|*3|:-1|:5|*2|=h|:1", "from one slot to a later one");
	CHECK_SLOTS_REFUSED("*1|*3|:0|:9223372036854775807|*2|=h|:1", "from one slot to a later one");
	CHECK_SLOTS_REFUSED("*1|*3|:-9223372036854775808|:0|*2|=h|:1", "from one slot to a later one");
	CHECK_SLOTS_REFUSED("*1|*3|:4294967296|:4294967296|*2|=h|:1", "from one slot to a later one");
	CHECK_SLOTS_REFUSED("*1|*3|=0|:5|*2|=h|:1", "from one slot to a later one");
	CHECK_SLOTS_REFUSED("*1|*3|:0|$-1|*2|=h|:1", "from one slot to a later one");

	/* the master */
	CHECK_SLOTS_REFUSED("*1|*3|:0|:5|=h", "not an array of a host and a port");
	CHECK_SLOTS_REFUSED("*1|*3|:0|:5|$-1", "not an array of a host and a port");
	CHECK_SLOTS_REFUSED("*1|*3|:0|:5|*1|=h", "not an array of a host and a port");
	CHECK_SLOTS_REFUSED("*1|*3|:0|:5|*0", "not an array of a host and a port");
	CHECK_SLOTS_REFUSED("*1|*3|:0|:5|*2|:1|:1", "host in the answer to CLUSTER SLOTS is not a string");
	CHECK_SLOTS_REFUSED("*1|*3|:0|:5|*2|*1|=h|:1", "host in the answer to CLUSTER SLOTS is not a string");
	CHECK_SLOTS_REFUSED("*1|*3|:0|:5|*2|+h|:1", "host in the answer to CLUSTER SLOTS is not a string");
	CHECK_SLOTS_REFUSED("*1|*3|:0|:5|*2|=h|:0", "port");
	CHECK_SLOTS_REFUSED("*1|*3|:0|:5|*2|=h|:65536", "port");
	CHECK_SLOTS_REFUSED("*1|*3|:0|:5|*2|=h|:-1", "port");
	CHECK_SLOTS_REFUSED("*1|*3|:0|:5|*2|=h|=6379", "port");
	CHECK_SLOTS_REFUSED("*1|*3|:0|:5|*2|=h|$-1", "port");
	CHECK_SLOTS_REFUSED("*1|*3|:0|:5|*2|=h x|:1", "character");
	CHECK_SLOTS_REFUSED("*1|*3|:0|:5|*2|=[::1]|:1", "character");
	CHECK_SLOTS_REFUSED("*1|*3|:0|:5|*2|=h/|:1", "character");
	{
		static const char nul[] = "*1\r\n*3\r\n:0\r\n:5\r\n*2\r\n$3\r\nh\0x\r\n:1\r\n";
		redisReply *r = resp_raw(nul, sizeof(nul) - 1);
		const char *why = NULL;

		CHECK(!cluster_parse_slots(r, "x", m, &why) && why != NULL && strstr(why, "character") != NULL);
		CHECK(map_is_clear(m));
		freeReplyObject(r);
	}
	CHECK_SLOTS_REFUSED("*1|*3|:0|:5|*2|=??|:1", "character");

	/* overlaps, with another master or the same */
	CHECK_SLOTS_REFUSED("*2|*3|:0|:100|*2|=a|:1|*3|:100|:200|*2|=b|:1", "two ranges");
	CHECK_SLOTS_REFUSED("*2|*3|:0|:100|*2|=a|:1|*3|:50|:60|*2|=a|:1", "two ranges");
	CHECK_SLOTS_REFUSED("*2|*3|:0|:100|*2|=?|:1|*3|:50|:60|*2|=a|:1", "two ranges");
	CHECK_SLOTS_REFUSED("*2|*3|:7|:7|*2|=a|:1|*3|:7|:7|*2|=a|:1", "two ranges");

	/* a good range and then a bad one: nothing of the good one is kept */
	CHECK_SLOTS_REFUSED("*2|*3|:0|:100|*2|=a|:1|*3|:200|:100|*2|=b|:1", "from one slot to a later one");

	/* 65 masters */
	o += snprintf(spec + o, sizeof(spec) - o, "*65");
	for (int i = 0; i < 65; i++)
		o += snprintf(spec + o, sizeof(spec) - o, "|*3|:%d|:%d|*2|=h%d|:%d", i, i, i, 1000 + i);
	CHECK_SLOTS_REFUSED(spec, "more than 64 masters");

	/* a host of 255 bytes fits, 256 does not */
	{
		char		host[257];
		const char *why;

		memset(host, 'h', 256);
		host[255] = '\0';
		snprintf(spec, sizeof(spec), "*1|*3|:0|:0|*2|=%s|:1", host);
		CHECK(slots(spec, "x", m, &why) && node_is(m, 0, host, 1));
		host[255] = 'h';
		host[256] = '\0';
		snprintf(spec, sizeof(spec), "*1|*3|:0|:0|*2|=%s|:1", host);
		CHECK_SLOTS_REFUSED(spec, "too long");
	}

	/* an empty host needs a host asked */
	{
		const char *why;

		CHECK(!slots("*1|*3|:0|:0|*2|=|:1", NULL, m, &why));
		CHECK_WHY(why, "no usable host was asked");
		CHECK(!slots("*1|*3|:0|:0|*2|$-1|:1", "", m, &why));
		CHECK_WHY(why, "no usable host was asked");
		CHECK(map_is_clear(m));
	}

	/* a NULL reply pointer, for a caller that got none */
	{
		const char *why = NULL;

		CHECK(!cluster_parse_slots(NULL, "x", m, &why) && why != NULL && map_is_clear(m));
	}
}

/* ---- MOVED and ASK ------------------------------------------------------ */

static bool
redirect(const char *msg, const char *asked, ClusterRedirect *rd, const char **why)
{
	bool		ok;

	*why = NULL;
	memset(rd, 0x5a, sizeof(*rd));
	ok = cluster_parse_redirect(msg, strlen(msg), asked, rd, why);
	if (ok)
		CHECK(*why == NULL);
	else
	{
		ClusterRedirect zero;

		memset(&zero, 0, sizeof(zero));
		CHECK(*why != NULL && (*why)[0] != '\0');
		CHECK(memcmp(rd, &zero, sizeof(zero)) == 0);
	}
	return ok;
}

static bool
redirect_is(const ClusterRedirect *rd, bool ask, int slot, const char *host, int port)
{
	return rd->ask == ask && rd->slot == slot && strcmp(rd->to.host, host) == 0 &&
		rd->to.port == port;
}

#define CHECK_REDIRECT_REFUSED(msg, words) \
	do { \
		const char *why_; \
		CHECK(!redirect((msg), "asked.example", &rd, &why_)); \
		CHECK_WHY(why_, words); \
	} while (0)

static void
test_redirect(void)
{
	ClusterRedirect rd;
	const char *why;

	/* captured */
	CHECK(redirect("MOVED 12182 127.0.0.1:29103", "x", &rd, &why) &&
		  redirect_is(&rd, false, 12182, "127.0.0.1", 29103));
	CHECK(redirect("ASK 12182 127.0.0.1:29101", "x", &rd, &why) &&
		  redirect_is(&rd, true, 12182, "127.0.0.1", 29101));
	CHECK(redirect("MOVED 12182 :29103", "10.0.0.7", &rd, &why) &&
		  redirect_is(&rd, false, 12182, "10.0.0.7", 29103));

	CHECK(redirect("MOVED 3999 127.0.0.1:6381", "x", &rd, &why) &&
		  redirect_is(&rd, false, 3999, "127.0.0.1", 6381));
	CHECK(redirect("ASK 3999 127.0.0.1:6381", "x", &rd, &why) &&
		  redirect_is(&rd, true, 3999, "127.0.0.1", 6381));
	CHECK(redirect("MOVED 0 node-1.example:1", "x", &rd, &why) &&
		  redirect_is(&rd, false, 0, "node-1.example", 1));
	CHECK(redirect("MOVED 16383 h:65535", "x", &rd, &why) &&
		  redirect_is(&rd, false, 16383, "h", 65535));
	CHECK(redirect("MOVED 3999 ::1:7001", "x", &rd, &why) &&
		  redirect_is(&rd, false, 3999, "::1", 7001));
	CHECK(redirect("ASK 3999 2001:db8::1:7001", "x", &rd, &why) &&
		  redirect_is(&rd, true, 3999, "2001:db8::1", 7001));
	CHECK(redirect("MOVED 3999 [::1]:7001", "x", &rd, &why) &&
		  redirect_is(&rd, false, 3999, "::1", 7001));
	CHECK(redirect("MOVED 3999 :6380", "asked.example", &rd, &why) &&
		  redirect_is(&rd, false, 3999, "asked.example", 6380));
	CHECK(redirect("MOVED 3999 h:6380 \r\n", "x", &rd, &why) &&
		  redirect_is(&rd, false, 3999, "h", 6380));
	CHECK(redirect("MOVED 00042 h:06380", "x", &rd, &why) &&
		  redirect_is(&rd, false, 42, "h", 6380));

	CHECK_REDIRECT_REFUSED("", "not a MOVED or ASK");
	CHECK_REDIRECT_REFUSED("MOVED", "not a MOVED or ASK");
	CHECK_REDIRECT_REFUSED("moved 1 h:1", "not a MOVED or ASK");
	CHECK_REDIRECT_REFUSED("ASKING", "not a MOVED or ASK");
	CHECK_REDIRECT_REFUSED("ERR unknown command", "not a MOVED or ASK");
	CHECK_REDIRECT_REFUSED("TRYAGAIN Multiple keys request during rehashing of slot", "not a MOVED or ASK");
	CHECK_REDIRECT_REFUSED("MOVED ", "slot");
	CHECK_REDIRECT_REFUSED("MOVED 1", "slot");
	CHECK_REDIRECT_REFUSED("MOVED  1 h:1", "slot");
	CHECK_REDIRECT_REFUSED("MOVED 16384 h:1", "slot");
	CHECK_REDIRECT_REFUSED("MOVED -1 h:1", "slot");
	CHECK_REDIRECT_REFUSED("MOVED 1x h:1", "slot");
	CHECK_REDIRECT_REFUSED("MOVED 99999999999 h:1", "slot");
	CHECK_REDIRECT_REFUSED("MOVED 1 h", ":port");
	CHECK_REDIRECT_REFUSED("MOVED 1 ", ":port");
	CHECK_REDIRECT_REFUSED("MOVED 1 h:", ":port");
	CHECK_REDIRECT_REFUSED("MOVED 1 h:0", ":port");
	CHECK_REDIRECT_REFUSED("MOVED 1 h:65536", ":port");
	CHECK_REDIRECT_REFUSED("MOVED 1 h:+1", ":port");
	CHECK_REDIRECT_REFUSED("MOVED 1 h:1x", ":port");
	CHECK_REDIRECT_REFUSED("MOVED 1 h:1 extra", "more after its endpoint");
	CHECK_REDIRECT_REFUSED("MOVED 1  h:1", "endpoint");
	CHECK_REDIRECT_REFUSED("MOVED 1 ?:6380", "unknown");
	CHECK_REDIRECT_REFUSED("MOVED 1 h/x:6380", "character");
	CHECK_REDIRECT_REFUSED("MOVED 1 []:6380", "character");
	CHECK_REDIRECT_REFUSED("MOVED 1 [::1:6380", "character");

	/* an empty host needs a host asked */
	CHECK(!redirect("MOVED 1 :6380", NULL, &rd, &why));
	CHECK_WHY(why, "no usable host was asked");

	/* by length: a NUL inside, or text past len, is not the endpoint */
	CHECK(!cluster_parse_redirect("MOVED 1 a\0b:1", 13, "x", &rd, &why));
	CHECK(cluster_parse_redirect("MOVED 1 h:12345", 13, "x", &rd, &why) &&
		  redirect_is(&rd, false, 1, "h", 123));
	CHECK(!cluster_parse_redirect(NULL, 0, "x", &rd, &why));

	/* 255 bytes of host fit, 256 do not */
	{
		char		msg[400];

		memset(msg, 0, sizeof(msg));
		memcpy(msg, "MOVED 1 ", 8);
		memset(msg + 8, 'h', 255);
		memcpy(msg + 8 + 255, ":1", 3);
		CHECK(redirect(msg, "x", &rd, &why) && strlen(rd.to.host) == 255);
		memset(msg + 8, 'h', 256);
		memcpy(msg + 8 + 256, ":1", 3);
		CHECK(!redirect(msg, "x", &rd, &why));
		CHECK_WHY(why, "too long");
	}
}

static void
test_reply_is(void)
{
#define IS(msg, prefix) cluster_reply_is((msg), strlen(msg), (prefix))
	CHECK(IS("TRYAGAIN Multiple keys request during rehashing of slot", "TRYAGAIN"));
	CHECK(IS("CLUSTERDOWN The cluster is down", "CLUSTERDOWN"));
	CHECK(IS("CLUSTERDOWN", "CLUSTERDOWN"));
	CHECK(IS("LOADING Redis is loading the dataset in memory", "LOADING"));
	CHECK(IS("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.", "MASTERDOWN"));
	CHECK(!IS("TRYAGAINX", "TRYAGAIN"));
	CHECK(!IS("TRYAGAI", "TRYAGAIN"));
	CHECK(!IS("tryagain x", "TRYAGAIN"));
	CHECK(!IS("ERR TRYAGAIN", "TRYAGAIN"));
	CHECK(!IS("", "LOADING"));
	CHECK(!cluster_reply_is("LOADING", 3, "LOADING"));
#undef IS
}

/* ---- the URL grammar ------------------------------------------------------ */

static bool
url(const char *u, RedisTarget *t, const char **why)
{
	bool		ok;

	*why = NULL;
	ok = redis_parse_url(u, t, why);
	if (!ok)
		CHECK(*why != NULL && (*why)[0] != '\0');
	return ok;
}

#define CHECK_URL_REFUSED(u, words) \
	do { \
		const char *why_; \
		CHECK(!url((u), t, &why_)); \
		CHECK_WHY(why_, words); \
	} while (0)

static void
test_url(RedisTarget *t)
{
	const char *why;
	char		u[2048];
	size_t		o;

	CHECK(url("redis-cluster://127.0.0.1:7000", t, &why));
	CHECK(t->cluster && !t->tls && t->nseeds == 1 && t->nsentinels == 0);
	CHECK(strcmp(t->seeds[0].host, "127.0.0.1") == 0 && t->seeds[0].port == 7000);
	CHECK(strcmp(t->host, "127.0.0.1") == 0 && t->port == 7000 && t->db == 0);

	CHECK(url("redis-cluster://a,b:7001,[::1]:7002,[2001:db8::5]", t, &why));
	CHECK(t->cluster && t->nseeds == 4);
	CHECK(strcmp(t->seeds[0].host, "a") == 0 && t->seeds[0].port == 6379);
	CHECK(strcmp(t->seeds[1].host, "b") == 0 && t->seeds[1].port == 7001);
	CHECK(strcmp(t->seeds[2].host, "::1") == 0 && t->seeds[2].port == 7002);
	CHECK(strcmp(t->seeds[3].host, "2001:db8::5") == 0 && t->seeds[3].port == 6379);
	CHECK(strcmp(t->host, "a") == 0 && t->port == 6379);

	CHECK(url("rediss-cluster://app:s%40cret@a:7000,b:7001/0", t, &why));
	CHECK(t->cluster && t->tls && t->nseeds == 2);
	CHECK(strcmp(t->user, "app") == 0 && strcmp(t->password, "s@cret") == 0);
	CHECK(t->db == 0 && t->master[0] == '\0' && t->path[0] == '\0' && !t->is_unix);

	CHECK(url("redis-cluster://:pw@a/", t, &why));
	CHECK(t->cluster && t->user[0] == '\0' && strcmp(t->password, "pw") == 0);
	CHECK(url("redis-cluster://a/00", t, &why) && t->db == 0);
	CHECK(url("redis-cluster://p@ss@a", t, &why) && strcmp(t->password, "p@ss") == 0 &&
		  strcmp(t->host, "a") == 0);

	/* 16 seeds, and not 17 */
	o = (size_t) snprintf(u, sizeof(u), "redis-cluster://h0");
	for (int i = 1; i < 16; i++)
		o += (size_t) snprintf(u + o, sizeof(u) - o, ",h%d:%d", i, 7000 + i);
	CHECK(url(u, t, &why) && t->nseeds == 16 && t->seeds[15].port == 7015);
	snprintf(u + o, sizeof(u) - o, ",h16");
	CHECK_URL_REFUSED(u, "At most 16 cluster seed nodes");

	CHECK_URL_REFUSED("redis-cluster://", "list of cluster seed nodes is empty");
	CHECK_URL_REFUSED("redis-cluster:///0", "list of cluster seed nodes is empty");
	CHECK_URL_REFUSED("rediss-cluster://u:p@", "list of cluster seed nodes is empty");
	CHECK_URL_REFUSED("redis-cluster://a,,b", "An entry of the list of cluster seed nodes is empty");
	CHECK_URL_REFUSED("redis-cluster://a,", "An entry of the list of cluster seed nodes is empty");
	CHECK_URL_REFUSED("redis-cluster://a,/0", "An entry of the list of cluster seed nodes is empty");
	CHECK_URL_REFUSED("redis-cluster://,a", "An entry of the list of cluster seed nodes is empty");
	CHECK_URL_REFUSED("redis-cluster://a:0", "port must be a number from 1 to 65535");
	CHECK_URL_REFUSED("redis-cluster://a:65536", "port must be a number from 1 to 65535");
	CHECK_URL_REFUSED("redis-cluster://a,b:x1", "port must be a number from 1 to 65535");
	CHECK_URL_REFUSED("redis-cluster://a:", "port must be a number from 1 to 65535");
	CHECK_URL_REFUSED("redis-cluster://[::1", "bracketed IPv6 host is malformed");
	CHECK_URL_REFUSED("redis-cluster://[]:7000", "bracketed IPv6 host is malformed");
	CHECK_URL_REFUSED("redis-cluster://[::1]7000", "Expected \":port\" after the IPv6 host");
	CHECK_URL_REFUSED("redis-cluster://a/1", "only \"/0\"");
	CHECK_URL_REFUSED("redis-cluster://a/mymaster", "names no master");
	CHECK_URL_REFUSED("redis-cluster://a/0/0", "only \"/0\"");
	CHECK_URL_REFUSED("redis-cluster://a//", "only \"/0\"");
	CHECK_URL_REFUSED("redis-cluster://u:%zz@a", "user or password part is malformed");
	CHECK_URL_REFUSED("redis-clusters://a", "redis-cluster://, rediss-cluster://");
	CHECK_URL_REFUSED("http://a", "redis-cluster://, rediss-cluster://");

	/* the other schemes are as they were, and are not clusters */
	CHECK(url("redis-sentinel://u:p@s1,s2:26380/mymaster/2", t, &why));
	CHECK(!t->cluster && t->nseeds == 0 && t->nsentinels == 2 && t->db == 2);
	CHECK(strcmp(t->master, "mymaster") == 0 && t->sentinels[0].port == 26379);
	CHECK(strcmp(t->host, "s1") == 0 && t->port == 26379 && strcmp(t->user, "u") == 0);
	CHECK_URL_REFUSED("redis-sentinel://a,,b/m", "An entry of the list of sentinels is empty");
	CHECK_URL_REFUSED("redis-sentinel:///m", "The list of sentinels is empty");
	CHECK_URL_REFUSED("redis-sentinel://a", "master's name is missing");
	CHECK(url("redis://h:1/3", t, &why) && !t->cluster && t->nseeds == 0 && t->db == 3);
	CHECK(url("unix:///run/redis/r.sock?db=1", t, &why) && !t->cluster && t->is_unix);
}

int
main(void)
{
	ClusterMap *m = malloc(sizeof(ClusterMap));
	RedisTarget *t = malloc(sizeof(RedisTarget));

	if (m == NULL || t == NULL)
		abort();
	test_slots();
	test_map_basics(m);
	test_map_good(m);
	test_map_hostile(m);
	test_redirect();
	test_reply_is();
	test_url(t);
	free(t);
	free(m);
	printf("unit_cluster: %d checks, %d failed\n", nchecks, nfailed);
	return nfailed > 0 ? 1 : 0;
}
