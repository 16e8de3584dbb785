/* SPDX-License-Identifier: MIT */
/*
 * image_fit.c - a whole image, decoded at full scale and shrunk so that
 * its longer side is at most a given size: what batchd-pack create
 * --max-side re-encodes (FFCV's max_resolution).
 *
 * The transform (image.c) decodes only a crop, often at a DCT scale; a
 * pack must keep the whole picture, and at its best: every pixel is
 * decoded at full size, and the shrink is the same PIL bilinear filter
 * (image_resize.c) over the whole image as a box, so the result is PIL's
 * Image.resize((w, h), BILINEAR) of PIL's decode, pixel for pixel.
 *
 * The scratch is the caller's, reused from image to image: its buffers
 * keep the size the largest image gave them. Buffers grown by an image of
 * another shape (an interlaced PNG's whole RGBA rows, a wide image's
 * transposed copy) can leave too little of the cap for this one; it is
 * then retried once with those buffers freed, so an image's fate does not
 * depend on the ones before it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "image_priv.h"

bi_kind bi_sniff(const void *img, size_t len)
{
	const uint8_t *b = img;

	/* The magic numbers bi_probe tells the decoders apart by. */
	if (len >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF)
		return BI_KIND_JPEG;
	if (len >= 8 && !memcmp(b, "\x89PNG\r\n\x1a\n", 8))
		return BI_KIND_PNG;
	if (len >= 12 && !memcmp(b, "RIFF", 4) && !memcmp(b + 8, "WEBP", 4))
		return BI_KIND_WEBP;
	return 0;
}

void bi_fit_size(uint32_t w, uint32_t h, uint32_t max_side, uint32_t *ret_w, uint32_t *ret_h)
{
	uint32_t lg = w > h ? w : h, sh = w > h ? h : w, s;
	uint64_t q;

	if (lg <= max_side || max_side == 0) {
		*ret_w = w;
		*ret_h = h;
		return;
	}
	/* sh * max_side / lg to the nearest, halves up; both below 2^32, so q cannot overflow. */
	q = (uint64_t)sh * max_side;
	s = (uint32_t)(q / lg) + (2 * (q % lg) >= lg);
	if (s < 1)
		s = 1;
	*ret_w = w >= h ? max_side : s;
	*ret_h = w >= h ? s : max_side;
}

size_t bi_fit_scratch_need(uint64_t max_pixels)
{
	size_t px = (size_t)(max_pixels ? max_pixels : BI_MAX_PIXELS);

	/*
	 * The image decoded (3 bytes a pixel); an interlaced PNG's rows,
	 * decoded whole as RGBA (4); the resize's horizontal pass over every
	 * row at the output's width, at most the image again (3); its
	 * coefficient tables and sums, a few MiB for sides up to 65535.
	 * A transposed copy that does not fit too makes the resize go by rows.
	 */
	return px * 10 + ((size_t)16 << 20);
}

/* Free sc's buffers, but the decoded region (keep_pix). @return whether any held bytes. */
static bool drop(bi_scratch *sc, bool keep_pix)
{
	bool held = sc->tmp_cap || sc->coef_cap || sc->row_cap || (!keep_pix && sc->pix_cap);

	free(sc->tmp);
	free(sc->coef);
	free(sc->row);
	sc->tmp = sc->row = NULL;
	sc->coef = NULL;
	sc->tmp_cap = sc->coef_cap = sc->row_cap = 0;
	if (!keep_pix) {
		free(sc->pix);
		sc->pix = NULL;
		sc->pix_cap = 0;
	}
	return held;
}

static int decode(bi_scratch *sc, bi_kind kind, const uint8_t *b, size_t len, const bi_want *want,
		  bi_region *rg, char *err, size_t errlen)
{
	if (kind == BI_KIND_JPEG)
		return bi__jpeg_decode(sc, b, len, want, rg, err, errlen);
	if (kind == BI_KIND_PNG)
		return bi__png_decode(sc, b, len, want, rg, err, errlen);
	return bi__webp_decode(sc, b, len, want, rg, err, errlen);
}

/* Region rows into out as they are: the image was within the size already. */
static void copy_rows(const bi_region *rg, uint8_t *out)
{
	for (uint32_t y = 0; y < rg->h; y++)
		memcpy(out + (size_t)y * rg->w * 3, rg->px + (size_t)y * rg->stride,
		       (size_t)rg->w * 3);
}

int bi_fit(bi_scratch *sc, const void *img, size_t len, uint32_t max_side, uint64_t max_pixels,
	   uint8_t *out, size_t out_len, uint32_t *ret_w, uint32_t *ret_h, char *err, size_t errlen)
{
	bi_region rg;
	bi_want want;
	bi_kind kind;
	uint32_t w, h, ow, oh;
	int r;

	if (errlen)
		err[0] = '\0';
	if (max_side == 0)
		return bi__fail(-EINVAL, err, errlen, "max_side 0: the longer side must be 1 or more");
	r = bi_probe(img, len, &kind, &w, &h, err, errlen);
	if (r < 0)
		return r;
	if (!max_pixels)
		max_pixels = BI_MAX_PIXELS;
	if ((uint64_t)w * h > max_pixels)
		return bi__fail(-E2BIG, err, errlen, "%ux%u is %llu pixels, over the %llu allowed: "
				"refused as a decompression bomb", w, h, (unsigned long long)w * h,
				(unsigned long long)max_pixels);
	bi_fit_size(w, h, max_side, &ow, &oh);
	if (out_len / 3 / ow < oh)
		return bi__fail(-ENOBUFS, err, errlen, "%ux%u: the output needs %llu bytes, %zu given",
				ow, oh, (unsigned long long)ow * oh * 3, out_len);
	want = (bi_want){ .x1 = w, .y1 = h, .out_w = ow, .out_h = oh, .dct_scale = false };
	r = decode(sc, kind, img, len, &want, &rg, err, errlen);
	if (r == -E2BIG && drop(sc, false))
		r = decode(sc, kind, img, len, &want, &rg, err, errlen);
	if (r == -E2BIG)
		return bi__fail(r, err, errlen, "%ux%u: decoding it needs more than the %zu bytes of "
				"scratch allowed", w, h, sc->max);
	if (r < 0)
		return r;
	if (rg.w == ow && rg.h == oh) {
		copy_rows(&rg, out);
	} else {
		/* The whole image is the box; [H,W,3], as an encoder takes its rows. */
		r = bi__resize(sc, &rg, 0, 0, rg.w, rg.h, ow, oh, false, true, out);
		if (r == -E2BIG && drop(sc, true))
			r = bi__resize(sc, &rg, 0, 0, rg.w, rg.h, ow, oh, false, true, out);
		if (r == -E2BIG)
			return bi__fail(r, err, errlen, "%ux%u: resizing it to %ux%u needs more than "
					"the %zu bytes of scratch allowed", w, h, ow, oh, sc->max);
		if (r < 0)
			return bi__fail(r, err, errlen, "out of memory resizing");
	}
	*ret_w = ow;
	*ret_h = oh;
	return 0;
}
