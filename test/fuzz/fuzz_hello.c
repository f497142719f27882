/*
 * fuzz_hello.c
 *		libFuzzer target for the version check on connecting: the bytes a
 *		server answers HELLO 2 with, read by hiredis's reader under the
 *		backend's reply bounds (src/reply_cap.c), then redis_hello_version
 *		(src/redis_url.c).
 *
 * The input is fed to the reader in pieces, as a socket delivers it, and
 * every reply in it is checked. Beyond memory errors: a version is only
 * found in a "version" field, it is what redis_parse_version reads there,
 * and the text kept for the message fits its buffer.
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
			fprintf(stderr, "fuzz_hello: check failed: %s (line %d)\n", #cond, __LINE__); \
			abort(); \
		} \
	} while (0)

static void
check_hello(const redisReply *r)
{
	char		found[64];
	int			major = -1,
				minor = -1;
	bool		ok = redis_hello_version(r, &major, &minor, found, sizeof(found));

	CHECK(memchr(found, '\0', sizeof(found)) != NULL);
	CHECK(strlen(found) <= 60);
	if (ok)
	{
		int			m2,
					n2;

		CHECK(r->type == REDIS_REPLY_ARRAY);
		CHECK(major >= 0 && major <= 9999 && minor >= 0 && minor <= 9999);
		CHECK(redis_parse_version(found, strlen(found), &m2, &n2));
		CHECK(m2 == major && n2 == minor);
	}
	else if (r->type != REDIS_REPLY_ARRAY)
		CHECK(found[0] == '\0');
}

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	feed_replies(data, size, check_hello);
	return 0;
}
