/* SPDX-License-Identifier: MIT */
/*
 * dataset_path.c - find a dataset's path under the roots and open it
 * without leaving them (see dataset.h's path rules).
 *
 * A client names a dataset by a path, and the daemon may read only what
 * lies under its configured roots: a "..", a symlink or a magic link that
 * leads out must be refused however the path is spelled, and nothing (a
 * FIFO, a device) may be opened for reading before its type is known. So
 * the path is normalised and matched against the roots, then opened with
 * O_PATH beneath the root's descriptor by openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_MAGICLINKS), or, where openat2 is missing (ENOSYS, or EPERM
 * under seccomp), by a component walk in user space that gives the same
 * answers; only then is the O_PATH descriptor reopened for reading. This
 * is kept apart from dataset.c, which loads what was found and caches its
 * versions, because it is the daemon's one guard on which files a client
 * can make it read.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/magic.h>
#include <linux/openat2.h>

#include "dataset_priv.h"
#include "log.h"

/* ---- the component walk, where openat2 is missing ----------------------------------------- */

#define MAX_LINKS 40            /* the kernel's MAXSYMLINKS: openat2 gives ELOOP past it */

/*
 * Where the walk stands: a stack of O_PATH descriptors from the root down,
 * so that ".." goes back to the directory the walk came from (as the
 * kernel's does) and can never go above dirs[0].
 */
typedef struct walk {
	int *dirs;
	size_t depth, cap;       /* dirs[depth] is the current directory */
	char *path;              /* what is left to walk starts at p */
	const char *p;
	unsigned links;
} walk;

static void walk_free(walk *w)
{
	for (size_t i = 0; w->dirs && i <= w->depth; i++)
		if (w->dirs[i] >= 0)
			close(w->dirs[i]);
	free(w->dirs);
	free(w->path);
}

/* Step into directory fd (taken, closed on failure). */
static int walk_push(walk *w, int fd)
{
	if (w->depth + 1 == w->cap) {
		int *grown = realloc(w->dirs, 2 * w->cap * sizeof(*grown));

		if (!grown) {
			close(fd);
			return -ENOMEM;
		}
		w->dirs = grown;
		w->cap *= 2;
	}
	w->dirs[++w->depth] = fd;
	return 0;
}

/*
 * Magic links (/proc/PID/fd/N, exe, cwd, root, ns/...) are procfs symlinks
 * whose target is no relative path: an absolute one the kernel jumps to
 * without resolving it, or TYPE:[N]. procfs's plain symlinks (self,
 * thread-self, mounts -> self/mounts) are relative paths.
 */
static bool magic_link(int linkfd, const char *target)
{
	struct statfs sf;

	return fstatfs(linkfd, &sf) == 0 && sf.f_type == PROC_SUPER_MAGIC &&
	       (target[0] == '/' || strchr(target, ':'));
}

/* Replace the symlink linkfd by its target, resolved from where the walk stands. */
static int walk_follow(walk *w, int linkfd, const char *after)
{
	char target[PATH_MAX], *path;
	ssize_t n;

	if (w->links++ >= MAX_LINKS)
		return -ELOOP;
	n = readlinkat(linkfd, "", target, sizeof(target));
	if (n < 0)
		return -errno;
	if ((size_t)n == sizeof(target))
		return -ENAMETOOLONG;
	target[n] = '\0';
	if (magic_link(linkfd, target))
		return -ELOOP;
	/* RESOLVE_BENEATH: an absolute target leaves the root, whatever it names. */
	if (target[0] == '/')
		return -EXDEV;
	if (asprintf(&path, "%s%s", target, after) < 0)
		return -ENOMEM;
	free(w->path);
	w->path = path;
	w->p = path;
	return 0;
}

/*
 * Walk one component, name[0..len); w->p is already past it. @return 0 to
 * go on; 1 with *ret_fd when it was the last; negative errno.
 */
static int walk_step(walk *w, const char *name, size_t len, int flags, int *ret_fd)
{
	bool last = w->p[0] == '\0';
	char part[NAME_MAX + 1];
	struct stat st;
	int fd, r;

	if (len == 1 && name[0] == '.')
		return 0;
	if (len == 2 && name[0] == '.' && name[1] == '.') {
		if (w->depth == 0)
			return -EXDEV;
		close(w->dirs[w->depth--]);
		return 0;
	}
	if (len > NAME_MAX)
		return -ENAMETOOLONG;
	memcpy(part, name, len);
	part[len] = '\0';
	fd = openat(w->dirs[w->depth], part, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	/* A trailing '/' (not last) follows a symlink even under O_NOFOLLOW, as open(2) does. */
	if (S_ISLNK(st.st_mode) && !(last && (flags & O_NOFOLLOW))) {
		r = walk_follow(w, fd, w->p);
		close(fd);
		return r;
	}
	if (last) {
		*ret_fd = fd;
		return 1;
	}
	if (!S_ISDIR(st.st_mode)) {
		close(fd);
		return -ENOTDIR;
	}
	return walk_push(w, fd);
}

/* The walk's start: the root as O_PATH at the bottom of the stack, all of rel to go. */
static int walk_init(walk *w, int rootfd, const char *rel)
{
	*w = (walk){ .cap = 16 };
	w->dirs = malloc(w->cap * sizeof(*w->dirs));
	if (!w->dirs)
		return -ENOMEM;
	w->dirs[0] = -1;
	w->path = strdup(rel);
	if (!w->path)
		return -ENOMEM;
	w->p = w->path;
	w->dirs[0] = openat(rootfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	return w->dirs[0] < 0 ? -errno : 0;
}

int bd__dataset_open_beneath_walk(int rootfd, const char *rel, int flags)
{
	struct stat st;
	walk w;
	int fd = -1, r;

	if (!(flags & O_PATH))
		return -EINVAL;
	if (rel[0] == '/')
		return -EXDEV;
	if (strlen(rel) >= PATH_MAX)
		return -ENAMETOOLONG;
	r = walk_init(&w, rootfd, rel);
	while (r == 0) {
		const char *name = w.p + strspn(w.p, "/");
		size_t len = strcspn(name, "/");

		if (!len) {
			/* Ended on a directory: "", ".", "..", or after a '/'. */
			fd = fcntl(w.dirs[w.depth], F_DUPFD_CLOEXEC, 0);
			r = fd < 0 ? -errno : 1;
			break;
		}
		w.p = name + len;
		r = walk_step(&w, name, len, flags, &fd);
	}
	walk_free(&w);
	if (r < 0)
		return r;
	if ((flags & O_DIRECTORY) && (fstat(fd, &st) < 0 || !S_ISDIR(st.st_mode))) {
		close(fd);
		return -ENOTDIR;
	}
	return fd;
}

/* ---- openat2, and the roots -------------------------------------------------------------- */

/* Open rel beneath rootfd with flags; -EXDEV when it would escape. */
static int open_beneath(int rootfd, const char *rel, int flags, enum bd__resolve how)
{
	struct open_how oh = {
		.flags = (uint64_t)flags,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
	};
	long fd = -1;

	if (how == BD__RESOLVE_WALK)
		return bd__dataset_open_beneath_walk(rootfd, rel, flags);
	/* EAGAIN: a rename or mount raced a ".."; the kernel asks to try again. */
	for (int tries = 0; tries < 3 && fd < 0; tries++) {
		fd = syscall(SYS_openat2, rootfd, rel, &oh, sizeof(oh));
		if (fd < 0 && errno != EAGAIN)
			break;
	}
	if (fd >= 0)
		return (int)fd;
	if (errno == ENOSYS || errno == EPERM)
		return bd__dataset_open_beneath_walk(rootfd, rel, flags);
	return -errno;
}

/*
 * path with each run of '/' made one and a trailing '/' dropped ("/"
 * stays): "/root//a.bpk" lies under root /root as much as "/root/a.bpk".
 * NULL when out of memory.
 */
static char *normalise(const char *path)
{
	size_t n = strlen(path), o = 0;
	char *out = malloc(n + 1);

	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (path[i] != '/' || !o || out[o - 1] != '/')
			out[o++] = path[i];
	if (o > 1 && out[o - 1] == '/')
		o--;
	out[o] = '\0';
	return out;
}

/* If path lies under root (component-wise), the remainder; else NULL. */
static const char *under_root(const char *root, const char *path)
{
	size_t n = strlen(root);

	if (!strcmp(root, "/"))
		return path + 1;
	if (strncmp(root, path, n) != 0 || (path[n] != '/' && path[n] != '\0'))
		return NULL;
	return path[n] ? path + n + 1 : ".";
}

/*
 * Try norm (path normalised) under root. @return 0 with *ret_fd; 1 when
 * the root does not apply (an absolute path elsewhere, a root that cannot
 * be opened); -ENOENT when it holds no such path; another negative errno
 * with err set.
 */
static int try_root(const char *root, const char *path, const char *norm, enum bd__resolve how,
		    int *ret_fd, char *err, size_t errlen)
{
	const char *rel = norm[0] == '/' ? under_root(root, norm) : norm;
	int rootfd, fd;

	if (!rel)
		return 1;
	rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0) {
		bd_log(LOG_WARNING, "dataset root %s: %s", root, strerror(errno));
		return 1;
	}
	/* O_PATH: look before opening anything for real. */
	fd = open_beneath(rootfd, rel[0] ? rel : ".", O_PATH | O_CLOEXEC, how);
	close(rootfd);
	if (fd >= 0) {
		*ret_fd = fd;
		return 0;
	}
	if (fd == -EXDEV) {
		snprintf(err, errlen, "%s: leaves the dataset root %s (\"..\" or a symlink)", path,
			 root);
		return -EACCES;
	}
	if (fd != -ENOENT)
		snprintf(err, errlen, "%s: %s", path, strerror(-fd));
	return fd;
}

/*
 * Edit distance between a and b (optimal string alignment: insertions,
 * deletions, substitutions, and swaps of neighbours, "bkp" for "bpk"), or
 * more than `most` when it is surely more. Names are at most NAME_MAX.
 */
static size_t distance(const char *a, const char *b, size_t most)
{
	size_t la = strlen(a), lb = strlen(b), d[3][NAME_MAX + 2];
	size_t *pp = d[0], *p = d[1], *c = d[2];

	if (la > NAME_MAX || lb > NAME_MAX || (la > lb ? la - lb : lb - la) > most)
		return most + 1;
	for (size_t j = 0; j <= lb; j++)
		p[j] = j;
	for (size_t i = 1; i <= la; i++) {
		size_t *t;

		c[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t v = p[j - 1] + (a[i - 1] != b[j - 1]);

			v = p[j] + 1 < v ? p[j] + 1 : v;
			v = c[j - 1] + 1 < v ? c[j - 1] + 1 : v;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    pp[j - 2] + 1 < v)
				v = pp[j - 2] + 1;
			c[j] = v;
		}
		t = pp, pp = p, p = c, c = t;
	}
	return p[lb];
}

#define NEAREST 3

/*
 * The names beside where norm (relative) would be, under every root, that
 * are within a few edits of its last component: "; nearest: a.bpk, b.bpk"
 * into buf, or "" when none is. Dotfiles are left out.
 */
static void nearest(const char *const *roots, size_t nroots, const char *norm, char *buf,
		    size_t len)
{
	char dir[PATH_MAX], best[NEAREST][NAME_MAX + 1];
	size_t bestd[NEAREST], nbest = 0, most, at;
	const char *slash = strrchr(norm, '/'), *base = slash ? slash + 1 : norm;

	buf[0] = '\0';
	if (!*base || strlen(base) > NAME_MAX)
		return;
	most = strlen(base) / 3 > 2 ? strlen(base) / 3 : 2;
	for (size_t i = 0; i < nroots; i++) {
		struct dirent *e;
		DIR *dp;

		snprintf(dir, sizeof(dir), "%s/%.*s", roots[i], slash ? (int)(slash - norm) : 0, norm);
		if (!(dp = opendir(dir)))
			continue;
		while ((e = readdir(dp))) {
			size_t dd, k;

			if (e->d_name[0] == '.' || (dd = distance(base, e->d_name, most)) > most)
				continue;
			/* Keep the NEAREST closest, in order; a name seen under two roots once. */
			for (k = 0; k < nbest && strcmp(best[k], e->d_name); k++)
				;
			if (k < nbest)
				continue;
			for (k = nbest; k > 0 && bestd[k - 1] > dd; k--)
				if (k < NEAREST)
					bestd[k] = bestd[k - 1], memcpy(best[k], best[k - 1], sizeof(best[k]));
			if (k < NEAREST) {
				bestd[k] = dd;
				snprintf(best[k], sizeof(best[k]), "%s", e->d_name);
				nbest += nbest < NEAREST;
			}
		}
		closedir(dp);
	}
	at = (size_t)snprintf(buf, len, nbest ? "; nearest:" : "");
	for (size_t k = 0; k < nbest && at < len; k++)
		at += (size_t)snprintf(buf + at, len - at, "%s %.*s%s", k ? "," : "",
				       slash ? (int)(slash - norm + 1) : 0, norm, best[k]);
}

/* The roots, comma-separated, into buf. */
static const char *root_list(const char *const *roots, size_t nroots, char *buf, size_t len)
{
	size_t at = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < nroots && at < len; i++)
		at += (size_t)snprintf(buf + at, len - at, "%s%s", i ? ", " : "", roots[i]);
	return nroots ? buf : "(none: give --root DIR or [datasets] root)";
}

/* Nothing found: say whether path was missing under a root or outside them all. */
static int not_found(const char *const *roots, size_t nroots, const char *path,
		     const char *norm, char *err, size_t errlen)
{
	char near[3 * (NAME_MAX + 8) + 16], list[512];

	if (norm[0] != '/') {
		nearest(roots, nroots, norm, near, sizeof(near));
		snprintf(err, errlen, "%s: no such dataset under the roots %s%s", path,
			 root_list(roots, nroots, list, sizeof(list)), near);
		return -ENOENT;
	}
	for (size_t i = 0; i < nroots; i++)
		if (under_root(roots[i], norm)) {
			snprintf(err, errlen, "%s: no such dataset", path);
			return -ENOENT;
		}
	snprintf(err, errlen, "%s: outside the dataset roots", path);
	return -EACCES;
}

int bd__dataset_resolve(const char *const *roots, size_t nroots, const char *path,
			enum bd__resolve how, int *ret_fd, char *err, size_t errlen)
{
	char *norm;
	int r = -ENOENT;

	if (!path[0]) {
		snprintf(err, errlen, "empty dataset path");
		return -EINVAL;
	}
	if (nroots == 0) {
		snprintf(err, errlen, "%s: no dataset roots are configured", path);
		return -EACCES;
	}
	norm = normalise(path);
	if (!norm) {
		snprintf(err, errlen, "%s: out of memory", path);
		return -ENOMEM;
	}
	for (size_t i = 0; i < nroots; i++) {
		r = try_root(roots[i], path, norm, how, ret_fd, err, errlen);
		/* An absolute path is looked for under the first root that holds it only. */
		if (r != 1 && (r != -ENOENT || norm[0] == '/'))
			break;
		r = -ENOENT;
	}
	if (r == -ENOENT)
		r = not_found(roots, nroots, path, norm, err, errlen);
	free(norm);
	return r;
}

/* ---- opening what was found --------------------------------------------------------------- */

int bd__dataset_reopen_fd(int fd, int flags)
{
	char proc[64];
	int r;

	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	r = open(proc, flags | O_CLOEXEC);
	return r < 0 ? -errno : r;
}

/*
 * Open what an O_PATH descriptor names for reading, once its type is known
 * to be a regular file or a directory: nothing else (FIFO, device) is ever
 * opened for real.
 */
static int reopen(int pathfd, bool dir)
{
	int fd;

	if (!dir)
		return bd__dataset_reopen_fd(pathfd, O_RDONLY | O_NOCTTY);
	fd = openat(pathfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

/* The path the kernel resolved (versions of one dataset share it), or NULL. */
static char *place_of(int pathfd)
{
	char proc[64], buf[PATH_MAX];
	ssize_t n;

	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", pathfd);
	n = readlink(proc, buf, sizeof(buf) - 1);
	if (n <= 0)
		return NULL;
	buf[n] = '\0';
	return strdup(buf);
}

int bd__dataset_open_top(const char *const *roots, size_t nroots, const char *path,
			 struct stat *st, char **ret_place, char *err, size_t errlen)
{
	int pathfd, fd, r;

	r = bd__dataset_resolve(roots, nroots, path, BD__RESOLVE_AUTO, &pathfd, err, errlen);
	if (r < 0)
		return r;
	if (fstat(pathfd, st) < 0) {
		r = -errno;
		snprintf(err, errlen, "%s: %s", path, strerror(-r));
		goto out;
	}
	if (!S_ISREG(st->st_mode) && !S_ISDIR(st->st_mode)) {
		snprintf(err, errlen, "%s: not a regular file or directory", path);
		r = -EINVAL;
		goto out;
	}
	r = fd = reopen(pathfd, S_ISDIR(st->st_mode));
	if (fd < 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(-fd));
		goto out;
	}
	*ret_place = place_of(pathfd);
out:
	close(pathfd);
	return r;
}
