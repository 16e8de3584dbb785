/* SPDX-License-Identifier: MIT */
/*
 * pack_fields.h - samples as records of named fields: the schema, the
 * dense columns of scalar and text fields, the sizes that split a sample
 * into its bytes fields, and the sample keys (PACK.md §Fields).
 *
 * A sample's stored bytes are its bytes fields laid end to end in schema
 * order, so blocks, frames, the cache and the copy path stay as they were;
 * everything else about a sample lives in sections beside the blocks. A
 * pack written before fields existed reads as one bytes field "data" and
 * no keys.
 *
 * The schema codec is shared with the session memfd (PROTOCOL.md), where
 * the client decodes what the daemon wrote: decoding distrusts its input.
 *
 * Thread rules: schemas, columns and a bp_dataset's field accessors are
 * read-only after open and may be used from any thread; a bp_key_reader
 * belongs to one thread at a time. The functions on caller-held bytes
 * (the schema codec, bp_pack_fields_parse, the key checks) are reentrant;
 * a ZSTD_DCtx passed in must not be used by another thread meanwhile.
 */
#ifndef BATCHD_PROTO_PACK_FIELDS_H
#define BATCHD_PROTO_PACK_FIELDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <zstd.h>

#include "pack.h"
#include "pack_file.h"

#define BP_FIELD_MAX        64u               /* fields in a schema */
#define BP_FIELD_NAME_MAX   64u               /* bytes of a field name */
#define BP_CLASS_MAX        (1u << 20)        /* class names of one field */
#define BP_CLASS_NAME_MAX   1024u             /* bytes of one class name */
#define BP_SCHEMA_MAX       (UINT64_C(64) << 20) /* encoded schema bytes */
#define BP_STR_MAX          65536u            /* bytes of one str value */
#define BP_KEY_MAX          4096u             /* bytes of one key */
#define BP_KEYS_PER_BLOCK   1024u             /* keys in a key block but the last */
#define BP_KEY_HASH_PAGE    4096u             /* entries in a key-hash page but the last */

enum bp_field_type {
	BP_FIELD_BYTES   = 1, /* variable length, in the blocks */
	BP_FIELD_INT64   = 2, /* dense column, 8 bytes a sample */
	BP_FIELD_FLOAT32 = 3, /* dense column, 4 bytes a sample */
	BP_FIELD_FLOAT64 = 4, /* dense column, 8 bytes a sample */
	BP_FIELD_STR     = 5, /* short text, offsets and bytes column */
};

typedef struct bp_field {
	char name[BP_FIELD_NAME_MAX + 1]; /* NUL-terminated, [A-Za-z0-9_.-]+ */
	uint32_t type;                    /* enum bp_field_type */
	uint32_t class_count;             /* int64 fields only: names of values 0 .. class_count-1 */
	uint64_t fixed_size;              /* bytes fields: every sample's size when all are
					   * equal (set by the writer at finish), else 0 */
	char **classes;                   /* class_count NUL-terminated names, or NULL */
} bp_field;

typedef struct bp_schema {
	uint32_t count;                   /* 1 .. BP_FIELD_MAX */
	bp_field *fields;
} bp_schema;

/* "bytes", "int64", "float32", "float64", "str"; NULL for an unknown type. */
const char *bp_field_type_name(uint32_t type);
/* The type called name, or 0. */
uint32_t bp_field_type_parse(const char *name);
/* Bytes one value of a scalar type takes in its column (8, 4, 8); 0 otherwise. */
size_t bp_field_scalar_size(uint32_t type);
/* The index of the field called name, or -ENOENT. */
int bp_schema_find(const bp_schema *s, const char *name);
/* Bytes fields in s, and the position of field i among them (i must be one). */
uint32_t bp_schema_bytes_fields(const bp_schema *s);
uint32_t bp_schema_bytes_rank(const bp_schema *s, uint32_t i);

/*
 * Check a schema a writer was handed (names, types, uniqueness, limits).
 * @return 0 or -EINVAL with fault->what naming the rule broken.
 */
int bp_schema_check(const bp_schema *s, bp_pack_fault *fault);
/* Encoded size of a checked schema. */
uint64_t bp_schema_encoded_size(const bp_schema *s);
/* Encode a checked schema into out (bp_schema_encoded_size bytes). */
void bp_schema_encode(const bp_schema *s, uint8_t *out);
/*
 * Decode and check len untrusted bytes. @return 0; -EINVAL / -E2BIG with
 * fault->what and fault->offset (from buf) set; -ENOMEM. On success *ret
 * holds heap copies; free with bp_schema_clear.
 */
int bp_schema_decode(const uint8_t *buf, size_t len, bp_schema *ret, bp_pack_fault *fault);
/* Deep copy. @return 0 or -ENOMEM. */
int bp_schema_copy(const bp_schema *s, bp_schema *ret);
/* Free what decode or copy allocated; leaves s empty. NULL is fine. */
void bp_schema_clear(bp_schema *s);
/* The schema of a pack written before fields: one bytes field "data". */
const bp_schema *bp_schema_default(void);

/* ---- an open dataset's fields (every shard has the same schema) -------- */

/* Never NULL: a pack without a schema section reads as bp_schema_default(). */
const bp_schema *bp_dataset_schema(const bp_dataset *ds);
/* Whether every shard stores keys. */
bool bp_dataset_has_keys(const bp_dataset *ds);
/*
 * The dataset's tokens when it is a token pack (PACK.md §Token packs):
 * width and eos, which all its shards share, and tokens, documents and
 * the largest id over all its shards (the counts summed). Any thread.
 * @return 0, or -ENODATA when it is no token pack.
 */
int bp_dataset_tokens(const bp_dataset *ds, bp_tokens *ret);

/*
 * Where field f (a bytes field) of global sample id lies within the
 * sample's bytes: *ret_offset from the sample's start, *ret_size bytes.
 * With one bytes field that is the whole sample.
 */
void bp_dataset_field_span(const bp_dataset *ds, uint64_t id, uint32_t f,
			   uint64_t *ret_offset, uint64_t *ret_size);
/*
 * The value of scalar field f of sample id, copied into out
 * (bp_field_scalar_size bytes, little-endian as stored = host order on
 * the little-endian hosts batchd supports).
 */
void bp_dataset_field_scalar(const bp_dataset *ds, uint64_t id, uint32_t f, void *out);
/* The text of str field f of sample id: *ret_data (not NUL-terminated), *ret_size bytes. */
void bp_dataset_field_str(const bp_dataset *ds, uint64_t id, uint32_t f,
			  const uint8_t **ret_data, uint64_t *ret_size);
/* Smallest and largest value of scalar field f over the dataset, as doubles (int64 exact below 2^53). */
void bp_dataset_field_range(const bp_dataset *ds, uint32_t f, double *ret_min, double *ret_max);
/* Heap bytes the columns, str columns and field sizes take. */
size_t bp_dataset_field_bytes(const bp_dataset *ds);

/*
 * Keys, read on demand: nothing about keys is loaded at open beyond the
 * section table. A reader decodes one key block at a time and keeps the
 * last one. @return 0; -ENODATA when the dataset has no keys; -ENOMEM.
 */
typedef struct bp_key_reader bp_key_reader;
int bp_key_reader_new(const bp_dataset *ds, bp_key_reader **ret);
void bp_key_reader_free(bp_key_reader *r); /* NULL is fine */
/*
 * The key of global sample id: *ret_key (not NUL-terminated, valid until
 * the reader's next call), *ret_len bytes. @return 0; -EINVAL for id out
 * of range; -EBADMSG / -EIO / -E2BIG with fault set for a damaged key block.
 */
int bp_key_reader_get(bp_key_reader *r, uint64_t id, const char **ret_key, size_t *ret_len,
		      bp_dataset_fault *fault);
/*
 * The global id of the sample whose key is key[0..len): O(log n) page
 * reads of the key-hash table, then the candidate's key compared.
 * @return 0; -ENOENT when no sample has that key; errors as for _get.
 */
int bp_key_reader_find(bp_key_reader *r, const char *key, size_t len, uint64_t *ret_id,
		       bp_dataset_fault *fault);

/* ---- one shard's sections (pure: caller-held bytes, no I/O) ---------- */

#define BP_KEY_DIR_ENTRY      32u /* KEY_DIR: per key block */
#define BP_KEY_HASH_ENTRY     16u /* KEY_HASH: (u64 hash, u64 id) per sample */
#define BP_KEY_HASH_DIR_ENTRY 16u /* KEY_HASH_DIR: (u64 first hash, u64 page hash) per page */
/* Raw bytes of one key block at most: its lengths and its keys. */
#define BP_KEY_BLOCK_MAX      (BP_KEYS_PER_BLOCK * (4u + BP_KEY_MAX))

/* A field's column in a shard: where its section's bytes are and what they span. */
typedef struct bp_pack_column {
	const uint8_t *data; /* COLUMN values; STR (sample_count + 1) u64 offsets then bytes; NULL for bytes */
	uint64_t size;       /* bytes at data */
	double min, max;     /* scalar fields: the smallest and largest value in the shard */
} bp_pack_column;

/* The validated sections of one shard that a reader needs per batch. */
typedef struct bp_pack_fields {
	bp_schema schema;        /* heap; a copy of bp_schema_default() for a shard before fields */
	bp_pack_column *columns; /* schema.count entries */
	const uint8_t *sizes;    /* SIZES (sample_count x bytes_fields u32), NULL with one bytes field */
	uint32_t bytes_fields;
	bool keys;               /* the shard has the four key sections */
	bool has_tokens;         /* a token pack: tokens is its TOKENS section */
	bp_tokens tokens;
} bp_pack_fields;

/*
 * The file range holding the sections that open loads (SCHEMA, COLUMN,
 * STR, SIZES, TOKENS: all but the keys, so contiguous, at the start of
 * the table, since a token pack has no keys) of a validated index; size 0
 * for a shard before fields.
 */
void bp_pack_fields_extent(const bp_pack_index *idx, uint64_t *ret_offset, uint64_t *ret_size);

/*
 * Check and map the loaded sections of a validated index: bytes holds the
 * file's bytes [offset, offset + len), which must cover the extent. Checks
 * each section's hash, decodes the schema, requires exactly the sections
 * it implies (a column per scalar field, a str section per str field,
 * SIZES with >= 2 bytes fields) at their exact sizes, int64 values within
 * their class count, str offsets, sizes adding up to each sample and the
 * schema's fixed sizes; in a token pack the TOKENS section's rules
 * (PACK.md §Token packs: the schema, whole ids in every sample, the
 * counts). ret's columns point into bytes (keep it alive).
 * @return 0; -EBADMSG / -E2BIG / -ENOTSUP with fault naming the field and
 * its file offset; -ENOMEM; -EINVAL when bytes does not cover the extent.
 */
int bp_pack_fields_parse(const bp_pack_index *idx, const uint8_t *bytes, uint64_t offset,
			 uint64_t len, bp_pack_fields *ret, bp_pack_fault *fault);
/* Free what a parse allocated; leaves pf empty. NULL is fine. */
void bp_pack_fields_clear(bp_pack_fields *pf);
/* Heap bytes of pf beside the section bytes it points into. */
size_t bp_pack_fields_bytes(const bp_pack_fields *pf);

/* One KEY_DIR entry. */
typedef struct bp_pack_key_block {
	uint64_t offset;      /* within the KEYS section */
	uint32_t stored_size;
	uint32_t raw_size;
	uint32_t codec;       /* BP_CODEC_RAW or BP_CODEC_ZSTD */
	uint32_t count;       /* keys it holds */
	uint64_t hash;        /* XXH3-64 of the stored bytes */
} bp_pack_key_block;

/*
 * Check the KEY_DIR section's bytes of a validated index with keys: the
 * section hash, then every entry (blocks tile KEYS in order, BP_KEYS_PER_BLOCK
 * keys each but the last, sizes within BP_KEY_BLOCK_MAX, codec rules).
 * @return 0 or -EBADMSG / -ENOTSUP / -E2BIG with fault set.
 */
int bp_pack_key_dir_check(const bp_pack_index *idx, const uint8_t *dir, bp_pack_fault *fault);
void bp_pack_key_dir_entry(const uint8_t *dir, uint64_t i, bp_pack_key_block *ret);
void bp_pack_key_dir_entry_encode(const bp_pack_key_block *kb, uint8_t out[BP_KEY_DIR_ENTRY]);
/*
 * Decode key block kb from its stored bytes (file offset at, for faults)
 * into out (>= kb->raw_size bytes): hash, one zstd frame of the declared
 * size under the window cap, then the lengths (1 .. BP_KEY_MAX each,
 * adding up) and no NUL in a key. dctx as for bp_pack_block_decode.
 * @return 0 or -EBADMSG with fault set; -EINVAL for a short out.
 */
int bp_pack_key_block_decode(const bp_pack_key_block *kb, uint64_t at, const uint8_t *stored,
			     ZSTD_DCtx *dctx, uint8_t *out, size_t out_cap, bp_pack_fault *fault);
/* Key i (< kb->count) of a decoded key block. */
void bp_pack_key_block_key(const uint8_t *raw, uint32_t count, uint32_t i, const char **ret_key,
			   size_t *ret_len);
/*
 * Check the KEY_HASH_DIR section's bytes of a validated index with keys:
 * section hash, first hashes nondecreasing. @return 0 or -EBADMSG.
 */
int bp_pack_key_hash_dir_check(const bp_pack_index *idx, const uint8_t *dir,
			       bp_pack_fault *fault);
/*
 * Check key-hash page p (its bytes, at file offset at) against the
 * directory: page hash, entries sorted by (hash, id), ids in range, the
 * first hash the directory's, the last not above the next page's first.
 * @return 0 or -EBADMSG.
 */
int bp_pack_key_page_check(const bp_pack_index *idx, const uint8_t *dir, uint64_t p,
			   const uint8_t *page, uint64_t at, bp_pack_fault *fault);

/* Reads len bytes at file offset off of the shard being checked. @return 0 or -errno. */
typedef int (*bp_pack_read_fn)(void *ctx, void *buf, size_t len, uint64_t off);
/*
 * Check every byte of a shard's key sections: both directories, every key
 * block and key-hash page, every key's hash against its entry, every id
 * once. Memory: 9 bytes a sample. @return 0; -EBADMSG / -ENOTSUP / -E2BIG
 * with fault set; -ENOMEM; a read's -errno (fault "cannot read keys").
 */
int bp_pack_keys_verify(const bp_pack_index *idx, bp_pack_read_fn read, void *ctx,
			ZSTD_DCtx *dctx, bp_pack_fault *fault);

/* ---- lookups on an open dataset --------------------------------------- */

/* Shard i's fields (i < bp_dataset_shard_count). */
const bp_pack_fields *bp_dataset_shard_fields(const bp_dataset *ds, size_t i);
/* The shard holding global id (< bp_dataset_samples), O(1). */
size_t bp_dataset_shard_of(const bp_dataset *ds, uint64_t id);

#endif
