/*
 * limit.h
 *		What every rl_* call shares: its checked arguments, its outcome, and
 *		the rl_result tuple built from it.
 */
#ifndef SLIDEWIN_LIMIT_H
#define SLIDEWIN_LIMIT_H

#include "fmgr.h"

/* Keys longer than this are refused, so that one call cannot bloat Redis. */
#define RL_MAX_KEY_BYTES 1024
/* Running totals travel through Redis Lua as doubles: keep them exact. */
#define RL_MAX_LIMIT INT64CONST(2251799813685248)	/* 2^51 */
#define RL_MAX_WINDOW_DAYS 3650

typedef struct RlArgs
{
	const char *key;			/* not NUL-terminated */
	int			keylen;
	int64		lim;
	int64		win_us;
	int64		cost;
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
} RlOutcome;

extern char *slidewin_test_now;

/* Check arguments 0..2 (key, lim, win) and, if has_cost, argument 3 (cost). */
extern void limit_check_args(FunctionCallInfo fcinfo, bool has_cost, RlArgs *args);
extern void limit_check_key(FunctionCallInfo fcinfo, int argno, RlArgs *args);
extern Datum limit_result_datum(FunctionCallInfo fcinfo, const RlOutcome *o);

/* The test clock as Unix microseconds; false when slidewin.test_now is off. */
extern bool limit_test_clock(int64 *now_us);

#endif
