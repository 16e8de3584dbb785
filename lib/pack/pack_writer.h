/* SPDX-License-Identifier: MIT */
/*
 * pack_writer.h - write one .bpk shard as a stream.
 *
 * The writer emits the header and dictionary first, then each block as it
 * is handed over (already encoded by bp_pack_block_encode, so the caller may
 * compress on as many threads as it likes), and keeps only the index in
 * memory; finishing appends the index and the footer. Output goes through
 * write(2) to a file descriptor the caller owns, so the caller decides on
 * temporary names, fsync and rename.
 *
 * Thread rules: one writer, one thread at a time.
 */
#ifndef BATCHD_PROTO_PACK_WRITER_H
#define BATCHD_PROTO_PACK_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pack.h"
#include "pack_fields.h"

typedef struct bp_pack_writer bp_pack_writer;

/*
 * Start a shard on fd (positioned at offset 0 of an empty file), with an
 * optional dictionary (dict_size <= BP_PACK_MAX_DICT).
 * @return 0; -E2BIG; -EINVAL (fd < 0, or dict NULL with a dict_size);
 * -ENOMEM; -errno from write(2), -EIO when it writes nothing. On success
 * *ret is the writer; free it with bp_pack_writer_free().
 */
int bp_pack_writer_new(int fd, const void *dict, size_t dict_size, bp_pack_writer **ret);

/*
 * Append one encoded block holding n samples of the given sizes, whose
 * raw bytes are exactly the sizes laid end to end (sum == raw_size).
 * @return 0; -EINVAL for inconsistent sizes or codec, or while a framed
 * sample is incomplete; -E2BIG when a limit
 * would be exceeded (sample, block, index); -ENOMEM; -errno from write(2).
 * A refused block (-EINVAL, -E2BIG, -ENOMEM) leaves the writer as it was.
 * A failed write sticks: every later add or finish returns its error, and
 * only bp_pack_writer_free() is left to do; after a successful finish they
 * return -EALREADY.
 */
int bp_pack_writer_add(bp_pack_writer *w, const bp_pack_encoded *enc, uint64_t raw_size,
		       const uint64_t *sample_sizes, size_t n);

/*
 * Append one frame of a sample too large for one block (PACK.md §Frames):
 * its raw_size bytes, stored as enc, come next in a sample of sample_size
 * bytes. The first call for a sample starts it, later ones (with the same
 * sample_size) continue it, and the one that brings the last byte ends it;
 * until then only frames of that sample may be added. Every frame but the
 * last holds at least BP_PACK_MIN_FRAME bytes, and a sample has at least
 * two frames (one that fits a block goes through bp_pack_writer_add). A
 * shard with framed samples gets footer version 2.
 * @return 0; -EINVAL for a frame that breaks those rules or whose codec
 * does not fit its sizes; -E2BIG (sample, block or index limit); -ENOMEM;
 * -errno from write(2). Refusals leave the writer as it was; a failed
 * write sticks, as for bp_pack_writer_add.
 */
int bp_pack_writer_add_frame(bp_pack_writer *w, const bp_pack_encoded *enc, uint64_t raw_size,
			     uint64_t sample_size);

/* Bytes the framed sample being written still needs; 0 between samples. */
uint64_t bp_pack_writer_owed(const bp_pack_writer *w);

/* Bytes written so far (header, dictionary and blocks). */
uint64_t bp_pack_writer_offset(const bp_pack_writer *w);
uint64_t bp_pack_writer_samples(const bp_pack_writer *w);

/*
 * Give the shard a schema (pack_fields.h, PACK.md §Fields), and keys when
 * keys is true; s NULL means bp_schema_default(). Only before the first
 * block. The writer keeps a copy; the schema's fixed sizes are ignored and
 * computed at finish. From then on every sample needs its fields
 * (bp_pack_writer_add_fields), and finish writes the sections and footer
 * version 3.
 * @return 0; -EINVAL (a block was added, a schema was set already, or s
 * breaks a rule: fault, which may be NULL, names it); -ENOMEM.
 */
int bp_pack_writer_set_schema(bp_pack_writer *w, const bp_schema *s, bool keys);
int bp_pack_writer_set_schema_checked(bp_pack_writer *w, const bp_schema *s, bool keys,
				      bp_pack_fault *fault);

/*
 * Make the shard a token pack (PACK.md §Token packs), in place of
 * bp_pack_writer_set_schema and before the first block: the schema one
 * bytes field "tokens", no keys, each sample one document of little-endian
 * ids of width bytes (2 or 4); eos its end-of-document id, or
 * BP_TOKENS_NO_EOS. From then on every block and frame must come with its
 * raw bytes (enc->raw, as bp_pack_block_encode sets it), every sample and
 * every frame a non-zero multiple of width bytes; the writer reads the ids
 * for the largest one, and finish writes the TOKENS section (counts from
 * the samples, the largest id seen). Samples take no
 * bp_pack_writer_add_fields. bp_pack_writer_add and _add_frame refuse a
 * block breaking these rules with -EINVAL, and one holding an id over
 * bp_tokens_max_id(width) with -ERANGE, leaving the writer as it was.
 * @return 0; -EINVAL (width neither 2 nor 4, eos beyond the width's ids,
 * a block added or a schema set already); -ENOMEM.
 */
int bp_pack_writer_set_tokens(bp_pack_writer *w, uint32_t width, uint64_t eos);

/* One field's value of one sample, for bp_pack_writer_add_fields. */
typedef struct bp_field_value {
	const void *data;  /* str: its bytes (may be NULL when size is 0) */
	uint64_t size;     /* bytes: the field's size within the sample; str: its length */
	int64_t i64;       /* int64 */
	double f64;        /* float32 (stored as float) and float64 */
} bp_field_value;

/*
 * The fields of the next sample (in sample order, counting from 0; may run
 * ahead of the blocks): vals[f] for every schema field, and its key
 * (key_len bytes, 1 .. BP_KEY_MAX, no NUL) when keys were asked for, else
 * key NULL. A sample's bytes fields, laid end to end in schema order, are
 * its bytes in the blocks.
 * @return 0; -EINVAL (no schema set, a token pack, a key where none or none where one is
 * due, a NUL in a key, an int64 outside its field's classes); -E2BIG (a
 * size over a limit); -ENOMEM; the writer's sticky error. Refusals leave
 * the writer as it was.
 */
int bp_pack_writer_add_fields(bp_pack_writer *w, const bp_field_value *vals, const char *key,
			      size_t key_len);

/*
 * After finish returned -EEXIST: the key two samples share (valid until
 * the writer is freed). @return 0, or -ENOENT when finish reported none.
 */
int bp_pack_writer_duplicate_key(const bp_pack_writer *w, const char **ret_key, size_t *ret_len);

/*
 * Write the sections (when a schema was set; a token pack's TOKENS with
 * them), the index and the footer.
 * @return 0, -ENODATA when no block was added,
 * -EINVAL while a framed sample is incomplete, or with a schema when some
 * sample lacks its fields or its bytes fields do not add up to its size;
 * -EEXIST when two samples have one key (bp_pack_writer_duplicate_key);
 * -ENOMEM (these refusals leave the writer unchanged, but an -ENOMEM once
 * sections are being written, which sticks), -errno from write(2)
 * (sticky, as for bp_pack_writer_add). ret_footer (may be NULL) receives
 * the footer. Memory at finish with keys: 24 bytes a sample beside the
 * keys themselves (the sorted key-hash table and the keys' offsets).
 */
int bp_pack_writer_finish(bp_pack_writer *w, bp_pack_footer *ret_footer);

void bp_pack_writer_free(bp_pack_writer *w);

#endif
