/* SPDX-License-Identifier: MIT */
/*
 * test-region.c - the Check suite for daemon/base/region.c, the huge-page
 * region the block cache carves its entries from.
 *
 * The allocator promises blocks that never overlap, lie inside the
 * region, keep their bytes until freed and cost their size rounded to at
 * most 1/16 more; freed neighbours merge, so after any sequence of
 * allocations and frees the whole region is one block again; a request
 * that no free block holds gets NULL, not a block too small. The prefault
 * thread faults pages in ahead of the highest block, stops with the
 * region, and says how it prefaults; the pages are huge where the kernel
 * gives them (smaps), never a silent failure.
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "region.h"

#define MiB (UINT64_C(1) << 20)

static bd_region *region_ok(uint64_t size, uint64_t ahead)
{
	bd_region *r = NULL;

	ck_assert_int_eq(bd_region_new(size, BD_PAGES_HUGE, ahead, &r), 0);
	ck_assert_ptr_nonnull(r);
	return r;
}

static bd_region_stats stats(bd_region *r)
{
	bd_region_stats st;

	bd_region_get_stats(r, &st);
	return st;
}

/* The whole region, one block: what a region with nothing in use must give. */
static void expect_whole(bd_region *r)
{
	bd_region_stats st = stats(r);
	void *p = bd_region_alloc(r, st.size - BD_REGION_HEADER);

	ck_assert_uint_eq(st.used, 0);
	ck_assert_uint_eq(st.blocks, 0);
	ck_assert_msg(p, "freed blocks merged back into one of %" PRIu64 " bytes", st.size);
	bd_region_release(r, p);
}

START_TEST(test_sizes)
{
	bd_region *r = region_ok(3 * MiB, 0);
	bd_region_stats st = stats(r);

	/* Whole huge pages. */
	ck_assert_uint_eq(st.size, 4 * MiB);
	ck_assert_ptr_null(bd_region_alloc(r, 4 * MiB));
	ck_assert_ptr_null(bd_region_alloc(r, UINT64_MAX));
	for (uint64_t size = 0; size < 300000; size = size * 3 / 2 + 1) {
		uint8_t *p = bd_region_alloc(r, size);
		uint64_t cost;

		ck_assert_ptr_nonnull(p);
		ck_assert_uint_eq((uintptr_t)p % 16, 0);
		cost = bd_region_cost(p);
		ck_assert_uint_ge(cost, size + BD_REGION_HEADER);
		/* Rounded to its class: at most 1/16 more, and 32 bytes at least. */
		ck_assert_uint_le(cost, size + BD_REGION_HEADER + (size + BD_REGION_HEADER) / 16 + 32);
		ck_assert_uint_eq(stats(r).used, cost);
		memset(p, 0xa5, size);
		bd_region_release(r, p);
	}
	expect_whole(r);
	bd_region_free(r);
}
END_TEST

/* Each ck_assert costs a write (Check's mark): hot loops count their failures instead. */
#define EXPECT(cond) (bad += !(cond))

/* Random allocations and frees: no overlap, bytes kept, used counted, all merged at the end. */
START_TEST(test_random)
{
	enum { N = 2000 };
	bd_region *r = region_ok(8 * MiB, 0);
	uint8_t *p[N] = { 0 };
	uint64_t size[N] = { 0 }, used = 0, bad = 0;
	uint32_t seed = 12345;

	for (int step = 0; step < 40000; step++) {
		int i;

		seed = seed * 1103515245u + 12345u;
		i = (int)((seed >> 8) % N);
		if (p[i]) {
			for (uint64_t k = 0; k < size[i]; k += 97)
				EXPECT(p[i][k] == (uint8_t)(i + k));
			used -= bd_region_cost(p[i]);
			bd_region_release(r, p[i]);
			p[i] = NULL;
			continue;
		}
		seed = seed * 1103515245u + 12345u;
		/* Mostly small, some large: 1 B .. 256 KiB. */
		size[i] = (seed >> 4) % 4 == 0 ? (seed >> 8) % (256 << 10) + 1 : (seed >> 8) % 3000 + 1;
		p[i] = bd_region_alloc(r, size[i]);
		if (!p[i])
			continue;
		/* Every 97th byte and the last: enough to see a neighbour's writes. */
		for (uint64_t k = 0; k < size[i]; k += 97)
			p[i][k] = (uint8_t)(i + k);
		used += bd_region_cost(p[i]);
		EXPECT(stats(r).used == used);
	}
	ck_assert_uint_eq(bad, 0);
	/* No two blocks overlap. */
	for (int i = 0; i < N; i++)
		for (int j = i + 1; p[i] && j < N; j++)
			if (p[j])
				EXPECT(p[i] + bd_region_cost(p[i]) - BD_REGION_HEADER <= p[j] -
				       BD_REGION_HEADER || p[j] + bd_region_cost(p[j]) -
				       BD_REGION_HEADER <= p[i] - BD_REGION_HEADER);
	ck_assert_uint_eq(bad, 0);
	for (int i = 0; i < N; i++) {
		if (!p[i])
			continue;
		for (uint64_t k = 0; k < size[i]; k += 97)
			EXPECT(p[i][k] == (uint8_t)(i + k));
		bd_region_release(r, p[i]);
	}
	ck_assert_uint_eq(bad, 0);
	expect_whole(r);
	bd_region_free(r);
}
END_TEST

/* Full, then a hole: a request the hole holds fits it; a larger one gets NULL. */
START_TEST(test_full_and_holes)
{
	bd_region *r = region_ok(2 * MiB, 0);
	uint8_t *p[64];
	int n = 0;

	while (n < 64 && (p[n] = bd_region_alloc(r, 64 << 10)))
		n++;
	ck_assert_int_gt(n, 20);
	ck_assert_int_lt(n, 32);
	ck_assert_ptr_null(bd_region_alloc(r, 64 << 10));
	/*
	 * Two neighbours freed merge: more than one fits (a request takes a
	 * class that surely holds it: 100 KiB, not all of 128), not thrice one.
	 */
	bd_region_release(r, p[5]);
	bd_region_release(r, p[6]);
	ck_assert_ptr_null(bd_region_alloc(r, 192 << 10));
	p[5] = bd_region_alloc(r, 100 << 10);
	ck_assert_ptr_nonnull(p[5]);
	p[6] = NULL;
	for (int i = 0; i < n; i++)
		bd_region_release(r, p[i]);
	expect_whole(r);
	bd_region_free(r);
}
END_TEST

/* The prefault thread populates ahead of the highest block, and stops with the region. */
START_TEST(test_prefault)
{
	bd_region *r = region_ok(64 * MiB, 8 * MiB);
	bd_region_stats st = stats(r);
	struct timespec pause = { 0, 1000000 };
	void *p;

	ck_assert_msg(!strcmp(st.prefault, "populate") || !strcmp(st.prefault, "touch"),
		      "prefault %s", st.prefault);
	/* Nothing in use: the probe's huge page, no more. */
	nanosleep(&(struct timespec){ 0, 50000000 }, NULL);
	ck_assert_uint_le(stats(r).populated, 2 * MiB);
	p = bd_region_alloc(r, 20 * MiB);
	ck_assert_ptr_nonnull(p);
	ck_assert_uint_ge(stats(r).high, 20 * MiB);
	for (int i = 0; i < 5000 && stats(r).populated < 30 * MiB; i++)
		nanosleep(&pause, NULL);
	st = stats(r);
	ck_assert_uint_ge(st.populated, 28 * MiB);
	ck_assert_uint_le(st.populated, 30 * MiB);
	/* Huge pages where the kernel gives them: what it gave is named, whatever it is. */
	ck_assert_msg(st.pages == BD_PAGES_THP || st.pages == BD_PAGES_HUGETLB ||
		      st.pages == BD_PAGES_NORMAL || st.pages == BD_PAGES_MIXED,
		      "pages %s", bd_pages_name(st.pages));
	memset(p, 1, 20 * MiB);
	bd_region_release(r, p);
	bd_region_free(r);
}
END_TEST

START_TEST(test_refusals)
{
	bd_region *r = NULL;

	ck_assert_int_eq(bd_region_new(0, BD_PAGES_HUGE, 0, &r), -EINVAL);
	ck_assert_int_eq(bd_region_new(UINT64_MAX, BD_PAGES_HUGE, 0, &r), -EINVAL);
	ck_assert_ptr_null(r);
	r = region_ok(1, 0);
	ck_assert_str_eq(stats(r).prefault, "off");
	bd_region_release(r, NULL);
	bd_region_free(r);
	bd_region_free(NULL);
}
END_TEST

static Suite *region_suite(void)
{
	Suite *s = suite_create("region");
	TCase *tc = tcase_create("alloc");

	tcase_add_test(tc, test_sizes);
	tcase_add_test(tc, test_random);
	tcase_add_test(tc, test_full_and_holes);
	tcase_add_test(tc, test_refusals);
	suite_add_tcase(s, tc);
	tc = tcase_create("prefault");
	tcase_add_test(tc, test_prefault);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(region_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
