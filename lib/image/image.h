/* SPDX-License-Identifier: MIT */
/*
 * image.h - libbatchimage: one encoded image (JPEG, PNG, WebP) into a
 * dense uint8 RGB tensor, with torchvision's training and evaluation
 * transforms.
 *
 * Vision input is decode and augmentation: batchd does both where the
 * bytes already are, on its decode threads, so a trainer gets tensors.
 * The crop is chosen before decoding, from the header's dimensions, so
 * that a JPEG is decoded only where the crop is and, when the crop will
 * be shrunk by half or more, at 1/2, 1/4 or 1/8 scale in the DCT domain
 * (libjpeg-turbo's scaled IDCT): most of an image is never decoded at
 * full size. The resize that follows is PIL's (and so torchvision's)
 * bilinear filter with antialiasing (image_resize.c).
 *
 * Every random choice is a pure function of (seed, epoch, id): a sample
 * gets the same crop and flip in every run, on every rank, after any
 * resume (bi_params_for says which, for tests and for clients).
 *
 * Images are untrusted: their dimensions are checked against max_pixels
 * before anything is allocated, every decoder's errors come back as a
 * negative errno with a one-line reason, and no decoder aborts or exits.
 *
 * Thread rules: a bi_scratch is one thread's at a time; everything else
 * is pure, any thread.
 */
#ifndef BATCHD_IMAGE_H
#define BATCHD_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { BI_CROP_RANDOM_RESIZED = 1, BI_CROP_CENTER = 2 } bi_crop;

/* What to make of an image. bi_spec_check fills the defaults for fields left 0. */
typedef struct bi_spec {
	uint32_t height, width;      /* the output tensor's */
	uint8_t crop;                /* bi_crop */
	/*
	 * CENTER: torchvision's Resize(resize) (the short side to resize,
	 * aspect kept), then CenterCrop(height, width); 0: resize =
	 * max(height, width), a plain center crop of the short side.
	 */
	uint32_t resize;
	float scale_min, scale_max;  /* RANDOM_RESIZED: area fraction; default 0.08, 1.0 */
	float ratio_min, ratio_max;  /* RANDOM_RESIZED: w/h; default 3/4, 4/3 */
	float flip;                  /* horizontal flip probability, 0 .. 1 */
	bool nhwc;                   /* layout: false [3,H,W] (default), true [H,W,3] */
	/*
	 * Decode JPEGs at 1/2, 1/4 or 1/8 scale when the crop is shrunk at
	 * least that much anyway. Default on for RANDOM_RESIZED, off for
	 * CENTER, whose pixels then match torchvision's (see README.md).
	 */
	int8_t dct_scale;            /* 0: the default; 1 on; -1 off */
	uint64_t max_pixels;         /* a larger source is refused (a bomb); default BI_MAX_PIXELS */
} bi_spec;

#define BI_MAX_PIXELS (UINT64_C(64) << 20)   /* 64 MP */
#define BI_SIDE_MAX 8192u                    /* an output's height or width */

/*
 * Fill s's defaults for fields left 0 and check every field. @return 0 or
 * -EINVAL with err naming the field and the range it must be in.
 */
int bi_spec_check(bi_spec *s, char *err, size_t errlen);

/* Bytes of one output tensor: 3 * height * width. */
size_t bi_out_bytes(const bi_spec *s);

/* The crop (in source pixels) and flip chosen for a w x h source. */
typedef struct bi_params {
	double x, y, w, h;           /* the box resized to the output; within the source */
	bool flip;
} bi_params;

/*
 * The box and flip bi_transform chooses for a src_w x src_h source with s
 * (checked), as torchvision's RandomResizedCrop.get_params (10 tries, then
 * the center crop of the ratio range) or Resize + CenterCrop would, its
 * random numbers drawn from (seed, epoch, id). Pure.
 */
void bi_params_for(const bi_spec *s, uint32_t src_w, uint32_t src_h, uint64_t seed,
		   uint64_t epoch, uint64_t id, bi_params *ret);

/* Per-thread buffers and decoder states, reused from image to image. */
typedef struct bi_scratch bi_scratch;

/*
 * Scratch that may hold at most max_bytes (the caller charges that to a
 * budget; an image that would need more fails with -E2BIG). @return NULL
 * when out of memory.
 */
bi_scratch *bi_scratch_new(size_t max_bytes);
void bi_scratch_free(bi_scratch *sc);
/* What sc holds now. */
size_t bi_scratch_size(const bi_scratch *sc);

/*
 * A max_bytes enough for any image within s->max_pixels: the decoded
 * region (at most the whole image, 3 bytes a pixel, and for a PNG its
 * rows), the resize's intermediate and coefficient tables.
 */
size_t bi_scratch_need(const bi_spec *s);

/*
 * Decode img (JPEG, PNG or WebP, told by its first bytes), crop and flip
 * as bi_params_for says for (seed, epoch, id), resize, and write
 * bi_out_bytes(s) bytes to out in s's layout. s must have passed
 * bi_spec_check. @return 0; -EBADMSG corrupt or truncated; -ENOTSUP not
 * a JPEG, PNG or WebP, or a kind of one this library does not decode;
 * -E2BIG more pixels than s->max_pixels, or more scratch than sc may
 * hold; -ENOMEM. err says why in one line (also on success: empty).
 */
int bi_transform(bi_scratch *sc, const bi_spec *s, const void *img, size_t len, uint64_t seed,
		 uint64_t epoch, uint64_t id, uint8_t *out, char *err, size_t errlen);

/* The image's kind and dimensions from its header alone. @return 0 or as bi_transform. */
typedef enum { BI_KIND_JPEG = 1, BI_KIND_PNG, BI_KIND_WEBP } bi_kind;
int bi_probe(const void *img, size_t len, bi_kind *ret_kind, uint32_t *ret_w, uint32_t *ret_h,
	     char *err, size_t errlen);


/* ---- a whole image within a size (batchd-pack create --max-side) ------------------------ */

/* The kind img's first bytes say it is (JPEG, PNG, WebP), nothing else read; 0: none of them. */
bi_kind bi_sniff(const void *img, size_t len);

/*
 * The size a w x h image is shrunk to so that its longer side is
 * max_side: the shorter side scaled alike, to the nearest pixel (halves
 * up), at least 1. An image whose longer side is max_side or less keeps
 * its size, and so does every image when max_side is 0. Pure.
 */
void bi_fit_size(uint32_t w, uint32_t h, uint32_t max_side, uint32_t *ret_w, uint32_t *ret_h);

/* A max_bytes for bi_scratch_new enough for bi_fit of any image within max_pixels (0: BI_MAX_PIXELS). */
size_t bi_fit_scratch_need(uint64_t max_pixels);

/*
 * Decode img (JPEG, PNG or WebP) whole at full scale, then shrink it to
 * bi_fit_size(w, h, max_side) with PIL's bilinear filter over the whole
 * image: PIL's Image.resize((w, h), BILINEAR) of PIL's convert("RGB").
 * Gray, palette, CMYK/YCCK, progressive and 16-bit inputs come out RGB,
 * alpha dropped, as bi_transform's. An image within max_side is decoded
 * and copied at its size. out gets 3 * *ret_w * *ret_h bytes, [H,W,3] RGB;
 * out_len must hold them. max_pixels: a larger source is refused (0:
 * BI_MAX_PIXELS). @return 0 with *ret_w and *ret_h; -EBADMSG, -ENOTSUP,
 * -E2BIG (over max_pixels, or more scratch than sc may hold even emptied)
 * and -ENOMEM as bi_transform; -EINVAL max_side 0; -ENOBUFS out_len too
 * small. err says why in one line (on success: empty). Thread: sc's.
 */
int bi_fit(bi_scratch *sc, const void *img, size_t len, uint32_t max_side, uint64_t max_pixels,
	   uint8_t *out, size_t out_len, uint32_t *ret_w, uint32_t *ret_h, char *err, size_t errlen);

#endif
