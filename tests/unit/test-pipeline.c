/* SPDX-License-Identifier: MIT */
/*
 * test-pipeline.c - the Check suite for the queues of daemon/pipeline/pipeline.c,
 * through the pipeline's private interface (pipeline_priv.h): the task
 * FIFOs keep order (and put a task back at the head), the read-buffer pool
 * hands out every buffer once, says when none is left and takes them back,
 * and a block is decoded straight into the batch only when its pieces tile
 * it exactly.
 *
 * These are what carry every block between the loop, I/O and decode
 * threads; a task lost or seen twice would hang or corrupt a batch, so
 * every TCase asserts exact order, slots and addresses.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>

#include <check.h>

#include "pipeline_priv.h"

START_TEST(test_fifo_order)
{
	bd_task t[5];
	bd_fifo q = { 0 };

	ck_assert_ptr_null(bd__fifo_pop(&q));
	for (int i = 0; i < 5; i++)
		bd__fifo_push(&q, &t[i]);
	for (int i = 0; i < 5; i++)
		ck_assert_ptr_eq(bd__fifo_pop(&q), &t[i]);
	ck_assert_ptr_null(bd__fifo_pop(&q));
	ck_assert_ptr_null(q.head);
	ck_assert_ptr_null(q.tail);
	/* Empty again: a push after the last pop starts a fresh list. */
	bd__fifo_push(&q, &t[3]);
	ck_assert_ptr_eq(q.head, &t[3]);
	ck_assert_ptr_eq(q.tail, &t[3]);
	ck_assert_ptr_eq(bd__fifo_pop(&q), &t[3]);
	ck_assert_ptr_null(bd__fifo_pop(&q));
}
END_TEST

START_TEST(test_fifo_interleaved)
{
	bd_task t[4];
	bd_fifo q = { 0 };

	bd__fifo_push(&q, &t[0]);
	bd__fifo_push(&q, &t[1]);
	ck_assert_ptr_eq(bd__fifo_pop(&q), &t[0]);
	bd__fifo_push(&q, &t[2]);
	ck_assert_ptr_eq(bd__fifo_pop(&q), &t[1]);
	bd__fifo_push(&q, &t[3]);
	ck_assert_ptr_eq(bd__fifo_pop(&q), &t[2]);
	ck_assert_ptr_eq(bd__fifo_pop(&q), &t[3]);
	ck_assert_ptr_null(bd__fifo_pop(&q));
}
END_TEST

START_TEST(test_fifo_unpop)
{
	bd_task t[3];
	bd_fifo q = { 0 };
	bd_task *x;

	/* Put back on an empty list: head and tail both. */
	bd__fifo_unpop(&q, &t[0]);
	ck_assert_ptr_eq(q.tail, &t[0]);
	bd__fifo_push(&q, &t[1]);
	x = bd__fifo_pop(&q);
	ck_assert_ptr_eq(x, &t[0]);
	bd__fifo_unpop(&q, x);
	bd__fifo_push(&q, &t[2]);
	ck_assert_ptr_eq(bd__fifo_pop(&q), &t[0]);
	ck_assert_ptr_eq(bd__fifo_pop(&q), &t[1]);
	ck_assert_ptr_eq(bd__fifo_pop(&q), &t[2]);
	ck_assert_ptr_null(bd__fifo_pop(&q));
}
END_TEST

START_TEST(test_pool_exhaustion)
{
	enum { N = 8, SIZE = 64 << 10 };
	bool seen[N] = { false };
	int32_t slot[N];
	bd_pool pl = { 0 };

	ck_assert_int_eq(bd__pool_init(&pl, N, SIZE), 0);
	/* 2 MiB-aligned, so a read in the first buffer starts a huge page. */
	ck_assert_uint_eq((uintptr_t)pl.base % (2u << 20), 0);
	/* One registered buffer: the whole pool. */
	ck_assert_ptr_eq(pl.iov.iov_base, pl.base);
	ck_assert_uint_eq(pl.iov.iov_len, (size_t)N * SIZE);
	for (int i = 0; i < N; i++) {
		slot[i] = bd__pool_get(&pl, 1);
		ck_assert_int_ge(slot[i], 0);
		ck_assert_int_lt(slot[i], N);
		ck_assert(!seen[slot[i]]);
		seen[slot[i]] = true;
		/* Buffers lie end to end. */
		ck_assert_ptr_eq(bd__pool_buf(&pl, slot[i]), pl.base + (size_t)slot[i] * SIZE);
		memset(bd__pool_buf(&pl, slot[i]), i, SIZE);
	}
	/* Every buffer is out. */
	ck_assert_int_eq(bd__pool_get(&pl, 1), -1);
	ck_assert_int_eq(bd__pool_get(&pl, 1), -1);
	/* One back: that one comes out next, and only it. */
	bd__pool_put(&pl, slot[5], 1);
	ck_assert_int_eq(bd__pool_get(&pl, 1), slot[5]);
	ck_assert_int_eq(bd__pool_get(&pl, 1), -1);
	for (int i = 0; i < N; i++)
		bd__pool_put(&pl, slot[i], 1);
	for (int i = 0; i < N; i++)
		ck_assert_int_ge(bd__pool_get(&pl, 1), 0);
	ck_assert_int_eq(bd__pool_get(&pl, 1), -1);
	bd__pool_fini(&pl);
}
END_TEST

/* A larger read takes a run of consecutive buffers: the lowest that is free, or none. */
START_TEST(test_pool_runs)
{
	enum { N = 8, SIZE = 4096 };
	bd_pool pl = { 0 };

	ck_assert_int_eq(bd__pool_init(&pl, N, SIZE), 0);
	ck_assert_uint_eq(bd__pool_slots(&pl, 1), 1);
	ck_assert_uint_eq(bd__pool_slots(&pl, SIZE), 1);
	ck_assert_uint_eq(bd__pool_slots(&pl, SIZE + 1), 2);
	ck_assert_uint_eq(bd__pool_slots(&pl, (uint64_t)N * SIZE), N);
	ck_assert_uint_eq(bd__pool_slots(&pl, (uint64_t)N * SIZE + 1), 0);
	ck_assert_uint_eq(bd__pool_slots(&pl, 0), 0);
	ck_assert_int_eq(bd__pool_get(&pl, 3), 0);
	ck_assert_int_eq(bd__pool_get(&pl, 1), 3);
	ck_assert_int_eq(bd__pool_get(&pl, 4), 4);
	ck_assert_int_eq(bd__pool_get(&pl, 1), -1);
	bd__pool_put(&pl, 0, 3);
	/* Three free, but not four in a row. */
	ck_assert_int_eq(bd__pool_get(&pl, 4), -1);
	ck_assert_int_eq(bd__pool_get(&pl, 2), 0);
	ck_assert_int_eq(bd__pool_get(&pl, 1), 2);
	ck_assert_int_eq(bd__pool_get(&pl, 1), -1);
	bd__pool_put(&pl, 3, 1);
	bd__pool_put(&pl, 4, 4);
	ck_assert_int_eq(bd__pool_get(&pl, 5), 3);
	ck_assert_int_eq(bd__pool_get(&pl, 0), -1);
	bd__pool_fini(&pl);
}
END_TEST

/* Own buffers: kept for the next read of about their size, within the count and bytes caps. */
START_TEST(test_pool_spares)
{
	bd_pool pl = { 0 };
	void *a, *b, *c, *held[BD_POOL_SPARES + 1];
	size_t cap, cap2;

	ck_assert_int_eq(bd__pool_init(&pl, 0, 4096), 0);
	a = bd__pool_own(&pl, 100 << 10, 0, &cap);
	ck_assert_ptr_nonnull(a);
	ck_assert_uint_eq(cap, 128 << 10);
	ck_assert_uint_eq((uintptr_t)a % 4096, 0);
	memset(a, 1, cap);
	bd__pool_disown(&pl, a, cap, 0);
	ck_assert_uint_eq(pl.nspare, 1);
	/* About the size: the same buffer again. */
	b = bd__pool_own(&pl, 120 << 10, 4096, &cap2);
	ck_assert_ptr_eq(b, a);
	ck_assert_uint_eq(cap2, cap);
	ck_assert_uint_eq(pl.nspare, 0);
	bd__pool_disown(&pl, b, cap2, 0);
	/* Too small for a 300 KiB read: a fresh buffer, and both are kept. */
	c = bd__pool_own(&pl, 300 << 10, 0, &cap2);
	ck_assert_ptr_ne(c, a);
	ck_assert_uint_eq(cap2, 320 << 10);
	bd__pool_disown(&pl, c, cap2, 0);
	ck_assert_uint_eq(pl.nspare, 2);
	/* A 10 KiB read (64 KiB at least) takes the 128 KiB one (within twice), not the 320 KiB one. */
	b = bd__pool_own(&pl, 10 << 10, 0, &cap2);
	ck_assert_ptr_eq(b, a);
	ck_assert_uint_eq(cap2, 128 << 10);
	held[0] = bd__pool_own(&pl, 10 << 10, 0, &cap);
	ck_assert_ptr_ne(held[0], c);
	ck_assert_uint_eq(cap, 64 << 10);
	bd__pool_disown(&pl, held[0], cap, 0);
	bd__pool_disown(&pl, b, cap2, 0);
	ck_assert_uint_eq(pl.nspare, 3);
	/* A stricter alignment than spares have: never kept, never taken from them. */
	c = bd__pool_own(&pl, 100 << 10, 65536, &cap2);
	ck_assert_uint_eq((uintptr_t)c % 65536, 0);
	bd__pool_disown(&pl, c, cap2, 65536);
	ck_assert_uint_eq(pl.nspare, 3);
	/* Kept up to BD_POOL_SPARE_BYTES: the three above and seven of 4 MiB; the rest freed (ASan checks). */
	for (unsigned i = 0; i <= BD_POOL_SPARES; i++)
		held[i] = bd__pool_own(&pl, 4 << 20, 0, &cap2);
	for (unsigned i = 0; i <= BD_POOL_SPARES; i++)
		bd__pool_disown(&pl, held[i], 4 << 20, 0);
	ck_assert_uint_eq(pl.nspare, 3 + 7);
	ck_assert_uint_eq(pl.spare_bytes, (512u << 10) + (28u << 20));
	bd__pool_fini(&pl);
	/* And at most BD_POOL_SPARES of them, however small. */
	pl = (bd_pool){ 0 };
	ck_assert_int_eq(bd__pool_init(&pl, 0, 4096), 0);
	for (unsigned i = 0; i <= BD_POOL_SPARES; i++)
		held[i] = bd__pool_own(&pl, 64 << 10, 0, &cap2);
	for (unsigned i = 0; i <= BD_POOL_SPARES; i++)
		bd__pool_disown(&pl, held[i], 64 << 10, 0);
	ck_assert_uint_eq(pl.nspare, BD_POOL_SPARES);
	ck_assert_uint_eq(pl.spare_bytes, (size_t)BD_POOL_SPARES << 16);
	bd__pool_fini(&pl);
}
END_TEST

START_TEST(test_pool_first_slot)
{
	bd_pool pl = { 0 };

	/* Slot 0 first: reads begin at the start of the mapping. */
	ck_assert_int_eq(bd__pool_init(&pl, 4, 4096), 0);
	ck_assert_int_eq(bd__pool_get(&pl, 1), 0);
	ck_assert_int_eq(bd__pool_get(&pl, 1), 1);
	bd__pool_fini(&pl);
}
END_TEST

START_TEST(test_pool_empty)
{
	bd_pool pl = { 0 };

	/* No buffers: every read gets its own, and nothing is mapped. */
	ck_assert_int_eq(bd__pool_init(&pl, 0, 512 << 10), 0);
	ck_assert_uint_eq(pl.bytes, 0);
	ck_assert_ptr_null(pl.base);
	ck_assert_int_eq(bd__pool_get(&pl, 1), -1);
	ck_assert_uint_eq(bd__pool_slots(&pl, 4096), 0);
	bd__pool_fini(&pl);
}
END_TEST

/* Threads taking and returning buffers and runs: no slot is ever held twice at once. */
enum { POOL_THREADS = 4, POOL_SLOTS = 3, POOL_ROUNDS = 20000 };

typedef struct pool_run {
	bd_pool pl;
	int held[POOL_SLOTS];       /* atomic: holders of each slot now */
	int twice;                  /* atomic: a slot was seen held by two */
	unsigned got, missed;       /* atomic */
} pool_run;

static void *pool_worker(void *arg)
{
	pool_run *pr = arg;

	for (int i = 0; i < POOL_ROUNDS; i++) {
		uint32_t n = 1 + (uint32_t)i % 2; /* single buffers and runs of two */
		int32_t slot = bd__pool_get(&pr->pl, n);

		if (slot < 0) {
			__atomic_add_fetch(&pr->missed, 1, __ATOMIC_RELAXED);
			continue;
		}
		for (uint32_t k = 0; k < n; k++)
			if (__atomic_add_fetch(&pr->held[slot + k], 1, __ATOMIC_ACQ_REL) != 1)
				__atomic_store_n(&pr->twice, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&pr->got, 1, __ATOMIC_RELAXED);
		for (uint32_t k = 0; k < n; k++)
			__atomic_sub_fetch(&pr->held[slot + k], 1, __ATOMIC_ACQ_REL);
		bd__pool_put(&pr->pl, slot, n);
	}
	return NULL;
}

START_TEST(test_pool_threads)
{
	static pool_run pr;
	pthread_t th[POOL_THREADS];

	memset(&pr, 0, sizeof(pr));
	ck_assert_int_eq(bd__pool_init(&pr.pl, POOL_SLOTS, 4096), 0);
	for (int i = 0; i < POOL_THREADS; i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, pool_worker, &pr), 0);
	for (int i = 0; i < POOL_THREADS; i++)
		pthread_join(th[i], NULL);
	ck_assert_int_eq(pr.twice, 0);
	ck_assert_uint_eq(pr.got + pr.missed, POOL_THREADS * POOL_ROUNDS);
	/* All back: every buffer can be taken once more. */
	for (int i = 0; i < POOL_SLOTS; i++)
		ck_assert_int_ge(bd__pool_get(&pr.pl, 1), 0);
	ck_assert_int_eq(bd__pool_get(&pr.pl, 1), -1);
	bd__pool_fini(&pr.pl);
}
END_TEST

START_TEST(test_tile)
{
	uint8_t rec[100];
	bd_piece whole[] = { { .src = 0, .size = 100, .dst = rec } };
	bd_piece split[] = { { .src = 0, .size = 30, .dst = rec }, { .src = 30, .size = 70, .dst = rec + 30 } };
	bd_piece gap[] = { { .src = 0, .size = 30, .dst = rec }, { .src = 40, .size = 60, .dst = rec + 30 } };
	bd_piece moved[] = { { .src = 0, .size = 30, .dst = rec }, { .src = 30, .size = 70, .dst = rec + 31 } };
	bd_piece part[] = { { .src = 0, .size = 30, .dst = rec } };
	bd_piece late[] = { { .src = 10, .size = 90, .dst = rec } };

	ck_assert(bd__pieces_tile(whole, 1, 100));
	ck_assert(bd__pieces_tile(split, 2, 100));
	/* A hole in the block, a hole in the batch, a part, or an offset start: copy instead. */
	ck_assert(!bd__pieces_tile(gap, 2, 100));
	ck_assert(!bd__pieces_tile(moved, 2, 100));
	ck_assert(!bd__pieces_tile(part, 1, 100));
	ck_assert(!bd__pieces_tile(late, 1, 100));
	/* An empty block is tiled by no piece. */
	ck_assert(bd__pieces_tile(NULL, 0, 0));
	ck_assert(!bd__pieces_tile(NULL, 0, 1));
}
END_TEST

static Suite *pipeline_suite(void)
{
	Suite *s = suite_create("pipeline");
	TCase *tc;

	tc = tcase_create("fifo_order");
	tcase_add_test(tc, test_fifo_order);
	tcase_add_test(tc, test_fifo_interleaved);
	suite_add_tcase(s, tc);

	tc = tcase_create("fifo_unpop");
	tcase_add_test(tc, test_fifo_unpop);
	suite_add_tcase(s, tc);

	tc = tcase_create("pool_exhaustion");
	tcase_add_test(tc, test_pool_exhaustion);
	tcase_add_test(tc, test_pool_runs);
	tcase_add_test(tc, test_pool_spares);
	tcase_add_test(tc, test_pool_first_slot);
	suite_add_tcase(s, tc);

	tc = tcase_create("pool_threads");
	tcase_add_test(tc, test_pool_threads);
	suite_add_tcase(s, tc);

	tc = tcase_create("pool_empty");
	tcase_add_test(tc, test_pool_empty);
	suite_add_tcase(s, tc);

	tc = tcase_create("direct_decode");
	tcase_add_test(tc, test_tile);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(pipeline_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
