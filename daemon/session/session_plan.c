/* SPDX-License-Identifier: MIT */
/*
 * session_plan.c - one batch planned: its samples located, grouped by
 * block, its payload laid out, its record's tables written and its job built
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
#include "session_priv.h"
#include "sort.h"

/* ---- planning -------------------------------------------------------------------------- */

/*
 * Where batch (epoch, batch)'s n samples are, and the size of each one's
 * values but the key (value slots, fields.h).
 */
static void locate(bd_session *s, uint64_t epoch, uint64_t batch, uint32_t n)
{
	const bp_dataset *ds = s->dset->ds;
	uint32_t named = s->sel.values - (s->sel.keys ? 1 : 0);

	bd_sampler_batch(&s->sampler, epoch, batch, s->ids);
	for (uint32_t i = 0; i < n; i++) {
		bp_pack_sample ps;
		size_t shard;

		/* Ids come from the sampler and are < samples: locate cannot fail. */
		bp_dataset_locate(ds, s->ids[i], &shard, &ps);
		s->locs[i] = (loc){ .shard = (uint32_t)shard, .frames = ps.frames, .block = ps.block,
				    .src = ps.offset, .size = ps.size };
		s->order[i] = i;
		if (bd_selection_plain(&s->sel)) {
			s->vals[i].size = s->sel.image_slot == 0 ? s->sel.image_size : ps.size;
			continue;
		}
		for (uint32_t v = 0; v < named; v++) {
			const bp_field *fd = &s->sel.schema->fields[s->sel.vfield[v]];

			/* The one bytes field is the whole sample: no second lookup. */
			s->vals[(size_t)v * n + i].size =
				s->sel.whole && fd->type == BP_FIELD_BYTES && !bd_selection_is_image(&s->sel, v)
					? ps.size : bd_selection_value_size(&s->sel, ds, v, s->ids[i]);
		}
	}
}

/* One region of the payload: n values of slot v end to end, from *at (aligned). */
static uint64_t place_values(bd_session *s, uint32_t v, uint32_t n, uint64_t *at)
{
	bp_ring_span *span = s->vals + (size_t)v * n;
	uint64_t off = BD_ALIGN_UP(*at, BP_RING_PAYLOAD_ALIGN), size = 0;

	for (uint32_t i = 0; i < n; i++) {
		span[i].offset = size;
		size += span[i].size;
	}
	s->lay.voff[v] = off;
	*at = off + size;
	return size;
}

/*
 * Lay out the payload of n samples whose value sizes are known: the
 * lead's region first, then the other selected fields' in schema order,
 * then the keys'. @return the payload bytes.
 */
static uint64_t place_regions(bd_session *s, uint32_t n)
{
	const bd_selection *sel = &s->sel;
	layout *lay = &s->lay;
	uint64_t at = 0;

	if (sel->lead >= 0) {
		for (uint32_t k = 0; k < sel->count; k++)
			if ((int32_t)sel->field[k] == sel->lead)
				lay->size[k] = place_values(s, 0, n, &at), lay->off[k] = 0;
	}
	for (uint32_t k = 0; k < sel->count; k++) {
		uint32_t type = sel->schema->fields[sel->field[k]].type;

		if ((int32_t)sel->field[k] == sel->lead)
			continue;
		if (sel->slot[k] >= 0) {
			lay->size[k] = place_values(s, (uint32_t)sel->slot[k], n, &at);
			lay->off[k] = lay->voff[sel->slot[k]];
			continue;
		}
		lay->off[k] = BD_ALIGN_UP(at, BP_RING_PAYLOAD_ALIGN);
		lay->size[k] = (uint64_t)n * bp_field_scalar_size(type);
		at = lay->off[k] + lay->size[k];
	}
	if (sel->keys) {
		lay->size[sel->count] = place_values(s, sel->values - 1, n, &at);
		lay->off[sel->count] = lay->voff[sel->values - 1];
	}
	return at;
}

static bool same_block(const loc *a, const loc *b)
{
	return a->shard == b->shard && a->block == b->block;
}

/*
 * Order the samples by where they are read from. Global ids run through
 * the shards, their blocks and each block's bytes in order, so sorting by
 * id is sorting by (shard, block, offset), on one integer key. Batches of
 * an unshuffled epoch come in that order already: one pass sees it.
 * @return how many blocks they touch, every frame of a framed sample
 * counted (a frame is at least BP_PACK_MIN_FRAME bytes of a payload that
 * fits the session's memory: far below 2^32 of them).
 */
static uint32_t group_by_block(bd_session *s, uint32_t n)
{
	uint32_t nblocks = 0, i = 1;

	while (i < n && s->ids[i - 1] <= s->ids[i])
		i++;
	if (i < n)
		bd_sort_by_key(s->order, s->ids, n);
	for (i = 0; i < n; i++)
		if (!i || !same_block(&s->locs[s->order[i]], &s->locs[s->order[i - 1]]))
			nblocks += s->locs[s->order[i]].frames;
	return nblocks;
}

/*
 * The pieces of sample i's selected bytes fields that a block holds: the
 * block has the sample's bytes [lo, hi), sample byte x at raw offset
 * x - base. A field's value is its span of the sample's bytes (fields.h),
 * and goes to its place in its field's region. Without `skip_empty`
 * every field gets a piece, empty or not (a whole block's samples: the
 * block is read anyway). @return the pieces added (or, with job NULL,
 * that would be).
 */
static uint32_t sample_pieces(bd_session *s, bd_job *job, uint32_t i, uint32_t n, uint64_t base,
			      uint64_t lo, uint64_t hi, bool skip_empty, uint8_t *payload)
{
	const bd_selection *sel = &s->sel;
	uint32_t added = 0;

	/* One bytes field: the sample's bytes are its value (the planner's hot path). */
	if (bd_selection_plain(sel) && sel->image_slot < 0) {
		uint64_t size = s->locs[i].size, b = size < hi ? size : hi;

		if (lo > b || (skip_empty && lo == b))
			return 0;
		if (job)
			bd_job_add_piece(job, lo - base, b - lo,
					 payload + s->vals[i].offset + lo);
		return 1;
	}
	for (uint32_t k = 0; k < sel->count; k++) {
		uint32_t f = sel->field[k], v = (uint32_t)sel->slot[k];
		uint64_t so, ss, a, b;
		uint8_t *dst;

		if (sel->schema->fields[f].type != BP_FIELD_BYTES)
			continue;
		if (sel->whole)
			so = 0, ss = s->locs[i].size;
		else
			bp_dataset_field_span(s->dset->ds, s->ids[i], f, &so, &ss);
		a = so > lo ? so : lo;
		b = so + ss < hi ? so + ss : hi;
		if (a > b || (skip_empty && a == b))
			continue;
		added++;
		if (!job)
			continue;
		dst = payload + (bd_selection_plain(sel) ? 0 : s->lay.voff[v]) +
		      s->vals[(size_t)v * n + i].offset;
		/* An image: its whole encoded value (no sample spans blocks: fields.c) to its tensor. */
		if (bd_selection_is_image(sel, v))
			bd_job_add_image(job, so - base, ss, dst, s->ids[i], s->plan_epoch, i);
		else
			bd_job_add_piece(job, a - base, b - a, dst + (a - so));
	}
	return added;
}

/*
 * The blocks of a framed sample taken `copies` times (o[0..copies), the
 * same id over and over): each frame is a block of its own whose pieces
 * go to the sample's places plus the frame's offset, so a frame of a
 * sample of one bytes field tiles its piece, decodes straight into the
 * record and can do so on any decode worker, in parallel with the
 * sample's other frames. A frame that holds nothing the session selected
 * is not read.
 */
static void add_frames(bd_session *s, bd_job *job, const uint32_t *o, uint32_t copies,
		       uint32_t n, uint8_t *payload)
{
	const loc *l = &s->locs[o[0]];
	const bp_pack_index *idx = &bp_dataset_shard(s->dset->ds, l->shard)->index;
	uint64_t at = 0;

	for (uint32_t f = 0; f < l->frames; f++) {
		bp_pack_block b;

		bp_pack_index_block(idx, l->block + f, &b);
		if (sample_pieces(s, NULL, o[0], n, at, at, at + b.raw_size, true, payload)) {
			bd_job_add_block(job, s->dset, l->shard, l->block + f);
			for (uint32_t c = 0; c < copies; c++)
				sample_pieces(s, job, o[c], n, at, at, at + b.raw_size, true, payload);
		}
		at += b.raw_size;
	}
}

/*
 * The job reading the n samples' selected bytes fields into the record's
 * payload, block by block (nblocks of them at most, frames counted).
 * @return 0 or -ENOMEM.
 */
static int build_job(bd_session *s, uint32_t n, uint32_t nblocks, uint8_t *rec, bd_job **ret)
{
	uint8_t *payload = rec + table_bytes(s, n);
	uint32_t npieces = 0;
	bd_job *job;
	int r;

	/* A framed sample takes a piece per frame and field at most. */
	for (uint32_t i = 0; i < n; i++)
		npieces += s->locs[i].frames * s->sel.bytes;
	r = bd_job_new(s, s->uid, bd__session_on_job_event, s->next_seq, nblocks, npieces, &job);
	if (r < 0)
		return r;
	if (s->sel.image_slot >= 0) {
		uint64_t *bad = (uint64_t *)(rec + bd_selection_tables(&s->sel, n));

		bad[0] = 0;
		bd_job_set_image(job, &s->sel.image, s->req.seed, s->sel.image_skip, bad);
	}
	for (uint32_t i = 0, run; i < n; i += run) {
		const loc *l = &s->locs[s->order[i]];

		for (run = 1; i + run < n && same_block(l, &s->locs[s->order[i + run]]); run++)
			;
		if (l->frames > 1) {
			add_frames(s, job, s->order + i, run, n, payload);
			continue;
		}
		bd_job_add_block(job, s->dset, l->shard, l->block);
		for (uint32_t k = i; k < i + run; k++) {
			uint32_t o = s->order[k];

			/* Sample byte x is raw byte src + x of the block. */
			sample_pieces(s, job, o, n, -s->locs[o].src, 0, s->locs[o].size, false,
				      payload);
		}
	}
	*ret = job;
	return 0;
}

/*
 * The record's tables (fields.h): the sample table of the lead field, and
 * for any other selection the region entries and the value tables.
 */
static void write_tables(const bd_session *s, uint32_t n, uint8_t *rec)
{
	const bd_selection *sel = &s->sel;
	bp_ring_sample *table = (bp_ring_sample *)rec;
	bp_ring_span *span = (bp_ring_span *)(table + n);
	bool lead = sel->lead >= 0;

	for (uint32_t i = 0; i < n; i++)
		table[i] = (bp_ring_sample){ .id = s->ids[i],
					     .offset = lead ? s->vals[i].offset : 0,
					     .size = lead ? s->vals[i].size : 0 };
	if (!sel->regions)
		return;
	for (uint32_t k = 0; k < sel->regions; k++)
		*span++ = (bp_ring_span){ .offset = s->lay.off[k], .size = s->lay.size[k] };
	for (uint32_t v = lead ? 1 : 0; v < sel->values; v++)
		for (uint32_t i = 0; i < n; i++) {
			const bp_ring_span *x = &s->vals[(size_t)v * n + i];

			*span++ = (bp_ring_span){ .offset = s->lay.voff[v] + x->offset,
						  .size = x->size };
		}
}

/*
 * The values that come from the dataset's columns, not its blocks:
 * scalars as dense arrays, str values end to end, and the keys.
 */
static void write_columns(bd_session *s, uint32_t n, uint8_t *payload)
{
	const bd_selection *sel = &s->sel;
	const bp_dataset *ds = s->dset->ds;

	for (uint32_t k = 0; k < sel->count; k++) {
		uint32_t f = sel->field[k], type = sel->schema->fields[f].type;
		size_t size = bp_field_scalar_size(type);
		uint8_t *dst = payload + s->lay.off[k];

		if (type == BP_FIELD_STR) {
			const bp_ring_span *x = s->vals + (size_t)sel->slot[k] * n;

			for (uint32_t i = 0; i < n; i++) {
				const uint8_t *data;
				uint64_t len;

				bp_dataset_field_str(ds, s->ids[i], f, &data, &len);
				memcpy(dst + x[i].offset, data, len);
			}
		} else if (size) {
			for (uint32_t i = 0; i < n; i++)
				bp_dataset_field_scalar(ds, s->ids[i], f, dst + (size_t)i * size);
		}
	}
	if (sel->keys)
		bd_batch_keys_copy(&s->keys, s->ids, n, s->vals + (size_t)(sel->values - 1) * n,
				   payload + s->lay.off[sel->count]);
}


/*
 * The next batch fails before anything is staged for it: it can never fit
 * the session's staging (the arena, or a device slot: a batch of a later
 * epoch of a shuffled schedule larger than the sizing saw,
 * bd_session_largest_batch), or its keys cannot be read. It is published
 * failed, with the reason in a record of its own, and nothing is read for
 * it. @return 1 planned, 0 no room for the reason yet.
 */
static int plan_failed(bd_session *s, uint64_t epoch, uint64_t batch, uint32_t n, int status,
		       const char *why)
{
	uint64_t rec = record_bytes(s, 0, 0), off;
	slot *sl;

	if (!bd_arena_alloc(&s->arena, rec, &off))
		return 0;
	sl = &s->slot[s->next_seq % s->slots];
	*sl = (slot){ .epoch = epoch, .batch = batch, .count = n, .rec_off = off, .rec_size = rec };
	fail_slot(s, sl, status, why);
	s->next_seq++;
	s->measured = 0;
	bd__session_record_final(s, sl);
	bd__session_publish(s);
	return 1;
}

/*
 * Find the next batch's samples and lay out its payload, once: a batch
 * that waits for room keeps what was found (its keys were read for it).
 * @return 0, or a key reader's error with why set.
 */
static int measure_batch(bd_session *s, uint64_t epoch, uint64_t batch, uint32_t n, char *why,
			 size_t whylen)
{
	int r;

	if (s->measured == s->next_seq + 1)
		return 0;
	locate(s, epoch, batch, n);
	/* An image is made from one block's bytes: a framed one fails its batch, naming it. */
	for (uint32_t i = 0; s->sel.image_slot >= 0 && i < n; i++)
		if (s->locs[i].frames > 1) {
			snprintf(why, whylen, "sample %" PRIu64 ": its %" PRIu64 " bytes are stored in "
				 "%u frames, and an image is decoded from one block: repack with a "
				 "--frame-size over the largest image", s->ids[i], s->locs[i].size,
				 s->locs[i].frames);
			return -EFBIG;
		}
	/* Sorted by id for the blocks, and for the keys: one decode a key block. */
	s->lay.nblocks = s->sel.bytes || s->sel.keys ? group_by_block(s, n) : 0;
	if (!s->sel.bytes)
		s->lay.nblocks = 0;
	if (s->sel.keys &&
	    (r = bd_batch_keys_read(&s->keys, s->ids, s->order, n,
				    s->vals + (size_t)(s->sel.values - 1) * n, why, whylen)) < 0)
		return r;
	s->lay.payload = place_regions(s, n);
	s->measured = s->next_seq + 1;
	return 0;
}

/*
 * Stage the next batch: its record's tables and column values now, its
 * bytes fields through a job the pipeline reads (none when it selected
 * no bytes field: the batch is final at once). @return 1 planned, 0 no
 * room, <0 error.
 */
int bd__session_plan_one(bd_session *s)
{
	uint64_t epoch, batch, payload, rec, off;
	uint32_t n;
	char why[BP_RING_REASON_MAX], a[32], b[32];
	bd_job *job = NULL;
	uint8_t *base;
	slot *sl;
	int r;

	bd_sampler_locate(&s->sampler, s->req.start_batch + s->next_seq * bd__session_stride(&s->req), &epoch,
			  &batch);
	n = bd_sampler_epoch_batch_len(&s->sampler, epoch, batch);
	if ((r = measure_batch(s, epoch, batch, n, why, sizeof(why))) < 0)
		return plan_failed(s, epoch, batch, n, r, why);
	payload = s->lay.payload;
	rec = record_bytes(s, n, payload);
	if (rec > s->arena.size || (s->gpu && payload > s->slot_bytes)) {
		snprintf(why, sizeof(why), "batch %" PRIu64 " of epoch %" PRIu64 " holds %s, more "
			 "than the %s the session stages a batch in; open with a smaller batch_size",
			 batch, epoch, bp_format_size(payload, a, sizeof(a)),
			 bp_format_size(s->gpu ? s->slot_bytes : s->arena.size, b, sizeof(b)));
		return plan_failed(s, epoch, batch, n, -E2BIG, why);
	}
	if (!bd_arena_alloc(&s->arena, rec, &off))
		return 0;
	base = s->data + s->arena_off + off;
	/* Out of memory closes the session: the record is never used. */
	s->plan_epoch = epoch;
	if (s->sel.bytes &&
	    (r = build_job(s, n, s->lay.nblocks, base, &job)) < 0)
		return r;
	sl = &s->slot[s->next_seq % s->slots];
	*sl = (slot){ .epoch = epoch, .batch = batch, .count = n, .rec_off = off, .rec_size = rec,
		      .head = table_bytes(s, n), .payload = payload };
	s->next_seq++;
	s->measured = 0;
	write_tables(s, n, base);
	write_columns(s, n, base + table_bytes(s, n));
	if (!job) {
		bd__session_record_final(s, sl);
		bd__session_publish(s);
		return 1;
	}
	s->inflight++;
	bd_pipeline_submit(s->env.pipeline, job);
	return 1;
}

