/*-------------------------------------------------------------------------
 *
 * shmem_parts.c
 *		One pair of shared-memory hooks for every part of slidewin's shared
 *		memory (shmem_parts.h): the request hook asks for the sum of the parts,
 *		and the startup hook maps each part and lets its module set it up.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"

#include "shmem_parts.h"

#define MAX_PARTS 8

static const ShmemPart *parts[MAX_PARTS];
static int	nparts = 0;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static void
shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	for (int i = 0; i < nparts; i++)
	{
		RequestAddinShmemSpace(MAXALIGN(parts[i]->size()));
		if (parts[i]->request)
			parts[i]->request();
	}
}

static void
shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	for (int i = 0; i < nparts; i++)
	{
		bool		found;
		void	   *p = ShmemInitStruct(parts[i]->name, parts[i]->size(), &found);

		parts[i]->attach(p, found);
	}
	LWLockRelease(AddinShmemInitLock);
}

void
slidewin_shmem_register(const ShmemPart *part)
{
	if (!process_shared_preload_libraries_in_progress)
		return;
	if (nparts == MAX_PARTS)
		elog(ERROR, "slidewin registers more than %d parts of shared memory", MAX_PARTS);
	if (nparts == 0)
	{
		prev_shmem_request_hook = shmem_request_hook;
		shmem_request_hook = shmem_request;
		prev_shmem_startup_hook = shmem_startup_hook;
		shmem_startup_hook = shmem_startup;
	}
	parts[nparts++] = part;
}
