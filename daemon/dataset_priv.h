/* SPDX-License-Identifier: MIT */
/*
 * dataset_priv.h - the path resolution of dataset.c, for its unit tests.
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

#include <stddef.h>

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

#endif
