/*
 * redis_conn_int.h
 *		Internal to one connection: what redis_conn.c (the open link: its
 *		waits, its bytes, its exchanges) and redis_conn_open.c (opening it)
 *		share of a link.
 *
 * Only those two files include this header. Everything else drives a link
 * through redis_link.h or redis_conn.h, and must not reach into a RedisConn.
 */
#ifndef SLIDEWIN_REDIS_CONN_INT_H
#define SLIDEWIN_REDIS_CONN_INT_H

#include "storage/latch.h"

#include "redis_conn.h"
#include "redis_tls.h"


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

/* Where to connect; copied from the GUC's parsed value by its assign hook. */
typedef enum WaitOutcome
{
	WAIT_READY,
	WAIT_TIMEOUT
} WaitOutcome;

/* The link the functions act on (redis_conn.c; redis_link_select changes it). */
extern RedisConn *redis_cur;

/* Wait on the current link's socket, latch-aware, until deadline (redis_conn.c). */
extern WaitOutcome redis_wait_socket(uint32 events, TimestampTz deadline);

#endif
