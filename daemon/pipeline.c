/* SPDX-License-Identifier: MIT */
/*
 * pipeline.c - I/O threads and decode workers (see pipeline.h).
 *
 * Queues are mutex + condition variable FIFOs: a task crosses each queue
 * once, and a batch of hundreds of tasks is pushed with one lock, so the
 * locks are cold next to the reads and the decompression they feed. The
 * only cross-thread call into libuv is uv_async_send().
 */
#include <errno.h>
#include <stddef.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <zstd.h>

#include "fault.h"
#include "log.h"
#include "pipeline.h"
#include "util.h"

#define HUGE_PAGE ((size_t)2 << 20)

typedef struct fifo {
	bd_task *head, *tail;
} fifo;

static void fifo_push(fifo *q, bd_task *t)
{
	t->next = NULL;
	if (q->tail)
		q->tail->next = t;
	else
		q->head = t;
	q->tail = t;
}

static bd_task *fifo_pop(fifo *q)
{
	bd_task *t = q->head;

	if (t) {
		q->head = t->next;
		if (!q->head)
			q->tail = NULL;
	}
	return t;
}

typedef struct io_thread {
	bd_pipeline *p;
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	fifo in;               /* guarded by mu */
	bool stop;             /* guarded by mu */
	bool idle;             /* guarded by mu: waiting on cv, not in the ring */
	int wake_fd;           /* eventfd that interrupts a wait in the ring, or -1 */
	/* Set by the thread before it reports ready. */
	int setup_err;
	bd_io_engine engine;
	unsigned flags;
	bool ready;
} io_thread;

struct bd_pipeline {
	bd_pipeline_opts o;
	uv_loop_t *loop;
	uv_async_t async;
	bd_job_done_fn done;
	void *ctx;

	io_thread *io;
	unsigned nio, next_io, io_started;

	pthread_t *dec;
	unsigned ndec, dec_started;
	pthread_mutex_t dmu;
	pthread_cond_t dcv;
	fifo decode;           /* guarded by dmu */
	bool dstop;

	pthread_mutex_t cmu;
	bd_job *completed;     /* guarded by cmu */

	/* Registered read buffers. */
	uint8_t *pool;           /* 2 MiB-aligned inside pool_map */
	size_t pool_bytes;
	void *pool_map;
	size_t pool_map_bytes;
	pthread_mutex_t pmu;
	int32_t *free_slots;   /* stack, guarded by pmu */
	uint32_t nfree;
	struct iovec *iov;

	bd_cache *cache;

	bd_pipeline_stats stats; /* relaxed atomics */
	bd_hist read_lat, decode_lat;
};

static void stat_add(uint64_t *c, uint64_t v)
{
	__atomic_fetch_add(c, v, __ATOMIC_RELAXED);
}

/* ---- buffers ----------------------------------------------------------------- */

static int32_t pool_get(bd_pipeline *p)
{
	int32_t slot = -1;

	pthread_mutex_lock(&p->pmu);
	if (p->nfree)
		slot = p->free_slots[--p->nfree];
	pthread_mutex_unlock(&p->pmu);
	return slot;
}

static void buf_put(bd_pipeline *p, bd_task *t)
{
	if (!t->buf)
		return;
	if (t->pool_slot >= 0) {
		pthread_mutex_lock(&p->pmu);
		p->free_slots[p->nfree++] = t->pool_slot;
		pthread_mutex_unlock(&p->pmu);
	} else {
		free(t->buf);
	}
	t->buf = NULL;
}

/* ---- job completion -------------------------------------------------------------- */

static void job_fail(bd_job *job, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void job_fail(bd_job *job, int err, const char *fmt, ...)
{
	int32_t zero = 0;
	va_list ap;

	/* The first failure names the batch's reason; later ones are dropped. */
	if (!__atomic_compare_exchange_n(&job->status, &zero, err, false, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE))
		return;
	va_start(ap, fmt);
	vsnprintf(job->reason, sizeof(job->reason), fmt, ap);
	va_end(ap);
}

static void task_finish(bd_pipeline *p, bd_task *t)
{
	bd_job *job = t->job;

	buf_put(p, t);
	/* acq_rel: every task's writes happen before the job is handed back. */
	if (__atomic_sub_fetch(&job->pending, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	pthread_mutex_lock(&p->cmu);
	job->next = p->completed;
	p->completed = job;
	pthread_mutex_unlock(&p->cmu);
	uv_async_send(&p->async);
}

static void on_async(uv_async_t *a)
{
	bd_pipeline *p = a->data;
	bd_job *list, *rev = NULL;

	pthread_mutex_lock(&p->cmu);
	list = p->completed;
	p->completed = NULL;
	pthread_mutex_unlock(&p->cmu);
	/* Completions were pushed LIFO; hand them over oldest first. */
	while (list) {
		bd_job *next = list->next;

		list->next = rev;
		rev = list;
		list = next;
	}
	while (rev) {
		bd_job *next = rev->next;

		p->done(rev, p->ctx);
		rev = next;
	}
}

/* ---- decode workers ----------------------------------------------------------------- */

static void decode_push(bd_pipeline *p, bd_task *t)
{
	pthread_mutex_lock(&p->dmu);
	fifo_push(&p->decode, t);
	pthread_cond_signal(&p->dcv);
	pthread_mutex_unlock(&p->dmu);
}

/* Copy the task's pieces out of a decoded block. */
static void copy_pieces(const bd_task *t, const uint8_t *raw)
{
	const bd_piece *pc = &t->job->pieces[t->first_piece];

	for (uint32_t i = 0; i < t->npieces; i++)
		memcpy(pc[i].dst, raw + pc[i].src, pc[i].size);
}

/* The loader of a cached block is done: wake (or fail) those waiting on it. */
static void cache_settle(bd_pipeline *p, bd_task *t, bool ok)
{
	bd_task *w = ok ? bd_cache_loaded(p->cache, t->centry) : bd_cache_failed(p->cache, t->centry);

	while (w) {
		bd_task *next = w->next;

		if (ok) {
			w->centry = t->centry; /* loaded() took a reference for it */
			decode_push(p, w);
		} else {
			job_fail(w->job, t->job->status ? t->job->status : -EIO, "%s", t->job->reason);
			w->req.result = -EIO;
			task_finish(p, w);
		}
		w = next;
	}
	if (ok)
		return;
	t->centry = NULL; /* freed by bd_cache_failed */
}

static void decode_one(bd_pipeline *p, bd_task *t, ZSTD_DCtx *dctx, uint8_t **scratch,
		       size_t *scratch_cap)
{
	const bp_shard *sh = bp_dataset_shard(t->dset->ds, t->shard);
	bd_piece *pc = &t->job->pieces[t->first_piece];
	bp_pack_fault pf = { 0 };
	uint64_t t0;
	uint8_t *out;
	size_t cap;
	int r;

	if (t->centry && !t->cache_load) {
		/* Someone decoded this block already: only the copy is left. */
		copy_pieces(t, bd_cache_data(t->centry));
		return;
	}
	if (t->direct_dst) {
		out = pc[0].dst;
		cap = t->blk.raw_size;
	} else if (t->cache_load) {
		out = bd_cache_data(t->centry);
		cap = t->blk.raw_size;
	} else {
		if (*scratch_cap < t->blk.raw_size) {
			uint8_t *s = bd_realloc(*scratch, t->blk.raw_size);

			if (!s) {
				job_fail(t->job, -ENOMEM, "dataset %s: out of memory decoding a block",
					 t->dset->name);
				return;
			}
			*scratch = s;
			*scratch_cap = t->blk.raw_size;
		}
		out = *scratch;
		cap = *scratch_cap;
	}
	t0 = bd_now_ns();
	r = bp_pack_block_decode(&t->blk, t->buf ? t->buf + t->skip : out, dctx, sh->ddict, out,
				 cap, &pf);
	bd_hist_add(&p->decode_lat, bd_now_ns() - t0);
	if (r < 0) {
		stat_add(r == -EBADMSG && pf.what && strstr(pf.what, "checksum")
			 ? &p->stats.checksum_errors : &p->stats.decode_errors, 1);
		job_fail(t->job, r, "dataset %s: shard %s: block %llu at byte %llu: %s",
			 t->dset->name, sh->name, (unsigned long long)t->block,
			 (unsigned long long)t->blk.offset, pf.what ? pf.what : strerror(-r));
		if (t->cache_load)
			cache_settle(p, t, false);
		return;
	}
	if (t->direct_dst)
		stat_add(&p->stats.direct_decodes, 1);
	else
		copy_pieces(t, out);
	if (t->cache_load)
		cache_settle(p, t, true);
	stat_add(&p->stats.blocks_decoded, 1);
	stat_add(&p->stats.raw_bytes, t->blk.raw_size);
}

static void *decode_main(void *arg)
{
	bd_pipeline *p = arg;
	ZSTD_DCtx *dctx = ZSTD_createDCtx();
	uint8_t *scratch = NULL;
	size_t scratch_cap = 0;

	if (dctx && bp_pack_dctx_init(dctx) < 0) {
		ZSTD_freeDCtx(dctx);
		dctx = NULL;
	}
	for (;;) {
		bd_task *t;

		pthread_mutex_lock(&p->dmu);
		while (!p->decode.head && !p->dstop)
			pthread_cond_wait(&p->dcv, &p->dmu);
		t = fifo_pop(&p->decode);
		pthread_mutex_unlock(&p->dmu);
		if (!t)
			break;
		/* A task that failed its read carries the job's failure already. */
		if (__atomic_load_n(&t->req.result, __ATOMIC_RELAXED) >= 0) {
			if (dctx)
				decode_one(p, t, dctx, &scratch, &scratch_cap);
			else
				job_fail(t->job, -ENOMEM, "dataset %s: no zstd context",
					 t->dset->name);
		} else if (t->cache_load && t->centry) {
			cache_settle(p, t, false);
		}
		if (t->centry) {
			bd_cache_put(p->cache, t->centry);
			t->centry = NULL;
		}
		task_finish(p, t);
	}
	free(scratch);
	ZSTD_freeDCtx(dctx);
	return NULL;
}

/* ---- I/O threads ------------------------------------------------------------------------- */

/* Choose the read range and buffer for t. @return 0, or <0 with the job failed. */
static int io_prepare(bd_pipeline *p, bd_task *t, bool registered)
{
	uint32_t align = t->dset->align[t->shard];
	uint64_t off = t->blk.offset, end = off + t->blk.stored_size, len;
	void *mem;

	if (align) {
		off &= ~(uint64_t)(align - 1);
		end = (end + align - 1) & ~(uint64_t)(align - 1);
	}
	len = end - off;
	t->skip = (uint32_t)(t->blk.offset - off);
	t->pool_slot = len <= p->o.pool_buffer_size ? pool_get(p) : -1;
	if (t->pool_slot >= 0) {
		t->buf = p->pool + (size_t)t->pool_slot * p->o.pool_buffer_size;
	} else {
		if (posix_memalign(&mem, align > 4096 ? align : 4096, len ? len : 1)) {
			job_fail(t->job, -ENOMEM, "dataset %s: out of memory reading a block",
				 t->dset->name);
			return -ENOMEM;
		}
		t->buf = mem;
	}
	t->req = (bd_io_req){
		.fd = t->dset->read_fd[t->shard],
		.offset = off,
		.len = (uint32_t)len,
		.buf = t->buf,
		/* Pool buffers are fixed buffers only where registration worked. */
		.buf_index = registered ? t->pool_slot : -1,
		.user = t,
	};
	return 0;
}

/* Test builds: persistent faults at a shard offset, and late completions. */
static void io_fault(bd_task *t, const bp_shard *sh)
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

static void io_done(bd_pipeline *p, bd_task *t)
{
	const bp_shard *sh = bp_dataset_shard(t->dset->ds, t->shard);
	int32_t res;

	io_fault(t, sh);
	res = t->req.result;

	__atomic_fetch_sub(&p->stats.reads_inflight, 1, __ATOMIC_RELAXED);
	bd_hist_add(&p->read_lat, bd_now_ns() - t->t_submit);
	if (res < 0) {
		stat_add(&p->stats.read_errors, 1);
		job_fail(t->job, res, "dataset %s: shard %s: block %llu: read failed: %s",
			 t->dset->name, sh->name, (unsigned long long)t->block, strerror(-res));
	} else if ((uint64_t)res < t->skip + t->blk.stored_size) {
		stat_add(&p->stats.read_errors, 1);
		job_fail(t->job, -EIO, "dataset %s: shard %s: block %llu: file ends early (truncated?)",
			 t->dset->name, sh->name, (unsigned long long)t->block);
		t->req.result = -EIO;
	} else {
		stat_add(&p->stats.blocks_read, 1);
		stat_add(&p->stats.bytes_read, (uint64_t)res);
	}
	decode_push(p, t);
}

static void *io_main(void *arg)
{
	io_thread *it = arg;
	bd_pipeline *p = it->p;
	const bd_fault_read *fr = bd_fault_reads();
	bd_io_opts opts = {
		.engine = p->o.engine,
		.queue_depth = p->o.queue_depth,
		/* Test builds only: BATCHD_FAULTS drives the engine's own fault hooks. */
		.force_setup_error = bd_fault_uring_setup(),
		/* Rounded up to 4 KiB so that O_DIRECT reads stay aligned. */
		.fault_max_read = fr && fr->short_max ? (fr->short_max + 4095u) & ~4095u : 0,
		.fault_every = fr && fr->err ? fr->every : 0,
		.fault_errno = fr ? fr->err : 0,
	};
	bd_io *io = NULL;
	fifo local = { 0 };
	bool registered = false;
	int r;

	/* The ring is created here: SINGLE_ISSUER ties it to this thread. */
	r = bd_io_new(&opts, &io);
	if (r == 0 && p->pool_bytes) {
		registered = bd_io_register(io, p->iov, p->o.pool_buffers) == 0;
		if (!registered)
			bd_log(LOG_NOTICE, "I/O thread: cannot register read buffers (RLIMIT_MEMLOCK?); "
			       "plain reads instead of fixed-buffer reads");
	}
	if (r == 0 && bd_io_watch(io, it->wake_fd) < 0) {
		close(it->wake_fd);
		it->wake_fd = -1;
	}
	pthread_mutex_lock(&it->mu);
	it->setup_err = r;
	if (r == 0) {
		it->engine = bd_io_engine_of(io);
		it->flags = bd_io_setup_flags(io);
	}
	it->ready = true;
	pthread_cond_broadcast(&it->cv);
	pthread_mutex_unlock(&it->mu);
	if (r < 0) {
		bd_io_free(io);
		return NULL;
	}

	for (;;) {
		bd_task *t;
		bd_io_req *req;

		pthread_mutex_lock(&it->mu);
		while (!it->stop && !it->in.head && !local.head && !bd_io_inflight(io)) {
			it->idle = true;
			pthread_cond_wait(&it->cv, &it->mu);
			it->idle = false;
		}
		if (it->stop) {
			pthread_mutex_unlock(&it->mu);
			break;
		}
		while ((t = fifo_pop(&it->in)))
			fifo_push(&local, t);
		pthread_mutex_unlock(&it->mu);

		while ((t = local.head)) {
			if (!t->direct_dst && !t->buf && !t->centry && t->blk.raw_size) {
				bd_cache_key key = { .dataset = t->dset->uid, .shard = t->shard,
						     .block = t->block };
				bd_cache_entry *e;

				/* Off the local list first: a waiter is chained through t->next. */
				fifo_pop(&local);
				r = bd_cache_get(p->cache, &key, t->blk.raw_size, t, &e);
				if (r == BD_CACHE_HIT) {
					t->centry = e;
					t->req.result = 0;
					decode_push(p, t);
					continue;
				}
				if (r == BD_CACHE_WAIT)
					continue;
				if (r == BD_CACHE_LOAD) {
					t->centry = e;
					t->cache_load = true;
				}
				/* Back at the head: it reads now. */
				t->next = local.head;
				local.head = t;
				if (!local.tail)
					local.tail = t;
			}
			if (t->blk.stored_size == 0) {
				/* Nothing to read: an empty raw block. */
				fifo_pop(&local);
				t->buf = NULL;
				t->req.result = 0;
				decode_push(p, t);
				continue;
			}
			if (!t->buf && io_prepare(p, t, registered) < 0) {
				fifo_pop(&local);
				t->req.result = -ENOMEM;
				decode_push(p, t);
				continue;
			}
			t->t_submit = bd_now_ns();
			r = bd_io_submit(io, &t->req);
			if (r == -EBUSY)
				break;
			fifo_pop(&local);
			__atomic_fetch_add(&p->stats.reads_inflight, 1, __ATOMIC_RELAXED);
			if (r < 0) {
				t->req.result = r;
				io_done(p, t);
			}
		}
		if (!bd_io_inflight(io))
			continue;
		r = bd_io_wait(io, &req);
		if (r == 0) {
			io_done(p, req->user);
		} else if (r == -EAGAIN) {
			uint64_t v;

			/* New work was handed over while we waited in the ring. */
			if (read(it->wake_fd, &v, sizeof(v)) < 0) {
				/* Already drained. */
			}
		}
	}
	bd_io_free(io);
	return NULL;
}

/* ---- lifecycle ---------------------------------------------------------------------------- */

int bd_pipeline_new(uv_loop_t *loop, const bd_pipeline_opts *o, bd_job_done_fn done, void *ctx,
		    bd_pipeline **ret)
{
	bd_pipeline *p = bd_calloc(1, sizeof(*p));
	int r = -ENOMEM;

	if (!p)
		return -ENOMEM;
	p->o = *o;
	p->loop = loop;
	p->done = done;
	p->ctx = ctx;
	pthread_mutex_init(&p->dmu, NULL);
	pthread_cond_init(&p->dcv, NULL);
	pthread_mutex_init(&p->cmu, NULL);
	pthread_mutex_init(&p->pmu, NULL);
	if (uv_async_init(loop, &p->async, on_async) < 0) {
		free(p);
		return -ENOMEM;
	}
	p->async.data = p;

	if (bd_cache_new(o->cache_budget, offsetof(bd_task, next), &p->cache) < 0) {
		bd_pipeline_free(p); /* frees p when the async handle has closed */
		return -ENOMEM;
	}
	p->pool_bytes = (size_t)o->pool_buffers * o->pool_buffer_size;
	if (p->pool_bytes) {
		/*
		 * 2 MiB-aligned and backed by huge pages where the kernel allows:
		 * a 512 KiB O_DIRECT read then spans one page, not 128, and the
		 * device gets fewer, larger requests.
		 */
		p->pool_map_bytes = p->pool_bytes + HUGE_PAGE;
		p->pool_map = mmap(NULL, p->pool_map_bytes, PROT_READ | PROT_WRITE,
				   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		p->free_slots = bd_calloc(o->pool_buffers, sizeof(*p->free_slots));
		p->iov = bd_calloc(o->pool_buffers, sizeof(*p->iov));
		if (p->pool_map == MAP_FAILED || !p->free_slots || !p->iov) {
			if (p->pool_map == MAP_FAILED)
				p->pool_map = NULL;
			goto fail;
		}
		p->pool = (uint8_t *)(((uintptr_t)p->pool_map + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
		madvise(p->pool, p->pool_bytes, MADV_HUGEPAGE);
		for (uint32_t i = 0; i < o->pool_buffers; i++) {
			p->iov[i].iov_base = p->pool + (size_t)i * o->pool_buffer_size;
			p->iov[i].iov_len = o->pool_buffer_size;
			p->free_slots[p->nfree++] = (int32_t)(o->pool_buffers - 1 - i);
		}
	}

	p->nio = o->io_threads ? o->io_threads : 1;
	p->io = bd_calloc(p->nio, sizeof(*p->io));
	p->ndec = o->decode_threads ? o->decode_threads : 1;
	p->dec = bd_calloc(p->ndec, sizeof(*p->dec));
	if (!p->io || !p->dec)
		goto fail;
	for (unsigned i = 0; i < p->nio; i++) {
		io_thread *it = &p->io[i];

		it->p = p;
		it->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		pthread_mutex_init(&it->mu, NULL);
		pthread_cond_init(&it->cv, NULL);
	}
	for (; p->io_started < p->nio; p->io_started++) {
		io_thread *it = &p->io[p->io_started];

		r = -pthread_create(&it->th, NULL, io_main, it);
		if (r < 0)
			goto fail;
		pthread_mutex_lock(&it->mu);
		while (!it->ready)
			pthread_cond_wait(&it->cv, &it->mu);
		r = it->setup_err;
		pthread_mutex_unlock(&it->mu);
		if (r < 0) {
			pthread_join(it->th, NULL);
			goto fail;
		}
	}
	for (; p->dec_started < p->ndec; p->dec_started++) {
		r = -pthread_create(&p->dec[p->dec_started], NULL, decode_main, p);
		if (r < 0)
			goto fail;
	}
	*ret = p;
	return 0;
fail:
	bd_pipeline_free(p);
	return r;
}

void bd_pipeline_submit(bd_pipeline *p, bd_job *job)
{
	io_thread *it = &p->io[p->next_io++ % p->nio];

	pthread_mutex_lock(&it->mu);
	for (uint32_t i = 0; i < job->ntasks; i++)
		fifo_push(&it->in, &job->tasks[i]);
	if (it->idle || it->wake_fd < 0) {
		pthread_cond_signal(&it->cv);
	} else {
		uint64_t one = 1;

		/* The thread may be asleep in the ring: poke its eventfd. */
		if (write(it->wake_fd, &one, sizeof(one)) < 0) {
			/* Counter full: a wake-up is pending anyway. */
		}
	}
	pthread_mutex_unlock(&it->mu);
}

static void on_async_closed(uv_handle_t *h)
{
	free(h->data);
}

void bd_pipeline_free(bd_pipeline *p)
{
	if (!p)
		return;
	for (unsigned i = 0; i < p->io_started; i++) {
		io_thread *it = &p->io[i];

		uint64_t one = 1;

		pthread_mutex_lock(&it->mu);
		it->stop = true;
		pthread_cond_signal(&it->cv);
		if (it->wake_fd >= 0 && write(it->wake_fd, &one, sizeof(one)) < 0) {
			/* A wake-up is pending anyway. */
		}
		pthread_mutex_unlock(&it->mu);
		pthread_join(it->th, NULL);
	}
	pthread_mutex_lock(&p->dmu);
	p->dstop = true;
	pthread_cond_broadcast(&p->dcv);
	pthread_mutex_unlock(&p->dmu);
	for (unsigned i = 0; i < p->dec_started; i++)
		pthread_join(p->dec[i], NULL);
	for (unsigned i = 0; p->io && i < p->nio; i++) {
		if (p->io[i].wake_fd >= 0)
			close(p->io[i].wake_fd);
		pthread_mutex_destroy(&p->io[i].mu);
		pthread_cond_destroy(&p->io[i].cv);
	}
	bd_cache_free(p->cache);
	free(p->io);
	free(p->dec);
	free(p->free_slots);
	free(p->iov);
	if (p->pool_map)
		munmap(p->pool_map, p->pool_map_bytes);
	pthread_mutex_destroy(&p->dmu);
	pthread_cond_destroy(&p->dcv);
	pthread_mutex_destroy(&p->cmu);
	pthread_mutex_destroy(&p->pmu);
	/* The async handle goes back through the loop; it frees p when closed. */
	uv_close((uv_handle_t *)&p->async, on_async_closed);
}

bd_io_engine bd_pipeline_engine(const bd_pipeline *p)
{
	return p->io[0].engine;
}

unsigned bd_pipeline_setup_flags(const bd_pipeline *p)
{
	return p->io[0].flags;
}

void bd_pipeline_get_stats(const bd_pipeline *p, bd_pipeline_stats *ret)
{
	ret->blocks_read = __atomic_load_n(&p->stats.blocks_read, __ATOMIC_RELAXED);
	ret->bytes_read = __atomic_load_n(&p->stats.bytes_read, __ATOMIC_RELAXED);
	ret->blocks_decoded = __atomic_load_n(&p->stats.blocks_decoded, __ATOMIC_RELAXED);
	ret->raw_bytes = __atomic_load_n(&p->stats.raw_bytes, __ATOMIC_RELAXED);
	ret->direct_decodes = __atomic_load_n(&p->stats.direct_decodes, __ATOMIC_RELAXED);
	ret->reads_inflight = __atomic_load_n(&p->stats.reads_inflight, __ATOMIC_RELAXED);
	ret->read_errors = __atomic_load_n(&p->stats.read_errors, __ATOMIC_RELAXED);
	ret->checksum_errors = __atomic_load_n(&p->stats.checksum_errors, __ATOMIC_RELAXED);
	ret->decode_errors = __atomic_load_n(&p->stats.decode_errors, __ATOMIC_RELAXED);
	ret->failures = ret->read_errors + ret->checksum_errors + ret->decode_errors;
	if (p->cache) {
		bd_cache_stats cs;

		bd_cache_get_stats(p->cache, &cs);
		ret->cache_hits = cs.hits;
		ret->cache_misses = cs.misses;
		ret->cache_waits = cs.waits;
		ret->cache_bypasses = cs.bypasses;
		ret->cache_evictions = cs.evictions;
		ret->cache_bytes = cs.bytes;
		ret->cache_budget = cs.budget;
	}
}

void bd_pipeline_get_hists(const bd_pipeline *p, bd_hist *read, bd_hist *decode)
{
	bd_hist_read(&p->read_lat, read);
	bd_hist_read(&p->decode_lat, decode);
}
