/*
 * fuzz_reply.c
 *		libFuzzer target for the checking of every script's and command's
 *		reply (src/reply_check.c), fed from raw bytes through hiredis's own
 *		reader under the backend's reply bounds (src/reply_cap.c), as
 *		exchange() in src/redis_conn.c reads them.
 *
 * The input is one header line, then the bytes the server sends:
 *
 *   o ALGO FLAGS LIM WIN_US COST CLOCK [LIM...]   an outcome script's reply
 *   a ALGO FLAGS LIM WIN_US COST CLOCK N          rl_attempt_all's reply
 *   d                                             DEL's reply (rl_reset)
 *   r                                             a refund's reply
 *   b DURATION_US CLOCK                           rl_block's reply
 *   u                                             rl_unblock's reply
 *   s M C                                         log_settle.lua's reply for M
 *                                                 keys (1..16), C 1 confirm, 0 cancel
 *
 * ALGO is 0..4 (sliding_log, sliding_counter, fixed_window, token_bucket,
 * multi); FLAGS bit 1 is peek and bit 2 force; CLOCK is the test clock in
 * Unix microseconds or "-" for none; the extra LIMs are the multi windows'
 * limits. For rl_attempt_all, ALGO is 0..3 (one algorithm for every key),
 * FLAGS bit 2 is force, and N (1..16) keys are asked: key k with limit
 * LIM + 7k and the cost COST, each brought into range as below.
 * Numbers are brought into the ranges the SQL functions accept
 * (limit.c), so that every call is one the backend could make. A missing
 * or unreadable header line ends the input there.
 *
 * Error replies go where the backend sends them (reply_is_transient for an
 * outcome or DEL, the refund verdict for a refund), every other reply to the
 * checker. Beyond memory errors and undefined behaviour, it checks what the
 * backend relies on when it builds rl_result from an accepted outcome.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "reply_cap.h"
#include "reply_check.h"

#define CHECK(cond) \
	do { \
		if (!(cond)) \
		{ \
			fprintf(stderr, "fuzz_reply: check failed: %s (line %d)\n", #cond, __LINE__); \
			abort(); \
		} \
	} while (0)

/* The bounds of limit.c: lim and cost 1..2^51, the window 1 us..3650 days. */
#define MAX_LIMIT INT64_C(2251799813685248)
#define MAX_WIN_US (INT64_C(3650) * 86400 * 1000000)
#define MAX_WINDOWS 8
/* rl_attempt_all: RL_MAX_KEYS of limit.h */
#define MAX_KEYS 16
/* rl_reset deletes a key per algorithm and the ledgers of the two logs */
#define RESET_KEYS (ALGO_COUNT + 2)

static const char *const algorithm_names[ALGO_COUNT] = {
	"sliding_log", "sliding_counter", "fixed_window", "token_bucket", "multi"
};

typedef struct Header
{
	char		kind;
	ReplyCall	call;
	ReplyBlockCall block;
	int64_t		lims[MAX_WINDOWS];
	int			settle_keys;	/* 's': keys of the slot */
	bool		settle_confirm;
	int			nkeys;			/* rl_attempt_all: calls[0..nkeys-1] */
	ReplyCall	calls[MAX_KEYS];
} Header;

/* Read the next number from *p (up to end); false when there is none. */
static bool
next_number(const char **p, const char *end, uint64_t *out, bool *dash)
{
	const char *q = *p;
	uint64_t	v = 0;
	bool		any = false;

	while (q < end && *q == ' ')
		q++;
	*dash = (q < end && *q == '-');
	if (*dash)
		q++;
	while (q < end && *q >= '0' && *q <= '9')
	{
		v = v * 10 + (uint64_t) (*q - '0');
		q++;
		any = true;
	}
	*p = q;
	*out = v;
	return any || *dash;
}

/* v itself when it is in [lo, hi], else some value there */
static int64_t
in_range(uint64_t v, int64_t lo, int64_t hi)
{
	if (v >= (uint64_t) lo && v <= (uint64_t) hi)
		return (int64_t) v;
	return lo + (int64_t) (v % (uint64_t) (hi - lo + 1));
}

static bool
parse_header(const char *s, const char *end, Header *h)
{
	uint64_t	n[6] = {0, 0, 10, 60000000, 1, 0};
	bool		dash = false;
	bool		no_clock = true;
	const char *p = s + 1;

	memset(h, 0, sizeof(*h));
	h->kind = s < end ? s[0] : 0;
	if (h->kind == 'b' || h->kind == 'u')
	{
		uint64_t	v;

		h->block.unblock = h->kind == 'u';
		h->block.duration_us = 60000000;
		if (next_number(&p, end, &v, &dash))
			h->block.duration_us = in_range(v, 1, MAX_WIN_US);
		if (next_number(&p, end, &v, &dash) && !(dash && v == 0))
		{
			h->block.clock_set = true;
			h->block.clock_us = dash ? (int64_t) ((uint64_t) 0 - v) : (int64_t) v;
		}
		return true;
	}
	if (h->kind == 's')
	{
		uint64_t	v;

		h->settle_keys = 2;
		h->settle_confirm = true;
		if (next_number(&p, end, &v, &dash))
			h->settle_keys = (int) in_range(v, 1, 16);
		if (next_number(&p, end, &v, &dash))
			h->settle_confirm = v != 0;
		return true;
	}
	if (h->kind != 'o' && h->kind != 'a')
		return h->kind == 'd' || h->kind == 'r';
	for (int i = 0; i < 6; i++)
	{
		uint64_t	v;

		if (!next_number(&p, end, &v, &dash))
			break;
		if (i == 5)
			no_clock = dash && v == 0;
		n[i] = dash && i == 5 ? (uint64_t) 0 - v : v;
	}
	h->call.algorithm = (RlAlgorithm) (n[0] % ALGO_COUNT);
	h->call.algorithm_name = algorithm_names[h->call.algorithm];
	h->call.peek = (n[1] & 1) != 0;
	h->call.force = (n[1] & 2) != 0;
	h->call.lim = in_range(n[2], 1, MAX_LIMIT);
	h->call.win_us = in_range(n[3], 1, MAX_WIN_US);
	h->call.clock_set = !no_clock;
	h->call.clock_us = (int64_t) n[5];
	if (h->call.algorithm == ALGO_MULTI_LOG)
	{
		/* the first window is lim, win_us; the rest only add limits */
		h->lims[0] = h->call.lim;
		h->call.nwin = 1;
		while (h->call.nwin < MAX_WINDOWS)
		{
			uint64_t	v;

			if (!next_number(&p, end, &v, &dash) || dash)
				break;
			h->lims[h->call.nwin] = in_range(v, 1, MAX_LIMIT);
			if (h->lims[h->call.nwin] < h->call.lim)
				h->call.lim = h->lims[h->call.nwin];
			h->call.nwin++;
		}
		h->call.lims = h->lims;
	}
	h->call.cost = in_range(n[4], 1, h->call.lim);
	if (h->kind == 'a')
	{
		uint64_t	v = 1;

		if (next_number(&p, end, &v, &dash) && dash)
			v = 1;
		h->nkeys = (int) in_range(v, 1, MAX_KEYS);
		for (int k = 0; k < h->nkeys; k++)
		{
			ReplyCall  *c = &h->calls[k];

			*c = h->call;
			c->algorithm = (RlAlgorithm) (n[0] % ALGO_MULTI_LOG);
			c->algorithm_name = "rl_attempt_all";
			c->peek = false;
			c->nwin = 0;
			c->lims = NULL;
			c->lim = in_range(n[2] + 7 * (uint64_t) k, 1, MAX_LIMIT);
			c->cost = in_range(n[4], 1, c->lim);
		}
	}
	return true;
}

/* Valid rl_result times, as limit.c's timestamptz needs them. */
static bool
valid_time(int64_t us)
{
	return us >= REPLY_PG_MIN_TIMESTAMP + REPLY_PG_EPOCH_UNIX_US &&
		us - REPLY_PG_EPOCH_UNIX_US < REPLY_PG_END_TIMESTAMP;
}

/* rl_attempt_all's reply: what store_redis_all.c and enforce_charge_all take for granted. */
static void
check_all(const Header *h, const redisReply *r)
{
	char		why[256];
	int64_t		v[MAX_KEYS][RF_COUNT];
	int			admitted = 0;
	bool		force = h->calls[0].force;

	memset(why, 0, sizeof(why));
	if (!reply_check_all(r, h->nkeys, h->calls, v, why, sizeof(why)))
	{
		CHECK(why[0] != '\0' && memchr(why, '\0', sizeof(why)) != NULL);
		return;
	}
	for (int k = 0; k < h->nkeys; k++)
	{
		CHECK(v[k][RF_ALLOWED] >= 0 && v[k][RF_ALLOWED] <= 3);
		CHECK(v[k][RF_REMAINING] >= 0 && v[k][RF_REMAINING] <= h->calls[k].lim);
		/* admitted, or room not charged: no wait; a denial: a wait */
		CHECK(v[k][RF_ALLOWED] == 1 || v[k][RF_ALLOWED] == 3 ?
			  v[k][RF_RETRY] == 0 : v[k][RF_RETRY] > 0);
		if (v[k][RF_ALLOWED] == 2)
			CHECK(v[k][RF_REMAINING] == 0);
		CHECK(v[k][RF_USED] >= 0);
		CHECK(valid_time(v[k][RF_RESET]));
		CHECK(v[k][RF_RECORDED] == -1 || valid_time(v[k][RF_RECORDED]));
		/* the counting algorithms keep no entries */
		if (h->calls[k].algorithm != ALGO_SLIDING_LOG)
			CHECK(v[k][RF_RECORDED] == -1 && v[k][RF_STABLE] == 0);
		CHECK(v[k][RF_STABLE] >= 0);
		CHECK(valid_time(v[k][RF_NEXT]) && v[k][RF_NEXT] > 0);
		admitted += v[k][RF_ALLOWED] == 1;
	}
	/* all or none, and a call not admitted has a key that denies */
	if (!force)
		CHECK(admitted == 0 || admitted == h->nkeys);
}

static void
check_one(const Header *h, const redisReply *r)
{
	char		why[256];
	int64_t		v[RF_COUNT];

	memset(why, 0, sizeof(why));
	if (h->kind == 'r')
	{
		RefundVerdict verdict = reply_refund_verdict(r);

		CHECK(verdict >= REFUND_GIVEN && verdict <= REFUND_FAILED);
		if (verdict == REFUND_GIVEN || verdict == REFUND_NOTHING)
			CHECK(r->type == REDIS_REPLY_INTEGER);
		reply_refund_describe(r, why, sizeof(why));
		CHECK(memchr(why, '\0', sizeof(why)) != NULL);
		return;
	}
	if (r->type == REDIS_REPLY_ERROR)
	{
		(void) reply_is_transient(r->str);
		return;
	}
	if (h->kind == 'd')
	{
		bool		ok = reply_check_del(r, RESET_KEYS, why, sizeof(why));

		/* DEL answers how many of the keys it removed: any of them, or none */
		CHECK(ok == (r->type == REDIS_REPLY_INTEGER &&
					 r->integer >= 0 && r->integer <= RESET_KEYS));
		if (!ok)
			CHECK(why[0] != '\0');
		return;
	}
	if (h->kind == 's')
	{
		bool		ok = reply_check_settle(r, h->settle_keys, h->settle_confirm,
										why, sizeof(why));

		/* what store_redis_xslot.c reads: one 0 or 1 per key */
		if (ok)
		{
			CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == (size_t) h->settle_keys);
			for (size_t i = 0; i < r->elements; i++)
				CHECK(r->element[i]->type == REDIS_REPLY_INTEGER &&
					  (r->element[i]->integer == 0 || r->element[i]->integer == 1));
		}
		else
			CHECK(why[0] != '\0' && memchr(why, '\0', sizeof(why)) != NULL);
		return;
	}
	if (h->kind == 'b' || h->kind == 'u')
	{
		int64_t		end;

		if (!reply_check_block(r, &h->block, &end, why, sizeof(why)))
		{
			CHECK(why[0] != '\0' && memchr(why, '\0', sizeof(why)) != NULL);
			return;
		}
		/* what slidewin_block and slidewin_unblock take for granted */
		CHECK(r->type == REDIS_REPLY_INTEGER);
		if (h->block.unblock)
			CHECK(end == 0 || end == 1);
		else
		{
			CHECK(valid_time(end));
			if (h->block.clock_set)
				CHECK(end >= h->block.clock_us + h->block.duration_us);
		}
		return;
	}
	if (h->kind == 'a')
	{
		check_all(h, r);
		return;
	}
	if (!reply_check_outcome(r, &h->call, v, why, sizeof(why)))
	{
		CHECK(why[0] != '\0' && memchr(why, '\0', sizeof(why)) != NULL);
		return;
	}
	/* what result_datum (src/sql/result.c) and the callers take for granted */
	CHECK(v[RF_ALLOWED] >= 0 && v[RF_ALLOWED] <= 2);
	CHECK(v[RF_REMAINING] >= 0 && v[RF_REMAINING] <= h->call.lim);
	CHECK(v[RF_ALLOWED] == 1 ? v[RF_RETRY] == 0 : v[RF_RETRY] > 0);
	/* denied by a block: nothing left */
	if (v[RF_ALLOWED] == 2)
		CHECK(v[RF_REMAINING] == 0);
	CHECK(v[RF_USED] >= 0);
	CHECK(valid_time(v[RF_RESET]));
	CHECK(v[RF_RECORDED] == -1 || valid_time(v[RF_RECORDED]));
	CHECK(v[RF_STABLE] >= 0);
	CHECK(valid_time(v[RF_NEXT]) && v[RF_NEXT] > 0);
	if (h->call.peek)
		CHECK(v[RF_RECORDED] == -1);
}

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *text = (const char *) data;
	const char *nl = memchr(text, '\n', size);
	Header		h;
	redisReader *reader;
	size_t		step;
	size_t		fed = 0;

	if (nl == NULL || !parse_header(text, nl, &h))
		return 0;
	size -= nl + 1 - text;
	data = (const uint8_t *) nl + 1;
	/* as a socket would deliver them: pieces of a size the input chooses */
	step = 1 + size % 7;

	reader = redisReaderCreate();
	if (reader == NULL)
		abort();
	reply_cap_next(reader);
	while (fed < size || reader->len > reader->pos)
	{
		void	   *reply = NULL;
		size_t		n = size - fed < step ? size - fed : step;

		if (n > 0 && redisReaderFeed(reader, (const char *) data + fed, n) != REDIS_OK)
			break;
		fed += n;
		if (redisReaderGetReply(reader, &reply) != REDIS_OK)
		{
			CHECK(reply == NULL);
			break;
		}
		if (reply == NULL)
		{
			if (fed == size)
				break;
			continue;
		}
		check_one(&h, reply);
		freeReplyObject(reply);
		reply_cap_next(reader);
	}
	redisReaderFree(reader);
	return 0;
}
