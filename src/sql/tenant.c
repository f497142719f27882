/*-------------------------------------------------------------------------
 *
 * tenant.c
 *		The canonical text of a tenant value, which names the tenant's quota
 *		in rl_trigger's keys (<qualified table>:<text>).
 *
 * The same tenant must name the same key whoever writes the row, through a
 * row trigger or a statement trigger, under any session settings. A type's
 * output function alone does not give that: a date, a timestamptz, a float
 * or a bytea prints differently under DateStyle, TimeZone,
 * extra_float_digits or bytea_output, which any session may change, and a
 * new spelling would be a new key with a fresh quota. So, by the type's
 * output function (a domain takes its base type's):
 *
 *   - text, varchar, name, and types that print with textout (citext):
 *     the string itself, as rl_trigger always used;
 *   - char(n): the string without its trailing spaces, which char(n) does
 *     not count as part of the value;
 *   - boolean ("t" or "f", as boolout prints it), smallint, integer,
 *     bigint, oid, numeric, uuid, "char" and enums: the output function,
 *     which reads no setting;
 *   - every other type (dates, times, intervals, floats, money, bytea,
 *     network types, ranges, arrays, composites, ...): the output function
 *     under fixed_settings below. Where a fresh cluster has a default, the
 *     fixed value is that default, so most existing keys keep their name.
 *
 * Text rather than the type's binary send function, hex-encoded: the keys
 * stay readable and can be built in SQL for rl_peek; send functions of
 * arrays, composites and ranges embed type OIDs, which change with a dump
 * and restore; and text keeps the keys that text and integer tenants have
 * always had.
 *
 * This file knows nothing of triggers, keys or Redis. tenant_kind() and
 * tenant_trim_padding() are pure and live in tenant_kind.c, which needs no
 * server; the rest needs one for the catalog, the output functions and the
 * GUC machinery.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"

#include "tenant.h"

/*
 * Every setting that a core output function reads. DateStyle's second part
 * only orders input fields; MDY is the default. search_path decides whether
 * reg* types print qualified names.
 */
static const struct
{
	const char *name;
	const char *value;
}			fixed_settings[] = {
	{"DateStyle", "ISO, MDY"},
	{"IntervalStyle", "postgres"},
	{"TimeZone", "UTC"},
	{"extra_float_digits", "1"},
	{"bytea_output", "hex"},
	{"lc_monetary", "C"},
	{"search_path", "pg_catalog"},
};

void
tenant_format_init(TenantFormat *fmt, Oid typid)
{
	Oid			outfunc;
	bool		varlena;

	getTypeOutputInfo(typid, &outfunc, &varlena);
	fmgr_info(outfunc, &fmt->out);
	fmt->kind = tenant_kind(outfunc, fmt->out.fn_addr == textout);
}

int
tenant_settings_pin(void)
{
	int			level = NewGUCNestLevel();

	for (int i = 0; i < lengthof(fixed_settings); i++)
		(void) set_config_option(fixed_settings[i].name, fixed_settings[i].value,
								 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
								 true, 0, false);
	return level;
}

void
tenant_settings_unpin(int level)
{
	AtEOXact_GUC(true, level);
}

char *
tenant_text(const TenantFormat *fmt, Datum value)
{
	char	   *s = OutputFunctionCall((FmgrInfo *) &fmt->out, value);

	if (fmt->kind == TENANT_PADDED)
		tenant_trim_padding(s);
	return s;
}
