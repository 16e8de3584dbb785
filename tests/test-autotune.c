/* SPDX-License-Identifier: MIT */
/*
 * test-autotune.c - how many decode workers a real batchd runs ([decode]
 * autotune, daemon/tune.h): with nothing to decode it lowers the count
 * one step per calm second down to one, shown in status
 * (threads.decode_active, decode_downs) and in the metric
 * batchd_decode_threads_active, and one worker still serves every sample
 * right; with autotune = no every worker stays active.
 *
 * BATCHD and BATCHD_PACK name the binaries (meson sets them).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <json-c/json.h>

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

static Suite *autotune_suite(void)
{
	Suite *s = suite_create("autotune");

	tcase_add_test(dt_tcase(s, "idle_lowers_to_one", setup_tuned), test_idle_lowers_to_one);
	tcase_add_test(dt_tcase(s, "fixed_keeps_all", setup_fixed), test_fixed_keeps_all);
	return s;
}

int main(void)
{
	return dt_check_main(&D, autotune_suite);
}
