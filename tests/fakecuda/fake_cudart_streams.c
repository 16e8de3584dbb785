/* SPDX-License-Identifier: MIT */
/*
 * fake_cudart_streams.c - the fake runtime's streams and what runs on them
 * (fake_cudart_priv.h): copies, host functions, and, with
 * $FAKE_CUDA_COPY_DELAY_MS, the copy worker, a thread that lands each
 * stream's queued host-to-device copies in order, a delay apart, so that
 * work behind them (records, host functions, other copies) completes only
 * after, as on a GPU. fake_cudart.c's top comment has the model.
 *
 * A stream is an entry of g_streams, and its handle the entry's address,
 * so that a stale or made-up handle is told apart (rt__stream_ok). The
 * worker's queue and the stream table are under g_lock; the worker drops
 * it around a copy and a host function.
 */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "fake_cuda.h"
#include "fake_cudart_priv.h"

#define STREAMS 1024

static struct stream g_streams[STREAMS];

/*
 * The copy worker's queue, in the order work was queued (g_lock): each
 * stream's work is in order in it, with due times that never go down.
 */
static struct work *g_work, **g_work_tail = &g_work;
static long g_queued;                   /* queued or running, on every stream */
static pthread_once_t g_worker_once = PTHREAD_ONCE_INIT;
static pthread_cond_t g_work_cond;      /* new work for the worker (CLOCK_MONOTONIC) */
pthread_cond_t g_landed_cond = PTHREAD_COND_INITIALIZER;   /* the worker ran work */
static int g_worker_ok;

/* ---- handles (called with g_lock held) ----------------------------------------------------- */

int rt__stream_ok(cudaStream_t s)
{
	uintptr_t p = (uintptr_t)s;

	if (p <= 2)
		return 1;
	return p >= (uintptr_t)g_streams && p < (uintptr_t)(g_streams + STREAMS) &&
	       (p - (uintptr_t)g_streams) % sizeof(struct stream) == 0 &&
	       ((struct stream *)p)->used;
}

/* ---- the copy worker ($FAKE_CUDA_COPY_DELAY_MS) -------------------------------------------- */

/* $FAKE_CUDA_COPY_DELAY_MS in ns, read at every copy; 0: copies are synchronous. */
static int64_t copy_delay_ns(void)
{
	return (int64_t)rt__env_int(FAKE_CUDA_COPY_DELAY_ENV, 0) * 1000000;
}

/*
 * The work to run first (called with g_lock held): the earliest due, the
 * first queued among equals, which keeps each stream's work in order.
 */
static struct work **next_due(void)
{
	struct work **best = NULL;

	for (struct work **pp = &g_work; *pp; pp = &(*pp)->next)
		if (!best || (*pp)->due < (*best)->due)
			best = pp;
	return best;
}

/* A checksum of n bytes at p (FNV-1a over 64-bit words, then the tail). */
static uint64_t checksum(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = UINT64_C(14695981039346656037), w;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		memcpy(&w, b + i, 8);
		h = (h ^ w) * UINT64_C(1099511628211);
	}
	for (; i < n; i++)
		h = (h ^ b[i]) * UINT64_C(1099511628211);
	return h;
}

/* Run w (called with g_lock held; dropped around copies and host functions). */
static void run(struct work *w)
{
	struct event *x = w->ev;

	if (w->kind != W_RECORD) {
		pthread_mutex_unlock(&g_lock);
		/*
		 * The source as it is now: a caller that reused it too soon gets
		 * what it wrote, and is told, as undefined on a GPU.
		 */
		if (w->kind == W_COPY && w->src && checksum(w->src, w->n) != w->sum)
			rt__misuse(cudaErrorInvalidValue, "cudaMemcpyAsync",
				   "the host source of a queued copy changed before the copy "
				   "landed");
		if (w->kind == W_COPY && w->src)
			memcpy(w->dst, w->src, w->n);
		else if (w->kind == W_COPY)
			memset(w->dst, FAKE_CUDA_POISON, w->n);
		else
			w->fn(w->arg);
		pthread_mutex_lock(&g_lock);
	} else if (x->used && x->serial == w->serial && x->gen == w->gen) {
		int64_t pending = FAKE_CUDA_PENDING;

		x->gen_done = w->gen;
		/* Unless another process recorded it since: its record's time stands. */
		if (x->shared)
			__atomic_compare_exchange_n(&x->shared->completes_at, &pending, 0, 0,
						    __ATOMIC_RELEASE, __ATOMIC_RELAXED);
	}
}

static void *worker(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&g_lock);
	for (;;) {
		struct work **pp = next_due(), *w;

		if (!pp) {
			pthread_cond_wait(&g_work_cond, &g_lock);
			continue;
		}
		if ((*pp)->due > fake_cuda_now_ns()) {
			struct timespec ts = { .tv_sec = (*pp)->due / 1000000000,
					       .tv_nsec = (*pp)->due % 1000000000 };

			pthread_cond_timedwait(&g_work_cond, &g_lock, &ts);
			continue;
		}
		w = *pp;
		*pp = w->next;
		if (!w->next)
			g_work_tail = pp;
		run(w);
		w->s->pending--;
		g_queued--;
		free(w);
		pthread_cond_broadcast(&g_landed_cond);
	}
	return NULL;
}

/* The worker, started with the first delayed copy; it takes no signals meant for the process. */
static void worker_start(void)
{
	pthread_condattr_t a;
	sigset_t all, old;
	pthread_t t;

	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&g_work_cond, &a);
	pthread_condattr_destroy(&a);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	if (pthread_create(&t, NULL, worker, NULL) == 0) {
		pthread_detach(t);
		g_worker_ok = 1;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

void rt__enqueue(struct stream *s, struct work *w, int64_t after)
{
	int64_t now = fake_cuda_now_ns();

	w->s = s;
	w->due = (s->pending && s->last_due > now ? s->last_due : now) + after;
	s->last_due = w->due;
	s->pending++;
	g_queued++;
	w->next = NULL;
	*g_work_tail = w;
	g_work_tail = &w->next;
	pthread_cond_signal(&g_work_cond);
}

struct stream *rt__busy(cudaStream_t s)
{
	struct stream *x = (uintptr_t)s > 2 && rt__stream_ok(s) ? (struct stream *)(void *)s : NULL;

	return x && x->pending ? x : NULL;
}

void rt__drain(struct stream *s)
{
	while (s ? s->pending > 0 : g_queued > 0)
		pthread_cond_wait(&g_landed_cond, &g_lock);
}

void rt__stream_waits(cudaStream_t s)
{
	if (g_stream_waits)
		g_stream_waits((uintptr_t)s);
}

/*
 * A host-to-device copy on stream s, $FAKE_CUDA_COPY_DELAY_MS: the
 * destination is poisoned now (or once the work before it on s landed, so
 * as not to race that work), and the copy is made `delay` ns after that.
 */
static cudaError_t copy_later(void *dst, const void *src, size_t n, struct stream *s,
			      int64_t delay)
{
	struct work *poison = calloc(1, sizeof(*poison)), *copy = calloc(1, sizeof(*copy));

	pthread_once(&g_worker_once, worker_start);
	if (!poison || !copy || !g_worker_ok) {
		free(poison);
		free(copy);
		return rt__fail(cudaErrorMemoryAllocation);
	}
	*poison = (struct work){ .kind = W_COPY, .dst = dst, .n = n };
	*copy = (struct work){ .kind = W_COPY, .dst = dst, .src = src, .n = n,
			       .sum = checksum(src, n) };
	pthread_mutex_lock(&g_lock);
	if (!s->pending) {
		memset(dst, FAKE_CUDA_POISON, n);
		free(poison);
	} else {
		rt__enqueue(s, poison, 0);
	}
	rt__enqueue(s, copy, delay);
	pthread_mutex_unlock(&g_lock);
	return cudaSuccess;
}

/* ---- streams ------------------------------------------------------------------------------- */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *ret, unsigned int flags)
{
	cudaError_t e = rt__ready();

	if (e != cudaSuccess)
		return e;
	pthread_mutex_lock(&g_lock);
	for (int i = 0; i < STREAMS; i++) {
		if (!g_streams[i].used) {
			g_streams[i] = (struct stream){ .used = 1, .flags = flags };
			*ret = (cudaStream_t)(void *)&g_streams[i];
			pthread_mutex_unlock(&g_lock);
			return cudaSuccess;
		}
	}
	pthread_mutex_unlock(&g_lock);
	return rt__fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaStreamCreate(cudaStream_t *ret)
{
	return cudaStreamCreateWithFlags(ret, cudaStreamDefault);
}

/* @return cudaSuccess, or the misuse of a stale or made-up stream. */
static cudaError_t check_stream(cudaStream_t s, const char *call)
{
	int ok;

	pthread_mutex_lock(&g_lock);
	ok = rt__stream_ok(s);
	pthread_mutex_unlock(&g_lock);
	return ok ? cudaSuccess : rt__misuse(cudaErrorInvalidResourceHandle, call,
					     "no such stream");
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
	int ok;

	pthread_mutex_lock(&g_lock);
	ok = (uintptr_t)s > 2 && rt__stream_ok(s);
	/* Like the runtime, the copies queued on it still land. */
	if (ok)
		rt__drain((struct stream *)(void *)s);
	if (ok)
		((struct stream *)(void *)s)->used = 0;
	pthread_mutex_unlock(&g_lock);
	return ok ? cudaSuccess : rt__misuse(cudaErrorInvalidResourceHandle, __func__,
					     "no such stream");
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
	cudaError_t e;

	if (rt__sticky())
		return rt__fail(rt__sticky());
	e = check_stream(s, __func__);
	if (e != cudaSuccess)
		return e;
	rt__stream_waits(s);
	pthread_mutex_lock(&g_lock);
	if ((uintptr_t)s > 2 && rt__stream_ok(s))
		rt__drain((struct stream *)(void *)s);
	pthread_mutex_unlock(&g_lock);
	return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t s)
{
	cudaError_t e = check_stream(s, __func__);
	int pending;

	if (e != cudaSuccess)
		return e;
	pthread_mutex_lock(&g_lock);
	pending = rt__busy(s) != NULL;
	pthread_mutex_unlock(&g_lock);
	return pending ? cudaErrorNotReady : cudaSuccess;
}

/*
 * The function runs now, on the caller's thread, unless copies are queued
 * on s: then on the copy worker after them, as on CUDA's callback thread.
 */
cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *arg)
{
	cudaError_t e = check_stream(s, __func__);
	struct work *w = NULL;
	struct stream *x;

	if (e != cudaSuccess)
		return e;
	if (!fn)
		return rt__fail(cudaErrorInvalidValue);
	rt__stream_waits(s);
	pthread_mutex_lock(&g_lock);
	x = rt__busy(s);
	if (x && (w = calloc(1, sizeof(*w))) != NULL) {
		*w = (struct work){ .kind = W_HOST_FN, .fn = fn, .arg = arg };
		rt__enqueue(x, w, 0);
	} else if (x) {
		rt__drain(x);
	}
	pthread_mutex_unlock(&g_lock);
	if (!w)
		fn(arg);
	return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
			    cudaStream_t s)
{
	cudaError_t e = rt__ready();
	int dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
	int src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
	int64_t delay;

	if (e == cudaSuccess)
		e = check_stream(s, __func__);
	if (e != cudaSuccess)
		return e;
	if (n && (!dst || !src))
		return rt__misuse(cudaErrorInvalidValue, __func__, "a NULL pointer");
	if (dst_dev && !rt__is_device(dst, n))
		return rt__misuse(cudaErrorInvalidValue, __func__,
				  "the destination is not device memory (or the copy runs past "
				  "its end)");
	if (src_dev && !rt__is_device(src, n))
		return rt__misuse(cudaErrorInvalidValue, __func__,
				  "the source is not device memory (or the copy runs past its "
				  "end)");
	if (kind == cudaMemcpyHostToDevice && rt__sticky_now())
		return rt__fail(cudaErrorIllegalAddress);
	rt__stream_waits(s);
	delay = copy_delay_ns();
	if (n && kind == cudaMemcpyHostToDevice && (uintptr_t)s > 2 && delay > 0)
		return copy_later(dst, src, n, (struct stream *)(void *)s, delay);
	/* Any other copy is made now, after what was queued before it on s. */
	pthread_mutex_lock(&g_lock);
	if (rt__busy(s))
		rt__drain((struct stream *)(void *)s);
	pthread_mutex_unlock(&g_lock);
	if (n)
		memcpy(dst, src, n);
	return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
	return cudaMemcpyAsync(dst, src, n, kind, 0);
}
