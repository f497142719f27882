/*
 * tenant.h
 *		The canonical text of a tenant value: one spelling per value,
 *		whatever the session's settings, for rl_trigger's keys.
 */
#ifndef SLIDEWIN_TENANT_H
#define SLIDEWIN_TENANT_H

#include "fmgr.h"

#include "tenant_kind.h"

typedef struct TenantFormat
{
	TenantKind	kind;
	FmgrInfo	out;
} TenantFormat;

/* Look up the output function of typid (a domain is formatted as its base). */
extern void tenant_format_init(TenantFormat *fmt, Oid typid);

/*
 * Pin the fixed settings in a new GUC nest level, and pop it. Only needed
 * for TENANT_SETTINGS; an ERROR in between is undone by (sub)transaction
 * abort, like any GUC nest level.
 */
extern int	tenant_settings_pin(void);
extern void tenant_settings_unpin(int level);

/*
 * The canonical text of a non-null value, palloc'd. For TENANT_SETTINGS the
 * caller holds tenant_settings_pin(), so that a batch pins once.
 */
extern char *tenant_text(const TenantFormat *fmt, Datum value);

#endif
