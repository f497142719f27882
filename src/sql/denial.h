/*
 * denial.h
 *		A denial as JSON (denial.c): the header fields rl_headers gives, and
 *		the DETAIL of slidewin.error_style = json.
 */
#ifndef SLIDEWIN_DENIAL_H
#define SLIDEWIN_DENIAL_H

#include "lib/stringinfo.h"

#include "limit.h"

/* The clock a denial is read on, as Unix microseconds: the test clock if set. */
extern int64 denial_now_us(void);

/*
 * The JSON object rl_headers(r) returns for the rl_result of outcome o, under
 * the policy name "default", appended to buf. can_retry false: no retry can
 * pass (the cost is above the limit), so there is no Retry-After.
 */
extern void denial_headers(StringInfo buf, const RlOutcome *o, bool can_retry, int64 now_us);

/*
 * The json style's DETAIL: limit, remaining, used, cost, retry_after_ms,
 * reset_after_ms, window_ms, algorithm and headers, with null for what no
 * store said; and key, when key is not NULL.
 */
extern void denial_detail_json(StringInfo buf, const RlArgs *args, const RlOutcome *o,
							   bool can_retry, int64 now_us, const char *key);

#endif
