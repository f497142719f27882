/*-------------------------------------------------------------------------
 *
 * cluster_slots.c
 *		Redis Cluster's routing rules: the hash slot of a key, the slot map
 *		a node answers CLUSTER SLOTS with, and MOVED and ASK redirections.
 *
 * This file decides where a command should go and nothing else: it opens
 * no connection and never chooses what to do when a node is missing. Like
 * redis_url.c it is pure (libc and hiredis's reply tree, no PostgreSQL, no
 * allocation, no errors raised), so that the backend, the unit tests and
 * the fuzzer run the same code.
 *
 * Every reply is hostile until checked: a node, or whatever answers in its
 * place, may send any tree hiredis can build. Each element is read through
 * element(), which knows the tree's bounds, and each number is range-checked
 * before it is narrowed.
 *
 *-------------------------------------------------------------------------
 */
#include <string.h>

#include <hiredis/hiredis.h>

#include "cluster_slots.h"

/*
 * Bitwise rather than table-driven: keys are a few dozen bytes, so the loop
 * costs far less than one round trip, and a table would be 512 bytes of
 * constants to get right by hand.
 */
uint16_t
cluster_crc16(const char *buf, size_t len)
{
	uint16_t	crc = 0;

	for (size_t i = 0; i < len; i++)
	{
		crc ^= (uint16_t) ((unsigned char) buf[i] << 8);
		for (int bit = 0; bit < 8; bit++)
			crc = (crc & 0x8000) ? (uint16_t) ((crc << 1) ^ 0x1021) :
				(uint16_t) (crc << 1);
	}
	return crc;
}

int
cluster_key_slot(const char *key, size_t len)
{
	const char *open;

	if (len == 0)
		return 0;				/* the CRC of nothing; memchr wants a pointer */
	open = memchr(key, '{', len);
	if (open != NULL)
	{
		const char *tag = open + 1;
		size_t		left = len - (size_t) (tag - key);
		const char *close = left > 0 ? memchr(tag, '}', left) : NULL;

		if (close != NULL && close > tag)
			return cluster_crc16(tag, (size_t) (close - tag)) % CLUSTER_NSLOTS;
	}
	return cluster_crc16(key, len) % CLUSTER_NSLOTS;
}

void
cluster_map_clear(ClusterMap *m)
{
	/* zeroed, not just emptied, so that two equal maps compare equal */
	memset(m->nodes, 0, sizeof(m->nodes));
	m->nnodes = 0;
	for (int s = 0; s < CLUSTER_NSLOTS; s++)
		m->owner[s] = -1;
}

int
cluster_map_node(ClusterMap *m, const char *host, int port)
{
	size_t		len = strlen(host);

	for (int i = 0; i < m->nnodes; i++)
		if (m->nodes[i].port == port && strcmp(m->nodes[i].host, host) == 0)
			return i;
	if (m->nnodes == CLUSTER_MAX_NODES || len >= sizeof(m->nodes[0].host))
		return -1;
	memcpy(m->nodes[m->nnodes].host, host, len + 1);
	m->nodes[m->nnodes].port = port;
	return m->nnodes++;
}

/* Element i of array r, or NULL when r is no array or too short. */
static const redisReply *
element(const redisReply *r, size_t i)
{
	if (r == NULL || r->type != REDIS_REPLY_ARRAY || i >= r->elements ||
		r->element == NULL)
		return NULL;
	return r->element[i];
}

static bool
integer_in(const redisReply *r, long long lo, long long hi, int *out)
{
	if (r == NULL || r->type != REDIS_REPLY_INTEGER ||
		r->integer < lo || r->integer > hi)
		return false;
	*out = (int) r->integer;
	return true;
}

/*
 * A host name or an address, as nodes announce them: what
 * cluster-announce-hostname accepts, plus ':' for IPv6. Anything else
 * (a NUL, a space, a bracket) is refused rather than passed on to the
 * resolver.
 */
static bool
host_chars_ok(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
	{
		char		c = s[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			  (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_' ||
			  c == ':'))
			return false;
	}
	return true;
}

typedef enum EndpointKind
{
	ENDPOINT_BAD,
	ENDPOINT_UNKNOWN,
	ENDPOINT_OK,
} EndpointKind;

/*
 * The host a node's announced endpoint stands for, into host (256 bytes).
 * The cluster specification gives two odd values. Empty (or NULL, which
 * hiredis reads as no string at all): the node does not know its own
 * address (a cluster of one, or a node not yet joined) or sits behind a
 * load balancer (cluster-preferred-endpoint-type unknown-endpoint); use the
 * host the question went to. "?": the node was told to announce a host name
 * it does not have, and the endpoint is unknown; it is not necessarily the
 * node that answered, so asked_host would be a guess.
 */
static EndpointKind
endpoint_host(const char *s, size_t len, const char *asked_host,
			  char *host, const char **why)
{
	if (len == 0)
	{
		size_t		alen = asked_host ? strlen(asked_host) : 0;

		if (alen == 0 || alen >= 256)
		{
			*why = "A node announced no host, which means the host asked, and no usable host was asked.";
			return ENDPOINT_BAD;
		}
		memcpy(host, asked_host, alen + 1);
		return ENDPOINT_OK;
	}
	if (len == 1 && s[0] == '?')
		return ENDPOINT_UNKNOWN;
	if (len >= 256 || !host_chars_ok(s, len))
	{
		*why = "A node's announced host is too long or has a character no host name or address has.";
		return ENDPOINT_BAD;
	}
	memcpy(host, s, len);
	host[len] = '\0';
	return ENDPOINT_OK;
}

/*
 * A range's master: [host, port, node id, metadata...]. Only the host and
 * port are read. Older servers send no id and newer ones add fields; the
 * specification asks clients to ignore what follows the port, and their
 * types with it. *known is false for an unknown endpoint.
 */
static bool
read_master(const redisReply *node, const char *asked_host,
			RedisHostPort *hp, bool *known, const char **why)
{
	const redisReply *host = element(node, 0);
	EndpointKind kind;

	if (element(node, 1) == NULL || host == NULL)
	{
		*why = "A master in the answer to CLUSTER SLOTS is not an array of a host and a port.";
		return false;
	}
	if (host->type != REDIS_REPLY_STRING && host->type != REDIS_REPLY_NIL)
	{
		*why = "A master's host in the answer to CLUSTER SLOTS is not a string.";
		return false;
	}
	if (!integer_in(element(node, 1), 1, 65535, &hp->port))
	{
		*why = "A master's port in the answer to CLUSTER SLOTS is not a number from 1 to 65535.";
		return false;
	}
	if (host->type == REDIS_REPLY_NIL)
		kind = endpoint_host(NULL, 0, asked_host, hp->host, why);
	else
		kind = endpoint_host(host->str, host->str ? host->len : 0, asked_host,
							 hp->host, why);
	*known = (kind == ENDPOINT_OK);
	return kind != ENDPOINT_BAD;
}

/*
 * Ranges may not overlap at all, even when they name the same master: no
 * server sends that, and refusing it bounds the work to one pass over the
 * slots however many ranges a hostile reply holds.
 */
bool
cluster_parse_slots(const redisReply *r, const char *asked_host,
					ClusterMap *out, const char **why)
{
	uint8_t		seen[CLUSTER_NSLOTS / 8];

	cluster_map_clear(out);
	if (r == NULL || r->type != REDIS_REPLY_ARRAY)
	{
		*why = (r != NULL && r->type == REDIS_REPLY_ERROR) ?
			"The node answered CLUSTER SLOTS with an error." :
			"The answer to CLUSTER SLOTS is not an array.";
		return false;
	}
	memset(seen, 0, sizeof(seen));
	for (size_t i = 0; i < r->elements; i++)
	{
		const redisReply *range = element(r, i);
		RedisHostPort hp;
		bool		known;
		int			start,
					end,
					owner = -1;

		if (element(range, 2) == NULL)
		{
			*why = "A range in the answer to CLUSTER SLOTS is not an array of a start, an end and a master.";
			goto fail;
		}
		if (!integer_in(element(range, 0), 0, CLUSTER_NSLOTS - 1, &start) ||
			!integer_in(element(range, 1), 0, CLUSTER_NSLOTS - 1, &end) ||
			start > end)
		{
			*why = "A range in the answer to CLUSTER SLOTS does not run from one slot to a later one, both from 0 to 16383.";
			goto fail;
		}
		if (!read_master(element(range, 2), asked_host, &hp, &known, why))
			goto fail;
		if (known)
		{
			owner = cluster_map_node(out, hp.host, hp.port);
			if (owner < 0)
			{
				*why = "The answer to CLUSTER SLOTS names more than 64 masters.";
				goto fail;
			}
		}
		for (int s = start; s <= end; s++)
		{
			if (seen[s / 8] & (1 << (s % 8)))
			{
				*why = "The answer to CLUSTER SLOTS names a slot in two ranges.";
				goto fail;
			}
			seen[s / 8] |= (uint8_t) (1 << (s % 8));
			out->owner[s] = (int16_t) owner;
		}
	}
	return true;

fail:
	cluster_map_clear(out);
	return false;
}

static bool
is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

bool
cluster_parse_redirect(const char *msg, size_t len, const char *asked_host,
					   ClusterRedirect *out, const char **why)
{
	const char *end;
	const char *p;
	const char *q;
	const char *ep_end;
	const char *colon = NULL;
	const char *host;
	size_t		hostlen;

	memset(out, 0, sizeof(*out));
	if (len >= 6 && memcmp(msg, "MOVED ", 6) == 0)
		p = msg + 6;
	else if (len >= 4 && memcmp(msg, "ASK ", 4) == 0)
	{
		out->ask = true;
		p = msg + 4;
	}
	else
	{
		*why = "The error is not a MOVED or ASK redirection.";
		return false;
	}
	end = msg + len;

	for (q = p; q < end && *q != ' '; q++)
		;
	if (q == end || !redis_parse_int_range(p, (size_t) (q - p), 0, CLUSTER_NSLOTS - 1, &out->slot))
	{
		*why = "The redirection's slot is not a number from 0 to 16383 followed by an endpoint.";
		goto fail;
	}

	p = q + 1;
	for (ep_end = p; ep_end < end && !is_space(*ep_end); ep_end++)
		if (*ep_end == ':')
			colon = ep_end;
	for (q = ep_end; q < end; q++)
		if (!is_space(*q))
		{
			*why = "The redirection has more after its endpoint.";
			goto fail;
		}
	if (colon == NULL ||
		!redis_parse_int_range(colon + 1, (size_t) (ep_end - colon - 1), 1, 65535, &out->to.port))
	{
		*why = "The redirection's endpoint does not end in \":port\", a number from 1 to 65535.";
		goto fail;
	}

	/* servers send IPv6 bare, but a bracketed one is unambiguous too */
	host = p;
	hostlen = (size_t) (colon - p);
	if (hostlen > 2 && host[0] == '[' && host[hostlen - 1] == ']')
	{
		host++;
		hostlen -= 2;
	}
	switch (endpoint_host(host, hostlen, asked_host, out->to.host, why))
	{
		case ENDPOINT_OK:
			return true;
		case ENDPOINT_UNKNOWN:
			*why = "The redirection names a node whose endpoint is unknown (\"?\").";
			break;
		case ENDPOINT_BAD:
			break;
	}

fail:
	memset(out, 0, sizeof(*out));
	return false;
}

bool
cluster_reply_is(const char *msg, size_t len, const char *prefix)
{
	size_t		n = strlen(prefix);

	return len >= n && memcmp(msg, prefix, n) == 0 &&
		(len == n || msg[n] == ' ');
}
