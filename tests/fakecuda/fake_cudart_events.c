/* SPDX-License-Identifier: MIT */
/*
 * fake_cudart_events.c - the fake runtime's events (fake_cudart_priv.h):
 * records, queries and waits, elapsed times, and IPC handles that the fake
 * driver in another process opens. An event is an entry of g_events, its
 * handle the entry's address, so a stale one is told apart; an
 * interprocess event's state also lives in the shared event table
 * (fake_cuda.h), which this file makes with the first such event and
 * unlinks at exit. A record behind queued copies completes when the copy
 * worker runs it (fake_cudart_streams.c).
 *
 * Thread rules: any thread; the tables are under g_lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "fake_cuda.h"
#include "fake_cudart_priv.h"

#define EVENTS 8192

static struct event g_events[EVENTS];
static uint32_t g_serial;
/* The shared event table (fake_cuda.h), made with the first interprocess event. */
static struct fake_cuda_shm *g_shm;
static int g_shm_tried;
static pid_t g_shm_pid;
static char g_shm_name[64];

/* ---- the shared event table ---------------------------------------------------------------- */

/*
 * The table, made at the first call (called with g_lock held). A table
 * left by a killed process that had our pid goes first. @return it, or
 * NULL (said once): IPC events then complete at once everywhere.
 */
static struct fake_cuda_shm *shm_table(void)
{
	struct fake_cuda_shm *t;
	int fd;

	if (g_shm_tried)
		return g_shm;
	g_shm_tried = 1;
	snprintf(g_shm_name, sizeof(g_shm_name), FAKE_CUDA_SHM_NAME, (int)getpid());
	shm_unlink(g_shm_name);
	fd = shm_open(g_shm_name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		goto fail;
	if (ftruncate(fd, (off_t)sizeof(*t)) < 0) {
		close(fd);
		shm_unlink(g_shm_name);
		goto fail;
	}
	t = mmap(NULL, sizeof(*t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (t == MAP_FAILED) {
		shm_unlink(g_shm_name);
		goto fail;
	}
	memcpy(t->magic, FAKE_CUDA_SHM_MAGIC, sizeof(t->magic));
	t->pid = (int32_t)getpid();
	g_shm_pid = getpid();
	g_shm = t;
	return t;
fail:
	fprintf(stderr, "fake cudart: no shared event table %s (%s): IPC events complete at "
		"once, whatever $" FAKE_CUDA_DELAY_ENV " says\n", g_shm_name, strerror(errno));
	return NULL;
}

/* At exit: the table goes with the process that made it (not with a forked child). */
__attribute__((destructor)) static void shm_unlink_at_exit(void)
{
	if (g_shm && g_shm_pid == getpid())
		shm_unlink(g_shm_name);
}

/* ---- handles (called with g_lock held) ----------------------------------------------------- */

/* The live event ev is, or NULL. */
static struct event *event_of(cudaEvent_t ev)
{
	uintptr_t p = (uintptr_t)ev;

	if (p < (uintptr_t)g_events || p >= (uintptr_t)(g_events + EVENTS) ||
	    (p - (uintptr_t)g_events) % sizeof(struct event) != 0 || !((struct event *)p)->used)
		return NULL;
	return (struct event *)p;
}

/* ---- events -------------------------------------------------------------------------------- */

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ret, unsigned int flags)
{
	cudaError_t e = rt__ready();

	if (e != cudaSuccess)
		return e;
	if ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming))
		return rt__fail(cudaErrorInvalidValue);   /* as documented for IPC events */
	pthread_mutex_lock(&g_lock);
	for (int i = 0; i < EVENTS; i++) {
		if (!g_events[i].used) {
			struct event *x = &g_events[i];

			*x = (struct event){ .used = 1, .flags = flags, .serial = ++g_serial };
			/* Serial 0 marks a free shared entry. */
			if (!x->serial)
				x->serial = ++g_serial;
			if ((flags & cudaEventInterprocess) && i < FAKE_CUDA_SHM_EVENTS &&
			    shm_table()) {
				/* Complete until recorded; the serial last, for handle checks. */
				x->shared = &g_shm->ev[i];
				__atomic_store_n(&x->shared->completes_at, 0, __ATOMIC_RELAXED);
				__atomic_store_n(&x->shared->serial, x->serial, __ATOMIC_RELEASE);
			}
			*ret = (cudaEvent_t)(void *)x;
			pthread_mutex_unlock(&g_lock);
			return cudaSuccess;
		}
	}
	pthread_mutex_unlock(&g_lock);
	return rt__fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaEventCreate(cudaEvent_t *ret)
{
	return cudaEventCreateWithFlags(ret, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t ev)
{
	struct event *x;

	pthread_mutex_lock(&g_lock);
	x = event_of(ev);
	if (x) {
		x->used = 0;
		if (x->shared)
			__atomic_store_n(&x->shared->serial, 0, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&g_lock);
	return x ? cudaSuccess : rt__misuse(cudaErrorInvalidResourceHandle, __func__,
					    "no such event");
}

cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s)
{
	struct work *w = calloc(1, sizeof(*w));
	struct stream *pending;
	struct event *x;
	int ok;

	if (rt__sticky()) {
		free(w);
		return rt__fail(rt__sticky());
	}
	rt__stream_waits(s);
	pthread_mutex_lock(&g_lock);
	x = event_of(ev);
	ok = rt__stream_ok(s);
	pending = ok ? rt__busy(s) : NULL;
	if (x && ok && pending && !w)
		rt__drain(pending);   /* out of memory: complete it the slow way, never early */
	if (x && ok) {
		x->records++;
		x->gen++;
	}
	if (x && ok && pending && w) {
		/* Complete once the copies queued before it landed. */
		*w = (struct work){ .kind = W_RECORD, .ev = x, .serial = x->serial, .gen = x->gen };
		rt__enqueue(pending, w, 0);
		w = NULL;
		if (x->shared)
			__atomic_store_n(&x->shared->completes_at, FAKE_CUDA_PENDING, __ATOMIC_RELEASE);
	} else if (x && ok) {
		/* Nothing queued on s: the record is complete already. */
		x->gen_done = x->gen;
		if (x->shared)
			__atomic_store_n(&x->shared->completes_at, 0, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&g_lock);
	free(w);
	if (!x)
		return rt__misuse(cudaErrorInvalidResourceHandle, __func__, "no such event");
	return ok ? cudaSuccess : rt__misuse(cudaErrorInvalidResourceHandle, __func__,
					     "no such stream");
}

/*
 * Our own records are complete once the copies queued before them landed;
 * an IPC event another process recorded with a delay is not until its
 * time. Like the runtime, "not ready" is not an error: it does not become
 * the last error.
 */
cudaError_t cudaEventQuery(cudaEvent_t ev)
{
	struct event *x;
	int done = 1;

	if (rt__sticky())
		return rt__fail(rt__sticky());
	pthread_mutex_lock(&g_lock);
	x = event_of(ev);
	if (x && x->shared)
		done = fake_cuda_shm_done(x->shared);
	else if (x)
		done = x->gen_done == x->gen;
	pthread_mutex_unlock(&g_lock);
	if (!x)
		return rt__misuse(cudaErrorInvalidResourceHandle, __func__, "no such event");
	return done ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t ev)
{
	struct fake_cuda_shm_event *shared = NULL;
	struct event *x;

	if (rt__sticky())
		return rt__fail(rt__sticky());
	pthread_mutex_lock(&g_lock);
	x = event_of(ev);
	if (x)
		shared = x->shared;
	/* Our own record: until the worker ran it, unless the event went meanwhile. */
	while (x && !shared && x->gen_done != x->gen && event_of(ev) == x)
		pthread_cond_wait(&g_landed_cond, &g_lock);
	pthread_mutex_unlock(&g_lock);
	if (!x)
		return rt__misuse(cudaErrorInvalidResourceHandle, __func__, "no such event");
	/* The entry stays mapped for the process's life: sleeping unlocked is safe. */
	if (shared)
		fake_cuda_shm_wait(g_shm, shared);
	return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
	struct event *x, *y;
	int timed;

	pthread_mutex_lock(&g_lock);
	x = event_of(a);
	y = event_of(b);
	timed = x && y && !((x->flags | y->flags) & cudaEventDisableTiming) && x->records &&
		y->records;
	pthread_mutex_unlock(&g_lock);
	if (!timed)
		return rt__misuse(cudaErrorInvalidResourceHandle, __func__,
				  "events unrecorded, stale or made without timing");
	*ms = 0.001f;
	return cudaSuccess;
}

cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t *h, cudaEvent_t ev)
{
	static const char magic[8] = FAKE_CUDA_RT_IPC_MAGIC;
	int32_t pid = (int32_t)getpid(), index = -1;
	struct event *x;
	unsigned flags = 0;
	uint32_t serial = 0;

	pthread_mutex_lock(&g_lock);
	x = event_of(ev);
	if (x) {
		flags = x->flags;
		serial = x->serial;
		if (x->shared)
			index = (int32_t)(x - g_events);
	}
	pthread_mutex_unlock(&g_lock);
	if (!x)
		return rt__misuse(cudaErrorInvalidResourceHandle, __func__, "no such event");
	if (!(flags & cudaEventInterprocess))
		return rt__misuse(cudaErrorInvalidResourceHandle, __func__,
				  "the event was made without cudaEventInterprocess");
	memset(h, 0, sizeof(*h));
	memcpy(h->reserved, magic, sizeof(magic));
	memcpy(h->reserved + 8, &pid, sizeof(pid));
	memcpy(h->reserved + 12, &serial, sizeof(serial));
	memcpy(h->reserved + 16, &index, sizeof(index));
	{
		uint64_t ns = fake_cuda_pid_ns();

		memcpy(h->reserved + 24, &ns, sizeof(ns));
	}
	return cudaSuccess;
}
