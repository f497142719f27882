/*-------------------------------------------------------------------------
 *
 * refund.c
 *		Transactional consumption for the Redis store, opt-in.
 *
 * Redis has no transactions that follow PostgreSQL's, so an admission is
 * spent at once, like a sequence value. With refund_on_abort, each entry a
 * (sub)transaction records in Redis is remembered here, tagged with its
 * subtransaction; if that subtransaction or the whole transaction aborts,
 * its entries are given back by a script (store_redis.c, scripts.c).
 * Commit and PREPARE TRANSACTION keep them: a prepared transaction's units
 * stay spent whatever its fate, since the backend that would refund them is
 * gone by then. The fallback store needs none of this: its rows vanish with
 * the transaction.
 *
 * Refunds wait inside abort only until a deadline. Abort processing holds
 * interrupts (a cancel cannot end a wait), and an ERROR there is escalated
 * to PANIC, so the abort callbacks only move the aborted entries to the
 * refund queue (no allocation: the queue's room is reserved when an entry
 * is remembered), and, if a connection is open and not in the middle of an
 * exchange, append their commands to it, push the bytes out and read the
 * replies as they come until slidewin.refund_confirm_timeout has passed
 * (capped by command_timeout; poll() only: no latch, no WaitEventSet, no
 * connecting). A transaction that owes a slot's release gets its connection
 * earlier, in normal context: at pre-commit and when a COMMIT or ROLLBACK
 * statement starts (refund_before_xact_end); backend exit connects once
 * too, bounded, for the releases still queued. As in postgres_fdw's abort cleanup, the deadline, not
 * CHECK_FOR_INTERRUPTS, ends the wait. A reply read there settles its refund
 * (a dropped one is reported with a WARNING, never more), so that when
 * ROLLBACK returns the refunds are applied and confirmed even if the backend
 * then stays idle. Replies still owed at the deadline are read by the
 * pipeline hook that redis_exec runs before this backend's next command, in
 * normal context, interruptibly; that hook also sends whatever is still
 * queued (no connection was open at abort, the connection broke, Redis lost
 * the script). Refunds are idempotent in Redis, so one sent twice (its
 * connection was lost before the reply) gives back once.
 *
 * A refund is counted as done when its reply says so, and the deny cache
 * moves the key's generation at that moment; until then deny_cache keeps
 * the key's bucket out of the cache (deny_cache_refund_begin/_end), in every
 * backend: a reply left unread keeps other backends' denials of the key
 * going to Redis, which is why the abort waits for it.
 *
 * A refund is dropped (its units stay spent: the safe direction), counted
 * and reported, only when: the server it belongs to is no longer the one
 * slidewin.redis_url names; Redis answered with an error other than a
 * transient one (or a transient one REFUND_MAX_TRIES times); or the backend
 * exits before it could be sent (at exit, a bounded last attempt is made).
 *
 * Memory: entries live in their own context, reset whenever nothing is
 * remembered or queued, so a burst of refunds does not stay allocated.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "access/xact.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "deny_cache.h"
#include "policy.h"
#include "refund.h"
#include "settings.h"
#include "stats.h"
#include "store_redis.h"

int64		refund_done_count = 0;
int64		refund_dropped_count = 0;

/* How long abort may spend pushing refund bytes out (capped by command_timeout). */
#define ABORT_PUSH_BUDGET_MS 20
/* How long backend exit may spend on a last try (capped by command_timeout). */
#define EXIT_BUDGET_MS 250
/* A refund answered with a transient error this many times is dropped. */
#define REFUND_MAX_TRIES 5

typedef enum EntryState
{
	ENTRY_LIVE,					/* remembered by the current transaction */
	ENTRY_PENDING,				/* to be sent */
	ENTRY_SENT,					/* sent; its reply is owed */
	ENTRY_DONE
} EntryState;

/* What an entry gives back: a refund's units, or a concurrency slot. */
typedef enum EntryKind
{
	KIND_REFUND,				/* an admission's units (rkey: log, lkey: ledger) */
	KIND_RELEASE				/* a slot of rl_acquire (rkey: holders, lkey:
								 * wake-up list, holder: its name), released at
								 * commit as well as at abort */
} EntryKind;

typedef struct RefundEntry
{
	int64		ts;
	int64		cost;
	int64		win_us;
	uint32		key_hash;		/* of the user's key, for the deny cache */
	uint32		target;			/* redis_target_id() when recorded */
	SubTransactionId subid;
	uint8		state;
	uint8		kind;			/* EntryKind */
	uint8		tries;			/* transient failures so far */
	bool		ever_sent;		/* Redis may have applied it */
	bool		confirmed;		/* KIND_RELEASE: Redis said the slot is held */
	int16		link;			/* Redis Cluster: the link it was sent on */
	uint64		link_conn;		/* and that link's connection then */
	int			rkeylen;
	int			lkeylen;
	char	   *lkey;			/* the ledger's Redis key, after rkey */
	char	   *holder;			/* KIND_RELEASE: the holder's name, after lkey */
	char		rkey[FLEXIBLE_ARRAY_MEMBER];	/* the log's Redis key */
} RefundEntry;

static MemoryContext refund_cxt = NULL;

/* The current transaction's entries, oldest first: a stack of subxacts. */
static RefundEntry **live = NULL;
static int	n_live = 0;
static int	max_live = 0;

/*
 * The refund queue, in the order refunds were decided, which is also the
 * order of each key's entries (so most refunds append to their ledger in
 * Redis). Invariant: max_queue >= n_queue + n_live, so that an abort can
 * move every live entry here without allocating. Replies come back in the
 * order entries were sent, which is queue order among ENTRY_SENT entries:
 * an entry only goes back to pending when its connection is lost (then all
 * of them do) or when the hook reads its reply (and the hook reads all
 * replies before anything else is sent).
 */
static RefundEntry **queue = NULL;
static int	q_head = 0;			/* entries before it are done */
static int	n_queue = 0;
static int	max_queue = 0;
static int	q_send = 0;			/* no entry before it is pending */
static int	q_reply = 0;		/* no entry before it is sent */
static int	n_sent = 0;
static uint64 sent_on = 0;		/* connection the sent entries went on */

static bool exit_registered = false;

/*
 * The connection on which a refund reply showed that Redis has the refund
 * script. On any other, the first refund sent is an EVAL, so that a refund
 * sent at abort is applied at once even by a Redis that never saw it.
 */
static uint64 script_known_on[2] = {0, 0};

static RedisStatus pipeline_hook(RedisResult *result);
static RefundEntry *next_sent(void);
static void settle(RefundEntry *e, redisReply *reply, int level);
static void refund_at_exit(int code, Datum arg);
static void refund_from_abort(int from);
static bool releases_owed(bool live_only);

/* ---------------------------------------------------------------------
 * Memory (normal context only)
 * ---------------------------------------------------------------------
 */

static void
reset_if_idle(void)
{
	if (n_live == 0 && q_head == n_queue && refund_cxt != NULL)
	{
		MemoryContextReset(refund_cxt);
		live = NULL;
		queue = NULL;
		max_live = max_queue = 0;
		n_queue = q_head = q_send = q_reply = 0;
		n_sent = 0;
	}
}

/* Slide the queue down over the done entries at its head. */
static void
compact_queue(void)
{
	if (q_head == 0)
		return;
	memmove(queue, queue + q_head, (n_queue - q_head) * sizeof(RefundEntry *));
	n_queue -= q_head;
	q_send = Max(q_send - q_head, 0);
	q_reply = Max(q_reply - q_head, 0);
	q_head = 0;
}

static void
reserve(void)
{
	if (refund_cxt == NULL)
		refund_cxt = AllocSetContextCreate(TopMemoryContext, "slidewin refunds",
										   ALLOCSET_DEFAULT_SIZES);
	if (n_live == max_live)
	{
		int			n = Max(16, max_live * 2);

		live = live == NULL ? MemoryContextAlloc(refund_cxt, n * sizeof(RefundEntry *)) :
			repalloc(live, n * sizeof(RefundEntry *));
		max_live = n;
	}
	compact_queue();
	if (n_queue + n_live + 1 > max_queue)
	{
		int			n = Max(16, Max(max_queue * 2, n_queue + n_live + 1));

		queue = queue == NULL ? MemoryContextAlloc(refund_cxt, n * sizeof(RefundEntry *)) :
			repalloc(queue, n * sizeof(RefundEntry *));
		max_queue = n;
	}
}

void
refund_remember(const RlArgs *args, int64 recorded_ts)
{
	RefundEntry *e;
	char	   *key;
	char	   *lkey;
	int			keylen;
	int			lkeylen;

	if (!exit_registered)
	{
		on_shmem_exit(refund_at_exit, (Datum) 0);
		exit_registered = true;
	}
	/* The abort must never have to compute a SHA1 (it allocates). */
	scripts_prepare();
	reserve();
	redis_store_log_keys(args, &key, &keylen, &lkey, &lkeylen);
	e = MemoryContextAlloc(refund_cxt, offsetof(RefundEntry, rkey) + keylen + lkeylen + 2);
	memcpy(e->rkey, key, keylen + 1);
	e->rkeylen = keylen;
	e->lkey = e->rkey + keylen + 1;
	memcpy(e->lkey, lkey, lkeylen + 1);
	e->lkeylen = lkeylen;
	e->kind = KIND_REFUND;
	e->holder = NULL;
	e->ts = recorded_ts;
	e->cost = args->cost;
	e->win_us = args->win_us;
	e->key_hash = deny_cache_key_hash(args->key, args->keylen);
	e->target = redis_target_id();
	e->subid = GetCurrentSubTransactionId();
	e->state = ENTRY_LIVE;
	e->tries = 0;
	e->ever_sent = false;
	e->link = -1;
	e->link_conn = 0;
	live[n_live++] = e;
	pfree(key);
	pfree(lkey);
}

/*
 * A concurrency slot this transaction may hold in Redis (lease.c): released
 * at commit, at abort, or at the abort of the subtransaction that took it,
 * on the same path as refunds. It is remembered before the acquisition is
 * sent, unconfirmed: a reply lost to a timeout or an interrupt may belong
 * to an acquisition that Redis ran (or runs later), and releasing a holder
 * Redis does not have changes nothing.
 */
void
refund_remember_release(const RlArgs *args, const char *holder, int64 lease_us)
{
	RefundEntry *e;
	char	   *hkey;
	char	   *wkey;
	int			hlen;
	int			wlen;
	int			holderlen = strlen(holder);

	if (!exit_registered)
	{
		on_shmem_exit(refund_at_exit, (Datum) 0);
		exit_registered = true;
	}
	scripts_prepare();
	reserve();
	redis_store_sem_keys(args, &hkey, &hlen, &wkey, &wlen);
	e = MemoryContextAlloc(refund_cxt, offsetof(RefundEntry, rkey) + hlen + wlen + holderlen + 3);
	memset(e, 0, offsetof(RefundEntry, rkey));
	memcpy(e->rkey, hkey, hlen + 1);
	e->rkeylen = hlen;
	e->lkey = e->rkey + hlen + 1;
	memcpy(e->lkey, wkey, wlen + 1);
	e->lkeylen = wlen;
	e->holder = e->lkey + wlen + 1;
	memcpy(e->holder, holder, holderlen + 1);
	e->kind = KIND_RELEASE;
	e->confirmed = false;
	e->win_us = lease_us;
	e->target = redis_target_id();
	e->subid = GetCurrentSubTransactionId();
	e->state = ENTRY_LIVE;
	e->link = -1;
	live[n_live++] = e;
	pfree(hkey);
	pfree(wkey);
}

/* The live slot of this transaction on the holders key hkey, or -1. */
static int
find_release(const char *hkey, int hkeylen)
{
	for (int i = 0; i < n_live; i++)
		if (live[i]->kind == KIND_RELEASE && live[i]->rkeylen == hkeylen &&
			memcmp(live[i]->rkey, hkey, hkeylen) == 0)
			return i;
	return -1;
}

/* Redis said that this transaction's holder on args' key holds a slot. */
void
refund_confirm_slot(const RlArgs *args)
{
	char	   *hkey;
	char	   *wkey;
	int			hlen;
	int			wlen;
	int			i;

	redis_store_sem_keys(args, &hkey, &hlen, &wkey, &wlen);
	i = find_release(hkey, hlen);
	if (i >= 0)
		live[i]->confirmed = true;
	pfree(hkey);
	pfree(wkey);
}

/*
 * The holder's name of this transaction's slot on args' key (palloc'd), or
 * NULL; *lease_us (if not NULL) its lease, *confirmed (if not NULL) whether
 * Redis said it is held.
 */
char *
refund_held_slot(const RlArgs *args, int64 *lease_us, bool *confirmed)
{
	char	   *hkey;
	char	   *wkey;
	int			hlen;
	int			wlen;
	int			i;

	redis_store_sem_keys(args, &hkey, &hlen, &wkey, &wlen);
	i = find_release(hkey, hlen);
	pfree(hkey);
	pfree(wkey);
	if (i >= 0 && lease_us)
		*lease_us = live[i]->win_us;
	if (i >= 0 && confirmed)
		*confirmed = live[i]->confirmed;
	return i < 0 ? NULL : pstrdup(live[i]->holder);
}

/*
 * rl_release: stop tracking this transaction's slot on args' key, so that
 * the caller releases it now; its holder's name (palloc'd), or NULL if the
 * transaction holds none there.
 */
char *
refund_take_slot(const RlArgs *args)
{
	char	   *holder = refund_held_slot(args, NULL, NULL);
	char	   *hkey;
	char	   *wkey;
	int			hlen;
	int			wlen;
	int			i;

	if (holder == NULL)
		return NULL;
	redis_store_sem_keys(args, &hkey, &hlen, &wkey, &wlen);
	i = find_release(hkey, hlen);
	pfree(live[i]);
	memmove(live + i, live + i + 1, (n_live - i - 1) * sizeof(RefundEntry *));
	n_live--;
	pfree(hkey);
	pfree(wkey);
	return holder;
}

/*
 * Whether this transaction holds a slot in Redis (PREPARE refuses it). An
 * unconfirmed one is released at PREPARE instead.
 */
static bool
holds_slots(void)
{
	for (int i = 0; i < n_live; i++)
		if (live[i]->kind == KIND_RELEASE && live[i]->confirmed)
			return true;
	return false;
}

/*
 * At commit: the refunds are forgotten (their units stay spent) and the
 * slots are released, as at abort (no allocation, no ERROR).
 */
static void
release_at_commit(void)
{
	int			kept = 0;

	for (int i = 0; i < n_live; i++)
	{
		if (live[i]->kind == KIND_RELEASE)
			live[kept++] = live[i];
		else
			pfree(live[i]);
	}
	n_live = kept;
	if (n_live > 0)
		refund_from_abort(0);
}

/* ---------------------------------------------------------------------
 * Moving entries (safe in abort: no allocation, no ERROR)
 * ---------------------------------------------------------------------
 */

/*
 * Queue live[from..n_live) for refunding, in order. The live stack is cut
 * first, so that an abort re-entered for any reason never queues an entry
 * twice.
 */
static void
queue_live_from(int from)
{
	int			end = n_live;

	n_live = Min(n_live, from);
	for (int i = from; i < end; i++)
	{
		RefundEntry *e = live[i];

		Assert(n_queue < max_queue);
		e->state = ENTRY_PENDING;
		if (e->kind == KIND_REFUND)
			deny_cache_refund_begin(e->key_hash);
		if (q_send > n_queue)
			q_send = n_queue;
		queue[n_queue++] = e;
	}
}

/* An entry leaves the queue; it stays allocated until the context is reset. */
static void
finish(RefundEntry *e, bool given_back)
{
	if (e->state == ENTRY_SENT)
		n_sent--;
	e->state = ENTRY_DONE;
	if (e->kind == KIND_REFUND)
	{
		if (given_back)
		{
			refund_done_count++;
			stats_refund(true);
		}
		deny_cache_refund_end(e->key_hash, e->ever_sent);
	}
	while (q_head < n_queue && queue[q_head]->state == ENTRY_DONE)
		q_head++;
}

/* Replies owed on a connection that is gone will never come: send again. */
static void
reclaim_lost(void)
{
	if (n_sent == 0 || (sent_on == redis_connection_id() && sent_on != 0))
		return;
	for (int i = q_head; i < n_queue; i++)
		if (queue[i]->state == ENTRY_SENT)
			queue[i]->state = ENTRY_PENDING;
	n_sent = 0;
	q_send = q_head;
	q_reply = n_queue;
}

/* Queue one entry's command on the pipeline (abort-safe). */
static bool
append_entry(RefundEntry *e, const char *now, bool eval)
{
	if (e->kind == KIND_RELEASE)
		return redis_store_release_append(e->rkey, e->rkeylen, e->lkey, e->lkeylen,
										  e->holder, eval);
	return redis_store_refund_append(e->rkey, e->rkeylen, e->lkey, e->lkeylen,
									 e->ts, e->cost, e->win_us, now, eval);
}

/*
 * Append every pending refund for the current server to the connection's
 * pipeline. Returns false if the connection could not take them (it is then
 * discarded, and what was appended goes back to pending at the next look).
 * The first command of a round that must load the script is an EVAL; the
 * EVALSHAs after it on the same connection find the script loaded.
 */
static bool
append_pending(void)
{
	char		now[24];
	uint32		target = redis_target_id();
	bool		evaled[2];
	int			first_pending = -1;

	if (redis_target_is_cluster() || !redis_pipeline_ready())
		return false;
	reclaim_lost();
	for (int k = 0; k < 2; k++)
		evaled[k] = (script_known_on[k] == redis_connection_id());
	if (!redis_store_refund_clock(now, sizeof(now)))
		return true;			/* the test clock is not parsed: later */
	for (int i = Max(q_send, q_head); i < n_queue; i++)
	{
		RefundEntry *e = queue[i];
		bool		eval;

		if (e->state != ENTRY_PENDING)
			continue;
		if (e->target != target)
		{
			/* For another server: left for the hook to drop. */
			if (first_pending < 0)
				first_pending = i;
			continue;
		}
		eval = !evaled[e->kind];
		if (!append_entry(e, now, eval))
		{
			q_send = Min(q_send, i);
			return false;
		}
		evaled[e->kind] |= eval;
		e->state = ENTRY_SENT;
		e->ever_sent = true;
		n_sent++;
		sent_on = redis_connection_id();
		if (i < q_reply)
			q_reply = i;
	}
	q_send = first_pending >= 0 ? first_pending : n_queue;
	return true;
}

/*
 * Redis Cluster, in abort (the same rules: no allocation, no ERROR, no
 * connecting, poll() only): each pending refund goes to the link of the
 * node that serves its key, when the slot map names one and that link is
 * open and idle; the first refund on each link is an EVAL, so that a node
 * that never saw the script applies it at once. The replies are read, per
 * link and in order, by routed_hook.
 */
static void
cluster_push_pending(TimestampTz deadline)
{
	char		now[24];
	uint32		target = redis_target_id();
	bool		evaled[REDIS_MAX_LINK_COUNT][2] = {{false}};
	bool		touched[REDIS_MAX_LINK_COUNT] = {false};

	if (!redis_store_refund_clock(now, sizeof(now)))
		return;
	for (int i = q_head; i < n_queue; i++)
	{
		RefundEntry *e = queue[i];
		int			l;

		if (e->state != ENTRY_PENDING || e->target != target)
			continue;
		l = redis_cluster_link_for_key(e->rkey, e->rkeylen);
		if (l < 0)
			continue;
		redis_select_link(l);
		if (!redis_pipeline_ready())
			continue;
		if (!append_entry(e, now, !evaled[l][e->kind]))
			continue;
		evaled[l][e->kind] = true;
		touched[l] = true;
		e->state = ENTRY_SENT;
		e->ever_sent = true;
		e->link = l;
		e->link_conn = redis_connection_id();
		n_sent++;
	}
	for (int l = 0; l < REDIS_MAX_LINK_COUNT; l++)
		if (touched[l])
		{
			long		left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);

			/* one deadline for all links: a frozen node cannot add up */
			redis_select_link(l);
			(void) redis_pipeline_push((int) Min(left, (long) INT_MAX));
		}
	redis_select_link(0);
}

/*
 * Redis Cluster, in abort, after cluster_push_pending: read each link's
 * replies to the refunds sent there, in order, until deadline, waiting in
 * poll() only. A link that fails or is silent is left as it is: its replies
 * stay owed, for cluster_read_sent.
 */
static void
cluster_confirm_sent(TimestampTz deadline)
{
	bool		left_alone[REDIS_MAX_LINK_COUNT] = {false};

	for (int i = q_head; i < n_queue; i++)
	{
		RefundEntry *e = queue[i];
		RedisResult r;
		redisReply *reply;

		if (e->state != ENTRY_SENT || e->link < 0 || left_alone[e->link])
			continue;
		redis_select_link(e->link);
		if (redis_connection_id() != e->link_conn || redis_pipelined() == 0 ||
			!redis_pipeline_ready() ||
			redis_pipeline_read_nowait(&reply, deadline, &r) != RS_OK)
		{
			left_alone[e->link] = true;
			continue;
		}
		settle(e, reply, WARNING);
		freeReplyObject(reply);
	}
	redis_select_link(0);
}

/*
 * Redis Cluster, in normal context: read the replies owed on each link to
 * the refunds cluster_push_pending sent there, in order. A link that failed
 * or was replaced gives its refunds back to pending, to be sent again.
 */
static RedisStatus
cluster_read_sent(RedisResult *result)
{
	for (int i = q_head; i < n_queue; i++)
	{
		RefundEntry *e = queue[i];
		redisReply *reply;
		RedisStatus st;

		if (e->state != ENTRY_SENT)
			continue;
		redis_select_link(e->link);
		if (redis_connection_id() != e->link_conn || redis_pipelined() == 0)
		{
			/* the link is gone, or lost its replies: send again */
			e->state = ENTRY_PENDING;
			n_sent--;
			continue;
		}
		st = redis_pipeline_read(&reply, result);
		if (st != RS_OK)
		{
			redis_select_link(0);
			for (int j = i; j < n_queue; j++)
				if (queue[j]->state == ENTRY_SENT && queue[j]->link == e->link)
				{
					queue[j]->state = ENTRY_PENDING;
					n_sent--;
				}
			return st;
		}
		settle(e, reply, WARNING);
		freeReplyObject(reply);
	}
	redis_select_link(0);
	return RS_OK;
}

/*
 * In abort, after the push: read the replies owed to the refunds sent on the
 * open connection, in order, until deadline, waiting in poll() only. What is
 * still owed then is read by the pipeline hook, as before.
 */
static void
confirm_sent(TimestampTz deadline)
{
	while (n_sent > 0 && sent_on == redis_connection_id() && redis_pipelined() > 0)
	{
		RedisResult r;
		redisReply *reply;
		RefundEntry *e;

		if (redis_pipeline_read_nowait(&reply, deadline, &r) != RS_OK)
			return;
		e = next_sent();
		if (e == NULL)
		{
			/* cannot happen: a reply no refund owns; trust nothing further */
			freeReplyObject(reply);
			redis_disconnect();
			return;
		}
		settle(e, reply, WARNING);
		freeReplyObject(reply);
	}
}

/*
 * In abort: queue the entries from live[from] on, send what we can, and wait
 * a little for the replies (slidewin.refund_confirm_timeout, capped by
 * command_timeout), so that when ROLLBACK returns the refunds are applied
 * and confirmed: other sessions see the units back, and the deny cache has
 * the keys back, even if this backend then stays idle. The whole abort
 * spends at most the larger of that and ABORT_PUSH_BUDGET_MS, capped by
 * command_timeout, whatever Redis does: interrupts are held here, so the
 * deadline is the only way out of a wait. Settling a reply here may report a
 * dropped refund with a WARNING, never more.
 */
static void
refund_from_abort(int from)
{
	TimestampTz start = GetCurrentTimestamp();
	int			confirm = Min(slidewin_command_timeout, slidewin_refund_confirm_timeout);
	int			budget = Min(slidewin_command_timeout, Max(ABORT_PUSH_BUDGET_MS, confirm));
	TimestampTz confirm_by = TimestampTzPlusMilliseconds(start, confirm);

	queue_live_from(from);
	if (redis_target_is_cluster())
	{
		cluster_push_pending(TimestampTzPlusMilliseconds(start, budget));
		if (confirm > 0)
			cluster_confirm_sent(confirm_by);
	}
	else if (append_pending())
	{
		(void) redis_pipeline_push(budget);
		if (confirm > 0)
			confirm_sent(confirm_by);
	}
}

/* ---------------------------------------------------------------------
 * Replies (normal context, or backend exit)
 * ---------------------------------------------------------------------
 */

static void
warn_dropped(int level, RefundEntry *e, const char *why)
{
	if (e->kind == KIND_RELEASE)
	{
		stats_slot_released(false);
		ereport(level,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("slidewin could not release a concurrency slot; its lease will end it"),
				 errdetail_internal("%s", why)));
		return;
	}
	refund_dropped_count++;
	stats_refund(false);
	ereport(level,
			(errcode(ERRCODE_CONNECTION_FAILURE),
			 errmsg("slidewin could not give back " INT64_FORMAT " units of an aborted transaction",
					e->cost),
			 errdetail_internal("%s", why)));
}

/* The sent entry whose reply comes next (NULL: none, which cannot happen). */
static RefundEntry *
next_sent(void)
{
	while (q_reply < n_queue && queue[q_reply]->state != ENTRY_SENT)
		q_reply++;
	if (q_reply >= n_queue)
		return NULL;
	return queue[q_reply++];
}

/*
 * Settle one reply: done, dropped, or pending again (to be sent in the next
 * round). At exit (level LOG) nothing is sent again: such an entry is dropped.
 */
static void
settle(RefundEntry *e, redisReply *reply, int level)
{
	RefundVerdict v = redis_store_refund_verdict(reply);

	switch (v)
	{
		case REFUND_GIVEN:
		case REFUND_NOTHING:
			script_known_on[e->kind] = redis_connection_id();
			if (e->kind == KIND_RELEASE && (e->confirmed || v == REFUND_GIVEN))
				stats_slot_released(true);
			finish(e, v == REFUND_GIVEN);
			break;
		case REFUND_NOSCRIPT:
		case REFUND_RETRY:
			if (level == LOG || ++e->tries >= REFUND_MAX_TRIES)
			{
				warn_dropped(level, e, reply->str);
				finish(e, false);
				break;
			}
			if (v == REFUND_NOSCRIPT)
				script_known_on[e->kind] = 0;
			n_sent--;
			e->state = ENTRY_PENDING;
			q_send = Min(q_send, q_reply - 1);
			break;
		case REFUND_FAILED:
			{
				char		why[256];

				redis_store_refund_describe(reply, why, sizeof(why));
				warn_dropped(level, e, why);
			}
			finish(e, false);
			break;
	}
}

/* Drop pending refunds that belong to a server slidewin no longer uses. */
static void
drop_foreign(void)
{
	uint32		target = redis_target_id();

	for (int i = Max(q_send, q_head); i < n_queue; i++)
	{
		RefundEntry *e = queue[i];

		if (e->state == ENTRY_PENDING && e->target != target)
			{
				warn_dropped(WARNING, e,
							 "slidewin.redis_url names another server than the one that admitted them.");
				finish(e, false);
			}
	}
}

/*
 * The pipeline hook: runs in redis_exec before every command, on an open
 * connection, in normal context. Sends the queued refunds and reads every
 * reply owed, so that the command that follows reads its own reply and sees
 * the units given back. Each wait is bounded by command_timeout since the
 * last progress; an interrupt ERRORs out (redis_exec then discards the
 * connection, and the refunds in flight are sent again later).
 */
static RedisStatus
pipeline_hook(RedisResult *result)
{
	int64		dummy;

	if (q_head == n_queue)
		return RS_OK;
	(void) limit_test_clock(&dummy);	/* parse it here, where that may ERROR */
	drop_foreign();
	while (q_head < n_queue)
	{
		RedisStatus st;

		if (!append_pending())
		{
			snprintf(result->message, sizeof(result->message),
					 "could not queue a refund on the connection to Redis");
			result->status = RS_FAIL_IO;
			return RS_FAIL_IO;
		}
		if (n_sent == 0)
			break;				/* only unsendable entries left */
		st = redis_pipeline_write(result);
		if (st != RS_OK)
			return st;
		while (n_sent > 0)
		{
			redisReply *reply;

			RefundEntry *e;

			st = redis_pipeline_read(&reply, result);
			if (st != RS_OK)
				return st;
			e = next_sent();
			if (e == NULL)
			{
				freeReplyObject(reply);
				snprintf(result->message, sizeof(result->message),
						 "a reply from Redis matches no refund sent");
				result->status = RS_FAIL_IO;
				return RS_FAIL_IO;
			}
			settle(e, reply, WARNING);
			freeReplyObject(reply);
		}
		CHECK_FOR_INTERRUPTS();
	}
	compact_queue();
	reset_if_idle();
	return RS_OK;
}

/*
 * Under Redis Cluster the refunds cannot share one pipeline: each goes to
 * the node that serves its key. Nothing is pushed in abort then
 * (redis_pipeline_ready says no), and this hook, which redis_exec runs
 * before each command, sends the queued refunds one at a time, each routed
 * like any command, and settles each reply. A refund Redis cannot take now
 * stays queued, and the call that ran the hook follows its policy.
 */
static RedisStatus
routed_hook(RedisResult *result)
{
	int64		dummy;
	char		now[24];
	uint32		target = redis_target_id();

	if (q_head == n_queue)
		return RS_OK;
	(void) limit_test_clock(&dummy);	/* parse it here, where that may ERROR */
	if (n_sent > 0)
	{
		RedisStatus st = cluster_read_sent(result);

		if (st != RS_OK)
			return st;
	}
	drop_foreign();
	if (!redis_store_refund_clock(now, sizeof(now)))
		return RS_OK;
	for (int i = q_head; i < n_queue; i++)
	{
		RefundEntry *e = queue[i];
		RedisResult r;

		if (e->state != ENTRY_PENDING || e->target != target)
			continue;
		if (e->kind == KIND_RELEASE)
			redis_store_release_exec(e->rkey, e->rkeylen, e->lkey, e->lkeylen, e->holder, &r);
		else
			redis_store_refund_exec(e->rkey, e->rkeylen, e->lkey, e->lkeylen,
									e->ts, e->cost, e->win_us, now, &r);
		if (r.status != RS_OK && r.status != RS_FAIL_REPLY)
		{
			if (r.reply)
				freeReplyObject(r.reply);
			result->status = r.status;
			strlcpy(result->message, r.message, sizeof(result->message));
			return r.status;
		}
		e->state = ENTRY_SENT;
		e->ever_sent = true;
		n_sent++;
		settle(e, r.reply, WARNING);
		freeReplyObject(r.reply);
		CHECK_FOR_INTERRUPTS();
	}
	compact_queue();
	reset_if_idle();
	return RS_OK;
}

/*
 * Settle the refunds queued now, in normal context (a statement-level
 * trigger giving back its admissions before raising its denial).
 */
static void
flush_now(void)
{
	RedisResult r;

	if (q_head == n_queue)
		return;
	r.reply = NULL;
	if (!policy_redis_may_be_tried(&r))
		return;
	redis_sync(&r);
	if (r.reply)
		freeReplyObject(r.reply);
	if (r.status != RS_OK)
		policy_redis_failed(&r);
}

/*
 * Whether a slot's release is owed: by this transaction (live), or, unless
 * live_only, queued and not yet confirmed.
 */
static bool
releases_owed(bool live_only)
{
	for (int i = 0; i < n_live; i++)
		if (live[i]->kind == KIND_RELEASE)
			return true;
	if (live_only)
		return false;
	for (int i = q_head; i < n_queue; i++)
		if (queue[i]->kind == KIND_RELEASE && queue[i]->state != ENTRY_DONE)
			return true;
	return false;
}

/*
 * Before a transaction ends, in normal context (pre-commit, or the
 * COMMIT/ROLLBACK statement: refund_before_xact_end): if a slot's release
 * is owed and no connection is open (an earlier timeout or interrupt
 * dropped it), connect now and send what is queued, so that the end of the
 * transaction finds a connection for its own releases. The abort and
 * commit callbacks cannot connect (interrupts are held there). This waits
 * at most connect_timeout plus command_timeout per exchange, and is
 * interruptible: an interrupt aborts the transaction, whose abort queues
 * the releases as always. The breaker is passed over for this
 * transaction's own slots: one attempt per transaction that took one, so
 * that a slot is not kept for a retry interval after a stall; queued ones
 * of earlier transactions wait for the breaker. A failure is counted and
 * trips the breaker, never raised. Not under Redis Cluster, whose releases
 * go out one by one with the next command (routed_hook).
 */
static void
reconnect_for_releases(void)
{
	RedisResult r;

	if (n_live == 0 && q_head == n_queue)
		return;
	if (redis_target_is_cluster() || redis_pipeline_ready() || !releases_owed(false))
		return;
	if (!policy_redis_may_be_tried(&r) && !releases_owed(true))
		return;
	r.reply = NULL;
	redis_sync(&r);
	if (r.reply)
		freeReplyObject(r.reply);
	if (r.status != RS_OK)
		policy_redis_failed(&r);
}

void
refund_before_xact_end(void)
{
	reconnect_for_releases();
}

/*
 * Backend exit. Runs after the last transaction was aborted (so its refunds
 * are queued) and while shared memory is still attached. One try of at most
 * EXIT_BUDGET_MS in all, with poll() only, to send what is queued on the
 * open connection and read the replies; whatever is left is dropped and
 * logged. A slot's release that found no open connection (an earlier
 * timeout dropped it) gets one connection first, its connect and each
 * reply bounded by EXIT_BUDGET_MS, interrupts held: a slot would otherwise
 * stay taken for its whole lease while Redis is healthy.
 */
static void
refund_at_exit(int code, Datum arg)
{
	TimestampTz deadline;
	int			budget = Min(slidewin_command_timeout, EXIT_BUDGET_MS);
	int			unsent = 0;
	int			unconfirmed = 0;
	int			releases_lost = 0;

	if (q_head == n_queue)
		return;
	if (!redis_target_is_cluster() && !redis_pipeline_ready() && releases_owed(false))
	{
		int			saved_connect = slidewin_connect_timeout;
		int			saved_command = slidewin_command_timeout;
		RedisResult r;

		slidewin_connect_timeout = Min(saved_connect, EXIT_BUDGET_MS);
		slidewin_command_timeout = budget;
		r.reply = NULL;
		HOLD_INTERRUPTS();
		redis_sync(&r);
		RESUME_INTERRUPTS();
		slidewin_connect_timeout = saved_connect;
		slidewin_command_timeout = saved_command;
		if (r.reply)
			freeReplyObject(r.reply);
		if (q_head == n_queue)
			return;
	}
	/* Exit cannot be interrupted: keep it short, whatever command_timeout says. */
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), budget);
	if (append_pending() && redis_pipeline_push(budget))
	{
		while (n_sent > 0 && redis_pipelined() > 0)
		{
			RedisResult r;
			redisReply *reply;
			RefundEntry *e;

			if (redis_pipeline_read_nowait(&reply, deadline, &r) != RS_OK)
				break;
			e = next_sent();
			if (e != NULL)
				settle(e, reply, LOG);
			freeReplyObject(reply);
			if (e == NULL)
				break;
		}
	}
	for (int i = q_head; i < n_queue; i++)
	{
		RefundEntry *e = queue[i];

		if (e->state == ENTRY_DONE)
			continue;
		if (e->kind == KIND_RELEASE)
		{
			/* its lease ends it; counted as lost, sent or not */
			releases_lost++;
			stats_slot_released(false);
		}
		else if (e->state == ENTRY_SENT)
			unconfirmed++;
		else
		{
			unsent++;
			refund_dropped_count++;
			stats_refund(false);
		}
		/* a sent one may have been applied: move the generation anyway */
		finish(e, false);
	}
	if (unsent > 0 || unconfirmed > 0)
		ereport(LOG,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("slidewin dropped %d refunds at backend exit", unsent),
				 errdetail("%d refunds could not be sent to Redis; %d were sent but not confirmed.",
						   unsent, unconfirmed)));
	if (releases_lost > 0)
		ereport(LOG,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("slidewin could not confirm the release of %d concurrency slots at backend exit",
						releases_lost),
				 errdetail("Their leases end them.")));
}

/* ---------------------------------------------------------------------
 * Marks, for rl_trigger (normal context)
 * ---------------------------------------------------------------------
 */

int
refund_mark(void)
{
	return n_live;
}

void
refund_since(int mark)
{
	if (mark >= n_live)
		return;
	queue_live_from(mark);
	flush_now();
}

static void
forget_live_from(int from)
{
	for (int i = from; i < n_live; i++)
		pfree(live[i]);
	n_live = Min(n_live, from);
}

void
refund_forget_since(int mark)
{
	forget_live_from(mark);
}

/* ---------------------------------------------------------------------
 * Transaction callbacks
 * ---------------------------------------------------------------------
 */

static void
xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			if (n_live > 0)
				refund_from_abort(0);
			break;
		case XACT_EVENT_PRE_COMMIT:
			reconnect_for_releases();
			break;
		case XACT_EVENT_PRE_PREPARE:
			if (holds_slots())
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that holds a slidewin concurrency slot"),
						 errhint("Release it with rl_release first, or commit without two-phase commit.")));
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			release_at_commit();
			reset_if_idle();
			break;
		case XACT_EVENT_PREPARE:
			/* only unconfirmed slots are left (holds_slots): release them */
			release_at_commit();
			reset_if_idle();
			break;
		default:
			break;
	}
}

/*
 * A subtransaction's entries are the tail of `live`: entries are appended
 * in time order, a child's entries come after everything its parent did
 * before the child began, and the parent adds nothing while a child runs.
 * So commit and abort touch only that tail, never the whole array.
 */
static void
subxact_callback(SubXactEvent event, SubTransactionId mySubid,
				 SubTransactionId parentSubid, void *arg)
{
	int			from = n_live;

	if (n_live == 0)
		return;
	while (from > 0 && live[from - 1]->subid == mySubid)
		from--;
	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		if (from < n_live)
			refund_from_abort(from);
	}
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		for (int i = from; i < n_live; i++)
			live[i]->subid = parentSubid;
	}
}

void
refund_init(void)
{
	RegisterXactCallback(xact_callback, NULL);
	RegisterSubXactCallback(subxact_callback, NULL);
	redis_set_pipeline_hook(pipeline_hook);
	redis_set_routed_hook(routed_hook);
}

void
refund_settle(void)
{
	flush_now();
}
