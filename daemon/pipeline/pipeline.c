/* SPDX-License-Identifier: MIT */
/*
 * pipeline.c - jobs, the queues between the pipeline's threads, the read
 * buffers, submission, completion and stats (see pipeline.h). The threads
 * themselves are in io_thread.c and decode.c.
 *
 * Queues are mutex + condition variable FIFOs: a task crosses each queue
 * once, and a batch of hundreds of tasks is pushed with one lock, so the
 * locks are cold next to the reads and the decompression they feed. The
 * only cross-thread call into libuv is uv_async_send(). Submitted tasks
 * wait in their owner's flow until the scheduler (fairq.c) hands them to
 * an I/O thread (pipeline.h, "Fairness").
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "image.h"
#include "linger.h"
#include "log.h"
#include "pipeline_priv.h"
#include "remote.h"
#include "util.h"


/* ---- queues ------------------------------------------------------------------------- */

void bd__fifo_push(bd_fifo *q, bd_task *t)
{
	t->next = NULL;
	if (q->tail)
		q->tail->next = t;
	else
		q->head = t;
	q->tail = t;
}

bd_task *bd__fifo_pop(bd_fifo *q)
{
	bd_task *t = q->head;

	if (t) {
		q->head = t->next;
		if (!q->head)
			q->tail = NULL;
	}
	return t;
}

void bd__fifo_append(bd_fifo *q, bd_fifo *from)
{
	if (!from->head)
		return;
	if (q->tail)
		q->tail->next = from->head;
	else
		q->head = from->head;
	q->tail = from->tail;
	*from = (bd_fifo){ 0 };
}

void bd__fifo_unpop(bd_fifo *q, bd_task *t)
{
	t->next = q->head;
	q->head = t;
	if (!q->tail)
		q->tail = t;
}

/* ---- waking the I/O threads ---------------------------------------------------------- */

void bd__io_kick(bd_io_thread *it)
{
	uint64_t one = 1;

	pthread_mutex_lock(&it->mu);
	it->kicked = true;
	if (it->idle || it->wake_fd < 0) {
		pthread_cond_signal(&it->cv);
	} else if (write(it->wake_fd, &one, sizeof(one)) < 0) {
		/* Counter full: a wake-up is pending anyway. */
	}
	pthread_mutex_unlock(&it->mu);
}

/* The scheduler has work: kick the I/O threads that found nothing. Under the scheduler's mu. */
static void kick_hungry(void *ctx)
{
	bd_pipeline *p = ctx;

	for (unsigned i = 0; i < p->io_started; i++)
		if (p->io[i].hungry) {
			p->io[i].hungry = false;
			bd__io_kick(&p->io[i]);
		}
}

/* ---- buffers ------------------------------------------------------------------------ */

int bd__pool_init(bd_pool *pl, uint32_t n, uint32_t size)
{
	pthread_mutex_init(&pl->mu, NULL);
	pl->bytes = (size_t)n * size;
	if (!pl->bytes)
		return 0;
	/*
	 * On huge pages where the kernel gives them (pages.h): a 512 KiB
	 * O_DIRECT read then spans one page, not 128, and the device gets
	 * fewer, larger requests.
	 */
	pl->base = bd_pages_map(pl->bytes, BD_PAGES_HUGE, &pl->map_bytes, &pl->mapped);
	pl->busy = bd_calloc(n, sizeof(*pl->busy));
	if (!pl->base || !pl->busy)
		return -ENOMEM;
	pl->pages = pl->mapped;
	pl->nbufs = n;
	pl->buf_size = size;
	pl->iov = (struct iovec){ .iov_base = pl->base, .iov_len = pl->bytes };
	return 0;
}

void bd__pool_fini(bd_pool *pl)
{
	for (uint32_t i = 0; i < pl->nspare; i++)
		free(pl->spare[i].buf);
	free(pl->busy);
	bd_pages_unmap(pl->base, pl->map_bytes);
	pthread_mutex_destroy(&pl->mu);
}

uint32_t bd__pool_slots(const bd_pool *pl, uint64_t len)
{
	uint64_t n;

	if (!pl->buf_size || !len)
		return 0;
	n = (len + pl->buf_size - 1) / pl->buf_size;
	return n <= pl->nbufs ? (uint32_t)n : 0;
}

int32_t bd__pool_get(bd_pool *pl, uint32_t n)
{
	int32_t slot = -1;
	uint32_t run = 0;

	if (!n)
		return -1;
	pthread_mutex_lock(&pl->mu);
	/* The lowest run of n free buffers: reads start at the mapping's first huge page. */
	for (uint32_t i = 0; i < pl->nbufs; i++) {
		run = pl->busy[i] ? 0 : run + 1;
		if (run == n) {
			slot = (int32_t)(i + 1 - n);
			memset(&pl->busy[slot], 1, n);
			break;
		}
	}
	pthread_mutex_unlock(&pl->mu);
	return slot;
}

void bd__pool_put(bd_pool *pl, int32_t slot, uint32_t n)
{
	pthread_mutex_lock(&pl->mu);
	memset(&pl->busy[slot], 0, n);
	pthread_mutex_unlock(&pl->mu);
}

uint8_t *bd__pool_buf(const bd_pool *pl, int32_t slot)
{
	return pl->base + (size_t)slot * pl->buf_size;
}

/* Spares are all 4 KiB-aligned; a read that needs more gets a fresh buffer. */
#define SPARE_ALIGN 4096u
/* Own buffers are sized in steps of this, so that the next read of about the size fits. */
#define SPARE_STEP ((size_t)64 << 10)

void *bd__pool_own(bd_pool *pl, size_t len, size_t align, size_t *ret_cap)
{
	size_t cap = (len + SPARE_STEP - 1) / SPARE_STEP * SPARE_STEP;
	void *buf = NULL;

	if (!cap || cap < len)
		cap = SPARE_STEP;
	if (align <= SPARE_ALIGN) {
		pthread_mutex_lock(&pl->mu);
		for (uint32_t i = 0; i < pl->nspare; i++) {
			if (pl->spare[i].cap < cap || pl->spare[i].cap / 2 > cap)
				continue;
			buf = pl->spare[i].buf;
			cap = pl->spare[i].cap;
			pl->spare_bytes -= cap;
			pl->spare[i] = pl->spare[--pl->nspare];
			break;
		}
		pthread_mutex_unlock(&pl->mu);
		if (buf) {
			*ret_cap = cap;
			return buf;
		}
	}
	if (posix_memalign(&buf, align > SPARE_ALIGN ? align : SPARE_ALIGN, cap))
		return NULL;
	*ret_cap = cap;
	return buf;
}

void bd__pool_disown(bd_pool *pl, void *buf, size_t cap, size_t align)
{
	if (align <= SPARE_ALIGN) {
		pthread_mutex_lock(&pl->mu);
		if (pl->nspare < BD_POOL_SPARES && pl->spare_bytes + cap <= BD_POOL_SPARE_BYTES) {
			pl->spare[pl->nspare].buf = buf;
			pl->spare[pl->nspare].cap = cap;
			pl->nspare++;
			pl->spare_bytes += cap;
			buf = NULL;
		}
		pthread_mutex_unlock(&pl->mu);
	}
	free(buf);
}

void bd__task_buf_put(bd_pipeline *p, bd_task *t)
{
	bd_task *h = t->span_head;

	if (!t->buf)
		return;
	if (h) {
		/* A span's buffer is the head's: given back by the last block done with it. */
		if (t != h)
			t->buf = NULL;
		if (__atomic_sub_fetch(&h->span_refs, 1, __ATOMIC_ACQ_REL) != 0)
			return;
		t = h;
		/* The span's weight in flight goes with its buffer. */
		bd__sched_charge(&p->sched, h, -(int32_t)h->span_weight, 0);
		h->span_weight = 0;
	}
	if (t->pool_slot >= 0)
		bd__pool_put(&p->pool, t->pool_slot, t->pool_n);
	else
		bd__pool_disown(&p->pool, t->buf, t->own_cap, t->dset->align[t->shard]);
	t->buf = NULL;
}

/* ---- jobs --------------------------------------------------------------------------- */

uint64_t bd_job_bytes(uint32_t nblocks, uint32_t npieces)
{
	return sizeof(bd_job) + (uint64_t)nblocks * sizeof(bd_task) +
	       (uint64_t)npieces * sizeof(bd_piece);
}

uint64_t bd_pipeline_owner_bytes(void)
{
	return sizeof(bd_flow) + sizeof(bd_tenant);
}

int bd_job_new(void *owner, uint32_t tenant, bd_job_event_fn event, uint64_t seq, uint32_t nblocks,
	       uint32_t npieces, bd_job **ret)
{
	bd_job *job = bd_calloc(1, bd_job_bytes(nblocks, npieces));

	if (!job)
		return -ENOMEM;
	job->owner = owner;
	job->tenant = tenant;
	job->event = event;
	job->seq = seq;
	job->tasks = (bd_task *)(job + 1);
	job->max_tasks = nblocks;
	job->pieces = (bd_piece *)(job->tasks + nblocks);
	job->max_pieces = npieces;
	*ret = job;
	return 0;
}

void bd_job_add_block(bd_job *job, const bd_dataset *d, uint32_t shard, uint64_t block)
{
	bd_task *t = &job->tasks[job->ntasks++];

	t->job = job;
	t->dset = d;
	t->shard = shard;
	t->block = block;
	t->first_piece = job->npieces;
	t->pool_slot = -1;
	bp_pack_index_block(&bp_dataset_shard(d->ds, shard)->index, block, &t->blk);
}

void bd_job_add_piece(bd_job *job, uint64_t src, uint64_t size, uint8_t *dst)
{
	job->pieces[job->npieces++] = (bd_piece){ .src = src, .size = size, .dst = dst };
	job->tasks[job->ntasks - 1].npieces++;
}

void bd_job_add_tokens(bd_job *job, uint64_t src, uint64_t size, uint8_t *dst, uint32_t width)
{
	job->pieces[job->npieces++] = (bd_piece){ .src = src, .size = size, .dst = dst,
						  .widen = width == 2 };
	job->tasks[job->ntasks - 1].npieces++;
}

uint64_t bd_pipeline_image_scratch(const bd_pipeline *p)
{
	return p ? (uint64_t)p->ndec * BD_IMAGE_SCRATCH : 0;
}

void bd_job_set_image(bd_job *job, const bi_spec *spec, uint64_t seed, bool skip, uint64_t *bad)
{
	job->image = spec;
	job->image_seed = seed;
	job->image_skip = skip;
	job->image_bad = bad;
}

void bd_job_add_image(bd_job *job, uint64_t src, uint64_t size, uint8_t *dst, uint64_t id,
		      uint64_t epoch, uint32_t index)
{
	job->pieces[job->npieces++] = (bd_piece){ .src = src, .size = size, .dst = dst,
						  .image = true, .index = index, .id = id,
						  .epoch = epoch };
	job->tasks[job->ntasks - 1].npieces++;
}

void bd_job_set_warm(bd_job *job)
{
	job->warm = true;
}

void bd_job_free(bd_job *job)
{
	free(job);
}

bool bd__job_fail(bd_job *job, int err, const char *fmt, ...)
{
	int32_t zero = 0;
	va_list ap;

	/* The first failure names the batch's reason; later ones are dropped. */
	if (!__atomic_compare_exchange_n(&job->status, &zero, err, false, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE))
		return false;
	va_start(ap, fmt);
	vsnprintf(job->reason, sizeof(job->reason), fmt, ap);
	va_end(ap);
	return true;
}

/*
 * Make piece pc's image (a task of t's job) with *img. A bad one is left
 * out or fails the job, its index in the record's image outcome either
 * way (bd_job_set_image); the daemon running out of memory fails the job.
 */
static void make_image(const bd_task *t, const bd_piece *pc, const uint8_t *raw,
		       bi_scratch **img)
{
	bd_job *job = t->job;
	char why[BP_RING_REASON_MAX / 2];
	uint64_t k;
	int r;

	if (!*img && !(*img = bi_scratch_new(BD_IMAGE_SCRATCH))) {
		bd__job_fail(job, -ENOMEM, "dataset %s: out of memory decoding images", t->dset->name);
		return;
	}
	r = bi_transform(*img, job->image, raw + pc->src, pc->size, job->image_seed, pc->epoch,
			 pc->id, pc->dst, why, sizeof(why));
	if (r >= 0)
		return;
	if (r == -ENOMEM) {
		bd__job_fail(job, r, "dataset %s: sample %" PRIu64 ": %s", t->dset->name, pc->id, why);
		return;
	}
	if (job->image_skip) {
		k = __atomic_fetch_add(&job->image_bad[0], 1, __ATOMIC_RELAXED);
		job->image_bad[1 + k] = pc->index;
		if (k == 0)
			snprintf(job->skip_why, sizeof(job->skip_why), "%s", why);
		return;
	}
	if (bd__job_fail(job, r, "%s", why)) {
		job->image_bad[1] = pc->index;
		job->image_bad[0] = 1;
	}
}

/* n little-endian uint16 token ids as int32 (docs/tokens.md: what a batch carries). */
static void widen(uint8_t *dst, const uint8_t *src, uint64_t n)
{
	int32_t *out = (int32_t *)(void *)dst;

	for (uint64_t i = 0; i < n; i++)
		out[i] = (int32_t)((uint32_t)src[2 * i] | (uint32_t)src[2 * i + 1] << 8);
}

void bd__copy_pieces(bd_pipeline *p, const bd_task *t, const uint8_t *raw, bi_scratch **img)
{
	const bd_piece *pc = &t->job->pieces[t->first_piece];
	uint64_t copied = 0;

	for (uint32_t i = 0; i < t->npieces; i++)
		if (pc[i].image) {
			make_image(t, &pc[i], raw, img);
		} else if (pc[i].widen) {
			widen(pc[i].dst, raw + pc[i].src, pc[i].size / 2);
		} else {
			memcpy(pc[i].dst, raw + pc[i].src, pc[i].size);
			copied += pc[i].size;
		}
	bd__stat_add(&p->stats.copied_bytes, copied);
}

bool bd__task_bytes_at_most(const bd_task *t, uint64_t max)
{
	const bd_piece *pc = &t->job->pieces[t->first_piece];
	uint64_t sum = 0;

	for (uint32_t i = 0; i < t->npieces && sum <= max; i++)
		sum += pc[i].size;
	return sum <= max;
}

bool bd__pieces_tile(const bd_piece *pc, uint32_t n, uint64_t raw_size)
{
	uint64_t at = 0;

	for (uint32_t i = 0; i < n; i++) {
		if (pc[i].src != at || pc[i].widen || (i && pc[i].dst != pc[i - 1].dst + pc[i - 1].size))
			return false;
		at += pc[i].size;
	}
	return at == raw_size;
}

/* ---- completion --------------------------------------------------------------------- */

void bd__task_finish(bd_pipeline *p, bd_task *t)
{
	bd_job *job = t->job;

	bd__task_buf_put(p, t);
	/* Before the job can go back (and its tasks with it). A span's member counted in its head's weight. */
	if (!t->span_member)
		bd__sched_done(&p->sched, t);
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

		if (rev->warm && !rev->status && __atomic_load_n(&rev->warm_full, __ATOMIC_RELAXED))
			rev->event(rev->owner, rev->seq, BD_JOB_DECODED, -ENOSPC,
				   "the block cache has no room for more blocks");
		else
			rev->event(rev->owner, rev->seq, BD_JOB_DECODED, rev->status,
				   rev->status ? rev->reason : rev->skip_why);
		bd_job_free(rev);
		rev = next;
	}
}

/* ---- lifecycle ---------------------------------------------------------------------- */

/* Allocate the I/O threads' and decode workers' records (not started). @return 0 or -ENOMEM. */
static int make_threads(bd_pipeline *p)
{
	p->nio = p->o.io_threads ? p->o.io_threads : 1;
	p->io = bd_calloc(p->nio, sizeof(*p->io));
	p->ndec = p->o.decode_threads ? p->o.decode_threads : 1;
	p->dactive = p->ndec;
	p->dec = bd_calloc(p->ndec, sizeof(*p->dec));
	if (!p->io || !p->dec)
		return -ENOMEM;
	for (unsigned i = 0; i < p->nio; i++) {
		bd_io_thread *it = &p->io[i];

		it->p = p;
		it->hungry = true; /* nothing claimed yet: the first submission kicks it */
		it->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		pthread_mutex_init(&it->mu, NULL);
		pthread_cond_init(&it->cv, NULL);
	}
	return 0;
}

/* Start the I/O threads one by one, each waited for until its engine is set up. */
static int start_io_threads(bd_pipeline *p)
{
	for (; p->io_started < p->nio; p->io_started++) {
		bd_io_thread *it = &p->io[p->io_started];
		int r = -pthread_create(&it->th, NULL, bd__io_main, it);

		if (r < 0)
			return r;
		pthread_mutex_lock(&it->mu);
		while (!it->ready)
			pthread_cond_wait(&it->cv, &it->mu);
		r = it->setup_err;
		pthread_mutex_unlock(&it->mu);
		if (r < 0) {
			pthread_join(it->th, NULL);
			return r;
		}
	}
	return 0;
}

/*
 * What the pool's pages turned out to be. Registering the pool with a ring
 * faulted and pinned them; where no ring took it, fault them in here, so
 * that status says what reads will get, once, from the start.
 */
static void settle_pool_pages(bd_pipeline *p)
{
	bool faulted = false;

	if (!p->pool.bytes)
		return;
	for (unsigned i = 0; i < p->io_started; i++)
		faulted |= p->io[i].registered;
	if (!faulted)
		memset(p->pool.base, 0, p->pool.bytes);
	p->pool.pages = bd_pages_of(p->pool.base, p->pool.mapped);
	bd_log(LOG_INFO, "read buffers: %u x %u KiB on %s pages%s", p->pool.nbufs,
	       p->pool.buf_size >> 10, bd_pages_name(p->pool.pages),
	       faulted ? ", registered" : "");
}

static int start_decoders(bd_pipeline *p)
{
	for (; p->dec_started < p->ndec; p->dec_started++) {
		int r = -pthread_create(&p->dec[p->dec_started], NULL, bd__decode_main, p);

		if (r < 0)
			return r;
	}
	return 0;
}

int bd_pipeline_new(uv_loop_t *loop, const bd_pipeline_opts *o, bd_pipeline **ret)
{
	bd_pipeline *p = bd_calloc(1, sizeof(*p));
	uint32_t share;
	int r;

	if (!p)
		return -ENOMEM;
	p->o = *o;
	p->loop = loop;
	share = 2 * (o->queue_depth ? o->queue_depth : 1) * (o->io_threads ? o->io_threads : 1);
	bd__sched_init(&p->sched, o->session_blocks ? o->session_blocks : share, share,
		       kick_hungry, p);
	pthread_mutex_init(&p->dmu, NULL);
	pthread_cond_init(&p->dcv, NULL);
	pthread_cond_init(&p->dpark, NULL);
	pthread_mutex_init(&p->cmu, NULL);
	if (uv_async_init(loop, &p->async, on_async) < 0) {
		free(p);
		return -ENOMEM;
	}
	p->async.data = p;

	r = bd__pool_init(&p->pool, o->pool_buffers, o->pool_buffer_size);
	if (r == 0)
		r = bd_cache_new(o->cache_budget, offsetof(bd_task, next), &p->cache);
	if (r == 0)
		r = make_threads(p);
	if (r == 0)
		r = start_io_threads(p);
	if (r == 0)
		settle_pool_pages(p);
	if (r == 0)
		r = start_decoders(p);
	/* Made now, not at the first session's end: the daemon's descriptors are steady from the start. */
	if (r == 0)
		r = bd_linger_new(loop, &p->linger);
	if (r < 0) {
		bd_pipeline_free(p); /* frees p when the async handle has closed */
		return r;
	}
	*ret = p;
	return 0;
}

void bd_pipeline_submit(bd_pipeline *p, bd_job *job)
{
	for (uint32_t k = 0; k < job->ntasks; k++) {
		bd_task *t = &job->tasks[k];
		const bd_piece *pc = &job->pieces[t->first_piece];

		/* An image is made from the raw bytes, never decoded into its place. */
		/* A warm job has no pieces: an empty block would "tile" them. */
		t->direct_dst = !job->image && !job->warm &&
				bd__pieces_tile(pc, t->npieces, t->blk.raw_size);
	}
	job->pending = job->ntasks;
	bd__sched_push(&p->sched, job);
}

void bd_pipeline_cancel(bd_pipeline *p, void *owner)
{
	bd_task *t, *list = bd__sched_cancel(&p->sched, owner);

	while ((t = list)) {
		list = t->next;
		t->req.result = -ECANCELED;
		bd__job_fail(t->job, -ECANCELED, "the session ended");
		bd__task_finish(p, t);
	}
	/* Its blocks waiting on the fetcher come back now, failed, and their fetches are dropped. */
	bd_remote_abandon(owner);
}

struct bd_linger *bd_pipeline_linger(bd_pipeline *p)
{
	return p->linger;
}

static void on_async_closed(uv_handle_t *h)
{
	free(h->data);
}

static void stop_threads(bd_pipeline *p)
{
	for (unsigned i = 0; i < p->io_started; i++) {
		bd_io_thread *it = &p->io[i];
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
	pthread_cond_broadcast(&p->dpark);
	pthread_mutex_unlock(&p->dmu);
	for (unsigned i = 0; i < p->dec_started; i++)
		pthread_join(p->dec[i], NULL);
}

void bd_pipeline_free(bd_pipeline *p)
{
	if (!p)
		return;
	stop_threads(p);
	for (unsigned i = 0; p->io && i < p->nio; i++) {
		if (p->io[i].wake_fd >= 0)
			close(p->io[i].wake_fd);
		pthread_mutex_destroy(&p->io[i].mu);
		pthread_cond_destroy(&p->io[i].cv);
	}
	bd_cache_free(p->cache);
	free(p->io);
	free(p->dec);
	bd__pool_fini(&p->pool);
	bd__sched_fini(&p->sched);
	bd_linger_free(p->linger);
	p->linger = NULL;
	pthread_mutex_destroy(&p->dmu);
	pthread_cond_destroy(&p->dcv);
	pthread_cond_destroy(&p->dpark);
	pthread_mutex_destroy(&p->cmu);
	/* The async handle goes back through the loop; it frees p when closed. */
	uv_close((uv_handle_t *)&p->async, on_async_closed);
}

void bd_pipeline_read_buffers(const bd_pipeline *p, bd_read_buffers *ret)
{
	*ret = (bd_read_buffers){ .count = p->pool.nbufs, .size = p->pool.buf_size,
				  .pages = bd_pages_name(p->pool.pages) };
}

bd_io_engine bd_pipeline_engine(const bd_pipeline *p)
{
	return p->io[0].engine;
}

unsigned bd_pipeline_setup_flags(const bd_pipeline *p)
{
	return p->io[0].flags;
}

void bd_pipeline_set_decoders(bd_pipeline *p, unsigned active)
{
	if (active < 1)
		active = 1;
	if (active > p->ndec)
		active = p->ndec;
	pthread_mutex_lock(&p->dmu);
	if (active > p->dactive)
		pthread_cond_broadcast(&p->dpark);
	p->dactive = active;
	pthread_mutex_unlock(&p->dmu);
}

void bd_pipeline_get_stats(const bd_pipeline *p, bd_pipeline_stats *ret)
{
	ret->blocks_read = __atomic_load_n(&p->stats.blocks_read, __ATOMIC_RELAXED);
	ret->bytes_read = __atomic_load_n(&p->stats.bytes_read, __ATOMIC_RELAXED);
	ret->blocks_decoded = __atomic_load_n(&p->stats.blocks_decoded, __ATOMIC_RELAXED);
	ret->raw_bytes = __atomic_load_n(&p->stats.raw_bytes, __ATOMIC_RELAXED);
	ret->direct_decodes = __atomic_load_n(&p->stats.direct_decodes, __ATOMIC_RELAXED);
	ret->copied_bytes = __atomic_load_n(&p->stats.copied_bytes, __ATOMIC_RELAXED);
	ret->stored_copies = __atomic_load_n(&p->stats.stored_copies, __ATOMIC_RELAXED);
	ret->span_reads = __atomic_load_n(&p->stats.span_reads, __ATOMIC_RELAXED);
	ret->span_blocks = __atomic_load_n(&p->stats.span_blocks, __ATOMIC_RELAXED);
	ret->reads_inflight = __atomic_load_n(&p->stats.reads_inflight, __ATOMIC_RELAXED);
	ret->read_errors = __atomic_load_n(&p->stats.read_errors, __ATOMIC_RELAXED);
	ret->checksum_errors = __atomic_load_n(&p->stats.checksum_errors, __ATOMIC_RELAXED);
	ret->decode_errors = __atomic_load_n(&p->stats.decode_errors, __ATOMIC_RELAXED);
	ret->failures = ret->read_errors + ret->checksum_errors + ret->decode_errors;
	ret->decode_busy_ns = __atomic_load_n(&p->stats.decode_busy_ns, __ATOMIC_RELAXED);
	ret->decoders = p->ndec;
	pthread_mutex_lock((pthread_mutex_t *)&p->dmu);
	ret->decode_queued = p->dqueued;
	ret->decoders_active = p->dactive;
	pthread_mutex_unlock((pthread_mutex_t *)&p->dmu);
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
		ret->cache_region_used = cs.region_used;
		ret->cache_region_populated = cs.region_populated;
		ret->cache_pages = cs.pages;
		ret->cache_prefault = cs.prefault;
	}
}

void bd_pipeline_get_hists(const bd_pipeline *p, bd_hist *read, bd_hist *decode)
{
	bd_hist_read(&p->read_lat, read);
	bd_hist_read(&p->decode_lat, decode);
}
