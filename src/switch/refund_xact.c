/*-------------------------------------------------------------------------
 *
 * refund_xact.c
 *		Remembering what a transaction takes in Redis (the entries it
 *		records, the concurrency slots it may hold), and what happens to it
 *		when the transaction or a subtransaction ends: forgotten at commit,
 *		given back at abort, a slot released either way. Also the marks of
 *		rl_trigger.
 *
 * The entries and their queue are refund.c's (refund_int.h), the sending
 * refund_send.c's (refund_send_int.h). The rules of the whole are at the
 * head of refund.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "storage/ipc.h"
#include "utils/memutils.h"

#include "deny_cache.h"
#include "refund.h"
#include "refund_int.h"
#include "refund_send_int.h"
#include "store_redis.h"

static bool exit_registered = false;

/* ---------------------------------------------------------------------
 * Remembering (normal context only)
 * ---------------------------------------------------------------------
 */

/* At the first entry remembered, ask for the last try at backend exit. */
static void
register_at_exit(void)
{
	if (!exit_registered)
	{
		on_shmem_exit(refund_at_exit, (Datum) 0);
		exit_registered = true;
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

	register_at_exit();
	/* The abort must never have to compute a SHA1 (it allocates). */
	scripts_prepare();
	refund_reserve();
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
	refund_live[refund_n_live++] = e;
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

	register_at_exit();
	scripts_prepare();
	refund_reserve();
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
	refund_live[refund_n_live++] = e;
	pfree(hkey);
	pfree(wkey);
}

/* The live slot of this transaction on the holders key hkey, or -1. */
static int
find_release(const char *hkey, int hkeylen)
{
	for (int i = 0; i < refund_n_live; i++)
		if (refund_live[i]->kind == KIND_RELEASE && refund_live[i]->rkeylen == hkeylen &&
			memcmp(refund_live[i]->rkey, hkey, hkeylen) == 0)
			return i;
	return -1;
}

/* The index in refund_live of this transaction's slot on args' key, or -1. */
static int
find_slot(const RlArgs *args)
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
	return i;
}

/* Redis said that this transaction's holder on args' key holds a slot. */
void
refund_confirm_slot(const RlArgs *args)
{
	int			i = find_slot(args);

	if (i >= 0)
		refund_live[i]->confirmed = true;
}

/*
 * The holder's name of this transaction's slot on args' key (palloc'd), or
 * NULL; *lease_us (if not NULL) its lease, *confirmed (if not NULL) whether
 * Redis said it is held.
 */
char *
refund_held_slot(const RlArgs *args, int64 *lease_us, bool *confirmed)
{
	int			i = find_slot(args);

	if (i >= 0 && lease_us)
		*lease_us = refund_live[i]->win_us;
	if (i >= 0 && confirmed)
		*confirmed = refund_live[i]->confirmed;
	return i < 0 ? NULL : pstrdup(refund_live[i]->holder);
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
	int			i;

	if (holder == NULL)
		return NULL;
	i = find_slot(args);
	pfree(refund_live[i]);
	memmove(refund_live + i, refund_live + i + 1,
			(refund_n_live - i - 1) * sizeof(RefundEntry *));
	refund_n_live--;
	return holder;
}

/*
 * Whether this transaction holds a slot in Redis (PREPARE refuses it). An
 * unconfirmed one is released at PREPARE instead.
 */
static bool
holds_slots(void)
{
	for (int i = 0; i < refund_n_live; i++)
		if (refund_live[i]->kind == KIND_RELEASE && refund_live[i]->confirmed)
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

	for (int i = 0; i < refund_n_live; i++)
	{
		if (refund_live[i]->kind == KIND_RELEASE)
			refund_live[kept++] = refund_live[i];
		else
			pfree(refund_live[i]);
	}
	refund_n_live = kept;
	if (refund_n_live > 0)
		refund_from_abort(0);
}

/* ---------------------------------------------------------------------
 * Marks, for rl_trigger (normal context)
 * ---------------------------------------------------------------------
 */

int
refund_mark(void)
{
	return refund_n_live;
}

void
refund_since(int mark)
{
	if (mark >= refund_n_live)
		return;
	refund_queue_live_from(mark);
	refund_settle();
}

static void
forget_live_from(int from)
{
	for (int i = from; i < refund_n_live; i++)
		pfree(refund_live[i]);
	refund_n_live = Min(refund_n_live, from);
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
			if (refund_n_live > 0)
				refund_from_abort(0);
			break;
		case XACT_EVENT_PRE_COMMIT:
			refund_before_xact_end();
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
			refund_reset_if_idle();
			break;
		case XACT_EVENT_PREPARE:
			/* only unconfirmed slots are left (holds_slots): release them */
			release_at_commit();
			refund_reset_if_idle();
			break;
		default:
			break;
	}
}

/*
 * A subtransaction's entries are the tail of `refund_live`: entries are appended
 * in time order, a child's entries come after everything its parent did
 * before the child began, and the parent adds nothing while a child runs.
 * So commit and abort touch only that tail, never the whole array.
 */
static void
subxact_callback(SubXactEvent event, SubTransactionId mySubid,
				 SubTransactionId parentSubid, void *arg)
{
	int			from = refund_n_live;

	if (refund_n_live == 0)
		return;
	while (from > 0 && refund_live[from - 1]->subid == mySubid)
		from--;
	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		if (from < refund_n_live)
			refund_from_abort(from);
	}
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		for (int i = from; i < refund_n_live; i++)
			refund_live[i]->subid = parentSubid;
	}
}

void
refund_init(void)
{
	RegisterXactCallback(xact_callback, NULL);
	RegisterSubXactCallback(subxact_callback, NULL);
	redis_set_pipeline_hook(refund_pipeline_hook);
	redis_set_routed_hook(refund_routed_hook);
}
