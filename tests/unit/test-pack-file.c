/* SPDX-License-Identifier: MIT */
/*
 * test-pack-file.c - the Check suite for lib/pack/pack_file.c and
 * lib/pack/pack_writer.c: datasets on disk.
 *
 * Each test writes real shards with bp_pack_writer into its own directory
 * under one temporary root (made in main(), removed when the suite ends,
 * whatever the tests did), opens them with bp_dataset_openat, and checks
 * what a tool or the daemon relies on: counts, the mapping of global ids
 * across shards, byte-exact samples, verification that names the shard,
 * block and byte of a fault, the errnos for bad paths, and a fingerprint
 * that is a function of the content only.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <check.h>
#include <xxhash.h>
#include <zstd.h>

#include "pack-testlib.h"
#include "pack_file.h"
#include "pack_writer.h"

static char g_root[PATH_MAX];
static uint8_t g_dict[1024];
static size_t g_dict_size;

/* out = dir/name; test paths are short, so overflow is a test bug. */
static void join(char out[PATH_MAX], const char *dir, const char *name)
{
	int n = snprintf(out, PATH_MAX, "%s/%s", dir, name);

	ck_assert(n > 0 && n < PATH_MAX);
}

/* A fresh directory for one test, under the suite's root. */
static void new_dir(char out[PATH_MAX])
{
	join(out, g_root, "t-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(out));
}

static void write_file(const char *dir, const char *name, const void *buf, size_t len)
{
	char path[PATH_MAX];
	int fd;

	join(path, dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, buf, len), (ssize_t)len);
	close(fd);
}

/* Write one shard of s into dir/name; ret_footer gets the writer's footer. */
static void write_shard(const char *dir, const char *name, const pt_samples *s, size_t per_block,
			bool dict, bp_pack_footer *ret_footer)
{
	char path[PATH_MAX];
	int fd;

	join(path, dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pt_pack_write(fd, s, per_block, dict ? g_dict : NULL, dict ? g_dict_size : 0,
				       3, ret_footer),
			 0);
	close(fd);
}

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

static int open_ds(const char *path, bp_dataset **ret, bp_dataset_fault *fault)
{
	memset(fault, 0, sizeof(*fault));
	fault->pack.block = INT64_MIN;
	return bp_dataset_openat(AT_FDCWD, path, ret, fault);
}

/* ---- the standard three-shard dataset ----------------------------------- */

#define NSHARDS 3

typedef struct shard_def {
	const char *name;
	size_t n, max_size, per_block;
	enum pt_kind kind;
	bool dict;
} shard_def;

static const shard_def shard_defs[NSHARDS] = {
	{ "part-000.bpk", 25, 3000, 4, PT_MIXED, false },
	{ "part-001.bpk", 30, 2000, 5, PT_MIXED, false },
	{ "part-002.bpk", 20, 0, 1, PT_JSON, true },
};

typedef struct dataset_fixture {
	char dir[PATH_MAX];
	pt_samples s[NSHARDS];
	bp_pack_footer footer[NSHARDS];
	uint64_t first[NSHARDS + 1]; /* global id of each shard's sample 0; [NSHARDS] = total */
} dataset_fixture;

/* seed_delta != 0 changes the content (for fingerprint tests). */
static void make_dataset(dataset_fixture *fx, uint64_t seed_delta)
{
	static const char readme[] = "not a shard\n";

	new_dir(fx->dir);
	fx->first[0] = 0;
	for (size_t i = 0; i < NSHARDS; i++) {
		const shard_def *d = &shard_defs[i];

		pt_samples_make(&fx->s[i], d->n, 0, d->max_size, d->kind, 500 + i + seed_delta);
		write_shard(fx->dir, d->name, &fx->s[i], d->per_block, d->dict, &fx->footer[i]);
		fx->first[i + 1] = fx->first[i] + d->n;
	}
	/* Not shards: other suffixes, a hidden writer temporary, a directory. */
	write_file(fx->dir, "README.txt", readme, sizeof(readme) - 1);
	write_file(fx->dir, "part-003.bpk.tmp", readme, sizeof(readme) - 1);
	write_file(fx->dir, ".part-003.bpk", readme, sizeof(readme) - 1);
	{
		char sub[PATH_MAX];

		join(sub, fx->dir, "subdir");
		ck_assert_int_eq(mkdir(sub, 0755), 0);
	}
}

static void free_dataset(dataset_fixture *fx)
{
	for (size_t i = 0; i < NSHARDS; i++)
		pt_samples_free(&fx->s[i]);
}

/* Global id -> (shard, local id). */
static void split_id(const dataset_fixture *fx, uint64_t id, size_t *shard, uint64_t *local)
{
	size_t i = 0;

	while (id >= fx->first[i + 1])
		i++;
	*shard = i;
	*local = id - fx->first[i];
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

/* Read global id through r and compare with what was written. */
static void expect_sample(const dataset_fixture *fx, bp_sample_reader *r, uint64_t id)
{
	bp_dataset_fault fault = { .pack.what = NULL };
	const uint8_t *data = NULL;
	uint64_t size = UINT64_MAX, local;
	size_t shard;
	int err;

	split_id(fx, id, &shard, &local);
	err = bp_sample_reader_get(r, id, &data, &size, &fault);
	ck_assert_msg(err == 0, "id %" PRIu64 ": %d (%s: %s)", id, err, fault.shard,
		      fault.pack.what ? fault.pack.what : "?");
	ck_assert_uint_eq(size, fx->s[shard].sizes[local]);
	if (size)
		ck_assert_mem_eq(data, pt_sample(&fx->s[shard], local), size);
}

/* ---- open ----------------------------------------------------------------- */

START_TEST(test_open_single_file)
{
	char dir[PATH_MAX], path[PATH_MAX];
	pt_samples s;
	bp_pack_footer ftr;
	bp_dataset *ds;
	bp_dataset_fault fault;
	const bp_shard *sh;

	new_dir(dir);
	pt_samples_make(&s, 40, 0, 1500, PT_MIXED, 11);
	write_shard(dir, "single.bpk", &s, 6, false, &ftr);
	join(path, dir, "single.bpk");

	ck_assert_int_eq(open_ds(path, &ds, &fault), 0);
	ck_assert_uint_eq(bp_dataset_shard_count(ds), 1);
	ck_assert_uint_eq(bp_dataset_samples(ds), 40);
	ck_assert_uint_eq(bp_dataset_blocks(ds), 7);
	ck_assert_uint_eq(bp_dataset_raw_bytes(ds), s.total);
	ck_assert_uint_eq(bp_dataset_max_sample(ds), s.max_size);
	ck_assert_uint_eq(bp_dataset_fingerprint(ds), bp_pack_dataset_fingerprint(&ftr.fingerprint, 1));

	sh = bp_dataset_shard(ds, 0);
	ck_assert_ptr_nonnull(sh);
	ck_assert_str_eq(sh->name, path);
	ck_assert_uint_eq(sh->first_sample, 0);
	ck_assert_uint_eq(sh->footer.fingerprint, ftr.fingerprint);
	ck_assert_uint_eq(sh->footer.checksum, ftr.checksum);
	ck_assert_ptr_null(sh->dict);
	ck_assert_ptr_null(sh->ddict);
	ck_assert_uint_eq(bp_dataset_stored_bytes(ds), ftr.index_offset - BP_PACK_HEADER_SIZE);
	ck_assert_uint_eq(sh->file_size, ftr.index_offset + ftr.index_size + BP_PACK_FOOTER_SIZE);
	ck_assert_ptr_null(bp_dataset_shard(ds, 1));
	bp_dataset_close(ds);
	pt_samples_free(&s);
}
END_TEST

START_TEST(test_open_directory)
{
	dataset_fixture fx;
	bp_dataset *ds;
	bp_dataset_fault fault;
	uint64_t blocks = 0, raw = 0, stored = 0, max_sample = 0, max_block = 0, fps[NSHARDS];

	make_dataset(&fx, 0);
	ck_assert_msg(open_ds(fx.dir, &ds, &fault) == 0, "open: %s: %s", fault.shard,
		      fault.pack.what ? fault.pack.what : "?");
	ck_assert_uint_eq(bp_dataset_shard_count(ds), NSHARDS);
	ck_assert_uint_eq(bp_dataset_samples(ds), fx.first[NSHARDS]);
	for (size_t i = 0; i < NSHARDS; i++) {
		const bp_shard *sh = bp_dataset_shard(ds, i);

		ck_assert_str_eq(sh->name, shard_defs[i].name);
		ck_assert_uint_eq(sh->first_sample, fx.first[i]);
		ck_assert_uint_eq(sh->footer.sample_count, shard_defs[i].n);
		ck_assert_uint_eq(sh->footer.fingerprint, fx.footer[i].fingerprint);
		ck_assert_uint_eq(sh->index.sample_count, shard_defs[i].n);
		ck_assert_uint_eq(sh->footer.block_count,
				  (shard_defs[i].n + shard_defs[i].per_block - 1) /
					  shard_defs[i].per_block);
		ck_assert_uint_eq(sh->footer.raw_bytes, fx.s[i].total);
		if (shard_defs[i].dict) {
			ck_assert_ptr_nonnull(sh->dict);
			ck_assert_ptr_nonnull(sh->ddict);
			ck_assert_uint_eq(sh->header.dict_size, g_dict_size);
			ck_assert_mem_eq(sh->dict, g_dict, g_dict_size);
		} else {
			ck_assert_ptr_null(sh->dict);
		}
		blocks += sh->footer.block_count;
		raw += fx.s[i].total;
		stored += sh->footer.index_offset - sh->header.data_offset;
		if (fx.s[i].max_size > max_sample)
			max_sample = fx.s[i].max_size;
		for (uint64_t b = 0; b < sh->index.block_count; b++) {
			bp_pack_block blk;

			bp_pack_index_block(&sh->index, b, &blk);
			if (blk.raw_size > max_block)
				max_block = blk.raw_size;
		}
		fps[i] = fx.footer[i].fingerprint;
	}
	ck_assert_uint_eq(bp_dataset_blocks(ds), blocks);
	ck_assert_uint_eq(bp_dataset_raw_bytes(ds), raw);
	ck_assert_uint_eq(bp_dataset_stored_bytes(ds), stored);
	ck_assert_uint_lt(stored, raw); /* text and JSON compress */
	ck_assert_uint_eq(bp_dataset_max_sample(ds), max_sample);
	ck_assert_uint_eq(bp_dataset_max_block(ds), max_block);
	ck_assert_uint_eq(bp_dataset_fingerprint(ds), bp_pack_dataset_fingerprint(fps, NSHARDS));
	ck_assert_ptr_null(bp_dataset_shard(ds, NSHARDS));
	bp_dataset_close(ds);
	free_dataset(&fx);
}
END_TEST

/* The path is resolved relative to dirfd. */
START_TEST(test_open_relative)
{
	dataset_fixture fx;
	bp_dataset *ds;
	bp_dataset_fault fault;
	const char *base;
	int rootfd;

	make_dataset(&fx, 0);
	base = strrchr(fx.dir, '/') + 1;
	rootfd = open(g_root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ck_assert_int_ge(rootfd, 0);
	ck_assert_int_eq(bp_dataset_openat(rootfd, base, &ds, &fault), 0);
	ck_assert_uint_eq(bp_dataset_samples(ds), fx.first[NSHARDS]);
	bp_dataset_close(ds);
	ck_assert_int_eq(bp_dataset_openat(rootfd, "no-such-dataset", &ds, &fault), -ENOENT);
	close(rootfd);
	free_dataset(&fx);
}
END_TEST

/* From an open descriptor: the caller keeps fd, the dataset its own. */
START_TEST(test_open_fd)
{
	dataset_fixture fx;
	bp_dataset *ds;
	bp_dataset_fault fault;
	bp_sample_reader *r;
	char file[PATH_MAX];
	int fd, p[2];

	make_dataset(&fx, 0);
	fd = open(fx.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bp_dataset_fdopen(fd, "the-dataset", &ds, &fault), 0);
	ck_assert_uint_eq(bp_dataset_shard_count(ds), NSHARDS);
	ck_assert_uint_eq(bp_dataset_samples(ds), fx.first[NSHARDS]);
	ck_assert_str_eq(bp_dataset_shard(ds, 1)->name, "part-001.bpk");
	/* Closing the caller's fd leaves the dataset readable... */
	ck_assert_int_eq(close(fd), 0);
	ck_assert_int_eq(bp_sample_reader_new(ds, &r), 0);
	for (uint64_t id = 0; id < fx.first[NSHARDS]; id++)
		expect_sample(&fx, r, id);
	bp_sample_reader_free(r);
	bp_dataset_close(ds);

	/* ... and closing the dataset leaves the caller's fd open. */
	join(file, fx.dir, "part-002.bpk");
	fd = open(file, O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bp_dataset_fdopen(fd, "single", &ds, &fault), 0);
	ck_assert_uint_eq(bp_dataset_samples(ds), shard_defs[2].n);
	ck_assert_str_eq(bp_dataset_shard(ds, 0)->name, "single");
	bp_dataset_close(ds);
	ck_assert_int_ge(fcntl(fd, F_GETFD), 0);
	close(fd);

	/* Neither a file nor a directory; not a descriptor at all. */
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	ds = NULL;
	ck_assert_int_eq(bp_dataset_fdopen(p[0], "pipe", &ds, &fault), -EINVAL);
	ck_assert_ptr_null(ds);
	close(p[0]);
	close(p[1]);
	ck_assert_int_eq(bp_dataset_fdopen(-1, "none", &ds, &fault), -EINVAL);
	ck_assert_ptr_null(ds);
	free_dataset(&fx);
}
END_TEST

/* Shards are taken in bytewise name order, not creation or locale order. */
START_TEST(test_shard_order)
{
	static const char *const created[] = { "b.bpk", "a.bpk", "B.bpk", "a0.bpk" };
	static const char *const sorted[] = { "B.bpk", "a.bpk", "a0.bpk", "b.bpk" };
	static const size_t counts[] = { 3, 5, 7, 11 }; /* by created[] */
	char dir[PATH_MAX];
	pt_samples s[4];
	bp_dataset *ds;
	bp_dataset_fault fault;
	uint64_t first = 0;

	new_dir(dir);
	for (size_t i = 0; i < 4; i++) {
		pt_samples_make(&s[i], counts[i], 1, 50, PT_TEXT, 900 + i);
		write_shard(dir, created[i], &s[i], 2, false, NULL);
	}
	ck_assert_int_eq(open_ds(dir, &ds, &fault), 0);
	ck_assert_uint_eq(bp_dataset_shard_count(ds), 4);
	for (size_t i = 0; i < 4; i++) {
		const bp_shard *sh = bp_dataset_shard(ds, i);
		size_t c = 0;

		while (strcmp(created[c], sorted[i]) != 0)
			c++;
		ck_assert_str_eq(sh->name, sorted[i]);
		ck_assert_uint_eq(sh->first_sample, first);
		ck_assert_uint_eq(sh->footer.sample_count, counts[c]);
		first += counts[c];
	}
	bp_dataset_close(ds);
	for (size_t i = 0; i < 4; i++)
		pt_samples_free(&s[i]);
}
END_TEST

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

/* ---- bad paths ------------------------------------------------------------ */

START_TEST(test_open_no_shards)
{
	char dir[PATH_MAX];
	bp_dataset *ds = NULL;
	bp_dataset_fault fault;

	new_dir(dir);
	ck_assert_int_eq(open_ds(dir, &ds, &fault), -ENODATA);
	write_file(dir, "README.txt", "x", 1);
	write_file(dir, "data.bpk.part", "x", 1);
	write_file(dir, ".hidden.bpk", "x", 1);
	write_file(dir, "bpk", "x", 1);
	ck_assert_int_eq(open_ds(dir, &ds, &fault), -ENODATA);
	ck_assert_ptr_null(ds);
}
END_TEST

START_TEST(test_open_missing)
{
	char dir[PATH_MAX], path[PATH_MAX];
	bp_dataset *ds = NULL;
	bp_dataset_fault fault;

	new_dir(dir);
	join(path, dir, "nothing-here");
	ck_assert_int_eq(open_ds(path, &ds, &fault), -ENOENT);
	join(path, dir, "nothing-here/part-000.bpk");
	ck_assert_int_eq(open_ds(path, &ds, &fault), -ENOENT);
	ck_assert_ptr_null(ds);
}
END_TEST

START_TEST(test_open_symlink_shard)
{
	char dir[PATH_MAX], link[PATH_MAX];
	pt_samples s;
	bp_dataset *ds = NULL;
	bp_dataset_fault fault;

	new_dir(dir);
	pt_samples_make(&s, 5, 1, 100, PT_TEXT, 21);
	write_shard(dir, "part-000.bpk", &s, 2, false, NULL);
	join(link, dir, "part-001.bpk");
	ck_assert_int_eq(symlink("part-000.bpk", link), 0);
	ck_assert_int_eq(open_ds(dir, &ds, &fault), -ELOOP);
	ck_assert_str_eq(fault.shard, "part-001.bpk");
	ck_assert_ptr_null(ds);
	pt_samples_free(&s);
}
END_TEST

START_TEST(test_open_not_a_pack)
{
	static const char text[] = "this is a text file that happens to be named like a shard, "
				   "long enough to hold a header and a footer, but it is not one "
				   "and the reader must say so instead of guessing at its fields.\n";
	char dir[PATH_MAX];
	bp_dataset *ds = NULL;
	bp_dataset_fault fault;

	new_dir(dir);
	write_file(dir, "part-000.bpk", text, sizeof(text) - 1);
	ck_assert_int_eq(open_ds(dir, &ds, &fault), -EBADMSG);
	ck_assert_str_eq(fault.shard, "part-000.bpk");
	ck_assert_ptr_nonnull(fault.pack.what);
	write_file(dir, "part-000.bpk", text, 10);
	ck_assert_int_eq(open_ds(dir, &ds, &fault), -EBADMSG);
	write_file(dir, "part-000.bpk", text, 0);
	ck_assert_int_eq(open_ds(dir, &ds, &fault), -EBADMSG);
	ck_assert_ptr_null(ds);
}
END_TEST

/*
 * A FIFO named like a shard is not a regular file. Opening it for reading
 * would wait for a writer forever; the dataset must be refused promptly,
 * naming the FIFO (pack_file.h: shards must be regular files).
 */
START_TEST(test_open_fifo_shard)
{
	char dir[PATH_MAX], fifo[PATH_MAX];
	pt_samples s;
	bp_dataset *ds = NULL;
	bp_dataset_fault fault;
	int r;

	new_dir(dir);
	pt_samples_make(&s, 5, 1, 100, PT_TEXT, 22);
	write_shard(dir, "part-000.bpk", &s, 2, false, NULL);
	join(fifo, dir, "part-001.bpk");
	ck_assert_int_eq(mkfifo(fifo, 0644), 0);
	r = open_ds(dir, &ds, &fault);
	ck_assert_int_eq(r, -EINVAL);
	ck_assert_str_eq(fault.shard, "part-001.bpk");
	ck_assert_str_eq(fault.pack.what, "shard is not a regular file");
	ck_assert_ptr_null(ds);
	/* Named directly, as a one-file dataset. */
	r = open_ds(fifo, &ds, &fault);
	ck_assert_int_eq(r, -EINVAL);
	ck_assert_str_eq(fault.pack.what, "dataset is neither a file nor a directory");
	ck_assert_ptr_null(ds);
	pt_samples_free(&s);
}
END_TEST

/* ---- fingerprint ------------------------------------------------------------ */

static uint64_t fingerprint_of(const char *dir)
{
	bp_dataset *ds;
	bp_dataset_fault fault;
	uint64_t fp;

	ck_assert_int_eq(open_ds(dir, &ds, &fault), 0);
	fp = bp_dataset_fingerprint(ds);
	bp_dataset_close(ds);
	return fp;
}

START_TEST(test_fingerprint)
{
	dataset_fixture a, b, c;
	char d[PATH_MAX];
	uint64_t fa;

	make_dataset(&a, 0);
	make_dataset(&b, 0);
	make_dataset(&c, 1);
	fa = fingerprint_of(a.dir);
	/* Same bytes, same fingerprint: across opens and across copies. */
	ck_assert_uint_eq(fingerprint_of(a.dir), fa);
	ck_assert_uint_eq(fingerprint_of(b.dir), fa);
	/* Different content, different fingerprint. */
	ck_assert_uint_ne(fingerprint_of(c.dir), fa);

	/* One byte of one sample. */
	new_dir(d);
	for (size_t i = 0; i < NSHARDS; i++) {
		if (i == 1) {
			size_t k = 0;

			while (a.s[1].sizes[k] == 0)
				k++;
			a.s[1].data[a.s[1].offsets[k]] ^= 1;
		}
		write_shard(d, shard_defs[i].name, &a.s[i], shard_defs[i].per_block,
			    shard_defs[i].dict, NULL);
	}
	ck_assert_uint_ne(fingerprint_of(d), fa);

	/* The same samples blocked differently. */
	new_dir(d);
	for (size_t i = 0; i < NSHARDS; i++)
		write_shard(d, shard_defs[i].name, &b.s[i], shard_defs[i].per_block + (i == 0),
			    shard_defs[i].dict, NULL);
	ck_assert_uint_ne(fingerprint_of(d), fa);

	/* The same shards in another order. */
	new_dir(d);
	for (size_t i = 0; i < NSHARDS; i++)
		write_shard(d, shard_defs[(i + 1) % NSHARDS].name, &b.s[i], shard_defs[i].per_block,
			    shard_defs[i].dict, NULL);
	ck_assert_uint_ne(fingerprint_of(d), fa);

	/* A one-shard dataset: the shard opened as a file or as a directory. */
	new_dir(d);
	write_shard(d, "only.bpk", &b.s[0], 4, false, NULL);
	{
		char file[PATH_MAX];

		join(file, d, "only.bpk");
		ck_assert_uint_eq(fingerprint_of(file), fingerprint_of(d));
	}
	free_dataset(&a);
	free_dataset(&b);
	free_dataset(&c);
}
END_TEST

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

static Suite *pack_file_suite(void)
{
	Suite *s = suite_create("pack-file");
	TCase *tc;

	tc = tcase_create("open");
	tcase_add_test(tc, test_open_single_file);
	tcase_add_test(tc, test_open_directory);
	tcase_add_test(tc, test_open_relative);
	tcase_add_test(tc, test_open_fd);
	tcase_add_test(tc, test_shard_order);
	suite_add_tcase(s, tc);

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

	tc = tcase_create("bad_paths");
	tcase_add_test(tc, test_open_no_shards);
	tcase_add_test(tc, test_open_missing);
	tcase_add_test(tc, test_open_symlink_shard);
	tcase_add_test(tc, test_open_not_a_pack);
	suite_add_tcase(s, tc);

	/* A hang is the failure mode here: fail in seconds, not at the default. */
	tc = tcase_create("special_files");
	tcase_set_timeout(tc, 10);
	tcase_add_test(tc, test_open_fifo_shard);
	suite_add_tcase(s, tc);

	tc = tcase_create("fingerprint");
	tcase_add_test(tc, test_fingerprint);
	suite_add_tcase(s, tc);

	tc = tcase_create("writer");
	tcase_add_test(tc, test_writer_no_blocks);
	tcase_add_test(tc, test_writer_bad_sizes);
	tcase_add_test(tc, test_writer_limits);
	tcase_add_test(tc, test_writer_stream);
	tcase_add_test(tc, test_writer_write_error);
	suite_add_tcase(s, tc);
	return s;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");
	SRunner *sr;
	int failed;

	/* Made here, in the parent, so it is removed even when a forked test fails. */
	snprintf(g_root, sizeof(g_root), "%s/batchd-test-pack-file-XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(g_root)) {
		perror("test-pack-file: mkdtemp");
		return EXIT_FAILURE;
	}
	g_dict_size = pt_dict_train(g_dict, sizeof(g_dict), 2000, 4242);

	sr = srunner_create(pack_file_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	if (nftw(g_root, remove_entry, 16, FTW_DEPTH | FTW_PHYS) < 0)
		perror("test-pack-file: removing the temporary directory");
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
