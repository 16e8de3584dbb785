/* SPDX-License-Identifier: MIT */
/*
 * test-tiers.c - where a real batchd serves a dataset from after its first
 * epoch ([memory] tier, dataset.h): with the defaults a dataset whose
 * decoded bytes fit the cache is in the ram tier, and a second epoch reads
 * and decodes nothing (the pipeline's blocks_read and blocks_decoded do
 * not move) while every sample still equals the pack's; forced page, or no
 * cache, decodes every epoch again; status names the tier of each session
 * and the daemon's setting. Blocks that tile a batch (no shuffle over
 * one-sample blocks) are cached too in the ram tier. Global shuffle over
 * multi-sample blocks that no cache keeps is said at open (log and status:
 * samples per block times, with the block size to repack with) and shows
 * in batchd_decode_amplification; in the ram tier it is not. In the direct
 * tier, sessions on one version share the blocks their batches take whole:
 * two trainers with the same seed read and decode about one's worth. A
 * ram-tier version whose blocks are not in the page cache is read with
 * O_DIRECT (where the file system allows it); one that is, buffered.
 *
 * BATCHD and BATCHD_PACK name the binaries (meson sets them).
 */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <check.h>
#include <json-c/json.h>

#include "daemon-testlib.h"
#include "pack-testlib.h"

static dt_daemon D;

#define expect dt_expect

/* The defaults: budget and cache auto, tier auto. */
static void setup_auto(void)
{
	dt_conf_start("");
}

static void setup_page(void)
{
	dt_conf_start("[memory]\ntier = page\n");
}

static void setup_direct(void)
{
	dt_conf_start("[memory]\ntier = direct\n");
}

/*
 * The defaults, and BIG: 2048 incompressible 4 KiB samples one per block
 * (8 MiB stored), large beside the readahead that loading its header and
 * index brings into the page cache.
 */
#define BIG "big.bpk"

static void setup_big(void)
{
	char path[PATH_MAX];
	pt_samples s;
	int fd;

	dt_conf_start("");
	pt_samples_make(&s, 2048, 4096, 4096, PT_RANDOM, 5);
	fd = open(dt_root_path(&D, BIG, path, sizeof(path)), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC,
		  0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pt_pack_write(fd, &s, 1, NULL, 0, 1, NULL), 0);
	close(fd);
	pt_samples_free(&s);
}

static void setup_no_cache(void)
{
	dt_conf_start("[memory]\ncache = 0\n");
}

/* Empty samples are blocks with nothing to read or decode: decoded bytes count, not blocks. */
typedef struct counts {
	uint64_t read, decoded, hits;
} counts;

static counts pipeline_counts(void)
{
	json_object *st = dt_status_json_ok();
	counts c = { dt_ju64(st, "pipeline.blocks_read"), dt_ju64(st, "pipeline.raw_bytes"),
		     dt_ju64(st, "cache.hits") };

	json_object_put(st);
	return c;
}

/* The counts once the pipeline's read-ahead (the session's prefetch) has stopped moving them. */
static counts settled_counts(void)
{
	counts a = pipeline_counts(), b;

	for (int i = 0; i < 100; i++) {
		dt_sleep_ms(100);
		b = pipeline_counts();
		if (b.read == a.read && b.decoded == a.decoded && b.hits == a.hits)
			return a;
		a = b;
	}
	ck_abort_msg("the pipeline's counts were still moving after 10 s");
	return a;
}

/* Field key of the status's one session (borrowed from st). */
static json_object *session_field(json_object *st, const char *key)
{
	json_object *sessions, *v;

	ck_assert(json_object_object_get_ex(st, "sessions", &sessions));
	ck_assert_int_eq(json_object_array_length(sessions), 1);
	ck_assert_msg(json_object_object_get_ex(json_object_array_get_idx(sessions, 0), key, &v),
		      "the session has no \"%s\" in the status", key);
	return v;
}

/* The session's "tier" in the status, and the daemon's "tier" setting, into buffers. */
static void tiers(char *session, char *daemon, size_t len)
{
	json_object *st = dt_status_json_ok(), *v;

	snprintf(session, len, "%s", json_object_get_string(session_field(st, "tier")));
	ck_assert(json_object_object_get_ex(st, "tier", &v));
	snprintf(daemon, len, "%s", json_object_get_string(v));
	json_object_put(st);
}

/*
 * Two epochs of dataset name, every sample checked; the counts after the
 * first and after the second, and the tiers status showed meanwhile.
 */
static void two_epochs(const char *name, enum bc_shuffle mode, counts *first, counts *second,
		       char *tier, char *setting, size_t len, uint64_t *raw_bytes)
{
	bc_client *c = dt_connect_ok();
	bc_stream_opts o;
	bc_stream *s;
	dt_run run = { 0 };
	dt_ref ref;
	const size_t per_epoch = DSET_SAMPLES / 50;

	dt_ref_ok(&ref, name);
	*raw_bytes = bp_dataset_raw_bytes(ref.ds);
	dt_opts(&o, name, 50, mode, 11);
	s = dt_open_ok(c, &o);
	dt_consume_ok(s, &ref, per_epoch, 0, &run, "epoch 1");
	tiers(tier, setting, len);
	/* The pipeline reads ahead into the next epoch (its prefetch): both counts include as much. */
	*first = settled_counts();
	dt_consume_ok(s, &ref, per_epoch, 0, &run, "epoch 2");
	*second = settled_counts();
	expect(run.batches == 2 * per_epoch && run.nids == 2 * DSET_SAMPLES && run.epoch_ends == 1,
	       "%zu batches, %zu samples and %zu epoch ends delivered over two epochs",
	       run.batches, run.nids, run.epoch_ends);
	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
	dt_run_free(&run);
	dt_ref_close(&ref);
}

START_TEST(test_ram_second_epoch_free)
{
	/* Global shuffle over 16 KiB blocks, and no shuffle over blocks a batch takes whole. */
	static const struct {
		const char *name;
		enum bc_shuffle mode;
	} cases[] = { { DSET_BLK, BC_SHUFFLE_GLOBAL }, { DSET_ONE, BC_SHUFFLE_NONE } };
	char tier[32], setting[32];
	uint64_t raw;
	counts a, b;

	two_epochs(cases[_i].name, cases[_i].mode, &a, &b, tier, setting, sizeof(tier), &raw);
	ck_assert_str_eq(setting, "auto");
	expect(!strcmp(tier, "ram"), "a 1000-sample dataset is in the %s tier by default", tier);
	expect(a.read > 0 && a.decoded > 0, "the first epoch read %" PRIu64 " blocks and decoded %"
	       PRIu64 " bytes", a.read, a.decoded);
	expect(b.read == a.read && b.decoded == a.decoded,
	       "the second epoch read %" PRIu64 " blocks and decoded %" PRIu64 " bytes in the ram "
	       "tier", b.read - a.read, b.decoded - a.decoded);
	expect(b.hits > a.hits, "the second epoch was not served from the cache");
}
END_TEST

/* Forced page tier, or no cache: the second epoch decodes again (and is still right). */
static void decodes_again(const char *want_tier, const char *want_setting)
{
	char tier[32], setting[32];
	uint64_t raw;
	counts a, b;

	two_epochs(DSET_ONE, BC_SHUFFLE_NONE, &a, &b, tier, setting, sizeof(tier), &raw);
	ck_assert_str_eq(setting, want_setting);
	expect(!strcmp(tier, want_tier), "the session is in the %s tier, not %s", tier, want_tier);
	/* Both counts include the same read-ahead: an epoch apart (empty samples decode nothing). */
	expect(b.decoded >= a.decoded + raw * 3 / 4,
	       "the second epoch decoded %" PRIu64 " bytes of %" PRIu64, b.decoded - a.decoded, raw);
}

START_TEST(test_page_forced)
{
	decodes_again("page", "page");
}
END_TEST

START_TEST(test_no_cache)
{
	decodes_again("page", "auto");
}
END_TEST

/* The amplification a session should expect, from its status. */
static double session_amplification(void)
{
	json_object *st = dt_status_json_ok();
	double amp = json_object_get_double(session_field(st, "decode_amplification"));

	json_object_put(st);
	return amp;
}

/*
 * Global shuffle over multi-sample blocks with no cache to keep them: said
 * at open (log, status) with the block size to repack with; then measured.
 */
START_TEST(test_amplification)
{
	bc_client *c = dt_connect_ok();
	bc_stream_opts o;
	bc_stream *s;
	dt_run run = { 0 };
	dt_ref ref;
	double per_block, amp;
	char *text = NULL;
	const char *m;

	dt_ref_ok(&ref, DSET_BLK);
	per_block = (double)bp_dataset_samples(ref.ds) / (double)bp_dataset_blocks(ref.ds);
	ck_assert_double_gt(per_block, 2.0);
	dt_opts(&o, DSET_BLK, 50, BC_SHUFFLE_GLOBAL, 3);
	s = dt_open_ok(c, &o);
	amp = session_amplification();
	expect(amp > per_block - 0.01 && amp < per_block + 0.01,
	       "status expects %.2fx for global shuffle over %.2f samples per block and no cache",
	       amp, per_block);
	expect(dt_log_contains(&D, "will be decoded; repack with batchd-pack create --block-size"),
	       "the open did not say what to change");
	dt_consume_ok(s, &ref, DSET_SAMPLES / 50, 0, &run, "one epoch");
	ck_assert_int_eq(bc_close(s), 0);
	/* Measured: well over one decoded byte per delivered byte. */
	ck_assert_int_eq(bc_metrics(c, &text), 0);
	m = strstr(text, "\nbatchd_decode_amplification ");
	expect(m && strtod(m + strlen("\nbatchd_decode_amplification "), NULL) > 2.0,
	       "batchd_decode_amplification is not over 2 after a global epoch without a cache");
	free(text);
	bc_disconnect(c);
	dt_run_free(&run);
	dt_ref_close(&ref);
}
END_TEST

/* The same in the ram tier: nothing to warn about. */
START_TEST(test_no_amplification)
{
	bc_client *c = dt_connect_ok();
	bc_stream_opts o;
	bc_stream *s;

	dt_opts(&o, DSET_BLK, 50, BC_SHUFFLE_GLOBAL, 3);
	s = dt_open_ok(c, &o);
	expect(session_amplification() == 1.0, "the ram tier expects amplification");
	expect(!dt_log_contains(&D, "will be decoded"), "the ram tier warned of amplification");
	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
}
END_TEST

/*
 * The direct tier keeps no dataset whole, but two sessions with one seed
 * share blocks their batches take whole (no shuffle over one-sample
 * blocks, which a lone session decodes straight into its batch): read and
 * decoded once, through the cache, while a third session holds the
 * version open from the start. Unshared, the epoch would cost each of
 * the two its 1000 blocks.
 */
START_TEST(test_direct_shared)
{
	bc_client *c = dt_connect_ok();
	bc_stream_opts o;
	bc_stream *hold, *s[2];
	dt_run run[2] = { { 0 }, { 0 } }, hrun = { 0 };
	dt_ref ref;
	counts before, after;
	char tier[32], setting[32];
	const size_t per_epoch = DSET_SAMPLES / 50;

	dt_ref_ok(&ref, DSET_ONE);
	dt_opts(&o, DSET_ONE, 1, BC_SHUFFLE_NONE, 1);
	hold = dt_open_ok(c, &o);
	tiers(tier, setting, sizeof(tier));
	ck_assert_str_eq(tier, "direct");
	before = settled_counts();
	dt_opts(&o, DSET_ONE, 50, BC_SHUFFLE_NONE, 5);
	s[0] = dt_open_ok(c, &o);
	s[1] = dt_open_ok(c, &o);
	/* Side by side, a batch at a time: one loads a block, the other hits or waits on it. */
	for (size_t b = 0; b < per_epoch; b++)
		for (int i = 0; i < 2; i++)
			dt_consume_ok(s[i], &ref, 1, 0, &run[i], "a sharing session");
	dt_consume_ok(hold, &ref, 1, 0, &hrun, "the holding session");
	after = settled_counts();
	for (int i = 0; i < 2; i++) {
		expect(run[i].nids == DSET_SAMPLES, "session %d took %zu samples", i, run[i].nids);
		ck_assert_int_eq(bc_close(s[i]), 0);
		dt_run_free(&run[i]);
	}
	/* One epoch for both, plus their read-ahead into the next (shared too). */
	expect(after.read - before.read < DSET_SAMPLES * 5 / 4,
	       "two sessions with one seed read %" PRIu64 " blocks for a 1000-block epoch",
	       after.read - before.read);
	expect(after.hits - before.hits >= DSET_SAMPLES * 3 / 4,
	       "the second session hit the cache %" PRIu64 " times", after.hits - before.hits);
	ck_assert_int_eq(bc_close(hold), 0);
	bc_disconnect(c);
	dt_run_free(&hrun);
	dt_ref_close(&ref);
}
END_TEST

/* Drop path's pages from the page cache. @return whether mincore then finds none of them. */
static bool evict(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	unsigned char *vec;
	bool none = true;
	void *map;
	size_t pages;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(fstat(fd, &st), 0);
	ck_assert_int_eq(fdatasync(fd), 0);
	ck_assert_int_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	pages = ((size_t)st.st_size + 4095) / 4096;
	vec = malloc(pages);
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	ck_assert(vec && map != MAP_FAILED);
	ck_assert_int_eq(mincore(map, (size_t)st.st_size, vec), 0);
	for (size_t i = 0; i < pages / 2; i++)
		none &= !(vec[i] & 1);
	munmap(map, (size_t)st.st_size);
	free(vec);
	close(fd);
	return none;
}

/* Open name and close it; the log's word for how the version loaded then reads. */
static void expect_reads(bc_client *c, const char *name, const char *how)
{
	bc_stream_opts o;
	bc_stream *s;
	char want[128];

	dt_opts(&o, name, 10, BC_SHUFFLE_NONE, 1);
	s = dt_open_ok(c, &o);
	ck_assert_int_eq(bc_close(s), 0);
	snprintf(want, sizeof(want), "%s reads", how);
	expect(dt_log_contains(&D, want), "dataset %s was not loaded with %s", name, want);
}

START_TEST(test_ram_reads)
{
	bc_client *c = dt_connect_ok();
	char path[PATH_MAX];
	bool evicted, direct;
	int fd;

	dt_root_path(&D, BIG, path, sizeof(path));
	evicted = evict(path);
	fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
	direct = fd >= 0;
	if (fd >= 0)
		close(fd);
	if (!evicted || !direct)
		printf("NOTE: %s: %s; the ram tier reads it buffered\n", path,
		       !evicted ? "the page cache keeps its pages" : "no O_DIRECT here");
	/* First, so that the log's only ram-tier line is BIG's. */
	expect_reads(c, BIG, evicted && direct ? "tier ram, O_DIRECT" : "tier ram, buffered");
	/* Just written: in the page cache, read from there. */
	if (evicted && direct)
		expect_reads(c, DSET_ONE, "tier ram, buffered");
	bc_disconnect(c);
}
END_TEST

static Suite *tiers_suite(void)
{
	Suite *s = suite_create("tiers");
	TCase *tc = dt_tcase(s, "ram", setup_auto);

	tcase_add_loop_test(tc, test_ram_second_epoch_free, 0, 2);
	tcase_add_test(dt_tcase(s, "page", setup_page), test_page_forced);
	tcase_add_test(dt_tcase(s, "no_cache", setup_no_cache), test_no_cache);
	tcase_add_test(dt_tcase(s, "direct_shared", setup_direct), test_direct_shared);
	tcase_add_test(dt_tcase(s, "ram_reads", setup_big), test_ram_reads);
	tcase_add_test(dt_tcase(s, "amplification", setup_no_cache), test_amplification);
	tcase_add_test(dt_tcase(s, "no_amplification", setup_auto), test_no_amplification);
	return s;
}

int main(void)
{
	return dt_check_main(&D, tiers_suite);
}
