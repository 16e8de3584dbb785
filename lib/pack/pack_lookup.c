/* SPDX-License-Identifier: MIT */
/*
 * pack_lookup.c - which block holds sample id, and where in it, in
 * constant time (PACK.md, "Reading"): the blocks that start a
 * sample as ranges of ids found through a group table, and a stride per
 * range when its samples have one size; a binary search over the block
 * table where no lookup was built.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pack_priv.h"

/* ---- constant-time lookup ------------------------------------------------ */

struct bp_pack_ranges {
	uint64_t *first;   /* count: first id of each range */
	uint32_t *group;   /* groups + 1: the range of id g << shift; the last is count - 1 */
	uint64_t count, groups;
	unsigned shift;
};

/* Marks a block whose samples do not all have one size. Samples are < 2^28 bytes. */
#define STRIDE_MIXED UINT32_MAX

/*
 * The ranges are the blocks that start a sample (all of them, without
 * framed samples): a framed sample is one range, found at its first frame.
 * With framed samples the stride table goes on with each range's block.
 * The ranges are held in place (no allocation of their own), which pays
 * for the flag.
 */
struct bp_pack_lookup {
	bp_pack_ranges blocks;
	uint32_t *stride;  /* per range: the size of each of its samples, or STRIDE_MIXED */
	bool framed;       /* stride[count + i]: range i's block */
};

/* Range i's block, for a lookup over an index with framed samples. */
static uint32_t *range_blocks(const bp_pack_lookup *lk)
{
	return lk->stride + lk->blocks.count;
}

/* Free what r holds, not r. */
static void ranges_release(bp_pack_ranges *r)
{
	free(r->first);
	free(r->group);
}

void bp_pack_ranges_free(bp_pack_ranges *r)
{
	if (!r)
		return;
	ranges_release(r);
	free(r);
}

/* Group size: the largest power of two not above the mean range length (>= 1). */
static unsigned group_shift(uint64_t count, uint64_t total)
{
	uint64_t mean = total / count;
	unsigned shift = 0;

	while (shift < 63 && mean >> (shift + 1))
		shift++;
	return shift;
}

/* One sweep over groups and ranges together: range r holds group g's first id. */
static void fill_groups(bp_pack_ranges *r)
{
	uint64_t at = 0;

	for (uint64_t g = 0; g < r->groups; g++) {
		uint64_t id = g << r->shift;

		while (at + 1 < r->count && r->first[at + 1] <= id)
			at++;
		r->group[g] = (uint32_t)at;
	}
	r->group[r->groups] = (uint32_t)(r->count - 1);
}

/* bp_pack_ranges_new into *r (zeroed); on failure r holds nothing. */
static int ranges_init(bp_pack_ranges *r, uint64_t count, uint64_t total,
		       uint64_t (*first_of)(const void *ctx, uint64_t i), const void *ctx)
{
	if (count == 0 || count > UINT32_MAX || count > total || !first_of)
		return -EINVAL;
	r->count = count;
	r->shift = group_shift(count, total);
	/* total / 2^shift < 2 * count <= 2^33: neither the count nor the sizes can wrap. */
	r->groups = ((total - 1) >> r->shift) + 1;
	r->first = malloc(count * sizeof(*r->first));
	r->group = malloc((r->groups + 1) * sizeof(*r->group));
	if (!r->first || !r->group) {
		ranges_release(r);
		return -ENOMEM;
	}
	for (uint64_t i = 0; i < count; i++) {
		r->first[i] = first_of(ctx, i);
		if (i == 0 ? r->first[i] != 0
			   : (r->first[i] <= r->first[i - 1] || r->first[i] >= total)) {
			ranges_release(r);
			return -EINVAL;
		}
	}
	fill_groups(r);
	return 0;
}

int bp_pack_ranges_new(uint64_t count, uint64_t total,
		       uint64_t (*first_of)(const void *ctx, uint64_t i), const void *ctx,
		       bp_pack_ranges **ret)
{
	bp_pack_ranges *r;
	int err;

	if (!ret)
		return -EINVAL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	err = ranges_init(r, count, total, first_of, ctx);
	if (err < 0) {
		free(r);
		return err;
	}
	*ret = r;
	return 0;
}

uint64_t bp_pack_ranges_find(const bp_pack_ranges *r, uint64_t id)
{
	uint64_t g = id >> r->shift;
	uint64_t lo = r->group[g], hi = r->group[g + 1]; /* answer in [lo, hi] */

	/* A group's first id is in range group[g] by construction. */
	if ((id & ((UINT64_C(1) << r->shift) - 1)) == 0)
		return lo;
	/* The last range starting at or before id; only ranges starting inside the group remain. */
	while (lo < hi) {
		uint64_t mid = hi - (hi - lo) / 2;

		if (r->first[mid] <= id)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

/* Heap bytes of r's tables. */
static size_t ranges_table_bytes(const bp_pack_ranges *r)
{
	return r->count * sizeof(*r->first) + (r->groups + 1) * sizeof(*r->group);
}

size_t bp_pack_ranges_bytes(const bp_pack_ranges *r)
{
	return sizeof(*r) + ranges_table_bytes(r);
}

static uint64_t block_first(const void *ctx, uint64_t i)
{
	return block_field(ctx, i, B_FIRST_SAMPLE);
}

/* The first blocks of samples, for the ranges of an index with framed samples. */
typedef struct starts {
	const bp_pack_index *idx;
	const uint32_t *block;
} starts;

static uint64_t start_first(const void *ctx, uint64_t i)
{
	const starts *st = ctx;

	return block_field(st->idx, st->block[i], B_FIRST_SAMPLE);
}

static uint32_t frames_of(const bp_pack_index *idx, uint64_t block)
{
	return bp_le32(idx->blocks + block * BP_PACK_BLOCK_ENTRY + B_FRAMES);
}

/* The one size every sample of block b has, or STRIDE_MIXED. */
static uint32_t block_stride(const bp_pack_index *idx, uint64_t first, uint64_t end)
{
	uint64_t off, size, other;

	bp_pack_index_sample_span(idx, first, &off, &size);
	for (uint64_t s = first + 1; s < end; s++) {
		bp_pack_index_sample_span(idx, s, &off, &other);
		if (other != size)
			return STRIDE_MIXED;
	}
	return (uint32_t)size;
}

void bp_pack_lookup_free(bp_pack_lookup *lk)
{
	if (!lk)
		return;
	ranges_release(&lk->blocks);
	free(lk->stride);
	free(lk);
}

/*
 * The blocks that start a sample, for an index with framed samples: every
 * block but a frame after a sample's first. @return how many, or 0 on -ENOMEM.
 */
static uint64_t list_starts(const bp_pack_index *idx, uint32_t **ret)
{
	uint64_t n = 0;
	uint32_t *block = malloc(idx->block_count * sizeof(*block));

	if (!block)
		return 0;
	for (uint64_t b = 0, k; b < idx->block_count; b += k ? k : 1) {
		k = frames_of(idx, b);
		block[n++] = (uint32_t)b; /* < 2^25 blocks in an index */
	}
	*ret = block;
	return n;
}

/* The ranges over the blocks, or over the sample-starting blocks `start` (count of them). */
static int make_ranges(const bp_pack_index *idx, const uint32_t *start, uint64_t count,
		       bp_pack_lookup *lk)
{
	starts st = { .idx = idx, .block = start };
	int r;

	/* A validated index has first ids as the ranges need them: only -ENOMEM is left. */
	r = start ? ranges_init(&lk->blocks, count, idx->sample_count, start_first, &st)
		  : ranges_init(&lk->blocks, count, idx->sample_count, block_first, idx);
	if (r < 0)
		return r;
	lk->framed = start != NULL;
	lk->stride = malloc((start ? 2 * count : count) * sizeof(*lk->stride));
	if (!lk->stride)
		return -ENOMEM;
	if (start)
		memcpy(range_blocks(lk), start, count * sizeof(*start));
	return 0;
}

int bp_pack_lookup_new(const bp_pack_index *idx, bp_pack_lookup **ret)
{
	bp_pack_lookup *lk = calloc(1, sizeof(*lk));
	uint64_t count = idx->block_count;
	uint32_t *start = NULL;
	int r = -ENOMEM;

	if (!lk)
		return -ENOMEM;
	if (idx->framed && !(count = list_starts(idx, &start)))
		goto fail;
	r = make_ranges(idx, start, count, lk);
	free(start);
	if (r < 0)
		goto fail;
	for (uint64_t i = 0; i < count; i++) {
		uint64_t end = i + 1 < count ? lk->blocks.first[i + 1] : idx->sample_count;

		lk->stride[i] = block_stride(idx, lk->blocks.first[i], end);
	}
	*ret = lk;
	return 0;
fail:
	bp_pack_lookup_free(lk);
	return r;
}

size_t bp_pack_lookup_bytes(const bp_pack_lookup *lk)
{
	return sizeof(*lk) + ranges_table_bytes(&lk->blocks) +
	       lk->blocks.count * sizeof(*lk->stride) * (lk->framed ? 2 : 1);
}

/*
 * Ranges over fewer blocks (the sample-starting ones of a framed index)
 * have a longer mean, so a group shift at least as large and no more
 * groups: counting every block bounds both tables.
 */
uint64_t bp_pack_lookup_bound(uint64_t blocks, uint64_t samples, bool framed)
{
	uint64_t groups;

	if (blocks == 0 || samples < blocks)
		return sizeof(bp_pack_lookup);
	groups = ((samples - 1) >> group_shift(blocks, samples)) + 1;
	return sizeof(bp_pack_lookup) + blocks * sizeof(uint64_t) + (groups + 1) * sizeof(uint32_t) +
	       blocks * sizeof(uint32_t) * (framed ? 2 : 1);
}

/*
 * The block holding id: the first block whose first sample is id (a framed
 * sample's first frame), else the last one starting before id, which then
 * holds whole samples (a framed sample's blocks hold no other).
 */
static uint64_t search_block(const bp_pack_index *idx, uint64_t id)
{
	uint64_t lo = 0, hi = idx->block_count; /* first block starting at or after id in [lo, hi] */

	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;

		if (block_field(idx, mid, B_FIRST_SAMPLE) < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < idx->block_count && block_field(idx, lo, B_FIRST_SAMPLE) == id)
		return lo;
	return lo - 1; /* block 0 starts at sample 0 <= id, so lo > 0 here */
}

void bp_pack_index_sample(const bp_pack_index *idx, uint64_t id, bp_pack_sample *ret)
{
	const bp_pack_lookup *lk = idx->lookup;
	uint64_t range, next;
	uint32_t stride, k;

	if (!lk) {
		ret->block = search_block(idx, id);
		bp_pack_index_sample_span(idx, id, &ret->offset, &ret->size);
		k = idx->framed ? frames_of(idx, ret->block) : 0;
		ret->frames = k ? k : 1;
		return;
	}
	range = bp_pack_ranges_find(&lk->blocks, id);
	ret->block = lk->framed ? range_blocks(lk)[range] : range;
	stride = lk->stride[range];
	if (stride == STRIDE_MIXED) {
		bp_pack_index_sample_span(idx, id, &ret->offset, &ret->size);
	} else {
		/* Samples tile their block (checked by the parse): equal sizes put each at k * size. */
		ret->offset = (id - lk->blocks.first[range]) * stride;
		ret->size = stride;
	}
	if (!lk->framed) {
		ret->frames = 1;
		return;
	}
	/* Ranges are the blocks that start samples: the next starts past this one's frames. */
	next = range + 1 < lk->blocks.count ? range_blocks(lk)[range + 1] : idx->block_count;
	ret->frames = (uint32_t)(next - ret->block);
}
