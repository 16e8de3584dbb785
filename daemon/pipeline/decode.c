/* SPDX-License-Identifier: MIT */
/*
 * decode.c - the decode workers (see pipeline.h): check a block's stored
 * hash, decompress it and check its raw hash, then hand its pieces to the
 * batch.
 *
 * A block that tiles the batch is decompressed straight into the record;
 * one the cache asked us to load goes into the cache entry, then everyone
 * copies from there; anything else goes through per-worker scratch. Each
 * worker has its own zstd context and scratch, so decoding takes no lock.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "log.h"
#include "image.h"
#include "pipeline_priv.h"
#include "remote.h"
#include "util.h"

void bd__decode_push(bd_pipeline *p, bd_task *t)
{
	bd_fifo one = { 0 };

	bd__fifo_push(&one, t);
	bd__decode_push_list(p, &one, 1);
}

void bd__decode_push_list(bd_pipeline *p, bd_fifo *list, uint32_t n)
{
	if (!n)
		return;
	pthread_mutex_lock(&p->dmu);
	bd__fifo_append(&p->decode, list);
	p->dqueued += n;
	/* A worker lowered while it waited passes a wake-up on (take). */
	if (n == 1)
		pthread_cond_signal(&p->dcv);
	else
		pthread_cond_broadcast(&p->dcv);
	pthread_mutex_unlock(&p->dmu);
}

/* The loader of a cached block is done: wake (or fail) those waiting on it. */
static void cache_settle(bd_pipeline *p, bd_task *t, bool ok)
{
	bd_task *w = ok ? bd_cache_loaded(p->cache, t->centry) : bd_cache_failed(p->cache, t->centry);

	while (w) {
		bd_task *next = w->next;

		if (ok) {
			w->centry = t->centry; /* loaded() took a reference for it */
			bd__decode_push(p, w);
		} else if (t->job->warm && !w->job->warm) {
			/*
			 * A warm job's reason is its first failure, maybe another
			 * block's: w reads the block itself, so that its failure is
			 * its own and names it.
			 */
			bd__io_hand_back(&p->io[(uintptr_t)w->job % p->nio], w);
		} else {
			bd__job_fail(w->job, t->job->status ? t->job->status : -EIO, "%s", t->job->reason);
			w->req.result = -EIO;
			bd__task_finish(p, w);
		}
		w = next;
	}
	if (ok)
		return;
	t->centry = NULL; /* freed by bd_cache_failed */
}

/* Per-worker state: the zstd context and the scratch for blocks that go nowhere whole. */
typedef struct worker {
	bd_pipeline *p;
	ZSTD_DCtx *dctx;
	uint8_t *scratch;
	size_t scratch_cap;
	bi_scratch *img;            /* images' decode and resize (lib/image), made on first use */
} worker;

/* Where t's block decompresses to, and its room. @return 0, or -ENOMEM with the job failed. */
static int target(worker *w, bd_task *t, uint8_t **ret_out, size_t *ret_cap)
{
	/* Into the cache first, when loading it: the batch then gets a copy. */
	if (t->cache_load) {
		*ret_out = bd_cache_data(t->centry);
		*ret_cap = t->blk.raw_size;
		return 0;
	}
	if (t->direct_dst) {
		*ret_out = t->job->pieces[t->first_piece].dst;
		*ret_cap = t->blk.raw_size;
		return 0;
	}
	if (w->scratch_cap < t->blk.raw_size) {
		uint8_t *s = bd_realloc(w->scratch, t->blk.raw_size);

		if (!s) {
			bd__job_fail(t->job, -ENOMEM, "dataset %s: out of memory decoding a block",
				     t->dset->name);
			return -ENOMEM;
		}
		w->scratch = s;
		w->scratch_cap = t->blk.raw_size;
	}
	*ret_out = w->scratch;
	*ret_cap = w->scratch_cap;
	return 0;
}

static void decode_failed(bd_pipeline *p, bd_task *t, const bp_shard *sh, int r,
			  const bp_pack_fault *pf)
{
	bd__stat_add(r == -EBADMSG && pf->what && strstr(pf->what, "checksum")
		     ? &p->stats.checksum_errors : &p->stats.decode_errors, 1);
	bd__job_fail(t->job, r, "dataset %s: shard %s: block %llu at byte %llu: %s",
		     t->dset->name, sh->name, (unsigned long long)t->block,
		     (unsigned long long)t->blk.offset, pf->what ? pf->what : strerror(-r));
	/*
	 * Bytes from a bucket that do not check are not kept: the next read
	 * of the block fetches it again (the bucket may have been fine and
	 * the cache's disk not).
	 */
	if (t->dset->robj)
		bd_robj_invalidate(t->dset->robj[t->shard], t->blk.offset, t->blk.stored_size);
	if (t->cache_load)
		cache_settle(p, t, false);
}

/*
 * A remote block whose cached bytes do not check, the first time: they
 * are dropped from the remote cache and t goes back to its I/O thread,
 * which fetches and reads them again; the trainer sees nothing of it
 * (the second failure fails the batch, decode_failed). @return whether
 * t went back.
 */
static bool refetch(bd_pipeline *p, bd_task *t, const bp_shard *sh, int r,
		    const bp_pack_fault *pf)
{
	bd_io_thread *it = t->home;

	if (!t->dset->robj || t->refetched || !it || r != -EBADMSG)
		return false;
	bd__stat_add(&p->stats.checksum_errors, 1);
	bd_log(LOG_WARNING, "dataset %s: shard %s: block %llu at byte %llu: %s: its cached bytes are "
	       "dropped and fetched again", t->dset->name, sh->name, (unsigned long long)t->block,
	       (unsigned long long)t->blk.offset, pf->what ? pf->what : strerror(-r));
	bd_robj_invalidate(t->dset->robj[t->shard], t->blk.offset, t->blk.stored_size);
	t->refetched = true;
	t->req.result = 0;
	t->remote_err = 0;
	bd__io_hand_back(it, t);
	return true;
}

/* @return false: t is done; true: it went back to be read again (refetch). */
static bool decode_one(worker *w, bd_task *t)
{
	bd_pipeline *p = w->p;
	const bp_shard *sh = bp_dataset_shard(t->dset->ds, t->shard);
	bp_pack_fault pf = { 0 };
	uint64_t t0;
	uint8_t *out;
	size_t cap;
	int r;

	if (t->centry && !t->cache_load) {
		/* Someone decoded this block already: only the copy is left. */
		bd__copy_pieces(p, t, bd_cache_data(t->centry), &w->img);
		return false;
	}
	if (target(w, t, &out, &cap) < 0)
		return false;
	t0 = bd_now_ns();
	r = bp_pack_block_decode(&t->blk, t->buf ? t->buf + t->skip : out, w->dctx, sh->ddict, out,
				 cap, &pf);
	bd_hist_add(&p->decode_lat, bd_now_ns() - t0);
	if (r < 0) {
		if (refetch(p, t, sh, r, &pf))
			return true;
		decode_failed(p, t, sh, r, &pf);
		return false;
	}
	/* A raw block's decode is a copy from the read buffer (none when read in place). */
	if (t->blk.codec == BP_CODEC_RAW && t->buf && t->buf + t->skip != out)
		bd__stat_add(&p->stats.stored_copies, t->blk.raw_size);
	if (t->direct_dst && !t->cache_load)
		bd__stat_add(&p->stats.direct_decodes, 1);
	else
		bd__copy_pieces(p, t, out, &w->img);
	if (t->cache_load)
		cache_settle(p, t, true);
	bd__stat_add(&p->stats.blocks_decoded, 1);
	bd__stat_add(&p->stats.raw_bytes, t->blk.raw_size);
	return false;
}

/*
 * @return the next task for worker idx, or NULL once the pipeline stops. A
 * worker at or above the active count waits apart until it is raised
 * (bd_pipeline_set_decoders), so that a busy trainer on the same cores
 * does not compete with more of us than the work needs.
 */
static bd_task *take(bd_pipeline *p, unsigned idx)
{
	bd_task *t = NULL;

	pthread_mutex_lock(&p->dmu);
	for (;;) {
		if (p->dstop)
			break;
		if (idx >= p->dactive) {
			/* Lowered while waiting for a task: a wake-up it took goes on to another. */
			if (p->decode.head)
				pthread_cond_signal(&p->dcv);
			pthread_cond_wait(&p->dpark, &p->dmu);
			continue;
		}
		t = bd__fifo_pop(&p->decode);
		if (t) {
			p->dqueued--;
			break;
		}
		pthread_cond_wait(&p->dcv, &p->dmu);
	}
	pthread_mutex_unlock(&p->dmu);
	return t;
}

static void run(worker *w, bd_task *t)
{
	bd_pipeline *p = w->p;

	/* A task that failed its read carries the job's failure already. */
	if (__atomic_load_n(&t->req.result, __ATOMIC_RELAXED) >= 0) {
		if (w->dctx && decode_one(w, t))
			return; /* back to its I/O thread, to be fetched and read again */
		if (!w->dctx)
			bd__job_fail(t->job, -ENOMEM, "dataset %s: no zstd context", t->dset->name);
	} else if (t->cache_load && t->centry) {
		cache_settle(p, t, false);
	}
	if (t->centry) {
		bd_cache_put(p->cache, t->centry);
		t->centry = NULL;
	}
	bd__task_finish(p, t);
}

void *bd__decode_main(void *arg)
{
	worker w = { .p = arg, .dctx = ZSTD_createDCtx() };
	unsigned idx = __atomic_fetch_add(&w.p->dec_ids, 1, __ATOMIC_RELAXED);
	bd_task *t;

	if (w.dctx && bp_pack_dctx_init(w.dctx) < 0) {
		ZSTD_freeDCtx(w.dctx);
		w.dctx = NULL;
	}
	while ((t = take(w.p, idx))) {
		uint64_t t0 = bd_now_ns();

		run(&w, t);
		bd__stat_add(&w.p->stats.decode_busy_ns, bd_now_ns() - t0);
	}
	free(w.scratch);
	bi_scratch_free(w.img);
	ZSTD_freeDCtx(w.dctx);
	return NULL;
}
