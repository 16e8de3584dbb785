/* SPDX-License-Identifier: MIT */
/*
 * image_png.c - PNG through libspng.
 *
 * Every color type and depth comes out as RGBA8 (libspng's conversion:
 * palettes expanded, gray replicated, 16 bits to their high byte) and the
 * alpha is dropped, as PIL's convert("RGB") does. A non-interlaced image
 * is decoded row by row and only the wanted rows and columns kept, so its
 * scratch is the crop's; an interlaced one is decoded whole. libspng's
 * limits (image size, chunk sizes, cached chunks) bound what a hostile
 * file can make it allocate before a byte of it is trusted.
 */
#include <errno.h>
#include <string.h>

#include <spng.h>

#include "image_priv.h"

/* Ancillary chunks (text, ICC profiles, EXIF) at most, each and all together. */
#define PNG_CHUNK_MAX (UINT32_C(8) << 20)
#define PNG_CHUNK_CACHE_MAX (UINT32_C(16) << 20)
#define PNG_SIDE_MAX (UINT32_C(1) << 24)

static int spng_errno(int e)
{
	switch (e) {
	case SPNG_EMEM:
		return -ENOMEM;
	case SPNG_EUSER_WIDTH:
	case SPNG_EUSER_HEIGHT:
	case SPNG_ECHUNK_LIMITS:
		return -E2BIG;
	default:
		return -EBADMSG;
	}
}

static spng_ctx *open_png(const uint8_t *b, size_t n, struct spng_ihdr *ihdr, int *ret)
{
	spng_ctx *c = spng_ctx_new(0);

	*ret = SPNG_EMEM;
	if (!c)
		return NULL;
	if ((*ret = spng_set_png_buffer(c, b, n)) == 0 &&
	    (*ret = spng_set_image_limits(c, PNG_SIDE_MAX, PNG_SIDE_MAX)) == 0 &&
	    (*ret = spng_set_chunk_limits(c, PNG_CHUNK_MAX, PNG_CHUNK_CACHE_MAX)) == 0 &&
	    (*ret = spng_get_ihdr(c, ihdr)) == 0)
		return c;
	spng_ctx_free(c);
	return NULL;
}

int bi__png_probe(const uint8_t *b, size_t n, uint32_t *w, uint32_t *h, char *err, size_t el)
{
	struct spng_ihdr ihdr;
	int e;
	spng_ctx *c = open_png(b, n, &ihdr, &e);

	if (!c)
		return bi__fail(spng_errno(e), err, el, "PNG: %s", spng_strerror(e));
	*w = ihdr.width;
	*h = ihdr.height;
	spng_ctx_free(c);
	return 0;
}

/* Columns [x0, x1) of an RGBA8 row into RGB. */
static void rgba_to_rgb(const uint8_t *in, uint8_t *out, uint32_t x0, uint32_t x1)
{
	in += (size_t)x0 * 4;
	for (uint32_t x = x0; x < x1; x++, in += 4, out += 3) {
		out[0] = in[0];
		out[1] = in[1];
		out[2] = in[2];
	}
}

int bi__png_decode(bi_scratch *sc, const uint8_t *b, size_t n, const bi_want *want,
		   bi_region *ret, char *err, size_t el)
{
	struct spng_ihdr ihdr;
	uint32_t cw = want->x1 - want->x0, rows = want->y1 - want->y0;
	size_t row_bytes, whole;
	int e, r;
	spng_ctx *c = open_png(b, n, &ihdr, &e);

	if (!c)
		return bi__fail(spng_errno(e), err, el, "PNG: %s", spng_strerror(e));
	row_bytes = (size_t)ihdr.width * 4;
	/* Interlaced: the whole image at once (its rows come in seven passes). */
	whole = ihdr.interlace_method ? row_bytes * ihdr.height : row_bytes;
	r = bi__grow(sc, (void **)&sc->row, &sc->row_cap, whole);
	if (r == 0)
		r = bi__grow(sc, (void **)&sc->pix, &sc->pix_cap, (size_t)cw * 3 * rows);
	if (r < 0) {
		spng_ctx_free(c);
		return bi__fail_region(r, err, el, "PNG", ihdr.width, ihdr.height);
	}
	if (ihdr.interlace_method) {
		e = spng_decode_image(c, sc->row, whole, SPNG_FMT_RGBA8, 0);
		for (uint32_t y = 0; e == 0 && y < rows; y++)
			rgba_to_rgb(sc->row + (size_t)(want->y0 + y) * row_bytes,
				    sc->pix + (size_t)y * cw * 3, want->x0, want->x1);
	} else {
		e = spng_decode_image(c, NULL, 0, SPNG_FMT_RGBA8, SPNG_DECODE_PROGRESSIVE);
		for (uint32_t y = 0; e == 0 && y < want->y1; y++) {
			e = spng_decode_row(c, sc->row, row_bytes);
			/* The last row ends the image: SPNG_EOI with the row written. */
			if (e == SPNG_EOI && y + 1 == ihdr.height)
				e = 0;
			if (e == 0 && y >= want->y0)
				rgba_to_rgb(sc->row, sc->pix + (size_t)(y - want->y0) * cw * 3,
					    want->x0, want->x1);
		}
	}
	spng_ctx_free(c);
	if (e)
		return bi__fail(spng_errno(e), err, el, "PNG: %s", spng_strerror(e));
	*ret = (bi_region){ .px = sc->pix, .w = cw, .h = rows, .stride = (size_t)cw * 3,
			    .x0 = want->x0, .y0 = want->y0, .scale = 1.0 };
	return 0;
}
