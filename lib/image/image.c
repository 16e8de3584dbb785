/* SPDX-License-Identifier: MIT */
/*
 * image.c - specs, the random choices, and the transform: probe the
 * header, choose the box, decode only what the box needs, resize.
 *
 * The box is chosen before decoding, from the dimensions alone, exactly
 * as torchvision chooses it (RandomResizedCrop.get_params; Resize then
 * CenterCrop), with its random numbers drawn from a counter-based
 * generator keyed by (seed, epoch, id): no state, so any sample's tensor
 * can be made again anywhere.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image_priv.h"

int bi__fail(int r, char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return r;
}

int bi__fail_region(int r, char *err, size_t errlen, const char *kind, uint32_t w, uint32_t h)
{
	return bi__fail(r, err, errlen, "%s: a %ux%u region %s", kind, w, h,
			r == -E2BIG ? "needs more scratch than a decode thread has: shrink it when "
			"packing" : "is out of memory");
}

/* ---- specs ---------------------------------------------------------------------------- */

static bool within(float v, float lo, float hi)
{
	return v >= lo && v <= hi; /* false for a NaN */
}

int bi_spec_check(bi_spec *s, char *err, size_t errlen)
{
	if (s->crop != BI_CROP_RANDOM_RESIZED && s->crop != BI_CROP_CENTER)
		return bi__fail(-EINVAL, err, errlen, "crop %u is not random-resized (1) or "
				"center (2)", s->crop);
	if (s->height < 1 || s->height > BI_SIDE_MAX || s->width < 1 || s->width > BI_SIDE_MAX)
		return bi__fail(-EINVAL, err, errlen, "size %ux%u: height and width must be "
				"1 .. %u", s->height, s->width, BI_SIDE_MAX);
	if (s->scale_min == 0 && s->scale_max == 0)
		s->scale_min = 0.08f, s->scale_max = 1.0f;
	if (s->ratio_min == 0 && s->ratio_max == 0)
		s->ratio_min = 3.0f / 4.0f, s->ratio_max = 4.0f / 3.0f;
	if (!s->max_pixels)
		s->max_pixels = BI_MAX_PIXELS;
	if (!s->dct_scale)
		s->dct_scale = s->crop == BI_CROP_RANDOM_RESIZED ? 1 : -1;
	if (s->crop == BI_CROP_CENTER && !s->resize)
		s->resize = s->height > s->width ? s->height : s->width;
	if (!within(s->scale_min, 1e-6f, 1.0f) || !within(s->scale_max, s->scale_min, 1.0f))
		return bi__fail(-EINVAL, err, errlen, "scale (%g, %g) must be 0 < min <= max <= 1",
				(double)s->scale_min, (double)s->scale_max);
	if (!within(s->ratio_min, 1e-6f, 100.0f) || !within(s->ratio_max, s->ratio_min, 100.0f))
		return bi__fail(-EINVAL, err, errlen, "ratio (%g, %g) must be 0 < min <= max <= 100",
				(double)s->ratio_min, (double)s->ratio_max);
	if (!within(s->flip, 0.0f, 1.0f))
		return bi__fail(-EINVAL, err, errlen, "flip %g is not a probability (0 .. 1)",
				(double)s->flip);
	if (s->crop == BI_CROP_CENTER && s->resize < (s->height > s->width ? s->height : s->width))
		return bi__fail(-EINVAL, err, errlen, "resize %u is smaller than the %ux%u crop: "
				"the short side must be resized to at least the crop", s->resize,
				s->height, s->width);
	if (s->max_pixels > (UINT64_C(1) << 32))
		return bi__fail(-EINVAL, err, errlen, "max_pixels %llu is over 2^32",
				(unsigned long long)s->max_pixels);
	return 0;
}

size_t bi_out_bytes(const bi_spec *s)
{
	return (size_t)3 * s->height * s->width;
}

/* ---- the random choices --------------------------------------------------------------- */

static uint64_t mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Draw n of the stream keyed by (seed, epoch, id): uniform in [0, 1). */
typedef struct draws {
	uint64_t key;
	uint64_t n;
} draws;

static draws draws_for(uint64_t seed, uint64_t epoch, uint64_t id)
{
	uint64_t k = mix(seed ^ 0x62617463686469ULL);

	k = mix(k ^ mix(epoch + 0x9e3779b97f4a7c15ULL));
	return (draws){ .key = mix(k ^ mix(id + 0x632be59bd9b4e019ULL)), .n = 0 };
}

static double uniform(draws *d)
{
	return (double)(mix(d->key + 0x9e3779b97f4a7c15ULL * ++d->n) >> 11) * 0x1p-53;
}

static double uniform_in(draws *d, double lo, double hi)
{
	return lo + uniform(d) * (hi - lo);
}

/* An integer in [lo, hi], each as likely (to 2^-53). */
static uint32_t randint(draws *d, uint32_t lo, uint32_t hi)
{
	uint32_t v = lo + (uint32_t)(uniform(d) * ((double)hi - lo + 1));

	return v > hi ? hi : v;
}

/* Python's round(): to the nearest, ties to even. */
static long round_even(double v)
{
	double f = floor(v), r = v - f;

	if (r > 0.5 || (r == 0.5 && fmod(f, 2.0) != 0.0))
		f += 1.0;
	return (long)f;
}

/* torchvision's RandomResizedCrop.get_params: (x, y, w, h) of a w x h source. */
static void random_resized(const bi_spec *s, uint32_t W, uint32_t H, draws *d, bi_params *p)
{
	double area = (double)W * H, lr0 = log(s->ratio_min), lr1 = log(s->ratio_max);
	double in_ratio = (double)W / H;
	long w, h;

	for (int tries = 0; tries < 10; tries++) {
		double target = area * uniform_in(d, s->scale_min, s->scale_max);
		double ar = exp(uniform_in(d, lr0, lr1));

		w = round_even(sqrt(target * ar));
		h = round_even(sqrt(target / ar));
		if (w > 0 && w <= (long)W && h > 0 && h <= (long)H) {
			p->y = randint(d, 0, H - (uint32_t)h);
			p->x = randint(d, 0, W - (uint32_t)w);
			p->w = (double)w;
			p->h = (double)h;
			return;
		}
	}
	/* The center crop of the ratio range. */
	if (in_ratio < s->ratio_min) {
		w = W;
		h = round_even(w / (double)s->ratio_min);
	} else if (in_ratio > s->ratio_max) {
		h = H;
		w = round_even(h * (double)s->ratio_max);
	} else {
		w = W;
		h = H;
	}
	if (w < 1)
		w = 1;
	if (h < 1)
		h = 1;
	p->w = (double)w;
	p->h = (double)h;
	p->x = (double)((W - (uint32_t)w) / 2);
	p->y = (double)((H - (uint32_t)h) / 2);
}

/*
 * Resize(resize) then CenterCrop(height, width), as one box of the
 * source: the resized size by torchvision's rule (the short side to
 * resize, the long one int(resize * long / short)), the crop's offset
 * int(round((size - crop) / 2.0)) in resized pixels.
 */
static void center(const bi_spec *s, uint32_t W, uint32_t H, bi_params *p, uint32_t *rw,
		   uint32_t *rh)
{
	uint32_t sh = W <= H ? W : H, lg = W <= H ? H : W;
	uint64_t nl = (uint64_t)s->resize * lg / sh;
	double top, left;

	*rw = W <= H ? s->resize : (uint32_t)nl;
	*rh = W <= H ? (uint32_t)nl : s->resize;
	top = (double)round_even(((double)*rh - s->height) / 2.0);
	left = (double)round_even(((double)*rw - s->width) / 2.0);
	/* In source pixels: the box the crop's pixels cover. */
	p->x = left * W / *rw;
	p->y = top * H / *rh;
	p->w = (double)s->width * W / *rw;
	p->h = (double)s->height * H / *rh;
}

void bi_params_for(const bi_spec *s, uint32_t src_w, uint32_t src_h, uint64_t seed,
		   uint64_t epoch, uint64_t id, bi_params *ret)
{
	draws d = draws_for(seed, epoch, id);
	bi_params p = { 0 };
	uint32_t rw, rh;

	if (s->crop == BI_CROP_RANDOM_RESIZED)
		random_resized(s, src_w, src_h, &d, &p);
	else
		center(s, src_w, src_h, &p, &rw, &rh);
	/* RandomHorizontalFlip after the crop: its draw follows the crop's. */
	p.flip = s->flip > 0 && uniform(&d) < s->flip;
	*ret = p;
}

/* ---- scratch -------------------------------------------------------------------------- */

bi_scratch *bi_scratch_new(size_t max_bytes)
{
	bi_scratch *sc = calloc(1, sizeof(*sc));

	if (sc)
		sc->max = max_bytes;
	return sc;
}

void bi_scratch_free(bi_scratch *sc)
{
	if (!sc)
		return;
	free(sc->pix);
	free(sc->tmp);
	free(sc->coef);
	free(sc->row);
	free(sc);
}

size_t bi_scratch_size(const bi_scratch *sc)
{
	return sc->pix_cap + sc->tmp_cap + sc->coef_cap + sc->row_cap;
}

int bi__grow(bi_scratch *sc, void **buf, size_t *cap, size_t n)
{
	void *p;

	if (n <= *cap)
		return 0;
	if (n > sc->max || bi_scratch_size(sc) - *cap + n > sc->max)
		return -E2BIG;
	/* The old bytes are not needed: no copy. */
	p = malloc(n);
	if (!p)
		return -ENOMEM;
	free(*buf);
	*buf = p;
	*cap = n;
	return 0;
}

size_t bi_scratch_need(const bi_spec *s)
{
	uint64_t px = s->max_pixels ? s->max_pixels : BI_MAX_PIXELS;
	uint32_t side = px > (uint64_t)UINT32_MAX ? UINT32_MAX : (uint32_t)px;

	/* The whole image decoded, a PNG's widest row (RGBA, 16 bits), the resize's tables. */
	return (size_t)px * 3 + (size_t)8 * (side > 65535 ? 65535 : side) +
	       bi__resize_need(side > 65535 ? 65535 : side, side > 65535 ? 65535 : side,
			       s->width, s->height);
}

/* ---- the transform -------------------------------------------------------------------- */

static const char *kind_name(const uint8_t *b, size_t n)
{
	if (n >= 6 && (!memcmp(b, "GIF87a", 6) || !memcmp(b, "GIF89a", 6)))
		return ": GIF";
	if (n >= 2 && b[0] == 'B' && b[1] == 'M')
		return ": BMP";
	if (n >= 4 && (!memcmp(b, "II*\0", 4) || !memcmp(b, "MM\0*", 4)))
		return ": TIFF";
	if (n >= 12 && !memcmp(b + 4, "ftyp", 4))
		return ": an ISO media file (HEIF, AVIF or video)";
	return "";
}

int bi_probe(const void *img, size_t len, bi_kind *ret_kind, uint32_t *ret_w, uint32_t *ret_h,
	     char *err, size_t errlen)
{
	const uint8_t *b = img;
	bi_kind k;
	int r;

	if (len >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF)
		k = BI_KIND_JPEG, r = bi__jpeg_probe(b, len, ret_w, ret_h, err, errlen);
	else if (len >= 8 && !memcmp(b, "\x89PNG\r\n\x1a\n", 8))
		k = BI_KIND_PNG, r = bi__png_probe(b, len, ret_w, ret_h, err, errlen);
	else if (len >= 12 && !memcmp(b, "RIFF", 4) && !memcmp(b + 8, "WEBP", 4))
		k = BI_KIND_WEBP, r = bi__webp_probe(b, len, ret_w, ret_h, err, errlen);
	else if (len == 0)
		return bi__fail(-ENOTSUP, err, errlen, "empty: not an image");
	else
		return bi__fail(-ENOTSUP, err, errlen, "not a JPEG, PNG or WebP image (starts "
				"%02x %02x %02x %02x%s)", b[0], len > 1 ? b[1] : 0, len > 2 ? b[2] : 0,
				len > 3 ? b[3] : 0, kind_name(b, len));
	if (r == 0)
		*ret_kind = k;
	return r;
}

/* The whole pixels [lo, hi) the box [a, b) of a side of n pixels touches, widened by margin. */
static void span(double a, double b, double margin, uint32_t n, uint32_t *lo, uint32_t *hi)
{
	double l = floor(a - margin), h = ceil(b + margin);

	*lo = l < 0 ? 0 : (uint32_t)l;
	*hi = h > n ? n : (uint32_t)h;
	if (*hi <= *lo)
		*hi = *lo + 1 <= n ? *lo + 1 : n, *lo = *hi - 1;
}

/* Cut r down to p's whole-pixel box, which it holds (decoded at full scale). */
static void narrow(bi_region *r, const bi_params *p)
{
	uint32_t dx = (uint32_t)(p->x - r->x0), dy = (uint32_t)(p->y - r->y0);

	r->px += (size_t)dy * r->stride + (size_t)dx * 3;
	r->w = (uint32_t)p->w;
	r->h = (uint32_t)p->h;
	r->x0 = p->x;
	r->y0 = p->y;
}

int bi_transform(bi_scratch *sc, const bi_spec *s, const void *img, size_t len, uint64_t seed,
		 uint64_t epoch, uint64_t id, uint8_t *out, char *err, size_t errlen)
{
	const uint8_t *b = img;
	bi_params p;
	bi_region rg;
	bi_want want;
	bi_kind kind;
	uint32_t w, h;
	double mx = 0, my = 0;
	int r;

	if (errlen)
		err[0] = '\0';
	r = bi_probe(img, len, &kind, &w, &h, err, errlen);
	if (r < 0)
		return r;
	if ((uint64_t)w * h > s->max_pixels)
		return bi__fail(-E2BIG, err, errlen, "%ux%u is %llu pixels, over max_pixels (%llu): "
				"refused as a decompression bomb; shrink it when packing", w, h,
				(unsigned long long)w * h, (unsigned long long)s->max_pixels);
	bi_params_for(s, w, h, seed, epoch, id, &p);
	/*
	 * Resize then crop sees taps beyond the crop, up to the filter's
	 * support: decode that margin too. A random-resized crop is cut out
	 * first, then resized: none.
	 */
	if (s->crop == BI_CROP_CENTER) {
		mx = 2.0 * (p.w / s->width > 1 ? p.w / s->width : 1) + 1;
		my = 2.0 * (p.h / s->height > 1 ? p.h / s->height : 1) + 1;
	} else if (kind == BI_KIND_JPEG) {
		/*
		 * A JPEG cut at the crop's edge upsamples its chroma there from
		 * a cut neighbourhood: decode a little more, then resize the
		 * crop alone (below), as torchvision crops the whole image.
		 */
		mx = my = 2;
	}
	want.out_w = s->width;
	want.out_h = s->height;
	want.dct_scale = s->dct_scale > 0;
	span(p.x, p.x + p.w, mx, w, &want.x0, &want.x1);
	span(p.y, p.y + p.h, my, h, &want.y0, &want.y1);
	if (kind == BI_KIND_JPEG)
		r = bi__jpeg_decode(sc, b, len, &want, &rg, err, errlen);
	else if (kind == BI_KIND_PNG)
		r = bi__png_decode(sc, b, len, &want, &rg, err, errlen);
	else
		r = bi__webp_decode(sc, b, len, &want, &rg, err, errlen);
	if (r < 0)
		return r;
	/* A random-resized crop at full scale: the region is the crop, taps clipped to it. */
	if (s->crop == BI_CROP_RANDOM_RESIZED && rg.scale == 1.0)
		narrow(&rg, &p);
	/* The box in region pixels. */
	r = bi__resize(sc, &rg, (p.x - rg.x0) * rg.scale, (p.y - rg.y0) * rg.scale,
		       (p.x + p.w - rg.x0) * rg.scale, (p.y + p.h - rg.y0) * rg.scale, s->width,
		       s->height, p.flip, s->nhwc, out);
	if (r == -E2BIG)
		return bi__fail(r, err, errlen, "%ux%u: resizing needs more scratch than the "
				"%zu bytes a decode thread has; shrink it when packing", w, h, sc->max);
	if (r < 0)
		return bi__fail(r, err, errlen, "out of memory resizing");
	return 0;
}
