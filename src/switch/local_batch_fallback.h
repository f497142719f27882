/*
 * local_batch_fallback.h
 *		Local batches reserved from the fallback store (local_batch_fallback.c).
 */
#ifndef SLIDEWIN_LOCAL_BATCH_FALLBACK_H
#define SLIDEWIN_LOCAL_BATCH_FALLBACK_H

#include "limit.h"

/*
 * The fallback store's reserve (rule 6 of local_batch.c), in place of
 * outage_fallback_attempt after local_batch_take asked for a reserve and
 * Redis could not answer: the batch's units admitted as one row scored
 * at its end, kept for this database's backends once the transaction
 * commits; denied, the call alone.
 */
extern void local_batch_reserve_fallback(const RlArgs *args, RlOutcome *o);

/*
 * Right after local_batch_take, whatever it answered: if it ended a
 * fallback batch of args' key that had units left, give them back in this
 * transaction (rule 6).
 */
extern void local_batch_give_back_fallback(const RlArgs *args);

#endif							/* SLIDEWIN_LOCAL_BATCH_FALLBACK_H */
