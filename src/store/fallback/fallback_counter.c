/*-------------------------------------------------------------------------
 *
 * fallback_counter.c
 *		The fallback store's counting algorithms (fixed_window,
 *		sliding_counter, token_bucket): their state per key, and a call
 *		decided and written on it under the key's lock.
 *
 * This file must not touch the sliding logs or their heads, or talk to
 * Redis; what Redis last counted comes from the caller (the seed, asked
 * for under the key's lock), and admissions to be carried back go to
 * fallback_carry.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/heapam.h"

#include "fallback_block.h"
#include "fallback_carry.h"
#include "fallback_counter.h"
#include "fallback_table_int.h"

/* ---------------------------------------------------------------------
 * The counting algorithms: one row (key, algo, s, a, b, expires) per key
 * and algorithm in rl_fallback_state, replaced on each write. The same
 * arithmetic as their Redis scripts (scripts.c), on the PostgreSQL clock.
 *   fixed_window:    s = window start, a = units in it
 *   sliding_counter: s = current bucket start, a = its units, b = previous bucket's
 *   token_bucket:    a = theoretical arrival time (us, fractional)
 * ---------------------------------------------------------------------
 */

/* Rows of one key a reader may see at once: the live one plus expired ones
 * that sweeps are deleting; more would mean sweeps are failing for good. */
#define ST_MAX_SEEN 16

typedef struct StRow
{
	bool		found;			/* a live row was seen; s, a, b are its values */
	int64		s;
	double		a;
	double		b;
	int			nseen;			/* every row seen, live or expired */
	ItemPointerData seen[ST_MAX_SEEN];
} StRow;

/*
 * The key's state: the one live row (expires > now) of (key, algo).
 *
 * Writers hold the key's lock and replace the row, but a sweep deletes
 * expired rows without that lock, so an expired row can still be visible
 * (SnapshotSelf shows a row whose deleter has not committed, and a sweep
 * that aborts brings it back) next to the row that replaced it. An expired
 * row says nothing a missing row would not (every algorithm's window or
 * bucket has moved past it), so readers skip it, and no key is ever
 * readable in two versions. Should two live rows ever be visible (a sweep
 * whose clock ran microseconds ahead of the writer's), the state only moves
 * forward, so the greater (s, a) is the newer one. Every row seen is listed
 * in *r so that the writer can delete them all.
 */
static void
state_read(FbScan *s, int algo, int64 now, StRow *r)
{
	IndexScanDesc scan = fallback_scan_begin_kind(s, (int16) algo);
	bool		isnull;

	memset(r, 0, sizeof(StRow));
	while (index_getnext_slot(scan, ForwardScanDirection, s->slot))
	{
		int64		rs = DatumGetInt64(slot_getattr(s->slot, ST_ATT_S, &isnull));
		double		ra = DatumGetFloat8(slot_getattr(s->slot, ST_ATT_A, &isnull));
		double		rb = DatumGetFloat8(slot_getattr(s->slot, ST_ATT_B, &isnull));
		int64		rexp = DatumGetInt64(slot_getattr(s->slot, ST_ATT_EXPIRES, &isnull));

		if (r->nseen < ST_MAX_SEEN)
			r->seen[r->nseen++] = s->slot->tts_tid;
		if (rexp <= now)
			continue;
		if (!r->found || rs > r->s || (rs == r->s && ra > r->a))
		{
			r->found = true;
			r->s = rs;
			r->a = ra;
			r->b = rb;
		}
	}
	index_endscan(scan);
}

/*
 * Replace the key's state. The caller holds the key's lock, so no other
 * writer can be deleting these rows; a delete that fails is a sweep's, on
 * an expired row that readers skip anyway.
 */
static void
state_write(FbScan *s, int algo, const StRow *old, int64 st, double a, double b, int64 expires)
{
	Datum		values[6];
	bool		nulls[6] = {false};
	HeapTuple	tup;
	Datum		ivalues[2];
	bool		inulls[2] = {false, false};

	for (int i = 0; i < old->nseen; i++)
		(void) fallback_try_delete(s, (ItemPointer) &old->seen[i]);
	values[ST_ATT_KEY - 1] = PointerGetDatum(s->key);
	values[ST_ATT_ALGO - 1] = Int16GetDatum((int16) algo);
	values[ST_ATT_S - 1] = Int64GetDatum(st);
	values[ST_ATT_A - 1] = Float8GetDatum(a);
	values[ST_ATT_B - 1] = Float8GetDatum(b);
	values[ST_ATT_EXPIRES - 1] = Int64GetDatum(expires);
	tup = heap_form_tuple(RelationGetDescr(s->rel), values, nulls);
	simple_heap_insert(s->rel, tup);
	ivalues[0] = values[ST_ATT_KEY - 1];
	ivalues[1] = values[ST_ATT_ALGO - 1];
	index_insert(s->idx[IDX_KEY_TS], ivalues, inulls, &tup->t_self, s->rel,
				 UNIQUE_CHECK_NO, false, fallback_index_info(s, IDX_KEY_TS));
	/* a database not yet updated to 1.15 still has the index: keep it whole */
	if (s->idx[IDX_EXPIRES] != NULL)
	{
		ivalues[0] = values[ST_ATT_EXPIRES - 1];
		index_insert(s->idx[IDX_EXPIRES], ivalues, inulls, &tup->t_self, s->rel,
					 UNIQUE_CHECK_NO, false, fallback_index_info(s, IDX_EXPIRES));
	}
	heap_freetuple(tup);
	CommandCounterIncrement();
}

/* Euclidean remainder: window starts are aligned even before the epoch. */
static int64
floor_mod(int64 a, int64 b)
{
	int64		m = a % b;

	return m < 0 ? m + b : m;
}

/*
 * One call of a counting algorithm. peek: decide for cost, write nothing.
 * Otherwise write when admitted, or when forced (shadow mode).
 */
/*
 * When the sliding counter next has one more unit, had the caller spent all
 * it has left now (the end of the effective window of
 * draft-ietf-httpapi-ratelimit-headers-11): the estimate est must fall by d,
 * at p / win per microsecond in this bucket (e into it), then at (c + what
 * was left) / win in the next. The same as sliding_counter.lua's next_unit.
 */
static int64
counter_next_unit(int64 lim, int64 win, int64 start, int64 now, int64 e,
				  double p, double c, double est)
{
	double		avail = (double) lim - est;
	double		r = 0;
	double		d = est - (double) lim + 1;
	double		decay = p * (double) (win - e) / (double) win;

	if (avail >= 0)
	{
		r = floor(avail);
		d = 1 - (avail - r);
	}
	if (p > 0 && d <= decay)
		return now + (int64) ceil(d * (double) win / p);
	if (c + r > 0)
		return start + win + (int64) ceil((d - decay) * (double) win / (c + r));
	return start + win;
}

/*
 * When the token bucket, its tat at tat, next holds one more whole token
 * (as token_bucket.lua's next_token).
 */
static int64
bucket_next_token(int64 lim, int64 win, int64 now, double tat)
{
	double		t = (double) win / (double) lim;
	double		have = floor((win - (tat - now)) / t + 1e-9);

	if (have < 0)
		have = 0;
	return Max((int64) ceil(tat - win + (have + 1) * t), now + 1);
}

static void
counter_call(FbScan *s, const RlArgs *args, FallbackSeedFn seed_fn, int64 cost, bool peek,
			 RlOutcome *o)
{
	int			algo = (int) args->algorithm;
	int64		now = fallback_now();
	int64		lim = args->lim;
	int64		win = args->win_us;
	int64		start = now - floor_mod(now, win);
	bool		write = false;
	StRow		r;
	int64		ns = 0;
	double		na = 0,
				nb = 0;
	int64		expires = 0;
	int64		carry_until = now + win;
	FallbackSeed seed;
	bool		live;

	/*
	 * What Redis last counted for the key (outage.c) is added to this
	 * store's own state for the decision, and not written into it (the
	 * token bucket's, a maximum, may be): as if Redis's units had all come
	 * when this server last asked, the latest they could have (see
	 * doc/failure-modes.md).
	 */
	live = seed_fn(args, &seed) && seed.frees_at > now;
	state_read(s, algo, now, &r);
	o->store = "fallback";
	o->known = true;
	o->recorded_ts = -1;
	o->shadowed = false;
	o->retry_us = 0;

	if (args->algorithm == ALGO_FIXED_WINDOW)
	{
		int64		reset = start + win;
		int64		own = (r.found && r.s == start) ? (int64) r.a : 0;
		int64		n = own;

		if (live && seed.seen_at - floor_mod(seed.seen_at, win) == start)
			n += seed.units;
		o->allowed = (n + cost <= lim);
		write = !peek && (o->allowed || args->force);
		o->remaining = Max(lim - n - (write ? cost : 0), 0);
		o->used = n + (write ? cost : 0);
		o->retry_us = o->allowed ? 0 : reset - now;
		o->reset_at_us = (o->used > 0) ? reset : now;
		o->next_us = reset;		/* every unit comes back as the window ends */
		ns = start;
		na = (double) (own + cost);
		expires = reset;
		carry_until = reset;
	}
	else if (args->algorithm == ALGO_SLIDING_COUNTER)
	{
		double		c = 0,
					p = 0,
					own_c,
					own_p,
					est;
		int64		e;

		if (r.found)
		{
			if (r.s == start)
				c = r.a, p = r.b;
			else if (r.s == start - win)
				p = r.a;
			else if (r.s > start)
				start = r.s, c = r.a, p = r.b;
		}
		own_c = c;
		own_p = p;
		if (live)
		{
			int64		sb = seed.seen_at - floor_mod(seed.seen_at, win);

			if (sb == start)
				c += seed.units;
			else if (sb == start - win)
				p += seed.units;
		}
		e = Max(now - start, 0);
		est = p * (double) (win - e) / (double) win + c;
		o->allowed = (est + cost <= lim);
		if (!o->allowed)
		{
			if (c + cost <= lim && p > 0)
				o->retry_us = (int64) ceil(win - (lim - c - cost) * (double) win / p) - e;
			else
			{
				double		cn = c + (args->force && !peek ? cost : 0);
				int64		e2 = 0;

				if (cost >= lim)
					e2 = win;
				else if (cn > 0)
					e2 = (int64) ceil(win - (lim - cost) * (double) win / cn);
				o->retry_us = (win - e) + Max(e2, 0);
			}
			o->retry_us = Max(o->retry_us, 1);
		}
		write = !peek && (o->allowed || args->force);
		if (write)
		{
			est += cost;
			c += cost;
		}
		o->remaining = Max((int64) floor(lim - est), 0);
		if (!o->allowed)
			o->remaining = write ? 0 : Max((int64) floor(lim - est), 0);
		o->used = (int64) ceil(est);
		o->reset_at_us = c > 0 ? start + 2 * win : p > 0 ? start + win : now;
		o->next_us = counter_next_unit(lim, win, start, now, e, p, c, est);
		ns = start;
		na = own_c + (write ? cost : 0);
		nb = own_p;
		expires = start + 2 * win;
		carry_until = expires;
	}
	else						/* ALGO_TOKEN_BUCKET */
	{
		double		t = (double) win / (double) lim;
		/*
		 * This store's bucket stands where Redis's stood, if that is
		 * later: a maximum, so taking it again at every call, and writing
		 * what was built on it, never counts Redis's units twice.
		 */
		double		tat = r.found ? Max(r.a, (double) now) : (double) now;
		double		nt;

		if (live)
			tat = Max(tat, (double) seed.frees_at);
		nt = tat + cost * t;

		o->allowed = (nt - now <= win + 1e-3);
		write = !peek && (o->allowed || args->force);
		o->used = (int64) ceil((tat - now) / t - 1e-9) + (write ? cost : 0);
		if (o->allowed)
			o->remaining = Max((int64) floor((win - ((write ? nt : tat) - now)) / t + 1e-9), 0);
		else
		{
			o->remaining = write ? 0 : Max((int64) floor((win - (tat - now)) / t + 1e-9), 0);
			o->retry_us = Max((int64) ceil(nt - win - now - 1e-3), 1);
		}
		o->reset_at_us = (int64) ceil(write ? nt : tat);
		o->next_us = bucket_next_token(lim, win, now, write ? nt : tat);
		na = nt;
		expires = (int64) ceil(na);
		/* carried with how far the tat then stood (lua_counter_import) */
		carry_until = expires;
	}
	if (write)
	{
		state_write(s, algo, &r, ns, na, nb, expires);
		/* Redis must learn of it once it answers again (the switch) */
		if ((o->allowed || args->force) &&
			fallback_carry_add(args, now, cost, carry_until))
			o->carry_units += cost;
	}
}

void
fallback_counter_attempt(const RlArgs *args, FallbackSeedFn seed, RlOutcome *o)
{
	FbScan		s;
	text	   *key = fallback_stored_key(args);
	LOCKTAG		tag;

	fallback_lock_stored_key(key, &tag);
	fallback_scan_open(&s, TBL_STATE, key, RowExclusiveLock);
	counter_call(&s, args, seed, args->cost, false, o);
	if (o->allowed || args->force)
		fallback_sweep_due(&s, fallback_now());
	fallback_scan_close(&s);
	if (!o->allowed && !args->force)
		LockRelease(&tag, ExclusiveLock, false);
}

void
fallback_counter_peek(const RlArgs *args, FallbackSeedFn seed, RlOutcome *o)
{
	FbScan		s;

	fallback_scan_open(&s, TBL_STATE, fallback_stored_key(args), AccessShareLock);
	counter_call(&s, args, seed, args->cost, true, o);
	fallback_scan_close(&s);
}
