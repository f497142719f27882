/*
 * redis_probe.h
 *		rl_check's view of the servers slidewin.redis_url names
 *		(redis_probe.c): each one opened on a link of its own, logged in and
 *		asked who it is, without touching the backend's connections.
 */
#ifndef SLIDEWIN_REDIS_PROBE_H
#define SLIDEWIN_REDIS_PROBE_H

#include "redis_conn.h"

/* The most rows: every sentinel and a master each names, or every seed. */
#define REDIS_PROBE_MAX 32

/* What was found about one server; -1 in a tri-state means "not known". */
typedef struct RedisProbe
{
	char		target[300];	/* host:port or a socket's path; never userinfo */
	char		role[16];		/* master, replica, sentinel; "" unknown */
	char		version[64];	/* "" unknown */
	int			reachable;		/* 0, 1 */
	int			authenticated;	/* -1, 0, 1 */
	int			tls_verified;	/* -1 (no TLS, or not known), 0, 1 */
	int			scripts_loaded; /* -1, 0, 1: set by the caller's hook */
	char		last_error[256];	/* "" none */
} RedisProbe;

/*
 * Runs while the probe's link to a data server it logged in to is open, so
 * that the caller may ask it more (redis_probe_command).
 */
typedef void (*RedisProbeHook) (RedisProbe *p);

/*
 * Check every server slidewin.redis_url names, in order: the one server;
 * the sentinels, then the master the first sentinel that answers names;
 * the seed nodes of a cluster. Returns the rows filled in. Every wait is
 * bounded by slidewin.connect_timeout and slidewin.command_timeout, and
 * interruptible; an interrupt drops the probe's link and ERRORs.
 */
extern int	redis_probe_all(RedisProbe *out, int max, RedisProbeHook hook);

/* A command on the probe's open link: its reply (caller frees), or NULL. */
extern redisReply *redis_probe_command(int argc, const char **argv, const size_t *lens,
									   RedisResult *result);

#endif
