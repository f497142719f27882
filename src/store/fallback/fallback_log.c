/*-------------------------------------------------------------------------
 *
 * fallback_log.c
 *		The fallback store's sliding logs, of rl_attempt and of
 *		rl_attempt_multi: reading a key's state in every window, deciding a
 *		call against them, and admitting it under the claim of the key's head
 *		or the key's lock.
 *
 * The layout of the log and its concurrency rules are at the head of
 * fallback.c, the heads in fallback_head.c. This file must not touch the
 * state of the counting algorithms, talk to Redis, or decide when the
 * fallback store is used.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"

#include "fallback_block.h"
#include "fallback_table.h"
#include "fallback_carry.h"
#include "fallback_head.h"
#include "fallback_log.h"
#include "settings.h"

/* Totals restart once a key's window is empty and they have grown this far. */
#define TOTAL_RESTART (INT64CONST(1) << 62)

/* One (lim, win) pair of a log: rl_attempt has one, rl_attempt_multi several. */
typedef struct FbWindow
{
	int64		lim;
	int64		win;
	int64		cutoff;
	int64		base;			/* running total before this window */
	int64		used;			/* seeded included */
	int64		seeded;			/* units Redis had counted, still spent (the seed) */
	int64		seed_frees;		/* when they free */
	int64		first_ts;		/* the oldest live row's time (when used > seeded) */
} FbWindow;

typedef struct FbState
{
	int64		now;			/* the clock before reading: defines the windows */
	int64		now_after;		/* the clock after reading: admission time */
	int64		maxwin;
	FbEntry		newest;			/* newest row, inside the windows or not */
	int			n;
	FbWindow	w[RL_MAX_WINDOWS];
} FbState;

/*
 * Per backend: the key it last read (by hash, with its table) and the time
 * of that key's newest row then. When a call comes for the same key again,
 * as under a hot key, its rows are dense, so read_state first looks only
 * at the rows since that time for the newest row, and only at the first
 * `probe_us` of the window for the oldest live one. Either bounded scan
 * finds exactly what the unbounded one would, if it finds anything; when it
 * finds nothing (a quiet key, a reset, a hash collision) the unbounded scan
 * follows. So the hint costs a wrong guess one more index descent, and
 * never changes an answer. probe_us adapts to the key's pace: it doubles
 * after a miss and shrinks by a sixteenth after a hit, so that about one
 * probe in twenty misses.
 */
#define PROBE_MIN_US 64
#define PROBE_MAX_US (INT64CONST(1) << 40)

static struct
{
	const FbTable *tbl;
	uint64		keyhash;
	int64		newest_ts;
	int64		probe_us;
} last_read = {NULL, 0, 0, 1000};

/* The key's newest row, looking first since the hint's time if it applies. */
static void
read_newest(FbScan *s, bool hinted, FbEntry *newest)
{
	if (hinted && last_read.newest_ts != PG_INT64_MIN)
	{
		fallback_scan_first_range(s, IDX_KEY_TS, BackwardScanDirection,
								  BTGreaterEqualStrategyNumber, last_read.newest_ts,
								  InvalidStrategy, 0, newest);
		if (newest->found)
			return;
	}
	fallback_scan_first(s, IDX_KEY_TS, BackwardScanDirection, InvalidStrategy, 0, newest);
}

/*
 * The first row with ts > cutoff among those with ts in (lo, hi] (hi
 * unbounded with InvalidStrategy). Rows at or before cutoff that the scan
 * passes are deleted: there are some only when lo < cutoff, which only a
 * caller holding the key's lock asks for.
 */
static void
first_live(FbScan *s, int64 lo, StrategyNumber hi_strategy, int64 hi, int64 cutoff,
		   FbEntry *e)
{
	IndexScanDesc scan = fallback_scan_begin_range(s, IDX_KEY_TS, BTGreaterStrategyNumber, lo,
												   hi_strategy, hi);

	while (fallback_scan_next(s, scan, ForwardScanDirection, e) && e->ts <= cutoff)
		fallback_try_delete(s, &e->tid);
	index_endscan(scan);
}

/*
 * The oldest row after cutoff, looking first just after it if hinted.
 *
 * A writer passes clean_from, the newest row's time less the longest window:
 * the scan then starts there, and deletes the rows it passes on its way to
 * the first live one, which are the rows that left the window since the
 * newest row was written. That is the same descent that finds the first
 * live row, instead of one more. It starts at clean_from rather than at the
 * key's first index entry because what lies before are the entries of rows
 * that earlier calls deleted, which stay in the index until a VACUUM:
 * stepping over them on every call would make each call slower than the
 * last. An expired row older than clean_from (left by a call with a longer
 * window) harms no lookup, and a sweep of its heap page deletes it by its expiry. A call
 * that is then denied keeps its deletions, and may still give up the key's
 * lock before commit: no lookup reads an expired row, which is also why a
 * sweep may delete one without the lock.
 */
static void
read_first(FbScan *s, bool hinted, int64 cutoff, int64 clean_from, FbEntry *first)
{
	int64		lo = Min(clean_from, cutoff);

	if (hinted && cutoff < PG_INT64_MAX - last_read.probe_us)
	{
		first_live(s, lo, BTLessEqualStrategyNumber, cutoff + last_read.probe_us,
				   cutoff, first);
		if (first->found)
		{
			last_read.probe_us = Max(last_read.probe_us - last_read.probe_us / 16, PROBE_MIN_US);
			return;
		}
		last_read.probe_us = Min(last_read.probe_us * 2, PROBE_MAX_US);
	}
	first_live(s, lo, InvalidStrategy, 0, cutoff, first);
}

/*
 * Read the key's state for every window. clean: the caller may write, so
 * the scan for the longest window's first live row also deletes the rows
 * that left it (read_first). head: the key's head as read just before, or
 * NULL to find the newest row in the log itself. alone: no other backend
 * can commit a row of the key until this call ends (the caller holds the
 * key's lock and found no head, so every writer of the key waits for that
 * lock): a key without a newest row then has no live row either, and its
 * windows are not scanned (a key's first admission saves an index descent).
 *
 * Returns false if what was read is not a state the key ever had: the log
 * holds a row newer than the head (the head was read before that row's
 * admission committed), or an rl_reset committed between the reads. The
 * caller then reads again.
 */
static bool
read_state(FbScan *s, const RlArgs *args, bool clean, const FbHead *head,
		   bool alone, const FallbackSeed *seed, FbState *st)
{
	uint64		h = fallback_key_hash(s->key);
	bool		hinted = last_read.tbl == s->tbl && last_read.keyhash == h;
	int64		clean_from = PG_INT64_MAX;

	st->now = fallback_now();
	if (args->algorithm == ALGO_MULTI_LOG)
	{
		st->n = args->nwin;
		for (int i = 0; i < st->n; i++)
		{
			st->w[i].lim = args->lims[i];
			st->w[i].win = args->wins_us[i];
		}
	}
	else
	{
		st->n = 1;
		st->w[0].lim = args->lim;
		st->w[0].win = args->win_us;
	}
	st->maxwin = 0;
	for (int i = 0; i < st->n; i++)
		st->maxwin = Max(st->maxwin, st->w[i].win);
	if (head)
	{
		memset(&st->newest, 0, sizeof(FbEntry));
		st->newest.found = head->found;
		st->newest.ts = head->ts;
		st->newest.total = head->total;
	}
	else
		read_newest(s, hinted, &st->newest);
	if (clean && st->newest.found)
		clean_from = st->newest.ts - st->maxwin - 1;
	for (int i = 0; i < st->n; i++)
	{
		FbWindow   *w = &st->w[i];
		FbEntry		first;		/* oldest row inside the window */

		w->cutoff = st->now - w->win;
		w->seeded = 0;
		w->seed_frees = 0;
		if (seed && seed->found)
		{
			/*
			 * What Redis counted (the seed): its units stay spent until the
			 * newest of them leaves the window, and this database's rows
			 * that a call had carried into Redis before Redis answered it
			 * are among them, so only rows from then on are counted here
			 * (one admitted in that very microsecond, or carried by a later
			 * call, may be counted twice: an over-count). A peek's answer,
			 * or another database's, carried none of this database's rows:
			 * it moves the units, never that time (switch/outage.c).
			 * Rows between the window's start and that answer are left in
			 * place (no clean-up from a raised cutoff): if the answer is
			 * forgotten, they count again.
			 */
			if (seed->frees_at > st->now)
			{
				w->seeded = seed->units;
				w->seed_frees = seed->frees_at;
			}
			if (seed->carried_to != PG_INT64_MIN && seed->carried_to - 1 > w->cutoff)
				w->cutoff = seed->carried_to - 1;
		}
		if (alone && !st->newest.found)
			first.found = false;
		else
			read_first(s, hinted, w->cutoff,
					   w->win == st->maxwin && w->cutoff == st->now - w->win ? clean_from : PG_INT64_MAX,
					   &first);

		/*
		 * A peek holds no key lock, so a writer may commit between the
		 * scans: a first row newer than the newest means the newest must be
		 * read again (totals only grow, so it is then at least first's).
		 * Newer by time with a smaller total means an rl_reset restarted
		 * the totals in between: the same.
		 */
		if (first.found && (!st->newest.found || first.total > st->newest.total ||
							first.ts > st->newest.ts))
		{
			if (head)
				return false;
			read_newest(s, hinted, &st->newest);
		}
		w->used = first.found ? 1 : 0; /* marks a window with a live row */
		w->base = first.found ? first.total - first.cost : -1;
		w->first_ts = first.found ? first.ts : 0;
	}
	/* Only now is the newest row final. */
	for (int i = 0; i < st->n; i++)
	{
		FbWindow   *w = &st->w[i];

		if (w->used)
		{
			/*
			 * A live row's units are in the newest total unless an
			 * rl_reset came between the two reads: then read again.
			 */
			w->used = st->newest.total - w->base;
			if (w->used <= 0)
				return false;
		}
		else
			w->base = st->newest.found ? st->newest.total : 0;
		w->used += w->seeded;
	}
	st->now_after = fallback_now();
	last_read.tbl = s->tbl;
	last_read.keyhash = h;
	last_read.newest_ts = st->newest.found ? st->newest.ts : PG_INT64_MIN;
	return true;
}

/*
 * The live row of window w whose running total first reaches target. The
 * rows after the window's cutoff, up to the newest row read, have running
 * totals that never fall as their times grow: an admission adds its units
 * to the newest total, and a refund moves every newer row down by the
 * units it gives back (fallback_refund). So the row is found by walking the
 * (key, ts) index from the cutoff, for at most RETRY_WALK rows (the row is
 * nearly always the first: a denied call of cost 1 waits for the oldest
 * unit), and past that by halving the range of times between the last row
 * walked, which falls short, and the newest row, which reaches it: each
 * step reads the newest row of the lower half.
 *
 * Returns false if no row in that range reaches target: the state was read
 * without a lock, and an rl_reset (or anything else that rewrote the key)
 * committed since. The caller then reads the key again.
 */
#define RETRY_WALK 32

static bool
row_reaching(FbScan *s, const FbState *st, const FbWindow *w, int64 target, FbEntry *found)
{
	IndexScanDesc scan = fallback_scan_begin_range(s, IDX_KEY_TS, BTGreaterStrategyNumber, w->cutoff,
												   BTLessEqualStrategyNumber, st->newest.ts);
	int64		lo = w->cutoff;	/* no row at or before lo reaches target */
	int64		hi;
	int			walked = 0;

	while (walked < RETRY_WALK && fallback_scan_next(s, scan, ForwardScanDirection, found))
	{
		if (found->total >= target)
		{
			index_endscan(scan);
			return true;
		}
		lo = found->ts;
		walked++;
	}
	index_endscan(scan);
	if (walked < RETRY_WALK)
		return false;
	fallback_scan_first_range(s, IDX_KEY_TS, BackwardScanDirection, BTGreaterStrategyNumber, lo,
							  BTLessEqualStrategyNumber, st->newest.ts, found);
	if (!found->found || found->total < target)
		return false;
	hi = found->ts;
	while (hi - lo > 1)
	{
		int64		mid = lo + (hi - lo) / 2;
		FbEntry		e;

		CHECK_FOR_INTERRUPTS();
		fallback_scan_first_range(s, IDX_KEY_TS, BackwardScanDirection, BTGreaterStrategyNumber, lo,
								  BTLessEqualStrategyNumber, mid, &e);
		if (e.found && e.total >= target)
		{
			*found = e;
			hi = e.ts;
		}
		else
			lo = mid;			/* (lo, mid] holds no row, or only rows short of it */
	}
	return true;
}

/* When window w next admits `need` more units: the expiry of the row that frees them. */
static bool
retry_after(FbScan *s, const FbState *st, const FbWindow *w, int64 need, int64 *wait)
{
	FbEntry		e;

	if (!row_reaching(s, st, w, w->base + need, &e))
		return false;
	*wait = e.ts + w->win - st->now;
	return true;
}

/*
 * When window w frees `need` units, counting what Redis had counted (all of
 * it freed at once, at seed_frees) as well as the rows: the sooner of
 * freeing them from the rows alone, if they hold that many, and of waiting
 * for Redis's units and then for the rest from the rows. False as for
 * retry_after.
 */
static bool
window_wait(FbScan *s, const FbState *st, const FbWindow *w, int64 need, int64 *wait)
{
	int64		rows = w->used - w->seeded;
	int64		best = PG_INT64_MAX;

	if (need <= rows && !retry_after(s, st, w, need, &best))
		return false;
	if (w->seeded > 0)
	{
		int64		t = w->seed_frees - st->now;
		int64		rest = need - w->seeded;

		if (rest > 0 && rest <= rows)
		{
			int64		t_rows;

			if (!retry_after(s, st, w, rest, &t_rows))
				return false;
			t = Max(t, t_rows);
		}
		best = Min(best, t);
	}
	*wait = best;
	return true;
}

/*
 * Decide a call of `cost` against every window: allowed only if each admits
 * it. remaining and used describe the most constraining window, retry_us
 * the longest wait; lim and win_us name the deciding window: the first
 * that denies, else the most constraining one. Returns false if the state
 * read is no longer the key's (see retry_after): the caller reads again and
 * decides anew.
 */
static bool
decide(FbScan *s, const FbState *st, int64 cost, bool peek, RlOutcome *o)
{
	bool		first = true;
	const FbWindow *tightest = &st->w[0];

	settings_test_pause();

	o->allowed = true;
	o->retry_us = 0;
	for (int i = 0; i < st->n; i++)
	{
		const FbWindow *w = &st->w[i];
		int64		rem = w->lim - w->used - cost;
		bool		denies = rem < 0;
		bool		newmin;

		if (denies)
		{
			int64		wait;

			if (!window_wait(s, st, w, w->used + cost - w->lim, &wait))
				return false;
			o->retry_us = Max(o->retry_us, wait);
		}
		/* A peek reports the units left, not those left after a call. */
		if (denies || peek)
			rem = Max(w->lim - w->used, 0);
		newmin = first || rem < o->remaining;
		if (newmin)
		{
			o->remaining = rem;
			o->used = w->used;
			tightest = w;
		}
		if (first || (o->allowed && (denies || newmin)))
		{
			o->lim = w->lim;
			o->win_us = w->win;
		}
		if (denies)
			o->allowed = false;
		first = false;
	}

	/*
	 * When the window whose remaining is reported next frees a unit: its
	 * oldest unit leaves, the oldest live row (read with the state: no
	 * further read) or what Redis had counted, whichever first. With
	 * nothing in it, the units spent now leave a window from now.
	 */
	o->next_us = PG_INT64_MAX;
	if (tightest->used > tightest->seeded)
		o->next_us = tightest->first_ts + tightest->win;
	if (tightest->seeded > 0)
		o->next_us = Min(o->next_us, tightest->seed_frees);
	if (o->next_us == PG_INT64_MAX)
		o->next_us = st->now + tightest->win;
	return true;
}
/* Calls per backend, so that a page of heads is swept at the first and every 16th. */
static uint32 head_sweep_clock = 0;

void
fallback_log_attempt(FbTableId t, const RlArgs *args, FallbackSeedFn seed_fn,
					 int64 ahead_us, RlOutcome *o)
{
	FbScan		s;
	FbScan		hs;
	FbState		st;
	FbHead		hd;
	text	   *key = fallback_stored_key(args);
	int16		kind = (t == TBL_LOG) ? 1 : 2;
	LOCKTAG		tag;
	bool		locked = false;
	bool		waited = false;
	bool		wrote = false;
	int64		now;
	FallbackSeed seed;

	(void) seed_fn(args, &seed);
	fallback_scan_open(&s, t, key, RowExclusiveLock);
	fallback_scan_open(&hs, TBL_HEAD, key, RowExclusiveLock);
	/* other keys' expired rows go a heap page at a time, without any lock */
	now = fallback_now();
	fallback_sweep_due(&s, now);
	if (head_sweep_clock++ % 16 == 0)
		(void) fallback_sweep_heads(&hs, now, 1);

	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		fallback_head_read(&hs, kind, &hd);
		if (!hd.found && !locked)
		{
			/* a first admission: read again once earlier creators are done */
			waited = fallback_lock_stored_key(key, &tag);
			locked = true;
			continue;
		}
		if (!read_state(&s, args, true, hd.found ? &hd : NULL, locked && !hd.found, &seed, &st) ||
			!decide(&s, &st, args->cost, false, o))
			continue;
		o->store = "fallback";
		o->recorded_ts = -1;	/* rows go with an aborted transaction anyway */
		o->shadowed = false;
		o->known = true;
		o->reset_at_us = Max(st.newest.ts + st.maxwin, st.w[0].seed_frees);
		if (o->allowed || args->force)
		{
			int64		ts = st.now_after + ahead_us;
			int64		total = st.newest.found ? st.newest.total : 0;

			if (st.newest.found && ts <= st.newest.ts)
				ts = st.newest.ts + 1;
			if (total >= TOTAL_RESTART && st.newest.ts <= st.now - st.maxwin)
				total = 0;
			/*
			 * The claim: fails if another admission committed since the read.
			 * A key without a head gets one only if it has a row in the
			 * window and this call had to wait for the key's lock, that is,
			 * once its writers meet: until then, the key's lock, held until
			 * commit, serialises them, and a key that one writer at a time
			 * calls (many keys, each now and then) pays for no head (1.18).
			 * slidewin.fallback_heads = always gives it one as soon as it
			 * has a row in the window, as before 1.18.
			 */
			if (hd.found)
			{
				if (fallback_head_write(&hs, kind, &hd, ts, total + args->cost, ts + st.maxwin) != TM_Ok)
					continue;
			}
			else if ((waited || slidewin_fallback_heads == FALLBACK_HEADS_ALWAYS) &&
					 st.newest.found && st.newest.ts > st.now - st.maxwin)
				(void) fallback_head_write(&hs, kind, &hd, ts, total + args->cost, ts + st.maxwin);
			fallback_insert_row(&s, ts, total + args->cost, args->cost, ts + st.maxwin);
			/* Redis must learn of it once it answers again (the switch) */
			if (t == TBL_LOG && fallback_carry_add(args, ts, args->cost, ts + st.maxwin))
				o->carry_units += args->cost;
			last_read.newest_ts = ts;
			o->entry_ts = ts;
			/* Later calls in this same command must see it. */
			CommandCounterIncrement();
			wrote = true;

			if (!o->allowed)
				o->remaining = 0;
			/* the newest entry: what Redis had counted frees no later */
			o->reset_at_us = ts + st.maxwin;
			o->used += args->cost;
		}
		break;
	}
	fallback_scan_close(&hs);
	fallback_scan_close(&s);

	/*
	 * The key's lock serialises the creation of its head only: it is kept
	 * until commit by a call that created one, and given up at once
	 * otherwise (it stays if this transaction took it before).
	 */
	if (locked && !(wrote && !hd.found))
		LockRelease(&tag, ExclusiveLock, false);
}

void
fallback_log_peek(FbTableId t, const RlArgs *args, FallbackSeedFn seed_fn,
				  RlOutcome *o)
{
	FbScan		s;
	FbState		st;
	int64		used_longest = 0;
	FallbackSeed seed;

	(void) seed_fn(args, &seed);
	fallback_scan_open(&s, t, fallback_stored_key(args), AccessShareLock);
	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		if (read_state(&s, args, false, NULL, false, &seed, &st) &&
			decide(&s, &st, args->cost, true, o))
			break;
	}
	for (int i = 0; i < st.n; i++)
		used_longest = Max(used_longest, st.w[i].used);
	o->store = "fallback";
	o->known = true;
	o->recorded_ts = -1;
	o->shadowed = false;
	o->reset_at_us = used_longest > 0 ?
		Max(st.newest.ts + st.maxwin, st.w[0].seed_frees) : st.now;
	fallback_scan_close(&s);
}
