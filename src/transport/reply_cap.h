/*
 * reply_cap.h
 *		Bounds on one reply read by hiredis's reader, shared by the backend's
 *		connection and the fuzzers. Pure: hiredis only, no PostgreSQL.
 */
#ifndef SLIDEWIN_REPLY_CAP_H
#define SLIDEWIN_REPLY_CAP_H

#include <stdbool.h>

#include <hiredis/hiredis.h>

#define REPLY_MAX_BYTES		(4 * 1024 * 1024)
#define REPLY_MAX_ELEMENTS	(256 * 1024)	/* summed over all its arrays */

/*
 * Give the next reply that reader builds a fresh element budget; the
 * reader's object functions become the capped ones. A reply over budget
 * stops the reader with an error, after which reply_cap_exceeded() is true.
 */
extern void reply_cap_next(redisReader *reader);
extern bool reply_cap_exceeded(void);

#endif
