/*
 * redis_tls.h
 *		TLS for one Redis connection, with OpenSSL: the client context built
 *		from the slidewin.redis_tls_* settings, the non-blocking handshake,
 *		and reading and writing through a TLS session.
 *
 * Every function here returns at once: "would block" is an answer, naming
 * the socket event to wait for, and the caller waits (redis_conn.c and
 * redis_conn_open.c, on the backend's latch). Nothing here raises an ERROR,
 * so that it may run where an ERROR is not allowed (transaction abort);
 * failures come back as a sentence for errdetail.
 */
#ifndef SLIDEWIN_REDIS_TLS_H
#define SLIDEWIN_REDIS_TLS_H

#include <sys/types.h>

#include "utils/guc.h"

typedef struct ssl_st SSL;


/* A setting changed: the next session is made from a new context. */
extern void tls_settings_changed(void);

/*
 * A client session on the connected socket fd, for a server known by `host`
 * (sent as SNI unless it is an address, and checked under "full"). NULL on
 * failure, with the cause in err.
 */
extern SSL *tls_open(int fd, const char *host, char *err, size_t errsize);

/*
 * One step of the handshake: 0 when it is complete, WL_SOCKET_READABLE or
 * WL_SOCKET_WRITEABLE to wait for, -1 when it failed (cause in err: the
 * verification result when the certificate was refused).
 */
extern int	tls_handshake(SSL *ssl, char *err, size_t errsize);

/*
 * Bytes read or written (> 0); 0 when it would block, with the event to
 * wait for in *wait; -1 when the session failed or the server closed it.
 */
extern ssize_t tls_read(SSL *ssl, void *buf, size_t len, int *wait,
						char *err, size_t errsize);
extern ssize_t tls_write(SSL *ssl, const void *buf, size_t len, int *wait,
						 char *err, size_t errsize);

/* After a failed handshake: the server's certificate was refused. */
extern bool tls_verify_refused(SSL *ssl);

/* Decrypted bytes OpenSSL holds that the socket will not announce. */
extern bool tls_pending(SSL *ssl);

extern void tls_close(SSL *ssl);

#endif
