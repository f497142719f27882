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
extern Datum result_datum(FunctionCallInfo fcinfo, const RlArgs *args,
						  const RlOutcome *o);

#endif							/* SLIDEWIN_RESULT_H */
