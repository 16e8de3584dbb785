/* SPDX-License-Identifier: MIT */
/*
 * pack_image.h - `batchd-pack create --max-side N`: images larger than N
 * re-encoded at pack time as JPEGs whose longer side is N (FFCV's
 * max_resolution), so that a dataset of large photographs is stored,
 * read and decoded at the size training uses; and `--check-images`:
 * every image decoded whole at pack time, so that one that does not
 * decode is named while its file is at hand, not by a training run.
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
 * With check, every value that is an image by its magic number is
 * decoded whole, by the decoder batchd's own decode uses (lib/image, as
 * strict: libjpeg's warnings of corrupt data fail the image), and one
 * that does not decode fails the pack. With skip (--on-error=skip), a
 * sample holding an image that does not decode, checked or fitted, is
 * left out of its block instead, and said; the pack goes on.
 *
 * Thread rules: a pack_fit is one thread's at a time (each compression
 * worker has its own, and the main thread one for framed samples);
 * nothing is shared between them.
 */
#ifndef BATCHD_TOOLS_PACK_IMAGE_H
#define BATCHD_TOOLS_PACK_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pack_input.h"

#define PACK_FIT_SIDE_MIN 16u
#define PACK_FIT_SIDE_MAX 65535u
#define PACK_FIT_QUALITY 90      /* --jpeg-quality's default */

typedef struct pack_fit pack_fit;

/* What create asks of the fitters. */
typedef struct pack_fit_opts {
	uint32_t max_side;       /* --max-side (PACK_FIT_SIDE_MIN ..); 0: none */
	int quality;             /* --jpeg-quality, 1 .. 100, with max_side */
	bool check;              /* --check-images: decode every image whole */
	bool skip;               /* --on-error=skip: leave a sample whose image does not decode out */
} pack_fit_opts;

/*
 * Bytes values seen: re-encoded, images within the size kept (with check:
 * decoded), and values that are no image; and samples left out (skip).
 */
typedef struct pack_fit_counts {
	uint64_t fitted, kept, other, left;
} pack_fit_counts;

/* Why a block could not be fitted: its sample, that sample's bytes field (rank among them). */
typedef struct pack_fit_fault {
	size_t sample;
	uint32_t field;          /* PACK_FIT_WHOLE: the sample as a whole, or the block */
	int err;                 /* the value's negative errno; 0 for the sample or block grown */
	char why[320];
} pack_fit_fault;

#define PACK_FIT_WHOLE UINT32_MAX

/* The samples of a block left out (skip), in sample order: a fault each, saying why. */
typedef struct pack_fit_faults {
	pack_fit_fault *v;
	size_t n, cap;
} pack_fit_faults;

void pack_fit_faults_free(pack_fit_faults *l);

/* A fitter for o (max_side, check or both). @return 0 or -ENOMEM. */
int pack_fit_new(const pack_fit_opts *o, pack_fit **ret);
void pack_fit_free(pack_fit *f); /* NULL is fine */

/*
 * Fit (and with check, decode) the images of *n samples laid end to end
 * in *raw (*raw_size bytes; *raw_cap its capacity): sample i's nf bytes
 * fields have the sizes fsizes[i * nf .. i * nf + nf), end to end,
 * sizes[i] in all. Each value re-encoded is replaced in place of its
 * bytes; with skip, a sample with an image that does not decode is
 * removed, *n lessened, and a fault for it (its index among the *n
 * given) appended to left. *raw (swapped with a buffer of f's when
 * anything changed), *raw_cap, *raw_size, sizes and fsizes then say the
 * samples kept, and counts are added to.
 * @return 0; -EBADMSG (a corrupt image or one whose header cannot be
 * read), -ENOTSUP (an image kind lib/image does not decode), -E2BIG (a
 * decompression bomb, or a sample or the block grown past the pack's
 * limits), -ENOMEM, -EIO (the encoder), with fault saying which sample
 * and field and why; the block's bytes, sizes and left are then as they
 * were. Without skip, an image that does not decode is such an error.
 */
int pack_fit_block(pack_fit *f, uint8_t **raw, size_t *raw_cap, uint64_t *raw_size,
		   uint64_t *sizes, uint64_t *fsizes, size_t *n, uint32_t nf,
		   pack_fit_counts *counts, pack_fit_fault *fault, pack_fit_faults *left);

/*
 * Global sample id's bytes field sizes as the scan saw them, into dst
 * (one a bytes field, in schema order): its values' sizes, or for samples
 * of bytes alone (no schema) size, the sample's.
 */
void pack_fit_field_sizes(const pack_inputs *in, uint64_t id, uint64_t size, uint64_t *dst);

/*
 * Say on stderr why the sample called name could not be fitted within
 * max_side or decoded: its field (where it has more than one bytes
 * field), the fault's reason, and what to do; or, left_out (skip), that
 * it was left out and why.
 */
void pack_fit_report(const pack_inputs *in, const pack_fit_opts *o, const char *name,
		     const pack_fit_fault *fault, bool left_out);

/*
 * The summary line's part (stdout): what became of the bytes values (a
 * sample's, or each field's of a grouped one), and the bytes as read.
 */
void pack_fit_print(const pack_fit_counts *c, const pack_fit_opts *o, uint64_t read);

#endif
