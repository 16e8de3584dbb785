/* SPDX-License-Identifier: MIT */
/*
 * open_pool.h - the threads that open remote datasets, apart from libuv's
 * pool.
 *
 * An open that reaches a bucket waits on it (a HEAD, a listing, the
 * packs' headers and indexes), for as long as a slow server takes within
 * [remote] timeout and min_rate. On libuv's shared pool of four threads,
 * four such opens stopped every other open, local ones included, for
 * every user. Remote opens run here instead, on a few threads of their
 * own, at most half of them for one user at a time, in order of arrival
 * otherwise; libuv's pool keeps the local work.
 *
 * Thread rules: everything on the loop thread but the jobs' work, which
 * runs on the pool's threads.
 */
#ifndef BATCHD_DAEMON_OPEN_POOL_H
#define BATCHD_DAEMON_OPEN_POOL_H

#include <sys/types.h>

#include <uv.h>

#define BD_OPEN_POOL_THREADS 4u

typedef struct bd_open_pool bd_open_pool;

/* One job: work(job) on a pool thread, then done(job) on the loop thread. */
typedef struct bd_open_job {
	void (*work)(struct bd_open_job *job);
	void (*done)(struct bd_open_job *job);
	uid_t uid;                     /* whose: at most half the threads a user */
	struct bd_open_job *next;      /* the pool's */
} bd_open_job;

/* A pool of BD_OPEN_POOL_THREADS threads on loop. @return 0, or -errno. */
int bd_open_pool_new(uv_loop_t *loop, bd_open_pool **ret);
/* Queue job (its work, done and uid set). */
void bd_open_pool_queue(bd_open_pool *p, bd_open_job *job);
/*
 * No more jobs (every job queued has been done): join the threads, close
 * the loop handle; p is freed once it is closed. NULL is fine.
 */
void bd_open_pool_close(bd_open_pool *p);

#endif
