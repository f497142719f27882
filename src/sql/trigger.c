/*-------------------------------------------------------------------------
 *
 * trigger.c
 *		rl_trigger(): quotas charged by the rows a statement writes.
 *
 *   CREATE TRIGGER ... FOR EACH ROW EXECUTE FUNCTION
 *       rl_trigger(tenant_column, lim, win [, cost [, option ...]])
 *
 * The key is the table's qualified name, a colon, and the tenant column's
 * value in its canonical text (tenant.c), the same for row and statement
 * triggers and under any session settings: the rows decide whose quota
 * they draw from, not the writer or the writer's DateStyle. (Any
 * role that may call rl_attempt can still name the same key; revoke the
 * rl_* functions from PUBLIC where that matters.) cost is a constant or the name of an integer
 * column. Options: refund_on_abort[=on|off], on_redis_error=<policy>,
 * algorithm=<name>.
 *
 * Row level: one charge per row (the new row for INSERT and UPDATE, the old
 * one for DELETE). Statement level, with a transition table: one charge per
 * distinct tenant (distinct canonical text), of the statement's rows (or the
 * sum of their cost column), all or nothing: if one tenant is denied, the
 * units already charged to the others in this statement are given back
 * before the error.
 *
 * Argument errors surface at the first firing, naming the trigger.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "common/hashfn.h"
#include "common/int.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "enforce.h"
#include "settings.h"
#include "switch.h"
#include "tenant.h"

PG_FUNCTION_INFO_V1(slidewin_trigger);

typedef struct TrigConf
{
	const char *trigname;
	const char *relname;		/* qualified, quoted as needed */
	const char *tenant_col;
	int			tenant_attno;
	RlArgs		limits;			/* lim and win_us */
	int64		cost_const;		/* when cost_col is NULL */
	const char *cost_col;
	int			cost_attno;
	int			policy;
	bool		refund;
} TrigConf;

static void
trigger_context(void *arg)
{
	const TrigConf *c = (const TrigConf *) arg;

	errcontext("rl_trigger: trigger \"%s\" on table %s", c->trigname, c->relname);
}

static int
column_of(Relation rel, const TrigConf *c, const char *name, const char *what, bool integer)
{
	TupleDesc	desc = RelationGetDescr(rel);
	int			attno = SPI_fnumber(desc, name);
	Oid			type;

	if (attno == SPI_ERROR_NOATTRIBUTE || attno <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("trigger \"%s\" names %s column \"%s\", which table %s does not have",
						c->trigname, what, name, c->relname)));
	type = TupleDescAttr(desc, attno - 1)->atttypid;
	if (integer && type != INT2OID && type != INT4OID && type != INT8OID)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("trigger \"%s\": cost column \"%s\" must be smallint, integer or bigint",
						c->trigname, name)));
	return attno;
}

static bool
parse_int64(const char *s, int64 *v)
{
	char	   *end;

	errno = 0;
	*v = strtoi64(s, &end, 10);
	return errno == 0 && end != s && *end == '\0';
}

static void
parse_options(TrigConf *c, int nargs, char **args)
{
	for (int i = 4; i < nargs; i++)
	{
		const char *opt = args[i];

		if (strcmp(opt, "refund_on_abort") == 0 || strcmp(opt, "refund_on_abort=on") == 0)
			c->refund = true;
		else if (strcmp(opt, "refund_on_abort=off") == 0)
			c->refund = false;
		else if (strncmp(opt, "on_redis_error=", 15) == 0)
			c->policy = policy_from_name(opt + 15, "on_redis_error");
		else if (strncmp(opt, "algorithm=", 10) == 0)
			c->limits.algorithm = limit_algorithm(opt + 10);
		else
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("trigger \"%s\": unknown option \"%s\"", c->trigname, opt),
					 errhint("Options are refund_on_abort[=on|off], on_redis_error=fallback|allow|deny|error and algorithm=sliding_log|sliding_counter|fixed_window|token_bucket.")));
	}
}

static void
parse_conf(TriggerData *td, TrigConf *c)
{
	Trigger    *tg = td->tg_trigger;
	Relation	rel = td->tg_relation;
	char	  **args = tg->tgargs;
	int64		lim;

	if (tg->tgnargs < 3)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("trigger \"%s\": rl_trigger needs at least 3 arguments, got %d",
						c->trigname, tg->tgnargs),
				 errhint("Use rl_trigger('tenant_column', 'limit', 'window' [, 'cost' [, 'option' ...]]).")));

	c->tenant_col = args[0];
	c->tenant_attno = column_of(rel, c, args[0], "tenant", false);

	if (!parse_int64(args[1], &lim))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("trigger \"%s\": limit \"%s\" is not an integer", c->trigname, args[1])));
	limit_set_lim(lim, "lim", &c->limits);
	limit_set_win(DatumGetIntervalP(DirectFunctionCall3(interval_in,
														CStringGetDatum(args[2]),
														ObjectIdGetDatum(InvalidOid),
														Int32GetDatum(-1))),
				  "win", &c->limits);

	c->cost_const = 1;
	c->cost_col = NULL;
	if (tg->tgnargs >= 4)
	{
		if (parse_int64(args[3], &c->cost_const))
			limit_set_cost(c->cost_const, &c->limits);
		else
		{
			c->cost_col = args[3];
			c->cost_attno = column_of(rel, c, args[3], "cost", true);
		}
	}
	c->policy = policy_from_name(NULL, "on_redis_error");
	c->refund = slidewin_refund_on_abort;
	parse_options(c, tg->tgnargs, args);
}

static RlArgs
tenant_args(const TrigConf *c, const char *tenant, int64 cost)
{
	RlArgs		a = c->limits;
	char	   *key = psprintf("%s:%s", c->relname, tenant);

	limit_set_key(key, strlen(key), &a);
	a.cost = cost;
	a.force = false;
	return a;
}

static void
null_tenant(const TrigConf *c)
{
	ereport(ERROR,
			(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
			 errmsg("trigger \"%s\": tenant column \"%s\" is null", c->trigname, c->tenant_col),
			 errdetail("Every row charged to a quota must name its tenant.")));
}

/* The cost of one row: the constant, or the row's cost column. */
static int64
row_cost(const TrigConf *c, Datum d, bool isnull, Oid type)
{
	if (c->cost_col == NULL)
		return c->cost_const;
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("trigger \"%s\": cost column \"%s\" is null", c->trigname, c->cost_col)));
	return type == INT2OID ? DatumGetInt16(d) :
		type == INT4OID ? DatumGetInt32(d) : DatumGetInt64(d);
}

static void
fire_row(TriggerData *td, const TrigConf *c, HeapTuple tuple)
{
	TupleDesc	desc = RelationGetDescr(td->tg_relation);
	TenantFormat fmt;
	Datum		d;
	bool		isnull;
	char	   *tenant;
	int64		cost = c->cost_const;
	RlArgs		a;
	RlOutcome	o;

	d = heap_getattr(tuple, c->tenant_attno, desc, &isnull);
	if (isnull)
		null_tenant(c);
	tenant_format_init(&fmt, TupleDescAttr(desc, c->tenant_attno - 1)->atttypid);
	if (fmt.kind == TENANT_SETTINGS)
	{
		int			level = tenant_settings_pin();

		tenant = tenant_text(&fmt, d);
		tenant_settings_unpin(level);
	}
	else
		tenant = tenant_text(&fmt, d);

	if (c->cost_col)
	{
		Datum		cd = heap_getattr(tuple, c->cost_attno, desc, &isnull);

		cost = row_cost(c, cd, isnull, TupleDescAttr(desc, c->cost_attno - 1)->atttypid);
	}
	a = tenant_args(c, tenant, 1);
	limit_set_cost(cost, &a);
	enforce_charge(&a, c->policy, c->refund, &o);
	if (!o.allowed)
		enforce_raise_denied(&a, &o);
}

/* One distinct tenant of a statement, keyed by its canonical text. */
typedef struct TenantCharge
{
	const char *tenant;
	int64		cost;
	uint32		hash;
	char		status;
} TenantCharge;

#define SH_PREFIX		tenants
#define SH_ELEMENT_TYPE TenantCharge
#define SH_KEY_TYPE		const char *
#define SH_KEY			tenant
#define SH_HASH_KEY(tb, key) hash_bytes((const unsigned char *) (key), strlen(key))
#define SH_EQUAL(tb, a, b) (strcmp((a), (b)) == 0)
#define SH_STORE_HASH
#define SH_GET_HASH(tb, a) ((a)->hash)
#define SH_SCOPE		static inline
#define SH_DECLARE
#define SH_DEFINE
#include "lib/simplehash.h"

static int
charge_cmp(const void *a, const void *b)
{
	return strcmp(((const TenantCharge *) a)->tenant,
				  ((const TenantCharge *) b)->tenant);
}

/*
 * The statement's tenants and their units, read from the transition table's
 * tuplestore and grouped by canonical text in C, so that a statement trigger
 * names the same keys as a row trigger. A read pointer of our own leaves the
 * positions of other readers (queries on the transition table) alone. The
 * tenants come back sorted by their text, so the charging order, and the
 * tenant named by a denial, do not depend on hashing.
 */
static TenantCharge *
statement_tenants(TriggerData *td, const TrigConf *c, Tuplestorestate *rows, int *n)
{
	TupleDesc	desc = RelationGetDescr(td->tg_relation);
	Oid			cost_type = c->cost_col ? TupleDescAttr(desc, c->cost_attno - 1)->atttypid : InvalidOid;
	TenantFormat fmt;
	tenants_hash *groups;
	tenants_iterator it;
	TenantCharge *entry;
	TenantCharge *out;
	TupleTableSlot *slot;
	MemoryContext rowcxt;
	int			level = -1;
	int			i = 0;

	tenant_format_init(&fmt, TupleDescAttr(desc, c->tenant_attno - 1)->atttypid);
	groups = tenants_create(CurrentMemoryContext, 16, NULL);
	rowcxt = AllocSetContextCreate(CurrentMemoryContext, "rl_trigger row",
								   ALLOCSET_SMALL_SIZES);
	slot = MakeSingleTupleTableSlot(desc, &TTSOpsMinimalTuple);
	tuplestore_select_read_pointer(rows, tuplestore_alloc_read_pointer(rows, EXEC_FLAG_REWIND));
	tuplestore_rescan(rows);

	if (fmt.kind == TENANT_SETTINGS)
		level = tenant_settings_pin();
	while (tuplestore_gettupleslot(rows, true, false, slot))
	{
		bool		isnull;
		Datum		d = slot_getattr(slot, c->tenant_attno, &isnull);
		int64		cost = c->cost_const;
		char	   *tenant;
		bool		found;
		MemoryContext old;

		if (isnull)
			null_tenant(c);
		if (c->cost_col)
		{
			Datum		cd = slot_getattr(slot, c->cost_attno, &isnull);

			cost = row_cost(c, cd, isnull, cost_type);
			/* Every row pays at least 1: a negative cost must not offset others. */
			if (cost < 1)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("trigger \"%s\": cost column \"%s\" must be at least 1 in every row",
								c->trigname, c->cost_col)));
		}

		old = MemoryContextSwitchTo(rowcxt);
		tenant = tenant_text(&fmt, d);
		MemoryContextSwitchTo(old);
		entry = tenants_insert(groups, tenant, &found);
		if (!found)
		{
			entry->tenant = pstrdup(tenant);
			entry->cost = 0;
		}
		if (pg_add_s64_overflow(entry->cost, cost, &entry->cost))
			ereport(ERROR,
					(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
					 errmsg("trigger \"%s\": the costs of one tenant add up to more than a bigint holds",
							c->trigname)));
		MemoryContextReset(rowcxt);
	}
	if (level >= 0)
		tenant_settings_unpin(level);
	ExecDropSingleTupleTableSlot(slot);
	MemoryContextDelete(rowcxt);

	*n = (int) groups->members;
	out = (TenantCharge *) palloc(sizeof(TenantCharge) * Max(*n, 1));
	tenants_start_iterate(groups, &it);
	while ((entry = tenants_iterate(groups, &it)) != NULL)
		out[i++] = *entry;
	qsort(out, *n, sizeof(TenantCharge), charge_cmp);
	tenants_destroy(groups);
	return out;
}

static void
fire_statement(TriggerData *td, const TrigConf *c)
{
	Trigger    *tg = td->tg_trigger;
	bool		by_delete = TRIGGER_FIRED_BY_DELETE(td->tg_event);
	const char *table = by_delete ? tg->tgoldtable : tg->tgnewtable;
	Tuplestorestate *rows = by_delete ? td->tg_oldtable : td->tg_newtable;
	TenantCharge *tenants;
	int			n;
	int			mark = refund_mark();

	if (table == NULL || rows == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("trigger \"%s\": rl_trigger FOR EACH STATEMENT needs a transition table",
						c->trigname),
				 errhint("Add REFERENCING NEW TABLE AS new_rows (OLD TABLE for DELETE).")));

	tenants = statement_tenants(td, c, rows, &n);
	for (int i = 0; i < n; i++)
	{
		RlArgs		a = tenant_args(c, tenants[i].tenant, tenants[i].cost);
		RlOutcome	o;

		if (a.cost < 1)
			continue;
		if (a.cost > a.lim)
		{
			/* Can never pass: a denial, not bad input. */
			if (!slidewin_enforce)
			{
				ereport(slidewin_log_denials >= 0 ? slidewin_log_denials : DEBUG1,
						(errmsg("slidewin would deny key \"%s\" (shadow mode)", a.key),
						 errdetail("The statement needs " INT64_FORMAT " units, more than the limit " INT64_FORMAT ".",
								   a.cost, a.lim)));
				continue;
			}
			refund_since(mark);
			enforce_raise_never(&a,
								psprintf("The statement needs " INT64_FORMAT " units, more than the limit " INT64_FORMAT ".",
										 a.cost, a.lim),
								"Split the statement into smaller ones.");
		}
		/* Remember every admission, so that a later denial can undo it. */
		enforce_charge(&a, c->policy, true, &o);
		if (!o.allowed)
		{
			refund_since(mark);
			enforce_raise_denied(&a, &o);
		}
	}
	if (!c->refund)
		refund_forget_since(mark);
}

Datum
slidewin_trigger(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;
	TrigConf	c;
	ErrorContextCallback errcb;
	Relation	rel;
	HeapTuple	ret = NULL;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("rl_trigger() must be called as a trigger")));
	rel = td->tg_relation;
	memset(&c, 0, sizeof(c));
	c.trigname = td->tg_trigger->tgname;
	c.relname = quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
										   RelationGetRelationName(rel));
	if (TRIGGER_FIRED_BY_TRUNCATE(td->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("trigger \"%s\": rl_trigger cannot charge a TRUNCATE", c.trigname)));

	errcb.callback = trigger_context;
	errcb.arg = &c;
	errcb.previous = error_context_stack;
	error_context_stack = &errcb;

	parse_conf(td, &c);
	if (TRIGGER_FIRED_FOR_ROW(td->tg_event))
	{
		if (TRIGGER_FIRED_BY_UPDATE(td->tg_event))
			ret = td->tg_newtuple;
		else
			ret = td->tg_trigtuple;
		fire_row(td, &c, ret);
		if (!TRIGGER_FIRED_BEFORE(td->tg_event))
			ret = NULL;
	}
	else
		fire_statement(td, &c);

	error_context_stack = errcb.previous;
	return PointerGetDatum(ret);
}
