/* SPDX-License-Identifier: MIT */
/*
 * test-gpu.h - what the files of test-gpu share: the daemon under test,
 * the failure count and its macros, the daemon's status, one batch checked
 * on the device, and the cases each file provides. One executable,
 * test-gpu, is built from
 *
 *   test-gpu.c         main(), the watchdog, the helpers below, and the
 *                      cases (a) delivery and (d) batchctl
 *   test-gpu-copy.c    when copies land: (b) slot reuse, on a GPU and on
 *                      the fake CUDA, and (e) asynchronous copies
 *   test-gpu-memory.c  (c) device memory comes back, and the trainer it
 *                      kills (`test-gpu --hold`)
 *
 * The helpers keep the short names they had in one file: they are this
 * program's own, and its cases read as they did.
 *
 * Thread rules: everything runs on the main thread, but for what the copy
 * cases hand to CUDA's callback thread (test-gpu-copy.c says which).
 */
#ifndef BATCHD_TESTS_GPU_TEST_GPU_H
#define BATCHD_TESTS_GPU_TEST_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>
#include <json-c/json.h>

#include "batchclient.h"
#include "daemon-testlib.h"

#define MiB (UINT64_C(1) << 20)

extern dt_daemon D;
extern int failures;
extern bool fake;                /* BATCHD_TEST_FAKE_CUDA: the fake CUDA of tests/fakecuda */

/* Say "FAIL - FILE:LINE: why" (FILE without its folders) and count a failure. */
void fail_at(const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* In a case function: on failure say why and go to its `out` label. */
#define EXPECT(cond, ...)                                                               \
	do {                                                                            \
		if (!(cond)) {                                                          \
			fail_at(__FILE__, __LINE__, __VA_ARGS__);                       \
			goto out;                                                       \
		}                                                                       \
	} while (0)

#define CU(call)                                                                        \
	do {                                                                            \
		cudaError_t e_ = (call);                                                \
		if (e_ != cudaSuccess) {                                                \
			fail_at(__FILE__, __LINE__, "%s: %s (%s)", #call,               \
				cudaGetErrorString(e_), cudaGetErrorName(e_));          \
			goto out;                                                       \
		}                                                                       \
	} while (0)

/* CLOCK_MONOTONIC, the clock the fake CUDA's delayed events complete by, in ns. */
int64_t now_ns(void);
uint64_t now_ms(void);

/* ---- the daemon's status (test-gpu.c) ---- */

/* The daemon's status, parsed (caller puts it), or NULL. */
json_object *status_json(void);
/* The integer at path, or -1 when absent. */
int64_t jint(json_object *o, const char *path);
/* The number of sessions in status o, or (size_t)-1. */
size_t nsessions(json_object *o);
/*
 * Wait up to ms for the daemon to hold no session and no device memory.
 * @return true when it does; *ret_devmem / *ret_sessions: the last seen.
 */
bool wait_idle(int ms, int64_t *ret_devmem, size_t *ret_sessions);
/*
 * Close *s and disconnect *c (both set to NULL), then wait up to 30 s for
 * the daemon to be idle (wait_idle). @return true; false having failed the
 * case at file:line with why.
 */
bool close_to_idle(bc_client **c, bc_stream **s, const char *file, int line);

/* ---- one batch on the device (test-gpu.c) ---- */

/*
 * b's staging copy holds the pack's samples (dt_batch_check); make st wait
 * for b's copy, copy the device payload back into `back` (pinned, cap
 * bytes) and check every sample there against the pack too.
 * @return the payload's bytes, or -1 with why in err. Does not release b.
 */
int64_t check_on_device(bc_batch *b, cudaStream_t st, uint8_t *back, size_t cap, dt_ref *ref,
			char *err, size_t errlen);
/*
 * The next batch of s (waiting up to 30 s), checked on the device as
 * check_on_device does, then released. @return 0 with its payload's bytes
 * in *ret_bytes; BC_EPOCH_END; -1 with why in err (bc_next, the check or
 * the release failed).
 */
int take_on_device(bc_stream *s, cudaStream_t st, uint8_t *back, size_t cap, dt_ref *ref,
		   int64_t *ret_bytes, char *err, size_t errlen);
/*
 * Connect *c to the daemon and open *s on device 0 (seed 7). @return 0, or
 * a negative errno said on stdout (*c then NULL).
 */
int open_stream(bc_client **c, bc_stream **s, const char *dataset, uint32_t batch,
		enum bc_shuffle shuffle, uint32_t prefetch);

/* ---- the cases of the other files; each counts its failures in `failures` ---- */

/* (b) a device slot is reused only after its release event (test-gpu-copy.c). */
void case_slot_reuse(void);
void case_slot_reuse_fake(void);
/* (e) asynchronous copies, on the fake CUDA with $FAKE_CUDA_COPY_DELAY_MS (test-gpu-copy.c). */
void case_async_fake(void);
/* (c) device memory comes back (test-gpu-memory.c). */
void case_device_memory(void);
/*
 * `test-gpu --hold SOCKET DATASET FD`, the trainer case_device_memory
 * kills: returns only on failure (1), else waits for SIGKILL.
 */
int hold_main(const char *sock, const char *dataset, const char *fdstr);

#endif
