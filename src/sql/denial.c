/*-------------------------------------------------------------------------
 *
 * denial.c
 *		A result as HTTP header fields, for a program to read: the SQL
 *		function rl_headers, of one result or (1.12) of the rows of a call
 *		over several keys, one policy each, and the DETAIL of
 *		slidewin.error_style = json (which carries the same header fields).
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
#include "catalog/pg_type.h"
#include "common/base64.h"
#include "common/int.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/typcache.h"

#include "compat.h"
#include "denial.h"

PG_FUNCTION_INFO_V1(slidewin_headers);
PG_FUNCTION_INFO_V1(slidewin_headers_all);

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

/* The header fields of a result, at most six, in the order they are written. */
#define MAX_FIELDS 6

typedef struct HeaderFields
{
	int			n;
	const char *name[MAX_FIELDS];
	char	   *value[MAX_FIELDS];
} HeaderFields;

/* v in decimal, without a format string to parse */
static void
append_int64(StringInfo buf, int64 v)
{
	char		num[MAXINT8LEN + 1];

	appendBinaryStringInfo(buf, num, pg_lltoa(v, num));
}

static char *
int64_text(int64 v)
{
	char	   *num = palloc(MAXINT8LEN + 1);

	pg_lltoa(v, num);
	return num;
}

static void
field(HeaderFields *h, const char *name, char *value)
{
	Assert(h->n < MAX_FIELDS);
	h->name[h->n] = name;
	h->value[h->n++] = value;
}

/*
 * The header fields of n results, one policy each. items[i]: policy i's
 * name as a structured-field string, quotes included; pks[i]: ";pk=" and
 * its partition key as a structured-field byte sequence, or "".
 * RateLimit-Policy and RateLimit are lists of one member per policy (draft
 * -11 allows several); the X-RateLimit-* fields, which hold one number
 * each, and Retry-After describe one policy, the one that decided: when
 * the call was denied, the one with the longest wait (the call passes no
 * sooner than every policy lets it), else the one with the fewest units
 * left; the first of equals. With n = 1 this is rl_headers(r) as before.
 * can_retry false: no retry can pass, so there is no Retry-After.
 */
static void
headers_fields(HeaderFields *h, int n, char **items, char **pks, const RlOutcome *os,
			   bool can_retry, int64 now_us)
{
	int			d = 0;
	int64		retry_s;
	StringInfoData policy;
	StringInfoData state;
	const RlOutcome *o;

	for (int i = 1; i < n; i++)
	{
		if (can_retry ? os[i].retry_us > os[d].retry_us :
			os[i].known && (!os[d].known || os[i].remaining < os[d].remaining))
			d = i;
	}
	o = &os[d];
	retry_s = Max(ceil_div(o->retry_us, USECS_PER_SEC), 0);

	initStringInfo(&policy);
	initStringInfo(&state);
	for (int i = 0; i < n; i++)
	{
		if (os[i].lim >= 0)
		{
			if (policy.len > 0)
				appendStringInfoString(&policy, ", ");
			appendStringInfoString(&policy, items[i]);
			appendStringInfoString(&policy, ";q=");
			append_int64(&policy, os[i].lim);
			appendStringInfoString(&policy, ";w=");
			append_int64(&policy, ceil_div(os[i].win_us, USECS_PER_SEC));
			appendStringInfoString(&policy, pks[i]);
		}
		if (os[i].known)
		{
			if (state.len > 0)
				appendStringInfoString(&state, ", ");
			appendStringInfoString(&state, items[i]);
			appendStringInfoString(&state, ";r=");
			append_int64(&state, os[i].remaining);
			/* the effective window, when the store said when it ends */
			if (os[i].next_us >= 0)
			{
				int64		t_s = Max(ceil_div(os[i].next_us - now_us, USECS_PER_SEC), 0);

				/* no later than Retry-After, as the draft asks */
				if (can_retry)
					t_s = Min(t_s, retry_s);
				appendStringInfoString(&state, ";t=");
				append_int64(&state, t_s);
			}
			appendStringInfoString(&state, pks[i]);
		}
	}

	h->n = 0;
	if (policy.len > 0)
		field(h, "RateLimit-Policy", policy.data);
	if (o->lim >= 0)
		field(h, "X-RateLimit-Limit", int64_text(o->lim));
	if (state.len > 0)
		field(h, "RateLimit", state.data);
	if (o->known)
	{
		field(h, "X-RateLimit-Remaining", int64_text(o->remaining));
		field(h, "X-RateLimit-Reset",
			  int64_text(ceil_div(quota_back_us(o, can_retry, now_us), USECS_PER_SEC)));
	}
	if (can_retry)
		field(h, "Retry-After", int64_text(retry_s));
}

/* The fields as one JSON object's text, for the json style's DETAIL. */
static void
headers_text(StringInfo buf, const HeaderFields *h)
{
	appendStringInfoChar(buf, '{');
	for (int i = 0; i < h->n; i++)
	{
		if (i > 0)
			appendStringInfoChar(buf, ',');
		escape_json(buf, h->name[i]);
		appendStringInfoChar(buf, ':');
		escape_json(buf, h->value[i]);
	}
	appendStringInfoChar(buf, '}');
}

/*
 * The fields as jsonb, built as a value rather than written as text and
 * parsed back: the same object jsonb_in would make of headers_text's text
 * (its keys are put in jsonb's order by the same code), at a fraction of
 * the cost.
 */
static Datum
headers_jsonb(const HeaderFields *h)
{
	SlidewinJsonbBuilder b = {0};
	JsonbValue	v;

	slidewin_jsonb_push(&b, WJB_BEGIN_OBJECT, NULL);
	for (int i = 0; i < h->n; i++)
	{
		v.type = jbvString;
		v.val.string.val = (char *) h->name[i];
		v.val.string.len = strlen(h->name[i]);
		slidewin_jsonb_push(&b, WJB_KEY, &v);
		v.type = jbvString;
		v.val.string.val = h->value[i];
		v.val.string.len = strlen(h->value[i]);
		slidewin_jsonb_push(&b, WJB_VALUE, &v);
	}
	slidewin_jsonb_push(&b, WJB_END_OBJECT, NULL);
	return JsonbPGetDatum(JsonbValueToJsonb(slidewin_jsonb_result(&b)));
}

void
denial_headers(StringInfo buf, const RlOutcome *o, bool can_retry, int64 now_us)
{
	/* rl_headers' default name, no partition key */
	char	   *item = "\"default\"";
	char	   *pk = "";
	HeaderFields h;

	headers_fields(&h, 1, &item, &pk, o, can_retry, now_us);
	headers_text(buf, &h);
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

/*
 * The fields rl_headers reads, and their types: a row of rl_result has
 * them; any other row must too, or a field would be read as a type it is
 * not. next_at may be missing (a database not yet updated to 1.11).
 */
static const struct
{
	const char *name;
	Oid			type;
	bool		optional;
}			result_fields[] =
{
	{"allowed", BOOLOID, false},
	{"remaining", INT8OID, false},
	{"retry_after", INTERVALOID, false},
	{"reset_at", TIMESTAMPTZOID, false},
	{"lim", INT8OID, false},
	{"win", INTERVALOID, false},
	{"next_at", TIMESTAMPTZOID, true},
};

/* result_fields' indexes */
enum
{
	F_ALLOWED, F_REMAINING, F_RETRY_AFTER, F_RESET_AT, F_LIM, F_WIN, F_NEXT_AT, F_COUNT
};

/*
 * Where the fields of result_fields are in a row type: attribute numbers,
 * 0 for a field the type lacks.
 */
typedef struct ResultLayout
{
	Oid			typid;
	uint64		desc_id;		/* the type cache's tupDesc_identifier */
	TupleDesc	desc;
	AttrNumber	att[F_COUNT];
} ResultLayout;

/*
 * The layout of rl_result (or of the one named row type last read), for
 * the backend's life. fn_extra would not do: a prepared statement gets a
 * new one at each execution, and rl_headers is called once in each. The
 * type cache's identifier of the row type's descriptor tells when the
 * type has changed (ALTER TYPE, an extension update) and the layout must
 * be made again.
 */
static ResultLayout named_layout;

static void
layout_make(TupleDesc desc, ResultLayout *l)
{
	for (int f = 0; f < F_COUNT; f++)
	{
		l->att[f] = 0;
		for (int i = 0; i < desc->natts && l->att[f] == 0; i++)
			if (!TupleDescAttr(desc, i)->attisdropped &&
				strcmp(NameStr(TupleDescAttr(desc, i)->attname), result_fields[f].name) == 0)
				l->att[f] = i + 1;
	}
}

/*
 * The layout of r's row type: named_layout for a named type, else (an
 * anonymous record) one made in *scratch for this call.
 */
static const ResultLayout *
result_layout(HeapTupleHeader r, ResultLayout *scratch)
{
	Oid			typid = HeapTupleHeaderGetTypeId(r);
	int32		typmod = HeapTupleHeaderGetTypMod(r);
	TypeCacheEntry *tc;
	TupleDesc	desc;
	MemoryContext old;

	StaticAssertStmt(lengthof(result_fields) == F_COUNT, "result_fields and F_COUNT differ");
	if (typid != RECORDOID)
	{
		tc = lookup_type_cache(typid, TYPECACHE_TUPDESC);
		if (tc->tupDesc == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_WRONG_OBJECT_TYPE),
					 errmsg("type %s is not composite", format_type_be(typid))));
		if (named_layout.desc != NULL && named_layout.typid == typid &&
			named_layout.desc_id == tc->tupDesc_identifier)
			return &named_layout;
		if (named_layout.desc != NULL)
			FreeTupleDesc(named_layout.desc);
		named_layout.desc = NULL;
		old = MemoryContextSwitchTo(TopMemoryContext);
		desc = CreateTupleDescCopy(tc->tupDesc);
		MemoryContextSwitchTo(old);
		layout_make(desc, &named_layout);
		named_layout.typid = typid;
		named_layout.desc_id = tc->tupDesc_identifier;
		named_layout.desc = desc;
		return &named_layout;
	}
	desc = lookup_rowtype_tupdesc_copy(typid, typmod);
	layout_make(desc, scratch);
	scratch->typid = typid;
	scratch->desc_id = 0;
	scratch->desc = desc;
	return scratch;
}

/* A row of a result: its tuple and where its fields are. */
typedef struct ResultRow
{
	HeapTupleData tup;
	const ResultLayout *layout;
	ResultLayout scratch;
} ResultRow;

static void
result_row(HeapTupleHeader h, ResultRow *r)
{
	r->tup.t_len = HeapTupleHeaderGetDatumLength(h);
	ItemPointerSetInvalid(&r->tup.t_self);
	r->tup.t_tableOid = InvalidOid;
	r->tup.t_data = h;
	r->layout = result_layout(h, &r->scratch);
}

/* A field of r, or NULL-ness; 22004 naming it when it must be there. */
static Datum
result_field(const ResultRow *r, const char *arg, int f, bool required, bool *isnull)
{
	Datum		d;

	/* as GetAttributeByName says of a field the type lacks */
	if (r->layout->att[f] == 0)
		elog(ERROR, "attribute \"%s\" does not exist", result_fields[f].name);
	d = heap_getattr((HeapTuple) &r->tup, r->layout->att[f], r->layout->desc, isnull);
	if (*isnull && required)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("field \"%s\" of argument \"%s\" must not be null",
						result_fields[f].name, arg)));
	return d;
}

/*
 * An interval field of r as microseconds: finite, without months (no
 * result of slidewin has any), and at least min_us.
 */
static int64
result_interval_us(const Interval *iv, const char *arg, const char *field, int64 min_us)
{
	int64		us;

	if (iv->month != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("field \"%s\" of argument \"%s\" must not contain months", field, arg)));
	if (pg_mul_s64_overflow((int64) iv->day, USECS_PER_DAY, &us) ||
		pg_add_s64_overflow(us, iv->time, &us))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("field \"%s\" of argument \"%s\" is out of range", field, arg)));
	if (us < min_us)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 min_us > 0 ?
				 errmsg("field \"%s\" of argument \"%s\" must be positive", field, arg) :
				 errmsg("field \"%s\" of argument \"%s\" must not be negative", field, arg)));
	return us;
}

/* Two fields set together or not at all: 22004 naming the one left NULL. */
static void
result_pair(const char *arg, bool first_null, const char *first, bool second_null,
			const char *second)
{
	if (first_null == second_null)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
			 errmsg("field \"%s\" of argument \"%s\" must not be null when \"%s\" is set",
					first_null ? first : second, arg, first_null ? second : first),
			 errdetail("A result has both \"%s\" and \"%s\", or neither.", first, second)));
}

/*
 * next_at (1.11) as Unix microseconds, -1 when it is null or the row's type
 * has no such field (a database not yet updated); checked like reset_at.
 */
static int64
result_next_us(const ResultRow *r, const char *arg)
{
	bool		isnull;
	TimestampTz next_at;
	int64		us;

	if (r->layout->att[F_NEXT_AT] == 0)
		return -1;
	next_at = DatumGetTimestampTz(result_field(r, arg, F_NEXT_AT, false, &isnull));
	if (isnull)
		return -1;
	if (TIMESTAMP_NOT_FINITE(next_at))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("field \"next_at\" of argument \"%s\" must be finite", arg)));
	us = next_at + ((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY);
	if (us < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("field \"next_at\" of argument \"%s\" must not be before 1970", arg)));
	return us;
}

/*
 * The result as the store gave it, read back from a row that may have been
 * built by hand: every field used is checked here, so that no header value
 * is negative, empty or beyond what the others allow.
 */
static void
result_outcome(const ResultRow *r, const char *arg, RlOutcome *o)
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
	o->allowed = DatumGetBool(result_field(r, arg, F_ALLOWED, true, &isnull));
	o->retry_us = result_interval_us(DatumGetIntervalP(result_field(r, arg, F_RETRY_AFTER, true, &isnull)),
									 arg, "retry_after", 0);

	lim = result_field(r, arg, F_LIM, false, &lim_null);
	win = result_field(r, arg, F_WIN, false, &win_null);
	result_pair(arg, lim_null, "lim", win_null, "win");
	o->lim = -1;
	if (!lim_null)
	{
		o->lim = DatumGetInt64(lim);
		if (o->lim < 1)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("field \"lim\" of argument \"%s\" must be at least 1", arg)));
		o->win_us = result_interval_us(DatumGetIntervalP(win), arg, "win", 1);
	}

	rem = result_field(r, arg, F_REMAINING, false, &rem_null);
	reset = result_field(r, arg, F_RESET_AT, false, &reset_null);
	result_pair(arg, rem_null, "remaining", reset_null, "reset_at");
	o->known = !rem_null;
	if (!o->known)
		return;
	o->remaining = DatumGetInt64(rem);
	if (o->remaining < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("field \"remaining\" of argument \"%s\" must not be negative", arg)));
	if (o->lim >= 0 && o->remaining > o->lim)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("field \"remaining\" of argument \"%s\" must not be more than \"lim\"", arg),
				 errdetail("\"remaining\" is " INT64_FORMAT " and \"lim\" is " INT64_FORMAT ".",
						   o->remaining, o->lim)));
	o->next_us = result_next_us(r, arg);
	reset_at = DatumGetTimestampTz(reset);
	if (TIMESTAMP_NOT_FINITE(reset_at))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("field \"reset_at\" of argument \"%s\" must be finite", arg)));
	o->reset_at_us = reset_at + ((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY);
	if (o->reset_at_us < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("field \"reset_at\" of argument \"%s\" must not be before 1970", arg)));
}

static void
result_check_type(HeapTupleHeader r, const char *arg)
{
	TupleDesc	desc = lookup_rowtype_tupdesc(HeapTupleHeaderGetTypeId(r),
											  HeapTupleHeaderGetTypMod(r));

	for (int f = 0; f < lengthof(result_fields); f++)
	{
		Oid			type = InvalidOid;

		for (int i = 0; i < desc->natts; i++)
		{
			Form_pg_attribute att = TupleDescAttr(desc, i);

			if (!att->attisdropped && strcmp(NameStr(att->attname), result_fields[f].name) == 0)
				type = att->atttypid;
		}
		if (type == result_fields[f].type || (type == InvalidOid && result_fields[f].optional))
			continue;
		ReleaseTupleDesc(desc);
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" has no field \"%s\" of type %s", arg,
						result_fields[f].name, format_type_be(result_fields[f].type)),
				 errdetail("Each element is a row of rl_attempt_all_rows or an rl_result.")));
	}
	ReleaseTupleDesc(desc);
}

/*
 * A policy's name as a structured-field string, quotes included, appended
 * to item; arg names the argument in errors.
 */
static void
policy_item(const char *name, const char *arg, StringInfo item)
{
	if (name[0] == '\0' || strspn(name, " !\"#$%&'()*+,-./0123456789:;<=>?@"
								  "ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`"
								  "abcdefghijklmnopqrstuvwxyz{|}~") != strlen(name))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" must be one or more printable ASCII characters", arg),
				 errdetail("It becomes the policy's name, a structured-field string.")));
	appendStringInfoChar(item, '"');
	for (const char *c = name; *c; c++)
	{
		if (*c == '"' || *c == '\\')
			appendStringInfoChar(item, '\\');
		appendStringInfoChar(item, *c);
	}
	appendStringInfoChar(item, '"');
}

/* ";pk=" and the partition key as a structured-field byte sequence. */
static void
partition_key(bytea *key, const char *arg, StringInfo pk)
{
	int			len = VARSIZE_ANY_EXHDR(key);
	char		b64[PK_MAX_BYTES / 3 * 4 + 8];
	int			n;

	if (len > PK_MAX_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" must be at most %d bytes", arg, PK_MAX_BYTES),
				 errdetail("It is %zu bytes long.", (size_t) len)));
	/* standard base64 with padding, in one line, as draft -11's sf-binary */
	n = pg_b64_encode((const slidewin_b64_byte *) VARDATA_ANY(key), len, b64, sizeof(b64));
	if (n < 0)
		elog(ERROR, "could not encode a partition key");
	appendStringInfoString(pk, ";pk=:");
	appendBinaryStringInfo(pk, b64, n);
	appendStringInfoChar(pk, ':');
}

Datum
slidewin_headers(PG_FUNCTION_ARGS)
{
	RlOutcome	o;
	ResultRow	row;
	StringInfoData item;
	StringInfoData pk;
	HeaderFields h;
	char	   *item_data;
	char	   *pk_data;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"r\" must not be null")));
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"name\" must not be null")));
	initStringInfo(&item);
	policy_item(text_to_cstring(PG_GETARG_TEXT_PP(1)), "name", &item);
	result_row(PG_GETARG_HEAPTUPLEHEADER(0), &row);
	result_outcome(&row, "r", &o);

	/* rl_headers(r, name, pk): the partition key as a byte sequence */
	initStringInfo(&pk);
	if (PG_NARGS() > 2)
	{
		if (PG_ARGISNULL(2))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("argument \"pk\" must not be null"),
					 errhint("Call rl_headers(r, name) for header fields without a partition key.")));
		partition_key(PG_GETARG_BYTEA_PP(2), "pk", &pk);
	}

	item_data = item.data;
	pk_data = pk.data;
	headers_fields(&h, 1, &item_data, &pk_data, &o, !o.allowed, denial_now_us());
	PG_RETURN_DATUM(headers_jsonb(&h));
}

/* ---------------------------------------------------------------------
 * rl_headers(rows record[], names text[] [, pks bytea[]]) -> jsonb (1.12)
 *
 * The header fields of a call over several keys, one policy per key: rows
 * are rl_attempt_all_rows' rows (array_agg of them) or rl_results, names
 * the policies' names. The key column is never read: a policy's name is
 * what the caller chose, since the draft asks that nothing in the fields
 * reveal what the client should not learn, and a key often would.
 * ---------------------------------------------------------------------
 */

/* The elements of array argument argno, at most RL_MAX_KEYS; nulls[i] per element. */
static int
headers_array(FunctionCallInfo fcinfo, int argno, const char *arg, Datum **elems, bool **nulls)
{
	ArrayType  *a;
	int16		typlen;
	bool		typbyval;
	char		typalign;
	int			n;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"%s\" must not be null", arg),
				 argno == 2 ?
				 errhint("Call rl_headers(rows, names) for header fields without partition keys.") : 0));
	a = PG_GETARG_ARRAYTYPE_P(argno);
	if (ARR_NDIM(a) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" must be a one-dimensional array", arg)));
	get_typlenbyvalalign(ARR_ELEMTYPE(a), &typlen, &typbyval, &typalign);
	deconstruct_array(a, ARR_ELEMTYPE(a), typlen, typbyval, typalign, elems, nulls, &n);
	if (n < 1 || n > RL_MAX_KEYS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" must have 1 to %d elements", arg, RL_MAX_KEYS),
				 errdetail("It has %d.", n)));
	return n;
}

Datum
slidewin_headers_all(PG_FUNCTION_ARGS)
{
	Datum	   *rows;
	Datum	   *names;
	Datum	   *keys = NULL;
	bool	   *rows_null;
	bool	   *names_null;
	bool	   *keys_null = NULL;
	int			n;
	char	  **items;
	char	  **pks;
	RlOutcome  *os;
	bool		allowed = true;
	HeaderFields h;

	n = headers_array(fcinfo, 0, "rows", &rows, &rows_null);
	if (headers_array(fcinfo, 1, "names", &names, &names_null) != n)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("arguments \"rows\" and \"names\" must have the same length")));
	if (PG_NARGS() > 2 && headers_array(fcinfo, 2, "pks", &keys, &keys_null) != n)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("arguments \"rows\" and \"pks\" must have the same length")));

	items = palloc(n * sizeof(char *));
	pks = palloc(n * sizeof(char *));
	os = palloc(n * sizeof(RlOutcome));
	for (int i = 0; i < n; i++)
	{
		char	   *arg = psprintf("rows[%d]", i + 1);
		char	   *name;
		ResultRow	row;
		StringInfoData s;

		if (rows_null[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("argument \"%s\" must not be null", arg)));
		result_check_type(DatumGetHeapTupleHeader(rows[i]), arg);
		result_row(DatumGetHeapTupleHeader(rows[i]), &row);
		result_outcome(&row, arg, &os[i]);
		allowed = allowed && os[i].allowed;

		if (names_null[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("argument \"names[%d]\" must not be null", i + 1)));
		name = TextDatumGetCString(names[i]);
		initStringInfo(&s);
		policy_item(name, psprintf("names[%d]", i + 1), &s);
		items[i] = s.data;
		/* a client tells policies apart by name: each once */
		for (int j = 0; j < i; j++)
			if (strcmp(items[j], items[i]) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("argument \"names[%d]\" repeats \"names[%d]\"", i + 1, j + 1),
						 errdetail("Each policy needs a name of its own.")));

		/* a NULL element of pks: that policy has no partition key */
		initStringInfo(&s);
		if (keys != NULL && !keys_null[i])
			partition_key(DatumGetByteaPP(keys[i]), psprintf("pks[%d]", i + 1), &s);
		pks[i] = s.data;
	}

	/* the call was admitted only if every key was; else Retry-After is due */
	headers_fields(&h, n, items, pks, os, !allowed, denial_now_us());
	PG_RETURN_DATUM(headers_jsonb(&h));
}
