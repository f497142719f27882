/*-------------------------------------------------------------------------
 *
 * refund_send_int.h
 *		What refund_send.c offers refund_xact.c: the sending at abort, the
 *		last try at backend exit, and the pipeline hooks that refund_init
 *		installs.
 *
 * No file outside src/switch may include it.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SLIDEWIN_REFUND_SEND_INT_H
#define SLIDEWIN_REFUND_SEND_INT_H

#include "store_redis.h"

/* In abort: queue refund_live[from..), send, and wait a little (no ERROR). */
extern void refund_from_abort(int from);
/* on_shmem_exit callback: one bounded last try for what is still queued. */
extern void refund_at_exit(int code, Datum arg);
/* The hooks redis_exec runs before each command (one pipeline; Cluster). */
extern RedisStatus refund_pipeline_hook(RedisResult *result);
extern RedisStatus refund_routed_hook(RedisResult *result);

#endif
