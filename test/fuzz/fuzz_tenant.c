/*
 * fuzz_tenant.c
 *		libFuzzer target for the pure part of rl_trigger's canonical tenant
 *		text (src/tenant_kind.c): which form a type's text takes, from its
 *		output function, and the trim of char(n) padding.
 *
 * The rest of the canonical text (looking up the output function, calling
 * it under pinned settings) needs a server and is covered by the
 * regression test trigger.sql, not here.
 *
 * Input: four bytes of output function OID (little-endian), one byte whose
 * low bit says whether that function is textout, then the text to trim.
 * Checks: every OID gets one of the three forms, char(n)'s output function
 * always gets the padded one and the plain ones stay plain; the trim only
 * removes trailing spaces, all of them, in place, and is idempotent.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utils/fmgroids.h"

#include "tenant_kind.h"

#define CHECK(cond) \
	do { \
		if (!(cond)) \
		{ \
			fprintf(stderr, "fuzz_tenant: check failed: %s (line %d)\n", #cond, __LINE__); \
			abort(); \
		} \
	} while (0)

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	Oid			outfunc;
	bool		textout;
	TenantKind	kind;
	char	   *s;
	char	   *before;
	size_t		len,
				kept;

	if (size < 5)
		return 0;
	outfunc = (Oid) data[0] | (Oid) data[1] << 8 | (Oid) data[2] << 16 | (Oid) data[3] << 24;
	textout = (data[4] & 1) != 0;
	data += 5;
	size -= 5;

	kind = tenant_kind(outfunc, textout);
	CHECK(kind == TENANT_PLAIN || kind == TENANT_PADDED || kind == TENANT_SETTINGS);
	if (outfunc == F_BPCHAROUT)
		CHECK(kind == TENANT_PADDED);
	else if (outfunc == F_TEXTOUT || outfunc == F_INT4OUT || outfunc == F_UUID_OUT || textout)
		CHECK(kind == TENANT_PLAIN);
	else if (outfunc == F_TIMESTAMPTZ_OUT || outfunc == F_FLOAT8OUT || outfunc == F_BYTEAOUT)
		CHECK(kind == TENANT_SETTINGS);
	CHECK(tenant_kind(outfunc, textout) == kind);

	/* exactly the text and its terminator, so a read or write past it shows */
	s = malloc(size + 1);
	memcpy(s, data, size);
	s[size] = '\0';
	len = strlen(s);
	before = strdup(s);

	CHECK(tenant_trim_padding(s) == s);
	kept = strlen(s);
	CHECK(kept <= len);
	CHECK(memcmp(s, before, kept) == 0);
	CHECK(kept == 0 || s[kept - 1] != ' ');
	for (size_t i = kept; i < len; i++)
		CHECK(before[i] == ' ');
	CHECK(tenant_trim_padding(s) == s && strlen(s) == kept);

	free(before);
	free(s);
	return 0;
}
