/* SPDX-License-Identifier: MIT */
/*
 * remote_priv.h - what remote.c (chunks, waiters, the fetcher),
 * remote_map.c (the cache directory: objects, map files, punches,
 * deletions) and remote_verify.c (cached chunks checked against their
 * map's hashes) share. Everything here is guarded by R.mu unless it says
 * otherwise.
 */
#ifndef BATCHD_DAEMON_REMOTE_PRIV_H
#define BATCHD_DAEMON_REMOTE_PRIV_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "remote.h"

enum { BD_CHUNK_ABSENT, BD_CHUNK_FETCHING, BD_CHUNK_PRESENT };

typedef struct bd_chunk {
	uint8_t state;
	bool unverified;         /* PRESENT as a map found on disk says: not yet checked against hash */
	bool on_lru;             /* PRESENT and unpinned */
	bool punch;              /* its space is to be punched out (evicted, or a failed fetch's part) */
	uint32_t idx;            /* its index in obj */
	uint32_t pins;           /* reads using it */
	uint64_t hash;           /* PRESENT: XXH3-64 of its bytes as they came from the bucket */
	struct wnode *waiters;   /* acquires waiting for it */
	struct bd_chunk *prev, *next; /* the LRU list */
	struct bd_robj *obj;
} bd_chunk;

struct bd_robj {
	char id[33];             /* hex name of its files */
	char *name;              /* s3://bucket/key or the URL: for messages */
	bp_s3_loc loc;
	char etag[BP_S3_ETAG_MAX];
	uint64_t size;
	int fd;                  /* the data file, O_RDWR; -1 once deleted */
	uint32_t nchunks;
	bd_chunk **slots;        /* the records of the chunks in use, hashed by index (remote_chunks.c) */
	uint32_t nslots, nused;  /* slots (a power of two), records in them */
	size_t table_bytes;      /* its share of R.table_bytes: the record, slots, chunk records */
	unsigned refs;           /* datasets and fetches using it */
	bool dirty;              /* the map on disk is older than the chunk states */
	bool landed;             /* chunks landed since the data file was last synced */
	bool doomed;             /* replaced in the bucket: delete when unused */
	unsigned punches;        /* chunks marked punch */
	int64_t mtime;           /* its map's, at load: the LRU order of a cache found on disk */
	char last_err[BP_S3_MSG_MAX];
	struct bd_robj *next;    /* every object version the cache knows */
};

/* One chunk to fetch: queued, due to retry, or on the wire (fetcher thread only then). */
typedef struct bd_fetch {
	bd_robj *obj;
	uint32_t idx;
	uint64_t off, len;
	uint64_t got;            /* body bytes written for this attempt */
	void *hs;                /* XXH3_state_t of those bytes (fetcher thread) */
	int werr;                /* errno of a failed write into the data file this attempt, or 0 */
	uint32_t uid;            /* whose read asked for it first: the fetcher's share (remote.c) */
	unsigned full;           /* attempts that found the disk full (remote.c, write_failed) */
	unsigned attempt;        /* retries made */
	uint64_t due_ms;         /* a retry's time */
	void *h;                 /* the easy handle on the wire */
	struct bd_fetch *next;   /* on the queue or the retry list */
	struct bd_fetch *wnext;  /* on the wire list */
} bd_fetch;

struct bd_remote_state {
	pthread_mutex_t mu;
	bool started, stop, cancel;
	bp_s3 *s3;
	void *multi;             /* CURLM *: the fetcher's, curl_multi_wakeup from any thread */
	pthread_t thread;
	char *dir;
	int objdir;              /* DIR/objects */
	uint32_t chunk;
	uint64_t max_size;
	unsigned requests, retries;
	bd_robj *objects;
	size_t nobjects;
	bd_chunk *lru_head, *lru_tail; /* least recently used first */
	bd_fetch *queue_head, *queue_tail; /* waiting for a request */
	bd_fetch *retry;         /* waiting for their time */
	bd_fetch *wire;          /* on the wire (fetcher thread only) */
	bd_fetch *verify;        /* unverified chunks an acquire waits for: checked next */
	struct bd_fetch_user *users; /* users with fetches queued or on the wire (remote.c) */
	void *verify_buf;        /* a chunk's bytes read back (fetcher thread) */
	pthread_cond_t quiet;    /* signalled once a cancel has settled everything */
	bool cancelled;          /* the fetcher has settled every fetch since cancel */
	unsigned inflight, queued;
	bool waiting_room;       /* the queue's head waits for room */
	bool punch_pending;      /* fetcher thread only */
	bool delete_pending;     /* doomed objects nothing uses */
	bool sync_asked;         /* chunks invalidated by another thread: punch them */
	bool unwanted;           /* a fetching chunk lost its last pin: drop its fetch */
	uint64_t cache_bytes;    /* PRESENT chunks */
	uint64_t table_bytes;    /* object records and chunk tables (atomic: any thread) */
	uint64_t table_max;      /* ... at most: bd_remote_table_budget */
	uint64_t reserved;       /* fetches started */
	unsigned files;          /* data files open (atomic: any thread; remote_map.c) */
	unsigned files_max;      /* ... the cache's share of the daemon's descriptors */
	uint64_t stats_bytes;    /* atomic: body bytes, counted as they come */
	bd_remote_stats stats;
};

extern struct bd_remote_state R;

/* Bytes of chunk i of o (the last one may be short). Any thread: o->size and R.chunk are fixed. */
uint64_t bd__chunk_len(const bd_robj *o, uint32_t i);
/* What an object of size with a record of record bytes is charged before any chunk is used. */
size_t bd__robj_table_need(uint64_t size, size_t record);
/* o's directory array, charged with record. @return 0; -ENOSPC (over R.table_max); -ENOMEM. */
int bd__chunks_init(bd_robj *o, size_t record);
/* Free o's whole table; uncharge everything o was charged. */
void bd__chunks_free(bd_robj *o);
/* Chunk i of o, its record made (and charged) when needed. @return NULL: over table_max or no memory. */
bd_chunk *bd__chunk(bd_robj *o, uint32_t i);
/* Chunk i of o when it has a record; NULL: idle since its record went, so ABSENT. */
bd_chunk *bd__chunk_if(const bd_robj *o, uint32_t i);
/* The record after prev in o's table (NULL: the first); NULL: none. In no order of index. */
bd_chunk *bd__chunk_next(const bd_robj *o, const bd_chunk *prev);
/* Every chunk of o with a record, in no order; the body must not make or free records. */
#define BD_FOR_EACH_CHUNK(o, c) \
	for (bd_chunk *c = bd__chunk_next((o), NULL); c; c = bd__chunk_next((o), c))
/* Free the records of o's idle chunks (and shrink its slots). */
void bd__chunks_trim(bd_robj *o);
/* Take c off the LRU list. */
void bd__lru_remove(bd_chunk *c);
/* Evict the least recently used unpinned chunk (marked to be punched). @return false: none. */
bool bd__evict_one(void);
/* Put c at the LRU's most recently used end. */
void bd__lru_append(bd_chunk *c);
/* Drop a reference to o; a doomed object with none left is deleted by the next sync. */
void bd__robj_unref(bd_robj *o);

struct waiter;
/* Chunk c is settled (err 0: present): its waiters with nothing left to wait for go on *done. */
void bd__settle_waiters(bd_chunk *c, int err, const char *why, struct waiter **done);
/* A fetch of chunk i of o, o referenced by it; not queued. Under R.mu. @return NULL: no memory. */
bd_fetch *bd__fetch_new(bd_robj *o, uint32_t i);
/* Queue chunk i of o for fetching for uid (it becomes FETCHING; o referenced). @return 0 or -ENOMEM. */
int bd__queue_fetch(bd_robj *o, uint32_t i, uint32_t uid);

/*
 * Queue PRESENT, unverified chunk i of o for a check of its bytes against
 * its hash (it becomes FETCHING; o referenced). @return 0 or -ENOMEM.
 */
int bd__verify_queue(bd_robj *o, uint32_t i, uint32_t uid);
/*
 * Fetcher thread, without R.mu: check every queued chunk's bytes. A match
 * is PRESENT again, its waiters on *done; a mismatch (a file changed or
 * swapped under the cache) is fetched again, its waiters waiting on.
 */
void bd__verify_run(struct waiter **done);
/* Stopping: every queued check undone (PRESENT, unverified), waiters failed with why. Under R.mu. */
void bd__verify_cancel(const char *why, struct waiter **done);

/*
 * A map file's bytes (untrusted: the cache directory is anyone's who may
 * write it) as a new object, its chunks present and unverified as listed,
 * charged to R.table_bytes. @return NULL: they do not check.
 * tests/fuzz/fuzz-remote-map.c feeds it everything.
 */
bd_robj *bd__map_decode(const uint8_t *b, size_t len);
/* Free an object that is on no list, its files closed; uncharge its tables. NULL is fine. */
void bd__robj_free(bd_robj *o);

/* Wake the fetcher (curl_multi_wakeup): work was queued, room made, an object doomed. Any thread. */
void bd__remote_wake(void);

/* Open (create) the cache directory and load what is in it. Main thread, before the fetcher. */
int bd__remote_open_dir(const char *dir, char *err, size_t errlen);
/* Write every dirty map, free every object. After the fetcher stopped. */
void bd__remote_close_dir(void);
/*
 * Fetcher thread, without R.mu: punch out what is marked (after writing
 * the maps that no longer list it), delete doomed objects, and with all
 * write every dirty map.
 */
void bd__remote_sync(bool all);

#endif
