/* SPDX-License-Identifier: MIT */
/*
 * pack.c - encode, decode and validate the .bpk pack format (PACK.md).
 *
 * The rule of this file: no field read from a buffer is used before it is
 * checked. Decoders either accept the whole structure or reject it with a
 * fault naming the field; accessors on a validated index have no error
 * paths because bp_pack_index_parse() proved every entry in one pass.
 * Offsets are summed only after checking the sum cannot wrap.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define ZSTD_STATIC_LINKING_ONLY /* ZSTD_getFrameHeader */
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "pack_fields.h"
#include "pack_priv.h"

static int fail(bp_pack_fault *fault, int err, const char *what, uint64_t offset,
		int64_t block)
{
	if (fault) {
		fault->what = what;
		fault->offset = offset;
		fault->block = block;
	}
	return err;
}

/* ---- header ------------------------------------------------------------ */

void bp_pack_header_encode(const bp_pack_header *h, uint8_t out[BP_PACK_HEADER_SIZE])
{
	memset(out, 0, BP_PACK_HEADER_SIZE);
	memcpy(out + H_MAGIC, BP_PACK_MAGIC, 8);
	bp_put_le32(out + H_VERSION, h->version);
	bp_put_le32(out + H_SIZE, BP_PACK_HEADER_SIZE);
	bp_put_le64(out + H_DICT_OFFSET, h->dict_offset);
	bp_put_le64(out + H_DICT_SIZE, h->dict_size);
	bp_put_le64(out + H_DICT_HASH, h->dict_hash);
	bp_put_le64(out + H_DATA_OFFSET, h->data_offset);
}

int bp_pack_header_decode(const uint8_t *buf, size_t len, bp_pack_header *ret,
			  bp_pack_fault *fault)
{
	bp_pack_header h;

	if (!buf || len < BP_PACK_HEADER_SIZE)
		return fail(fault, -EBADMSG, "truncated header", 0, -1);
	if (memcmp(buf + H_MAGIC, BP_PACK_MAGIC, 8) != 0)
		return fail(fault, -EBADMSG, "not a batchd pack (bad magic)", H_MAGIC, -1);

	h.version = bp_le32(buf + H_VERSION);
	if (h.version != BP_PACK_VERSION)
		return fail(fault, -ENOTSUP, "unsupported pack version", H_VERSION, -1);
	if (bp_le32(buf + H_SIZE) != BP_PACK_HEADER_SIZE)
		return fail(fault, -EBADMSG, "bad header size", H_SIZE, -1);
	if (bp_le64(buf + H_FLAGS) != 0)
		return fail(fault, -ENOTSUP, "unknown header flags", H_FLAGS, -1);
	if (bp_le64(buf + H_RESERVED) != 0)
		return fail(fault, -EBADMSG, "reserved header field is not zero", H_RESERVED, -1);

	h.dict_offset = bp_le64(buf + H_DICT_OFFSET);
	h.dict_size = bp_le64(buf + H_DICT_SIZE);
	h.dict_hash = bp_le64(buf + H_DICT_HASH);
	h.data_offset = bp_le64(buf + H_DATA_OFFSET);

	if (h.dict_size > BP_PACK_MAX_DICT)
		return fail(fault, -E2BIG, "dictionary over the size limit", H_DICT_SIZE, -1);
	if (h.dict_size == 0 && (h.dict_offset != 0 || h.dict_hash != 0))
		return fail(fault, -EBADMSG, "dictionary fields set without a dictionary",
			    H_DICT_OFFSET, -1);
	if (h.dict_size != 0 && h.dict_offset != BP_PACK_HEADER_SIZE)
		return fail(fault, -EBADMSG, "dictionary does not follow the header",
			    H_DICT_OFFSET, -1);
	if (h.data_offset != BP_PACK_HEADER_SIZE + h.dict_size)
		return fail(fault, -EBADMSG, "data does not follow the dictionary",
			    H_DATA_OFFSET, -1);

	*ret = h;
	return 0;
}

/* ---- footer ------------------------------------------------------------ */

uint64_t bp_pack_checksum(const uint8_t header[BP_PACK_HEADER_SIZE],
			  const uint8_t footer[BP_PACK_FOOTER_SIZE])
{
	uint8_t covered[BP_PACK_HEADER_SIZE + F_CHECKSUM];

	memcpy(covered, header, BP_PACK_HEADER_SIZE);
	memcpy(covered + BP_PACK_HEADER_SIZE, footer, F_CHECKSUM);
	return XXH3_64bits_withSeed(covered, sizeof(covered), bp_le64(footer + F_FINGERPRINT));
}

void bp_pack_footer_encode(const bp_pack_footer *f, const uint8_t header[BP_PACK_HEADER_SIZE],
			   uint8_t out[BP_PACK_FOOTER_SIZE])
{
	bp_put_le64(out + F_INDEX_OFFSET, f->index_offset);
	bp_put_le64(out + F_INDEX_SIZE, f->index_size);
	bp_put_le64(out + F_BLOCK_COUNT, f->block_count);
	bp_put_le64(out + F_SAMPLE_COUNT, f->sample_count);
	bp_put_le64(out + F_RAW_BYTES, f->raw_bytes);
	bp_put_le64(out + F_MAX_SAMPLE, f->max_sample);
	bp_put_le64(out + F_FINGERPRINT, f->fingerprint);
	bp_put_le32(out + F_VERSION, f->version ? f->version : BP_PACK_VERSION);
	bp_put_le32(out + F_SIZE, BP_PACK_FOOTER_SIZE);
	memcpy(out + F_MAGIC, BP_PACK_FOOTER_MAGIC, 8);
	bp_put_le64(out + F_CHECKSUM, bp_pack_checksum(header, out));
}

int bp_pack_footer_decode(const uint8_t buf[BP_PACK_FOOTER_SIZE], uint64_t file_size,
			  const bp_pack_header *h, bp_pack_footer *ret,
			  bp_pack_fault *fault)
{
	bp_pack_footer f;
	uint64_t at, index_room, tables = 0;

	if (!buf || !h || file_size < h->data_offset ||
	    file_size - h->data_offset < BP_PACK_FOOTER_SIZE)
		return fail(fault, -EBADMSG, "truncated pack (no room for a footer)", file_size, -1);
	at = file_size - BP_PACK_FOOTER_SIZE;
	if (memcmp(buf + F_MAGIC, BP_PACK_FOOTER_MAGIC, 8) != 0)
		return fail(fault, -EBADMSG, "bad footer magic (truncated or not a pack)",
			    at + F_MAGIC, -1);
	f.version = bp_le32(buf + F_VERSION);
	if (f.version != BP_PACK_VERSION && f.version != BP_PACK_VERSION_FRAMES &&
	    f.version != BP_PACK_VERSION_SECTIONS)
		return fail(fault, -ENOTSUP, "unsupported footer version", at + F_VERSION, -1);
	if (bp_le32(buf + F_SIZE) != BP_PACK_FOOTER_SIZE)
		return fail(fault, -EBADMSG, "bad footer size", at + F_SIZE, -1);

	f.index_offset = bp_le64(buf + F_INDEX_OFFSET);
	f.index_size = bp_le64(buf + F_INDEX_SIZE);
	f.block_count = bp_le64(buf + F_BLOCK_COUNT);
	f.sample_count = bp_le64(buf + F_SAMPLE_COUNT);
	f.raw_bytes = bp_le64(buf + F_RAW_BYTES);
	f.max_sample = bp_le64(buf + F_MAX_SAMPLE);
	f.fingerprint = bp_le64(buf + F_FINGERPRINT);
	f.checksum = bp_le64(buf + F_CHECKSUM);

	/* The index sits exactly between the data region and the footer. */
	if (f.index_offset < h->data_offset || f.index_offset > at)
		return fail(fault, -EBADMSG, "index offset outside the file",
			    at + F_INDEX_OFFSET, -1);
	index_room = at - f.index_offset;
	if (f.index_size != index_room)
		return fail(fault, -EBADMSG, "index size does not reach the footer",
			    at + F_INDEX_SIZE, -1);
	if (f.index_size > BP_PACK_MAX_INDEX)
		return fail(fault, -E2BIG, "index over the size limit", at + F_INDEX_SIZE, -1);
	if (f.sample_count == 0 || f.block_count == 0)
		return fail(fault, -EBADMSG, "pack holds no samples", at + F_SAMPLE_COUNT, -1);
	/* Only frames let blocks outnumber samples. */
	if (f.version == BP_PACK_VERSION && f.block_count > f.sample_count)
		return fail(fault, -EBADMSG, "more blocks than samples", at + F_BLOCK_COUNT, -1);
	/* Both counts are bounded by the index limit first, so the products cannot wrap. */
	if (f.block_count > BP_PACK_MAX_INDEX / BP_PACK_BLOCK_ENTRY ||
	    f.sample_count > BP_PACK_MAX_INDEX / BP_PACK_SAMPLE_ENTRY ||
	    (tables = f.block_count * BP_PACK_BLOCK_ENTRY +
		      f.sample_count * BP_PACK_SAMPLE_ENTRY) > f.index_size ||
	    (f.version != BP_PACK_VERSION_SECTIONS && tables != f.index_size))
		return fail(fault, -EBADMSG, "index size does not match the counts",
			    at + F_BLOCK_COUNT, -1);
	/* Version 3: the rest of the index is the section table, at least one entry. */
	f.section_count = (f.index_size - tables) / BP_PACK_SECTION_ENTRY;
	if (f.version == BP_PACK_VERSION_SECTIONS &&
	    (f.section_count == 0 || (f.index_size - tables) % BP_PACK_SECTION_ENTRY != 0))
		return fail(fault, -EBADMSG, "index size leaves no whole section table",
			    at + F_INDEX_SIZE, -1);
	if (f.max_sample > BP_PACK_MAX_SAMPLE)
		return fail(fault, -E2BIG, "largest sample over the size limit",
			    at + F_MAX_SAMPLE, -1);

	*ret = f;
	return 0;
}

/* ---- index ------------------------------------------------------------- */


void bp_pack_index_block(const bp_pack_index *idx, uint64_t i, bp_pack_block *ret)
{
	const uint8_t *e = idx->blocks + i * BP_PACK_BLOCK_ENTRY;
	uint64_t next = i + 1 < idx->block_count ? block_field(idx, i + 1, B_FIRST_SAMPLE)
						 : idx->sample_count;

	ret->offset = bp_le64(e + B_OFFSET);
	ret->stored_size = bp_le64(e + B_STORED_SIZE);
	ret->raw_size = bp_le64(e + B_RAW_SIZE);
	ret->first_sample = bp_le64(e + B_FIRST_SAMPLE);
	ret->stored_hash = bp_le64(e + B_STORED_HASH);
	ret->raw_hash = bp_le64(e + B_RAW_HASH);
	ret->codec = bp_le32(e + B_CODEC);
	ret->frames = bp_le32(e + B_FRAMES);
	/* A frame holds one sample or part of one; the frames but the last share its id. */
	ret->sample_count = ret->frames ? 1 : next - ret->first_sample;
}

void bp_pack_index_sample_span(const bp_pack_index *idx, uint64_t id,
			       uint64_t *ret_offset, uint64_t *ret_size)
{
	const uint8_t *e = idx->samples + id * BP_PACK_SAMPLE_ENTRY;

	*ret_offset = bp_le64(e);
	*ret_size = bp_le64(e + 8);
}

/* What the blocks before the one being checked leave it to follow. */
typedef struct chain {
	uint64_t offset;    /* where the block must start */
	uint64_t first;     /* the previous block's first sample */
	uint32_t left;      /* frames still owed to the framed sample being read; 0 when none */
	bool framed;        /* the previous block was a framed sample's last frame */
} chain;

/*
 * A block's frames field against the chain: inside a framed sample, the
 * next frame of the same sample; outside, a block of whole samples (0) or
 * the first of at least 2 frames that fit in the table. Every frame but
 * the last holds at least BP_PACK_MIN_FRAME bytes, the last at least one.
 */
static int check_frames(const bp_pack_footer *f, const bp_pack_block *b, const chain *c,
			uint64_t i, uint64_t at, bp_pack_fault *fault)
{
	int64_t bi = (int64_t)i;

	if (f->version == BP_PACK_VERSION && b->frames != 0)
		return fail(fault, -EBADMSG, "reserved block field is not zero", at + B_FRAMES, bi);
	if (c->left) {
		if (b->frames != c->left)
			return fail(fault, -EBADMSG, "framed sample's frames out of sequence",
				    at + B_FRAMES, bi);
		if (b->first_sample != c->first)
			return fail(fault, -EBADMSG, "frame does not continue the previous sample",
				    at + B_FIRST_SAMPLE, bi);
	} else if (b->frames == 1) {
		return fail(fault, -EBADMSG, "framed sample of one frame", at + B_FRAMES, bi);
	} else if (b->frames > f->block_count - i) {
		return fail(fault, -EBADMSG, "framed sample runs past the last block",
			    at + B_FRAMES, bi);
	}
	if (b->frames > 1 && b->raw_size < BP_PACK_MIN_FRAME)
		return fail(fault, -EBADMSG, "frame under the minimum frame size", at + B_RAW_SIZE, bi);
	if (b->frames == 1 && b->raw_size == 0)
		return fail(fault, -EBADMSG, "empty frame", at + B_RAW_SIZE, bi);
	return 0;
}

static int check_block_entry(const bp_pack_header *h, const bp_pack_footer *f,
			     const bp_pack_block *b, uint64_t i, const chain *c,
			     uint64_t data_end, bp_pack_fault *fault)
{
	uint64_t at = f->index_offset + i * BP_PACK_BLOCK_ENTRY;
	int64_t bi = (int64_t)i;
	int r;

	if (b->offset != c->offset)
		return fail(fault, -EBADMSG, "block does not start where the previous one ends",
			    at + B_OFFSET, bi);
	if (b->offset > data_end || b->stored_size > data_end - b->offset)
		return fail(fault, -EBADMSG, "block runs past the data region",
			    at + B_STORED_SIZE, bi);
	if (b->raw_size > BP_PACK_MAX_BLOCK)
		return fail(fault, -E2BIG, "block over the size limit", at + B_RAW_SIZE, bi);
	r = check_frames(f, b, c, i, at, fault);
	if (r < 0)
		return r;

	switch (b->codec) {
	case BP_CODEC_RAW:
		if (b->stored_size != b->raw_size || b->stored_hash != b->raw_hash)
			return fail(fault, -EBADMSG, "raw block whose stored and raw bytes differ",
				    at + B_STORED_SIZE, bi);
		break;
	case BP_CODEC_ZSTD_DICT:
		if (h->dict_size == 0)
			return fail(fault, -EBADMSG, "block needs a dictionary the pack lacks",
				    at + B_CODEC, bi);
		/* fall through */
	case BP_CODEC_ZSTD:
		/* Writers store raw whenever compression does not shrink a block. */
		if (b->stored_size == 0 || b->stored_size >= b->raw_size)
			return fail(fault, -EBADMSG, "compressed block not smaller than its raw size",
				    at + B_STORED_SIZE, bi);
		break;
	default:
		return fail(fault, -ENOTSUP, "unknown block codec", at + B_CODEC, bi);
	}

	if (c->left)
		return 0; /* a frame after the first: its sample was placed by that one */
	if (i == 0 ? b->first_sample != 0 : b->first_sample <= c->first)
		return fail(fault, -EBADMSG, "block sample ranges out of order",
			    at + B_FIRST_SAMPLE, bi);
	/* A framed sample's last frame holds that sample only. */
	if (c->framed && b->first_sample != c->first + 1)
		return fail(fault, -EBADMSG, "framed sample's last frame holds other samples",
			    at + B_FIRST_SAMPLE, bi);
	if (b->first_sample >= f->sample_count)
		return fail(fault, -EBADMSG, "block starts past the last sample",
			    at + B_FIRST_SAMPLE, bi);
	return 0;
}

/* Samples [b->first_sample, +count) must lie end to end and fill the block. */
static int check_block_samples(const bp_pack_footer *f, const bp_pack_index *idx,
			       const bp_pack_block *b, uint64_t i, uint64_t *max_sample,
			       bp_pack_fault *fault)
{
	uint64_t table = f->index_offset + f->block_count * BP_PACK_BLOCK_ENTRY;
	uint64_t fill = 0;

	for (uint64_t s = b->first_sample; s < b->first_sample + b->sample_count; s++) {
		uint64_t off, size, at = table + s * BP_PACK_SAMPLE_ENTRY;

		bp_pack_index_sample_span(idx, s, &off, &size);
		if (off != fill)
			return fail(fault, -EBADMSG, "sample does not follow the previous one",
				    at, (int64_t)i);
		if (size > BP_PACK_MAX_SAMPLE)
			return fail(fault, -E2BIG, "sample over the size limit", at + 8, (int64_t)i);
		if (size > b->raw_size - fill)
			return fail(fault, -EBADMSG, "sample runs past its block", at + 8, (int64_t)i);
		fill += size;
		if (size > *max_sample)
			*max_sample = size;
	}
	if (fill != b->raw_size)
		return fail(fault, -EBADMSG, "samples do not fill their block",
			    f->index_offset + i * BP_PACK_BLOCK_ENTRY + B_RAW_SIZE, (int64_t)i);
	return 0;
}

/*
 * The framed sample whose first frame is block i: at offset 0, as large as
 * its frames together, within the sample limit. @return its raw bytes.
 */
static int check_framed_sample(const bp_pack_footer *f, const bp_pack_index *idx,
			       const bp_pack_block *b, uint64_t i, uint64_t *max_sample,
			       uint64_t *ret_raw, bp_pack_fault *fault)
{
	uint64_t at = f->index_offset + f->block_count * BP_PACK_BLOCK_ENTRY +
		      b->first_sample * BP_PACK_SAMPLE_ENTRY;
	uint64_t off, size, sum = 0;

	/* frames < 2^25 blocks of < 2^28 bytes each: the sum cannot wrap. */
	for (uint64_t k = 0; k < b->frames; k++)
		sum += bp_le64(idx->blocks + (i + k) * BP_PACK_BLOCK_ENTRY + B_RAW_SIZE);
	bp_pack_index_sample_span(idx, b->first_sample, &off, &size);
	if (off != 0)
		return fail(fault, -EBADMSG, "framed sample does not start its first frame", at,
			    (int64_t)i);
	if (size > BP_PACK_MAX_SAMPLE)
		return fail(fault, -E2BIG, "sample over the size limit", at + 8, (int64_t)i);
	if (size != sum)
		return fail(fault, -EBADMSG, "framed sample's size is not the sum of its frames",
			    at + 8, (int64_t)i);
	if (size > *max_sample)
		*max_sample = size;
	*ret_raw = sum;
	return 0;
}

/* Every block entry, in order: placement, sizes, codecs, sample ranges, frame chains. */
static int check_blocks(const bp_pack_header *h, const bp_pack_footer *f,
			const bp_pack_index *idx, bp_pack_fault *fault)
{
	chain c = { .offset = h->data_offset };
	int r;

	for (uint64_t i = 0; i < idx->block_count; i++) {
		bp_pack_block b;

		/* first_sample is checked before sample_count (derived from it) is used. */
		bp_pack_index_block(idx, i, &b);
		r = check_block_entry(h, f, &b, i, &c, idx->data_end, fault);
		if (r < 0)
			return r;
		c.offset = b.offset + b.stored_size;
		c.first = b.first_sample;
		c.framed = b.frames == 1;
		c.left = b.frames > 1 ? b.frames - 1 : 0;
	}
	if (c.offset != idx->data_end)
		return fail(fault, -EBADMSG, idx->section_count
				     ? "blocks do not reach the first section"
				     : "blocks do not reach the index", idx->data_end, -1);
	if (c.framed && c.first + 1 != f->sample_count)
		return fail(fault, -EBADMSG, "framed sample's last frame holds other samples",
			    f->index_offset + (idx->block_count - 1) * BP_PACK_BLOCK_ENTRY +
				    B_FIRST_SAMPLE, (int64_t)idx->block_count - 1);
	return 0;
}

/* Every sample, block by block (a framed sample at its first frame); totals. */
static int check_samples(const bp_pack_footer *f, bp_pack_index *idx, bp_pack_fault *fault)
{
	uint64_t footer_at = f->index_offset + f->index_size;
	uint64_t raw_total = 0, max_sample = 0, raw;
	int r;

	/* Every block's range is now known to be ordered, non-empty and in bounds. */
	for (uint64_t i = 0; i < idx->block_count; i++) {
		bp_pack_block b;

		bp_pack_index_block(idx, i, &b);
		if (b.frames) {
			r = check_framed_sample(f, idx, &b, i, &max_sample, &raw, fault);
			idx->framed++;
			if (b.frames > idx->max_frames)
				idx->max_frames = b.frames;
			i += b.frames - 1;
		} else {
			r = check_block_samples(f, idx, &b, i, &max_sample, fault);
			raw = b.raw_size;
		}
		if (r < 0)
			return r;
		raw_total += raw; /* < 2^28 bytes * 2^25 blocks: cannot wrap */
	}
	if (raw_total != f->raw_bytes)
		return fail(fault, -EBADMSG, "raw byte total does not match the blocks",
			    footer_at + F_RAW_BYTES, -1);
	if (max_sample != f->max_sample)
		return fail(fault, -EBADMSG, "largest sample does not match the table",
			    footer_at + F_MAX_SAMPLE, -1);
	if (f->version == BP_PACK_VERSION_FRAMES && idx->framed == 0)
		return fail(fault, -EBADMSG, "footer version 2 without framed samples",
			    footer_at + F_VERSION, -1);
	return 0;
}

/* ---- sections ------------------------------------------------------------ */

void bp_pack_index_section(const bp_pack_index *idx, uint64_t i, bp_pack_section *ret)
{
	const uint8_t *e = idx->sections + i * BP_PACK_SECTION_ENTRY;

	ret->kind = bp_le32(e + S_KIND);
	ret->field = bp_le32(e + S_FIELD);
	ret->offset = bp_le64(e + S_OFFSET);
	ret->size = bp_le64(e + S_SIZE);
	ret->hash = bp_le64(e + S_HASH);
}

int bp_pack_index_find_section(const bp_pack_index *idx, uint32_t kind, uint32_t field,
			       bp_pack_section *ret)
{
	for (uint64_t i = 0; i < idx->section_count; i++) {
		bp_pack_section sec;

		bp_pack_index_section(idx, i, &sec);
		if (sec.kind == kind && (field == BP_SECTION_NO_FIELD || sec.field == field)) {
			*ret = sec;
			return 0;
		}
	}
	return -ENOENT;
}

void bp_pack_section_entry_encode(const bp_pack_section *sec, uint8_t out[BP_PACK_SECTION_ENTRY])
{
	bp_put_le32(out + S_KIND, sec->kind);
	bp_put_le32(out + S_FIELD, sec->field);
	bp_put_le64(out + S_OFFSET, sec->offset);
	bp_put_le64(out + S_SIZE, sec->size);
	bp_put_le64(out + S_HASH, sec->hash);
}

/* Entries of n items grouped per items (key blocks, key-hash pages): ceil(n / per). */
static uint64_t groups_of(uint64_t n, uint64_t per)
{
	return n / per + (n % per != 0);
}

/*
 * The size a section of this kind must have when the sample count alone
 * decides it, else 0 (the schema decides: bp_pack_fields_parse checks it).
 */
static uint64_t fixed_section_size(uint32_t kind, uint64_t n)
{
	switch (kind) {
	case BP_SECTION_KEY_DIR:
		return groups_of(n, BP_KEYS_PER_BLOCK) * BP_KEY_DIR_ENTRY;
	case BP_SECTION_KEY_HASH:
		return n * BP_KEY_HASH_ENTRY;
	case BP_SECTION_KEY_HASH_DIR:
		return groups_of(n, BP_KEY_HASH_PAGE) * BP_KEY_HASH_DIR_ENTRY;
	case BP_SECTION_TOKENS:
		return BP_TOKENS_SIZE;
	}
	return 0;
}

/* One section entry against the one before it (prev NULL for the first). */
static int check_section_entry(const bp_pack_header *h, const bp_pack_footer *f,
			       const bp_pack_section *sec, const bp_pack_section *prev,
			       uint64_t at, bp_pack_fault *fault)
{
	bool per_field = sec->kind == BP_SECTION_COLUMN || sec->kind == BP_SECTION_STR;
	bool hashed = sec->kind != BP_SECTION_KEYS && sec->kind != BP_SECTION_KEY_HASH;
	uint64_t want;

	if (sec->kind < BP_SECTION_SCHEMA || sec->kind > BP_SECTION_TOKENS)
		return fail(fault, -ENOTSUP, "unknown section kind", at + S_KIND, -1);
	if (!prev && sec->kind != BP_SECTION_SCHEMA)
		return fail(fault, -EBADMSG, "section table does not start with the schema",
			    at + S_KIND, -1);
	if (per_field ? sec->field >= BP_FIELD_MAX : sec->field != BP_SECTION_NO_FIELD)
		return fail(fault, -EBADMSG, "section names a field it cannot have", at + S_FIELD, -1);
	if (prev && (sec->kind < prev->kind ||
		     (sec->kind == prev->kind && (!per_field || sec->field <= prev->field))))
		return fail(fault, -EBADMSG, "sections out of order (kind, then field)",
			    at + S_KIND, -1);
	if (prev ? sec->offset != prev->offset + prev->size
		 : sec->offset < h->data_offset || sec->offset > f->index_offset)
		return fail(fault, -EBADMSG, "section does not start where the previous one ends",
			    at + S_OFFSET, -1);
	if (sec->kind == BP_SECTION_SCHEMA && sec->size > BP_SCHEMA_MAX)
		return fail(fault, -E2BIG, "schema section over the size limit", at + S_SIZE, -1);
	if (sec->size > f->index_offset - sec->offset)
		return fail(fault, -EBADMSG, "section runs past the index", at + S_SIZE, -1);
	want = fixed_section_size(sec->kind, f->sample_count);
	if (want && sec->size != want)
		return fail(fault, -EBADMSG, sec->kind == BP_SECTION_TOKENS
					     ? "tokens section is not 48 bytes"
					     : "key section size does not match the sample count",
			    at + S_SIZE, -1);
	if (!hashed && sec->hash != 0)
		return fail(fault, -EBADMSG, "hash of a section covered by its directory is not zero",
			    at + S_HASH, -1);
	return 0;
}

/*
 * The section table's shape: known kinds in (kind, field) order, the first
 * the schema, tiling [first section, index) with no gaps, the key
 * sections all four or none, and none beside TOKENS. Sets idx->data_end
 * to the first section.
 */
static int check_sections(const bp_pack_header *h, const bp_pack_footer *f,
			  bp_pack_index *idx, bp_pack_fault *fault)
{
	uint64_t table = f->index_offset + f->block_count * BP_PACK_BLOCK_ENTRY +
			 f->sample_count * BP_PACK_SAMPLE_ENTRY;
	bp_pack_section sec, prev;
	unsigned keys = 0;
	int r;

	for (uint64_t i = 0; i < idx->section_count; i++) {
		bp_pack_index_section(idx, i, &sec);
		r = check_section_entry(h, f, &sec, i ? &prev : NULL,
					table + i * BP_PACK_SECTION_ENTRY, fault);
		if (r < 0)
			return r;
		if (i == 0)
			idx->data_end = sec.offset;
		keys += key_kind(sec.kind);
		prev = sec;
	}
	if (idx->section_count == 0)
		return 0;
	if (prev.offset + prev.size != f->index_offset)
		return fail(fault, -EBADMSG, "sections do not reach the index",
			    table + (idx->section_count - 1) * BP_PACK_SECTION_ENTRY + S_SIZE, -1);
	if (keys != 0 && keys != 4)
		return fail(fault, -EBADMSG, "key sections incomplete (all four or none)",
			    table + (idx->section_count - 1) * BP_PACK_SECTION_ENTRY + S_KIND, -1);
	/* TOKENS is last in the table when there is one: a token pack has no keys. */
	if (keys && prev.kind == BP_SECTION_TOKENS)
		return fail(fault, -EBADMSG, "token pack with keys",
			    table + (idx->section_count - 1) * BP_PACK_SECTION_ENTRY + S_KIND, -1);
	return 0;
}

int bp_pack_index_parse(const bp_pack_header *h, const bp_pack_footer *f,
			const uint8_t header_bytes[BP_PACK_HEADER_SIZE],
			const uint8_t footer_bytes[BP_PACK_FOOTER_SIZE],
			const uint8_t *index, bp_pack_index *ret,
			bp_pack_fault *fault)
{
	uint64_t footer_at = f->index_offset + f->index_size;
	bp_pack_index idx;
	int r;

	if (!index && f->index_size)
		return -EINVAL;
	if (XXH3_64bits(index, f->index_size) != f->fingerprint)
		return fail(fault, -EBADMSG, "index checksum (fingerprint) mismatch",
			    f->index_offset, -1);
	if (bp_pack_checksum(header_bytes, footer_bytes) != f->checksum)
		return fail(fault, -EBADMSG, "header/footer checksum mismatch",
			    footer_at + F_CHECKSUM, -1);

	idx.blocks = index;
	idx.samples = index + f->block_count * BP_PACK_BLOCK_ENTRY;
	idx.block_count = f->block_count;
	idx.sample_count = f->sample_count;
	idx.framed = 0;
	idx.max_frames = 1;
	idx.lookup = NULL;
	idx.sections = f->section_count ? idx.samples + f->sample_count * BP_PACK_SAMPLE_ENTRY
					: NULL;
	idx.section_count = f->section_count;
	idx.index_offset = f->index_offset;
	idx.data_end = f->index_offset;

	r = check_sections(h, f, &idx, fault);
	if (r == 0)
		r = check_blocks(h, f, &idx, fault);
	if (r == 0)
		r = check_samples(f, &idx, fault);
	if (r < 0)
		return r;
	*ret = idx;
	return 0;
}

/* ---- whole shard -------------------------------------------------------- */

/* A shard in memory, read as bp_pack_keys_verify reads a file. */
typedef struct membuf {
	const uint8_t *buf;
	size_t len;
} membuf;

static int mem_read(void *ctx, void *out, size_t len, uint64_t off)
{
	const membuf *m = ctx;

	if (off > m->len || len > m->len - off)
		return -EIO;
	memcpy(out, m->buf + off, len);
	return 0;
}

/* Every section of a parsed shard in memory: the loaded ones, then every byte of the keys. */
static int check_section_bytes(const bp_pack_index *idx, const uint8_t *buf, size_t len,
			       bp_pack_fault *fault)
{
	membuf m = { buf, len };
	bp_pack_fields pf;
	ZSTD_DCtx *dctx;
	int r = bp_pack_fields_parse(idx, buf, 0, len, &pf, fault);

	if (r < 0 || !pf.keys) {
		if (r == 0)
			bp_pack_fields_clear(&pf);
		return r;
	}
	bp_pack_fields_clear(&pf);
	dctx = ZSTD_createDCtx();
	if (!dctx || bp_pack_dctx_init(dctx) < 0) {
		ZSTD_freeDCtx(dctx);
		return -ENOMEM;
	}
	r = bp_pack_keys_verify(idx, mem_read, &m, dctx, fault);
	ZSTD_freeDCtx(dctx);
	return r;
}

int bp_pack_parse(const uint8_t *buf, size_t len, bp_pack_view *ret, bp_pack_fault *fault)
{
	bp_pack_view v;
	const uint8_t *footer;
	int r;

	r = bp_pack_header_decode(buf, len, &v.header, fault);
	if (r < 0)
		return r;
	if (len - BP_PACK_HEADER_SIZE < BP_PACK_FOOTER_SIZE)
		return fail(fault, -EBADMSG, "truncated pack (no room for a footer)", len, -1);
	footer = buf + len - BP_PACK_FOOTER_SIZE;
	r = bp_pack_footer_decode(footer, len, &v.header, &v.footer, fault);
	if (r < 0)
		return r;

	/* The footer check proved data_offset (which covers the dictionary) <= len. */
	v.dict = NULL;
	if (v.header.dict_size) {
		v.dict = buf + v.header.dict_offset;
		if (XXH3_64bits(v.dict, v.header.dict_size) != v.header.dict_hash)
			return fail(fault, -EBADMSG, "dictionary checksum mismatch",
				    v.header.dict_offset, -1);
	}

	r = bp_pack_index_parse(&v.header, &v.footer, buf, footer, buf + v.footer.index_offset,
				&v.index, fault);
	if (r == 0 && v.index.section_count)
		r = check_section_bytes(&v.index, buf, len, fault);
	if (r < 0)
		return r;
	*ret = v;
	return 0;
}

/* ---- blocks ------------------------------------------------------------ */

int bp_pack_dctx_init(ZSTD_DCtx *dctx)
{
	if (ZSTD_isError(ZSTD_DCtx_reset(dctx, ZSTD_reset_session_and_parameters)) ||
	    ZSTD_isError(ZSTD_DCtx_setParameter(dctx, ZSTD_d_windowLogMax,
						BP_PACK_WINDOW_LOG_MAX)))
		return -ENOMEM;
	return 0;
}

int bp_pack_frame_decode(const uint8_t *stored, size_t stored_size, size_t raw_size,
			 ZSTD_DCtx *dctx, const ZSTD_DDict *ddict, uint8_t *out, uint64_t at,
			 bp_pack_fault *fault)
{
	ZSTD_frameHeader fh;
	size_t got;

	/* Never trust the frame: a current zstd frame, one only, exactly the declared size. */
	if (stored_size < 4 || bp_le32(stored) != ZSTD_MAGICNUMBER)
		return fail(fault, -EBADMSG, "block is not a zstd frame", at, -1);
	if (ZSTD_findFrameCompressedSize(stored, stored_size) != stored_size)
		return fail(fault, -EBADMSG, "block is not exactly one zstd frame", at, -1);
	if (ZSTD_getFrameContentSize(stored, stored_size) != raw_size)
		return fail(fault, -EBADMSG, "zstd frame declares a different size", at, -1);
	/* Refuse a window beyond the format's limit before zstd sizes anything by it. */
	if (ZSTD_getFrameHeader(&fh, stored, stored_size) != 0 ||
	    fh.windowSize > (UINT64_C(1) << BP_PACK_WINDOW_LOG_MAX))
		return fail(fault, -EBADMSG, "zstd frame window over the limit", at, -1);
	got = ZSTD_decompress_usingDDict(dctx, out, raw_size, stored, stored_size, ddict);
	if (ZSTD_isError(got))
		return fail(fault, -EBADMSG, ZSTD_getErrorName(got), at, -1);
	if (got != raw_size)
		return fail(fault, -EBADMSG, "zstd frame decoded to a different size", at, -1);
	return 0;
}

int bp_pack_block_decode(const bp_pack_block *b, const uint8_t *stored,
			 ZSTD_DCtx *dctx, const ZSTD_DDict *ddict,
			 uint8_t *out, size_t out_cap, bp_pack_fault *fault)
{
	int64_t bi = -1;
	int r;

	if (!b || !stored || !out || out_cap < b->raw_size)
		return -EINVAL;
	if (XXH3_64bits(stored, b->stored_size) != b->stored_hash)
		return fail(fault, -EBADMSG, "stored bytes checksum mismatch", b->offset, bi);

	if (b->codec == BP_CODEC_RAW) {
		/* The index proved stored_hash == raw_hash; be as strict for callers' blocks. */
		if (b->stored_size != b->raw_size || b->stored_hash != b->raw_hash)
			return fail(fault, -EBADMSG, "raw block whose stored and raw bytes differ",
				    b->offset, bi);
		if (out != stored)
			memcpy(out, stored, b->raw_size);
		return 0;
	}
	if (b->codec != BP_CODEC_ZSTD && b->codec != BP_CODEC_ZSTD_DICT)
		return fail(fault, -ENOTSUP, "unknown block codec", b->offset, bi);
	if (b->codec == BP_CODEC_ZSTD_DICT && !ddict)
		return fail(fault, -EINVAL, "block needs the pack's dictionary", b->offset, bi);

	r = bp_pack_frame_decode(stored, b->stored_size, b->raw_size, dctx,
				 b->codec == BP_CODEC_ZSTD_DICT ? ddict : NULL, out, b->offset, fault);
	if (r < 0)
		return r;
	if (XXH3_64bits(out, b->raw_size) != b->raw_hash)
		return fail(fault, -EBADMSG, "raw bytes checksum mismatch", b->offset, bi);
	return 0;
}

int bp_pack_block_encode(ZSTD_CCtx *cctx, const ZSTD_CDict *cdict, int level,
			 const uint8_t *raw, size_t raw_size,
			 uint8_t *out, size_t out_cap, bp_pack_encoded *ret)
{
	bp_pack_encoded e;
	size_t n = 0;

	if (raw_size > BP_PACK_MAX_BLOCK)
		return -E2BIG;
	if (!cctx || (!raw && raw_size) || !out || out_cap < ZSTD_compressBound(raw_size))
		return -EINVAL;

	e.raw = raw;
	e.raw_hash = XXH3_64bits(raw, raw_size);
	if (raw_size) {
		if (ZSTD_isError(ZSTD_CCtx_reset(cctx, ZSTD_reset_session_and_parameters)) ||
		    ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level)) ||
		    ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 1)) ||
		    ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 0)) ||
		    ZSTD_isError(ZSTD_CCtx_refCDict(cctx, cdict)))
			return -EINVAL;
		n = ZSTD_compress2(cctx, out, out_cap, raw, raw_size);
		if (ZSTD_isError(n))
			return -ENOMEM;
	}

	if (raw_size == 0 || n >= raw_size) {
		e.codec = BP_CODEC_RAW;
		e.stored = raw;
		e.stored_size = raw_size;
		e.stored_hash = e.raw_hash;
	} else {
		e.codec = cdict ? BP_CODEC_ZSTD_DICT : BP_CODEC_ZSTD;
		e.stored = out;
		e.stored_size = n;
		e.stored_hash = XXH3_64bits(out, n);
	}
	*ret = e;
	return 0;
}

void bp_pack_block_entry_encode(const bp_pack_block *b, uint8_t out[BP_PACK_BLOCK_ENTRY])
{
	bp_put_le64(out + B_OFFSET, b->offset);
	bp_put_le64(out + B_STORED_SIZE, b->stored_size);
	bp_put_le64(out + B_RAW_SIZE, b->raw_size);
	bp_put_le64(out + B_FIRST_SAMPLE, b->first_sample);
	bp_put_le64(out + B_STORED_HASH, b->stored_hash);
	bp_put_le64(out + B_RAW_HASH, b->raw_hash);
	bp_put_le32(out + B_CODEC, b->codec);
	bp_put_le32(out + B_FRAMES, b->frames);
}

void bp_pack_sample_entry_encode(uint64_t offset, uint64_t size,
				 uint8_t out[BP_PACK_SAMPLE_ENTRY])
{
	bp_put_le64(out, offset);
	bp_put_le64(out + 8, size);
}

uint64_t bp_pack_dataset_fingerprint(const uint64_t *shard_fps, size_t n)
{
	XXH3_state_t st;
	uint8_t le[8];

	XXH3_64bits_reset(&st);
	for (size_t i = 0; i < n; i++) {
		bp_put_le64(le, shard_fps[i]);
		XXH3_64bits_update(&st, le, sizeof(le));
	}
	return XXH3_64bits_digest(&st);
}

const char *bp_pack_codec_name(uint32_t codec)
{
	switch (codec) {
	case BP_CODEC_RAW:
		return "raw";
	case BP_CODEC_ZSTD:
		return "zstd";
	case BP_CODEC_ZSTD_DICT:
		return "zstd+dict";
	}
	return "unknown";
}
