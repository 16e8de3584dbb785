/* SPDX-License-Identifier: MIT */
/*
 * fake_cuda.h - what the two fakes of tests/fakecuda share: the fake
 * driver (fake_libcuda.c, soname libcuda.so.1) and the fake runtime
 * (fake_cudart.c, soname libcudart.so.13).
 *
 * Why two objects: the real runtime is a separate library that loads the
 * driver with dlopen(), and batchd and libbatchclient use both (the
 * runtime for streams, copies and events; the driver, through
 * proto/cudrv.c, for VMM memory and IPC events). The fake runtime does
 * the same: it loads libcuda.so.1 and, when that is the fake driver, asks
 * it through the hooks below which addresses are device memory and tells
 * it which device the calling thread made current, as the real runtime
 * makes the device's primary context current.
 *
 * The device count comes from $FAKE_CUDA_DEVICES (1..FAKE_CUDA_MAX_DEVICES,
 * default FAKE_CUDA_DEFAULT_DEVICES); both fakes read it. With
 * $FAKE_CUDA_STRICT set, a call the real CUDA would refuse or that breaks
 * a rule of the API (a stale handle, a copy outside device memory, no
 * context current) prints what happened and aborts the process, so a
 * daemon that misuses CUDA fails its test loudly.
 */
#ifndef BATCHD_TESTS_FAKE_CUDA_H
#define BATCHD_TESTS_FAKE_CUDA_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#define FAKE_CUDA_MAX_DEVICES 8
#define FAKE_CUDA_DEFAULT_DEVICES 2
#define FAKE_CUDA_GRANULARITY (UINT64_C(2) << 20)
#define FAKE_CUDA_TOTAL_MEMORY (UINT64_C(16) << 30)

/*
 * IPC event handles made by the fake runtime (cudaIpcGetEventHandle):
 * this magic, then the creating process's pid and the event's serial
 * number (native endian), the rest zero.
 */
#define FAKE_CUDA_RT_IPC_MAGIC "FAKERTEV"

/* Hooks the fake driver exports for the fake runtime (looked up with dlsym). */
#define FAKE_CUDA_HOOK_DEVICE_RANGE "fake_cuda_device_range"
#define FAKE_CUDA_HOOK_SET_CURRENT "fake_cuda_set_current"
/* Is [p, p + len) inside device memory this process mapped and may access? */
typedef int (*fake_cuda_device_range_fn)(uintptr_t p, size_t len);
/* The calling thread's runtime made device dev current (-1: none). */
typedef void (*fake_cuda_set_current_fn)(int dev);

/* $FAKE_CUDA_DEVICES, clamped to 1..FAKE_CUDA_MAX_DEVICES. */
static inline int fake_cuda_devices(void)
{
	const char *s = getenv("FAKE_CUDA_DEVICES");
	int n = s ? atoi(s) : FAKE_CUDA_DEFAULT_DEVICES;

	return n < 1 ? 1 : n > FAKE_CUDA_MAX_DEVICES ? FAKE_CUDA_MAX_DEVICES : n;
}

/* The UUID of device `ordinal`: fa ce 00 <ordinal> 04 05 ... 0f. */
static inline void fake_cuda_uuid_of(int ordinal, unsigned char out[16])
{
	for (int i = 0; i < 16; i++)
		out[i] = (unsigned char)i;
	out[0] = 0xfa;
	out[1] = 0xce;
	out[2] = 0;
	out[3] = (unsigned char)ordinal;
}

#endif
