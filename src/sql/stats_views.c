/*-------------------------------------------------------------------------
 *
 * stats_views.c
 *		The SQL functions behind the statistics views: rl_stats,
 *		rl_slot_stats, rl_outage_stats, rl_redis_outage, rl_stats_rules,
 *		rl_top_keys, and rl_stats_reset.
 *
 * They read the counters that stats.c keeps in shared memory, through
 * stats_shared.h and under the locks that stats.c's header comment describes,
 * and turn them into rows. Nothing here adds to a counter: a call's answer
 * is counted through stats.h, by the layer that gave it. This file belongs
 * to the SQL surface, so it may include what the sink may not, such as
 * fallback_carry.h for the admissions waiting to be carried back.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/htup_details.h"
#include "catalog/pg_authid.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/lwlock.h"
#include "storage/spin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "compat.h"
#include "fallback_carry.h"
#include "outage_log.h"
#include "stats_shared.h"

PG_FUNCTION_INFO_V1(slidewin_stats_fn);
PG_FUNCTION_INFO_V1(slidewin_slot_stats_fn);
PG_FUNCTION_INFO_V1(slidewin_outage_stats_fn);
PG_FUNCTION_INFO_V1(slidewin_redis_outage_fn);
PG_FUNCTION_INFO_V1(slidewin_stats_rules);
PG_FUNCTION_INFO_V1(slidewin_top_keys);
PG_FUNCTION_INFO_V1(slidewin_stats_reset);

/* The least value of bucket b (b may be RTT_BUCKETS: the end of the last). */
static int64
rtt_bucket_floor(int b)
{
	if (b < 4)
		return b;
	return (int64) (4 + b % 4) << (b / 4 - 1);
}

static void
require_shared(void)
{
	if (stats_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("slidewin statistics need the library to be preloaded"),
				 errhint("Add slidewin to shared_preload_libraries and restart the server.")));
}

static Datum
interval_us(int64 us)
{
	Interval   *iv = palloc0(sizeof(Interval));

	iv->time = us;
	return IntervalPGetDatum(iv);
}

/* The upper edge of the bucket holding the p-th fraction of n samples. */
static Datum
rtt_percentile(const uint64 *hist, uint64 n, double p, bool *isnull)
{
	uint64		rank = (uint64) ceil(p * n);
	uint64		seen = 0;

	*isnull = (n == 0);
	if (n == 0)
		return (Datum) 0;
	rank = Max(rank, 1);
	for (int b = 0; b < RTT_BUCKETS; b++)
	{
		seen += hist[b];
		if (seen >= rank)
			return interval_us(rtt_bucket_floor(b + 1));
	}
	return interval_us(rtt_bucket_floor(RTT_BUCKETS));
}

/* The counters and round-trip histogram summed over every slot, less the reset's baseline. */
static void
read_counters(uint64 *sum, uint64 *hist, uint64 *n, TimestampTz *reset)
{
	memset(sum, 0, NCOUNTERS * sizeof(uint64));
	memset(hist, 0, RTT_BUCKETS * sizeof(uint64));
	*n = 0;
	LWLockAcquire(stats_shared->lock, LW_SHARED);
	for (int i = 0; i <= stats_shared->nslots; i++)
	{
		StatsSlot  *s = slot_at(i);

		for (int c = 0; c < NCOUNTERS; c++)
			sum[c] += pg_atomic_read_u64(&s->c[c]);
		for (int b = 0; b < RTT_BUCKETS; b++)
			hist[b] += pg_atomic_read_u64(&s->rtt[b]);
	}
	for (int c = 0; c < NCOUNTERS; c++)
		sum[c] -= stats_shared->base[c];
	for (int b = 0; b < RTT_BUCKETS; b++)
	{
		hist[b] -= stats_shared->base_rtt[b];
		*n += hist[b];
	}
	*reset = stats_shared->stats_reset;
	LWLockRelease(stats_shared->lock);
}

/* rl_stats(): the rate limits' counters, round trips and the reset time. */
Datum
slidewin_stats_fn(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[NCOUNTERS_RATE + 3];
	bool		nulls[NCOUNTERS_RATE + 3] = {0};
	uint64		sum[NCOUNTERS];
	uint64		hist[RTT_BUCKETS];
	uint64		n;
	TimestampTz reset;

	require_shared();
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	read_counters(sum, hist, &n, &reset);
	for (int c = 0; c < NCOUNTERS_RATE; c++)
		values[c] = Int64GetDatum((int64) sum[c]);
	values[NCOUNTERS_RATE] = rtt_percentile(hist, n, 0.50, &nulls[NCOUNTERS_RATE]);
	values[NCOUNTERS_RATE + 1] = rtt_percentile(hist, n, 0.99, &nulls[NCOUNTERS_RATE + 1]);
	values[NCOUNTERS_RATE + 2] = TimestampTzGetDatum(reset);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), values, nulls)));
}

/* rl_slot_stats(): the concurrency slots' counters (1.7), the last columns of rl_stats. */
Datum
slidewin_slot_stats_fn(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[NCOUNTERS_SLOTS - NCOUNTERS_RATE];
	bool		nulls[NCOUNTERS_SLOTS - NCOUNTERS_RATE] = {0};
	uint64		sum[NCOUNTERS];
	uint64		hist[RTT_BUCKETS];
	uint64		n;
	TimestampTz reset;

	require_shared();
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	read_counters(sum, hist, &n, &reset);
	for (int c = NCOUNTERS_RATE; c < NCOUNTERS_SLOTS; c++)
		values[c - NCOUNTERS_RATE] = Int64GetDatum((int64) sum[c]);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), values, nulls)));
}

/*
 * rl_outage_stats(): the counters of exactness across an outage (1.8), and
 * the admissions of this database's fallback store still waiting to be
 * carried back (counted in its table now, not kept in shared memory).
 */
Datum
slidewin_outage_stats_fn(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[4];
	bool		nulls[4] = {0};
	uint64		sum[NCOUNTERS];
	uint64		hist[RTT_BUCKETS];
	uint64		n;
	TimestampTz reset;

	require_shared();
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	read_counters(sum, hist, &n, &reset);
	values[0] = Int64GetDatum((int64) sum[C_OUTAGE_SEEDED_UNITS]);
	values[1] = Int64GetDatum((int64) sum[C_OUTAGE_UNSEEDED_CALLS]);
	values[2] = Int64GetDatum((int64) sum[C_OUTAGE_CARRIED]);
	values[3] = Int64GetDatum(fallback_carry_pending());
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), values, nulls)));
}

/*
 * rl_redis_outage() (1.10): since when Redis has been unreachable, NULL while
 * it answers (outage_log.c). It needs no preloading: without it, the
 * outage is the one this backend has seen.
 */
Datum
slidewin_redis_outage_fn(PG_FUNCTION_ARGS)
{
	TimestampTz since = outage_log_since();

	if (since == 0)
		PG_RETURN_NULL();
	PG_RETURN_TIMESTAMPTZ(since);
}

/* rl_stats_rules(): one row per rule; the overflow row has a NULL rule. */
Datum
slidewin_stats_rules(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			used;

	require_shared();
	InitMaterializedSRF(fcinfo, 0);

	LWLockAcquire(stats_shared->lock, LW_SHARED);
	used = stats_shared->rules_used;
	for (int i = 0; i <= stats_shared->max_rules; i++)
	{
		RuleEntry	copy;
		Datum		values[9];
		bool		nulls[9] = {0};

		if (i >= used && i != stats_shared->max_rules)
			continue;
		SpinLockAcquire(&stats_rules[i].mutex);
		copy = stats_rules[i];
		SpinLockRelease(&stats_rules[i].mutex);
		if (!copy.in_use || (i == stats_shared->max_rules && copy.calls == 0))
			continue;
		if (i == stats_shared->max_rules)
			nulls[0] = nulls[1] = nulls[2] = true;
		else
		{
			values[0] = CStringGetTextDatum(copy.key.algorithm == RULE_CONCURRENCY ? "concurrency" :
											limit_algorithm_name(copy.key.algorithm));
			values[1] = Int64GetDatum(copy.key.lim);
			values[2] = interval_us(copy.key.win_us);
		}
		values[3] = Int64GetDatum(copy.calls);
		values[4] = Int64GetDatum(copy.admitted);
		values[5] = Int64GetDatum(copy.denied);
		values[6] = Int64GetDatum(copy.units_admitted);
		values[7] = Int64GetDatum(copy.near_limit);
		values[8] = Int64GetDatum(copy.shadow_denials);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	LWLockRelease(stats_shared->lock);
	return (Datum) 0;
}

/* rl_top_keys(): every tracked key; the key itself only for readers of all stats. */
Datum
slidewin_top_keys(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	bool		show_key = is_member_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS);
	char	   *buf = palloc(RL_MAX_KEY_BYTES);

	require_shared();
	InitMaterializedSRF(fcinfo, 0);

	LWLockAcquire(stats_shared->lock, LW_SHARED);
	for (int i = 0; i < stats_shared->keys_used; i++)
	{
		KeyEntry   *e = &stats_keys[i];
		Datum		values[6];
		bool		nulls[6] = {0};
		int			len;
		int64		denied,
					admitted,
					error,
					retry;
		TimestampTz at;

		SpinLockAcquire(&e->mutex);
		if (e->hash == 0)
		{
			SpinLockRelease(&e->mutex);
			continue;
		}
		denied = e->denied;
		admitted = e->admitted;
		error = e->error;
		at = e->last_denied_at;
		retry = e->last_retry_us;
		len = e->keylen;
		if (show_key)
			memcpy(buf, e->key, len);
		SpinLockRelease(&e->mutex);
		if (show_key)
			values[0] = PointerGetDatum(cstring_to_text_with_len(buf, len));
		else
			nulls[0] = true;
		values[1] = Int64GetDatum(denied);
		values[2] = Int64GetDatum(admitted);
		values[3] = TimestampTzGetDatum(at);
		values[4] = interval_us(retry);
		values[5] = Int64GetDatum(error);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	LWLockRelease(stats_shared->lock);
	return (Datum) 0;
}

/* rl_stats_reset(): everything starts again; not granted to PUBLIC. */
Datum
slidewin_stats_reset(PG_FUNCTION_ARGS)
{
	HASH_SEQ_STATUS seq;
	void	   *h;

	require_shared();
	LWLockAcquire(stats_shared->lock, LW_EXCLUSIVE);
	memset(stats_shared->base, 0, sizeof(stats_shared->base));
	memset(stats_shared->base_rtt, 0, sizeof(stats_shared->base_rtt));
	for (int i = 0; i <= stats_shared->nslots; i++)
	{
		StatsSlot  *s = slot_at(i);

		for (int c = 0; c < NCOUNTERS; c++)
			stats_shared->base[c] += pg_atomic_read_u64(&s->c[c]);
		for (int b = 0; b < RTT_BUCKETS; b++)
			stats_shared->base_rtt[b] += pg_atomic_read_u64(&s->rtt[b]);
	}

	hash_seq_init(&seq, stats_rule_hash);
	while ((h = hash_seq_search(&seq)) != NULL)
		hash_search(stats_rule_hash, h, HASH_REMOVE, NULL);
	for (int i = 0; i <= stats_shared->max_rules; i++)
	{
		RuleEntry  *e = &stats_rules[i];

		SpinLockAcquire(&e->mutex);
		e->in_use = (i == stats_shared->max_rules);
		e->calls = e->admitted = e->denied = 0;
		e->units_admitted = e->near_limit = e->shadow_denials = 0;
		SpinLockRelease(&e->mutex);
	}
	stats_shared->rules_used = 0;

	hash_seq_init(&seq, stats_key_hash);
	while ((h = hash_seq_search(&seq)) != NULL)
		hash_search(stats_key_hash, h, HASH_REMOVE, NULL);
	for (int i = 0; i < stats_shared->max_keys; i++)
	{
		KeyEntry   *e = &stats_keys[i];

		SpinLockAcquire(&e->mutex);
		e->hash = 0;
		e->denied = e->error = e->admitted = 0;
		SpinLockRelease(&e->mutex);
	}
	stats_shared->keys_used = 0;
	for (uint32 i = 0; i <= stats_shared->filter_mask; i++)
		pg_atomic_write_u32(&stats_key_filter[i], 0);

	pg_atomic_fetch_add_u64(&stats_shared->reset_gen, 1);
	pg_atomic_fetch_add_u64(&stats_shared->keys_gen, 1);
	stats_shared->stats_reset = GetCurrentTimestamp();
	LWLockRelease(stats_shared->lock);
	PG_RETURN_VOID();
}
