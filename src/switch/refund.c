/*-------------------------------------------------------------------------
 *
 * refund.c
 *		Transactional consumption for the Redis store, opt-in.
 *
 * Redis has no transactions that follow PostgreSQL's, so an admission is
 * spent at once, like a sequence value. With refund_on_abort, each entry a
 * (sub)transaction records in Redis is remembered here, tagged with its
 * subtransaction; if that subtransaction or the whole transaction aborts,
 * its entries are given back by a script (store_redis_refund.c, scripts.c).
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
 * Files: this one keeps the entries (the current transaction's live stack
 * and the refund queue, their memory) and settles the replies to them;
 * refund_send.c sends the queued entries to Redis and reads the replies
 * owed (in abort, in the pipeline hooks, at backend exit); refund_xact.c
 * remembers entries and follows the ends of transactions and
 * subtransactions. refund_int.h is shared by these files only. Each file
 * may use those listed before it, never one listed after it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"

#include "deny_cache.h"
#include "refund.h"
#include "refund_int.h"
#include "stats.h"
#include "store_redis.h"

int64		refund_done_count = 0;
int64		refund_dropped_count = 0;

/* A refund answered with a transient error this many times is dropped. */
#define REFUND_MAX_TRIES 5

MemoryContext refund_cxt = NULL;

/* The current transaction's entries, oldest first: a stack of subxacts. */
RefundEntry **refund_live = NULL;
int			refund_n_live = 0;
static int	max_live = 0;

/*
 * The refund queue, in the order refunds were decided, which is also the
 * order of each key's entries (so most refunds append to their ledger in
 * Redis). Invariant: max_queue >= refund_n_queue + refund_n_live, so that
 * an abort can move every live entry here without allocating. Replies come back in the
 * order entries were sent, which is queue order among ENTRY_SENT entries:
 * an entry only goes back to pending when its connection is lost (then all
 * of them do) or when the hook reads its reply (and the hook reads all
 * replies before anything else is sent).
 */
RefundEntry **refund_queue = NULL;
int			refund_q_head = 0;	/* entries before it are done */
int			refund_n_queue = 0;
static int	max_queue = 0;
int			refund_q_send = 0;	/* no entry before it is pending */
int			refund_q_reply = 0; /* no entry before it is sent */
int			refund_n_sent = 0;
uint64		refund_sent_on = 0; /* connection the sent entries went on */

/*
 * The connection on which a refund reply showed that Redis has the refund
 * script. On any other, the first refund sent is an EVAL, so that a refund
 * sent at abort is applied at once even by a Redis that never saw it.
 */
uint64		refund_script_known_on[2] = {0, 0};

/* ---------------------------------------------------------------------
 * Memory (normal context only)
 * ---------------------------------------------------------------------
 */

void
refund_reset_if_idle(void)
{
	if (refund_n_live == 0 && refund_q_head == refund_n_queue && refund_cxt != NULL)
	{
		MemoryContextReset(refund_cxt);
		refund_live = NULL;
		refund_queue = NULL;
		max_live = max_queue = 0;
		refund_n_queue = refund_q_head = refund_q_send = refund_q_reply = 0;
		refund_n_sent = 0;
	}
}

/* Slide the queue down over the done entries at its head. */
void
refund_compact_queue(void)
{
	if (refund_q_head == 0)
		return;
	memmove(refund_queue, refund_queue + refund_q_head,
			(refund_n_queue - refund_q_head) * sizeof(RefundEntry *));
	refund_n_queue -= refund_q_head;
	refund_q_send = Max(refund_q_send - refund_q_head, 0);
	refund_q_reply = Max(refund_q_reply - refund_q_head, 0);
	refund_q_head = 0;
}

void
refund_reserve(void)
{
	if (refund_cxt == NULL)
		refund_cxt = AllocSetContextCreate(TopMemoryContext, "slidewin refunds",
										   ALLOCSET_DEFAULT_SIZES);
	if (refund_n_live == max_live)
	{
		int			n = Max(16, max_live * 2);

		refund_live = refund_live == NULL ?
			MemoryContextAlloc(refund_cxt, n * sizeof(RefundEntry *)) :
			repalloc(refund_live, n * sizeof(RefundEntry *));
		max_live = n;
	}
	refund_compact_queue();
	if (refund_n_queue + refund_n_live + 1 > max_queue)
	{
		int			n = Max(16, Max(max_queue * 2, refund_n_queue + refund_n_live + 1));

		refund_queue = refund_queue == NULL ?
			MemoryContextAlloc(refund_cxt, n * sizeof(RefundEntry *)) :
			repalloc(refund_queue, n * sizeof(RefundEntry *));
		max_queue = n;
	}
}

/* ---------------------------------------------------------------------
 * Moving entries (safe in abort: no allocation, no ERROR)
 * ---------------------------------------------------------------------
 */

/*
 * Queue refund_live[from..refund_n_live) for refunding, in order. The live
 * stack is cut first, so that an abort re-entered for any reason never
 * queues an entry twice.
 */
void
refund_queue_live_from(int from)
{
	int			end = refund_n_live;

	refund_n_live = Min(refund_n_live, from);
	for (int i = from; i < end; i++)
	{
		RefundEntry *e = refund_live[i];

		Assert(refund_n_queue < max_queue);
		e->state = ENTRY_PENDING;
		if (e->kind == KIND_REFUND)
			deny_cache_refund_begin(e->key_hash);
		if (refund_q_send > refund_n_queue)
			refund_q_send = refund_n_queue;
		refund_queue[refund_n_queue++] = e;
	}
}

/* An entry leaves the queue; it stays allocated until the context is reset. */
void
refund_finish(RefundEntry *e, bool given_back)
{
	if (e->state == ENTRY_SENT)
		refund_n_sent--;
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
	while (refund_q_head < refund_n_queue && refund_queue[refund_q_head]->state == ENTRY_DONE)
		refund_q_head++;
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
RefundEntry *
refund_next_sent(void)
{
	while (refund_q_reply < refund_n_queue &&
		   refund_queue[refund_q_reply]->state != ENTRY_SENT)
		refund_q_reply++;
	if (refund_q_reply >= refund_n_queue)
		return NULL;
	return refund_queue[refund_q_reply++];
}

/*
 * Settle one reply: done, dropped, or pending again (to be sent in the next
 * round). At exit (level LOG) nothing is sent again: such an entry is dropped.
 */
void
refund_settle_reply(RefundEntry *e, redisReply *reply, int level)
{
	RefundVerdict v = redis_store_refund_verdict(reply);

	switch (v)
	{
		case REFUND_GIVEN:
		case REFUND_NOTHING:
			refund_script_known_on[e->kind] = redis_connection_id();
			if (e->kind == KIND_RELEASE && (e->confirmed || v == REFUND_GIVEN))
				stats_slot_released(true);
			refund_finish(e, v == REFUND_GIVEN);
			break;
		case REFUND_NOSCRIPT:
		case REFUND_RETRY:
			if (level == LOG || ++e->tries >= REFUND_MAX_TRIES)
			{
				warn_dropped(level, e, reply->str);
				refund_finish(e, false);
				break;
			}
			if (v == REFUND_NOSCRIPT)
				refund_script_known_on[e->kind] = 0;
			refund_n_sent--;
			e->state = ENTRY_PENDING;
			refund_q_send = Min(refund_q_send, refund_q_reply - 1);
			break;
		case REFUND_FAILED:
			{
				char		why[256];

				redis_store_refund_describe(reply, why, sizeof(why));
				warn_dropped(level, e, why);
			}
			refund_finish(e, false);
			break;
	}
}

/* Drop pending refunds that belong to a server slidewin no longer uses. */
void
refund_drop_foreign(void)
{
	uint32		target = redis_target_id();

	for (int i = Max(refund_q_send, refund_q_head); i < refund_n_queue; i++)
	{
		RefundEntry *e = refund_queue[i];

		if (e->state == ENTRY_PENDING && e->target != target)
			{
				warn_dropped(WARNING, e,
							 "slidewin.redis_url names another server than the one that admitted them.");
				refund_finish(e, false);
			}
	}
}

/*
 * Whether a slot's release is owed: by this transaction (live), or, unless
 * live_only, queued and not yet confirmed.
 */
bool
refund_releases_owed(bool live_only)
{
	for (int i = 0; i < refund_n_live; i++)
		if (refund_live[i]->kind == KIND_RELEASE)
			return true;
	if (live_only)
		return false;
	for (int i = refund_q_head; i < refund_n_queue; i++)
		if (refund_queue[i]->kind == KIND_RELEASE && refund_queue[i]->state != ENTRY_DONE)
			return true;
	return false;
}
