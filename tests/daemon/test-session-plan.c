/* SPDX-License-Identifier: MIT */
/*
 * test-session-plan.c - a real batchd planning batches over a dataset of
 * awkward shapes: what the session's planner (daemon/session/session.c: locate,
 * group_by_block, write_table) makes of each batch is checked from the
 * outside.
 *
 * The dataset is five shards of different shapes (one sample per block,
 * a shard of one sample, fixed-size samples seven a block, 64 a block with
 * empty samples among them, one block for the whole shard), so a batch
 * crosses shards and blocks of every kind. For batch sizes 1, 7 and 256
 * and every shuffle mode, one epoch must deliver each sample once, byte
 * for byte as the pack holds it, in the sampler's order (none and global;
 * block mode's chunk is the daemon's), and the planner must group each
 * batch's samples so that every block it touches is asked of the pipeline
 * exactly once: the block reads (cache lookups and direct decodes), counted
 * over every batch the session planned, equal the distinct blocks of those
 * batches.
 *
 * A second dataset holds samples stored as several frames (PACK.md
 * §Frames) among small ones: every byte comes back as the source wrote it,
 * each frame is a block of its own that the pipeline decodes straight into
 * the batch (blocks decoded = frames + other blocks, all direct decodes
 * when each batch takes whole blocks), and the planner asks for each frame
 * once a batch under any shuffle.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <check.h>
#include <json-c/json.h>
#include <xxhash.h>

#include "daemon-testlib.h"
#include "pack-testlib.h"
#include "pipeline_priv.h"
#include "sampler.h"

static dt_daemon D;

/* Fail with the daemon's recent log (daemon-testlib.h). */
#define expect dt_expect

#define PLAN_DSET "plan"

/* The shards of PLAN_DSET, in name order: samples, sizes, kind, samples a block. */
static const struct shard_shape {
	size_t n, min, max;
	enum pt_kind kind;
	size_t per_block;
} shapes[] = {
	{ 300, 0, 200, PT_MIXED, 1 },
	{ 1, 50, 50, PT_RANDOM, 1 },
	{ 700, 64, 64, PT_RANDOM, 7 },
	{ 500, 0, 90, PT_RANDOM, 64 },
	{ 257, 10, 100, PT_TEXT, 257 },
};

#define NSHAPES ARRAY_SIZE(shapes)

static void write_plan_dataset(void)
{
	char dir[PATH_MAX], path[PATH_MAX + 16];

	dt_root_path(&D, PLAN_DSET, dir, sizeof(dir));
	ck_assert_int_eq(mkdir(dir, 0755), 0);
	for (size_t i = 0; i < NSHAPES; i++) {
		const struct shard_shape *sh = &shapes[i];
		pt_samples s;
		int fd;

		snprintf(path, sizeof(path), "%s/%c.bpk", dir, (char)('a' + i));
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		ck_assert_msg(fd >= 0, "create %s: %s", path, strerror(errno));
		pt_samples_make(&s, sh->n, sh->min, sh->max, sh->kind, 40 + i);
		ck_assert_int_eq(pt_pack_write(fd, &s, sh->per_block, NULL, 0, 1, NULL), 0);
		ck_assert_int_eq(close(fd), 0);
		pt_samples_free(&s);
	}
}

static void setup(void)
{
	dt_setup_dir();
	write_plan_dataset();
	/*
	 * What the batches' plans read is counted here: no reading ahead in
	 * file order (test-warm.c tests that).
	 */
	dt_conf_write("[io]\nfirst_pass = batches\n");
	ck_assert_msg(dt_daemon_start(&D) == 0, "batchd did not start");
}

/* ---- what the session did, from the status document ------------------------------- */

/*
 * Block reads the pipeline was asked for: each is either looked up in the
 * cache (whatever the answer) or, when it tiles its batch's payload,
 * decoded straight into the record without the cache.
 */
static uint64_t block_tasks(void)
{
	json_object *st = dt_status_json_ok();
	uint64_t n = dt_ju64(st, "cache.hits") + dt_ju64(st, "cache.misses") +
		     dt_ju64(st, "cache.waits") + dt_ju64(st, "cache.bypasses") +
		     dt_ju64(st, "pipeline.direct_decodes");

	json_object_put(st);
	return n;
}

/* The one session's published count once nothing is in flight and it stopped growing. */
static uint64_t settled_published(void)
{
	uint64_t last = UINT64_MAX;

	for (int t = 0; t < TRIES; t++) {
		json_object *st = dt_status_json_ok(), *list, *s0;
		uint64_t published, inflight;

		expect(json_object_object_get_ex(st, "sessions", &list) &&
		       json_object_array_length(list) == 1, "status: not one session");
		s0 = json_object_array_get_idx(list, 0);
		published = dt_ju64(s0, "published");
		inflight = dt_ju64(s0, "inflight");
		json_object_put(st);
		if (inflight == 0 && published == last)
			return published;
		last = inflight == 0 ? published : UINT64_MAX;
		dt_sleep_ms(10);
	}
	ck_abort_msg("the session never settled");
	return 0;
}

/* Distinct (shard, block) pairs among ids[0..n), a framed sample's every frame counted. */
static uint64_t distinct_blocks(const bp_dataset *ds, const uint64_t *ids, uint32_t n)
{
	uint64_t *keys = malloc(n * sizeof(*keys)), count = 0;

	ck_assert_ptr_nonnull(keys);
	for (uint32_t i = 0; i < n; i++) {
		bp_pack_sample ps;
		size_t shard;
		bool seen = false;

		ck_assert_int_eq(bp_dataset_locate(ds, ids[i], &shard, &ps), 0);
		ck_assert_uint_lt(ps.block, UINT64_C(1) << 40);
		keys[i] = ((uint64_t)shard << 40) | ps.block;
		for (uint32_t j = 0; j < i && !seen; j++)
			seen = keys[j] == keys[i];
		count += seen ? 0 : ps.frames;
	}
	free(keys);
	return count;
}

/* Blocks the first `batches` batches of o's schedule touch, batch by batch. */
static uint64_t planned_blocks(const dt_ref *ref, const bc_stream_opts *o, uint64_t batches)
{
	uint64_t *ids = malloc(o->batch_size * sizeof(*ids)), sum = 0, per_epoch;
	bd_sampler sp;

	ck_assert_ptr_nonnull(ids);
	dt_sampler_for(&sp, ref, o);
	per_epoch = bd_sampler_batches_per_epoch(&sp);
	for (uint64_t g = 0; g < batches; g++) {
		uint64_t batch = g % per_epoch;

		bd_sampler_batch(&sp, g / per_epoch, batch, ids);
		sum += distinct_blocks(ref->ds, ids, bd_sampler_batch_len(&sp, batch));
	}
	free(ids);
	return sum;
}

/* ---- the checks ------------------------------------------------------------------- */

/* One epoch's ids: every sample once; in the sampler's order unless block mode. */
static void expect_epoch_ids(const dt_run *run, const dt_ref *ref, const bc_stream_opts *o)
{
	uint64_t samples = bp_dataset_samples(ref->ds), *want = NULL;
	uint8_t *seen = calloc(samples, 1);
	bd_sampler sp;

	ck_assert_ptr_nonnull(seen);
	expect(run->nids == samples, "%s shuffle, batch %u: %zu samples in the epoch, not %" PRIu64,
	       bp_shuffle_name(o->shuffle), o->batch_size, run->nids, samples);
	for (size_t i = 0; i < run->nids; i++) {
		expect(run->ids[i] < samples && !seen[run->ids[i]],
		       "%s shuffle, batch %u: id %" PRIu64 " out of range or twice",
		       bp_shuffle_name(o->shuffle), o->batch_size, run->ids[i]);
		seen[run->ids[i]] = 1;
	}
	free(seen);
	if (o->shuffle == BC_SHUFFLE_BLOCK)
		return;
	dt_sampler_for(&sp, ref, o);
	want = malloc(o->batch_size * sizeof(*want));
	ck_assert_ptr_nonnull(want);
	for (size_t k = 0; k < run->nev; k++) {
		const dt_event *ev = &run->ev[k];

		ck_assert_int_eq(ev->result, 0);
		bd_sampler_batch(&sp, ev->epoch, ev->batch, want);
		for (uint32_t i = 0; i < ev->count; i++)
			expect(run->ids[ev->first + i] == want[i],
			       "%s shuffle, batch %" PRIu64 " sample %u: id %" PRIu64 ", the sampler "
			       "says %" PRIu64, bp_shuffle_name(o->shuffle), ev->batch, i,
			       run->ids[ev->first + i], want[i]);
	}
	free(want);
}

static void plan_one(bc_client *c, const char *dset, dt_ref *ref, uint32_t batch,
		     enum bc_shuffle mode)
{
	uint64_t before = block_tasks(), published;
	dt_run run = { 0 };
	bc_stream_opts o;
	bc_stream *s;
	char what[64];

	dt_opts(&o, dset, batch, mode, 3);
	s = dt_open_ok(c, &o);
	snprintf(what, sizeof(what), "%s shuffle, batch %u", bp_shuffle_name(mode), batch);
	dt_consume_ok(s, ref, bc_stream_batches_per_epoch(s), 0, &run, what);
	expect_epoch_ids(&run, ref, &o);
	if (mode != BC_SHUFFLE_BLOCK) {
		/* The session plans ahead into the next epoch: count what it planned, not what we took. */
		published = settled_published();
		expect(block_tasks() - before == planned_blocks(ref, &o, published),
		       "%s: %" PRIu64 " block reads for %" PRIu64 " batches touching %" PRIu64
		       " blocks", what, block_tasks() - before, published,
		       planned_blocks(ref, &o, published));
	}
	ck_assert_int_eq(bc_close(s), 0);
	dt_run_free(&run);
}

START_TEST(test_plan_shapes)
{
	static const uint32_t batches[] = { 1, 7, 256 };
	static const enum bc_shuffle modes[] = { BC_SHUFFLE_NONE, BC_SHUFFLE_GLOBAL,
						 BC_SHUFFLE_BLOCK };
	bc_client *c = dt_connect_ok();
	char path[PATH_MAX];
	dt_ref ref;

	ck_assert_int_eq(dt_ref_open(&ref, dt_root_path(&D, PLAN_DSET, path, sizeof(path))), 0);
	ck_assert_uint_eq(bp_dataset_shard_count(ref.ds), NSHAPES);
	for (size_t m = 0; m < ARRAY_SIZE(modes); m++)
		for (size_t b = 0; b < ARRAY_SIZE(batches); b++)
			plan_one(c, PLAN_DSET, &ref, batches[b], modes[m]);
	dt_ref_close(&ref);
	bc_disconnect(c);
}
END_TEST

/* ---- framed samples ------------------------------------------------------------------ */

#define FRAMES_DSET "framed.bpk"
#define FRAME_SIZE (UINT64_C(64) << 10)

/*
 * Small samples two a block around framed ones: 700000 random bytes (11
 * frames), 1 MiB + 5 of text (17), 200000 of text (4); a sample of exactly
 * the frame size stays one block.
 */
static void framed_samples(pt_samples *s)
{
	static const uint64_t sizes[] = { 100, 700000, 33, (UINT64_C(1) << 20) + 5, 0, 200000,
					  FRAME_SIZE, 300, 77 };

	/* The odd ones random. */
	pt_samples_sized(s, sizes, ARRAY_SIZE(sizes), UINT64_C(0xaaaaaaaaaaaaaaaa), 2024);
}

/* No block cache (so whole blocks decode straight into batches) and four decode workers. */
static void setup_frames(void)
{
	char path[PATH_MAX];
	pt_samples s;
	int fd;

	dt_conf_start("[memory]\ncache = 0\n[decode]\nthreads = 4\n");
	dt_root_path(&D, FRAMES_DSET, path, sizeof(path));
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	ck_assert_msg(fd >= 0, "create %s: %s", path, strerror(errno));
	framed_samples(&s);
	ck_assert_int_eq(pt_pack_write_framed(fd, &s, 2, FRAME_SIZE, NULL, 0, 1, NULL), 0);
	ck_assert_int_eq(close(fd), 0);
	pt_samples_free(&s);
}

/* Every sample the run took hashes as the source's bytes do. */
static void expect_source_bytes(const dt_run *run, const pt_samples *src)
{
	for (size_t i = 0; i < run->nids; i++) {
		uint64_t id = run->ids[i];

		ck_assert_uint_lt(id, src->n);
		expect(run->hashes[i] == XXH64(pt_sample(src, id), src->sizes[id], 0),
		       "sample %" PRIu64 " (%" PRIu64 " bytes) differs from the source", id,
		       src->sizes[id]);
	}
}

/*
 * One batch of the whole dataset, in order: each batch decodes every block
 * once, frames included, each straight into the batch. Then the planner
 * over framed samples under every shuffle, batches of 1 and 3.
 */
/*
 * Jobs in flight are charged a task and a piece per frame: against the
 * same session on a dataset of one-sample blocks (n blocks a batch), the
 * framed one (blocks a batch) is charged that many more for each of its
 * jobs (slots of them: batches of n samples need fewer than
 * BD_SESSION_JOB_PIECES pieces).
 */
static void expect_frames_charged(bc_client *c, uint32_t n, uint64_t blocks)
{
	bc_stream_opts o;
	bc_stream *framed, *plain;
	uint64_t fh, ph, want, slots;

	/* Earlier sessions on these datasets gone from the status; then the same depth for both. */
	ck_assert(dt_wait_sessions(D.sock, 0, TRIES));
	dt_opts(&o, FRAMES_DSET, n, BC_SHUFFLE_NONE, 1);
	o.prefetch = 8;
	framed = dt_open_ok(c, &o);
	slots = dt_session_u64(FRAMES_DSET, "slots");
	dt_opts(&o, DSET_ONE, n, BC_SHUFFLE_NONE, 1);
	o.prefetch = 8;
	plain = dt_open_ok(c, &o);
	fh = dt_session_u64(FRAMES_DSET, "memory_heap");
	ph = dt_session_u64(DSET_ONE, "memory_heap");
	ck_assert_uint_eq(dt_session_u64(DSET_ONE, "slots"), slots);
	want = slots * (blocks - n) * (sizeof(bd_task) + sizeof(bd_piece));
	expect(fh >= ph + want, "framed session charged %" PRIu64 " bytes of heap, one-sample "
	       "blocks %" PRIu64 ": %" PRIu64 " jobs of %" PRIu64 " blocks need %" PRIu64 " more", fh, ph,
	       slots, blocks, want);
	ck_assert_int_eq(bc_close(plain), 0);
	ck_assert_int_eq(bc_close(framed), 0);
}

START_TEST(test_plan_frames)
{
	static const enum bc_shuffle modes[] = { BC_SHUFFLE_NONE, BC_SHUFFLE_GLOBAL,
						 BC_SHUFFLE_BLOCK };
	uint64_t decoded = dt_status_u64("pipeline.blocks_decoded");
	uint64_t direct = dt_status_u64("pipeline.direct_decodes"), published, blocks;
	uint64_t copied = dt_status_u64("pipeline.copied_bytes");
	bc_client *c = dt_connect_ok();
	char path[PATH_MAX];
	dt_run run = { 0 };
	pt_samples src;
	bc_stream_opts o;
	bc_stream *st;
	dt_ref ref;

	framed_samples(&src);
	ck_assert_int_eq(dt_ref_open(&ref, dt_root_path(&D, FRAMES_DSET, path, sizeof(path))), 0);
	blocks = bp_dataset_blocks(ref.ds);
	ck_assert_uint_eq(bp_dataset_framed(ref.ds), 3);
	ck_assert_uint_eq(bp_dataset_max_frames(ref.ds), 17);
	/* 11 + 17 + 4 frames, and blocks of two whole samples: [0] [2] [4] [6 7] [8]. */
	ck_assert_uint_eq(blocks, 32 + 5);
	dt_opts(&o, FRAMES_DSET, (uint32_t)src.n, BC_SHUFFLE_NONE, 1);
	st = dt_open_ok(c, &o);
	dt_consume_ok(st, &ref, 3, 0, &run, "framed, one batch an epoch");
	ck_assert_uint_eq(run.nids, 3 * src.n);
	expect_source_bytes(&run, &src);
	published = settled_published();
	expect(dt_status_u64("pipeline.blocks_decoded") - decoded == published * blocks,
	       "%" PRIu64 " blocks decoded for %" PRIu64 " batches of %" PRIu64 " blocks",
	       dt_status_u64("pipeline.blocks_decoded") - decoded, published, blocks);
	expect(dt_status_u64("pipeline.direct_decodes") - direct == published * blocks,
	       "%" PRIu64 " direct decodes for %" PRIu64 " batches of %" PRIu64 " blocks",
	       dt_status_u64("pipeline.direct_decodes") - direct, published, blocks);
	/* Decoded where the batch wants them: not a byte copied after. */
	expect(dt_status_u64("pipeline.copied_bytes") == copied, "%" PRIu64 " bytes copied "
	       "after direct decodes", dt_status_u64("pipeline.copied_bytes") - copied);
	ck_assert_int_eq(bc_close(st), 0);
	dt_run_free(&run);
	for (size_t m = 0; m < ARRAY_SIZE(modes); m++) {
		plan_one(c, FRAMES_DSET, &ref, 1, modes[m]);
		plan_one(c, FRAMES_DSET, &ref, 3, modes[m]);
	}
	expect_frames_charged(c, (uint32_t)src.n, blocks);
	dt_ref_close(&ref);
	pt_samples_free(&src);
	bc_disconnect(c);
}
END_TEST

static Suite *plan_suite(void)
{
	Suite *s = suite_create("session-plan");

	tcase_add_test(dt_tcase(s, "shapes", setup), test_plan_shapes);
	tcase_add_test(dt_tcase(s, "frames", setup_frames), test_plan_frames);
	return s;
}

int main(void)
{
	return dt_check_main(&D, plan_suite);
}
