/* SPDX-License-Identifier: MIT */
/*
 * pack_image.h - `batchd-pack create --max-side N`: images larger than N
 * re-encoded at pack time as JPEGs whose longer side is N (FFCV's
 * max_resolution), so that a dataset of large photographs is stored,
 * read and decoded at the size training uses.
 *
 * Every bytes value of every sample is looked at: one whose bytes are a
 * JPEG, PNG or WebP (by their magic number) is sized from its header;
 * one larger than N is decoded whole, shrunk with PIL's bilinear filter
 * (lib/image's bi_fit) and encoded as an RGB JPEG (libjpeg-turbo, 4:2:0,
 * optimized Huffman tables) at the quality asked. Every other value,
 * images within N included, is stored byte for byte. An image larger
 * than N that cannot be decoded fails the pack: nothing is stored that
 * is not the picture.
 *
 * Thread rules: a pack_fit is one thread's at a time (each compression
 * worker has its own, and the main thread one for framed samples);
 * nothing is shared between them.
 */
#ifndef BATCHD_TOOLS_PACK_IMAGE_H
#define BATCHD_TOOLS_PACK_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "pack_input.h"

#define PACK_FIT_SIDE_MIN 16u
#define PACK_FIT_SIDE_MAX 65535u
#define PACK_FIT_QUALITY 90      /* --jpeg-quality's default */

typedef struct pack_fit pack_fit;

/* Bytes values seen: re-encoded, images within the size kept, and values that are no image. */
typedef struct pack_fit_counts {
	uint64_t fitted, kept, other;
} pack_fit_counts;

/* Why a block could not be fitted: its sample, that sample's bytes field (rank among them). */
typedef struct pack_fit_fault {
	size_t sample;
	uint32_t field;          /* PACK_FIT_WHOLE: the sample as a whole, or the block */
	char why[320];
} pack_fit_fault;

#define PACK_FIT_WHOLE UINT32_MAX

/* A fitter for max_side (PACK_FIT_SIDE_MIN ..) and JPEG quality (1 .. 100). @return 0 or -ENOMEM. */
int pack_fit_new(uint32_t max_side, int quality, pack_fit **ret);
void pack_fit_free(pack_fit *f); /* NULL is fine */

/*
 * Fit the images of n samples laid end to end in *raw (*raw_size bytes;
 * *raw_cap its capacity): sample i's nf bytes fields have the sizes
 * fsizes[i * nf .. i * nf + nf), end to end, sizes[i] in all. Each value
 * re-encoded is replaced in place of its bytes; *raw (swapped with a
 * buffer of f's when anything changed), *raw_cap, *raw_size, sizes and
 * fsizes then say the new bytes, and counts are added to.
 * @return 0; -EBADMSG (a corrupt image or one whose header cannot be
 * read), -ENOTSUP (an image kind lib/image does not decode), -E2BIG (a
 * decompression bomb, or a sample or the block grown past the pack's
 * limits), -ENOMEM, -EIO (the encoder), with fault saying which sample
 * and field and why; the block's bytes and sizes are then as they were.
 */
int pack_fit_block(pack_fit *f, uint8_t **raw, size_t *raw_cap, uint64_t *raw_size,
		   uint64_t *sizes, uint64_t *fsizes, size_t n, uint32_t nf,
		   pack_fit_counts *counts, pack_fit_fault *fault);

/*
 * Global sample id's bytes field sizes as the scan saw them, into dst
 * (one a bytes field, in schema order): its values' sizes, or for samples
 * of bytes alone (no schema) size, the sample's.
 */
void pack_fit_field_sizes(const pack_inputs *in, uint64_t id, uint64_t size, uint64_t *dst);

/*
 * Say on stderr why the sample called name could not be fitted within
 * max_side: its field (where it has more than one bytes field), the
 * fault's reason, and what to do.
 */
void pack_fit_report(const pack_inputs *in, uint32_t max_side, const char *name,
		     const pack_fit_fault *fault);

/*
 * The summary line's part (stdout): what became of the bytes values (a
 * sample's, or each field's of a grouped one), and the bytes as read.
 */
void pack_fit_print(const pack_fit_counts *c, uint32_t max_side, int quality, uint64_t read);

#endif
