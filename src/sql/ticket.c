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
 * rl_attempt_all's ticket names the entry of every key of an admitted
 * call, so that rl_refund_all gives all of them back: 18 + 33n bytes for n
 * keys (a multiple of 3: base64url without padding, 24 + 44n characters):
 *   0      format version (2)
 *   1      n, 1 to RL_MAX_KEYS
 *   then for each key, in the call's order, 33 bytes:
 *     0      flags: 1 = fallback store
 *     1-8    the entry's time, big-endian
 *     9-16   its cost
 *     17-24  its window, in microseconds
 *     25-32  key tag: HMAC-SHA256(secret, "key" || stored key), first 8 bytes
 *   last 16: HMAC-SHA256(secret, "tickets" || everything before), first 16
 * Each key is bound by its tag, as in a ticket of one key, and the order
 * and number of keys by the signature: the keys handed back with it must
 * be the call's, in its order, and no key can be added, dropped or swapped.
 *
 * ticket_give_back gives back the entry a ticket names; rl_refund and
 * rl_refund_all both use it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <openssl/evp.h>

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "common/base64.h"
#include "common/sha2.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "compat.h"
#include "deny_cache.h"
#include "fallback.h"
#include "fallback_carry.h"
#include "settings.h"
#include "stats.h"
#include "store_redis.h"
#include "switch.h"
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

/* rl_attempt_all's tickets (see the header) */
#define TICKETS_VERSION 2
#define TICKETS_HEAD 2
#define TICKETS_REC 33
#define TICKETS_TAG_LEN 8
#define TICKETS_BYTES(n) (TICKETS_HEAD + TICKETS_REC * (n) + TICKET_MAC_LEN)
#define TICKETS_TEXT(n) (TICKETS_BYTES(n) / 3 * 4)

static uint8 secret[SECRET_LEN];
static bool secret_valid = false;
static bool mac_keyed = false;	/* the states of hmac() are of this secret */
static bool callback_registered = false;

/*
 * The last key tagged, and its tag: a hot key's calls sign a ticket each,
 * and its tag is one HMAC of the two a ticket costs. Kept for keys up to
 * TAG_CACHE_KEY bytes; a new secret empties it (load_secret).
 */
#define TAG_CACHE_KEY 256
#define TAG_CACHE_LEN 8
static uint8 tag_cache_key[TAG_CACHE_KEY];
static size_t tag_cache_keylen = 0;
static uint8 tag_cache[TAG_CACHE_LEN];
static bool tag_cache_valid = false;

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
		/* a new secret needs new keyed states (see hmac) */
		if (memcmp(secret, VARDATA_ANY(b), SECRET_LEN) != 0)
		{
			memcpy(secret, VARDATA_ANY(b), SECRET_LEN);
			mac_keyed = false;
			tag_cache_valid = false;
		}
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

/*
 * HMAC-SHA256 (RFC 2104) under the secret. Every rl_attempt that records an
 * entry signs a ticket, so the keyed part, the digest states after the
 * secret's inner and outer pads, is made once per secret and copied for
 * each MAC: setting up an HMAC from the key each time cost more than the
 * rest of rl_attempt together (doc/performance.md, "The web route"). The
 * states live in OpenSSL's memory for the backend's life; a changed secret
 * remakes them.
 */
static EVP_MD_CTX *mac_inner;
static EVP_MD_CTX *mac_outer;
static EVP_MD_CTX *mac_work;

static void
mac_failed(void)
{
	elog(ERROR, "could not compute a ticket's HMAC");
}

static void
mac_key(void)
{
	uint8		pad[PG_SHA256_BLOCK_LENGTH];

	if (mac_keyed)
		return;
	if (mac_inner == NULL &&
		((mac_inner = EVP_MD_CTX_new()) == NULL ||
		 (mac_outer = EVP_MD_CTX_new()) == NULL ||
		 (mac_work = EVP_MD_CTX_new()) == NULL))
	{
		EVP_MD_CTX_free(mac_inner);
		EVP_MD_CTX_free(mac_outer);
		mac_inner = mac_outer = NULL;
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	}
	/* the secret is shorter than a block: it is padded, not hashed */
	StaticAssertStmt(SECRET_LEN <= PG_SHA256_BLOCK_LENGTH, "secret longer than a block");
	memset(pad, 0x36, sizeof(pad));
	for (int i = 0; i < SECRET_LEN; i++)
		pad[i] ^= secret[i];
	if (EVP_DigestInit_ex(mac_inner, EVP_sha256(), NULL) != 1 ||
		EVP_DigestUpdate(mac_inner, pad, sizeof(pad)) != 1)
		mac_failed();
	memset(pad, 0x5c, sizeof(pad));
	for (int i = 0; i < SECRET_LEN; i++)
		pad[i] ^= secret[i];
	if (EVP_DigestInit_ex(mac_outer, EVP_sha256(), NULL) != 1 ||
		EVP_DigestUpdate(mac_outer, pad, sizeof(pad)) != 1)
		mac_failed();
	explicit_bzero(pad, sizeof(pad));
	mac_keyed = true;
}

static void
hmac(const char *label, const uint8 *a, size_t alen, const uint8 *b, size_t blen,
	 uint8 *out, size_t outlen)
{
	uint8		full[PG_SHA256_DIGEST_LENGTH];
	unsigned int len = 0;

	mac_key();
	if (EVP_MD_CTX_copy_ex(mac_work, mac_inner) != 1 ||
		EVP_DigestUpdate(mac_work, label, strlen(label) + 1) != 1 ||
		EVP_DigestUpdate(mac_work, a, alen) != 1 ||
		(blen > 0 && EVP_DigestUpdate(mac_work, b, blen) != 1) ||
		EVP_DigestFinal_ex(mac_work, full, &len) != 1 ||
		len != sizeof(full) ||
		EVP_MD_CTX_copy_ex(mac_work, mac_outer) != 1 ||
		EVP_DigestUpdate(mac_work, full, sizeof(full)) != 1 ||
		EVP_DigestFinal_ex(mac_work, full, &len) != 1 ||
		len != sizeof(full))
		mac_failed();
	memcpy(out, full, outlen);
}

/* The tag of the key as stored: key_prefix, then the user key. */
static void
key_tag(const RlArgs *args, uint8 *tag, size_t taglen)
{
	const char *prefix = slidewin_key_prefix ? slidewin_key_prefix : "";
	size_t		plen = strlen(prefix);
	size_t		len = plen + args->keylen;
	uint8	   *buf = palloc(len);

	Assert(taglen <= TAG_CACHE_LEN);
	memcpy(buf, prefix, plen);
	memcpy(buf + plen, args->key, args->keylen);
	if (tag_cache_valid && len == tag_cache_keylen && memcmp(buf, tag_cache_key, len) == 0)
	{
		memcpy(tag, tag_cache, taglen);
		pfree(buf);
		return;
	}
	hmac("key", buf, len, NULL, 0, tag_cache, TAG_CACHE_LEN);
	memcpy(tag, tag_cache, taglen);
	tag_cache_valid = len <= TAG_CACHE_KEY;
	if (tag_cache_valid)
	{
		memcpy(tag_cache_key, buf, len);
		tag_cache_keylen = len;
	}
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
	key_tag(args, b + TICKET_TAG_AT, TICKET_TAG_LEN);
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
		not_a_ticket(len > TICKET_TEXT && (len - TICKETS_TEXT(0)) % (TICKETS_REC / 3 * 4) == 0 ?
					 psprintf("It is %zu characters long, as a ticket of rl_attempt_all is: hand it to rl_refund_all with the call's keys.", len) :
					 psprintf("A ticket is %d characters long; this one is %zu.",
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
	key_tag(args, tag, TICKET_TAG_LEN);
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

/*
 * rl_attempt_all's ticket: every key's entry (see the header), or NULL
 * unless every key recorded one (a denial, a policy's answer, a counting
 * algorithm).
 */
char *
ticket_make_all(int n, const RlArgs *args, const RlOutcome *o)
{
	uint8		b[TICKETS_BYTES(RL_MAX_KEYS)];
	char		text[TICKETS_TEXT(RL_MAX_KEYS) + 8];
	int			len = TICKETS_BYTES(n);
	int			tlen;

	Assert(n >= 1 && n <= RL_MAX_KEYS);
	for (int k = 0; k < n; k++)
		if (o[k].entry_ts < 0 || o[k].store == NULL)
			return NULL;
	load_secret();
	b[0] = TICKETS_VERSION;
	b[1] = (uint8) n;
	for (int k = 0; k < n; k++)
	{
		uint8	   *r = b + TICKETS_HEAD + TICKETS_REC * k;

		r[0] = o[k].store[0] == 'f' ? FLAG_FALLBACK : 0;
		put64(r + 1, o[k].entry_ts);
		put64(r + 9, args[k].cost);
		put64(r + 17, args[k].win_us);
		key_tag(&args[k], r + 25, TICKETS_TAG_LEN);
	}
	hmac("tickets", b, len - TICKET_MAC_LEN, NULL, 0, b + len - TICKET_MAC_LEN, TICKET_MAC_LEN);

	tlen = pg_b64_encode((const slidewin_b64_byte *) b, len, text, sizeof(text));
	if (tlen != TICKETS_TEXT(n))
		elog(ERROR, "could not encode a ticket");
	for (int i = 0; i < tlen; i++)
		text[i] = text[i] == '+' ? '-' : text[i] == '/' ? '_' : text[i];
	return pnstrdup(text, tlen);
}

void
ticket_read_all(const char *text, int n, const RlArgs *args, RlTicket *t)
{
	char		std[TICKETS_TEXT(RL_MAX_KEYS)];
	uint8		b[TICKETS_BYTES(RL_MAX_KEYS) + 4];
	uint8		mac[TICKET_MAC_LEN];
	size_t		len = strlen(text);
	int			bytes;
	int			count;

	/* the lengths of 1 to RL_MAX_KEYS keys: 24 + 44n characters */
	if (len < TICKETS_TEXT(1) || len > TICKETS_TEXT(RL_MAX_KEYS) ||
		(len - TICKETS_TEXT(0)) % (TICKETS_REC / 3 * 4) != 0)
		not_a_ticket(psprintf("It is %zu characters long, the length of no ticket of rl_attempt_all.",
							  len));
	for (size_t i = 0; i < len; i++)
	{
		char		c = text[i];

		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
			  (c >= '0' && c <= '9') || c == '-' || c == '_'))
			not_a_ticket("It holds a character that is not base64url.");
		std[i] = c == '-' ? '+' : c == '_' ? '/' : c;
	}
	bytes = pg_b64_decode(std, (int) len, (slidewin_b64_byte *) b, sizeof(b));
	if (bytes != (int) len / 4 * 3)
		not_a_ticket("It is not valid base64url.");
	if (b[0] != TICKETS_VERSION)
		not_a_ticket(b[0] == TICKET_VERSION ?
					 "It is the ticket of one key: hand it to rl_refund with its key." :
					 "Its format version is unknown.");

	load_secret();
	hmac("tickets", b, bytes - TICKET_MAC_LEN, NULL, 0, mac, TICKET_MAC_LEN);
	count = b[1];
	if (!same_bytes(mac, b + bytes - TICKET_MAC_LEN, TICKET_MAC_LEN) ||
		count < 1 || count > RL_MAX_KEYS || TICKETS_BYTES(count) != bytes)
		not_a_ticket("Its signature does not match: it was altered, or issued by another database.");
	if (count != n)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"ticket\" was issued for %d keys, not %d", count, n),
				 errdetail("Pass the keys of the call that returned the ticket, in the order it was given them.")));
	for (int k = 0; k < n; k++)
	{
		const uint8 *r = b + TICKETS_HEAD + TICKETS_REC * k;
		uint8		tag[TICKETS_TAG_LEN];

		key_tag(&args[k], tag, TICKETS_TAG_LEN);
		if (!same_bytes(tag, r + 25, TICKETS_TAG_LEN))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("argument \"ticket\" was issued for other keys"),
					 errdetail("\"keys[%d]\" is not the key the call that returned the ticket had there.", k + 1),
					 errhint("Pass the keys of that call, in the order it was given them, under the same key_prefix.")));
		if ((r[0] & ~FLAG_FALLBACK) != 0)
			not_a_ticket("Its fields are out of range.");
		t[k].fallback = (r[0] & FLAG_FALLBACK) != 0;
		t[k].multi = false;
		t[k].ts = get64(r + 1);
		t[k].cost = get64(r + 9);
		t[k].win_us = get64(r + 17);
		if (t[k].ts < 0 || t[k].cost < 1 || t[k].cost > RL_MAX_LIMIT || t[k].win_us <= 0)
			not_a_ticket("Its fields are out of range.");
	}
}

/*
 * Give back, now, the units of the entry t names, in the store that
 * recorded it (rl_refund, for each key of rl_refund_all). Idempotent: a
 * ticket handed in twice, or the entry already given back at ROLLBACK,
 * gives back once; an entry that has left its window, or that an rl_reset
 * removed, has nothing to give back (false). A Redis entry is given back at
 * once, whatever becomes of this transaction, like the entry's admission;
 * a fallback entry with this transaction, like every fallback write. When
 * Redis cannot answer, the refund cannot be made (or known to be
 * unneeded), whatever the failure policy: an ERROR, and the ticket stays
 * good for a retry.
 */
bool
ticket_give_back(RlArgs *args, const RlTicket *t)
{
	bool		given = false;

	args->algorithm = t->multi ? ALGO_MULTI_LOG : ALGO_SLIDING_LOG;
	args->cost = t->cost;
	args->win_us = t->win_us;

	if (t->fallback)
	{
		bool		carried;
		char		id[96];

		PreventCommandDuringRecovery("rl_refund of an entry of the fallback store");
		given = fallback_refund(args, t->ts, t->cost, t->win_us, &carried);

		/*
		 * An admission already carried into Redis counts there too: it is
		 * given back there now, as a Redis entry is (whatever becomes of
		 * this transaction), or, when Redis cannot answer, not at all: an
		 * ERROR, which takes the fallback store's refund back with it.
		 */
		if (given && carried && fallback_carry_name(args, t->ts, id, sizeof(id)))
		{
			RedisResult r;
			bool		in_redis;

			if (!policy_redis_may_be_tried(&r))
				policy_unavailable_error(&r);
			if (!redis_store_refund_imported(args, id, t->cost, t->win_us, &in_redis, &r))
			{
				policy_redis_failed(&r);
				policy_unavailable_error(&r);
			}
		}
	}
	else
	{
		RedisResult r;

		if (!policy_redis_may_be_tried(&r))
			policy_unavailable_error(&r);
		if (!redis_store_refund_now(args, t->ts, t->cost, t->win_us, &given, &r))
		{
			policy_redis_failed(&r);
			policy_unavailable_error(&r);
		}
	}
	/* After the refund: see deny_cache.c. */
	if (given)
	{
		deny_cache_invalidate(deny_cache_key_hash(args->key, args->keylen));
		stats_refund(true);
	}
	return given;
}
