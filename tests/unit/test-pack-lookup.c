/* SPDX-License-Identifier: MIT */
/*
 * test-pack-lookup.c - the Check suite for the constant-time lookups of
 * lib/pack/pack.c (bp_pack_ranges, bp_pack_lookup) and lib/pack/pack_file.c
 * (bp_dataset_locate through the shard map).
 *
 * A lookup table is only worth having if it answers exactly what the
 * binary search over the block table answers, so every case here asks
 * both for every sample id and compares them, and both with the truth
 * known from how the pack was written: packs of one sample per block, many
 * per block, blocks of wildly uneven lengths, samples of one size per
 * block (offsets computed, not read) beside blocks of mixed sizes and
 * blocks of empty samples, a single sample, and datasets of several shards
 * of different shapes. The format has no empty shard or block (the footer
 * and index checks refuse them: test-pack-index), so none appears here.
 * The memory bound the headers document is checked too.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <check.h>
#include <xxhash.h>

#include "pack-testlib.h"
#include "pack.h"
#include "pack_file.h"
#include "pack_writer.h"

/* ---- samples and packs of a chosen shape ------------------------------ */

/* Write s to fd as blocks of counts[0..nblocks) samples (summing to s->n), stored raw. */
static void write_shaped(int fd, const pt_samples *s, const size_t *counts, size_t nblocks)
{
	bp_pack_writer *w;
	size_t first = 0;

	ck_assert_int_eq(bp_pack_writer_new(fd, NULL, 0, &w), 0);
	for (size_t b = 0; b < nblocks; b++) {
		uint64_t raw = 0;
		bp_pack_encoded enc;

		for (size_t i = first; i < first + counts[b]; i++)
			raw += s->sizes[i];
		/* Raw storage keeps the test about the index, not zstd. */
		enc = (bp_pack_encoded){ .stored = s->data + (raw ? s->offsets[first] : 0),
					 .stored_size = raw, .codec = BP_CODEC_RAW };
		enc.stored_hash = enc.raw_hash = XXH3_64bits(enc.stored, raw);
		ck_assert_int_eq(bp_pack_writer_add(w, &enc, raw, s->sizes + first, counts[b]), 0);
		first += counts[b];
	}
	ck_assert_uint_eq(first, s->n);
	ck_assert_int_eq(bp_pack_writer_finish(w, NULL), 0);
	bp_pack_writer_free(w);
}

/* The same shard in memory, exactly sized. Caller frees *ret_buf. */
static void build_shaped(const pt_samples *s, const size_t *counts, size_t nblocks,
			 uint8_t **ret_buf, size_t *ret_len)
{
	int fd = memfd_create("shaped", MFD_CLOEXEC);

	ck_assert_int_ge(fd, 0);
	write_shaped(fd, s, counts, nblocks);
	ck_assert_int_eq(pt_read_fd(fd, ret_buf, ret_len), 0);
	close(fd);
}

/*
 * Every sample of idx asked both ways, without and with a lookup table:
 * both must name the block the writer put it in (counts) and its offset
 * and size in that block, as s has them.
 */
static void check_every_sample(const bp_pack_index *idx, const pt_samples *s,
			       const size_t *counts, size_t nblocks)
{
	bp_pack_index slow = *idx, fast = *idx;
	bp_pack_lookup *lk;
	uint64_t block = 0, block_first = 0;

	ck_assert_ptr_null(idx->lookup);
	ck_assert_uint_eq(idx->block_count, nblocks);
	ck_assert_uint_eq(idx->sample_count, s->n);
	ck_assert_int_eq(bp_pack_lookup_new(idx, &lk), 0);
	fast.lookup = lk;
	for (uint64_t id = 0; id < s->n; id++) {
		bp_pack_sample a, b;

		while (id >= block_first + counts[block])
			block_first += counts[block++];
		bp_pack_index_sample(&slow, id, &a);
		bp_pack_index_sample(&fast, id, &b);
		ck_assert_uint_eq(a.block, block);
		ck_assert_uint_eq(b.block, block);
		ck_assert_uint_eq(a.offset, s->offsets[id] - s->offsets[block_first]);
		ck_assert_uint_eq(b.offset, a.offset);
		ck_assert_uint_eq(a.size, s->sizes[id]);
		ck_assert_uint_eq(b.size, a.size);
	}
	/* The documented bound: 20 bytes a block, plus the tables' own headers. */
	ck_assert_uint_le(bp_pack_lookup_bytes(lk), 20 * nblocks + 64);
	bp_pack_lookup_free(lk);
}

/* Pack s in the shape counts, parse it and check every sample. */
static void check_shape(const pt_samples *s, const size_t *counts, size_t nblocks)
{
	bp_pack_view v;
	uint8_t *buf;
	size_t len;

	build_shaped(s, counts, nblocks, &buf, &len);
	ck_assert_int_eq(bp_pack_parse(buf, len, &v, NULL), 0);
	check_every_sample(&v.index, s, counts, nblocks);
	free(buf);
}

/* nblocks blocks of per samples each, the last one of whatever is left. */
static size_t even_counts(size_t n, size_t per, size_t *counts)
{
	size_t nblocks = 0;

	for (size_t first = 0; first < n; first += per)
		counts[nblocks++] = n - first < per ? n - first : per;
	return nblocks;
}

/* Block lengths drawn from a skewed mix: mostly 1..3, some dozens, a few thousands. */
static size_t uneven_counts(size_t n, uint64_t seed, size_t *counts)
{
	size_t nblocks = 0, left = n;

	while (left) {
		uint64_t kind = pt_rand_range(&seed, 0, 9), len;

		len = kind < 6 ? pt_rand_range(&seed, 1, 3)
		      : kind < 9 ? pt_rand_range(&seed, 10, 60) : pt_rand_range(&seed, 1000, 3000);
		if (len > left)
			len = left;
		counts[nblocks++] = len;
		left -= len;
	}
	return nblocks;
}

/* n samples all of size `size`. */
static void samples_fixed(pt_samples *s, size_t n, uint64_t size, uint64_t seed)
{
	uint64_t *sizes = malloc(n * sizeof(*sizes));

	ck_assert_ptr_nonnull(sizes);
	for (size_t i = 0; i < n; i++)
		sizes[i] = size;
	pt_samples_sized(s, sizes, n, 0, seed);
	free(sizes);
}

/* ---- bp_pack_ranges on its own --------------------------------------- */

static uint64_t array_first(const void *ctx, uint64_t i)
{
	return ((const uint64_t *)ctx)[i];
}

/* The last range starting at or before id, by a plain scan. */
static uint64_t scan_find(const uint64_t *first, uint64_t count, uint64_t id)
{
	uint64_t r = 0;

	while (r + 1 < count && first[r + 1] <= id)
		r++;
	return r;
}

/* Ranges of the given lengths: find must agree with a scan for every id. */
static void check_ranges_lengths(const uint64_t *lengths, uint64_t count)
{
	uint64_t *first = malloc(count * sizeof(*first)), total = 0;
	bp_pack_ranges *r;

	ck_assert_ptr_nonnull(first);
	for (uint64_t i = 0; i < count; i++) {
		first[i] = total;
		total += lengths[i];
	}
	ck_assert_int_eq(bp_pack_ranges_new(count, total, array_first, first, &r), 0);
	for (uint64_t id = 0, at = 0; id < total; id++) {
		while (at + 1 < count && first[at + 1] <= id)
			at++;
		ck_assert_uint_eq(bp_pack_ranges_find(r, id), at);
	}
	ck_assert_uint_le(bp_pack_ranges_bytes(r), 16 * count + 64);
	bp_pack_ranges_free(r);
	free(first);
}

START_TEST(test_ranges_shapes)
{
	static const uint64_t one[] = { 1 }, single_long[] = { 5000 };
	static const uint64_t skew[] = { 1, 1, 1, 4096, 1, 2, 3, 1, 1, 777, 1, 1, 1, 1, 64, 65, 1 };
	uint64_t lengths[4000], seed = 5;

	check_ranges_lengths(one, 1);
	check_ranges_lengths(single_long, 1);
	check_ranges_lengths(skew, sizeof(skew) / sizeof(skew[0]));
	for (size_t i = 0; i < 4000; i++)
		lengths[i] = 1;
	check_ranges_lengths(lengths, 4000);            /* one id a range: groups of 1 */
	for (size_t i = 0; i < 300; i++)
		lengths[i] = 37;                        /* not a power of two: groups of 32 */
	check_ranges_lengths(lengths, 300);
	for (size_t i = 0; i < 4000; i++)
		lengths[i] = pt_rand_range(&seed, 1, 9) == 1 ? pt_rand_range(&seed, 100, 900)
							      : pt_rand_range(&seed, 1, 4);
	check_ranges_lengths(lengths, 4000);
}
END_TEST

/* Ranges far wider than any table of ids could be: a dataset's shards near 2^63. */
START_TEST(test_ranges_huge)
{
	uint64_t first[5] = { 0, UINT64_C(1) << 40, (UINT64_C(1) << 40) + 1, UINT64_C(1) << 61,
			      (UINT64_C(1) << 62) - 3 };
	uint64_t total = (UINT64_C(1) << 63) - 1, probes[64];
	size_t np = 0;
	bp_pack_ranges *r;

	ck_assert_int_eq(bp_pack_ranges_new(5, total, array_first, first, &r), 0);
	/* Each boundary, its neighbours, and the ends. */
	for (size_t i = 0; i < 5; i++) {
		probes[np++] = first[i];
		probes[np++] = first[i] + 1;
		if (first[i])
			probes[np++] = first[i] - 1;
	}
	probes[np++] = total - 1;
	probes[np++] = total / 2;
	for (size_t i = 0; i < np; i++)
		ck_assert_uint_eq(bp_pack_ranges_find(r, probes[i]), scan_find(first, 5, probes[i]));
	ck_assert_uint_le(bp_pack_ranges_bytes(r), 16 * 5 + 64);
	bp_pack_ranges_free(r);
}
END_TEST

START_TEST(test_ranges_refused)
{
	uint64_t not_zero[] = { 1, 5 }, equal[] = { 0, 4, 4 }, down[] = { 0, 6, 5 },
		 past[] = { 0, 3, 10 };
	bp_pack_ranges *r = (bp_pack_ranges *)&r; /* must stay untouched */

	ck_assert_int_eq(bp_pack_ranges_new(0, 10, array_first, past, &r), -EINVAL);
	ck_assert_int_eq(bp_pack_ranges_new(11, 10, array_first, past, &r), -EINVAL);
	ck_assert_int_eq(bp_pack_ranges_new(2, 10, array_first, not_zero, &r), -EINVAL);
	ck_assert_int_eq(bp_pack_ranges_new(3, 10, array_first, equal, &r), -EINVAL);
	ck_assert_int_eq(bp_pack_ranges_new(3, 10, array_first, down, &r), -EINVAL);
	ck_assert_int_eq(bp_pack_ranges_new(3, 10, array_first, past, &r), -EINVAL);
	ck_assert_int_eq(bp_pack_ranges_new(UINT64_C(1) << 32, UINT64_C(1) << 40, array_first,
					    past, &r), -EINVAL);
	ck_assert_ptr_eq(r, (bp_pack_ranges *)&r);
	bp_pack_ranges_free(NULL);
	bp_pack_lookup_free(NULL);
}
END_TEST

/* ---- one shard: the lookup against the search ------------------------- */

START_TEST(test_lookup_one_per_block)
{
	static size_t counts[3000];
	pt_samples s;

	pt_samples_make(&s, 3000, 0, 90, PT_RANDOM, 11);
	check_shape(&s, counts, even_counts(s.n, 1, counts));
	pt_samples_free(&s);
}
END_TEST

START_TEST(test_lookup_many_per_block)
{
	static size_t counts[8000];
	static const size_t pers[] = { 2, 3, 64, 100, 1000, 8000 };
	pt_samples mixed, fixed;

	pt_samples_make(&mixed, 8000, 1, 40, PT_RANDOM, 12);
	samples_fixed(&fixed, 8000, 64, 13);
	for (size_t i = 0; i < sizeof(pers) / sizeof(pers[0]); i++) {
		check_shape(&mixed, counts, even_counts(mixed.n, pers[i], counts));
		check_shape(&fixed, counts, even_counts(fixed.n, pers[i], counts));
	}
	pt_samples_free(&mixed);
	pt_samples_free(&fixed);
}
END_TEST

START_TEST(test_lookup_uneven_blocks)
{
	static size_t counts[20000];
	pt_samples mixed, fixed;

	pt_samples_make(&mixed, 20000, 0, 30, PT_RANDOM, 21);
	samples_fixed(&fixed, 20000, 8, 22);
	for (uint64_t seed = 1; seed <= 4; seed++) {
		check_shape(&mixed, counts, uneven_counts(mixed.n, seed, counts));
		check_shape(&fixed, counts, uneven_counts(fixed.n, seed, counts));
	}
	pt_samples_free(&mixed);
	pt_samples_free(&fixed);
}
END_TEST

/*
 * Blocks whose samples share a size (a different one each block, empty
 * samples included), next to blocks whose sizes differ in one sample only:
 * computed offsets and read ones must agree.
 */
START_TEST(test_lookup_strides)
{
	static const size_t counts[] = { 5, 7, 1, 9, 4, 6, 3 };
	static const uint64_t sizes[] = {
		16, 16, 16, 16, 16,          /* one size */
		0, 0, 0, 0, 0, 0, 0,         /* all empty: a block of no bytes */
		1000,                        /* alone */
		3, 3, 3, 3, 4, 3, 3, 3, 3,   /* one differs */
		0, 9, 9, 9,                  /* an empty one first */
		7, 7, 7, 7, 7, 0,            /* an empty one last */
		250, 250, 250,
	};
	pt_samples s;

	pt_samples_sized(&s, sizes, sizeof(sizes) / sizeof(sizes[0]), 0, 31);
	check_shape(&s, counts, sizeof(counts) / sizeof(counts[0]));
	pt_samples_free(&s);
}
END_TEST

START_TEST(test_lookup_single_sample)
{
	static const size_t one[] = { 1 };
	static const uint64_t size1[] = { 123 }, size0[] = { 0 };
	pt_samples s;

	pt_samples_sized(&s, size1, 1, 0, 41);
	check_shape(&s, one, 1);
	pt_samples_free(&s);
	pt_samples_sized(&s, size0, 1, 0, 42);
	check_shape(&s, one, 1);
	pt_samples_free(&s);
}
END_TEST

/* ---- datasets of several shards ---------------------------------------- */

typedef struct shard_spec {
	pt_samples s;
	size_t *counts;
	size_t nblocks;
} shard_spec;

/* A fresh directory under $TMPDIR. */
static void new_dir(char out[PATH_MAX])
{
	const char *tmp = getenv("TMPDIR");

	snprintf(out, PATH_MAX, "%s/test-pack-lookup-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(out));
}

/* dir/part-NN.bpk: shard i of the dataset in dir, in name order. */
static void shard_path(char out[PATH_MAX], const char *dir, size_t i)
{
	int n = snprintf(out, PATH_MAX, "%s/part-%02zu.bpk", dir, i);

	ck_assert(n > 0 && n < PATH_MAX);
}

static void write_spec(const char *dir, size_t i, const shard_spec *sp)
{
	char path[PATH_MAX];
	int fd;

	shard_path(path, dir, i);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ck_assert_int_ge(fd, 0);
	write_shaped(fd, &sp->s, sp->counts, sp->nblocks);
	close(fd);
}

static void remove_dir(const char *dir, size_t shards)
{
	char path[PATH_MAX];

	for (size_t i = 0; i < shards; i++) {
		shard_path(path, dir, i);
		ck_assert_int_eq(unlink(path), 0);
	}
	ck_assert_int_eq(rmdir(dir), 0);
}

/* Shard i's shape: one per block, single sample, even, uneven, fixed size: in turn. */
static void make_spec(shard_spec *sp, size_t i)
{
	static const size_t sizes_n[] = { 500, 1, 3000, 4000, 2500, 1, 700 };
	size_t n = sizes_n[i % 7];

	sp->counts = malloc(n * sizeof(*sp->counts));
	ck_assert_ptr_nonnull(sp->counts);
	if (i % 7 == 4 || i % 7 == 5)
		samples_fixed(&sp->s, n, 64, 100 + i);
	else
		pt_samples_make(&sp->s, n, 0, 50, PT_RANDOM, 100 + i);
	switch (i % 7) {
	case 0: case 1: case 5:
		sp->nblocks = even_counts(n, 1, sp->counts);
		break;
	case 3: case 6:
		sp->nblocks = uneven_counts(n, i, sp->counts);
		break;
	default:
		sp->nblocks = even_counts(n, 97, sp->counts);
		break;
	}
}

/* Global id -> (shard, sample): the dataset against a scan and the search. */
static void check_dataset(const bp_dataset *ds, const shard_spec *specs, size_t shards)
{
	uint64_t id = 0, blocks = 0;
	bp_pack_sample ps;
	size_t got;

	ck_assert_uint_eq(bp_dataset_shard_count(ds), shards);
	for (size_t i = 0; i < shards; i++) {
		const bp_shard *sh = bp_dataset_shard(ds, i);
		bp_pack_index slow = sh->index;

		ck_assert_uint_eq(sh->first_sample, id);
		ck_assert_ptr_nonnull(sh->index.lookup);
		slow.lookup = NULL;
		for (uint64_t k = 0; k < specs[i].s.n; k++, id++) {
			bp_pack_sample want;

			bp_pack_index_sample(&slow, k, &want);
			ck_assert_int_eq(bp_dataset_locate(ds, id, &got, &ps), 0);
			ck_assert_uint_eq(got, i);
			ck_assert_uint_eq(ps.block, want.block);
			ck_assert_uint_eq(ps.offset, want.offset);
			ck_assert_uint_eq(ps.size, specs[i].s.sizes[k]);
		}
		blocks += specs[i].nblocks;
	}
	ck_assert_uint_eq(bp_dataset_samples(ds), id);
	got = 99;
	ck_assert_int_eq(bp_dataset_locate(ds, id, &got, &ps), -ERANGE);
	ck_assert_int_eq(bp_dataset_locate(ds, UINT64_MAX, &got, &ps), -ERANGE);
	ck_assert_uint_eq(got, 99);
	/* 20 bytes a block and 16 a shard, plus each table's header. */
	ck_assert_uint_le(bp_dataset_lookup_bytes(ds), 20 * blocks + 80 * shards + 64);
	ck_assert_uint_ge(bp_dataset_lookup_bytes(ds), 12 * blocks);
}

/* The bytes the reader returns through the lookups are the samples written. */
static void check_reader(const bp_dataset *ds, const shard_spec *specs, size_t shards)
{
	bp_sample_reader *rd;
	uint64_t id = 0;

	ck_assert_int_eq(bp_sample_reader_new(ds, &rd), 0);
	for (size_t i = 0; i < shards; i++) {
		for (uint64_t k = 0; k < specs[i].s.n; k++, id++) {
			const uint8_t *data;
			uint64_t size;

			ck_assert_int_eq(bp_sample_reader_get(rd, id, &data, &size, NULL), 0);
			ck_assert_uint_eq(size, specs[i].s.sizes[k]);
			ck_assert_int_eq(memcmp(data, pt_sample(&specs[i].s, k), size), 0);
		}
	}
	bp_sample_reader_free(rd);
}

static void check_shards(size_t shards)
{
	shard_spec *specs = calloc(shards, sizeof(*specs));
	char dir[PATH_MAX];
	bp_dataset *ds;

	ck_assert_ptr_nonnull(specs);
	new_dir(dir);
	for (size_t i = 0; i < shards; i++) {
		make_spec(&specs[i], i);
		write_spec(dir, i, &specs[i]);
	}
	ck_assert_int_eq(bp_dataset_openat(AT_FDCWD, dir, &ds, NULL), 0);
	check_dataset(ds, specs, shards);
	check_reader(ds, specs, shards);
	bp_dataset_close(ds);
	remove_dir(dir, shards);
	for (size_t i = 0; i < shards; i++) {
		pt_samples_free(&specs[i].s);
		free(specs[i].counts);
	}
	free(specs);
}

START_TEST(test_dataset_one_shard) { check_shards(1); }
END_TEST

START_TEST(test_dataset_shards) { check_shards(7); }
END_TEST

/* Many shards, many of a single sample: the shard map's groups are of one or two ids. */
START_TEST(test_dataset_many_shards) { check_shards(40); }
END_TEST

static Suite *pack_lookup_suite(void)
{
	Suite *s = suite_create("pack-lookup");
	TCase *ranges = tcase_create("ranges"), *shard = tcase_create("shard"),
	      *dataset = tcase_create("dataset");

	tcase_add_test(ranges, test_ranges_shapes);
	tcase_add_test(ranges, test_ranges_huge);
	tcase_add_test(ranges, test_ranges_refused);
	tcase_add_test(shard, test_lookup_one_per_block);
	tcase_add_test(shard, test_lookup_many_per_block);
	tcase_add_test(shard, test_lookup_uneven_blocks);
	tcase_add_test(shard, test_lookup_strides);
	tcase_add_test(shard, test_lookup_single_sample);
	tcase_add_test(dataset, test_dataset_one_shard);
	tcase_add_test(dataset, test_dataset_shards);
	tcase_add_test(dataset, test_dataset_many_shards);
	tcase_set_timeout(dataset, 60);
	suite_add_tcase(s, ranges);
	suite_add_tcase(s, shard);
	suite_add_tcase(s, dataset);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(pack_lookup_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
