/*
 * redis_conn_int.h
 *		The links of the transport (redis_conn.c: the open link, its waits,
 *		its bytes, its exchanges), as the other files of src/transport drive
 *		them: opening one (redis_conn_open.c), routing (redis_route.c),
 *		Cluster (redis_cluster.c), probes (redis_probe.c).
 *
 * No file of another folder includes this header: the stores reach Redis
 * through redis_conn.h, and never reach into a RedisConn.
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

/*
 * The links, as the files of the transport drive them: one connection to
 * one server each. Every wait on a link is latch-aware and bounded by the
 * deadline given or by slidewin.command_timeout; failures come back in a
 * RedisResult whose message names the server.
 */

/* Where slidewin.redis_url points (redis_route.c sets it). */
extern RedisTarget redis_target;
extern bool redis_target_set;

/* Links a backend may hold: one per cluster node at most. */
#define REDIS_MAX_LINKS REDIS_MAX_LINK_COUNT

/*
 * One more link, beside those: rl_check's, which opens a connection of its
 * own to each server it checks, leaving the backend's as they are.
 */
#define REDIS_PROBE_LINK REDIS_MAX_LINKS

/* Which link the functions below act on (0: the only one outside Cluster). */
extern void redis_link_select(int i);
extern int	redis_link_current(void);

/* What the last opening of the current link learnt (for rl_check). */
typedef struct RedisLinkState
{
	bool		reached;		/* the socket connected (TLS aside) */
	bool		tls;			/* a TLS session is open */
	const char *version;		/* HELLO's version, "" when not known */
	const char *role;			/* HELLO's role, "" when not known */
} RedisLinkState;

extern void redis_link_state(RedisLinkState *state);
extern bool redis_link_is_open(void);
/* The file descriptor budget: one slot for the backend's connection. */
extern bool redis_link_reserve_fd(RedisResult *result);
/* The connection is set up; it gets a new number (redis_connection_id). */
extern void redis_link_opened(void);
extern void redis_link_close(void);
/* Close the current link and release its file descriptor slot. */
extern void redis_link_drop(void);

/* One command and its reply; on anything but a reply, close the link. */
extern RedisStatus redis_link_exchange(int argc, const char **argv,
									   const size_t *argvlen, TimestampTz deadline,
									   RedisResult *result);

extern void redis_link_message(RedisResult *result, RedisStatus status,
							   const char *what, const char *detail);

#endif
