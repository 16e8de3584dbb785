/* SPDX-License-Identifier: MIT */
/*
 * test-wait-acct.c - the daemon's clamp of a client's own wait counters
 * (daemon/session/wait_acct.c): an honest client's counters go through as they
 * are; a hostile one's never exceed what could have happened.
 */
#include <stdint.h>
#include <string.h>

#include <check.h>

#include "wait_acct.h"

static bp_ring_ctrl ctrl;

static uint64_t hist_sum(const bd_wait_acct *a)
{
	uint64_t s = 0;

	for (unsigned i = 0; i < BP_RING_WAIT_BUCKETS; i++)
		s += a->wait_hist[i];
	return s;
}

START_TEST(test_honest)
{
	bd_wait_acct a = { 0 };

	memset(&ctrl, 0, sizeof(ctrl));
	ctrl.consumed = 3;
	ctrl.waits = 3;
	ctrl.wait_ns = 5000;
	ctrl.wait_hist[0] = 2;
	ctrl.wait_hist[2] = 1;
	bd_wait_acct_fold(&a, &ctrl, 4, 1000000);
	ck_assert_uint_eq(a.consumed, 3);
	ck_assert_uint_eq(a.waits, 3);
	ck_assert_uint_eq(a.wait_ns, 5000);
	ck_assert_uint_eq(a.wait_hist[0], 2);
	ck_assert_uint_eq(a.wait_hist[2], 1);
	/* A bucket ahead of its wait (seen between the client's two stores) comes in later. */
	ctrl.wait_hist[1] = 1;
	bd_wait_acct_fold(&a, &ctrl, 4, 1000000);
	ck_assert_uint_eq(a.wait_hist[1], 0);
	ctrl.waits = 4;
	bd_wait_acct_fold(&a, &ctrl, 4, 1000000);
	ck_assert_uint_eq(a.waits, 4);
	ck_assert_uint_eq(a.wait_hist[1], 1);
}
END_TEST

START_TEST(test_hostile)
{
	bd_wait_acct a = { 0 };

	memset(&ctrl, 0, sizeof(ctrl));
	ctrl.consumed = UINT64_MAX;
	ctrl.waits = UINT64_MAX;
	ctrl.wait_ns = UINT64_MAX;
	for (unsigned i = 0; i < BP_RING_WAIT_BUCKETS; i++)
		ctrl.wait_hist[i] = UINT64_MAX / 2;
	bd_wait_acct_fold(&a, &ctrl, 7, 123456);
	ck_assert_uint_eq(a.consumed, 7);
	ck_assert_uint_eq(a.waits, 7);
	ck_assert_uint_eq(a.wait_ns, 123456);
	ck_assert_uint_eq(hist_sum(&a), 7);
	/* Going down changes nothing; going up again is bounded again. */
	memset(&ctrl, 0, sizeof(ctrl));
	bd_wait_acct_fold(&a, &ctrl, 9, 200000);
	ck_assert_uint_eq(a.waits, 7);
	ck_assert_uint_eq(a.wait_ns, 123456);
	ck_assert_uint_eq(hist_sum(&a), 7);
	ctrl.waits = 100;
	ctrl.wait_hist[5] = 100;
	bd_wait_acct_fold(&a, &ctrl, 9, 200000);
	ck_assert_uint_eq(a.waits, 9);
	ck_assert_uint_eq(hist_sum(&a), 9);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("wait_acct");
	TCase *tc = tcase_create("fold");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_honest);
	tcase_add_test(tc, test_hostile);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
