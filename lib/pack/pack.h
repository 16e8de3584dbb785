/* SPDX-License-Identifier: MIT */
/*
 * pack.h - the batchd pack file format (.bpk): layout, codecs, validators.
 *
 * A pack is one shard of a dataset: a header, an optional zstd dictionary,
 * a run of blocks (independent zstd frames or raw bytes, each holding whole
 * samples, or one frame of a sample too large for one), for samples with
 * fields the sections beside the blocks (pack_fields.h), an index (block
 * table + sample table, + section table) and a fixed-size footer that
 * locates the index, so a writer can stream. lib/pack/PACK.md is the normative specification; this
 * header is its C face.
 *
 * Everything here is pure: functions take caller buffers, do no I/O, start
 * no threads and keep no state; the one exception is the lookup tables
 * (bp_pack_ranges, bp_pack_lookup), which allocate what they hold so that
 * a sample's block is found without a search. Every field read from a
 * buffer is treated as hostile and bounds-checked before use, so each
 * function can be fed arbitrary bytes (tests/fuzz/fuzz-pack.c does exactly
 * that).
 *
 * Errors are negative errnos:
 *   -EBADMSG   the bytes are not a valid pack (bad magic, checksum mismatch,
 *              inconsistent table, truncation);
 *   -ENOTSUP   a well-formed pack of a version or codec this build lacks;
 *   -E2BIG     a size over one of the documented BP_PACK_MAX_* limits;
 *   -EINVAL    the caller passed something impossible (NULL, an output buffer
 *              too small); a short *input* is a truncated pack: -EBADMSG;
 *   -ENOMEM    zstd could not allocate.
 * Functions that can fail on content fill an optional bp_pack_fault with
 * what was wrong and where, so tools can name the byte offset.
 *
 * Thread rules: all functions are reentrant; a ZSTD_CCtx/ZSTD_DCtx passed in
 * must not be used by another thread at the same time.
 */
#ifndef BATCHD_PROTO_PACK_H
#define BATCHD_PROTO_PACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <zstd.h>

#define BP_PACK_VERSION        1u  /* header; footer of an index without framed samples */
#define BP_PACK_VERSION_FRAMES 2u  /* footer of an index with framed samples (PACK.md §Frames) */
#define BP_PACK_VERSION_SECTIONS 3u /* footer of an index ending with a section table (§Fields) */
#define BP_PACK_MAGIC          "\x89" "BPK\r\n\x1a\n"   /* 8 bytes, header */
#define BP_PACK_FOOTER_MAGIC   "BPKINDEX"                 /* 8 bytes, footer */
#define BP_PACK_HEADER_SIZE    64u
#define BP_PACK_FOOTER_SIZE    80u
#define BP_PACK_BLOCK_ENTRY    56u
#define BP_PACK_SAMPLE_ENTRY   16u
#define BP_PACK_SECTION_ENTRY  32u

/* Limits (PACK.md §Limits). Readers reject anything larger with -E2BIG. */
#define BP_PACK_MAX_SAMPLE     (UINT64_C(256) << 20)  /* bytes in one sample */
#define BP_PACK_MAX_BLOCK      (UINT64_C(256) << 20)  /* raw bytes in one block */
#define BP_PACK_MAX_DICT       (UINT64_C(4) << 20)    /* dictionary bytes */
#define BP_PACK_MAX_INDEX      (UINT64_C(1) << 30)    /* index bytes per shard */
#define BP_PACK_WINDOW_LOG_MAX 28                     /* zstd window cap, = log2(MAX_BLOCK) */
#define BP_PACK_MIN_FRAME      (UINT64_C(4) << 10)    /* raw bytes of a frame but the last */
#define BP_PACK_FRAME_SIZE     (UINT64_C(4) << 20)    /* writers' default frame size */

enum bp_pack_codec {
	BP_CODEC_RAW       = 0, /* stored bytes are the raw bytes */
	BP_CODEC_ZSTD      = 1, /* one zstd frame, no dictionary */
	BP_CODEC_ZSTD_DICT = 2, /* one zstd frame compressed with the shard's dictionary */
};

/* Where and why a pack was rejected. `what` is a static string. */
typedef struct bp_pack_fault {
	const char *what;
	uint64_t offset;   /* byte offset in the shard file of the faulty field/block */
	int64_t block;     /* block index, or -1 when the fault is not in a block */
} bp_pack_fault;

typedef struct bp_pack_header {
	uint32_t version;
	uint64_t dict_offset;  /* 0 when there is no dictionary, else HEADER_SIZE */
	uint64_t dict_size;
	uint64_t dict_hash;    /* XXH3-64 of the dictionary bytes */
	uint64_t data_offset;  /* first block: HEADER_SIZE + dict_size */
} bp_pack_header;

typedef struct bp_pack_footer {
	uint64_t index_offset;
	uint64_t index_size;
	uint64_t block_count;
	uint64_t sample_count;
	uint64_t raw_bytes;    /* sum of all blocks' raw sizes */
	uint64_t max_sample;   /* largest sample, bytes */
	uint64_t fingerprint;  /* XXH3-64 of the index bytes */
	uint64_t checksum;     /* see PACK.md §Checksums */
	uint32_t version;      /* BP_PACK_VERSION, _FRAMES or _SECTIONS; 0 encodes as BP_PACK_VERSION */
	uint64_t section_count; /* derived from index_size (version 3), not encoded; 0 before */
} bp_pack_footer;

typedef struct bp_pack_block {
	uint64_t offset;       /* file offset of the stored bytes */
	uint64_t stored_size;
	uint64_t raw_size;
	uint64_t first_sample; /* shard-local id of the block's first sample */
	uint64_t sample_count; /* samples it holds; 1 for a frame (all of it or part of one) */
	uint64_t stored_hash;  /* XXH3-64 of the stored bytes */
	uint64_t raw_hash;     /* XXH3-64 of the raw bytes */
	uint32_t codec;        /* enum bp_pack_codec */
	/*
	 * 0 for a block of whole samples; for a frame of a framed sample, the
	 * frames left of that sample, this one included (its first frame says
	 * how many it has, its last says 1).
	 */
	uint32_t frames;
} bp_pack_block;

typedef struct bp_pack_sample {
	uint64_t block;        /* block index in the shard: a framed sample's first frame */
	uint64_t offset;       /* offset in the block's raw bytes (0 for a framed sample) */
	uint64_t size;         /* the whole sample, over all its frames */
	uint32_t frames;       /* blocks it spans, from `block` on: 1, or its frame count */
} bp_pack_sample;

/* Section kinds (PACK.md §Fields), in the order a section table lists them. */
enum bp_pack_section_kind {
	BP_SECTION_SCHEMA       = 1, /* the encoded schema */
	BP_SECTION_COLUMN       = 2, /* one scalar field: sample_count values */
	BP_SECTION_STR          = 3, /* one str field: sample_count + 1 offsets, then the bytes */
	BP_SECTION_SIZES        = 4, /* the bytes fields' sizes, sample-major, with >= 2 of them */
	BP_SECTION_KEYS         = 5, /* key blocks end to end */
	BP_SECTION_KEY_DIR      = 6, /* one entry a key block */
	BP_SECTION_KEY_HASH     = 7, /* (hash, id) a sample, sorted, in pages */
	BP_SECTION_KEY_HASH_DIR = 8, /* one entry a key-hash page */
	BP_SECTION_TOKENS       = 9, /* a token pack's widths and counts (bp_tokens) */
};
#define BP_SECTION_NO_FIELD UINT32_MAX /* the field of a section that belongs to none */

typedef struct bp_pack_section {
	uint32_t kind;         /* enum bp_pack_section_kind */
	uint32_t field;        /* schema index, or BP_SECTION_NO_FIELD */
	uint64_t offset;       /* file offset of its bytes */
	uint64_t size;
	uint64_t hash;         /* XXH3-64 of its bytes; 0 for KEYS and KEY_HASH (covered by their dirs) */
} bp_pack_section;

typedef struct bp_pack_lookup bp_pack_lookup;

/*
 * A validated index: a view over the caller's index bytes (not copied).
 * Built only by bp_pack_index_parse(), after which every accessor is total:
 * no further error paths. The caller keeps `bytes` alive and unchanged.
 * lookup is NULL from the parse; a caller that sets it to a table built by
 * bp_pack_lookup_new() from this same index (and keeps the table alive)
 * makes bp_pack_index_sample O(1).
 */
typedef struct bp_pack_index {
	const uint8_t *blocks;   /* block table */
	const uint8_t *samples;  /* sample table */
	uint64_t block_count;
	uint64_t sample_count;
	uint64_t framed;         /* samples stored as several frames */
	uint32_t max_frames;     /* the most blocks one sample spans: 1 without framed samples */
	const bp_pack_lookup *lookup;
	const uint8_t *sections; /* section table (footer version 3), else NULL */
	uint64_t section_count;
	uint64_t data_end;       /* where the blocks end: the first section, or the index */
	uint64_t index_offset;   /* the footer's, so sections can be placed from the index alone */
} bp_pack_index;

/* ---- header and footer ------------------------------------------------ */

/*
 * Decode and check the header in buf[0..len). @return 0, -EBADMSG, -ENOTSUP,
 * -E2BIG. ret is written only on success.
 */
int bp_pack_header_decode(const uint8_t *buf, size_t len, bp_pack_header *ret,
			  bp_pack_fault *fault);
void bp_pack_header_encode(const bp_pack_header *h, uint8_t out[BP_PACK_HEADER_SIZE]);

/*
 * Decode the footer from the last BP_PACK_FOOTER_SIZE bytes of a file of
 * file_size bytes, and check it is consistent with that size and with the
 * header (index fits between the data start and the footer, table sizes
 * match the counts; ret->version says whether the index may hold framed
 * samples). The checksum is checked later, by bp_pack_index_parse,
 * because it covers the index. @return 0, -EBADMSG, -ENOTSUP, -E2BIG.
 */
int bp_pack_footer_decode(const uint8_t buf[BP_PACK_FOOTER_SIZE], uint64_t file_size,
			  const bp_pack_header *h, bp_pack_footer *ret,
			  bp_pack_fault *fault);
/*
 * Encode f (f->checksum is ignored; f->version 0 is written as
 * BP_PACK_VERSION) and compute the checksum field over the
 * given encoded header and the footer's own first 64 bytes.
 */
void bp_pack_footer_encode(const bp_pack_footer *f, const uint8_t header[BP_PACK_HEADER_SIZE],
			   uint8_t out[BP_PACK_FOOTER_SIZE]);

/*
 * Compute the checksum field for a footer: XXH3-64 over the 64 header bytes
 * followed by the first 64 footer bytes, seeded with the fingerprint.
 */
uint64_t bp_pack_checksum(const uint8_t header[BP_PACK_HEADER_SIZE],
			  const uint8_t footer[BP_PACK_FOOTER_SIZE]);

/* ---- index ------------------------------------------------------------- */

/*
 * Validate the index bytes [index, index + f->index_size) of a shard whose
 * header bytes and footer bytes are given raw (for the checksum): the
 * fingerprint, the checksum, and every table entry (blocks tile the data
 * region in order, samples tile each block's raw bytes, a framed sample's
 * frames follow one another and add up to it, codecs are known, sizes
 * within limits, totals match the footer). O(blocks + samples).
 * @return 0, -EBADMSG, -ENOTSUP, -E2BIG. ret written only on success.
 */
int bp_pack_index_parse(const bp_pack_header *h, const bp_pack_footer *f,
			const uint8_t header_bytes[BP_PACK_HEADER_SIZE],
			const uint8_t footer_bytes[BP_PACK_FOOTER_SIZE],
			const uint8_t *index, bp_pack_index *ret,
			bp_pack_fault *fault);

/*
 * Section i (< section_count) of a validated index. The parse checked the
 * table's shape (known kinds in order, tiling [data_end, index_offset),
 * one schema, the four key sections all or none); what the sections hold
 * is checked against the schema by bp_pack_fields_parse (pack_fields.h).
 */
void bp_pack_index_section(const bp_pack_index *idx, uint64_t i, bp_pack_section *ret);
/* The first section of kind (and field, unless BP_SECTION_NO_FIELD), or -ENOENT. */
int bp_pack_index_find_section(const bp_pack_index *idx, uint32_t kind, uint32_t field,
			       bp_pack_section *ret);

/* Block i (< block_count) of a validated index. */
void bp_pack_index_block(const bp_pack_index *idx, uint64_t i, bp_pack_block *ret);
/*
 * Sample id (< sample_count) of a validated index: its block, offset and
 * size, and for a framed sample its first frame and frame count. O(1)
 * through idx->lookup when set; a binary search over the block
 * table, O(log blocks), when it is NULL. Both give the same answer.
 */
void bp_pack_index_sample(const bp_pack_index *idx, uint64_t id, bp_pack_sample *ret);
/*
 * Offset and size of sample `id` only, without locating its block. O(1).
 * A framed sample's offset is 0 and its size the whole sample's.
 */
void bp_pack_index_sample_span(const bp_pack_index *idx, uint64_t id,
			       uint64_t *ret_offset, uint64_t *ret_size);

/* ---- constant-time lookup ---------------------------------------------- */

/*
 * Ids [0, total) cut into count consecutive, non-empty ranges (the blocks
 * of a shard, the shards of a dataset), and the range of any id found in
 * O(1) without a search over the ranges.
 *
 * The ids are cut into groups of G = 2^k, G the largest power of two not
 * above total / count (the mean range length), and a table holds, for each
 * group, the range of its first id. The range of an id then lies between
 * the ranges of its group's first id and the next group's: the same range
 * when a group falls inside one range (ranges of even length: at most one
 * boundary per group), else a binary search over the few ranges that start
 * inside the group, never more steps than a search over all of them.
 * Memory: at most (total / G + 2) * 4 + count * 8 bytes, so under 16 bytes
 * and a few per range, whatever the number of ids.
 *
 * Thread rules: built by one thread; immutable afterwards, so any number
 * of threads may look up at once.
 */
typedef struct bp_pack_ranges bp_pack_ranges;

/*
 * Build the map of count ranges over [0, total); first_of(ctx, i) gives
 * the first id of range i, called once for each i in order. The first ids
 * must start at 0 and increase strictly, staying below total.
 * @return 0; -EINVAL when count is 0 or above UINT32_MAX, or the first ids
 * break that rule; -ENOMEM. *ret written only on success; free it with
 * bp_pack_ranges_free().
 */
int bp_pack_ranges_new(uint64_t count, uint64_t total,
		       uint64_t (*first_of)(const void *ctx, uint64_t i), const void *ctx,
		       bp_pack_ranges **ret);
void bp_pack_ranges_free(bp_pack_ranges *r);  /* NULL is fine */
/* The range holding id (< total). */
uint64_t bp_pack_ranges_find(const bp_pack_ranges *r, uint64_t id);
/* Heap bytes r holds. */
size_t bp_pack_ranges_bytes(const bp_pack_ranges *r);

/*
 * The lookup table of one validated index, for bp_pack_index.lookup: the
 * ranges of its blocks and, for each block whose samples all have one
 * size, that size, so that such a sample's offset and size are computed
 * rather than read from the sample table (a cache miss per sample under a
 * random order). A framed sample is one range (its first frame's block);
 * an index with framed samples also keeps each range's block. Memory: at
 * most 20 bytes a block plus a few (24 with framed samples), none per
 * sample. Built in O(blocks + samples).
 * @return 0 or -ENOMEM; *ret written only on success; free it with
 * bp_pack_lookup_free(), after the last lookup through an index using it.
 */
int bp_pack_lookup_new(const bp_pack_index *idx, bp_pack_lookup **ret);
void bp_pack_lookup_free(bp_pack_lookup *lk);  /* NULL is fine */
/* Heap bytes lk holds. */
size_t bp_pack_lookup_bytes(const bp_pack_lookup *lk);
/*
 * The most heap bytes bp_pack_lookup_new can hold for an index of blocks
 * blocks and samples samples (>= blocks >= 1), known from its footer
 * before the index is read; framed: the index may have framed samples (a
 * footer version above BP_PACK_VERSION). Never below bp_pack_lookup_bytes
 * of that index's table.
 */
uint64_t bp_pack_lookup_bound(uint64_t blocks, uint64_t samples, bool framed);

/* ---- whole shard in memory -------------------------------------------- */

typedef struct bp_pack_view {
	bp_pack_header header;
	bp_pack_footer footer;
	bp_pack_index index;
	const uint8_t *dict;   /* NULL when the shard has none */
} bp_pack_view;

/*
 * Parse a whole shard held in buf[0..len): header, dictionary hash, footer,
 * index, and in a shard with sections every section's bytes: those a
 * reader loads at open (bp_pack_fields_parse) and every key block and
 * key-hash page (bp_pack_keys_verify). Block contents are not touched
 * (see bp_pack_block_decode).
 * @return 0 or a negative errno as above (-ENOMEM too with sections); ret
 * written only on success.
 */
int bp_pack_parse(const uint8_t *buf, size_t len, bp_pack_view *ret, bp_pack_fault *fault);

/* ---- blocks ------------------------------------------------------------ */

/*
 * Decode block b from its stored bytes: check the stored hash, then (for zstd)
 * check the frame is exactly one frame whose declared content size equals
 * b->raw_size, decompress into out[0..b->raw_size), and check the raw hash.
 * For BP_CODEC_RAW the bytes are checked and copied (out may equal stored,
 * in which case nothing is copied). dctx must have been set up with
 * bp_pack_dctx_init(); ddict is required for BP_CODEC_ZSTD_DICT. Frames of
 * zstd's legacy (pre-1.0) formats are refused. fault->block is left -1: the
 * caller knows which block it decoded.
 * @return 0, -EBADMSG (names the check that failed in fault), -ENOTSUP
 * (unknown codec), -EINVAL when out_cap < raw_size or a dictionary block
 * comes without ddict.
 */
int bp_pack_block_decode(const bp_pack_block *b, const uint8_t *stored,
			 ZSTD_DCtx *dctx, const ZSTD_DDict *ddict,
			 uint8_t *out, size_t out_cap, bp_pack_fault *fault);

/*
 * Decode one untrusted zstd frame, stored[0..stored_size), that must hold
 * exactly raw_size bytes, into out (>= raw_size): the checks of
 * bp_pack_block_decode between the two hashes, with ddict NULL for a
 * frame without a dictionary. at is the frame's file offset, for the fault.
 * @return 0 or -EBADMSG with fault set.
 */
int bp_pack_frame_decode(const uint8_t *stored, size_t stored_size, size_t raw_size,
			 ZSTD_DCtx *dctx, const ZSTD_DDict *ddict, uint8_t *out, uint64_t at,
			 bp_pack_fault *fault);

/* Cap the window and set the DCtx up for untrusted frames. @return 0 or -ENOMEM. */
int bp_pack_dctx_init(ZSTD_DCtx *dctx);

/* Result of compressing one block. */
typedef struct bp_pack_encoded {
	const uint8_t *raw;    /* the raw input (a token pack's writer reads its ids) */
	const uint8_t *stored; /* either out or the raw input */
	uint64_t stored_size;
	uint64_t stored_hash;
	uint64_t raw_hash;
	uint32_t codec;
} bp_pack_encoded;

/*
 * Compress raw[0..raw_size) (raw_size <= BP_PACK_MAX_BLOCK) with cctx at
 * `level`, using cdict when non-NULL. When the frame would not be smaller
 * than the raw bytes the block is stored raw (ret->stored = raw).
 * out_cap must be at least ZSTD_compressBound(raw_size).
 * @return 0, -E2BIG, -EINVAL, -ENOMEM (zstd failure).
 */
int bp_pack_block_encode(ZSTD_CCtx *cctx, const ZSTD_CDict *cdict, int level,
			 const uint8_t *raw, size_t raw_size,
			 uint8_t *out, size_t out_cap, bp_pack_encoded *ret);

/* Encode one block-table / sample-table entry. */
void bp_pack_block_entry_encode(const bp_pack_block *b, uint8_t out[BP_PACK_BLOCK_ENTRY]);
void bp_pack_sample_entry_encode(uint64_t offset, uint64_t size,
				 uint8_t out[BP_PACK_SAMPLE_ENTRY]);
void bp_pack_section_entry_encode(const bp_pack_section *s, uint8_t out[BP_PACK_SECTION_ENTRY]);

/* ---- token packs (PACK.md §Token packs) ------------------------------ */

/*
 * A token pack holds tokenized documents for language-model pretraining:
 * its schema is one bytes field "tokens", it has no keys, and each sample
 * is one document, its bytes the document's token ids, little-endian, of
 * `width` bytes each. The TOKENS section says so, and how many.
 */
#define BP_TOKENS_SIZE    48u          /* bytes of a TOKENS section */
#define BP_TOKENS_VERSION 1u
#define BP_TOKENS_NO_EOS  UINT64_MAX   /* eos of a pack packed without --eos */
/* The largest id of each width: a uint32 id must also fit an int32 (ids are delivered so). */
#define BP_TOKENS_MAX_ID16 UINT64_C(0xFFFF)
#define BP_TOKENS_MAX_ID32 UINT64_C(0x7FFFFFFF)

typedef struct bp_tokens {
	uint32_t width;      /* bytes a token id: 2 (uint16) or 4 (uint32) */
	uint64_t eos;        /* the end-of-document id, or BP_TOKENS_NO_EOS */
	uint64_t tokens;     /* token ids in the shard (or the dataset, summed) */
	uint64_t documents;  /* documents: the samples */
	uint64_t max_id;     /* the largest id */
} bp_tokens;

/* The largest id a token of width bytes may hold; 0 for a width that is neither 2 nor 4. */
uint64_t bp_tokens_max_id(uint32_t width);

/*
 * Parse a TOKENS section, buf[0..len) (hostile bytes): exactly
 * BP_TOKENS_SIZE bytes, version 1, width 2 or 4, reserved 0, max_id and
 * eos (unless BP_TOKENS_NO_EOS) within the width's ids (bp_tokens_max_id),
 * tokens * width not wrapping. What it says against the rest of the shard
 * (documents, tokens, the schema) is checked when the shard opens
 * (pack_fields.h). fault->offset is from buf. @return 0, or -EBADMSG with
 * fault set; ret written only on success.
 */
int bp_tokens_decode(const uint8_t *buf, size_t len, bp_tokens *ret, bp_pack_fault *fault);
/* Encode t (its fields as bp_tokens_decode accepts them) into out. */
void bp_tokens_encode(const bp_tokens *t, uint8_t out[BP_TOKENS_SIZE]);

/* Dataset fingerprint from the shards' fingerprints in order (PACK.md §Fingerprints). */
uint64_t bp_pack_dataset_fingerprint(const uint64_t *shard_fps, size_t n);

/* Human name of a codec ("raw", "zstd", "zstd+dict") or "unknown". */
const char *bp_pack_codec_name(uint32_t codec);

#endif
