/* SPDX-License-Identifier: MIT */
/*
 * dataset.h - datasets as the daemon serves them: found under the
 * configured roots only, loaded once and shared by every session reading
 * them, with per-shard descriptors for the I/O engine (O_DIRECT when the
 * file system allows it).
 *
 * Path rules: a relative dataset path is tried against each root in order;
 * an absolute one must lie under a root. Repeated and trailing slashes do
 * not count. Resolution uses openat2() with RESOLVE_BENEATH |
 * RESOLVE_NO_MAGICLINKS from the root's descriptor: ".." and relative
 * symlinks are followed while they stay beneath the root; absolute
 * symlinks, ones that climb out and magic links (/proc/PID/fd/N) are
 * refused. Where openat2 is missing the path is walked one component at a
 * time to the same effect. Only regular files and directories are
 * datasets, and nothing is opened for reading before its type is known:
 * a *.bpk entry of a directory that is not a regular file (a FIFO, a
 * device, a symlink) makes the open fail, naming it.
 *
 * Versions: what a new session gets is what is on disk when it opens.
 * Every open lists the shards and compares each one's dev, inode, size,
 * ctime (which utime cannot set back) and footer (80 bytes read) with the
 * cached version; one difference, or another list of shard names, loads
 * the dataset anew. Sessions keep the version they opened, descriptors and
 * all, until they end. A version is freed when no session uses it and it
 * is no longer current (replaced), or when it is the least recently used
 * of more than BD_DATASET_KEEP_UNUSED unused versions (or of more than
 * BD_DATASET_KEEP_BYTES of their bytes), or to make room in the memory
 * budget (bd_dataset_cache_evict_one).
 *
 * Memory: what a version holds in memory (its index, dictionaries, lookup
 * tables, field sections, and the daemon's records of its shards: `bytes`)
 * is charged once to the memory budget (budget.h) the open's policy
 * names, shared by every session on it, and given back when the version is
 * freed; unused versions stay charged, and are evicted, least recently
 * used first, when a session or a load needs their room. The charge is
 * taken before the memory is spent: from the shards' headers and footers
 * before any index is read (bp_shard_charge_fn), from each shard's section
 * table before its sections are, and the rest, exactly, once loaded and
 * before the version is cached or handed to anyone. An open whose version
 * does not fit what the budget (or the opening uid's limit) has left is
 * refused with -ENOMEM, naming the figures.
 *
 * Thread rules: bd_dataset_get() may block on disk and runs on a libuv
 * worker thread; the cache is guarded by a mutex, and bd_dataset_put(),
 * bd_dataset_cache_clear() and bd_dataset_cache_stats() may be called from
 * any thread. A loaded bd_dataset is immutable and shared read-only by the
 * I/O and decode threads.
 */
#ifndef BATCHD_DAEMON_DATASET_H
#define BATCHD_DAEMON_DATASET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "budget.h"
#include "pack_file.h"

#define BD_TOPK 1024u  /* largest sample sizes kept for batch bounds */

/* Unused versions kept for the next open: at most this many ... */
#define BD_DATASET_KEEP_UNUSED 16u
/* ... holding at most this many bytes in memory (bd_dataset.bytes). */
#define BD_DATASET_KEEP_BYTES (UINT64_C(256) << 20)

enum bd_direct_mode { BD_DIRECT_AUTO, BD_DIRECT_ON, BD_DIRECT_OFF };

/*
 * Where a dataset's bytes are served from after the first epoch, chosen
 * per dataset version when it is loaded ([memory] tier = auto):
 *   ram     the decoded dataset fits the block cache: every block is cached
 *           once decoded (also blocks a batch takes whole), so later epochs
 *           neither read nor decode; reads are buffered when at least half
 *           of its blocks are in the page cache already, else O_DIRECT
 *           where the file system allows it (the page cache would only
 *           hold a second copy; mincore, at load).
 *   page    the stored dataset fits in half the memory the machine (or the
 *           daemon's cgroup) has available: buffered reads, so later epochs
 *           read from the page cache; the cache holds partial blocks.
 *   direct  otherwise: O_DIRECT reads where the file system allows them
 *           ([io] direct = auto), the block cache for partial blocks.
 * [io] direct = on or off overrides the read mode in every tier.
 */
enum bd_tier { BD_TIER_AUTO, BD_TIER_RAM, BD_TIER_PAGE, BD_TIER_DIRECT };

/* "auto", "ram", "page", "direct". */
const char *bd_tier_name(enum bd_tier t);

/* How to read a dataset: what the configuration asks, and what the tier choice weighs. */
typedef struct bd_read_policy {
	enum bd_direct_mode direct; /* [io] direct */
	enum bd_tier tier;       /* [memory] tier; BD_TIER_AUTO: chosen per dataset */
	uint64_t cache_budget;   /* the decoded-block cache's bytes */
	uint64_t memory;         /* bytes available to the daemon (machine.h); 0: unknown */
	/*
	 * When set, what memory is read from, only when a version is loaded and
	 * the choice needs it (so cached opens and refusals read nothing).
	 */
	uint64_t (*memory_now)(void);
	/* The budget a version loaded now is charged to; NULL: none (tests, tools). */
	bd_budget *budget;
	/*
	 * The opening uid's [limits] memory_per_uid (0: none) and what it
	 * held when the open was asked: a version loaded now must fit that
	 * too. The server checks again, exactly, when the session is made.
	 */
	uid_t uid;
	uint64_t uid_limit, uid_held;
} bd_read_policy;

/* The tier policy p picks for a dataset of raw decoded and stored bytes (never BD_TIER_AUTO). */
enum bd_tier bd_tier_choose(const bd_read_policy *p, uint64_t raw, uint64_t stored);

struct bd_dataset_disk;

typedef struct bd_dataset {
	bp_dataset *ds;
	uint64_t uid;            /* unique for the daemon's life (cache keys) */
	char *name;              /* the path as the client that loaded it gave it */
	int *read_fd;            /* per shard: descriptor block reads use */
	uint32_t *align;         /* per shard: O_DIRECT alignment, 0 = buffered */
	bool direct;             /* every shard is read with O_DIRECT */
	enum bd_tier tier;       /* where it is served from (never BD_TIER_AUTO) */
	bool cache_all;          /* tier ram: every decoded block goes to the cache */
	/* A session read it whole into the cache ahead of its batches (session_warm.c); loop thread. */
	bool warmed;
	uint64_t top_prefix[BD_TOPK + 1]; /* sums of the k largest samples */
	uint32_t topk;           /* min(samples, BD_TOPK) */
	uint64_t samples_per_block;
	/* What it was loaded from, and its place in the cache (dataset.c). */
	struct bd_dataset_disk *disk; /* the shards' identities when loaded */
	char *place;             /* the resolved path of the dataset, or NULL */
	/* Heap bytes it holds (bp_dataset_held_bytes and the above): charged to budget. */
	uint64_t bytes;
	bd_budget *budget;       /* what bytes are charged to (rp->budget at load), or NULL */
	/* Remote: per shard, its object in the cache (remote.h), read through it; else NULL. */
	struct bd_robj **robj;
	/* Guarded by the cache mutex (refs is written atomically: bd_dataset_shared). */
	unsigned refs;           /* sessions (and lookups in flight) using it */
	bool cached;             /* in the cache's list */
	bool current;            /* the latest version loaded from its place */
	uint64_t last_used;      /* when refs last fell to 0 (the cache's clock) */
	struct bd_dataset *next;
} bd_dataset;

/* What the cache holds, for status and tests. */
typedef struct bd_dataset_stats {
	uint64_t loaded;         /* versions loaded since start */
	uint64_t freed;          /* versions closed and freed since start */
	size_t held;             /* versions open now, used or not */
	size_t unused;           /* of those, kept for reopening with no session */
	uint64_t bytes;          /* bytes in memory of the versions held (bd_dataset.bytes) */
	uint64_t unused_bytes;   /* of those, the unused ones' */
	uint64_t evicted;        /* unused versions freed to make room in the budget since start */
} bd_dataset_stats;


/*
 * Resolve path against roots and return the dataset as it is on disk now:
 * a cached version when every shard is still the one it was loaded from
 * (and rp asks what it asked then), else a version loaded now, its tier
 * chosen by rp (which replaces the cached one for later
 * opens). On failure err holds a message naming the dataset and what was
 * wrong. @return 0; -EACCES (outside the roots, or leaving one); -ENOENT;
 * -EINVAL (not a file or directory, an entry of a directory that is not a
 * regular file, empty path); -ELOOP (a magic link, a symlink shard, too
 * many symlinks); -EBADMSG and friends from the pack reader; -ENOMEM (out
 * of memory, or a version to load that does not fit rp's budget or uid
 * limit: err names its bytes, what is left and what to change).
 */
int bd_dataset_get(const char *const *roots, size_t nroots, const char *path,
		   const bd_read_policy *rp, bd_dataset **ret, char *err, size_t errlen);

/*
 * Drop a reference. The last one frees the version unless it is current
 * and cached (then it is kept, within the limits above). NULL is fine.
 */
void bd_dataset_put(bd_dataset *d);

/*
 * Is d used by more than one session (or by an open in flight) now? Then
 * even blocks a batch takes whole go through the block cache, so that the
 * others read and decode them once (io_thread.c). Any thread; a hint.
 */
static inline bool bd_dataset_shared(const bd_dataset *d)
{
	return __atomic_load_n(&d->refs, __ATOMIC_RELAXED) > 1;
}

/*
 * Decoded bytes per delivered byte a session reading d in shuffle mode
 * (enum bp_shuffle) should expect with a block cache of cache bytes:
 * global shuffle decodes a whole block for each sample the cache does not
 * hold, so samples per block x the share of the decoded dataset the cache
 * cannot keep; 1 for the other modes, the ram tier and one-sample blocks.
 */
double bd_dataset_amplification(const bd_dataset *d, int shuffle, uint64_t cache);

/* Upper bound on the payload bytes of any batch of n samples. */
uint64_t bd_dataset_batch_bound(const bd_dataset *d, uint32_t n);

/*
 * Free every cached version no session uses; the rest go with their last
 * session, their charge no longer counted (shutdown: the budget goes).
 */
void bd_dataset_cache_clear(void);

/*
 * Free the least recently used version no session uses, giving its bytes
 * back to its budget: room for a session or a load. @return false when
 * there is none.
 */
bool bd_dataset_cache_evict_one(void);

/* The cache's numbers now. */
void bd_dataset_cache_stats(bd_dataset_stats *ret);

#endif
