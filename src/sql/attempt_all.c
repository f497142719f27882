/*-------------------------------------------------------------------------
 *
 * attempt_all.c
 *		rl_attempt_all, rl_allow_all, rl_enforce_all and rl_attempt_all_rows:
 *		several keys, each with its own limit, window and cost, admitted all
 *		or none charged.
 *
 * The arguments are read and checked here, each array element with the
 * checks rl_attempt gives its own arguments (limit.c), naming the element
 * ("lims[2]"); enforce_charge_all and the switch decide. Nothing here
 * formats a Redis command.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "enforce.h"
#include "result.h"
#include "settings.h"
#include "switch.h"
#include "ticket.h"

PG_FUNCTION_INFO_V1(slidewin_attempt_all);
PG_FUNCTION_INFO_V1(slidewin_allow_all);
PG_FUNCTION_INFO_V1(slidewin_enforce_all);
PG_FUNCTION_INFO_V1(slidewin_attempt_all_rows);
PG_FUNCTION_INFO_V1(slidewin_refund_all);

static const char *const array_names[] = {"keys", "lims", "wins", "costs"};

/*
 * Argument argno's elements, checked: not NULL, one dimension, 1 to
 * RL_MAX_KEYS elements, none NULL.
 */
static int
read_array(FunctionCallInfo fcinfo, int argno, Oid elemtype, Datum **elems)
{
	const char *name = array_names[argno];
	ArrayType  *a;
	bool	   *nulls;
	int			n;
	int16		typlen;
	bool		typbyval;
	char		typalign;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"%s\" must not be null", name)));
	a = PG_GETARG_ARRAYTYPE_P(argno);
	if (ARR_NDIM(a) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" must be a one-dimensional array", name)));
	get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
	deconstruct_array(a, elemtype, typlen, typbyval, typalign, elems, &nulls, &n);
	if (n < 1 || n > RL_MAX_KEYS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" must have 1 to %d elements", name, RL_MAX_KEYS),
				 errdetail("It has %d.", n)));
	for (int i = 0; i < n; i++)
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("argument \"%s[%d]\" must not be null", name, i + 1)));
	return n;
}

static const char *
opt_text(FunctionCallInfo fcinfo, int argno)
{
	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return NULL;
	return text_to_cstring(PG_GETARG_TEXT_PP(argno));
}

/*
 * (keys, lims, wins, costs, on_redis_error, refund_on_abort, algorithm):
 * the keys' arguments in args, which has room for RL_MAX_KEYS; returns how
 * many keys. costs NULL: 1 unit each.
 */
static int
check_all(FunctionCallInfo fcinfo, RlArgs *args)
{
	Datum	   *keys,
			   *lims,
			   *wins,
			   *costs = NULL;
	int			n = read_array(fcinfo, 0, TEXTOID, &keys);
	/* any algorithm rl_attempt takes; every key of the call uses it */
	RlAlgorithm algorithm = limit_algorithm(opt_text(fcinfo, 6));

	if (read_array(fcinfo, 1, INT8OID, &lims) != n ||
		read_array(fcinfo, 2, INTERVALOID, &wins) != n ||
		(!PG_ARGISNULL(3) && read_array(fcinfo, 3, INT8OID, &costs) != n))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("arguments \"keys\", \"lims\", \"wins\" and \"costs\" must have the same length"),
				 errdetail("\"keys\" has %d elements.", n)));
	memset(args, 0, sizeof(RlArgs) * n);
	for (int i = 0; i < n; i++)
	{
		text	   *key = DatumGetTextPP(keys[i]);
		char		kname[16],
					lname[16],
					wname[16],
					cname[16];

		snprintf(kname, sizeof(kname), "keys[%d]", i + 1);
		snprintf(lname, sizeof(lname), "lims[%d]", i + 1);
		snprintf(wname, sizeof(wname), "wins[%d]", i + 1);
		snprintf(cname, sizeof(cname), "costs[%d]", i + 1);
		limit_set_key_named(VARDATA_ANY(key), VARSIZE_ANY_EXHDR(key), kname, &args[i]);
		limit_set_lim(DatumGetInt64(lims[i]), lname, &args[i]);
		limit_set_win(DatumGetIntervalP(wins[i]), wname, &args[i]);
		limit_set_cost_named(costs ? DatumGetInt64(costs[i]) : 1, cname, lname, &args[i]);
		args[i].algorithm = algorithm;
		for (int j = 0; j < i; j++)
			if (args[j].keylen == args[i].keylen &&
				memcmp(args[j].key, args[i].key, args[i].keylen) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("argument \"%s\" repeats \"keys[%d]\"", kname, j + 1),
						 errdetail("Each key may appear once in a call.")));
	}
	return n;
}

/* Check, charge, and the key that decided (enforce_charge_all). */
static int
do_attempt_all(FunctionCallInfo fcinfo, RlArgs *args, RlOutcome *o, int *n)
{
	bool		refund = (PG_NARGS() <= 5 || PG_ARGISNULL(5)) ?
		slidewin_refund_on_abort : PG_GETARG_BOOL(5);

	*n = check_all(fcinfo, args);
	return enforce_charge_all(*n, args, policy_from_name(opt_text(fcinfo, 4), "on_redis_error"),
							  refund, o);
}

/*
 * The key that decided, in rl_result, with the ticket of the whole call:
 * rl_refund_all gives back every key's units with it.
 */
static Datum
decider_datum(FunctionCallInfo fcinfo, int n, const RlArgs *args, const RlOutcome *o, int d)
{
	char	   *ticket = ticket_make_all(n, args, o);

	return result_datum_ticket(fcinfo, &args[d], &o[d], (const char *const *) &ticket);
}

Datum
slidewin_attempt_all(PG_FUNCTION_ARGS)
{
	RlArgs		args[RL_MAX_KEYS];
	RlOutcome	o[RL_MAX_KEYS];
	int			n;
	int			d = do_attempt_all(fcinfo, args, o, &n);

	return decider_datum(fcinfo, n, args, o, d);
}

Datum
slidewin_allow_all(PG_FUNCTION_ARGS)
{
	RlArgs		args[RL_MAX_KEYS];
	RlOutcome	o[RL_MAX_KEYS];
	int			n;
	int			d = do_attempt_all(fcinfo, args, o, &n);

	PG_RETURN_BOOL(o[d].allowed);
}

Datum
slidewin_enforce_all(PG_FUNCTION_ARGS)
{
	RlArgs		args[RL_MAX_KEYS];
	RlOutcome	o[RL_MAX_KEYS];
	int			n;
	int			d = do_attempt_all(fcinfo, args, o, &n);

	if (!o[d].allowed)
		enforce_raise_denied(&args[d], &o[d]);
	return decider_datum(fcinfo, n, args, o, d);
}

/* One row per key, in the caller's order: the key, then its rl_result's columns. */
Datum
slidewin_attempt_all_rows(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	RlArgs		args[RL_MAX_KEYS];
	RlOutcome	o[RL_MAX_KEYS];
	int			n;

	(void) do_attempt_all(fcinfo, args, o, &n);
	InitMaterializedSRF(fcinfo, 0);
	for (int k = 0; k < n; k++)
	{
		Datum		values[RESULT_MAX_COLUMNS + 1];
		bool		nulls[RESULT_MAX_COLUMNS + 1];

		values[0] = PointerGetDatum(cstring_to_text_with_len(args[k].key, args[k].keylen));
		nulls[0] = false;
		result_fill(rsinfo->setDesc->natts - 1, &args[k], &o[k], values + 1, nulls + 1);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * rl_refund_all(keys, ticket): give back, now, the units of every key's
 * entry that rl_attempt_all's ticket names, each in the store that recorded
 * it (ticket_give_back, as rl_refund). keys must be the call's, in its
 * order. Returns how many keys had units given back: 0 when there was
 * nothing left to give back (handed in before, rolled back, reset, or out
 * of the window). When Redis cannot answer, an ERROR, after the keys before
 * it were given back; the ticket stays good, and a retry gives back the
 * rest only.
 */
Datum
slidewin_refund_all(PG_FUNCTION_ARGS)
{
	RlArgs		args[RL_MAX_KEYS];
	RlTicket	t[RL_MAX_KEYS];
	Datum	   *keys;
	int			n = read_array(fcinfo, 0, TEXTOID, &keys);
	int			given = 0;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"ticket\" must not be null"),
				 errhint("rl_attempt_all's result has no ticket when the call recorded nothing: a denial, an answer of the allow or deny policy, or one of the counting algorithms, which keep counts, not entries.")));
	memset(args, 0, sizeof(RlArgs) * n);
	for (int i = 0; i < n; i++)
	{
		text	   *key = DatumGetTextPP(keys[i]);
		char		kname[16];

		snprintf(kname, sizeof(kname), "keys[%d]", i + 1);
		limit_set_key_named(VARDATA_ANY(key), VARSIZE_ANY_EXHDR(key), kname, &args[i]);
	}
	ticket_read_all(text_to_cstring(PG_GETARG_TEXT_PP(1)), n, args, t);
	for (int i = 0; i < n; i++)
		given += ticket_give_back(&args[i], &t[i]) ? 1 : 0;
	PG_RETURN_INT32(given);
}
