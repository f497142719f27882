/*-------------------------------------------------------------------------
 *
 * switch.h
 *		The switch between the two stores: the one module that decides which
 *		store answers a call, and keeps the stores' counts of a key together
 *		across the switch. The SQL layer reaches it through this header.
 *
 * Its files:
 *	policy.c		which store answers: Redis, or what the call's failure
 *					policy says when Redis cannot (fallback, allow, deny,
 *					error), and the circuit breaker;
 *	deny_cache.c	a denial of Redis's kept for as long as it cannot change;
 *	outage.c		the outage memory (what Redis last counted, per key, in
 *					shared memory) and the seed it gives the fallback store;
 *	carry.c			carrying the fallback store's admissions back to Redis,
 *					and the fallback store's side of a call;
 *	fallback_all.c	the fallback store's side of rl_attempt_all: every key,
 *					in one lock order, all admitted or none charged;
 *	outage_log.c	an outage in the server log, once per server: a warning
 *					when calls first fail over, repeated at most once per
 *					slidewin.outage_log_interval, a line when Redis answers
 *					again, and since when it has been unreachable;
 *	local_batch.c	local batches of a hot sliding_log key: units reserved
 *					from Redis (or, while it cannot answer, from the
 *					fallback store) at once, used from shared memory, a
 *					Redis batch's rest given back by a worker when it ends
 *					(local_batch_fallback.c: the fallback store's batches,
 *					whose rest the key's next call gives back);
 *	refund.c and its companions: refunds and releases sent at transaction
 *					end, whichever store recorded the entry.
 *
 * The rules this module keeps (each file's header says how):
 *
 *	1. One store decides a call. policy_run asks Redis; only when Redis
 *	   cannot answer does the call's policy pick a fallback answer. A peek
 *	   is decided the same way and changes nothing in either store.
 *
 *	2. The fallback store starts from what Redis counted. Every answer Redis
 *	   gives to an attempt or a peek is kept in the outage memory; a fallback
 *	   call of the key gets it as its seed (FallbackSeed), together with the
 *	   calls of the key that are on their way to Redis, which count as
 *	   admitted for a whole window (also for a key Redis never answered on
 *	   this server). The store asks for the seed through the source the
 *	   switch hands it (outage_seed) as its decision starts, for the counting
 *	   algorithms under the key's lock, which a carry holds until Redis has
 *	   decided: no seed is older than the state it is added to. The store
 *	   never learns where a seed comes from.
 *
 *	3. An answer stands in for the fallback store's own rows only if those
 *	   rows are in Redis. The outage memory says up to when (carried_to) and
 *	   for which database (carried_db): only the answer to a call that
 *	   carried its key completely before Redis decided it moves them. A
 *	   peek carries nothing; a call from another database carries only that
 *	   database's rows; a carry that gave up waiting for an uncommitted
 *	   admission, or a counting algorithm's carry that could not take the
 *	   key's lock, is not complete. Every COMMIT PREPARED moves a generation
 *	   that voids every carried_to read before it, since the rows it makes
 *	   visible were never looked for.
 *
 *	4. Rows are carried by the calls themselves, before Redis decides: the
 *	   call carries its own key's rows (waiting up to 100 ms for the
 *	   sliding-log fallback calls of the key that other backends announced
 *	   before it looked and have not ended; the counting algorithms' hold
 *	   the key's lock, which the carry takes), and after the answer
 *	   the rows of one other key. Rows leave the carry table in the carrying
 *	   transaction once Redis has answered; each is named, so that a batch
 *	   sent twice is recorded once.
 *
 *	5. A refund crosses the switch: a ticket names the store that recorded
 *	   the entry. A fallback entry that was carried is given back in Redis
 *	   under the name it was carried with; while Redis cannot answer, such a
 *	   refund is an error and the ticket stays good.
 *
 *	6. The stores are below this module and never call it: what the
 *	   fallback store wrote for Redis to learn of comes back to the switch in
 *	   RlOutcome.carry_units, and the switch waits for it (fb_pending).
 *
 *	7. A local batch (local_batch.c) is a store's answer, kept: its units
 *	   were counted by Redis, or by this database's fallback store while
 *	   Redis could not answer, as one entry scored at the batch's end, so a
 *	   call may take one until the batch's local deadline whichever store
 *	   would answer it now. A fallback batch's row is carried into Redis
 *	   as any row is (rule 4), scored as far ahead of Redis's clock as it
 *	   was of the fallback store's, so Redis counts its units as long as
 *	   they may be used; it serves only its own database, and only once its
 *	   transaction has committed; its rest goes back to the fallback store
 *	   alone, with the key's next call there; Redis, when it learns of the
 *	   row, counts the whole batch (an over-count, unlike rule 5's refunds). A call served from a batch records nothing
 *	   of its own and is not remembered in the outage memory, whose last
 *	   answer from Redis already counts a Redis batch whole.
 *
 * doc/failure-modes.md gives the bounds these rules keep, and
 * doc/architecture.md where this module sits in the house.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SLIDEWIN_SWITCH_H
#define SLIDEWIN_SWITCH_H

#include "carry.h"
#include "deny_cache.h"
#include "local_batch.h"
#include "local_batch_fallback.h"
#include "outage.h"
#include "outage_log.h"
#include "policy.h"
#include "refund.h"

#endif							/* SLIDEWIN_SWITCH_H */
