/* SPDX-License-Identifier: MIT */
/*
 * test-dataset.c - the Check suite for daemon/dataset/dataset.c and
 * dataset_path.c on their own: how a dataset path is resolved under the
 * roots, and how the cache keeps, replaces and frees versions.
 *
 * Resolution has two implementations (openat2, and the component walk for
 * hosts without it) and a host uses only one, so every path case runs
 * through both on the same table (dataset_priv.h) and must give the same
 * errno, the same message and the same inode; the relative cases also run
 * through openat2 itself against the bare walk, flag for flag. The magic
 * link cases use /proc/self as a root, the one place such links are.
 *
 * The cache cases load small packs written here (tests/lib/pack-testlib.c)
 * and count what bd_dataset_cache_stats() and /proc/self/fd say: versions
 * loaded and freed, unused ones kept, descriptors left open; and what the
 * versions charge to a memory budget (budget.h).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <check.h>
#include <linux/openat2.h>

#include "dataset.h"
#include "dataset_priv.h"
#include "pack-testlib.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static char g_dir[256];           /* mkdtemp: root/ and outside.bpk */
static char g_root[288];          /* g_dir/root, the one root */
static bool g_openat2;           /* does this kernel have it (else AUTO is the walk too) */

/* ---- the tree --------------------------------------------------------------- */

static void put_file(const char *rel, const char *text)
{
	char path[PATH_MAX];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", g_dir, rel);
	f = fopen(path, "w");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
		perror(path);
		exit(EXIT_FAILURE);
	}
}

static void put_link(const char *target, const char *rel)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", g_dir, rel);
	if (symlink(target, path) < 0) {
		perror(path);
		exit(EXIT_FAILURE);
	}
}

static void put_dir(const char *rel)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", g_dir, rel);
	if (mkdir(path, 0755) < 0) {
		perror(path);
		exit(EXIT_FAILURE);
	}
}

/*
 * root/one.bpk, root/sub/deep/, symlinks that stay beneath the root and
 * ones that leave it, and outside.bpk next to the root. Resolution only
 * opens with O_PATH, so the files need not be packs.
 */
static void make_tree(void)
{
	char abs_in[PATH_MAX];
	const char *tmp = getenv("TMPDIR");

	snprintf(g_dir, sizeof(g_dir), "%s/batchd-dataset-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(g_dir)) {
		perror("mkdtemp");
		exit(EXIT_FAILURE);
	}
	snprintf(g_root, sizeof(g_root), "%s/root", g_dir);
	put_dir("root");
	put_dir("root/sub");
	put_dir("root/sub/deep");
	put_dir("root/packs");
	put_file("root/one.bpk", "one\n");
	put_file("outside.bpk", "outside\n");
	put_link("../one.bpk", "root/sub/in-link.bpk");
	put_link("deep", "root/sub/dir-link");
	put_link("../../one.bpk", "root/sub/deep/back.bpk");
	put_link("sub/deep/back.bpk", "root/chain.bpk");
	put_link("../outside.bpk", "root/up-link.bpk");
	put_link("sub/../../outside.bpk", "root/up-down.bpk");
	put_link("/etc/passwd", "root/abs-link.bpk");
	snprintf(abs_in, sizeof(abs_in), "%s/one.bpk", g_root);
	put_link(abs_in, "root/abs-in.bpk");
	put_link("loop.bpk", "root/loop.bpk");
	put_link("sub/", "root/sub-slash");
}

static int rm_tree(const char *path)
{
	struct stat st;
	DIR *d;
	struct dirent *de;
	char sub[PATH_MAX];

	if (lstat(path, &st) < 0)
		return -1;
	if (S_ISDIR(st.st_mode) && (d = opendir(path))) {
		while ((de = readdir(d)))
			if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
				snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name);
				rm_tree(sub);
			}
		closedir(d);
		return rmdir(path);
	}
	return unlink(path);
}

/* ---- resolution: one table, both ways ------------------------------------------ */

typedef struct path_case {
	const char *path;        /* "@" at the start stands for the root's absolute path */
	int want;                /* 0 or the negative errno */
	const char *target;      /* for 0: what it must open, under g_dir ("@": the root) */
	const char *says;        /* for an error: in the message */
} path_case;

static const path_case cases[] = {
	{ "one.bpk", 0, "root/one.bpk", NULL },
	{ "./one.bpk", 0, "root/one.bpk", NULL },
	{ "sub//../one.bpk", 0, "root/one.bpk", NULL },
	{ "sub/../one.bpk", 0, "root/one.bpk", NULL },
	{ "sub/deep/../../one.bpk", 0, "root/one.bpk", NULL },
	{ "sub/in-link.bpk", 0, "root/one.bpk", NULL },
	{ "sub/dir-link/../in-link.bpk", 0, "root/one.bpk", NULL },
	{ "sub/deep/back.bpk", 0, "root/one.bpk", NULL },
	{ "chain.bpk", 0, "root/one.bpk", NULL },
	{ "sub", 0, "root/sub", NULL },
	{ "sub/", 0, "root/sub", NULL },
	{ "sub//deep", 0, "root/sub/deep", NULL },
	{ "sub-slash", 0, "root/sub", NULL },
	{ "sub/deep/..", 0, "root/sub", NULL },
	{ ".", 0, "root", NULL },
	{ "@//one.bpk", 0, "root/one.bpk", NULL },
	{ "@/one.bpk/", 0, "root/one.bpk", NULL },
	{ "@//sub///deep//", 0, "root/sub/deep", NULL },
	{ "@", 0, "root", NULL },
	{ "@/", 0, "root", NULL },
	{ "@/sub/../one.bpk", 0, "root/one.bpk", NULL },
	{ "../outside.bpk", -EACCES, NULL, "leaves the dataset root" },
	{ "sub/../../outside.bpk", -EACCES, NULL, "leaves the dataset root" },
	{ "sub/deep/../../../outside.bpk", -EACCES, NULL, "leaves the dataset root" },
	{ "..", -EACCES, NULL, "leaves the dataset root" },
	{ "up-link.bpk", -EACCES, NULL, "leaves the dataset root" },
	{ "up-down.bpk", -EACCES, NULL, "leaves the dataset root" },
	{ "abs-link.bpk", -EACCES, NULL, "leaves the dataset root" },
	{ "abs-in.bpk", -EACCES, NULL, "leaves the dataset root" },
	{ "@/../outside.bpk", -EACCES, NULL, "leaves the dataset root" },
	{ "loop.bpk", -ELOOP, NULL, "Too many levels of symbolic links" },
	{ "missing.bpk", -ENOENT, NULL, "no such dataset under the roots" },
	{ "sub/missing/one.bpk", -ENOENT, NULL, "no such dataset under the roots" },
	/* A near miss is named: a swap, a letter too many, in a subdirectory. */
	{ "one.bkp", -ENOENT, NULL, "; nearest: one.bpk" },
	{ "onne.bpk", -ENOENT, NULL, "; nearest: one.bpk" },
	{ "sub/deeep", -ENOENT, NULL, "; nearest: sub/deep" },
	{ "@/missing.bpk", -ENOENT, NULL, "no such dataset" },
	{ "one.bpk/x", -ENOTDIR, NULL, "Not a directory" },
	{ "one.bpk/", 0, "root/one.bpk", NULL },
	{ "/etc/passwd", -EACCES, NULL, "outside the dataset roots" },
	{ "", -EINVAL, NULL, "empty dataset path" },
};

static const char *case_path(const char *p, char *buf, size_t len)
{
	if (p[0] != '@')
		return p;
	snprintf(buf, len, "%s%s", g_root, p + 1);
	return buf;
}

static void stat_target(const char *target, struct stat *st)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", g_dir, target);
	ck_assert_msg(stat(path, st) == 0, "stat %s", path);
}

/* Resolve c one way; the message into err. @return the errno, the fd checked and closed. */
static int resolve_case(const char *const *roots, size_t nroots, const path_case *c,
			enum bd__resolve how, char *err, size_t errlen)
{
	const char *what = how == BD__RESOLVE_WALK ? "walk" : "openat2";
	char buf[PATH_MAX];
	const char *path = case_path(c->path, buf, sizeof(buf));
	struct stat got, want;
	int fd = -1, r;

	err[0] = '\0';
	r = bd__dataset_resolve(roots, nroots, path, how, &fd, err, errlen);
	ck_assert_msg(r == c->want, "%s: \"%s\" gave %d (%s), expected %d", what, path, r, err,
		      c->want);
	if (r < 0) {
		ck_assert_msg(strstr(err, c->says), "%s: \"%s\": message \"%s\" lacks \"%s\"", what,
			      path, err, c->says);
		return r;
	}
	ck_assert_int_eq(fstat(fd, &got), 0);
	close(fd);
	stat_target(c->target, &want);
	ck_assert_msg(got.st_dev == want.st_dev && got.st_ino == want.st_ino,
		      "%s: \"%s\" opened something else than %s", what, path, c->target);
	return r;
}

/* Each case, through openat2 and through the walk: the same outcome, the same words. */
START_TEST(test_resolve_both_ways)
{
	const char *roots[] = { g_root };
	const path_case *c = &cases[_i];
	char by_kernel[512], by_walk[512];

	resolve_case(roots, 1, c, BD__RESOLVE_AUTO, by_kernel, sizeof(by_kernel));
	resolve_case(roots, 1, c, BD__RESOLVE_WALK, by_walk, sizeof(by_walk));
	ck_assert_msg(!strcmp(by_kernel, by_walk), "\"%s\": openat2 says \"%s\", the walk \"%s\"",
		      c->path, by_kernel, by_walk);
}
END_TEST

/* A relative path through openat2 itself and through the bare walk, with flags. */
static void compare_raw(int rootfd, const char *rel, int flags)
{
	struct open_how how = { .flags = (uint64_t)flags,
				.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS };
	long k = syscall(SYS_openat2, rootfd, rel, &how, sizeof(how));
	int kerr = k < 0 ? -errno : 0;
	int w = bd__dataset_open_beneath_walk(rootfd, rel, flags);
	struct stat a, b;

	ck_assert_msg((k < 0 ? kerr : 0) == (w < 0 ? w : 0),
		      "\"%s\" flags %#x: openat2 gives %d, the walk %d", rel, flags,
		      k < 0 ? kerr : (int)k, w);
	if (k >= 0) {
		ck_assert_int_eq(fstat((int)k, &a), 0);
		ck_assert_int_eq(fstat(w, &b), 0);
		ck_assert_msg(a.st_dev == b.st_dev && a.st_ino == b.st_ino &&
			      (a.st_mode & S_IFMT) == (b.st_mode & S_IFMT),
			      "\"%s\" flags %#x: openat2 and the walk opened different files", rel,
			      flags);
		close((int)k);
		close(w);
	}
}

START_TEST(test_walk_matches_openat2)
{
	static const int flags[] = { O_PATH, O_PATH | O_NOFOLLOW, O_PATH | O_DIRECTORY };
	char big[NAME_MAX + 8];
	int rootfd;

	if (!g_openat2) {
		printf("NOTE: no openat2 on this kernel: the walk is checked against the table only\n");
		return;
	}
	rootfd = open(g_root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ck_assert_int_ge(rootfd, 0);
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		if (cases[i].path[0] == '@' || cases[i].path[0] == '/' || !cases[i].path[0])
			continue;
		for (size_t f = 0; f < ARRAY_SIZE(flags); f++)
			compare_raw(rootfd, cases[i].path, flags[f]);
	}
	/* What only the bare functions see: no normalising in front of them. */
	compare_raw(rootfd, "/etc", O_PATH);
	compare_raw(rootfd, "sub-slash/", O_PATH | O_NOFOLLOW);
	compare_raw(rootfd, "sub/in-link.bpk", O_PATH | O_NOFOLLOW);
	compare_raw(rootfd, big, O_PATH);
	close(rootfd);
}
END_TEST

/*
 * Magic links (/proc/PID/exe, cwd, fd/N, ns/...) are refused with ELOOP;
 * procfs's plain symlinks (self, mounts) are followed. Both ways.
 */
START_TEST(test_magic_links)
{
	static const struct {
		const char *root, *path;
		int want;
	} magic[] = {
		{ "/proc/self", "exe", -ELOOP },
		{ "/proc/self", "cwd", -ELOOP },
		{ "/proc/self", "cwd/x", -ELOOP },
		{ "/proc/self", "fd/0", -ELOOP },
		{ "/proc/self", "ns/net", -ELOOP },
		{ "/proc", "self/exe", -ELOOP },
		{ "/proc", "self/status", 0 },
		{ "/proc", "mounts", 0 },
	};
	char by_kernel[512], by_walk[512];

	for (size_t i = 0; i < ARRAY_SIZE(magic); i++) {
		const char *roots[] = { magic[i].root };
		int fa = -1, fb = -1;
		int a = bd__dataset_resolve(roots, 1, magic[i].path, BD__RESOLVE_AUTO, &fa,
					    by_kernel, sizeof(by_kernel));
		int b = bd__dataset_resolve(roots, 1, magic[i].path, BD__RESOLVE_WALK, &fb,
					    by_walk, sizeof(by_walk));

		ck_assert_msg(a == magic[i].want && b == magic[i].want,
			      "%s under %s: openat2 %d, walk %d, expected %d (\"%s\" / \"%s\")",
			      magic[i].path, magic[i].root, a, b, magic[i].want, by_kernel, by_walk);
		if (a < 0) {
			ck_assert_str_eq(by_kernel, by_walk);
			continue;
		}
		close(fa);
		close(fb);
	}
}
END_TEST

/* A relative path is tried against each root in order; an absolute one under its own. */
START_TEST(test_two_roots)
{
	char second[320], path[PATH_MAX], err[512];
	const char *roots[2];
	int fd, r;

	snprintf(second, sizeof(second), "%s/root/sub", g_dir);
	roots[0] = second;
	roots[1] = g_root;
	for (int how = BD__RESOLVE_AUTO; how <= BD__RESOLVE_WALK; how++) {
		struct stat got, want;

		ck_assert_int_eq(bd__dataset_resolve(roots, 2, "one.bpk", how, &fd, err,
						     sizeof(err)), 0);
		ck_assert_int_eq(fstat(fd, &got), 0);
		close(fd);
		stat_target("root/one.bpk", &want);
		ck_assert(got.st_ino == want.st_ino);
		/* Under the first root, "../one.bpk" leaves it: refused, not tried further. */
		r = bd__dataset_resolve(roots, 2, "../one.bpk", how, &fd, err, sizeof(err));
		ck_assert_int_eq(r, -EACCES);
		ck_assert_ptr_nonnull(strstr(err, second));
		snprintf(path, sizeof(path), "%s//deep/", second);
		ck_assert_int_eq(bd__dataset_resolve(roots, 2, path, how, &fd, err, sizeof(err)), 0);
		close(fd);
	}
}
END_TEST

/* ---- the cache ------------------------------------------------------------------- */

/* Write a pack of n samples (seed picks the bytes) to root/rel. */
static void write_pack(const char *rel, size_t n, uint64_t seed)
{
	char path[PATH_MAX];
	pt_samples s;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", g_root, rel);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ck_assert_msg(fd >= 0, "create %s", path);
	pt_samples_make(&s, n, 16, 64, PT_RANDOM, seed);
	ck_assert_int_eq(pt_pack_write(fd, &s, 4, NULL, 0, 1, NULL), 0);
	pt_samples_free(&s);
	close(fd);
}

/* Replace root/rel by a new pack, by rename (a new inode, as rsync does). */
static void replace_pack(const char *rel, size_t n, uint64_t seed)
{
	char tmp[256], a[PATH_MAX], b[PATH_MAX];

	snprintf(tmp, sizeof(tmp), "%s.new", rel);
	write_pack(tmp, n, seed);
	snprintf(a, sizeof(a), "%s/%s", g_root, tmp);
	snprintf(b, sizeof(b), "%s/%s", g_root, rel);
	ck_assert_int_eq(rename(a, b), 0);
}

/* Descriptors of this process open on files of the tree that were deleted. */
static size_t deleted_fds(void)
{
	char link[300], target[PATH_MAX];
	struct dirent *de;
	size_t n = 0;
	DIR *d = opendir("/proc/self/fd");

	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d))) {
		ssize_t len;

		snprintf(link, sizeof(link), "/proc/self/fd/%s", de->d_name);
		len = readlink(link, target, sizeof(target) - 1);
		if (len <= 0)
			continue;
		target[len] = '\0';
		n += !strncmp(target, g_dir, strlen(g_dir)) && strstr(target, " (deleted)");
	}
	closedir(d);
	return n;
}

static bd_dataset *get_policy_ok(const char *path, const bd_read_policy *rp)
{
	const char *roots[] = { g_root };
	bd_dataset *d = NULL;
	char err[512];
	int r = bd_dataset_get(roots, 1, path, rp, &d, err, sizeof(err));

	ck_assert_msg(r == 0, "bd_dataset_get %s: %d: %s", path, r, err);
	return d;
}

/* Buffered, no cache, memory unknown: the direct tier read without O_DIRECT. */
static bd_dataset *get_ok(const char *path)
{
	const bd_read_policy rp = { .direct = BD_DIRECT_OFF, .tier = BD_TIER_AUTO };

	return get_policy_ok(path, &rp);
}

/* Reopening what did not change is the cached version; a replaced one is not. */
START_TEST(test_versions)
{
	bd_dataset *a, *b, *c;
	bd_dataset_stats st;

	write_pack("packs/v.bpk", 10, 1);
	a = get_ok("packs/v.bpk");
	b = get_ok("packs/v.bpk");
	ck_assert_ptr_eq(a, b);
	bd_dataset_put(b);

	/* A session holds a; the file is replaced under it. */
	replace_pack("packs/v.bpk", 10, 2);
	c = get_ok("packs/v.bpk");
	ck_assert_ptr_ne(a, c);
	ck_assert_uint_ne(bp_dataset_fingerprint(a->ds), bp_dataset_fingerprint(c->ds));
	bd_dataset_cache_stats(&st);
	ck_assert_uint_eq(st.loaded, 2);
	ck_assert_uint_eq(st.held, 2);
	ck_assert_uint_eq(deleted_fds(), 2);   /* a's shard and its read descriptor */

	/* The old version goes with its last session; the current one stays cached. */
	bd_dataset_put(a);
	bd_dataset_put(c);
	bd_dataset_cache_stats(&st);
	ck_assert_uint_eq(st.freed, 1);
	ck_assert_uint_eq(st.held, 1);
	ck_assert_uint_eq(st.unused, 1);
	ck_assert_uint_eq(deleted_fds(), 0);

	/* Replaced while nobody uses it: freed when the new version is loaded. */
	replace_pack("packs/v.bpk", 10, 3);
	a = get_ok("packs/v.bpk");
	bd_dataset_cache_stats(&st);
	ck_assert_uint_eq(st.loaded, 3);
	ck_assert_uint_eq(st.freed, 2);
	ck_assert_uint_eq(st.held, 1);
	ck_assert_uint_eq(deleted_fds(), 0);
	bd_dataset_put(a);
	bd_dataset_cache_clear();
	bd_dataset_cache_stats(&st);
	ck_assert_uint_eq(st.held, 0);
	ck_assert_uint_eq(st.freed, 3);
}
END_TEST

/* Many datasets opened once each: at most BD_DATASET_KEEP_UNUSED stay, the latest ones. */
START_TEST(test_unused_bound)
{
	enum { N = BD_DATASET_KEEP_UNUSED + 9 };
	bd_dataset *d, *first = NULL;
	bd_dataset_stats st;
	char rel[64];

	for (int i = 0; i < N; i++) {
		snprintf(rel, sizeof(rel), "packs/d%02d.bpk", i);
		write_pack(rel, 8, 100 + (uint64_t)i);
		d = get_ok(rel);
		bd_dataset_put(d);
		if (i == N - 1)
			first = d;
	}
	bd_dataset_cache_stats(&st);
	ck_assert_uint_eq(st.loaded, N);
	ck_assert_uint_eq(st.unused, BD_DATASET_KEEP_UNUSED);
	ck_assert_uint_eq(st.held, BD_DATASET_KEEP_UNUSED);
	ck_assert_uint_eq(st.freed, N - BD_DATASET_KEEP_UNUSED);
	/* The most recent is still the cached one; the first was evicted and loads again. */
	snprintf(rel, sizeof(rel), "packs/d%02d.bpk", N - 1);
	d = get_ok(rel);
	ck_assert_ptr_eq(d, first);
	bd_dataset_put(d);
	d = get_ok("packs/d00.bpk");
	bd_dataset_put(d);
	bd_dataset_cache_stats(&st);
	ck_assert_uint_eq(st.loaded, N + 1);
	ck_assert_uint_eq(st.unused, BD_DATASET_KEEP_UNUSED);
	bd_dataset_cache_clear();
}
END_TEST

/* ---- the budget -------------------------------------------------------------------------- */

/*
 * Versions charged to a budget: each once, its bytes exactly (at least its
 * index and lookup tables); an unused one stays charged; a load that does
 * not fit is refused -ENOMEM from its footer, naming the figures, and
 * nothing is loaded; an unused version is evicted for a load that needs
 * its room; a uid's limit refuses before anything is loaded; and every
 * charge comes back when the versions go.
 */
START_TEST(test_budget)
{
	const char *roots[] = { g_root };
	bd_budget b;
	bd_read_policy rp = { .direct = BD_DIRECT_OFF, .tier = BD_TIER_AUTO, .budget = &b };
	bd_dataset *x, *y, *z = NULL;
	bd_dataset_stats st;
	bd_budget_view v;
	char err[512];
	uint64_t one;
	int r;

	write_pack("packs/b0.bpk", 2000, 7);
	write_pack("packs/b1.bpk", 2000, 8);
	write_pack("packs/b2.bpk", 2000, 9);
	bd_budget_init(&b);
	bd_budget_set(&b, UINT64_C(1) << 30, 0, false);
	x = get_policy_ok("packs/b0.bpk", &rp);
	one = x->bytes;
	bd_budget_get(&b, &v);
	ck_assert_uint_eq(v.held[BD_BUDGET_DATASETS], one);
	ck_assert_uint_ge(one, bp_dataset_shard(x->ds, 0)->footer.index_size +
			       bp_dataset_lookup_bytes(x->ds));
	/* The same version again: charged once. */
	y = get_policy_ok("packs/b0.bpk", &rp);
	ck_assert_ptr_eq(x, y);
	bd_dataset_put(y);
	bd_budget_get(&b, &v);
	ck_assert_uint_eq(v.held[BD_BUDGET_DATASETS], one);

	/* Room for half another while x is used: refused before it is loaded. */
	bd_budget_set(&b, one * 3 / 2, 0, false);
	r = bd_dataset_get(roots, 1, "packs/b1.bpk", &rp, &z, err, sizeof(err));
	ck_assert_int_eq(r, -ENOMEM);
	ck_assert_msg(strstr(err, "memory budget: dataset packs/b1.bpk: its index and tables need ") &&
		      strstr(err, "read from its shards' footers, before loading") &&
		      strstr(err, "raise [memory] budget"), "%s", err);
	bd_dataset_cache_stats(&st);
	ck_assert_uint_eq(st.loaded, 1);
	bd_budget_get(&b, &v);
	ck_assert_uint_eq(v.held[BD_BUDGET_DATASETS], one);

	/* x unused: kept and charged, then evicted for b1. */
	bd_dataset_put(x);
	bd_dataset_cache_stats(&st);
	ck_assert_uint_eq(st.unused, 1);
	ck_assert_uint_eq(st.unused_bytes, one);
	z = get_policy_ok("packs/b1.bpk", &rp);
	bd_dataset_cache_stats(&st);
	ck_assert_uint_eq(st.evicted, 1);
	ck_assert_uint_eq(st.held, 1);
	bd_budget_get(&b, &v);
	ck_assert_uint_eq(v.held[BD_BUDGET_DATASETS], z->bytes);
	bd_dataset_put(z);

	/* The uid's limit: refused from the footer, nothing loaded or taken. */
	bd_budget_set(&b, UINT64_C(1) << 30, 0, false);
	rp.uid = 1234;
	rp.uid_limit = one / 2;
	r = bd_dataset_get(roots, 1, "packs/b2.bpk", &rp, &z, err, sizeof(err));
	ck_assert_int_eq(r, -ENOMEM);
	ck_assert_msg(strstr(err, "memory limit per user: dataset packs/b2.bpk: its index and "
			      "tables need ") && strstr(err, "uid 1234 holds 0 B of the "), "%s", err);
	bd_dataset_cache_stats(&st);
	ck_assert_uint_eq(st.loaded, 2);

	bd_dataset_cache_clear();
	bd_budget_get(&b, &v);
	ck_assert_uint_eq(v.held[BD_BUDGET_DATASETS], 0);
	bd_budget_destroy(&b);
}
END_TEST

/* ---- tiers ---------------------------------------------------------------------------- */

/* The choice alone, at its edges. */
START_TEST(test_tier_choose)
{
	const uint64_t MiB = UINT64_C(1) << 20;
	bd_read_policy p = { .tier = BD_TIER_AUTO, .cache_budget = 100 * MiB, .memory = 1000 * MiB };

	/* Decoded bytes that fit the cache: ram, however large the stored form. */
	ck_assert_int_eq(bd_tier_choose(&p, 100 * MiB, 900 * MiB), BD_TIER_RAM);
	/* Stored bytes in half the memory: page; one byte more: direct. */
	ck_assert_int_eq(bd_tier_choose(&p, 100 * MiB + 1, 500 * MiB), BD_TIER_PAGE);
	ck_assert_int_eq(bd_tier_choose(&p, 100 * MiB + 1, 500 * MiB + 1), BD_TIER_DIRECT);
	/* No cache, memory unknown: direct. */
	p.cache_budget = 0;
	p.memory = 0;
	ck_assert_int_eq(bd_tier_choose(&p, 1, 1), BD_TIER_DIRECT);
	/* Forced, whatever the sizes. */
	p.tier = BD_TIER_PAGE;
	ck_assert_int_eq(bd_tier_choose(&p, UINT64_MAX, UINT64_MAX), BD_TIER_PAGE);
	p.tier = BD_TIER_RAM;
	ck_assert_int_eq(bd_tier_choose(&p, UINT64_MAX, UINT64_MAX), BD_TIER_RAM);
	ck_assert_str_eq(bd_tier_name(BD_TIER_RAM), "ram");
	ck_assert_str_eq(bd_tier_name(BD_TIER_PAGE), "page");
	ck_assert_str_eq(bd_tier_name(BD_TIER_DIRECT), "direct");
}
END_TEST

/* Each loaded version gets its tier, and the reads and caching that go with it. */
START_TEST(test_tier_loaded)
{
	bd_read_policy rp = { .direct = BD_DIRECT_AUTO, .tier = BD_TIER_AUTO,
			      .cache_budget = UINT64_C(1) << 20, .memory = UINT64_C(1) << 30 };
	bd_dataset *ram, *page, *forced, *again;

	write_pack("packs/t.bpk", 10, 9);
	ram = get_policy_ok("packs/t.bpk", &rp);
	ck_assert_int_eq(ram->tier, BD_TIER_RAM);
	ck_assert(ram->cache_all);
	ck_assert(!ram->direct);       /* buffered: the cache keeps it decoded */
	/* The same request again: the cached version, tier and all. */
	again = get_policy_ok("packs/t.bpk", &rp);
	ck_assert_ptr_eq(again, ram);
	bd_dataset_put(again);

	/* Another tier asked for: another version, so a reload changes what new sessions get. */
	rp.tier = BD_TIER_PAGE;
	forced = get_policy_ok("packs/t.bpk", &rp);
	ck_assert_ptr_ne(forced, ram);
	ck_assert_int_eq(forced->tier, BD_TIER_PAGE);
	ck_assert(!forced->cache_all);
	ck_assert(!forced->direct);

	/* No cache, and room in memory: page, buffered. */
	rp.tier = BD_TIER_AUTO;
	rp.cache_budget = 0;
	write_pack("packs/p.bpk", 10, 10);
	page = get_policy_ok("packs/p.bpk", &rp);
	ck_assert_int_eq(page->tier, BD_TIER_PAGE);
	ck_assert(!page->cache_all);
	ck_assert(!page->direct);
	bd_dataset_put(ram);
	bd_dataset_put(forced);
	bd_dataset_put(page);
	bd_dataset_cache_clear();
}
END_TEST

/* ---- the suite --------------------------------------------------------------------- */

static Suite *dataset_suite(void)
{
	Suite *s = suite_create("dataset");
	TCase *tc = tcase_create("resolve");

	tcase_add_loop_test(tc, test_resolve_both_ways, 0, ARRAY_SIZE(cases));
	tcase_add_test(tc, test_walk_matches_openat2);
	tcase_add_test(tc, test_magic_links);
	tcase_add_test(tc, test_two_roots);
	suite_add_tcase(s, tc);
	tc = tcase_create("cache");
	tcase_add_test(tc, test_versions);
	tcase_add_test(tc, test_unused_bound);
	tcase_add_test(tc, test_budget);
	suite_add_tcase(s, tc);
	tc = tcase_create("tiers");
	tcase_add_test(tc, test_tier_choose);
	tcase_add_test(tc, test_tier_loaded);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	struct open_how how = { .flags = O_PATH, .resolve = RESOLVE_BENEATH };
	long fd;
	SRunner *sr;
	int failed;

	make_tree();
	fd = syscall(SYS_openat2, AT_FDCWD, ".", &how, sizeof(how));
	g_openat2 = fd >= 0 || (errno != ENOSYS && errno != EPERM);
	if (fd >= 0)
		close((int)fd);
	sr = srunner_create(dataset_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	rm_tree(g_dir);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
