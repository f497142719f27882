/*-------------------------------------------------------------------------
 *
 * misconf.c
 *		Configuration errors: a wrong or missing password, an ACL that
 *		refuses a command, a refused certificate, a password file that
 *		cannot be used, a server too old. Unlike an outage they do not pass
 *		by themselves, so they are logged, where an outage is only counted.
 *
 * The transport says what it saw (RedisResult.cause); this file only
 * warns. It decides nothing: the call follows its failure policy whatever
 * is logged here. The warning is rate-limited per backend, so that a
 * backend calling a misconfigured Redis in a loop logs once per
 * slidewin.redis_retry_interval for each cause, not once per call.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "misconf.h"
#include "settings.h"

/* When this backend last warned about each cause (0: never). */
static TimestampTz warned_at[RC_COUNT];

const char *
misconf_cause_name(RedisCause cause)
{
	switch (cause)
	{
		case RC_AUTH:
			return "authentication";
		case RC_ACL:
			return "ACL";
		case RC_TLS:
			return "TLS";
		case RC_PASSWORD_FILE:
			return "password file";
		case RC_VERSION:
			return "server version";
		default:
			return "none";
	}
}

void
misconf_warn(const RedisResult *r)
{
	TimestampTz now;

	if (r->cause <= RC_NONE || r->cause >= RC_COUNT)
		return;
	now = GetCurrentTimestamp();
	if (warned_at[r->cause] != 0 &&
		now < TimestampTzPlusMilliseconds(warned_at[r->cause], slidewin_redis_retry_interval))
		return;
	warned_at[r->cause] = now;

	switch (r->cause)
	{
		case RC_AUTH:
			ereport(WARNING,
					(errcode(ERRCODE_INVALID_PASSWORD),
					 errmsg("Redis refused slidewin's credentials"),
					 errdetail_internal("%s", r->message),
					 errhint("Check the user and password of slidewin.redis_url or slidewin.redis_password_file; until then calls follow their failure policy.")));
			break;
		case RC_ACL:
			ereport(WARNING,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("the Redis user may not run a command slidewin needs"),
					 errdetail_internal("%s", r->message),
					 errhint("Grant the user the commands that doc/installing.md lists; until then calls follow their failure policy.")));
			break;
		case RC_TLS:
			ereport(WARNING,
					(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
					 errmsg("slidewin could not verify the Redis server's certificate"),
					 errdetail_internal("%s", r->message),
					 errhint("Check slidewin.redis_tls_ca_file, slidewin.redis_tls_verify and the host name in slidewin.redis_url; until then calls follow their failure policy.")));
			break;
		case RC_PASSWORD_FILE:
			ereport(WARNING,
					(errcode(ERRCODE_CONFIG_FILE_ERROR),
					 errmsg("slidewin cannot use slidewin.redis_password_file"),
					 errdetail_internal("%s", r->message),
					 errhint("Make the file readable by the server's user only (chmod 0600); until then calls follow their failure policy.")));
			break;
		case RC_VERSION:
			ereport(WARNING,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("the Redis server is too old for slidewin"),
					 errdetail_internal("%s", r->message),
					 errhint("Use Redis 6.2 or later, or Valkey.")));
			break;
		default:
			break;
	}
}
