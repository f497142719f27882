/*-------------------------------------------------------------------------
 *
 * denial.c
 *		A denial as JSON, for a program to read: the HTTP header fields that
 *		rl_headers (sql/slidewin--1.5--1.6.sql) computes from an rl_result,
 *		and the DETAIL of slidewin.error_style = json.
 *
 * The header fields are computed here as rl_headers computes them, value
 * for value (ceilings, the floor at 0, the "default" policy name), rather
 * than by calling the SQL function: raising an error must not run SQL. The
 * regression test error_style compares the two on every algorithm, so they
 * cannot drift apart. Nothing here decides anything or raises; enforce.c
 * raises.
 *
 * Numbers nobody knows are null, never invented: with no store's answer
 * (the allow and deny policies), remaining, used and the reset are null;
 * when no retry can pass, so is retry_after_ms.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/json.h"
#include "utils/timestamp.h"

#include "denial.h"

/* a / b rounded up, for b > 0 (C division truncates towards zero). */
static int64
ceil_div(int64 a, int64 b)
{
	return a / b + (a % b > 0 ? 1 : 0);
}

int64
denial_now_us(void)
{
	int64		now_us;

	if (limit_test_clock(&now_us))
		return now_us;
	return GetCurrentTimestamp() +
		((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY);
}

static void
header(StringInfo buf, bool *first, const char *name, const char *value)
{
	if (!*first)
		appendStringInfoChar(buf, ',');
	*first = false;
	escape_json(buf, name);
	appendStringInfoChar(buf, ':');
	escape_json(buf, value);
}

void
denial_headers(StringInfo buf, const RlOutcome *o, bool can_retry, int64 now_us)
{
	/* rl_headers' default name, a structured-field string */
	const char *item = "\"default\"";
	bool		first = true;

	appendStringInfoChar(buf, '{');
	if (o->lim >= 0)
	{
		header(buf, &first, "RateLimit-Policy",
			   psprintf("%s;q=" INT64_FORMAT ";w=" INT64_FORMAT,
						item, o->lim, ceil_div(o->win_us, USECS_PER_SEC)));
		header(buf, &first, "X-RateLimit-Limit", psprintf(INT64_FORMAT, o->lim));
	}
	if (o->known)
	{
		header(buf, &first, "RateLimit",
			   psprintf("%s;r=" INT64_FORMAT ";t=" INT64_FORMAT, item, o->remaining,
						Max(ceil_div(o->reset_at_us - now_us, USECS_PER_SEC), 0)));
		header(buf, &first, "X-RateLimit-Remaining", psprintf(INT64_FORMAT, o->remaining));
		header(buf, &first, "X-RateLimit-Reset",
			   psprintf(INT64_FORMAT, ceil_div(o->reset_at_us, USECS_PER_SEC)));
	}
	if (can_retry)
		header(buf, &first, "Retry-After",
			   psprintf(INT64_FORMAT, Max(ceil_div(o->retry_us, USECS_PER_SEC), 0)));
	appendStringInfoChar(buf, '}');
}

static void
number_or_null(StringInfo buf, const char *name, bool known, int64 value)
{
	appendStringInfo(buf, ",\"%s\":", name);
	if (known)
		appendStringInfo(buf, INT64_FORMAT, value);
	else
		appendStringInfoString(buf, "null");
}

void
denial_detail_json(StringInfo buf, const RlArgs *args, const RlOutcome *o,
				   bool can_retry, int64 now_us, const char *key)
{
	appendStringInfoString(buf, "{\"limit\":");
	if (o->lim >= 0)
		appendStringInfo(buf, INT64_FORMAT, o->lim);
	else
		appendStringInfoString(buf, "null");
	number_or_null(buf, "remaining", o->known, o->remaining);
	number_or_null(buf, "used", o->known, o->used);
	number_or_null(buf, "cost", true, args->cost);
	number_or_null(buf, "retry_after_ms", can_retry, Max(ceil_div(o->retry_us, 1000), 0));
	number_or_null(buf, "reset_after_ms", o->known,
				   Max(ceil_div(o->reset_at_us - now_us, 1000), 0));
	number_or_null(buf, "window_ms", o->lim >= 0, ceil_div(o->win_us, 1000));
	appendStringInfoString(buf, ",\"algorithm\":");
	escape_json(buf, limit_algorithm_name(args->algorithm));
	appendStringInfoString(buf, ",\"headers\":");
	denial_headers(buf, o, can_retry, now_us);
	if (key != NULL)
	{
		appendStringInfoString(buf, ",\"key\":");
		escape_json(buf, key);
	}
	appendStringInfoChar(buf, '}');
}
