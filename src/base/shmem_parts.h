/*-------------------------------------------------------------------------
 *
 * shmem_parts.h
 *		The parts of slidewin's shared memory, each registered by its module
 *		and set up by one pair of hooks (shmem_parts.c).
 *
 * A module describes its part (a named struct, how big it is, what else it
 * asks of the postmaster, and what to do once it is mapped) and registers
 * it from its _init function. Registering outside
 * shared_preload_libraries does nothing: the module then finds its pointer
 * still NULL and works in its degraded, per-backend way, as before.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SLIDEWIN_SHMEM_PARTS_H
#define SLIDEWIN_SHMEM_PARTS_H

typedef struct ShmemPart
{
	const char *name;			/* the struct's name in ShmemInitStruct */
	Size		(*size) (void); /* its bytes, asked when requested and mapped */
	void		(*request) (void);	/* optional: more to ask (locks, hashes) */

	/*
	 * Called under AddinShmemInitLock with the struct's address; found is
	 * false in the process that creates it, which must initialize it.
	 */
	void		(*attach) (void *p, bool found);
} ShmemPart;

/* part must live for the life of the process (a static const struct). */
extern void slidewin_shmem_register(const ShmemPart *part);

#endif							/* SLIDEWIN_SHMEM_PARTS_H */
