/*-------------------------------------------------------------------------
 *
 * ticket.c
 *		Tickets: the text in rl_result.ticket naming the log entry a call
 *		recorded, which rl_refund takes back.
 *
 * A ticket is 48 bytes, written as 64 characters of base64url:
 *   0      format version (1)
 *   1      flags: 1 = fallback store, 2 = rl_attempt_multi's log
 *   2-9    the entry's time (Redis score, or fallback ts), big-endian
 *   10-17  its cost
 *   18-25  the longest window it was admitted under, in microseconds
 *   26-31  key tag: HMAC-SHA256(secret, "key" || stored key), first 6 bytes
 *   32-47  HMAC-SHA256(secret, "ticket" || bytes 0-31), first 16 bytes
 * The secret is 32 random bytes made when the extension is created, in the
 * table rl_ticket_secret, which no role but its owner may read (this file
 * reads it without SQL, like the fallback tables).
 *
 * So a ticket cannot be forged or altered without the secret, and one
 * issued for another key (or under another key_prefix) is told apart from
 * a damaged one: its signature holds, its key tag does not. A refund of
 * the entry is idempotent in either store, so handing a ticket in twice,
 * or racing a ROLLBACK's refund of the same entry, gives back once.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "common/base64.h"
#include "common/hmac.h"
#include "common/sha2.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "compat.h"
#include "fallback.h"
#include "settings.h"
#include "ticket.h"

#define TICKET_VERSION 1
#define TICKET_BYTES 48
#define TICKET_SIGNED 32		/* bytes covered by the signature */
#define TICKET_TEXT 64
#define TICKET_TAG_AT 26
#define TICKET_TAG_LEN 6
#define TICKET_MAC_LEN 16
#define SECRET_LEN 32

#define FLAG_FALLBACK 1
#define FLAG_MULTI 2

static uint8 secret[SECRET_LEN];
static bool secret_valid = false;
static bool callback_registered = false;

static void
forget_secret(Datum arg, Oid relid)
{
	secret_valid = false;
}

/* The database's secret, read once per backend (and after any change to it). */
static void
load_secret(void)
{
	Oid			relid;
	Relation	rel;
	SysScanDesc scan;
	HeapTuple	tup;
	bool		found = false;

	if (secret_valid)
		return;
	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(forget_secret, (Datum) 0);
		callback_registered = true;
	}
	relid = fallback_relid("rl_ticket_secret");
	rel = table_open(relid, AccessShareLock);
	scan = systable_beginscan(rel, InvalidOid, false, NULL, 0, NULL);
	while ((tup = systable_getnext(scan)) != NULL)
	{
		bool		isnull;
		Datum		d = heap_getattr(tup, 1, RelationGetDescr(rel), &isnull);
		bytea	   *b;

		if (isnull)
			continue;
		b = DatumGetByteaPP(d);
		if (VARSIZE_ANY_EXHDR(b) != SECRET_LEN)
			continue;
		memcpy(secret, VARDATA_ANY(b), SECRET_LEN);
		found = true;
		break;
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	if (!found)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("slidewin's ticket secret is missing"),
				 errdetail("The table rl_ticket_secret must hold one row of 32 bytes."),
				 errhint("Recreate it as the extension's update script does.")));
	secret_valid = true;
}

static void
hmac(const char *label, const uint8 *a, size_t alen, const uint8 *b, size_t blen,
	 uint8 *out, size_t outlen)
{
	pg_hmac_ctx *ctx = pg_hmac_create(PG_SHA256);
	uint8		full[PG_SHA256_DIGEST_LENGTH];

	if (ctx == NULL ||
		pg_hmac_init(ctx, secret, SECRET_LEN) < 0 ||
		pg_hmac_update(ctx, (const uint8 *) label, strlen(label) + 1) < 0 ||
		pg_hmac_update(ctx, a, alen) < 0 ||
		(blen > 0 && pg_hmac_update(ctx, b, blen) < 0) ||
		pg_hmac_final(ctx, full, sizeof(full)) < 0)
		elog(ERROR, "could not compute a ticket's HMAC: %s",
			 ctx ? pg_hmac_error(ctx) : "out of memory");
	pg_hmac_free(ctx);
	memcpy(out, full, outlen);
}

/* The tag of the key as stored: key_prefix, then the user key. */
static void
key_tag(const RlArgs *args, uint8 *tag)
{
	const char *prefix = slidewin_key_prefix ? slidewin_key_prefix : "";
	size_t		plen = strlen(prefix);
	uint8	   *buf = palloc(plen + args->keylen);

	memcpy(buf, prefix, plen);
	memcpy(buf + plen, args->key, args->keylen);
	hmac("key", buf, plen + args->keylen, NULL, 0, tag, TICKET_TAG_LEN);
	pfree(buf);
}

static void
put64(uint8 *p, int64 v)
{
	for (int i = 7; i >= 0; i--, v = (int64) ((uint64) v >> 8))
		p[i] = (uint8) (v & 0xff);
}

static int64
get64(const uint8 *p)
{
	uint64		v = 0;

	for (int i = 0; i < 8; i++)
		v = (v << 8) | p[i];
	return (int64) v;
}

char *
ticket_make(const RlArgs *args, const RlOutcome *o)
{
	uint8		b[TICKET_BYTES];
	char		text[TICKET_TEXT + 8];
	int			n;

	if (o->entry_ts < 0 || o->store == NULL)
		return NULL;
	load_secret();
	b[0] = TICKET_VERSION;
	b[1] = (o->store[0] == 'f' ? FLAG_FALLBACK : 0) |
		(args->algorithm == ALGO_MULTI_LOG ? FLAG_MULTI : 0);
	put64(b + 2, o->entry_ts);
	put64(b + 10, args->cost);
	put64(b + 18, args->win_us);
	key_tag(args, b + TICKET_TAG_AT);
	hmac("ticket", b, TICKET_SIGNED, NULL, 0, b + TICKET_SIGNED, TICKET_MAC_LEN);

	n = pg_b64_encode((const slidewin_b64_byte *) b, TICKET_BYTES, text, sizeof(text));
	if (n != TICKET_TEXT)
		elog(ERROR, "could not encode a ticket");
	/* base64url: nothing in it needs quoting in a URL, a header or JSON */
	for (int i = 0; i < n; i++)
		text[i] = text[i] == '+' ? '-' : text[i] == '/' ? '_' : text[i];
	return pnstrdup(text, n);
}

/* Equal, in time that does not depend on where the bytes differ. */
static bool
same_bytes(const uint8 *a, const uint8 *b, size_t n)
{
	uint8		d = 0;

	for (size_t i = 0; i < n; i++)
		d |= a[i] ^ b[i];
	return d == 0;
}

static void
not_a_ticket(const char *why)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("argument \"ticket\" is not a ticket this database issued"),
			 errdetail("%s", why),
			 errhint("Pass the ticket column of the rl_result that recorded the entry, unchanged.")));
}

void
ticket_read(const char *text, const RlArgs *args, RlTicket *t)
{
	char		std[TICKET_TEXT];
	uint8		b[TICKET_BYTES + 4];
	uint8		mac[TICKET_MAC_LEN];
	uint8		tag[TICKET_TAG_LEN];
	size_t		len = strlen(text);

	if (len != TICKET_TEXT)
		not_a_ticket(psprintf("A ticket is %d characters long; this one is %zu.",
							  TICKET_TEXT, len));
	for (int i = 0; i < TICKET_TEXT; i++)
	{
		char		c = text[i];

		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
			  (c >= '0' && c <= '9') || c == '-' || c == '_'))
			not_a_ticket("It holds a character that is not base64url.");
		std[i] = c == '-' ? '+' : c == '_' ? '/' : c;
	}
	if (pg_b64_decode(std, TICKET_TEXT, (slidewin_b64_byte *) b, sizeof(b)) != TICKET_BYTES)
		not_a_ticket("It is not valid base64url.");
	if (b[0] != TICKET_VERSION)
		not_a_ticket("Its format version is unknown.");

	load_secret();
	hmac("ticket", b, TICKET_SIGNED, NULL, 0, mac, TICKET_MAC_LEN);
	if (!same_bytes(mac, b + TICKET_SIGNED, TICKET_MAC_LEN) ||
		(b[1] & ~(FLAG_FALLBACK | FLAG_MULTI)) != 0)
		not_a_ticket("Its signature does not match: it was altered, or issued by another database.");
	key_tag(args, tag);
	if (!same_bytes(tag, b + TICKET_TAG_AT, TICKET_TAG_LEN))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"ticket\" was issued for another key"),
				 errdetail("A ticket gives units back only to the key (under the key_prefix) whose call recorded them.")));

	t->fallback = (b[1] & FLAG_FALLBACK) != 0;
	t->multi = (b[1] & FLAG_MULTI) != 0;
	t->ts = get64(b + 2);
	t->cost = get64(b + 10);
	t->win_us = get64(b + 18);
	/* signed by us, so these hold; checked anyway rather than trusted */
	if (t->ts < 0 || t->cost < 1 || t->cost > RL_MAX_LIMIT || t->win_us <= 0)
		not_a_ticket("Its fields are out of range.");
}
