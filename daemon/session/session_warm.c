/* SPDX-License-Identifier: MIT */
/*
 * session_warm.c - a dataset that memory keeps (the ram or the page
 * tier) streamed in file order on a session's first pass (see
 * session_priv.h for how the session's files divide the work).
 *
 * A shuffled epoch reads its blocks in the shuffle's order: small blocks
 * at random, at the disk's rate for random reads, although in the ram
 * tier the whole version is in the block cache by the end of the first
 * epoch. The warmer reads it in file order instead, beside the batches:
 * warm jobs of consecutive blocks (bd_job_set_warm), which the I/O threads
 * read in spans of up to 1 MiB, each block decoded once into the cache.
 * In the page tier (no block cache for it, buffered reads) the warm jobs
 * only read: the page cache keeps the bytes, and the batches' own reads
 * and decodes find them there instead of on the disk; there it runs for
 * small blocks only (WARM_PAGE_BLOCK). The batches are served as their blocks arrive and are never queued
 * behind it: the warmer is a flow of its own in the session's user's
 * share of the pipeline, so the two take turns a read at a time. A block
 * a batch needs before the warmer reaches it is read by the batch (the
 * warmer then skips it), one the warmer is reading is waited for, and
 * the rest are hits. The first epoch then costs about one sequential
 * read of the pack.
 *
 * A session warms its datasets (a mixture's sources in order) when all
 * of these hold:
 *   - [io] first_pass is stream (the default);
 *   - the dataset is in the ram tier and fits the block cache (every
 *     block will be cached anyway), or in the page tier read buffered
 *     (the page cache will hold it) with small blocks; local (a remote one would fetch the
 *     whole bucket on every node); and no warmer has read it whole since
 *     it was opened;
 *   - the session shuffles (without, its batches read in file order);
 *   - this daemon's sessions read all of it: the job has one rank, or at
 *     least as many sessions use the version as the job has ranks (every
 *     rank on this node). A rank of a job spread over nodes reads its
 *     share only: reading the whole file would multiply the disk's work.
 * A warm job that finds the cache full comes back -ENOSPC: warming stops
 * (the batches read what they need, as without it), and so it does when
 * the session closes. Each session warms on its own; the cache makes
 * sure each block is read once between them. Warm jobs and the warmer's
 * flow are charged with the session's bookkeeping (session_size.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>

#include "log.h"
#include "session_priv.h"

/* bd_warm.sources has a bit per source. */
_Static_assert(BP_MIX_SOURCES_MAX <= 64, "bd_warm.sources is a uint64_t");

/* Warm jobs in the pipeline at once, and the most blocks and stored bytes each takes. */
#define WARM_JOBS 4u
#define WARM_JOB_BLOCKS 1024u
#define WARM_JOB_BYTES ((uint64_t)8 << 20)

static uint32_t sources(const bd_session *s)
{
	return s->mix ? s->mix->n : 1;
}

static bd_dataset *source(const bd_session *s, uint32_t i)
{
	return s->mix ? s->mix->src[i].dset : s->dset;
}

/* Does d fit the cache whole, entry headers (about 64 bytes each) and all? */
static bool fits(const bd_session *s, const bd_dataset *d)
{
	return bp_dataset_raw_bytes(d->ds) + bp_dataset_blocks(d->ds) * 64 <= s->warm.room;
}

/*
 * The page tier is read ahead only when its blocks are this small or
 * smaller (mean stored bytes): random reads of them are what the disk
 * does worst. One cold epoch each way ([memory] tier = page, the packs
 * of tools/bench/bench-cold.sh), the median of alternating pairs: 8 KiB
 * samples one a block 1.44x (3 pairs, 1.00-1.50), in 64 KiB blocks 0.93x
 * (2 pairs), the first batch 40 to 90 ms later.
 */
#define WARM_PAGE_BLOCK ((uint64_t)16 << 10)

/*
 * A tier the first pass fills, read from a local disk: ram (the block
 * cache keeps every block) or page, of small blocks (buffered reads: the
 * page cache keeps what the warmer read, and the batches' reads hit it).
 */
static bool kept(const bd_dataset *d)
{
	uint64_t blocks = bp_dataset_blocks(d->ds);

	if (d->robj || !blocks)
		return false;
	return d->cache_all || (d->tier == BD_TIER_PAGE && !d->direct &&
				bp_dataset_stored_bytes(d->ds) / blocks <= WARM_PAGE_BLOCK);
}

static bool warmable(const bd_session *s, const bd_dataset *d)
{
	uint32_t world = s->req.world ? s->req.world : 1;

	return kept(d) && !d->warmed && (!d->cache_all || fits(s, d)) &&
	       (world == 1 || __atomic_load_n(&d->refs, __ATOMIC_RELAXED) >= world);
}

/* The most blocks a warm job of s takes: WARM_JOB_BLOCKS, or its largest shard's blocks. */
static uint32_t job_blocks(const bd_session *s)
{
	uint64_t most = 1;

	for (uint32_t i = 0; i < sources(s); i++) {
		const bp_dataset *ds = source(s, i)->ds;

		for (size_t k = 0; k < bp_dataset_shard_count(ds); k++)
			if (bp_dataset_shard(ds, k)->index.block_count > most)
				most = bp_dataset_shard(ds, k)->index.block_count;
	}
	return most < WARM_JOB_BLOCKS ? (uint32_t)most : WARM_JOB_BLOCKS;
}

bool bd__session_may_warm(const bd_session *s)
{
	/* Only fields kept beside the blocks (a subset of scalars): no block is read at all. */
	if (!s->env.stream_first_pass || s->req.shuffle == BP_SHUFFLE_NONE || !s->env.pipeline ||
	    (!s->seqs && !s->sel.bytes))
		return false;
	for (uint32_t i = 0; i < sources(s); i++)
		if (kept(source(s, i)))
			return true;
	return false;
}

uint64_t bd__session_warm_bytes(const bd_session *s)
{
	if (!bd__session_may_warm(s))
		return 0;
	return WARM_JOBS * (bd_job_bytes(job_blocks(s), 0) + BD_MALLOC_OVERHEAD) +
	       bd_pipeline_owner_bytes() + BD_MALLOC_OVERHEAD;
}

static void on_warm_event(void *owner, uint64_t seq, enum bd_job_event ev, int status,
			  const char *reason);

/* Queue the next warm job from the cursor. @return 1 queued, 0 nothing left, <0 no memory. */
static int queue_one(bd_session *s)
{
	bd_warm *w = &s->warm;
	const bd_dataset *d;
	const bp_shard *sh;
	uint64_t left, bytes = 0;
	uint32_t n;
	bd_job *job;
	int r;

	/* The next block not yet queued, past datasets not to warm and shards done. */
	for (;;) {
		if (w->source >= sources(s))
			return 0;
		d = source(s, w->source);
		if (warmable(s, d) && w->shard < bp_dataset_shard_count(d->ds)) {
			if (w->block < bp_dataset_shard(d->ds, w->shard)->index.block_count)
				break;
			w->shard++;
			w->block = 0;
			continue;
		}
		w->source++;
		w->shard = 0;
		w->block = 0;
	}
	sh = bp_dataset_shard(d->ds, w->shard);
	left = sh->index.block_count - w->block;
	/* At most job_blocks(s), what is charged: left is at most its shard's blocks. */
	n = left < WARM_JOB_BLOCKS ? (uint32_t)left : WARM_JOB_BLOCKS;
	r = bd_job_new(w, (uint32_t)s->uid, on_warm_event, w->seq, n, 0, &job);
	if (r < 0)
		return r;
	bd_job_set_warm(job);
	for (uint32_t i = 0; i < n && (i == 0 || bytes < WARM_JOB_BYTES); i++) {
		bp_pack_block blk;

		bp_pack_index_block(&sh->index, w->block, &blk);
		bd_job_add_block(job, d, w->shard, w->block++);
		bytes += blk.stored_size;
	}
	w->seq++;
	w->inflight++;
	w->queued_bytes += bytes;
	w->sources |= UINT64_C(1) << w->source;
	bd_pipeline_submit(s->env.pipeline, job);
	return 1;
}

/* Keep WARM_JOBS in the pipeline until every block is queued; then, once all are back, done. */
static void fill(bd_session *s)
{
	bd_warm *w = &s->warm;
	int r = 1;

	while (w->state == BD_WARM_RUNNING && w->inflight < WARM_JOBS && (r = queue_one(s)) == 1)
		;
	if (w->state != BD_WARM_RUNNING || w->inflight)
		return;
	if (r < 0) {
		w->state = BD_WARM_STOPPED;
		bd_log(LOG_NOTICE, "session %" PRIu64 " (%s): stopped reading ahead in file order: "
		       "out of memory", s->id, s->dset->name);
		return;
	}
	/* Every block of the sources it read was loaded by someone: later sessions need not look. */
	w->state = BD_WARM_DONE;
	for (uint32_t i = 0; i < sources(s) && !w->failed; i++)
		if (w->sources >> i & 1)
			source(s, i)->warmed = true;
	bd_log(LOG_INFO, "session %" PRIu64 " (%s): read %" PRIu64 " stored bytes ahead in file "
	       "order in %.3f s", s->id, s->dset->name, w->queued_bytes,
	       (double)(bd_now_ns() - w->started_ns) / 1e9);
}

static void on_warm_event(void *owner, uint64_t seq, enum bd_job_event ev, int status,
			  const char *reason)
{
	bd_warm *w = owner;
	bd_session *s = (bd_session *)((char *)w - offsetof(bd_session, warm));

	(void)seq;
	(void)ev; /* BD_JOB_DECODED: warm jobs have no copies */
	w->inflight--;
	if (s->closing) {
		bd__session_maybe_end(s);
		return;
	}
	if (status == -ENOSPC && w->state == BD_WARM_RUNNING) {
		w->state = BD_WARM_FULL;
		bd_log(LOG_NOTICE, "session %" PRIu64 " (%s): stopped reading ahead in file order: %s; "
		       "batches read their blocks as they need them", s->id, s->dset->name, reason);
	} else if (status < 0) {
		/*
		 * The batches that waited on a block that failed to load, and
		 * those that need it later, read it themselves (decode.c).
		 */
		if (!w->failed++)
			bd_log(LOG_WARNING, "session %" PRIu64 " (%s): reading ahead: %s", s->id,
			       s->dset->name, reason);
	}
	fill(s);
}

void bd__session_warm_start(bd_session *s)
{
	bd_warm *w = &s->warm;
	bd_pipeline_stats ps;
	bool any = false;

	if (!bd__session_may_warm(s))
		return;
	bd_pipeline_get_stats(s->env.pipeline, &ps);
	w->room = ps.cache_budget;
	for (uint32_t i = 0; i < sources(s); i++)
		any |= warmable(s, source(s, i));
	if (!any) {
		/* [memory] tier = ram over a cache it does not fit: reading ahead would evict itself. */
		for (uint32_t i = 0; i < sources(s) && w->state == BD_WARM_OFF; i++)
			if (source(s, i)->cache_all && !source(s, i)->robj && !fits(s, source(s, i)))
				w->state = BD_WARM_FULL;
		if (w->state == BD_WARM_FULL)
			bd_log(LOG_INFO, "session %" PRIu64 " (%s): not reading ahead in file order: "
			       "the block cache (%" PRIu64 " MiB) has no room for the whole dataset",
			       s->id, s->dset->name, w->room >> 20);
		return;
	}
	w->state = BD_WARM_RUNNING;
	w->started_ns = bd_now_ns();
	fill(s);
}

void bd__session_warm_stop(bd_session *s)
{
	if (s->warm.state == BD_WARM_RUNNING)
		s->warm.state = BD_WARM_STOPPED;
	/* Blocks not yet read are dropped: the session ends sooner. */
	if (s->warm.seq)
		bd_pipeline_cancel(s->env.pipeline, &s->warm);
}

const char *bd_warm_state_name(enum bd_warm_state st)
{
	switch (st) {
	case BD_WARM_OFF: return "off";
	case BD_WARM_RUNNING: return "running";
	case BD_WARM_DONE: return "done";
	case BD_WARM_FULL: return "cache full";
	case BD_WARM_STOPPED: return "stopped";
	}
	return "?";
}
