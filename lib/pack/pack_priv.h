/* SPDX-License-Identifier: MIT */
/*
 * pack_priv.h - what pack.c (the format's codecs and the index's
 * validation), pack_lookup.c (finding a sample's block), pack_fields.c,
 * pack_tokens.c and pack_read.c share: the byte offsets of the fixed-size
 * entries (PACK.md), the reads of a validated block table, and the token
 * pack's checks.
 */
#ifndef BATCHD_LIB_PACK_PRIV_H
#define BATCHD_LIB_PACK_PRIV_H

#include <stdbool.h>
#include <stddef.h>

#include "endian.h"
#include "pack.h"

/* Header field offsets. */
enum {
	H_MAGIC = 0,
	H_VERSION = 8,
	H_SIZE = 12,
	H_FLAGS = 16,
	H_DICT_OFFSET = 24,
	H_DICT_SIZE = 32,
	H_DICT_HASH = 40,
	H_DATA_OFFSET = 48,
	H_RESERVED = 56,
};

/* Footer field offsets. */
enum {
	F_INDEX_OFFSET = 0,
	F_INDEX_SIZE = 8,
	F_BLOCK_COUNT = 16,
	F_SAMPLE_COUNT = 24,
	F_RAW_BYTES = 32,
	F_MAX_SAMPLE = 40,
	F_FINGERPRINT = 48,
	F_VERSION = 56,
	F_SIZE = 60,
	F_CHECKSUM = 64,
	F_MAGIC = 72,
};

/* Block-table entry field offsets. */
enum {
	B_OFFSET = 0,
	B_STORED_SIZE = 8,
	B_RAW_SIZE = 16,
	B_FIRST_SAMPLE = 24,
	B_STORED_HASH = 32,
	B_RAW_HASH = 40,
	B_CODEC = 48,
	B_FRAMES = 52, /* reserved (0) in a version-1 index */
};

/* Section-table entry field offsets. */
enum {
	S_KIND = 0,
	S_FIELD = 4,
	S_OFFSET = 8,
	S_SIZE = 16,
	S_HASH = 24,
};

/* TOKENS field offsets. */
enum {
	T_VERSION = 0,
	T_WIDTH = 4,
	T_EOS = 8,
	T_TOKENS = 16,
	T_DOCUMENTS = 24,
	T_MAX_ID = 32,
	T_RESERVED = 40,
};

/* Whether kind is one of the four key sections. */
static inline bool key_kind(uint32_t kind)
{
	return kind >= BP_SECTION_KEYS && kind <= BP_SECTION_KEY_HASH_DIR;
}

struct bp_schema;
/*
 * The TOKENS section of a validated index (pack_tokens.c), its
 * BP_TOKENS_SIZE bytes at data, file offset at, against the shard's
 * decoded schema: decoded, the schema one bytes field "tokens", as many
 * documents as samples, every sample a non-zero multiple of the width,
 * the token count the samples' bytes over the width. @return 0, or
 * -EBADMSG with fault (file offsets) set; ret written only on success.
 */
int bp__tokens_parse(const bp_pack_index *idx, const struct bp_schema *schema,
		     const uint8_t *data, uint64_t at, bp_tokens *ret, bp_pack_fault *fault);
/* The largest of the whole width-byte ids in p[0..n) (0 for none). */
uint64_t bp__tokens_max(const uint8_t *p, size_t n, uint32_t width);

/* Field `field` (B_*) of block i of a validated block table. */
static inline uint64_t block_field(const bp_pack_index *idx, uint64_t i, size_t field)
{
	return bp_le64(idx->blocks + i * BP_PACK_BLOCK_ENTRY + field);
}

#endif
