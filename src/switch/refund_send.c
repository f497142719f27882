/*-------------------------------------------------------------------------
 *
 * refund_send.c
 *		Sending the queued refunds and slot releases to Redis, and reading
 *		the replies owed to them: in abort (pushed out and confirmed until
 *		slidewin.refund_confirm_timeout, poll() only), in the pipeline hooks
 *		that redis_exec runs before each command (one pipeline, or one
 *		routed command per entry under Redis Cluster), before a transaction
 *		ends, and at backend exit.
 *
 * The entries, their queue and how a reply settles one are refund.c's
 * (refund_int.h); when the sending happens is refund_xact.c's business.
 * The rules of the whole (what abort may do, when a refund is dropped) are
 * at the head of refund.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "miscadmin.h"
#include "utils/timestamp.h"

#include "policy.h"
#include "refund.h"
#include "refund_int.h"
#include "refund_send_int.h"
#include "settings.h"
#include "stats.h"
#include "store_redis.h"

/* How long abort may spend pushing refund bytes out (capped by command_timeout). */
#define ABORT_PUSH_BUDGET_MS 20
/* How long backend exit may spend on a last try (capped by command_timeout). */
#define EXIT_BUDGET_MS 250

/* ---------------------------------------------------------------------
 * Sending (safe in abort: no allocation, no ERROR)
 * ---------------------------------------------------------------------
 */

/* Replies owed on a connection that is gone will never come: send again. */
static void
reclaim_lost(void)
{
	if (refund_n_sent == 0 || (refund_sent_on == redis_connection_id() && refund_sent_on != 0))
		return;
	for (int i = refund_q_head; i < refund_n_queue; i++)
		if (refund_queue[i]->state == ENTRY_SENT)
			refund_queue[i]->state = ENTRY_PENDING;
	refund_n_sent = 0;
	refund_q_send = refund_q_head;
	refund_q_reply = refund_n_queue;
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
		evaled[k] = (refund_script_known_on[k] == redis_connection_id());
	if (!redis_store_refund_clock(now, sizeof(now)))
		return true;			/* the test clock is not parsed: later */
	for (int i = Max(refund_q_send, refund_q_head); i < refund_n_queue; i++)
	{
		RefundEntry *e = refund_queue[i];
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
			refund_q_send = Min(refund_q_send, i);
			return false;
		}
		evaled[e->kind] |= eval;
		e->state = ENTRY_SENT;
		e->ever_sent = true;
		refund_n_sent++;
		refund_sent_on = redis_connection_id();
		if (i < refund_q_reply)
			refund_q_reply = i;
	}
	refund_q_send = first_pending >= 0 ? first_pending : refund_n_queue;
	return true;
}

/*
 * Redis Cluster, in abort (the same rules: no allocation, no ERROR, no
 * connecting, poll() only): each pending refund goes to the link of the
 * node that serves its key, when the slot map names one and that link is
 * open and idle; the first refund on each link is an EVAL, so that a node
 * that never saw the script applies it at once. The replies are read, per
 * link and in order, by refund_routed_hook.
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
	for (int i = refund_q_head; i < refund_n_queue; i++)
	{
		RefundEntry *e = refund_queue[i];
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
		refund_n_sent++;
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

	for (int i = refund_q_head; i < refund_n_queue; i++)
	{
		RefundEntry *e = refund_queue[i];
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
		refund_settle_reply(e, reply, WARNING);
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
	for (int i = refund_q_head; i < refund_n_queue; i++)
	{
		RefundEntry *e = refund_queue[i];
		redisReply *reply;
		RedisStatus st;

		if (e->state != ENTRY_SENT)
			continue;
		redis_select_link(e->link);
		if (redis_connection_id() != e->link_conn || redis_pipelined() == 0)
		{
			/* the link is gone, or lost its replies: send again */
			e->state = ENTRY_PENDING;
			refund_n_sent--;
			continue;
		}
		st = redis_pipeline_read(&reply, result);
		if (st != RS_OK)
		{
			redis_select_link(0);
			for (int j = i; j < refund_n_queue; j++)
				if (refund_queue[j]->state == ENTRY_SENT && refund_queue[j]->link == e->link)
				{
					refund_queue[j]->state = ENTRY_PENDING;
					refund_n_sent--;
				}
			return st;
		}
		refund_settle_reply(e, reply, WARNING);
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
	while (refund_n_sent > 0 && refund_sent_on == redis_connection_id() &&
		   redis_pipelined() > 0)
	{
		RedisResult r;
		redisReply *reply;
		RefundEntry *e;

		if (redis_pipeline_read_nowait(&reply, deadline, &r) != RS_OK)
			return;
		e = refund_next_sent();
		if (e == NULL)
		{
			/* cannot happen: a reply no refund owns; trust nothing further */
			freeReplyObject(reply);
			redis_disconnect();
			return;
		}
		refund_settle_reply(e, reply, WARNING);
		freeReplyObject(reply);
	}
}

/*
 * In abort: queue the entries from refund_live[from] on, send what we can,
 * and wait a little for the replies (slidewin.refund_confirm_timeout, capped by
 * command_timeout), so that when ROLLBACK returns the refunds are applied
 * and confirmed: other sessions see the units back, and the deny cache has
 * the keys back, even if this backend then stays idle. The whole abort
 * spends at most the larger of that and ABORT_PUSH_BUDGET_MS, capped by
 * command_timeout, whatever Redis does: interrupts are held here, so the
 * deadline is the only way out of a wait. Settling a reply here may report a
 * dropped refund with a WARNING, never more.
 */
void
refund_from_abort(int from)
{
	TimestampTz start = GetCurrentTimestamp();
	int			confirm = Min(slidewin_command_timeout, slidewin_refund_confirm_timeout);
	int			budget = Min(slidewin_command_timeout, Max(ABORT_PUSH_BUDGET_MS, confirm));
	TimestampTz confirm_by = TimestampTzPlusMilliseconds(start, confirm);

	refund_queue_live_from(from);
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

/*
 * The pipeline hook: runs in redis_exec before every command, on an open
 * connection, in normal context. Sends the queued refunds and reads every
 * reply owed, so that the command that follows reads its own reply and sees
 * the units given back. Each wait is bounded by command_timeout since the
 * last progress; an interrupt ERRORs out (redis_exec then discards the
 * connection, and the refunds in flight are sent again later).
 */
RedisStatus
refund_pipeline_hook(RedisResult *result)
{
	int64		dummy;

	if (refund_q_head == refund_n_queue)
		return RS_OK;
	(void) limit_test_clock(&dummy);	/* parse it here, where that may ERROR */
	refund_drop_foreign();
	while (refund_q_head < refund_n_queue)
	{
		RedisStatus st;

		if (!append_pending())
		{
			snprintf(result->message, sizeof(result->message),
					 "could not queue a refund on the connection to Redis");
			result->status = RS_FAIL_IO;
			return RS_FAIL_IO;
		}
		if (refund_n_sent == 0)
			break;				/* only unsendable entries left */
		st = redis_pipeline_write(result);
		if (st != RS_OK)
			return st;
		while (refund_n_sent > 0)
		{
			redisReply *reply;

			RefundEntry *e;

			st = redis_pipeline_read(&reply, result);
			if (st != RS_OK)
				return st;
			e = refund_next_sent();
			if (e == NULL)
			{
				freeReplyObject(reply);
				snprintf(result->message, sizeof(result->message),
						 "a reply from Redis matches no refund sent");
				result->status = RS_FAIL_IO;
				return RS_FAIL_IO;
			}
			refund_settle_reply(e, reply, WARNING);
			freeReplyObject(reply);
		}
		CHECK_FOR_INTERRUPTS();
	}
	refund_compact_queue();
	refund_reset_if_idle();
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
RedisStatus
refund_routed_hook(RedisResult *result)
{
	int64		dummy;
	char		now[24];
	uint32		target = redis_target_id();

	if (refund_q_head == refund_n_queue)
		return RS_OK;
	(void) limit_test_clock(&dummy);	/* parse it here, where that may ERROR */
	if (refund_n_sent > 0)
	{
		RedisStatus st = cluster_read_sent(result);

		if (st != RS_OK)
			return st;
	}
	refund_drop_foreign();
	if (!redis_store_refund_clock(now, sizeof(now)))
		return RS_OK;
	for (int i = refund_q_head; i < refund_n_queue; i++)
	{
		RefundEntry *e = refund_queue[i];
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
		refund_n_sent++;
		refund_settle_reply(e, r.reply, WARNING);
		freeReplyObject(r.reply);
		CHECK_FOR_INTERRUPTS();
	}
	refund_compact_queue();
	refund_reset_if_idle();
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

	if (refund_q_head == refund_n_queue)
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
 * go out one by one with the next command (refund_routed_hook).
 */
static void
reconnect_for_releases(void)
{
	RedisResult r;

	if (refund_n_live == 0 && refund_q_head == refund_n_queue)
		return;
	if (redis_target_is_cluster() || redis_pipeline_ready() || !refund_releases_owed(false))
		return;
	if (!policy_redis_may_be_tried(&r) && !refund_releases_owed(true))
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
void
refund_at_exit(int code, Datum arg)
{
	TimestampTz deadline;
	int			budget = Min(slidewin_command_timeout, EXIT_BUDGET_MS);
	int			unsent = 0;
	int			unconfirmed = 0;
	int			releases_lost = 0;

	if (refund_q_head == refund_n_queue)
		return;
	if (!redis_target_is_cluster() && !redis_pipeline_ready() && refund_releases_owed(false))
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
		if (refund_q_head == refund_n_queue)
			return;
	}
	/* Exit cannot be interrupted: keep it short, whatever command_timeout says. */
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), budget);
	if (append_pending() && redis_pipeline_push(budget))
	{
		while (refund_n_sent > 0 && redis_pipelined() > 0)
		{
			RedisResult r;
			redisReply *reply;
			RefundEntry *e;

			if (redis_pipeline_read_nowait(&reply, deadline, &r) != RS_OK)
				break;
			e = refund_next_sent();
			if (e != NULL)
				refund_settle_reply(e, reply, LOG);
			freeReplyObject(reply);
			if (e == NULL)
				break;
		}
	}
	for (int i = refund_q_head; i < refund_n_queue; i++)
	{
		RefundEntry *e = refund_queue[i];

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
		refund_finish(e, false);
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

void
refund_settle(void)
{
	flush_now();
}
