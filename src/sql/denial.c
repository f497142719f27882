/*-------------------------------------------------------------------------
 *
 * denial.c
 *		A result as HTTP header fields, for a program to read: the SQL
 *		function rl_headers, and the DETAIL of slidewin.error_style = json
 *		(which carries the same header fields).
 *
 * One function computes the header fields for both, so that a denial's
 * JSON and rl_headers of the same result cannot drift apart; the
 * regression test error_style still compares them on every algorithm.
 * Raising a denial must not run SQL, so enforce.c calls the C code, not the
 * SQL function.
 *
 * Numbers nobody knows are null, never invented: with no store's answer
 * (the allow and deny policies), remaining, used and the reset are null;
 * when no retry can pass, so is retry_after_ms.
 *
 * t in RateLimit is the effective window of
 * draft-ietf-httpapi-ratelimit-headers-11: the seconds until the window next
 * frees a unit (next_at), within which the caller can use no more than r.
 * On a denial it is no later than Retry-After, as the draft asks.
 *
 * On a denial the quota is back no sooner than the call could pass:
 * X-RateLimit-Reset and reset_after_ms count to the later of reset_at (the
 * window empty) and the end of retry_after. They are the same moment for
 * every algorithm but on a key blocked by rl_block, whose window may be
 * empty (reset_at now) while every call is denied until the block ends.
 *
 * rl_headers takes a row that anybody may build by hand, so it checks every
 * field it reads and refuses a bad one naming it; nothing else here raises.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "common/int.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
#include "utils/typcache.h"

#include "denial.h"

PG_FUNCTION_INFO_V1(slidewin_headers);

/* The longest partition key rl_headers takes, in bytes. */
#define PK_MAX_BYTES 64

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

/*
 * When the quota is back, as Unix microseconds: reset_at, or on a denial
 * the end of its retry_after if that is later (a blocked key).
 */
static int64
quota_back_us(const RlOutcome *o, bool can_retry, int64 now_us)
{
	if (!o->allowed && can_retry && o->retry_us > o->reset_at_us - now_us)
		return now_us + o->retry_us;
	return o->reset_at_us;
}

/*
 * item: the policy's name as a structured-field string, quotes included;
 * pk: ";pk=" and the partition key as a structured-field byte sequence, or
 * "".
 */
static void
headers_named(StringInfo buf, const char *item, const char *pk, const RlOutcome *o,
			  bool can_retry, int64 now_us)
{
	bool		first = true;
	int64		retry_s = Max(ceil_div(o->retry_us, USECS_PER_SEC), 0);

	appendStringInfoChar(buf, '{');
	if (o->lim >= 0)
	{
		header(buf, &first, "RateLimit-Policy",
			   psprintf("%s;q=" INT64_FORMAT ";w=" INT64_FORMAT "%s",
						item, o->lim, ceil_div(o->win_us, USECS_PER_SEC), pk));
		header(buf, &first, "X-RateLimit-Limit", psprintf(INT64_FORMAT, o->lim));
	}
	if (o->known)
	{
		int64		back_us = quota_back_us(o, can_retry, now_us);
		char	   *t = "";

		/* the effective window, when the store said when it ends */
		if (o->next_us >= 0)
		{
			int64		t_s = Max(ceil_div(o->next_us - now_us, USECS_PER_SEC), 0);

			if (can_retry)
				t_s = Min(t_s, retry_s);
			t = psprintf(";t=" INT64_FORMAT, t_s);
		}
		header(buf, &first, "RateLimit",
			   psprintf("%s;r=" INT64_FORMAT "%s%s", item, o->remaining, t, pk));
		header(buf, &first, "X-RateLimit-Remaining", psprintf(INT64_FORMAT, o->remaining));
		header(buf, &first, "X-RateLimit-Reset",
			   psprintf(INT64_FORMAT, ceil_div(back_us, USECS_PER_SEC)));
	}
	if (can_retry)
		header(buf, &first, "Retry-After", psprintf(INT64_FORMAT, retry_s));
	appendStringInfoChar(buf, '}');
}

void
denial_headers(StringInfo buf, const RlOutcome *o, bool can_retry, int64 now_us)
{
	/* rl_headers' default name, no partition key */
	headers_named(buf, "\"default\"", "", o, can_retry, now_us);
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
				   Max(ceil_div(quota_back_us(o, can_retry, now_us) - now_us, 1000), 0));
	number_or_null(buf, "window_ms", o->lim >= 0, ceil_div(o->win_us, 1000));
	appendStringInfoString(buf, ",\"algorithm\":");
	escape_json(buf, limit_algorithm_name(args->algorithm));
	appendStringInfo(buf, ",\"blocked\":%s", o->blocked ? "true" : "false");
	appendStringInfoString(buf, ",\"headers\":");
	denial_headers(buf, o, can_retry, now_us);
	if (key != NULL)
	{
		appendStringInfoString(buf, ",\"key\":");
		escape_json(buf, key);
	}
	appendStringInfoChar(buf, '}');
}

/* ---------------------------------------------------------------------
 * rl_headers(r rl_result, name text DEFAULT 'default' [, pk bytea]) -> jsonb
 * ---------------------------------------------------------------------
 */

/* A field of r, or NULL-ness; 22004 naming it when it must be there. */
static Datum
result_field(HeapTupleHeader r, const char *field, bool required, bool *isnull)
{
	Datum		d = GetAttributeByName(r, field, isnull);

	if (*isnull && required)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("field \"%s\" of argument \"r\" must not be null", field)));
	return d;
}

/*
 * An interval field of r as microseconds: finite, without months (no
 * result of slidewin has any), and at least min_us.
 */
static int64
result_interval_us(const Interval *iv, const char *field, int64 min_us)
{
	int64		us;

	if (iv->month != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("field \"%s\" of argument \"r\" must not contain months", field)));
	if (pg_mul_s64_overflow((int64) iv->day, USECS_PER_DAY, &us) ||
		pg_add_s64_overflow(us, iv->time, &us))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("field \"%s\" of argument \"r\" is out of range", field)));
	if (us < min_us)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 min_us > 0 ?
				 errmsg("field \"%s\" of argument \"r\" must be positive", field) :
				 errmsg("field \"%s\" of argument \"r\" must not be negative", field)));
	return us;
}

/* Two fields set together or not at all: 22004 naming the one left NULL. */
static void
result_pair(bool first_null, const char *first, bool second_null, const char *second)
{
	if (first_null == second_null)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
			 errmsg("field \"%s\" of argument \"r\" must not be null when \"%s\" is set",
					first_null ? first : second, first_null ? second : first),
			 errdetail("A result has both \"%s\" and \"%s\", or neither.", first, second)));
}

/*
 * next_at (1.11) as Unix microseconds, -1 when it is null or the row's type
 * has no such field (a database not yet updated); checked like reset_at.
 */
static int64
result_next_us(HeapTupleHeader r)
{
	TupleDesc	desc = lookup_rowtype_tupdesc(HeapTupleHeaderGetTypeId(r),
											  HeapTupleHeaderGetTypMod(r));
	bool		has = false;
	bool		isnull;
	TimestampTz next_at;
	int64		us;

	for (int i = 0; i < desc->natts && !has; i++)
		has = !TupleDescAttr(desc, i)->attisdropped &&
			strcmp(NameStr(TupleDescAttr(desc, i)->attname), "next_at") == 0;
	ReleaseTupleDesc(desc);
	if (!has)
		return -1;
	next_at = DatumGetTimestampTz(result_field(r, "next_at", false, &isnull));
	if (isnull)
		return -1;
	if (TIMESTAMP_NOT_FINITE(next_at))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("field \"next_at\" of argument \"r\" must be finite")));
	us = next_at + ((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY);
	if (us < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("field \"next_at\" of argument \"r\" must not be before 1970")));
	return us;
}

/*
 * The result as the store gave it, read back from a row that may have been
 * built by hand: every field used is checked here, so that no header value
 * is negative, empty or beyond what the others allow.
 */
static void
result_outcome(HeapTupleHeader r, RlOutcome *o)
{
	bool		lim_null;
	bool		win_null;
	bool		rem_null;
	bool		reset_null;
	bool		isnull;
	Datum		lim;
	Datum		win;
	Datum		rem;
	Datum		reset;
	TimestampTz reset_at;

	memset(o, 0, sizeof(*o));
	o->allowed = DatumGetBool(result_field(r, "allowed", true, &isnull));
	o->retry_us = result_interval_us(DatumGetIntervalP(result_field(r, "retry_after", true, &isnull)),
									 "retry_after", 0);

	lim = result_field(r, "lim", false, &lim_null);
	win = result_field(r, "win", false, &win_null);
	result_pair(lim_null, "lim", win_null, "win");
	o->lim = -1;
	if (!lim_null)
	{
		o->lim = DatumGetInt64(lim);
		if (o->lim < 1)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("field \"lim\" of argument \"r\" must be at least 1")));
		o->win_us = result_interval_us(DatumGetIntervalP(win), "win", 1);
	}

	rem = result_field(r, "remaining", false, &rem_null);
	reset = result_field(r, "reset_at", false, &reset_null);
	result_pair(rem_null, "remaining", reset_null, "reset_at");
	o->known = !rem_null;
	if (!o->known)
		return;
	o->remaining = DatumGetInt64(rem);
	if (o->remaining < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("field \"remaining\" of argument \"r\" must not be negative")));
	if (o->lim >= 0 && o->remaining > o->lim)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("field \"remaining\" of argument \"r\" must not be more than \"lim\""),
				 errdetail("\"remaining\" is " INT64_FORMAT " and \"lim\" is " INT64_FORMAT ".",
						   o->remaining, o->lim)));
	o->next_us = result_next_us(r);
	reset_at = DatumGetTimestampTz(reset);
	if (TIMESTAMP_NOT_FINITE(reset_at))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("field \"reset_at\" of argument \"r\" must be finite")));
	o->reset_at_us = reset_at + ((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY);
	if (o->reset_at_us < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("field \"reset_at\" of argument \"r\" must not be before 1970")));
}

Datum
slidewin_headers(PG_FUNCTION_ARGS)
{
	RlOutcome	o;
	char	   *name;
	StringInfoData item;
	StringInfoData pk;
	StringInfoData buf;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"r\" must not be null")));
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"name\" must not be null")));
	name = text_to_cstring(PG_GETARG_TEXT_PP(1));
	if (name[0] == '\0' || strspn(name, " !\"#$%&'()*+,-./0123456789:;<=>?@"
								  "ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`"
								  "abcdefghijklmnopqrstuvwxyz{|}~") != strlen(name))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"name\" must be one or more printable ASCII characters"),
				 errdetail("It becomes the policy's name, a structured-field string.")));
	result_outcome(PG_GETARG_HEAPTUPLEHEADER(0), &o);

	initStringInfo(&item);
	appendStringInfoChar(&item, '"');
	for (const char *c = name; *c; c++)
	{
		if (*c == '"' || *c == '\\')
			appendStringInfoChar(&item, '\\');
		appendStringInfoChar(&item, *c);
	}
	appendStringInfoChar(&item, '"');

	/* rl_headers(r, name, pk): the partition key as a byte sequence */
	initStringInfo(&pk);
	if (PG_NARGS() > 2)
	{
		bytea	   *key;
		char	   *b64;

		if (PG_ARGISNULL(2))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("argument \"pk\" must not be null"),
					 errhint("Call rl_headers(r, name) for header fields without a partition key.")));
		key = PG_GETARG_BYTEA_PP(2);
		if (VARSIZE_ANY_EXHDR(key) > PK_MAX_BYTES)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("argument \"pk\" must be at most %d bytes", PK_MAX_BYTES),
					 errdetail("It is %zu bytes long.", (size_t) VARSIZE_ANY_EXHDR(key))));
		b64 = TextDatumGetCString(DirectFunctionCall2(binary_encode, PointerGetDatum(key),
													  CStringGetTextDatum("base64")));
		appendStringInfoString(&pk, ";pk=:");
		for (const char *c = b64; *c; c++)
			if (*c != '\n')
				appendStringInfoChar(&pk, *c);
		appendStringInfoChar(&pk, ':');
	}

	initStringInfo(&buf);
	headers_named(&buf, item.data, pk.data, &o, !o.allowed, denial_now_us());
	PG_RETURN_DATUM(DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data)));
}
