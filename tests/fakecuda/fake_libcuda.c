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
 * The library is three files by area (fake_libcuda_priv.h): this one has
 * the test-only entry points for failures and contexts, the checks every
 * call makes, errors, devices and contexts, and cuGetProcAddress; device
 * memory and events are beside it.
 *
 * Thread rules: the driver calls are made from one thread at a time (the
 * Python tests, batchd's loop thread, a trainer); the range and wait
 * tables are locked, because the fake runtime checks copies against the
 * one and waits through the other from any thread
 * (fake_cuda_device_range, fake_cuda_stream_waits). The context stack is
 * per thread, as the driver's is.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#include "fake_cuda.h"
#include "fake_libcuda_priv.h"

struct fake_cuda_counts g_n;
static int g_ctx_tag[FAKE_CUDA_MAX_DEVICES];  /* a context is the address of its device's tag */
static int g_ctx_refs[FAKE_CUDA_MAX_DEVICES];
static _Thread_local int t_stack[16];
static _Thread_local int t_depth;
static _Thread_local int t_runtime_dev = -1;     /* made current by the fake runtime */
pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_fail_name[64];
static char g_fail2_name[64];      /* a second call to fail once (fake_cuda_fail_also) */
static CUresult g_fail2_code;
static CUresult g_fail_code;
static int g_fail_skip;

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

API void fake_cuda_set_current(int dev)
{
	t_runtime_dev = dev;
}

/* ---- the driver -------------------------------------------------------------------- */

CUresult drv__fail_now(const char *name)
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

/* $FAKE_CUDA_STRICT: a misuse ends the process, naming the call. */
static void misuse(const char *what, const char *call)
{
	if (!getenv("FAKE_CUDA_STRICT"))
		return;
	fprintf(stderr, "fake libcuda: %s in %s (FAKE_CUDA_STRICT: aborting)\n", what, call);
	abort();
}

int drv__need_ctx_in(const char *call)
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

CUresult drv__bad_in(CUresult e, const char *call)
{
	g_n.bad_calls++;
	misuse("a call the driver would refuse", call);
	return e;
}

/* ---- errors, devices and contexts ----------------------------------------------------- */

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

/* The call named `symbol` among every area's, or NULL. */
static const struct drv__proc *proc_of(const char *symbol)
{
	static const struct drv__proc own[] = {
		DRV_PROC(Init), DRV_PROC(DriverGetVersion), DRV_PROC(GetErrorString),
		DRV_PROC(GetErrorName), DRV_PROC(DeviceGetCount), DRV_PROC(DeviceGet),
		DRV_PROC(DeviceGetUuid), DRV_PROC(DeviceGetAttribute),
		DRV_PROC(DevicePrimaryCtxRetain), DRV_PROC(DevicePrimaryCtxRelease),
		DRV_PROC(CtxPushCurrent), DRV_PROC(CtxPopCurrent),
		{ NULL, NULL },
	};
	static const struct drv__proc *const areas[] = { own, drv__memory_procs, drv__event_procs };

	for (size_t a = 0; a < sizeof(areas) / sizeof(areas[0]); a++)
		for (const struct drv__proc *p = areas[a]; p->name; p++)
			if (strcmp(symbol, p->name) == 0)
				return p;
	return NULL;
}

API CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
				      cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
	const struct drv__proc *p = proc_of(symbol);

	if (p) {
		/* POSIX's way from a function pointer to void * (ISO C has no cast for it). */
		memcpy(pfn, &p->fn, sizeof(*pfn));
		if (status)
			*status = CU_GET_PROC_ADDRESS_SUCCESS;
		return CUDA_SUCCESS;
	}
	*pfn = NULL;
	if (status)
		*status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	return CUDA_ERROR_NOT_FOUND;
}
