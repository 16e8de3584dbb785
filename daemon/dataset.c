/* SPDX-License-Identifier: MIT */
/*
 * dataset.c - resolve, load, cache and share datasets (see dataset.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/openat2.h>

#include "dataset.h"
#include "io.h"
#include "fault.h"
#include "log.h"
#include "util.h"

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static bd_dataset *cache;
static uint64_t next_uid;

/* ---- path resolution ------------------------------------------------------ */

static int open_beneath_walk(int rootfd, const char *rel, int flags)
{
	char *copy = strdup(rel), *save = NULL, *part;
	int fd = fcntl(rootfd, F_DUPFD_CLOEXEC, 0), next;

	if (!copy || fd < 0) {
		free(copy);
		if (fd >= 0)
			close(fd);
		return -ENOMEM;
	}
	for (part = strtok_r(copy, "/", &save); part; part = strtok_r(NULL, "/", &save)) {
		if (!strcmp(part, "."))
			continue;
		if (!strcmp(part, "..")) {
			close(fd);
			free(copy);
			return -EXDEV;
		}
		next = openat(fd, part, flags | O_NOFOLLOW);
		close(fd);
		if (next < 0) {
			free(copy);
			return errno == ELOOP ? -EXDEV : -errno;
		}
		fd = next;
	}
	free(copy);
	return fd;
}

/* Open rel beneath rootfd with flags; -EXDEV when it would escape. */
static int open_beneath(int rootfd, const char *rel, int flags)
{
	struct open_how how = {
		.flags = (uint64_t)flags,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
	};
	long fd = syscall(SYS_openat2, rootfd, rel, &how, sizeof(how));

	if (fd >= 0)
		return (int)fd;
	if (errno == ENOSYS || errno == EPERM)
		return open_beneath_walk(rootfd, rel, flags);
	return -errno;
}

/* A new open file description for what fd names (same inode), with flags. */
static int reopen_fd(int fd, int flags)
{
	char proc[64];

	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	return open(proc, flags | O_CLOEXEC);
}

/*
 * Open what an O_PATH descriptor names for reading, once its type is known
 * to be a regular file or a directory: nothing else (FIFO, device) is ever
 * opened for real.
 */
static int reopen(int pathfd, bool dir)
{
	int fd = dir ? openat(pathfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
		     : reopen_fd(pathfd, O_RDONLY | O_NOCTTY);

	return fd < 0 ? -errno : fd;
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

static int resolve(const char *const *roots, size_t nroots, const char *path, int *ret_fd,
		   char *err, size_t errlen)
{
	int last = -ENOENT;

	if (!path[0]) {
		snprintf(err, errlen, "empty dataset path");
		return -EINVAL;
	}
	if (nroots == 0) {
		snprintf(err, errlen, "%s: no dataset roots are configured", path);
		return -EACCES;
	}
	for (size_t i = 0; i < nroots; i++) {
		const char *rel = path[0] == '/' ? under_root(roots[i], path) : path;
		int rootfd, fd;

		if (!rel)
			continue;
		rootfd = open(roots[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (rootfd < 0) {
			bd_log(LOG_WARNING, "dataset root %s: %s", roots[i], strerror(errno));
			continue;
		}
		/* O_PATH: look before opening anything for real. */
		fd = open_beneath(rootfd, rel[0] ? rel : ".", O_PATH | O_CLOEXEC);
		close(rootfd);
		if (fd >= 0) {
			*ret_fd = fd;
			return 0;
		}
		if (fd == -EXDEV) {
			snprintf(err, errlen, "%s: leaves the dataset root %s (\"..\" or a symlink)",
				 path, roots[i]);
			return -EACCES;
		}
		if (fd != -ENOENT) {
			snprintf(err, errlen, "%s: %s", path, strerror(-fd));
			return fd;
		}
		if (path[0] == '/') {
			last = -ENOENT;
			break;
		}
	}
	if (path[0] == '/' && last == -ENOENT) {
		for (size_t i = 0; i < nroots; i++)
			if (under_root(roots[i], path)) {
				snprintf(err, errlen, "%s: no such dataset", path);
				return -ENOENT;
			}
		snprintf(err, errlen, "%s: outside the dataset roots", path);
		return -EACCES;
	}
	snprintf(err, errlen, "%s: no such dataset under the roots", path);
	return -ENOENT;
}

/* ---- loading ---------------------------------------------------------------- */

static int cmp_desc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? 1 : x > y ? -1 : 0;
}

/* Keep the BD_TOPK largest sample sizes (min-heap), then prefix-sum them. */
static void compute_topk(bd_dataset *d)
{
	uint64_t heap[BD_TOPK];
	uint32_t n = 0;

	for (size_t s = 0; s < bp_dataset_shard_count(d->ds); s++) {
		const bp_shard *sh = bp_dataset_shard(d->ds, s);

		for (uint64_t i = 0; i < sh->footer.sample_count; i++) {
			uint64_t off, size;
			uint32_t k;

			bp_pack_index_sample_span(&sh->index, i, &off, &size);
			if (n < BD_TOPK) {
				/* sift up */
				for (k = n++; k && heap[(k - 1) / 2] > size; k = (k - 1) / 2)
					heap[k] = heap[(k - 1) / 2];
				heap[k] = size;
			} else if (size > heap[0]) {
				/* replace the minimum, sift down */
				for (k = 0;;) {
					uint32_t c = 2 * k + 1;

					if (c >= n)
						break;
					if (c + 1 < n && heap[c + 1] < heap[c])
						c++;
					if (heap[c] >= size)
						break;
					heap[k] = heap[c];
					k = c;
				}
				heap[k] = size;
			}
		}
	}
	qsort(heap, n, sizeof(heap[0]), cmp_desc);
	d->topk = n;
	d->top_prefix[0] = 0;
	for (uint32_t i = 0; i < n; i++)
		d->top_prefix[i + 1] = d->top_prefix[i] + heap[i];
}

uint64_t bd_dataset_batch_bound(const bd_dataset *d, uint32_t n)
{
	uint64_t smallest_kept;

	if (n <= d->topk)
		return d->top_prefix[n];
	/* Samples beyond the k largest are no larger than the k-th. */
	smallest_kept = d->top_prefix[d->topk] - d->top_prefix[d->topk - 1];
	return d->top_prefix[d->topk] + (uint64_t)(n - d->topk) * smallest_kept;
}

/*
 * Give each shard a descriptor for block reads: O_DIRECT when wanted and
 * supported (reopened through /proc/self/fd, checked to be the same inode).
 */
static int setup_reads(bd_dataset *d, enum bd_direct_mode direct, char *err, size_t errlen)
{
	size_t n = bp_dataset_shard_count(d->ds);

	d->read_fd = bd_calloc(n, sizeof(*d->read_fd));
	d->align = bd_calloc(n, sizeof(*d->align));
	if (!d->read_fd || !d->align)
		return -ENOMEM;
	d->direct = direct != BD_DIRECT_OFF;
	for (size_t i = 0; i < n; i++) {
		const bp_shard *sh = bp_dataset_shard(d->ds, i);
		struct stat a, b;
		uint32_t mem_align = 0, off_align = 0;
		int fd = -1;

		d->read_fd[i] = -1;
		if (direct != BD_DIRECT_OFF) {
			fd = bd_fault_direct_off() ? (errno = EINVAL, -1)
						   : reopen_fd(sh->fd, O_RDONLY | O_DIRECT);
			if (fd >= 0 && (fstat(fd, &a) < 0 || fstat(sh->fd, &b) < 0 ||
					a.st_dev != b.st_dev || a.st_ino != b.st_ino)) {
				close(fd);
				fd = -1;
				errno = ESTALE;
			}
			if (fd >= 0 && bd_io_dio_align(fd, &mem_align, &off_align) < 0) {
				close(fd);
				fd = -1;
			}
			if (fd < 0 && direct == BD_DIRECT_ON) {
				snprintf(err, errlen, "%s: shard %s: O_DIRECT unavailable: %s", d->name,
					 sh->name, strerror(errno));
				return -EOPNOTSUPP;
			}
		}
		if (fd >= 0) {
			d->read_fd[i] = fd;
			d->align[i] = mem_align > off_align ? mem_align : off_align;
			continue;
		}
		d->direct = false;
		d->read_fd[i] = fcntl(sh->fd, F_DUPFD_CLOEXEC, 0);
		if (d->read_fd[i] < 0)
			return -errno;
	}
	return 0;
}

static void dataset_free(bd_dataset *d)
{
	if (!d)
		return;
	for (size_t i = 0; d->read_fd && i < bp_dataset_shard_count(d->ds); i++)
		if (d->read_fd[i] >= 0)
			close(d->read_fd[i]);
	free(d->read_fd);
	free(d->align);
	bp_dataset_close(d->ds);
	free(d->name);
	free(d);
}

static int load(int fd, const char *path, const struct stat *st, enum bd_direct_mode direct,
		bd_dataset **ret, char *err, size_t errlen)
{
	bp_dataset_fault fault = { 0 };
	bd_dataset *d = bd_calloc(1, sizeof(*d));
	char msg[512];
	int r;

	if (!d || !(d->name = strdup(path))) {
		free(d);
		snprintf(err, errlen, "dataset %s: out of memory", path);
		return -ENOMEM;
	}
	r = bp_dataset_fdopen(fd, path, &d->ds, &fault);
	if (r < 0) {
		if (fault.pack.what) {
			bp_dataset_fault_format(&fault, msg, sizeof(msg));
			snprintf(err, errlen, "dataset %s: %s", path, msg);
		} else {
			snprintf(err, errlen, "dataset %s: %s", path, strerror(-r));
		}
		goto fail;
	}
	r = setup_reads(d, direct, err, errlen);
	if (r < 0) {
		if (!err[0])
			snprintf(err, errlen, "dataset %s: %s", path, strerror(-r));
		goto fail;
	}
	compute_topk(d);
	d->samples_per_block = bp_dataset_samples(d->ds) / bp_dataset_blocks(d->ds);
	d->dev = st->st_dev;
	d->ino = st->st_ino;
	d->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
	d->refs = 1;
	d->uid = __atomic_add_fetch(&next_uid, 1, __ATOMIC_RELAXED);
	bd_log(LOG_INFO, "dataset %s: %llu samples in %zu shards, %s reads", path,
	       (unsigned long long)bp_dataset_samples(d->ds), bp_dataset_shard_count(d->ds),
	       d->direct ? "O_DIRECT" : "buffered");
	*ret = d;
	return 0;
fail:
	dataset_free(d);
	return r;
}

int bd_dataset_get(const char *const *roots, size_t nroots, const char *path,
		   enum bd_direct_mode direct, bd_dataset **ret, char *err, size_t errlen)
{
	struct stat st;
	bd_dataset *d;
	int pathfd, fd, r;

	err[0] = '\0';
	r = resolve(roots, nroots, path, &pathfd, err, errlen);
	if (r < 0)
		return r;
	if (fstat(pathfd, &st) < 0) {
		r = -errno;
		snprintf(err, errlen, "%s: %s", path, strerror(-r));
		close(pathfd);
		return r;
	}
	if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "%s: not a regular file or directory", path);
		close(pathfd);
		return -EINVAL;
	}
	fd = reopen(pathfd, S_ISDIR(st.st_mode));
	close(pathfd);
	if (fd < 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(-fd));
		return fd;
	}

	pthread_mutex_lock(&cache_mu);
	for (d = cache; d; d = d->next) {
		if (d->dev == st.st_dev && d->ino == st.st_ino &&
		    d->mtime_ns == (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec) {
			d->refs++;
			break;
		}
	}
	pthread_mutex_unlock(&cache_mu);
	if (d) {
		*ret = d;
		r = 0;
		goto out;
	}

	/* Loading happens outside the lock; two racing loads both succeed. */
	r = load(fd, path, &st, direct, &d, err, errlen);
	if (r == 0) {
		pthread_mutex_lock(&cache_mu);
		d->refs++; /* the cache's own reference */
		d->next = cache;
		cache = d;
		pthread_mutex_unlock(&cache_mu);
		*ret = d;
	}
out:
	close(fd);
	return r;
}

void bd_dataset_put(bd_dataset *d)
{
	bool last;

	if (!d)
		return;
	pthread_mutex_lock(&cache_mu);
	last = --d->refs == 0;
	pthread_mutex_unlock(&cache_mu);
	if (last)
		dataset_free(d);
}

void bd_dataset_cache_clear(void)
{
	bd_dataset **p, *d;

	pthread_mutex_lock(&cache_mu);
	for (p = &cache; (d = *p);) {
		/* Drop the cache's reference; free what no session holds. */
		*p = d->next;
		if (--d->refs == 0)
			dataset_free(d);
	}
	pthread_mutex_unlock(&cache_mu);
}
