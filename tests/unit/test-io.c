/* SPDX-License-Identifier: MIT */
/*
 * test-io.c - the Check suite for daemon/pipeline/io.c, the block-read
 * engine: choosing and setting up an engine, reads of every shape
 * (random, more than the queue depth, across EOF, bad descriptors,
 * invalid requests), registered buffers, polling, and two engines in two
 * threads. The fault hooks' resubmission paths are test-io-faults.c's,
 * O_DIRECT and the buffers' pages test-io-direct.c's.
 *
 * Every read is checked byte for byte against pread(2) of the same range
 * of one file of pseudo-random data, written once before Check forks the
 * tests (io-testlib.c, shared by the three). Most cases run twice (a loop
 * test: 0 = io_uring, 1 = pread) so both engines are held to the same
 * contract; the io_uring run skips, saying why, where the kernel refuses
 * io_uring (probed with liburing itself, so a broken engine setup fails
 * rather than skips).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>
#include <liburing.h>

#include "io-testlib.h"

/* ---- helpers ------------------------------------------------------------ */

/* Number of io_uring instances this process has open. */
static int count_uring_fds(void)
{
	char path[64], target[64];
	int fd, n = 0;

	for (fd = 0; fd < 1024; fd++) {
		ssize_t len;

		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		len = readlink(path, target, sizeof(target) - 1);
		if (len < 0)
			continue;
		target[len] = '\0';
		if (strstr(target, "io_uring"))
			n++;
	}
	return n;
}

/* ---- engine names and setup --------------------------------------------- */

START_TEST(test_engine_names)
{
	ck_assert_str_eq(bd_io_engine_name(BD_IO_URING), "io_uring");
	ck_assert_str_eq(bd_io_engine_name(BD_IO_PREAD), "pread");
	ck_assert_str_eq(bd_io_engine_name(BD_IO_AUTO), "auto");
	ck_assert_str_eq(bd_io_engine_name((bd_io_engine)42), "unknown");
}
END_TEST

START_TEST(test_auto_picks_uring)
{
	bd_io *io = NULL;
	unsigned f;

	ck_assert_int_eq(bd_io_new(NULL, &io), 0);
	ck_assert_int_eq(bd_io_engine_of(io),
			 (it_uring_ok ? BD_IO_URING : BD_IO_PREAD));
	f = bd_io_setup_flags(io);
	printf("AUTO engine: %s, setup flags 0x%x\n",
	       bd_io_engine_name(bd_io_engine_of(io)), f);
	if (it_uring_ok) {
		/* The kernel only takes DEFER_TASKRUN with SINGLE_ISSUER. */
		if (f & IORING_SETUP_DEFER_TASKRUN)
			ck_assert(f & IORING_SETUP_SINGLE_ISSUER);
		ck_assert_uint_eq(f & ~(IORING_SETUP_CQSIZE |
					IORING_SETUP_SUBMIT_ALL |
					IORING_SETUP_COOP_TASKRUN |
					IORING_SETUP_SINGLE_ISSUER |
					IORING_SETUP_DEFER_TASKRUN), 0);
	} else {
		ck_assert_uint_eq(f, 0);
	}
	bd_io_free(io);
	bd_io_free(NULL);
}
END_TEST

START_TEST(test_forced_setup_failure)
{
	bd_io_opts o = { .engine = BD_IO_AUTO, .force_setup_error = EPERM };
	bd_io *io = NULL, *sentinel = (bd_io *)&o;
	uint8_t buf[4096];
	bd_io_req req;

	/* AUTO: falls back, and the fallback reads correctly. */
	ck_assert_int_eq(bd_io_new(&o, &io), 0);
	ck_assert_int_eq(bd_io_engine_of(io), BD_IO_PREAD);
	ck_assert_uint_eq(bd_io_setup_flags(io), 0);
	it_req_init(&req, it_fd, 12345, sizeof(buf), buf);
	ck_assert(it_req_matches(it_read_one(io, &req)));
	bd_io_free(io);

	o.force_setup_error = ENOSYS;
	io = NULL;
	ck_assert_int_eq(bd_io_new(&o, &io), 0);
	ck_assert_int_eq(bd_io_engine_of(io), BD_IO_PREAD);
	bd_io_free(io);

	/* URING: the error comes back and nothing is written. */
	o.engine = BD_IO_URING;
	o.force_setup_error = EPERM;
	io = sentinel;
	ck_assert_int_eq(bd_io_new(&o, &io), -EPERM);
	ck_assert_ptr_eq(io, sentinel);
	o.force_setup_error = ENOMEM;
	ck_assert_int_eq(bd_io_new(&o, &io), -ENOMEM);
	ck_assert_ptr_eq(io, sentinel);
}
END_TEST

START_TEST(test_pread_never_touches_uring)
{
	int before = count_uring_fds();
	bd_io *io = it_engine_new(BD_IO_PREAD, 8);
	uint8_t buf[100];
	bd_io_req req;

	it_req_init(&req, it_fd, 7, sizeof(buf), buf);
	ck_assert(it_req_matches(it_read_one(io, &req)));
	ck_assert_int_eq(count_uring_fds(), before);
	ck_assert_uint_eq(bd_io_setup_flags(io), 0);
	bd_io_free(io);

	if (it_uring_ok) {
		/* The probe above is meaningful: a ring does show up. */
		io = it_engine_new(BD_IO_URING, 8);
		ck_assert_int_eq(count_uring_fds(), before + 1);
		bd_io_free(io);
		ck_assert_int_eq(count_uring_fds(), before);
	}
}
END_TEST

START_TEST(test_bad_options)
{
	bd_io_opts o = { .engine = (bd_io_engine)7 };
	bd_io *io = NULL;

	ck_assert_int_eq(bd_io_new(&o, &io), -EINVAL);
	o.engine = BD_IO_PREAD;
	o.queue_depth = BD_IO_MAX_DEPTH + 1;
	ck_assert_int_eq(bd_io_new(&o, &io), -EINVAL);
	o.queue_depth = 0;
	o.force_setup_error = -1;
	ck_assert_int_eq(bd_io_new(&o, &io), -EINVAL);
	ck_assert_ptr_null(io);
	ck_assert_int_eq(bd_io_new(NULL, NULL), -EINVAL);
}
END_TEST

/* ---- reads -------------------------------------------------------------- */

START_TEST(test_random_reads)
{
	bd_io_engine e = it_engines[_i];
	uint64_t seed = 0x1234567 + (uint64_t)_i;
	bd_io_req reqs[64];
	uint8_t *bufs;
	bd_io *io;
	unsigned batch, i;

	if (it_skip_engine(e))
		return;
	io = it_engine_new(e, 64);
	bufs = malloc(64 * (size_t)MAX_LEN);
	ck_assert_ptr_nonnull(bufs);
	for (batch = 0; batch < 12; batch++) {
		unsigned n = 1 + (unsigned)(it_rnd(&seed) % 64);

		for (i = 0; i < n; i++) {
			uint64_t off = it_rnd(&seed) % FILE_SIZE;
			uint32_t len = 1 + (uint32_t)(it_rnd(&seed) % MAX_LEN);

			it_req_init(&reqs[i], it_fd, off, len, bufs + i * (size_t)MAX_LEN);
			ck_assert_int_eq(bd_io_submit(io, &reqs[i]), 0);
		}
		ck_assert_uint_eq(bd_io_inflight(io), n);
		it_reap_batch(io, reqs, n);
	}
	free(bufs);
	bd_io_free(io);
}
END_TEST

START_TEST(test_many_in_flight)
{
	enum { N = 200, DEPTH = 64, LEN = 16384 };
	bd_io_engine e = it_engines[_i];
	bd_io_req reqs[N];
	bool seen[N] = { false };
	uint8_t *bufs;
	unsigned next = 0, done = 0;
	bd_io *io;

	if (it_skip_engine(e))
		return;
	io = it_engine_new(e, DEPTH);
	bufs = malloc((size_t)N * LEN);
	ck_assert_ptr_nonnull(bufs);
	for (unsigned i = 0; i < N; i++)
		it_req_init(&reqs[i], it_fd, (uint64_t)i * 20000 + 3, LEN,
			    bufs + (size_t)i * LEN);

	/* The first -EBUSY comes exactly at the depth. */
	while (bd_io_submit(io, &reqs[next]) == 0)
		next++;
	ck_assert_uint_eq(next, DEPTH);
	ck_assert_uint_eq(bd_io_inflight(io), DEPTH);
	ck_assert_int_eq(bd_io_submit(io, &reqs[next]), -EBUSY);

	while (done < N) {
		bd_io_req *r = NULL;
		size_t k;

		ck_assert_int_eq(bd_io_wait(io, &r), 0);
		k = (size_t)(r - reqs);
		ck_assert_uint_lt(k, N);
		ck_assert(!seen[k]);
		seen[k] = true;
		done++;
		ck_assert(it_req_matches(r));
		while (next < N) {
			int s = bd_io_submit(io, &reqs[next]);

			if (s == -EBUSY)
				break;
			ck_assert_int_eq(s, 0);
			next++;
		}
		ck_assert_uint_le(bd_io_inflight(io), DEPTH);
		ck_assert_uint_eq(bd_io_inflight(io), next - done);
	}
	ck_assert_uint_eq(bd_io_inflight(io), 0);
	free(bufs);
	bd_io_free(io);
}
END_TEST

START_TEST(test_eof)
{
	bd_io_engine e = it_engines[_i];
	uint8_t buf[8192];
	bd_io_req req;
	bd_io *io;

	if (it_skip_engine(e))
		return;
	io = it_engine_new(e, 4);

	/* Across EOF: the short count, and the bytes up to EOF. */
	it_req_init(&req, it_fd, FILE_SIZE - 100, sizeof(buf), buf);
	it_read_one(io, &req);
	ck_assert_int_eq(req.result, 100);
	ck_assert(it_req_matches(&req));

	/* At EOF and far beyond it: 0. */
	it_req_init(&req, it_fd, FILE_SIZE, sizeof(buf), buf);
	ck_assert_int_eq(it_read_one(io, &req)->result, 0);
	it_req_init(&req, it_fd, (uint64_t)FILE_SIZE * 1000, sizeof(buf), buf);
	ck_assert_int_eq(it_read_one(io, &req)->result, 0);

	/* Ending exactly at EOF: all of it. */
	it_req_init(&req, it_fd, FILE_SIZE - sizeof(buf), sizeof(buf), buf);
	ck_assert_int_eq(it_read_one(io, &req)->result, (int)sizeof(buf));
	ck_assert(it_req_matches(&req));

	/* Zero length: 0, buffer untouched, NULL buffer allowed. */
	it_req_init(&req, it_fd, 0, 0, NULL);
	ck_assert_int_eq(it_read_one(io, &req)->result, 0);
	bd_io_free(io);
}
END_TEST

START_TEST(test_bad_fd)
{
	bd_io_engine e = it_engines[_i];
	uint8_t buf[3][4096];
	bd_io_req reqs[3], *r;
	int closed_fd, wo_fd;
	bd_io *io;

	if (it_skip_engine(e))
		return;
	io = it_engine_new(e, 8);

	it_req_init(&reqs[0], -1, 0, sizeof(buf[0]), buf[0]);
	ck_assert_int_eq(it_read_one(io, &reqs[0])->result, -EBADF);

	closed_fd = dup(it_fd);
	ck_assert_int_ge(closed_fd, 0);
	close(closed_fd);
	it_req_init(&reqs[0], closed_fd, 0, sizeof(buf[0]), buf[0]);
	ck_assert_int_eq(it_read_one(io, &reqs[0])->result, -EBADF);

	/* Open, but not for reading. */
	wo_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	ck_assert_int_ge(wo_fd, 0);
	it_req_init(&reqs[0], wo_fd, 0, sizeof(buf[0]), buf[0]);
	ck_assert_int_eq(it_read_one(io, &reqs[0])->result, -EBADF);
	close(wo_fd);

	/* A bad fd in the middle of a batch fails alone. */
	it_req_init(&reqs[0], it_fd, 1000, sizeof(buf[0]), buf[0]);
	it_req_init(&reqs[1], -1, 1000, sizeof(buf[1]), buf[1]);
	it_req_init(&reqs[2], it_fd, 99999, sizeof(buf[2]), buf[2]);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(bd_io_submit(io, &reqs[i]), 0);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(bd_io_wait(io, &r), 0);
	ck_assert(it_req_matches(&reqs[0]));
	ck_assert_int_eq(reqs[1].result, -EBADF);
	ck_assert(it_req_matches(&reqs[2]));
	bd_io_free(io);
}
END_TEST

START_TEST(test_invalid_requests)
{
	bd_io_engine e = it_engines[_i];
	uint8_t buf[16];
	bd_io_req req, *r = NULL;
	bd_io *io;

	if (it_skip_engine(e))
		return;
	io = it_engine_new(e, 4);
	ck_assert_int_eq(bd_io_wait(io, &r), -ENOENT);
	ck_assert_ptr_null(r);

	ck_assert_int_eq(bd_io_submit(io, NULL), -EINVAL);
	it_req_init(&req, it_fd, 0, 10, NULL);
	ck_assert_int_eq(bd_io_submit(io, &req), -EINVAL);
	it_req_init(&req, it_fd, 0, (uint32_t)INT32_MAX + 1u, buf);
	ck_assert_int_eq(bd_io_submit(io, &req), -EINVAL);
	it_req_init(&req, it_fd, UINT64_MAX - 5, sizeof(buf), buf);
	ck_assert_int_eq(bd_io_submit(io, &req), -EINVAL);
	it_req_init(&req, it_fd, 0, sizeof(buf), buf);
	req.buf_index = 0;   /* nothing registered */
	ck_assert_int_eq(bd_io_submit(io, &req), -EINVAL);
	ck_assert_uint_eq(bd_io_inflight(io), 0);
	ck_assert_int_eq(bd_io_wait(io, &r), -ENOENT);
	bd_io_free(io);
}
END_TEST

/* ---- registered buffers --------------------------------------------------- */

START_TEST(test_registered_buffers)
{
	enum { HALF = 512 << 10 };
	bd_io_engine e = it_engines[_i];
	uint8_t *mem, other[4096];
	struct iovec iov[2];
	bd_io_req reqs[4];
	bd_io *io;

	if (it_skip_engine(e))
		return;
	io = it_engine_new(e, 8);
	mem = malloc(2 * HALF);
	ck_assert_ptr_nonnull(mem);
	iov[0] = (struct iovec){ mem, HALF };
	iov[1] = (struct iovec){ mem + HALF, HALF };

	ck_assert_int_eq(bd_io_register(io, NULL, 1), -EINVAL);
	ck_assert_int_eq(bd_io_register(io, iov, 0), -EINVAL);
	ck_assert_int_eq(bd_io_register(io, iov, 2), 0);
	ck_assert_int_eq(bd_io_register(io, iov, 2), -EBUSY);

	/* Inside buffer 0, the whole of buffer 1, and inside 1 at an odd spot. */
	it_req_init(&reqs[0], it_fd, 4096, 100000, mem + 5);
	reqs[0].buf_index = 0;
	it_req_init(&reqs[1], it_fd, 777777, HALF, mem + HALF);
	reqs[1].buf_index = 1;
	/* Lies in buffer 0 but names buffer 1: read as a plain read. */
	it_req_init(&reqs[2], it_fd, 3000000, 4096, mem + HALF - 4096);
	reqs[2].buf_index = 1;
	/* Not registered memory at all, buf_index -1. */
	it_req_init(&reqs[3], it_fd, 1, sizeof(other), other);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(bd_io_submit(io, &reqs[i]), 0);
	it_reap_batch(io, reqs, 4);

	/*
	 * Ending exactly at the end of a buffer; crossing EOF inside one;
	 * starting in buffer 0 and running past its end (a fixed read there
	 * would fail with -EFAULT, so it must be a plain read).
	 */
	it_req_init(&reqs[0], it_fd, 0, 4096, mem + HALF - 4096);
	reqs[0].buf_index = 0;
	it_req_init(&reqs[1], it_fd, FILE_SIZE - 10, 4096, mem + HALF);
	reqs[1].buf_index = 1;
	/* Lies in buffer 1 but names buffer 0: a plain read again. */
	it_req_init(&reqs[2], it_fd, 2222222, 4096, mem + HALF + 8192);
	reqs[2].buf_index = 0;
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(bd_io_submit(io, &reqs[i]), 0);
	it_reap_batch(io, reqs, 3);
	ck_assert_int_eq(reqs[1].result, 10);
	/* (alone: its buffer overlaps both of the above) */
	it_req_init(&reqs[0], it_fd, 55555, 4096, mem + HALF - 100);
	reqs[0].buf_index = 0;
	ck_assert(it_req_matches(it_read_one(io, &reqs[0])));

	it_req_init(&reqs[0], it_fd, 0, 16, mem);
	reqs[0].buf_index = 2;
	ck_assert_int_eq(bd_io_submit(io, &reqs[0]), -EINVAL);
	bd_io_free(io);
	free(mem);
}
END_TEST

/* ---- two engines in two threads ---------------------------------------- */

struct worker {
	bd_io_engine engine;
	uint64_t seed;
	unsigned checked;
	unsigned bad;
	int error;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	bd_io_opts o = { .engine = w->engine, .queue_depth = 32 };
	bd_io_req reqs[32];
	uint8_t *bufs;
	bd_io *io;

	/* The ring is created on the thread that uses it (SINGLE_ISSUER). */
	w->error = bd_io_new(&o, &io);
	if (w->error)
		return NULL;
	bufs = malloc(32 * (size_t)65536);
	if (!bufs) {
		w->error = -ENOMEM;
		bd_io_free(io);
		return NULL;
	}
	for (int batch = 0; batch < 40; batch++) {
		for (int i = 0; i < 32; i++) {
			it_req_init(&reqs[i], it_fd, it_rnd(&w->seed) % FILE_SIZE,
				    1 + (uint32_t)(it_rnd(&w->seed) % 65536),
				    bufs + (size_t)i * 65536);
			if (bd_io_submit(io, &reqs[i]) != 0)
				w->bad++;
		}
		for (int i = 0; i < 32; i++) {
			bd_io_req *r;

			if (bd_io_wait(io, &r) != 0) {
				w->bad++;
				continue;
			}
			w->checked++;
			if (!it_req_matches(r))
				w->bad++;
		}
	}
	free(bufs);
	bd_io_free(io);
	return NULL;
}

START_TEST(test_two_threads)
{
	/*
	 * 0: two rings; 1: a ring and a pread engine side by side. Without
	 * io_uring both threads use pread, so the threads still race.
	 */
	bd_io_engine e0 = BD_IO_URING, e1 = _i ? BD_IO_PREAD : BD_IO_URING;
	struct worker w[2];
	pthread_t t[2];

	if (!it_uring_ok) {
		printf("two_threads: pread only: %s\n", it_uring_why);
		e0 = e1 = BD_IO_PREAD;
	}
	w[0] = (struct worker){ .engine = e0, .seed = 11 };
	w[1] = (struct worker){ .engine = e1, .seed = 22 };
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(pthread_join(t[i], NULL), 0);
		ck_assert_int_eq(w[i].error, 0);
		ck_assert_uint_eq(w[i].bad, 0);
		ck_assert_uint_eq(w[i].checked, 40 * 32);
	}
}
END_TEST

/* ---- polling ------------------------------------------------------------ */

/*
 * Polling without waiting: queued reads reach the kernel and come back,
 * each exactly once and right, through bd_io_poll alone; nothing in
 * flight is -ENOENT.
 */
START_TEST(test_poll)
{
	bd_io_engine e = it_engines[_i];
	uint64_t seed = 0x5eed + (uint64_t)_i;
	bool seen[32] = { false };
	bd_io_req reqs[32], *done = NULL;
	unsigned got = 0, polls = 0;
	uint8_t *bufs;
	bd_io *io;

	if (it_skip_engine(e))
		return;
	io = it_engine_new(e, 32);
	ck_assert_int_eq(bd_io_poll(io, &done), -ENOENT);
	bufs = malloc(32 * (size_t)MAX_LEN);
	ck_assert_ptr_nonnull(bufs);
	for (unsigned i = 0; i < 32; i++) {
		it_req_init(&reqs[i], it_fd, it_rnd(&seed) % FILE_SIZE, 1 + (uint32_t)(it_rnd(&seed) % MAX_LEN),
			    bufs + i * (size_t)MAX_LEN);
		ck_assert_int_eq(bd_io_submit(io, &reqs[i]), 0);
	}
	while (got < 32) {
		int r = bd_io_poll(io, &done);
		size_t k;

		ck_assert_int_ge(r, 0);
		ck_assert_uint_lt(++polls, 100000000u);
		if (!r)
			continue;
		k = (size_t)(done - reqs);
		ck_assert_uint_lt(k, 32);
		ck_assert(!seen[k]);
		seen[k] = true;
		ck_assert_msg(it_req_matches(done), "req %zu: result %d", k, done->result);
		got++;
	}
	ck_assert_uint_eq(bd_io_inflight(io), 0);
	ck_assert_int_eq(bd_io_poll(io, &done), -ENOENT);
	free(bufs);
	bd_io_free(io);
}
END_TEST

static Suite *io_suite(void)
{
	Suite *s = suite_create("io");

	it_add(s, "engine_names", test_engine_names, 1);
	it_add(s, "auto_picks_uring", test_auto_picks_uring, 1);
	it_add(s, "forced_setup_failure", test_forced_setup_failure, 1);
	it_add(s, "pread_never_touches_uring", test_pread_never_touches_uring, 1);
	it_add(s, "bad_options", test_bad_options, 1);
	it_add(s, "random_reads", test_random_reads, 2);
	it_add(s, "many_in_flight", test_many_in_flight, 2);
	it_add(s, "eof", test_eof, 2);
	it_add(s, "bad_fd", test_bad_fd, 2);
	it_add(s, "invalid_requests", test_invalid_requests, 2);
	it_add(s, "registered_buffers", test_registered_buffers, 2);
	it_add(s, "two_threads", test_two_threads, 2);
	it_add(s, "poll", test_poll, 2);
	return s;
}

int main(void)
{
	return it_run(io_suite());
}
