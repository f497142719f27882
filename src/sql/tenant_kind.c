/*-------------------------------------------------------------------------
 *
 * tenant_kind.c
 *		Which canonical form a tenant's type takes, and the trim of char(n)
 *		padding: the part of tenant.c that is a pure function of its input.
 *
 * This file must not call into the backend or include postgres.h: only the
 * generated table of built-in function OIDs, which is plain macros. That
 * keeps it buildable without a server, for the fuzzers. Everything that
 * needs the catalog, an output function or the GUC machinery stays in
 * tenant.c.
 *
 *-------------------------------------------------------------------------
 */
#include <string.h>

#include "utils/fmgroids.h"

#include "tenant_kind.h"

TenantKind
tenant_kind(Oid outfunc, bool textout)
{
	switch (outfunc)
	{
		case F_TEXTOUT:
		case F_VARCHAROUT:
		case F_NAMEOUT:
		case F_BOOLOUT:
		case F_INT2OUT:
		case F_INT4OUT:
		case F_INT8OUT:
		case F_OIDOUT:
		case F_NUMERIC_OUT:
		case F_UUID_OUT:
		case F_CHAROUT:
		case F_ENUM_OUT:
			return TENANT_PLAIN;
		case F_BPCHAROUT:
			return TENANT_PADDED;
		default:
			/* an extension's type declared with the internal textout */
			return textout ? TENANT_PLAIN : TENANT_SETTINGS;
	}
}

char *
tenant_trim_padding(char *s)
{
	size_t		len = strlen(s);

	while (len > 0 && s[len - 1] == ' ')
		len--;
	s[len] = '\0';
	return s;
}
