/*-------------------------------------------------------------------------
 *
 * refund_int.h
 *		The entries of the refunds and slot releases, and what refund.c
 *		offers the other files of the refunds (refund_send.c, refund_xact.c):
 *		the live stack, the refund queue, their memory, and the settling of
 *		a reply.
 *
 * No file outside src/switch may include it: the rest of the extension
 * goes through refund.h. The rules are at the head of refund.c; what each
 * variable below means is said where refund.c defines it.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SLIDEWIN_REFUND_INT_H
#define SLIDEWIN_REFUND_INT_H

#include "store_redis.h"

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

/* The entries, their memory and their queue (refund.c). */
extern MemoryContext refund_cxt;
extern RefundEntry **refund_live;
extern int	refund_n_live;
extern RefundEntry **refund_queue;
extern int	refund_q_head;
extern int	refund_n_queue;
extern int	refund_q_send;
extern int	refund_q_reply;
extern int	refund_n_sent;
extern uint64 refund_sent_on;
extern uint64 refund_script_known_on[2];

/* Memory (normal context only). */
extern void refund_reset_if_idle(void);
extern void refund_compact_queue(void);
extern void refund_reserve(void);

/* Moving entries (safe in abort: no allocation, no ERROR). */
extern void refund_queue_live_from(int from);
extern void refund_finish(RefundEntry *e, bool given_back);

/* Replies (normal context, abort, or backend exit). */
extern RefundEntry *refund_next_sent(void);
extern void refund_settle_reply(RefundEntry *e, redisReply *reply, int level);
extern void refund_drop_foreign(void);
extern bool refund_releases_owed(bool live_only);

#endif
