/* SPDX-License-Identifier: MIT */
/*
 * pack_priv.h - what pack.c (the format's codecs and the index's
 * validation) and pack_lookup.c (finding a sample's block) share: the
 * byte offsets of the fixed-size entries (PACK.md) and the reads of a
 * validated block table.
 */
#ifndef BATCHD_LIB_PACK_PRIV_H
#define BATCHD_LIB_PACK_PRIV_H

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

/* Field `field` (B_*) of block i of a validated block table. */
static inline uint64_t block_field(const bp_pack_index *idx, uint64_t i, size_t field)
{
	return bp_le64(idx->blocks + i * BP_PACK_BLOCK_ENTRY + field);
}

#endif
