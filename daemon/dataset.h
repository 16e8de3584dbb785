/* SPDX-License-Identifier: MIT */
/*
 * dataset.h - datasets as the daemon serves them: found under the
 * configured roots only, loaded once and shared by every session reading
 * them, with per-shard descriptors for the I/O engine (O_DIRECT when the
 * file system allows it).
 *
 * Path rules: a relative dataset path is tried against each root in order;
 * an absolute one must lie under a root. Resolution uses openat2() with
 * RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS from the root's descriptor, so
 * "..", absolute symlinks and symlinks that climb out of the root are
 * refused by the kernel; where openat2 is missing the path is walked one
 * component at a time with O_NOFOLLOW. Only regular files and directories
 * are datasets; shards inside a directory are opened with O_NOFOLLOW.
 *
 * Thread rules: bd_dataset_get() may block on disk and runs on a libuv
 * worker thread; the cache is guarded by a mutex. A loaded bd_dataset is
 * immutable and shared read-only by the I/O and decode threads.
 */
#ifndef BATCHD_DAEMON_DATASET_H
#define BATCHD_DAEMON_DATASET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "pack_file.h"

#define BD_TOPK 1024u  /* largest sample sizes kept for batch bounds */

typedef struct bd_dataset {
	bp_dataset *ds;
	uint64_t uid;            /* unique for the daemon's life (cache keys) */
	char *name;              /* the path as the client gave it */
	dev_t dev;
	ino_t ino;
	int64_t mtime_ns;
	unsigned refs;           /* guarded by the cache mutex */
	int *read_fd;            /* per shard: descriptor block reads use */
	uint32_t *align;         /* per shard: O_DIRECT alignment, 0 = buffered */
	bool direct;             /* every shard is read with O_DIRECT */
	uint64_t top_prefix[BD_TOPK + 1]; /* sums of the k largest samples */
	uint32_t topk;           /* min(samples, BD_TOPK) */
	uint64_t samples_per_block;
	struct bd_dataset *next;
} bd_dataset;

enum bd_direct_mode { BD_DIRECT_AUTO, BD_DIRECT_ON, BD_DIRECT_OFF };

/*
 * Resolve path against roots and return the dataset, loading it unless an
 * identical one (same file, same mtime) is cached. On failure err holds a
 * message naming the dataset and what was wrong. @return 0; -EACCES
 * (outside the roots, or a symlink out of one); -ENOENT; -EINVAL (not a
 * file or directory, empty path); -EBADMSG and friends from the pack
 * reader; -ENOMEM.
 */
int bd_dataset_get(const char *const *roots, size_t nroots, const char *path,
		   enum bd_direct_mode direct, bd_dataset **ret, char *err, size_t errlen);

/* Drop a reference; the last one frees the dataset. NULL is fine. */
void bd_dataset_put(bd_dataset *d);

/* Upper bound on the payload bytes of any batch of n samples. */
uint64_t bd_dataset_batch_bound(const bd_dataset *d, uint32_t n);

/* Free every cached dataset no session references (shutdown). */
void bd_dataset_cache_clear(void);

#endif
