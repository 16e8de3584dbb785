/* SPDX-License-Identifier: MIT */
/*
 * io_thread.c - the I/O threads (see pipeline.h): each owns one read
 * engine (io.c) and runs claim / read / reap until the pipeline stops.
 *
 * Claim takes one task at a time from the scheduler (fairq.c: users, then
 * their sessions, round-robin), only when the ring has room for it; read consults the
 * block cache and starts the read; reap waits for one completion and
 * passes the block to the decode workers. The thread sleeps on its
 * condition variable when it has nothing in flight, and in the ring
 * otherwise, where an eventfd the ring watches lets whoever makes a flow
 * ready (a submission, a finished block) wake it for new work.
 *
 * Spans: a warm job's blocks (bd_job_set_warm: cache loads in file order)
 * are read several at once. Having claimed one that must be read, the
 * thread takes the job's next blocks from the flow's head while they
 * follow on in the file (bd__sched_pop_next), skipping those cached or
 * being loaded, and reads them all with one read of at most BD_SPAN_MAX
 * bytes, through gaps of at most BD_SPAN_GAP (the skipped blocks' bytes).
 * Each block then decodes from its place in the head's buffer, given
 * back by the last one done with it. A block the read did not bring
 * back whole (an error, a short read) is read again alone, so that a
 * failure names its own block and fails only the batches that need it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fault.h"
#include "log.h"
#include "pipeline_priv.h"
#include "remote.h"
#include "util.h"

/* One I/O thread's own state, on its stack. */
typedef struct io_worker {
	bd_io_thread *it;
	bd_pipeline *p;
	bd_io *io;
	bd_fifo local;              /* claimed, not yet reading */
	bool registered;            /* the pool is registered with the ring: fixed-buffer reads */
	unsigned copies;            /* cache hits copied here since reads were last polled */
} io_worker;

/* ---- setup ---------------------------------------------------------------------------- */

static bd_io_opts engine_opts(const bd_pipeline *p)
{
	const bd_fault_read *fr = bd_fault_reads();

	return (bd_io_opts){
		.engine = p->o.engine,
		.queue_depth = p->o.queue_depth,
		/* Test builds only: BATCHD_FAULTS drives the engine's own fault hooks. */
		.force_setup_error = bd_fault_uring_setup(),
		/* Rounded up to 4 KiB so that O_DIRECT reads stay aligned. */
		.fault_max_read = fr && fr->short_max ? (fr->short_max + 4095u) & ~4095u : 0,
		.fault_every = fr && fr->err ? fr->every : 0,
		.fault_errno = fr ? fr->err : 0,
	};
}

/* Tell bd_pipeline_new how setup went (r), and what the engine is. */
static void report_ready(bd_io_thread *it, const io_worker *w, int r)
{
	pthread_mutex_lock(&it->mu);
	it->setup_err = r;
	if (r == 0) {
		it->engine = bd_io_engine_of(w->io);
		it->flags = bd_io_setup_flags(w->io);
		it->registered = w->registered;
	}
	it->ready = true;
	pthread_cond_broadcast(&it->cv);
	pthread_mutex_unlock(&it->mu);
}

/* Open the engine on this thread, register the pool, watch the wake-up fd. @return 0 or <0. */
static int setup(io_worker *w)
{
	bd_io_thread *it = w->it;
	bd_pipeline *p = w->p;
	bd_io_opts opts = engine_opts(p);
	int r;

	/* The ring is created here: SINGLE_ISSUER ties it to this thread. */
	r = bd_io_new(&opts, &w->io);
	if (r == 0 && p->pool.bytes) {
		w->registered = bd_io_register(w->io, &p->pool.iov, 1) == 0;
		if (!w->registered)
			bd_log(LOG_NOTICE, "I/O thread: cannot register read buffers (RLIMIT_MEMLOCK?); "
			       "plain reads instead of fixed-buffer reads");
	}
	if (r == 0 && bd_io_watch(w->io, it->wake_fd) < 0) {
		close(it->wake_fd);
		it->wake_fd = -1;
	}
	report_ready(it, w, r);
	return r;
}

/* ---- claim ---------------------------------------------------------------------------- */

/*
 * Sleep until there is something to do: a kick (a flow has a task for us),
 * a claimed task still to start, or reads in flight. @return false once
 * stopped.
 */
static bool wait_for_work(io_worker *w)
{
	bd_io_thread *it = w->it;
	bool stop;

	pthread_mutex_lock(&it->mu);
	while (!it->stop && !it->kicked && !w->local.head && !bd_io_inflight(w->io) &&
	       !it->fetched.head) {
		it->idle = true;
		pthread_cond_wait(&it->cv, &it->mu);
		it->idle = false;
	}
	it->kicked = false;
	stop = it->stop;
	pthread_mutex_unlock(&it->mu);
	return !stop;
}

/*
 * The next task to start: the one the ring had no room for, else the
 * next from the flows (which then stays on the local list until it
 * starts). @return NULL when there is none.
 */
static bd_task *claim(io_worker *w)
{
	bd_task *t = w->local.head;

	if (t)
		return t;
	t = bd__sched_pop(&w->p->sched, &w->it->hungry);
	if (t)
		bd__fifo_push(&w->local, t);
	return t;
}

/* ---- read ----------------------------------------------------------------------------- */

/* The end of the stored bytes t's read must bring back: its block's, or its span's last. */
static uint64_t read_end(const bd_task *t)
{
	const bd_task *last = t;

	while (last->span_next)
		last = last->span_next;
	return last->blk.offset + last->blk.stored_size;
}

/* Choose the read range and buffer for t. @return 0, or <0 with the job failed. */
static int prepare(bd_pipeline *p, bd_task *t, bool registered)
{
	uint32_t align = t->dset->align[t->shard];
	uint64_t off = t->blk.offset, end = read_end(t), len;

	if (align) {
		off &= ~(uint64_t)(align - 1);
		end = (end + align - 1) & ~(uint64_t)(align - 1);
	}
	len = end - off;
	t->skip = (uint32_t)(t->blk.offset - off);
	t->pool_n = bd__pool_slots(&p->pool, len);
	t->pool_slot = t->pool_n ? bd__pool_get(&p->pool, t->pool_n) : -1;
	if (t->pool_slot >= 0) {
		t->buf = bd__pool_buf(&p->pool, t->pool_slot);
	} else {
		t->buf = bd__pool_own(&p->pool, len, align, &t->own_cap);
		if (!t->buf) {
			bd__job_fail(t->job, -ENOMEM, "dataset %s: out of memory reading a block",
				     t->dset->name);
			return -ENOMEM;
		}
	}
	t->req = (bd_io_req){
		.fd = t->dset->read_fd[t->shard],
		.offset = off,
		.len = (uint32_t)len,
		.buf = t->buf,
		/* The pool is one fixed buffer, where registration worked. */
		.buf_index = registered && t->pool_slot >= 0 ? 0 : -1,
		.user = t,
	};
	return 0;
}

/* Pieces of a cache hit up to this many bytes are copied on the I/O thread, not handed off. */
#define BD_INLINE_COPY_MAX (16u * 1024)
/* Reads in flight are polled every this many of those copies (poll_reads). */
#define BD_COPIES_PER_POLL 32u
/* Most reads reaped and handed to the decode workers at once. */
#define BD_REAP_MAX 32

/*
 * Consult the block cache for t, the head of the claimed list. @return
 * true when t went elsewhere (a small hit copied here and finished, a
 * larger one to decode; a wait is the loader's to hand back), false when
 * it is still at the head and must be read.
 */
static bool consult(io_worker *w, bd_task *t)
{
	bd_cache_key key = { .dataset = t->dset->uid, .shard = t->shard, .block = t->block };
	bd_cache_entry *e;
	int r;

	/* The cache had no room for one of the job's blocks: the rest would evict to no end. */
	if (t->job->warm && __atomic_load_n(&t->job->warm_full, __ATOMIC_RELAXED)) {
		bd__task_finish(w->p, t);
		return true;
	}

	/*
	 * The job's later blocks are likely next: start fetching the bucket of
	 * the one after next while this lookup misses on its own.
	 */
	if (t + 2 < t->job->tasks + t->job->ntasks) {
		const bd_task *n = t + 2;
		bd_cache_key nkey = { .dataset = n->dset->uid, .shard = n->shard, .block = n->block };

		bd_cache_prefetch(w->p->cache, &nkey);
	}
	r = bd_cache_get(w->p->cache, &key, t->blk.raw_size, t, &e);
	if (r == BD_CACHE_BYPASS && t->job->warm) {
		__atomic_store_n(&t->job->warm_full, true, __ATOMIC_RELAXED);
		bd__task_finish(w->p, t);
		return true;
	}
	/* Images are made on the decode workers, never here. */
	if (r == BD_CACHE_HIT && !t->job->image && bd__task_bytes_at_most(t, BD_INLINE_COPY_MAX)) {
		/*
		 * A small copy costs less than waking a decode worker for it: with
		 * tiny samples in the ram tier the hand-off was most of the cost.
		 */
		bd__copy_pieces(w->p, t, bd_cache_data(e), NULL);
		bd_cache_put(w->p->cache, e);
		bd__task_finish(w->p, t);
		w->copies++;
		return true;
	}
	if (r == BD_CACHE_HIT) {
		t->centry = e;
		t->req.result = 0;
		bd__decode_push(w->p, t);
		return true;
	}
	if (r == BD_CACHE_WAIT)
		return true;
	if (r == BD_CACHE_LOAD) {
		t->centry = e;
		t->cache_load = true;
	}
	return false;
}

/*
 * Consult the block cache for t, the head of the claimed list. @return
 * true when t went elsewhere (a small hit copied here and finished, a
 * larger one to decode; a wait is the loader's to hand back; a warm
 * block with no room skipped), false when it is still at the head and
 * must be read.
 */
static bool lookup(io_worker *w, bd_task *t)
{
	/* Off the local list first: a waiter is chained through t->next. */
	bd__fifo_pop(&w->local);
	if (consult(w, t))
		return true;
	/* Back at the head: it reads now. */
	bd__fifo_unpop(&w->local, t);
	return false;
}

/* ---- spans ---------------------------------------------------------------------------- */

/*
 * A warm block of a dataset not kept in the cache (the page tier): read
 * only so that the page cache holds it for the batches, never looked up
 * or decoded.
 */
static bool page_only(const bd_task *t)
{
	return t->job->warm && !t->dset->cache_all;
}

/* The most one read of a warm job's blocks takes (two of the pool's buffers by default). */
#define BD_SPAN_MAX ((uint64_t)1 << 20)
/*
 * A span counts in flight (its flow's and user's caps, pipeline.h
 * "Fairness") as one block per this many bytes it reads, at least one,
 * however many blocks it holds: by what it costs the disk, not by its
 * count of tiny blocks. Counted per block, a span of 200 small blocks
 * took a whole user's share, so that it was read, then decoded, then
 * the next read: the disk and the decode workers took turns.
 */
#define BD_SPAN_UNIT ((uint64_t)128 << 10)
/* The most bytes a span reads through (blocks already cached) rather than end there. */
#define BD_SPAN_GAP ((uint64_t)64 << 10)

/*
 * t, the head of the claimed list, loads a warm job's block: take the
 * job's next blocks while they follow t's in the file and the span stays
 * within BD_SPAN_MAX (see "Spans" above). The first that cannot join goes
 * on the claimed list, to be read next.
 */
static void gather(io_worker *w, bd_task *t)
{
	uint64_t start = t->blk.offset, end = start + t->blk.stored_size, weight;
	uint32_t members = 0;
	bd_task *prev = t, *last = t, *n;

	while ((n = bd__sched_pop_next(&w->p->sched, prev))) {
		prev = n;
		if (!n->blk.raw_size) {
			bd__task_finish(w->p, n); /* an empty block: nothing to read */
			continue;
		}
		if (n->shard != t->shard || n->blk.offset < end ||
		    n->blk.offset + n->blk.stored_size - start > BD_SPAN_MAX) {
			bd__fifo_push(&w->local, n);
			break;
		}
		if (!page_only(n) && consult(w, n))
			continue; /* cached, or being loaded: read through it */
		if (n->blk.offset - end > BD_SPAN_GAP) {
			bd__fifo_push(&w->local, n); /* too far past the last one read: a span of its own */
			break;
		}
		last->span_next = n;
		last = n;
		n->span_member = true;
		members++;
		end = n->blk.offset + n->blk.stored_size;
	}
	if (last == t)
		return;
	for (bd_task *m = t; m; m = m->span_next)
		m->span_head = t;
	/* Counted a block each so far: now what the span weighs, beyond its head. */
	weight = (end - start + BD_SPAN_UNIT - 1) / BD_SPAN_UNIT;
	t->span_weight = (uint32_t)(weight - 1);
	bd__sched_charge(&w->p->sched, t, (int32_t)t->span_weight - (int32_t)members,
			 t->span_weight);
}

/* Hand a task with nothing (more) to read to the decode workers, with result. */
static void skip_read(io_worker *w, bd_task *t, int32_t result)
{
	bd__fifo_pop(&w->local);
	t->req.result = result;
	bd__decode_push(w->p, t);
}

static void reaped(io_worker *w, bd_task *t);
static void poll_reads(io_worker *w);

/* ---- remote blocks -------------------------------------------------------------------- */

/*
 * The fetcher's word on t's chunks (remote.h): t goes back to the I/O
 * thread it waited on, which reads it (or fails it) next. Fetcher thread.
 */
static void fetched(void *ctx, int err, const char *why)
{
	bd_task *t = ctx;
	bd_io_thread *it = t->home;

	bd__sched_unpark(&it->p->sched, t);
	t->remote_pinned = true;
	t->remote_err = err;
	if (err < 0)
		bd__job_fail(t->job, err, "dataset %s: shard %s: block %llu: %s", t->dset->name,
			     bp_dataset_shard(t->dset->ds, t->shard)->name,
			     (unsigned long long)t->block, why);
	bd__io_hand_back(it, t);
}

void bd__io_hand_back(bd_io_thread *it, bd_task *t)
{
	t->next = NULL;
	pthread_mutex_lock(&it->mu);
	bd__fifo_push(&it->fetched, t);
	pthread_mutex_unlock(&it->mu);
	bd__io_kick(it);
}

static void unpin(bd_task *t)
{
	if (t->remote_pinned) {
		bd_robj_release(t->dset->robj[t->shard], t->blk.offset, t->blk.stored_size);
		t->remote_pinned = false;
	}
}

/*
 * Pin t's chunks in the remote cache (t is the head). @return 0: they are
 * there, read now; 1: t waits for the fetcher, off the list; <0: failed
 * (t handed on with the error).
 */
static int acquire(io_worker *w, bd_task *t)
{
	int r;

	/* Off the list first: the fetcher may hand it back before acquire returns. */
	bd__fifo_pop(&w->local);
	t->home = w->it;
	bd__sched_park(&w->p->sched, t);
	r = bd_robj_acquire(t->dset->robj[t->shard], t->blk.offset, t->blk.stored_size,
			    t->job->tenant, t->job->owner, fetched, t);
	if (r != 1)
		bd__sched_unpark(&w->p->sched, t); /* no wait after all */
	if (r == 0) {
		t->remote_pinned = true;
		bd__fifo_unpop(&w->local, t);
		return 0;
	}
	if (r < 0) {
		bd__job_fail(t->job, r, "dataset %s: block %llu: %s", t->dset->name,
			     (unsigned long long)t->block,
			     r == -ECANCELED ? "batchd is stopping" : strerror(-r));
		t->req.result = r;
		bd__decode_push(w->p, t);
	}
	return r;
}

/* Tasks whose chunks have landed: to the local list to be read; failed ones on to decode, failed. */
static void take_fetched(io_worker *w)
{
	bd_fifo got;
	bd_task *t;

	pthread_mutex_lock(&w->it->mu);
	got = w->it->fetched;
	w->it->fetched = (bd_fifo){ 0 };
	pthread_mutex_unlock(&w->it->mu);
	while ((t = got.head)) {
		got.head = t->next;
		t->next = NULL;
		if (t->remote_err < 0) {
			unpin(t);
			t->req.result = t->remote_err;
			bd__decode_push(w->p, t);
		} else {
			bd__fifo_push(&w->local, t);
		}
	}
}

/* Start t's read (t is the head). @return 0 (t left the list), or -EBUSY (ring full, t stays). */
static int start_read(io_worker *w, bd_task *t)
{
	int r;

	if (t->blk.stored_size == 0) {
		/* Nothing to read: an empty raw block. */
		t->buf = NULL;
		skip_read(w, t, 0);
		return 0;
	}
	if (t->dset->robj && !t->remote_pinned && acquire(w, t) != 0)
		return 0;
	if (!t->buf && prepare(w->p, t, w->registered) < 0) {
		unpin(t);
		skip_read(w, t, -ENOMEM);
		return 0;
	}
	t->t_submit = bd_now_ns();
	r = bd_io_submit(w->io, &t->req);
	if (r == -EBUSY)
		return r;
	bd__fifo_pop(&w->local);
	__atomic_fetch_add(&w->p->stats.reads_inflight, 1, __ATOMIC_RELAXED);
	if (r < 0) {
		t->req.result = r;
		reaped(w, t);
	}
	return 0;
}

/*
 * Start reads, a block at a time from the flows, as many as the ring
 * takes: claiming only what can start keeps the order across owners the
 * flows' (pipeline.h, "Fairness").
 */
static void read_claimed(io_worker *w)
{
	bd_task *t;

	while ((t = claim(w))) {
		/* An empty block: nothing to read ahead (a warm job has no pieces to give it). */
		if (t->job->warm && !t->blk.raw_size) {
			bd__fifo_pop(&w->local);
			bd__task_finish(w->p, t);
			continue;
		}
		/*
		 * A block that does not tile the batch is worth caching; one that
		 * does only when the whole dataset is kept decoded (the ram tier) or
		 * another session reads the same version (it would read and decode
		 * it again). A lone session's whole blocks decode straight into its
		 * batch.
		 */
		if ((!t->direct_dst || t->dset->cache_all || bd_dataset_shared(t->dset)) &&
		    !page_only(t) && !t->buf && !t->centry && !t->remote_pinned &&
		    t->blk.raw_size && lookup(w, t)) {
			/*
			 * A long run of hits copied here must not hold back the
			 * reads of others: submitted only when we enter the ring,
			 * and reaped only from there.
			 */
			if (w->copies >= BD_COPIES_PER_POLL && bd_io_inflight(w->io))
				poll_reads(w);
			continue;
		}
		if (t->job->warm && (t->cache_load || page_only(t)) && !t->alone && !t->span_head &&
		    !t->buf && t->blk.raw_size)
			gather(w, t);
		if (start_read(w, t) == -EBUSY)
			break;
	}
}

/* ---- reap ----------------------------------------------------------------------------- */

/* Test builds: persistent faults at a shard offset, and late completions. */
static void inject_faults(bd_task *t, const bp_shard *sh)
{
	const bd_fault_read *fr = bd_fault_reads();
	static unsigned completions; /* atomic: every I/O thread counts here */

	if (!fr)
		return;
	if (fr->shard[0] && fr->offset >= t->req.offset && fr->offset < t->req.offset + t->req.len) {
		const char *base = strrchr(sh->name, '/');

		if (!strcmp(base ? base + 1 : sh->name, fr->shard))
			t->req.result = -fr->shard_err;
	}
	if (fr->delay_ms && fr->every &&
	    __atomic_add_fetch(&completions, 1, __ATOMIC_RELAXED) % fr->every == 0) {
		struct timespec ts = { .tv_sec = fr->delay_ms / 1000,
				       .tv_nsec = (long)(fr->delay_ms % 1000) * 1000000L };

		nanosleep(&ts, NULL);
	}
}

/* t's read is over: account for it (a failure fails its job); decode is next. */
static void settle_read(bd_pipeline *p, bd_task *t)
{
	const bp_shard *sh = bp_dataset_shard(t->dset->ds, t->shard);
	int32_t res;

	inject_faults(t, sh);
	res = t->req.result;
	unpin(t);

	__atomic_fetch_sub(&p->stats.reads_inflight, 1, __ATOMIC_RELAXED);
	bd_hist_add(&p->read_lat, bd_now_ns() - t->t_submit);
	if (res < 0) {
		bd__stat_add(&p->stats.read_errors, 1);
		bd__job_fail(t->job, res, "dataset %s: shard %s: block %llu: read failed: %s",
			     t->dset->name, sh->name, (unsigned long long)t->block, strerror(-res));
	} else if ((uint64_t)res < t->skip + t->blk.stored_size) {
		bd__stat_add(&p->stats.read_errors, 1);
		bd__job_fail(t->job, -EIO, "dataset %s: shard %s: block %llu: file ends early (truncated?)",
			     t->dset->name, sh->name, (unsigned long long)t->block);
		t->req.result = -EIO;
	} else {
		bd__stat_add(&p->stats.blocks_read, 1);
		bd__stat_add(&p->stats.bytes_read, (uint64_t)res);
	}
}

/*
 * The read of span head h is over: each block it brought back whole
 * decodes from its place in h's buffer (to out); the others go back on
 * the claimed list, to be read alone. @return the blocks put on out.
 */
static uint32_t settle_span(io_worker *w, bd_task *h, bd_fifo *out)
{
	bd_pipeline *p = w->p;
	bd_fifo ok = { 0 };
	int32_t res;
	uint32_t n = 0;

	inject_faults(h, bp_dataset_shard(h->dset->ds, h->shard));
	res = h->req.result;
	__atomic_fetch_sub(&p->stats.reads_inflight, 1, __ATOMIC_RELAXED);
	bd_hist_add(&p->read_lat, bd_now_ns() - h->t_submit);
	if (res > 0) {
		bd__stat_add(&p->stats.bytes_read, (uint64_t)res);
		bd__stat_add(&p->stats.span_reads, 1);
	}
	for (bd_task *m = h, *next; m; m = next) {
		next = m->span_next;
		m->span_next = NULL;
		m->skip = (uint32_t)(m->blk.offset - h->req.offset);
		if (res >= 0 && (uint64_t)res >= m->skip + m->blk.stored_size) {
			m->buf = h->buf;
			m->req.result = res;
			bd__fifo_push(&ok, m);
			n++;
			continue;
		}
		/* Not brought back whole: read alone, so that its failure is its own. */
		m->alone = true;
		m->req.result = 0;
		if (m == h) {
			/* Nobody else has the buffer (the head is the first block): it goes, weight and all. */
			h->span_refs = 1;
			bd__task_buf_put(p, h);
		}
		m->span_head = NULL;
		if (m->span_member) {
			m->span_member = false;
			bd__sched_charge(&p->sched, m, 1, 0); /* a block in flight of its own now */
		}
		bd__fifo_push(&w->local, m);
	}
	/* Before any of them can finish: the last to finish gives the buffer back. */
	h->span_refs = n;
	bd__stat_add(&p->stats.blocks_read, n);
	bd__stat_add(&p->stats.span_blocks, n);
	bd__fifo_append(out, &ok);
	return n;
}

/*
 * A read is over (t, a block or a span's head): to out, to be decoded;
 * a page-only warm read's blocks are done with once read. @return how
 * many went to out.
 */
static uint32_t settle(io_worker *w, bd_task *t, bd_fifo *out)
{
	bd_fifo mine = { 0 };
	bool only = page_only(t);
	uint32_t n = 1;

	if (t->span_head) {
		n = settle_span(w, t, &mine);
	} else {
		settle_read(w->p, t);
		bd__fifo_push(&mine, t);
	}
	if (!only) {
		bd__fifo_append(out, &mine);
		return n;
	}
	while ((t = bd__fifo_pop(&mine)))
		bd__task_finish(w->p, t);
	return 0;
}

/* t's read is over: account for it and pass it on to decode. */
static void reaped(io_worker *w, bd_task *t)
{
	bd_fifo out = { 0 };
	uint32_t n = settle(w, t, &out);

	bd__decode_push_list(w->p, &out, n);
}

/* The loop thread's wake-up fired in the ring: new work was handed over. */
static void drain_wake(io_worker *w)
{
	uint64_t v;

	if (read(w->it->wake_fd, &v, sizeof(v)) < 0) {
		/* Already drained. */
	}
}

/*
 * Wait in the engine for a read to finish, or for the loop thread's
 * wake-up; take every other read already finished with it, and hand them
 * all to the decode workers at once: one wake-up for the lot, not one per
 * block (with small blocks the hand-offs were a third of this thread).
 */
static void reap(io_worker *w)
{
	bd_io_req *reqs[BD_REAP_MAX];
	bd_fifo out = { 0 };
	uint32_t done = 0;
	int n;

	w->copies = 0;
	if (!bd_io_inflight(w->io))
		return;
	n = bd_io_wait_many(w->io, reqs, BD_REAP_MAX);
	if (n == -EAGAIN)
		drain_wake(w);
	for (int i = 0; i < n; i++)
		done += settle(w, reqs[i]->user, &out);
	bd__decode_push_list(w->p, &out, done);
}

/* Between copies: submit the queued reads and pass on those finished, without waiting. */
static void poll_reads(io_worker *w)
{
	bd_fifo out = { 0 };
	uint32_t n = 0, done = 0;
	bd_io_req *req;
	int r;

	w->copies = 0;
	while (n < BD_REAP_MAX && (r = bd_io_poll(w->io, &req)) == 1) {
		done += settle(w, req->user, &out);
		n++;
	}
	if (r == -EAGAIN)
		drain_wake(w);
	bd__decode_push_list(w->p, &out, done);
}

void *bd__io_main(void *arg)
{
	bd_io_thread *it = arg;
	io_worker w = { .it = it, .p = it->p };

	if (setup(&w) < 0) {
		bd_io_free(w.io);
		return NULL;
	}
	while (wait_for_work(&w)) {
		take_fetched(&w);
		read_claimed(&w);
		reap(&w);
	}
	bd_io_free(w.io);
	return NULL;
}
