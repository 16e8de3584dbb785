/* SPDX-License-Identifier: MIT */
/*
 * test-trainer-waits.c - the Check suite for the wait statistics that
 * `batchctl consume` prints (tools/common/trainer.c: trainer_waits).
 *
 * Why: a consume run takes tens of batches, and the first one waits on a
 * cold read while the rest take microseconds. The estimator it replaced
 * (sorted[floor((n - 1) * 0.99)]) read the second-slowest wait as p99 at
 * such counts, a p99 a thousand times below the mean. These tests pin the
 * nearest-rank rule on that long tail, on inputs whose answer is known
 * exactly, and on the edges (no waits, one wait, p0 and p100).
 */
#include <stdlib.h>

#include <check.h>

#include "trainer.h"

/* n waits: tail of them at slow seconds (the first ones taken), the rest at fast. */
static void fill(trainer_waits *w, size_t n, size_t tail, double slow, double fast)
{
	for (size_t i = 0; i < n; i++)
		ck_assert_int_eq(trainer_waits_add(w, i < tail ? slow : fast), 0);
}

/* The estimator consume had: index floor((n - 1) * 0.99) of the sorted waits. */
static double old_p99(const double *sorted, size_t n)
{
	return sorted[(size_t)((double)(n - 1) * 0.99)];
}

START_TEST(long_tail_at_small_counts)
{
	trainer_waits w = { 0 };
	trainer_wait_stats st;

	/* Two epochs of 22 batches: one read cold (100 ms), 43 at 2 us. */
	fill(&w, 44, 1, 0.1, 2e-6);
	trainer_waits_stats(&w, &st);
	ck_assert_uint_eq(st.n, 44);
	ck_assert_double_eq_tol(st.mean, (0.1 + 43 * 2e-6) / 44, 1e-12);
	/* What the old one read: 2 us, under a mean of 2.3 ms. */
	ck_assert_double_eq(old_p99(w.v, w.n), 2e-6);
	ck_assert(old_p99(w.v, w.n) < st.mean);
	/* Nearest rank: ceil(0.99 * 44) = 44, the slowest wait. */
	ck_assert_double_eq(st.p99, 0.1);
	ck_assert_double_eq(st.max, 0.1);
	ck_assert(st.p99 >= st.mean);
	ck_assert_double_eq(st.p50, 2e-6);
	trainer_waits_free(&w);
}
END_TEST

START_TEST(below_a_hundred_p99_is_the_max)
{
	for (size_t n = 1; n < 100; n++) {
		trainer_waits w = { 0 };
		trainer_wait_stats st;

		fill(&w, n, 1, 0.5, 1e-6);
		trainer_waits_stats(&w, &st);
		ck_assert_msg(st.p99 == 0.5, "n %zu: p99 %g, not the max 0.5", n, st.p99);
		ck_assert(st.p99 >= st.mean);
		trainer_waits_free(&w);
	}
	/* At 100, 99 of the waits are at or below the second-slowest. */
	{
		trainer_waits w = { 0 };
		trainer_wait_stats st;

		fill(&w, 100, 1, 0.5, 1e-6);
		trainer_waits_stats(&w, &st);
		ck_assert_double_eq(st.p99, 1e-6);
		ck_assert_double_eq(st.max, 0.5);
		trainer_waits_free(&w);
	}
}
END_TEST

START_TEST(known_ranks)
{
	trainer_waits w = { 0 };
	trainer_wait_stats st;

	/* 1..1000 ms in reverse: the p-th percentile is p * 10 ms exactly. */
	for (int i = 1000; i >= 1; i--)
		ck_assert_int_eq(trainer_waits_add(&w, i * 1e-3), 0);
	trainer_waits_stats(&w, &st);
	ck_assert_uint_eq(st.n, 1000);
	ck_assert_double_eq_tol(st.p50, 0.5, 1e-12);
	ck_assert_double_eq_tol(st.p99, 0.99, 1e-12);
	ck_assert_double_eq_tol(st.max, 1.0, 1e-12);
	ck_assert_double_eq_tol(st.mean, 0.5005, 1e-9);
	ck_assert_double_eq_tol(trainer_percentile(w.v, w.n, 99.9), 0.999, 1e-12);
	ck_assert_double_eq_tol(trainer_percentile(w.v, w.n, 0), 0.001, 1e-12);
	ck_assert_double_eq_tol(trainer_percentile(w.v, w.n, 0.05), 0.001, 1e-12);
	ck_assert_double_eq_tol(trainer_percentile(w.v, w.n, 100), 1.0, 1e-12);
	trainer_waits_free(&w);
}
END_TEST

START_TEST(thin_tail_above_a_hundred)
{
	trainer_waits w = { 0 };
	trainer_wait_stats st;

	/* 1000 waits, 5 of them 1 s: thinner than 1 %, so p99 is the fast
	 * mode and below the mean; max says where the mean comes from. */
	fill(&w, 1000, 5, 1.0, 1e-5);
	trainer_waits_stats(&w, &st);
	ck_assert_double_eq(st.p99, 1e-5);
	ck_assert(st.p99 < st.mean);
	ck_assert_double_eq(st.max, 1.0);
	ck_assert_double_eq(trainer_percentile(w.v, w.n, 99.5), 1e-5);
	ck_assert_double_eq(trainer_percentile(w.v, w.n, 99.6), 1.0);
	trainer_waits_free(&w);
}
END_TEST

START_TEST(empty_and_free)
{
	trainer_waits w = { 0 };
	trainer_wait_stats st;

	trainer_waits_stats(&w, &st);
	ck_assert_uint_eq(st.n, 0);
	ck_assert_double_eq(st.mean, 0);
	ck_assert_double_eq(st.p50, 0);
	ck_assert_double_eq(st.p99, 0);
	ck_assert_double_eq(st.max, 0);
	ck_assert_double_eq(trainer_percentile(NULL, 0, 99), 0);
	ck_assert_int_eq(trainer_waits_add(&w, 0.25), 0);
	trainer_waits_stats(&w, &st);
	ck_assert_double_eq(st.p50, 0.25);
	ck_assert_double_eq(st.p99, 0.25);
	ck_assert_double_eq(st.max, 0.25);
	trainer_waits_free(&w);
	ck_assert_ptr_null(w.v);
	ck_assert_uint_eq(w.n, 0);
	ck_assert_double_eq(w.sum, 0);
	trainer_waits_free(NULL);
}
END_TEST

START_TEST(grows_past_its_first_block)
{
	trainer_waits w = { 0 };
	trainer_wait_stats st;

	for (int i = 0; i < 5000; i++)
		ck_assert_int_eq(trainer_waits_add(&w, (double)(i % 10)), 0);
	trainer_waits_stats(&w, &st);
	ck_assert_uint_eq(st.n, 5000);
	ck_assert_double_eq_tol(w.sum, 500 * 45.0, 1e-9);
	ck_assert_double_eq(st.p50, 4);
	ck_assert_double_eq(st.p99, 9);
	for (size_t i = 1; i < w.n; i++)
		ck_assert(w.v[i - 1] <= w.v[i]);
	trainer_waits_free(&w);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("trainer-waits");
	TCase *t = tcase_create("percentiles");

	tcase_add_test(t, long_tail_at_small_counts);
	tcase_add_test(t, below_a_hundred_p99_is_the_max);
	tcase_add_test(t, known_ranks);
	tcase_add_test(t, thin_tail_above_a_hundred);
	tcase_add_test(t, empty_and_free);
	tcase_add_test(t, grows_past_its_first_block);
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
