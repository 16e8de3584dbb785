/* SPDX-License-Identifier: MIT */
/*
 * remote.h - remote objects (S3 buckets, https:// URLs) read through a
 * cache on local disk: the first epoch streams from the bucket while
 * filling the cache, later epochs (and other sessions, and the daemon
 * after a restart) read the cached bytes with the ordinary I/O path.
 *
 * Why it works this way: the I/O threads read shards from file
 * descriptors with io_uring; a remote object is given one, a sparse file
 * of the object's size in [cache] dir, filled in aligned chunks of
 * [cache] chunk bytes as reads need them. A read pins the chunks it
 * covers (bd_robj_acquire); the missing ones are fetched by one fetcher
 * thread that runs every ranged GET on a curl multi handle, at most
 * [remote] requests at once, each chunk once however many readers wait
 * for it; when the last of a read's chunks has landed the reader is told
 * and reads the file. Nothing a pinned chunk holds is ever evicted.
 *
 * Identity: an object version is (bucket, key, size, ETag). Its files are
 * named by a hash of the four, every GET carries If-Match ETag (a chunk of
 * a newer object can never land in an older object's file), and getting
 * a new version of a key deletes the cached versions of that key no
 * dataset uses (the others go when their last session does).
 *
 * Durability: each object has a map file, the chunks whose bytes are on
 * disk and each one's hash as fetched, replaced by rename after the data
 * file is fdatasync'd, at most once a second while chunks land and before
 * chunks are punched out (unless the disk is too full to write it); so
 * after a crash a chunk the map calls present holds the bytes fetched for
 * it, and a chunk found on disk is served only once it matches its hash
 * (remote_verify.c): the cache directory is trusted no more than the
 * bucket, and every block's hashes are checked at decode as well.
 *
 * Budget: the chunks present and the fetches in flight never hold more
 * than [cache] max_size; least recently used unpinned chunks are evicted
 * (FALLOC_FL_PUNCH_HOLE) to make room; a fetch waits while no room can be
 * made. A write that finds the disk full evicts and retries, then fails
 * naming ENOSPC.
 *
 * Thread rules: bd_remote_start/stop on the main thread; the rest from
 * any thread (one mutex guards the chunk states; file writes, punches,
 * map writes and deletions happen on the fetcher thread only). Readiness
 * callbacks run on the fetcher thread, without the lock: they must not
 * block.
 */
#ifndef BATCHD_DAEMON_REMOTE_H
#define BATCHD_DAEMON_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "s3.h"

#define BD_REMOTE_DEFAULT_REQUESTS 32u
#define BD_REMOTE_MAX_REQUESTS 1024u
#define BD_REMOTE_DEFAULT_CHUNK (UINT32_C(4) << 20)
#define BD_REMOTE_MIN_CHUNK (UINT32_C(64) << 10)
#define BD_REMOTE_MAX_CHUNK (UINT32_C(64) << 20)
#define BD_REMOTE_DEFAULT_MAX_SIZE (UINT64_C(10) << 30)
#define BD_REMOTE_MIN_MAX_SIZE (UINT64_C(64) << 20)
/* S3's largest object: a bucket that claims more is not believed. */
#define BD_REMOTE_MAX_OBJECT (UINT64_C(5) << 40)
/* What the object records and chunk tables may take besides a chunk record per chunk max_size holds. */
#define BD_REMOTE_TABLE_BASE (UINT64_C(16) << 20)

typedef struct bd_remote_opts {
	bp_s3_config s3;
	const char *dir;         /* the cache directory; created (0700) when missing */
	uint64_t max_size;       /* bytes of chunks on disk and in flight, at most */
	uint32_t chunk;          /* bytes, a multiple of 4096 in [MIN_CHUNK, MAX_CHUNK] */
	unsigned requests;       /* GETs in flight at most */
} bd_remote_opts;

/*
 * The memory the cache's object records and chunk tables may take with
 * [cache] max_size and chunk: set aside from the sessions' budget. Any thread.
 */
uint64_t bd_remote_table_budget(uint64_t max_size, uint32_t chunk);

/*
 * The data files the cache may hold open at once: half of the daemon's
 * RLIMIT_NOFILE (16 at least), the other half kept for local datasets,
 * connections and sessions, so that no user's remote opens can cost
 * another's local ones. An open that would pass it first closes unused
 * objects' files, then is refused (-EMFILE) naming the figures.
 */
unsigned bd_remote_files_budget(void);

typedef struct bd_remote_stats {
	uint64_t requests;       /* HTTP requests sent: the opens' HEADs and listings, GETs of chunks, retries */
	uint64_t bytes;          /* body bytes received */
	uint64_t retries;
	uint64_t errors;         /* fetches failed for good */
	uint64_t dropped;        /* fetches dropped, queued or on the wire, once no read wanted them */
	uint32_t inflight;       /* GETs on the wire now */
	uint32_t queued;         /* chunks waiting for a request or for room */
	uint64_t cache_bytes;    /* bytes of chunks on disk now */
	uint64_t max_size;
	uint64_t fetched_bytes;  /* written into the cache since start */
	uint64_t hit_bytes;      /* read bytes whose chunks were all cached already */
	uint64_t evicted_bytes;
	uint64_t table_bytes;    /* object records and chunk tables in memory */
	uint64_t table_max;
	size_t objects;          /* object versions known to the cache */
	unsigned files;          /* descriptors of their data files now, datasets' copies included */
	unsigned files_max;      /* ... at most (bd_remote_files_budget) */
} bd_remote_stats;

/*
 * Open the cache in o->dir (loading what an earlier run left there,
 * evicting down to max_size), make the S3 client and start the fetcher.
 * @return 0; -EINVAL/-EACCES/-ENOENT from the S3 client's setup
 * (credentials); -errno for the directory; err says what and how to fix it.
 */
int bd_remote_start(const bd_remote_opts *o, char *err, size_t errlen);

/*
 * The daemon is stopping: fail every fetch not yet done with -ECANCELED,
 * and refuse new acquires with it; returns once every waiter has been
 * told, so that none is called after (before the pipeline is freed).
 * Main thread.
 */
void bd_remote_cancel(void);

/* Stop the fetcher, write the maps, close everything. After the pipeline is gone. */
void bd_remote_stop(void);

/* Started? */
bool bd_remote_enabled(void);

/* The S3 client (NULL when not started): listings and HEADs made at open. */
const bp_s3 *bd_remote_s3(void);

void bd_remote_stats_get(bd_remote_stats *ret);
const char *bd_remote_dir(void);

/* Count a request made outside the fetcher (a HEAD or listing at open) that failed for good. */
void bd_remote_count_failure(void);

typedef struct bd_robj bd_robj;

/*
 * The cached version of object o at loc (bucket and key; plain: the URL):
 * found, or created empty. A reference; drop it with bd_robj_put. Cached
 * versions of the same key with another identity that nothing uses are
 * deleted. The caller reads through two copies of bd_robj_fd (the
 * dataset's shard and read descriptors), closed before the put: they are
 * counted in the cache's share of descriptors (bd_remote_files_budget). @return 0; -ENOMEM; -EMFILE (the share is
 * used); -errno creating its file (err says).
 */
int bd_robj_get(const bp_s3_loc *loc, const bp_s3_object *o, bd_robj **ret, char *err,
		size_t errlen);
void bd_robj_put(bd_robj *r);

/* The ETag it was fetched with (lives as long as r). */
const char *bd_robj_etag(const bd_robj *r);

/* The object's data file (O_RDWR): what the I/O path reads, once the range is acquired. */
int bd_robj_fd(const bd_robj *r);

/*
 * bp_shard_read_fn for r: fetch what [off, off+len) lacks, wait, pread.
 * Blocks; not on the loop or I/O threads. On failure bd_robj_failed says why.
 */
int bd_robj_read(void *r, void *buf, size_t len, uint64_t off);

/* Has a fetch of r failed? Then why ("s3://b/k: HTTP 404 NoSuchKey: ..."), into buf. */
bool bd_robj_failed(bd_robj *r, char *buf, size_t len);

/*
 * Called once a pending acquire is settled: err 0 (every chunk is there)
 * or the first failure's negative errno, why saying what failed.
 */
typedef void (*bd_robj_ready_fn)(void *ctx, int err, const char *why);

/* The user of reads made for the daemon itself, not a client. */
#define BD_REMOTE_DAEMON_UID UINT32_MAX

/*
 * Whose reads this thread's bd_robj_read makes from now on (an open's
 * lookup on the remote opens' pool): the fetcher shares its requests
 * among users. Any thread; BD_REMOTE_DAEMON_UID until set.
 */
void bd_remote_thread_uid(uint32_t uid);

/*
 * Pin the chunks [off, off+len) covers and fetch the missing ones, for
 * user uid, on behalf of owner (bd_remote_abandon; NULL: none): while several users have fetches, each may have requests /
 * users of them on the wire, and a user alone three quarters of them, so
 * that a newcomer always finds one.
 * @return 0: all present, read now; 1: ready(ctx, ...) will be called
 * once, from the fetcher thread; -ENOMEM; -EFBIG (the chunks are more
 * than [cache] max_size: nothing pinned, bd_robj_failed says so);
 * -ECANCELED (stopping: nothing pinned). Either way (ready with an
 * error too) the range stays pinned until bd_robj_release(r, off, len).
 */
int bd_robj_acquire(bd_robj *r, uint64_t off, uint64_t len, uint32_t uid, void *owner,
		    bd_robj_ready_fn ready, void *ctx);
/*
 * Unpin what an acquire pinned. A chunk still on its way that no read
 * pins any more is not fetched for nobody: the fetcher drops its fetch,
 * queued, due to retry or on the wire.
 */
void bd_robj_release(bd_robj *r, uint64_t off, uint64_t len);

/*
 * owner's reads are no longer wanted (its session ended): each of its
 * acquires still waiting is told now, ready(ctx, -ECANCELED, "the session
 * ended"), from this thread; the ranges stay pinned until released, as
 * always, and once released the fetches nobody else waits for are dropped.
 * Any thread but the fetcher's, holding no lock a ready callback takes.
 */
void bd_remote_abandon(void *owner);

/*
 * The bytes of [off, off+len) failed their checks: drop the chunks it
 * covers from the cache, so that the next read fetches them again.
 */
void bd_robj_invalidate(bd_robj *r, uint64_t off, uint64_t len);

#endif
