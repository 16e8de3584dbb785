/* SPDX-License-Identifier: MIT */
/*
 * fake_libcuda.c - a stand-in CUDA driver, to run GPU sessions where there
 * is no GPU: libbatchclient's GPU streams in-process
 * (tests/python/test_gpu_fake.py), and batchd, test-gpu and batchctl as
 * processes together with the fake runtime (fake_cudart.c, fake_cuda.h).
 *
 * Built as a shared object whose soname is libcuda.so.1: a test that loads
 * it by path before libbatchclient asks for "libcuda.so.1" gets this one,
 * because the dynamic loader matches objects already loaded by soname; a
 * process started with its directory on LD_LIBRARY_PATH gets it too. It
 * exports cuGetProcAddress_v2, the one symbol lib/cudrv/cudrv.c looks up, and
 * serves behind it the driver calls batchd and a GPU stream make, on the
 * host: "device memory" is a memfd (cuMemCreate makes one, exporting it
 * dups it, importing takes any memfd, such as the one the fake daemon
 * hands over), mapped MAP_SHARED into the reserved address range, so a
 * device pointer is host memory and what one process copies into it the
 * other reads. Events opened from an IPC handle are entries of a table:
 * either filled by the in-process fake daemon (handle "FAKEIPC", the
 * entry's index) or made by the fake runtime in another process (handle
 * FAKE_CUDA_RT_IPC_MAGIC). Streams are synchronous, so an event is complete
 * once recorded, except that an event of the fake runtime's shares its
 * state with that process (fake_cuda.h): with $FAKE_CUDA_RECORD_DELAY_MS
 * set here, cuEventRecord makes it complete that much later, for
 * cuEventQuery and cuEventSynchronize here and the runtime's queries
 * there, as a trainer's stream still busy with the slot would; and a
 * record there behind copies still queued ($FAKE_CUDA_COPY_DELAY_MS in
 * that process) is pending until they landed; an event of the in-process
 * fake daemon's is pending while it says its copy has not landed
 * (fake_cuda_event_pending). A stream that waited on
 * such an event (cuStreamWaitEvent) has its later work ordered after it,
 * as on a GPU, by blocking the host instead: cuEventRecord and
 * cuStreamSynchronize on the stream, and the fake runtime's work on it
 * (through fake_cuda_stream_waits, its copies after bc_batch_wait_stream
 * included), first wait until the events it waited on completed. The
 * wait is on the event's state then, not on the record the wait saw.
 *
 * It checks what the real driver would refuse and what the client
 * promises (a context current around every call, access granted to the
 * right device, unmapping before freeing, no stale handles) and counts
 * what is held, so a test can see that everything was undone. Any call can
 * be made to fail once (fake_cuda_fail) to test the client's unwinding.
 * $FAKE_CUDA_INIT_FAIL makes cuInit fail: a process with a driver but no
 * device.
 *
 * Thread rules: the driver calls are made from one thread at a time (the
 * Python tests, batchd's loop thread, a trainer); the range and wait
 * tables are locked, because the fake runtime checks copies against the
 * one and waits through the other from any thread
 * (fake_cuda_device_range, fake_cuda_stream_waits). The context stack is
 * per thread, as the driver's is.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cuda.h>

#include "fake_cuda.h"

#define API __attribute__((visibility("default")))

#define DEVICES fake_cuda_devices()
#define EVENTS 4096
#define RANGES 64
#define OPEN_MAGIC 0x0fe7e7e7u
#define ALLOC_MAGIC 0xa110ca7eu

/* What a test reads back (mirrored in test_gpu_fake.py). */
struct fake_cuda_counts {
	int ctx_refs;    /* primary-context retains not yet released */
	int handles;     /* imported allocation handles not yet released */
	int reserved;    /* address ranges not yet freed */
	int mapped;      /* mappings not yet unmapped */
	int events;      /* opened IPC events not yet destroyed */
	int no_ctx;      /* calls made with no context current */
	int bad_calls;   /* calls the real driver would refuse or that break a promise */
	int imports;     /* cuMemImportFromShareableHandle calls that succeeded */
	int stream_syncs; /* cuStreamSynchronize calls that succeeded */
};

/* The Python tests read a prefix of this, up to syncs: add fields after it. */
struct fake_cuda_event {
	int used;
	int remote;            /* opened from a fake runtime's handle: freed on destroy */
	long records, waits;
	void *record_stream;   /* the stream of the last record */
	void *wait_stream;     /* the stream of the last wait */
	unsigned wait_flags;
	int record_device;     /* the device current at the last record */
	long syncs;            /* cuEventSynchronize calls on it */
	struct fake_cuda_shm *shm;               /* remote: the exporter's table, mapped, or NULL */
	struct fake_cuda_shm_event *shared;      /* its entry in shm */
	int pending;           /* the in-process fake daemon's copy has not landed (atomic) */
};

struct opened {
	unsigned magic;
	int index;
};

struct alloc {
	unsigned magic;
	int fd;
	int exportable;        /* made with POSIX fd handles requested, or imported */
	uint64_t size;
};

struct range {
	CUdeviceptr base;
	size_t size;
	int used, mapped, access;
};

/* The test-only entry points, which tests reach through ctypes. */
API void fake_cuda_counts(struct fake_cuda_counts *out);
API int fake_cuda_ctx_depth(void);
API void fake_cuda_uuid(int ordinal, unsigned char out[16]);
API int fake_cuda_event_new(unsigned char handle[64]);
API const struct fake_cuda_event *fake_cuda_event(int index);
API void fake_cuda_event_free(int index);
API void fake_cuda_on_record(void (*cb)(int index, void *stream));
API void fake_cuda_event_pending(int index, int pending);
API void fake_cuda_fail(const char *name, int code, int skip);
API void fake_cuda_fail_also(const char *name, int code);
/* The fake runtime's hooks (fake_cuda.h). */
API int fake_cuda_device_range(uintptr_t p, size_t len);
API void fake_cuda_set_current(int dev);
API void fake_cuda_stream_waits(uintptr_t stream);

static struct fake_cuda_counts g_n;
static struct fake_cuda_event g_ev[EVENTS];
static struct range g_ranges[RANGES];
static int g_ctx_tag[FAKE_CUDA_MAX_DEVICES];  /* a context is the address of its device's tag */
static int g_ctx_refs[FAKE_CUDA_MAX_DEVICES];
static _Thread_local int t_stack[16];
static _Thread_local int t_depth;
static _Thread_local int t_runtime_dev = -1;     /* made current by the fake runtime */
/* The range table: the fake runtime reads it from any thread (fake_cuda_device_range). */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_fail_name[64];
static char g_fail2_name[64];      /* a second call to fail once (fake_cuda_fail_also) */
static CUresult g_fail2_code;
static CUresult g_fail_code;
static int g_fail_skip;
static void (*g_on_record)(int index, void *stream);
/*
 * Waits made with cuStreamWaitEvent on events whose state is another
 * process's (g_lock): the stream's later work is ordered after them.
 */
#define WAITS 256
struct wait {
	uintptr_t stream;
	int index;
};
static struct wait g_waits[WAITS];
static int g_nwaits;

/* ---- test-only entry points --------------------------------------------------------- */

API void fake_cuda_counts(struct fake_cuda_counts *out)
{
	*out = g_n;
}

API int fake_cuda_ctx_depth(void)
{
	return t_depth;
}

/* The UUID of device `ordinal`: fa ce 00 <ordinal> 01 02 ... */
API void fake_cuda_uuid(int ordinal, unsigned char out[16])
{
	fake_cuda_uuid_of(ordinal, out);
}

/* A new event; its IPC handle (64 bytes) goes into handle. @return its index. */
static int event_slot(void);

API int fake_cuda_event_new(unsigned char handle[64])
{
	int i = event_slot();

	if (i >= 0) {
		memset(handle, 0, 64);
		memcpy(handle, "FAKEIPC", 8);
		memcpy(handle + 8, &i, sizeof(i));
	}
	return i;
}

API const struct fake_cuda_event *fake_cuda_event(int index)
{
	return index >= 0 && index < EVENTS ? &g_ev[index] : NULL;
}

API void fake_cuda_event_free(int index)
{
	if (index >= 0 && index < EVENTS)
		g_ev[index].used = 0;
}

/*
 * The in-process fake daemon's record of event `index` is pending (1)
 * until it says it completed (0): its copy has not landed. Meanwhile
 * cuEventQuery answers not ready, and cuEventSynchronize and a stream that
 * waited on it (fake_cuda_stream_waits) wait.
 */
API void fake_cuda_event_pending(int index, int pending)
{
	if (index >= 0 && index < EVENTS)
		__atomic_store_n(&g_ev[index].pending, pending, __ATOMIC_RELEASE);
}

/* Called at every cuEventRecord, before it returns (NULL: none). */
API void fake_cuda_on_record(void (*cb)(int index, void *stream))
{
	g_on_record = cb;
}

/* Make the call named `name` fail with `code` once, after `skip` calls of it succeed. */
API void fake_cuda_fail(const char *name, int code, int skip)
{
	snprintf(g_fail_name, sizeof(g_fail_name), "%s", name ? name : "");
	g_fail_code = (CUresult)code;
	g_fail_skip = skip;
}

API void fake_cuda_fail_also(const char *name, int code)
{
	snprintf(g_fail2_name, sizeof(g_fail2_name), "%s", name ? name : "");
	g_fail2_code = (CUresult)code;
}

API int fake_cuda_device_range(uintptr_t p, size_t len)
{
	int ok = 0;

	pthread_mutex_lock(&g_lock);
	for (int i = 0; i < RANGES && !ok; i++) {
		const struct range *r = &g_ranges[i];

		ok = r->used && r->mapped && r->access && p >= r->base &&
		     len <= r->size && p - r->base <= r->size - len;
	}
	pthread_mutex_unlock(&g_lock);
	return ok;
}

API void fake_cuda_set_current(int dev)
{
	t_runtime_dev = dev;
}

/*
 * Take one wait of `stream` (index -1) or one on event `index` (whatever
 * its stream) off the table. @return its event, or -1.
 */
static int wait_take(uintptr_t stream, int index)
{
	int ev = -1;

	pthread_mutex_lock(&g_lock);
	for (int i = 0; i < g_nwaits && ev < 0; i++) {
		if (index >= 0 ? g_waits[i].index == index : g_waits[i].stream == stream) {
			ev = g_waits[i].index;
			g_waits[i] = g_waits[--g_nwaits];
		}
	}
	pthread_mutex_unlock(&g_lock);
	return ev;
}

/* Sleep until event i completed: its shared state, or the fake daemon's word. */
static void event_wait(int i)
{
	const struct timespec ms = { .tv_sec = 0, .tv_nsec = 1000000 };

	if (g_ev[i].shared)
		fake_cuda_shm_wait(g_ev[i].shm, g_ev[i].shared);
	while (__atomic_load_n(&g_ev[i].pending, __ATOMIC_ACQUIRE))
		nanosleep(&ms, NULL);
}

/* Is event i's last record still running (its copy not landed)? */
static int event_busy(int i)
{
	return (g_ev[i].shared && !fake_cuda_shm_done(g_ev[i].shared)) ||
	       __atomic_load_n(&g_ev[i].pending, __ATOMIC_ACQUIRE);
}

/*
 * Like a GPU, which runs a stream's work after the events it waited for:
 * block until they completed (fake_cuda.h). Only events that were not
 * complete when waited on are in the table.
 */
API void fake_cuda_stream_waits(uintptr_t stream)
{
	int i;

	while ((i = wait_take(stream, -1)) >= 0)
		event_wait(i);
}

/* ---- the driver -------------------------------------------------------------------- */

/* The code `name` fails with now (once per arming), or CUDA_SUCCESS. */
static CUresult fail_now(const char *name)
{
	if (g_fail2_name[0] && strcmp(name, g_fail2_name) == 0) {
		g_fail2_name[0] = '\0';
		return g_fail2_code;
	}
	if (!g_fail_name[0] || strcmp(name, g_fail_name) != 0)
		return CUDA_SUCCESS;
	if (g_fail_skip > 0) {
		g_fail_skip--;
		return CUDA_SUCCESS;
	}
	g_fail_name[0] = '\0';
	return g_fail_code;
}

#define FAIL_POINT(name)                           \
	do {                                       \
		CUresult fail_ = fail_now(name);   \
		if (fail_ != CUDA_SUCCESS)         \
			return fail_;              \
	} while (0)

/* $FAKE_CUDA_STRICT: a misuse ends the process, naming the call. */
static void misuse(const char *what, const char *call)
{
	if (!getenv("FAKE_CUDA_STRICT"))
		return;
	fprintf(stderr, "fake libcuda: %s in %s (FAKE_CUDA_STRICT: aborting)\n", what, call);
	abort();
}

/*
 * The device whose context is current, or -1 (counted: the client promised
 * one). A pushed context wins; else the device the runtime made current.
 */
#define need_ctx() need_ctx_in(__func__)
static int need_ctx_in(const char *call)
{
	if (t_depth == 0) {
		if (t_runtime_dev >= 0)
			return t_runtime_dev;
		g_n.no_ctx++;
		misuse("no context current", call);
		return -1;
	}
	return t_stack[t_depth - 1];
}

#define bad(e) bad_in((e), __func__)
static CUresult bad_in(CUresult e, const char *call)
{
	g_n.bad_calls++;
	misuse("a call the driver would refuse", call);
	return e;
}

/* Called with g_lock held. */
static struct range *range_at(CUdeviceptr p, size_t size)
{
	for (int i = 0; i < RANGES; i++)
		if (g_ranges[i].used && g_ranges[i].base == p && g_ranges[i].size == size)
			return &g_ranges[i];
	return NULL;
}

static struct opened *opened(CUevent ev)
{
	struct opened *o = (struct opened *)ev;

	return o && o->magic == OPEN_MAGIC ? o : NULL;
}

static CUresult f_Init(unsigned int flags)
{
	FAIL_POINT("cuInit");
	if (getenv("FAKE_CUDA_INIT_FAIL"))
		return CUDA_ERROR_NO_DEVICE;
	return flags ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

static CUresult f_DriverGetVersion(int *v)
{
	*v = 12080;
	return CUDA_SUCCESS;
}

static const char *err_name(CUresult e)
{
	switch (e) {
	case CUDA_SUCCESS: return "CUDA_SUCCESS";
	case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
	case CUDA_ERROR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
	case CUDA_ERROR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
	case CUDA_ERROR_INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE";
	case CUDA_ERROR_INVALID_CONTEXT: return "CUDA_ERROR_INVALID_CONTEXT";
	case CUDA_ERROR_INVALID_HANDLE: return "CUDA_ERROR_INVALID_HANDLE";
	case CUDA_ERROR_NOT_SUPPORTED: return "CUDA_ERROR_NOT_SUPPORTED";
	case CUDA_ERROR_NOT_READY: return "CUDA_ERROR_NOT_READY";
	case CUDA_ERROR_LAUNCH_FAILED: return "CUDA_ERROR_LAUNCH_FAILED";
	default: return NULL;
	}
}

static CUresult f_GetErrorName(CUresult e, const char **s)
{
	*s = err_name(e);
	return *s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult f_GetErrorString(CUresult e, const char **s)
{
	*s = err_name(e) ? "fake driver error" : NULL;
	return *s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult f_DeviceGetCount(int *n)
{
	FAIL_POINT("cuDeviceGetCount");
	*n = DEVICES;
	return CUDA_SUCCESS;
}

static CUresult f_DeviceGet(CUdevice *dev, int ordinal)
{
	FAIL_POINT("cuDeviceGet");
	if (ordinal < 0 || ordinal >= DEVICES)
		return CUDA_ERROR_INVALID_DEVICE;
	*dev = ordinal;
	return CUDA_SUCCESS;
}

static CUresult f_DeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
	FAIL_POINT("cuDeviceGetUuid");
	if (dev < 0 || dev >= DEVICES)
		return bad(CUDA_ERROR_INVALID_DEVICE);
	fake_cuda_uuid(dev, (unsigned char *)uuid->bytes);
	return CUDA_SUCCESS;
}

static CUresult f_DeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice dev)
{
	/* What sharing device memory and events between processes needs; nothing else. */
	*v = a == CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED ||
	     a == CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED ||
	     a == CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED;
	return dev >= 0 && dev < DEVICES ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

static CUresult f_DevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev)
{
	FAIL_POINT("cuDevicePrimaryCtxRetain");
	if (dev < 0 || dev >= DEVICES)
		return bad(CUDA_ERROR_INVALID_DEVICE);
	g_ctx_refs[dev]++;
	g_n.ctx_refs++;
	*ctx = (CUcontext)(void *)&g_ctx_tag[dev];
	return CUDA_SUCCESS;
}

static CUresult f_DevicePrimaryCtxRelease(CUdevice dev)
{
	FAIL_POINT("cuDevicePrimaryCtxRelease");
	if (dev < 0 || dev >= DEVICES || g_ctx_refs[dev] == 0)
		return bad(CUDA_ERROR_INVALID_DEVICE);
	g_ctx_refs[dev]--;
	g_n.ctx_refs--;
	return CUDA_SUCCESS;
}

static CUresult f_CtxPushCurrent(CUcontext ctx)
{
	FAIL_POINT("cuCtxPushCurrent");
	for (int d = 0; d < DEVICES; d++) {
		if ((void *)ctx == (void *)&g_ctx_tag[d]) {
			if (g_ctx_refs[d] == 0 || t_depth == 16)
				return bad(CUDA_ERROR_INVALID_CONTEXT);
			t_stack[t_depth++] = d;
			return CUDA_SUCCESS;
		}
	}
	return bad(CUDA_ERROR_INVALID_CONTEXT);
}

static CUresult f_CtxPopCurrent(CUcontext *ctx)
{
	if (t_depth == 0)
		return bad(CUDA_ERROR_INVALID_CONTEXT);
	t_depth--;
	if (ctx)
		*ctx = (CUcontext)(void *)&g_ctx_tag[t_stack[t_depth]];
	return CUDA_SUCCESS;
}

static CUresult f_MemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *p,
					      CUmemAllocationGranularity_flags o)
{
	if (p->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    p->location.type != CU_MEM_LOCATION_TYPE_DEVICE || p->location.id < 0 ||
	    p->location.id >= DEVICES)
		return bad(CUDA_ERROR_INVALID_VALUE);
	*g = FAKE_CUDA_GRANULARITY;
	return CUDA_SUCCESS;
}

static struct alloc *alloc_of(CUmemGenericAllocationHandle h)
{
	struct alloc *a = (struct alloc *)(uintptr_t)h;

	return a && a->magic == ALLOC_MAGIC ? a : NULL;
}

/* Device memory is a memfd of the size asked for (which must be whole granules). */
static CUresult f_MemCreate(CUmemGenericAllocationHandle *h, size_t size,
			    const CUmemAllocationProp *p, unsigned long long flags)
{
	struct alloc *a;
	int fd;

	FAIL_POINT("cuMemCreate");
	need_ctx();
	if (size == 0 || size % FAKE_CUDA_GRANULARITY || flags ||
	    p->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    p->location.type != CU_MEM_LOCATION_TYPE_DEVICE || p->location.id < 0 ||
	    p->location.id >= DEVICES)
		return bad(CUDA_ERROR_INVALID_VALUE);
	if (size > FAKE_CUDA_TOTAL_MEMORY)
		return CUDA_ERROR_OUT_OF_MEMORY;
	fd = memfd_create("fake-cuda-device-memory", MFD_CLOEXEC);
	if (fd < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	a = calloc(1, sizeof(*a));
	if (!a || ftruncate(fd, (off_t)size) < 0) {
		free(a);
		close(fd);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	a->magic = ALLOC_MAGIC;
	a->fd = fd;
	a->size = size;
	a->exportable = !!(p->requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	*h = (CUmemGenericAllocationHandle)(uintptr_t)a;
	g_n.handles++;
	return CUDA_SUCCESS;
}

/* The shareable handle is a new descriptor of the memfd (the caller owns it). */
static CUresult f_MemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h,
					     CUmemAllocationHandleType type,
					     unsigned long long flags)
{
	struct alloc *a = alloc_of(h);
	int fd;

	FAIL_POINT("cuMemExportToShareableHandle");
	if (!a || flags || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || !a->exportable)
		return bad(CUDA_ERROR_INVALID_VALUE);
	fd = dup(a->fd);
	if (fd < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*(int *)out = fd;
	return CUDA_SUCCESS;
}

static CUresult f_MemcpyDtoH(void *dst, CUdeviceptr src, size_t n)
{
	need_ctx();
	if (n && !fake_cuda_device_range((uintptr_t)src, n))
		return bad(CUDA_ERROR_INVALID_VALUE);
	memcpy(dst, (const void *)(uintptr_t)src, n);
	return CUDA_SUCCESS;
}

static CUresult f_MemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os,
					       CUmemAllocationHandleType type)
{
	int fd = (int)(intptr_t)os;
	struct alloc *a;
	struct stat st;

	FAIL_POINT("cuMemImportFromShareableHandle");
	need_ctx();
	if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return bad(CUDA_ERROR_INVALID_VALUE);
	if (fstat(fd, &st) < 0 || st.st_size <= 0)
		return bad(CUDA_ERROR_INVALID_VALUE);
	a = calloc(1, sizeof(*a));
	if (!a)
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* Like the driver: the allocation does not depend on the caller's descriptor. */
	a->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	a->size = (uint64_t)st.st_size;
	a->exportable = 1;
	a->magic = ALLOC_MAGIC;
	*h = (CUmemGenericAllocationHandle)(uintptr_t)a;
	g_n.handles++;
	g_n.imports++;
	return CUDA_SUCCESS;
}

static CUresult f_MemRelease(CUmemGenericAllocationHandle h)
{
	struct alloc *a = alloc_of(h);

	FAIL_POINT("cuMemRelease");
	need_ctx();
	if (!a)
		return bad(CUDA_ERROR_INVALID_VALUE);
	close(a->fd);
	a->magic = 0;
	free(a);
	g_n.handles--;
	return CUDA_SUCCESS;
}

static CUresult f_MemAddressReserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr,
				    unsigned long long flags)
{
	CUresult e = CUDA_ERROR_OUT_OF_MEMORY;
	void *m;

	FAIL_POINT("cuMemAddressReserve");
	need_ctx();
	if (size == 0 || addr || flags || (align & (align - 1)))
		return bad(CUDA_ERROR_INVALID_VALUE);
	pthread_mutex_lock(&g_lock);
	for (int i = 0; i < RANGES; i++) {
		if (!g_ranges[i].used) {
			m = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
				 -1, 0);
			if (m == MAP_FAILED)
				break;
			g_ranges[i] = (struct range){ .base = (CUdeviceptr)(uintptr_t)m, .size = size,
						      .used = 1 };
			*p = g_ranges[i].base;
			g_n.reserved++;
			e = CUDA_SUCCESS;
			break;
		}
	}
	pthread_mutex_unlock(&g_lock);
	return e;
}

static CUresult f_MemAddressFree(CUdeviceptr p, size_t size)
{
	struct range *r;
	int ok;

	FAIL_POINT("cuMemAddressFree");
	need_ctx();
	pthread_mutex_lock(&g_lock);
	r = range_at(p, size);
	ok = r && !r->mapped;
	if (ok) {
		munmap((void *)(uintptr_t)p, size);
		r->used = 0;
		g_n.reserved--;
	}
	pthread_mutex_unlock(&g_lock);
	return ok ? CUDA_SUCCESS : bad(CUDA_ERROR_INVALID_VALUE);
}

static CUresult f_MemMap(CUdeviceptr p, size_t size, size_t offset,
			 CUmemGenericAllocationHandle h, unsigned long long flags)
{
	struct alloc *a = alloc_of(h);
	CUresult e = CUDA_SUCCESS;
	struct range *r;

	FAIL_POINT("cuMemMap");
	need_ctx();
	pthread_mutex_lock(&g_lock);
	r = range_at(p, size);
	if (!r || r->mapped || !a || flags || offset > a->size || size > a->size - offset)
		e = CUDA_ERROR_INVALID_VALUE;
	/* No access until cuMemSetAccess grants it, as on a GPU. */
	else if (mmap((void *)(uintptr_t)p, size, PROT_NONE, MAP_SHARED | MAP_FIXED, a->fd,
		      (off_t)offset) == MAP_FAILED)
		e = CUDA_ERROR_OUT_OF_MEMORY;
	else
		r->mapped = 1;
	if (e == CUDA_SUCCESS)
		g_n.mapped++;
	pthread_mutex_unlock(&g_lock);
	return e == CUDA_ERROR_INVALID_VALUE ? bad(e) : e;
}

static CUresult f_MemUnmap(CUdeviceptr p, size_t size)
{
	struct range *r;
	int ok;

	FAIL_POINT("cuMemUnmap");
	need_ctx();
	pthread_mutex_lock(&g_lock);
	r = range_at(p, size);
	ok = r && r->mapped;
	if (ok) {
		mmap((void *)(uintptr_t)p, size, PROT_NONE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
		r->mapped = r->access = 0;
		g_n.mapped--;
	}
	pthread_mutex_unlock(&g_lock);
	return ok ? CUDA_SUCCESS : bad(CUDA_ERROR_INVALID_VALUE);
}

static CUresult f_MemSetAccess(CUdeviceptr p, size_t size, const CUmemAccessDesc *d,
			       size_t count)
{
	int dev = need_ctx(), ok;
	struct range *r;

	FAIL_POINT("cuMemSetAccess");
	pthread_mutex_lock(&g_lock);
	r = range_at(p, size);
	ok = r && r->mapped && count == 1 && d->location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
	     d->location.id == dev && d->flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	if (ok) {
		mprotect((void *)(uintptr_t)p, size, PROT_READ | PROT_WRITE);
		r->access = 1;
	}
	pthread_mutex_unlock(&g_lock);
	return ok ? CUDA_SUCCESS : bad(CUDA_ERROR_INVALID_VALUE);
}

/* A free entry of the event table, marked used. @return its index, or -1. */
static int event_slot(void)
{
	for (int i = 0; i < EVENTS; i++) {
		if (!g_ev[i].used) {
			memset(&g_ev[i], 0, sizeof(g_ev[i]));
			g_ev[i].used = 1;
			g_ev[i].record_device = -1;
			return i;
		}
	}
	return -1;
}

/*
 * Map the exporting process's shared event table and find the event of a
 * fake runtime's handle there. @return 0 and the mapping in *ret_shm (NULL
 * where the exporter has no table: its events complete at once), or -1
 * for a handle of an event that no longer lives.
 */
static int open_shared(const CUipcEventHandle *h, struct fake_cuda_shm **ret_shm)
{
	struct fake_cuda_shm *t;
	int32_t pid, index;
	uint32_t serial;
	struct stat st;
	char name[64];
	int fd;

	*ret_shm = NULL;
	memcpy(&pid, h->reserved + 8, sizeof(pid));
	memcpy(&serial, h->reserved + 12, sizeof(serial));
	memcpy(&index, h->reserved + 16, sizeof(index));
	if (index < 0 || index >= FAKE_CUDA_SHM_EVENTS)
		return 0;
	snprintf(name, sizeof(name), FAKE_CUDA_SHM_NAME, (int)pid);
	fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
	if (fd < 0 || fstat(fd, &st) < 0 || (size_t)st.st_size < sizeof(*t)) {
		fprintf(stderr, "fake libcuda: no shared event table %s (%s): event %d of process %d "
			"completes at once\n", name, fd < 0 ? strerror(errno) : "too short",
			(int)index, (int)pid);
		if (fd >= 0)
			close(fd);
		return 0;
	}
	t = mmap(NULL, sizeof(*t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (t == MAP_FAILED)
		return 0;
	if (memcmp(t->magic, FAKE_CUDA_SHM_MAGIC, sizeof(t->magic)) != 0 ||
	    __atomic_load_n(&t->ev[index].serial, __ATOMIC_ACQUIRE) != serial) {
		munmap(t, sizeof(*t));
		return -1;
	}
	*ret_shm = t;
	return 0;
}

/* Free entry i of an event opened from a fake runtime's handle. */
static void event_drop(int i)
{
	if (g_ev[i].shm)
		munmap(g_ev[i].shm, sizeof(*g_ev[i].shm));
	g_ev[i].shm = NULL;
	g_ev[i].shared = NULL;
	g_ev[i].used = 0;
}

static CUresult f_IpcOpenEventHandle(CUevent *ev, CUipcEventHandle h)
{
	static const char rt_magic[8] = FAKE_CUDA_RT_IPC_MAGIC;
	struct fake_cuda_shm *shm = NULL;
	struct opened *o;
	int i, remote = 0;

	FAIL_POINT("cuIpcOpenEventHandle");
	need_ctx();
	if (memcmp(h.reserved, rt_magic, sizeof(rt_magic)) == 0) {
		uint64_t ns;

		/* CUDA IPC handles do not cross PID namespaces (a trainer in another container). */
		memcpy(&ns, h.reserved + 24, sizeof(ns));
		if (ns && ns != fake_cuda_pid_ns())
			return CUDA_ERROR_INVALID_HANDLE;
		/* A fake runtime's event in another process: its state is in that one's table. */
		if (open_shared(&h, &shm) < 0)
			return CUDA_ERROR_INVALID_VALUE;   /* destroyed: not the client's fault */
		i = event_slot();
		if (i < 0) {
			if (shm)
				munmap(shm, sizeof(*shm));
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		g_ev[i].remote = remote = 1;
		if (shm) {
			int32_t index;

			memcpy(&index, h.reserved + 16, sizeof(index));
			g_ev[i].shm = shm;
			g_ev[i].shared = &shm->ev[index];
		}
	} else {
		memcpy(&i, h.reserved + 8, sizeof(i));
		if (memcmp(h.reserved, "FAKEIPC", 8) != 0 || i < 0 || i >= EVENTS || !g_ev[i].used)
			return CUDA_ERROR_INVALID_VALUE;   /* a hostile daemon's handle: not the client's fault */
	}
	o = calloc(1, sizeof(*o));
	if (!o) {
		if (remote)
			event_drop(i);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	o->magic = OPEN_MAGIC;
	o->index = i;
	*ev = (CUevent)(void *)o;
	g_n.events++;
	return CUDA_SUCCESS;
}

static CUresult f_EventRecord(CUevent ev, CUstream stream)
{
	struct opened *o = opened(ev);
	int dev = need_ctx();

	FAIL_POINT("cuEventRecord");
	if (!o)
		return bad(CUDA_ERROR_INVALID_HANDLE);
	/* The record follows the stream's waits: never complete before them. */
	fake_cuda_stream_waits((uintptr_t)stream);
	g_ev[o->index].records++;
	g_ev[o->index].record_stream = (void *)stream;
	g_ev[o->index].record_device = dev;
	if (g_ev[o->index].shared) {
		const char *s = getenv(FAKE_CUDA_DELAY_ENV);
		long ms = s ? atol(s) : 0;

		/*
		 * Before the caller goes on to store its release mark: whoever
		 * sees the mark and then queries the event sees this record.
		 */
		__atomic_store_n(&g_ev[o->index].shared->completes_at,
				 ms > 0 ? fake_cuda_now_ns() + (int64_t)ms * 1000000 : 0,
				 __ATOMIC_RELEASE);
	}
	if (g_on_record)
		g_on_record(o->index, (void *)stream);
	return CUDA_SUCCESS;
}

static CUresult f_EventQuery(CUevent ev)
{
	struct opened *o = opened(ev);

	if (!o)
		return bad(CUDA_ERROR_INVALID_HANDLE);
	return event_busy(o->index) ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

/* Streams are synchronous here: an event is complete once recorded, unless delayed. */
static CUresult f_EventSynchronize(CUevent ev)
{
	struct opened *o = opened(ev);

	need_ctx();
	if (!o)
		return bad(CUDA_ERROR_INVALID_HANDLE);
	g_ev[o->index].syncs++;
	event_wait(o->index);
	return CUDA_SUCCESS;
}

static CUresult f_EventDestroy(CUevent ev)
{
	struct opened *o = opened(ev);

	FAIL_POINT("cuEventDestroy");
	need_ctx();
	if (!o)
		return bad(CUDA_ERROR_INVALID_HANDLE);
	/* A stream's wait outlives the event, as in CUDA: keep its table mapped till then. */
	while (wait_take(0, o->index) >= 0)
		event_wait(o->index);
	if (g_ev[o->index].remote)
		event_drop(o->index);
	o->magic = 0;
	free(o);
	g_n.events--;
	return CUDA_SUCCESS;
}

static CUresult f_StreamWaitEvent(CUstream stream, CUevent ev, unsigned int flags)
{
	struct opened *o = opened(ev);

	FAIL_POINT("cuStreamWaitEvent");
	need_ctx();
	if (!o)
		return bad(CUDA_ERROR_INVALID_HANDLE);
	g_ev[o->index].waits++;
	g_ev[o->index].wait_stream = (void *)stream;
	g_ev[o->index].wait_flags = flags;
	if (event_busy(o->index)) {
		int full;

		pthread_mutex_lock(&g_lock);
		full = g_nwaits == WAITS;
		if (!full)
			g_waits[g_nwaits++] = (struct wait){ (uintptr_t)stream, o->index };
		pthread_mutex_unlock(&g_lock);
		/* No room to remember it: wait now, which is late enough. */
		if (full)
			event_wait(o->index);
	}
	return CUDA_SUCCESS;
}

/* The stream's own work is synchronous here: what it waits for is the events it waited on. */
static CUresult f_StreamSynchronize(CUstream stream)
{
	FAIL_POINT("cuStreamSynchronize");
	need_ctx();
	fake_cuda_stream_waits((uintptr_t)stream);
	g_n.stream_syncs++;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
				  cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
	static const struct {
		const char *name;
		void (*fn)(void);
	} table[] = {
#define F(n) { "cu" #n, (void (*)(void))f_##n }
		F(Init), F(DriverGetVersion), F(GetErrorString), F(GetErrorName),
		F(DeviceGetCount), F(DeviceGet), F(DeviceGetUuid), F(DeviceGetAttribute),
		F(DevicePrimaryCtxRetain), F(DevicePrimaryCtxRelease), F(CtxPushCurrent),
		F(CtxPopCurrent), F(MemGetAllocationGranularity), F(MemCreate), F(MemRelease),
		F(MemExportToShareableHandle), F(MemImportFromShareableHandle),
		F(MemAddressReserve), F(MemAddressFree), F(MemMap), F(MemUnmap), F(MemSetAccess),
		F(IpcOpenEventHandle), F(EventRecord), F(EventQuery), F(EventSynchronize),
		F(EventDestroy),
		F(StreamWaitEvent), F(StreamSynchronize), F(MemcpyDtoH),
#undef F
	};

	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
		if (strcmp(symbol, table[i].name) == 0) {
			/* POSIX's way from a function pointer to void * (ISO C has no cast for it). */
			memcpy(pfn, &table[i].fn, sizeof(*pfn));
			if (status)
				*status = CU_GET_PROC_ADDRESS_SUCCESS;
			return CUDA_SUCCESS;
		}
	}
	*pfn = NULL;
	if (status)
		*status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	return CUDA_ERROR_NOT_FOUND;
}
