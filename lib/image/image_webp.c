/* SPDX-License-Identifier: MIT */
/*
 * image_webp.c - WebP through libwebp: still images, lossy or lossless,
 * decoded straight into RGB, only the wanted rectangle (libwebp's own
 * cropping, whose offsets are even). Animations are refused: a sample is
 * one image.
 */
#include <errno.h>
#include <string.h>

#include <webp/decode.h>

#include "image_priv.h"

static int webp_errno(VP8StatusCode st)
{
	switch (st) {
	case VP8_STATUS_OUT_OF_MEMORY:
		return -ENOMEM;
	case VP8_STATUS_UNSUPPORTED_FEATURE:
		return -ENOTSUP;
	default:
		return -EBADMSG;
	}
}

static const char *webp_why(VP8StatusCode st)
{
	switch (st) {
	case VP8_STATUS_OUT_OF_MEMORY:
		return "out of memory";
	case VP8_STATUS_INVALID_PARAM:
		return "invalid parameter";
	case VP8_STATUS_BITSTREAM_ERROR:
		return "bitstream error";
	case VP8_STATUS_UNSUPPORTED_FEATURE:
		return "unsupported feature";
	case VP8_STATUS_SUSPENDED:
	case VP8_STATUS_NOT_ENOUGH_DATA:
		return "truncated";
	default:
		return "cannot decode";
	}
}

static int features(const uint8_t *b, size_t n, WebPBitstreamFeatures *f, char *err, size_t el)
{
	VP8StatusCode st = WebPGetFeatures(b, n, f);

	if (st != VP8_STATUS_OK)
		return bi__fail(webp_errno(st), err, el, "WebP: %s", webp_why(st));
	if (f->has_animation)
		return bi__fail(-ENOTSUP, err, el, "WebP: an animation, not one image");
	return 0;
}

int bi__webp_probe(const uint8_t *b, size_t n, uint32_t *w, uint32_t *h, char *err, size_t el)
{
	WebPBitstreamFeatures f;
	int r = features(b, n, &f, err, el);

	if (r == 0) {
		*w = (uint32_t)f.width;
		*h = (uint32_t)f.height;
	}
	return r;
}

int bi__webp_decode(bi_scratch *sc, const uint8_t *b, size_t n, const bi_want *want,
		    bi_region *ret, char *err, size_t el)
{
	WebPDecoderConfig cfg;
	uint32_t x0 = want->x0 & ~1u, y0 = want->y0 & ~1u;
	uint32_t cw = want->x1 - x0, ch = want->y1 - y0;
	size_t size = (size_t)cw * 3 * ch;
	VP8StatusCode st;
	int r;

	if (!WebPInitDecoderConfig(&cfg))
		return bi__fail(-ENOTSUP, err, el, "WebP: libwebp's version does not match its header");
	r = features(b, n, &cfg.input, err, el);
	if (r < 0)
		return r;
	r = bi__grow(sc, (void **)&sc->pix, &sc->pix_cap, size);
	if (r < 0)
		return bi__fail_region(r, err, el, "WebP", cw, ch);
	cfg.options.use_cropping = 1;
	cfg.options.crop_left = (int)x0;
	cfg.options.crop_top = (int)y0;
	cfg.options.crop_width = (int)cw;
	cfg.options.crop_height = (int)ch;
	cfg.output.colorspace = MODE_RGB;
	cfg.output.is_external_memory = 1;
	cfg.output.u.RGBA.rgba = sc->pix;
	cfg.output.u.RGBA.stride = (int)cw * 3;
	cfg.output.u.RGBA.size = size;
	st = WebPDecode(b, n, &cfg);
	WebPFreeDecBuffer(&cfg.output);
	if (st != VP8_STATUS_OK)
		return bi__fail(webp_errno(st), err, el, "WebP: %s", webp_why(st));
	*ret = (bi_region){ .px = sc->pix, .w = cw, .h = ch, .stride = (size_t)cw * 3,
			    .x0 = x0, .y0 = y0, .scale = 1.0 };
	return 0;
}
