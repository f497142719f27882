/*-------------------------------------------------------------------------
 *
 * redis_url.c
 *		The grammar of slidewin.redis_url and of the password file, and the
 *		version a server names in its answer to HELLO.
 *
 * Everything here is a pure function of its input strings (or of a reply
 * tree hiredis has already parsed): it must not allocate, raise errors, or
 * depend on the server, so that the same code runs in a GUC check hook, in
 * the connection path, and under a fuzzer.
 * Every bound is checked before a byte is copied.
 *
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "redis_url.h"

static int
hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/*
 * Copy [src, src+len) into dst, undoing %XX escapes. %00 is refused: the
 * result is a C string, and a NUL inside it would silently cut the user or
 * password short.
 */
static bool
copy_decoded(char *dst, size_t dstsize, const char *src, size_t len)
{
	size_t		o = 0;

	for (size_t i = 0; i < len; i++)
	{
		char		c = src[i];

		if (c == '%')
		{
			int			hi,
						lo;

			if (i + 2 >= len)
				return false;
			hi = hexval(src[i + 1]);
			lo = hexval(src[i + 2]);
			if (hi < 0 || lo < 0)
				return false;
			c = (char) (hi * 16 + lo);
			if (c == '\0')
				return false;
			i += 2;
		}
		if (o + 1 >= dstsize)
			return false;
		dst[o++] = c;
	}
	dst[o] = '\0';
	return true;
}

bool
redis_parse_int_range(const char *s, size_t len, int lo, int hi, int *out)
{
	long		v = 0;

	if (len == 0 || len > 9)
		return false;
	for (size_t i = 0; i < len; i++)
	{
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (s[i] - '0');
	}
	if (v < lo || v > hi)
		return false;
	*out = (int) v;
	return true;
}

/* "user:password", ":password" or "password" */
static bool
parse_userinfo(const char *s, size_t len, RedisTarget *t)
{
	const char *colon = memchr(s, ':', len);

	if (colon == NULL)
		return copy_decoded(t->password, sizeof(t->password), s, len);
	if (!copy_decoded(t->user, sizeof(t->user), s, colon - s))
		return false;
	return copy_decoded(t->password, sizeof(t->password), colon + 1,
						len - (colon - s) - 1);
}

/*
 * One host[:port] or [v6addr][:port] in [p, end): copied to hp, with
 * default_port when none is given. False with *why on anything else.
 */
static bool
parse_hostport(const char *p, const char *end, int default_port,
			   RedisHostPort *hp, const char **why)
{
	hp->port = default_port;
	if (p < end && *p == '[')
	{
		const char *rb = memchr(p, ']', end - p);

		if (rb == NULL || rb - p - 1 <= 0 || (size_t) (rb - p - 1) >= sizeof(hp->host))
		{
			*why = "The bracketed IPv6 host is malformed.";
			return false;
		}
		memcpy(hp->host, p + 1, rb - p - 1);
		hp->host[rb - p - 1] = '\0';
		p = rb + 1;
		if (p < end && *p != ':')
		{
			*why = "Expected \":port\" after the IPv6 host.";
			return false;
		}
	}
	else
	{
		const char *colon = memchr(p, ':', end - p);
		const char *hend = colon ? colon : end;

		if (hend == p || (size_t) (hend - p) >= sizeof(hp->host))
		{
			*why = "The host is empty or too long.";
			return false;
		}
		memcpy(hp->host, p, hend - p);
		hp->host[hend - p] = '\0';
		p = hend;
	}
	if (p < end && *p == ':' &&
		!redis_parse_int_range(p + 1, end - p - 1, 1, 65535, &hp->port))
	{
		*why = "The port must be a number from 1 to 65535.";
		return false;
	}
	return true;
}

/*
 * The sentences for a malformed host list: one set for each scheme that
 * takes a list, so that the message names what the hosts are for.
 */
typedef struct HostListWords
{
	const char *empty;			/* no host at all */
	const char *empty_entry;	/* "a,,b" or "a," */
	const char *too_many;
} HostListWords;

static const HostListWords sentinel_words = {
	"The list of sentinels is empty.",
	"An entry of the list of sentinels is empty.",
	"At most 8 sentinels may be listed.",
};

static const HostListWords seed_words = {
	"The list of cluster seed nodes is empty.",
	"An entry of the list of cluster seed nodes is empty.",
	"At most 16 cluster seed nodes may be listed.",
};

/*
 * host[:port][,host[:port]...] in [p, end) into list, at most max entries,
 * counted in *n.
 */
static bool
parse_host_list(const char *p, const char *end, int default_port,
				RedisHostPort *list, int max, int *n,
				const HostListWords *words, const char **why)
{
	if (p == end)
	{
		*why = words->empty;
		return false;
	}
	while (p < end)
	{
		const char *comma = memchr(p, ',', end - p);
		const char *hend = comma ? comma : end;

		if (hend == p)
		{
			*why = words->empty_entry;
			return false;
		}
		if (*n == max)
		{
			*why = words->too_many;
			return false;
		}
		if (!parse_hostport(p, hend, default_port, &list[*n], why))
			return false;
		(*n)++;
		if (comma && comma + 1 == end)
		{
			*why = words->empty_entry;
			return false;
		}
		p = comma ? comma + 1 : end;
	}
	return true;
}

/*
 * The "[user]:password@" that may open what follows the scheme. The last
 * '@' before the first '/' ends it, so that an unencoded '@' in a password
 * still works. *p steps past it.
 */
static bool
skip_userinfo(const char **p, RedisTarget *t, const char **why)
{
	const char *slash = strchr(*p, '/');
	const char *stop = slash ? slash : *p + strlen(*p);
	const char *at = NULL;

	for (const char *q = *p; q < stop; q++)
		if (*q == '@')
			at = q;
	if (at == NULL)
		return true;
	if (!parse_userinfo(*p, at - *p, t))
	{
		*why = "The user or password part is malformed or too long.";
		return false;
	}
	*p = at + 1;
	return true;
}

/*
 * redis-sentinel://[[user]:password@]host[:port][,host[:port]...]/master[/db]
 * after the scheme, at p.
 */
static bool
parse_sentinel(const char *p, RedisTarget *t, const char **why)
{
	const char *slash;
	const char *name;
	const char *name_end;

	if (!skip_userinfo(&p, t, why))
		return false;
	slash = strchr(p, '/');
	if (slash == NULL || slash == p)
	{
		*why = slash ? "The list of sentinels is empty." :
			"The master's name is missing: redis-sentinel://host[:port][,host[:port]...]/master_name[/db].";
		return false;
	}
	if (!parse_host_list(p, slash, 26379, t->sentinels, REDIS_MAX_SENTINELS,
						 &t->nsentinels, &sentinel_words, why))
		return false;
	name = slash + 1;
	name_end = strchr(name, '/');
	if (name_end == NULL)
		name_end = name + strlen(name);
	if (name_end == name || (size_t) (name_end - name) >= sizeof(t->master))
	{
		*why = "The master's name is empty or too long.";
		return false;
	}
	memcpy(t->master, name, name_end - name);
	t->master[name_end - name] = '\0';
	if (*name_end == '/' &&
		!redis_parse_int_range(name_end + 1, strlen(name_end + 1), 0, 1000000, &t->db))
	{
		*why = "The database must be a non-negative number.";
		return false;
	}
	/* the first sentinel stands in the host fields, for messages */
	memcpy(t->host, t->sentinels[0].host, sizeof(t->host));
	t->port = t->sentinels[0].port;
	return true;
}

/*
 * redis-cluster://[[user]:password@]host[:port][,host[:port]...][/0] after
 * the scheme, at p. The hosts are only where discovery starts: any node
 * that answers CLUSTER SLOTS names the others. A cluster serves database 0
 * alone and has no master's name, so a path is accepted only as "/0": a URL
 * that carries more was most likely written for another scheme, and saying
 * so beats connecting somewhere else than the user meant.
 */
static bool
parse_cluster(const char *p, RedisTarget *t, const char **why)
{
	const char *slash;

	t->cluster = true;
	if (!skip_userinfo(&p, t, why))
		return false;
	slash = strchr(p, '/');
	if (!parse_host_list(p, slash ? slash : p + strlen(p), 6379, t->seeds,
						 REDIS_MAX_SEEDS, &t->nseeds, &seed_words, why))
		return false;
	if (slash && slash[1] != '\0')
	{
		int			db;

		if (!redis_parse_int_range(slash + 1, strlen(slash + 1), 0, 0, &db))
		{
			*why = "A cluster URL names no master and no database but 0: after the hosts only \"/0\" may follow.";
			return false;
		}
	}
	/* the first seed stands in the host fields, for messages */
	memcpy(t->host, t->seeds[0].host, sizeof(t->host));
	t->port = t->seeds[0].port;
	return true;
}

/*
 * Parse redis://[[user]:password@]host[:port][/db],
 * unix://[[user]:password@]/path/to/socket[?db=N] and the sentinel and
 * cluster schemes above.
 * Runs in a GUC check hook: no palloc'd results, no ereport.
 */
bool
redis_parse_url(const char *url, RedisTarget *t, const char **why)
{
	const char *p;
	const char *at;

	memset(t, 0, sizeof(*t));
	t->port = 6379;

	if (strncmp(url, "redis-sentinel://", 17) == 0)
		return parse_sentinel(url + 17, t, why);
	if (strncmp(url, "rediss-sentinel://", 18) == 0)
	{
		t->tls = true;
		return parse_sentinel(url + 18, t, why);
	}
	if (strncmp(url, "redis-cluster://", 16) == 0)
		return parse_cluster(url + 16, t, why);
	if (strncmp(url, "rediss-cluster://", 17) == 0)
	{
		t->tls = true;
		return parse_cluster(url + 17, t, why);
	}
	if (strncmp(url, "redis://", 8) == 0 || strncmp(url, "rediss://", 9) == 0)
	{
		const char *end;
		const char *slash;
		const char *hostend;

		t->tls = (url[5] == 's');
		p = url + (t->tls ? 9 : 8);
		end = p + strlen(p);
		slash = strchr(p, '/');
		at = NULL;
		for (const char *q = p; q < (slash ? slash : end); q++)
			if (*q == '@')
				at = q;
		if (at)
		{
			if (!parse_userinfo(p, at - p, t))
			{
				*why = "The user or password part is malformed or too long.";
				return false;
			}
			p = at + 1;
			slash = strchr(p, '/');
		}
		hostend = slash ? slash : end;
		{
			RedisHostPort hp;

			/* zeroed, so that the target compares and hashes by its contents */
			memset(&hp, 0, sizeof(hp));
			if (!parse_hostport(p, hostend, 6379, &hp, why))
				return false;
			memcpy(t->host, hp.host, sizeof(t->host));
			t->port = hp.port;
		}
		if (slash && slash[1] != '\0')
		{
			if (!redis_parse_int_range(slash + 1, strlen(slash + 1), 0, 1000000, &t->db))
			{
				*why = "The database must be a non-negative number.";
				return false;
			}
		}
		return true;
	}

	if (strncmp(url, "unix://", 7) == 0)
	{
		const char *q;

		p = url + 7;
		at = NULL;
		if (*p != '/')
		{
			at = strchr(p, '@');
			if (at == NULL || !parse_userinfo(p, at - p, t))
			{
				*why = "Expected unix:///path/to/socket or unix://:password@/path.";
				return false;
			}
			p = at + 1;
		}
		if (*p != '/')
		{
			*why = "The socket path must be absolute.";
			return false;
		}
		q = strchr(p, '?');
		if ((size_t) ((q ? q : p + strlen(p)) - p) >= sizeof(t->path))
		{
			*why = "The socket path is too long.";
			return false;
		}
		memcpy(t->path, p, (q ? q : p + strlen(p)) - p);
		if (q)
		{
			if (strncmp(q, "?db=", 4) != 0 ||
				!redis_parse_int_range(q + 4, strlen(q + 4), 0, 1000000, &t->db))
			{
				*why = "The only query parameter is db=N, a non-negative number.";
				return false;
			}
		}
		t->is_unix = true;
		return true;
	}

	*why = "The URL must start with redis://, rediss://, redis-sentinel://, rediss-sentinel://, redis-cluster://, rediss-cluster:// or unix://.";
	return false;
}


/*
 * Copy the next ':'-separated field of [*p, end) into out (undoing
 * backslash escapes) and step past its separator. False when the field does
 * not fit; *last is set when the line ends after it.
 */
static bool
next_field(const char **p, const char *end, char *out, size_t outsize, bool *last)
{
	size_t		o = 0;
	const char *q = *p;

	*last = true;
	while (q < end)
	{
		char		c = *q++;

		if (c == ':')
		{
			*last = false;
			break;
		}
		if (c == '\\' && q < end)
			c = *q++;
		if (o + 1 >= outsize)
			return false;
		out[o++] = c;
	}
	out[o] = '\0';
	*p = q;
	return true;
}

static bool
field_matches(const char *field, const char *value)
{
	return strcmp(field, "*") == 0 || strcmp(field, value) == 0;
}

bool
redis_passfile_match(const char *line, size_t len,
					 const char *host, int port, const char *user,
					 char *password, size_t pwsize)
{
	const char *p = line;
	const char *end = line + len;
	char		f_host[1024];
	char		f_port[16];
	char		f_user[128];
	char		portbuf[16];
	bool		last;

	while (end > p && (end[-1] == '\n' || end[-1] == '\r'))
		end--;
	if (p == end || *p == '#')
		return false;
	if (!next_field(&p, end, f_host, sizeof(f_host), &last) || last ||
		!next_field(&p, end, f_port, sizeof(f_port), &last) || last ||
		!next_field(&p, end, f_user, sizeof(f_user), &last) || last)
		return false;
	if (port > 0)
		snprintf(portbuf, sizeof(portbuf), "%d", port);
	else
		strcpy(portbuf, "*");
	if (!field_matches(f_host, host) || !field_matches(f_port, portbuf) ||
		!field_matches(f_user, user))
		return false;
	/* the password is the rest of the line, colons and all, escapes undone */
	{
		size_t		o = 0;

		while (p < end)
		{
			char		c = *p++;

			if (c == '\\' && p < end)
				c = *p++;
			if (o + 1 >= pwsize)
				return false;
			password[o++] = c;
		}
		password[o] = '\0';
	}
	return true;
}

bool
redis_parse_version(const char *s, size_t len, int *major, int *minor)
{
	int			part[2] = {0, 0};
	size_t		i = 0;

	for (int k = 0; k < 2; k++)
	{
		size_t		digits = 0;

		if (k == 1)
		{
			if (i >= len || s[i] != '.')
				return false;
			i++;
		}
		while (i < len && s[i] >= '0' && s[i] <= '9' && digits < 5)
		{
			part[k] = part[k] * 10 + (s[i] - '0');
			i++;
			digits++;
		}
		if (digits == 0 || digits > 4)
			return false;
	}
	*major = part[0];
	*minor = part[1];
	return true;
}

bool
redis_parse_master_addr(const char *host, size_t hostlen,
						const char *port, size_t portlen,
						RedisHostPort *out, const char **why)
{
	if (hostlen == 0 || hostlen >= sizeof(out->host))
	{
		*why = "The master's address announced by the sentinel is empty or too long.";
		return false;
	}
	for (size_t i = 0; i < hostlen; i++)
	{
		char		c = host[i];

		/* a name or an address: letters, digits, '.', '-', '_' and ':' (IPv6) */
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			  (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_' || c == ':'))
		{
			*why = "The master's address announced by the sentinel has a character no host name or address has.";
			return false;
		}
	}
	if (!redis_parse_int_range(port, portlen, 1, 65535, &out->port))
	{
		*why = "The master's port announced by the sentinel is not a number from 1 to 65535.";
		return false;
	}
	memcpy(out->host, host, hostlen);
	out->host[hostlen] = '\0';
	return true;
}

bool
redis_hello_version(const redisReply *r, int *major, int *minor,
					char *found, size_t foundsize)
{
	if (foundsize > 0)
		found[0] = '\0';
	if (r->type != REDIS_REPLY_ARRAY)
		return false;
	/* HELLO 2 answers a flat array of field names and values */
	for (size_t i = 0; i + 1 < r->elements; i += 2)
	{
		const redisReply *k = r->element[i];
		const redisReply *v = r->element[i + 1];

		if (k->type == REDIS_REPLY_STRING && k->len == 7 &&
			memcmp(k->str, "version", 7) == 0 &&
			v->type == REDIS_REPLY_STRING)
		{
			snprintf(found, foundsize, "%.*s", (int) (v->len < 60 ? v->len : 60), v->str);
			return redis_parse_version(v->str, v->len, major, minor);
		}
	}
	return false;
}

bool
redis_hello_field(const redisReply *r, const char *field, char *out, size_t size)
{
	size_t		flen = strlen(field);

	if (size > 0)
		out[0] = '\0';
	if (r->type != REDIS_REPLY_ARRAY)
		return false;
	for (size_t i = 0; i + 1 < r->elements; i += 2)
	{
		const redisReply *k = r->element[i];
		const redisReply *v = r->element[i + 1];

		if (k->type == REDIS_REPLY_STRING && k->len == flen &&
			memcmp(k->str, field, flen) == 0 && v->type == REDIS_REPLY_STRING)
		{
			snprintf(out, size, "%.*s", (int) (v->len < size ? v->len : size), v->str);
			return true;
		}
	}
	return false;
}

bool
redis_sentinel_master_reply(const redisReply *r, RedisHostPort *out, const char **why)
{
	if (r->type == REDIS_REPLY_NIL || (r->type == REDIS_REPLY_ARRAY && r->elements == 0))
	{
		*why = "The sentinel does not know a master by that name.";
		return false;
	}
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
		r->element[0]->type != REDIS_REPLY_STRING ||
		r->element[1]->type != REDIS_REPLY_STRING)
	{
		*why = "The sentinel's answer is not an address and a port.";
		return false;
	}
	return redis_parse_master_addr(r->element[0]->str, r->element[0]->len,
								   r->element[1]->str, r->element[1]->len,
								   out, why);
}
