/*
 * tenant_kind.h
 *		The pure part of a tenant's canonical text (see tenant.c): which form
 *		a type's text takes, and the trim of char(n) padding. No backend
 *		function and no server: the fuzzers build it on its own.
 */
#ifndef SLIDEWIN_TENANT_KIND_H
#define SLIDEWIN_TENANT_KIND_H

#include <stdbool.h>

#include "postgres_ext.h"

typedef enum TenantKind
{
	TENANT_PLAIN,				/* output function reads no setting */
	TENANT_PADDED,				/* char(n): output without trailing spaces */
	TENANT_SETTINGS				/* output function under fixed settings */
} TenantKind;

/*
 * Which form a type takes, from its output function's OID; textout says
 * whether that function is the internal textout (an extension's type such
 * as citext declares its own function over it).
 */
extern TenantKind tenant_kind(Oid outfunc, bool textout);

/* Drop the trailing spaces of s in place; returns s. */
extern char *tenant_trim_padding(char *s);

#endif
