/* SPDX-License-Identifier: MIT */
/*
 * test-gpu.c - GPU sessions on a real GPU: a real batchd on a temporary
 * socket, trainers through libbatchclient and the CUDA runtime.
 *
 *   delivery     two epochs on device 0; every batch copied back from device
 *                memory (bc_batch_wait_stream, then a copy on our own
 *                stream) equals the pack's samples byte for byte
 *   slot reuse   a batch whose release event is held back on the GPU keeps
 *                its device slot: the daemon copies batch seq + slots into
 *                that slot only after the event completed, so a copy back
 *                queued before the release still reads the old batch
 *   device memory a SIGKILLed trainer and a closed stream both give their
 *                device allocation back: the daemon's status says 0 bytes
 *                and cudaMemGetInfo is back where it was
 *   batchctl     `batchctl consume --device 0` ($BATCHCTL, when set) copies
 *                two epochs back from the device with no mismatch
 *   asynchronous copies  (the fake CUDA with $FAKE_CUDA_COPY_DELAY_MS only)
 *                a batch read straight from device memory right after
 *                bc_next, before its copy can have landed, is the fake's
 *                poison; after bc_batch_wait_stream and a copy on that
 *                stream, or after bc_batch_sync, it is the batch's bytes
 *
 * With BATCHD_TEST_FAKE_CUDA=1 the same binary runs against the fake CUDA
 * of tests/fakecuda (on LD_LIBRARY_PATH for this process, the daemon and
 * batchctl alike), where streams are synchronous (asynchronous copies with
 * $FAKE_CUDA_COPY_DELAY_MS) and device memory is host memory. No host function can hold a stream there, so slot reuse
 * holds batch 0's release event back the fake's way instead: released
 * with $FAKE_CUDA_RECORD_DELAY_MS set in this process, the event
 * completes FAKE_HOLD_MS later for the daemon too, and batch `slots`,
 * which needs its device slot, must not be published before then, must
 * arrive after, byte-exact, with the daemon counting the wait
 * (`gpu.slot_waits`); meanwhile the slot, read through our mapping of it,
 * still holds batch 0. Device memory is checked through the daemon's
 * status alone (the fake's free memory is per process); delivery runs in
 * full. Without CUDA there is then a failure, not a skip, and
 * `gpu.pinned` must be false exactly when the fake refuses pinning
 * ($FAKE_CUDA_PIN_FAIL, or $FAKE_CUDA_NO_HOST_REGISTER: a device that cannot
 * register host memory).
 *
 * Exit status: 0 passed, 1 failed, 77 skipped (no CUDA device answers here,
 * or the daemon has none), with the reason on stdout.
 *
 * Not a Check suite: Check forks each test, and a process that used CUDA
 * before fork() cannot use it after. The cases run in order in this
 * process; the trainer that gets killed is this binary run afresh
 * (`test-gpu --hold SOCKET DATASET FD`).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <json-c/json.h>

#include "batchclient.h"
#include "daemon-testlib.h"
#include "json_path.h"

#define SKIP 77
#define MiB (UINT64_C(1) << 20)

/* Case (b): slots = prefetch + 2 (daemon/session/session.c); batch seq uses device slot seq % slots. */
#define HOLD_PREFETCH 2u
#define HOLD_SLOTS (HOLD_PREFETCH + 2u)
#define HOLD_MAX (1u + HOLD_SLOTS + 2u)

/* Case (c): a pack of 8 MiB samples; batches of 8 in 6 slots = 384 MiB of device memory. */
#define BIG_NAME "big.bpk"
#define BIG_SAMPLES 16u
#define BIG_SAMPLE (8 * MiB)
#define BIG_BATCH 8u
#define BIG_PREFETCH 4u
#define BIG_SLOTS (BIG_PREFETCH + 2u)
#define FREE_SLACK (64 * MiB)

#define WATCHDOG_S 170   /* under meson's timeout for this test (240 s) */

static dt_daemon D;
static int failures;
static bool fake;                /* BATCHD_TEST_FAKE_CUDA: the fake CUDA of tests/fakecuda */
static uint64_t blk_batches;     /* batches per epoch of DSET_BLK in batches of 64 */

__attribute__((format(printf, 2, 3)))
static void fail_at(int line, const char *fmt, ...)
{
	va_list ap;

	printf("FAIL - test-gpu.c:%d: ", line);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	failures++;
}

/* In a case function: on failure say why and go to its `out` label. */
#define EXPECT(cond, ...)                                                               \
	do {                                                                            \
		if (!(cond)) {                                                          \
			fail_at(__LINE__, __VA_ARGS__);                                 \
			goto out;                                                       \
		}                                                                       \
	} while (0)

#define CU(call)                                                                        \
	do {                                                                            \
		cudaError_t e_ = (call);                                                \
		if (e_ != cudaSuccess) {                                                \
			fail_at(__LINE__, "%s: %s (%s)", #call, cudaGetErrorString(e_), \
				cudaGetErrorName(e_));                                  \
			goto out;                                                       \
		}                                                                       \
	} while (0)

/* CLOCK_MONOTONIC, the clock the fake CUDA's delayed events complete by, in ns. */
static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint64_t now_ms(void)
{
	return (uint64_t)now_ns() / 1000000;
}

/* ---- the daemon's status ------------------------------------------------------- */

static json_object *status_json(void)
{
	json_object *o;
	char *text = NULL;

	if (dt_status(D.sock, &text) < 0)
		return NULL;
	o = json_tokener_parse(text);
	free(text);
	return o;
}

/* The integer at path, or -1 when absent. */
static int64_t jint(json_object *o, const char *path)
{
	json_object *v = json_path_get(o, path);

	return v && json_object_is_type(v, json_type_int) ? json_object_get_int64(v) : -1;
}

static size_t nsessions(json_object *o)
{
	json_object *a = json_path_get(o, "sessions");

	return a && json_object_is_type(a, json_type_array) ? json_object_array_length(a)
							     : (size_t)-1;
}

/*
 * Wait up to ms for the daemon to hold no session and no device memory.
 * @return true when it does; *ret_devmem / *ret_sessions: the last seen.
 */
static bool wait_idle(int ms, int64_t *ret_devmem, size_t *ret_sessions)
{
	uint64_t end = now_ms() + (uint64_t)ms;

	for (;;) {
		json_object *o = status_json();
		bool idle = false;

		if (o) {
			*ret_devmem = jint(o, "cuda.device_memory");
			*ret_sessions = nsessions(o);
			idle = *ret_devmem == 0 && *ret_sessions == 0 &&
			       jint(o, "cuda.gpu_sessions") == 0;
			json_object_put(o);
		}
		if (idle)
			return true;
		if (now_ms() >= end)
			return false;
		dt_sleep_ms(50);
	}
}

/*
 * Close *s and disconnect *c (both set to NULL), then wait up to 30 s for
 * the daemon to be idle (wait_idle). @return true; false having failed the
 * case at line with why.
 */
static bool close_to_idle(bc_client **c, bc_stream **s, int line)
{
	int64_t devmem = -1;
	size_t nsess = 0;
	int r = bc_close(*s);

	*s = NULL;
	if (r != 0) {
		fail_at(line, "bc_close: %s", bc_strerror(r));
		return false;
	}
	bc_disconnect(*c);
	*c = NULL;
	if (!wait_idle(30000, &devmem, &nsess)) {
		fail_at(line, "30 s after bc_close: %zu sessions, device_memory %" PRId64, nsess,
			devmem);
		return false;
	}
	return true;
}

/*
 * Wait up to 10 s for the one session's accounting to settle: delivered ==
 * batches and delivered_bytes == bytes (our releases reclaimed), copies ==
 * published and copy_bytes == bytes published (every copy landed).
 * @return whether it did; *ret: the last status seen (caller puts it).
 */
static bool wait_accounted(uint64_t batches, uint64_t bytes, json_object **ret)
{
	uint64_t end = now_ms() + 10000;

	for (;;) {
		json_object *o = status_json(), *se;
		bool ok = false;

		se = o && nsessions(o) == 1 ? json_object_array_get_idx(json_path_get(o, "sessions"), 0)
					    : NULL;
		if (se)
			ok = jint(se, "delivered") == (int64_t)batches &&
			     jint(se, "delivered_bytes") == (int64_t)bytes &&
			     jint(se, "gpu.copies") == jint(se, "published") &&
			     jint(se, "gpu.copy_bytes") == jint(se, "bytes") &&
			     jint(se, "gpu.copies") >= (int64_t)batches;
		if (ok || now_ms() >= end) {
			*ret = o;
			return ok;
		}
		json_object_put(o);
		dt_sleep_ms(50);
	}
}

/* ---- one batch checked on the device ------------------------------------------------ */

/*
 * b's staging copy holds the pack's samples (dt_batch_check); make st wait
 * for b's copy, copy the device payload back into `back` (pinned, cap
 * bytes) and check every sample there against the pack too.
 * @return the payload's bytes, or -1 with why in err. Does not release b.
 */
static int64_t check_on_device(bc_batch *b, cudaStream_t st, uint8_t *back, size_t cap,
			       dt_ref *ref, char *err, size_t errlen)
{
	size_t dlen, hlen, len;
	void *dev = bc_batch_device_data(b, &dlen);
	const uint8_t *host = bc_batch_data(b, &hlen);
	const void *p;
	cudaError_t e;
	int r;

	if (!dev || dlen != hlen || hlen > cap) {
		snprintf(err, errlen, "batch %" PRIu64 " of epoch %" PRIu64 ": device payload %p of "
			 "%zu bytes, %zu staged (buffer %zu)", bc_batch_index(b), bc_batch_epoch(b),
			 dev, dlen, hlen, cap);
		return -1;
	}
	if (dt_batch_check(b, ref, err, errlen) < 0)
		return -1;
	r = bc_batch_wait_stream(b, st);
	if (r < 0) {
		snprintf(err, errlen, "bc_batch_wait_stream: %s", bc_strerror(r));
		return -1;
	}
	if (hlen == 0)
		return 0;
	e = cudaMemcpyAsync(back, dev, hlen, cudaMemcpyDeviceToHost, st);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(st);
	if (e != cudaSuccess) {
		snprintf(err, errlen, "copy back: %s", cudaGetErrorString(e));
		return -1;
	}
	for (uint32_t i = 0; i < bc_batch_count(b); i++) {
		char why[256];

		bc_batch_sample(b, i, &p, &len);
		if (dt_ref_check(ref, bc_batch_sample_id(b, i), back + ((const uint8_t *)p - host),
				 len, why, sizeof(why)) < 0) {
			snprintf(err, errlen, "device copy of batch %" PRIu64 " of epoch %" PRIu64
				 ", sample %u: %s", bc_batch_index(b), bc_batch_epoch(b), i, why);
			return -1;
		}
	}
	if (memcmp(back, host, hlen) != 0) {
		snprintf(err, errlen, "batch %" PRIu64 ": device bytes differ from the staging copy",
			 bc_batch_index(b));
		return -1;
	}
	return (int64_t)hlen;
}

/*
 * The next batch of s (waiting up to 30 s), checked on the device as
 * check_on_device does, then released. @return 0 with its payload's bytes
 * in *ret_bytes; BC_EPOCH_END; -1 with why in err (bc_next, the check or
 * the release failed).
 */
static int take_on_device(bc_stream *s, cudaStream_t st, uint8_t *back, size_t cap, dt_ref *ref,
			  int64_t *ret_bytes, char *err, size_t errlen)
{
	bc_batch *b;
	int64_t n;
	int r = bc_next(s, &b, 30000);

	if (r == BC_EPOCH_END) {
		snprintf(err, errlen, "bc_next: the epoch ended");
		return r;
	}
	if (r != 0) {
		snprintf(err, errlen, "bc_next: %s: %s", bc_strerror(r), bc_stream_error(s));
		return -1;
	}
	n = check_on_device(b, st, back, cap, ref, err, errlen);
	r = bc_release(b);
	if (n < 0)
		return -1;
	if (r != 0) {
		snprintf(err, errlen, "bc_release: %s", bc_strerror(r));
		return -1;
	}
	*ret_bytes = n;
	return 0;
}

static int open_stream(bc_client **c, bc_stream **s, const char *dataset, uint32_t batch,
		       enum bc_shuffle shuffle, uint32_t prefetch)
{
	bc_stream_opts so;
	int r = bc_connect(D.sock, c);

	if (r < 0) {
		printf("# connect %s: %s\n", D.sock, bc_strerror(r));
		return r;
	}
	bc_stream_opts_init(&so);
	so.dataset = dataset;
	so.batch_size = batch;
	so.shuffle = shuffle;
	so.seed = 7;
	so.prefetch = prefetch;
	so.device = 0;
	r = bc_open(*c, &so, s);
	if (r < 0) {
		printf("# bc_open %s on device 0: %s: %s\n", dataset, bc_strerror(r),
		       bc_client_error(*c));
		bc_disconnect(*c);
		*c = NULL;
	}
	return r;
}

/* ---- (a) byte-exact delivery ----------------------------------------------------------- */

static void case_delivery(void)
{
	bc_client *c = NULL;
	bc_stream *s = NULL;
	cudaStream_t st = NULL;
	json_object *o = NULL;
	uint8_t *back = NULL;
	uint64_t bpe = 0, batches = 0, bytes = 0, epochs = 0;
	size_t cap = 0;
	char path[PATH_MAX], err[768];
	dt_ref ref;
	int r;

	EXPECT(dt_ref_open(&ref, dt_root_path(&D, DSET_BLK, path, sizeof(path))) == 0,
	       "reference reader on %s", path);
	EXPECT(open_stream(&c, &s, DSET_BLK, 64, BC_SHUFFLE_GLOBAL, 0) == 0, "open a GPU stream");
	EXPECT(bc_stream_device(s) == 0, "bc_stream_device is %d, not 0", bc_stream_device(s));
	bpe = bc_stream_batches_per_epoch(s);
	blk_batches = bpe;
	cap = 64 * bc_stream_max_sample(s) + 4096;
	CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	CU(cudaMallocHost((void **)&back, cap));

	while (epochs < 2) {
		int64_t n = 0;

		r = take_on_device(s, st, back, cap, &ref, &n, err, sizeof(err));
		if (r == BC_EPOCH_END) {
			epochs++;
			continue;
		}
		EXPECT(r == 0, "after %" PRIu64 " batches: %s", batches, err);
		batches++;
		bytes += (uint64_t)n;
	}
	EXPECT(batches == 2 * bpe, "%" PRIu64 " batches in 2 epochs of %" PRIu64, batches, bpe);

	/*
	 * The daemon's view while the session is open, once it has reclaimed
	 * our last release and its copies have all landed: every published
	 * batch was copied once, the bytes copied are the bytes published, and
	 * what it counts as delivered is what we took.
	 */
	EXPECT(wait_accounted(batches, bytes, &o), "status after %" PRIu64 " batches of %" PRIu64
	       " bytes: %s", batches, bytes, o ? json_object_to_json_string(o) : "none");
	EXPECT(jint(o, "cuda.gpu_sessions") == 1 && jint(o, "cuda.device_memory") > 0,
	       "status: gpu_sessions %" PRId64 ", device_memory %" PRId64 " with one GPU session open",
	       jint(o, "cuda.gpu_sessions"), jint(o, "cuda.device_memory"));
	{
		json_object *se = json_object_array_get_idx(json_path_get(o, "sessions"), 0);
		json_object *pinned = json_path_get(se, "gpu.pinned");
		bool is_pinned = pinned && json_object_get_boolean(pinned);

		EXPECT(jint(se, "placement") == 0 && jint(se, "gpu.device") == 0 &&
		       jint(se, "gpu.device_bytes") == jint(o, "cuda.device_memory") &&
		       pinned && json_object_is_type(pinned, json_type_boolean),
		       "status: the session is %s", json_object_to_json_string(se));
		EXPECT(jint(o, "cuda.unpinned_sessions") == (is_pinned ? 0 : 1),
		       "status: unpinned_sessions %" PRId64 " with one %s GPU session",
		       jint(o, "cuda.unpinned_sessions"), is_pinned ? "pinned" : "unpinned");
		if (fake) {
			bool refused = getenv("FAKE_CUDA_PIN_FAIL") || getenv("FAKE_CUDA_NO_HOST_REGISTER");

			EXPECT(is_pinned == !refused, "status: gpu.pinned is %s with pinning %s by the "
			       "fake", is_pinned ? "true" : "false", refused ? "refused" : "allowed");
		}
		printf("# delivery: %" PRId64 " copies of %" PRId64 " bytes for %" PRId64 " batches "
		       "published, staging %s\n", jint(se, "gpu.copies"), jint(se, "gpu.copy_bytes"),
		       jint(se, "published"), is_pinned ? "pinned" : "unpinned");
	}
	json_object_put(o);
	o = NULL;

	if (!close_to_idle(&c, &s, __LINE__))
		goto out;
	printf("ok - delivery: %" PRIu64 " batches, %" PRIu64 " bytes over 2 epochs; every byte "
	       "copied back from device 0 is the pack's\n", batches, bytes);
out:
	json_object_put(o);
	if (st)
		cudaStreamSynchronize(st);
	bc_close(s);
	bc_disconnect(c);
	if (st)
		cudaStreamDestroy(st);
	cudaFreeHost(back);
	dt_ref_close(&ref);
}

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

static void case_slot_reuse(void)
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

static void case_slot_reuse_fake(void)
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
	if (!close_to_idle(&c, &s, __LINE__))
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

/* ---- (c) device memory comes back -------------------------------------------------------- */

/* A dataset of BIG_SAMPLES samples of BIG_SAMPLE bytes (compressible: quick to pack). */
static int make_big_pack(void)
{
	char in[PATH_MAX], out[PATH_MAX], log[PATH_MAX], rec[32];
	uint8_t *buf = malloc(BIG_SAMPLE);
	int fd, st, logfd;
	pid_t pid;

	snprintf(in, sizeof(in), "%s/big.bin", dt_g.dir);
	snprintf(log, sizeof(log), "%s/big-pack.log", dt_g.dir);
	dt_root_path(&D, BIG_NAME, out, sizeof(out));
	fd = open(in, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (!buf || fd < 0)
		goto fail;
	for (uint64_t i = 0; i < BIG_SAMPLES; i++) {
		memset(buf, (int)(i * 37 + 1) & 0xff, BIG_SAMPLE);
		memcpy(buf, &i, sizeof(i));
		if (write(fd, buf, BIG_SAMPLE) != (ssize_t)BIG_SAMPLE)
			goto fail;
	}
	close(fd);
	fd = -1;
	snprintf(rec, sizeof(rec), "%" PRIu64, (uint64_t)BIG_SAMPLE);
	logfd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (logfd < 0)
		goto fail;
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		dup2(logfd, 1);
		dup2(logfd, 2);
		execl(dt_g.batchd_pack, dt_g.batchd_pack, "create", out, "--records", rec, in,
		      "--level", "1", "--threads", "4", (char *)NULL);
		_exit(127);
	}
	close(logfd);
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		printf("# batchd-pack create %s failed; see %s\n", out, log);
		goto fail;
	}
	unlink(in);
	free(buf);
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	unlink(in);
	free(buf);
	return -1;
}

/* `test-gpu --hold SOCKET DATASET FD`: take three batches, hold the last, say so on FD, wait. */
static int hold_main(const char *sock, const char *dataset, const char *fdstr)
{
	int fd = atoi(fdstr), taken = 0, r;
	bc_stream_opts so;
	bc_client *c;
	bc_stream *s;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	r = bc_connect(sock, &c);
	if (r < 0) {
		fprintf(stderr, "test-gpu --hold: connect: %s\n", bc_strerror(r));
		goto fail;
	}
	bc_stream_opts_init(&so);
	so.dataset = dataset;
	so.batch_size = BIG_BATCH;
	so.prefetch = BIG_PREFETCH;
	so.device = 0;
	r = bc_open(c, &so, &s);
	if (r < 0) {
		fprintf(stderr, "test-gpu --hold: bc_open: %s: %s\n", bc_strerror(r), bc_client_error(c));
		goto fail;
	}
	while (taken < 3) {
		bc_batch *b;
		size_t len;

		r = bc_next(s, &b, 60000);
		if (r == BC_EPOCH_END)
			continue;
		if (r < 0) {
			fprintf(stderr, "test-gpu --hold: bc_next: %s: %s\n", bc_strerror(r),
				bc_stream_error(s));
			goto fail;
		}
		if (!bc_batch_device_data(b, &len) || len != (size_t)BIG_BATCH * BIG_SAMPLE) {
			fprintf(stderr, "test-gpu --hold: batch without its %" PRIu64 " device bytes\n",
				(uint64_t)BIG_BATCH * BIG_SAMPLE);
			goto fail;
		}
		if (++taken < 3)
			bc_release(b);   /* the third stays held */
	}
	if (write(fd, "R", 1) != 1)
		return 1;
	for (;;)
		pause();   /* until SIGKILL */
fail:
	if (write(fd, "E", 1) != 1)
		return 1;
	return 1;
}

/* Wait up to ms for the free device memory to reach at least want. @return the last reading. */
static size_t free_at_least(size_t want, int ms)
{
	uint64_t end = now_ms() + (uint64_t)ms;
	size_t fr = 0, total;

	for (;;) {
		if (cudaMemGetInfo(&fr, &total) != cudaSuccess)
			return 0;
		if (fr >= want || now_ms() >= end)
			return fr;
		dt_sleep_ms(50);
	}
}

static void case_device_memory(void)
{
	const uint64_t want_dev = (uint64_t)BIG_SLOTS * BIG_BATCH * BIG_SAMPLE;
	char big[PATH_MAX], fdstr[16], ready = 0;
	json_object *o = NULL;
	bc_client *c = NULL;
	bc_stream *s = NULL;
	cudaStream_t st = NULL;
	size_t free0, free1, free2, total, nsess = 0;
	int64_t devmem = -1, held_dev;
	struct pollfd pf;
	pid_t pid = 0;
	int p[2] = { -1, -1 }, r, wst;

	EXPECT(make_big_pack() == 0, "cannot make %s", BIG_NAME);
	dt_root_path(&D, BIG_NAME, big, sizeof(big));
	EXPECT(wait_idle(30000, &devmem, &nsess), "before: %zu sessions, device_memory %" PRId64,
	       nsess, devmem);
	/* The fake's free memory is this process's: the daemon's status is the evidence there. */
	CU(cudaMemGetInfo(&free0, &total));
	free1 = free2 = free0;

	/* A trainer in another process, killed while it holds a batch. */
	EXPECT(pipe2(p, O_CLOEXEC) == 0, "pipe: %s", strerror(errno));
	snprintf(fdstr, sizeof(fdstr), "%d", p[1]);
	fflush(NULL);
	pid = fork();
	EXPECT(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		/* CUDA's threads run in this process: only system calls until the exec. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		fcntl(p[1], F_SETFD, 0);
		execl("/proc/self/exe", "test-gpu", "--hold", D.sock, BIG_NAME, fdstr, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	p[1] = -1;
	pf = (struct pollfd){ .fd = p[0], .events = POLLIN };
	EXPECT(poll(&pf, 1, 60000) == 1 && read(p[0], &ready, 1) == 1 && ready == 'R',
	       "the trainer process did not take its batches within 60 s (said '%c')",
	       ready ? ready : '-');
	o = status_json();
	EXPECT(o, "no status");
	held_dev = jint(o, "cuda.device_memory");
	EXPECT(jint(o, "cuda.gpu_sessions") == 1 && held_dev >= (int64_t)want_dev,
	       "status with the trainer's session open: gpu_sessions %" PRId64 ", device_memory %"
	       PRId64 " (want >= %" PRIu64 ")", jint(o, "cuda.gpu_sessions"), held_dev, want_dev);
	json_object_put(o);
	o = NULL;
	CU(cudaMemGetInfo(&free1, &total));
	EXPECT(fake || free1 + (size_t)held_dev <= free0 + FREE_SLACK, "free device memory went "
	       "from %zu to %zu MiB while the daemon says it holds %" PRId64 " MiB", free0 / MiB,
	       free1 / MiB, held_dev / (int64_t)MiB);

	kill(pid, SIGKILL);
	EXPECT(waitpid(pid, &wst, 0) == pid, "waitpid: %s", strerror(errno));
	pid = 0;
	EXPECT(wait_idle(30000, &devmem, &nsess), "30 s after the trainer was killed: %zu sessions, "
	       "device_memory %" PRId64, nsess, devmem);
	if (!fake) {
		free2 = free_at_least(free0 - FREE_SLACK, 10000);
		EXPECT(free2 >= free0 - FREE_SLACK, "free device memory: %zu MiB before, %zu MiB "
		       "with the session, %zu MiB after the trainer was killed and its session ended",
		       free0 / MiB, free1 / MiB, free2 / MiB);
	}
	printf("ok - killed trainer: its session's %" PRId64 " MiB of device memory came back "
	       "(free %zu -> %zu -> %zu MiB%s)\n", held_dev / (int64_t)MiB, free0 / MiB, free1 / MiB,
	       free2 / MiB, fake ? "; fake CUDA: the daemon's status says 0 bytes, 0 sessions" : "");

	/* The same through a normal close, in this process. */
	CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	EXPECT(open_stream(&c, &s, BIG_NAME, BIG_BATCH, BC_SHUFFLE_NONE, BIG_PREFETCH) == 0,
	       "open a GPU stream on %s", BIG_NAME);
	for (int i = 0; i < 3;) {
		bc_batch *b;

		r = bc_next(s, &b, 60000);
		if (r == BC_EPOCH_END)
			continue;
		EXPECT(r == 0, "bc_next: %s: %s", bc_strerror(r), bc_stream_error(s));
		r = bc_batch_wait_stream(b, st);
		bc_release(b);
		EXPECT(r == 0, "bc_batch_wait_stream: %s", bc_strerror(r));
		i++;
	}
	CU(cudaStreamSynchronize(st));
	o = status_json();
	EXPECT(o && jint(o, "cuda.device_memory") >= (int64_t)want_dev, "status with the stream "
	       "open: device_memory %" PRId64, o ? jint(o, "cuda.device_memory") : -1);
	json_object_put(o);
	o = NULL;
	if (!close_to_idle(&c, &s, __LINE__))
		goto out;
	if (!fake) {
		free2 = free_at_least(free0 - FREE_SLACK, 10000);
		EXPECT(free2 >= free0 - FREE_SLACK, "free device memory: %zu MiB before, %zu MiB "
		       "after a normal close", free0 / MiB, free2 / MiB);
	}
	printf("ok - closed stream: device memory came back (free %zu -> %zu MiB%s)\n", free0 / MiB,
	       free2 / MiB, fake ? "; fake CUDA: the daemon's status says 0 bytes, 0 sessions" : "");
out:
	json_object_put(o);
	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &wst, 0);
	}
	if (p[0] >= 0)
		close(p[0]);
	if (p[1] >= 0)
		close(p[1]);
	if (st)
		cudaStreamSynchronize(st);
	bc_close(s);
	bc_disconnect(c);
	if (st)
		cudaStreamDestroy(st);
}

/* ---- (d) batchctl consume --device 0 ------------------------------------------------------ */

/* Run argv with stdout into out (NUL-terminated, truncated to cap). @return its wait status, or -1. */
static int run_capture(char *const argv[], char *out, size_t cap)
{
	size_t len = 0;
	int p[2], st;
	ssize_t n;
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(p[1], STDOUT_FILENO);
		execv(argv[0], argv);
		_exit(127);
	}
	close(p[1]);
	while (pid > 0 && (n = read(p[0], out + len, cap - 1 - len)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || (len += (size_t)n) == cap - 1)
			break;
	}
	out[len] = '\0';
	close(p[0]);
	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		return -1;
	return st;
}

static void case_batchctl(const char *batchctl)
{
	char *argv[] = { (char *)batchctl, "-s", D.sock, "consume", DSET_BLK, "--batch-size", "64",
			 "--shuffle", "global", "--epochs", "2", "--device", "0", "--json", NULL };
	json_object *o = NULL;
	int64_t devmem = -1;
	size_t nsess = 0;
	char out[4096];
	int st;

	EXPECT(blk_batches > 0, "no batch count from the delivery case");
	st = run_capture(argv, out, sizeof(out));
	EXPECT(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "batchctl consume --device 0 "
	       "exited with status %#x; its output: %s", (unsigned)st, out);
	o = json_tokener_parse(out);
	EXPECT(o && jint(o, "device") == 0 && jint(o, "mismatches") == 0 &&
	       jint(o, "failed") == 0 && jint(o, "batches") == (int64_t)(2 * blk_batches) &&
	       jint(o, "samples") == 2 * DSET_SAMPLES, "batchctl consume --device 0 said: %s "
	       "(want %" PRIu64 " batches, %u samples, no mismatch)", out, 2 * blk_batches,
	       2 * DSET_SAMPLES);
	EXPECT(wait_idle(30000, &devmem, &nsess), "30 s after batchctl exited: %zu sessions, "
	       "device_memory %" PRId64, nsess, devmem);
	printf("ok - batchctl consume --device 0: %" PRId64 " batches, %" PRId64 " bytes copied back "
	       "from the device, no mismatch\n", jint(o, "batches"), jint(o, "bytes"));
out:
	json_object_put(o);
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
	if (rc == 0 && !close_to_idle(&c, &s, __LINE__)) {
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
	if (!close_to_idle(&c, &s, __LINE__)) {
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
static void case_async_fake(void)
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

/* ---- main ------------------------------------------------------------------------------- */

static const char *volatile current_case = "setup";

/* A hang (in CUDA, the client library or the daemon) fails the test with its case named. */
static void on_watchdog(int sig)
{
	static const char msg[] = "FAIL - watchdog: test-gpu hung in case ";

	(void)sig;
	if (write(STDOUT_FILENO, msg, sizeof(msg) - 1) < 0 ||
	    write(STDOUT_FILENO, current_case, strlen(current_case)) < 0 ||
	    write(STDOUT_FILENO, "\n", 1) < 0)
		_exit(1);
	_exit(1);
}

int main(int argc, char **argv)
{
	struct cudaDeviceProp prop;
	json_object *o = NULL;
	bool up = false;
	cudaError_t e;
	int n = 0, rc = SKIP;

	if (argc == 5 && !strcmp(argv[1], "--hold"))
		return hold_main(argv[2], argv[3], argv[4]);
	setvbuf(stdout, NULL, _IOLBF, 0);
	fake = getenv("BATCHD_TEST_FAKE_CUDA") && atoi(getenv("BATCHD_TEST_FAKE_CUDA")) != 0;
	if (fake)
		printf("# BATCHD_TEST_FAKE_CUDA: against the fake CUDA of tests/fakecuda%s\n",
		       getenv("FAKE_CUDA_PIN_FAIL") ? ", pinning refused (FAKE_CUDA_PIN_FAIL)" : "");

	e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) {
		printf("%s: no CUDA here: cudaGetDeviceCount: %s (%s)\n", fake ? "FAIL" : "SKIP",
		       cudaGetErrorString(e), cudaGetErrorName(e));
		return fake ? 1 : SKIP;
	}
	if (n == 0) {
		printf("%s: no CUDA device\n", fake ? "FAIL" : "SKIP");
		return fake ? 1 : SKIP;
	}
	e = cudaSetDevice(0);
	if (e == cudaSuccess)
		e = cudaGetDeviceProperties(&prop, 0);
	if (e == cudaSuccess)
		e = cudaFree(NULL);   /* make this process's context now, not inside a measurement */
	if (e != cudaSuccess) {
		printf("FAIL - CUDA device 0: %s (%s)\n", cudaGetErrorString(e), cudaGetErrorName(e));
		return 1;
	}
	printf("# device 0: %s, %zu MiB\n", prop.name, prop.totalGlobalMem / MiB);
	signal(SIGALRM, on_watchdog);
	alarm(WATCHDOG_S);

	if (dt_global_setup() < 0 || dt_daemon_init(&D) < 0) {
		printf("FAIL - cannot set up the test datasets\n");
		rc = 1;
		goto out;
	}
	D.memory = "2G";
	D.direct = "off";
	if (dt_daemon_start(&D) < 0) {
		printf("FAIL - batchd did not start\n");
		rc = 1;
		goto out;
	}
	up = true;
	o = status_json();
	if (!o || !json_path_get(o, "cuda.available")) {
		printf("FAIL - the daemon's status has no cuda.available\n");
		rc = 1;
		goto out;
	}
	if (!json_object_get_boolean(json_path_get(o, "cuda.available"))) {
		printf("%s: the daemon has no CUDA: %s\n", fake ? "FAIL" : "SKIP",
		       json_object_get_string(json_path_get(o, "cuda.reason")));
		rc = fake ? 1 : SKIP;
		goto out;
	}
	printf("# batchd: CUDA driver %" PRId64 ", runtime %" PRId64 ", %" PRId64 " device(s)\n",
	       jint(o, "cuda.driver_version"), jint(o, "cuda.runtime_version"),
	       jint(o, "cuda.devices"));

	current_case = "delivery";
	case_delivery();
	current_case = "slot reuse";
	if (fake)
		case_slot_reuse_fake();
	else
		case_slot_reuse();
	current_case = "device memory";
	case_device_memory();
	current_case = "batchctl";
	if (getenv("BATCHCTL"))
		case_batchctl(getenv("BATCHCTL"));
	else
		printf("skip - batchctl: $BATCHCTL is not set\n");
	current_case = "asynchronous copies";
	case_async_fake();
	current_case = "teardown";
	rc = failures ? 1 : 0;
out:
	json_object_put(o);
	if (up && dt_daemon_stop(&D) != 0) {
		printf("FAIL - batchd did not stop cleanly\n");
		rc = 1;
	}
	if (rc == 1 && up)
		dt_daemon_dump_log(&D, 60);
	dt_global_teardown();
	printf("%s (%d failure%s)\n", rc == 0 ? "PASS" : rc == SKIP ? "SKIP" : "FAIL", failures,
	       failures == 1 ? "" : "s");
	return rc;
}
