/* SPDX-License-Identifier: MIT */
/*
 * test-autotune.c - how many decode workers a real batchd runs ([decode]
 * autotune, daemon/pipeline/tune.h): with nothing to decode it lowers the count
 * one step per calm second down to one, shown in status
 * (threads.decode_active, decode_downs) and in the metric
 * batchd_decode_threads_active, and one worker still serves every sample
 * right; with autotune = no every worker stays active. A session that
 * does not ask for a prefetch depth gets enough batches staged to keep
 * the engines' reads in flight when its batches read few blocks
 * (session.c default_prefetch): batch 1 of one-sample blocks 64 ahead
 * (queue depth 64), batch 50 the configured 8.
 *
 * BATCHD and BATCHD_PACK name the binaries (meson sets them).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "daemon-testlib.h"

static dt_daemon D;

#define expect dt_expect

static void setup_tuned(void)
{
	dt_conf_start("[decode]\nthreads = 3\n");
}

static void setup_fixed(void)
{
	dt_conf_start("[decode]\nthreads = 3\nautotune = no\n");
}

/* threads.decode_active once it has stopped falling (at most ~10 s: 3 calm seconds are needed). */
static uint64_t settled_active(void)
{
	uint64_t active = dt_status_u64("threads.decode_active");

	for (int i = 0; i < 100 && active > 1; i++) {
		dt_sleep_ms(100);
		active = dt_status_u64("threads.decode_active");
	}
	return active;
}

START_TEST(test_idle_lowers_to_one)
{
	bc_client *c;
	bc_stream_opts o;
	bc_stream *s;
	dt_run run = { 0 };
	dt_ref ref;
	char *text = NULL;

	ck_assert_uint_eq(dt_status_u64("threads.decode"), 3);
	ck_assert_uint_eq(settled_active(), 1);
	expect(dt_status_u64("threads.decode_downs") == 2, "3 workers to 1 took %" PRIu64 " steps",
	       dt_status_u64("threads.decode_downs"));
	c = dt_connect_ok();
	ck_assert_int_eq(bc_metrics(c, &text), 0);
	expect(strstr(text, "\nbatchd_decode_threads_active 1\n"),
	       "the metric does not say 1 active decode worker");
	free(text);
	/* Decode-heavy reading with one worker (or however many it rises to): every sample right. */
	dt_ref_ok(&ref, DSET_BLK);
	dt_opts(&o, DSET_BLK, 50, BC_SHUFFLE_GLOBAL, 9);
	s = dt_open_ok(c, &o);
	dt_consume_ok(s, &ref, DSET_SAMPLES / 50, 0, &run, "one epoch");
	expect(run.nids == DSET_SAMPLES, "%zu samples", run.nids);
	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
	dt_run_free(&run);
	dt_ref_close(&ref);
}
END_TEST

START_TEST(test_fixed_keeps_all)
{
	dt_sleep_ms(1500); /* past the first step down, were it tuning */
	ck_assert_uint_eq(dt_status_u64("threads.decode_active"), 3);
	ck_assert_uint_eq(dt_status_u64("threads.decode_downs"), 0);
}
END_TEST

/* The "slots" (its prefetch + 2) of a session that opens dataset with batch and prefetch. */
static uint64_t slots_of(bc_client *c, const char *dataset, uint32_t batch, uint32_t prefetch)
{
	bc_stream_opts o;
	bc_stream *s;
	uint64_t slots;

	dt_opts(&o, dataset, batch, BC_SHUFFLE_GLOBAL, 1);
	o.prefetch = prefetch;
	s = dt_open_ok(c, &o);
	slots = dt_session_u64(NULL, "slots");
	ck_assert_int_eq(bc_close(s), 0);
	ck_assert(dt_wait_sessions(D.sock, 0, TRIES));
	return slots;
}

START_TEST(test_prefetch_depth)
{
	bc_client *c = dt_connect_ok();

	/* One block a batch: 64 batches keep the 64 reads of the queue in flight. */
	ck_assert_uint_eq(slots_of(c, DSET_ONE, 1, 0), 64 + 2);
	/* 8 blocks a batch: 8 batches, the configured default. */
	ck_assert_uint_eq(slots_of(c, DSET_ONE, 8, 0), 8 + 2);
	ck_assert_uint_eq(slots_of(c, DSET_ONE, 50, 0), 8 + 2);
	/* 16 KiB blocks of several samples: fewer blocks a batch, more batches. */
	expect(slots_of(c, DSET_BLK, 4, 0) > 8 + 2, "batch 4 over multi-sample blocks got the default");
	/* Asked for: as asked. */
	ck_assert_uint_eq(slots_of(c, DSET_ONE, 1, 3), 3 + 2);
	bc_disconnect(c);
}
END_TEST

static Suite *autotune_suite(void)
{
	Suite *s = suite_create("autotune");

	tcase_add_test(dt_tcase(s, "idle_lowers_to_one", setup_tuned), test_idle_lowers_to_one);
	tcase_add_test(dt_tcase(s, "fixed_keeps_all", setup_fixed), test_fixed_keeps_all);
	tcase_add_test(dt_tcase(s, "prefetch_depth", setup_fixed), test_prefetch_depth);
	return s;
}

int main(void)
{
	return dt_check_main(&D, autotune_suite);
}
