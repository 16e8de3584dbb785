/* SPDX-License-Identifier: MIT */
/*
 * bench_stats.h - latency statistics for batchd-bench: a log-linear
 * histogram with bounded relative error, and the permutation that gives
 * random reads their offsets.
 *
 * Why a histogram: a 30-second 4 KiB random-read run completes millions of
 * reads, and every one's latency must count toward p99.9. Keeping them all
 * costs memory; sampling loses the tail. Like HdrHistogram (and fio's own
 * "plat" buckets) we count values in buckets whose width grows with the
 * value: exact below 256, then 128 linear buckets per power of two, so any
 * value is known to within 1/128 of itself and a percentile is reported
 * (as its bucket's midpoint) to within 0.4 %. Min, max, mean and standard
 * deviation are exact. 7424 buckets cover all of uint64_t.
 *
 * Percentiles follow fio: the p-th percentile is the smallest recorded
 * value v such that at least p % of all values are <= v (nearest rank).
 *
 * Why a permutation for random offsets: fio's default randread keeps a map
 * of blocks already read so that each pass over the file reads every
 * block exactly once in random order. bench_perm does the same in O(1)
 * memory with a keyed bijection on [0, 2^k) and cycle walking into
 * [0, n), so batchd-bench and fio draw from the same distribution.
 *
 * Thread rules: no global state; one histogram or permutation per thread,
 * merged on one thread afterwards.
 */
#ifndef BATCHD_TOOLS_BENCH_STATS_H
#define BATCHD_TOOLS_BENCH_STATS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define BENCH_HIST_EXACT 256u                      /* values below are exact */
#define BENCH_HIST_SUB 128u                        /* buckets per power of two */
#define BENCH_HIST_BUCKETS (BENCH_HIST_EXACT + 56u * BENCH_HIST_SUB)

typedef struct bench_hist {
	uint64_t count;
	uint64_t min, max;       /* exact; min is UINT64_MAX while empty */
	uint64_t sum;            /* exact (ns values: overflows after 584 years) */
	double sumsq;
	uint64_t bucket[BENCH_HIST_BUCKETS];
} bench_hist;

/* Empty h. */
void bench_hist_init(bench_hist *h);
void bench_hist_record(bench_hist *h, uint64_t v);
/* Add src's values to dst. */
void bench_hist_merge(bench_hist *dst, const bench_hist *src);

/* Bucket of v, and the smallest and largest value of bucket i. */
size_t bench_hist_index(uint64_t v);
uint64_t bench_hist_lowest(size_t i);
uint64_t bench_hist_highest(size_t i);

/*
 * The p-th percentile (0 <= p <= 100): the midpoint of the bucket holding
 * the nearest-rank value, clamped to [min, max], so exact below 256 and
 * for p = 0 (min) and p = 100 (max). 0 for an empty histogram.
 */
uint64_t bench_hist_percentile(const bench_hist *h, double p);
double bench_hist_mean(const bench_hist *h);
/* Sample standard deviation (n - 1), as fio reports it; 0 below 2 values. */
double bench_hist_stddev(const bench_hist *h);

/* The percentiles fio prints by default, and how many there are. */
extern const double bench_fio_percentiles[];
extern const size_t bench_fio_npercentiles;

/*
 * Writes h as fio writes clat_ns: {"min": .., "max": .., "mean": ..,
 * "stddev": .., "N": .., "percentile": {"1.000000": .., ..., "99.990000": ..}}
 * (min and max are 0 for an empty histogram).
 */
void bench_hist_json(const bench_hist *h, FILE *f);

/* ---- random numbers and permutations ------------------------------------ */

/* xoshiro256**: a fixed sequence whatever the libc. Seed with bench_rng_seed. */
typedef struct bench_rng {
	uint64_t s[4];
} bench_rng;

void bench_rng_seed(bench_rng *r, uint64_t seed);
uint64_t bench_rng_next(bench_rng *r);

/* A keyed permutation of [0, n). */
typedef struct bench_perm {
	uint64_t n;
	uint64_t mask;           /* 2^k - 1, the smallest with mask >= n - 1 */
	unsigned shift;          /* xorshift distance, about k / 2 */
	uint64_t add[4], mul[4]; /* round keys; mul odd */
} bench_perm;

/* A permutation of [0, n) (n >= 1) chosen by seed. */
void bench_perm_init(bench_perm *p, uint64_t n, uint64_t seed);
/* Element i (< n) of the permutation. Expected < 2 rounds of walking. */
uint64_t bench_perm_at(const bench_perm *p, uint64_t i);

#endif
