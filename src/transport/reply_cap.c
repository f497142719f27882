/*-------------------------------------------------------------------------
 *
 * reply_cap.c
 *		Bounds on the size of one reply, applied inside hiredis's reader.
 *
 * hiredis buffers a bulk string until all of it has arrived and allocates
 * an array's element table when it reads the header, so a broken or hostile
 * server could otherwise make the backend allocate whatever it announces.
 * slidewin's commands get back a few integers; the bounds in reply_cap.h
 * leave room for any command a connection may need, and no more. The byte
 * bound is the caller's to apply (it counts what it reads from the socket).
 *
 * This file must stay pure (hiredis and libc only, no PostgreSQL), so that
 * the fuzzers read replies exactly as the backend does. It knows nothing of
 * what the replies mean. Its state is per process, which suits a backend
 * (one connection, one reply at a time) and a fuzzer alike.
 *
 *-------------------------------------------------------------------------
 */
#include "compat.h"
#include "reply_cap.h"

static redisReplyObjectFunctions *hiredis_reply_fns;
static redisReplyObjectFunctions capped_reply_fns;
static int	reply_elements_left;
static bool reply_too_many_elements;

/* hiredis takes NULL for out of memory and stops with a reader error. */
static void *
capped_create_array(const redisReadTask *task, slidewin_redis_array_len elements)
{
	/* never negative: hiredis makes a nil, not an array, of *-1 */
	if ((long long) elements > reply_elements_left)
	{
		reply_too_many_elements = true;
		return NULL;
	}
	reply_elements_left -= (int) elements;
	return hiredis_reply_fns->createArray(task, elements);
}

void
reply_cap_next(redisReader *reader)
{
	if (reader->fn != &capped_reply_fns)
	{
		if (hiredis_reply_fns == NULL)
		{
			hiredis_reply_fns = reader->fn;
			capped_reply_fns = *reader->fn;
			capped_reply_fns.createArray = capped_create_array;
		}
		reader->fn = &capped_reply_fns;
	}
	reply_elements_left = REPLY_MAX_ELEMENTS;
	reply_too_many_elements = false;
}

bool
reply_cap_exceeded(void)
{
	return reply_too_many_elements;
}
