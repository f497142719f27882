/*
 * redis_cluster.h
 *		Redis Cluster routing (redis_cluster.c), for redis_route.c.
 */
#ifndef SLIDEWIN_REDIS_CLUSTER_H
#define SLIDEWIN_REDIS_CLUSTER_H

#include "redis_conn.h"

/*
 * Send one command to the node serving its key (with same_node, to the node
 * that answered the last command), following redirections; like
 * redis_exec, it may ERROR only for interrupts, and the caller then drops
 * the current link.
 */
extern void redis_cluster_exec(int argc, const char **argv, const size_t *argvlen,
							   bool same_node, RedisResult *result);

/* The URL or the credentials changed: forget the map and the nodes. */
extern void redis_cluster_forget(void);

#endif
