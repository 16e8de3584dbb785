/* SPDX-License-Identifier: MIT */
/*
 * pipeline_priv.h - what the pipeline's files share: the block tasks of a
 * job, the queues between the threads, the read buffers, the pipeline.
 *
 * A task crosses each queue once: the loop thread pushes a job's tasks to
 * its owner's flow (bd_pipeline_submit), an I/O thread takes them from the
 * scheduler (bd__sched_pop: users, then their flows, round-robin) and
 * hands each to the decode queue when its read is done (or when it needs
 * none), and the decode worker finishes it (bd__task_finish, which gives
 * the flow its place back); the last task of a job posts the job to the
 * completed list, which the loop thread drains.
 *
 * Thread rules: the pipeline struct is written on the loop thread only
 * before the threads start and after they stop; the scheduler, the queues
 * and the pool are guarded by their mutexes; a task belongs to whichever
 * queue or thread holds it; stats are relaxed atomics. Lock order: the
 * scheduler's mu before an I/O thread's mu; no other lock is held while
 * taking one.
 */
#ifndef BATCHD_DAEMON_PIPELINE_PRIV_H
#define BATCHD_DAEMON_PIPELINE_PRIV_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "blockcache.h"
#include "pages.h"
#include "pipeline.h"
#include "ring.h"

/* A byte range of a block's raw bytes and where the batch wants it. */
typedef struct bd_piece {
	uint64_t src;
	uint64_t size;
	uint8_t *dst;
	/* An image (bd_job_add_image): the sample and epoch its choices are keyed by. */
	bool image;
	bool widen;                 /* uint16 token ids written as int32 (bd_job_add_tokens) */
	uint32_t index;             /* its place in the batch */
	uint64_t id, epoch;
} bd_piece;

/* One block read and decode. */
typedef struct bd_task {
	struct bd_job *job;
	const bd_dataset *dset;
	uint32_t shard;
	uint64_t block;
	bp_pack_block blk;          /* the block's index entry: where it is, sizes, hashes */
	uint32_t first_piece, npieces;
	bool direct_dst;            /* pieces tile the block: decode into pieces[first].dst */
	struct bd_cache_entry *centry; /* the cached block this task loads or copies from */
	bool cache_load;            /* this task decodes into centry for everyone */
	/*
	 * A warm job's read of several blocks at once (io_thread.c, "spans"):
	 * the first block's task (the head) reads them all into its buffer;
	 * each member, the head included, points span_head at the head, and
	 * the head's span_refs counts those still using the buffer (the last
	 * gives it back, and the span's weight in flight with it). span_next
	 * chains the members after the head.
	 * alone: read by itself (a span that failed is read block by block).
	 */
	struct bd_task *span_head, *span_next;
	uint32_t span_refs;
	uint32_t span_weight;       /* the head: blocks' worth charged in flight beyond itself */
	bool span_member;           /* not the head: counts in flight only through the head's weight */
	bool alone;
	/* I/O state, owned by the I/O then the decode thread. */
	bd_io_req req;
	uint8_t *buf;
	int32_t pool_slot;          /* the first of pool_n pool buffers; -1: buf was malloc'd */
	uint32_t pool_n;
	size_t own_cap;             /* pool_slot -1: the size of buf, its own (bd__pool_own) */
	uint64_t t_submit;          /* ns, CLOCK_MONOTONIC: for the read latency histogram */
	uint32_t skip;              /* stored bytes start at buf + skip */
	/* A remote dataset's block: its cache chunks pinned (remote.h), and the fetch's outcome. */
	bool remote_pinned;
	bool refetched;             /* its cached bytes failed decode once and were fetched again */
	bool parked;                /* waiting on the fetcher, not counted in flight (bd__sched_park) */
	int32_t remote_err;
	struct bd_io_thread *home;  /* the I/O thread it waits for a fetch on */
	struct bd_flow *flow;       /* its owner's, from submission to bd__task_finish */
	struct bd_task *next;
} bd_task;

struct bd_job {
	void *owner;
	uint32_t tenant;            /* the owner's user: the scheduler's unit of fairness */
	bd_job_event_fn event;
	uint64_t seq;
	bd_task *tasks;
	uint32_t ntasks, max_tasks;
	bd_piece *pieces;
	uint32_t npieces, max_pieces;
	uint32_t pending;           /* tasks not yet finished (atomic) */
	int32_t status;             /* 0, or the first failure's negative errno (atomic) */
	char reason[BP_RING_REASON_MAX];
	const bi_spec *image;       /* its image pieces' spec (bd_job_set_image), or NULL */
	bool warm;                  /* bd_job_set_warm: cache loads only, read in spans */
	bool warm_full;             /* ... the cache had no room for one of them (atomic) */
	uint64_t image_seed;
	bool image_skip;            /* a bad image is left out, not the batch failed */
	uint64_t *image_bad;        /* the record's image outcome (bd_job_set_image) */
	char skip_why[BP_RING_REASON_MAX / 2]; /* the first left-out image's reason */
	struct bd_job *next;
};

/* A FIFO of tasks, chained through bd_task.next; the caller holds its lock. */
typedef struct bd_fifo {
	bd_task *head, *tail;
} bd_fifo;

void bd__fifo_push(bd_fifo *q, bd_task *t);
/* @return the oldest task, or NULL when empty. */
bd_task *bd__fifo_pop(bd_fifo *q);
/* Move every task of from, in order, behind q's; from is left empty. */
void bd__fifo_append(bd_fifo *q, bd_fifo *from);
/* Put t back at the head: it is the next to pop. */
void bd__fifo_unpop(bd_fifo *q, bd_task *t);

/*
 * One owner's (a session's) tasks not yet claimed by an I/O thread, in
 * submission order, and how many of its blocks are claimed and not yet
 * finished (in an engine, waiting for the cache, or in the decode queue).
 * A flow with tasks and fewer than flow_cap blocks in flight is on its
 * tenant's ready list, once; I/O threads take one task from its head and
 * put it back at the tail. A flow is made at its owner's first submission
 * and freed once the owner is done (bd__sched_cancel) and nothing of it is
 * queued or in flight, so a session allocates it once. Guarded by the
 * scheduler's mu.
 */
typedef struct bd_flow {
	void *owner;
	struct bd_tenant *tenant;
	bd_fifo queue;
	uint32_t inflight;
	uint32_t parked;            /* its tasks waiting on the fetcher (bd__sched_park) */
	uint32_t owed;              /* turns it gives up to its tenant's other flows (take) */
	bool ready;                 /* on its tenant's ready list */
	bool done;                  /* the owner submits no more (bd__sched_cancel) */
	struct bd_flow *next;       /* all flows */
	struct bd_flow *next_ready;
} bd_flow;

/*
 * One user's (uid's) flows. A tenant with a ready flow and fewer blocks in
 * flight than its cap (bd__sched_tenant_cap) is on the scheduler's ready
 * list, once. Freed with its last flow. Guarded by the scheduler's mu.
 */
typedef struct bd_tenant {
	uint32_t uid;
	uint32_t queued;            /* its flows' tasks not yet claimed */
	uint32_t inflight;          /* its flows' blocks claimed and not yet finished */
	uint32_t parked;            /* ... of which waiting on the fetcher, not counted above */
	uint32_t nflows;
	bd_flow *ready_head, *ready_tail;
	bool ready;                 /* on the scheduler's ready list */
	struct bd_tenant *next;     /* all tenants */
	struct bd_tenant *next_ready;
} bd_tenant;

/*
 * Who is served next (fairq.c): tenants round-robin, then their flows
 * round-robin, a block at a time. wake(ctx) is called, under mu, when a
 * tenant joins the ready list (or, when blocks finish, is half below its
 * caps) so that threads that found nothing look again.
 */
typedef struct bd_sched {
	pthread_mutex_t mu;
	bd_flow *flows;
	bd_tenant *tenants;
	bd_tenant *ready_head, *ready_tail;
	bd_flow spare;              /* for owners whose flow could not be allocated */
	bd_tenant spare_tenant;     /* for users whose entry could not be allocated, and spare's */
	uint32_t flow_cap;          /* blocks in flight per flow (bd_pipeline_opts.session_blocks) */
	uint32_t share;             /* blocks in flight across tenants: each has share / active */
	uint32_t active;            /* tenants with tasks queued or in flight */
	void (*wake)(void *ctx);
	void *ctx;
} bd_sched;

/* share is raised to flow_cap when lower: one tenant alone may fill a flow. */
void bd__sched_init(bd_sched *s, uint32_t flow_cap, uint32_t share, void (*wake)(void *ctx),
		    void *ctx);
/* Frees every flow and tenant; tasks still queued are dropped. */
void bd__sched_fini(bd_sched *s);
/* Queue the job's tasks behind its owner's earlier ones (loop thread). */
void bd__sched_push(bd_sched *s, bd_job *job);
/*
 * The next task: the head of the first ready tenant's first ready flow;
 * both go to the back of their lists. NULL when no tenant has a task it
 * may start; *hungry (when not NULL) says which. I/O threads.
 */
bd_task *bd__sched_pop(bd_sched *s, bool *hungry);
/*
 * The task after prev in prev's job, when it is the head of prev's flow
 * (an I/O thread that claimed prev reads them together, io_thread.c):
 * it counts in flight like a popped one, past the flow's cap if need be,
 * until the caller weighs the span (bd__sched_charge). NULL when the
 * flow's head is anything else. I/O threads.
 */
bd_task *bd__sched_pop_next(bd_sched *s, const bd_task *prev);
/*
 * n more (or, negative, fewer) blocks' worth in flight for task's flow
 * and tenant: a span's weight beyond its head (io_thread.c); and turns
 * the flow gives up to its tenant's other flows when next served, one
 * per block's worth read beyond the one claim (so that a trainer's batch
 * is not queued behind many spans). Giving back wakes and retires as
 * bd__sched_done does. Any thread.
 */
void bd__sched_charge(bd_sched *s, bd_task *task, int32_t n, uint32_t turns);
/* task (popped or cancelled) no longer counts against its flow's and tenant's caps (any thread). */
void bd__sched_done(bd_sched *s, bd_task *task);
/*
 * owner submits no more: its queued tasks, chained through next, now
 * counted in flight (each must go through bd__sched_done). Loop thread.
 */
bd_task *bd__sched_cancel(bd_sched *s, void *owner);
/* Blocks in flight a tenant may have now: share / tenants with work, at least 1. Under mu. */
uint32_t bd__sched_tenant_cap(const bd_sched *s);
/*
 * task is about to wait on the remote fetcher, for as long as a bucket
 * takes: it stops counting against its flow's and tenant's caps, so the
 * same user's other sessions, local ones first of all, are served
 * meanwhile; a flow with flow_cap tasks parked gets no more until one is
 * back. Before the wait starts (the fetcher may hand it back at once).
 * Any thread.
 */
void bd__sched_park(bd_sched *s, bd_task *task);
/* task's wait is over (or never started): it counts in flight again. Any thread. */
void bd__sched_unpark(bd_sched *s, bd_task *task);

/*
 * A read that finds no run free in the pool (or is larger than it) gets
 * a buffer of its own; up to BD_POOL_SPARES of those, BD_POOL_SPARE_BYTES
 * in all, are kept for later reads rather than freed: a fresh buffer
 * each time cost page faults on every read (1 MiB blocks at queue depth
 * 64 need twice the pool).
 */
#define BD_POOL_SPARES 32u
#define BD_POOL_SPARE_BYTES ((size_t)32 << 20)

/*
 * The read buffers: n buffers of size bytes end to end in one mapping, on
 * huge pages where the kernel gives them (pages.h), registered with each
 * ring as one fixed buffer. A read takes a run of consecutive buffers, so
 * blocks up to the whole pool read into huge pages and with fixed-buffer
 * reads too. Any thread.
 */
typedef struct bd_pool {
	uint8_t *base;
	size_t bytes;
	size_t map_bytes;           /* what to unmap */
	bd_pages mapped;            /* the kind mapped */
	bd_pages pages;             /* what the pages turned out to be, once faulted in */
	uint32_t nbufs, buf_size;
	pthread_mutex_t mu;
	uint8_t *busy;              /* per buffer: taken; guarded by mu */
	struct iovec iov;           /* the whole pool, for bd_io_register */
	/* Buffers of reads that found no run free, kept for the next (guarded by mu). */
	struct { void *buf; size_t cap; } spare[BD_POOL_SPARES];
	uint32_t nspare;
	size_t spare_bytes;
} bd_pool;

/* n may be 0 (no pool: every read gets its own buffer). @return 0 or -ENOMEM. */
int bd__pool_init(bd_pool *pl, uint32_t n, uint32_t size);
/* After bd__pool_init, failed or not. */
void bd__pool_fini(bd_pool *pl);
/* Buffers a read of len bytes takes: 0 when it is empty or larger than the pool. */
uint32_t bd__pool_slots(const bd_pool *pl, uint64_t len);
/* @return the first of n consecutive free buffers (the lowest such run), or -1. */
int32_t bd__pool_get(bd_pool *pl, uint32_t n);
/* Give back the run of n buffers from slot. */
void bd__pool_put(bd_pool *pl, int32_t slot, uint32_t n);
uint8_t *bd__pool_buf(const bd_pool *pl, int32_t slot);
/*
 * A buffer of its own for a read of len bytes, aligned to align (a power
 * of two, at least 4096): a spare one that fits (no more than twice len),
 * else a new one. *ret_cap is its size, for bd__pool_disown. NULL: no memory.
 */
void *bd__pool_own(bd_pool *pl, size_t len, size_t align, size_t *ret_cap);
/* Done with an own buffer: kept as a spare while there is room, else freed. */
void bd__pool_disown(bd_pool *pl, void *buf, size_t cap, size_t align);

typedef struct bd_io_thread {
	struct bd_pipeline *p;
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool kicked;                /* guarded by mu: a flow has work for a hungry thread */
	bool stop;                  /* guarded by mu */
	bool idle;                  /* guarded by mu: waiting on cv, not in the ring */
	bool hungry;                /* guarded by the scheduler's mu: found no task, wants a kick */
	int wake_fd;                /* eventfd that interrupts a wait in the ring, or -1 */
	/*
	 * Guarded by mu: tasks whose remote chunks have landed (or failed),
	 * and tasks that waited on a warm job's load that failed (decode.c):
	 * to be read.
	 */
	bd_fifo fetched;
	/* Set by the thread before it reports ready. */
	int setup_err;
	bd_io_engine engine;
	unsigned flags;
	bool registered;            /* the pool is registered with its ring (its pages faulted, pinned) */
	bool ready;
} bd_io_thread;

/*
 * Wake it for new work: its condition variable when it sleeps there, else
 * its eventfd in the ring. Any thread; takes it->mu.
 */
void bd__io_kick(bd_io_thread *it);
/*
 * t goes back to I/O thread it, to be read (it->fetched): a remote block
 * whose chunks landed, one to fetch again, one whose warm load failed.
 * Any thread; takes it->mu.
 */
void bd__io_hand_back(bd_io_thread *it, bd_task *t);

struct bd_pipeline {
	bd_pipeline_opts o;
	uv_loop_t *loop;
	uv_async_t async;

	bd_io_thread *io;
	unsigned nio, io_started;

	bd_sched sched;

	pthread_t *dec;
	unsigned ndec, dec_started;
	unsigned dec_ids;           /* atomic: each worker takes its index from here */
	pthread_mutex_t dmu;
	pthread_cond_t dcv;         /* active workers wait here for tasks */
	pthread_cond_t dpark;       /* workers at or above dactive wait here */
	bd_fifo decode;             /* guarded by dmu */
	uint32_t dqueued;           /* guarded by dmu: tasks in decode */
	unsigned dactive;           /* guarded by dmu: workers 0 .. dactive-1 take tasks */
	bool dstop;

	pthread_mutex_t cmu;
	bd_job *completed;          /* guarded by cmu */

	bd_pool pool;
	bd_cache *cache;
	struct bd_linger *linger;   /* loop thread; see bd_pipeline_linger */

	bd_pipeline_stats stats;    /* relaxed atomics */
	bd_hist read_lat, decode_lat;
};

static inline void bd__stat_add(uint64_t *c, uint64_t v)
{
	__atomic_fetch_add(c, v, __ATOMIC_RELAXED);
}

/* Record the job's failure; the first one names the batch's reason. Any thread. */
bool bd__job_fail(bd_job *job, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Does the piece list cover a block of raw_size bytes exactly, in order, into contiguous bytes? */
bool bd__pieces_tile(const bd_piece *pc, uint32_t n, uint64_t raw_size);

/* Copy the task's pieces out of its decoded block's raw bytes. */
/*
 * The most a decode worker's image scratch may hold (lib/image): a crop of
 * about 10 megapixels decoded whole and its resize. An image that needs
 * more fails its batch, naming it. Charged to each session that decodes
 * images, once a decode worker (session_size.c).
 */
#define BD_IMAGE_SCRATCH ((size_t)48 << 20)

/*
 * Copy t's pieces out of its block's raw bytes (counted in p's
 * copied_bytes: images and widened ids aside); its images are made with
 * *img, a decode worker's scratch (made on first use): NULL for a caller
 * with none, which must not be given a job with images (bd_job.image).
 */
void bd__copy_pieces(bd_pipeline *p, const bd_task *t, const uint8_t *raw, bi_scratch **img);
/* Do the task's pieces add up to at most max bytes? (Stops counting past max.) */
bool bd__task_bytes_at_most(const bd_task *t, uint64_t max);

/*
 * t's read buffer goes back to the pool (or its own is kept or freed); a
 * span's, once its last block is done with it (io_thread.c). Any thread.
 */
void bd__task_buf_put(bd_pipeline *p, bd_task *t);

/* The task is done (decode thread): its buffer goes back; the job's last posts the job. */
void bd__task_finish(bd_pipeline *p, bd_task *t);


/* Queue t for a decode worker (I/O and decode threads). */
void bd__decode_push(bd_pipeline *p, bd_task *t);
/* Queue the n tasks of list (left empty) at once: one lock and one wake-up for them all. */
void bd__decode_push_list(bd_pipeline *p, bd_fifo *list, uint32_t n);

/* Thread bodies: arg is the bd_io_thread (io_thread.c), the pipeline (decode.c). */
void *bd__io_main(void *arg);
void *bd__decode_main(void *arg);

#endif
