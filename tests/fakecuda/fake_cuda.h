/* SPDX-License-Identifier: MIT */
/*
 * fake_cuda.h - what the two fakes of tests/fakecuda share: the fake
 * driver (fake_libcuda.c, soname libcuda.so.1) and the fake runtime
 * (fake_cudart.c, soname libcudart.so.13).
 *
 * Why two objects: the real runtime is a separate library that loads the
 * driver with dlopen(), and batchd and libbatchclient use both (the
 * runtime for streams, copies and events; the driver, through
 * lib/cudrv/cudrv.c, for VMM memory and IPC events). The fake runtime does
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

#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
 * past is complete, FAKE_CUDA_PENDING is "not until the copies queued
 * before it landed", which only the recording runtime's copy worker ends
 * (fake_cudart.c, $FAKE_CUDA_COPY_DELAY_MS). Records are otherwise
 * instant unless the recording process has $FAKE_CUDA_RECORD_DELAY_MS
 * set: a record by the fake driver there completes that many
 * milliseconds later, as if the stream still had that much work queued
 * before it, and queries in either process answer "not ready" until then.
 * The table carries its creator's pid, so that a waiter in another
 * process does not wait forever for a pending record of a process that
 * died.
 *
 * The fields are read and written with atomics only: the daemon's GPU
 * thread queries while a client records. A slot's serial is the live
 * event's (0: free), so a handle of a destroyed event is told apart.
 */
#define FAKE_CUDA_SHM_NAME "/fake-cuda-events-%d"   /* shm_open name; %d: the pid */
#define FAKE_CUDA_SHM_MAGIC "FAKESHM2"
#define FAKE_CUDA_SHM_EVENTS 8192
#define FAKE_CUDA_DELAY_ENV "FAKE_CUDA_RECORD_DELAY_MS"
#define FAKE_CUDA_PENDING INT64_MAX

/*
 * $FAKE_CUDA_COPY_DELAY_MS=D (fake_cudart.c): host-to-device copies on a
 * stream of the process's own land D ms after the one before them on that
 * stream; until then the destination holds this byte, so a reader that did
 * not wait for the copy's event sees it rather than the data.
 */
#define FAKE_CUDA_COPY_DELAY_ENV "FAKE_CUDA_COPY_DELAY_MS"
#define FAKE_CUDA_POISON 0xDB

struct fake_cuda_shm_event {
	uint32_t serial;
	uint32_t pad;
	int64_t completes_at;
};

struct fake_cuda_shm {
	char magic[8];
	int32_t pid;        /* the creating process */
	int32_t pad;
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

/* Is process pid there and not a zombie (dead, its parent not told yet)? */
static inline int fake_cuda_alive(int32_t pid)
{
	char path[64], buf[256], *paren;
	FILE *f;
	size_t n;

	if (kill(pid, 0) < 0 && errno == ESRCH)
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return 1;   /* no /proc: trust kill() */
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	paren = strrchr(buf, ')');
	return !(paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X'));
}

/*
 * Sleep until the last record of e (an entry of table t) completed; it may
 * be recorded again meanwhile. A pending record ends when the copy worker
 * says so: look every millisecond, and stop waiting for one whose process
 * died (every 64th look).
 */
static inline void fake_cuda_shm_wait(const struct fake_cuda_shm *t,
				      const struct fake_cuda_shm_event *e)
{
	int64_t at, left;
	unsigned looks = 0;

	while ((left = (at = __atomic_load_n(&e->completes_at, __ATOMIC_ACQUIRE)) -
		       fake_cuda_now_ns()) > 0) {
		struct timespec ts = { .tv_sec = 0, .tv_nsec = 1000000 };

		if (at == FAKE_CUDA_PENDING && ++looks % 64 == 0 && !fake_cuda_alive(t->pid))
			return;
		if (left < ts.tv_nsec)
			ts.tv_nsec = left;
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
#define FAKE_CUDA_HOOK_STREAM_WAITS "fake_cuda_stream_waits"
/*
 * Block until every event that `stream` was made to wait for
 * (cuStreamWaitEvent) completed, and forget those waits: the fake runtime
 * calls it before work it does on that stream, which a GPU would order
 * after the waits.
 */
typedef void (*fake_cuda_stream_waits_fn)(uintptr_t stream);

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
