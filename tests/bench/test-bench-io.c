/* SPDX-License-Identifier: MIT */
/*
 * test-bench-io.c - the Check suite for what batchd-bench added to the I/O
 * engine (daemon/pipeline/io.c): registered files and batched completion
 * (bd_io_register_files, bd_io_wait_many).
 *
 * Every read is checked byte for byte against what main() wrote to a file
 * of pseudo-random data before Check forks the tests. Each case runs on
 * both engines (loop 0 = io_uring, 1 = pread); the io_uring run skips,
 * saying why, where the kernel refuses io_uring.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>
#include <liburing.h>

#include "io.h"

#define FILE_SIZE ((2u << 20) + 777u)
#define QD 32u
#define LEN 4096u

static int g_fd = -1;
static uint8_t *g_data;
static bool g_uring_ok;
static char g_uring_why[128];

static const bd_io_engine engines[] = { BD_IO_URING, BD_IO_PREAD };

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dull;
}

static bd_io *engine_new(int i, const bd_io_opts *extra)
{
	bd_io_opts o = extra ? *extra : (bd_io_opts){ 0 };
	bd_io *io = NULL;

	o.engine = engines[i];
	if (!o.queue_depth)
		o.queue_depth = QD;
	ck_assert_int_eq(bd_io_new(&o, &io), 0);
	ck_assert_int_eq(bd_io_engine_of(io), engines[i]);
	return io;
}

static bool skip(int i)
{
	if (engines[i] == BD_IO_URING && !g_uring_ok) {
		printf("SKIP io_uring case: %s\n", g_uring_why);
		return true;
	}
	return false;
}

static void req_init(bd_io_req *r, int fd, uint64_t off, uint32_t len, uint8_t *buf, int index)
{
	memset(r, 0, sizeof(*r));
	r->fd = fd;
	r->offset = off;
	r->len = len;
	r->buf = buf;
	r->buf_index = index;
	r->result = INT32_MIN;
}

static void check_req(const bd_io_req *r)
{
	uint32_t want = r->offset >= FILE_SIZE ? 0
			: FILE_SIZE - r->offset < r->len ? (uint32_t)(FILE_SIZE - r->offset) : r->len;

	ck_assert_msg(r->result == (int32_t)want, "off %" PRIu64 ": result %d, want %u", r->offset,
		      r->result, want);
	ck_assert(memcmp(r->buf, g_data + r->offset, want) == 0);
}

/*
 * Reads @total random blocks keeping QD in flight, reaping in batches with
 * bd_io_wait_many; every block is checked. @return the number of batches.
 */
static unsigned read_many(bd_io *io, int fd, uint8_t *buf, bool fixed, unsigned total)
{
	bd_io_req reqs[QD], *done[QD];
	unsigned issued = 0, finished = 0, batches = 0;
	uint64_t seed = 0x1234567;

	for (unsigned k = 0; k < QD && issued < total; k++, issued++) {
		req_init(&reqs[k], fd, rnd(&seed) % (FILE_SIZE / LEN + 1) * LEN, LEN,
			 buf + (size_t)k * LEN, fixed ? (int)k : -1);
		ck_assert_int_eq(bd_io_submit(io, &reqs[k]), 0);
	}
	while (finished < total) {
		int n = bd_io_wait_many(io, done, QD);

		ck_assert_int_ge(n, 1);
		ck_assert_int_le(n, QD);
		batches++;
		for (int j = 0; j < n; j++) {
			bd_io_req *r = done[j];

			ck_assert(r >= reqs && r < reqs + QD);
			check_req(r);
			finished++;
			if (issued < total) {
				r->offset = rnd(&seed) % (FILE_SIZE / LEN + 1) * LEN;
				r->result = INT32_MIN;
				ck_assert_int_eq(bd_io_submit(io, r), 0);
				issued++;
			}
		}
	}
	ck_assert_uint_eq(bd_io_inflight(io), 0);
	return batches;
}

START_TEST(wait_many_reads_everything)
{
	uint8_t *buf;
	bd_io *io;
	unsigned batches;

	if (skip(_i))
		return;
	buf = aligned_alloc(4096, QD * LEN);
	io = engine_new(_i, NULL);
	batches = read_many(io, g_fd, buf, false, 2000);
	/* pread hands back one request per call; the ring usually several. */
	ck_assert_uint_le(batches, 2000);
	if (engines[_i] == BD_IO_PREAD)
		ck_assert_uint_eq(batches, 2000);
	bd_io_free(io);
	free(buf);
}
END_TEST

START_TEST(registered_files_and_buffers)
{
	uint8_t *buf = aligned_alloc(4096, QD * LEN);
	struct iovec iov[QD];
	int other = dup(g_fd), fds[2];
	bd_io_req req, *done;
	bd_io *io;

	if (skip(_i)) {
		free(buf);
		close(other);
		return;
	}
	io = engine_new(_i, NULL);
	for (unsigned k = 0; k < QD; k++) {
		iov[k].iov_base = buf + (size_t)k * LEN;
		iov[k].iov_len = LEN;
	}
	ck_assert_int_eq(bd_io_register(io, iov, QD), 0);
	fds[0] = g_fd;
	fds[1] = g_fd;
	ck_assert_int_eq(bd_io_register_files(io, fds, 2), -EINVAL);   /* repeated */
	fds[1] = -1;
	ck_assert_int_eq(bd_io_register_files(io, fds, 2), -EINVAL);   /* negative */
	ck_assert_int_eq(bd_io_register_files(io, NULL, 1), -EINVAL);
	ck_assert_int_eq(bd_io_register_files(io, fds, 0), -EINVAL);
	ck_assert_int_eq(bd_io_register_files(io, &g_fd, 1), 0);
	ck_assert_int_eq(bd_io_register_files(io, &g_fd, 1), -EBUSY);
	read_many(io, g_fd, buf, true, 1000);

	/* An fd that is not registered is still read, as a plain read. */
	req_init(&req, other, FILE_SIZE - 100, LEN, buf, 0);
	ck_assert_int_eq(bd_io_submit(io, &req), 0);
	ck_assert_int_eq(bd_io_wait_many(io, &done, 1), 1);
	ck_assert_ptr_eq(done, &req);
	check_req(&req);
	bd_io_free(io);
	close(other);
	free(buf);
}
END_TEST

START_TEST(short_reads_are_finished)
{
	bd_io_opts o = { .fault_max_read = 1000 };  /* every 4 KiB read comes back in pieces */
	uint8_t *buf = aligned_alloc(4096, QD * LEN);
	bd_io *io;

	if (skip(_i)) {
		free(buf);
		return;
	}
	io = engine_new(_i, &o);
	ck_assert_int_eq(bd_io_register_files(io, &g_fd, 1), 0);
	read_many(io, g_fd, buf, false, 500);
	bd_io_free(io);
	free(buf);
}
END_TEST

START_TEST(wait_many_errors)
{
	bd_io_req *done[2], req;
	uint8_t buf[64];
	bd_io *io;

	if (skip(_i))
		return;
	io = engine_new(_i, NULL);
	ck_assert_int_eq(bd_io_wait_many(io, done, 2), -ENOENT);
	req_init(&req, g_fd, 0, sizeof(buf), buf, -1);
	ck_assert_int_eq(bd_io_submit(io, &req), 0);
	ck_assert_int_eq(bd_io_wait_many(io, done, 0), -EINVAL);
	ck_assert_int_eq(bd_io_wait_many(io, NULL, 2), -EINVAL);
	ck_assert_int_eq(bd_io_wait_many(io, done, 2), 1);
	ck_assert_ptr_eq(done[0], &req);
	check_req(&req);
	/* Files cannot be registered while reads are in flight. */
	ck_assert_int_eq(bd_io_submit(io, &req), 0);
	ck_assert_int_eq(bd_io_register_files(io, &g_fd, 1), -EBUSY);
	ck_assert_int_eq(bd_io_wait_many(io, done, 2), 1);
	/* A bad fd fails its request, not the engine. */
	req_init(&req, 1000, 0, sizeof(buf), buf, -1);
	ck_assert_int_eq(bd_io_submit(io, &req), 0);
	ck_assert_int_eq(bd_io_wait_many(io, done, 2), 1);
	ck_assert_int_eq(req.result, -EBADF);
	bd_io_free(io);
}
END_TEST

/*
 * Whether the kernel gives a plain ring, asked of liburing directly rather
 * than of bd_io: an engine whose own setup is broken then fails the
 * io_uring cases instead of skipping them.
 */
static void probe_uring(void)
{
	struct io_uring ring;
	int r = io_uring_queue_init(QD, &ring, 0);

	g_uring_ok = r == 0;
	if (g_uring_ok)
		io_uring_queue_exit(&ring);
	else
		snprintf(g_uring_why, sizeof(g_uring_why), "io_uring_queue_init: %s", strerror(-r));
}

int main(void)
{
	char path[] = "test-bench-io.XXXXXX";
	uint64_t seed = 42;
	Suite *s = suite_create("bench-io");
	TCase *t = tcase_create("engine");
	SRunner *sr;
	int failed;

	g_data = malloc(FILE_SIZE);
	g_fd = mkstemp(path);
	if (!g_data || g_fd < 0) {
		perror("test-bench-io: setup");
		return 99;
	}
	unlink(path);
	for (size_t i = 0; i < FILE_SIZE; i++)
		g_data[i] = (uint8_t)rnd(&seed);
	if (pwrite(g_fd, g_data, FILE_SIZE, 0) != (ssize_t)FILE_SIZE) {
		perror("test-bench-io: write");
		return 99;
	}
	probe_uring();

	tcase_add_loop_test(t, wait_many_reads_everything, 0, 2);
	tcase_add_loop_test(t, registered_files_and_buffers, 0, 2);
	tcase_add_loop_test(t, short_reads_are_finished, 0, 2);
	tcase_add_loop_test(t, wait_many_errors, 0, 2);
	suite_add_tcase(s, t);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	close(g_fd);
	free(g_data);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
