/*
 * fuzz_cluster.c
 *		libFuzzer target for the Redis Cluster routing rules
 *		(src/cluster_slots.c): a reply to CLUSTER SLOTS read by hiredis's
 *		reader under the backend's reply bounds (src/reply_cap.c) into
 *		cluster_parse_slots; an error text into cluster_parse_redirect; and a
 *		key into cluster_key_slot.
 *
 * The first byte picks one ('0', '1', '2', modulo 3); the rest is its input.
 * Beyond memory errors it checks what the router will rely on: a map's
 * every owner is a node it holds, every node serves some slot, and each
 * range of the reply is served by the master it names; a refused reply
 * leaves the map cleared; a redirection's slot and port are in range and
 * survive a round trip through the text a server would send; and a key's
 * slot follows the hash-tag rule, read here a second time, over a second
 * CRC.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "cluster_slots.h"
#include "feed_replies.h"
#include "reply_cap.h"

#define CHECK(cond) \
	do { \
		if (!(cond)) \
		{ \
			fprintf(stderr, "fuzz_cluster: check failed: %s (line %d)\n", #cond, __LINE__); \
			abort(); \
		} \
	} while (0)

#define ASKED "asked.example"

static ClusterMap *map;

static bool
host_ok(const char *h)
{
	size_t		len;

	if (memchr(h, '\0', 256) == NULL)
		return false;
	len = strlen(h);
	return len > 0 &&
		strspn(h, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_:") == len;
}

/*
 * A range the parser accepted, read again: its master's host as the map
 * must hold it (NULL for "?"), and its port.
 */
static const char *
master_host(const redisReply *range, int *port, char *buf)
{
	const redisReply *node = range->element[2];
	const redisReply *host = node->element[0];

	*port = (int) node->element[1]->integer;
	if (host->type == REDIS_REPLY_NIL || host->len == 0)
		return ASKED;
	if (host->len == 1 && host->str[0] == '?')
		return NULL;
	memcpy(buf, host->str, host->len);
	buf[host->len] = '\0';
	return buf;
}

static void
check_slots(const redisReply *r)
{
	const char *why = NULL;
	long		served = 0;
	long		expect = 0;

	memset(map, 0x5a, sizeof(*map));
	if (!cluster_parse_slots(r, ASKED, map, &why))
	{
		CHECK(why != NULL && why[0] != '\0');
		CHECK(map->nnodes == 0);
		for (int s = 0; s < CLUSTER_NSLOTS; s++)
			CHECK(map->owner[s] == -1);
		return;
	}
	CHECK(r->type == REDIS_REPLY_ARRAY);
	CHECK(map->nnodes >= 0 && map->nnodes <= CLUSTER_MAX_NODES);
	for (int i = 0; i < map->nnodes; i++)
	{
		CHECK(host_ok(map->nodes[i].host));
		CHECK(map->nodes[i].port >= 1 && map->nodes[i].port <= 65535);
		for (int j = 0; j < i; j++)
			CHECK(map->nodes[j].port != map->nodes[i].port ||
				  strcmp(map->nodes[j].host, map->nodes[i].host) != 0);
	}
	{
		bool		used[CLUSTER_MAX_NODES] = {false};

		for (int s = 0; s < CLUSTER_NSLOTS; s++)
		{
			CHECK(map->owner[s] >= -1 && map->owner[s] < map->nnodes);
			if (map->owner[s] >= 0)
			{
				used[map->owner[s]] = true;
				served++;
			}
		}
		for (int i = 0; i < map->nnodes; i++)
			CHECK(used[i]);
	}
	/* each range is served by the master it names, from start to end */
	for (size_t i = 0; i < r->elements; i++)
	{
		const redisReply *range = r->element[i];
		char		buf[256];
		const char *host;
		int			port;
		long long	start,
					end;

		CHECK(range->type == REDIS_REPLY_ARRAY && range->elements >= 3);
		start = range->element[0]->integer;
		end = range->element[1]->integer;
		CHECK(start >= 0 && start <= end && end < CLUSTER_NSLOTS);
		host = master_host(range, &port, buf);
		if (host == NULL)
		{
			CHECK(map->owner[start] == -1 && map->owner[end] == -1);
			continue;
		}
		expect += end - start + 1;
		for (long long s = start; s <= end; s += (end - start > 64 ? (end - start) / 16 : 1))
		{
			const RedisHostPort *n;

			CHECK(map->owner[s] >= 0);
			n = &map->nodes[map->owner[s]];
			CHECK(n->port == port && strcmp(n->host, host) == 0);
		}
	}
	CHECK(served == expect);
}

static void
fuzz_redirect(const uint8_t *data, size_t size)
{
	/* exactly the input's bytes, so that a read past the length shows */
	char	   *msg = malloc(size ? size : 1);
	ClusterRedirect rd;
	ClusterRedirect again;
	const char *why = NULL;
	char		text[400];
	int			n;

	memcpy(msg, data, size);
	memset(&rd, 0x5a, sizeof(rd));
	if (!cluster_parse_redirect(msg, size, ASKED, &rd, &why))
	{
		ClusterRedirect zero;

		memset(&zero, 0, sizeof(zero));
		CHECK(why != NULL && why[0] != '\0');
		CHECK(memcmp(&rd, &zero, sizeof(rd)) == 0);
		free(msg);
		return;
	}
	CHECK(rd.slot >= 0 && rd.slot < CLUSTER_NSLOTS);
	CHECK(rd.to.port >= 1 && rd.to.port <= 65535);
	CHECK(host_ok(rd.to.host));
	CHECK(cluster_reply_is(msg, size, rd.ask ? "ASK" : "MOVED"));
	CHECK(!cluster_reply_is(msg, size, rd.ask ? "MOVED" : "ASK"));

	/* as a server would spell it: bare host, one space, no trailing text */
	n = snprintf(text, sizeof(text), "%s %d %s:%d", rd.ask ? "ASK" : "MOVED",
				 rd.slot, rd.to.host, rd.to.port);
	CHECK(n > 0 && (size_t) n < sizeof(text));
	why = NULL;
	if (!cluster_parse_redirect(text, (size_t) n, "elsewhere.example", &again, &why))
	{
		fprintf(stderr, "fuzz_cluster: \"%s\" does not parse again: %s\n", text, why);
		abort();
	}
	CHECK(memcmp(&rd, &again, sizeof(rd)) == 0);
	free(msg);
}

/* CRC16/XMODEM a second way: one input bit at a time, top bit first. */
static uint16_t
reference_crc(const uint8_t *p, size_t len)
{
	uint16_t	crc = 0;

	for (size_t i = 0; i < len; i++)
		for (int b = 7; b >= 0; b--)
		{
			int			in = (p[i] >> b) & 1;
			int			top = (crc >> 15) & 1;

			crc = (uint16_t) (crc << 1);
			if (in ^ top)
				crc ^= 0x1021;
		}
	return crc;
}

static void
fuzz_key(const uint8_t *data, size_t size)
{
	char	   *key = malloc(size ? size : 1);
	const uint8_t *hashed = data;
	size_t		hashed_len = size;
	int			slot;

	memcpy(key, data, size);
	slot = cluster_key_slot(key, size);
	CHECK(slot >= 0 && slot < CLUSTER_NSLOTS);

	/* the tag: after the first '{', up to the first '}' after it, if not empty */
	for (size_t i = 0; i < size; i++)
		if (data[i] == '{')
		{
			for (size_t j = i + 1; j < size; j++)
				if (data[j] == '}')
				{
					if (j > i + 1)
					{
						hashed = data + i + 1;
						hashed_len = j - i - 1;
					}
					break;
				}
			break;
		}
	CHECK(slot == reference_crc(hashed, hashed_len) % CLUSTER_NSLOTS);
	if (hashed != data)
		CHECK(slot == cluster_key_slot((const char *) hashed, hashed_len));
	free(key);
}

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (map == NULL)
		map = malloc(sizeof(ClusterMap));
	if (map == NULL || size < 1)
		return 0;
	switch (data[0] % 3)
	{
		case 0:
			feed_replies(data + 1, size - 1, check_slots);
			break;
		case 1:
			fuzz_redirect(data + 1, size - 1);
			break;
		default:
			fuzz_key(data + 1, size - 1);
			break;
	}
	return 0;
}
