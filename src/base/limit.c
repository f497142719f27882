/*-------------------------------------------------------------------------
 *
 * limit.c
 *		Checking the arguments of the rl_* functions, and building rl_result.
 *
 * Bad input is an ERROR naming the argument (22004 for NULL, 22023 for the
 * rest); it must never turn into a NULL result or an admission. Nothing here
 * talks to a store.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "common/int.h"
#include "funcapi.h"
#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/timestamp.h"

#include "limit.h"
#include "settings.h"


/* Unix epoch to PostgreSQL epoch, in microseconds */

static const char *const arg_names[] = {"key", "lim", "win", "cost"};

static void
check_not_null(FunctionCallInfo fcinfo, int argno)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"%s\" must not be null", arg_names[argno])));
}

void
limit_set_key(const char *key, int keylen, RlArgs *args)
{
	limit_set_key_named(key, keylen, "key", args);
}

void
limit_set_key_named(const char *key, int keylen, const char *argname, RlArgs *args)
{
	args->key = key;
	args->keylen = keylen;
	if (keylen == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" must not be empty", argname)));
	if (keylen > RL_MAX_KEY_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" must be at most %d bytes", argname, RL_MAX_KEY_BYTES),
				 errdetail("The key is %d bytes long.", keylen)));
}

void
limit_check_key(FunctionCallInfo fcinfo, int argno, RlArgs *args)
{
	text	   *key;

	check_not_null(fcinfo, argno);
	key = PG_GETARG_TEXT_PP(argno);
	limit_set_key(VARDATA_ANY(key), VARSIZE_ANY_EXHDR(key), args);
}

void
limit_set_lim(int64 lim, const char *argname, RlArgs *args)
{
	if (lim < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" must be at least 1", argname)));
	if (lim > RL_MAX_LIMIT)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" must be at most " INT64_FORMAT, argname, RL_MAX_LIMIT)));
	args->lim = lim;
}

void
limit_set_win(const Interval *win, const char *argname, RlArgs *args)
{
	if (win->month != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" must not contain months or years", argname),
				 errdetail("Months and years have no fixed length."),
				 errhint("Use days instead, for example '30 days'.")));
	if (win->day > RL_MAX_WINDOW_DAYS + 1 || win->day < -RL_MAX_WINDOW_DAYS - 1 ||
		pg_add_s64_overflow((int64) win->day * USECS_PER_DAY, win->time, &args->win_us) ||
		args->win_us <= 0 || args->win_us > (int64) RL_MAX_WINDOW_DAYS * USECS_PER_DAY)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" must be greater than zero and at most %d days",
						argname, RL_MAX_WINDOW_DAYS)));
}

void
limit_set_cost(int64 cost, RlArgs *args)
{
	limit_set_cost_named(cost, "cost", "lim", args);
}

void
limit_set_cost_named(int64 cost, const char *argname, const char *limname, RlArgs *args)
{
	if (cost < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" must be at least 1", argname)));
	if (cost > args->lim)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" (" INT64_FORMAT ") exceeds \"%s\" (" INT64_FORMAT "), so the call can never be admitted",
						argname, cost, limname, args->lim)));
	args->cost = cost;
}

static const char *const algorithm_names[ALGO_COUNT] = {
	"sliding_log", "sliding_counter", "fixed_window", "token_bucket", "multi"
};

RlAlgorithm
limit_algorithm(const char *name)
{
	if (name == NULL)
		return ALGO_SLIDING_LOG;
	for (int i = 0; i < ALGO_MULTI_LOG; i++)
		if (strcmp(name, algorithm_names[i]) == 0)
			return (RlAlgorithm) i;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("argument \"algorithm\" must be one of sliding_log, sliding_counter, fixed_window, token_bucket"),
			 errdetail("Got \"%s\".", name)));
	return ALGO_SLIDING_LOG;	/* keep compiler quiet */
}

const char *
limit_algorithm_name(RlAlgorithm a)
{
	return algorithm_names[a];
}

void
limit_check_args(FunctionCallInfo fcinfo, bool has_cost, RlArgs *args)
{
	/* NULLs first, so that a NULL anywhere is reported as such. */
	for (int i = 0; i < (has_cost ? 4 : 3); i++)
		check_not_null(fcinfo, i);

	memset(args, 0, sizeof(RlArgs));
	limit_check_key(fcinfo, 0, args);
	limit_set_lim(PG_GETARG_INT64(1), "lim", args);
	limit_set_win(PG_GETARG_INTERVAL_P(2), "win", args);
	args->cost = 1;
	if (has_cost)
		limit_set_cost(PG_GETARG_INT64(3), args);
}

/* rl_attempt_multi: (key, lims bigint[], wins interval[], cost). */
void
limit_check_multi(FunctionCallInfo fcinfo, RlArgs *args)
{
	static const char *const names[] = {"key", "lims", "wins", "cost"};
	ArrayType  *lims;
	ArrayType  *wins;
	Datum	   *lim_d;
	Datum	   *win_d;
	bool	   *lim_n;
	bool	   *win_n;
	int			nl;
	int			nw;
	int64		cost;

	for (int i = 0; i < 4; i++)
		if (PG_ARGISNULL(i))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("argument \"%s\" must not be null", names[i])));
	memset(args, 0, sizeof(RlArgs));
	limit_check_key(fcinfo, 0, args);
	args->algorithm = ALGO_MULTI_LOG;

	lims = PG_GETARG_ARRAYTYPE_P(1);
	wins = PG_GETARG_ARRAYTYPE_P(2);
	if (ARR_NDIM(lims) > 1 || ARR_NDIM(wins) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("arguments \"lims\" and \"wins\" must be one-dimensional arrays")));
	deconstruct_array(lims, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &lim_d, &lim_n, &nl);
	deconstruct_array(wins, INTERVALOID, sizeof(Interval), false, TYPALIGN_DOUBLE, &win_d, &win_n, &nw);
	if (nl != nw)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("arguments \"lims\" and \"wins\" must have the same length"),
				 errdetail("\"lims\" has %d elements and \"wins\" has %d.", nl, nw)));
	if (nl < 1 || nl > RL_MAX_WINDOWS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("arguments \"lims\" and \"wins\" must have 1 to %d elements", RL_MAX_WINDOWS),
				 errdetail("They have %d.", nl)));
	args->nwin = nl;
	for (int i = 0; i < nl; i++)
	{
		RlArgs		one;

		if (lim_n[i] || win_n[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("argument \"%s\" must not contain nulls", lim_n[i] ? "lims" : "wins")));
		limit_set_lim(DatumGetInt64(lim_d[i]), "lims", &one);
		limit_set_win(DatumGetIntervalP(win_d[i]), "wins", &one);
		args->lims[i] = one.lim;
		args->wins_us[i] = one.win_us;
		if (one.win_us > args->win_us)
		{
			args->win_us = one.win_us;
			args->lim = one.lim;
		}
	}
	cost = PG_GETARG_INT64(3);
	for (int i = 0; i < nl; i++)
	{
		args->lim = Min(args->lim, args->lims[i]);
	}
	/* cost is checked against the smallest limit: above it, never admitted */
	limit_set_cost(cost, args);
}

void
limit_outcome_judged(const RlArgs *args, RlOutcome *o)
{
	o->lim = args->algorithm == ALGO_MULTI_LOG ? -1 : args->lim;
	o->win_us = args->algorithm == ALGO_MULTI_LOG ? 0 : args->win_us;
	o->entry_ts = -1;
	o->blocked = false;
	o->next_us = -1;
}

/* The last value of slidewin.test_now parsed, and what it parsed to. */
static char parsed_from[128] = "";
static int64 parsed_us;

bool
limit_test_clock(int64 *now_us)
{
	if (slidewin_test_now == NULL || slidewin_test_now[0] == '\0')
		return false;

	/* Parse once per value, not once per call. */
	if (strcmp(parsed_from, slidewin_test_now) != 0)
	{
		TimestampTz ts;

		ts = DatumGetTimestampTz(DirectFunctionCall3(timestamptz_in,
													 CStringGetDatum(slidewin_test_now),
													 ObjectIdGetDatum(InvalidOid),
													 Int32GetDatum(-1)));
		if (TIMESTAMP_NOT_FINITE(ts))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("slidewin.test_now must be a finite timestamp")));
		parsed_us = ts + UNIX_TO_PG_US;
		strlcpy(parsed_from, slidewin_test_now, sizeof(parsed_from));
	}
	*now_us = parsed_us;
	return true;
}

bool
limit_test_clock_parsed(int64 *now_us, bool *is_set)
{
	*is_set = slidewin_test_now != NULL && slidewin_test_now[0] != '\0';
	if (!*is_set)
		return true;
	if (strcmp(parsed_from, slidewin_test_now) != 0)
		return false;
	*now_us = parsed_us;
	return true;
}
