/* SPDX-License-Identifier: MIT */
/*
 * fake_cuda.h - what the two fakes of tests/fakecuda share: the fake
 * driver (fake_libcuda.c, soname libcuda.so.1) and the fake runtime
 * (fake_cudart.c, soname libcudart.so.13).
 *
 * Why two objects: the real runtime is a separate library that loads the
 * driver with dlopen(), and batchd and libbatchclient use both (the
 * runtime for streams, copies and events; the driver, through
 * proto/cudrv/cudrv.c, for VMM memory and IPC events). The fake runtime does
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
#include <sys/stat.h>
#include <time.h>

#define FAKE_CUDA_MAX_DEVICES 8
#define FAKE_CUDA_DEFAULT_DEVICES 2
#define FAKE_CUDA_GRANULARITY (UINT64_C(2) << 20)
#define FAKE_CUDA_TOTAL_MEMORY (UINT64_C(16) << 30)

/*
 * IPC event handles made by the fake runtime (cudaIpcGetEventHandle):
 * this magic, then the creating process's pid, the event's serial number
 * and its index in that process's shared event table (-1: none), all
 * int32/uint32 in native endian, then at byte 24 the inode of its PID
 * namespace (uint64); the rest zero. Like the real driver's, such a handle
 * opens only in a process of the same PID namespace.
 */
#define FAKE_CUDA_RT_IPC_MAGIC "FAKERTEV"

/*
 * The shared event table: what makes an IPC event's state cross-process.
 * The fake runtime creates it (POSIX shared memory, named after its pid)
 * with its first cudaEventInterprocess event, and unlinks it at exit;
 * the fake driver in another process maps it when it opens a handle.
 * Each event says when its last record completes, as CLOCK_MONOTONIC
 * nanoseconds (one clock for every process on the machine): 0 or a time
 * past is complete. Records are instant (streams are synchronous) unless
 * the recording process has $FAKE_CUDA_RECORD_DELAY_MS set: a record by
 * the fake driver there completes that many milliseconds later, as if
 * the stream still had that much work queued before it, and queries in
 * either process answer "not ready" until then.
 *
 * The fields are read and written with atomics only: the daemon's GPU
 * thread queries while a client records. A slot's serial is the live
 * event's (0: free), so a handle of a destroyed event is told apart.
 */
#define FAKE_CUDA_SHM_NAME "/fake-cuda-events-%d"   /* shm_open name; %d: the pid */
#define FAKE_CUDA_SHM_MAGIC "FAKESHM1"
#define FAKE_CUDA_SHM_EVENTS 8192
#define FAKE_CUDA_DELAY_ENV "FAKE_CUDA_RECORD_DELAY_MS"

struct fake_cuda_shm_event {
	uint32_t serial;
	uint32_t pad;
	int64_t completes_at;
};

struct fake_cuda_shm {
	char magic[8];
	struct fake_cuda_shm_event ev[FAKE_CUDA_SHM_EVENTS];
};

/* The inode of this process's PID namespace, 0 when /proc cannot say. */
static inline uint64_t fake_cuda_pid_ns(void)
{
	struct stat st;

	return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

static inline int64_t fake_cuda_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Has the last record of e completed? */
static inline int fake_cuda_shm_done(const struct fake_cuda_shm_event *e)
{
	return __atomic_load_n(&e->completes_at, __ATOMIC_ACQUIRE) <= fake_cuda_now_ns();
}

/* Sleep until the last record of e completed (it may be recorded again meanwhile). */
static inline void fake_cuda_shm_wait(const struct fake_cuda_shm_event *e)
{
	int64_t left;

	while ((left = __atomic_load_n(&e->completes_at, __ATOMIC_ACQUIRE) -
		       fake_cuda_now_ns()) > 0) {
		struct timespec ts = { .tv_sec = left / 1000000000, .tv_nsec = left % 1000000000 };

		nanosleep(&ts, NULL);
	}
}

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
