/*
 * result.h
 *		The rl_result row a call returns.
 */
#ifndef SLIDEWIN_RESULT_H
#define SLIDEWIN_RESULT_H

#include "fmgr.h"

#include "limit.h"

/*
 * The rl_result row of a decided call, in the columns the database's
 * rl_result type has (5, 7 or 8: it grew in 1.6 and 1.7).
 */
#define RESULT_MAX_COLUMNS 9

/*
 * The same columns into values and nulls: the first natts of rl_result's
 * (5, 7, 8 or 9), for a row that holds them after columns of its own.
 */
extern void result_fill(int natts, const RlArgs *args, const RlOutcome *o,
						Datum *values, bool *nulls);

extern Datum result_datum(FunctionCallInfo fcinfo, const RlArgs *args,
						  const RlOutcome *o);
/*
 * The same with *ticket in the ticket column instead of the one o names
 * (rl_attempt_all's, naming every key's entry); ticket NULL: as above.
 */
extern Datum result_datum_ticket(FunctionCallInfo fcinfo, const RlArgs *args,
								 const RlOutcome *o, const char *const *ticket);

#endif							/* SLIDEWIN_RESULT_H */
