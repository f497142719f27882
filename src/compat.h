/*-------------------------------------------------------------------------
 *
 * compat.h
 *		Every difference between the PostgreSQL majors (15 to 19) and the
 *		hiredis majors (0.14 and 1.x) that slidewin builds against, in one
 *		place: each guard defines a name the rest of the code calls, so that
 *		no other file tests PG_VERSION_NUM or HIREDIS_MAJOR.
 *
 * Include it after postgres.h (the pure files, built without PostgreSQL,
 * get only the hiredis part). Add a definition here when a new major
 * changes an interface, with the
 * release that changed it; never scatter a guard through the .c files.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SLIDEWIN_COMPAT_H
#define SLIDEWIN_COMPAT_H

#include <hiredis/hiredis.h>

/*
 * hiredis's reply callbacks: createArray's element count is an int in
 * 0.14, a size_t from 1.0. (The pure files, built without PostgreSQL for
 * the fuzzers and unit tests, need only this part.)
 */
#if HIREDIS_MAJOR >= 1
typedef size_t slidewin_redis_array_len;
#else
typedef int slidewin_redis_array_len;
#endif

/* The rest needs postgres.h, which a backend file includes first. */
#ifdef PG_VERSION_NUM

/*
 * The byte type of pg_b64_encode's source and pg_b64_decode's destination:
 * char before 18, uint8 from 18 on.
 */
#if PG_VERSION_NUM >= 180000
typedef uint8 slidewin_b64_byte;
#else
typedef char slidewin_b64_byte;
#endif

/*
 * A function that never returns. 18 replaced the suffix
 * pg_attribute_noreturn() by the prefix pg_noreturn; both expand to a form
 * that is valid before the declaration, so this name is used as a prefix.
 */
#if PG_VERSION_NUM >= 180000
#define SLIDEWIN_NORETURN pg_noreturn
#else
#define SLIDEWIN_NORETURN pg_attribute_noreturn()
#endif

/*
 * A WaitEventSet that lives as long as the backend's Redis connection. 17
 * made the first argument a ResourceOwner (NULL: freed by its owner only,
 * which is what a connection kept across transactions needs); before, it
 * was the memory context.
 */
#if PG_VERSION_NUM >= 170000
#define slidewin_create_wait_event_set(nevents) CreateWaitEventSet(NULL, (nevents))
#else
#define slidewin_create_wait_event_set(nevents) CreateWaitEventSet(TopMemoryContext, (nevents))
#endif

/*
 * heap_update with no crosscheck snapshot. 16 added an out argument saying
 * which indexes need new entries (the callers here decide that from
 * HeapTupleIsHeapOnly, which every major still sets); 19 added an options
 * word before the crosscheck snapshot (0: none).
 */
#if PG_VERSION_NUM >= 190000
#define slidewin_heap_update(rel, otid, tup, cid, wait, tmfd, lockmode) \
	heap_update((rel), (otid), (tup), (cid), 0, InvalidSnapshot, (wait), (tmfd), (lockmode), \
				&(TU_UpdateIndexes) {TU_None})
#elif PG_VERSION_NUM >= 160000
#define slidewin_heap_update(rel, otid, tup, cid, wait, tmfd, lockmode) \
	heap_update((rel), (otid), (tup), (cid), InvalidSnapshot, (wait), (tmfd), (lockmode), \
				&(TU_UpdateIndexes) {TU_None})
#else
#define slidewin_heap_update(rel, otid, tup, cid, wait, tmfd, lockmode) \
	heap_update((rel), (otid), (tup), (cid), InvalidSnapshot, (wait), (tmfd), (lockmode))
#endif

/*
 * heap_delete with no crosscheck snapshot, not moving a partition's row.
 * 19 replaced the trailing changingPart flag by an options word.
 */
#if PG_VERSION_NUM >= 190000
#define slidewin_heap_delete(rel, tid, cid, wait, tmfd) \
	heap_delete((rel), (tid), (cid), 0, InvalidSnapshot, (wait), (tmfd))
#else
#define slidewin_heap_delete(rel, tid, cid, wait, tmfd) \
	heap_delete((rel), (tid), (cid), InvalidSnapshot, (wait), (tmfd), false)
#endif

/*
 * index_beginscan: 18 added the instrumentation argument (NULL: none), 19
 * a flags word (0: none).
 */
#if PG_VERSION_NUM >= 190000
#define slidewin_index_beginscan(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan((heap), (index), (snapshot), NULL, (nkeys), (norderbys), 0)
#elif PG_VERSION_NUM >= 180000
#define slidewin_index_beginscan(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan((heap), (index), (snapshot), NULL, (nkeys), (norderbys))
#else
#define slidewin_index_beginscan(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan((heap), (index), (snapshot), (nkeys), (norderbys))
#endif

/*
 * A shared hash table of a fixed size. 19 takes one size where earlier
 * majors took the initial and the largest.
 */
#if PG_VERSION_NUM >= 190000
#define slidewin_shmem_init_hash(name, nelems, info, flags) \
	ShmemInitHash((name), (nelems), (info), (flags))
#else
#define slidewin_shmem_init_hash(name, nelems, info, flags) \
	ShmemInitHash((name), (nelems), (nelems), (info), (flags))
#endif

/*
 * This backend's PGPROC number, or -1 once it has none (at exit). 17
 * replaced PGPROC.pgprocno by the global MyProcNumber.
 */
#if PG_VERSION_NUM >= 170000
#define SLIDEWIN_MY_PROC_NUMBER() (MyProc != NULL ? (int) MyProcNumber : -1)
#else
#define SLIDEWIN_MY_PROC_NUMBER() (MyProc != NULL ? MyProc->pgprocno : -1)
#endif

/*
 * The "extra" of a GUC check hook. From 16 GUC frees it with guc_free, so
 * it must come from guc_malloc; before, from malloc.
 */
#if PG_VERSION_NUM >= 160000
#define slidewin_guc_malloc(size) guc_malloc(LOG, (size))
#define slidewin_guc_free(ptr) guc_free(ptr)
#else
#define slidewin_guc_malloc(size) malloc(size)
#define slidewin_guc_free(ptr) free(ptr)
#endif

/*
 * Building a jsonb value token by token (needs utils/jsonb.h included
 * first). 19 replaced the JsonbParseState stack, whose last push returned
 * the value, by a JsonbInState whose result holds it: a builder starts
 * zeroed, each push goes through slidewin_jsonb_push, and the value is
 * slidewin_jsonb_result once the outermost container has ended.
 */
#ifdef __JSONB_H__
#if PG_VERSION_NUM >= 190000
typedef JsonbInState SlidewinJsonbBuilder;
#define slidewin_jsonb_push(b, tok, v) pushJsonbValue((b), (tok), (v))
#define slidewin_jsonb_result(b) ((b)->result)
#else
typedef struct SlidewinJsonbBuilder
{
	JsonbParseState *state;
	JsonbValue *result;
} SlidewinJsonbBuilder;
#define slidewin_jsonb_push(b, tok, v) \
	((b)->result = pushJsonbValue(&(b)->state, (tok), (v)))
#define slidewin_jsonb_result(b) ((b)->result)
#endif
#endif							/* __JSONB_H__ */

#endif							/* PG_VERSION_NUM */

#endif							/* SLIDEWIN_COMPAT_H */
