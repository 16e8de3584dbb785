/* SPDX-License-Identifier: MIT */
/*
 * test-warm.c - a ram-tier dataset streamed in file order on a shuffled
 * first pass (daemon/session/session_warm.c), through a real batchd.
 *
 * Every block of the pack is read once and decoded once between the
 * warmer and the batches (blocks_read and the cache's misses equal the
 * pack's blocks), most of them by reads of several blocks at once
 * (span_reads, span_blocks); every sample still equals the pack's; the
 * session's status says what the warmer did (first_pass: state and the
 * stored bytes it queued); a second epoch and a second session read
 * nothing. It does not run with [io] first_pass = batches, without a
 * shuffle, for a rank whose job's other ranks are not on this daemon
 * (it does once they are), nor over a cache the dataset does not fit
 * ([memory] tier = ram over a small cache), the epoch still whole and
 * right. Two corrupt blocks in one of its reads fail only the batches
 * that need them, each naming its own block.
 *
 * BATCHD and BATCHD_PACK name the binaries (meson sets them).
 */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>
#include <json-c/json.h>

#include "daemon-testlib.h"
#include "json_path.h"
#include "pack-testlib.h"

static dt_daemon D;

#define expect dt_expect

/* 3000 incompressible samples of 1 to 6 KiB, one a block: about 10 MB, 3000 small blocks. */
#define PACK "small.bpk"
#define SAMPLES 3000u
#define BATCH 30u

static void write_pack(void)
{
	char path[PATH_MAX];
	pt_samples s;
	int fd;

	pt_samples_make(&s, SAMPLES, 1024, 6144, PT_RANDOM, 17);
	fd = open(dt_root_path(&D, PACK, path, sizeof(path)), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC,
		  0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pt_pack_write(fd, &s, 1, NULL, 0, 1, NULL), 0);
	close(fd);
	pt_samples_free(&s);
}

static void ref_ok(dt_ref *ref)
{
	char path[PATH_MAX];

	ck_assert_int_eq(dt_ref_open(ref, dt_root_path(&D, PACK, path, sizeof(path))), 0);
}

static void start(const char *conf)
{
	dt_setup_dir();
	write_pack();
	dt_conf_write(conf);
	ck_assert_msg(dt_daemon_start(&D) == 0, "batchd did not start");
}

static void setup_default(void)
{
	start("");
}

static void setup_batches(void)
{
	start("[io]\nfirst_pass = batches\n");
}

/* TINY: 900 samples of 0 to 8 bytes, one a block: about a ninth of the blocks empty. */
#define TINY "tiny.bpk"

static void setup_tiny(void)
{
	char path[PATH_MAX];
	pt_samples s;
	int fd;

	start("");
	pt_samples_make(&s, 900, 0, 8, PT_RANDOM, 3);
	fd = open(dt_root_path(&D, TINY, path, sizeof(path)), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC,
		  0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pt_pack_write(fd, &s, 1, NULL, 0, 1, NULL), 0);
	close(fd);
	pt_samples_free(&s);
}

static void setup_page(void)
{
	start("[memory]\ntier = page\n");
}

/* Blocks 5 and 6 (samples 5 and 6) with a byte of their stored bytes flipped. */
static void setup_corrupt(void)
{
	char path[PATH_MAX];
	dt_ref ref;
	int fd;

	dt_setup_dir();
	write_pack();
	dt_root_path(&D, PACK, path, sizeof(path));
	ck_assert_int_eq(dt_ref_open(&ref, path), 0);
	fd = open(path, O_RDWR | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	for (uint64_t b = 5; b <= 6; b++) {
		bp_pack_block blk;
		uint8_t c;
		off_t at;

		bp_pack_index_block(&bp_dataset_shard(ref.ds, 0)->index, b, &blk);
		at = (off_t)(blk.offset + blk.stored_size / 2);
		ck_assert_int_eq(pread(fd, &c, 1, at), 1);
		c ^= 0x5a;
		ck_assert_int_eq(pwrite(fd, &c, 1, at), 1);
	}
	close(fd);
	dt_ref_close(&ref);
	dt_conf_write("");
	ck_assert_msg(dt_daemon_start(&D) == 0, "batchd did not start");
}

/* The ram tier forced over a cache of a fifth of the pack: the warmer runs out of room. */
static void setup_small_cache(void)
{
	start("[memory]\ntier = ram\ncache = 2M\n");
}

/* Session i's first_pass state in st (borrowed), or "" when there is no such session. */
static const char *pass_state(json_object *st, int i)
{
	char path[64];
	json_object *v;

	snprintf(path, sizeof(path), "sessions.%d.first_pass.state", i);
	v = json_path_get(st, path);
	return v ? json_object_get_string(v) : "";
}

/* Does a session's first pass (any, in the order status lists them) say ctx? */
static bool has_state(const char *json, void *ctx)
{
	json_object *st = json_tokener_parse(json);
	bool ok = false;

	for (int i = 0; st && i < 8 && !ok; i++)
		ok = !strcmp(pass_state(st, i), ctx);
	json_object_put(st);
	return ok;
}

/* Wait (up to 20 s) until a session's first pass is in state. */
static void wait_state(const char *state)
{
	expect(dt_wait_status(D.sock, has_state, (void *)state, 2000), "no session's first_pass "
	       "became \"%s\"", state);
}

typedef struct counts {
	uint64_t read, misses, spans, span_blocks, decoded;
} counts;

static counts now(void)
{
	json_object *st = dt_status_json_ok();
	counts c = { dt_ju64(st, "pipeline.blocks_read"), dt_ju64(st, "cache.misses"),
		     dt_ju64(st, "pipeline.span_reads"), dt_ju64(st, "pipeline.span_blocks"),
		     dt_ju64(st, "pipeline.blocks_decoded") };

	json_object_put(st);
	return c;
}

/* The counts once the pipeline stopped moving them (the session's read-ahead is in). */
static counts settled(void)
{
	counts a = now(), b;

	for (int i = 0; i < 100; i++) {
		dt_sleep_ms(100);
		b = now();
		if (!memcmp(&a, &b, sizeof(a)))
			return a;
		a = b;
	}
	ck_abort_msg("the pipeline's counts were still moving after 10 s");
	return a;
}

/*
 * One epoch, every sample checked. The first batch is taken at once (it
 * must not wait for the warmer); the rest once the warmer is done, so
 * that most blocks are its to read.
 */
START_TEST(test_streamed)
{
	bc_client *c = dt_connect_ok();
	bc_stream_opts o;
	bc_stream *s;
	dt_run run = { 0 };
	dt_ref ref;
	json_object *st;
	uint64_t blocks, stored;
	counts a, b;

	ref_ok(&ref);
	blocks = bp_dataset_blocks(ref.ds);
	stored = bp_dataset_stored_bytes(ref.ds);
	ck_assert_uint_eq(blocks, SAMPLES);
	dt_opts(&o, PACK, BATCH, BC_SHUFFLE_GLOBAL, 7);
	s = dt_open_ok(c, &o);
	dt_consume_ok(s, &ref, 1, 0, &run, "the first batch");
	wait_state("done");
	dt_consume_ok(s, &ref, SAMPLES / BATCH - 1, 0, &run, "the rest of the epoch");
	expect(run.nids == SAMPLES, "%zu samples in an epoch of %u", run.nids, SAMPLES);
	a = settled();

	st = dt_status_json_ok();
	ck_assert_str_eq(json_object_get_string(json_path_get(st, "sessions.0.tier")), "ram");
	expect(dt_ju64(st, "sessions.0.first_pass.stored_bytes") == stored,
	       "the warmer queued %" PRIu64 " stored bytes of the pack's %" PRIu64,
	       dt_ju64(st, "sessions.0.first_pass.stored_bytes"), stored);
	json_object_put(st);
	/* Each block read and decoded once, whoever read it. */
	expect(a.read == blocks && a.misses == blocks && a.decoded == blocks,
	       "%" PRIu64 " blocks read, %" PRIu64 " loaded into the cache and %" PRIu64
	       " decoded for a pack of %" PRIu64, a.read, a.misses, a.decoded, blocks);
	/* Most by the warmer, several at a time: 1 MiB reads of 3.5 KiB blocks. */
	expect(a.span_blocks >= blocks / 2 && a.spans > 0 && a.spans * 20 <= a.span_blocks,
	       "%" PRIu64 " reads of several blocks read %" PRIu64 " of %" PRIu64 " blocks",
	       a.spans, a.span_blocks, blocks);

	/* The second epoch, and a second session on the version: all hits, no warmer. */
	dt_consume_ok(s, &ref, SAMPLES / BATCH, 0, &run, "epoch 2");
	{
		bc_stream *s2;
		dt_run run2 = { 0 };

		dt_opts(&o, PACK, BATCH, BC_SHUFFLE_GLOBAL, 8);
		s2 = dt_open_ok(c, &o);
		dt_consume_ok(s2, &ref, SAMPLES / BATCH, 0, &run2, "a second session");
		/* In either order: the first warmed the version, the second found it warmed. */
		st = dt_status_json_ok();
		expect((!strcmp(pass_state(st, 0), "done") && !strcmp(pass_state(st, 1), "off")) ||
		       (!strcmp(pass_state(st, 0), "off") && !strcmp(pass_state(st, 1), "done")),
		       "the two sessions' first passes: \"%s\" and \"%s\"", pass_state(st, 0),
		       pass_state(st, 1));
		json_object_put(st);
		ck_assert_int_eq(bc_close(s2), 0);
		dt_run_free(&run2);
	}
	b = settled();
	expect(b.read == a.read && b.decoded == a.decoded && b.spans == a.spans,
	       "after the first pass: %" PRIu64 " more blocks read, %" PRIu64 " decoded",
	       b.read - a.read, b.decoded - a.decoded);
	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
	dt_run_free(&run);
	dt_ref_close(&ref);
}
END_TEST

/*
 * The page tier: the warmer reads every block, in reads of many, and
 * decodes none (the batches decode what they take, from the page cache).
 */
START_TEST(test_page_tier)
{
	bc_client *c = dt_connect_ok();
	bc_stream_opts o;
	bc_stream *s;
	dt_run run = { 0 };
	dt_ref ref;
	json_object *st;
	counts a;

	ref_ok(&ref);
	dt_opts(&o, PACK, BATCH, BC_SHUFFLE_GLOBAL, 7);
	s = dt_open_ok(c, &o);
	dt_consume_ok(s, &ref, 1, 0, &run, "the first batch");
	wait_state("done");
	a = settled();
	st = dt_status_json_ok();
	ck_assert_str_eq(json_object_get_string(json_path_get(st, "sessions.0.tier")), "page");
	json_object_put(st);
	expect(a.span_blocks == SAMPLES && a.misses == 0, "the warmer read %" PRIu64 " blocks by "
	       "reads of many, the cache loaded %" PRIu64, a.span_blocks, a.misses);
	expect(a.decoded < SAMPLES / 2, "%" PRIu64 " blocks decoded before the batches took them",
	       a.decoded);
	dt_consume_ok(s, &ref, SAMPLES / BATCH - 1, 0, &run, "the rest of the epoch");
	expect(run.nids == SAMPLES, "%zu samples in an epoch of %u", run.nids, SAMPLES);
	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
	dt_run_free(&run);
	dt_ref_close(&ref);
}
END_TEST

/* Empty blocks in the warmer's jobs: nothing to read or decode, and the epoch exact. */
START_TEST(test_empty_blocks)
{
	bc_client *c = dt_connect_ok();
	bc_stream_opts o;
	bc_stream *s;
	dt_run run = { 0 };
	dt_ref ref;
	char path[PATH_MAX];
	counts a;

	ck_assert_int_eq(dt_ref_open(&ref, dt_root_path(&D, TINY, path, sizeof(path))), 0);
	dt_opts(&o, TINY, 9, BC_SHUFFLE_GLOBAL, 4);
	s = dt_open_ok(c, &o);
	dt_consume_ok(s, &ref, 1, 0, &run, "the first batch");
	wait_state("done");
	dt_consume_ok(s, &ref, 900 / 9 - 1, 0, &run, "an epoch with empty samples");
	a = settled();
	expect(run.nids == 900 && run.failures == 0 && a.span_blocks > 0,
	       "%zu samples, %zu failed batches, %" PRIu64 " blocks by span reads", run.nids,
	       run.failures, a.span_blocks);
	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
	dt_run_free(&run);
	dt_ref_close(&ref);
}
END_TEST

/* One epoch of mode; it must not have warmed: state off, no span reads, each block read once. */
static void not_warmed(enum bc_shuffle mode, const char *what)
{
	bc_client *c = dt_connect_ok();
	bc_stream_opts o;
	bc_stream *s;
	dt_run run = { 0 };
	dt_ref ref;
	json_object *st;
	counts a;

	ref_ok(&ref);
	dt_opts(&o, PACK, BATCH, mode, 7);
	s = dt_open_ok(c, &o);
	dt_consume_ok(s, &ref, SAMPLES / BATCH, 0, &run, what);
	a = settled();
	st = dt_status_json_ok();
	expect(!strcmp(pass_state(st, 0), "off"), "%s: first_pass is \"%s\"", what,
	       pass_state(st, 0));
	json_object_put(st);
	expect(a.spans == 0 && a.read == SAMPLES, "%s: %" PRIu64 " span reads, %" PRIu64
	       " blocks read", what, a.spans, a.read);
	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
	dt_run_free(&run);
	dt_ref_close(&ref);
}

START_TEST(test_batches_setting)
{
	not_warmed(BC_SHUFFLE_GLOBAL, "[io] first_pass = batches");
}
END_TEST

START_TEST(test_no_shuffle)
{
	not_warmed(BC_SHUFFLE_NONE, "no shuffle");
}
END_TEST

/*
 * Rank 0 of a job of two alone reads its share; once rank 1 opens on the
 * same daemon, both ranks are here and rank 1's session streams the pack.
 */
START_TEST(test_ranks)
{
	bc_client *c = dt_connect_ok();
	bc_stream_opts o;
	bc_stream *s[2];
	dt_run run[2] = { { 0 }, { 0 } };
	dt_ref ref;
	json_object *st;
	counts a;

	ref_ok(&ref);
	for (uint32_t r = 0; r < 2; r++) {
		dt_opts(&o, PACK, BATCH, BC_SHUFFLE_GLOBAL, 9);
		o.rank = r;
		o.world = 2;
		s[r] = dt_open_ok(c, &o);
		dt_consume_ok(s[r], &ref, 1, 0, &run[r], r ? "rank 1" : "rank 0");
		if (r == 0) {
			dt_sleep_ms(200);
			st = dt_status_json_ok();
			expect(!strcmp(pass_state(st, 0), "off"), "rank 0 of 2 alone: first_pass is "
			       "\"%s\"", pass_state(st, 0));
			json_object_put(st);
		}
	}
	wait_state("done");
	for (uint32_t r = 0; r < 2; r++)
		dt_consume_ok(s[r], &ref, SAMPLES / BATCH / 2 - 1, 0, &run[r], r ? "rank 1" : "rank 0");
	a = settled();
	expect(run[0].nids + run[1].nids == SAMPLES, "the ranks took %zu and %zu samples",
	       run[0].nids, run[1].nids);
	expect(a.read == SAMPLES && a.span_blocks > 0, "%" PRIu64 " blocks read, %" PRIu64
	       " by span reads", a.read, a.span_blocks);
	for (int r = 0; r < 2; r++) {
		ck_assert_int_eq(bc_close(s[r]), 0);
		dt_run_free(&run[r]);
	}
	bc_disconnect(c);
	dt_ref_close(&ref);
}
END_TEST

/*
 * Two corrupt blocks in one of the warmer's reads: the warmer's loads of
 * them fail, and the batches that need them fail each with its own
 * block named (batch 1: a batch is a sample, a sample a block), never
 * the other's; every other batch is whole and exact.
 */
START_TEST(test_corrupt_blocks)
{
	bc_client *c = dt_connect_ok();
	bc_stream_opts o;
	bc_stream *s;
	dt_run run = { 0 };
	dt_ref ref;
	bool named[2] = { false, false };

	ref_ok(&ref);
	dt_opts(&o, PACK, 1, BC_SHUFFLE_GLOBAL, 7);
	s = dt_open_ok(c, &o);
	for (uint32_t b = 0; b < SAMPLES; b++) {
		size_t failures = run.failures;

		dt_consume_ok(s, &ref, 1, DT_KEEP_FAILURES, &run, "an epoch over two corrupt blocks");
		if (run.failures == failures)
			continue;
		expect(strstr(run.last_error, "checksum mismatch") != NULL, "a batch failed with: %s",
		       run.last_error);
		for (int k = 0; k < 2; k++) {
			char want[32];

			snprintf(want, sizeof(want), "block %d at byte", 5 + k);
			if (strstr(run.last_error, want)) {
				expect(!named[k], "block %d was named twice", 5 + k);
				named[k] = true;
			}
		}
	}
	expect(named[0] && named[1] && run.failures == 2 && run.nids == SAMPLES - 2,
	       "%zu batches failed (blocks 5 and 6 named: %d, %d), %zu samples delivered",
	       run.failures, named[0], named[1], run.nids);
	expect(dt_log_contains(&D, "reading ahead: dataset"), "the warmer's failure is not logged");
	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
	dt_run_free(&run);
	dt_ref_close(&ref);
}
END_TEST

/* A cache the dataset does not fit: no reading ahead, said, and the epoch whole and right. */
START_TEST(test_cache_full)
{
	bc_client *c = dt_connect_ok();
	bc_stream_opts o;
	bc_stream *s;
	dt_run run = { 0 };
	dt_ref ref;

	ref_ok(&ref);
	dt_opts(&o, PACK, BATCH, BC_SHUFFLE_GLOBAL, 7);
	s = dt_open_ok(c, &o);
	wait_state("cache full");
	dt_consume_ok(s, &ref, SAMPLES / BATCH, 0, &run, "an epoch over a full cache");
	expect(run.nids == SAMPLES && run.failures == 0, "%zu samples, %zu failed batches",
	       run.nids, run.failures);
	expect(dt_log_contains(&D, "not reading ahead in file order: the block cache (2 MiB) has no "
			       "room for the whole dataset"), "the log does not say why it did not "
	       "read ahead");
	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
	dt_run_free(&run);
	dt_ref_close(&ref);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("warm");

	tcase_add_test(dt_tcase(s, "streamed", setup_default), test_streamed);
	tcase_add_test(dt_tcase(s, "batches", setup_batches), test_batches_setting);
	tcase_add_test(dt_tcase(s, "no-shuffle", setup_default), test_no_shuffle);
	tcase_add_test(dt_tcase(s, "ranks", setup_default), test_ranks);
	tcase_add_test(dt_tcase(s, "cache-full", setup_small_cache), test_cache_full);
	tcase_add_test(dt_tcase(s, "corrupt", setup_corrupt), test_corrupt_blocks);
	tcase_add_test(dt_tcase(s, "page", setup_page), test_page_tier);
	tcase_add_test(dt_tcase(s, "empty", setup_tiny), test_empty_blocks);
	return s;
}

int main(void)
{
	return dt_check_main(&D, suite);
}
