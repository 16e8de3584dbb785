/* SPDX-License-Identifier: MIT */
/*
 * test-gpu-memory.c - test-gpu's case "device memory" (test-gpu.h): a
 * session's device allocation comes back when its trainer is SIGKILLed
 * while it holds a batch, and when a stream is closed normally. The
 * daemon's status must say 0 bytes and no session after each; on a GPU,
 * cudaMemGetInfo must be back where it was too (the fake's free memory is
 * per process, so there the status is the evidence).
 *
 * The killed trainer is this binary run afresh, `test-gpu --hold SOCKET
 * DATASET FD` (hold_main): this process used CUDA, and a child forked from
 * it could not, so the child execs, and main() hands --hold to hold_main
 * before CUDA is touched. The dataset's samples are large
 * (make_big_pack), so that the session's device memory stands out of the
 * noise in the free memory.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <json-c/json.h>

#include "batchclient.h"
#include "daemon-testlib.h"
#include "test-gpu.h"

/* Case (c): a pack of 8 MiB samples; batches of 8 in 6 slots = 384 MiB of device memory. */
#define BIG_NAME "big.bpk"
#define BIG_SAMPLES 16u
#define BIG_SAMPLE (8 * MiB)
#define BIG_BATCH 8u
#define BIG_PREFETCH 4u
#define BIG_SLOTS (BIG_PREFETCH + 2u)
#define FREE_SLACK (64 * MiB)

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
int hold_main(const char *sock, const char *dataset, const char *fdstr)
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

void case_device_memory(void)
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
	if (!close_to_idle(&c, &s, __FILE__, __LINE__))
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
