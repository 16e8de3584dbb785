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
 * why no library's resampler is used instead, with the figures. Both
 * passes also have AVX2 forms, used where the CPU has it, that give the
 * same bytes (the same 32-bit sums).
 *
 * One axis is described by where each output pixel's center falls in the
 * region: center(i) = in0 + (i + 0.5) * step, so that a box of a larger
 * resize (a center crop of a resized image) has exactly the centers the
 * whole resize would give those pixels.
 */
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
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

/* The horizontal pass's rows: one more than used, its pixels written 4 bytes at a time. */
static size_t tmp_bytes(uint32_t rows, uint32_t out_w)
{
	return (size_t)(rows + 1) * out_w * 3 + 4;
}

static size_t madd_bytes(const axis *ax);

static size_t row_bytes(const axis *ax)
{
	size_t sums = (size_t)ax->n * 3 * sizeof(int32_t), madd = madd_bytes(ax);

	return sums > madd ? sums : madd;
}

size_t bi__resize_need(uint32_t region_w, uint32_t region_h, uint32_t out_w, uint32_t out_h)
{
	double sx = (double)region_w / out_w, sy = (double)region_h / out_h;
	size_t coef = (size_t)out_w * (ksize_of(sx) + 2) + (size_t)out_h * (ksize_of(sy) + 2);

	axis ax = { .n = out_w, .ksize = ksize_of(sx) };

	return coef * sizeof(int32_t) + tmp_bytes(region_h, out_w) + row_bytes(&ax);
}

/*
 * The horizontal pass, rows [y0, y1) of r into tmp (out_w pixels a row):
 * each output pixel its window's taps summed. Pillow's sums.
 */
static void horizontal_c(const bi_region *r, uint32_t y0, uint32_t y1, const axis *ax,
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
 * Output row j's 3·n values (clipped, in tmp's pixel order) into out, in
 * its layout, mirrored when flip.
 */
static void store_row(const uint8_t *v, uint32_t j, const axis *ax, const axis *ay, bool flip,
		      bool nhwc, uint8_t *out)
{
	size_t n = ax->n, plane = (size_t)ay->n * n;

	if (nhwc) {
		uint8_t *o = out + (size_t)j * n * 3;

		if (!flip) {
			memcpy(o, v, n * 3);
			return;
		}
		for (size_t i = 0; i < n; i++)
			memcpy(o + (n - 1 - i) * 3, v + i * 3, 3);
		return;
	}
	uint8_t *r = out + (size_t)j * n, *g = r + plane, *b = g + plane;

	if (!flip) {
		for (size_t i = 0; i < n; i++) {
			r[i] = v[3 * i];
			g[i] = v[3 * i + 1];
			b[i] = v[3 * i + 2];
		}
		return;
	}
	for (size_t i = 0; i < n; i++) {
		r[n - 1 - i] = v[3 * i];
		g[n - 1 - i] = v[3 * i + 1];
		b[n - 1 - i] = v[3 * i + 2];
	}
}

/*
 * The vertical pass from tmp (rows from y0) into out: a row at a time,
 * tap by tap over the whole row into acc (the row's 3·n sums), loops the
 * compiler vectorizes. Pillow's sums. The clipped row goes to line (3·n
 * bytes), then to out by store_row.
 */
static void vertical_c(const axis *ax, const axis *ay, const int32_t *by, const int32_t *ky,
		       uint32_t y0, const uint8_t *tmp, bool flip, bool nhwc, int32_t *acc,
		       uint8_t *line, uint8_t *out)
{
	size_t row = (size_t)ax->n * 3;

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
		for (size_t x = 0; x < row; x++)
			line[x] = clip8(acc[x]);
		store_row(line, j, ax, ay, flip, nhwc, out);
	}
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

/*
 * AVX2: the same sums, exactly (32-bit products and sums, as Pillow's),
 * eight at a time. Clipping is a shift and two saturating packs: a sum
 * below 0 packs to 0, one of 1 << 30 or more to 255, as clip8.
 */
#define AVX2 __attribute__((target("avx2")))

/*
 * The horizontal pass's weights for _mm256_madd_epi16: a weight k < 2^23
 * is kh·2^11 + kl, both under 2^12, so that sum(p·k) is
 * (sum(p·kh) << 11) + sum(p·kl), exactly. Each output pixel's taps four
 * at a time: 16 kh then 16 kl, in the order taps_of lays out pixels:
 * (k0 k1 k0 k1 k0 k1 0 0 k2 k3 k2 k3 k2 k3 0 0), taps past the window 0.
 */
#define KH_BITS 11

static uint32_t tap_groups(const axis *ax)
{
	return (ax->ksize + 3) / 4;
}

static size_t madd_bytes(const axis *ax)
{
	return (size_t)ax->n * tap_groups(ax) * 32 * sizeof(int16_t);
}

static void madd_weights(const axis *ax, const int32_t *bx, const int32_t *kx, int16_t *q)
{
	uint32_t groups = tap_groups(ax);

	memset(q, 0, madd_bytes(ax));
	for (uint32_t i = 0; i < ax->n; i++) {
		const int32_t *k = kx + (size_t)i * ax->ksize;

		for (uint32_t t = 0; t < (uint32_t)bx[2 * i + 1]; t++) {
			int16_t *g = q + ((size_t)i * groups + t / 4) * 32 + (t % 4 / 2) * 8 + t % 2;

			for (int c = 0; c < 3; c++) {
				g[2 * c] = (int16_t)(k[t] >> KH_BITS);
				g[16 + 2 * c] = (int16_t)(k[t] & ((1 << KH_BITS) - 1));
			}
		}
	}
}

/* Four 32-bit sums to 8 bits in the low 4 bytes. */
AVX2 static inline uint32_t clip4(__m128i v)
{
	v = _mm_srai_epi32(v, PRECISION_BITS);
	v = _mm_packs_epi32(v, v);
	return (uint32_t)_mm_cvtsi128_si32(_mm_packus_epi16(v, v));
}

/*
 * Each output pixel's taps four at a time: 16 bytes read from the
 * group's first pixel (13 past a row's end at most, so rows before the
 * region's last only, in regions at least 5 pixels wide: the next row's
 * bytes follow, and weight 0 takes them), spread to (r0 r1 g0 g1 b0 b1
 * 0 0 r2 r3 ...) 16-bit lanes, two madds. A pixel's 3 bytes are written
 * as 4: the fourth is the next pixel's first, written after it
 * (tmp_bytes).
 */
AVX2 static void horizontal_avx2(const bi_region *r, uint32_t y0, uint32_t y1, const axis *ax,
				 const int32_t *bx, const int16_t *kq, uint8_t *tmp)
{
	const __m128i spread = _mm_setr_epi8(0, 3, 1, 4, 2, 5, -1, -1, 6, 9, 7, 10, 8, 11, -1, -1);
	uint32_t groups = tap_groups(ax);

	for (uint32_t y = y0; y < y1; y++) {
		const uint8_t *in = r->px + (size_t)y * r->stride;
		uint8_t *o = tmp + (size_t)(y - y0) * ax->n * 3;

		for (uint32_t i = 0; i < ax->n; i++, o += 3) {
			const int16_t *q = kq + (size_t)i * groups * 32;
			const uint8_t *p = in + (size_t)bx[2 * i] * 3;
			__m256i sh = _mm256_setzero_si256(), sl = sh, acc;
			__m128i sum;
			uint32_t px;

			for (int32_t t = 0; t < bx[2 * i + 1]; t += 4, p += 12, q += 32) {
				__m256i w = _mm256_cvtepu8_epi16(
					_mm_shuffle_epi8(_mm_loadu_si128((const void *)p), spread));

				sh = _mm256_add_epi32(sh, _mm256_madd_epi16(w, _mm256_loadu_si256((const void *)q)));
				sl = _mm256_add_epi32(sl, _mm256_madd_epi16(w, _mm256_loadu_si256((const void *)(q + 16))));
			}
			acc = _mm256_add_epi32(_mm256_slli_epi32(sh, KH_BITS), sl);
			sum = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
			px = clip4(_mm_add_epi32(sum, _mm_set1_epi32(1 << (PRECISION_BITS - 1))));
			memcpy(o, &px, 4);
		}
	}
}

/*
 * The vertical pass eight values of a row at a time, every tap summed in
 * a register, then clipped: Pillow's sums. The row's last values (fewer
 * than eight) as vertical_c does them.
 */
AVX2 static void vertical_avx2(const axis *ax, const axis *ay, const int32_t *by,
			       const int32_t *ky, uint32_t y0, const uint8_t *tmp, bool flip,
			       bool nhwc, uint8_t *line, uint8_t *out)
{
	size_t row = (size_t)ax->n * 3, x;

	for (uint32_t j = 0; j < ay->n; j++) {
		const int32_t *k = ky + (size_t)j * ay->ksize;
		const uint8_t *base = tmp + (size_t)(by[2 * j] - (int32_t)y0) * row;
		int32_t n = by[2 * j + 1];

		for (x = 0; x + 8 <= row; x += 8) {
			__m256i acc = _mm256_set1_epi32(1 << (PRECISION_BITS - 1));
			__m128i v;

			for (int32_t t = 0; t < n; t++) {
				__m256i p = _mm256_cvtepu8_epi32(
					_mm_loadl_epi64((const void *)(base + (size_t)t * row + x)));

				acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(p, _mm256_set1_epi32(k[t])));
			}
			acc = _mm256_srai_epi32(acc, PRECISION_BITS);
			v = _mm_packs_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
			_mm_storel_epi64((void *)(line + x), _mm_packus_epi16(v, v));
		}
		for (; x < row; x++) {
			int32_t s = 1 << (PRECISION_BITS - 1);

			for (int32_t t = 0; t < n; t++)
				s += base[(size_t)t * row + x] * k[t];
			line[x] = clip8(s);
		}
		store_row(line, j, ax, ay, flip, nhwc, out);
	}
}

/* -1 until asked; the CPU's answer, or what a test set (bi__resize_simd). */
static _Atomic int simd = -1;

static bool use_avx2(void)
{
	int v = atomic_load_explicit(&simd, memory_order_relaxed);

	if (v < 0) {
		__builtin_cpu_init();
		v = __builtin_cpu_supports("avx2") ? 1 : 0;
		atomic_store_explicit(&simd, v, memory_order_relaxed);
	}
	return v;
}

bool bi__resize_simd(bool on)
{
	atomic_store_explicit(&simd, -1, memory_order_relaxed);
	if (!use_avx2())
		return false;
	atomic_store_explicit(&simd, on, memory_order_relaxed);
	return on;
}
#else
static bool use_avx2(void)
{
	return false;
}

bool bi__resize_simd(bool on)
{
	(void)on;
	return false;
}
#endif

int bi__resize(bi_scratch *sc, const bi_region *r, double bx0, double by0, double bx1,
	       double by1, uint32_t out_w, uint32_t out_h, bool flip, bool nhwc, uint8_t *out)
{
	axis ax = { .in0 = bx0, .step = (bx1 - bx0) / out_w, .n = out_w, .limit = r->w };
	axis ay = { .in0 = by0, .step = (by1 - by0) / out_h, .n = out_h, .limit = r->h };
	int32_t *bx, *kx, *by, *ky;
	uint32_t y0 = UINT32_MAX, y1 = 0, rows;
	uint8_t *line;
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
	/* row: vertical_c's sums, or horizontal_avx2's weights. */
	e = bi__grow(sc, (void **)&sc->row, &sc->row_cap, row_bytes(&ax));
	if (e == 0)
		e = bi__grow(sc, (void **)&sc->tmp, &sc->tmp_cap, tmp_bytes(rows, ax.n));
	if (e < 0)
		return e;
	line = sc->tmp + tmp_bytes(rows, ax.n) - (size_t)ax.n * 3 - 4;
	if (use_avx2()) {
		/* The region's last row, if used, as horizontal_c: see horizontal_avx2. */
		uint32_t safe = r->w < 5 ? y0 : y1 < r->h || y1 == y0 ? y1 : y1 - 1;

		madd_weights(&ax, bx, kx, (int16_t *)sc->row);
		horizontal_avx2(r, y0, safe, &ax, bx, (const int16_t *)sc->row, sc->tmp);
		horizontal_c(r, safe, y1, &ax, bx, kx, sc->tmp + (size_t)(safe - y0) * ax.n * 3);
		vertical_avx2(&ax, &ay, by, ky, y0, sc->tmp, flip, nhwc, line, out);
		return 0;
	}
	horizontal_c(r, y0, y1, &ax, bx, kx, sc->tmp);
	vertical_c(&ax, &ay, by, ky, y0, sc->tmp, flip, nhwc, (int32_t *)sc->row, line, out);
	return 0;
}
