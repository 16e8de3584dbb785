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
	uint32_t named = s->sel.values - (s->sel.keys ? 1 : 0);

	bd_sampler_batch(&s->sampler, epoch, batch, s->ids);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t source;
		uint64_t local;
		const bd_dataset *d;
		const bp_dataset *ds;
		bp_pack_sample ps;
		size_t shard;

		/* A mixture's sampler gives positions of its stream: each becomes a session id. */
		if (s->mix)
			s->ids[i] = bd_mix_id(s->mix, epoch, s->ids[i], &source);
		d = bd__session_source(s, s->ids[i], &local, &source);
		ds = d->ds;
		/* Ids come from the sampler and are < samples: locate cannot fail. */
		bp_dataset_locate(ds, local, &shard, &ps);
		s->locs[i] = (loc){ .dset = d, .local = local, .source = source,
				    .shard = (uint32_t)shard, .frames = ps.frames, .block = ps.block,
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
					? ps.size : bd_selection_value_size(&s->sel, ds, v, local);
		}
	}
}

/* ---- token sessions (sequences.h) ------------------------------------------------------ */

/*
 * Row i of the batch being planned (s->ids[i], a session id): the
 * sequences it comes from, its source (0 but in a mixture) and its
 * sequence there.
 */
static const bd_seqs *row_seqs(const bd_session *s, uint32_t i, uint32_t *ret_source,
			       uint64_t *ret_local)
{
	*ret_local = s->ids[i];
	*ret_source = 0;
	if (!s->mix)
		return s->seqs;
	*ret_source = bd_mix_source_of(s->mix, s->ids[i], ret_local);
	return s->mix->src[*ret_source].seqs;
}

/* Where the fragments of the row being collected go. */
typedef struct frag_sink {
	bd_session *s;
	const bd_seqs *q;       /* the row's source's sequences */
	uint32_t source;
	uint64_t row_off;       /* the row's offset in the tokens region */
	uint32_t at;            /* the piece's first token in the row */
} frag_sink;

static void add_frag(void *ctx, const bd_seq_block *b, uint64_t src, uint64_t size,
		     uint32_t token)
{
	frag_sink *k = ctx;
	bd_session *s = k->s;
	uint32_t i = s->lay.nfrags++;

	s->frags[i] = (seq_frag){ .block = b, .src = src, .size = size, .source = k->source,
				  .dst = k->row_off + (uint64_t)(k->at + token) * BD_SEQ_ID_BYTES };
	/* Blocks of one source, in stream order, a source's after the one before. */
	s->fkey[i] = (uint64_t)k->source << 48 | (uint64_t)(b - k->q->block);
	s->forder[i] = i;
}

/*
 * Batch (epoch, batch)'s n sequences: their ids, their values' sizes, and
 * every block fragment their tokens come from, sorted by block. @return
 * the blocks they read.
 */
static uint32_t locate_sequences(bd_session *s, uint64_t epoch, uint64_t batch, uint32_t n)
{
	uint64_t row_bytes = (uint64_t)s->seqs->row * BD_SEQ_ID_BYTES;
	uint32_t blocks = 0;

	bd_sampler_batch(&s->sampler, epoch, batch, s->ids);
	/* A mixture's sampler gives positions of its stream: each becomes a session id. */
	for (uint32_t i = 0, src; s->mix && i < n; i++)
		s->ids[i] = bd_mix_id(s->mix, epoch, s->ids[i], &src);
	s->lay.nfrags = 0;
	for (uint32_t i = 0; i < n; i++) {
		frag_sink k = { .s = s, .row_off = i * row_bytes };
		uint64_t local;
		const bd_seqs *q = row_seqs(s, i, &k.source, &local);
		uint32_t np = bd_seqs_pieces(q, local, s->pcs);

		k.q = q;
		s->locs[i].source = k.source;   /* for write_source */
		for (uint32_t v = 0; v < s->sel.values; v++) {
			const bp_field *f = &s->sel.schema->fields[s->sel.vfield[v]];

			s->vals[(size_t)v * n + i].size = f->fixed_size ? f->fixed_size
				: bd_seqs_boundaries(q, s->pcs, np, i, NULL) * BD_SEQ_ID_BYTES;
		}
		for (uint32_t p = 0; p < np; p++) {
			k.at = s->pcs[p].at;
			bd_seqs_fragments(q, &s->pcs[p], add_frag, &k);
		}
	}
	bd_sort_by_key(s->forder, s->fkey, s->lay.nfrags);
	for (uint32_t i = 0; i < s->lay.nfrags; i++)
		if (!i || s->fkey[s->forder[i]] != s->fkey[s->forder[i - 1]])
			blocks++;
	return blocks;
}

/* The job reading a token batch's fragments into its rows, block by block. @return 0 or -ENOMEM. */
static int build_sequences_job(bd_session *s, uint32_t nblocks, uint8_t *tokens, bd_job **ret)
{
	bd_job *job;
	int r = bd_job_new(s, s->uid, bd__session_on_job_event, s->next_seq, nblocks,
			   s->lay.nfrags, &job);

	if (r < 0)
		return r;
	for (uint32_t i = 0; i < s->lay.nfrags; i++) {
		const seq_frag *f = &s->frags[s->forder[i]];
		const bd_dataset *d = s->mix ? s->mix->src[f->source].dset : s->dset;
		uint32_t width = s->mix ? s->mix->src[f->source].seqs->width : s->seqs->width;

		if (!i || s->fkey[s->forder[i]] != s->fkey[s->forder[i - 1]])
			bd_job_add_block(job, d, f->block->shard, f->block->block);
		bd_job_add_tokens(job, f->src, f->size, tokens + f->dst, width);
	}
	*ret = job;
	return 0;
}

/*
 * A mixture's `source` column (sources.h), where selected: each sample's
 * source index, as locate or locate_sequences found it (locs[i].source).
 */
static void write_source(bd_session *s, uint32_t n, uint8_t *payload)
{
	for (uint32_t k = 0; s->mix && k < s->sel.count; k++) {
		int64_t *col = (int64_t *)(void *)(payload + s->lay.off[k]);

		if (s->sel.field[k] != BD_MIX_SOURCE_FIELD(s->mix))
			continue;
		for (uint32_t i = 0; i < n; i++)
			col[i] = s->locs[i].source;
	}
}

/*
 * What a packed batch carries besides its tokens, written here: each
 * row's padding (the pad id), its position_ids and its cu_seqlens
 * (sequences.h). Windows carry tokens only.
 */
static void write_sequences(bd_session *s, uint32_t n, uint8_t *payload)
{
	const bd_seqs *q = s->seqs;
	uint64_t row_bytes = (uint64_t)q->row * BD_SEQ_ID_BYTES;
	int32_t pos_slot = -1, cu_slot = -1;

	write_source(s, n, payload);
	if (q->mode != BP_SEQUENCES_PACKED)
		return;
	/* Schema fields 1 and 2 (sequences.c), where selected; tokens is the lead, at 0. */
	for (uint32_t v = 1; v < s->sel.values; v++)
		*(s->sel.vfield[v] == 1 ? &pos_slot : &cu_slot) = (int32_t)v;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t local;
		uint32_t src;
		const bd_seqs *rq = row_seqs(s, i, &src, &local);
		uint32_t np = bd_seqs_pieces(rq, local, s->pcs), used = 0;
		int32_t *tok = (int32_t *)(void *)(payload + i * row_bytes);

		for (uint32_t p = 0; p < np; p++)
			used += s->pcs[p].len;
		for (uint32_t j = used; j < q->row; j++)
			tok[j] = rq->pad;
		if (pos_slot > 0)
			bd_seqs_positions(q, s->pcs, np, (int32_t *)(void *)(payload +
					  s->lay.voff[pos_slot] + i * row_bytes));
		if (cu_slot > 0)
			bd_seqs_boundaries(q, s->pcs, np, i, (int32_t *)(void *)(payload +
					   s->lay.voff[cu_slot] +
					   s->vals[(size_t)cu_slot * n + i].offset));
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
	return a->dset == b->dset && a->shard == b->shard && a->block == b->block;
}

/*
 * Order the samples by where they are read from. Global ids run through
 * the shards, their blocks and each block's bytes in order, so sorting by
 * id is sorting by (shard, block, offset), on one integer key (a
 * mixture's by (source, shard, block, offset): sources.h). Batches of
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
			bp_dataset_field_span(s->locs[i].dset->ds, s->locs[i].local, f, &so, &ss);
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
	const bp_pack_index *idx = &bp_dataset_shard(l->dset->ds, l->shard)->index;
	uint64_t at = 0;

	for (uint32_t f = 0; f < l->frames; f++) {
		bp_pack_block b;

		bp_pack_index_block(idx, l->block + f, &b);
		if (sample_pieces(s, NULL, o[0], n, at, at, at + b.raw_size, true, payload)) {
			bd_job_add_block(job, l->dset, l->shard, l->block + f);
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
		bd_job_add_block(job, l->dset, l->shard, l->block);
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
 * scalars as dense arrays, str values end to end, a mixture's source
 * indexes (sources.h), and the keys.
 */
static void write_columns(bd_session *s, uint32_t n, uint8_t *payload)
{
	const bd_selection *sel = &s->sel;

	for (uint32_t k = 0; k < sel->count; k++) {
		uint32_t f = sel->field[k], type = sel->schema->fields[f].type;
		size_t size = bp_field_scalar_size(type);
		uint8_t *dst = payload + s->lay.off[k];

		if (s->mix && f == BD_MIX_SOURCE_FIELD(s->mix))
			continue;       /* write_source's */
		if (type == BP_FIELD_STR) {
			const bp_ring_span *x = s->vals + (size_t)sel->slot[k] * n;

			for (uint32_t i = 0; i < n; i++) {
				const uint8_t *data;
				uint64_t len;

				bp_dataset_field_str(s->locs[i].dset->ds, s->locs[i].local, f, &data,
						     &len);
				memcpy(dst + x[i].offset, data, len);
			}
		} else if (size) {
			for (uint32_t i = 0; i < n; i++)
				bp_dataset_field_scalar(s->locs[i].dset->ds, s->locs[i].local, f,
							dst + (size_t)i * size);
		}
	}
	write_source(s, n, payload);
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
	if (s->seqs) {
		s->lay.nblocks = locate_sequences(s, epoch, batch, n);
		s->lay.payload = place_regions(s, n);
		s->measured = s->next_seq + 1;
		return 0;
	}
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
	r = 0;
	if (s->seqs)
		r = build_sequences_job(s, s->lay.nblocks, base + table_bytes(s, n), &job);
	else if (s->sel.bytes)
		r = build_job(s, n, s->lay.nblocks, base, &job);
	if (r < 0)
		return r;
	sl = &s->slot[s->next_seq % s->slots];
	*sl = (slot){ .epoch = epoch, .batch = batch, .count = n, .rec_off = off, .rec_size = rec,
		      .head = table_bytes(s, n), .payload = payload };
	s->next_seq++;
	s->measured = 0;
	write_tables(s, n, base);
	if (s->seqs)
		write_sequences(s, n, base + table_bytes(s, n));
	else
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

