/* SPDX-License-Identifier: MIT */
/*
 * io-testlib.c - the read-engine suites' fixture (see io-testlib.h): the
 * data file, the kernel's io_uring and O_DIRECT probed once, and the
 * request helpers, linked into test-io, test-io-faults and test-io-direct.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>
#include <liburing.h>

#include "io-testlib.h"

int it_fd = -1;
uint8_t *it_data;
bool it_uring_ok;
char it_uring_why[128];
bool it_direct_ok;
char it_direct_why[128];

uint64_t it_rnd(uint64_t *s)
{
	/* xorshift64*: a fixed sequence whatever the libc. */
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dull;
}

const bd_io_engine it_engines[2] = { BD_IO_URING, BD_IO_PREAD };

bool it_skip_engine(bd_io_engine e)
{
	if (e == BD_IO_URING && !it_uring_ok) {
		printf("SKIP io_uring case: %s\n", it_uring_why);
		fflush(stdout);
		return true;
	}
	return false;
}

/* A new engine of the kind @e, checked to be what was asked. */
bd_io *it_engine_new(bd_io_engine e, unsigned depth)
{
	bd_io_opts o = { .engine = e, .queue_depth = depth };
	bd_io *io = NULL;

	ck_assert_int_eq(bd_io_new(&o, &io), 0);
	ck_assert_ptr_nonnull(io);
	ck_assert_int_eq(bd_io_engine_of(io), e);
	return io;
}

void it_req_init(bd_io_req *req, int fd, uint64_t off, uint32_t len,
		 uint8_t *buf)
{
	memset(req, 0, sizeof(*req));
	req->fd = fd;
	req->offset = off;
	req->len = len;
	req->buf = buf;
	req->buf_index = -1;
	req->result = INT32_MIN;
}

static uint32_t expect_len(uint64_t off, uint32_t len)
{
	if (off >= FILE_SIZE)
		return 0;
	return (uint32_t)(FILE_SIZE - off < len ? FILE_SIZE - off : len);
}

/*
 * Whether a finished request holds exactly what pread(2) returns for the
 * same range (and what it_run() wrote there). Returns false instead of
 * asserting so worker threads can use it too.
 */
bool it_req_matches(const bd_io_req *req)
{
	uint32_t want = expect_len(req->offset, req->len);
	uint8_t *ref;
	ssize_t n;
	bool ok;

	if (req->result != (int32_t)want)
		return false;
	if (!want)
		return true;
	ref = malloc(want);
	if (!ref)
		return false;
	n = pread(it_fd, ref, want, (off_t)req->offset);
	ok = n == (ssize_t)want && memcmp(ref, req->buf, want) == 0 &&
	     memcmp(it_data + req->offset, req->buf, want) == 0;
	free(ref);
	return ok;
}

/* Submits @req, waits for it alone, and returns it. */
bd_io_req *it_read_one(bd_io *io, bd_io_req *req)
{
	bd_io_req *done = NULL;

	ck_assert_int_eq(bd_io_submit(io, req), 0);
	ck_assert_int_eq(bd_io_wait(io, &done), 0);
	ck_assert_ptr_eq(done, req);
	ck_assert_uint_eq(bd_io_inflight(io), 0);
	return done;
}

/* Waits for @n requests of @reqs, each exactly once, and checks them. */
void it_reap_batch(bd_io *io, bd_io_req *reqs, unsigned n)
{
	static bd_io_req sentinel;
	bd_io_req *done_sentinel;
	bool seen[64] = { false };
	unsigned i;

	ck_assert_uint_le(n, 64);
	for (i = 0; i < n; i++) {
		bd_io_req *done = NULL;
		size_t k;

		ck_assert_int_eq(bd_io_wait(io, &done), 0);
		k = (size_t)(done - reqs);
		ck_assert_uint_lt(k, n);
		ck_assert(!seen[k]);
		seen[k] = true;
		ck_assert_msg(it_req_matches(done),
			      "req %zu off %" PRIu64 " len %u: result %d",
			      k, done->offset, done->len, done->result);
	}
	ck_assert_uint_eq(bd_io_inflight(io), 0);
	done_sentinel = &sentinel;
	ck_assert_int_eq(bd_io_wait(io, &done_sentinel), -ENOENT);
	ck_assert_ptr_eq(done_sentinel, &sentinel);
}

/*
 * Creates the data file in @dir. Returns the fd (unlinked) or -1, and
 * whether O_DIRECT opens on it.
 */
static int make_file(const char *dir, bool *direct, char *why, size_t whylen)
{
	char path[PATH_MAX], self[64];
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	size_t done = 0;
	int fd, dfd;

	snprintf(path, sizeof(path), "%s/test-io-XXXXXX", dir);
	fd = mkstemp(path);
	if (fd < 0)
		return -1;
	unlink(path);
	for (size_t i = 0; i < FILE_SIZE; i += 8) {
		uint64_t v = it_rnd(&seed);

		memcpy(it_data + i, &v, FILE_SIZE - i < 8 ? FILE_SIZE - i : 8);
	}
	while (done < FILE_SIZE) {
		ssize_t n = write(fd, it_data + done, FILE_SIZE - done);

		if (n <= 0) {
			close(fd);
			return -1;
		}
		done += (size_t)n;
	}
	if (fsync(fd) < 0) {
		close(fd);
		return -1;
	}
	snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
	dfd = open(self, O_RDONLY | O_DIRECT | O_CLOEXEC);
	*direct = dfd >= 0;
	if (dfd >= 0)
		close(dfd);
	else
		snprintf(why, whylen, "O_DIRECT open in %s: %s", dir, strerror(errno));
	return fd;
}

void it_add(Suite *s, const char *name, const TTest *fn, int runs)
{
	TCase *tc = tcase_create(name);

	tcase_add_loop_test(tc, fn, 0, runs);
	suite_add_tcase(s, tc);
}

/*
 * The data file is written once here, before Check forks the tests, in
 * the first of $BD_TEST_DIR, the current directory, $TMPDIR and /tmp where
 * it opens with O_DIRECT (tmpfs may refuse O_DIRECT with EINVAL), else the
 * first writable one.
 */
int it_run(Suite *s)
{
	const char *dirs[] = { getenv("BD_TEST_DIR"), ".", getenv("TMPDIR"), "/tmp" };
	struct io_uring ring;
	SRunner *sr;
	int failed, r;

	it_data = malloc(FILE_SIZE);
	if (!it_data)
		return EXIT_FAILURE;
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		bool direct = false;
		int fd;

		if (!dirs[i] || !*dirs[i])
			continue;
		fd = make_file(dirs[i], &direct, it_direct_why, sizeof(it_direct_why));
		if (fd < 0)
			continue;
		if (it_fd < 0 || (direct && !it_direct_ok)) {
			if (it_fd >= 0)
				close(it_fd);
			it_fd = fd;
			it_direct_ok = direct;
		} else {
			close(fd);
		}
		if (it_direct_ok)
			break;
	}
	if (it_fd < 0) {
		fprintf(stderr, "%s: cannot create a data file anywhere\n",
			program_invocation_short_name);
		return EXIT_FAILURE;
	}

	/*
	 * Probe the kernel with liburing directly, not through bd_io: the
	 * io_uring cases skip only where the kernel refuses a plain ring, so an
	 * engine whose own setup is broken fails them instead of skipping.
	 */
	r = io_uring_queue_init(64, &ring, 0);
	it_uring_ok = r == 0;
	if (it_uring_ok)
		io_uring_queue_exit(&ring);
	else
		snprintf(it_uring_why, sizeof(it_uring_why), "io_uring_queue_init: %s",
			 strerror(-r));
	printf("%s: io_uring %s%s; O_DIRECT %s%s\n", program_invocation_short_name,
	       it_uring_ok ? "available" : "unavailable, ", it_uring_ok ? "" : it_uring_why,
	       it_direct_ok ? "available" : "unavailable, ", it_direct_ok ? "" : it_direct_why);
	fflush(stdout);

	sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	close(it_fd);
	free(it_data);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
