/* SPDX-License-Identifier: MIT */
/*
 * fake_cudart_priv.h - what the files of the fake CUDA runtime
 * (libcudart.so.13, fake_cudart.c says what it models) share: its streams,
 * events and queued work, the one lock, and the calls between the files.
 *
 *   fake_cudart.c          the driver underneath, the last and the sticky
 *                          error, versions and devices
 *   fake_cudart_memory.c   cudaMalloc'd "device" memory, pinned and
 *                          registered host memory: what is device memory
 *   fake_cudart_streams.c  streams, copies, host functions, and the copy
 *                          worker that lands delayed copies
 *                          ($FAKE_CUDA_COPY_DELAY_MS)
 *   fake_cudart_events.c   events, their records, IPC handles and the
 *                          shared event table (fake_cuda.h)
 *
 * Only the cuda* calls are exported (libcudart.map); the rt__ calls here
 * are the library's own, local to it.
 *
 * Thread rules: any thread, as the runtime. g_lock guards the stream,
 * event and block tables and the copy worker's queue; calls marked
 * "g_lock held" below are made with it held.
 */
#ifndef BATCHD_TESTS_FAKE_CUDART_PRIV_H
#define BATCHD_TESTS_FAKE_CUDART_PRIV_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "fake_cuda.h"

/* A stream: an entry of g_streams (fake_cudart_streams.c), its handle the entry's address. */
struct stream {
	int used;
	unsigned flags;
	int pending;          /* queued work not yet run ($FAKE_CUDA_COPY_DELAY_MS) */
	int64_t last_due;     /* when the last copy queued on it lands */
};

/* An event: an entry of g_events (fake_cudart_events.c), its handle the entry's address. */
struct event {
	int used;
	unsigned flags;
	uint32_t serial;
	long records;
	uint64_t gen, gen_done;               /* records made; the last one that completed */
	struct fake_cuda_shm_event *shared;   /* interprocess: its entry of g_shm, or NULL */
};

/* Work queued on a stream, run by the copy worker in stream order. */
enum work_kind { W_COPY, W_RECORD, W_HOST_FN };

struct work {
	struct work *next;
	enum work_kind kind;
	struct stream *s;
	int64_t due;                 /* CLOCK_MONOTONIC ns */
	void *dst;                   /* W_COPY (src NULL: the poison) */
	const void *src;
	size_t n;
	uint64_t sum;                /* of the source when queued */
	struct event *ev;            /* W_RECORD: the event, its serial then, the record */
	uint32_t serial;
	uint64_t gen;
	cudaHostFn_t fn;             /* W_HOST_FN */
	void *arg;
};

extern pthread_mutex_t g_lock;
extern pthread_cond_t g_landed_cond;                  /* the copy worker ran work (g_lock) */
/* The fake driver's hooks (fake_cuda.h), NULL without it. */
extern fake_cuda_device_range_fn g_device_range;
extern fake_cuda_stream_waits_fn g_stream_waits;

/* ---- fake_cudart.c ---- */

/* $name as a number, or def when unset. */
int rt__env_int(const char *name, int def);
/* cudaErrorIllegalAddress once a sticky error happened, else cudaSuccess. */
cudaError_t rt__sticky(void);
/* Is this host-to-device copy the one $FAKE_CUDA_STICKY_AFTER makes fault? */
int rt__sticky_now(void);
/* Record e as the thread's last error. @return e. */
cudaError_t rt__fail(cudaError_t e);
/* Something the real runtime refuses and a correct caller never does. @return e. */
cudaError_t rt__misuse(cudaError_t e, const char *call, const char *what);
/* The first call on a thread makes device 0 current, as the runtime's implicit context. */
cudaError_t rt__ready(void);

/* ---- fake_cudart_memory.c ---- */

/* Is [p, p + len) device memory: a mapped VMM range of the driver's, or cudaMalloc's? */
int rt__is_device(const void *ptr, size_t len);

/* ---- fake_cudart_streams.c ---- */

/* The default streams (0, cudaStreamLegacy, cudaStreamPerThread) or a live one (g_lock held). */
int rt__stream_ok(cudaStream_t s);
/*
 * Queue w on s (g_lock held), due `after` ns after the work queued before
 * it on s landed, or after now when s is idle.
 */
void rt__enqueue(struct stream *s, struct work *w, int64_t after);
/* Does stream s have work queued (g_lock held)? @return it, or NULL. */
struct stream *rt__busy(cudaStream_t s);
/*
 * Wait until everything queued on s ran, the work running now included (s
 * NULL: on every stream). Called with g_lock held.
 */
void rt__drain(struct stream *s);
/* What a GPU orders after the events s waited for (fake driver): wait for them here. */
void rt__stream_waits(cudaStream_t s);

#endif
