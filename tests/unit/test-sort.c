/* SPDX-License-Identifier: MIT */
/*
 * test-sort.c - the Check suite for daemon/base/sort.c: bd_sort_by_key
 * leaves every index exactly once and the keys they point at in order,
 * for empty, tiny, insertion-sized and quicksort-sized arrays; keys in
 * order, reversed, all equal, few distinct values and random 64-bit ones
 * (extremes included).
 */
#include <stdint.h>
#include <stdlib.h>

#include <check.h>

#include "sort.h"

#define MAX 5000u

static uint64_t keys[MAX];
static uint32_t o[MAX];

/* A splitmix64 step: the same keys on every machine. */
static uint64_t next(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Sort o = 0..n-1 by keys, then check order and that o is a permutation. */
static void sort_and_check(uint32_t n)
{
	static unsigned char seen[MAX];

	for (uint32_t i = 0; i < n; i++)
		o[i] = i;
	bd_sort_by_key(o, keys, n);
	for (uint32_t i = 0; i < n; i++)
		seen[i] = 0;
	for (uint32_t i = 0; i < n; i++) {
		ck_assert_uint_lt(o[i], n);
		ck_assert_msg(!seen[o[i]], "index %u twice (n %u)", o[i], n);
		seen[o[i]] = 1;
		if (i)
			ck_assert_msg(keys[o[i - 1]] <= keys[o[i]], "out of order at %u of %u", i, n);
	}
}

static const uint32_t sizes[] = { 0, 1, 2, 3, 16, 17, 18, 100, 257, 4096, MAX };
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

START_TEST(test_shapes)
{
	uint32_t n = sizes[_i];
	uint64_t x = 42 + n;

	for (uint32_t i = 0; i < n; i++)
		keys[i] = i;
	sort_and_check(n);
	for (uint32_t i = 0; i < n; i++)
		ck_assert_uint_eq(o[i], i);         /* in order: untouched */
	for (uint32_t i = 0; i < n; i++)
		keys[i] = n - i;
	sort_and_check(n);
	for (uint32_t i = 0; i < n; i++)
		ck_assert_uint_eq(o[i], n - 1 - i); /* distinct keys: one answer */
	for (uint32_t i = 0; i < n; i++)
		keys[i] = 7;
	sort_and_check(n);
	for (uint32_t i = 0; i < n; i++)
		keys[i] = next(&x) % 3;
	sort_and_check(n);
	for (uint32_t i = 0; i < n; i++)
		keys[i] = i % 4 == 0 ? UINT64_MAX : i % 4 == 1 ? 0 : next(&x);
	sort_and_check(n);
}
END_TEST

/* Random keys checked against qsort's order of the keys themselves. */
static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

START_TEST(test_random_against_qsort)
{
	static uint64_t want[MAX];
	uint64_t x = 7;

	for (int round = 0; round < 20; round++) {
		uint32_t n = (uint32_t)(next(&x) % MAX);

		for (uint32_t i = 0; i < n; i++)
			want[i] = keys[i] = next(&x) % (round % 2 ? 50 : UINT64_MAX);
		sort_and_check(n);
		qsort(want, n, sizeof(*want), cmp_u64);
		for (uint32_t i = 0; i < n; i++)
			ck_assert_uint_eq(keys[o[i]], want[i]);
	}
}
END_TEST

static Suite *sort_suite(void)
{
	Suite *s = suite_create("sort");
	TCase *tc = tcase_create("sort");

	tcase_add_loop_test(tc, test_shapes, 0, NSIZES);
	tcase_add_test(tc, test_random_against_qsort);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(sort_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
