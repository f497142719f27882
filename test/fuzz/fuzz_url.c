/*
 * fuzz_url.c
 *		libFuzzer target for src/redis_url.c: the URL grammar
 *		(redis_parse_url), the password file's line matcher
 *		(redis_passfile_match) and the version parser (redis_parse_version).
 *
 * The first byte picks one ('0', '1', '2', modulo 3); the rest is its input.
 * Beyond memory errors it checks what callers rely on: a parsed target's
 * strings end inside their fields, its numbers are in range, a cluster
 * target has seeds and nothing of the other schemes, and it survives
 * a round trip through a URL that spells it canonically; a matched password
 * fits its buffer (allocated to the exact size, so an off-by-one shows); and
 * the version parser agrees with a second, independent reading.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_url.h"

#define CHECK(cond) \
	do { \
		if (!(cond)) \
		{ \
			fprintf(stderr, "fuzz_url: check failed: %s (line %d)\n", #cond, __LINE__); \
			abort(); \
		} \
	} while (0)

static char *
dup_text(const uint8_t *data, size_t size)
{
	char	   *s = malloc(size + 1);

	memcpy(s, data, size);
	s[size] = '\0';
	return s;
}

static bool
ends_inside(const char *field, size_t size)
{
	return memchr(field, '\0', size) != NULL;
}

/* Percent-encode every byte that is not alphanumeric. */
static char *
put_encoded(char *o, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";

	for (; *s; s++)
	{
		unsigned char c = (unsigned char) *s;

		if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
			*o++ = (char) c;
		else
		{
			*o++ = '%';
			*o++ = hex[c >> 4];
			*o++ = hex[c & 15];
		}
	}
	return o;
}

/* The URL that names t, spelt canonically. */
static void
format_target(const RedisTarget *t, char *out)
{
	char	   *o = out;

	o += sprintf(o, "%s", t->is_unix ? "unix://" :
				 t->nsentinels > 0 ? (t->tls ? "rediss-sentinel://" : "redis-sentinel://") :
				 t->cluster ? (t->tls ? "rediss-cluster://" : "redis-cluster://") :
				 t->tls ? "rediss://" : "redis://");
	if (t->user[0] || t->password[0])
	{
		o = put_encoded(o, t->user);
		*o++ = ':';
		o = put_encoded(o, t->password);
		*o++ = '@';
	}
	if (t->nsentinels > 0)
	{
		for (int i = 0; i < t->nsentinels; i++)
		{
			const RedisHostPort *h = &t->sentinels[i];

			if (i > 0)
				*o++ = ',';
			if (strchr(h->host, ':') || h->host[0] == '[')
				o += sprintf(o, "[%s]:%d", h->host, h->port);
			else
				o += sprintf(o, "%s:%d", h->host, h->port);
		}
		o += sprintf(o, "/%s/%d", t->master, t->db);
	}
	else if (t->cluster)
	{
		for (int i = 0; i < t->nseeds; i++)
		{
			const RedisHostPort *h = &t->seeds[i];

			if (i > 0)
				*o++ = ',';
			if (strchr(h->host, ':') || h->host[0] == '[')
				o += sprintf(o, "[%s]:%d", h->host, h->port);
			else
				o += sprintf(o, "%s:%d", h->host, h->port);
		}
		o += sprintf(o, "/0");
	}
	else if (t->is_unix)
	{
		o += sprintf(o, "%s", t->path);
		if (t->db != 0)
			o += sprintf(o, "?db=%d", t->db);
	}
	else if (strchr(t->host, ':') || t->host[0] == '[')
		o += sprintf(o, "[%s]:%d/%d", t->host, t->port, t->db);
	else
		o += sprintf(o, "%s:%d/%d", t->host, t->port, t->db);
	*o = '\0';
}

static void
fuzz_parse_url(const uint8_t *data, size_t size)
{
	char	   *url = dup_text(data, size);
	RedisTarget *t = malloc(sizeof(RedisTarget));
	RedisTarget *again = malloc(sizeof(RedisTarget));
	char	   *canon = malloc(16384);
	const char *why = NULL;

	if (!redis_parse_url(url, t, &why))
		CHECK(why != NULL && why[0] != '\0');
	else
	{
		CHECK(ends_inside(t->host, sizeof(t->host)));
		CHECK(ends_inside(t->path, sizeof(t->path)));
		CHECK(ends_inside(t->user, sizeof(t->user)));
		CHECK(ends_inside(t->password, sizeof(t->password)));
		CHECK(t->port >= 1 && t->port <= 65535);
		CHECK(t->db >= 0 && t->db <= 1000000);
		CHECK(t->nsentinels >= 0 && t->nsentinels <= REDIS_MAX_SENTINELS);
		for (int i = 0; i < t->nsentinels; i++)
		{
			CHECK(ends_inside(t->sentinels[i].host, sizeof(t->sentinels[i].host)));
			CHECK(t->sentinels[i].host[0] != '\0');
			CHECK(t->sentinels[i].port >= 1 && t->sentinels[i].port <= 65535);
		}
		CHECK(ends_inside(t->master, sizeof(t->master)));
		CHECK((t->nsentinels > 0) == (t->master[0] != '\0'));
		CHECK(t->nseeds >= 0 && t->nseeds <= REDIS_MAX_SEEDS);
		CHECK(t->cluster == (t->nseeds > 0));
		if (t->cluster)
		{
			CHECK(t->nsentinels == 0 && t->db == 0 && !t->is_unix);
			for (int i = 0; i < t->nseeds; i++)
			{
				CHECK(ends_inside(t->seeds[i].host, sizeof(t->seeds[i].host)));
				CHECK(t->seeds[i].host[0] != '\0');
				CHECK(t->seeds[i].port >= 1 && t->seeds[i].port <= 65535);
			}
			CHECK(strcmp(t->host, t->seeds[0].host) == 0 && t->port == t->seeds[0].port);
		}
		if (t->is_unix)
			CHECK(t->path[0] == '/' && t->host[0] == '\0');
		else
			CHECK(t->host[0] != '\0' && t->path[0] == '\0');

		format_target(t, canon);
		why = NULL;
		if (!redis_parse_url(canon, again, &why))
		{
			fprintf(stderr, "fuzz_url: %s does not parse again: %s\n", canon, why);
			abort();
		}
		CHECK(memcmp(t, again, sizeof(RedisTarget)) == 0);
	}
	free(canon);
	free(again);
	free(t);
	free(url);
}

/*
 * Input: the password buffer's size, two bytes of port (0: a Unix socket,
 * whose port field is "*"), then host NUL user NUL line.
 */
static void
fuzz_passfile(const uint8_t *data, size_t size)
{
	const uint8_t *host;
	const uint8_t *user;
	const uint8_t *line;
	const uint8_t *end = data + size;
	size_t		pwsize;
	int			port;
	char	   *pw;
	size_t		colons = 0;

	if (size < 3)
		return;
	pwsize = 1 + data[0];
	port = (data[1] << 8) | data[2];
	host = data + 3;
	user = memchr(host, '\0', end - host);
	if (user == NULL)
		return;
	user++;
	line = memchr(user, '\0', end - user);
	if (line == NULL)
		return;
	line++;

	/* the line is matched by length, and must not be read past it */
	{
		char	   *copy = malloc(end - line + 1);
		bool		matched;

		memcpy(copy, line, end - line);
		pw = malloc(pwsize);
		memset(pw, 'x', pwsize);
		matched = redis_passfile_match(copy, end - line, (const char *) host, port,
									   (const char *) user, pw, pwsize);
		if (matched)
		{
			CHECK(ends_inside(pw, pwsize));
			/* a match needs the host, port and user fields before the password */
			for (size_t i = 0; i < (size_t) (end - line); i++)
			{
				if (copy[i] == '\\')
					i++;
				else if (copy[i] == ':')
					colons++;
			}
			CHECK(colons >= 3);
			CHECK(copy[0] != '#');
		}
		free(pw);
		free(copy);
	}
}

/* A second reading of "MAJOR.MINOR...": one to four digits each. */
static bool
reference_version(const char *s, size_t len, int *major, int *minor)
{
	int			part[2] = {0, 0};
	size_t		i = 0;

	for (int k = 0; k < 2; k++)
	{
		size_t		start;

		if (k == 1)
		{
			if (i == len || s[i] != '.')
				return false;
			i++;
		}
		start = i;
		while (i < len && s[i] >= '0' && s[i] <= '9')
			i++;
		if (i == start || i - start > 4)
			return false;
		for (size_t j = start; j < i; j++)
			part[k] = part[k] * 10 + (s[j] - '0');
	}
	*major = part[0];
	*minor = part[1];
	return true;
}

static void
fuzz_version(const uint8_t *data, size_t size)
{
	/* exactly the input's bytes, so a read past the length shows */
	char	   *s = malloc(size ? size : 1);
	int			major = -1,
				minor = -1,
				rmajor = -1,
				rminor = -1;
	bool		ok,
				rok;

	memcpy(s, data, size);
	ok = redis_parse_version(s, size, &major, &minor);
	rok = reference_version(s, size, &rmajor, &rminor);
	CHECK(ok == rok);
	if (ok)
	{
		CHECK(major == rmajor && minor == rminor);
		CHECK(major >= 0 && major <= 9999 && minor >= 0 && minor <= 9999);
	}
	free(s);
}

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	switch (data[0] % 3)
	{
		case 0:
			fuzz_parse_url(data + 1, size - 1);
			break;
		case 1:
			fuzz_passfile(data + 1, size - 1);
			break;
		default:
			fuzz_version(data + 1, size - 1);
			break;
	}
	return 0;
}
