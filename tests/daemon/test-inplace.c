/* SPDX-License-Identifier: MIT */
/*
 * test-inplace.c - the writable views of a batch (bc_batch_data_writable,
 * bc_batch_field_writable) through a real batchd: a trainer writes every
 * byte of every batch in place for two epochs on a ring small enough that
 * its memory is reused over and over, and still every batch it takes is
 * the pack's bytes exactly, in its read-only view and in a fresh writable
 * one, even after writes through a pointer kept past bc_release; a second
 * session on the same dataset sees none of the writes.
 *
 * Why it matters: the session's memory is the daemon's (sealed against
 * writes); a trainer that normalises a batch in place must neither crash
 * nor change what the daemon, a later batch or another session reads.
 *
 * BATCHD and BATCHD_PACK name the binaries (meson sets them).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <check.h>

#include "batchclient.h"
#include "daemon-testlib.h"

static dt_daemon D;

#define expect dt_expect

#define BATCH 10u
#define EPOCHS 2u
#define BATCHES (EPOCHS * DSET_SAMPLES / BATCH)

static void setup(void)
{
	dt_setup_dir();
	ck_assert_msg(dt_daemon_start(&D) == 0, "batchd did not start");
}

/* Stream options for DSET_ONE in order, with two batches staged ahead (a small arena). */
static void small_ring(bc_stream_opts *o)
{
	dt_opts(o, DSET_ONE, BATCH, BC_SHUFFLE_NONE, 0);
	o->prefetch = 2;
}

/* The next batch of s, stepping over the epoch ends. */
static bc_batch *next_ok(bc_stream *s, uint64_t i)
{
	bc_batch *b = NULL;
	int r;

	while ((r = bc_next(s, &b, WAIT_MS)) == BC_EPOCH_END)
		;
	expect(r == 0, "batch %llu: %s (%d): %s", (unsigned long long)i, bc_strerror(r), r,
	       bc_stream_error(s));
	return b;
}

/*
 * The writable view of b: the lead field's bytes at another address,
 * equal to the read-only view, and the same memory as field 0's.
 */
static uint8_t *writable_ok(bc_stream *s, bc_batch *b, uint64_t i, size_t *ret_len)
{
	size_t len, rolen, flen;
	const void *ro = bc_batch_data(b, &rolen);
	void *w, *f;
	int r;

	r = bc_batch_data_writable(b, &w, &len);
	expect(r == 0, "batch %llu: bc_batch_data_writable: %s (%d): %s",
	       (unsigned long long)i, bc_strerror(r), r, bc_stream_error(s));
	expect(len == rolen && w != ro, "batch %llu: writable view %zu bytes at %p, read-only %zu "
	       "at %p", (unsigned long long)i, len, w, rolen, ro);
	expect(memcmp(w, ro, len) == 0, "batch %llu: a fresh writable view differs from the "
	       "daemon's bytes (a stale private page)", (unsigned long long)i);
	ck_assert_int_eq(bc_batch_field_writable(b, 0, &f, &flen), 0);
	expect(f == w && flen == len, "batch %llu: field 0's writable view is not the data's",
	       (unsigned long long)i);
	*ret_len = len;
	return w;
}

/*
 * Two epochs; each batch is checked against the pack, then written all
 * over through its writable view (the read-only view must not change);
 * every third one is also written through its pointer after its release.
 */
START_TEST(test_write_in_place)
{
	bc_client *c = dt_connect_ok();
	bc_stream_opts o;
	bc_stream *s, *s2;
	uint8_t *late = NULL;
	size_t late_len = 0;
	dt_ref ref;
	dt_run run = { 0 };
	char err[256];

	dt_ref_ok(&ref, DSET_ONE);
	small_ring(&o);
	s = dt_open_ok(c, &o);
	s2 = dt_open_ok(c, &o);
	for (uint64_t i = 0; i < BATCHES; i++) {
		bc_batch *b = next_ok(s, i);
		size_t len;
		uint8_t *w;
		void *p;

		expect(dt_batch_check(b, &ref, err, sizeof(err)) == 0, "batch %llu as taken: %s",
		       (unsigned long long)i, err);
		w = writable_ok(s, b, i, &len);
		for (size_t k = 0; k < len; k++)
			w[k] = (uint8_t)~w[k];
		ck_assert_uint_gt(len, 0);
		expect((((const uint8_t *)bc_batch_data(b, NULL))[0] ^ w[0]) == 0xff,
		       "batch %llu: the write did not land in the writable view", (unsigned long long)i);
		expect(dt_batch_check(b, &ref, err, sizeof(err)) == 0, "batch %llu: a write through "
		       "the writable view changed the read-only one: %s", (unsigned long long)i, err);
		if (late) {
			/* Use after release: only the trainer's own private page may change. */
			memset(late, 0x5a, late_len);
			late = NULL;
		}
		if (i % 3 == 0) {
			late = w;
			late_len = len;
		}
		ck_assert_int_eq(bc_release(b), 0);
		ck_assert_int_eq(bc_batch_data_writable(b, &p, &len), -EINVAL);
	}
	if (late)
		memset(late, 0x5a, late_len);
	/* The other session, on its own memory and the same daemon, reads the pack as packed. */
	dt_consume_ok(s2, &ref, BATCHES, 0, &run, "the second session");
	ck_assert_uint_eq(run.batches, BATCHES);
	ck_assert_int_eq(bc_close(s2), 0);
	ck_assert_int_eq(bc_close(s), 0);
	dt_run_free(&run);
	dt_ref_close(&ref);
	bc_disconnect(c);
}
END_TEST

/* The kB of private (copied) pages in the mapping holding p, from /proc/self/smaps. */
static long anon_kb(const void *p)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	bool in = false;
	long kb = -1;

	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;

		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
			in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
		else if (in && sscanf(line, "Anonymous: %ld kB", &kb) == 1)
			break;
	}
	fclose(f);
	ck_assert_int_ge(kb, 0);
	return kb;
}

/* What a batch's writes copied, its release gives back: the mapping holds no copy after. */
START_TEST(test_release_drops_copies)
{
	bc_client *c = dt_connect_ok();
	bc_stream_opts o;
	bc_stream *s;

	small_ring(&o);
	s = dt_open_ok(c, &o);
	for (uint64_t i = 0; i < 5; i++) {
		bc_batch *b = next_ok(s, i);
		size_t len;
		uint8_t *w = writable_ok(s, b, i, &len);

		expect(anon_kb(w) == 0, "batch %llu: %ld kB copied before any write",
		       (unsigned long long)i, anon_kb(w));
		memset(w, 0, len);
		expect((size_t)anon_kb(w) * 1024 >= len / 4096 * 4096, "batch %llu: %zu bytes "
		       "written, %ld kB copied", (unsigned long long)i, len, anon_kb(w));
		ck_assert_int_eq(bc_release(b), 0);
		expect(anon_kb(w) == 0, "batch %llu: %ld kB still copied after release",
		       (unsigned long long)i, anon_kb(w));
	}
	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
}
END_TEST

/* The calls' refusals: NULL arguments, a field the dataset lacks. */
START_TEST(test_refusals)
{
	bc_client *c = dt_connect_ok();
	bc_stream_opts o;
	bc_stream *s;
	bc_batch *b;
	size_t len;
	void *p;

	small_ring(&o);
	s = dt_open_ok(c, &o);
	b = next_ok(s, 0);
	ck_assert_int_eq(bc_batch_data_writable(NULL, &p, &len), -EINVAL);
	ck_assert_int_eq(bc_batch_data_writable(b, NULL, &len), -EINVAL);
	ck_assert_int_eq(bc_batch_data_writable(b, &p, NULL), -EINVAL);
	ck_assert_int_eq(bc_batch_field_writable(b, 7, &p, &len), -ERANGE);
	ck_assert_int_eq(bc_batch_field_writable(NULL, 0, &p, &len), -EINVAL);
	ck_assert_int_eq(bc_release(b), 0);
	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
}
END_TEST

static Suite *inplace_suite(void)
{
	Suite *s = suite_create("inplace");

	tcase_add_test(dt_tcase(s, "write_in_place", setup), test_write_in_place);
	tcase_add_test(dt_tcase(s, "release_drops_copies", setup), test_release_drops_copies);
	tcase_add_test(dt_tcase(s, "refusals", setup), test_refusals);
	return s;
}

int main(void)
{
	return dt_check_main(&D, inplace_suite);
}
