/* SPDX-License-Identifier: MIT */
/*
 * dataset_priv.h - what dataset.c and dataset_path.c share: finding a
 * dataset's path under the roots and opening it, and the path resolution
 * the unit tests call directly.
 *
 * Resolution has two implementations: openat2() with RESOLVE_BENEATH and
 * RESOLVE_NO_MAGICLINKS, and a component walk in user space for kernels
 * or sandboxes without openat2 (ENOSYS, or EPERM under seccomp). They must
 * agree on every path; a host has only one of them in use, so the tests
 * call both on the same table of cases through these functions.
 *
 * Thread rules: any thread; they keep no state.
 */
#ifndef BATCHD_DAEMON_DATASET_PRIV_H
#define BATCHD_DAEMON_DATASET_PRIV_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

enum bd__resolve {
	BD__RESOLVE_AUTO,        /* openat2, the walk where it is missing */
	BD__RESOLVE_WALK,        /* the walk only */
};

/*
 * Find path under roots (dataset.h's path rules) and open what it names
 * with O_PATH. @return 0 with *ret_fd; -EACCES (outside the roots, or
 * leaving one), -ENOENT, -EINVAL (empty path), -ELOOP (a magic link, or
 * too many symlinks), another -errno; err says which path and why.
 */
int bd__dataset_resolve(const char *const *roots, size_t nroots, const char *path,
			enum bd__resolve how, int *ret_fd, char *err, size_t errlen);

/*
 * The walk: open rel beneath directory rootfd as openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_MAGICLINKS) would. flags must hold O_PATH (O_NOFOLLOW and
 * O_DIRECTORY are honoured for the last component). @return the fd;
 * -EXDEV when rel, a ".." or a symlink would leave rootfd (or rel or a
 * symlink is absolute); -ELOOP for a magic link or over 40 symlinks;
 * -ENOTDIR, -ENOENT, -ENAMETOOLONG, another -errno as openat would give.
 */
int bd__dataset_open_beneath_walk(int rootfd, const char *rel, int flags);

/*
 * Resolve path (as bd__dataset_resolve, openat2 where there is one) and
 * open it for reading, once it is known to be a regular file or a
 * directory. @return the fd, which the caller closes, with *st its stat
 * and *ret_place the path the kernel resolved (malloc'd, NULL when
 * /proc cannot say; versions of one dataset share it); negative errno
 * with err set (-EINVAL: neither a regular file nor a directory).
 */
int bd__dataset_open_top(const char *const *roots, size_t nroots, const char *path,
			 struct stat *st, char **ret_place, char *err, size_t errlen);

/*
 * A new open file description, with flags (O_CLOEXEC is added), for the
 * inode fd names, through /proc/self/fd: how an O_PATH descriptor is
 * opened for reading, and how a shard gets an O_DIRECT descriptor of its
 * own. @return the fd; negative errno as open(2) gives it.
 */
int bd__dataset_reopen_fd(int fd, int flags);

#endif
