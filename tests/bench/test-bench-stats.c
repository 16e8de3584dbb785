/* SPDX-License-Identifier: MIT */
/*
 * test-bench-stats.c - the Check suite for batchd-bench's statistics and
 * argument helpers (tools/bench/bench_stats.c, tools/bench/bench_util.c).
 *
 * Percentiles are checked against inputs whose answer is known exactly
 * (1..100, a bimodal set) and against the exact nearest-rank percentile of
 * a sorted copy of 200 000 log-uniform values, to the documented bound
 * (0.4 %). Buckets are checked to tile uint64_t with widths under 1/128 of
 * their values; the permutation to hit every position exactly once.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "bench.h"
#include "bench_stats.h"

static bench_hist *hist_new(void)
{
	bench_hist *h = malloc(sizeof(*h));

	ck_assert_ptr_nonnull(h);
	bench_hist_init(h);
	return h;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Exact nearest-rank percentile of sorted v[0..n). */
static uint64_t exact_percentile(const uint64_t *v, size_t n, double p)
{
	double rank = ceil(p / 100.0 * (double)n - 1e-9);

	if (rank < 1)
		rank = 1;
	return v[(size_t)rank - 1];
}

/* ---- histogram -------------------------------------------------------------- */

START_TEST(exact_small_values)
{
	bench_hist *h = hist_new();

	for (uint64_t v = 100; v >= 1; v--)
		bench_hist_record(h, v);
	ck_assert_uint_eq(h->count, 100);
	ck_assert_uint_eq(h->min, 1);
	ck_assert_uint_eq(h->max, 100);
	ck_assert_uint_eq(bench_hist_percentile(h, 0), 1);
	ck_assert_uint_eq(bench_hist_percentile(h, 1), 1);
	ck_assert_uint_eq(bench_hist_percentile(h, 50), 50);
	ck_assert_uint_eq(bench_hist_percentile(h, 90), 90);
	ck_assert_uint_eq(bench_hist_percentile(h, 99), 99);
	ck_assert_uint_eq(bench_hist_percentile(h, 99.9), 100);
	ck_assert_uint_eq(bench_hist_percentile(h, 100), 100);
	ck_assert_double_eq_tol(bench_hist_mean(h), 50.5, 1e-12);
	/* sample standard deviation of 1..100: sqrt(100 * 101 / 12) */
	ck_assert_double_eq_tol(bench_hist_stddev(h), sqrt(841.6666666666666), 1e-9);
	free(h);
}
END_TEST

START_TEST(nearest_rank_edges)
{
	bench_hist *h = hist_new();

	/* 1000 values: 999 x 10 and one 200; 99.9 % of 1000 is rank 999 exactly. */
	for (int i = 0; i < 999; i++)
		bench_hist_record(h, 10);
	bench_hist_record(h, 200);
	ck_assert_uint_eq(bench_hist_percentile(h, 99.9), 10);
	ck_assert_uint_eq(bench_hist_percentile(h, 99.95), 200);
	ck_assert_uint_eq(bench_hist_percentile(h, 99.99), 200);
	free(h);
}
END_TEST

START_TEST(bimodal_large_values)
{
	bench_hist *h = hist_new();

	/* 990 reads at 100 us and 10 at 25 ms: p99 is the fast mode, p99.9 the slow. */
	for (int i = 0; i < 990; i++)
		bench_hist_record(h, 100000);
	for (int i = 0; i < 10; i++)
		bench_hist_record(h, 25000000);
	/* Within the bucket's half width (0.4 %), and never outside [min, max]. */
	ck_assert_uint_ge(bench_hist_percentile(h, 50), 100000);
	ck_assert_uint_le(bench_hist_percentile(h, 50), 100400);
	ck_assert_uint_eq(bench_hist_percentile(h, 99), bench_hist_percentile(h, 50));
	ck_assert_uint_le(bench_hist_percentile(h, 99.5), 25000000);
	ck_assert_uint_ge(bench_hist_percentile(h, 99.5), 24900000);
	ck_assert_uint_eq(bench_hist_percentile(h, 99.9), bench_hist_percentile(h, 99.5));
	ck_assert_double_eq_tol(bench_hist_mean(h), (990 * 1e5 + 10 * 2.5e7) / 1000, 1e-6);
	free(h);
}
END_TEST

START_TEST(against_sorted_reference)
{
	enum { N = 200000 };
	uint64_t *v = malloc(N * sizeof(*v));
	bench_hist *h = hist_new();
	bench_rng rng;
	double sum = 0;

	ck_assert_ptr_nonnull(v);
	bench_rng_seed(&rng, 42);
	for (size_t i = 0; i < N; i++) {
		/* log-uniform from 1 us to 1 s: every octave in use */
		double u = (double)(bench_rng_next(&rng) >> 11) / 9007199254740992.0;

		v[i] = (uint64_t)(1e3 * pow(1e6, u));
		sum += (double)v[i];
		bench_hist_record(h, v[i]);
	}
	qsort(v, N, sizeof(*v), cmp_u64);
	for (size_t i = 0; i < bench_fio_npercentiles; i++) {
		double p = bench_fio_percentiles[i];
		double want = (double)exact_percentile(v, N, p);
		double got = (double)bench_hist_percentile(h, p);

		ck_assert_msg(fabs(got - want) <= 0.004 * want, "p%g: got %.0f want %.0f", p, got,
			      want);
	}
	ck_assert_uint_eq(h->min, v[0]);
	ck_assert_uint_eq(h->max, v[N - 1]);
	ck_assert_double_eq_tol(bench_hist_mean(h), sum / N, 1e-6 * sum / N);
	free(v);
	free(h);
}
END_TEST

START_TEST(buckets_tile_and_bound_error)
{
	bench_rng rng;

	/* Consecutive buckets are adjacent: they tile [0, 2^64). */
	ck_assert_uint_eq(bench_hist_lowest(0), 0);
	for (size_t i = 1; i < BENCH_HIST_BUCKETS; i++) {
		if (bench_hist_lowest(i) != bench_hist_highest(i - 1) + 1)
			ck_abort_msg("bucket %zu does not follow bucket %zu", i, i - 1);
		/* width / lowest value <= 1/128 */
		if (i >= BENCH_HIST_EXACT && bench_hist_highest(i) - bench_hist_lowest(i) + 1 >
					     (bench_hist_lowest(i) + 127) / 128)
			ck_abort_msg("bucket %zu is too wide", i);
	}
	ck_assert_uint_eq(bench_hist_highest(BENCH_HIST_BUCKETS - 1), UINT64_MAX);
	ck_assert_uint_eq(bench_hist_index(UINT64_MAX), BENCH_HIST_BUCKETS - 1);
	bench_rng_seed(&rng, 7);
	for (int i = 0; i < 100000; i++) {
		uint64_t v = bench_rng_next(&rng) >> (bench_rng_next(&rng) % 64);
		size_t k = bench_hist_index(v);

		/* (plain tests in the hot loop: Check's asserts are slow under ASan) */
		if (k >= BENCH_HIST_BUCKETS || bench_hist_lowest(k) > v || bench_hist_highest(k) < v)
			ck_abort_msg("value %llu in bucket %zu", (unsigned long long)v, k);
	}
}
END_TEST

START_TEST(merge_is_union)
{
	bench_hist *a = hist_new(), *b = hist_new(), *all = hist_new();
	bench_rng rng;

	bench_rng_seed(&rng, 3);
	for (int i = 0; i < 5000; i++) {
		uint64_t v = bench_rng_next(&rng) % 10000000;

		bench_hist_record(i % 3 ? a : b, v);
		bench_hist_record(all, v);
	}
	bench_hist_merge(a, b);
	ck_assert_uint_eq(a->count, all->count);
	ck_assert_uint_eq(a->sum, all->sum);
	ck_assert_uint_eq(a->min, all->min);
	ck_assert_uint_eq(a->max, all->max);
	ck_assert(memcmp(a->bucket, all->bucket, sizeof(a->bucket)) == 0);
	for (size_t i = 0; i < bench_fio_npercentiles; i++)
		ck_assert_uint_eq(bench_hist_percentile(a, bench_fio_percentiles[i]),
				  bench_hist_percentile(all, bench_fio_percentiles[i]));
	free(a);
	free(b);
	free(all);
}
END_TEST

START_TEST(empty_and_json)
{
	bench_hist *h = hist_new();
	char *text = NULL;
	size_t len = 0;
	FILE *f;

	ck_assert_uint_eq(bench_hist_percentile(h, 50), 0);
	ck_assert_double_eq(bench_hist_mean(h), 0);
	ck_assert_double_eq(bench_hist_stddev(h), 0);
	f = open_memstream(&text, &len);
	ck_assert_ptr_nonnull(f);
	bench_hist_json(h, f);
	fclose(f);
	ck_assert_str_eq(text, "{\"min\": 0, \"max\": 0, \"mean\": 0.000000, \"stddev\": 0.000000, "
			 "\"N\": 0, \"percentile\": {\"1.000000\": 0, \"5.000000\": 0, "
			 "\"10.000000\": 0, \"20.000000\": 0, \"30.000000\": 0, \"40.000000\": 0, "
			 "\"50.000000\": 0, \"60.000000\": 0, \"70.000000\": 0, \"80.000000\": 0, "
			 "\"90.000000\": 0, \"95.000000\": 0, \"99.000000\": 0, \"99.500000\": 0, "
			 "\"99.900000\": 0, \"99.950000\": 0, \"99.990000\": 0}}");
	free(text);

	bench_hist_record(h, 7);
	text = NULL;
	f = open_memstream(&text, &len);
	bench_hist_json(h, f);
	fclose(f);
	ck_assert_ptr_nonnull(strstr(text, "\"min\": 7, \"max\": 7, \"mean\": 7.000000"));
	ck_assert_ptr_nonnull(strstr(text, "\"99.990000\": 7}}"));
	free(text);
	free(h);
}
END_TEST

/* ---- permutation and generator ---------------------------------------------------- */

START_TEST(permutation_hits_each_once)
{
	static const uint64_t sizes[] = { 1, 2, 3, 7, 1000, 4097, 65536, 100003 };

	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		uint64_t n = sizes[s], fixed = 0;
		uint8_t *seen = calloc(n, 1);
		bench_perm p;

		ck_assert_ptr_nonnull(seen);
		bench_perm_init(&p, n, 1234 + s);
		for (uint64_t i = 0; i < n; i++) {
			uint64_t x = bench_perm_at(&p, i);

			if (x >= n || seen[x])
				ck_abort_msg("n=%llu: %llu out of range or twice", (unsigned long long)n,
					     (unsigned long long)x);
			seen[x] = 1;
			fixed += x == i;
		}
		/* A shuffle, not the identity (a random one fixes ~1 point). */
		if (n >= 1000)
			ck_assert_uint_lt(fixed, 20);
		free(seen);
	}
}
END_TEST

START_TEST(permutation_depends_on_seed)
{
	bench_perm a, b, a2;
	unsigned same = 0;

	bench_perm_init(&a, 10000, 1);
	bench_perm_init(&a2, 10000, 1);
	bench_perm_init(&b, 10000, 2);
	for (uint64_t i = 0; i < 10000; i++) {
		if (bench_perm_at(&a, i) != bench_perm_at(&a2, i))
			ck_abort_msg("seed 1 gave two orders at %llu", (unsigned long long)i);
		same += bench_perm_at(&a, i) == bench_perm_at(&b, i);
	}
	ck_assert_uint_lt(same, 20);
}
END_TEST

START_TEST(rng_is_fixed)
{
	bench_rng a, b;

	bench_rng_seed(&a, 99);
	bench_rng_seed(&b, 99);
	for (int i = 0; i < 1000; i++)
		ck_assert_uint_eq(bench_rng_next(&a), bench_rng_next(&b));
	/* xoshiro256** reference: state {1, 2, 3, 4} gives 11520 first. */
	a.s[0] = 1, a.s[1] = 2, a.s[2] = 3, a.s[3] = 4;
	ck_assert_uint_eq(bench_rng_next(&a), 11520);
	ck_assert_uint_eq(bench_rng_next(&a), 0);
	ck_assert_uint_eq(bench_rng_next(&a), 1509978240);
}
END_TEST

/* ---- argument helpers -------------------------------------------------------------- */

START_TEST(parse_seconds)
{
	static const struct { const char *s; double v; } good[] = {
		{ "10", 10 }, { "0.5", 0.5 }, { ".25", 0.25 }, { "250ms", 0.25 }, { "2m", 120 },
		{ "3s", 3 }, { "0", 0 }, { "86400", 86400 },
	};
	static const char *const bad[] = {
		"", "-1", "abc", "1x", "nan", "inf", "1e400", "86401", "1 s", "s", "5sec", "+1",
	};
	double v;

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		ck_assert_msg(bench_parse_seconds(good[i].s, &v) == 0, "'%s'", good[i].s);
		ck_assert_double_eq_tol(v, good[i].v, 1e-12);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(bench_parse_seconds(bad[i], &v) == -EINVAL, "'%s' accepted", bad[i]);
	ck_assert_int_eq(bench_parse_seconds(NULL, &v), -EINVAL);
}
END_TEST

START_TEST(parse_lists)
{
	static const char *const bad_sizes[] = { "", ",", "4K,", ",4K", "4K,,8K", "0", "4Q", "x" };
	static const char *const bad_numbers[] = { "", "1,", "1,,2", "0", "4K", "-1", "1.5", "x" };
	uint64_t v[4];
	size_t n;

	ck_assert_int_eq(bench_parse_list("4K,64K,1M", true, v, 4, &n), 0);
	ck_assert_uint_eq(n, 3);
	ck_assert_uint_eq(v[0], 4096);
	ck_assert_uint_eq(v[1], 65536);
	ck_assert_uint_eq(v[2], 1048576);
	ck_assert_int_eq(bench_parse_list("1,2,64", false, v, 4, &n), 0);
	ck_assert_uint_eq(n, 3);
	ck_assert_uint_eq(v[2], 64);
	ck_assert_int_eq(bench_parse_list("7", false, v, 4, &n), 0);
	ck_assert_uint_eq(n, 1);
	ck_assert_int_eq(bench_parse_list("1,2,3,4,5", false, v, 4, &n), -E2BIG);
	for (size_t i = 0; i < sizeof(bad_sizes) / sizeof(bad_sizes[0]); i++)
		ck_assert_msg(bench_parse_list(bad_sizes[i], true, v, 4, &n) == -EINVAL, "'%s'",
			      bad_sizes[i]);
	for (size_t i = 0; i < sizeof(bad_numbers) / sizeof(bad_numbers[0]); i++)
		ck_assert_msg(bench_parse_list(bad_numbers[i], false, v, 4, &n) == -EINVAL, "'%s'",
			      bad_numbers[i]);
}
END_TEST

START_TEST(json_strings)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	ck_assert_ptr_nonnull(f);
	bench_json_string(f, "a\"b\\c\nd\te");
	fclose(f);
	ck_assert_str_eq(text, "\"a\\\"b\\\\c\\u000ad\\u0009e\"");
	free(text);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("bench-stats");
	TCase *t = tcase_create("histogram");

	tcase_add_test(t, exact_small_values);
	tcase_add_test(t, nearest_rank_edges);
	tcase_add_test(t, bimodal_large_values);
	tcase_add_test(t, against_sorted_reference);
	tcase_add_test(t, buckets_tile_and_bound_error);
	tcase_add_test(t, merge_is_union);
	tcase_add_test(t, empty_and_json);
	suite_add_tcase(s, t);
	t = tcase_create("random");
	tcase_add_test(t, permutation_hits_each_once);
	tcase_add_test(t, permutation_depends_on_seed);
	tcase_add_test(t, rng_is_fixed);
	suite_add_tcase(s, t);
	t = tcase_create("arguments");
	tcase_add_test(t, parse_seconds);
	tcase_add_test(t, parse_lists);
	tcase_add_test(t, json_strings);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
