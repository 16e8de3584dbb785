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
 * The library is four files by area (fake_cudart_priv.h): this one has
 * the driver underneath, errors, versions and devices; memory, streams
 * with the copy worker, and events are beside it.
 *
 * Thread rules: any thread, as the runtime; one lock guards the tables
 * and the copy worker's queue. The current device and the last error are
 * per thread.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "fake_cuda.h"
#include "fake_cudart_priv.h"

pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static _Thread_local int t_device;
static _Thread_local cudaError_t t_error;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_have_driver;
fake_cuda_device_range_fn g_device_range;
static fake_cuda_set_current_fn g_set_current;
fake_cuda_stream_waits_fn g_stream_waits;

/* ---- the driver underneath ----------------------------------------------------------------- */

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

int rt__env_int(const char *name, int def)
{
	const char *s = getenv(name);

	return s && *s ? atoi(s) : def;
}

/* The driver's version: $FAKE_CUDA_DRIVER_VERSION, else this runtime's; 0 without a driver. */
static int driver_version(void)
{
	return driver() ? rt__env_int("FAKE_CUDA_DRIVER_VERSION", CUDART_VERSION) : 0;
}

/* Set (never cleared) by the copy $FAKE_CUDA_STICKY_AFTER allows no more. */
static int g_sticky;

cudaError_t rt__sticky(void)
{
	return __atomic_load_n(&g_sticky, __ATOMIC_ACQUIRE) ? cudaErrorIllegalAddress : cudaSuccess;
}

int rt__sticky_now(void)
{
	static long copies;
	const char *after = getenv("FAKE_CUDA_STICKY_AFTER");

	if (!after || __atomic_add_fetch(&copies, 1, __ATOMIC_RELAXED) <= atol(after))
		return 0;
	__atomic_store_n(&g_sticky, 1, __ATOMIC_RELEASE);
	return 1;
}

cudaError_t rt__fail(cudaError_t e)
{
	t_error = e;
	return e;
}

cudaError_t rt__misuse(cudaError_t e, const char *call, const char *what)
{
	fprintf(stderr, "fake cudart: %s: %s (%s)%s\n", call, what, cudaGetErrorName(e),
		getenv("FAKE_CUDA_STRICT") ? "; FAKE_CUDA_STRICT: aborting" : "");
	if (getenv("FAKE_CUDA_STRICT"))
		abort();
	return rt__fail(e);
}

cudaError_t rt__ready(void)
{
	if (driver_version() < CUDART_VERSION)
		return rt__fail(cudaErrorInsufficientDriver);
	if (rt__sticky())
		return rt__fail(rt__sticky());
	if (g_set_current)
		g_set_current(t_device);
	return cudaSuccess;
}

/* ---- errors and versions ------------------------------------------------------------------- */

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
	t_error = rt__sticky();
	return e != cudaSuccess ? e : rt__sticky();
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

/* ---- devices ------------------------------------------------------------------------------- */

cudaError_t cudaGetDeviceCount(int *n)
{
	cudaError_t e = rt__ready();

	if (e == cudaSuccess && getenv("FAKE_CUDA_ERROR"))
		e = rt__fail((cudaError_t)rt__env_int("FAKE_CUDA_ERROR", 0));
	*n = e == cudaSuccess ? fake_cuda_devices() : 0;
	return e;
}

cudaError_t cudaSetDevice(int dev)
{
	cudaError_t e = rt__ready();

	if (e != cudaSuccess)
		return e;
	if (dev < 0 || dev >= fake_cuda_devices())
		return rt__fail(cudaErrorInvalidDevice);
	t_device = dev;
	if (g_set_current)
		g_set_current(dev);
	return cudaSuccess;
}

cudaError_t cudaGetDevice(int *dev)
{
	cudaError_t e = rt__ready();

	if (e == cudaSuccess)
		*dev = t_device;
	return e;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int dev)
{
	cudaError_t e = rt__ready();

	if (e != cudaSuccess)
		return e;
	if (dev < 0 || dev >= fake_cuda_devices())
		return rt__fail(cudaErrorInvalidDevice);
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
	cudaError_t e = rt__ready();

	if (e != cudaSuccess)
		return e;
	if (dev < 0 || dev >= fake_cuda_devices())
		return rt__fail(cudaErrorInvalidDevice);
	if (!v)
		return rt__fail(cudaErrorInvalidValue);
	if (a == cudaDevAttrComputeMode)
		*v = rt__env_int("FAKE_CUDA_COMPUTE_MODE", cudaComputeModeDefault);
	else if (a == cudaDevAttrHostRegisterSupported)
		*v = getenv("FAKE_CUDA_NO_HOST_REGISTER") ? 0 : 1;
	else
		return rt__misuse(cudaErrorInvalidValue, "cudaDeviceGetAttribute",
				  "an attribute the fake does not model");
	return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
	cudaError_t e = rt__ready();

	pthread_mutex_lock(&g_lock);
	rt__drain(NULL);
	pthread_mutex_unlock(&g_lock);
	return e;
}
