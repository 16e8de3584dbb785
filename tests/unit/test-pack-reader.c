/* SPDX-License-Identifier: MIT */
/*
 * test-pack-reader.c - the Check suite for reading datasets on disk
 * (lib/pack/pack_file.c): global ids mapped across shards to a shard,
 * block and offset; byte-exact samples through one reader, and through
 * two that keep their own caches; verification that reports its progress
 * and names the shard, block and byte of a fault, as the reader does; and
 * damage outside the blocks found when the dataset is opened.
 *
 * It reads what test-pack-file.c opens: the standard three-shard dataset
 * of pack-file-fixture.c, written for each test into its own directory
 * under the suite's temporary root.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>

#include "pack-file-fixture.h"
#include "pack-testlib.h"
#include "pack_file.h"

/* Flip one byte of dir/name at off. */
static void flip_byte(const char *dir, const char *name, uint64_t off)
{
	char path[PATH_MAX];
	uint8_t c;
	int fd;

	join(path, dir, name);
	fd = open(path, O_RDWR | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, &c, 1, (off_t)off), 1);
	c ^= 0x20;
	ck_assert_int_eq(pwrite(fd, &c, 1, (off_t)off), 1);
	close(fd);
}

/* Where the writer put local sample l of shard i: block and offset in it. */
static void expected_place(const dataset_fixture *fx, size_t i, uint64_t l, uint64_t *block,
			   uint64_t *offset)
{
	size_t per = shard_defs[i].per_block;
	uint64_t off = 0;

	*block = l / per;
	for (uint64_t k = *block * per; k < l; k++)
		off += fx->s[i].sizes[k];
	*offset = off;
}

/* ---- locate and read ------------------------------------------------------ */

START_TEST(test_locate)
{
	dataset_fixture fx;
	bp_dataset *ds;
	bp_dataset_fault fault;
	size_t shard = 99;
	bp_pack_sample smp = { .block = 77, .offset = 77, .size = 77 };

	make_dataset(&fx, 0);
	ck_assert_int_eq(open_ds(fx.dir, &ds, &fault), 0);
	for (uint64_t id = 0; id < fx.first[NSHARDS]; id++) {
		size_t want_shard;
		uint64_t local, block, offset;

		split_id(&fx, id, &want_shard, &local);
		expected_place(&fx, want_shard, local, &block, &offset);
		ck_assert_int_eq(bp_dataset_locate(ds, id, &shard, &smp), 0);
		ck_assert_msg(shard == want_shard, "id %" PRIu64 ": shard %zu, want %zu", id, shard,
			      want_shard);
		ck_assert_uint_eq(smp.block, block);
		ck_assert_uint_eq(smp.offset, offset);
		ck_assert_uint_eq(smp.size, fx.s[want_shard].sizes[local]);
	}
	/* The boundaries, spelled out. */
	ck_assert_int_eq(bp_dataset_locate(ds, 24, &shard, &smp), 0);
	ck_assert_uint_eq(shard, 0);
	ck_assert_uint_eq(smp.block, 6);
	ck_assert_int_eq(bp_dataset_locate(ds, 25, &shard, &smp), 0);
	ck_assert_uint_eq(shard, 1);
	ck_assert_uint_eq(smp.block, 0);
	ck_assert_uint_eq(smp.offset, 0);
	ck_assert_int_eq(bp_dataset_locate(ds, 55, &shard, &smp), 0);
	ck_assert_uint_eq(shard, 2);
	ck_assert_uint_eq(smp.block, 0);
	ck_assert_int_eq(bp_dataset_locate(ds, 74, &shard, &smp), 0);
	ck_assert_uint_eq(shard, 2);
	ck_assert_uint_eq(smp.block, 19);

	/* Past the end: -ERANGE, outputs untouched. */
	shard = 99;
	smp = (bp_pack_sample){ .block = 77, .offset = 77, .size = 77 };
	ck_assert_int_eq(bp_dataset_locate(ds, fx.first[NSHARDS], &shard, &smp), -ERANGE);
	ck_assert_int_eq(bp_dataset_locate(ds, UINT64_MAX, &shard, &smp), -ERANGE);
	ck_assert_uint_eq(shard, 99);
	ck_assert_uint_eq(smp.block, 77);
	bp_dataset_close(ds);
	free_dataset(&fx);
}
END_TEST


START_TEST(test_reader_every_sample)
{
	dataset_fixture fx;
	bp_dataset *ds;
	bp_dataset_fault fault;
	bp_sample_reader *r;
	uint64_t n, seed = 5, empties = 0;
	const uint8_t *data = (const uint8_t *)"untouched";
	uint64_t size = 12345;

	make_dataset(&fx, 0);
	ck_assert_int_eq(open_ds(fx.dir, &ds, &fault), 0);
	ck_assert_int_eq(bp_sample_reader_new(ds, &r), 0);
	n = bp_dataset_samples(ds);
	for (uint64_t id = 0; id < n; id++) {
		size_t shard;
		uint64_t local;

		expect_sample(&fx, r, id);
		split_id(&fx, id, &shard, &local);
		empties += fx.s[shard].sizes[local] == 0;
	}
	ck_assert_uint_gt(empties, 0); /* the data really has empty samples */
	/* Backwards and at random: the block cache must not leak across blocks. */
	for (uint64_t id = n; id-- > 0;)
		expect_sample(&fx, r, id);
	for (uint64_t k = 0; k < 4 * n; k++)
		expect_sample(&fx, r, pt_rand(&seed) % n);

	ck_assert_int_eq(bp_sample_reader_get(r, n, &data, &size, &fault), -ERANGE);
	ck_assert_int_eq(bp_sample_reader_get(r, UINT64_MAX, &data, &size, &fault), -ERANGE);
	ck_assert_str_eq((const char *)data, "untouched");
	ck_assert_uint_eq(size, 12345);
	/* Still usable after an error. */
	expect_sample(&fx, r, 0);
	bp_sample_reader_free(r);
	bp_sample_reader_free(NULL);
	bp_dataset_close(ds);
	bp_dataset_close(NULL);
	free_dataset(&fx);
}
END_TEST

/* Two readers on one dataset keep their own caches. */
START_TEST(test_reader_two_readers)
{
	dataset_fixture fx;
	bp_dataset *ds;
	bp_dataset_fault fault;
	bp_sample_reader *a, *b;
	uint64_t n;

	make_dataset(&fx, 0);
	ck_assert_int_eq(open_ds(fx.dir, &ds, &fault), 0);
	ck_assert_int_eq(bp_sample_reader_new(ds, &a), 0);
	ck_assert_int_eq(bp_sample_reader_new(ds, &b), 0);
	n = bp_dataset_samples(ds);
	for (uint64_t id = 0; id < n; id++) {
		expect_sample(&fx, a, id);
		expect_sample(&fx, b, n - 1 - id);
	}
	bp_sample_reader_free(a);
	bp_sample_reader_free(b);
	bp_dataset_close(ds);
	free_dataset(&fx);
}
END_TEST

/* ---- verify --------------------------------------------------------------- */

typedef struct progress_log {
	size_t calls;
	uint64_t stored[8], raw[8];
} progress_log;

static void log_progress(void *ctx, uint64_t stored_done, uint64_t raw_done)
{
	progress_log *log = ctx;

	if (log->calls < 8) {
		log->stored[log->calls] = stored_done;
		log->raw[log->calls] = raw_done;
	}
	log->calls++;
}

START_TEST(test_verify_sound)
{
	dataset_fixture fx;
	bp_dataset *ds;
	bp_dataset_fault fault;
	progress_log log = { 0 };
	uint64_t stored = 0, raw = 0;

	make_dataset(&fx, 0);
	ck_assert_int_eq(open_ds(fx.dir, &ds, &fault), 0);
	ck_assert_int_eq(bp_dataset_verify(ds, NULL, NULL, &fault), 0);
	ck_assert_int_eq(bp_dataset_verify(ds, log_progress, &log, &fault), 0);
	/* Once per shard, with running totals. */
	ck_assert_uint_eq(log.calls, NSHARDS);
	for (size_t i = 0; i < NSHARDS; i++) {
		const bp_shard *sh = bp_dataset_shard(ds, i);

		stored += sh->footer.index_offset - sh->header.data_offset;
		raw += sh->footer.raw_bytes;
		ck_assert_uint_eq(log.stored[i], stored);
		ck_assert_uint_eq(log.raw[i], raw);
	}
	ck_assert_uint_eq(stored, bp_dataset_stored_bytes(ds));
	ck_assert_uint_eq(raw, bp_dataset_raw_bytes(ds));
	bp_dataset_close(ds);
	free_dataset(&fx);
}
END_TEST

/* One damaged byte in block k of shard 1: verify and the reader name it. */
START_TEST(test_verify_corrupt_block)
{
	dataset_fixture fx;
	bp_dataset *ds;
	bp_dataset_fault fault;
	bp_sample_reader *r;
	progress_log log = { 0 };
	bp_pack_block b;
	uint64_t k, nblocks, flip_at;
	const uint8_t *data;
	uint64_t size;
	char msg[512], want[64];

	make_dataset(&fx, 0);
	ck_assert_int_eq(open_ds(fx.dir, &ds, &fault), 0);
	nblocks = bp_dataset_shard(ds, 1)->index.block_count;
	ck_assert_uint_ge(nblocks, 3);
	/* A block in the middle of the shard that stores at least one byte. */
	k = _i == 0 ? 0 : _i == 1 ? nblocks / 2 : nblocks - 1;
	bp_pack_index_block(&bp_dataset_shard(ds, 1)->index, k, &b);
	while (b.stored_size == 0 && k > 0)
		bp_pack_index_block(&bp_dataset_shard(ds, 1)->index, --k, &b);
	ck_assert_uint_gt(b.stored_size, 0);
	flip_at = b.offset + b.stored_size / 2;
	bp_dataset_close(ds);
	flip_byte(fx.dir, "part-001.bpk", flip_at);

	/* Opening does not read blocks, so it still succeeds. */
	ck_assert_int_eq(open_ds(fx.dir, &ds, &fault), 0);
	memset(&fault, 0, sizeof(fault));
	ck_assert_int_eq(bp_dataset_verify(ds, log_progress, &log, &fault), -EBADMSG);
	ck_assert_str_eq(fault.shard, "part-001.bpk");
	ck_assert_int_eq(fault.pack.block, (int64_t)k);
	ck_assert_ptr_nonnull(fault.pack.what);
	ck_assert_msg(fault.pack.offset >= b.offset && fault.pack.offset < b.offset + b.stored_size,
		      "fault offset %" PRIu64 " outside block %" PRIu64 " [%" PRIu64 ", %" PRIu64 ")",
		      fault.pack.offset, k, b.offset, b.offset + b.stored_size);
	/* Shard 0 was checked and reported; shard 1 was not finished. */
	ck_assert_uint_eq(log.calls, 1);
	ck_assert_uint_eq(log.stored[0], bp_dataset_shard(ds, 0)->footer.index_offset -
						 BP_PACK_HEADER_SIZE);

	bp_dataset_fault_format(&fault, msg, sizeof(msg));
	ck_assert_ptr_nonnull(strstr(msg, "part-001.bpk"));
	snprintf(want, sizeof(want), "block %" PRIu64, k);
	ck_assert_msg(strstr(msg, want), "'%s' does not name %s", msg, want);

	/* The reader: samples of block k fail the same way, others still read. */
	ck_assert_int_eq(bp_sample_reader_new(ds, &r), 0);
	memset(&fault, 0, sizeof(fault));
	ck_assert_int_eq(bp_sample_reader_get(r, fx.first[1] + b.first_sample, &data, &size, &fault),
			 -EBADMSG);
	ck_assert_str_eq(fault.shard, "part-001.bpk");
	ck_assert_int_eq(fault.pack.block, (int64_t)k);
	for (uint64_t id = 0; id < fx.first[NSHARDS]; id++) {
		size_t shard;
		uint64_t local;
		bp_pack_sample smp;

		ck_assert_int_eq(bp_dataset_locate(ds, id, &shard, &smp), 0);
		split_id(&fx, id, &shard, &local);
		if (shard == 1 && smp.block == k)
			ck_assert_int_eq(bp_sample_reader_get(r, id, &data, &size, &fault), -EBADMSG);
		else
			expect_sample(&fx, r, id);
	}
	bp_sample_reader_free(r);
	bp_dataset_close(ds);
	free_dataset(&fx);
}
END_TEST

/* Damage outside the blocks is found when the dataset is opened. */
START_TEST(test_open_corrupt_metadata)
{
	dataset_fixture fx;
	bp_dataset *ds = NULL;
	bp_dataset_fault fault;
	const bp_shard *sh;
	uint64_t index_offset, file_size, dict_at;
	char path[PATH_MAX];

	make_dataset(&fx, 0);
	ck_assert_int_eq(open_ds(fx.dir, &ds, &fault), 0);
	sh = bp_dataset_shard(ds, 1);
	index_offset = sh->footer.index_offset;
	file_size = sh->file_size;
	/* Near the end: content zstd would still load, so only the hash can tell. */
	dict_at = bp_dataset_shard(ds, 2)->header.dict_offset +
		  bp_dataset_shard(ds, 2)->header.dict_size - 5;
	bp_dataset_close(ds);

	/* A byte of shard 1's index. */
	flip_byte(fx.dir, "part-001.bpk", index_offset + 3);
	ds = NULL;
	ck_assert_int_eq(open_ds(fx.dir, &ds, &fault), -EBADMSG);
	ck_assert_ptr_null(ds);
	ck_assert_str_eq(fault.shard, "part-001.bpk");
	ck_assert_ptr_nonnull(fault.pack.what);
	ck_assert_uint_ge(fault.pack.offset, index_offset);
	ck_assert_uint_lt(fault.pack.offset, file_size);
	flip_byte(fx.dir, "part-001.bpk", index_offset + 3);
	ck_assert_int_eq(open_ds(fx.dir, &ds, &fault), 0);
	bp_dataset_close(ds);

	/* A byte of shard 2's dictionary. */
	flip_byte(fx.dir, "part-002.bpk", dict_at);
	ck_assert_int_eq(open_ds(fx.dir, &ds, &fault), -EBADMSG);
	ck_assert_str_eq(fault.shard, "part-002.bpk");
	flip_byte(fx.dir, "part-002.bpk", dict_at);

	/* A byte of shard 0's header. */
	flip_byte(fx.dir, "part-000.bpk", 2);
	ck_assert_int_eq(open_ds(fx.dir, &ds, &fault), -EBADMSG);
	ck_assert_str_eq(fault.shard, "part-000.bpk");
	flip_byte(fx.dir, "part-000.bpk", 2);

	/* Shard 1 cut short by one byte. */
	join(path, fx.dir, "part-001.bpk");
	ck_assert_int_eq(truncate(path, (off_t)file_size - 1), 0);
	ck_assert_int_eq(open_ds(fx.dir, &ds, &fault), -EBADMSG);
	ck_assert_str_eq(fault.shard, "part-001.bpk");
	free_dataset(&fx);
}
END_TEST

static Suite *pack_reader_suite(void)
{
	Suite *s = suite_create("pack-reader");
	TCase *tc;

	tc = tcase_create("locate");
	tcase_add_test(tc, test_locate);
	suite_add_tcase(s, tc);

	tc = tcase_create("reader");
	tcase_add_test(tc, test_reader_every_sample);
	tcase_add_test(tc, test_reader_two_readers);
	suite_add_tcase(s, tc);

	tc = tcase_create("verify");
	tcase_add_test(tc, test_verify_sound);
	tcase_add_loop_test(tc, test_verify_corrupt_block, 0, 3);
	tcase_add_test(tc, test_open_corrupt_metadata);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr;
	int failed;

	/* Made here, in the parent, so it is removed even when a forked test fails. */
	if (suite_setup("test-pack-reader") < 0)
		return EXIT_FAILURE;

	sr = srunner_create(pack_reader_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	suite_teardown("test-pack-reader");
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
