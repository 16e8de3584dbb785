/* SPDX-License-Identifier: MIT */
/*
 * test-pack-beneath.c - the Check suite for tools/pack/pack_beneath.c,
 * how batchd-pack opens an input's files beneath the input's directory
 * descriptor following no symlink (issue 34, item 9).
 *
 * Every case runs three ways: openat2 itself, the component walk (what a
 * kernel before 5.6 gets) and pack_open_beneath (whichever this host
 * uses), and each must give the same errno, or open the same inode whose
 * bytes are read back. The race the tool must survive is played out
 * deterministically: a directory descriptor is taken and a path below it
 * opened (the scan), then a directory on that path is swapped for a
 * symlink to a directory outside holding a secret at the same relative
 * path, and the same open (the read) must refuse instead of reading it.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <check.h>

#include "pack_beneath.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static char g_dir[256];           /* mkdtemp: root/ and outside/ */
static int g_root = -1;           /* g_dir/root, O_DIRECTORY */
static bool g_openat2;            /* does this kernel (and filter) have it */

/* ---- the tree --------------------------------------------------------------- */

static void must(int r, const char *what, const char *rel)
{
	if (r < 0) {
		fprintf(stderr, "test-pack-beneath: %s %s: %s\n", what, rel, strerror(errno));
		exit(EXIT_FAILURE);
	}
}

static void put_file(const char *rel, const char *text)
{
	char path[PATH_MAX];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", g_dir, rel);
	f = fopen(path, "w");
	must(f && fputs(text, f) >= 0 && fclose(f) == 0 ? 0 : -1, "write", path);
}

static void put(const char *what, const char *rel, const char *target)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", g_dir, rel);
	if (!strcmp(what, "dir"))
		must(mkdir(path, 0755), "mkdir", path);
	else if (!strcmp(what, "link"))
		must(symlink(target, path), "symlink", path);
	else
		must(mkfifo(path, 0644), "mkfifo", path);
}

/*
 * root/a/b/f, a symlink to a directory inside (root/l -> a/b) and one
 * leading out (root/out -> ../outside), a symlinked file, a FIFO; and
 * outside/b/f, the secret a swap would reach.
 */
static void make_tree(void)
{
	const char *tmp = getenv("TMPDIR");
	char root[PATH_MAX];

	snprintf(g_dir, sizeof(g_dir), "%s/batchd-beneath-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	must(mkdtemp(g_dir) ? 0 : -1, "mkdtemp", g_dir);
	put("dir", "root", NULL);
	put("dir", "root/a", NULL);
	put("dir", "root/a/b", NULL);
	put("dir", "root/swap", NULL);
	put("dir", "root/swap/b", NULL);
	put("dir", "outside", NULL);
	put("dir", "outside/b", NULL);
	put_file("root/a/b/f", "inside\n");
	put_file("root/swap/b/f", "inside too\n");
	put_file("outside/b/f", "SECRET\n");
	put("link", "root/l", "a/b");
	put("link", "root/out", "../outside");
	put("link", "root/a/b/lf", "f");
	put("link", "root/abs", "/etc");
	put("fifo", "root/a/fifo", NULL);
	snprintf(root, sizeof(root), "%s/root", g_dir);
	g_root = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	must(g_root, "open", root);
}

/* nftw's callback for rm_tree: children first (FTW_DEPTH), links not followed. */
static int rm_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st, (void)type, (void)ftw;
	return remove(path);
}

static void rm_tree(const char *path)
{
	nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- the three ways ---------------------------------------------------------- */

enum way { WAY_KERNEL, WAY_WALK, WAY_AUTO, WAYS };
static const char *const way_name[WAYS] = { "openat2", "walk", "pack_open_beneath" };

static int open_way(int way, int dirfd, const char *rel, int flags)
{
	if (way == WAY_KERNEL)
		return pack__open_beneath_kernel(dirfd, rel, flags);
	if (way == WAY_WALK)
		return pack__open_beneath_walk(dirfd, rel, flags);
	return pack_open_beneath(dirfd, rel, flags);
}

/* The bytes behind fd (closed), for comparing what was opened. */
static const char *slurp(int fd)
{
	static char buf[64];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);

	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	return buf;
}

/* ---- cases: one table, every way ------------------------------------------------- */

typedef struct beneath_case {
	const char *rel;
	int flags;
	int want;                /* 0 or the negative errno */
	const char *bytes;       /* for 0 on a regular file: what it holds */
} beneath_case;

static const beneath_case cases[] = {
	{ "a/b/f", O_RDONLY, 0, "inside\n" },
	{ "./a//b/./f", O_RDONLY, 0, "inside\n" },
	{ "a/b/", O_RDONLY, 0, NULL },
	{ ".", O_RDONLY | O_DIRECTORY, 0, NULL },
	/* A symlink anywhere: refused, whether it stays inside or leads out. */
	{ "l/f", O_RDONLY, -ELOOP, NULL },
	{ "a/b/lf", O_RDONLY, -ELOOP, NULL },
	{ "out/b/f", O_RDONLY, -ELOOP, NULL },
	{ "abs/passwd", O_RDONLY, -ELOOP, NULL },
	/* A symlink last, asked for as a directory: open(2)'s O_NOFOLLOW answer is ENOTDIR. */
	{ "l", O_RDONLY | O_DIRECTORY, -ENOTDIR, NULL },
	/* Leaving by name: refused before any lookup. */
	{ "../outside/b/f", O_RDONLY, -EXDEV, NULL },
	{ "a/../a/b/f", O_RDONLY, -EXDEV, NULL },
	{ "a/b/..", O_RDONLY, -EXDEV, NULL },
	{ "/etc/passwd", O_RDONLY, -EXDEV, NULL },
	/* What openat gives otherwise. */
	{ "a/b/f/x", O_RDONLY, -ENOTDIR, NULL },
	{ "a/b/f/", O_RDONLY, -ENOTDIR, NULL },
	{ "a/nope/f", O_RDONLY, -ENOENT, NULL },
	{ "a/b/nope", O_RDONLY, -ENOENT, NULL },
	{ "", O_RDONLY, -ENOENT, NULL },
	{ "a/b/f", O_PATH, -EINVAL, NULL },
	{ "a/b/new", O_RDWR | O_CREAT, -EINVAL, NULL },
	/* A FIFO opened O_NONBLOCK does not wait for a writer (the caller then sees its type). */
	{ "a/fifo", O_RDONLY | O_NONBLOCK, 0, "" },
};

START_TEST(test_cases)
{
	const beneath_case *c = &cases[_i / WAYS];
	int way = _i % WAYS, fd;

	if (way == WAY_KERNEL && !g_openat2)
		return; /* nothing to compare: this host has no openat2 */
	fd = open_way(way, g_root, c->rel, c->flags);
	if (c->want) {
		if (fd >= 0)
			close(fd);
		ck_assert_msg(fd == c->want, "%s \"%s\": got %d (%s), want %d (%s)", way_name[way],
			      c->rel, fd, fd < 0 ? strerror(-fd) : "an fd", c->want, strerror(-c->want));
		return;
	}
	ck_assert_msg(fd >= 0, "%s \"%s\": %s", way_name[way], c->rel, strerror(-fd));
	if (c->bytes)
		ck_assert_str_eq(slurp(fd), c->bytes);
	else
		close(fd);
}
END_TEST

/* The race, played out: scanned through a directory, then the directory is a symlink out. */
START_TEST(test_swap_after_scan)
{
	char from[PATH_MAX], to[PATH_MAX], target[PATH_MAX];
	int way = _i, fd;

	if (way == WAY_KERNEL && !g_openat2)
		return;
	/* The scan: root/swap/b/f is inside and holds what it should. */
	fd = open_way(way, g_root, "swap/b/f", O_RDONLY);
	ck_assert_msg(fd >= 0, "%s: before the swap: %s", way_name[way], strerror(-fd));
	ck_assert_str_eq(slurp(fd), "inside too\n");
	/* The swap: root/swap becomes a symlink to outside/, which has b/f too. */
	snprintf(from, sizeof(from), "%s/root/swap", g_dir);
	snprintf(to, sizeof(to), "%s/root/swap.old", g_dir);
	snprintf(target, sizeof(target), "%s/outside", g_dir);
	ck_assert_int_eq(rename(from, to), 0);
	ck_assert_int_eq(symlink(target, from), 0);
	/* The read: the same path, the same descriptor, refused; the secret never read. */
	fd = open_way(way, g_root, "swap/b/f", O_RDONLY);
	if (fd >= 0)
		ck_abort_msg("%s: after the swap opened a file holding \"%s\"", way_name[way],
			     slurp(fd));
	ck_assert_msg(fd == -ELOOP, "%s: after the swap: %d (%s), want -ELOOP", way_name[way], fd,
		      strerror(-fd));
	/* A relative symlink, as an attacker inside the tree would write it: the same. */
	ck_assert_int_eq(unlink(from), 0);
	ck_assert_int_eq(symlink("../outside", from), 0);
	fd = open_way(way, g_root, "swap/b/f", O_RDONLY);
	if (fd >= 0)
		close(fd);
	ck_assert_msg(fd == -ELOOP, "%s: relative swap: %d, want -ELOOP", way_name[way], fd);
	ck_assert_int_eq(unlink(from), 0);
	ck_assert_int_eq(rename(to, from), 0);
}
END_TEST

/* The root itself moved away after the scan: the descriptor still names the tree scanned. */
START_TEST(test_root_moved)
{
	char from[PATH_MAX], to[PATH_MAX];
	int way = _i, fd;

	if (way == WAY_KERNEL && !g_openat2)
		return;
	snprintf(from, sizeof(from), "%s/root", g_dir);
	snprintf(to, sizeof(to), "%s/root.moved", g_dir);
	ck_assert_int_eq(rename(from, to), 0);
	ck_assert_int_eq(symlink("outside", from), 0);
	fd = open_way(way, g_root, "a/b/f", O_RDONLY);
	ck_assert_msg(fd >= 0, "%s: %s", way_name[way], strerror(-fd));
	ck_assert_str_eq(slurp(fd), "inside\n");
	ck_assert_int_eq(unlink(from), 0);
	ck_assert_int_eq(rename(to, from), 0);
}
END_TEST

/* ---- the suite --------------------------------------------------------------------- */

static Suite *beneath_suite(void)
{
	Suite *s = suite_create("pack-beneath");
	TCase *tc = tcase_create("open");

	tcase_add_loop_test(tc, test_cases, 0, (int)(ARRAY_SIZE(cases) * WAYS));
	suite_add_tcase(s, tc);
	tc = tcase_create("race");
	tcase_add_loop_test(tc, test_swap_after_scan, 0, WAYS);
	tcase_add_loop_test(tc, test_root_moved, 0, WAYS);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr;
	int fd, failed;

	make_tree();
	fd = pack__open_beneath_kernel(g_root, ".", O_RDONLY | O_DIRECTORY);
	g_openat2 = fd >= 0;
	if (fd >= 0)
		close(fd);
	else
		fprintf(stderr, "test-pack-beneath: note: no openat2 here (%s); the walk and "
				"pack_open_beneath are tested, openat2 is not\n", strerror(-fd));
	sr = srunner_create(beneath_suite());
	/* The race cases change the tree: one process, in order. */
	srunner_set_fork_status(sr, CK_NOFORK);
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	close(g_root);
	rm_tree(g_dir);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
