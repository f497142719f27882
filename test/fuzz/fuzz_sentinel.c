/*
 * fuzz_sentinel.c
 *		libFuzzer target for what a sentinel answers SENTINEL
 *		GET-MASTER-ADDR-BY-NAME with: the bytes read by hiredis's reader under
 *		the backend's reply bounds (src/reply_cap.c), then
 *		redis_sentinel_master_reply (src/redis_url.c).
 *
 * The input is fed to the reader in pieces, as a socket delivers it, and
 * every reply in it is checked. Beyond memory errors: an address is only
 * taken from an array of two strings, it is exactly the first string, its
 * host fits and holds only host characters, and its port is in range; a
 * refusal always says why.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "redis_url.h"
#include "feed_replies.h"
#include "reply_cap.h"

#define CHECK(cond) \
	do { \
		if (!(cond)) \
		{ \
			fprintf(stderr, "fuzz_sentinel: check failed: %s (line %d)\n", #cond, __LINE__); \
			abort(); \
		} \
	} while (0)

static void
check_reply(const redisReply *r)
{
	RedisHostPort hp;
	const char *why = NULL;

	memset(&hp, 0x5a, sizeof(hp));
	if (redis_sentinel_master_reply(r, &hp, &why))
	{
		CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 2);
		CHECK(r->element[0]->type == REDIS_REPLY_STRING);
		CHECK(memchr(hp.host, '\0', sizeof(hp.host)) != NULL);
		CHECK(strlen(hp.host) == r->element[0]->len && hp.host[0] != '\0');
		CHECK(memcmp(hp.host, r->element[0]->str, r->element[0]->len) == 0);
		CHECK(strspn(hp.host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_:") == strlen(hp.host));
		CHECK(hp.port >= 1 && hp.port <= 65535);
	}
	else
		CHECK(why != NULL && why[0] != '\0');
}

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	feed_replies(data, size, check_reply);
	return 0;
}
