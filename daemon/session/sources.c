/* SPDX-License-Identifier: MIT */
/*
 * sources.c - a weighted mixture of token packs as one session's
 * samples (see sources.h).
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

/* The mixture's fields: its sources' (they agree: one OPEN), and which source. */
static void make_schema(bd_mix *x)
{
	const bp_schema *s = &x->src[0].seqs->schema;

	memcpy(x->field, s->fields, s->count * sizeof(*x->field));
	x->field[s->count] = (bp_field){ .type = BP_FIELD_INT64 };
	snprintf(x->field[s->count].name, sizeof(x->field[s->count].name), "source");
	x->schema = (bp_schema){ .count = s->count + 1, .fields = x->field };
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

/* Source i's passes: the session's shuffle over its sequences, the pass as the epoch. */
static int init_order(bd_source *src, const bp_msg_open *m, char *err, size_t errlen)
{
	bd_sampler_cfg sc = {
		.samples = src->seqs->count,
		.fingerprint = bp_dataset_fingerprint(src->dset->ds),
		.seed = m->seed,
		.rank = 0,
		.world = 1,
		.batch_size = 1,
		.mode = (enum bp_shuffle)m->shuffle,
		.chunk = src->seqs->chunk,
		.window = m->window,
	};

	if (bd_sampler_init(&src->order, &sc) < 0) {
		snprintf(err, errlen, "dataset %s: its %" PRIu64 " sequences cannot be shuffled",
			 src->dset->name, src->seqs->count);
		return -EINVAL;
	}
	return 0;
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
	for (uint32_t i = 0; i < x->n && r == 0; i++) {
		bd_source *src = &x->src[i];

		src->dset = d[i];
		src->seqs = q[i];
		src->first = x->ids;
		x->ids += q[i]->count;
		if (q[i]->max_pieces > x->max_pieces)
			x->max_pieces = q[i]->max_pieces;
		if (q[i]->max_frags > x->max_frags)
			x->max_frags = q[i]->max_frags;
		if (i)
			x->heap += q[i]->heap;
		r = init_order(src, m, err, errlen);
	}
	/* Held from here: a failure frees them with the mixture. */
	for (uint32_t i = 1; i < x->n; i++)
		d[i] = NULL, q[i] = NULL;
	if (r < 0) {
		bd_mix_free(x);
		return r;
	}
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
	uint64_t k = p / x->period * x->count[i] + x->rank[r], n = src->seqs->count;

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
