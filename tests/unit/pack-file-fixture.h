/* SPDX-License-Identifier: MIT */
/*
 * pack-file-fixture.h - what the suites of datasets on disk share
 * (test-pack-file.c, test-pack-reader.c, test-pack-writer.c): one
 * temporary root a suite, a fresh directory a test under it, shards
 * written into it with bp_pack_writer, and the standard three-shard
 * dataset with the expected place and bytes of every sample.
 *
 * Each test writes real files, so the root is made by suite_setup() in
 * main(), before Check forks, and removed by suite_teardown() whatever
 * the tests did. Not thread-safe; Check suites only.
 */
#ifndef BATCHD_TESTS_PACK_FILE_FIXTURE_H
#define BATCHD_TESTS_PACK_FILE_FIXTURE_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pack-testlib.h"
#include "pack_file.h"

extern char g_root[PATH_MAX];
/* A small dictionary, trained by suite_setup(). */
extern uint8_t g_dict[1024];
extern size_t g_dict_size;

/*
 * Make the suite's root, $TMPDIR/batchd-PROG-XXXXXX, and train g_dict: in
 * main(), before Check forks, so the root is removed even when a forked
 * test fails. @return 0, or -1 after saying why on stderr.
 */
int suite_setup(const char *prog);
/* Remove the root and everything under it. */
void suite_teardown(const char *prog);

/* out = dir/name; test paths are short, so overflow is a test bug. */
void join(char out[PATH_MAX], const char *dir, const char *name);
/* A fresh directory for one test, under the suite's root. */
void new_dir(char out[PATH_MAX]);
void write_file(const char *dir, const char *name, const void *buf, size_t len);
/* Write one shard of s into dir/name; ret_footer gets the writer's footer. */
void write_shard(const char *dir, const char *name, const pt_samples *s, size_t per_block,
		 bool dict, bp_pack_footer *ret_footer);
/* bp_dataset_openat of path from the current directory, with *fault cleared first. */
int open_ds(const char *path, bp_dataset **ret, bp_dataset_fault *fault);

/* ---- the standard three-shard dataset ----------------------------------- */

#define NSHARDS 3

typedef struct shard_def {
	const char *name;
	size_t n, max_size, per_block;
	enum pt_kind kind;
	bool dict;
} shard_def;

extern const shard_def shard_defs[NSHARDS];

typedef struct dataset_fixture {
	char dir[PATH_MAX];
	pt_samples s[NSHARDS];
	bp_pack_footer footer[NSHARDS];
	uint64_t first[NSHARDS + 1]; /* global id of each shard's sample 0; [NSHARDS] = total */
} dataset_fixture;

/*
 * The standard dataset in a fresh directory: the three shards of
 * shard_defs, and beside them files and a directory that are not shards.
 * seed_delta != 0 changes the content (for fingerprint tests).
 */
void make_dataset(dataset_fixture *fx, uint64_t seed_delta);
void free_dataset(dataset_fixture *fx);
/* Global id -> (shard, local id). */
void split_id(const dataset_fixture *fx, uint64_t id, size_t *shard, uint64_t *local);
/* Read global id through r and compare with what was written. */
void expect_sample(const dataset_fixture *fx, bp_sample_reader *r, uint64_t id);

#endif
