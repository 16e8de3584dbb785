/* SPDX-License-Identifier: MIT */
/*
 * image_resize.c - PIL's bilinear resampling, as torchvision uses it.
 *
 * torchvision's Resize and RandomResizedCrop on PIL images call PIL's
 * Image.resize with BILINEAR: a separable triangle filter whose support
 * widens with the shrink (antialiasing), computed in fixed point with 22
 * fractional bits, the horizontal pass first, each pass rounded to 8
 * bits. This is that algorithm (Pillow's libImaging/Resample.c), so that
 * an evaluation transform gives torchvision's pixels; see README.md for
 * why no library's resampler is used instead, with the figures.
 *
 * One axis is described by where each output pixel's center falls in the
 * region: center(i) = in0 + (i + 0.5) * step, so that a box of a larger
 * resize (a center crop of a resized image) has exactly the centers the
 * whole resize would give those pixels.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "image_priv.h"

#define PRECISION_BITS (32 - 8 - 2)

typedef struct axis {
	double in0, step;            /* center(i) = in0 + (i + 0.5) * step, in region pixels */
	uint32_t n;                  /* output pixels */
	uint32_t limit;              /* region pixels: taps clipped to [0, limit) */
	uint32_t ksize;              /* taps a pixel at most */
} axis;

static double filter_support(double step)
{
	return step < 1.0 ? 1.0 : step;
}

static uint32_t ksize_of(double step)
{
	return (uint32_t)ceil(filter_support(step)) * 2 + 1;
}

static double triangle(double x)
{
	if (x < 0.0)
		x = -x;
	return x < 1.0 ? 1.0 - x : 0.0;
}

/*
 * Each output pixel's first tap and tap count (bounds) and its ksize
 * weights in fixed point (k), as Pillow's precompute_coeffs and
 * normalize_coeffs_8bpc make them.
 */
static void coeffs(const axis *a, int32_t *bounds, int32_t *k)
{
	double fs = filter_support(a->step), support = fs, ss = 1.0 / fs;

	for (uint32_t i = 0; i < a->n; i++) {
		double center = a->in0 + (i + 0.5) * a->step, sum = 0.0;
		int32_t xmin = (int32_t)(center - support + 0.5), xmax;
		int32_t *ki = k + (size_t)i * a->ksize;

		if (xmin < 0)
			xmin = 0;
		if (xmin > (int32_t)a->limit)
			xmin = (int32_t)a->limit;
		xmax = (int32_t)(center + support + 0.5);
		if (xmax > (int32_t)a->limit)
			xmax = (int32_t)a->limit;
		xmax -= xmin;
		if (xmax < 0)
			xmax = 0;
		if (xmax > (int32_t)a->ksize)
			xmax = (int32_t)a->ksize;
		/* The weights twice (their sum, then each): no buffer of ksize doubles. */
		for (int32_t x = 0; x < xmax; x++)
			sum += triangle((x + xmin - center + 0.5) * ss);
		for (int32_t x = 0; x < (int32_t)a->ksize; x++) {
			double v = x < xmax && sum != 0.0 ? triangle((x + xmin - center + 0.5) * ss) / sum
							  : 0.0;

			ki[x] = (int32_t)(v < 0 ? -0.5 + v * (1 << PRECISION_BITS)
					       : 0.5 + v * (1 << PRECISION_BITS));
		}
		bounds[2 * i] = xmin;
		bounds[2 * i + 1] = xmax;
	}
}

static inline uint8_t clip8(int32_t v)
{
	if (v >= (1 << PRECISION_BITS << 8))
		return 255;
	if (v <= 0)
		return 0;
	return (uint8_t)(v >> PRECISION_BITS);
}

/* The coefficient tables and bounds of both axes. */
static size_t coef_ints(const axis *x, const axis *y)
{
	return (size_t)x->n * (x->ksize + 2) + (size_t)y->n * (y->ksize + 2);
}

size_t bi__resize_need(uint32_t region_w, uint32_t region_h, uint32_t out_w, uint32_t out_h)
{
	double sx = (double)region_w / out_w, sy = (double)region_h / out_h;
	size_t coef = (size_t)out_w * (ksize_of(sx) + 2) + (size_t)out_h * (ksize_of(sy) + 2);
	size_t sums = (size_t)(region_h > out_w ? region_h : out_w) * 3 * sizeof(int32_t);

	return coef * sizeof(int32_t) + ((size_t)region_w + out_w) * (region_h + 1) * 3 + sums;
}

/* Rows [y0, y1) of r, columns [0, w), transposed: dst[x][y - y0] (3 bytes a pixel). */
static void transpose_in(const bi_region *r, uint32_t y0, uint32_t y1, uint8_t *dst)
{
	size_t col = (size_t)(y1 - y0) * 3;

	for (uint32_t y = y0; y < y1; y++) {
		const uint8_t *in = r->px + (size_t)y * r->stride;
		uint8_t *d = dst + (size_t)(y - y0) * 3;

		for (uint32_t x = 0; x < r->w; x++, in += 3, d += col) {
			d[0] = in[0];
			d[1] = in[1];
			d[2] = in[2];
		}
	}
}

/*
 * The horizontal pass on transposed rows (cols: one region column of
 * `rows` pixels after another): each output column is the columns of its
 * window summed tap by tap, in acc (rows·3 sums), contiguous loops the
 * compiler vectorizes; the sums are Pillow's, in the same order. Then
 * back to rows: tmp[y][i], out_w pixels a row.
 */
static void horizontal(const uint8_t *cols, uint32_t rows, const axis *ax, const int32_t *bx,
		       const int32_t *kx, int32_t *acc, uint8_t *tmp)
{
	size_t col = (size_t)rows * 3, row = (size_t)ax->n * 3;

	for (uint32_t i = 0; i < ax->n; i++) {
		const int32_t *k = kx + (size_t)i * ax->ksize;
		const uint8_t *c = cols + (size_t)bx[2 * i] * col;
		uint8_t *o = tmp + (size_t)i * 3;

		for (size_t x = 0; x < col; x++)
			acc[x] = 1 << (PRECISION_BITS - 1);
		for (int32_t t = 0; t < bx[2 * i + 1]; t++, c += col) {
			int32_t kt = k[t];

			for (size_t x = 0; x < col; x++)
				acc[x] += c[x] * kt;
		}
		for (uint32_t y = 0; y < rows; y++, o += row) {
			o[0] = clip8(acc[3 * y]);
			o[1] = clip8(acc[3 * y + 1]);
			o[2] = clip8(acc[3 * y + 2]);
		}
	}
}

/*
 * The horizontal pass straight from the region's rows (when the transposed
 * copy would not fit the scratch: a large region): each output pixel's
 * window summed in place. The same sums, in the same order.
 */
static void horizontal_rows(const bi_region *r, uint32_t y0, uint32_t y1, const axis *ax,
			    const int32_t *bx, const int32_t *kx, uint8_t *tmp)
{
	for (uint32_t y = y0; y < y1; y++) {
		const uint8_t *in = r->px + (size_t)y * r->stride;
		uint8_t *o = tmp + (size_t)(y - y0) * ax->n * 3;

		for (uint32_t i = 0; i < ax->n; i++, o += 3) {
			const int32_t *k = kx + (size_t)i * ax->ksize;
			const uint8_t *p = in + (size_t)bx[2 * i] * 3;
			int32_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;

			for (int32_t t = 0; t < bx[2 * i + 1]; t++) {
				s0 += p[3 * t] * k[t];
				s1 += p[3 * t + 1] * k[t];
				s2 += p[3 * t + 2] * k[t];
			}
			o[0] = clip8(s0);
			o[1] = clip8(s1);
			o[2] = clip8(s2);
		}
	}
}

/*
 * The vertical pass from tmp (rows from y0) into out, in its layout,
 * mirrored when flip. A row at a time, tap by tap over the whole row into
 * acc (the row's 3·n sums): contiguous loops the compiler vectorizes; the
 * sums are Pillow's, in the same order.
 */
static void vertical(const axis *ax, const axis *ay, const int32_t *by, const int32_t *ky,
		     uint32_t y0, const uint8_t *tmp, bool flip, bool nhwc, int32_t *acc,
		     uint8_t *out)
{
	size_t plane = (size_t)ay->n * ax->n, row = (size_t)ax->n * 3;

	for (uint32_t j = 0; j < ay->n; j++) {
		const int32_t *k = ky + (size_t)j * ay->ksize;
		const uint8_t *base = tmp + (size_t)(by[2 * j] - (int32_t)y0) * row;

		for (size_t x = 0; x < row; x++)
			acc[x] = 1 << (PRECISION_BITS - 1);
		for (int32_t t = 0; t < by[2 * j + 1]; t++) {
			const uint8_t *p = base + (size_t)t * row;
			int32_t kt = k[t];

			for (size_t x = 0; x < row; x++)
				acc[x] += p[x] * kt;
		}
		for (uint32_t i = 0; i < ax->n; i++) {
			uint32_t xo = flip ? ax->n - 1 - i : i;
			const int32_t *a = acc + (size_t)i * 3;

			if (nhwc) {
				uint8_t *o = out + ((size_t)j * ax->n + xo) * 3;

				o[0] = clip8(a[0]);
				o[1] = clip8(a[1]);
				o[2] = clip8(a[2]);
			} else {
				size_t at = (size_t)j * ax->n + xo;

				out[at] = clip8(a[0]);
				out[plane + at] = clip8(a[1]);
				out[2 * plane + at] = clip8(a[2]);
			}
		}
	}
}

int bi__resize(bi_scratch *sc, const bi_region *r, double bx0, double by0, double bx1,
	       double by1, uint32_t out_w, uint32_t out_h, bool flip, bool nhwc, uint8_t *out)
{
	axis ax = { .in0 = bx0, .step = (bx1 - bx0) / out_w, .n = out_w, .limit = r->w };
	axis ay = { .in0 = by0, .step = (by1 - by0) / out_h, .n = out_h, .limit = r->h };
	int32_t *bx, *kx, *by, *ky;
	uint32_t y0 = UINT32_MAX, y1 = 0, rows;
	int e;

	ax.ksize = ksize_of(ax.step);
	ay.ksize = ksize_of(ay.step);
	e = bi__grow(sc, (void **)&sc->coef, &sc->coef_cap, coef_ints(&ax, &ay) * sizeof(int32_t));
	if (e < 0)
		return e;
	bx = sc->coef;
	kx = bx + 2 * (size_t)ax.n;
	by = kx + (size_t)ax.n * ax.ksize;
	ky = by + 2 * (size_t)ay.n;
	coeffs(&ax, bx, kx);
	coeffs(&ay, by, ky);
	/* Only the rows some output row uses go through the horizontal pass. */
	for (uint32_t j = 0; j < ay.n; j++) {
		uint32_t lo = (uint32_t)by[2 * j], hi = lo + (uint32_t)by[2 * j + 1];

		y0 = lo < y0 ? lo : y0;
		y1 = hi > y1 ? hi : y1;
	}
	if (y1 <= y0)
		y0 = y1 = 0;
	rows = y1 - y0;
	e = bi__grow(sc, (void **)&sc->row, &sc->row_cap,
		     (size_t)(rows > ax.n ? rows : ax.n) * 3 * sizeof(int32_t));
	if (e < 0)
		return e;
	/* tmp: the region's rows transposed, then the horizontal pass's rows after them. */
	e = bi__grow(sc, (void **)&sc->tmp, &sc->tmp_cap, ((size_t)r->w + ax.n) * (rows + 1) * 3);
	if (e == 0) {
		transpose_in(r, y0, y1, sc->tmp);
		horizontal(sc->tmp, rows, &ax, bx, kx, (int32_t *)sc->row,
			   sc->tmp + (size_t)r->w * rows * 3);
		vertical(&ax, &ay, by, ky, y0, sc->tmp + (size_t)r->w * rows * 3, flip, nhwc,
			 (int32_t *)sc->row, out);
		return 0;
	}
	/* No room for the transposed copy (a large region): the rows as they are. */
	e = bi__grow(sc, (void **)&sc->tmp, &sc->tmp_cap, (size_t)(rows + 1) * ax.n * 3);
	if (e < 0)
		return e;
	horizontal_rows(r, y0, y1, &ax, bx, kx, sc->tmp);
	vertical(&ax, &ay, by, ky, y0, sc->tmp, flip, nhwc, (int32_t *)sc->row, out);
	return 0;
}
