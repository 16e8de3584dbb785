/* SPDX-License-Identifier: MIT */
/*
 * test-io-faults.c - the paths daemon/pipeline/io.c takes when a read does
 * not simply succeed, driven through its fault hooks (bd_io_opts'
 * fault_max_read, fault_every, fault_errno): short reads resubmitted
 * until the request is whole, EAGAIN and EINTR retried, other errors
 * (and EAGAIN for ever) completing the request with the errno, and
 * bd_io_free waiting for every read in flight.
 *
 * Its own program because no healthy file makes these paths run; each
 * case runs on both engines (0 = io_uring, 1 = pread) and checks every
 * byte against the data file of io-testlib.c, as test-io.c does.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include <check.h>

#include "io-testlib.h"

/* A new engine with the options o (fault hooks included), of the kind asked. */
static bd_io *engine_new_opts(const bd_io_opts *o)
{
	bd_io *io = NULL;

	ck_assert_int_eq(bd_io_new(o, &io), 0);
	ck_assert_int_eq(bd_io_engine_of(io), o->engine);
	return io;
}

/* ---- the resubmission paths, through the test hooks --------------------- */

START_TEST(test_short_reads_resubmitted)
{
	bd_io_engine e = it_engines[_i];
	bd_io_opts o = { .engine = e, .queue_depth = 16, .fault_max_read = 1000 };
	bd_io_req reqs[16];
	struct iovec iov;
	uint8_t *bufs;
	bd_io *io;

	if (it_skip_engine(e))
		return;
	io = engine_new_opts(&o);
	bufs = malloc(16 * 65536);
	ck_assert_ptr_nonnull(bufs);
	iov = (struct iovec){ bufs, 16 * 65536 };
	ck_assert_int_eq(bd_io_register(io, &iov, 1), 0);
	for (int i = 0; i < 16; i++) {
		it_req_init(&reqs[i], it_fd, (uint64_t)i * 100003, 65536 - (uint32_t)i,
			    bufs + (size_t)i * 65536);
		reqs[i].buf_index = i % 2 ? 0 : -1;
		ck_assert_int_eq(bd_io_submit(io, &reqs[i]), 0);
	}
	it_reap_batch(io, reqs, 16);

	/* Pieces of 1000 up to EOF, then the 0-byte read ends it. */
	it_req_init(&reqs[0], it_fd, FILE_SIZE - 4500, 65536, bufs);
	it_read_one(io, &reqs[0]);
	ck_assert_int_eq(reqs[0].result, 4500);
	ck_assert(it_req_matches(&reqs[0]));
	bd_io_free(io);
	free(bufs);
}
END_TEST

START_TEST(test_transient_errors_retried)
{
	static const int errs[] = { EAGAIN, EINTR };
	bd_io_engine e = it_engines[_i];
	bd_io_req reqs[8];
	uint8_t *bufs;

	if (it_skip_engine(e))
		return;
	bufs = malloc(8 * 50000);
	ck_assert_ptr_nonnull(bufs);
	for (size_t k = 0; k < 2; k++) {
		bd_io_opts o = { .engine = e, .queue_depth = 8,
				 .fault_max_read = 7000, .fault_every = 3,
				 .fault_errno = errs[k] };
		bd_io *io = engine_new_opts(&o);

		for (int i = 0; i < 8; i++) {
			it_req_init(&reqs[i], it_fd, (uint64_t)i * 333333, 50000,
				    bufs + (size_t)i * 50000);
			ck_assert_int_eq(bd_io_submit(io, &reqs[i]), 0);
		}
		it_reap_batch(io, reqs, 8);
		bd_io_free(io);
	}
	free(bufs);
}
END_TEST

START_TEST(test_errors_complete_request)
{
	bd_io_engine e = it_engines[_i];
	bd_io_opts o = { .engine = e, .queue_depth = 4,
			 .fault_every = 2, .fault_errno = EIO };
	uint8_t buf[4096];
	bd_io_req req;
	bd_io *io;

	if (it_skip_engine(e))
		return;
	/* Raw completion 1 is real, 2 is -EIO, 3 real, 4 -EIO. */
	io = engine_new_opts(&o);
	it_req_init(&req, it_fd, 0, sizeof(buf), buf);
	ck_assert(it_req_matches(it_read_one(io, &req)));
	it_req_init(&req, it_fd, 0, sizeof(buf), buf);
	ck_assert_int_eq(it_read_one(io, &req)->result, -EIO);
	it_req_init(&req, it_fd, 8192, sizeof(buf), buf);
	ck_assert(it_req_matches(it_read_one(io, &req)));
	bd_io_free(io);

	/* -EAGAIN forever: retried a bounded number of times, then returned. */
	o.fault_every = 1;
	o.fault_errno = EAGAIN;
	io = engine_new_opts(&o);
	it_req_init(&req, it_fd, 0, sizeof(buf), buf);
	ck_assert_int_eq(it_read_one(io, &req)->result, -EAGAIN);
	bd_io_free(io);
}
END_TEST

START_TEST(test_free_drains)
{
	bd_io_engine e = it_engines[_i];
	bd_io_req reqs[16];
	uint8_t *bufs;
	bd_io *io;

	if (it_skip_engine(e))
		return;
	io = it_engine_new(e, 16);
	bufs = calloc(16, 65536);
	ck_assert_ptr_nonnull(bufs);
	for (int i = 0; i < 16; i++) {
		it_req_init(&reqs[i], it_fd, (uint64_t)i * 65536, 65536,
			    bufs + (size_t)i * 65536);
		ck_assert_int_eq(bd_io_submit(io, &reqs[i]), 0);
	}
	/* Freed with everything in flight: every read has landed after. */
	bd_io_free(io);
	for (int i = 0; i < 16; i++)
		ck_assert(it_req_matches(&reqs[i]));
	free(bufs);
}
END_TEST

static Suite *io_faults_suite(void)
{
	Suite *s = suite_create("io-faults");

	it_add(s, "short_reads_resubmitted", test_short_reads_resubmitted, 2);
	it_add(s, "transient_errors_retried", test_transient_errors_retried, 2);
	it_add(s, "errors_complete_request", test_errors_complete_request, 2);
	it_add(s, "free_drains", test_free_drains, 2);
	return s;
}

int main(void)
{
	return it_run(io_faults_suite());
}
