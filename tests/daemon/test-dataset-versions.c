/* SPDX-License-Identifier: MIT */
/*
 * test-dataset-versions.c - a real batchd serving datasets that change on
 * disk: what a new session gets is what the files hold when it opens,
 * whatever the timestamps say, and what was replaced is let go.
 *
 * Each TCase is one promise: shards replaced by rename under a running
 * session (the directory's mtime put back) give a new session the new
 * bytes while the running one reads the old version to its end; a pack
 * rewritten in place (same size, mtime put back) gives the new bytes; the
 * old versions' descriptors are closed once their sessions end, so the
 * daemon holds no deleted file open and does not grow with every version
 * or every dataset opened; a FIFO, directory or symlink named like a shard
 * is refused by name without being opened; paths with doubled or trailing
 * slashes and ".." that stays inside the root are served. Every delivered
 * sample is compared byte for byte with the pack on disk (dt_consume).
 *
 * The packs are written here with tests/lib/pack-testlib.c, so two versions of
 * a dataset have the same sample count and sizes and differ in the bytes.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <check.h>

#include "daemon-testlib.h"
#include "dataset.h"
#include "pack-testlib.h"

static dt_daemon D;

/* Fail with the daemon's recent log (daemon-testlib.h). */
#define expect dt_expect

#define SAMPLES 200u             /* per dataset version */

static void setup(void)
{
	dt_setup_dir();
	ck_assert_msg(dt_daemon_start(&D) == 0, "batchd did not start");
}

/* ---- helpers --------------------------------------------------------------------- */

/* n samples of size bytes each (random: stored raw, so the pack's size depends on n and size only). */
static void samples(pt_samples *s, size_t n, size_t size, uint64_t seed)
{
	pt_samples_make(s, n, size, size, PT_RANDOM, seed);
}

/* Write a pack of s to root/rel (4 samples a block). */
static void write_pack(const char *rel, const pt_samples *s)
{
	char path[PATH_MAX];
	int fd;

	dt_root_path(&D, rel, path, sizeof(path));
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ck_assert_msg(fd >= 0, "create %s: %s", path, strerror(errno));
	ck_assert_int_eq(pt_pack_write(fd, s, 4, NULL, 0, 1, NULL), 0);
	ck_assert_int_eq(close(fd), 0);
}

/* A new pack of SAMPLES samples at root/rel, by rename over what is there (as rsync does). */
static void replace_pack(const char *rel, const char *tmp, size_t size, uint64_t seed)
{
	char a[PATH_MAX], b[PATH_MAX];
	pt_samples s;

	samples(&s, SAMPLES, size, seed);
	write_pack(tmp, &s);
	pt_samples_free(&s);
	ck_assert_int_eq(rename(dt_root_path(&D, tmp, a, sizeof(a)),
				dt_root_path(&D, rel, b, sizeof(b))), 0);
}

static void get_times(const char *rel, struct timespec times[2])
{
	char path[PATH_MAX];
	struct stat st;

	ck_assert_int_eq(stat(dt_root_path(&D, rel, path, sizeof(path)), &st), 0);
	times[0] = st.st_atim;
	times[1] = st.st_mtim;
}

/* Put rel's atime and mtime back, as cp -a, rsync -t and tar x do. */
static void put_times(const char *rel, const struct timespec times[2])
{
	char path[PATH_MAX];
	struct stat st;

	dt_root_path(&D, rel, path, sizeof(path));
	ck_assert_int_eq(utimensat(AT_FDCWD, path, times, 0), 0);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert(st.st_mtim.tv_sec == times[1].tv_sec && st.st_mtim.tv_nsec == times[1].tv_nsec);
}

static void ref_root(dt_ref *ref, const char *rel)
{
	char path[PATH_MAX];

	ck_assert_msg(dt_ref_open(ref, dt_root_path(&D, rel, path, sizeof(path))) == 0,
		      "reference open %s", path);
}

/* The daemon's descriptors: all of them, and those on deleted files of the test's root. */
static size_t daemon_fds(size_t *ret_deleted)
{
	char dir[64], link[PATH_MAX], target[PATH_MAX];
	size_t n = 0, deleted = 0;
	struct dirent *de;
	DIR *d;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)D.pid);
	d = opendir(dir);
	ck_assert_msg(d, "%s: %s", dir, strerror(errno));
	while ((de = readdir(d))) {
		ssize_t len;

		if (de->d_name[0] == '.')
			continue;
		snprintf(link, sizeof(link), "%s/%s", dir, de->d_name);
		len = readlink(link, target, sizeof(target) - 1);
		if (len <= 0)
			continue;
		target[len] = '\0';
		n++;
		/* Not its memfds: they are "deleted" from birth. */
		deleted += !strncmp(target, D.root, strlen(D.root)) && strstr(target, " (deleted)");
	}
	closedir(d);
	*ret_deleted = deleted;
	return n;
}

typedef struct fd_goal {
	size_t at_most;          /* descriptors in all */
	size_t n, deleted;       /* what was last seen */
} fd_goal;

static bool fds_settled(void *arg)
{
	fd_goal *g = arg;

	g->n = daemon_fds(&g->deleted);
	return g->n <= g->at_most && g->deleted == 0;
}

/* One session on rel: a batch or two checked against ref, then closed and gone. */
static void open_read_close(bc_client *c, const char *rel, dt_ref *ref, size_t batches)
{
	bc_stream_opts o;
	dt_run run = { 0 };
	bc_stream *s;

	dt_opts(&o, rel, 8, BC_SHUFFLE_NONE, 0);
	s = dt_open_ok(c, &o);
	dt_consume_ok(s, ref, batches, 0, &run, rel);
	dt_run_free(&run);
	ck_assert_int_eq(bc_close(s), 0);
	expect(dt_wait_sessions(D.sock, 0, TRIES), "the session on %s did not end", rel);
}

/* Read s to the end of its epoch against ref; all SAMPLES samples, each once. */
static void read_to_epoch_end(bc_stream *s, dt_ref *ref, dt_run *run, const char *what)
{
	dt_consume_ok(s, ref, 1000, DT_STOP_EPOCH_END, run, what);
	expect(run->epoch_ends == 1 && run->failures == 0 && run->nids == SAMPLES,
	       "%s: %zu samples, %zu epoch ends, %zu failures; expected %u, 1, 0 (%s)", what,
	       run->nids, run->epoch_ends, run->failures, SAMPLES, run->last_error);
}

/* ---- 1. shards replaced by rename under a running session --------------------------- */

static void write_shards(const char *dir, uint64_t seed, bool hidden_then_rename)
{
	char rel[128], tmp[128], a[PATH_MAX], b[PATH_MAX];
	pt_samples s;

	for (int i = 0; i < 2; i++) {
		snprintf(rel, sizeof(rel), "%s/part-%06d.bpk", dir, i);
		/* Names starting with '.' are writers' temporaries: never shards (PACK.md). */
		snprintf(tmp, sizeof(tmp), "%s/.part-%06d.bpk.tmp", dir, i);
		samples(&s, SAMPLES / 2, 64, seed + (uint64_t)i);
		write_pack(hidden_then_rename ? tmp : rel, &s);
		pt_samples_free(&s);
		if (hidden_then_rename)
			ck_assert_int_eq(rename(dt_root_path(&D, tmp, a, sizeof(a)),
						dt_root_path(&D, rel, b, sizeof(b))), 0);
	}
}

START_TEST(test_shards_renamed)
{
	bc_client *c = dt_connect_ok();
	struct timespec times[2];
	dt_run before = { 0 }, after = { 0 };
	dt_ref old, now;
	bc_stream_opts o;
	bc_stream *s1, *s2;
	fd_goal goal;
	char path[PATH_MAX];

	ck_assert_int_eq(mkdir(dt_root_path(&D, "ds", path, sizeof(path)), 0755), 0);
	write_shards("ds", 1, false);
	ref_root(&old, "ds");
	goal.at_most = daemon_fds(&goal.deleted) + 64;

	dt_opts(&o, "ds", 10, BC_SHUFFLE_NONE, 0);
	s1 = dt_open_ok(c, &o);
	dt_consume_ok(s1, &old, 5, 0, &before, "the session opened before the change");

	/* New shards by rename; the directory's mtime put back. */
	get_times("ds", times);
	write_shards("ds", 7, true);
	put_times("ds", times);
	ref_root(&now, "ds");
	ck_assert_uint_ne(bp_dataset_fingerprint(old.ds), bp_dataset_fingerprint(now.ds));

	s2 = dt_open_ok(c, &o);
	read_to_epoch_end(s2, &now, &after, "a session opened after the change (new shards)");
	/* The one opened before still reads the old shards, every sample intact. */
	dt_consume_ok(s1, &old, 1000, DT_STOP_EPOCH_END, &before,
		      "the session opened before the change, to its end");
	expect(before.nids == SAMPLES && before.epoch_ends == 1,
	       "the old session got %zu samples, %zu epoch ends", before.nids, before.epoch_ends);
	ck_assert_int_eq(bc_close(s1), 0);
	ck_assert_int_eq(bc_close(s2), 0);
	expect(dt_wait_sessions(D.sock, 0, TRIES), "the sessions did not end");

	/* The old version went with its last session: no deleted shard is held open. */
	expect(dt_wait_for(fds_settled, &goal, TRIES),
	       "after the old session ended batchd holds %zu descriptors on deleted files "
	       "(%zu in all)", goal.deleted, goal.n);
	dt_run_free(&before);
	dt_run_free(&after);
	dt_ref_close(&old);
	dt_ref_close(&now);
	bc_disconnect(c);
}
END_TEST

/* ---- 2. a pack rewritten in place ----------------------------------------------------- */

START_TEST(test_rewritten_in_place)
{
	bc_client *c = dt_connect_ok();
	struct timespec times[2];
	dt_run run = { 0 };
	dt_ref old, now;
	bc_stream_opts o;
	bc_stream *s;
	pt_samples smp;
	uint8_t *pack;
	size_t len;
	struct stat st;
	char path[PATH_MAX];
	int fd;

	samples(&smp, SAMPLES, 100, 1);
	write_pack("inplace.bpk", &smp);
	pt_samples_free(&smp);
	ref_root(&old, "inplace.bpk");
	open_read_close(c, "inplace.bpk", &old, 3);
	dt_ref_close(&old);

	/* The same size, other bytes, written over the same inode; mtime put back. */
	get_times("inplace.bpk", times);
	samples(&smp, SAMPLES, 100, 2);
	ck_assert_int_eq(pt_pack_build(&smp, 4, NULL, 0, 1, &pack, &len), 0);
	pt_samples_free(&smp);
	ck_assert_int_eq(stat(dt_root_path(&D, "inplace.bpk", path, sizeof(path)), &st), 0);
	ck_assert_uint_eq((uint64_t)st.st_size, len);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pwrite(fd, pack, len, 0), (ssize_t)len);
	ck_assert_int_eq(close(fd), 0);
	free(pack);
	put_times("inplace.bpk", times);

	ref_root(&now, "inplace.bpk");
	dt_opts(&o, "inplace.bpk", 10, BC_SHUFFLE_NONE, 0);
	s = dt_open_ok(c, &o);
	read_to_epoch_end(s, &now, &run, "a session opened after the rewrite");
	ck_assert_int_eq(bc_close(s), 0);
	dt_run_free(&run);
	dt_ref_close(&now);
	bc_disconnect(c);
}
END_TEST

/* ---- 3. versions and datasets let go ------------------------------------------------- */

/* Fifty versions of one pack in turn, each read by one session: the daemon does not grow. */
START_TEST(test_versions_freed)
{
	bc_client *c = dt_connect_ok();
	fd_goal goal = { 0 };
	size_t deleted;
	dt_ref ref;

	for (int i = 0; i < 50; i++) {
		replace_pack("ver.bpk", ".ver.tmp", 48, 100 + (uint64_t)i);
		ref_root(&ref, "ver.bpk");
		open_read_close(c, "ver.bpk", &ref, 2);
		dt_ref_close(&ref);
		if (i == 0)
			goal.at_most = daemon_fds(&deleted);
	}
	expect(dt_wait_for(fds_settled, &goal, TRIES),
	       "after 50 versions batchd holds %zu descriptors (%zu after the first), %zu of "
	       "them on deleted files", goal.n, goal.at_most, goal.deleted);
	bc_disconnect(c);
}
END_TEST

/* Fifty datasets opened once each: only the last few stay open for reopening. */
START_TEST(test_many_datasets_bounded)
{
	bc_client *c = dt_connect_ok();
	fd_goal goal = { 0 };
	char rel[64];
	pt_samples s;
	dt_ref ref;

	/* Each kept version holds two descriptors: its shard and the one reads use. */
	goal.at_most = daemon_fds(&goal.deleted) + 2 * BD_DATASET_KEEP_UNUSED;
	for (int i = 0; i < 50; i++) {
		snprintf(rel, sizeof(rel), "many-%02d.bpk", i);
		samples(&s, 40, 32, 500 + (uint64_t)i);
		write_pack(rel, &s);
		pt_samples_free(&s);
		ref_root(&ref, rel);
		open_read_close(c, rel, &ref, 1);
		dt_ref_close(&ref);
	}
	expect(dt_wait_for(fds_settled, &goal, TRIES),
	       "after 50 datasets batchd holds %zu descriptors (%zu allowed), %zu of them on "
	       "deleted files", goal.n, goal.at_most, goal.deleted);
	bc_disconnect(c);
}
END_TEST

/* ---- 4. entries that are no pack ---------------------------------------------------- */

static void expect_refused(bc_client *c, const char *path, int code, const char *m1,
			   const char *m2)
{
	const char *msg = dt_open_refused(c, path, code, m1);

	expect(strstr(msg, m2), "open %s: the message \"%s\" does not say \"%s\"", path, msg, m2);
}

/* A directory dataset whose second shard is what make() makes. */
static void odd_dataset(const char *dir, int (*make)(const char *path))
{
	char rel[128], path[PATH_MAX];
	pt_samples s;

	ck_assert_int_eq(mkdir(dt_root_path(&D, dir, path, sizeof(path)), 0755), 0);
	snprintf(rel, sizeof(rel), "%s/part-000000.bpk", dir);
	samples(&s, 20, 32, 3);
	write_pack(rel, &s);
	pt_samples_free(&s);
	snprintf(rel, sizeof(rel), "%s/part-000001.bpk", dir);
	ck_assert_int_eq(make(dt_root_path(&D, rel, path, sizeof(path))), 0);
}

static int make_fifo(const char *path) { return mkfifo(path, 0644); }
static int make_dir(const char *path) { return mkdir(path, 0755); }
static int make_link(const char *path) { return symlink("part-000000.bpk", path); }

START_TEST(test_odd_entries)
{
	bc_client *c = dt_connect_ok();
	char path[PATH_MAX], ev[4096];
	bc_stream_opts o;
	bc_stream *s = NULL;
	dt_ref ref;
	ssize_t n;
	int in, r;

	odd_dataset("fifo-ds", make_fifo);
	odd_dataset("dir-ds", make_dir);
	odd_dataset("link-ds", make_link);

	/* Whoever opens the FIFO, even with O_NONBLOCK, shows up here. */
	in = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	ck_assert_int_ge(in, 0);
	ck_assert_int_ge(inotify_add_watch(in, dt_root_path(&D, "fifo-ds/part-000001.bpk", path,
							      sizeof(path)),
					   IN_OPEN | IN_ACCESS | IN_CLOSE), 0);
	dt_opts(&o, "fifo-ds", 4, BC_SHUFFLE_NONE, 0);
	r = bc_open(c, &o, &s);
	if (r == 0)
		bc_close(s);
	n = read(in, ev, sizeof(ev));
	expect(n < 0 && errno == EAGAIN, "batchd opened the FIFO part-000001.bpk (%zd bytes of "
	       "inotify events); the open gave %d: \"%s\"", n, r, bc_client_error(c));
	close(in);
	expect(r == -EINVAL && strstr(bc_client_error(c), "part-000001.bpk") &&
	       strstr(bc_client_error(c), "is a FIFO"), "open fifo-ds: %s (%d): \"%s\", expected "
	       "-EINVAL saying part-000001.bpk is a FIFO", bc_strerror(r), r, bc_client_error(c));
	expect_refused(c, "dir-ds", -EINVAL, "part-000001.bpk", "directory");
	expect_refused(c, "link-ds", -ELOOP, "part-000001.bpk", "symbolic link");

	/* And the daemon carries on. */
	dt_ref_ok(&ref, DSET_ONE);
	open_read_close(c, DSET_ONE, &ref, 2);
	dt_ref_close(&ref);
	bc_disconnect(c);
}
END_TEST

/* ---- 5. paths -------------------------------------------------------------------------- */

START_TEST(test_paths)
{
	static const char *const fine[] = { "@//" DSET_ONE, "@/" DSET_ONE "/", "sub/../" DSET_ONE,
					    "sub//../" DSET_ONE, "sub/in-link.bpk", "@//sub/in-link.bpk",
					    "@/sub/../" DSET_ONE };
	bc_client *c = dt_connect_ok();
	char path[PATH_MAX], p[PATH_MAX];
	dt_ref ref, shards;

	ck_assert_int_eq(mkdir(dt_root_path(&D, "sub", path, sizeof(path)), 0755), 0);
	ck_assert_int_eq(symlink("../" DSET_ONE, dt_root_path(&D, "sub/in-link.bpk", path,
							       sizeof(path))), 0);
	dt_ref_ok(&ref, DSET_ONE);
	for (size_t i = 0; i < ARRAY_SIZE(fine); i++) {
		const char *name = fine[i];

		if (name[0] == '@') {
			snprintf(p, sizeof(p), "%s%s", D.root, name + 1);
			name = p;
		}
		open_read_close(c, name, &ref, 2);
	}
	dt_ref_close(&ref);
	dt_ref_ok(&shards, DSET_SHARDS);
	snprintf(p, sizeof(p), "%s//" DSET_SHARDS "//", D.root);
	open_read_close(c, p, &shards, 2);
	open_read_close(c, DSET_SHARDS "/", &shards, 2);
	dt_ref_close(&shards);

	expect_refused(c, "sub/../../x", -EACCES, "sub/../../x", "leaves the dataset root");
	snprintf(p, sizeof(p), "%s/../x", D.root);
	expect_refused(c, p, -EACCES, p, "leaves the dataset root");
	bc_disconnect(c);
}
END_TEST

/* ---- the suite ------------------------------------------------------------------------------ */

static Suite *versions_suite(void)
{
	Suite *s = suite_create("dataset-versions");

	tcase_add_test(dt_tcase(s, "shards_renamed", setup), test_shards_renamed);
	tcase_add_test(dt_tcase(s, "rewritten_in_place", setup), test_rewritten_in_place);
	tcase_add_test(dt_tcase(s, "versions_freed", setup), test_versions_freed);
	tcase_add_test(dt_tcase(s, "many_datasets_bounded", setup), test_many_datasets_bounded);
	tcase_add_test(dt_tcase(s, "odd_entries", setup), test_odd_entries);
	tcase_add_test(dt_tcase(s, "paths", setup), test_paths);
	return s;
}

int main(void)
{
	return dt_check_main(&D, versions_suite);
}
