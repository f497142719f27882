/*
 * limit.h
 *		What every rl_* call shares: its checked arguments, its outcome, and
 *		the rl_result tuple built from it.
 */
#ifndef SLIDEWIN_LIMIT_H
#define SLIDEWIN_LIMIT_H

#include "fmgr.h"
#include "datatype/timestamp.h"

#include "algorithm.h"

/* Unix microseconds (the stores' clock) to a timestamptz, and back: add, subtract. */
#define UNIX_TO_PG_US ((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY)

/* Keys longer than this are refused, so that one call cannot bloat Redis. */
#define RL_MAX_KEY_BYTES 1024
/* Running totals travel through Redis Lua as doubles: keep them exact. */
#define RL_MAX_LIMIT INT64CONST(2251799813685248)	/* 2^51 */
#define RL_MAX_WINDOW_DAYS 3650

#define RL_MAX_WINDOWS 8
/* rl_attempt_all: the most keys one call may charge. */
#define RL_MAX_KEYS 16
/* The longest lease of a concurrency slot (rl_acquire). */
#define RL_MAX_LEASE_US ((int64) USECS_PER_DAY)

typedef struct RlArgs
{
	const char *key;			/* not NUL-terminated */
	int			keylen;
	int64		lim;
	int64		win_us;
	int64		cost;
	bool		force;			/* shadow mode: record even if over the limit */
	RlAlgorithm algorithm;
	/* ALGO_MULTI_LOG: the windows; lim is the smallest, win_us the longest */
	int			nwin;
	int64		lims[RL_MAX_WINDOWS];
	int64		wins_us[RL_MAX_WINDOWS];
} RlArgs;

typedef struct RlOutcome
{
	bool		allowed;
	int64		remaining;
	int64		retry_us;		/* 0 when allowed */
	int64		reset_at_us;	/* Unix microseconds */
	int64		used;			/* units in the window, this call included if admitted */
	const char *store;			/* "redis", "fallback" or "none" */
	bool		known;			/* false: remaining and reset_at are unknown (NULL) */
	int64		recorded_ts;	/* Redis: score of the entry recorded, or -1 */
	bool		shadowed;		/* would have been denied; admitted by shadow mode */
	int64		stable_us;		/* Redis sliding-log denial: the same call gets the
								 * same answer for this long, if nobody writes */
	int64		lim;			/* the limit the call was judged against (multi:
								 * the deciding window's), -1 when unknown */
	int64		win_us;			/* and its window */
	int64		entry_ts;		/* the log entry this call recorded (Redis score or
								 * fallback ts), for its ticket; -1 when none */
	bool		blocked;		/* denied because the key is blocked (rl_block);
								 * retry_us runs at least to the block's end */
	int64		carry_units;	/* fallback: units it wrote for Redis to learn of
								 * (fallback_carry.c), for the switch to wait on */
	int64		next_us;		/* Unix microseconds: when the window next frees
								 * a unit (the end of the effective window of
								 * draft-ietf-httpapi-ratelimit-headers-11), had
								 * the caller spent all it has left; -1 when
								 * unknown (no store answered) */
} RlOutcome;

/* Tests only: an advisory lock key a fallback call waits on before deciding. */

/*
 * Before a call is decided: the limit it is judged against, as far as the
 * arguments tell (rl_attempt_multi's deciding window is the store's to say).
 */
extern void limit_outcome_judged(const RlArgs *args, RlOutcome *o);

/* Check arguments 0..2 (key, lim, win) and, if has_cost, argument 3 (cost). */
extern void limit_check_args(FunctionCallInfo fcinfo, bool has_cost, RlArgs *args);
extern void limit_check_key(FunctionCallInfo fcinfo, int argno, RlArgs *args);
/* rl_attempt_multi's arguments; lim is the smallest limit, win_us the longest window. */
extern void limit_check_multi(FunctionCallInfo fcinfo, RlArgs *args);

/* The same checks on plain values; argname names the argument in errors. */
extern void limit_set_key(const char *key, int keylen, RlArgs *args);
extern void limit_set_lim(int64 lim, const char *argname, RlArgs *args);
extern void limit_set_win(const Interval *win, const char *argname, RlArgs *args);
extern void limit_set_cost(int64 cost, RlArgs *args);
/* The same, naming the arguments ("keys[2]", "costs[2]" and "lims[2]"). */
extern void limit_set_key_named(const char *key, int keylen, const char *argname,
								RlArgs *args);
extern void limit_set_cost_named(int64 cost, const char *argname, const char *limname,
								 RlArgs *args);

/* The algorithm named `name` (NULL: sliding_log); 22023 listing the names. */
extern RlAlgorithm limit_algorithm(const char *name);
extern const char *limit_algorithm_name(RlAlgorithm a);

/* The test clock as Unix microseconds; false when slidewin.test_now is off. */
extern bool limit_test_clock(int64 *now_us);

/*
 * The same without parsing, for transaction abort: *is_set says whether the
 * test clock is on; false when it is on but its value has not been parsed
 * yet (by limit_test_clock). Never ERRORs.
 */
extern bool limit_test_clock_parsed(int64 *now_us, bool *is_set);

#endif
