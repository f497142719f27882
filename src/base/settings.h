/*-------------------------------------------------------------------------
 *
 * settings.h
 *		Every slidewin.* setting: its variable, the values of its enum, and
 *		settings_define, which _PG_init calls once.
 *
 * The variables live here, at the bottom of the house, so that any layer
 * may read a setting without depending on the layer that acts on it. What
 * a change must set off in the layers above (a new Redis target, a new TLS
 * context, forgotten denials) is not known here: _PG_init hands those hooks
 * in (SettingsHooks). The checks that need nothing but the value are here.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SLIDEWIN_SETTINGS_H
#define SLIDEWIN_SETTINGS_H

#include "utils/guc.h"

/* slidewin.redis_tls_verify */
typedef enum TlsVerify
{
	TLS_VERIFY_NONE,
	TLS_VERIFY_CA,				/* the chain, not the name */
	TLS_VERIFY_FULL				/* the chain and the host name */
} TlsVerify;

/* slidewin.on_redis_error, slidewin.standby_fallback, a call's policy */
typedef enum FailurePolicy
{
	POLICY_FALLBACK,
	POLICY_ALLOW,
	POLICY_DENY,
	POLICY_ERROR
} FailurePolicy;

/* slidewin.error_style */
/* slidewin.fallback_heads: when a fallback key gets a head (1.18) */
typedef enum FallbackHeads
{
	FALLBACK_HEADS_CONTENDED,	/* once two of its writers meet */
	FALLBACK_HEADS_ALWAYS		/* at its second admission in a window */
} FallbackHeads;

typedef enum ErrorStyle
{
	ERROR_STYLE_POSTGRES,
	ERROR_STYLE_POSTGREST,
	ERROR_STYLE_JSON
} ErrorStyle;

/* The Redis server and how to reach it (the transport). */
extern char *slidewin_redis_url;
extern char *slidewin_redis_password_file;
extern char *slidewin_redis_sentinel_password;
extern char *slidewin_redis_tls_ca_file;
extern char *slidewin_redis_tls_cert_file;
extern char *slidewin_redis_tls_key_file;
extern int	slidewin_redis_tls_verify;
extern int	slidewin_connect_timeout;	/* ms */
extern int	slidewin_command_timeout;	/* ms */
extern int	slidewin_redis_retry_interval;	/* ms */

/* What the stores write, and how. */
extern char *slidewin_key_prefix;
extern bool slidewin_redis_functions;

/* Tests only: a frozen clock, and a pause while holding a key's lock. */
extern char *slidewin_test_now;
extern int	slidewin_test_pause_lock;

extern void settings_test_pause(void);

/* The switch between the stores. */
extern int	slidewin_on_redis_error;
extern int	slidewin_standby_fallback;
extern bool slidewin_outage_exact;
extern int	slidewin_fallback_heads;
extern int	slidewin_outage_keys;
extern bool slidewin_deny_cache;
extern int	slidewin_local_batch;	/* units; 0: off */
extern int	slidewin_local_batch_time;	/* ms */
extern bool slidewin_refund_on_abort;
extern int	slidewin_refund_confirm_timeout;	/* ms */
extern int	slidewin_outage_log_interval;	/* ms; 0: never repeat */

/* What a call shows the caller. */
extern bool slidewin_enforce;
extern int	slidewin_log_denials;	/* an elevel, or -1: off */
extern int	slidewin_error_style;
extern bool slidewin_error_show_key;

/* The statistics. */
extern bool slidewin_stats;
extern int	slidewin_stats_max_rules;
extern int	slidewin_track_keys;

extern const struct config_enum_entry tls_verify_options[];
extern const struct config_enum_entry policy_options[];
extern const struct config_enum_entry standby_fallback_options[];
extern const struct config_enum_entry fallback_heads_options[];
extern const struct config_enum_entry log_denials_options[];
extern const struct config_enum_entry error_style_options[];

/* What a change of a setting sets off above this layer. */
typedef struct SettingsHooks
{
	GucStringCheckHook check_redis_url; /* parses the URL into *extra */
	GucStringAssignHook assign_redis_url;
	GucStringAssignHook assign_credentials; /* password file, sentinel password */
	GucStringAssignHook assign_tls_file;
	GucEnumAssignHook assign_tls_verify;
	GucStringAssignHook assign_key_prefix;
} SettingsHooks;

/* Define every setting (once, from _PG_init); MarkGUCPrefixReserved last. */
extern void settings_define(const SettingsHooks *hooks);

/*
 * Whether a value from this source lands in a catalog every role can read,
 * where no secret may go (for a check hook).
 */
extern bool settings_source_is_catalog(GucSource source);

#endif							/* SLIDEWIN_SETTINGS_H */
