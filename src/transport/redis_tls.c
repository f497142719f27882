/*-------------------------------------------------------------------------
 *
 * redis_tls.c
 *		The TLS glue between one Redis connection and OpenSSL.
 *
 * hiredis 0.14 has no TLS, so slidewin keeps it for what it does well
 * (formatting commands, parsing replies) and moves the bytes itself: over
 * the socket, or, for rediss:// URLs, through the session made here. The
 * model is libpq's fe-secure-openssl.c: a non-blocking handshake driven by
 * the caller's poll loop, SSL_read and SSL_write that say which socket
 * event they are waiting for, and decrypted bytes already held by OpenSSL
 * that must be consumed before the caller waits on the socket.
 *
 * One client context per backend, made from the settings at the first TLS
 * connection and again after any of them changes. Verification:
 *   full  the chain, and the certificate must name the host of the URL
 *         (a DNS name, or an IP address SAN for an address);
 *   ca    the chain only;
 *   none  nothing.
 * SNI carries the host name (never an address, as RFC 6066 says).
 *
 * This file must not raise errors, wait, or know what the bytes mean. The
 * backend may use OpenSSL for its own client connection too, so every call
 * here starts with an empty error queue and leaves it empty.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <arpa/inet.h>
#include <sys/stat.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "storage/latch.h"
#include "utils/guc.h"

#include "redis_tls.h"
#include "settings.h"


static SSL_CTX *client_ctx = NULL;

void
tls_settings_changed(void)
{
	if (client_ctx)
	{
		SSL_CTX_free(client_ctx);
		client_ctx = NULL;
	}
}

/* OpenSSL's first queued reason, after `what`; empties the queue. */
static void
openssl_cause(const char *what, char *err, size_t errsize)
{
	unsigned long e = ERR_get_error();
	char		reason[256];

	if (e == 0)
		snprintf(err, errsize, "%s", what);
	else
	{
		ERR_error_string_n(e, reason, sizeof(reason));
		snprintf(err, errsize, "%s: %s", what, reason);
	}
	ERR_clear_error();
}

static bool
set(const char *s)
{
	return s != NULL && s[0] != '\0';
}

/*
 * The private key must not be readable by others, as libpq requires of its
 * own: owned by the server's user with no group or world access, or owned by
 * root and readable by the group at most.
 */
static bool
key_file_private(const char *path, char *err, size_t errsize)
{
	struct stat st;

	if (stat(path, &st) != 0)
	{
		snprintf(err, errsize, "could not read slidewin.redis_tls_key_file \"%s\": %s",
				 path, strerror(errno));
		return false;
	}
	if (!S_ISREG(st.st_mode) ||
		(st.st_uid == geteuid() && (st.st_mode & (S_IRWXG | S_IRWXO))) ||
		(st.st_uid == 0 && (st.st_mode & (S_IWGRP | S_IXGRP | S_IRWXO))) ||
		(st.st_uid != geteuid() && st.st_uid != 0))
	{
		snprintf(err, errsize,
				 "slidewin.redis_tls_key_file \"%s\" must be a regular file owned by the server's user with mode 0600 or less, or owned by root with mode 0640 or less",
				 path);
		return false;
	}
	return true;
}

static SSL_CTX *
make_context(char *err, size_t errsize)
{
	SSL_CTX    *ctx = SSL_CTX_new(TLS_client_method());

	if (ctx == NULL)
	{
		openssl_cause("could not create a TLS context", err, errsize);
		return NULL;
	}
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	/* the output buffer moves as hiredis's string grows and shrinks */
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
					 SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);

	/*
	 * Take what the socket holds in one read, several records at a time
	 * (pipelined replies come in many small ones). OpenSSL then holds bytes
	 * the socket no longer announces: every read loop asks tls_pending()
	 * before it waits.
	 */
	SSL_CTX_set_read_ahead(ctx, 1);

	if (slidewin_redis_tls_verify != TLS_VERIFY_NONE)
	{
		int			ok = set(slidewin_redis_tls_ca_file) ?
			SSL_CTX_load_verify_locations(ctx, slidewin_redis_tls_ca_file, NULL) :
			SSL_CTX_set_default_verify_paths(ctx);

		if (ok != 1)
		{
			char		what[1200];

			snprintf(what, sizeof(what), "could not load the CA bundle %s",
					 set(slidewin_redis_tls_ca_file) ? slidewin_redis_tls_ca_file :
					 "(the system's default)");
			openssl_cause(what, err, errsize);
			SSL_CTX_free(ctx);
			return NULL;
		}
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	}
	else
		SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);

	if (set(slidewin_redis_tls_cert_file) != set(slidewin_redis_tls_key_file))
	{
		snprintf(err, errsize,
				 "slidewin.redis_tls_cert_file and slidewin.redis_tls_key_file must be set together");
		SSL_CTX_free(ctx);
		return NULL;
	}
	if (set(slidewin_redis_tls_cert_file))
	{
		if (!key_file_private(slidewin_redis_tls_key_file, err, errsize))
		{
			SSL_CTX_free(ctx);
			return NULL;
		}
		if (SSL_CTX_use_certificate_chain_file(ctx, slidewin_redis_tls_cert_file) != 1)
		{
			openssl_cause("could not load slidewin.redis_tls_cert_file", err, errsize);
			SSL_CTX_free(ctx);
			return NULL;
		}
		if (SSL_CTX_use_PrivateKey_file(ctx, slidewin_redis_tls_key_file, SSL_FILETYPE_PEM) != 1 ||
			SSL_CTX_check_private_key(ctx) != 1)
		{
			openssl_cause("could not load slidewin.redis_tls_key_file", err, errsize);
			SSL_CTX_free(ctx);
			return NULL;
		}
	}
	return ctx;
}

static bool
is_address(const char *host)
{
	unsigned char buf[sizeof(struct in6_addr)];

	return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

SSL *
tls_open(int fd, const char *host, char *err, size_t errsize)
{
	SSL		   *ssl;

	ERR_clear_error();
	if (client_ctx == NULL && (client_ctx = make_context(err, errsize)) == NULL)
		return NULL;
	ssl = SSL_new(client_ctx);
	if (ssl == NULL || SSL_set_fd(ssl, fd) != 1)
	{
		openssl_cause("could not start a TLS session", err, errsize);
		if (ssl)
			SSL_free(ssl);
		return NULL;
	}
	if (!is_address(host))
		SSL_set_tlsext_host_name(ssl, host);
	if (slidewin_redis_tls_verify == TLS_VERIFY_FULL)
	{
		int			ok = is_address(host) ?
			X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) :
			SSL_set1_host(ssl, host);

		if (ok != 1)
		{
			openssl_cause("could not set the host name to verify", err, errsize);
			SSL_free(ssl);
			return NULL;
		}
	}
	SSL_set_connect_state(ssl);
	return ssl;
}

/*
 * What a failed SSL call means: the event to wait for (> 0), or -1 with the
 * cause in err. A refused certificate is told by its verification result,
 * which says more than the handshake's generic reason.
 */
static int
outcome(SSL *ssl, int rc, const char *what, char *err, size_t errsize)
{
	int			e = SSL_get_error(ssl, rc);

	switch (e)
	{
		case SSL_ERROR_WANT_READ:
			return WL_SOCKET_READABLE;
		case SSL_ERROR_WANT_WRITE:
			return WL_SOCKET_WRITEABLE;
		case SSL_ERROR_ZERO_RETURN:
			snprintf(err, errsize, "%s: the server closed the TLS session", what);
			break;
		case SSL_ERROR_SYSCALL:
			if (ERR_peek_error() != 0)
				openssl_cause(what, err, errsize);
			else if (rc == 0 || errno == 0)
				snprintf(err, errsize, "%s: the server closed the connection", what);
			else
				snprintf(err, errsize, "%s: %s", what, strerror(errno));
			break;
		default:
			{
				long		v = SSL_get_verify_result(ssl);

				if (v != X509_V_OK)
				{
					snprintf(err, errsize, "%s: certificate verify failed: %s",
							 what, X509_verify_cert_error_string(v));
					ERR_clear_error();
				}
				else
					openssl_cause(what, err, errsize);
			}
			break;
	}
	ERR_clear_error();
	return -1;
}

int
tls_handshake(SSL *ssl, char *err, size_t errsize)
{
	int			rc;

	ERR_clear_error();
	errno = 0;
	rc = SSL_connect(ssl);
	if (rc == 1)
		return 0;
	return outcome(ssl, rc, "TLS handshake failed", err, errsize);
}

ssize_t
tls_read(SSL *ssl, void *buf, size_t len, int *wait, char *err, size_t errsize)
{
	int			rc;
	int			w;

	ERR_clear_error();
	errno = 0;
	rc = SSL_read(ssl, buf, (int) Min(len, (size_t) INT_MAX));
	if (rc > 0)
		return rc;
	w = outcome(ssl, rc, "could not read from the TLS session", err, errsize);
	if (w < 0)
		return -1;
	*wait = w;
	return 0;
}

ssize_t
tls_write(SSL *ssl, const void *buf, size_t len, int *wait, char *err, size_t errsize)
{
	int			rc;
	int			w;

	ERR_clear_error();
	errno = 0;
	rc = SSL_write(ssl, buf, (int) Min(len, (size_t) INT_MAX));
	if (rc > 0)
		return rc;
	w = outcome(ssl, rc, "could not write to the TLS session", err, errsize);
	if (w < 0)
	{
		/*
		 * Under TLS 1.3 a server that refuses the client's certificate says
		 * so in an alert after the handshake; the first write then meets a
		 * closed connection. Read the alert, if it came, for its reason.
		 */
		char		b;
		int			r;

		ERR_clear_error();
		r = SSL_read(ssl, &b, 1);
		if (r <= 0 && SSL_get_error(ssl, r) == SSL_ERROR_SSL && ERR_peek_error() != 0)
			openssl_cause("the server ended the TLS session", err, errsize);
		ERR_clear_error();
		return -1;
	}
	*wait = w;
	return 0;
}

bool
tls_verify_refused(SSL *ssl)
{
	return SSL_get_verify_result(ssl) != X509_V_OK;
}

bool
tls_pending(SSL *ssl)
{
	return SSL_has_pending(ssl) == 1;
}

/* No close_notify: the socket goes at once, and Redis does not need it. */
void
tls_close(SSL *ssl)
{
	SSL_free(ssl);
	ERR_clear_error();
}
