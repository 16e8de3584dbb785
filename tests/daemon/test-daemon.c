/* SPDX-License-Identifier: MIT */
/*
 * test-daemon.c - the integration suite: a real batchd on a temporary
 * socket, driven through libbatchclient, checked against the packs on
 * disk.
 *
 * Each TCase is one behaviour a trainer relies on: every epoch is the
 * dataset exactly once across ranks (plus the documented padding); orders
 * are reproducible and resumable; the epoch boundary is announced once;
 * sessions run side by side; both I/O engines agree; held batches stay
 * intact; options that do not fit are refused with -EINVAL. Every delivered
 * sample is compared byte for byte with bp_sample_reader_get() on the
 * same pack, and every fixture ends by stopping the daemon with SIGTERM
 * and asserting it exits 0, so a clean shutdown (and, in sanitizer
 * builds, a leak-free one) is tested every time. What goes wrong in one
 * session and must cost that session alone (a corrupt block, a dead
 * client, refused paths, abusive messages, hostile shared memory) is
 * test-daemon-isolation.c; both start their daemon through
 * daemon-fixture.h.
 *
 * The datasets (1000 samples of 0..4 KiB, some compressible: one sample per
 * block, 16 KiB blocks, and 16 KiB blocks in three shards) are made once
 * in main() with batchd-pack; see daemon-testlib.h. BATCHD and BATCHD_PACK
 * name the binaries (meson sets them).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>

#include "daemon-fixture.h"
#include "daemon-testlib.h"

static char E[2048];             /* why dt_* failed */

/* ---- helpers ------------------------------------------------------------------ */

/* Do two runs hold the same batches (epoch, index, ids, bytes), from event a0 and b0 on? */
static void expect_same_batches(const dt_run *a, size_t a0, const dt_run *b, size_t b0,
				const char *what)
{
	size_t i = a0, j = b0, n = 0;

	for (;;) {
		while (i < a->nev && a->ev[i].result != 0)
			i++;
		while (j < b->nev && b->ev[j].result != 0)
			j++;
		if (i == a->nev || j == b->nev)
			break;
		expect(a->ev[i].epoch == b->ev[j].epoch && a->ev[i].batch == b->ev[j].batch &&
		       a->ev[i].count == b->ev[j].count,
		       "%s: batch %zu is (%" PRIu64 ", %" PRIu64 ", %u samples) vs (%" PRIu64 ", %"
		       PRIu64 ", %u samples)", what, n, a->ev[i].epoch, a->ev[i].batch,
		       a->ev[i].count, b->ev[j].epoch, b->ev[j].batch, b->ev[j].count);
		for (uint32_t k = 0; k < a->ev[i].count; k++) {
			size_t x = a->ev[i].first + k, y = b->ev[j].first + k;

			expect(a->ids[x] == b->ids[y] && a->hashes[x] == b->hashes[y],
			       "%s: batch %zu sample %u: id %" PRIu64 " vs %" PRIu64, what, n, k,
			       a->ids[x], b->ids[y]);
		}
		i++, j++, n++;
	}
	expect(i == a->nev && j == b->nev, "%s: one run has more batches than the other", what);
}

/* The ids of one epoch of a run, in order (caller frees). */
static uint64_t *epoch_ids(const dt_run *run, uint64_t epoch, size_t *ret_n)
{
	uint64_t *ids = calloc(run->nids + 1, sizeof(*ids));
	size_t n = 0;

	ck_assert_ptr_nonnull(ids);
	for (size_t k = 0; k < run->nev; k++)
		if (run->ev[k].result == 0 && run->ev[k].epoch == epoch)
			for (uint32_t i = 0; i < run->ev[k].count; i++)
				ids[n++] = run->ids[run->ev[k].first + i];
	*ret_n = n;
	return ids;
}

static bool same_ids(const uint64_t *a, size_t an, const uint64_t *b, size_t bn)
{
	return an == bn && memcmp(a, b, an * sizeof(*a)) == 0;
}

/* ---- 1. every epoch is a partition of the dataset across ranks ------------------- */

/* Consume one epoch of every rank; check the union against the documented split. */
static void check_partition(bc_client *c, dt_ref *ref, const char *name, uint32_t world,
			    bool drop, enum bc_shuffle mode)
{
	const uint32_t B = 13;
	const uint64_t n = DSET_SAMPLES;
	uint64_t per = drop ? n / world : (n + world - 1) / world;
	uint64_t nb = drop ? per / B : (per + B - 1) / B;
	uint64_t *pos = calloc(world * per, sizeof(*pos));   /* by global epoch position */
	uint32_t *seen = calloc(n, sizeof(*seen));
	size_t delivered = 0;
	char what[160];

	ck_assert_ptr_nonnull(pos);
	ck_assert_ptr_nonnull(seen);
	for (uint32_t rank = 0; rank < world; rank++) {
		bc_stream_opts o;
		bc_stream *s;
		dt_run run = { 0 };

		snprintf(what, sizeof(what), "%s, %s shuffle, world %u, rank %u%s", name,
			 bp_shuffle_name(mode), world, rank, drop ? ", drop_last" : "");
		dt_opts(&o, name, B, mode, 1234 + mode);
		o.rank = rank;
		o.world = world;
		o.drop_last = drop;
		s = dt_open_ok(c, &o);
		expect(bc_stream_batches_per_epoch(s) == nb, "%s: %" PRIu64 " batches per epoch, "
		       "expected %" PRIu64, what, bc_stream_batches_per_epoch(s), nb);
		expect(bc_stream_samples(s) == n && bc_stream_fingerprint(s) ==
		       bp_dataset_fingerprint(ref->ds), "%s: wrong samples or fingerprint", what);
		dt_consume_ok(s, ref, nb + 1, DT_STOP_EPOCH_END, &run, what);
		expect(run.batches == nb && run.epoch_ends == 1 &&
		       run.ev[run.nev - 1].result == BC_EPOCH_END,
		       "%s: %zu batches before the epoch ended, expected %" PRIu64, what, run.batches,
		       nb);
		for (uint64_t k = 0; k < nb; k++) {
			uint32_t want = drop || k + 1 < nb ? B : (uint32_t)(per - (nb - 1) * B);

			expect(run.ev[k].epoch == 0 && run.ev[k].batch == k && run.ev[k].count == want,
			       "%s: batch %" PRIu64 " is (%" PRIu64 ", %" PRIu64 ") with %u samples, "
			       "expected %u", what, k, run.ev[k].epoch, run.ev[k].batch,
			       run.ev[k].count, want);
		}
		expect_sampler_order(&run, ref, &o);
		for (size_t i = 0; i < run.nids; i++) {
			/* Striped: step k deals B*world positions, rank r the r-th run of len. */
			uint64_t k = i / B, len = drop || k + 1 < nb ? B : per - (nb - 1) * B;

			expect(run.ids[i] < n, "%s: id %" PRIu64 " out of range", what, run.ids[i]);
			pos[k * B * world + rank * len + i % B] = run.ids[i];
			seen[run.ids[i]]++;
		}
		delivered += run.nids;
		dt_run_free(&run);
		ck_assert_int_eq(bc_close(s), 0);
	}

	snprintf(what, sizeof(what), "%s, %s shuffle, world %u%s", name, bp_shuffle_name(mode), world,
		 drop ? ", drop_last" : "");
	if (drop) {
		expect(delivered == world * nb * B, "%s: %zu samples delivered, expected %" PRIu64,
		       what, delivered, world * nb * B);
		for (uint64_t id = 0; id < n; id++)
			expect(seen[id] <= 1, "%s: id %" PRIu64 " delivered %u times", what, id,
			       seen[id]);
	} else {
		/* Positions [0, n) are a permutation; [n, world * per) repeat the first ones. */
		uint64_t pad = world * per - n;

		expect(delivered == world * per, "%s: %zu samples delivered, expected %" PRIu64,
		       what, delivered, world * per);
		for (uint64_t k = 0; k < pad; k++) {
			expect(pos[n + k] == pos[k], "%s: padding sample %" PRIu64 " is id %" PRIu64
			       ", expected the epoch's first ids (%" PRIu64 ")", what, k, pos[n + k],
			       pos[k]);
			seen[pos[k]]--;
		}
		for (uint64_t id = 0; id < n; id++)
			expect(seen[id] == 1, "%s: id %" PRIu64 " delivered %u times (not counting "
			       "padding)", what, id, seen[id]);
	}
	if (mode == BC_SHUFFLE_NONE)
		for (uint64_t p = 0; p < n && p < world * per; p++)
			if (!drop || p < nb * B * world)
				expect(pos[p] == p, "%s: position %" PRIu64 " holds id %" PRIu64, what,
				       p, pos[p]);
	free(pos);
	free(seen);
}

START_TEST(test_epoch_partition)
{
	static const uint32_t worlds[] = { 1, 2, 3, 8 };
	const char *name = datasets[_i];
	bc_client *c = dt_connect_ok();
	dt_ref ref;

	dt_ref_ok(&ref, name);
	for (size_t w = 0; w < ARRAY_SIZE(worlds); w++)
		for (int drop = 0; drop < 2; drop++)
			for (int mode = BC_SHUFFLE_NONE; mode <= BC_SHUFFLE_BLOCK; mode++)
				check_partition(c, &ref, name, worlds[w], drop, (enum bc_shuffle)mode);
	dt_ref_close(&ref);
	bc_disconnect(c);
}
END_TEST

/* ---- 2. orders are reproducible, and change with epoch and seed ------------------- */

static void record(bc_client *c, dt_ref *ref, enum bc_shuffle mode, uint64_t seed,
		   uint64_t epochs, dt_run *run)
{
	bc_stream_opts o;
	bc_stream *s;
	char what[64];

	dt_opts(&o, DSET_BLK, 50, mode, seed);
	s = dt_open_ok(c, &o);
	snprintf(what, sizeof(what), "%s shuffle, seed %" PRIu64, bp_shuffle_name(mode), seed);
	dt_consume_ok(s, ref, epochs * bc_stream_batches_per_epoch(s), 0, run, what);
	expect_sampler_order(run, ref, &o);
	ck_assert_int_eq(bc_close(s), 0);
}

START_TEST(test_determinism)
{
	dt_run first[2] = { 0 }, other[2] = { 0 }, again[2] = { 0 };
	bc_client *c = dt_connect_ok(), *live_c;
	bc_stream_opts o;
	bc_stream *live;
	bc_batch *b;
	dt_ref ref;
	int r;

	dt_ref_ok(&ref, DSET_BLK);
	for (int m = 0; m < 2; m++) {
		enum bc_shuffle mode = m ? BC_SHUFFLE_BLOCK : BC_SHUFFLE_GLOBAL;

		record(c, &ref, mode, 7, 2, &first[m]);
		record(c, &ref, mode, 8, 1, &other[m]);
	}
	bc_disconnect(c);

	/* A session still open at SIGTERM: the daemon must still exit 0, the stream end. */
	live_c = dt_connect_ok();
	dt_opts(&o, DSET_BLK, 50, BC_SHUFFLE_GLOBAL, 7);
	o.prefetch = 2;
	live = dt_open_ok(live_c, &o);
	ck_assert_int_eq(bc_next(live, &b, WAIT_MS), 0);
	ck_assert_int_eq(bc_release(b), 0);
	ck_assert_msg(dt_daemon_stop(&D) == 0, "batchd did not exit 0 with a session open");
	for (int i = 0; i < 100 && (r = bc_next(live, &b, WAIT_MS)) == 0; i++)
		bc_release(b);
	expect(r == -ESHUTDOWN, "a stream of a stopped daemon: %s (%d), expected -ESHUTDOWN",
	       bc_strerror(r), r);
	ck_assert_int_eq(bc_close(live), 0);
	bc_disconnect(live_c);

	ck_assert_msg(dt_daemon_start(&D) == 0, "batchd did not restart");
	c = dt_connect_ok();
	for (int m = 0; m < 2; m++) {
		enum bc_shuffle mode = m ? BC_SHUFFLE_BLOCK : BC_SHUFFLE_GLOBAL;
		size_t n0, n1, n8, na;
		uint64_t *e0, *e1, *s8, *ea;

		record(c, &ref, mode, 7, 2, &again[m]);
		e0 = epoch_ids(&first[m], 0, &n0);
		e1 = epoch_ids(&first[m], 1, &n1);
		s8 = epoch_ids(&other[m], 0, &n8);
		ea = epoch_ids(&again[m], 0, &na);
		ck_assert_uint_eq(n0, DSET_SAMPLES);
		expect(same_ids(e0, n0, ea, na), "%s shuffle: epoch 0 differs after a restart",
		       bp_shuffle_name(mode));
		expect_same_batches(&first[m], 0, &again[m], 0, "two epochs before and after a restart");
		expect(!same_ids(e0, n0, e1, n1), "%s shuffle: epochs 0 and 1 have the same order",
		       bp_shuffle_name(mode));
		expect(!same_ids(e0, n0, s8, n8), "%s shuffle: seeds 7 and 8 give the same order",
		       bp_shuffle_name(mode));
		free(e0), free(e1), free(s8), free(ea);
		dt_run_free(&first[m]);
		dt_run_free(&other[m]);
		dt_run_free(&again[m]);
	}
	bc_disconnect(c);
	dt_ref_close(&ref);
}
END_TEST

/* ---- 3. resume at a position yields exactly what would have come next --------------- */

static const struct resume_case {
	const char *dataset;
	enum bc_shuffle mode;
	uint32_t rank, world;
	bool drop;
} resume_cases[] = {
	{ DSET_SHARDS, BC_SHUFFLE_GLOBAL, 1, 2, false },
	{ DSET_BLK, BC_SHUFFLE_BLOCK, 0, 3, true },
	{ DSET_ONE, BC_SHUFFLE_NONE, 2, 3, false },
};

START_TEST(test_resume)
{
	const struct resume_case *rc = &resume_cases[_i];
	bc_client *c = dt_connect_ok();
	bc_stream_opts o;
	bc_stream *s;
	dt_run full = { 0 };
	dt_ref ref;
	uint64_t nb, total, marks[4], at_epoch[4], at_batch[4];
	size_t at_event[4], done = 0;

	dt_ref_ok(&ref, rc->dataset);
	dt_opts(&o, rc->dataset, 32, rc->mode, 99);
	o.rank = rc->rank;
	o.world = rc->world;
	o.drop_last = rc->drop;
	s = dt_open_ok(c, &o);
	nb = bc_stream_batches_per_epoch(s);
	ck_assert_uint_ge(nb, 4);
	total = nb + nb / 2;
	/* Inside epoch 0, just before, at and just after the boundary. */
	marks[0] = 3, marks[1] = nb - 1, marks[2] = nb, marks[3] = nb + 1;
	for (int m = 0; m < 4; m++) {
		dt_consume_ok(s, &ref, marks[m] - done, 0, &full, "first run");
		done = marks[m];
		bc_stream_position(s, &at_epoch[m], &at_batch[m]);
		expect(at_epoch[m] == done / nb && at_batch[m] == done % nb,
		       "after %zu batches bc_stream_position says (%" PRIu64 ", %" PRIu64 ")", done,
		       at_epoch[m], at_batch[m]);
		at_event[m] = full.nev;
	}
	dt_consume_ok(s, &ref, total - done, 0, &full, "first run");
	expect(full.epoch_ends == 1, "1.5 epochs announced %zu epoch ends", full.epoch_ends);
	expect_sampler_order(&full, &ref, &o);
	ck_assert_int_eq(bc_close(s), 0);

	for (int m = 0; m < 4; m++) {
		dt_run rest = { 0 };
		char what[96];

		o.start_epoch = at_epoch[m];
		o.start_batch = at_batch[m];
		s = dt_open_ok(c, &o);
		snprintf(what, sizeof(what), "resumed at (%" PRIu64 ", %" PRIu64 ")", at_epoch[m],
			 at_batch[m]);
		dt_consume_ok(s, &ref, total - marks[m], 0, &rest, what);
		expect(rest.nev && rest.ev[0].result == 0, "%s: the first result is not a batch", what);
		expect(rest.epoch_ends == (marks[m] < nb ? 1u : 0u),
		       "%s: %zu epoch ends announced", what, rest.epoch_ends);
		expect_same_batches(&full, at_event[m], &rest, 0, what);
		dt_run_free(&rest);
		ck_assert_int_eq(bc_close(s), 0);
	}
	dt_run_free(&full);
	dt_ref_close(&ref);
	bc_disconnect(c);
}
END_TEST

/* ---- 4. the epoch boundary is announced once, with the next epoch staged ------------ */

struct published_ctx {
	uint64_t want;
};

static bool published_at_least(const char *json, void *arg)
{
	struct published_ctx *p = arg;
	uint64_t v = 0;

	return dt_json_u64(json, "\"sessions\": [", "published", &v) && v >= p->want;
}

START_TEST(test_epoch_boundary)
{
	bc_client *c = dt_connect_ok();
	struct published_ctx pc;
	bc_stream_opts o;
	bc_stream *s;
	bc_batch *b;
	dt_run run = { 0 };
	dt_ref ref;
	uint64_t nb;
	int r = -ETIMEDOUT;

	dt_ref_ok(&ref, DSET_BLK);
	dt_opts(&o, DSET_BLK, 100, BC_SHUFFLE_GLOBAL, 5);
	o.prefetch = 4;
	s = dt_open_ok(c, &o);
	nb = bc_stream_batches_per_epoch(s);
	dt_consume_ok(s, &ref, nb, 0, &run, "epoch 0");
	ck_assert_uint_eq(run.epoch_ends, 0);

	/* Without waiting: nothing, or the announcement; never a batch first. */
	for (int i = 0; i < TRIES && (r = bc_next(s, &b, 0)) == -ETIMEDOUT; i++)
		usleep(10000);
	expect(r == BC_EPOCH_END, "after the last batch of epoch 0: %s (%d)", bc_strerror(r), r);

	/* The next epoch is staged ahead (prefetch 4): wait for the daemon to say so. */
	pc.want = nb + 3;
	expect(dt_wait_status(D.sock, published_at_least, &pc, TRIES),
	       "the daemon did not stage epoch 1 ahead of the consumer");
	r = bc_next(s, &b, 0);
	expect(r == 0, "a staged batch is not ready at once: %s (%d)", bc_strerror(r), r);
	expect(bc_batch_epoch(b) == 1 && bc_batch_index(b) == 0,
	       "after BC_EPOCH_END came (%" PRIu64 ", %" PRIu64 "), expected (1, 0)",
	       bc_batch_epoch(b), bc_batch_index(b));
	ck_assert_int_eq(bc_release(b), 0);

	/* Two more boundaries: exactly one announcement each, indices continuous. */
	dt_run_free(&run);
	dt_consume_ok(s, &ref, 2 * nb - 1, 0, &run, "epochs 1 and 2");
	ck_assert_uint_eq(run.epoch_ends, 1);
	for (size_t k = 0, batch = 1, epoch = 1; k < run.nev; k++) {
		if (run.ev[k].result == BC_EPOCH_END) {
			expect(batch == nb, "BC_EPOCH_END after batch %zu of %" PRIu64, batch, nb);
			epoch++, batch = 0;
			continue;
		}
		expect(run.ev[k].epoch == epoch && run.ev[k].batch == batch,
		       "event %zu is (%" PRIu64 ", %" PRIu64 "), expected (%zu, %zu)", k,
		       run.ev[k].epoch, run.ev[k].batch, epoch, batch);
		batch++;
	}
	dt_run_free(&run);
	ck_assert_int_eq(bc_close(s), 0);
	dt_ref_close(&ref);
	bc_disconnect(c);
}
END_TEST

/* ---- 5. concurrent sessions ---------------------------------------------------------- */

struct worker {
	bc_stream_opts o;
	dt_run run;
	char error[1024];
	pthread_t t;
};

/* One trainer: its own connection and stream; findings go to w (ck is main-thread only). */
static void *worker_main(void *arg)
{
	struct worker *w = arg;
	bc_client *c = NULL;
	bc_stream *s = NULL;
	dt_ref ref;
	char path[512];
	int r;

	snprintf(path, sizeof(path), "%s/%s", dt_g.packs, w->o.dataset);
	if (dt_ref_open(&ref, path) < 0) {
		snprintf(w->error, sizeof(w->error), "reference open %s", path);
		return NULL;
	}
	if ((r = bc_connect(D.sock, &c)) < 0 || (r = bc_open(c, &w->o, &s)) < 0) {
		snprintf(w->error, sizeof(w->error), "connect/open: %s: %s", bc_strerror(r),
			 c ? bc_client_error(c) : "");
		goto out;
	}
	/* A little over one epoch, so every worker crosses a boundary. */
	if (dt_consume(s, &ref, bc_stream_batches_per_epoch(s) + 3, 0, WAIT_MS, &w->run, w->error,
		       sizeof(w->error)) < 0)
		goto out;
	if (w->run.epoch_ends != 1)
		snprintf(w->error, sizeof(w->error), "%zu epoch ends", w->run.epoch_ends);
	r = bc_close(s);
	s = NULL;
	if (r < 0)
		snprintf(w->error, sizeof(w->error), "bc_close: %s", bc_strerror(r));
out:
	bc_close(s);
	bc_disconnect(c);
	dt_ref_close(&ref);
	return NULL;
}

START_TEST(test_concurrent_sessions)
{
	struct worker w[4];

	memset(w, 0, sizeof(w));
	dt_opts(&w[0].o, DSET_ONE, 16, BC_SHUFFLE_NONE, 0);
	dt_opts(&w[1].o, DSET_BLK, 33, BC_SHUFFLE_GLOBAL, 11);
	dt_opts(&w[2].o, DSET_SHARDS, 8, BC_SHUFFLE_BLOCK, 12);
	w[2].o.rank = 1, w[2].o.world = 2, w[2].o.window = 3;
	dt_opts(&w[3].o, DSET_ONE, 100, BC_SHUFFLE_GLOBAL, 13);
	w[3].o.rank = 2, w[3].o.world = 3, w[3].o.drop_last = true, w[3].o.prefetch = 2;
	for (size_t i = 0; i < ARRAY_SIZE(w); i++)
		ck_assert_int_eq(pthread_create(&w[i].t, NULL, worker_main, &w[i]), 0);
	for (size_t i = 0; i < ARRAY_SIZE(w); i++)
		pthread_join(w[i].t, NULL);
	for (size_t i = 0; i < ARRAY_SIZE(w); i++) {
		dt_ref ref;

		expect(!w[i].error[0], "worker %zu (%s, %s shuffle): %s", i, w[i].o.dataset,
		       bp_shuffle_name(w[i].o.shuffle), w[i].error);
		dt_ref_ok(&ref, w[i].o.dataset);
		expect_sampler_order(&w[i].run, &ref, &w[i].o);
		dt_ref_close(&ref);
		dt_run_free(&w[i].run);
	}
}
END_TEST

/* ---- 6. io_uring and pread deliver identical streams ----------------------------------- */

static const struct engine_run {
	const char *engine, *direct;
} engine_runs[] = {
	{ "pread", "off" },
	{ "io_uring", "off" },
	{ "io_uring", NULL },      /* --direct auto: O_DIRECT where the file system allows */
	{ "pread", NULL },
};

START_TEST(test_io_engines)
{
	static const struct { const char *dataset; enum bc_shuffle mode; uint32_t batch; } streams[] = {
		{ DSET_BLK, BC_SHUFFLE_GLOBAL, 32 },
		{ DSET_SHARDS, BC_SHUFFLE_BLOCK, 16 },
		{ DSET_ONE, BC_SHUFFLE_NONE, 64 },
	};
	dt_run runs[ARRAY_SIZE(engine_runs)][ARRAY_SIZE(streams)];
	char why[128], engine[64];
	bool uring = dt_io_uring_usable(why, sizeof(why));

	memset(runs, 0, sizeof(runs));
	if (!uring)
		printf("SKIP io_uring runs of the engine comparison: %s\n", why);
	for (size_t e = 0; e < ARRAY_SIZE(engine_runs); e++) {
		bc_client *c;
		char *json;

		if (!uring && !strcmp(engine_runs[e].engine, "io_uring"))
			continue;
		D.engine = engine_runs[e].engine;
		D.direct = engine_runs[e].direct;
		ck_assert_msg(dt_daemon_start(&D) == 0, "batchd --io-engine %s did not start",
			      D.engine);
		json = dt_status_ok();
		snprintf(engine, sizeof(engine), "\"io_engine\": \"%s\"", D.engine);
		expect(strstr(json, engine), "asked for %s, status says %s", D.engine, json);
		/* The read pool, and the pages it got (pages.h). */
		expect(strstr(json, "\"read_buffers\": {\"count\": 64, \"size\": 524288, \"pages\": \""),
		       "status has no read_buffers: %s", json);
		free(json);
		c = dt_connect_ok();
		for (size_t k = 0; k < ARRAY_SIZE(streams); k++) {
			bc_stream_opts o;
			bc_stream *s;
			dt_ref ref;

			dt_ref_ok(&ref, streams[k].dataset);
			dt_opts(&o, streams[k].dataset, streams[k].batch, streams[k].mode, 77);
			o.world = 2, o.rank = 1;
			s = dt_open_ok(c, &o);
			dt_consume_ok(s, &ref, bc_stream_batches_per_epoch(s) + 2, 0, &runs[e][k],
				   D.engine);
			ck_assert_int_eq(bc_close(s), 0);
			dt_ref_close(&ref);
			if (e)
				expect_same_batches(&runs[0][k], 0, &runs[e][k], 0, D.engine);
		}
		bc_disconnect(c);
		ck_assert_msg(dt_daemon_stop(&D) == 0, "batchd --io-engine %s did not stop cleanly",
			      D.engine);
	}
	for (size_t e = 0; e < ARRAY_SIZE(engine_runs); e++)
		for (size_t k = 0; k < ARRAY_SIZE(streams); k++)
			dt_run_free(&runs[e][k]);
}
END_TEST

/* ---- 7. held batches stay intact; holding every slot is -ENOBUFS ------------------------------ */

struct slots_ctx {
	uint64_t slots, published;
};

static bool ring_full(const char *json, void *arg)
{
	struct slots_ctx *sc = arg;

	return dt_json_u64(json, "\"sessions\": [", "slots", &sc->slots) &&
	       dt_json_u64(json, "\"sessions\": [", "published", &sc->published) &&
	       sc->published >= sc->slots;
}

START_TEST(test_held_batches)
{
	static const uint32_t order[] = { 2, 0, 3, 1 };
	bc_client *c = dt_connect_ok();
	struct slots_ctx sc = { 0 };
	bc_batch *held[BP_RING_MAX_SLOTS], *b;
	bc_stream_opts o;
	bc_stream *s;
	dt_run run = { 0 };
	dt_ref ref;
	int r, nobufs;

	dt_ref_ok(&ref, DSET_BLK);
	dt_opts(&o, DSET_BLK, 24, BC_SHUFFLE_GLOBAL, 21);
	o.prefetch = 2;
	s = dt_open_ok(c, &o);
	/* Let the daemon fill every slot, then take them all and keep them. */
	expect(dt_wait_status(D.sock, ring_full, &sc, TRIES), "the ring never filled (%" PRIu64
	       " of %" PRIu64 " published)", sc.published, sc.slots);
	ck_assert_uint_ge(sc.slots, ARRAY_SIZE(order));
	ck_assert_uint_le(sc.slots, BP_RING_MAX_SLOTS);
	for (uint64_t k = 0; k < sc.slots; k++) {
		r = bc_next(s, &held[k], WAIT_MS);
		expect(r == 0, "held batch %" PRIu64 ": %s (%d)", k, bc_strerror(r), r);
		expect(bc_batch_index(held[k]) == k, "held batch %" PRIu64 " has index %" PRIu64, k,
		       bc_batch_index(held[k]));
	}
	/* Documented: with every slot held, bc_next says so rather than wait for nothing
	 * (asserted last, so that the rest of the case is checked either way). */
	nobufs = bc_next(s, &b, 0);
	/* Nothing overwrote what the trainer holds. */
	for (uint64_t k = 0; k < sc.slots; k++)
		expect(dt_batch_check(held[k], &ref, E, sizeof(E)) == 0, "held batch %" PRIu64
		       ": %s", k, E);
	/* Releases in any order; the stream goes on where it was. */
	for (uint64_t k = 0; k < sc.slots; k++) {
		uint64_t i = k < ARRAY_SIZE(order) ? order[k] : k;

		ck_assert_int_eq(bc_release(held[i]), 0);
	}
	dt_consume_ok(s, &ref, bc_stream_batches_per_epoch(s), 0, &run, "after out-of-order releases");
	expect(run.ev[0].result == 0 && run.ev[0].batch == sc.slots,
	       "after %" PRIu64 " held batches came batch %" PRIu64, sc.slots, run.ev[0].batch);
	expect_sampler_order(&run, &ref, &o);
	dt_run_free(&run);
	ck_assert_int_eq(bc_close(s), 0);
	dt_ref_close(&ref);
	bc_disconnect(c);
	expect(nobufs == -ENOBUFS, "bc_next with all %" PRIu64 " slots held: %s (%d), expected "
	       "-ENOBUFS", sc.slots, bc_strerror(nobufs), nobufs);
}
END_TEST

/* ---- 8. options that do not fit are refused with -EINVAL; the connection stays usable ------- */

START_TEST(test_bad_options)
{
	static const struct {
		const char *what;
		uint32_t batch, rank, world, prefetch;
		bool drop;
		uint64_t start_batch;    /* UINT64_MAX: batches per epoch */
	} bad[] = {
		{ "start_batch == batches per epoch", 10, 0, 1, 0, false, UINT64_MAX },
		{ "start_batch 2^64-1", 10, 0, 1, 0, false, UINT64_MAX - 1 },
		{ "drop_last leaving no batch", 200, 7, 8, 0, true, 0 },
		{ "prefetch 4096", 10, 0, 1, 4096, false, 0 },
	};
	bc_client *c = dt_connect_ok();
	bc_stream_opts o;
	bc_stream *s = NULL;
	dt_run run = { 0 };
	dt_ref ref;
	char missed[1024];
	size_t at = 0;
	int r;

	/* Refused by the client library before anything is sent. */
	dt_opts(&o, DSET_ONE, 0, BC_SHUFFLE_NONE, 0);
	ck_assert_int_eq(bc_open(c, &o, &s), -EINVAL);
	dt_opts(&o, DSET_ONE, 10, BC_SHUFFLE_NONE, 0);
	o.rank = 2, o.world = 2;
	ck_assert_int_eq(bc_open(c, &o, &s), -EINVAL);

	/* Refused by the daemon, with a message. */
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		dt_opts(&o, DSET_ONE, bad[i].batch, BC_SHUFFLE_GLOBAL, 0);
		o.rank = bad[i].rank, o.world = bad[i].world;
		o.drop_last = bad[i].drop;
		o.prefetch = bad[i].prefetch;
		o.start_batch = bad[i].start_batch == UINT64_MAX ? DSET_SAMPLES / bad[i].batch
			      : bad[i].start_batch == UINT64_MAX - 1 ? UINT64_MAX : 0;
		s = NULL;
		r = bc_open(c, &o, &s);
		if (r == 0)
			bc_close(s);
		/* Collected, and asserted at the end, so that one miss does not hide the rest. */
		if (r != -EINVAL || !bc_client_error(c)[0])
			at += (size_t)snprintf(missed + at, sizeof(missed) - at, "%s%s: %s (%d)",
					       at ? "; " : "", bad[i].what, bc_strerror(r), r);
	}

	/* The last batch of an epoch is a fine place to start. */
	dt_ref_ok(&ref, DSET_ONE);
	dt_opts(&o, DSET_ONE, 10, BC_SHUFFLE_GLOBAL, 0);
	o.start_epoch = 3;
	o.start_batch = DSET_SAMPLES / 10 - 1;
	s = dt_open_ok(c, &o);
	dt_consume_ok(s, &ref, 2, 0, &run, "from the last batch of epoch 3");
	expect(run.nev == 3 && run.ev[0].epoch == 3 && run.ev[0].batch == o.start_batch &&
	       run.ev[1].result == BC_EPOCH_END && run.ev[2].epoch == 4 && run.ev[2].batch == 0,
	       "starting at (3, %" PRIu64 ") did not give that batch, the epoch end, then (4, 0)",
	       o.start_batch);
	expect_sampler_order(&run, &ref, &o);
	dt_run_free(&run);
	ck_assert_int_eq(bc_close(s), 0);
	dt_ref_close(&ref);
	bc_disconnect(c);
	expect(!at, "not refused with -EINVAL and a message: %s", missed);
}
END_TEST

/* ---- the suite ------------------------------------------------------------------------------ */

static Suite *daemon_suite(void)
{
	Suite *s = suite_create("daemon");

	if (dt_g.shards != 3)
		fprintf(stderr, "test-daemon: note: %s has %zu shards, not 3\n", DSET_SHARDS,
			dt_g.shards);
	tcase_add_loop_test(dt_tcase(s, "epoch_partition", setup), test_epoch_partition, 0,
			    ARRAY_SIZE(datasets));
	tcase_add_test(dt_tcase(s, "determinism", setup), test_determinism);
	tcase_add_loop_test(dt_tcase(s, "resume", setup), test_resume, 0, ARRAY_SIZE(resume_cases));
	tcase_add_test(dt_tcase(s, "epoch_boundary", setup), test_epoch_boundary);
	tcase_add_test(dt_tcase(s, "concurrent_sessions", setup), test_concurrent_sessions);
	tcase_add_test(dt_tcase(s, "io_engines", dt_setup_dir), test_io_engines);
	tcase_add_test(dt_tcase(s, "held_batches", setup), test_held_batches);
	tcase_add_test(dt_tcase(s, "bad_options", setup), test_bad_options);
	return s;
}

int main(void)
{
	return dt_check_main(&D, daemon_suite);
}
