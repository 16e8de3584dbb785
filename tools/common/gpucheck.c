/* SPDX-License-Identifier: MIT */
/*
 * gpucheck.c - a trainer's CUDA stream over a GPU bc_stream, and the
 * copy-back check the tools run on each batch (see gpucheck.h).
 *
 * The copy back lands in pinned memory: a device-to-pageable copy makes
 * the runtime stage through its own buffer, which would measure the
 * runtime instead of the batch.
 *
 * The CUDA runtime is loaded when a GPU stream is first asked for
 * (dlopen, as libbatchclient loads the driver), not linked: batchctl then
 * starts, and serves host streams, on a machine whose loader cannot find
 * libcudart, and says so only to a --device run.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batchd-build.h"
#include "gpucheck.h"

__attribute__((format(printf, 3, 4)))
static int say(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
	return 0;
}

#if BATCHD_HAVE_CUDA
#include <dlfcn.h>

#include <cuda_runtime_api.h>

/* The runtime calls used, resolved from libcudart.so.MAJOR (the toolkit built against). */
static struct cudart {
	cudaError_t (*SetDevice)(int);
	cudaError_t (*StreamCreateWithFlags)(cudaStream_t *, unsigned);
	cudaError_t (*StreamSynchronize)(cudaStream_t);
	cudaError_t (*StreamDestroy)(cudaStream_t);
	cudaError_t (*MallocHost)(void **, size_t);
	cudaError_t (*FreeHost)(void *);
	cudaError_t (*MemcpyAsync)(void *, const void *, size_t, enum cudaMemcpyKind, cudaStream_t);
	const char *(*GetErrorString)(cudaError_t);
	const char *(*GetErrorName)(cudaError_t);
	cudaError_t (*GetLastError)(void);
} rt;

/* Load the runtime once. @return 0, or -ENODEV with err saying what to install. */
static int load_cudart(char *err, size_t errlen)
{
	static const char *const names[] = {
		"cudaSetDevice", "cudaStreamCreateWithFlags", "cudaStreamSynchronize",
		"cudaStreamDestroy", "cudaMallocHost", "cudaFreeHost", "cudaMemcpyAsync",
		"cudaGetErrorString", "cudaGetErrorName", "cudaGetLastError",
	};
	void **slot = (void **)&rt;
	char soname[32];
	void *dl;

	if (rt.GetLastError)
		return 0;
	snprintf(soname, sizeof(soname), "libcudart.so.%d", CUDART_VERSION / 1000);
	dl = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
	if (!dl)
		return say(err, errlen, "the CUDA runtime cannot be loaded (%s): install the CUDA "
			   "toolkit's runtime, or add its lib directory to the loader's path",
			   dlerror()), -ENODEV;
	_Static_assert(sizeof(rt) == sizeof(names) / sizeof(names[0]) * sizeof(void *),
		       "a name for every call");
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!(slot[i] = dlsym(dl, names[i])))
			return say(err, errlen, "%s lacks %s: not the CUDA runtime %d", soname,
				   names[i], CUDART_VERSION / 1000), -ENODEV;
	return 0;
}

struct gpucheck {
	int device;
	cudaStream_t stream;
	void *host;              /* pinned, cap bytes */
	size_t cap;
};

/* -EIO for a CUDA error, with its name and the call in err; clears the (non-sticky) error. */
static int cuda_fail(cudaError_t e, const char *call, char *err, size_t errlen)
{
	say(err, errlen, "%s: %s (%s)", call, rt.GetErrorString(e), rt.GetErrorName(e));
	(void)rt.GetLastError();
	if (e == cudaErrorMemoryAllocation)
		return -ENOMEM;
	if (e == cudaErrorNoDevice || e == cudaErrorInvalidDevice || e == cudaErrorInsufficientDriver)
		return -ENODEV;
	return -EIO;
}

int gpucheck_new(int device, gpucheck **ret, char *err, size_t errlen)
{
	gpucheck *g;
	cudaError_t e;
	int r;

	if ((r = load_cudart(err, errlen)) < 0)
		return r;
	g = calloc(1, sizeof(*g));
	if (!g)
		return say(err, errlen, "out of memory"), -ENOMEM;
	g->device = device;
	e = rt.SetDevice(device);
	if (e != cudaSuccess) {
		r = cuda_fail(e, "cudaSetDevice", err, errlen);
		free(g);
		return r;
	}
	e = rt.StreamCreateWithFlags(&g->stream, cudaStreamNonBlocking);
	if (e != cudaSuccess) {
		r = cuda_fail(e, "cudaStreamCreateWithFlags", err, errlen);
		free(g);
		return r;
	}
	*ret = g;
	return 0;
}

void gpucheck_free(gpucheck *g)
{
	if (!g)
		return;
	rt.StreamSynchronize(g->stream);
	rt.StreamDestroy(g->stream);
	rt.FreeHost(g->host);
	free(g);
}

int gpucheck_wait(gpucheck *g, bc_batch *b, char *err, size_t errlen)
{
	int r = bc_batch_wait_stream(b, g->stream);

	if (r < 0)
		say(err, errlen, "bc_batch_wait_stream: %s", bc_strerror(r));
	return r < 0 ? -EIO : 0;
}

/* Room for len bytes in the pinned buffer (grown, never shrunk). */
static int reserve(gpucheck *g, size_t len, char *err, size_t errlen)
{
	size_t cap = g->cap ? g->cap : 1u << 20;
	cudaError_t e;

	if (len <= g->cap)
		return 0;
	while (cap < len)
		cap *= 2;
	rt.FreeHost(g->host);
	g->host = NULL;
	g->cap = 0;
	e = rt.MallocHost(&g->host, cap);
	if (e != cudaSuccess)
		return cuda_fail(e, "cudaMallocHost", err, errlen);
	g->cap = cap;
	return 0;
}

int gpucheck_compare(gpucheck *g, const bc_batch *b, char *err, size_t errlen)
{
	size_t dlen, hlen;
	const void *dev = bc_batch_device_data(b, &dlen);
	const uint8_t *host = bc_batch_data(b, &hlen), *back;
	cudaError_t e;
	int r;

	if (!dev)
		return say(err, errlen, "batch %" PRIu64 ": no device payload", bc_batch_index(b)), 1;
	/*
	 * The whole payload came over: bc_batch_data's bytes at its start, every
	 * other selected field's (labels, keys) after them as on the host.
	 */
	if (dlen < hlen)
		return say(err, errlen, "batch %" PRIu64 ": %zu bytes in device memory, %zu staged",
			   bc_batch_index(b), dlen, hlen), 1;
	hlen = dlen;
	if (hlen == 0)
		return 0;
	r = reserve(g, hlen, err, errlen);
	if (r < 0)
		return r;
	e = rt.MemcpyAsync(g->host, dev, hlen, cudaMemcpyDeviceToHost, g->stream);
	if (e != cudaSuccess)
		return cuda_fail(e, "cudaMemcpyAsync", err, errlen);
	e = rt.StreamSynchronize(g->stream);
	if (e != cudaSuccess)
		return cuda_fail(e, "cudaStreamSynchronize", err, errlen);
	back = g->host;
	if (memcmp(back, host, hlen) == 0)
		return 0;
	for (size_t i = 0; i < hlen; i++)
		if (back[i] != host[i])
			return say(err, errlen, "batch %" PRIu64 " of epoch %" PRIu64 ": device byte %zu "
				   "of %zu is 0x%02x, staged 0x%02x", bc_batch_index(b), bc_batch_epoch(b),
				   i, hlen, back[i], host[i]), 1;
	return 1;
}

int gpucheck_sync(gpucheck *g, char *err, size_t errlen)
{
	cudaError_t e = rt.StreamSynchronize(g->stream);

	return e == cudaSuccess ? 0 : cuda_fail(e, "cudaStreamSynchronize", err, errlen);
}

#else /* !BATCHD_HAVE_CUDA */

int gpucheck_new(int device, gpucheck **ret, char *err, size_t errlen)
{
	say(err, errlen, "this build has no CUDA support (configure with -Dcuda=enabled)");
	return -ENOTSUP;
}

void gpucheck_free(gpucheck *g)
{
}

int gpucheck_wait(gpucheck *g, bc_batch *b, char *err, size_t errlen)
{
	say(err, errlen, "this build has no CUDA support");
	return -ENOTSUP;
}

int gpucheck_compare(gpucheck *g, const bc_batch *b, char *err, size_t errlen)
{
	say(err, errlen, "this build has no CUDA support");
	return -ENOTSUP;
}

int gpucheck_sync(gpucheck *g, char *err, size_t errlen)
{
	return 0;
}

#endif

int gpucheck_take(gpucheck *g, bc_batch *b, bool compare, char *err, size_t errlen)
{
	int r = gpucheck_wait(g, b, err, errlen);

	if (r == 0 && compare)
		r = gpucheck_compare(g, b, err, errlen);
	return r;
}
