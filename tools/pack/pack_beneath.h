/* SPDX-License-Identifier: MIT */
/*
 * pack_beneath.h - open a file below an input's directory without
 * following any symlink and without leaving that directory.
 *
 * batchd-pack scans an input tree (or a manifest's rows) first and reads
 * the files much later; whoever can write inside the tree could swap a
 * directory it scanned for a symlink leading out, and a read by path
 * would follow it (a root batchd-pack packing another user's mode-600
 * file). So every file an input names is opened relative to the input's
 * directory descriptor, taken once at the scan, by openat2(RESOLVE_BENEATH
 * | RESOLVE_NO_SYMLINKS) where the kernel has it (probed at run time:
 * ENOSYS before Linux 5.6, EPERM under some seccomp filters), else by a
 * walk of openat(O_NOFOLLOW) one component at a time. Both refuse a
 * symlink anywhere on the path, so what the scan checked is what is read.
 *
 * The daemon's resolver (daemon/dataset/dataset_path.c) follows symlinks
 * that stay beneath its root, as its path rules allow; this one follows
 * none, which is why it is its own, smaller thing.
 *
 * Thread rules: any thread; the probe's answer is kept in an atomic.
 */
#ifndef BATCHD_TOOLS_PACK_BENEATH_H
#define BATCHD_TOOLS_PACK_BENEATH_H

/*
 * Open rel (relative, "/"-separated) beneath directory dirfd with flags
 * (open(2)'s; O_NOFOLLOW and O_CLOEXEC are added; not O_PATH or O_CREAT).
 * "." and empty components are skipped. @return the new fd, which the
 * caller closes; -ELOOP when any component is a symlink; -EXDEV when rel
 * is absolute or has a ".." component; -ENOTDIR when a component before
 * the last is not a directory; -ENOENT for an empty rel; -EINVAL for
 * O_PATH or O_CREAT; another negative errno as openat(2) gives it.
 */
int pack_open_beneath(int dirfd, const char *rel, int flags);

/* The walk alone (as pack_open_beneath where openat2 is missing), for the tests. */
int pack__open_beneath_walk(int dirfd, const char *rel, int flags);

/* openat2 alone: -ENOSYS (or -EPERM) where the kernel or a filter lacks it. For the tests. */
int pack__open_beneath_kernel(int dirfd, const char *rel, int flags);

#endif
