/* SPDX-License-Identifier: MIT */
/*
 * image_jpeg.c - JPEG through libjpeg-turbo, decoding only what is used.
 *
 * A crop that will be shrunk to half its size or less is decoded at 1/2
 * (or 1/4, 1/8: whatever keeps it at least the output's size) in the DCT
 * domain, which costs a fraction of a full decode; its columns alone are
 * decoded (jpeg_crop_scanline), rows above it skipped (jpeg_skip_scanlines)
 * and rows below it never decoded (jpeg_abort_decompress).
 *
 * libjpeg reports errors through a callback that must not return: it
 * longjmps back here. Its warnings (corrupt data it would paper over with
 * gray) fail the image too: those would be wrong pixels, not a decode.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "image_priv.h"

typedef struct jerr {
	struct jpeg_error_mgr pub;
	jmp_buf jb;
	char msg[JMSG_LENGTH_MAX];
} jerr;

static void on_error(j_common_ptr c)
{
	jerr *e = (jerr *)c->err;

	c->err->format_message(c, e->msg);
	longjmp(e->jb, 1);
}

static void on_message(j_common_ptr c, int level)
{
	/* -1: a warning about corrupt data; others are traces. */
	if (level < 0)
		on_error(c);
}

/* libjpeg's memory for one image, at most: its own tables and buffers, not the pixels. */
#define JPEG_MEMORY_MAX (UINT64_C(64) << 20)

static void setup(struct jpeg_decompress_struct *ci, jerr *e, const uint8_t *b, size_t n)
{
	ci->err = jpeg_std_error(&e->pub);
	e->pub.error_exit = on_error;
	e->pub.emit_message = on_message;
	e->msg[0] = '\0';
	jpeg_create_decompress(ci);
	ci->mem->max_memory_to_use = JPEG_MEMORY_MAX;
	jpeg_mem_src(ci, b, (unsigned long)n);
}

/* An error's errno: what libjpeg cannot do is unsupported; the rest is a bad image. */
static int jpeg_errno(const jerr *e)
{
	int code = e->pub.msg_code;

	if (code == JERR_CONVERSION_NOTIMPL || code == JERR_NOT_COMPILED ||
	    code == JERR_BAD_PRECISION || code == JERR_ARITH_NOTIMPL)
		return -ENOTSUP;
	if (code == JERR_OUT_OF_MEMORY)
		return -ENOMEM;
	return -EBADMSG;
}

int bi__jpeg_probe(const uint8_t *b, size_t n, uint32_t *w, uint32_t *h, char *err, size_t el)
{
	struct jpeg_decompress_struct ci;
	jerr e;
	volatile int r = 0;

	setup(&ci, &e, b, n);
	if (setjmp(e.jb)) {
		r = bi__fail(jpeg_errno(&e), err, el, "JPEG: %s", e.msg);
		goto out;
	}
	jpeg_read_header(&ci, TRUE);
	*w = ci.image_width;
	*h = ci.image_height;
out:
	jpeg_destroy_decompress(&ci);
	return r;
}

/* CMYK (Adobe's inverted, as Photoshop writes it, or plain) to RGB, as PIL converts it. */
static void cmyk_to_rgb(const uint8_t *in, uint8_t *out, uint32_t n, bool inverted)
{
	for (uint32_t i = 0; i < n; i++, in += 4, out += 3) {
		uint32_t k = inverted ? in[3] : 255u - in[3];

		for (int c = 0; c < 3; c++) {
			uint32_t v = inverted ? in[c] : 255u - in[c];

			out[c] = (uint8_t)((v * k + 127) / 255);
		}
	}
}

/*
 * The scale M/8 to decode at: the smallest that leaves the crop at least
 * the output's size on both sides (8/8 without dct_scale).
 */
static unsigned scale_num(const bi_want *want)
{
	uint32_t cw = want->x1 - want->x0, ch = want->y1 - want->y0;

	if (!want->dct_scale)
		return 8;
	/* 1/8, 1/4, 1/2 only: libjpeg-turbo has SIMD for those; 3/8, 5/8 ... are slower than 8/8. */
	for (unsigned m = 1; m < 8; m *= 2)
		if ((uint64_t)cw * m >= (uint64_t)want->out_w * 8 &&
		    (uint64_t)ch * m >= (uint64_t)want->out_h * 8)
			return m;
	return 8;
}

int bi__jpeg_decode(bi_scratch *sc, const uint8_t *b, size_t n, const bi_want *want,
		    bi_region *ret, char *err, size_t el)
{
	struct jpeg_decompress_struct ci;
	jerr e;
	volatile int r = 0;
	volatile bool started = false;
	JDIMENSION xoff, cw, y0, y1;
	bool cmyk;
	unsigned m;

	setup(&ci, &e, b, n);
	if (setjmp(e.jb)) {
		r = bi__fail(jpeg_errno(&e), err, el, "JPEG: %s", e.msg);
		goto out;
	}
	jpeg_read_header(&ci, TRUE);
	cmyk = ci.jpeg_color_space == JCS_CMYK || ci.jpeg_color_space == JCS_YCCK;
	ci.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
	/* PIL's (and so torchvision's) IDCT: the fast one was no faster here (README.md). */
	ci.dct_method = JDCT_ISLOW;
	m = scale_num(want);
	ci.scale_num = m;
	ci.scale_denom = 8;
	jpeg_start_decompress(&ci);
	started = true;
	/* The wanted rectangle in scaled pixels, whole ones covering it. */
	xoff = (JDIMENSION)((uint64_t)want->x0 * m / 8);
	cw = (JDIMENSION)(((uint64_t)want->x1 * m + 7) / 8) - xoff;
	y0 = (JDIMENSION)((uint64_t)want->y0 * m / 8);
	y1 = (JDIMENSION)(((uint64_t)want->y1 * m + 7) / 8);
	if (xoff + cw > ci.output_width)
		cw = ci.output_width - xoff;
	if (y1 > ci.output_height)
		y1 = ci.output_height;
	if (cw < ci.output_width)
		jpeg_crop_scanline(&ci, &xoff, &cw); /* xoff to an iMCU's start, cw widened */
	r = bi__grow(sc, (void **)&sc->pix, &sc->pix_cap, (size_t)cw * 3 * (y1 - y0));
	if (r == 0 && cmyk)
		r = bi__grow(sc, (void **)&sc->row, &sc->row_cap, (size_t)cw * 4);
	if (r < 0) {
		r = bi__fail_region(r, err, el, "JPEG", cw, y1 - y0);
		goto out;
	}
	if (y0 > 0 && jpeg_skip_scanlines(&ci, y0) != y0) {
		r = bi__fail(-EBADMSG, err, el, "JPEG: cannot skip to row %u", y0);
		goto out;
	}
	while (ci.output_scanline < y1) {
		JSAMPROW row = sc->pix + (size_t)(ci.output_scanline - y0) * cw * 3;

		if (cmyk) {
			JSAMPROW c = sc->row;

			if (jpeg_read_scanlines(&ci, &c, 1) != 1)
				break;
			cmyk_to_rgb(sc->row, row, cw, ci.saw_Adobe_marker);
		} else if (jpeg_read_scanlines(&ci, &row, 1) != 1) {
			break;
		}
	}
	if (ci.output_scanline < y1) {
		r = bi__fail(-EBADMSG, err, el, "JPEG: rows end at %u of %u", ci.output_scanline, y1);
		goto out;
	}
	*ret = (bi_region){ .px = sc->pix, .w = cw, .h = y1 - y0, .stride = (size_t)cw * 3,
			    .x0 = (double)xoff * 8 / m, .y0 = (double)y0 * 8 / m,
			    .scale = m / 8.0 };
out:
	/* Rows below the crop are never decoded. */
	if (started)
		jpeg_abort_decompress(&ci);
	jpeg_destroy_decompress(&ci);
	return r;
}
