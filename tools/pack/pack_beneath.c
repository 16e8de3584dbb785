/* SPDX-License-Identifier: MIT */
/*
 * pack_beneath.c - open a file below an input's directory, following no
 * symlink (see pack_beneath.h for why batchd-pack needs this).
 *
 * Two ways to the same answers: openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS), one system call that checks every component, and
 * a walk for kernels without it that opens each directory with O_PATH |
 * O_NOFOLLOW relative to the last and looks at what it got before going
 * on. A ".." or an absolute path is refused before either runs: the names
 * batchd-pack opens come from its own scan and never hold one, so either
 * is a sign of something wrong, and refusing it up front keeps both ways
 * in step without the walk having to track where ".." may go.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/openat2.h>

#include "pack_beneath.h"

/* What rel and flags may be; 0 or the negative errno both ways give. */
static int check(const char *rel, int flags)
{
	if ((flags & O_PATH) || (flags & O_CREAT))
		return -EINVAL;
	if (!rel[0])
		return -ENOENT;
	if (rel[0] == '/')
		return -EXDEV;
	for (const char *p = rel; *p; p += strcspn(p, "/"), p += strspn(p, "/")) {
		if (p[0] == '.' && p[1] == '.' && (p[2] == '/' || p[2] == '\0'))
			return -EXDEV;
	}
	return 0;
}

/* Step from directory cur into its entry name (a directory, not a symlink). @return the O_PATH fd. */
static int step(int cur, const char *name)
{
	struct stat st;
	int fd, r;

	fd = openat(cur, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		r = -errno;
	else if (S_ISLNK(st.st_mode))
		r = -ELOOP;
	else if (!S_ISDIR(st.st_mode))
		r = -ENOTDIR;
	else
		return fd;
	close(fd);
	return r;
}

int pack__open_beneath_walk(int dirfd, const char *rel, int flags)
{
	char part[NAME_MAX + 1];
	const char *p = rel;
	int cur = dirfd, owned = -1, fd, r;

	if ((r = check(rel, flags)) < 0)
		return r;
	for (;;) {
		size_t len;
		bool last;

		p += strspn(p, "/");
		len = strcspn(p, "/");
		last = p[len + strspn(p + len, "/")] == '\0';
		if (len > NAME_MAX) {
			r = -ENAMETOOLONG;
			break;
		}
		memcpy(part, len ? p : ".", len ? len : 1);
		part[len ? len : 1] = '\0';
		if (last) {
			/* A trailing '/' asks for a directory, as open(2) reads it. */
			int dir = p[len] == '/' ? O_DIRECTORY : 0;

			fd = openat(cur, part, flags | dir | O_NOFOLLOW | O_CLOEXEC);
			r = fd < 0 ? -errno : fd;
			break;
		}
		p += len;
		if (!strcmp(part, "."))
			continue;
		if ((fd = step(cur, part)) < 0) {
			r = fd;
			break;
		}
		if (owned >= 0)
			close(owned);
		cur = owned = fd;
	}
	if (owned >= 0)
		close(owned);
	return r;
}

int pack__open_beneath_kernel(int dirfd, const char *rel, int flags)
{
	struct open_how how = {
		.flags = (uint64_t)(flags | O_NOFOLLOW | O_CLOEXEC),
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS,
	};
	long fd = -1;
	int r;

	if ((r = check(rel, flags)) < 0)
		return r;
	/* EAGAIN: a rename raced the lookup and the kernel asks to try again. */
	for (int tries = 0; tries < 3; tries++) {
		fd = syscall(SYS_openat2, dirfd, rel, &how, sizeof(how));
		if (fd >= 0 || errno != EAGAIN)
			break;
	}
	return fd < 0 ? -errno : (int)fd;
}

int pack_open_beneath(int dirfd, const char *rel, int flags)
{
	static atomic_bool no_openat2;
	int fd;

	if (atomic_load_explicit(&no_openat2, memory_order_relaxed))
		return pack__open_beneath_walk(dirfd, rel, flags);
	fd = pack__open_beneath_kernel(dirfd, rel, flags);
	/*
	 * ENOSYS: a kernel before 5.6, for good. EPERM: a seccomp filter
	 * (a read-only open has no other cause of EPERM worth trusting),
	 * tried again each time rather than kept.
	 */
	if (fd == -ENOSYS)
		atomic_store_explicit(&no_openat2, true, memory_order_relaxed);
	if (fd == -ENOSYS || fd == -EPERM)
		return pack__open_beneath_walk(dirfd, rel, flags);
	return fd;
}
