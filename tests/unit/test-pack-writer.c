/* SPDX-License-Identifier: MIT */
/*
 * test-pack-writer.c - the Check suite for lib/pack/pack_writer.c on its
 * own: blocks handed to bp_pack_writer one at a time, the offsets and
 * counts as they go in and the footer that describes the file; its
 * refusals (no blocks, sizes that do not add up or that wrap, a codec a
 * block cannot have, a block, sample or dictionary over its limit) with
 * nothing written for them; a descriptor it cannot write to.
 *
 * The other pack suites use the writer to make their packs; this one
 * checks what it promises. Its scratch directories and dictionary are
 * pack-file-fixture.c's, as for test-pack-file.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <check.h>
#include <xxhash.h>

#include "pack-file-fixture.h"
#include "pack-testlib.h"
#include "pack_file.h"
#include "pack_writer.h"

/* ---- writer ----------------------------------------------------------------- */

/* A raw block of n bytes of data. */
static bp_pack_encoded raw_block(const uint8_t *data, uint64_t n)
{
	return (bp_pack_encoded){
		.stored = data,
		.stored_size = n,
		.stored_hash = XXH3_64bits(data, n),
		.raw_hash = XXH3_64bits(data, n),
		.codec = BP_CODEC_RAW,
	};
}

START_TEST(test_writer_no_blocks)
{
	int fd = memfd_create("w", MFD_CLOEXEC);
	bp_pack_writer *w;
	bp_pack_footer f;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bp_pack_writer_new(fd, NULL, 0, &w), 0);
	ck_assert_uint_eq(bp_pack_writer_offset(w), BP_PACK_HEADER_SIZE);
	ck_assert_uint_eq(bp_pack_writer_samples(w), 0);
	ck_assert_int_eq(bp_pack_writer_finish(w, &f), -ENODATA);
	bp_pack_writer_free(w);
	bp_pack_writer_free(NULL);
	close(fd);
}
END_TEST

START_TEST(test_writer_bad_sizes)
{
	static const uint8_t data[100] = { 1, 2, 3 };
	const uint64_t sizes[] = { 40, 50, 10 };
	const uint64_t short_sizes[] = { 40, 50, 9 };
	const uint64_t long_sizes[] = { 40, 50, 11 };
	const uint64_t wrap_sizes[] = { UINT64_MAX, 101 };
	bp_pack_encoded enc = raw_block(data, sizeof(data)), bad;
	int fd = memfd_create("w", MFD_CLOEXEC);
	bp_pack_writer *w;

	ck_assert_int_eq(bp_pack_writer_new(fd, NULL, 0, &w), 0);
	ck_assert_int_eq(bp_pack_writer_add(w, &enc, 100, short_sizes, 3), -EINVAL);
	ck_assert_int_eq(bp_pack_writer_add(w, &enc, 100, long_sizes, 3), -EINVAL);
	ck_assert_int_eq(bp_pack_writer_add(w, &enc, 100, sizes, 2), -EINVAL);
	/* Sizes whose sum wraps to 100: the first is over the sample limit (-E2BIG). */
	ck_assert_uint_eq(wrap_sizes[0] + wrap_sizes[1], 100);
	ck_assert_int_eq(bp_pack_writer_add(w, &enc, 100, wrap_sizes, 2), -E2BIG);
	/* Nothing was written for the refused blocks. */
	ck_assert_uint_eq(bp_pack_writer_offset(w), BP_PACK_HEADER_SIZE);
	ck_assert_uint_eq(bp_pack_writer_samples(w), 0);
	bp_pack_writer_free(w);

	/* A raw block whose stored size is not its raw size. */
	ck_assert_int_eq(bp_pack_writer_new(fd, NULL, 0, &w), 0);
	bad = raw_block(data, 99);
	ck_assert_int_eq(bp_pack_writer_add(w, &bad, 100, sizes, 3), -EINVAL);
	bp_pack_writer_free(w);

	/* A dictionary block for a shard without a dictionary; an unknown codec. */
	ck_assert_int_eq(bp_pack_writer_new(fd, NULL, 0, &w), 0);
	bad = raw_block(data, 50);
	bad.codec = BP_CODEC_ZSTD_DICT;
	ck_assert_int_eq(bp_pack_writer_add(w, &bad, 100, sizes, 3), -EINVAL);
	bad.codec = 7;
	ck_assert_int_eq(bp_pack_writer_add(w, &bad, 100, sizes, 3), -EINVAL);
	bp_pack_writer_free(w);

	/* A compressed block that did not shrink. */
	ck_assert_int_eq(bp_pack_writer_new(fd, NULL, 0, &w), 0);
	bad = raw_block(data, 100);
	bad.codec = BP_CODEC_ZSTD;
	ck_assert_int_eq(bp_pack_writer_add(w, &bad, 100, sizes, 3), -EINVAL);
	bp_pack_writer_free(w);
	close(fd);
}
END_TEST

START_TEST(test_writer_limits)
{
	static const uint8_t data[16];
	const uint64_t big[] = { BP_PACK_MAX_SAMPLE + 1 };
	const uint64_t two[] = { BP_PACK_MAX_SAMPLE, 1 };
	bp_pack_encoded enc = raw_block(data, 16);
	int fd = memfd_create("w", MFD_CLOEXEC);
	bp_pack_writer *w;
	uint8_t *dict;

	/* Refused before any byte is read: the block is not really this big. */
	enc.codec = BP_CODEC_ZSTD;
	ck_assert_int_eq(bp_pack_writer_new(fd, NULL, 0, &w), 0);
	ck_assert_int_eq(bp_pack_writer_add(w, &enc, BP_PACK_MAX_SAMPLE + 1, big, 1), -E2BIG);
	/* A block over the limit made of samples within it. */
	ck_assert_int_eq(bp_pack_writer_add(w, &enc, BP_PACK_MAX_BLOCK + 1, two, 2), -E2BIG);
	ck_assert_uint_eq(bp_pack_writer_offset(w), BP_PACK_HEADER_SIZE);
	bp_pack_writer_free(w);

	dict = mmap(NULL, BP_PACK_MAX_DICT + 1, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(dict, MAP_FAILED);
	ck_assert_int_eq(bp_pack_writer_new(fd, dict, BP_PACK_MAX_DICT + 1, &w), -E2BIG);
	munmap(dict, BP_PACK_MAX_DICT + 1);
	close(fd);
}
END_TEST

/* Offsets and counts as blocks go in; the footer describes the file. */
START_TEST(test_writer_stream)
{
	static const uint8_t a[30] = { 'a' }, b[12] = { 'b' };
	const uint64_t sa[] = { 10, 0, 20 }, sb[] = { 12 };
	bp_pack_encoded ea = raw_block(a, sizeof(a)), eb = raw_block(b, sizeof(b));
	int fd = memfd_create("w", MFD_CLOEXEC);
	bp_pack_writer *w;
	bp_pack_footer f;
	uint8_t *buf;
	size_t len;
	bp_pack_view v;

	ck_assert_int_eq(bp_pack_writer_new(fd, g_dict, g_dict_size, &w), 0);
	ck_assert_uint_eq(bp_pack_writer_offset(w), BP_PACK_HEADER_SIZE + g_dict_size);
	ck_assert_int_eq(bp_pack_writer_add(w, &ea, 30, sa, 3), 0);
	ck_assert_uint_eq(bp_pack_writer_offset(w), BP_PACK_HEADER_SIZE + g_dict_size + 30);
	ck_assert_uint_eq(bp_pack_writer_samples(w), 3);
	ck_assert_int_eq(bp_pack_writer_add(w, &eb, 12, sb, 1), 0);
	ck_assert_uint_eq(bp_pack_writer_offset(w), BP_PACK_HEADER_SIZE + g_dict_size + 42);
	ck_assert_uint_eq(bp_pack_writer_samples(w), 4);
	ck_assert_int_eq(bp_pack_writer_finish(w, &f), 0);
	bp_pack_writer_free(w);

	ck_assert_uint_eq(f.index_offset, BP_PACK_HEADER_SIZE + g_dict_size + 42);
	ck_assert_uint_eq(f.block_count, 2);
	ck_assert_uint_eq(f.sample_count, 4);
	ck_assert_uint_eq(f.raw_bytes, 42);
	ck_assert_uint_eq(f.max_sample, 20);
	ck_assert_uint_eq(f.index_size, 2 * BP_PACK_BLOCK_ENTRY + 4 * BP_PACK_SAMPLE_ENTRY);

	ck_assert_int_eq(pt_read_fd(fd, &buf, &len), 0);
	ck_assert_uint_eq(len, f.index_offset + f.index_size + BP_PACK_FOOTER_SIZE);
	ck_assert_int_eq(bp_pack_parse(buf, len, &v, NULL), 0);
	ck_assert_uint_eq(v.footer.fingerprint, f.fingerprint);
	ck_assert_uint_eq(v.footer.checksum, f.checksum);
	ck_assert_mem_eq(buf + BP_PACK_HEADER_SIZE + g_dict_size, a, 30);
	ck_assert_mem_eq(buf + BP_PACK_HEADER_SIZE + g_dict_size + 30, b, 12);
	free(buf);
	close(fd);
}
END_TEST

START_TEST(test_writer_write_error)
{
	char dir[PATH_MAX], path[PATH_MAX];
	bp_pack_writer *w = NULL;
	int fd;

	new_dir(dir);
	join(path, dir, "ro.bpk");
	write_file(dir, "ro.bpk", "", 0);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bp_pack_writer_new(fd, NULL, 0, &w), -EBADF);
	ck_assert_ptr_null(w);
	close(fd);
}
END_TEST

static Suite *pack_writer_suite(void)
{
	Suite *s = suite_create("pack-writer");
	TCase *tc;

	tc = tcase_create("writer");
	tcase_add_test(tc, test_writer_no_blocks);
	tcase_add_test(tc, test_writer_bad_sizes);
	tcase_add_test(tc, test_writer_limits);
	tcase_add_test(tc, test_writer_stream);
	tcase_add_test(tc, test_writer_write_error);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr;
	int failed;

	/* Made here, in the parent, so it is removed even when a forked test fails. */
	if (suite_setup("test-pack-writer") < 0)
		return EXIT_FAILURE;

	sr = srunner_create(pack_writer_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	suite_teardown("test-pack-writer");
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
