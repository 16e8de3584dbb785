/* SPDX-License-Identifier: MIT */
/*
 * test-tune.c - the Check suite for daemon/pipeline/tune.c, how many decode workers
 * run: one more when clients waited while decoding was the bottleneck
 * (tasks queued, or the active workers busy 85% of the interval), one
 * fewer only after BD_TUNE_CALM_STEPS calm intervals and only when one
 * fewer would have been at most 70% busy, never outside 1 .. max; waits
 * that decoding did not cause change nothing upward; totals that fall
 * (sessions ended) count as no change.
 */
#include <stdint.h>

#include <check.h>

#include "tune.h"

#define MS 1000000ull
#define IV (BD_TUNE_INTERVAL_MS * MS)

static bd_tune T;
static bd_tune_sample S;

/* One interval in which workers were busy `busy` hundredths of it and clients waited `wait` ms. */
static unsigned step(unsigned busy, uint64_t wait_ms, uint64_t queued)
{
	S.interval_ns = IV;
	S.busy_ns += IV * busy / 100;
	S.wait_ns += wait_ms * MS;
	S.queued = queued;
	return bd_tune_step(&T, &S);
}

static void setup(void)
{
	bd_tune_init(&T, 4);
	S = (bd_tune_sample){ 0 };
}

START_TEST(test_starts_full)
{
	ck_assert_uint_eq(T.active, 4);
	bd_tune_init(&T, 0);
	ck_assert_uint_eq(T.active, 1);
	ck_assert_uint_eq(T.max, 1);
}
END_TEST

/* Idle: one fewer every BD_TUNE_CALM_STEPS intervals, down to one. */
START_TEST(test_idle_shrinks_to_one)
{
	unsigned want = 4;

	for (unsigned i = 1; i <= 4 * BD_TUNE_CALM_STEPS; i++) {
		if (i % BD_TUNE_CALM_STEPS == 0 && want > 1)
			want--;
		ck_assert_uint_eq(step(0, 0, 0), want);
	}
	ck_assert_uint_eq(T.active, 1);
	ck_assert_uint_eq(T.downs, 3);
	ck_assert_uint_eq(T.ups, 0);
}
END_TEST

/* Calm but busy: 2.5 workers' worth of work keeps 4 (3 would be 83% busy), 2 workers' worth drops to 3. */
START_TEST(test_keeps_what_work_needs)
{
	for (unsigned i = 0; i < 3 * BD_TUNE_CALM_STEPS; i++)
		ck_assert_uint_eq(step(250, 0, 0), 4);
	for (unsigned i = 1; i < BD_TUNE_CALM_STEPS; i++)
		ck_assert_uint_eq(step(200, 0, 0), 4);
	ck_assert_uint_eq(step(200, 0, 0), 3);
}
END_TEST

/* Waits while decoding is the bottleneck: one more per interval, up to max, and calm restarts. */
START_TEST(test_decode_bound_grows)
{
	for (unsigned i = 0; i < 3 * BD_TUNE_CALM_STEPS; i++)
		step(0, 0, 0);
	ck_assert_uint_eq(T.active, 1);
	/* Busy all the time and clients waited 10 ms: 2; tasks queued and waits: 3, 4, 4. */
	ck_assert_uint_eq(step(100, 10, 0), 2);
	ck_assert_uint_eq(step(50, 10, 7), 3);
	ck_assert_uint_eq(step(50, 10, 7), 4);
	ck_assert_uint_eq(step(400, 10, 7), 4);
	ck_assert_uint_eq(T.ups, 3);
	/* Calm again: the count holds for BD_TUNE_CALM_STEPS - 1 intervals first. */
	for (unsigned i = 1; i < BD_TUNE_CALM_STEPS; i++)
		ck_assert_uint_eq(step(0, 0, 0), 4);
	ck_assert_uint_eq(step(0, 0, 0), 3);
}
END_TEST

/* Waits with decoders idle and nothing queued (the disk): no more workers, and they still shrink. */
START_TEST(test_other_waits_do_not_grow)
{
	for (unsigned i = 1; i < BD_TUNE_CALM_STEPS; i++)
		ck_assert_uint_eq(step(20, 50, 0), 4);
	ck_assert_uint_eq(step(20, 50, 0), 3);
	/* Under 1% of the interval waited, with tasks queued: not a stall. */
	for (unsigned i = 1; i < BD_TUNE_CALM_STEPS; i++)
		ck_assert_uint_eq(step(0, 1, 5), 3);
	ck_assert_uint_eq(step(0, 1, 5), 2);
}
END_TEST

/* Totals that fall (a session ended with its waits) are no change, and the next rise counts from there. */
START_TEST(test_totals_falling)
{
	/* Down to one first, so that a misread fall could show as a step up. */
	for (unsigned i = 0; i < 3 * BD_TUNE_CALM_STEPS; i++)
		step(0, 0, 0);
	ck_assert_uint_eq(step(0, 1000, 0), 1);
	S.wait_ns = 0;
	S.busy_ns = 0;
	/* Busy and tasks queued, but the fallen wait total is no wait: still one. */
	ck_assert_uint_eq(step(100, 0, 3), 1);
	/* From the fallen totals: 10 ms waited, decode-bound: one more. */
	ck_assert_uint_eq(step(400, 10, 3), 2);
	ck_assert_uint_eq(T.ups, 1);
}
END_TEST

/* Held (autotune off): all active, and a later step counts from the held totals. */
START_TEST(test_hold)
{
	for (unsigned i = 0; i < 3 * BD_TUNE_CALM_STEPS; i++)
		step(0, 0, 0);
	ck_assert_uint_eq(T.active, 1);
	S.busy_ns += 100 * IV;
	S.wait_ns += 100 * IV;
	ck_assert_uint_eq(bd_tune_hold(&T, &S), 4);
	/*
	 * The 100 intervals of busy time before the hold do not count: calm from
	 * the first step on, so one fewer after BD_TUNE_CALM_STEPS, not one later.
	 */
	for (unsigned i = 1; i < BD_TUNE_CALM_STEPS; i++)
		ck_assert_uint_eq(step(0, 0, 0), 4);
	ck_assert_uint_eq(step(0, 0, 0), 3);
	ck_assert_uint_eq(T.ups, 0);
}
END_TEST

static Suite *tune_suite(void)
{
	Suite *s = suite_create("tune");
	TCase *tc = tcase_create("tune");

	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, test_starts_full);
	tcase_add_test(tc, test_idle_shrinks_to_one);
	tcase_add_test(tc, test_keeps_what_work_needs);
	tcase_add_test(tc, test_decode_bound_grows);
	tcase_add_test(tc, test_other_waits_do_not_grow);
	tcase_add_test(tc, test_totals_falling);
	tcase_add_test(tc, test_hold);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(tune_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
