/* SPDX-License-Identifier: MIT */
/*
 * pack-testlib.h - sample generators and shard builders shared by the pack
 * tests and the fuzz corpus generator.
 *
 * The tests need the same few things over and over: deterministic samples
 * of a chosen kind (incompressible, text, JSON-like records, a mix with
 * empty samples), a small trained zstd dictionary, and a shard written with
 * bp_pack_writer from those samples, either to a file or into memory. Keeping
 * them here means every test builds packs the way batchd-pack does: encode
 * each block with bp_pack_block_encode, hand it to the writer, finish.
 *
 * The pack tests also take packs apart and put them back with one lie in
 * them (pt_forge): each block's stored bytes, the entries, the sample table
 * and the footer, laid out again with the fingerprint and checksum sealed
 * over the lie, so that only the semantic check under test can object.
 *
 * Everything is deterministic for a given seed so failures reproduce and the
 * generated corpus is stable. Not thread-safe; tests are single-threaded.
 */
#ifndef BATCHD_TESTS_PACK_TESTLIB_H
#define BATCHD_TESTS_PACK_TESTLIB_H

#include <stddef.h>
#include <stdint.h>

#include <stdbool.h>

#include "pack.h"
#include "pack_fields.h"
#include "pack_writer.h"

/*
 * Field offsets as PACK.md lays them out, restated here so the tests check
 * the specification rather than whatever the encoder happens to write.
 */
enum {
	HDR_MAGIC = 0,
	HDR_VERSION = 8,       /* u32 */
	HDR_SIZE = 12,         /* u32, = 64 */
	HDR_FLAGS = 16,        /* u64, no flags defined in version 1 */
	HDR_DICT_OFFSET = 24,
	HDR_DICT_SIZE = 32,
	HDR_DICT_HASH = 40,
	HDR_DATA_OFFSET = 48,
	HDR_RESERVED = 56,     /* 8 bytes, zero */
};

enum {
	FTR_INDEX_OFFSET = 0,
	FTR_INDEX_SIZE = 8,
	FTR_BLOCK_COUNT = 16,
	FTR_SAMPLE_COUNT = 24,
	FTR_RAW_BYTES = 32,
	FTR_MAX_SAMPLE = 40,
	FTR_FINGERPRINT = 48,
	FTR_VERSION = 56,      /* u32 */
	FTR_SIZE = 60,         /* u32, = 80 */
	FTR_CHECKSUM = 64,
	FTR_MAGIC = 72,
};

enum {
	BLK_OFFSET = 0,
	BLK_STORED_SIZE = 8,
	BLK_RAW_SIZE = 16,
	BLK_FIRST_SAMPLE = 24,
	BLK_STORED_HASH = 32,
	BLK_RAW_HASH = 40,
	BLK_CODEC = 48,        /* u32 */
	BLK_FRAMES = 52,       /* u32: frames left of a framed sample; zero in a version-1 index */
};

/* splitmix64: the next value of *state. */
uint64_t pt_rand(uint64_t *state);
/* A value in [lo, hi]. */
uint64_t pt_rand_range(uint64_t *state, uint64_t lo, uint64_t hi);
void pt_fill_random(uint64_t *state, uint8_t *buf, size_t n);
/* Words from a small vocabulary separated by spaces: compresses well. */
void pt_fill_text(uint64_t *state, uint8_t *buf, size_t n);

enum pt_kind {
	PT_RANDOM,  /* uniform bytes: incompressible, blocks get stored raw */
	PT_TEXT,    /* words from a small vocabulary: compresses well */
	PT_JSON,    /* JSON-like records: compresses much better with a dictionary */
	PT_MIXED,   /* each sample one of the above, about one in eight empty */
};

/* Samples laid end to end in data; sample i is data[offsets[i]..+sizes[i]). */
typedef struct pt_samples {
	uint8_t *data;
	uint64_t *sizes;
	uint64_t *offsets;
	size_t n;
	uint64_t total;
	uint64_t max_size;
} pt_samples;

/*
 * Make n samples of kind with sizes in [min_size, max_size] (JSON records
 * ignore the bounds and are as long as they come out, < 256 bytes).
 * Aborts on allocation failure. Free with pt_samples_free().
 */
void pt_samples_make(pt_samples *s, size_t n, size_t min_size, size_t max_size,
		     enum pt_kind kind, uint64_t seed);
/*
 * Make n samples of exactly the given sizes: sample i random bytes when
 * bit i of random_mask is set (i < 64), else text. Aborts on allocation
 * failure. Free with pt_samples_free().
 */
void pt_samples_sized(pt_samples *s, const uint64_t *sizes, size_t n, uint64_t random_mask,
		      uint64_t seed);
void pt_samples_free(pt_samples *s);
const uint8_t *pt_sample(const pt_samples *s, size_t i);

/* One JSON-like record into buf (cap >= 256); @return its length. */
size_t pt_json_record(uint64_t *state, char *buf, size_t cap);

/*
 * Train a zstd dictionary of at most cap bytes (>= 256) on `records`
 * JSON-like records. @return the dictionary size; aborts on failure.
 */
size_t pt_dict_train(void *dict, size_t cap, size_t records, uint64_t seed);

/*
 * Write a shard holding all of s to fd (an empty file at offset 0): blocks
 * of per_block samples each (the last may hold fewer), compressed at `level`
 * with the dictionary when dict_size > 0. @return 0 or the first negative
 * errno from the pack API; ret_footer (may be NULL) gets the footer.
 */
int pt_pack_write(int fd, const pt_samples *s, size_t per_block, const void *dict,
		  size_t dict_size, int level, bp_pack_footer *ret_footer);

/*
 * As pt_pack_write, with each sample over frame_size bytes (when frame_size
 * is not 0) stored alone as frames of frame_size bytes, the last the rest
 * (bp_pack_writer_add_frame); the blocks of whole samples around it hold
 * up to per_block samples each.
 */
int pt_pack_write_framed(int fd, const pt_samples *s, size_t per_block, uint64_t frame_size,
			 const void *dict, size_t dict_size, int level, bp_pack_footer *ret_footer);

/*
 * The same shard in memory: written to a memfd, then read back into an
 * exactly sized malloc'd buffer (so sanitizers catch any read past the end).
 * Caller frees *ret_buf. @return 0 or a negative errno.
 */
int pt_pack_build(const pt_samples *s, size_t per_block, const void *dict, size_t dict_size,
		  int level, uint8_t **ret_buf, size_t *ret_len);

/* pt_pack_build of pt_pack_write_framed's shard. */
int pt_pack_build_framed(const pt_samples *s, size_t per_block, uint64_t frame_size,
			 const void *dict, size_t dict_size, int level, uint8_t **ret_buf,
			 size_t *ret_len);

/*
 * Fields to write with a shard: the schema (NULL for the default), every
 * sample's values (schema count a sample, sample-major) and its key
 * (NUL-terminated; keys NULL for a shard without them). The samples' bytes
 * are their bytes fields end to end.
 */
typedef struct pt_fields {
	const bp_schema *schema;
	const bp_field_value *vals;
	const char *const *keys;
	/* Not 0: a token pack of ids of this width (schema, vals and keys unused). */
	uint32_t token_width;
	uint64_t token_eos;      /* its end-of-document id, or BP_TOKENS_NO_EOS */
} pt_fields;

/*
 * As pt_pack_write_framed (no dictionary, level 3), with the schema set
 * and every sample's fields added before its blocks. @return 0 or the
 * first negative errno from the pack API.
 */
int pt_pack_write_fields(int fd, const pt_samples *s, size_t per_block, uint64_t frame_size,
			 const pt_fields *fields, bp_pack_footer *ret_footer);
/* pt_pack_build of pt_pack_write_fields's shard. */
int pt_pack_build_fields(const pt_samples *s, size_t per_block, uint64_t frame_size,
			 const pt_fields *fields, uint8_t **ret_buf, size_t *ret_len);
/*
 * The bytes of the first section of kind (and field, unless
 * BP_SECTION_NO_FIELD) of a version-3 pack in buf, *ret_size (may be NULL)
 * its size; NULL when there is none.
 */
uint8_t *pt_section(uint8_t *buf, size_t len, uint32_t kind, uint32_t field, uint64_t *ret_size);
/*
 * Seal a version-3 pack again after a test changed bytes in it: with keys,
 * the key-block hashes in KEY_DIR and the page entries of KEY_HASH_DIR
 * first; then every section hash, the fingerprint and the checksum.
 */
void pt_reseal(uint8_t *buf, size_t len, bool keys);

/* Read all of fd (from offset 0) into a malloc'd buffer. @return 0 or -errno. */
int pt_read_fd(int fd, uint8_t **ret_buf, size_t *ret_len);

/* Little-endian helpers for poking at encoded fields. */
uint64_t pt_le64(const uint8_t *p);
uint32_t pt_le32(const uint8_t *p);
void pt_put_le64(uint8_t *p, uint64_t v);
void pt_put_le32(uint8_t *p, uint32_t v);

/*
 * Check suites only: a fresh DCtx set up as the reader sets one up
 * (bp_pack_dctx_init). Caller frees with ZSTD_freeDCtx().
 */
ZSTD_DCtx *pt_dctx_new(void);

/* ---- packs taken apart and forged ---- */

#define PT_FORGE_MAX_BLOCKS 16
#define PT_FORGE_MAX_SAMPLES 32

/*
 * A pack taken apart: the header, the dictionary, each block's stored bytes
 * and entry, the sample table and the footer. pt_forge_layout() sets what a
 * correct writer would (offsets, stored sizes and hashes, footer totals);
 * a test then lies about one thing, and pt_forge_seal() lays the pack out
 * again with the fingerprint and checksum computed over the lie.
 */
typedef struct pt_forge {
	uint8_t header[BP_PACK_HEADER_SIZE];
	uint8_t *dict;
	size_t dict_size;
	uint8_t *stored[PT_FORGE_MAX_BLOCKS];   /* each block's bytes as written to the file */
	size_t stored_len[PT_FORGE_MAX_BLOCKS];
	/* Zero bytes laid before block i (gap[nb]: after the last block, before the index). */
	size_t gap[PT_FORGE_MAX_BLOCKS + 1];
	bp_pack_block blocks[PT_FORGE_MAX_BLOCKS];
	size_t nb;
	uint64_t soff[PT_FORGE_MAX_SAMPLES], ssize[PT_FORGE_MAX_SAMPLES];
	size_t ns;
	bp_pack_footer f;
	void (*patch_index)(uint8_t *index);    /* called on the encoded index before sealing */
} pt_forge;

/*
 * Take apart the pack in buf (which must parse) into g, laid out again as
 * pt_forge_layout does. @return 0; the parse's negative errno; -E2BIG when
 * it has more blocks or samples than a pt_forge holds. Free with pt_forge_free.
 */
int pt_forge_from(pt_forge *g, const uint8_t *buf, size_t len);
void pt_forge_free(pt_forge *g);
/*
 * Lay out the blocks end to end after the dictionary (and the gaps): each
 * entry's offset, stored size and stored hash (and a raw block's raw hash)
 * from its bytes; the footer's index place, counts, raw total and largest
 * sample from the tables.
 */
void pt_forge_layout(pt_forge *g);
/* Give block i new stored bytes and codec, and lay out again; its raw side is the caller's. */
void pt_forge_set_stored(pt_forge *g, size_t i, const uint8_t *bytes, size_t n, uint32_t codec);
/*
 * The pack: header, dictionary, gaps and block bytes, the index encoded from
 * the entries as they stand (whatever they claim), and the footer sealed
 * over that index. Malloc'd to its exact size so sanitizers see any read
 * past the end; caller frees *ret.
 */
void pt_forge_seal(const pt_forge *g, uint8_t **ret, size_t *ret_len);
/* XXH3-64 of size bytes at offset of the sealed pack (within its data region). */
uint64_t pt_forge_hash(const pt_forge *g, uint64_t offset, uint64_t size);

/*
 * Check suites only: seal and parse g. On rejection the fault must name a
 * reason, a place inside the file and a block >= -1, and the view must be
 * untouched (else the test fails). ret_fault (may be NULL) gets the fault.
 * @return the parse's result.
 */
int pt_forge_parse(const pt_forge *g, bp_pack_fault *ret_fault);
/* Check suites only: the fault offset lies in block entry k of g's sealed table. */
void pt_forge_expect_in_entry(const pt_forge *g, const bp_pack_fault *f, size_t k);

#endif
