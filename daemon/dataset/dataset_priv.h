/* SPDX-License-Identifier: MIT */
/*
 * dataset_priv.h - what dataset.c and dataset_path.c share: finding a
 * dataset's path under the roots and opening it, and the path resolution
 * the unit tests call directly; and the charge of a version's memory that
 * dataset.c's loading takes through dataset_charge.c.
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

#include "dataset.h"
#include "pack.h"

/*
 * One shard as it is on disk. ctime cannot be set back (utime sets it to
 * now), so a rewrite in place shows there even when mtime and size are
 * put back; the footer holds the index's hash and the header's checksum,
 * so a change to what is indexed shows there even within one ctime tick.
 * A remote shard is its object's size and ETag (the bucket's identity of
 * a version), named by key.
 */
typedef struct bd__shard_id {
	const char *name;        /* the shard's name (owned by the set, then the dataset) */
	dev_t dev;
	ino_t ino;
	uint64_t size;
	int64_t ctime_ns;
	bool have_footer;        /* the file is long enough and the read worked */
	uint8_t footer[BP_PACK_FOOTER_SIZE];
	const char *etag;        /* remote: its object's (owned by the object), else NULL */
} bd__shard_id;

/* A dataset as it is on disk: what a cached version must match to be reused. */
struct bd_dataset_disk {
	dev_t dev;               /* the dataset's file or directory */
	ino_t ino;
	bool dir;
	bool remote;             /* objects in a bucket: the place names it */
	enum bd_direct_mode direct; /* the reads asked for */
	enum bd_tier tier;       /* the tier asked for */
	size_t count;
	bd__shard_id shards[];
};

struct bd_robj;

/* What one open found: the shards, open, and who they are. */
typedef struct bd__scan {
	bp_shard_set set;
	struct bd_dataset_disk *disk;
	char *place;             /* the resolved path (remote: its URL), or NULL */
	struct bd_robj **robj;   /* remote: per shard, its cached object (references); else NULL */
	size_t nrobj;
} bd__scan;

/* Close and free what a scan holds; leaves it empty. */
void bd__scan_free(bd__scan *sc);

/*
 * Free the least recently used version of a remote dataset that no
 * session uses: its descriptors go back to the remote cache's share
 * (remote.h, bd_remote_files_budget). @return whether one was.
 */
bool bd__dataset_evict_unused_remote(void);

/*
 * The remote half of an open: path is an s3:// or http(s):// location
 * under one of remotes, or a name tried below each of them in order. One
 * object named so is a one-file dataset; else the *.bpk objects directly
 * below it ("name/"). Fills sc as scan_open does for local paths, its
 * shards read through the remote cache (remote.h). @return 0; -ENOENT
 * (nothing there: err names what was looked for); -EACCES (outside the
 * remotes, or refused by the bucket); -ENODEV (no remote configured);
 * another negative errno with err naming the location and the status.
 */
int bd__dataset_scan_remote(const char *const *remotes, size_t nremotes, const char *path,
			    const bd_read_policy *rp, bd__scan *sc, char *err, size_t errlen);

/*
 * What loading one version has taken from rp's budget, and how to say no
 * (dataset_charge.c). The loader fills in rp, path, when, shards, err and
 * errlen, and hands it to the pack reader with bd__charge_load.
 */
typedef struct bd__charge {
	const bd_read_policy *rp;
	const char *path;
	const char *when;        /* where in the load: for the refusal */
	size_t shards;
	uint64_t taken;          /* bytes taken from rp->budget so far */
	uint64_t index;          /* index bytes, from the footers */
	bool refused;            /* the charge refused: err says why */
	char *err;
	size_t errlen;
} bd__charge;

/*
 * bp_shard_charge_fn (ctx a bd__charge): bytes more for the version being
 * loaded, taken from the budget before they are spent (evicting unused
 * versions while that makes room), within the uid's limit. @return 0, or
 * -ENOMEM with ch->err naming the figures and what to change.
 */
int bd__charge_load(void *ctx, uint64_t bytes, uint64_t index);

/*
 * d is loaded: charge exactly what it holds (taking more, or giving back
 * what the bounds took over it) and set d->bytes and d->budget, before
 * anyone else sees it; d's charge is given back when it is freed.
 * @return 0; -ENOMEM as bd__charge_load (what was taken stays in ch).
 */
int bd__charge_loaded(bd_dataset *d, bd__charge *ch);

/* Give back what ch holds (a load that failed). */
void bd__charge_drop(bd__charge *ch);

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
