/* SPDX-License-Identifier: MIT */
/*
 * test-pack-file.c - the Check suite for opening datasets on disk
 * (lib/pack/pack_file.c): a single shard file, a directory of shards, a
 * path relative to a dirfd, an open descriptor; shards taken in bytewise
 * name order; the errnos for bad paths (no shards, missing, a symlinked
 * shard, not a pack, a FIFO that must not hang the open); a
 * fingerprint that is a function of the content only; and what an open
 * holds in memory: the charge asked before anything large is read (and a
 * refusal that stops the load before any index is), and
 * bp_dataset_held_bytes after.
 *
 * Each test writes real shards with bp_pack_writer into its own directory
 * under one temporary root (made in main(), removed when the suite ends,
 * whatever the tests did). The root, the shards and the standard
 * three-shard dataset are pack-file-fixture.c's, shared with
 * test-pack-reader.c, which locates, reads and verifies what this suite
 * opens, and with test-pack-writer.c, the writer on its own.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <check.h>

#include "pack-file-fixture.h"
#include "pack-testlib.h"
#include "pack_fields.h"
#include "pack_file.h"

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

/* ---- memory: the charge, the bytes held --------------------------------------- */

/* What the charge was asked, and what it answers. */
typedef struct charges {
	int calls;
	uint64_t bytes[4], index[4];
	int refuse_at;           /* the call (1-based) answered -ENOMEM; 0: none */
} charges;

static int record_charge(void *ctx, uint64_t bytes, uint64_t index)
{
	charges *c = ctx;

	ck_assert_int_lt(c->calls, 4);
	c->bytes[c->calls] = bytes;
	c->index[c->calls] = index;
	return ++c->calls == c->refuse_at ? -ENOMEM : 0;
}

/* Reads of shard data, counted (bp_shard_read_fn over the set's descriptors). */
static unsigned reads;
static uint64_t read_most;

static int counting_read(void *ctx, void *buf, size_t len, uint64_t off)
{
	reads++;
	read_most = len > read_most ? len : read_most;
	return bp_pread_full((int)(intptr_t)ctx, buf, len, off);
}

/* Open path's shards with charge c and every read counted; load them. @return from_set's. */
static int load_charged(const char *path, charges *c, bp_dataset **ret)
{
	bp_dataset_fault fault = { 0 };
	bp_shard_set set;
	int fd = open(path, O_RDONLY | O_CLOEXEC), r;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bp_shard_set_open(fd, path, &set, &fault), 0);
	close(fd);
	set.read = counting_read;
	set.read_ctx = calloc(set.count, sizeof(*set.read_ctx));
	ck_assert_ptr_nonnull(set.read_ctx);
	for (size_t i = 0; i < set.count; i++)
		set.read_ctx[i] = (void *)(intptr_t)set.fds[i];
	set.charge = record_charge;
	set.charge_ctx = c;
	reads = 0;
	read_most = 0;
	r = bp_dataset_from_set(&set, ret, &fault);
	if (r == -ENOMEM)
		ck_assert_ptr_null(fault.pack.what);
	return r;
}

/*
 * The three-shard dataset (a dictionary in one): the charge is asked once,
 * for every index (its exact bytes), dictionary and lookup table at most,
 * before any is read; what the dataset then holds is at least those and
 * at most the charge plus its small records.
 */
START_TEST(test_charge_before_load)
{
	dataset_fixture fx;
	charges c = { 0 };
	bp_dataset *ds;
	uint64_t index = 0, dict = 0, held;

	make_dataset(&fx, 0);
	ck_assert_int_eq(load_charged(fx.dir, &c, &ds), 0);
	for (size_t i = 0; i < NSHARDS; i++) {
		index += fx.footer[i].index_size;
		dict += bp_dataset_shard(ds, i)->header.dict_size;
	}
	ck_assert_uint_gt(dict, 0);
	ck_assert_int_eq(c.calls, 1);
	ck_assert_uint_eq(c.index[0], index);
	ck_assert_uint_ge(c.bytes[0], index + 2 * dict + bp_dataset_lookup_bytes(ds));
	held = bp_dataset_held_bytes(ds);
	ck_assert_uint_ge(held, index + dict + bp_dataset_lookup_bytes(ds) +
				bp_dataset_field_bytes(ds));
	/* The records, names and the default schema's tables: a few hundred bytes a shard. */
	ck_assert_uint_le(held, c.bytes[0] + NSHARDS * 1024);
	bp_dataset_close(ds);
	free_dataset(&fx);
}
END_TEST

/* A shard with fields: a second charge for its sections' bytes, before they are read. */
START_TEST(test_charge_sections)
{
	char dir[PATH_MAX], path[PATH_MAX];
	const char *keys[64];
	char names[64][16];
	bp_field_value vals[64];
	pt_fields f = { .vals = vals, .keys = keys };
	charges c = { 0 };
	const bp_shard *sh;
	uint64_t off, size, held;
	bp_dataset *ds;
	pt_samples s;
	int fd;

	new_dir(dir);
	pt_samples_make(&s, 64, 1, 300, PT_TEXT, 5);
	for (int i = 0; i < 64; i++) {
		snprintf(names[i], sizeof(names[i]), "key-%d", i);
		keys[i] = names[i];
		vals[i] = (bp_field_value){ .size = s.sizes[i] };
	}
	join(path, dir, "fields.bpk");
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pt_pack_write_fields(fd, &s, 4, 0, &f, NULL), 0);
	close(fd);
	ck_assert_int_eq(load_charged(path, &c, &ds), 0);
	sh = bp_dataset_shard(ds, 0);
	bp_pack_fields_extent(&sh->index, &off, &size);
	ck_assert_uint_gt(size, 0);
	ck_assert_int_eq(c.calls, 2);
	ck_assert_uint_eq(c.index[0], sh->footer.index_size);
	ck_assert_uint_eq(c.bytes[1], size);
	ck_assert_uint_eq(c.index[1], 0);
	held = bp_dataset_held_bytes(ds);
	ck_assert_uint_ge(held, sh->footer.index_size + size + bp_dataset_lookup_bytes(ds));
	ck_assert_uint_le(held, c.bytes[0] + c.bytes[1] + 4096);
	bp_dataset_close(ds);

	/* Refused at the sections: the load stops there, nothing leaks (sanitizer builds). */
	c = (charges){ .refuse_at = 2 };
	ck_assert_int_eq(load_charged(path, &c, &ds), -ENOMEM);
	ck_assert_int_eq(c.calls, 2);
	pt_samples_free(&s);
}
END_TEST

/*
 * A charge that refuses stops the load at once: -ENOMEM, no fault, and
 * nothing read but each shard's header and footer (no index, no
 * dictionary).
 */
START_TEST(test_charge_refused)
{
	dataset_fixture fx;
	charges c = { .refuse_at = 1 };
	bp_dataset *ds = NULL;

	make_dataset(&fx, 0);
	ck_assert_int_eq(load_charged(fx.dir, &c, &ds), -ENOMEM);
	ck_assert_ptr_null(ds);
	ck_assert_int_eq(c.calls, 1);
	ck_assert_uint_eq(reads, 2 * NSHARDS);
	ck_assert_uint_eq(read_most, BP_PACK_FOOTER_SIZE);
	free_dataset(&fx);
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

	tc = tcase_create("memory");
	tcase_add_test(tc, test_charge_before_load);
	tcase_add_test(tc, test_charge_sections);
	tcase_add_test(tc, test_charge_refused);
	suite_add_tcase(s, tc);

	return s;
}

int main(void)
{
	SRunner *sr;
	int failed;

	/* Made here, in the parent, so it is removed even when a forked test fails. */
	if (suite_setup("test-pack-file") < 0)
		return EXIT_FAILURE;

	sr = srunner_create(pack_file_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	suite_teardown("test-pack-file");
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
