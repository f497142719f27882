/*
 * cluster_slots.h
 *		Which node of a Redis Cluster serves a key: a key's hash slot, the
 *		slot map read from CLUSTER SLOTS, and the MOVED and ASK redirections.
 *		Pure: libc and hiredis's reply tree only, no server, no PostgreSQL,
 *		no allocation, so that it can be unit tested and fuzzed on its own.
 */
#ifndef SLIDEWIN_CLUSTER_SLOTS_H
#define SLIDEWIN_CLUSTER_SLOTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "redis_url.h"

#define CLUSTER_NSLOTS		16384
#define CLUSTER_MAX_NODES	64

/*
 * Which master serves each slot. A node is known by the host and port it is
 * reached at; owner[] holds indexes into nodes[], -1 for a slot no reachable
 * master serves (not covered, or its master's endpoint is unknown).
 */
typedef struct ClusterMap
{
	int			nnodes;
	RedisHostPort nodes[CLUSTER_MAX_NODES];
	int16_t		owner[CLUSTER_NSLOTS];
} ClusterMap;

/*
 * An error reply that sends a command elsewhere. MOVED: the slot has moved
 * for good, and the map is stale. ASK: this one command goes to the node
 * named, preceded there by ASKING, and the map stays as it is.
 */
typedef struct ClusterRedirect
{
	bool		ask;
	int			slot;
	RedisHostPort to;
} ClusterRedirect;

/* CRC16/XMODEM (polynomial 0x1021, initial value 0), as Redis Cluster uses. */
extern uint16_t cluster_crc16(const char *buf, size_t len);

/*
 * The slot of a key, 0 to 16383. When the key holds a '{' followed, later,
 * by a '}' with at least one byte between them, only the bytes between the
 * first '{' and the first '}' after it are hashed (a hash tag), so that keys
 * sharing a tag share a slot.
 */
extern int	cluster_key_slot(const char *key, size_t len);

/* No nodes, no slot served. */
extern void cluster_map_clear(ClusterMap *m);

/*
 * The index of host:port in m->nodes, added if it is not there yet; -1 when
 * the table is full or the host does not fit.
 */
extern int	cluster_map_node(ClusterMap *m, const char *host, int port);

/*
 * Read a reply to CLUSTER SLOTS (RESP2) into *out: each range's master
 * serves its slots; replicas are ignored. An empty or absent host means the
 * node asked (asked_host) at the port given; "?" means an endpoint the node
 * itself does not know, and its slots get no owner. A reply with no ranges
 * is well formed and leaves every slot without an owner: whether that is an
 * error is the caller's to say. On any malformed reply returns false with a
 * sentence for errdetail in *why, and *out cleared.
 */
extern bool cluster_parse_slots(const redisReply *r, const char *asked_host,
								ClusterMap *out, const char **why);

/*
 * Read the text of an error reply (without its '-') as "MOVED slot
 * host:port" or "ASK slot host:port". The endpoint splits at its last ':',
 * so that an IPv6 address needs no brackets; an empty host means asked_host.
 * False with a sentence in *why for anything else, *out then zeroed.
 */
extern bool cluster_parse_redirect(const char *msg, size_t len,
								   const char *asked_host,
								   ClusterRedirect *out, const char **why);

/*
 * Whether an error reply's text (without its '-') starts with the word
 * prefix, e.g. "TRYAGAIN", "CLUSTERDOWN", "LOADING" or "MASTERDOWN". Only
 * the first word is compared: servers (Valkey among them) reword the rest.
 */
extern bool cluster_reply_is(const char *msg, size_t len, const char *prefix);

#endif
