/* SPDX-License-Identifier: MIT */
/*
 * fake_libcuda_priv.h - what the files of the fake CUDA driver
 * (libcuda.so.1; fake_libcuda.c says what it models) share: the counts a
 * test reads back, the event table's entries, the exported entry points,
 * the checks every driver call makes, and each area's table of calls.
 *
 *   fake_libcuda.c         failures on request, the calling thread's
 *                          context, errors and devices, and
 *                          cuGetProcAddress, which serves every area's
 *                          calls
 *   fake_libcuda_memory.c  VMM device memory: memfd allocations, reserved
 *                          ranges, their mappings and access
 *   fake_libcuda_events.c  IPC events (the in-process fake daemon's and the
 *                          fake runtime's), their records, and the waits
 *                          streams make on them
 *
 * The library is built with hidden visibility: it exports only what is
 * marked API (the test-only entry points, the fake runtime's hooks and
 * cuGetProcAddress_v2); the drv__ calls and the g_ tables are its own.
 *
 * Thread rules: fake_libcuda.c's. g_lock guards the range and wait
 * tables, which the fake runtime reaches from any thread.
 */
#ifndef BATCHD_TESTS_FAKE_LIBCUDA_PRIV_H
#define BATCHD_TESTS_FAKE_LIBCUDA_PRIV_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda.h>

#include "fake_cuda.h"

#define API __attribute__((visibility("default")))

#define DEVICES fake_cuda_devices()

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

extern struct fake_cuda_counts g_n;
/* The range and wait tables' lock: the fake runtime reaches them from any thread. */
extern pthread_mutex_t g_lock;

/* ---- the checks every call makes (fake_libcuda.c) ---- */

/* The code `name` fails with now (once per arming: fake_cuda_fail), or CUDA_SUCCESS. */
CUresult drv__fail_now(const char *name);

#define FAIL_POINT(name)                                \
	do {                                            \
		CUresult fail_ = drv__fail_now(name);   \
		if (fail_ != CUDA_SUCCESS)              \
			return fail_;                   \
	} while (0)

/*
 * The device whose context is current, or -1 (counted: the client promised
 * one). A pushed context wins; else the device the runtime made current.
 */
#define need_ctx() drv__need_ctx_in(__func__)
int drv__need_ctx_in(const char *call);

/* A call the real driver would refuse: counted, and fatal with $FAKE_CUDA_STRICT. @return e. */
#define bad(e) drv__bad_in((e), __func__)
CUresult drv__bad_in(CUresult e, const char *call);

/* ---- each area's calls, for cuGetProcAddress ---- */

/* A driver call by the name cuGetProcAddress is asked for ("cuMemMap"), and its function. */
struct drv__proc {
	const char *name;
	void (*fn)(void);
};

#define DRV_PROC(n) { "cu" #n, (void (*)(void))f_##n }

/* The calls of fake_libcuda_memory.c and fake_libcuda_events.c, each ending with { NULL, NULL }. */
extern const struct drv__proc drv__memory_procs[];
extern const struct drv__proc drv__event_procs[];

#endif
