/*
 * algorithm.h
 *		The limiting algorithms. Plain C, with no PostgreSQL header, so that
 *		the pure files (reply_check.c) and the fuzzers can name them too.
 */
#ifndef SLIDEWIN_ALGORITHM_H
#define SLIDEWIN_ALGORITHM_H

typedef enum RlAlgorithm
{
	ALGO_SLIDING_LOG,
	ALGO_SLIDING_COUNTER,
	ALGO_FIXED_WINDOW,
	ALGO_TOKEN_BUCKET,
	ALGO_MULTI_LOG,				/* rl_attempt_multi: one log, several windows */
	ALGO_COUNT
} RlAlgorithm;

#endif
