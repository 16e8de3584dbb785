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

#include <stddef.h>
#include <stdint.h>

#include "pack.h"

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
 * Write the index and footer. @return 0, -ENODATA when no block was added,
 * -EINVAL while a framed sample is incomplete (the writer is unchanged),
 * -errno from write(2) (sticky, as for bp_pack_writer_add). ret_footer (may be NULL) receives the footer.
 */
int bp_pack_writer_finish(bp_pack_writer *w, bp_pack_footer *ret_footer);

void bp_pack_writer_free(bp_pack_writer *w);

#endif
