/* SPDX-License-Identifier: MIT */
/*
 * test-io-direct.c - daemon/pipeline/io.c with O_DIRECT, and the memory
 * reads land in: aligned random reads through a plain and a registered
 * buffer, the tail block across EOF, the alignment statx reports
 * (bd_io_dio_align), and daemon/pipeline/pages.c's buffers mapped for
 * transparent huge pages, normal pages or hugetlb, checked against what
 * the kernel's settings allow.
 *
 * Its own program because these depend on the file system and the
 * kernel's settings more than on the engine: the O_DIRECT case skips,
 * saying why, where the data file of io-testlib.c does not open with
 * O_DIRECT.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>

#include "io-testlib.h"
#include "pages.h"

/* ---- helpers ------------------------------------------------------------ */

static int open_direct(void)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/self/fd/%d", it_fd);
	return open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
}

/* ---- O_DIRECT --------------------------------------------------------- */

START_TEST(test_direct)
{
	enum { N = 16 };
	bd_io_engine e = it_engines[_i];
	bool fixed = true;
	uint32_t mem_align = 0, off_align = 0;
	uint64_t seed = 99 + (uint64_t)_i;
	bd_io_req reqs[N];
	size_t slot;
	uint8_t *bufs;
	struct iovec iov;
	bd_io *io;
	int fd, r;

	if (it_skip_engine(e))
		return;
	if (!it_direct_ok) {
		printf("SKIP O_DIRECT case: %s\n", it_direct_why);
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
	io = it_engine_new(e, N);
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
			uint64_t off = (it_rnd(&seed) % (blocks + 1)) * off_align;
			uint32_t len = (1 + (uint32_t)(it_rnd(&seed) % (MAX_LEN / off_align))) * off_align;

			it_req_init(&reqs[i], fd, off, len, bufs + (size_t)i * slot);
			/* Half the rounds through the fixed buffer. */
			reqs[i].buf_index = fixed && round % 2 ? 0 : -1;
			ck_assert_int_eq(bd_io_submit(io, &reqs[i]), 0);
		}
		it_reap_batch(io, reqs, N);
	}

	/* The tail block: an aligned read across EOF gives the short count. */
	it_req_init(&reqs[0], fd, FILE_SIZE / off_align * off_align, off_align * 2, bufs);
	reqs[0].buf_index = fixed ? 0 : -1;
	it_read_one(io, &reqs[0]);
	ck_assert_int_eq(reqs[0].result, (int)(FILE_SIZE % off_align));
	ck_assert(it_req_matches(&reqs[0]));

	bd_io_free(io);
	free(bufs);
	close(fd);
}
END_TEST

START_TEST(test_dio_align)
{
	uint32_t m = 0, o = 0;
	int r;

	r = bd_io_dio_align(it_fd, &m, &o);
	ck_assert(r == 0 || r == -EOPNOTSUPP);
	if (r == 0) {
		printf("DIO alignment: memory %u, offset %u\n", m, o);
		ck_assert_uint_ne(m, 0);
		ck_assert_uint_eq(m & (m - 1), 0);
		ck_assert_uint_ne(o, 0);
		ck_assert_uint_eq(o & (o - 1), 0);
	}
	ck_assert_int_eq(bd_io_dio_align(it_fd, NULL, NULL), r);
	m = o = 7;
	ck_assert_int_eq(bd_io_dio_align(-1, &m, &o), -EBADF);
	ck_assert_uint_eq(m, 7);
	ck_assert_uint_eq(o, 7);
}
END_TEST

/* ---- pages ------------------------------------------------------------- */

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

static Suite *io_direct_suite(void)
{
	Suite *s = suite_create("io-direct");

	it_add(s, "direct", test_direct, 2);
	it_add(s, "dio_align", test_dio_align, 1);
	it_add(s, "pages", test_pages, 1);
	return s;
}

int main(void)
{
	return it_run(io_direct_suite());
}
