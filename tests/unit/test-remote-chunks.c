/* SPDX-License-Identifier: MIT */
/*
 * test-remote-chunks.c - the remote cache's chunk tables
 * (daemon/remote/remote_chunks.c): records made as chunks are touched,
 * found again however scattered, freed once idle, every byte charged to
 * R.table_bytes within R.table_max and given back; and a size claimed
 * by the bucket decides no allocation.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include <check.h>

#include "remote_priv.h"

/* An object of size bytes in 64 KiB chunks with its table, as robj_new makes one. */
static bd_robj *object(uint64_t size)
{
	bd_robj *o = calloc(1, sizeof(*o));

	ck_assert_ptr_nonnull(o);
	o->fd = -1;
	o->size = size;
	o->nchunks = (uint32_t)((size + R.chunk - 1) / R.chunk);
	ck_assert_int_eq(bd__chunks_init(o, sizeof(*o)), 0);
	return o;
}

static void setup(void)
{
	R.chunk = UINT32_C(64) << 10;
	R.table_max = UINT64_C(64) << 20;
	R.table_bytes = 0;
}

static void teardown(void)
{
	ck_assert_uint_eq(R.table_bytes, 0);
}

/* Chunk k of a scattered set: k * 7919 spread over 5 TiB of 64 KiB chunks. */
static uint32_t scattered(uint32_t k)
{
	return (uint32_t)(((uint64_t)k * 7919 * 1009) % ((UINT64_C(5) << 40) >> 16));
}

START_TEST(test_claimed_size_costs_nothing)
{
	/* 5 TiB in 64 KiB chunks: 80 million chunks, of which none is in use. */
	bd_robj *o = object(UINT64_C(5) << 40);

	ck_assert_uint_lt(R.table_bytes, sizeof(*o) + 1024);
	ck_assert_ptr_null(bd__chunk_if(o, o->nchunks - 1));
	ck_assert_ptr_null(bd__chunk_next(o, NULL));
	bd__chunks_free(o);
	free(o);
}
END_TEST

START_TEST(test_scattered_records_found_and_charged)
{
	enum { N = 20000 };
	bd_robj *o = object(UINT64_C(5) << 40);
	uint64_t base = R.table_bytes;
	unsigned seen = 0;

	for (uint32_t k = 0; k < N; k++) {
		bd_chunk *c = bd__chunk(o, scattered(k));

		ck_assert_ptr_nonnull(c);
		ck_assert_uint_eq(c->idx, scattered(k));
		ck_assert_ptr_eq(c->obj, o);
		ck_assert_int_eq(c->state, BD_CHUNK_ABSENT);
		c->state = BD_CHUNK_PRESENT;
		c->hash = scattered(k) ^ 0x5a5a;
	}
	/* The same record again, not a new one. */
	ck_assert_ptr_eq(bd__chunk(o, scattered(7)), bd__chunk_if(o, scattered(7)));
	ck_assert_uint_eq(o->nused, N);
	for (uint32_t k = 0; k < N; k++) {
		bd_chunk *c = bd__chunk_if(o, scattered(k));

		ck_assert_ptr_nonnull(c);
		ck_assert_uint_eq(c->hash, scattered(k) ^ 0x5a5a);
	}
	ck_assert_ptr_null(bd__chunk_if(o, 1));
	BD_FOR_EACH_CHUNK(o, c)
		seen += c->state == BD_CHUNK_PRESENT;
	ck_assert_uint_eq(seen, N);
	/* A chunk costs the same however scattered: a record and a few slots. */
	ck_assert_uint_le(R.table_bytes - base, (uint64_t)N * (sizeof(bd_chunk) + 4 * sizeof(void *)));
	ck_assert_uint_eq(R.table_bytes, o->table_bytes);
	bd__chunks_free(o);
	free(o);
}
END_TEST

START_TEST(test_trim_frees_idle_records_only)
{
	enum { N = 5000 };
	bd_robj *o = object(UINT64_C(1) << 40);
	uint64_t empty = R.table_bytes;
	unsigned seen = 0;

	for (uint32_t k = 0; k < N; k++)
		ck_assert_ptr_nonnull(bd__chunk(o, k * 3));
	/* Every fourth in use, one way or another; the rest idle. */
	for (uint32_t k = 0; k < N; k += 4) {
		bd_chunk *c = bd__chunk_if(o, k * 3);

		switch (k / 4 % 4) {
		case 0: c->state = BD_CHUNK_PRESENT; break;
		case 1: c->pins = 1; break;
		case 2: c->punch = true; break;
		default: c->state = BD_CHUNK_FETCHING; break;
		}
	}
	bd__chunks_trim(o);
	ck_assert_uint_eq(o->nused, (N + 3) / 4);
	for (uint32_t k = 0; k < N; k++) {
		bd_chunk *c = bd__chunk_if(o, k * 3);

		if (k % 4)
			ck_assert_ptr_null(c);
		else
			ck_assert_ptr_nonnull(c);
	}
	BD_FOR_EACH_CHUNK(o, c)
		seen++;
	ck_assert_uint_eq(seen, (N + 3) / 4);
	/* Made idle, all go, and the slots shrink back. */
	BD_FOR_EACH_CHUNK(o, c) {
		c->state = BD_CHUNK_ABSENT;
		c->pins = 0;
		c->punch = false;
	}
	bd__chunks_trim(o);
	ck_assert_uint_eq(o->nused, 0);
	ck_assert_uint_eq(R.table_bytes, empty);
	ck_assert_ptr_null(bd__chunk_next(o, NULL));
	bd__chunks_free(o);
	free(o);
}
END_TEST

START_TEST(test_over_table_max_refused)
{
	bd_robj *o = object(UINT64_C(1) << 40);
	uint64_t before;
	uint32_t k = 0;

	R.table_max = R.table_bytes + 64 * 1024;
	while (bd__chunk(o, k))
		k++;
	ck_assert_uint_gt(k, 100);
	ck_assert_uint_le(R.table_bytes, R.table_max);
	/* The refusal charged nothing and made nothing; the records made are all there. */
	before = R.table_bytes;
	ck_assert_ptr_null(bd__chunk(o, k));
	ck_assert_uint_eq(R.table_bytes, before);
	ck_assert_ptr_null(bd__chunk_if(o, k));
	for (uint32_t i = 0; i < k; i++)
		ck_assert_ptr_nonnull(bd__chunk_if(o, i));
	/* An object's own table is refused with ENOSPC when even that does not fit. */
	{
		bd_robj *p = calloc(1, sizeof(*p));

		R.table_max = R.table_bytes;
		ck_assert_int_eq(bd__chunks_init(p, sizeof(*p)), -ENOSPC);
		ck_assert_uint_eq(R.table_bytes, before);
		free(p);
	}
	bd__chunks_free(o);
	free(o);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("remote-chunks");
	TCase *tc = tcase_create("table");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_claimed_size_costs_nothing);
	tcase_add_test(tc, test_scattered_records_found_and_charged);
	tcase_add_test(tc, test_trim_frees_idle_records_only);
	tcase_add_test(tc, test_over_table_max_refused);
	suite_add_tcase(s, tc);
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
