/*
 * feed_replies.h
 *		For the fuzz targets that read replies: feed the input to hiredis's
 *		reader in pieces, as a socket delivers bytes, under the backend's
 *		reply bounds (src/reply_cap.c), and hand every complete reply to a
 *		check. The first byte sets the size of the pieces (1 to 16).
 */
#ifndef SLIDEWIN_FUZZ_FEED_REPLIES_H
#define SLIDEWIN_FUZZ_FEED_REPLIES_H

#include <stdint.h>
#include <stdlib.h>

#include <hiredis/hiredis.h>

#include "reply_cap.h"

static void
feed_replies(const uint8_t *data, size_t size, void (*check) (const redisReply *r))
{
	redisReader *reader = redisReaderCreate();
	size_t		step;
	size_t		fed = 0;

	if (reader == NULL)
		abort();
	step = size > 0 ? 1 + data[0] % 16 : 1;
	if (size > 0)
	{
		data++;
		size--;
	}
	reply_cap_next(reader);
	while (fed < size || reader->len > reader->pos)
	{
		void	   *reply = NULL;
		size_t		n = size - fed < step ? size - fed : step;

		if (n > 0 && redisReaderFeed(reader, (const char *) data + fed, n) != REDIS_OK)
			break;
		fed += n;
		if (redisReaderGetReply(reader, &reply) != REDIS_OK)
		{
			if (reply != NULL)
				abort();		/* hiredis hands back no reply with an error */
			break;
		}
		if (reply == NULL)
		{
			if (fed == size)
				break;
			continue;
		}
		check(reply);
		freeReplyObject(reply);
		reply_cap_next(reader);
	}
	redisReaderFree(reader);
}

#endif
