/* SPDX-License-Identifier: MIT */
/*
 * session_size.c - the memory a session needs (its shared memory, its
 * largest batch, its heap) and whether the budget has room for it
 * (see session_priv.h for how the session's files divide the work).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fault.h"
#include "log.h"
#include "pipeline.h"
#include "session_priv.h"

/*
 * How many batches may be in the pipeline at once: enough for about
 * BD_SESSION_JOB_PIECES samples, at least 2 (one decoding while the next
 * is read) and at most slots. The pipeline serves a session a bounded
 * number of blocks at a time anyway (pipeline.h), so more jobs queued
 * behind them buy nothing, and big batches would hold `slots` jobs' worth
 * of bookkeeping. Batches decoded are freed of theirs, so staging still
 * runs `prefetch` batches ahead.
 */
static uint32_t jobs_in_flight(const bd_session *s)
{
	uint32_t n = s->req.batch_size, j = (BD_SESSION_JOB_PIECES + n - 1) / n;

	return j < 2 ? 2 : j > s->slots ? s->slots : j;
}

/*
 * The daemon heap the session may hold at most, charged with its shared
 * memory: the session and its slots, the planner's scratch (batch_size
 * each), its jobs in flight (a batch touches at most min(batch_size x
 * the most frames of a sample, blocks) blocks; a job is freed when its
 * batch is decoded), the value spans of the fields it selected, its
 * keys (the table read at open, or the reader and a batch of the longest
 * keys), the pipeline's flow, and a GPU session's per-slot state and
 * copies.
 */
static uint64_t heap_bytes(const bd_session *s, int device)
{
	/*
	 * A framed sample is a block and a piece per frame (lib/pack/PACK.md,
	 * Frames), and each selected bytes field of a sample a piece of its
	 * own: a frame times a field bounds both.
	 */
	uint64_t n = s->req.batch_size;
	uint64_t blocks = s->mix ? s->mix->blocks : bp_dataset_blocks(s->dset->ds);
	uint64_t frames = s->mix ? s->mix->max_frames : bp_dataset_max_frames(s->dset->ds);
	uint64_t pieces = s->seqs ? n * (s->mix ? s->mix->max_frags : s->seqs->max_frags)
			  : n * frames * s->sel.bytes;
	uint64_t job = bd_job_bytes((uint32_t)(blocks < pieces ? blocks : pieces), (uint32_t)pieces);
	uint64_t b;

	b = sizeof(bd_session) + s->req.path_len + 1 + (uint64_t)s->slots * sizeof(slot) +
	    n * (sizeof(*s->ids) + sizeof(*s->locs) + sizeof(*s->order)) + 6 * BD_MALLOC_OVERHEAD;
	b += n * s->sel.values * sizeof(*s->vals) + BD_MALLOC_OVERHEAD;
	if (s->sel.keys)
		b += bd_batch_keys_bytes(&s->keys, s->dset->ds, s->req.batch_size);
	/* A token session's sequences, and the planner's pieces and fragments (session.c). */
	if (s->mix)
		b += s->mix->heap + s->mix->max_pieces * sizeof(*s->pcs);
	if (s->seqs)
		b += s->seqs->heap + s->seqs->max_pieces * sizeof(*s->pcs) +
		     pieces * (sizeof(*s->frags) + sizeof(*s->fkey) + sizeof(*s->forder)) +
		     4 * BD_MALLOC_OVERHEAD;
	b += (uint64_t)s->max_jobs * (job + BD_MALLOC_OVERHEAD);
	b += bd_pipeline_owner_bytes() + BD_MALLOC_OVERHEAD;
	/* Reading ahead in file order, should it start (session_warm.c): charged either way. */
	b += bd__session_warm_bytes(s);
	if (device >= 0)
		b += bd_gpu_session_bytes(s->slots);
	/* Images: the decode workers' scratch, at its most (charged to each such session). */
	if (s->sel.image_slot >= 0)
		b += bd_pipeline_image_scratch(s->env.pipeline);
	return b;
}

/* What sizing a selection's batches needs: the keys, when it read them. */
typedef struct sizing {
	const bd_dataset *d;
	const bd_mix *x;          /* a mixture of samples' sources; NULL: d alone */
	const bd_selection *sel;
	const bd_key_table *keys; /* NULL: BP_KEY_MAX each */
} sizing;

/*
 * The payload bytes sample id (a session id) adds to a batch of z's
 * selection, region padding aside.
 */
static uint64_t sample_cost(const sizing *z, uint64_t id)
{
	const bd_selection *sel = z->sel;
	const bp_dataset *ds = z->x ? z->x->src[bd_mix_source_of(z->x, id, &id)].dset->ds
			       : z->d->ds;
	uint64_t cost = sel->scalar_bytes;
	uint32_t v = 0, named = sel->values - (sel->keys ? 1 : 0);

	if (bd_selection_plain(sel)) {
		bp_pack_sample ps;
		size_t shard;

		if (sel->image_slot == 0)
			return sel->image_size;
		/* Ids come from the sampler and are < samples: locate cannot fail. */
		bp_dataset_locate(ds, id, &shard, &ps);
		return ps.size;
	}
	for (; v < named; v++)
		cost += bd_selection_value_size(sel, ds, v, id);
	if (sel->keys)
		cost += z->keys ? bd_key_table_len(z->keys, id) : BP_KEY_MAX;
	return cost;
}

/*
 * The payload of the largest batch m's stream takes in its first `epochs`
 * epochs: the batches its stride visits, no others (ids: batch_size of
 * scratch).
 */
static uint64_t stream_largest(const bd_sampler *sp, const bp_msg_open *m, const sizing *z,
			       uint64_t epochs, uint64_t *ids)
{
	uint64_t most = 0, epoch, batch;

	for (uint64_t g = m->start_batch;; g += bd__session_stride(m)) {
		uint64_t sum = bd_selection_padding(z->sel);
		uint32_t len;

		bd_sampler_locate(sp, g, &epoch, &batch);
		if (epoch - m->start_epoch >= epochs)
			break;
		len = bd_sampler_epoch_batch_len(sp, epoch, batch);
		bd_sampler_batch(sp, epoch, batch, ids);
		for (uint32_t i = 0, src; i < len; i++)
			sum += sample_cost(z, z->x ? bd_mix_id(z->x, epoch, ids[i], &src) : ids[i]);
		if (sum > most)
			most = sum;
	}
	return most;
}

/*
 * How many epochs from start_epoch sizing reads. Unshuffled, every full
 * epoch is the same, and a stride's visits repeat after `stride` of them:
 * the start epoch and that many more (about two epochs' samples whatever
 * the stride). Shuffled, as many as SIZING_SAMPLES visited samples allow.
 */
static uint64_t sizing_epochs(const bp_msg_open *m, uint64_t per_rank)
{
	uint64_t visited = per_rank / bd__session_stride(m), epochs;

	if (m->shuffle == BP_SHUFFLE_NONE)
		return (m->start_sample ? 1 : 0) + (bd__session_stride(m) > 1 ? bd__session_stride(m) : 1);
	epochs = BD_SESSION_SIZING_SAMPLES / (visited ? visited : 1);
	if (epochs < 1)
		epochs = 1;
	return epochs > BD_SESSION_SIZING_EPOCHS ? BD_SESSION_SIZING_EPOCHS : epochs;
}

/*
 * The longest value of str field slot v in d's samples, or across a
 * mixture's sources (x not NULL).
 */
static uint64_t longest_str(const bd_dataset *d, const bd_mix *x, const bd_selection *sel,
			    uint32_t v)
{
	uint64_t longest = 0;

	for (uint32_t i = 0; i < (x ? x->n : 1); i++) {
		const bp_dataset *ds = x ? x->src[i].dset->ds : d->ds;
		uint64_t samples = bp_dataset_samples(ds);

		for (uint64_t id = 0; id < samples; id++) {
			uint64_t size = bd_selection_value_size(sel, ds, v, id);

			if (size > longest)
				longest = size;
		}
	}
	return longest;
}

/*
 * The largest payload of n samples of any schedule over d, or over a
 * mixture's sources (x not NULL): the n largest samples' selected bytes
 * (no more than their whole bytes), every selected str field's longest
 * value (found in a pass over the samples when `scan`, else the longest
 * a str value may be), the longest key possible.
 */
static uint64_t selection_bound(const bd_dataset *d, const bd_mix *x, const bd_selection *sel,
				uint32_t n, bool scan)
{
	uint64_t most = !sel->bytes ? 0 : x ? bd_mix_batch_bound(x, n) : bd_dataset_batch_bound(d, n);

	/* An image's tensor in place of its bytes: counting both bounds it. */
	if (sel->image_slot >= 0)
		most = (bd_selection_plain(sel) ? 0 : most) + (uint64_t)n * sel->image_size;
	if (bd_selection_plain(sel))
		return most;
	most += bd_selection_padding(sel) + (uint64_t)n * sel->scalar_bytes;
	for (uint32_t k = 0; k < sel->count; k++) {
		uint32_t f = sel->field[k];

		if (sel->schema->fields[f].type != BP_FIELD_STR)
			continue;
		most += (uint64_t)n * (scan ? longest_str(d, x, sel, (uint32_t)sel->slot[k])
				       : BP_STR_MAX);
	}
	if (sel->keys)
		most += (uint64_t)n * BP_KEY_MAX;
	return most;
}

/*
 * A token session's largest batch: every row of tokens (and packed, of
 * positions) is the same size; cu_seqlens at its longest.
 */
static uint64_t sequences_largest(const bd_seqs *q, const bd_mix *x, const bd_selection *sel,
				  uint32_t n)
{
	uint64_t most = bd_selection_padding(sel) + (uint64_t)n * sel->scalar_bytes;
	uint64_t cu = bd_seqs_boundary_bytes(q->mode, x ? x->max_pieces : q->max_pieces);

	for (uint32_t k = 0; k < sel->count; k++) {
		const bp_field *f = &sel->schema->fields[sel->field[k]];

		if (f->type == BP_FIELD_BYTES)
			most += (uint64_t)n * (f->fixed_size ? f->fixed_size : cu);
	}
	return most;
}

int bd_session_largest_batch(const bd_dataset *d, const bd_seqs *q, const bd_mix *x,
			     const bp_msg_open *m, uint64_t *ret, bd_key_table **ret_keys)
{
	bd_sampler_cfg sc = bd__session_sampler_cfg(d, q, x, m);
	uint64_t *ids, most = 0, per_rank, epochs;
	bd_selection sel;
	bd_sampler sp;
	sizing z = { .d = d, .x = q ? NULL : x, .sel = &sel };
	char err[8];
	int r;

	if (bd_sampler_init(&sp, &sc) < 0)
		return -EINVAL;
	/* A selection the dataset cannot give: bd_session_new says why. */
	if ((r = bd_selection_parse(d->ds, x ? &x->schema : q ? &q->schema : NULL, m, &sel, err,
				    sizeof(err))) < 0)
		return r;
	if (q) {
		*ret = sequences_largest(q, x, &sel, m->batch_size);
		if (ret_keys)
			*ret_keys = NULL;
		return 0;
	}
	per_rank = bd_sampler_samples_per_rank(&sp);
	if (per_rank > BD_SESSION_SIZING_SCAN) {
		*ret = selection_bound(d, z.x, &sel, m->batch_size, true);
		if (ret_keys)
			*ret_keys = NULL;
		return 0;
	}
	epochs = sizing_epochs(m, per_rank);
	ids = bd_calloc(m->batch_size, sizeof(*ids));
	if (!ids)
		return -ENOMEM;
	if (sel.keys)
		z.keys = bd_key_table_read(d->ds, BD_SESSION_SIZING_SCAN);
	most = stream_largest(&sp, m, &z, epochs, ids);
	free(ids);
	*ret = most;
	if (ret_keys)
		*ret_keys = (bd_key_table *)z.keys;
	else
		bd_key_table_free((bd_key_table *)z.keys);
	return 0;
}

/*
 * Lay out the data memfd: descriptors, arena, a GPU session's device
 * table and the schema; and count the heap the session will hold. `largest` is the
 * schedule's largest batch (bd_session_largest_batch). @return 0 or -ENODEV.
 */
int bd__session_measure(bd_session *s, unsigned prefetch, int device, uint64_t largest, char *err,
		   size_t errlen)
{
	const bd_dataset *d = s->dset;
	uint32_t batch_size = s->req.batch_size;
	uint64_t mean, most, max_rec, mean_rec;

	mean = !s->sel.bytes ? 0 : s->mix ? s->mix->mean_raw
	       : bp_dataset_raw_bytes(d->ds) / bp_dataset_samples(d->ds);
	/* An image's tensor in place of its bytes (the bytes counted too, but in a plain record). */
	if (s->sel.image_slot >= 0)
		mean = (bd_selection_plain(&s->sel) ? 0 : mean) + s->sel.image_size;
	/*
	 * Text and keys have no mean at hand: the largest batch's stands in
	 * for it (an overestimate of the prefetch staging only).
	 */
	if (!bd_selection_plain(&s->sel))
		mean += s->sel.scalar_bytes + (s->sel.values > s->sel.bytes ? largest / batch_size : 0);
	/* A token session's rows are all alike: its largest batch is every batch, near enough. */
	if (s->seqs)
		mean = largest / batch_size;
	max_rec = record_bytes(s, batch_size, largest);
	mean_rec = record_bytes(s, batch_size, mean * batch_size) + BP_RING_RECORD_ALIGN;
	s->arena_off = bp_ring_arena_offset(s->slots);
	/*
	 * The trainer may hold two batches (slots = prefetch + 2) and must still
	 * get the next one: with two records of up to max_rec held anywhere in
	 * the byte ring, one of the two free runs beside them has room for a
	 * third only when the ring is four of them. `prefetch` average ones on
	 * top keep the planner that far ahead of a trainer that holds nothing.
	 */
	bd_arena_init(&s->arena, 4 * max_rec + (uint64_t)prefetch * mean_rec);
	s->data_size = s->arena_off + s->arena.size;
	if (device >= 0) {
		if (!s->env.gpu || !s->env.cuda || device >= s->env.cuda->devices) {
			snprintf(err, errlen, "no CUDA device: the GPU thread is not running");
			return -ENODEV;
		}
		/*
		 * One device slot per descriptor, each with room for twice the
		 * largest batch the sizing saw (no more than the largest possible):
		 * margin for a batch of an epoch past the ones it read.
		 */
		/* On the loop thread: no pass over the dataset; the bound only caps the margin. */
		most = s->seqs ? largest : selection_bound(d, s->mix, &s->sel, batch_size, false);
		s->slot_bytes = BD_ALIGN_UP((largest < most / 2 ? 2 * largest : most) + 1,
					 BP_RING_DEVICE_ALIGN);
		s->gpu_off = s->data_size;
		s->data_size += bp_ring_gpu_size(s->slots);
	}
	/* The schema: in the header's page when it fits there (as a plain pack's always does). */
	s->schema_size = bp_schema_encoded_size(s->sel.schema);
	if (s->schema_size <= BP_RING_HEADER_SIZE - BP_RING_SCHEMA_INLINE) {
		s->schema_off = BP_RING_SCHEMA_INLINE;
	} else {
		s->schema_off = s->data_size;
		s->data_size += BD_ALIGN_UP(s->schema_size, BP_RING_RECORD_ALIGN);
	}
	s->ctrl_size = bp_ring_ctrl_size(s->slots);
	s->max_jobs = jobs_in_flight(s);
	s->heap = heap_bytes(s, device);
	return 0;
}

/*
 * Take need bytes for s from the budget, evicting the dataset cache's
 * unused versions (least recently used first) while that makes room.
 * @return whether they were taken.
 */
static bool take(const bd_session *s, uint64_t need)
{
	while (!bd_budget_take(s->env.budget, BD_BUDGET_SESSIONS, need))
		if (!bd_dataset_cache_evict_one())
			return false;
	return true;
}

/* The refusal of a session the budget has no room for, naming the figures. */
static void budget_refusal(const bd_session *s, uint64_t need, unsigned prefetch, char *err,
			   size_t errlen)
{
	bd_budget_view v;
	uint64_t datasets, room, used;
	char a[32], b[32], c[32], d[32], fix[192], more[160] = "";

	bd_budget_get(s->env.budget, &v);
	datasets = v.held[BD_BUDGET_DATASETS];
	used = v.held[BD_BUDGET_SESSIONS];
	/* The dataset versions in memory are in use (unused ones were evicted): not the sessions'. */
	room = v.total > datasets ? v.total - datasets : 0;
	if (datasets)
		snprintf(more, sizeof(more), "; dataset indexes and tables in memory take %s of the "
			 "budget besides: close the sessions of datasets no longer read",
			 bp_format_size(datasets, d, sizeof(d)));
	/*
	 * After a reload that lowered the budget, used may exceed room. The
	 * message names the figures, the session's own remedies, where room
	 * comes from (the budget less the block cache and the dataset
	 * versions) and the settings that change it.
	 */
	snprintf(err, errlen, "memory budget: dataset %s with batch %u and prefetch %u needs %s; "
		 "sessions may use %s and %s of it is in use: open with a smaller prefetch or "
		 "batch%s%s%s", s->dset->name, s->req.batch_size, prefetch,
		 bp_format_size(need, a, sizeof(a)), bp_format_size(room, c, sizeof(c)),
		 bp_format_size(used, b, sizeof(b)),
		 v.memory > v.total ? ", " : " or ", bd_budget_remedy(&v, fix, sizeof(fix)), more);
}

/*
 * Does the session fit the daemon's budget and the uid's limit? Takes its
 * bytes from the budget when it does (s->memory). @return 0 or -ENOMEM.
 */
int bd__session_charge(bd_session *s, const bd_session_quota *q, unsigned prefetch, char *err,
		  size_t errlen)
{
	uint64_t need = s->data_size + s->ctrl_size + s->heap, uid_need, uid_used;
	const char *name = s->dset->name;
	uint32_t batch_size = s->req.batch_size;
	bd_linger *l = bd__session_linger_of(s);
	char a[32], b[32], c[32], d[32], version[96] = "";

	/* Memory ended sessions' clients let go of since the loop last looked is free now. */
	bd_linger_drain(l);
	if (!take(s, need)) {
		budget_refusal(s, need, prefetch, err, errlen);
		return -ENOMEM;
	}
	s->memory = need;
	if (!q || !q->uid_limit)
		return 0;
	/* The uid's live sessions and their versions (q), and what its clients keep of ended ones. */
	uid_used = q->uid_used + bd_linger_uid_bytes(l, q->uid);
	uid_need = need + q->uid_dataset;
	if (uid_need <= (q->uid_limit > uid_used ? q->uid_limit - uid_used : 0))
		return 0;
	bd_budget_give(s->env.budget, BD_BUDGET_SESSIONS, need);
	s->memory = 0;
	if (q->uid_dataset)
		snprintf(version, sizeof(version), " and %s index and tables %s (the uid's first "
			 "session on %s)", s->mix ? "its sources'" : "its dataset's",
			 bp_format_size(q->uid_dataset, d, sizeof(d)), s->mix ? "them" : "it");
	snprintf(err, errlen, "memory limit per user: dataset %s with batch %u and prefetch %u needs "
		 "%s%s; uid %u holds %s of the %s [limits] memory_per_uid allows: open with a "
		 "smaller prefetch or batch, close one of its sessions, or raise [limits] "
		 "memory_per_uid", name, batch_size, prefetch, bp_format_size(need, a, sizeof(a)),
		 version, (unsigned)q->uid, bp_format_size(uid_used, b, sizeof(b)),
		 bp_format_size(q->uid_limit, c, sizeof(c)));
	return -ENOMEM;
}

/*
 * Over the budget with every key in memory: when reading keys as batches
 * need them costs less (keys longer than a key block's worth of the
 * longest), give the table back to *keys and charge that instead.
 * @return bd__session_charge()'s result, or -ENOMEM as it was.
 */
int bd__session_charge_without_keys(bd_session *s, bd_key_table **keys, int device,
			       const bd_session_quota *q, unsigned prefetch, char *err,
			       size_t errlen)
{
	bd_key_table *t = s->keys.table;
	uint64_t with = s->heap;

	s->keys.table = NULL;
	s->heap = heap_bytes(s, device);
	if (s->heap >= with) {
		s->keys.table = t;
		s->heap = with;
		return -ENOMEM;
	}
	*keys = t;
	return bd__session_charge(s, q, prefetch, err, errlen);
}

