/* SPDX-License-Identifier: MIT */
/*
 * test-mixture.c - a mixture's arithmetic (lib/proto/mixture.h): weights
 * as counts over the smallest exact period, the period's slots, and the
 * uses of each source in a prefix of the stream, against brute force.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixture.h"

static void counts_are(const double *w, uint32_t n, const uint32_t *want, uint32_t period)
{
	uint32_t got[BP_MIX_SOURCES_MAX], p;

	ck_assert_int_eq(bp_mix_counts(w, n, got, &p), 0);
	ck_assert_uint_eq(p, period);
	for (uint32_t i = 0; i < n; i++)
		ck_assert_uint_eq(got[i], want[i]);
}

START_TEST(test_counts)
{
	counts_are((double[]){ 0.7, 0.2, 0.1 }, 3, (uint32_t[]){ 7, 2, 1 }, 10);
	counts_are((double[]){ 7, 2, 1 }, 3, (uint32_t[]){ 7, 2, 1 }, 10);
	counts_are((double[]){ 1.0 / 3, 1.0 / 3, 1.0 / 3 }, 3, (uint32_t[]){ 1, 1, 1 }, 3);
	counts_are((double[]){ 0.5, 0.25, 0.125, 0.125 }, 4, (uint32_t[]){ 4, 2, 1, 1 }, 8);
	counts_are((double[]){ 3, 3 }, 2, (uint32_t[]){ 1, 1 }, 2);
	/* No exact period: the largest, every source at least one slot. */
	counts_are((double[]){ 1, 1e-6 }, 2, (uint32_t[]){ 65535, 1 }, BP_MIX_PERIOD_MAX);
	{
		uint32_t got[2], p, sum;

		ck_assert_int_eq(bp_mix_counts((double[]){ M_PI, 1 }, 2, got, &p), 0);
		sum = got[0] + got[1];
		ck_assert_uint_eq(sum, p);
		ck_assert(fabs((double)got[0] / p - M_PI / (M_PI + 1)) < 1.0 / p);
	}
}
END_TEST

START_TEST(test_refusals)
{
	static const double bad[][2] = { { 0.5, 0 }, { -1, 1 }, { NAN, 1 }, { INFINITY, 1 } };
	uint32_t c[2], p;
	char why[200];

	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		ck_assert_int_eq(bp_mix_counts(bad[k], 2, c, &p), -EINVAL);
		ck_assert_int_eq(bp_mix_check(bad[k], 2, why, sizeof(why)), 1);
		ck_assert_ptr_nonnull(strstr(why, "finite number above 0"));
	}
	ck_assert_int_eq(bp_mix_check(bad[0], 1, why, sizeof(why)), 1);
	ck_assert_ptr_nonnull(strstr(why, "2 .. 64 sources"));
}
END_TEST

/*
 * Every window of `period` consecutive positions, wherever it starts,
 * holds exactly the counts; each source's ranks run 0 .. count-1 in
 * order; bp_mix_used counts what a walk counts, at every prefix.
 */
START_TEST(test_slots)
{
	static const uint32_t cases[][4] = { { 7, 2, 1, 0 }, { 1, 1, 1, 0 }, { 5, 3, 0, 0 },
					     { 13, 1, 1, 1 } };

	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		const uint32_t *c = cases[k];
		uint32_t n = c[3] ? 4 : c[2] ? 3 : 2, period = 0, next[4] = { 0 };
		uint64_t used[4] = { 0 };
		uint8_t slot[64];
		uint32_t rank[64];

		for (uint32_t i = 0; i < n; i++)
			period += c[i];
		bp_mix_slots(c, n, period, slot, rank);
		for (uint32_t r = 0; r < period; r++) {
			ck_assert_uint_lt(slot[r], n);
			ck_assert_uint_eq(rank[r], next[slot[r]]++);
		}
		for (uint32_t start = 0; start < period; start++) {
			uint32_t seen[4] = { 0 };

			for (uint32_t j = 0; j < period; j++)
				seen[slot[(start + j) % period]]++;
			for (uint32_t i = 0; i < n; i++)
				ck_assert_uint_eq(seen[i], c[i]);
		}
		for (uint64_t pos = 0; pos <= 5 * period; pos++) {
			for (uint32_t i = 0; i < n; i++)
				ck_assert_uint_eq(bp_mix_used(c, slot, rank, period, i, pos), used[i]);
			used[slot[pos % period]]++;
		}
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("mixture");
	TCase *tc = tcase_create("mixture");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_counts);
	tcase_add_test(tc, test_refusals);
	tcase_add_test(tc, test_slots);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
