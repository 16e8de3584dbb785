/* SPDX-License-Identifier: MIT */
/*
 * fake_cudart.c - a stand-in CUDA runtime (soname libcudart.so.13), so that
 * batchd's GPU thread, tests/gpu/test-gpu and `batchctl consume --device`
 * run as real processes where there is no GPU (meson test gpu-fake).
 *
 * Binaries linked against the real runtime bind to versioned symbols
 * (version node libcudart.so.13); libcudart.map gives this object the same
 * node, so putting its directory first on LD_LIBRARY_PATH, next to the fake
 * driver (fake_libcuda.c), swaps CUDA out for the host.
 *
 * The model (fake_cuda.h): device memory is host memory the fake driver
 * mapped (VMM ranges) or cudaMalloc made; streams are synchronous, so a
 * copy is a memcpy done before cudaMemcpyAsync returns, every event this
 * process records is complete and cudaLaunchHostFunc calls its function at
 * once, unless $FAKE_CUDA_COPY_DELAY_MS=D is set. Then, as on a GPU, a
 * host-to-device cudaMemcpyAsync on a stream of our own only queues the
 * copy: the destination reads FAKE_CUDA_POISON at once (or, behind other
 * work of the stream, once that landed), and a worker thread copies from
 * the source as it is D ms after the work before it on the stream landed
 * (streams are FIFO, different streams overlap), so a caller that reuses
 * the source before the copy completed delivers what it wrote instead,
 * and is told (a checksum of the source, taken when the copy was queued,
 * no longer matches): a misuse, which $FAKE_CUDA_STRICT makes an abort.
 * Records and host functions queued behind such copies complete after
 * them: cudaEventQuery answers cudaErrorNotReady, an IPC event's shared
 * state reads FAKE_CUDA_PENDING (not complete, in every process) until the
 * worker ran them; cudaEventSynchronize, cudaStreamSynchronize,
 * cudaDeviceSynchronize, cudaStreamDestroy and any other copy on the
 * stream wait for them. Process exit does not. Work on a stream that
 * waited for events through the fake driver (cuStreamWaitEvent) first
 * waits for those (FAKE_CUDA_HOOK_STREAM_WAITS). IPC event handles carry FAKE_CUDA_RT_IPC_MAGIC, the pid, a serial
 * number and an index in the shared event table (fake_cuda.h); the fake
 * driver in another process opens them, and a record there may complete
 * later ($FAKE_CUDA_RECORD_DELAY_MS in that process): cudaEventQuery
 * answers cudaErrorNotReady and cudaEventSynchronize sleeps until then, as
 * for a client's stream still busy on a GPU. What the real runtime would
 * refuse is refused here too, and said on stderr: a stale stream or event,
 * a copy whose device side is not device memory, unregistering memory
 * never registered, an IPC handle for an event made without
 * cudaEventInterprocess. $FAKE_CUDA_STRICT turns those into an abort.
 * $FAKE_CUDA_PIN_FAIL makes cudaHostRegister fail (out of memory), as
 * under a low RLIMIT_MEMLOCK. $FAKE_CUDA_STICKY_AFTER=N: the copy after the
 * first N host-to-device copies fails with cudaErrorIllegalAddress, a
 * sticky error, as when a kernel faulted: from then on every call that
 * touches the device fails with it and cudaGetLastError does not clear it,
 * for the rest of the process, as with a corrupted context.
 *
 * Machines CUDA cannot use, for the probe's messages (daemon/gpu/cuda_probe.c),
 * read at every call: $FAKE_CUDA_NO_DRIVER acts as if libcuda.so.1 could not
 * be loaded (driver version 0, cudaErrorInsufficientDriver);
 * $FAKE_CUDA_DRIVER_VERSION (e.g. 12020) is the driver's version, and one
 * older than this runtime fails as the real runtime does
 * (cudaErrorInsufficientDriver); $FAKE_CUDA_ERROR=N makes cudaGetDeviceCount
 * fail with cudaError_t N (100 no device, 46 devices busy, ...);
 * $FAKE_CUDA_COMPUTE_MODE=N is every device's cudaDevAttrComputeMode (2:
 * Prohibited).
 *
 * Thread rules: any thread, as the runtime; one lock guards the tables
 * and the copy worker's queue. The current device and the last error are
 * per thread.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "fake_cuda.h"

#define STREAMS 1024
#define EVENTS 8192
#define BLOCKS 1024

struct stream {
	int used;
	unsigned flags;
	int pending;          /* queued work not yet run ($FAKE_CUDA_COPY_DELAY_MS) */
	int64_t last_due;     /* when the last copy queued on it lands */
};

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

/* Host memory registered or allocated pinned, or "device" memory from cudaMalloc. */
enum block_kind { B_FREE, B_REGISTERED, B_HOST_ALLOC, B_DEVICE_ALLOC };

struct block {
	enum block_kind kind;
	uintptr_t p;
	size_t len;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct stream g_streams[STREAMS];
static struct event g_events[EVENTS];
static struct block g_blocks[BLOCKS];
static uint32_t g_serial;
static uint64_t g_device_alloc;
/* The shared event table (fake_cuda.h), made with the first interprocess event. */
static struct fake_cuda_shm *g_shm;
static int g_shm_tried;
static pid_t g_shm_pid;
static char g_shm_name[64];

static _Thread_local int t_device;
static _Thread_local cudaError_t t_error;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_have_driver;
static fake_cuda_device_range_fn g_device_range;
static fake_cuda_set_current_fn g_set_current;
static fake_cuda_stream_waits_fn g_stream_waits;

/*
 * The copy worker's queue, in the order work was queued (g_lock): each
 * stream's work is in order in it, with due times that never go down.
 */
static struct work *g_work, **g_work_tail = &g_work;
static long g_queued;                   /* queued or running, on every stream */
static pthread_once_t g_worker_once = PTHREAD_ONCE_INIT;
static pthread_cond_t g_work_cond;      /* new work for the worker (CLOCK_MONOTONIC) */
static pthread_cond_t g_landed_cond = PTHREAD_COND_INITIALIZER;   /* the worker ran work */
static int g_worker_ok;

/* ---- the driver underneath ---------------------------------------------------------- */

/* Like the real runtime: the driver is libcuda.so.1, loaded at the first call. */
static void load_driver(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);

	if (!lib)
		return;
	g_have_driver = 1;
	/* POSIX's idiom for a function pointer out of dlsym (ISO C has no such cast). */
	*(void **)&g_device_range = dlsym(lib, FAKE_CUDA_HOOK_DEVICE_RANGE);
	*(void **)&g_set_current = dlsym(lib, FAKE_CUDA_HOOK_SET_CURRENT);
	*(void **)&g_stream_waits = dlsym(lib, FAKE_CUDA_HOOK_STREAM_WAITS);
}

static int driver(void)
{
	if (getenv("FAKE_CUDA_NO_DRIVER"))
		return 0;
	pthread_once(&g_once, load_driver);
	return g_have_driver;
}

/* $name as a number, or def when unset. */
static int env_int(const char *name, int def)
{
	const char *s = getenv(name);

	return s && *s ? atoi(s) : def;
}

/* The driver's version: $FAKE_CUDA_DRIVER_VERSION, else this runtime's; 0 without a driver. */
static int driver_version(void)
{
	return driver() ? env_int("FAKE_CUDA_DRIVER_VERSION", CUDART_VERSION) : 0;
}

/* Set (never cleared) by the copy $FAKE_CUDA_STICKY_AFTER allows no more. */
static int g_sticky;

/* cudaErrorIllegalAddress once a sticky error happened, else cudaSuccess. */
static cudaError_t sticky(void)
{
	return __atomic_load_n(&g_sticky, __ATOMIC_ACQUIRE) ? cudaErrorIllegalAddress : cudaSuccess;
}

/* Record e as the thread's last error. @return e. */
static cudaError_t fail(cudaError_t e)
{
	t_error = e;
	return e;
}

/* Something the real runtime refuses and a correct caller never does. @return e. */
static cudaError_t misuse(cudaError_t e, const char *call, const char *what)
{
	fprintf(stderr, "fake cudart: %s: %s (%s)%s\n", call, what, cudaGetErrorName(e),
		getenv("FAKE_CUDA_STRICT") ? "; FAKE_CUDA_STRICT: aborting" : "");
	if (getenv("FAKE_CUDA_STRICT"))
		abort();
	return fail(e);
}

/* The first call on a thread makes device 0 current, as the runtime's implicit context. */
static cudaError_t ready(void)
{
	if (driver_version() < CUDART_VERSION)
		return fail(cudaErrorInsufficientDriver);
	if (sticky())
		return fail(sticky());
	if (g_set_current)
		g_set_current(t_device);
	return cudaSuccess;
}

/* ---- the shared event table ------------------------------------------------------------ */

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

/* ---- handles (called with g_lock held) ----------------------------------------------- */

/* The default streams (0, cudaStreamLegacy, cudaStreamPerThread) or a live one. */
static int stream_ok(cudaStream_t s)
{
	uintptr_t p = (uintptr_t)s;

	if (p <= 2)
		return 1;
	return p >= (uintptr_t)g_streams && p < (uintptr_t)(g_streams + STREAMS) &&
	       (p - (uintptr_t)g_streams) % sizeof(struct stream) == 0 &&
	       ((struct stream *)p)->used;
}

static struct event *event_of(cudaEvent_t ev)
{
	uintptr_t p = (uintptr_t)ev;

	if (p < (uintptr_t)g_events || p >= (uintptr_t)(g_events + EVENTS) ||
	    (p - (uintptr_t)g_events) % sizeof(struct event) != 0 || !((struct event *)p)->used)
		return NULL;
	return (struct event *)p;
}

static struct block *block_at(uintptr_t p, enum block_kind kind)
{
	for (int i = 0; i < BLOCKS; i++)
		if (g_blocks[i].kind == kind && g_blocks[i].p == p)
			return &g_blocks[i];
	return NULL;
}

static int overlaps_registered(uintptr_t p, size_t len)
{
	for (int i = 0; i < BLOCKS; i++) {
		const struct block *b = &g_blocks[i];

		if ((b->kind == B_REGISTERED || b->kind == B_HOST_ALLOC) && p < b->p + b->len &&
		    b->p < p + len)
			return 1;
	}
	return 0;
}

static struct block *block_new(enum block_kind kind, uintptr_t p, size_t len)
{
	for (int i = 0; i < BLOCKS; i++) {
		if (g_blocks[i].kind == B_FREE) {
			g_blocks[i] = (struct block){ .kind = kind, .p = p, .len = len };
			return &g_blocks[i];
		}
	}
	return NULL;
}

/* Is [p, p + len) device memory: a mapped VMM range of the driver's, or cudaMalloc's? */
static int is_device(const void *ptr, size_t len)
{
	uintptr_t p = (uintptr_t)ptr;
	int ok = 0;

	if (len == 0)
		return 1;
	if (g_device_range && g_device_range(p, len))
		return 1;
	pthread_mutex_lock(&g_lock);
	for (int i = 0; i < BLOCKS && !ok; i++) {
		const struct block *b = &g_blocks[i];

		ok = b->kind == B_DEVICE_ALLOC && p >= b->p && len <= b->len && p - b->p <= b->len - len;
	}
	pthread_mutex_unlock(&g_lock);
	return ok;
}

/* ---- the copy worker ($FAKE_CUDA_COPY_DELAY_MS) --------------------------------------- */

/* $FAKE_CUDA_COPY_DELAY_MS in ns, read at every copy; 0: copies are synchronous. */
static int64_t copy_delay_ns(void)
{
	return (int64_t)env_int(FAKE_CUDA_COPY_DELAY_ENV, 0) * 1000000;
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
			misuse(cudaErrorInvalidValue, "cudaMemcpyAsync",
			       "the host source of a queued copy changed before the copy landed");
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

/*
 * Queue w on s (called with g_lock held), due `after` ns after the work
 * queued before it on s landed, or after now when s is idle.
 */
static void enqueue(struct stream *s, struct work *w, int64_t after)
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

/* Does stream s have work queued (called with g_lock held)? */
static struct stream *busy(cudaStream_t s)
{
	struct stream *x = (uintptr_t)s > 2 && stream_ok(s) ? (struct stream *)(void *)s : NULL;

	return x && x->pending ? x : NULL;
}

/*
 * Wait until everything queued on s ran, the work running now included (s
 * NULL: on every stream). Called with g_lock held.
 */
static void drain(struct stream *s)
{
	while (s ? s->pending > 0 : g_queued > 0)
		pthread_cond_wait(&g_landed_cond, &g_lock);
}

/* What a GPU orders after the events s waited for (fake driver): wait for them here. */
static void stream_waits(cudaStream_t s)
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
		return fail(cudaErrorMemoryAllocation);
	}
	*poison = (struct work){ .kind = W_COPY, .dst = dst, .n = n };
	*copy = (struct work){ .kind = W_COPY, .dst = dst, .src = src, .n = n,
			       .sum = checksum(src, n) };
	pthread_mutex_lock(&g_lock);
	if (!s->pending) {
		memset(dst, FAKE_CUDA_POISON, n);
		free(poison);
	} else {
		enqueue(s, poison, 0);
	}
	enqueue(s, copy, delay);
	pthread_mutex_unlock(&g_lock);
	return cudaSuccess;
}

/* ---- errors and versions -------------------------------------------------------------- */

static const struct {
	cudaError_t e;
	const char *name, *text;
} g_errors[] = {
	{ cudaSuccess, "cudaSuccess", "no error" },
	{ cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument" },
	{ cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory" },
	{ cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver",
	  "CUDA driver version is insufficient for CUDA runtime version" },
	{ cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected" },
	{ cudaErrorDevicesUnavailable, "cudaErrorDevicesUnavailable",
	  "CUDA-capable device(s) is/are busy or unavailable" },
	{ cudaErrorSystemDriverMismatch, "cudaErrorSystemDriverMismatch",
	  "system has unsupported display driver / cuda driver combination" },
	{ cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal" },
	{ cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle",
	  "invalid resource handle" },
	{ cudaErrorNotReady, "cudaErrorNotReady", "device not ready" },
	{ cudaErrorHostMemoryAlreadyRegistered, "cudaErrorHostMemoryAlreadyRegistered",
	  "part or all of the requested memory range is already mapped" },
	{ cudaErrorHostMemoryNotRegistered, "cudaErrorHostMemoryNotRegistered",
	  "pointer does not correspond to a registered memory region" },
	{ cudaErrorIllegalAddress, "cudaErrorIllegalAddress",
	  "an illegal memory access was encountered" },
	{ cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported" },
};

const char *cudaGetErrorName(cudaError_t e)
{
	for (size_t i = 0; i < sizeof(g_errors) / sizeof(g_errors[0]); i++)
		if (g_errors[i].e == e)
			return g_errors[i].name;
	return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t e)
{
	for (size_t i = 0; i < sizeof(g_errors) / sizeof(g_errors[0]); i++)
		if (g_errors[i].e == e)
			return g_errors[i].text;
	return "unknown error";
}

cudaError_t cudaGetLastError(void)
{
	cudaError_t e = t_error;

	/* A sticky error stays: the context is unusable. */
	t_error = sticky();
	return e != cudaSuccess ? e : sticky();
}

cudaError_t cudaPeekAtLastError(void)
{
	return t_error;
}

cudaError_t cudaDriverGetVersion(int *v)
{
	*v = driver_version();
	return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v)
{
	*v = CUDART_VERSION;
	return cudaSuccess;
}

/* ---- devices -------------------------------------------------------------------------- */

cudaError_t cudaGetDeviceCount(int *n)
{
	cudaError_t e = ready();

	if (e == cudaSuccess && getenv("FAKE_CUDA_ERROR"))
		e = fail((cudaError_t)env_int("FAKE_CUDA_ERROR", 0));
	*n = e == cudaSuccess ? fake_cuda_devices() : 0;
	return e;
}

cudaError_t cudaSetDevice(int dev)
{
	cudaError_t e = ready();

	if (e != cudaSuccess)
		return e;
	if (dev < 0 || dev >= fake_cuda_devices())
		return fail(cudaErrorInvalidDevice);
	t_device = dev;
	if (g_set_current)
		g_set_current(dev);
	return cudaSuccess;
}

cudaError_t cudaGetDevice(int *dev)
{
	cudaError_t e = ready();

	if (e == cudaSuccess)
		*dev = t_device;
	return e;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int dev)
{
	cudaError_t e = ready();

	if (e != cudaSuccess)
		return e;
	if (dev < 0 || dev >= fake_cuda_devices())
		return fail(cudaErrorInvalidDevice);
	memset(p, 0, sizeof(*p));
	snprintf(p->name, sizeof(p->name), "Fake CUDA device %d", dev);
	fake_cuda_uuid_of(dev, (unsigned char *)p->uuid.bytes);
	p->totalGlobalMem = FAKE_CUDA_TOTAL_MEMORY;
	p->major = 9;
	p->minor = 0;
	p->multiProcessorCount = 1;
	p->pciBusID = 0x10 + dev;
	return cudaSuccess;
}

/*
 * The attributes batchd asks: the compute mode ($FAKE_CUDA_COMPUTE_MODE,
 * default Default), and whether the device can register host memory (yes
 * unless $FAKE_CUDA_NO_HOST_REGISTER is set).
 */
cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int dev)
{
	cudaError_t e = ready();

	if (e != cudaSuccess)
		return e;
	if (dev < 0 || dev >= fake_cuda_devices())
		return fail(cudaErrorInvalidDevice);
	if (!v)
		return fail(cudaErrorInvalidValue);
	if (a == cudaDevAttrComputeMode)
		*v = env_int("FAKE_CUDA_COMPUTE_MODE", cudaComputeModeDefault);
	else if (a == cudaDevAttrHostRegisterSupported)
		*v = getenv("FAKE_CUDA_NO_HOST_REGISTER") ? 0 : 1;
	else
		return misuse(cudaErrorInvalidValue, "cudaDeviceGetAttribute",
			      "an attribute the fake does not model");
	return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
	cudaError_t e = ready();

	pthread_mutex_lock(&g_lock);
	drain(NULL);
	pthread_mutex_unlock(&g_lock);
	return e;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
	cudaError_t e = ready();

	if (e != cudaSuccess)
		return e;
	pthread_mutex_lock(&g_lock);
	*total = FAKE_CUDA_TOTAL_MEMORY;
	*free_bytes = FAKE_CUDA_TOTAL_MEMORY - g_device_alloc;
	pthread_mutex_unlock(&g_lock);
	return cudaSuccess;
}

/* ---- memory ---------------------------------------------------------------------------- */

cudaError_t cudaMalloc(void **ret, size_t len)
{
	cudaError_t e = ready();
	void *p;

	if (e != cudaSuccess)
		return e;
	if (len == 0) {
		*ret = NULL;
		return cudaSuccess;
	}
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return fail(cudaErrorMemoryAllocation);
	pthread_mutex_lock(&g_lock);
	if (!block_new(B_DEVICE_ALLOC, (uintptr_t)p, len)) {
		pthread_mutex_unlock(&g_lock);
		munmap(p, len);
		return fail(cudaErrorMemoryAllocation);
	}
	g_device_alloc += len;
	pthread_mutex_unlock(&g_lock);
	*ret = p;
	return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
	cudaError_t e = ready();
	struct block *b;
	size_t len = 0;

	if (e != cudaSuccess || !p)
		return e;   /* cudaFree(NULL): the idiom that makes the context */
	pthread_mutex_lock(&g_lock);
	b = block_at((uintptr_t)p, B_DEVICE_ALLOC);
	if (b) {
		len = b->len;
		g_device_alloc -= len;
		b->kind = B_FREE;
	}
	pthread_mutex_unlock(&g_lock);
	if (!b)
		return misuse(cudaErrorInvalidValue, __func__, "not a cudaMalloc pointer");
	munmap(p, len);
	return cudaSuccess;
}

cudaError_t cudaMallocHost(void **ret, size_t len)
{
	cudaError_t e = ready();
	void *p;

	if (e != cudaSuccess)
		return e;
	p = malloc(len ? len : 1);
	if (!p)
		return fail(cudaErrorMemoryAllocation);
	pthread_mutex_lock(&g_lock);
	if (!block_new(B_HOST_ALLOC, (uintptr_t)p, len)) {
		pthread_mutex_unlock(&g_lock);
		free(p);
		return fail(cudaErrorMemoryAllocation);
	}
	pthread_mutex_unlock(&g_lock);
	*ret = p;
	return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p)
{
	struct block *b;

	if (!p)
		return cudaSuccess;
	pthread_mutex_lock(&g_lock);
	b = block_at((uintptr_t)p, B_HOST_ALLOC);
	if (b)
		b->kind = B_FREE;
	pthread_mutex_unlock(&g_lock);
	if (!b)
		return misuse(cudaErrorInvalidValue, __func__, "not a cudaMallocHost pointer");
	free(p);
	return cudaSuccess;
}

cudaError_t cudaHostRegister(void *p, size_t len, unsigned int flags)
{
	cudaError_t e = ready();

	if (e != cudaSuccess)
		return e;
	if (!p || len == 0)
		return fail(cudaErrorInvalidValue);
	if (getenv("FAKE_CUDA_PIN_FAIL"))
		return fail(cudaErrorMemoryAllocation);
	pthread_mutex_lock(&g_lock);
	if (overlaps_registered((uintptr_t)p, len))
		e = cudaErrorHostMemoryAlreadyRegistered;
	else if (!block_new(B_REGISTERED, (uintptr_t)p, len))
		e = cudaErrorMemoryAllocation;
	pthread_mutex_unlock(&g_lock);
	if (e == cudaErrorHostMemoryAlreadyRegistered)
		return misuse(e, __func__, "overlaps memory registered or allocated pinned before");
	return e == cudaSuccess ? e : fail(e);
}

cudaError_t cudaHostUnregister(void *p)
{
	struct block *b;

	pthread_mutex_lock(&g_lock);
	b = block_at((uintptr_t)p, B_REGISTERED);
	if (b)
		b->kind = B_FREE;
	pthread_mutex_unlock(&g_lock);
	if (!b)
		return misuse(cudaErrorHostMemoryNotRegistered, __func__,
			      "not the start of a registered range");
	return cudaSuccess;
}

/* ---- streams ---------------------------------------------------------------------------- */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *ret, unsigned int flags)
{
	cudaError_t e = ready();

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
	return fail(cudaErrorMemoryAllocation);
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
	ok = stream_ok(s);
	pthread_mutex_unlock(&g_lock);
	return ok ? cudaSuccess : misuse(cudaErrorInvalidResourceHandle, call, "no such stream");
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
	int ok;

	pthread_mutex_lock(&g_lock);
	ok = (uintptr_t)s > 2 && stream_ok(s);
	/* Like the runtime, the copies queued on it still land. */
	if (ok)
		drain((struct stream *)(void *)s);
	if (ok)
		((struct stream *)(void *)s)->used = 0;
	pthread_mutex_unlock(&g_lock);
	return ok ? cudaSuccess : misuse(cudaErrorInvalidResourceHandle, __func__, "no such stream");
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
	cudaError_t e;

	if (sticky())
		return fail(sticky());
	e = check_stream(s, __func__);
	if (e != cudaSuccess)
		return e;
	stream_waits(s);
	pthread_mutex_lock(&g_lock);
	if ((uintptr_t)s > 2 && stream_ok(s))
		drain((struct stream *)(void *)s);
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
	pending = busy(s) != NULL;
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
		return fail(cudaErrorInvalidValue);
	stream_waits(s);
	pthread_mutex_lock(&g_lock);
	x = busy(s);
	if (x && (w = calloc(1, sizeof(*w))) != NULL) {
		*w = (struct work){ .kind = W_HOST_FN, .fn = fn, .arg = arg };
		enqueue(x, w, 0);
	} else if (x) {
		drain(x);
	}
	pthread_mutex_unlock(&g_lock);
	if (!w)
		fn(arg);
	return cudaSuccess;
}

/* Is this host-to-device copy the one $FAKE_CUDA_STICKY_AFTER makes fault? */
static int sticky_now(void)
{
	static long copies;
	const char *after = getenv("FAKE_CUDA_STICKY_AFTER");

	if (!after || __atomic_add_fetch(&copies, 1, __ATOMIC_RELAXED) <= atol(after))
		return 0;
	__atomic_store_n(&g_sticky, 1, __ATOMIC_RELEASE);
	return 1;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
			    cudaStream_t s)
{
	cudaError_t e = ready();
	int dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
	int src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
	int64_t delay;

	if (e == cudaSuccess)
		e = check_stream(s, __func__);
	if (e != cudaSuccess)
		return e;
	if (n && (!dst || !src))
		return misuse(cudaErrorInvalidValue, __func__, "a NULL pointer");
	if (dst_dev && !is_device(dst, n))
		return misuse(cudaErrorInvalidValue, __func__,
			      "the destination is not device memory (or the copy runs past its end)");
	if (src_dev && !is_device(src, n))
		return misuse(cudaErrorInvalidValue, __func__,
			      "the source is not device memory (or the copy runs past its end)");
	if (kind == cudaMemcpyHostToDevice && sticky_now())
		return fail(cudaErrorIllegalAddress);
	stream_waits(s);
	delay = copy_delay_ns();
	if (n && kind == cudaMemcpyHostToDevice && (uintptr_t)s > 2 && delay > 0)
		return copy_later(dst, src, n, (struct stream *)(void *)s, delay);
	/* Any other copy is made now, after what was queued before it on s. */
	pthread_mutex_lock(&g_lock);
	if (busy(s))
		drain((struct stream *)(void *)s);
	pthread_mutex_unlock(&g_lock);
	if (n)
		memcpy(dst, src, n);
	return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
	return cudaMemcpyAsync(dst, src, n, kind, 0);
}

/* ---- events ------------------------------------------------------------------------------ */

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ret, unsigned int flags)
{
	cudaError_t e = ready();

	if (e != cudaSuccess)
		return e;
	if ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming))
		return fail(cudaErrorInvalidValue);   /* as documented for IPC events */
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
	return fail(cudaErrorMemoryAllocation);
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
	return x ? cudaSuccess : misuse(cudaErrorInvalidResourceHandle, __func__, "no such event");
}

cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s)
{
	struct work *w = calloc(1, sizeof(*w));
	struct stream *pending;
	struct event *x;
	int ok;

	if (sticky()) {
		free(w);
		return fail(sticky());
	}
	stream_waits(s);
	pthread_mutex_lock(&g_lock);
	x = event_of(ev);
	ok = stream_ok(s);
	pending = ok ? busy(s) : NULL;
	if (x && ok && pending && !w)
		drain(pending);   /* out of memory: complete it the slow way, never early */
	if (x && ok) {
		x->records++;
		x->gen++;
	}
	if (x && ok && pending && w) {
		/* Complete once the copies queued before it landed. */
		*w = (struct work){ .kind = W_RECORD, .ev = x, .serial = x->serial, .gen = x->gen };
		enqueue(pending, w, 0);
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
		return misuse(cudaErrorInvalidResourceHandle, __func__, "no such event");
	return ok ? cudaSuccess : misuse(cudaErrorInvalidResourceHandle, __func__, "no such stream");
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

	if (sticky())
		return fail(sticky());
	pthread_mutex_lock(&g_lock);
	x = event_of(ev);
	if (x && x->shared)
		done = fake_cuda_shm_done(x->shared);
	else if (x)
		done = x->gen_done == x->gen;
	pthread_mutex_unlock(&g_lock);
	if (!x)
		return misuse(cudaErrorInvalidResourceHandle, __func__, "no such event");
	return done ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t ev)
{
	struct fake_cuda_shm_event *shared = NULL;
	struct event *x;

	if (sticky())
		return fail(sticky());
	pthread_mutex_lock(&g_lock);
	x = event_of(ev);
	if (x)
		shared = x->shared;
	/* Our own record: until the worker ran it, unless the event went meanwhile. */
	while (x && !shared && x->gen_done != x->gen && event_of(ev) == x)
		pthread_cond_wait(&g_landed_cond, &g_lock);
	pthread_mutex_unlock(&g_lock);
	if (!x)
		return misuse(cudaErrorInvalidResourceHandle, __func__, "no such event");
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
		return misuse(cudaErrorInvalidResourceHandle, __func__,
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
		return misuse(cudaErrorInvalidResourceHandle, __func__, "no such event");
	if (!(flags & cudaEventInterprocess))
		return misuse(cudaErrorInvalidResourceHandle, __func__,
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
