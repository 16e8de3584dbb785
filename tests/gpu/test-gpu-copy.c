/* SPDX-License-Identifier: MIT */
/*
 * test-gpu-copy.c - test-gpu's cases about when copies land (test-gpu.h):
 * a device slot is written only after the release event of the batch that
 * held it completed (slot reuse, on a GPU with a stream held by a host
 * function, on the fake CUDA with a delayed record), and a batch's bytes
 * are there once the documented waits say so, while a reader that skips
 * them sees the fake's poison (asynchronous copies,
 * $FAKE_CUDA_COPY_DELAY_MS).
 *
 * Why one file: both cases race the daemon's copies against a reader, on
 * the same small stream shape (HOLD_PREFETCH), and judge the race by the
 * bytes read back (first_diff).
 *
 * Thread rules: the main thread, but hold_fn, which runs on CUDA's
 * callback thread and shares only the two atomics beside it.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <json-c/json.h>

#include "batchclient.h"
#include "daemon-testlib.h"
#include "json_path.h"
#include "test-gpu.h"

/* Case (b): slots = prefetch + 2 (daemon/session/session.c); batch seq uses device slot seq % slots. */
#define HOLD_PREFETCH 2u
#define HOLD_SLOTS (HOLD_PREFETCH + 2u)
#define HOLD_MAX (1u + HOLD_SLOTS + 2u)

/* ---- (b) a device slot is reused only after its release event ----------------------------- */

static atomic_int hold_gate;     /* 0: hold_fn keeps stream A waiting */
static atomic_int hold_expired;  /* hold_fn gave up waiting for the gate */

/*
 * Runs on CUDA's callback thread, blocking stream A until the gate opens.
 * It gives up after HOLD_GIVE_UP_MS, so that a libbatchclient call that
 * waits for stream A (a deadlock with this test) ends in a failure, not a
 * hang.
 */
#define HOLD_GIVE_UP_MS 15000

static void CUDART_CB hold_fn(void *arg)
{
	uint64_t end = now_ms() + HOLD_GIVE_UP_MS;

	(void)arg;
	while (!atomic_load(&hold_gate)) {
		if (now_ms() >= end) {
			atomic_store(&hold_expired, 1);
			return;
		}
		dt_sleep_ms(1);
	}
}

/* @return 1 when ev completed within ms, 0 when not yet, -1 on a CUDA error. */
static int done_within(cudaEvent_t ev, int ms)
{
	uint64_t end = now_ms() + (uint64_t)ms;

	for (;;) {
		cudaError_t e = cudaEventQuery(ev);

		if (e == cudaSuccess)
			return 1;
		if (e != cudaErrorNotReady) {
			printf("# cudaEventQuery: %s\n", cudaGetErrorString(e));
			return -1;
		}
		if (now_ms() >= end)
			return 0;
		dt_sleep_ms(1);
	}
}

typedef struct held {
	uint8_t *expect;         /* the staging copy, checked against the pack */
	uint8_t *back;           /* pinned: the copy back from the device */
	size_t len;
	uintptr_t dev;
	cudaEvent_t done;        /* after the copy back */
} held;

/* Check b's staging copy against the pack and keep it. @return 0 or -1. */
static int keep(bc_batch *b, held *h, size_t cap, dt_ref *ref, char *err, size_t errlen)
{
	size_t dlen;
	const void *host = bc_batch_data(b, &h->len);

	h->dev = (uintptr_t)bc_batch_device_data(b, &dlen);
	if (!h->dev || dlen != h->len || h->len > cap) {
		snprintf(err, errlen, "batch %" PRIu64 ": device payload %#" PRIxPTR " of %zu bytes, "
			 "%zu staged", bc_batch_index(b), h->dev, dlen, h->len);
		return -1;
	}
	if (dt_batch_check(b, ref, err, errlen) < 0)
		return -1;
	memcpy(h->expect, host, h->len);
	return 0;
}

static size_t first_diff(const uint8_t *a, const uint8_t *b, size_t n)
{
	size_t i = 0;

	while (i < n && a[i] == b[i])
		i++;
	return i;
}

void case_slot_reuse(void)
{
	held h[HOLD_MAX];
	bc_client *c = NULL;
	bc_stream *s = NULL;
	cudaStream_t A = NULL, B = NULL;
	uint8_t *back = NULL;
	unsigned taken = 0, k;
	uint64_t end;
	size_t cap = 0;
	char path[PATH_MAX], err[768];
	bc_batch *b;
	dt_ref ref;
	int r, d;

	memset(h, 0, sizeof(h));
	atomic_store(&hold_gate, 0);
	atomic_store(&hold_expired, 0);
	EXPECT(dt_ref_open(&ref, dt_root_path(&D, DSET_BLK, path, sizeof(path))) == 0,
	       "reference reader on %s", path);
	EXPECT(open_stream(&c, &s, DSET_BLK, 32, BC_SHUFFLE_NONE, HOLD_PREFETCH) == 0,
	       "open a GPU stream");
	EXPECT(bc_stream_batches_per_epoch(s) > 3 * HOLD_MAX, "the epoch is too short");
	cap = 32 * bc_stream_max_sample(s) + 4096;
	CU(cudaStreamCreateWithFlags(&A, cudaStreamNonBlocking));
	CU(cudaStreamCreateWithFlags(&B, cudaStreamNonBlocking));
	CU(cudaMallocHost((void **)&back, cap));
	for (k = 0; k < HOLD_MAX; k++) {
		h[k].expect = malloc(cap);
		EXPECT(h[k].expect, "out of memory");
		CU(cudaMallocHost((void **)&h[k].back, cap));
		CU(cudaEventCreateWithFlags(&h[k].done, cudaEventDisableTiming));
	}

	/*
	 * Batch 0 on stream A: wait for its copy, block A on the host, copy it
	 * back, then release it, which records its release event on A after the
	 * copy back. Until the gate opens, that event cannot complete.
	 */
	r = bc_next(s, &b, 30000);
	EXPECT(r == 0, "bc_next: %s: %s", bc_strerror(r), bc_stream_error(s));
	EXPECT(keep(b, &h[0], cap, &ref, err, sizeof(err)) == 0, "%s", err);
	r = bc_batch_wait_stream(b, A);
	EXPECT(r == 0, "bc_batch_wait_stream: %s: %s", bc_strerror(r), bc_stream_error(s));
	CU(cudaLaunchHostFunc(A, hold_fn, NULL));
	CU(cudaMemcpyAsync(h[0].back, (void *)h[0].dev, h[0].len, cudaMemcpyDeviceToHost, A));
	CU(cudaEventRecord(h[0].done, A));
	/*
	 * Batches 1 .. slots-1 were planned with batch 0; let their copies be
	 * queued before the release lets the daemon plan batch `slots` (the
	 * daemon issues a session's copies in the order they were queued).
	 */
	dt_sleep_ms(200);
	r = bc_release(b);
	EXPECT(r == 0, "bc_release: %s", bc_strerror(r));
	taken = 1;

	/*
	 * Batches 1 .. slots-1 use other device slots and must arrive; batch
	 * `slots` needs batch 0's slot: the daemon may not publish it until the
	 * release event completed, or may publish it with its copy waiting on
	 * the GPU, but its bytes must not land while A is held.
	 */
	end = now_ms() + 3000;
	while (taken < HOLD_MAX && now_ms() < end) {
		held *x;

		r = bc_next(s, &b, 100);
		if (r == -ETIMEDOUT)
			continue;
		EXPECT(r == 0, "bc_next for batch %u while batch 0's release is held on the GPU: %s: %s",
		       taken, bc_strerror(r), bc_stream_error(s));
		k = taken++;
		x = &h[k];
		EXPECT(keep(b, x, cap, &ref, err, sizeof(err)) == 0, "%s", err);
		if (k >= HOLD_SLOTS)
			EXPECT(x->dev == h[k - HOLD_SLOTS].dev, "batch %u is at device %#" PRIxPTR
			       ", batch %u at %#" PRIxPTR ": slots are not seq %% %u", k, x->dev,
			       k - HOLD_SLOTS, h[k - HOLD_SLOTS].dev, HOLD_SLOTS);
		for (unsigned j = k >= HOLD_SLOTS ? k - HOLD_SLOTS + 1 : 0; j < k; j++)
			EXPECT(x->dev != h[j].dev, "batches %u and %u share device slot %#" PRIxPTR,
			       j, k, x->dev);
		r = bc_batch_wait_stream(b, B);
		EXPECT(r == 0, "bc_batch_wait_stream: %s: %s", bc_strerror(r), bc_stream_error(s));
		CU(cudaMemcpyAsync(x->back, (void *)x->dev, x->len, cudaMemcpyDeviceToHost, B));
		CU(cudaEventRecord(x->done, B));
		r = bc_release(b);
		EXPECT(r == 0, "bc_release: %s", bc_strerror(r));
		d = done_within(x->done, k < HOLD_SLOTS ? 10000 : 1000);
		EXPECT(d >= 0, "CUDA error");
		if (k >= HOLD_SLOTS) {
			EXPECT(d == 0, "batch %u landed in batch 0's device slot while batch 0's release "
			       "event could not have completed", k);
			break;   /* B waits behind it now */
		}
		EXPECT(d == 1, "batch %u (device slot %u) did not land within 10 s while only slot 0 "
		       "was held", k, k);
		EXPECT(memcmp(x->back, x->expect, x->len) == 0, "batch %u: device bytes differ at %zu",
		       k, first_diff(x->back, x->expect, x->len));
	}
	EXPECT(!atomic_load(&hold_expired), "a libbatchclient call waited for the held stream A "
	       "(it was let go after %d s)", HOLD_GIVE_UP_MS / 1000);
	EXPECT(taken >= HOLD_SLOTS, "only %u batches arrived while batch 0's release was held; "
	       "slots 1..%u were free", taken, HOLD_SLOTS - 1);
	EXPECT(done_within(h[0].done, 0) == 0, "batch 0's copy back ran while stream A was held");

	/* Open the gate: batch 0's copy back must read batch 0. */
	atomic_store(&hold_gate, 1);
	EXPECT(done_within(h[0].done, 10000) == 1, "batch 0's copy back did not finish within 10 s");
	EXPECT(memcmp(h[0].back, h[0].expect, h[0].len) == 0, "batch 0's device slot was "
	       "overwritten before its release event completed (first difference at byte %zu of %zu)",
	       first_diff(h[0].back, h[0].expect, h[0].len), h[0].len);
	for (k = HOLD_SLOTS; k < taken; k++) {
		EXPECT(done_within(h[k].done, 10000) == 1, "batch %u's copy back did not finish "
		       "within 10 s of the release", k);
		EXPECT(memcmp(h[k].back, h[k].expect, h[k].len) == 0, "batch %u (in batch 0's slot): "
		       "device bytes differ at %zu", k, first_diff(h[k].back, h[k].expect, h[k].len));
	}

	/* The stream carries on through every slot twice, byte-exact. */
	for (k = 0; k < 2 * HOLD_SLOTS; k++) {
		int64_t n;

		EXPECT(take_on_device(s, B, back, cap, &ref, &n, err, sizeof(err)) == 0,
		       "after the hold: %s", err);
	}
	printf("ok - slot reuse: batch 0 held on the GPU kept its device slot (%u batches arrived "
	       "meanwhile, %s); its copy back read its own bytes\n", taken - 1,
	       taken > HOLD_SLOTS ? "the one in its slot waiting on the GPU"
	       : "none for its slot until the release");
out:
	atomic_store(&hold_gate, 1);
	if (A)
		cudaStreamSynchronize(A);
	if (B)
		cudaStreamSynchronize(B);
	bc_close(s);
	bc_disconnect(c);
	for (k = 0; k < HOLD_MAX; k++) {
		free(h[k].expect);
		cudaFreeHost(h[k].back);
		if (h[k].done)
			cudaEventDestroy(h[k].done);
	}
	if (A)
		cudaStreamDestroy(A);
	if (B)
		cudaStreamDestroy(B);
	cudaFreeHost(back);
	dt_ref_close(&ref);
}

/*
 * (b) on the fake CUDA. Batch 0 is released with $FAKE_CUDA_RECORD_DELAY_MS
 * set, so its release event completes FAKE_HOLD_MS after the record, in
 * the daemon as here (tests/fakecuda/fake_cuda.h). The bounds are lower
 * bounds only, which no slow machine can break: the daemon issues the copy
 * into batch 0's slot, and then publishes, only after the event completed,
 * at or after t0 + FAKE_HOLD_MS (t0 is taken before the record), so batch
 * `slots` seen sooner, or slot 0 read changed by a read that ended sooner,
 * is the daemon's fault. FAKE_HOLD_MS is long enough for the daemon to
 * plan batch `slots` and meet the pending event (gpu.slot_waits) on a busy
 * sanitizer run.
 */
#define FAKE_HOLD_MS 1000
#define FAKE_DELAY_ENV "FAKE_CUDA_RECORD_DELAY_MS"
#define STR_(x) #x
#define STR(x) STR_(x)
#define FAKE_WAIT_MS 20000

void case_slot_reuse_fake(void)
{
	const int64_t hold_ns = (int64_t)FAKE_HOLD_MS * 1000000;
	bc_client *c = NULL;
	bc_stream *s = NULL;
	cudaStream_t st = NULL;
	json_object *o = NULL;
	uint8_t *back = NULL, *expect0 = NULL, *peek = NULL;
	void *dev0;
	unsigned taken = 0, peeks = 0, k;
	int64_t t0 = 0, seen = 0, len0, n, waits = -1;
	size_t cap = 0, dlen;
	char path[PATH_MAX], err[768];
	bc_batch *b;
	dt_ref ref;
	int r;

	EXPECT(dt_ref_open(&ref, dt_root_path(&D, DSET_BLK, path, sizeof(path))) == 0,
	       "reference reader on %s", path);
	EXPECT(open_stream(&c, &s, DSET_BLK, 32, BC_SHUFFLE_NONE, HOLD_PREFETCH) == 0,
	       "open a GPU stream");
	EXPECT(bc_stream_batches_per_epoch(s) > 3 * HOLD_MAX, "the epoch is too short");
	cap = 32 * bc_stream_max_sample(s) + 4096;
	CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	CU(cudaMallocHost((void **)&back, cap));
	expect0 = malloc(cap);
	peek = malloc(cap);
	EXPECT(expect0 && peek, "out of memory");

	/* Batch 0, byte-exact on the device; then its release, held back FAKE_HOLD_MS. */
	r = bc_next(s, &b, 30000);
	EXPECT(r == 0, "bc_next: %s: %s", bc_strerror(r), bc_stream_error(s));
	len0 = check_on_device(b, st, back, cap, &ref, err, sizeof(err));
	EXPECT(len0 > 0, "batch 0: %s", len0 < 0 ? err : "empty");
	memcpy(expect0, back, (size_t)len0);
	dev0 = bc_batch_device_data(b, &dlen);
	/* Let batches 1 .. slots-1 be copied first, as in the GPU case. */
	dt_sleep_ms(100);
	EXPECT(setenv(FAKE_DELAY_ENV, STR(FAKE_HOLD_MS), 1) == 0, "setenv");
	t0 = now_ns();
	r = bc_release(b);
	unsetenv(FAKE_DELAY_ENV);
	taken = 1;
	EXPECT(r == 0, "bc_release: %s", bc_strerror(r));

	/*
	 * Batches 1 .. slots-1 are in other device slots and come at once;
	 * batch `slots` goes into batch 0's. Until the event can have
	 * completed, keep reading slot 0: it must still hold batch 0.
	 */
	while (taken <= HOLD_SLOTS) {
		int64_t t;

		EXPECT(now_ns() - t0 < (int64_t)FAKE_WAIT_MS * 1000000, "batch %u did not come "
		       "within %d s of batch 0's release (its event completed after %d ms)", taken,
		       FAKE_WAIT_MS / 1000, FAKE_HOLD_MS);
		if (now_ns() - t0 < hold_ns) {
			CU(cudaMemcpy(peek, dev0, (size_t)len0, cudaMemcpyDeviceToHost));
			t = now_ns() - t0;
			/* The read ended before the event could complete: no copy can have begun. */
			if (t < hold_ns) {
				EXPECT(memcmp(peek, expect0, (size_t)len0) == 0, "batch 0's device "
				       "slot changed within %.1f ms of its release, whose event "
				       "completes at %d ms (first difference at byte %zu of %" PRId64
				       ")", t / 1e6, FAKE_HOLD_MS,
				       first_diff(peek, expect0, (size_t)len0), len0);
				peeks++;
			}
		}
		r = bc_next(s, &b, 5);
		if (r == -ETIMEDOUT)
			continue;
		t = now_ns() - t0;
		EXPECT(r == 0, "bc_next for batch %u after batch 0's delayed release: %s: %s", taken,
		       bc_strerror(r), bc_stream_error(s));
		k = taken++;
		if (k == HOLD_SLOTS) {
			seen = t;
			EXPECT(t >= hold_ns, "batch %u, for batch 0's device slot, was published "
			       "%.1f ms after batch 0's release, whose event completes at %d ms", k,
			       t / 1e6, FAKE_HOLD_MS);
			EXPECT(bc_batch_device_data(b, &dlen) == dev0, "batch %u is at device %p, batch 0 "
			       "at %p: slots are not seq %% %u", k, bc_batch_device_data(b, &dlen), dev0,
			       HOLD_SLOTS);
		} else {
			EXPECT(bc_batch_device_data(b, &dlen) != dev0, "batch %u shares batch 0's device "
			       "slot %p", k, dev0);
		}
		n = check_on_device(b, st, back, cap, &ref, err, sizeof(err));
		r = bc_release(b);
		EXPECT(n >= 0, "batch %u: %s", k, err);
		EXPECT(r == 0, "bc_release: %s", bc_strerror(r));
	}
	/* Not a failure: only a machine stalled for FAKE_HOLD_MS would read none in time. */
	if (!peeks)
		printf("# slot reuse: no read of batch 0's device slot ended within %d ms of its "
		       "release; the slot's contents during the wait went unchecked\n", FAKE_HOLD_MS);

	/* The daemon's GPU thread met the pending event (rather than being too late to). */
	o = status_json();
	EXPECT(o && nsessions(o) == 1, "status: %s", o ? json_object_to_json_string(o) : "none");
	waits = jint(json_object_array_get_idx(json_path_get(o, "sessions"), 0), "gpu.slot_waits");
	EXPECT(waits >= 1, "status: gpu.slot_waits is %" PRId64 " after batch %u waited for batch "
	       "0's release event: %s", waits, HOLD_SLOTS, json_object_to_json_string(o));
	json_object_put(o);
	o = NULL;

	/* Then it carries on through every slot twice, byte-exact. */
	for (k = 0; k < 2 * HOLD_SLOTS; k++)
		EXPECT(take_on_device(s, st, back, cap, &ref, &n, err, sizeof(err)) == 0,
		       "after the hold: %s", err);
	if (!close_to_idle(&c, &s, __FILE__, __LINE__))
		goto out;
	printf("ok - slot reuse (fake CUDA): batch 0's release event held %d ms kept its device "
	       "slot (%u reads of it still batch 0); batch %u came at %.1f ms, byte-exact; "
	       "gpu.slot_waits %" PRId64 "\n", FAKE_HOLD_MS, peeks, HOLD_SLOTS, seen / 1e6, waits);
out:
	unsetenv(FAKE_DELAY_ENV);
	json_object_put(o);
	bc_close(s);
	bc_disconnect(c);
	if (st)
		cudaStreamDestroy(st);
	cudaFreeHost(back);
	free(expect0);
	free(peek);
	dt_ref_close(&ref);
}

/* ---- (e) asynchronous copies (fake CUDA, $FAKE_CUDA_COPY_DELAY_MS) ------------------------ */

/*
 * With $FAKE_CUDA_COPY_DELAY_MS=D the fake runtime in the daemon queues each
 * host-to-device copy, poisons its destination with FAKE_POISON at once and
 * makes the copy D ms after the one before it on the session's stream
 * landed (tests/fakecuda/fake_cudart.c). The session's stream does not
 * exist before bc_open, so batch k of a new stream lands (k + 1) * D after
 * the call at the soonest: a read of its device memory that ended sooner
 * read nothing of it. That is a lower bound, which no slow machine can
 * break; a read that ended later proves nothing and is not checked.
 */
#define FAKE_POISON 0xDB          /* FAKE_CUDA_POISON, tests/fakecuda/fake_cuda.h */
#define FAKE_COPY_DELAY_ENV "FAKE_CUDA_COPY_DELAY_MS"
#define ASYNC_TRIES 10

static size_t first_not(const uint8_t *p, uint8_t byte, size_t n)
{
	size_t i = 0;

	while (i < n && p[i] == byte)
		i++;
	return i;
}

/*
 * Batch k (0 or 1) of a stream opened at t0: read straight from device
 * memory, skipping the wait; poison there if the read ended before the copy
 * can have landed (counted in early[k]). Then the documented way: batch 0
 * after bc_batch_wait_stream and a copy on st (check_on_device), batch 1
 * after bc_batch_sync, read in place. @return 0, or -1 with why in err.
 */
static int async_batch(bc_batch *b, unsigned k, int64_t t0, int64_t delay_ns, cudaStream_t st,
		       uint8_t *back, uint8_t *peek, size_t cap, dt_ref *ref, unsigned early[2],
		       char *err, size_t errlen)
{
	size_t dlen, hlen, at;
	const uint8_t *host = bc_batch_data(b, &hlen);
	const uint8_t *dev = bc_batch_device_data(b, &dlen);
	int64_t t;
	int r;

	if (!dev || dlen != hlen || hlen == 0 || hlen > cap) {
		snprintf(err, errlen, "batch %u: device payload %p of %zu bytes, %zu staged", k,
			 (const void *)dev, dlen, hlen);
		return -1;
	}
	memcpy(peek, dev, dlen);
	t = now_ns() - t0;
	if (t < (int64_t)(k + 1) * delay_ns) {
		at = first_not(peek, FAKE_POISON, dlen);
		if (at < dlen) {
			snprintf(err, errlen, "batch %u, read from device memory %.1f ms after bc_open "
				 "(its copy lands at %.0f ms at the soonest), holds %#x at byte %zu of "
				 "%zu, not the fake's poison %#x: the read saw a copy that cannot have "
				 "landed", k, t / 1e6, (double)(k + 1) * delay_ns / 1e6, peek[at], at,
				 dlen, FAKE_POISON);
			return -1;
		}
		early[k]++;
	}
	if (k == 0)
		return check_on_device(b, st, back, cap, ref, err, errlen) < 0 ? -1 : 0;
	r = bc_batch_sync(b);
	if (r < 0) {
		snprintf(err, errlen, "bc_batch_sync: %s", bc_strerror(r));
		return -1;
	}
	if (dt_batch_check(b, ref, err, errlen) < 0)
		return -1;
	if (memcmp(dev, host, hlen) != 0) {
		at = first_diff(dev, host, hlen);
		snprintf(err, errlen, "batch 1 after bc_batch_sync: device byte %zu of %zu is %#x, "
			 "the batch's is %#x", at, hlen, dev[at], host[at]);
		return -1;
	}
	return 0;
}

/* One try on a fresh stream: batches 0 and 1 as async_batch reads them. @return 0 or -1. */
static int async_try(cudaStream_t st, dt_ref *ref, int64_t delay_ns, unsigned early[2],
		     char *err, size_t errlen)
{
	bc_client *c = NULL;
	bc_stream *s = NULL;
	bc_batch *b[2] = { NULL, NULL };
	uint8_t *back = NULL, *peek = NULL;
	int64_t t0 = now_ns();
	size_t cap;
	int rc = -1, r;

	snprintf(err, errlen, "open a GPU stream");
	if (open_stream(&c, &s, DSET_BLK, 32, BC_SHUFFLE_NONE, HOLD_PREFETCH) < 0)
		return -1;
	cap = 32 * bc_stream_max_sample(s) + 4096;
	snprintf(err, errlen, "out of memory");
	if (cudaMallocHost((void **)&back, cap) != cudaSuccess || !(peek = malloc(cap)))
		goto out;
	for (unsigned k = 0; k < 2; k++) {
		r = bc_next(s, &b[k], 30000);
		if (r != 0) {
			snprintf(err, errlen, "bc_next for batch %u: %s: %s", k, bc_strerror(r),
				 bc_stream_error(s));
			goto out;
		}
		if (async_batch(b[k], k, t0, delay_ns, st, back, peek, cap, ref, early, err,
				errlen) < 0)
			goto out;
	}
	rc = 0;
out:
	for (unsigned k = 0; k < 2; k++) {
		r = b[k] ? bc_release(b[k]) : 0;
		if (r != 0 && rc == 0) {
			snprintf(err, errlen, "bc_release of batch %u: %s", k, bc_strerror(r));
			rc = -1;
		}
	}
	if (rc == 0 && !close_to_idle(&c, &s, __FILE__, __LINE__)) {
		snprintf(err, errlen, "the stream did not close to idle");
		rc = -1;
	}
	bc_close(s);
	bc_disconnect(c);
	cudaFreeHost(back);
	free(peek);
	return rc;
}

/*
 * A trainer that releases batches without waiting for their copies (it
 * skips them): the daemon must still keep each host record until its copy
 * landed, or the fake, strict, stops it (a queued copy's source changed),
 * and then the batches after, taken the documented way, are byte-exact.
 */
static int async_skips(cudaStream_t st, dt_ref *ref, char *err, size_t errlen)
{
	bc_client *c = NULL;
	bc_stream *s = NULL;
	uint8_t *back = NULL;
	size_t cap;
	int rc = -1, r;
	bc_batch *b;
	int64_t n;

	snprintf(err, errlen, "open a GPU stream");
	if (open_stream(&c, &s, DSET_BLK, 32, BC_SHUFFLE_NONE, HOLD_PREFETCH) < 0)
		return -1;
	cap = 32 * bc_stream_max_sample(s) + 4096;
	snprintf(err, errlen, "out of memory");
	if (cudaMallocHost((void **)&back, cap) != cudaSuccess)
		goto out;
	for (unsigned k = 0; k < 3 * HOLD_SLOTS; k++) {
		r = bc_next(s, &b, 30000);
		if (r == 0)
			r = bc_release(b);
		if (r != 0) {
			snprintf(err, errlen, "batch %u, released unread: %s: %s", k, bc_strerror(r),
				 bc_stream_error(s));
			goto out;
		}
	}
	for (unsigned k = 0; k < 2 * HOLD_SLOTS; k++)
		if (take_on_device(s, st, back, cap, ref, &n, err, errlen) != 0)
			goto out;
	rc = 0;
	if (!close_to_idle(&c, &s, __FILE__, __LINE__)) {
		snprintf(err, errlen, "the stream did not close to idle");
		rc = -1;
	}
out:
	bc_close(s);
	bc_disconnect(c);
	cudaFreeHost(back);
	return rc;
}

/*
 * A reader that skips the wait sees poison, the documented ways see the
 * batch: fresh streams until a read of batch 0 and one of batch 1 each
 * ended soon enough to prove it (every try checks the documented ways).
 */
void case_async_fake(void)
{
	const char *d = getenv(FAKE_COPY_DELAY_ENV);
	int64_t delay_ns = d ? (int64_t)atoll(d) * 1000000 : 0;
	unsigned early[2] = { 0, 0 }, tries = 0;
	cudaStream_t st = NULL;
	char path[PATH_MAX], err[768];
	dt_ref ref;
	bool ref_open = false;

	if (!fake || delay_ns <= 0) {
		printf("skip - asynchronous copies: only on the fake CUDA with $%s set\n",
		       FAKE_COPY_DELAY_ENV);
		return;
	}
	EXPECT(dt_ref_open(&ref, dt_root_path(&D, DSET_BLK, path, sizeof(path))) == 0,
	       "reference reader on %s", path);
	ref_open = true;
	CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	while (tries < ASYNC_TRIES && !(early[0] && early[1])) {
		tries++;
		EXPECT(async_try(st, &ref, delay_ns, early, err, sizeof(err)) == 0, "try %u: %s",
		       tries, err);
	}
	EXPECT(early[0] && early[1], "in %u fresh streams, %u reads of batch 0 ended within %s ms "
	       "of bc_open and %u of batch 1 within twice that, before their copies could land: "
	       "this machine is too slow to show poison with %s=%s; raise it "
	       "(tests/fakecuda/meson.build)", tries, early[0], d, early[1], FAKE_COPY_DELAY_ENV,
	       d);
	EXPECT(async_skips(st, &ref, err, sizeof(err)) == 0, "after batches released unread: %s",
	       err);
	printf("ok - asynchronous copies (fake CUDA, %s ms a copy): %u reads that skipped the wait "
	       "saw only the poison %#x, batch 0 after bc_batch_wait_stream and a copy on that "
	       "stream and batch 1 after bc_batch_sync byte-exact, in %u streams; %u batches "
	       "released unread, then %u byte-exact\n", d, early[0] + early[1], FAKE_POISON,
	       tries, 3 * HOLD_SLOTS, 2 * HOLD_SLOTS);
out:
	if (st)
		cudaStreamDestroy(st);
	if (ref_open)
		dt_ref_close(&ref);
}
