/* SPDX-License-Identifier: MIT */
/*
 * bench_stats.c - log-linear latency histogram, xoshiro256** and keyed
 * permutations for batchd-bench (see bench_stats.h).
 */
#include <math.h>
#include <string.h>

#include "bench_stats.h"

/* ---- histogram ------------------------------------------------------------ */

void bench_hist_init(bench_hist *h)
{
	memset(h, 0, sizeof(*h));
	h->min = UINT64_MAX;
}

size_t bench_hist_index(uint64_t v)
{
	unsigned e;

	if (v < BENCH_HIST_EXACT)
		return (size_t)v;
	e = 63u - (unsigned)__builtin_clzll(v);               /* 8..63 */
	/* The 7 bits under the leading one pick the linear sub-bucket. */
	return BENCH_HIST_EXACT + (size_t)(e - 8u) * BENCH_HIST_SUB +
	       (size_t)((v >> (e - 7u)) & (BENCH_HIST_SUB - 1u));
}

uint64_t bench_hist_lowest(size_t i)
{
	size_t j;
	unsigned e;

	if (i < BENCH_HIST_EXACT)
		return (uint64_t)i;
	j = i - BENCH_HIST_EXACT;
	e = (unsigned)(j / BENCH_HIST_SUB) + 8u;
	return (uint64_t)(BENCH_HIST_SUB + j % BENCH_HIST_SUB) << (e - 7u);
}

uint64_t bench_hist_highest(size_t i)
{
	unsigned e;

	if (i < BENCH_HIST_EXACT)
		return (uint64_t)i;
	e = (unsigned)((i - BENCH_HIST_EXACT) / BENCH_HIST_SUB) + 8u;
	return bench_hist_lowest(i) + ((UINT64_C(1) << (e - 7u)) - 1u);
}

void bench_hist_record(bench_hist *h, uint64_t v)
{
	h->bucket[bench_hist_index(v)]++;
	h->count++;
	h->sum += v;
	h->sumsq += (double)v * (double)v;
	if (v < h->min)
		h->min = v;
	if (v > h->max)
		h->max = v;
}

void bench_hist_merge(bench_hist *dst, const bench_hist *src)
{
	for (size_t i = 0; i < BENCH_HIST_BUCKETS; i++)
		dst->bucket[i] += src->bucket[i];
	dst->count += src->count;
	dst->sum += src->sum;
	dst->sumsq += src->sumsq;
	if (src->min < dst->min)
		dst->min = src->min;
	if (src->max > dst->max)
		dst->max = src->max;
}

uint64_t bench_hist_percentile(const bench_hist *h, double p)
{
	uint64_t rank, seen = 0;
	double want;

	if (!h->count)
		return 0;
	if (p <= 0)
		return h->min;
	if (p >= 100)
		return h->max;
	/*
	 * Nearest rank: ceil(p% of count), at least 1. The small epsilon keeps
	 * 99.9% of 1000 at rank 999 although p / 100 * 1000 rounds above it.
	 */
	want = ceil(p / 100.0 * (double)h->count - 1e-9);
	rank = want < 1 ? 1 : (uint64_t)want;
	for (size_t i = 0; i < BENCH_HIST_BUCKETS; i++) {
		seen += h->bucket[i];
		if (seen >= rank) {
			uint64_t lo = bench_hist_lowest(i), hi = bench_hist_highest(i);
			uint64_t mid = lo + (hi - lo) / 2;

			if (mid < h->min)
				mid = h->min;
			if (mid > h->max)
				mid = h->max;
			return mid;
		}
	}
	return h->max;
}

double bench_hist_mean(const bench_hist *h)
{
	return h->count ? (double)h->sum / (double)h->count : 0;
}

double bench_hist_stddev(const bench_hist *h)
{
	double n = (double)h->count, mean, var;

	if (h->count < 2)
		return 0;
	mean = (double)h->sum / n;
	var = (h->sumsq - n * mean * mean) / (n - 1);
	return var > 0 ? sqrt(var) : 0;
}

const double bench_fio_percentiles[] = {
	1, 5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95, 99, 99.5, 99.9, 99.95, 99.99,
};
const size_t bench_fio_npercentiles =
	sizeof(bench_fio_percentiles) / sizeof(bench_fio_percentiles[0]);

void bench_hist_json(const bench_hist *h, FILE *f)
{
	fprintf(f, "{\"min\": %llu, \"max\": %llu, \"mean\": %.6f, \"stddev\": %.6f, \"N\": %llu, "
		"\"percentile\": {",
		(unsigned long long)(h->count ? h->min : 0), (unsigned long long)h->max,
		bench_hist_mean(h), bench_hist_stddev(h), (unsigned long long)h->count);
	for (size_t i = 0; i < bench_fio_npercentiles; i++)
		fprintf(f, "%s\"%.6f\": %llu", i ? ", " : "", bench_fio_percentiles[i],
			(unsigned long long)bench_hist_percentile(h, bench_fio_percentiles[i]));
	fputs("}}", f);
}

/* ---- random numbers --------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

void bench_rng_seed(bench_rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		r->s[i] = splitmix64(&seed);
}

uint64_t bench_rng_next(bench_rng *r)
{
	uint64_t *s = r->s, out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return out;
}

/* ---- permutations ---------------------------------------------------------- */

void bench_perm_init(bench_perm *p, uint64_t n, uint64_t seed)
{
	unsigned k = 0;
	bench_rng r;

	bench_rng_seed(&r, seed);
	p->n = n ? n : 1;
	while (k < 64 && (UINT64_C(1) << k) < p->n)
		k++;
	p->mask = k == 64 ? UINT64_MAX : (UINT64_C(1) << k) - 1;
	p->shift = k / 2 + 1;
	for (int i = 0; i < 4; i++) {
		p->add[i] = bench_rng_next(&r);
		p->mul[i] = bench_rng_next(&r) | 1;
	}
}

/*
 * A bijection on [0, 2^k): each step (add a key, multiply by an odd key,
 * xor with a right shift of itself, all modulo 2^k) is invertible, so
 * their composition is too. Multiplication carries low bits upward and
 * the shift carries high bits down; four rounds mix both ways.
 */
static uint64_t perm_round(const bench_perm *p, uint64_t x)
{
	for (int i = 0; i < 4; i++) {
		x = (x + p->add[i]) & p->mask;
		x = (x * p->mul[i]) & p->mask;
		x ^= x >> p->shift;
	}
	return x;
}

uint64_t bench_perm_at(const bench_perm *p, uint64_t i)
{
	uint64_t x = i;

	/*
	 * Cycle walking: follow the bijection until it lands inside [0, n).
	 * Starting inside [0, n), the walk returns there before it could
	 * revisit, and distinct starts give distinct ends. 2^k < 2n, so on
	 * average fewer than two rounds.
	 */
	do
		x = perm_round(p, x);
	while (x >= p->n);
	return x;
}
