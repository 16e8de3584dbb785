/* SPDX-License-Identifier: MIT */
/*
 * test-arena.c - the Check suite for daemon/session/arena.c, the byte ring a
 * session carves its batch records from: records go end to end, a record
 * that does not fit at the end wraps to offset 0 once the oldest records
 * have gone, records are freed oldest first, and a record that fits
 * nowhere is refused without changing anything.
 *
 * A wrong offset here would hand the client a record overlapping one it
 * still reads, so every TCase asserts exact offsets.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include <check.h>

#include "arena.h"

/* Allocate and assert where it went. */
static void expect_at(bd_arena *a, uint64_t size, uint64_t want)
{
	uint64_t off = UINT64_MAX;

	ck_assert_msg(bd_arena_alloc(a, size, &off), "no room for %llu bytes",
		      (unsigned long long)size);
	ck_assert_uint_eq(off, want);
}

static void expect_full(bd_arena *a, uint64_t size)
{
	uint64_t off = 12345;
	bd_arena before = *a;

	ck_assert(!bd_arena_alloc(a, size, &off));
	ck_assert_uint_eq(off, 12345);
	/* A refusal changes nothing. */
	ck_assert_uint_eq(a->head, before.head);
	ck_assert_uint_eq(a->tail, before.tail);
	ck_assert_uint_eq(a->live, before.live);
	ck_assert(a->wrapped == before.wrapped);
}

/* 1000 bytes holding three records of 300: 100 left at the end. */
static void three_records(bd_arena *a)
{
	bd_arena_init(a, 1000);
	expect_at(a, 300, 0);
	expect_at(a, 300, 300);
	expect_at(a, 300, 600);
}

START_TEST(test_end_to_end)
{
	bd_arena a;

	bd_arena_init(&a, 1000);
	expect_at(&a, 100, 0);
	expect_at(&a, 250, 100);
	expect_at(&a, 650, 350);
	ck_assert_uint_eq(a.live, 3);
	ck_assert_uint_eq(a.head, 1000);
}
END_TEST

START_TEST(test_no_room)
{
	bd_arena a;

	bd_arena_init(&a, 1000);
	expect_full(&a, 1001);
	expect_at(&a, 1000, 0);
	expect_full(&a, 1);

	bd_arena_init(&a, 1000);
	expect_at(&a, 400, 0);
	expect_at(&a, 400, 400);
	/* 200 left at the end, and the oldest record still at 0: nothing wraps. */
	expect_full(&a, 201);
	expect_at(&a, 200, 800);
}
END_TEST

START_TEST(test_wrap_around)
{
	bd_arena a;

	three_records(&a);
	/* 100 left at the end; the first record gone makes room at the start. */
	expect_full(&a, 200);
	bd_arena_free(&a, 300);
	expect_full(&a, 301);
	expect_at(&a, 200, 0);
	ck_assert(a.wrapped);
	/* Wrapped: the room is between the newest record and the oldest (300). */
	expect_at(&a, 100, 200);
	expect_full(&a, 1);
}
END_TEST

START_TEST(test_free_in_order)
{
	bd_arena a;

	three_records(&a);
	bd_arena_free(&a, 300);
	expect_at(&a, 200, 0);        /* wraps: the gap is [900, 1000) */
	bd_arena_free(&a, 300);       /* [300, 600) */
	ck_assert_uint_eq(a.tail, 600);
	expect_at(&a, 400, 200);      /* up to the oldest, at 600 */
	expect_full(&a, 1);
	bd_arena_free(&a, 300);       /* [600, 900): the last before the gap */
	ck_assert(!a.wrapped);
	ck_assert_uint_eq(a.tail, 0);
	/* Unwrapped again, live [0, 600): the end has room once more. */
	expect_at(&a, 400, 600);
	bd_arena_free(&a, 200);
	bd_arena_free(&a, 400);
	bd_arena_free(&a, 400);
	ck_assert_uint_eq(a.live, 0);
}
END_TEST

START_TEST(test_empty_starts_over)
{
	bd_arena a;

	bd_arena_init(&a, 1000);
	expect_at(&a, 600, 0);
	expect_at(&a, 300, 600);
	bd_arena_free(&a, 600);
	bd_arena_free(&a, 300);
	/* Nothing live: a record as large as the arena fits at 0 again. */
	expect_at(&a, 1000, 0);
	bd_arena_free(&a, 1000);
	expect_at(&a, 10, 0);
}
END_TEST

START_TEST(test_stream)
{
	/* A steady stream of odd sizes, a few records live: offsets never overlap a live record. */
	enum { LIVE = 3, N = 5000 };
	uint64_t off[LIVE], sz[LIVE];
	unsigned head = 0, count = 0;
	bd_arena a;

	bd_arena_init(&a, 4096);
	for (unsigned i = 0; i < N; i++) {
		uint64_t size = 100 + (i * 7919u) % 900, at;

		while (!bd_arena_alloc(&a, size, &at)) {
			ck_assert_uint_gt(count, 0);
			bd_arena_free(&a, sz[head]);
			head = (head + 1) % LIVE;
			count--;
		}
		ck_assert_uint_le(at + size, a.size);
		for (unsigned k = 0; k < count; k++) {
			unsigned j = (head + k) % LIVE;

			ck_assert(at + size <= off[j] || off[j] + sz[j] <= at);
		}
		if (count == LIVE) {
			bd_arena_free(&a, sz[head]);
			head = (head + 1) % LIVE;
			count--;
		}
		off[(head + count) % LIVE] = at;
		sz[(head + count) % LIVE] = size;
		count++;
	}
}
END_TEST

static Suite *arena_suite(void)
{
	Suite *s = suite_create("arena");
	TCase *tc;

	tc = tcase_create("end_to_end");
	tcase_add_test(tc, test_end_to_end);
	suite_add_tcase(s, tc);

	tc = tcase_create("no_room");
	tcase_add_test(tc, test_no_room);
	suite_add_tcase(s, tc);

	tc = tcase_create("wrap_around");
	tcase_add_test(tc, test_wrap_around);
	suite_add_tcase(s, tc);

	tc = tcase_create("free_in_order");
	tcase_add_test(tc, test_free_in_order);
	tcase_add_test(tc, test_empty_starts_over);
	suite_add_tcase(s, tc);

	tc = tcase_create("no_overlap");
	tcase_add_test(tc, test_stream);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(arena_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
