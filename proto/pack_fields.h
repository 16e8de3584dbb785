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
 * belongs to one thread at a time.
 */
#ifndef BATCHD_PROTO_PACK_FIELDS_H
#define BATCHD_PROTO_PACK_FIELDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

#endif
