/*-------------------------------------------------------------------------
 *
 * outage_log.c
 *		An outage in the server log, once per server: one WARNING when the
 *		first call Redis cannot answer fails over, repeated at most once per
 *		slidewin.outage_log_interval while Redis stays unreachable, and one
 *		LOG line when Redis answers again, with how long it lasted and what
 *		answered the calls meanwhile.
 *
 * The state is a few atomics in shared memory, so that a hundred backends
 * meeting the same dead Redis log one line between them, not a hundred:
 *
 *	since		when the outage began (the first failure seen), 0 while Redis
 *				answers. The backend whose compare-and-swap turns it from 0
 *				logs the WARNING; the one whose compare-and-swap turns it
 *				back to 0 logs the LOG line. Every other backend only reads it.
 *	warned_at	when the warning was last repeated. A repeat is due once the
 *				interval has passed since max(since, warned_at); the backend
 *				whose compare-and-swap moves warned_at logs it.
 *	answers		the calls that failed over during the outage, by what
 *				answered them (fetch-and-add); the backend that ends the
 *				outage takes them (exchange with 0) for its line.
 *
 * A call that fails over in the instant Redis answers another may be
 * counted in the next outage's line rather than this one's; none is
 * counted twice. The outage begins where policy.c learns that Redis could
 * not answer (policy_redis_failed, whatever the caller) and ends where a
 * call through policy_run is answered by Redis.
 *
 * Without shared_preload_libraries the same state lives in each backend's
 * memory: every backend then logs its own outages (a degraded mode, see
 * doc/observability.md).
 *
 * The lines go to the server log only: the client whose call happened to
 * be first would otherwise get the WARNING, which is about the server, not
 * about its call. Neither names the URL's user or password: the target is
 * described by redis_target_describe.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "outage_log.h"
#include "redis_conn.h"
#include "settings.h"
#include "shmem_parts.h"

typedef struct OutageLogState
{
	pg_atomic_uint64 since;		/* TimestampTz; 0: Redis answers */
	pg_atomic_uint64 warned_at; /* TimestampTz of the last repeat */
	pg_atomic_uint64 answers[OUTAGE_NANSWERS];
} OutageLogState;

static OutageLogState *shared = NULL;
static OutageLogState local;
static bool local_ready = false;

static void
state_init(OutageLogState *s)
{
	pg_atomic_init_u64(&s->since, 0);
	pg_atomic_init_u64(&s->warned_at, 0);
	for (int i = 0; i < OUTAGE_NANSWERS; i++)
		pg_atomic_init_u64(&s->answers[i], 0);
}

static Size
shmem_size(void)
{
	return sizeof(OutageLogState);
}

static void
shmem_attach(void *p, bool found)
{
	shared = p;
	if (!found)
		state_init(shared);
}

static const ShmemPart shmem_part = {"slidewin outage log", shmem_size, NULL, shmem_attach};

void
outage_log_init(void)
{
	slidewin_shmem_register(&shmem_part);
}

/* The server's state; this backend's own when the library was not preloaded. */
static OutageLogState *
state(void)
{
	if (shared != NULL)
		return shared;
	if (!local_ready)
	{
		state_init(&local);
		local_ready = true;
	}
	return &local;
}

/*
 * Log a line in the server log only. ereport does not throw at these
 * levels, but should it (out of memory), the client's setting is restored.
 */
#define server_log(elevel, ...) \
	do { \
		int			save_client_min_messages = client_min_messages; \
		client_min_messages = ERROR; \
		PG_TRY(); \
		{ \
			ereport((elevel), errhidestmt(true), errhidecontext(true), __VA_ARGS__); \
		} \
		PG_FINALLY(); \
		{ \
			client_min_messages = save_client_min_messages; \
		} \
		PG_END_TRY(); \
	} while (0)

static uint64
answers_so_far(OutageLogState *s)
{
	uint64		n = 0;

	for (int i = 0; i < OUTAGE_NANSWERS; i++)
		n += pg_atomic_read_u64(&s->answers[i]);
	return n;
}

/* Repeat the warning if slidewin.outage_log_interval has passed since it was last logged. */
static void
maybe_repeat(OutageLogState *s, const RedisResult *r)
{
	TimestampTz now;
	uint64		since;
	uint64		last;
	char		target[600];
	char		since_text[128];

	if (slidewin_outage_log_interval <= 0)
		return;
	now = GetCurrentTimestamp();
	since = pg_atomic_read_u64(&s->since);
	if (since == 0)
		return;
	last = pg_atomic_read_u64(&s->warned_at);
	if (now < TimestampTzPlusMilliseconds((TimestampTz) Max(last, since),
										  slidewin_outage_log_interval))
		return;
	if (!pg_atomic_compare_exchange_u64(&s->warned_at, &last, (uint64) now))
		return;					/* another backend repeats it */
	redis_target_describe(target, sizeof(target));
	strlcpy(since_text, timestamptz_to_str((TimestampTz) since), sizeof(since_text));
	server_log(WARNING,
			   errmsg("slidewin still cannot reach Redis at %s: %s", target, r->message),
			   errdetail("Unreachable since %s; %llu calls have failed over since then.",
						 since_text, (unsigned long long) answers_so_far(s)));
}

void
outage_log_failed(const RedisResult *r)
{
	OutageLogState *s = state();
	uint64		expected = 0;
	TimestampTz now;
	char		target[600];

	if (pg_atomic_read_u64(&s->since) != 0)
	{
		maybe_repeat(s, r);
		return;
	}
	now = GetCurrentTimestamp();
	if (!pg_atomic_compare_exchange_u64(&s->since, &expected, (uint64) now))
	{
		maybe_repeat(s, r);		/* another backend began it */
		return;
	}
	pg_atomic_write_u64(&s->warned_at, (uint64) now);
	redis_target_describe(target, sizeof(target));
	server_log(WARNING,
			   errmsg("slidewin cannot reach Redis at %s: %s", target, r->message),
			   errdetail("Calls follow their failure policy (slidewin.on_redis_error) until Redis answers again."),
			   errhint("This is logged once per server, and repeated at most once per slidewin.outage_log_interval while it lasts."));
}

void
outage_log_answer(OutageAnswer a, const RedisResult *r)
{
	OutageLogState *s = state();

	if (pg_atomic_read_u64(&s->since) == 0)
		return;					/* a backend's breaker outlived the outage */
	pg_atomic_fetch_add_u64(&s->answers[a], 1);
	maybe_repeat(s, r);
}

void
outage_log_answered(void)
{
	OutageLogState *s = state();
	uint64		since = pg_atomic_read_u64(&s->since);
	uint64		n[OUTAGE_NANSWERS];
	TimestampTz now;
	char		target[600];
	char		since_text[128];

	if (since == 0)
		return;
	if (!pg_atomic_compare_exchange_u64(&s->since, &since, 0))
		return;					/* another backend ends it */
	now = GetCurrentTimestamp();
	for (int i = 0; i < OUTAGE_NANSWERS; i++)
		n[i] = pg_atomic_exchange_u64(&s->answers[i], 0);
	redis_target_describe(target, sizeof(target));
	strlcpy(since_text, timestamptz_to_str((TimestampTz) since), sizeof(since_text));
	server_log(LOG,
			   errmsg("slidewin reaches Redis at %s again after %.3f s unreachable",
					  target, (double) (now - (TimestampTz) since) / USECS_PER_SEC),
			   errdetail("Since %s: %llu calls answered by the fallback store, %llu allowed and %llu denied by the failure policy, %llu raised an error, %llu denied by a denial Redis gave earlier.",
						 since_text,
						 (unsigned long long) n[OUTAGE_FALLBACK],
						 (unsigned long long) n[OUTAGE_ALLOW],
						 (unsigned long long) n[OUTAGE_DENY],
						 (unsigned long long) n[OUTAGE_ERROR],
						 (unsigned long long) n[OUTAGE_KNOWN_DENIAL]));
}

TimestampTz
outage_log_since(void)
{
	return (TimestampTz) pg_atomic_read_u64(&state()->since);
}
