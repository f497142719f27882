/*-------------------------------------------------------------------------
 *
 * store_redis_xslot.c
 *		rl_attempt_all under Redis Cluster with keys in different hash
 *		slots: reserve on each slot's master, then confirm or cancel.
 *
 * One script can only name keys of one slot, so the keys are grouped by
 * slot and each group is asked by log_all.lua (or counter_all.lua, below)
 * in reserve mode, on its slot's master (script_run routes it there,
 * following MOVED and ASK as any command does). A group whose keys all have room records each key's
 * entry at once, as an ordinary entry of the log, and marks it reserved
 * until a deadline (see log_all.lua): so a concurrent rl_attempt, or any
 * script that counts the key, counts it while it lives, and nothing can
 * be admitted over a key's limit meanwhile.
 *
 * When every group admitted, each is confirmed (log_settle.lua 'c'): the
 * mark goes, the entry stays where it was recorded. When a group denied,
 * every group that had reserved is cancelled ('x'): its entries are given
 * back through the ledger at once, as a refund would. An entry whose mark
 * outlives its deadline (the backend died, or was stopped, between the two
 * steps) is given back by the next script that reads the key.
 *
 * The counting algorithms (fixed_window, sliding_counter, token_bucket)
 * keep counts, not entries: counter_all.lua in reserve mode records each
 * key's cost in a hash beside its state, under an id unique to the call,
 * and every counting script under Cluster adds the live ones to the count
 * (see counter_args.lua). counter_settle.lua confirms (the units go into
 * the state, in the window they were reserved in) or cancels (the field
 * goes). A cancel does not undo a confirmed counting group: its units stay
 * counted as an admission's, which again leans toward not admitting.
 *
 * Every group is asked, even after one denied, so that each key's outcome
 * is known (the caller reports the key that decided); the reservations of
 * the groups that had room are then cancelled at once.
 *
 * A confirm that fails (the master died, or the reservation had already
 * ended) undoes the call: every group is cancelled, confirmed ones too,
 * and the call fails as "Redis cannot answer", so its policy applies. A
 * cancel that cannot reach its master leaves the units counted there: an
 * unconfirmed reservation until its deadline, a confirmed entry for its
 * window. Either way the error leans toward not admitting.
 *
 * Like the rest of the store, this file knows nothing of failure policy.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/timestamp.h"

#include "cluster_slots.h"
#include "reply_check.h"
#include "scripts.h"
#include "settings.h"
#include "store_redis.h"
#include "store_redis_int.h"

/* The keys of one hash slot: their places in the call's arrays. */
typedef struct SlotGroup
{
	int			slot;
	int			n;
	int			member[RL_MAX_KEYS];
	bool		reserved;		/* its entries were recorded */
} SlotGroup;

/*
 * How long a reservation lives unless confirmed: one second, and twice
 * slidewin.command_timeout for each slot. Reserving the slots one after
 * the other, then confirming them, takes a live backend at most one
 * command_timeout a slot for each step (redirections included), so a
 * reservation of a live backend is confirmed in time; one of a backend
 * that died is given back soon after.
 */
static int64
reservation_life_us(int ngroups)
{
	return (int64) 1000000 + (int64) 2 * ngroups * slidewin_command_timeout * 1000;
}

/*
 * The second step's script on group g: for the sliding log log_settle.lua
 * (ARGV mode, then each key's entry and cost), for a counting algorithm
 * counter_settle.lua (ARGV mode, algorithm, the reservations' id, the
 * clock, then each key's limit and window).
 */
static void
settle_run(const SlotGroup *g, const RlArgs *args, const RlOutcome *o,
		   bool confirm, const char *id, RedisResult *r)
{
	StringInfoData keys[2 * RL_MAX_KEYS];
	const char *k[2 * RL_MAX_KEYS];
	size_t		klens[2 * RL_MAX_KEYS];
	char		nums[2 * RL_MAX_KEYS][24];
	char		now[24];
	const char *argv[2 * RL_MAX_KEYS + 4];
	int			nargs = 0;
	RlAlgorithm algorithm = args[0].algorithm;
	bool		logs = (algorithm == ALGO_SLIDING_LOG);
	const char *tag = redis_store_tags[algorithm];

	argv[nargs++] = confirm ? "c" : "x";
	if (!logs)
	{
		argv[nargs++] = algorithm == ALGO_FIXED_WINDOW ? "f" :
			algorithm == ALGO_SLIDING_COUNTER ? "s" : "t";
		argv[nargs++] = id;
		argv[nargs++] = redis_store_clock_arg(now, sizeof(now));
	}
	for (int i = 0; i < g->n; i++)
	{
		int			m = g->member[i];

		/* the log and its ledger; a counting state and its reservations */
		redis_store_key(&keys[2 * i], tag, &args[m]);
		redis_store_ledger_key(&keys[2 * i + 1], tag, &args[m]);
		k[2 * i] = keys[2 * i].data;
		klens[2 * i] = keys[2 * i].len;
		k[2 * i + 1] = keys[2 * i + 1].data;
		klens[2 * i + 1] = keys[2 * i + 1].len;
		snprintf(nums[2 * i], 24, INT64_FORMAT,
				 logs ? o[m].recorded_ts : args[m].lim);
		snprintf(nums[2 * i + 1], 24, INT64_FORMAT,
				 logs ? args[m].cost : args[m].win_us);
		argv[nargs++] = nums[2 * i];
		argv[nargs++] = nums[2 * i + 1];
	}
	script_run(logs ? SCRIPT_LOG_SETTLE : SCRIPT_COUNTER_SETTLE, 2 * g->n, k, klens,
			   nargs, argv, r);
	for (int i = 0; i < 2 * g->n; i++)
		pfree(keys[i].data);
}

/*
 * Confirm (or cancel) the reservations of group g. True when the reply is
 * checked; then ok tells whether every key was confirmed (for a cancel,
 * whatever was given back).
 */
static bool
settle(const SlotGroup *g, const RlArgs *args, const RlOutcome *o, bool confirm,
	   const char *id, bool *ok, RedisResult *r)
{
	char		why[sizeof(r->message)];

	settle_run(g, args, o, confirm, id, r);
	if (!confirm && r->status != RS_OK)
	{
		/* a cancel that failed: what it would have given back ends by itself */
		if (r->reply)
			freeReplyObject(r->reply);
		r->reply = NULL;
		return false;
	}
	if (confirm && !redis_store_settle(r))
		return false;
	if (!reply_check_settle(r->reply, g->n, confirm, why, sizeof(why)))
		return redis_store_refuse(r, "%s", why);
	*ok = true;
	for (size_t i = 0; i < r->reply->elements; i++)
		if (r->reply->element[i]->integer != 1)
			*ok = false;
	freeReplyObject(r->reply);
	r->reply = NULL;
	return true;
}

/*
 * Cancel every group that reserved, as far as each master answers; what a
 * master does not hear of ends by itself (an unconfirmed reservation) or
 * stays counted (a confirmed entry). Never ERRORs for Redis' sake.
 */
static void
cancel_all(SlotGroup *groups, int ngroups, const RlArgs *args, const RlOutcome *o,
		   const char *id)
{
	for (int g = 0; g < ngroups; g++)
	{
		RedisResult u;
		bool		ok;

		if (!groups[g].reserved)
			continue;
		memset(&u, 0, sizeof(u));
		(void) settle(&groups[g], args, o, false, id, &ok, &u);
	}
}

/*
 * The outcome of a key that had room, reserved and was cancelled because
 * another key denied: as log_all.lua reports a key with room that was not
 * charged (allowed 3, see store_redis_all.c).
 */
static void
uncharge(RlOutcome *o, int64 cost)
{
	o->allowed = false;
	o->blocked = false;
	o->remaining += cost;
	o->used -= cost;
	o->retry_us = 0;
	o->stable_us = 0;
	/* (a counting key's reset stays its window's: it recorded no entry) */
	if (o->used <= 0 && o->recorded_ts >= 0)
		o->reset_at_us = o->recorded_ts;
	o->recorded_ts = -1;
	o->entry_ts = -1;
}

bool
redis_store_attempt_xslot(int n, const RlArgs *args, RedisRunAll run_slot,
						  RlOutcome *o, RedisResult *r)
{
	SlotGroup	groups[RL_MAX_KEYS];
	int			ngroups = 0;
	bool		denied = false;
	bool		force = args[0].force;
	int64		life_us;
	const char *tag = redis_store_tags[args[0].algorithm];
	bool		logs = (args[0].algorithm == ALGO_SLIDING_LOG);
	char		id[48];
	static uint32 calls = 0;

	/* the counting algorithms' reservations are named: unique to the call */
	snprintf(id, sizeof(id), "%d.%u." INT64_FORMAT, MyProcPid, ++calls,
			 (int64) GetCurrentTimestamp());

	/* Group the keys by the slot of their log (ledger and block share it). */
	for (int i = 0; i < n; i++)
	{
		StringInfoData key;
		int			slot,
					g;

		redis_store_key(&key, tag, &args[i]);
		slot = cluster_key_slot(key.data, key.len);
		pfree(key.data);
		for (g = 0; g < ngroups; g++)
			if (groups[g].slot == slot)
				break;
		if (g == ngroups)
		{
			groups[g].slot = slot;
			groups[g].n = 0;
			groups[g].reserved = false;
			ngroups++;
		}
		groups[g].member[groups[g].n++] = i;
	}
	life_us = reservation_life_us(ngroups);

	/* First step: reserve on every slot's master. */
	for (int g = 0; g < ngroups; g++)
	{
		RlArgs		gargs[RL_MAX_KEYS];
		RlOutcome	gout[RL_MAX_KEYS];

		/* what the caller set before (the limit judged) stays */
		for (int i = 0; i < groups[g].n; i++)
		{
			gargs[i] = args[groups[g].member[i]];
			gout[i] = o[groups[g].member[i]];
		}
		if (!run_slot(groups[g].n, gargs, life_us, id, gout, r))
		{
			cancel_all(groups, ngroups, args, o, id);
			return false;
		}
		/* a counting group reserves every key, or none (counter_all.lua) */
		groups[g].reserved = !logs && force;
		for (int i = 0; i < groups[g].n; i++)
		{
			int			m = groups[g].member[i];

			o[m] = gout[i];
			if (o[m].recorded_ts >= 0 || (!logs && o[m].allowed))
				groups[g].reserved = true;
			if (!o[m].allowed)
				denied = true;
		}
	}

	/* A key denied (and the call is not shadowed): nothing is charged. */
	if (denied && !force)
	{
		cancel_all(groups, ngroups, args, o, id);
		for (int g = 0; g < ngroups; g++)
			for (int i = 0; groups[g].reserved && i < groups[g].n; i++)
			{
				int			m = groups[g].member[i];

				if (o[m].allowed)
					uncharge(&o[m], args[m].cost);
			}
		return true;
	}

	settings_test_pause();

	/* Second step: confirm on every slot's master. */
	for (int g = 0; g < ngroups; g++)
	{
		bool		ok = false;

		if (!groups[g].reserved)
			continue;
		if (!settle(&groups[g], args, o, true, id, &ok, r) || !ok)
		{
			if (r->status == RS_OK)
			{
				/* the reservation had ended: the call cannot stand */
				r->status = RS_FAIL_TIMEOUT;
				snprintf(r->message, sizeof(r->message),
						 "a reservation of rl_attempt_all ended before it was confirmed");
			}
			cancel_all(groups, ngroups, args, o, id);
			return false;
		}
	}
	return true;
}
