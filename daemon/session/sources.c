/* SPDX-License-Identifier: MIT */
/*
 * sources.c - a weighted mixture of datasets as one session's samples
 * (see sources.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "endian.h"
#include "sources.h"
#include "util.h"

/* A source's schema: its sequences', or its dataset's. */
static const bp_schema *source_schema(const bd_source *src)
{
	return src->seqs ? &src->seqs->schema : bp_dataset_schema(src->dset->ds);
}

/*
 * The mixture's fields: its sources' (checked equal), and which source. A
 * bytes field's fixed size stays only where every source has the same.
 * The fields' class names are source 0's (borrowed: it lives as long).
 */
static void make_schema(bd_mix *x)
{
	const bp_schema *s = source_schema(&x->src[0]);

	memcpy(x->field, s->fields, s->count * sizeof(*x->field));
	for (uint32_t i = 1; i < x->n; i++)
		for (uint32_t f = 0; f < s->count; f++)
			if (source_schema(&x->src[i])->fields[f].fixed_size != x->field[f].fixed_size)
				x->field[f].fixed_size = 0;
	x->field[s->count] = (bp_field){ .type = BP_FIELD_INT64 };
	snprintf(x->field[s->count].name, sizeof(x->field[s->count].name), "source");
	x->schema = (bp_schema){ .count = s->count + 1, .fields = x->field };
}

/* What a source's bytes fields hold, as a refusal names it. */
static const char *token_kind(const bd_source *src)
{
	bp_tokens t;

	if (bp_dataset_tokens(src->dset->ds, &t) < 0)
		return "no token ids";
	return t.width == 2 ? "uint16 token ids" : "uint32 token ids";
}

/*
 * Does source i's schema differ from source 0's? Fields agree in order,
 * names, types and an int64 field's class names (label 3 must mean one
 * class whatever the source). @return 0, or -EINVAL with err naming the
 * first difference.
 */
static int check_schema(const bd_mix *x, uint32_t i, char *err, size_t errlen)
{
	const bp_schema *a = source_schema(&x->src[0]), *b = source_schema(&x->src[i]);
	const char *an = x->src[0].dset->name, *bn = x->src[i].dset->name;

	if (i == 0) {
		if (bp_schema_find(a, "source") >= 0 || a->count >= BP_FIELD_MAX) {
			snprintf(err, errlen, "dataset %s: %s, and a mixture adds one (\"source\", "
				 "each sample's source): repack it %s", an,
				 a->count >= BP_FIELD_MAX ? "has the most fields a pack may"
				 : "has a field \"source\"", a->count >= BP_FIELD_MAX
				 ? "with a field fewer" : "with that field renamed");
			return -EINVAL;
		}
		return 0;
	}
	/* Documents of token ids as bytes: one width, or the bytes mean two things. */
	if (strcmp(token_kind(&x->src[0]), token_kind(&x->src[i])) != 0) {
		snprintf(err, errlen, "the sources of a mixture have one schema: %s holds %s, %s %s: "
			 "mix token packs of one id type, or read them with seq_len (ids then all "
			 "arrive as int32)", an, token_kind(&x->src[0]), bn, token_kind(&x->src[i]));
		return -EINVAL;
	}
	if (a->count != b->count) {
		snprintf(err, errlen, "the sources of a mixture have one schema: %s has %u fields, "
			 "%s %u (batchd-pack info lists them): mix datasets packed alike", an,
			 a->count, bn, b->count);
		return -EINVAL;
	}
	for (uint32_t f = 0; f < a->count; f++) {
		const bp_field *fa = &a->fields[f], *fb = &b->fields[f];
		bool classes = fa->class_count == fb->class_count;

		for (uint32_t c = 0; classes && c < fa->class_count; c++)
			classes = strcmp(fa->classes[c], fb->classes[c]) == 0;
		if (strcmp(fa->name, fb->name) == 0 && fa->type == fb->type && classes)
			continue;
		snprintf(err, errlen, "the sources of a mixture have one schema: field %u is %s (%s%s) "
			 "in %s but %s (%s%s) in %s: mix datasets packed alike%s", f, fa->name,
			 bp_field_type_name(fa->type), fa->class_count ? ", with classes" : "", an,
			 fb->name, bp_field_type_name(fb->type), fb->class_count ? ", with classes" : "",
			 bn, classes ? "" : " (their class names differ: pack them with one class "
			 "list)");
		return -EINVAL;
	}
	return 0;
}

/*
 * What READY names the mixture by: another source, order or weight is
 * another stream, and a resumed one must not take its positions for ours.
 */
static uint64_t fingerprint(const bd_mix *x)
{
	uint8_t buf[BP_MIX_SOURCES_MAX * 12];

	for (uint32_t i = 0; i < x->n; i++) {
		bp_put_le64(buf + 12 * i, bp_dataset_fingerprint(x->src[i].dset->ds));
		bp_put_le32(buf + 12 * i + 8, x->count[i]);
	}
	return XXH3_64bits(buf, 12 * (size_t)x->n);
}

/* Source i's passes: the session's shuffle over its items, the pass as the epoch. */
static int init_order(bd_source *src, const bp_msg_open *m, char *err, size_t errlen)
{
	uint64_t chunk = src->seqs ? src->seqs->chunk : src->dset->samples_per_block;
	bd_sampler_cfg sc = {
		.samples = src->count,
		.fingerprint = bp_dataset_fingerprint(src->dset->ds),
		.seed = m->seed,
		.rank = 0,
		.world = 1,
		.batch_size = 1,
		.mode = (enum bp_shuffle)m->shuffle,
		.chunk = chunk ? chunk : 1,
		.window = m->window,
	};

	if (bd_sampler_init(&src->order, &sc) < 0) {
		snprintf(err, errlen, "dataset %s: its %" PRIu64 " %s cannot be shuffled",
			 src->dset->name, src->count, src->seqs ? "sequences" : "samples");
		return -EINVAL;
	}
	return 0;
}

/* What the planner and the sizing need of source i, folded into the mixture's. */
static void add_source(bd_mix *x, const bd_source *src)
{
	const bp_dataset *ds = src->dset->ds;
	uint64_t largest = src->seqs ? (uint64_t)src->seqs->row * BD_SEQ_ID_BYTES
			   : bp_dataset_max_sample(ds);

	x->ids += src->count;
	x->blocks += bp_dataset_blocks(ds);
	if (largest > x->max_sample)
		x->max_sample = largest;
	if (src->seqs) {
		if (src->seqs->max_pieces > x->max_pieces)
			x->max_pieces = src->seqs->max_pieces;
		if (src->seqs->max_frags > x->max_frags)
			x->max_frags = src->seqs->max_frags;
		return;
	}
	if (bp_dataset_max_frames(ds) > x->max_frames)
		x->max_frames = bp_dataset_max_frames(ds);
}

int bd_mix_new(bd_dataset **d, bd_seqs **q, const bp_msg_open *m, bd_mix **ret, char *err,
	       size_t errlen)
{
	uint32_t counts[BP_MIX_SOURCES_MAX];
	bd_mix *x = bd_calloc(1, sizeof(*x));
	int r = 0;

	if (!x)
		return -ENOMEM;
	x->n = m->sources;
	for (uint32_t i = 0; i < x->n; i++) {
		counts[i] = m->source[i].count;
		x->count[i] = counts[i];
		x->period += counts[i];
	}
	x->slot = bd_calloc(x->period, sizeof(*x->slot));
	x->rank = bd_calloc(x->period, sizeof(*x->rank));
	if (!x->slot || !x->rank) {
		bd_mix_free(x);
		return -ENOMEM;
	}
	bp_mix_slots(counts, x->n, x->period, x->slot, x->rank);
	x->heap = sizeof(*x) + x->period * (sizeof(*x->slot) + sizeof(*x->rank)) +
		  3 * BD_MALLOC_OVERHEAD;
	for (uint32_t i = 0; i < x->n; i++) {
		bd_source *src = &x->src[i];

		src->dset = d[i];
		src->seqs = q ? q[i] : NULL;
		src->first = x->ids;
		src->count = q ? q[i]->count : bp_dataset_samples(d[i]->ds);
		if (i && q)
			x->heap += q[i]->heap;
		add_source(x, src);
	}
	/* Held from here: a failure frees them with the mixture. */
	for (uint32_t i = 1; i < x->n; i++) {
		d[i] = NULL;
		if (q)
			q[i] = NULL;
	}
	for (uint32_t i = 0; i < x->n && r == 0; i++) {
		r = q ? 0 : check_schema(x, i, err, errlen);
		if (r == 0)
			r = init_order(&x->src[i], m, err, errlen);
	}
	if (r < 0) {
		bd_mix_free(x);
		return r;
	}
	/* The mixed stream's mean sample: each source's mean, weighted by its count. */
	for (uint32_t i = 0; !q && i < x->n; i++) {
		const bp_dataset *ds = x->src[i].dset->ds;

		if (bp_dataset_samples(ds))
			x->mean_raw += bp_dataset_raw_bytes(ds) / bp_dataset_samples(ds) * x->count[i];
	}
	x->mean_raw /= x->period;
	x->epoch = m->epoch_samples ? m->epoch_samples : x->ids;
	x->fingerprint = fingerprint(x);
	make_schema(x);
	*ret = x;
	return 0;
}

void bd_mix_free(bd_mix *x)
{
	if (!x)
		return;
	for (uint32_t i = 1; i < x->n; i++) {
		bd_seqs_free(x->src[i].seqs);
		bd_dataset_put(x->src[i].dset);
	}
	free(x->slot);
	free(x->rank);
	free(x);
}

uint64_t bd_mix_id(const bd_mix *x, uint64_t epoch, uint64_t pos, uint32_t *ret_source)
{
	/* Positions past the epoch (the last step's padding) wrap, as a sampler's do. */
	uint64_t p = epoch * x->epoch + pos % x->epoch;
	uint32_t r = (uint32_t)(p % x->period), i = x->slot[r];
	const bd_source *src = &x->src[i];
	uint64_t k = p / x->period * x->count[i] + x->rank[r], n = src->count;

	*ret_source = i;
	return src->first + bd_sampler_order(&src->order, k / n, k % n);
}

uint32_t bd_mix_source_of(const bd_mix *x, uint64_t id, uint64_t *ret_local)
{
	uint32_t i = x->n - 1;

	while (i > 0 && id < x->src[i].first)
		i--;
	*ret_local = id - x->src[i].first;
	return i;
}

/* Source d's k-th largest sample (k from 0): past its k largest, no larger than the last. */
static uint64_t kth_largest(const bd_dataset *d, uint32_t k)
{
	if (d->topk == 0)
		return 0;
	if (k >= d->topk)
		k = d->topk - 1;
	return d->top_prefix[k + 1] - d->top_prefix[k];
}

uint64_t bd_mix_batch_bound(const bd_mix *x, uint32_t n)
{
	uint32_t next[BP_MIX_SOURCES_MAX] = { 0 };
	uint64_t sum = 0;

	/* The n largest of the sources' sorted lists, merged: n x sources steps at most. */
	for (uint32_t j = 0; j < n; j++) {
		uint32_t best = 0;

		for (uint32_t i = 1; i < x->n; i++)
			if (kth_largest(x->src[i].dset, next[i]) > kth_largest(x->src[best].dset, next[best]))
				best = i;
		sum += kth_largest(x->src[best].dset, next[best]);
		next[best]++;
	}
	return sum;
}
