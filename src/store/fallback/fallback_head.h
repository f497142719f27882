/*
 * fallback_head.h
 *		The heads of the fallback store's sliding logs (fallback_head.c): one row
 *		per key of each log, with its newest row's time and running total.
 */
#ifndef SLIDEWIN_FALLBACK_HEAD_H
#define SLIDEWIN_FALLBACK_HEAD_H

#include "fallback_table_int.h"

/* A key's head: its newest row's time and running total (see fallback_log_attempt). */
typedef struct FbHead
{
	bool		found;
	ItemPointerData tid;
	int64		ts;
	int64		total;
	int64		expires;
} FbHead;

extern void fallback_head_read(FbScan *h, int16 kind, FbHead *hd);
extern TM_Result fallback_head_write(FbScan *h, int16 kind, const FbHead *old, int64 ts, int64 total,
									 int64 expires);
extern bool fallback_sweep_heads(FbScan *h, int64 cutoff, int npages);
extern void fallback_heads_xact_callback(XactEvent event, void *arg);

#endif							/* SLIDEWIN_FALLBACK_HEAD_H */
