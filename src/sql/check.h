/*
 * check.h
 *		rl_check(): what works between this backend and each Redis server
 *		slidewin.redis_url names (check.c).
 */
#ifndef SLIDEWIN_CHECK_H
#define SLIDEWIN_CHECK_H

/* At _PG_init: remembers whether the library is being preloaded. */
extern void check_init(void);

#endif
