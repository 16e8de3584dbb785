/* SPDX-License-Identifier: MIT */
/*
 * pack-file-fixture.c - the temporary root, shards and standard dataset
 * the suites of datasets on disk share (pack-file-fixture.h), compiled
 * into each of them.
 */
#include "pack-file-fixture.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <check.h>

char g_root[PATH_MAX];
uint8_t g_dict[1024];
size_t g_dict_size;

const shard_def shard_defs[NSHARDS] = {
	{ "part-000.bpk", 25, 3000, 4, PT_MIXED, false },
	{ "part-001.bpk", 30, 2000, 5, PT_MIXED, false },
	{ "part-002.bpk", 20, 0, 1, PT_JSON, true },
};

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

int suite_setup(const char *prog)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(g_root, sizeof(g_root), "%s/batchd-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", prog);
	if (!mkdtemp(g_root)) {
		fprintf(stderr, "%s: mkdtemp: %s\n", prog, strerror(errno));
		return -1;
	}
	g_dict_size = pt_dict_train(g_dict, sizeof(g_dict), 2000, 4242);
	return 0;
}

void suite_teardown(const char *prog)
{
	if (nftw(g_root, remove_entry, 16, FTW_DEPTH | FTW_PHYS) < 0)
		fprintf(stderr, "%s: removing the temporary directory: %s\n", prog, strerror(errno));
}

void join(char out[PATH_MAX], const char *dir, const char *name)
{
	int n = snprintf(out, PATH_MAX, "%s/%s", dir, name);

	ck_assert(n > 0 && n < PATH_MAX);
}

void new_dir(char out[PATH_MAX])
{
	join(out, g_root, "t-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(out));
}

void write_file(const char *dir, const char *name, const void *buf, size_t len)
{
	char path[PATH_MAX];
	int fd;

	join(path, dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, buf, len), (ssize_t)len);
	close(fd);
}

void write_shard(const char *dir, const char *name, const pt_samples *s, size_t per_block,
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

int open_ds(const char *path, bp_dataset **ret, bp_dataset_fault *fault)
{
	memset(fault, 0, sizeof(*fault));
	fault->pack.block = INT64_MIN;
	return bp_dataset_openat(AT_FDCWD, path, ret, fault);
}

void make_dataset(dataset_fixture *fx, uint64_t seed_delta)
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

void free_dataset(dataset_fixture *fx)
{
	for (size_t i = 0; i < NSHARDS; i++)
		pt_samples_free(&fx->s[i]);
}

void split_id(const dataset_fixture *fx, uint64_t id, size_t *shard, uint64_t *local)
{
	size_t i = 0;

	while (id >= fx->first[i + 1])
		i++;
	*shard = i;
	*local = id - fx->first[i];
}

void expect_sample(const dataset_fixture *fx, bp_sample_reader *r, uint64_t id)
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
