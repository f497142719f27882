/*-------------------------------------------------------------------------
 *
 * result.c
 *		The rl_result row a call returns, its ticket included.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/typcache.h"

#include "compat.h"
#include "result.h"
#include "ticket.h"

static Interval *
interval_of_us(int64 us)
{
	Interval   *i = (Interval *) palloc(sizeof(Interval));

	i->time = us;
	i->day = 0;
	i->month = 0;
	return i;
}

/*
 * The rl_result row. Its type gained lim and win in 1.6, ticket in 1.7 and
 * next_at in 1.11; a database not yet updated has the columns of before,
 * and gets those.
 */
static void fill(int natts, const RlArgs *args, const RlOutcome *o,
				 const char *const *ticket, Datum *values, bool *nulls);

void
result_fill(int natts, const RlArgs *args, const RlOutcome *o, Datum *values, bool *nulls)
{
	fill(natts, args, o, NULL, values, nulls);
}

/*
 * With ticket set, *ticket (NULL or not) is the row's ticket: the one of
 * rl_attempt_all's whole call, so that the key's own is never made (two
 * HMACs a call for nothing).
 */
static void
fill(int natts, const RlArgs *args, const RlOutcome *o, const char *const *ticket,
	 Datum *values, bool *nulls)
{
	static const bool defaults[RESULT_MAX_COLUMNS] =
	{false, false, false, false, false, false, false, true, true};

	if (natts != 5 && natts != 7 && natts != 8 && natts != 9)
		elog(ERROR, "rl_result has %d columns, not 5, 7, 8 or 9", natts);
	memcpy(nulls, defaults, sizeof(defaults[0]) * natts);
	values[0] = BoolGetDatum(o->allowed);
	values[1] = Int64GetDatum(o->remaining);
	nulls[1] = nulls[3] = !o->known;
	values[2] = IntervalPGetDatum(interval_of_us(o->retry_us));
	values[3] = TimestampTzGetDatum(o->reset_at_us - UNIX_TO_PG_US);
	values[4] = CStringGetTextDatum(o->store);
	if (natts >= 7)
	{
		nulls[5] = nulls[6] = o->lim < 0;
		values[5] = Int64GetDatum(o->lim);
		values[6] = IntervalPGetDatum(interval_of_us(o->win_us));
	}
	if (natts >= 8)
	{
		const char *t = ticket ? *ticket : ticket_make(args, o);

		nulls[7] = t == NULL;
		if (t)
			values[7] = CStringGetTextDatum(t);
	}
	if (natts >= 9)
	{
		nulls[8] = !o->known || o->next_us < 0;
		values[8] = TimestampTzGetDatum(o->next_us - UNIX_TO_PG_US);
	}
}

Datum
result_datum(FunctionCallInfo fcinfo, const RlArgs *args, const RlOutcome *o)
{
	return result_datum_ticket(fcinfo, args, o, NULL);
}

Datum
result_datum_ticket(FunctionCallInfo fcinfo, const RlArgs *args, const RlOutcome *o,
					const char *const *ticket)
{
	TupleDesc	tupdesc = (TupleDesc) fcinfo->flinfo->fn_extra;
	Datum		values[RESULT_MAX_COLUMNS];
	bool		nulls[RESULT_MAX_COLUMNS];
	Oid			typid = InvalidOid;
	bool		pinned = false;
	HeapTuple	tuple;

	/*
	 * Called from a query, the row type is the call's result type, and the
	 * type cache keeps its descriptor: read there, not copied and blessed
	 * anew, which a prepared statement would pay at each execution (its
	 * FmgrInfo, fn_extra with it, is made again each time). It is pinned
	 * while the row is made: the ticket may read its secret's table, whose
	 * lock takes in invalidations, an ALTER TYPE's among them.
	 */
	if (tupdesc == NULL && fcinfo->flinfo->fn_expr != NULL)
		typid = get_fn_expr_rettype(fcinfo->flinfo);
	if (OidIsValid(typid) && typid != RECORDOID)
	{
		tupdesc = lookup_rowtype_tupdesc(typid, -1);
		pinned = true;
	}
	/* Otherwise it is looked up once per call site, not once per call. */
	else if (tupdesc == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(fcinfo->flinfo->fn_mcxt);

		if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
			elog(ERROR, "return type must be a row type");
		tupdesc = BlessTupleDesc(CreateTupleDescCopy(tupdesc));
		fcinfo->flinfo->fn_extra = tupdesc;
		MemoryContextSwitchTo(old);
	}
	fill(tupdesc->natts, args, o, ticket, values, nulls);
	tuple = heap_form_tuple(tupdesc, values, nulls);
	if (pinned)
		ReleaseTupleDesc(tupdesc);
	return HeapTupleGetDatum(tuple);
}

