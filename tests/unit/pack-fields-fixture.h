/* SPDX-License-Identifier: MIT */
/*
 * pack-fields-fixture.h - the record sets the fields suites share
 * (test-pack-fields.c, test-pack-fields-hostile.c, test-pack-tokens.c):
 * schemas, samples with every field's values and keys, their shard in
 * memory, a shard's bytes opened as a dataset, shards written as a
 * directory, and a writer on a memfd.
 *
 * One set of schemas and one generator, so that the shards the hostile
 * suite attacks are the ones the round trips prove sound. Deterministic
 * for a seed; not thread-safe; Check suites only.
 */
#ifndef BATCHD_TESTS_PACK_FIELDS_FIXTURE_H
#define BATCHD_TESTS_PACK_FIELDS_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pack-testlib.h"
#include "pack_fields.h"
#include "pack_file.h"
#include "pack_writer.h"

/*
 * image bytes, label int64 (3 classes: cat, dog, fish), mask bytes (16
 * each), score float32, caption str, weight float64, meta bytes.
 */
extern const bp_schema full_schema;
/* The first two fields: one bytes field and a label. */
extern const bp_schema labelled_schema;
/* The first three: two bytes fields. */
extern const bp_schema two_schema;

/* Samples with their fields' values and keys. */
typedef struct recs {
	const bp_schema *schema;
	pt_samples s;
	bp_field_value *vals;   /* n x schema->count */
	char **keys;            /* NULL without keys */
	char **text;            /* str values' storage, n x schema->count */
	size_t n;
} recs;

/*
 * n samples of schema from seed: the mask field always 16 bytes, other
 * bytes fields 0-300; with keys, key i is key_prefix/classK/NNNNNN.jpg.
 * Aborts the test on allocation failure. Free with recs_free().
 */
void recs_make(recs *r, const bp_schema *schema, size_t n, uint64_t seed, bool keys,
	       const char *key_prefix);
void recs_free(recs *r);
/* The shard of r in memory (blocks of per_block, frames over frame_size when not 0). */
void recs_build(const recs *r, size_t per_block, uint64_t frame_size, uint8_t **buf,
		size_t *len);
/* A memfd holding len bytes of buf, opened as a dataset. @return the open's result. */
int open_bytes(const uint8_t *buf, size_t len, bp_dataset **ret, bp_dataset_fault *fault);
/*
 * A temporary directory (/tmp/test-pack-fields-XXXXXX into dir, >= 64
 * bytes) holding the n shards bufs (lens bytes each) as NNN.bpk; removed,
 * shards and all, with remove_dir.
 */
void write_dir(char *dir, uint8_t **bufs, const size_t *lens, size_t n);
void remove_dir(const char *dir, size_t n);
/* A writer on a new memfd (*fd, the caller closes it), without a dictionary. */
bp_pack_writer *new_writer(int *fd);

#endif
