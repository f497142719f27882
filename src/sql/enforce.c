/*-------------------------------------------------------------------------
 *
 * enforce.c
 *		What happens around a store's answer: shadow mode, logging of
 *		denials, refund registration, the RL429 error, and waiting for
 *		capacity.
 *
 * In shadow mode the store records a would-be denial, so the units it
 * reports as used include the call's own.
 *
 * Every charging entry point (rl_attempt, rl_allow, rl_enforce, rl_wait and
 * rl_trigger) goes through enforce_charge, so that shadow mode and refunds
 * mean the same everywhere, and so that each of them consults the deny
 * cache. Nothing here formats a Redis command.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "denial.h"
#include "enforce.h"
#include "fallback.h"
#include "settings.h"
#include "stats.h"
#include "store_redis.h"
#include "switch.h"

#define ERRCODE_RATE_LIMITED MAKE_SQLSTATE('R','L','4','2','9')
#define ERRCODE_POSTGREST MAKE_SQLSTATE('P','G','R','S','T')


/* "1 minute", "90 seconds", "250 milliseconds": the largest exact unit. */
static char *
window_text(int64 win_us)
{
	static const struct
	{
		int64		us;
		const char *one;
		const char *many;
	}			units[] = {
		{USECS_PER_DAY, "day", "days"},
		{USECS_PER_HOUR, "hour", "hours"},
		{USECS_PER_MINUTE, "minute", "minutes"},
		{USECS_PER_SEC, "second", "seconds"},
		{1000, "millisecond", "milliseconds"},
		{1, "microsecond", "microseconds"},
	};

	for (int i = 0; i < lengthof(units); i++)
		if (win_us % units[i].us == 0)
		{
			int64		n = win_us / units[i].us;

			return psprintf(INT64_FORMAT " %s", n, n == 1 ? units[i].one : units[i].many);
		}
	return psprintf(INT64_FORMAT " microseconds", win_us);	/* not reached */
}

/* Whole seconds until a retry can pass: rounded up, at least 1. */
static int64
retry_seconds(const RlOutcome *o)
{
	int64		s = (o->retry_us + USECS_PER_SEC - 1) / USECS_PER_SEC;

	return Max(s, 1);
}

/*
 * "Retry after 1 second.", "Retry after 40 seconds.": the hint of a denial.
 * The plural form is chosen as errhint_plural chooses it (ngettext), but
 * into a string, as the postgrest style puts the hint inside its JSON.
 */
static char *
retry_hint(int64 secs)
{
	return psprintf(ngettext("Retry after " INT64_FORMAT " second.",
							 "Retry after " INT64_FORMAT " seconds.",
							 (unsigned long) secs),
					secs);
}

/* "retry after 1 second", for the server log's DETAIL. */
static char *
retry_phrase(int64 secs)
{
	return psprintf(ngettext("retry after " INT64_FORMAT " second",
							 "retry after " INT64_FORMAT " seconds",
							 (unsigned long) secs),
					secs);
}

static char *
key_text(const RlArgs *args)
{
	return pnstrdup(args->key, args->keylen);
}

static void
log_denial(const RlArgs *args, const RlOutcome *o, bool shadow)
{
	if (slidewin_log_denials < 0)
		return;
	ereport(slidewin_log_denials,
			(errmsg(shadow ? "slidewin would deny key \"%s\" (shadow mode)"
					: "slidewin denied key \"%s\"", key_text(args)),
			 o->blocked ?
			 errdetail("The key is blocked. Store %s; %s.",
					   o->store, retry_phrase(retry_seconds(o))) :
			 o->known ?
			 errdetail("Used " INT64_FORMAT " of " INT64_FORMAT " units in the last %s; the call needed " INT64_FORMAT ". Store %s; %s.",
					   o->used - (shadow ? args->cost : 0), args->lim,
					   window_text(args->win_us), args->cost, o->store,
					   retry_phrase(retry_seconds(o))) :
			 errdetail("Redis could not answer and the failure policy denied the call.")));
}

/* Who answered: the deny cache, or the store policy_run used. */
static StatsSource
charge_call(const RlArgs *args, int policy, bool refund, bool log, RlOutcome *o)
{
	RlArgs		a = *args;
	StatsSource source = STATS_DENY_CACHE;

	limit_outcome_judged(args, o);
	a.force = !slidewin_enforce;
	if (a.force || !deny_cache_lookup(&a, o))
	{
		DenyStamp	stamp;

		deny_cache_stamp(&a, &stamp);
		policy_run(policy, &a, o, redis_store_attempt, outage_fallback_attempt);
		deny_cache_remember(&a, &stamp, o);
		source = o->store[0] == 'r' ? STATS_REDIS :
			o->store[0] == 'f' ? STATS_FALLBACK : STATS_POLICY;
	}
	if (!o->allowed)
	{
		if (log)
			log_denial(args, o, a.force);
		if (a.force)
		{
			o->allowed = true;
			o->shadowed = true;
			o->remaining = 0;
		}
	}
	if (refund && o->recorded_ts >= 0)
		refund_remember(args, o->recorded_ts);
	return source;
}

void
enforce_charge(const RlArgs *args, int policy, bool refund, RlOutcome *o)
{
	stats_count_call(args, o, charge_call(args, policy, refund, true, o));
}

/*
 * rl_attempt_all and the deny cache: the first key, in the caller's order,
 * whose denial this backend knows (deny_cache_lookup, by rl_attempt's own
 * rules: generations, refunds in flight, the setting) denies the whole
 * call without a round trip, with that key's answer. The other keys were
 * not asked: denied, with nothing known of them (remaining NULL, store
 * "none", no retry of their own). Returns that key, or -1.
 */
static int
cached_denial_all(int n, const RlArgs *a, RlOutcome *o)
{
	for (int k = 0; k < n; k++)
	{
		if (!deny_cache_lookup(&a[k], &o[k]))
			continue;
		for (int j = 0; j < n; j++)
		{
			if (j == k)
				continue;
			o[j].allowed = false;
			o[j].known = false;
			o[j].remaining = 0;
			o[j].reset_at_us = 0;
			o[j].used = 0;
			o[j].retry_us = 0;
			o[j].recorded_ts = -1;
			o[j].stable_us = 0;
			o[j].shadowed = false;
			o[j].store = "none";
		}
		return k;
	}
	return -1;
}

int
enforce_charge_all(int n, const RlArgs *args, int policy, bool refund, RlOutcome *o)
{
	RlArgs		a[RL_MAX_KEYS];
	DenyStamp	stamps[RL_MAX_KEYS];
	int			decider = -1;
	bool		force = !slidewin_enforce;
	StatsSource source = STATS_DENY_CACHE;

	if (n < 1 || n > RL_MAX_KEYS)
		elog(ERROR, "rl_attempt_all called with %d keys", n);
	for (int k = 0; k < n; k++)
	{
		a[k] = args[k];
		a[k].force = force;
		limit_outcome_judged(&args[k], &o[k]);
	}
	/* shadow mode records every key, so it always asks, as rl_attempt does */
	if (!force)
		decider = cached_denial_all(n, a, o);
	if (decider < 0)
	{
		/*
		 * Each key's denial is remembered, and each key's written entry
		 * voids the cached denials of it, as for rl_attempt.
		 */
		for (int k = 0; k < n; k++)
			deny_cache_stamp(&a[k], &stamps[k]);
		policy_run_all(policy, n, a, o);
		for (int k = 0; k < n; k++)
			deny_cache_remember(&a[k], &stamps[k], &o[k]);
		source = o[0].store[0] == 'r' ? STATS_REDIS :
			o[0].store[0] == 'f' ? STATS_FALLBACK : STATS_POLICY;
	}

	for (int k = 0; k < n && decider < 0; k++)
		if (!o[k].allowed && (o[k].retry_us > 0 || o[k].blocked || !o[k].known))
			decider = k;
	if (decider < 0)
	{
		decider = 0;
		for (int k = 1; k < n; k++)
			if (o[k].known && o[k].remaining < o[decider].remaining)
				decider = k;
	}
	if (!o[decider].allowed)
		log_denial(&args[decider], &o[decider], force);
	for (int k = 0; k < n; k++)
	{
		if (!o[k].allowed && force)
		{
			o[k].allowed = true;
			o[k].shadowed = true;
			o[k].remaining = 0;
		}
		if (refund && o[k].recorded_ts >= 0)
			refund_remember(&args[k], o[k].recorded_ts);
		stats_count_call(&args[k], &o[k], source);
	}
	return decider;
}

/*
 * Raise RL429 with its message, detail and hint: as they are, or (headers
 * set: slidewin.error_style = postgrest) as PostgREST's raise-an-HTTP-error
 * convention wants it, the three as JSON in the message and the response's
 * status and headers (a JSON object) in the detail.
 */
SLIDEWIN_NORETURN static void raise_rl429(const char *message, const char *detail,
										  const char *hint, const char *headers);

static void
raise_rl429(const char *message, const char *detail, const char *hint, const char *headers)
{
	if (headers)
	{
		StringInfoData m;

		initStringInfo(&m);
		appendStringInfoString(&m, "{\"code\":\"RL429\",\"message\":");
		escape_json(&m, message);
		appendStringInfoString(&m, ",\"details\":");
		escape_json(&m, detail);
		appendStringInfoString(&m, ",\"hint\":");
		escape_json(&m, hint);
		appendStringInfoChar(&m, '}');
		ereport(ERROR,
				(errcode(ERRCODE_POSTGREST),
				 errmsg_internal("%s", m.data),
				 errdetail_internal("{\"status\":429,\"status_text\":\"Too Many Requests\",\"headers\":%s}", headers)));
	}
	ereport(ERROR,
			(errcode(ERRCODE_RATE_LIMITED),
			 errmsg_internal("%s", message),
			 errdetail_internal("%s", detail),
			 errhint("%s", hint)));
	pg_unreachable();
}

/*
 * The denial error, in slidewin.error_style. Its message, detail and hint
 * may reach an HTTP client (PostgREST passes them on), so they name the key
 * only under slidewin.error_show_key; log_denial names it in the server log.
 * can_retry false: no retry can pass, so the json and postgrest styles give
 * no retry time.
 */
SLIDEWIN_NORETURN static void raise_denied(const RlArgs *args, const RlOutcome *o,
										   const char *detail_text, const char *hint_text,
										   bool can_retry);

static void
raise_denied(const RlArgs *args, const RlOutcome *o, const char *detail_text,
			 const char *hint_text, bool can_retry)
{
	char	   *key = slidewin_error_show_key ? key_text(args) : NULL;
	char	   *message = key ? psprintf("rate limit exceeded for key \"%s\"", key) :
		pstrdup("rate limit exceeded");
	char	   *detail;
	char	   *hint = hint_text ? pstrdup(hint_text) : retry_hint(retry_seconds(o));

	if (detail_text)
		detail = pstrdup(detail_text);
	else if (o->blocked)
		detail = pstrdup("The key is blocked: every call is denied until the block ends.");
	else if (o->known)
		detail = psprintf("Used " INT64_FORMAT " of " INT64_FORMAT " units in the last %s; this call needs " INT64_FORMAT ".",
						  o->used, args->lim, window_text(args->win_us), args->cost);
	else
		detail = pstrdup("Redis could not answer and the failure policy denied the call.");

	if (slidewin_error_style == ERROR_STYLE_JSON)
	{
		StringInfoData d;

		initStringInfo(&d);
		denial_detail_json(&d, args, o, can_retry, denial_now_us(), key);
		detail = d.data;
	}
	else if (slidewin_error_style == ERROR_STYLE_POSTGREST)
	{
		StringInfoData h;

		initStringInfo(&h);
		denial_headers(&h, o, can_retry, denial_now_us());
		raise_rl429(message, detail, hint, h.data);
	}
	raise_rl429(message, detail, hint, NULL);
}

void
enforce_raise_denied(const RlArgs *args, const RlOutcome *o)
{
	raise_denied(args, o, NULL, NULL, true);
}

void
enforce_raise_never(const RlArgs *args, const char *detail, const char *hint)
{
	RlOutcome	o;

	memset(&o, 0, sizeof(o));
	limit_outcome_judged(args, &o);
	o.allowed = false;
	o.known = false;
	o.store = "none";
	o.recorded_ts = -1;
	raise_denied(args, &o, detail, hint, false);
}

/*
 * rl_acquire(..., raise => true) found no free slot: RL429 in the
 * configured style. holders is -1 when no store answered (the deny policy);
 * retry_us is when a retry may pass, -1 when nobody can say. From Redis
 * that is when the first lease ends, at the latest, as a release may come
 * sooner; the fallback store's slots have no lease, and free only when a
 * holder's transaction ends (-1); under the deny policy it is when this
 * backend tries Redis again, as for rl_attempt. retry_after_ms and
 * Retry-After are that one time, rounded up, or both absent.
 */
void
enforce_raise_slots(const RlArgs *key, int64 max, int64 holders, int64 retry_us)
{
	char	   *k = slidewin_error_show_key ? key_text(key) : NULL;
	char	   *message = k ? psprintf("concurrency limit reached for key \"%s\"", k) :
		pstrdup("concurrency limit reached");
	bool		can_retry = retry_us >= 0;
	int64		secs = can_retry ? (retry_us + USECS_PER_SEC - 1) / USECS_PER_SEC : 0;
	char	   *detail;
	char	   *hint;
	StringInfoData h;

	if (holders < 0)
	{
		detail = pstrdup("Redis could not answer and the failure policy denied the call.");
		hint = retry_hint(Max(secs, 1));
	}
	else
	{
		detail = psprintf(INT64_FORMAT " of " INT64_FORMAT " slots are held.", holders, max);
		hint = can_retry ?
			psprintf("A slot frees when a holder's transaction ends, and at the latest in %s, when a lease ends.",
					 window_text(Max(secs, 1) * USECS_PER_SEC)) :
			pstrdup("A slot frees when a holder's transaction ends.");
	}

	/* the header fields of both JSON styles */
	initStringInfo(&h);
	if (can_retry)
		appendStringInfo(&h, "{\"Retry-After\":\"" INT64_FORMAT "\"}", secs);
	else
		appendStringInfoString(&h, "{}");

	if (slidewin_error_style == ERROR_STYLE_JSON)
	{
		StringInfoData d;

		initStringInfo(&d);
		appendStringInfo(&d, "{\"kind\":\"concurrency\",\"limit\":" INT64_FORMAT ",\"holders\":", max);
		if (holders >= 0)
			appendStringInfo(&d, INT64_FORMAT, holders);
		else
			appendStringInfoString(&d, "null");
		appendStringInfoString(&d, ",\"retry_after_ms\":");
		if (can_retry)
			appendStringInfo(&d, INT64_FORMAT, (retry_us + 999) / 1000);
		else
			appendStringInfoString(&d, "null");
		appendStringInfo(&d, ",\"headers\":%s", h.data);
		if (k)
		{
			appendStringInfoString(&d, ",\"key\":");
			escape_json(&d, k);
		}
		appendStringInfoChar(&d, '}');
		detail = d.data;
	}
	else if (slidewin_error_style == ERROR_STYLE_POSTGREST)
		raise_rl429(message, detail, hint, h.data);
	raise_rl429(message, detail, hint, NULL);
}

/*
 * Try, and while denied sleep on the latch until the store's retry time (or
 * the deadline, if sooner), then try again. The latch wakes us for
 * cancellation, statement_timeout and postmaster death, so the wait is
 * always interruptible. The sleep is never shorter than 1 ms, or 50 ms when
 * no store could say when capacity returns (a deny policy while Redis is
 * unreachable), so the loop cannot spin. A denial is logged once per call,
 * not once per try.
 */
void
enforce_wait(const RlArgs *args, int policy, bool refund,
			 int64 timeout_us, RlOutcome *o)
{
	TimestampTz deadline = GetCurrentTimestamp() + timeout_us;

	for (bool first = true;; first = false)
	{
		TimestampTz now;
		int64		sleep_us;
		long		sleep_ms;

		StatsSource source = charge_call(args, policy, refund, first, o);

		/* One call, counted once: with the answer it ends with. */
		if (o->allowed)
		{
			stats_count_call(args, o, source);
			return;
		}
		now = GetCurrentTimestamp();
		if (now >= deadline)
		{
			stats_count_call(args, o, source);
			return;
		}
		sleep_us = Max(o->retry_us, o->known ? 1000 : 50000);
		sleep_us = Min(sleep_us, deadline - now);
		sleep_ms = (long) ((sleep_us + 999) / 1000);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 sleep_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}
