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
 * One executable from three files, split by behaviour (test-gpu.h): this
 * one has main(), the shared helpers, delivery and batchctl;
 * test-gpu-copy.c slot reuse and asynchronous copies; test-gpu-memory.c
 * device memory and the trainer it kills.
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
#include <signal.h>
#include <stdarg.h>
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
#include "test-gpu.h"

#define SKIP 77

#define WATCHDOG_S 170   /* under meson's timeout for this test (240 s) */

dt_daemon D;
int failures;
bool fake;
static uint64_t blk_batches;     /* batches per epoch of DSET_BLK in batches of 64 */

void fail_at(const char *file, int line, const char *fmt, ...)
{
	const char *base = strrchr(file, '/');
	va_list ap;

	printf("FAIL - %s:%d: ", base ? base + 1 : file, line);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	failures++;
}

int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

uint64_t now_ms(void)
{
	return (uint64_t)now_ns() / 1000000;
}

/* ---- the daemon's status ------------------------------------------------------- */

json_object *status_json(void)
{
	json_object *o;
	char *text = NULL;

	if (dt_status(D.sock, &text) < 0)
		return NULL;
	o = json_tokener_parse(text);
	free(text);
	return o;
}

int64_t jint(json_object *o, const char *path)
{
	json_object *v = json_path_get(o, path);

	return v && json_object_is_type(v, json_type_int) ? json_object_get_int64(v) : -1;
}

size_t nsessions(json_object *o)
{
	json_object *a = json_path_get(o, "sessions");

	return a && json_object_is_type(a, json_type_array) ? json_object_array_length(a)
							     : (size_t)-1;
}

bool wait_idle(int ms, int64_t *ret_devmem, size_t *ret_sessions)
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

bool close_to_idle(bc_client **c, bc_stream **s, const char *file, int line)
{
	int64_t devmem = -1;
	size_t nsess = 0;
	int r = bc_close(*s);

	*s = NULL;
	if (r != 0) {
		fail_at(file, line, "bc_close: %s", bc_strerror(r));
		return false;
	}
	bc_disconnect(*c);
	*c = NULL;
	if (!wait_idle(30000, &devmem, &nsess)) {
		fail_at(file, line, "30 s after bc_close: %zu sessions, device_memory %" PRId64,
			nsess, devmem);
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

int64_t check_on_device(bc_batch *b, cudaStream_t st, uint8_t *back, size_t cap, dt_ref *ref,
			char *err, size_t errlen)
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

int take_on_device(bc_stream *s, cudaStream_t st, uint8_t *back, size_t cap, dt_ref *ref,
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

int open_stream(bc_client **c, bc_stream **s, const char *dataset, uint32_t batch,
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

	if (!close_to_idle(&c, &s, __FILE__, __LINE__))
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
