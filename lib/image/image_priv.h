/* SPDX-License-Identifier: MIT */
/*
 * image_priv.h - what image.c (specs, parameters, the transform), the
 * decoders (image_jpeg.c, image_png.c, image_webp.c) and the resampler
 * (image_resize.c) share.
 */
#ifndef BATCHD_IMAGE_PRIV_H
#define BATCHD_IMAGE_PRIV_H

#include <stdarg.h>

#include "image.h"

struct bi_scratch {
	size_t max;                  /* bytes the buffers below may hold together */
	uint8_t *pix;                /* the decoded region, RGB */
	size_t pix_cap;
	uint8_t *tmp;                /* the resize's horizontal pass; a decoder's row */
	size_t tmp_cap;
	int32_t *coef;               /* the resize's coefficients and bounds */
	size_t coef_cap;
	uint8_t *row;                /* a decoder's row in its own format (CMYK, a PNG row) */
	size_t row_cap;
};

/* Grow *buf (holding *cap bytes) to at least n, within sc->max. @return 0; -E2BIG; -ENOMEM. */
int bi__grow(bi_scratch *sc, void **buf, size_t *cap, size_t n);

/*
 * A decoder's buffer for a w x h region could not grow (r from bi__grow):
 * err says which kind and why, -E2BIG naming what to change. @return r.
 */
int bi__fail_region(int r, char *err, size_t errlen, const char *kind, uint32_t w, uint32_t h);

/* err = the formatted reason; @return r. */
int bi__fail(int r, char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/*
 * A decoded region of the source: h rows of w RGB pixels, stride bytes
 * apart. Region pixel (0, 0) starts at source pixel (x0, y0); each region
 * pixel is 1/scale source pixels wide (scale < 1 after a scaled decode).
 */
typedef struct bi_region {
	const uint8_t *px;
	uint32_t w, h;
	size_t stride;
	double x0, y0;
	double scale;
} bi_region;

/*
 * What a decoder is asked for: the source rectangle [x0, x1) x [y0, y1)
 * (whole pixels, within the image), and the smallest size (out_w x out_h)
 * the rectangle may be decoded to; dct_scale false: full size only.
 */
typedef struct bi_want {
	uint32_t x0, y0, x1, y1;
	uint32_t out_w, out_h;
	bool dct_scale;
} bi_want;

int bi__jpeg_probe(const uint8_t *b, size_t n, uint32_t *w, uint32_t *h, char *err, size_t el);
int bi__jpeg_decode(bi_scratch *sc, const uint8_t *b, size_t n, const bi_want *want,
		    bi_region *ret, char *err, size_t el);
int bi__png_probe(const uint8_t *b, size_t n, uint32_t *w, uint32_t *h, char *err, size_t el);
int bi__png_decode(bi_scratch *sc, const uint8_t *b, size_t n, const bi_want *want,
		   bi_region *ret, char *err, size_t el);
int bi__webp_probe(const uint8_t *b, size_t n, uint32_t *w, uint32_t *h, char *err, size_t el);
int bi__webp_decode(bi_scratch *sc, const uint8_t *b, size_t n, const bi_want *want,
		    bi_region *ret, char *err, size_t el);

/*
 * Resize the box [bx0, bx1) x [by0, by1) (region pixels) of r to out_w x
 * out_h with PIL's bilinear filter (antialiased: its support widens with
 * the shrink), taps clipped to the region, as PIL clips them to the
 * image; mirrored when flip; into out as [3,H,W] or (nhwc) [H,W,3].
 * @return 0; -E2BIG; -ENOMEM.
 */
int bi__resize(bi_scratch *sc, const bi_region *r, double bx0, double by0, double bx1,
	       double by1, uint32_t out_w, uint32_t out_h, bool flip, bool nhwc, uint8_t *out);

/* Bytes of the resize's scratch for a region of region_h rows to out_w x out_h. */
size_t bi__resize_need(uint32_t region_w, uint32_t region_h, uint32_t out_w, uint32_t out_h);
/* For tests: whether the SIMD passes run (when the CPU has them). @return whether they now do. */
bool bi__resize_simd(bool on);

#endif
