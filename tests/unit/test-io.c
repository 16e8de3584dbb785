/* SPDX-License-Identifier: MIT */
/*
 * test-io.c - the Check suite for daemon/pipeline/io.c, the block-read engine.
 *
 * Every read is checked byte for byte against pread(2) of the same range
 * of one file of pseudo-random data, written once in main() before Check
 * forks the tests. Most cases run twice (a loop test: 0 = io_uring,
 * 1 = pread) so both engines are held to the same contract; the io_uring
 * run skips, saying why, where the kernel refuses io_uring (probed with
 * liburing itself, so a broken engine setup fails rather than skips).
 *
 * The file is created in $BD_TEST_DIR, the current directory, $TMPDIR or
 * /tmp, the first where it can be opened with O_DIRECT (tmpfs may refuse
 * O_DIRECT with EINVAL), else the first writable one. It is unlinked at
 * once; tests reopen it through /proc/self/fd when they need other flags.
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
#include <sys/stat.h>
#include <unistd.h>

#include <check.h>
#include <liburing.h>

#include "io.h"
#include "pages.h"

#define FILE_SIZE ((4u << 20) + 1234u)   /* not a multiple of any block */
#define MAX_LEN (256u << 10)

static int g_fd = -1;                     /* the data file, read-only */
static uint8_t *g_data;                   /* what was written to it */
static bool g_uring_ok;
static char g_uring_why[128];
static bool g_direct_ok;
static char g_direct_why[128];

/* ---- helpers ------------------------------------------------------------ */

static uint64_t rnd(uint64_t *s)
{
	/* xorshift64*: a fixed sequence whatever the libc. */
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dull;
}

static const bd_io_engine engines[] = { BD_IO_URING, BD_IO_PREAD };

static bool skip_engine(bd_io_engine e)
{
	if (e == BD_IO_URING && !g_uring_ok) {
		printf("SKIP io_uring case: %s\n", g_uring_why);
		fflush(stdout);
		return true;
	}
	return false;
}

/* A new engine of the kind @e, checked to be what was asked. */
static bd_io *engine_new(bd_io_engine e, unsigned depth)
{
	bd_io_opts o = { .engine = e, .queue_depth = depth };
	bd_io *io = NULL;

	ck_assert_int_eq(bd_io_new(&o, &io), 0);
	ck_assert_ptr_nonnull(io);
	ck_assert_int_eq(bd_io_engine_of(io), e);
	return io;
}

static bd_io *engine_new_opts(const bd_io_opts *o)
{
	bd_io *io = NULL;

	ck_assert_int_eq(bd_io_new(o, &io), 0);
	ck_assert_int_eq(bd_io_engine_of(io), o->engine);
	return io;
}

static void req_init(bd_io_req *req, int fd, uint64_t off, uint32_t len,
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
 * same range (and what main() wrote there). Returns false instead of
 * asserting so worker threads can use it too.
 */
static bool req_matches(const bd_io_req *req)
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
	n = pread(g_fd, ref, want, (off_t)req->offset);
	ok = n == (ssize_t)want && memcmp(ref, req->buf, want) == 0 &&
	     memcmp(g_data + req->offset, req->buf, want) == 0;
	free(ref);
	return ok;
}

/* Submits @req, waits for it alone, and returns it. */
static bd_io_req *read_one(bd_io *io, bd_io_req *req)
{
	bd_io_req *done = NULL;

	ck_assert_int_eq(bd_io_submit(io, req), 0);
	ck_assert_int_eq(bd_io_wait(io, &done), 0);
	ck_assert_ptr_eq(done, req);
	ck_assert_uint_eq(bd_io_inflight(io), 0);
	return done;
}

/* Waits for @n requests of @reqs, each exactly once, and checks them. */
static void reap_batch(bd_io *io, bd_io_req *reqs, unsigned n)
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
		ck_assert_msg(req_matches(done),
			      "req %zu off %" PRIu64 " len %u: result %d",
			      k, done->offset, done->len, done->result);
	}
	ck_assert_uint_eq(bd_io_inflight(io), 0);
	done_sentinel = &sentinel;
	ck_assert_int_eq(bd_io_wait(io, &done_sentinel), -ENOENT);
	ck_assert_ptr_eq(done_sentinel, &sentinel);
}

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

static int open_direct(void)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/self/fd/%d", g_fd);
	return open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
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
			 (g_uring_ok ? BD_IO_URING : BD_IO_PREAD));
	f = bd_io_setup_flags(io);
	printf("AUTO engine: %s, setup flags 0x%x\n",
	       bd_io_engine_name(bd_io_engine_of(io)), f);
	if (g_uring_ok) {
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
	req_init(&req, g_fd, 12345, sizeof(buf), buf);
	ck_assert(req_matches(read_one(io, &req)));
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
	bd_io *io = engine_new(BD_IO_PREAD, 8);
	uint8_t buf[100];
	bd_io_req req;

	req_init(&req, g_fd, 7, sizeof(buf), buf);
	ck_assert(req_matches(read_one(io, &req)));
	ck_assert_int_eq(count_uring_fds(), before);
	ck_assert_uint_eq(bd_io_setup_flags(io), 0);
	bd_io_free(io);

	if (g_uring_ok) {
		/* The probe above is meaningful: a ring does show up. */
		io = engine_new(BD_IO_URING, 8);
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
	bd_io_engine e = engines[_i];
	uint64_t seed = 0x1234567 + (uint64_t)_i;
	bd_io_req reqs[64];
	uint8_t *bufs;
	bd_io *io;
	unsigned batch, i;

	if (skip_engine(e))
		return;
	io = engine_new(e, 64);
	bufs = malloc(64 * (size_t)MAX_LEN);
	ck_assert_ptr_nonnull(bufs);
	for (batch = 0; batch < 12; batch++) {
		unsigned n = 1 + (unsigned)(rnd(&seed) % 64);

		for (i = 0; i < n; i++) {
			uint64_t off = rnd(&seed) % FILE_SIZE;
			uint32_t len = 1 + (uint32_t)(rnd(&seed) % MAX_LEN);

			req_init(&reqs[i], g_fd, off, len, bufs + i * (size_t)MAX_LEN);
			ck_assert_int_eq(bd_io_submit(io, &reqs[i]), 0);
		}
		ck_assert_uint_eq(bd_io_inflight(io), n);
		reap_batch(io, reqs, n);
	}
	free(bufs);
	bd_io_free(io);
}
END_TEST

START_TEST(test_many_in_flight)
{
	enum { N = 200, DEPTH = 64, LEN = 16384 };
	bd_io_engine e = engines[_i];
	bd_io_req reqs[N];
	bool seen[N] = { false };
	uint8_t *bufs;
	unsigned next = 0, done = 0;
	bd_io *io;

	if (skip_engine(e))
		return;
	io = engine_new(e, DEPTH);
	bufs = malloc((size_t)N * LEN);
	ck_assert_ptr_nonnull(bufs);
	for (unsigned i = 0; i < N; i++)
		req_init(&reqs[i], g_fd, (uint64_t)i * 20000 + 3, LEN,
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
		ck_assert(req_matches(r));
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
	bd_io_engine e = engines[_i];
	uint8_t buf[8192];
	bd_io_req req;
	bd_io *io;

	if (skip_engine(e))
		return;
	io = engine_new(e, 4);

	/* Across EOF: the short count, and the bytes up to EOF. */
	req_init(&req, g_fd, FILE_SIZE - 100, sizeof(buf), buf);
	read_one(io, &req);
	ck_assert_int_eq(req.result, 100);
	ck_assert(req_matches(&req));

	/* At EOF and far beyond it: 0. */
	req_init(&req, g_fd, FILE_SIZE, sizeof(buf), buf);
	ck_assert_int_eq(read_one(io, &req)->result, 0);
	req_init(&req, g_fd, (uint64_t)FILE_SIZE * 1000, sizeof(buf), buf);
	ck_assert_int_eq(read_one(io, &req)->result, 0);

	/* Ending exactly at EOF: all of it. */
	req_init(&req, g_fd, FILE_SIZE - sizeof(buf), sizeof(buf), buf);
	ck_assert_int_eq(read_one(io, &req)->result, (int)sizeof(buf));
	ck_assert(req_matches(&req));

	/* Zero length: 0, buffer untouched, NULL buffer allowed. */
	req_init(&req, g_fd, 0, 0, NULL);
	ck_assert_int_eq(read_one(io, &req)->result, 0);
	bd_io_free(io);
}
END_TEST

START_TEST(test_bad_fd)
{
	bd_io_engine e = engines[_i];
	uint8_t buf[3][4096];
	bd_io_req reqs[3], *r;
	int closed_fd, wo_fd;
	bd_io *io;

	if (skip_engine(e))
		return;
	io = engine_new(e, 8);

	req_init(&reqs[0], -1, 0, sizeof(buf[0]), buf[0]);
	ck_assert_int_eq(read_one(io, &reqs[0])->result, -EBADF);

	closed_fd = dup(g_fd);
	ck_assert_int_ge(closed_fd, 0);
	close(closed_fd);
	req_init(&reqs[0], closed_fd, 0, sizeof(buf[0]), buf[0]);
	ck_assert_int_eq(read_one(io, &reqs[0])->result, -EBADF);

	/* Open, but not for reading. */
	wo_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	ck_assert_int_ge(wo_fd, 0);
	req_init(&reqs[0], wo_fd, 0, sizeof(buf[0]), buf[0]);
	ck_assert_int_eq(read_one(io, &reqs[0])->result, -EBADF);
	close(wo_fd);

	/* A bad fd in the middle of a batch fails alone. */
	req_init(&reqs[0], g_fd, 1000, sizeof(buf[0]), buf[0]);
	req_init(&reqs[1], -1, 1000, sizeof(buf[1]), buf[1]);
	req_init(&reqs[2], g_fd, 99999, sizeof(buf[2]), buf[2]);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(bd_io_submit(io, &reqs[i]), 0);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(bd_io_wait(io, &r), 0);
	ck_assert(req_matches(&reqs[0]));
	ck_assert_int_eq(reqs[1].result, -EBADF);
	ck_assert(req_matches(&reqs[2]));
	bd_io_free(io);
}
END_TEST

START_TEST(test_invalid_requests)
{
	bd_io_engine e = engines[_i];
	uint8_t buf[16];
	bd_io_req req, *r = NULL;
	bd_io *io;

	if (skip_engine(e))
		return;
	io = engine_new(e, 4);
	ck_assert_int_eq(bd_io_wait(io, &r), -ENOENT);
	ck_assert_ptr_null(r);

	ck_assert_int_eq(bd_io_submit(io, NULL), -EINVAL);
	req_init(&req, g_fd, 0, 10, NULL);
	ck_assert_int_eq(bd_io_submit(io, &req), -EINVAL);
	req_init(&req, g_fd, 0, (uint32_t)INT32_MAX + 1u, buf);
	ck_assert_int_eq(bd_io_submit(io, &req), -EINVAL);
	req_init(&req, g_fd, UINT64_MAX - 5, sizeof(buf), buf);
	ck_assert_int_eq(bd_io_submit(io, &req), -EINVAL);
	req_init(&req, g_fd, 0, sizeof(buf), buf);
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
	bd_io_engine e = engines[_i];
	uint8_t *mem, other[4096];
	struct iovec iov[2];
	bd_io_req reqs[4];
	bd_io *io;

	if (skip_engine(e))
		return;
	io = engine_new(e, 8);
	mem = malloc(2 * HALF);
	ck_assert_ptr_nonnull(mem);
	iov[0] = (struct iovec){ mem, HALF };
	iov[1] = (struct iovec){ mem + HALF, HALF };

	ck_assert_int_eq(bd_io_register(io, NULL, 1), -EINVAL);
	ck_assert_int_eq(bd_io_register(io, iov, 0), -EINVAL);
	ck_assert_int_eq(bd_io_register(io, iov, 2), 0);
	ck_assert_int_eq(bd_io_register(io, iov, 2), -EBUSY);

	/* Inside buffer 0, the whole of buffer 1, and inside 1 at an odd spot. */
	req_init(&reqs[0], g_fd, 4096, 100000, mem + 5);
	reqs[0].buf_index = 0;
	req_init(&reqs[1], g_fd, 777777, HALF, mem + HALF);
	reqs[1].buf_index = 1;
	/* Lies in buffer 0 but names buffer 1: read as a plain read. */
	req_init(&reqs[2], g_fd, 3000000, 4096, mem + HALF - 4096);
	reqs[2].buf_index = 1;
	/* Not registered memory at all, buf_index -1. */
	req_init(&reqs[3], g_fd, 1, sizeof(other), other);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(bd_io_submit(io, &reqs[i]), 0);
	reap_batch(io, reqs, 4);

	/*
	 * Ending exactly at the end of a buffer; crossing EOF inside one;
	 * starting in buffer 0 and running past its end (a fixed read there
	 * would fail with -EFAULT, so it must be a plain read).
	 */
	req_init(&reqs[0], g_fd, 0, 4096, mem + HALF - 4096);
	reqs[0].buf_index = 0;
	req_init(&reqs[1], g_fd, FILE_SIZE - 10, 4096, mem + HALF);
	reqs[1].buf_index = 1;
	/* Lies in buffer 1 but names buffer 0: a plain read again. */
	req_init(&reqs[2], g_fd, 2222222, 4096, mem + HALF + 8192);
	reqs[2].buf_index = 0;
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(bd_io_submit(io, &reqs[i]), 0);
	reap_batch(io, reqs, 3);
	ck_assert_int_eq(reqs[1].result, 10);
	/* (alone: its buffer overlaps both of the above) */
	req_init(&reqs[0], g_fd, 55555, 4096, mem + HALF - 100);
	reqs[0].buf_index = 0;
	ck_assert(req_matches(read_one(io, &reqs[0])));

	req_init(&reqs[0], g_fd, 0, 16, mem);
	reqs[0].buf_index = 2;
	ck_assert_int_eq(bd_io_submit(io, &reqs[0]), -EINVAL);
	bd_io_free(io);
	free(mem);
}
END_TEST

/* ---- O_DIRECT --------------------------------------------------------- */

START_TEST(test_direct)
{
	enum { N = 16 };
	bd_io_engine e = engines[_i];
	bool fixed = true;
	uint32_t mem_align = 0, off_align = 0;
	uint64_t seed = 99 + (uint64_t)_i;
	bd_io_req reqs[N];
	size_t slot;
	uint8_t *bufs;
	struct iovec iov;
	bd_io *io;
	int fd, r;

	if (skip_engine(e))
		return;
	if (!g_direct_ok) {
		printf("SKIP O_DIRECT case: %s\n", g_direct_why);
		return;
	}
	fd = open_direct();
	ck_assert_int_ge(fd, 0);
	r = bd_io_dio_align(fd, &mem_align, &off_align);
	if (r == -EOPNOTSUPP) {
		printf("SKIP O_DIRECT case: statx says no direct I/O here\n");
		close(fd);
		return;
	}
	ck_assert_int_eq(r, 0);
	ck_assert_uint_le(off_align, 65536);
	/* Room for the largest read plus one block; a multiple of 64 KiB. */
	slot = MAX_LEN + 65536;
	ck_assert_int_eq(posix_memalign((void **)&bufs,
					mem_align < 4096 ? 4096 : mem_align,
					N * slot), 0);
	io = engine_new(e, N);
	iov = (struct iovec){ bufs, N * slot };
	r = bd_io_register(io, &iov, 1);
	if (r == -ENOMEM) {
		/* RLIMIT_MEMLOCK too small for the fixed rounds; plain ones still run. */
		printf("SKIP O_DIRECT fixed-buffer rounds: register: %s\n",
		       strerror(-r));
		fixed = false;
	} else {
		ck_assert_int_eq(r, 0);
	}

	for (int round = 0; round < 4; round++) {
		for (int i = 0; i < N; i++) {
			uint64_t blocks = FILE_SIZE / off_align;
			uint64_t off = (rnd(&seed) % (blocks + 1)) * off_align;
			uint32_t len = (1 + (uint32_t)(rnd(&seed) % (MAX_LEN / off_align))) * off_align;

			req_init(&reqs[i], fd, off, len, bufs + (size_t)i * slot);
			/* Half the rounds through the fixed buffer. */
			reqs[i].buf_index = fixed && round % 2 ? 0 : -1;
			ck_assert_int_eq(bd_io_submit(io, &reqs[i]), 0);
		}
		reap_batch(io, reqs, N);
	}

	/* The tail block: an aligned read across EOF gives the short count. */
	req_init(&reqs[0], fd, FILE_SIZE / off_align * off_align, off_align * 2, bufs);
	reqs[0].buf_index = fixed ? 0 : -1;
	read_one(io, &reqs[0]);
	ck_assert_int_eq(reqs[0].result, (int)(FILE_SIZE % off_align));
	ck_assert(req_matches(&reqs[0]));

	bd_io_free(io);
	free(bufs);
	close(fd);
}
END_TEST

START_TEST(test_dio_align)
{
	uint32_t m = 0, o = 0;
	int r;

	r = bd_io_dio_align(g_fd, &m, &o);
	ck_assert(r == 0 || r == -EOPNOTSUPP);
	if (r == 0) {
		printf("DIO alignment: memory %u, offset %u\n", m, o);
		ck_assert_uint_ne(m, 0);
		ck_assert_uint_eq(m & (m - 1), 0);
		ck_assert_uint_ne(o, 0);
		ck_assert_uint_eq(o & (o - 1), 0);
	}
	ck_assert_int_eq(bd_io_dio_align(g_fd, NULL, NULL), r);
	m = o = 7;
	ck_assert_int_eq(bd_io_dio_align(-1, &m, &o), -EBADF);
	ck_assert_uint_eq(m, 7);
	ck_assert_uint_eq(o, 7);
}
END_TEST

/* ---- the resubmission paths, through the test hooks --------------------- */

START_TEST(test_short_reads_resubmitted)
{
	bd_io_engine e = engines[_i];
	bd_io_opts o = { .engine = e, .queue_depth = 16, .fault_max_read = 1000 };
	bd_io_req reqs[16];
	struct iovec iov;
	uint8_t *bufs;
	bd_io *io;

	if (skip_engine(e))
		return;
	io = engine_new_opts(&o);
	bufs = malloc(16 * 65536);
	ck_assert_ptr_nonnull(bufs);
	iov = (struct iovec){ bufs, 16 * 65536 };
	ck_assert_int_eq(bd_io_register(io, &iov, 1), 0);
	for (int i = 0; i < 16; i++) {
		req_init(&reqs[i], g_fd, (uint64_t)i * 100003, 65536 - (uint32_t)i,
			 bufs + (size_t)i * 65536);
		reqs[i].buf_index = i % 2 ? 0 : -1;
		ck_assert_int_eq(bd_io_submit(io, &reqs[i]), 0);
	}
	reap_batch(io, reqs, 16);

	/* Pieces of 1000 up to EOF, then the 0-byte read ends it. */
	req_init(&reqs[0], g_fd, FILE_SIZE - 4500, 65536, bufs);
	read_one(io, &reqs[0]);
	ck_assert_int_eq(reqs[0].result, 4500);
	ck_assert(req_matches(&reqs[0]));
	bd_io_free(io);
	free(bufs);
}
END_TEST

START_TEST(test_transient_errors_retried)
{
	static const int errs[] = { EAGAIN, EINTR };
	bd_io_engine e = engines[_i];
	bd_io_req reqs[8];
	uint8_t *bufs;

	if (skip_engine(e))
		return;
	bufs = malloc(8 * 50000);
	ck_assert_ptr_nonnull(bufs);
	for (size_t k = 0; k < 2; k++) {
		bd_io_opts o = { .engine = e, .queue_depth = 8,
				 .fault_max_read = 7000, .fault_every = 3,
				 .fault_errno = errs[k] };
		bd_io *io = engine_new_opts(&o);

		for (int i = 0; i < 8; i++) {
			req_init(&reqs[i], g_fd, (uint64_t)i * 333333, 50000,
				 bufs + (size_t)i * 50000);
			ck_assert_int_eq(bd_io_submit(io, &reqs[i]), 0);
		}
		reap_batch(io, reqs, 8);
		bd_io_free(io);
	}
	free(bufs);
}
END_TEST

START_TEST(test_errors_complete_request)
{
	bd_io_engine e = engines[_i];
	bd_io_opts o = { .engine = e, .queue_depth = 4,
			 .fault_every = 2, .fault_errno = EIO };
	uint8_t buf[4096];
	bd_io_req req;
	bd_io *io;

	if (skip_engine(e))
		return;
	/* Raw completion 1 is real, 2 is -EIO, 3 real, 4 -EIO. */
	io = engine_new_opts(&o);
	req_init(&req, g_fd, 0, sizeof(buf), buf);
	ck_assert(req_matches(read_one(io, &req)));
	req_init(&req, g_fd, 0, sizeof(buf), buf);
	ck_assert_int_eq(read_one(io, &req)->result, -EIO);
	req_init(&req, g_fd, 8192, sizeof(buf), buf);
	ck_assert(req_matches(read_one(io, &req)));
	bd_io_free(io);

	/* -EAGAIN forever: retried a bounded number of times, then returned. */
	o.fault_every = 1;
	o.fault_errno = EAGAIN;
	io = engine_new_opts(&o);
	req_init(&req, g_fd, 0, sizeof(buf), buf);
	ck_assert_int_eq(read_one(io, &req)->result, -EAGAIN);
	bd_io_free(io);
}
END_TEST

START_TEST(test_free_drains)
{
	bd_io_engine e = engines[_i];
	bd_io_req reqs[16];
	uint8_t *bufs;
	bd_io *io;

	if (skip_engine(e))
		return;
	io = engine_new(e, 16);
	bufs = calloc(16, 65536);
	ck_assert_ptr_nonnull(bufs);
	for (int i = 0; i < 16; i++) {
		req_init(&reqs[i], g_fd, (uint64_t)i * 65536, 65536,
			 bufs + (size_t)i * 65536);
		ck_assert_int_eq(bd_io_submit(io, &reqs[i]), 0);
	}
	/* Freed with everything in flight: every read has landed after. */
	bd_io_free(io);
	for (int i = 0; i < 16; i++)
		ck_assert(req_matches(&reqs[i]));
	free(bufs);
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
			req_init(&reqs[i], g_fd, rnd(&w->seed) % FILE_SIZE,
				 1 + (uint32_t)(rnd(&w->seed) % 65536),
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
			if (!req_matches(r))
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

	if (!g_uring_ok) {
		printf("two_threads: pread only: %s\n", g_uring_why);
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

/* ---- suite and setup ----------------------------------------------------- */

/*
 * Polling without waiting: queued reads reach the kernel and come back,
 * each exactly once and right, through bd_io_poll alone; nothing in
 * flight is -ENOENT.
 */
START_TEST(test_poll)
{
	bd_io_engine e = engines[_i];
	uint64_t seed = 0x5eed + (uint64_t)_i;
	bool seen[32] = { false };
	bd_io_req reqs[32], *done = NULL;
	unsigned got = 0, polls = 0;
	uint8_t *bufs;
	bd_io *io;

	if (skip_engine(e))
		return;
	io = engine_new(e, 32);
	ck_assert_int_eq(bd_io_poll(io, &done), -ENOENT);
	bufs = malloc(32 * (size_t)MAX_LEN);
	ck_assert_ptr_nonnull(bufs);
	for (unsigned i = 0; i < 32; i++) {
		req_init(&reqs[i], g_fd, rnd(&seed) % FILE_SIZE, 1 + (uint32_t)(rnd(&seed) % MAX_LEN),
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
		ck_assert_msg(req_matches(done), "req %zu: result %d", k, done->result);
		got++;
	}
	ck_assert_uint_eq(bd_io_inflight(io), 0);
	ck_assert_int_eq(bd_io_poll(io, &done), -ENOENT);
	free(bufs);
	bd_io_free(io);
}
END_TEST

/* A THP setting's selected word ("always", "madvise", "never", ...), or "" when unreadable. */
static void thp_mode(const char *file, char *buf, size_t len)
{
	char path[128], line[128] = "", *a, *b;
	FILE *f;

	snprintf(path, sizeof(path), "/sys/kernel/mm/transparent_hugepage/%s", file);
	f = fopen(path, "re");
	buf[0] = '\0';
	if (!f)
		return;
	if (fgets(line, sizeof(line), f) && (a = strchr(line, '[')) && (b = strchr(a, ']'))) {
		*b = '\0';
		snprintf(buf, len, "%s", a + 1);
	}
	fclose(f);
}

/*
 * Buffers mapped for huge pages: rounded to 2 MiB and aligned to it;
 * normal ones as asked; after faulting, smaps says what they got, within
 * what the kernel's THP setting allows; hugetlb falls back when none is
 * reserved.
 */
START_TEST(test_pages)
{
	size_t len;
	bd_pages mapped, got;
	char mode[32], defrag[32];
	uint8_t *p;

	thp_mode("enabled", mode, sizeof(mode));
	thp_mode("defrag", defrag, sizeof(defrag));
	p = bd_pages_map(3u << 20, BD_PAGES_THP, &len, &mapped);
	ck_assert_ptr_nonnull(p);
	ck_assert_uint_eq(len, 4u << 20);
	ck_assert_uint_eq((uintptr_t)p % BD_HUGE_PAGE, 0);
	/* Asked for THP where the kernel has it at all: the advice is taken whatever the mode. */
	if (mode[0])
		ck_assert_int_eq(mapped, BD_PAGES_THP);
	memset(p, 1, len);
	got = bd_pages_of(p, mapped);
	if (!strcmp(mode, "never"))
		ck_assert_int_eq(got, BD_PAGES_NORMAL);
	else if (mode[0] && strcmp(defrag, "never"))
		/* Advised and allowed to compact for it: the fault gets huge pages. */
		ck_assert_msg(got == BD_PAGES_THP || got == BD_PAGES_MIXED, "THP buffers got %s",
			      bd_pages_name(got));
	bd_pages_unmap(p, len);

	p = bd_pages_map(1u << 20, BD_PAGES_NORMAL, &len, &mapped);
	ck_assert_ptr_nonnull(p);
	ck_assert_uint_eq(len, 1u << 20);
	ck_assert_int_eq(mapped, BD_PAGES_NORMAL);
	memset(p, 1, len);
	/* Too small to hold a huge page, whatever the setting. */
	ck_assert_int_eq(bd_pages_of(p, mapped), BD_PAGES_NORMAL);
	bd_pages_unmap(p, len);

	p = bd_pages_map(2u << 20, BD_PAGES_HUGETLB, &len, &mapped);
	ck_assert_ptr_nonnull(p);
	ck_assert_msg(mapped == BD_PAGES_HUGETLB || mapped == BD_PAGES_NORMAL, "hugetlb gave %s",
		      bd_pages_name(mapped));
	memset(p, 1, len);
	ck_assert_int_eq(bd_pages_of(p, mapped), mapped);
	bd_pages_unmap(p, len);

	/* No mapping holds address 0: what was mapped stands. */
	ck_assert_int_eq(bd_pages_of(NULL, BD_PAGES_THP), BD_PAGES_THP);
	ck_assert_ptr_null(bd_pages_map(0, BD_PAGES_NORMAL, &len, &mapped));
	ck_assert_str_eq(bd_pages_name(BD_PAGES_MIXED), "mixed");
}
END_TEST

static Suite *io_suite(void)
{
	Suite *s = suite_create("io");
	TCase *tc;

#define ADD(name, fn) do { tc = tcase_create(name); tcase_add_test(tc, fn); \
		suite_add_tcase(s, tc); } while (0)
#define ADD2(name, fn) do { tc = tcase_create(name); \
		tcase_add_loop_test(tc, fn, 0, 2); suite_add_tcase(s, tc); } while (0)

	ADD("engine_names", test_engine_names);
	ADD("auto_picks_uring", test_auto_picks_uring);
	ADD("forced_setup_failure", test_forced_setup_failure);
	ADD("pread_never_touches_uring", test_pread_never_touches_uring);
	ADD("bad_options", test_bad_options);
	ADD2("random_reads", test_random_reads);
	ADD2("many_in_flight", test_many_in_flight);
	ADD2("eof", test_eof);
	ADD2("bad_fd", test_bad_fd);
	ADD2("invalid_requests", test_invalid_requests);
	ADD2("registered_buffers", test_registered_buffers);
	ADD2("direct", test_direct);
	ADD("dio_align", test_dio_align);
	ADD2("short_reads_resubmitted", test_short_reads_resubmitted);
	ADD2("transient_errors_retried", test_transient_errors_retried);
	ADD2("errors_complete_request", test_errors_complete_request);
	ADD2("free_drains", test_free_drains);
	ADD2("two_threads", test_two_threads);
	ADD2("poll", test_poll);
	ADD("pages", test_pages);
#undef ADD
#undef ADD2
	return s;
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
		uint64_t v = rnd(&seed);

		memcpy(g_data + i, &v, FILE_SIZE - i < 8 ? FILE_SIZE - i : 8);
	}
	while (done < FILE_SIZE) {
		ssize_t n = write(fd, g_data + done, FILE_SIZE - done);

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

int main(void)
{
	const char *dirs[] = { getenv("BD_TEST_DIR"), ".", getenv("TMPDIR"), "/tmp" };
	struct io_uring ring;
	SRunner *sr;
	int failed, r;

	g_data = malloc(FILE_SIZE);
	if (!g_data)
		return EXIT_FAILURE;
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		bool direct = false;
		int fd;

		if (!dirs[i] || !*dirs[i])
			continue;
		fd = make_file(dirs[i], &direct, g_direct_why, sizeof(g_direct_why));
		if (fd < 0)
			continue;
		if (g_fd < 0 || (direct && !g_direct_ok)) {
			if (g_fd >= 0)
				close(g_fd);
			g_fd = fd;
			g_direct_ok = direct;
		} else {
			close(fd);
		}
		if (g_direct_ok)
			break;
	}
	if (g_fd < 0) {
		fprintf(stderr, "test-io: cannot create a data file anywhere\n");
		return EXIT_FAILURE;
	}

	/*
	 * Probe the kernel with liburing directly, not through bd_io: the
	 * io_uring cases skip only where the kernel refuses a plain ring, so an
	 * engine whose own setup is broken fails them instead of skipping.
	 */
	r = io_uring_queue_init(64, &ring, 0);
	g_uring_ok = r == 0;
	if (g_uring_ok)
		io_uring_queue_exit(&ring);
	else
		snprintf(g_uring_why, sizeof(g_uring_why), "io_uring_queue_init: %s",
			 strerror(-r));
	printf("test-io: io_uring %s%s; O_DIRECT %s%s\n",
	       g_uring_ok ? "available" : "unavailable, ", g_uring_ok ? "" : g_uring_why,
	       g_direct_ok ? "available" : "unavailable, ", g_direct_ok ? "" : g_direct_why);
	fflush(stdout);

	sr = srunner_create(io_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	close(g_fd);
	free(g_data);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
