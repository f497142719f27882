/*-------------------------------------------------------------------------
 *
 * refund.c
 *		Transactional consumption for the Redis store, opt-in.
 *
 * Redis has no transactions that follow PostgreSQL's, so an admission is
 * spent at once, like a sequence value. With refund_on_abort, each entry a
 * (sub)transaction records in Redis is remembered here, tagged with its
 * subtransaction; if that subtransaction or the whole transaction aborts,
 * its entries are given back by a script that removes them (store_redis.c).
 * Commit and PREPARE TRANSACTION keep them: a prepared transaction's units
 * stay spent whatever its fate, since the backend that would refund them is
 * gone by then. The fallback store needs none of this: its rows vanish with
 * the transaction.
 *
 * Refunds run inside abort processing, where interrupts are held and an
 * ERROR must not escape: redis_store_refund never raises, every wait is
 * bounded by the command timeout, and a refund that cannot reach Redis is
 * dropped (the units stay spent: the safe direction), counted and reported
 * with a WARNING.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "utils/memutils.h"

#include "deny_cache.h"
#include "policy.h"
#include "refund.h"
#include "store_redis.h"

bool		slidewin_refund_on_abort = false;
int64		refund_done_count = 0;
int64		refund_dropped_count = 0;

typedef struct RefundEntry
{
	char	   *rkey;			/* Redis key, in TopMemoryContext */
	int			rkeylen;
	int64		ts;
	int64		cost;
	int64		win_us;
	uint32		key_hash;		/* of the user's key, for the deny cache */
	SubTransactionId subid;
} RefundEntry;

static RefundEntry *entries = NULL;
static int	n_entries = 0;
static int	max_entries = 0;

void
refund_remember(const RlArgs *args, int64 recorded_ts)
{
	RefundEntry *e;
	char	   *key;
	int			keylen;

	if (n_entries == max_entries)
	{
		int			n = Max(16, max_entries * 2);

		entries = entries == NULL ?
			MemoryContextAlloc(TopMemoryContext, n * sizeof(RefundEntry)) :
			repalloc(entries, n * sizeof(RefundEntry));
		max_entries = n;
	}
	key = redis_store_log_key(args, &keylen);
	e = &entries[n_entries];
	e->rkey = MemoryContextStrdup(TopMemoryContext, key);
	e->rkeylen = keylen;
	e->ts = recorded_ts;
	e->cost = args->cost;
	e->win_us = args->win_us;
	e->key_hash = deny_cache_key_hash(args->key, args->keylen);
	e->subid = GetCurrentSubTransactionId();
	n_entries++;
	pfree(key);
}

static void
forget(int i)
{
	pfree(entries[i].rkey);
	entries[i].rkey = NULL;
}

static void
give_back(RefundEntry *e)
{
	RedisResult r;
	bool		given_back;
	bool		ok;

	r.reply = NULL;
	ok = policy_redis_may_be_tried(&r) &&
		redis_store_refund(e->rkey, e->rkeylen, e->ts, e->cost, e->win_us,
						   &given_back, &r);

	/*
	 * After Redis has the units back, never before: a backend that reads
	 * the old generation then asked Redis before the refund, and its cached
	 * denial is void by the bump.
	 */
	deny_cache_invalidate(e->key_hash);
	if (ok)
	{
		if (given_back)
			refund_done_count++;
		return;
	}
	if (r.status != RS_FAIL_REPLY)
		policy_redis_failed(&r);
	refund_dropped_count++;
	ereport(WARNING,
			(errcode(ERRCODE_CONNECTION_FAILURE),
			 errmsg("slidewin could not give back " INT64_FORMAT " units of an aborted transaction",
					e->cost),
			 errdetail_internal("%s", r.message)));
}

/*
 * Give back the entries from `from` on (only those of subtransaction subid,
 * if only_subid), keeping the others in order.
 */
static void
refund_range(int from, bool only_subid, SubTransactionId subid)
{
	int			keep = from;

	for (int i = from; i < n_entries; i++)
	{
		if (only_subid && entries[i].subid != subid)
			entries[keep++] = entries[i];
		else
		{
			give_back(&entries[i]);
			forget(i);
		}
	}
	n_entries = keep;
}

int
refund_mark(void)
{
	return n_entries;
}

void
refund_since(int mark)
{
	refund_range(mark, false, InvalidSubTransactionId);
}

void
refund_forget_since(int mark)
{
	for (int i = mark; i < n_entries; i++)
		forget(i);
	n_entries = Min(n_entries, mark);
}

static void
forget_all(void)
{
	for (int i = 0; i < n_entries; i++)
		forget(i);
	n_entries = 0;
}

static void
xact_callback(XactEvent event, void *arg)
{
	if (n_entries == 0)
		return;
	switch (event)
	{
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			refund_range(0, false, InvalidSubTransactionId);
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PREPARE:
			forget_all();
			break;
		default:
			break;
	}
}

static void
subxact_callback(SubXactEvent event, SubTransactionId mySubid,
				 SubTransactionId parentSubid, void *arg)
{
	if (n_entries == 0)
		return;
	if (event == SUBXACT_EVENT_ABORT_SUB)
		refund_range(0, true, mySubid);
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		for (int i = 0; i < n_entries; i++)
			if (entries[i].subid == mySubid)
				entries[i].subid = parentSubid;
	}
}

void
refund_init(void)
{
	RegisterXactCallback(xact_callback, NULL);
	RegisterSubXactCallback(subxact_callback, NULL);
}
