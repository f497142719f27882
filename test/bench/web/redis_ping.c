/*
 * redis_ping.c: make bench-web's ceiling probe, never installed.
 *
 * bench_redis_ping(port) sends PING to the Redis on 127.0.0.1:port over a
 * connection the backend keeps, waits for PONG, and returns true. That is
 * the least any limiter asked from inside a statement can cost: one
 * blocking round trip, nothing read or written in Redis, no result row to
 * build. The route /ping-row puts it where slidewin's rl_attempt sits in
 * /sw-row, so that the run shows how close the target is to what the
 * route's shape allows. web.sh builds it with PGXS in its work directory
 * and creates the function from that file on its throwaway server.
 */
#include "postgres.h"

#include <sys/time.h>

#include <hiredis/hiredis.h>

#include "fmgr.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(bench_redis_ping);

static redisContext *conn = NULL;

static void
drop_conn(void)
{
	if (conn)
		redisFree(conn);
	conn = NULL;
}

Datum
bench_redis_ping(PG_FUNCTION_ARGS)
{
	int32		port = PG_GETARG_INT32(0);
	struct timeval limit = {1, 0};
	redisReply *reply;
	bool		pong;

	if (port < 1 || port > 65535)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("port must be between 1 and 65535, not %d", port)));
	if (conn == NULL)
	{
		conn = redisConnectWithTimeout("127.0.0.1", port, limit);
		if (conn == NULL || conn->err)
		{
			drop_conn();
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("could not connect to Redis on port %d", port)));
		}
		/* a Redis that stops answering fails the call after a second */
		redisSetTimeout(conn, limit);
	}
	reply = redisCommand(conn, "PING");
	if (reply == NULL)
	{
		drop_conn();
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("Redis did not answer PING")));
	}
	pong = reply->type == REDIS_REPLY_STATUS && strcmp(reply->str, "PONG") == 0;
	freeReplyObject(reply);
	if (!pong)
		ereport(ERROR,
				(errcode(ERRCODE_PROTOCOL_VIOLATION),
				 errmsg("Redis answered PING with something other than PONG")));
	PG_RETURN_BOOL(true);
}
