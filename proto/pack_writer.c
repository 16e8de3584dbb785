/* SPDX-License-Identifier: MIT */
/*
 * pack_writer.c - stream one .bpk shard to a file descriptor.
 *
 * Blocks are written as they arrive; only the index grows in memory
 * (72 bytes a sample at one sample per block), bounded by BP_PACK_MAX_INDEX.
 * The header is final from the first byte because everything it holds (the
 * dictionary) is known up front; everything learned while streaming goes
 * into the footer, including whether some sample came as several frames
 * (the footer's version). A framed sample's frames arrive one at a time,
 * as the caller compresses them; their entries stay in memory with the
 * rest of the index, so each gets its frame count once the last is in.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "pack_file.h"
#include "pack_writer.h"

struct bp_pack_writer {
	int fd;
	int error;              /* sticky: the first failed write, or -EALREADY once finished */
	bool has_dict;
	uint8_t header[BP_PACK_HEADER_SIZE];
	uint64_t offset;        /* bytes written */
	uint64_t raw_bytes, max_sample;
	uint8_t *blocks;        /* encoded block table */
	uint64_t block_count, blocks_cap;
	uint8_t *samples;       /* encoded sample table */
	uint64_t sample_count, samples_cap;
	/* The framed sample being written: its first frame's block, its size, bytes owed. */
	uint64_t frame_head, frame_size, frame_owed;
	bool framed;            /* some sample has several frames: footer version 2 */
};

/* Grow a table to hold `need` entries of `entry` bytes. */
static int table_reserve(uint8_t **table, uint64_t *cap, uint64_t need, size_t entry)
{
	uint64_t n = *cap ? *cap : 1024;
	uint8_t *t;

	if (need <= *cap)
		return 0;
	while (n < need)
		n *= 2;
	t = realloc(*table, n * entry);
	if (!t)
		return -ENOMEM;
	*table = t;
	*cap = n;
	return 0;
}

int bp_pack_writer_new(int fd, const void *dict, size_t dict_size, bp_pack_writer **ret)
{
	bp_pack_header h = { .version = BP_PACK_VERSION };
	bp_pack_writer *w;
	int r;

	if (dict_size > BP_PACK_MAX_DICT)
		return -E2BIG;
	if (fd < 0 || (dict_size && !dict))
		return -EINVAL;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->fd = fd;
	w->has_dict = dict_size != 0;

	if (dict_size) {
		h.dict_offset = BP_PACK_HEADER_SIZE;
		h.dict_size = dict_size;
		h.dict_hash = XXH3_64bits(dict, dict_size);
	}
	h.data_offset = BP_PACK_HEADER_SIZE + dict_size;
	bp_pack_header_encode(&h, w->header);

	r = bp_write_full(fd, w->header, sizeof(w->header));
	if (r == 0 && dict_size)
		r = bp_write_full(fd, dict, dict_size);
	if (r < 0) {
		free(w);
		return r;
	}
	w->offset = h.data_offset;
	*ret = w;
	return 0;
}

static int writer_fail(bp_pack_writer *w, int err)
{
	w->error = err;
	return err;
}

/*
 * Whether a block of raw_size bytes, stored as enc, bringing `samples` new
 * sample entries, fits the format and the tables. @return 0, -EINVAL,
 * -E2BIG, -ENOMEM; the writer is unchanged either way.
 */
static int block_room(bp_pack_writer *w, const bp_pack_encoded *enc, uint64_t raw_size,
		      size_t samples)
{
	uint64_t index_after;
	int r;

	if (raw_size > BP_PACK_MAX_BLOCK)
		return -E2BIG;
	if (enc->codec == BP_CODEC_RAW ? enc->stored_size != raw_size
				       : enc->stored_size == 0 || enc->stored_size >= raw_size)
		return -EINVAL;
	if (enc->codec > BP_CODEC_ZSTD_DICT || (enc->codec == BP_CODEC_ZSTD_DICT && !w->has_dict))
		return -EINVAL;
	index_after = (w->block_count + 1) * BP_PACK_BLOCK_ENTRY +
		      (w->sample_count + samples) * BP_PACK_SAMPLE_ENTRY;
	if (index_after > BP_PACK_MAX_INDEX)
		return -E2BIG;
	if ((r = table_reserve(&w->blocks, &w->blocks_cap, w->block_count + 1,
			       BP_PACK_BLOCK_ENTRY)) < 0 ||
	    (r = table_reserve(&w->samples, &w->samples_cap, w->sample_count + samples,
			       BP_PACK_SAMPLE_ENTRY)) < 0)
		return r;
	return 0;
}

/* Write enc's stored bytes and its block entry (frames 0 for now). @return 0 or sticky error. */
static int block_write(bp_pack_writer *w, const bp_pack_encoded *enc, uint64_t raw_size,
		       uint64_t first_sample)
{
	bp_pack_block b;
	int r = bp_write_full(w->fd, enc->stored, enc->stored_size);

	if (r < 0)
		return writer_fail(w, r);
	b = (bp_pack_block){
		.offset = w->offset,
		.stored_size = enc->stored_size,
		.raw_size = raw_size,
		.first_sample = first_sample,
		.stored_hash = enc->stored_hash,
		.raw_hash = enc->raw_hash,
		.codec = enc->codec,
	};
	bp_pack_block_entry_encode(&b, w->blocks + w->block_count * BP_PACK_BLOCK_ENTRY);
	w->block_count++;
	w->offset += enc->stored_size;
	w->raw_bytes += raw_size;
	return 0;
}

int bp_pack_writer_add(bp_pack_writer *w, const bp_pack_encoded *enc, uint64_t raw_size,
		       const uint64_t *sample_sizes, size_t n)
{
	uint64_t sum = 0;
	int r;

	if (w->error)
		return w->error;
	if (!enc || n == 0 || !sample_sizes || w->frame_owed)
		return -EINVAL;
	if (raw_size > BP_PACK_MAX_BLOCK)
		return -E2BIG;
	for (size_t i = 0; i < n; i++) {
		if (sample_sizes[i] > BP_PACK_MAX_SAMPLE)
			return -E2BIG;
		sum += sample_sizes[i];
		if (sum > raw_size)
			return -EINVAL;
	}
	if (sum != raw_size)
		return -EINVAL;
	r = block_room(w, enc, raw_size, n);
	if (r == 0)
		r = block_write(w, enc, raw_size, w->sample_count);
	if (r < 0)
		return r;

	sum = 0;
	for (size_t i = 0; i < n; i++) {
		bp_pack_sample_entry_encode(sum, sample_sizes[i],
					    w->samples + w->sample_count * BP_PACK_SAMPLE_ENTRY);
		w->sample_count++;
		sum += sample_sizes[i];
		if (sample_sizes[i] > w->max_sample)
			w->max_sample = sample_sizes[i];
	}
	return 0;
}

/*
 * The frames fields of the framed sample just completed: k, k - 1, ..., 1,
 * each in the last u32 of its entry (PACK.md, block table entry).
 */
static void number_frames(bp_pack_writer *w)
{
	uint32_t left = (uint32_t)(w->block_count - w->frame_head);

	for (uint64_t b = w->frame_head; b < w->block_count; b++, left--)
		bp_put_le32(w->blocks + (b + 1) * BP_PACK_BLOCK_ENTRY - 4, left);
}

int bp_pack_writer_add_frame(bp_pack_writer *w, const bp_pack_encoded *enc, uint64_t raw_size,
			     uint64_t sample_size)
{
	bool first = w->frame_owed == 0;
	uint64_t owed = first ? sample_size : w->frame_owed;
	int r;

	if (w->error)
		return w->error;
	if (sample_size > BP_PACK_MAX_SAMPLE)
		return -E2BIG;
	/* A frame but the last is at least the minimum; a first frame is never the last. */
	if (!enc || raw_size == 0 || raw_size > owed || (first && raw_size == owed) ||
	    (raw_size < owed && raw_size < BP_PACK_MIN_FRAME) ||
	    (!first && sample_size != w->frame_size))
		return -EINVAL;
	r = block_room(w, enc, raw_size, first ? 1 : 0);
	if (r == 0)
		r = block_write(w, enc, raw_size, first ? w->sample_count : w->sample_count - 1);
	if (r < 0)
		return r;
	if (first) {
		w->frame_head = w->block_count - 1;
		w->frame_size = sample_size;
		bp_pack_sample_entry_encode(0, sample_size,
					    w->samples + w->sample_count * BP_PACK_SAMPLE_ENTRY);
		w->sample_count++;
		if (sample_size > w->max_sample)
			w->max_sample = sample_size;
	}
	w->frame_owed = owed - raw_size;
	if (w->frame_owed == 0) {
		number_frames(w);
		w->framed = true;
	}
	return 0;
}

uint64_t bp_pack_writer_owed(const bp_pack_writer *w)
{
	return w->frame_owed;
}

uint64_t bp_pack_writer_offset(const bp_pack_writer *w)
{
	return w->offset;
}

uint64_t bp_pack_writer_samples(const bp_pack_writer *w)
{
	return w->sample_count;
}

int bp_pack_writer_finish(bp_pack_writer *w, bp_pack_footer *ret_footer)
{
	uint64_t bsize = w->block_count * BP_PACK_BLOCK_ENTRY;
	uint64_t ssize = w->sample_count * BP_PACK_SAMPLE_ENTRY;
	uint8_t footer[BP_PACK_FOOTER_SIZE];
	XXH3_state_t st;
	bp_pack_footer f;
	int r;

	if (w->error)
		return w->error;
	if (w->block_count == 0)
		return -ENODATA;
	if (w->frame_owed)
		return -EINVAL;

	/* The fingerprint hashes the index as written: block table, then sample table. */
	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, w->blocks, bsize);
	XXH3_64bits_update(&st, w->samples, ssize);
	f = (bp_pack_footer){
		.index_offset = w->offset,
		.index_size = bsize + ssize,
		.block_count = w->block_count,
		.sample_count = w->sample_count,
		.raw_bytes = w->raw_bytes,
		.max_sample = w->max_sample,
		.fingerprint = XXH3_64bits_digest(&st),
		.version = w->framed ? BP_PACK_VERSION_FRAMES : BP_PACK_VERSION,
	};
	bp_pack_footer_encode(&f, w->header, footer);

	if ((r = bp_write_full(w->fd, w->blocks, bsize)) < 0 ||
	    (r = bp_write_full(w->fd, w->samples, ssize)) < 0 ||
	    (r = bp_write_full(w->fd, footer, sizeof(footer))) < 0)
		return writer_fail(w, r);
	w->offset += bsize + ssize + sizeof(footer);
	w->error = -EALREADY;
	if (ret_footer) {
		f.checksum = bp_pack_checksum(w->header, footer);
		*ret_footer = f;
	}
	return 0;
}

void bp_pack_writer_free(bp_pack_writer *w)
{
	if (!w)
		return;
	free(w->blocks);
	free(w->samples);
	free(w);
}
