/*
 * sanitizer_preload.c: preloaded, after libasan, into the servers of the
 * sanitize pass (test/sanitize.sh).  It is not part of slidewin.  PostgreSQL
 * is not built with the sanitizers, so their runtimes come in through
 * LD_PRELOAD (ASan) or with slidewin.so (UBSan), and two things go wrong
 * without this object:
 *
 * 1. ASan initialises lazily, at the first malloc.  The server links
 *    libgpg-error and gnutls (through libldap), whose constructors call
 *    bindtextdomain(), which mallocs while it holds glibc's gettext lock
 *    (_nl_state_lock).  ASan's initialisation then calls dlerror(), which
 *    takes the same lock again and, being the same thread, releases it: the
 *    lock's state is corrupted and the server hangs for ever in its own
 *    bindtextdomain(), before it logs anything (even `postgres -V` does).
 *    Linked with -z initfirst, this object's constructor runs before every
 *    other one; its malloc initialises ASan while no lock is held.
 *
 * 2. The UBSan runtime of a shared libubsan initialises at its first report
 *    and reads UBSAN_OPTIONS then, from /proc/self/environ.  By then a
 *    backend has overwritten that memory with its ps title, so the options
 *    are lost: no stack, exit(1) instead of abort().  The constructor keeps
 *    a copy of UBSAN_OPTIONS, taken at exec time, and __ubsan_default_options
 *    (which UBSan calls through the PLT, and this object, preloaded, defines
 *    first) returns it.
 */
#include <stdlib.h>
#include <string.h>

const char *__ubsan_default_options(void);

static char *ubsan_options;

const char *
__ubsan_default_options(void)
{
	return ubsan_options ? ubsan_options : "";
}

/*
 * glibc passes (argc, argv, envp) to constructors.  envp, not getenv(): this
 * runs before libc's own initialisation has set up environ.
 */
static void __attribute__((constructor))
sanitizer_preload_init(int argc, char **argv, char **envp)
{
	/* volatile: the compiler may not drop a malloc/free pair */
	void	   *volatile p = malloc(1);

	free(p);
	for (char **e = envp; e != NULL && *e != NULL; e++)
	{
		if (strncmp(*e, "UBSAN_OPTIONS=", 14) == 0)
		{
			ubsan_options = strdup(*e + 14);
			break;
		}
	}
}
