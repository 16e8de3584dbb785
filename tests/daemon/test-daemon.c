/* SPDX-License-Identifier: MIT */
/*
 * test-daemon.c - the integration suite: a real batchd on a temporary
 * socket, driven through libbatchclient (and, where the point is abuse, a
 * raw protocol client), checked against the packs on disk.
 *
 * Each TCase is one behaviour a trainer relies on: every epoch is the
 * dataset exactly once across ranks (plus the documented padding); orders
 * are reproducible and resumable; the epoch boundary is announced once;
 * sessions run side by side; a corrupt block fails its batch and nothing
 * else; a dead client's memory comes back; both I/O engines agree; paths
 * outside the roots, abusive messages, oversized sessions and hostile
 * shared memory are refused without hurting anyone else; held batches stay
 * intact; options that do not fit are refused with -EINVAL. Every delivered
 * sample is compared byte for byte with bp_sample_reader_get() on the
 * same pack, and every fixture ends by stopping the daemon with SIGTERM
 * and asserting it exits 0, so a clean shutdown (and, in sanitizer
 * builds, a leak-free one) is tested every time.
 *
 * The datasets (1000 samples of 0..4 KiB, some compressible: one sample per
 * block, 16 KiB blocks, and 16 KiB blocks in three shards) are made once
 * in main() with batchd-pack; see daemon-testlib.h. BATCHD and BATCHD_PACK
 * name the binaries (meson sets them).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <linux/io_uring.h>

#include "daemon-testlib.h"
#include "ring.h"
#include "sampler.h"

static dt_daemon D;
static char E[2048];             /* why dt_* failed */

/* Fail with the daemon's recent log (daemon-testlib.h). */
#define expect dt_expect

/* ---- fixtures --------------------------------------------------------------- */

static void setup(void)
{
	dt_setup_dir();
	ck_assert_msg(dt_daemon_start(&D) == 0, "batchd did not start");
}

static void setup_mem32(void)
{
	dt_setup_dir();
	D.memory = "32M";
	ck_assert_msg(dt_daemon_start(&D) == 0, "batchd --memory 32M did not start");
}

/* ---- helpers ------------------------------------------------------------------ */

/* Do the run's batches carry exactly the sampler's ids? */
static void expect_sampler_order(const dt_run *run, const dt_ref *ref, const bc_stream_opts *o)
{
	uint64_t ids[1024];
	bd_sampler sp;

	if (o->shuffle == BC_SHUFFLE_BLOCK)
		return;
	dt_sampler_for(&sp, ref, o);
	for (size_t k = 0; k < run->nev; k++) {
		const dt_event *ev = &run->ev[k];

		if (ev->result != 0)
			continue;
		ck_assert_uint_le(ev->count, ARRAY_SIZE(ids));
		expect(ev->count == bd_sampler_epoch_batch_len(&sp, ev->epoch, ev->batch),
		       "batch %" PRIu64 ": %u samples, the sampler says %u", ev->batch, ev->count,
		       bd_sampler_epoch_batch_len(&sp, ev->epoch, ev->batch));
		bd_sampler_batch(&sp, ev->epoch, ev->batch, ids);
		for (uint32_t i = 0; i < ev->count; i++)
			expect(run->ids[ev->first + i] == ids[i],
			       "%s shuffle, epoch %" PRIu64 " batch %" PRIu64 " sample %u: id %" PRIu64
			       ", the sampler says %" PRIu64, bp_shuffle_name(o->shuffle), ev->epoch,
			       ev->batch, i, run->ids[ev->first + i], ids[i]);
	}
}

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

static bool cuda_available(void)
{
	char *json = dt_status_ok();
	bool yes = strstr(json, "\"cuda\": {\"available\": true") != NULL;

	free(json);
	return yes;
}

/* ---- 1. every epoch is a partition of the dataset across ranks ------------------- */

static const char *const datasets[] = { DSET_ONE, DSET_BLK, DSET_SHARDS };

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

/* ---- 6. a corrupt block fails its own batches and nothing else ---------------------- */

static void copy_file(const char *from, const char *to)
{
	int in = open(from, O_RDONLY | O_CLOEXEC), out;
	char buf[65536];
	ssize_t n;

	ck_assert_int_ge(in, 0);
	out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ck_assert_int_ge(out, 0);
	while ((n = read(in, buf, sizeof(buf))) > 0)
		ck_assert_int_eq(write(out, buf, (size_t)n), n);
	ck_assert_int_eq(n, 0);
	close(in);
	close(out);
}

START_TEST(test_corrupt_block)
{
	const char *name = datasets[_i];
	char bad[64], from[512], to[512], shard_path[PATH_MAX], want[128];
	const bp_shard *sh;
	const char *shard_name;
	bp_pack_block blk;
	uint64_t block = 0, lo, hi;
	size_t si;
	uint8_t byte;
	int fd;
	bc_client *c = dt_connect_ok();
	bc_stream_opts ob, og;
	bc_stream *sb, *sg;
	dt_run rb = { 0 }, rg = { 0 };
	dt_ref ref;
	uint64_t nb;

	/* The corrupt copy, beside the pristine dataset in the daemon's root. */
	dt_ref_ok(&ref, name);
	snprintf(bad, sizeof(bad), "bad-%s", name);
	snprintf(from, sizeof(from), "%s/%s", dt_g.packs, name);
	dt_root_path(&D, bad, to, sizeof(to));
	si = bp_dataset_shard_count(ref.ds) > 1 ? 1 : 0;
	sh = bp_dataset_shard(ref.ds, si);
	if (bp_dataset_shard_count(ref.ds) > 1) {
		ck_assert_int_eq(mkdir(to, 0755), 0);
		for (size_t i = 0; i < bp_dataset_shard_count(ref.ds); i++) {
			char a[PATH_MAX + 300], b2[PATH_MAX + 300];

			snprintf(a, sizeof(a), "%s/%s", from, bp_dataset_shard(ref.ds, i)->name);
			snprintf(b2, sizeof(b2), "%s/%s", to, bp_dataset_shard(ref.ds, i)->name);
			copy_file(a, b2);
		}
		snprintf(shard_path, sizeof(shard_path), "%s/%s", to, sh->name);
	} else {
		copy_file(from, to);
		snprintf(shard_path, sizeof(shard_path), "%s", to);
	}
	/* A block in the second half with some stored bytes: flip one in its middle. */
	for (block = sh->index.block_count / 2; block < sh->index.block_count; block++) {
		bp_pack_index_block(&sh->index, block, &blk);
		if (blk.stored_size >= 16)
			break;
	}
	ck_assert_uint_lt(block, sh->index.block_count);
	fd = open(shard_path, O_RDWR | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, &byte, 1, (off_t)(blk.offset + blk.stored_size / 2)), 1);
	byte ^= 0x5a;
	ck_assert_int_eq(pwrite(fd, &byte, 1, (off_t)(blk.offset + blk.stored_size / 2)), 1);
	close(fd);
	lo = sh->first_sample + blk.first_sample;
	hi = lo + blk.sample_count;

	dt_opts(&ob, bad, 10, BC_SHUFFLE_NONE, 0);
	dt_opts(&og, name, 10, BC_SHUFFLE_NONE, 0);
	sb = dt_open_ok(c, &ob);
	sg = dt_open_ok(c, &og);
	nb = bc_stream_batches_per_epoch(sb);
	/* Interleaved, so both sessions' blocks are in the pipeline together. */
	for (uint64_t k = 0; k < nb; k++) {
		dt_consume_ok(sb, &ref, 1, DT_KEEP_FAILURES, &rb, "corrupt stream");
		dt_consume_ok(sg, &ref, 1, 0, &rg, "good stream beside a corrupt one");
	}
	ck_assert_uint_eq(rg.batches, nb);
	ck_assert_uint_eq(rg.failures, 0);
	expect_sampler_order(&rg, &ref, &og);

	snprintf(want, sizeof(want), "block %" PRIu64, block);
	for (uint64_t k = 0; k < nb; k++) {
		const dt_event *ev = &rb.ev[k];
		bool hit = k * 10 < hi && lo < (k + 1) * 10;

		expect(ev->epoch == 0 && ev->batch == k, "corrupt stream: event %" PRIu64 " is batch %"
		       PRIu64, k, ev->batch);
		expect(hit ? ev->result == -EBADMSG : ev->result == 0,
		       "%s, block %" PRIu64 " (samples %" PRIu64 "..%" PRIu64 ") corrupt: batch %"
		       PRIu64 " gave %s (%d)", name, block, lo, hi - 1, k, bc_strerror(ev->result),
		       ev->result);
		if (!hit)
			for (uint32_t i = 0; i < ev->count; i++)
				expect(rb.ids[ev->first + i] == k * 10 + i, "corrupt stream: batch %" PRIu64
				       " holds id %" PRIu64, k, rb.ids[ev->first + i]);
	}
	/* A one-file dataset is its own shard; a directory's shards go by file name. */
	shard_name = bp_dataset_shard_count(ref.ds) > 1 ? sh->name : bad;
	expect(rb.failures >= 1, "no batch failed");
	expect(strstr(rb.last_error, bad) && strstr(rb.last_error, shard_name) &&
	       strstr(rb.last_error, want),
	       "bc_stream_error does not name dataset %s, shard %s and %s: \"%s\"", bad,
	       shard_name, want, rb.last_error);
	dt_run_free(&rb);
	dt_run_free(&rg);
	ck_assert_int_eq(bc_close(sb), 0);
	ck_assert_int_eq(bc_close(sg), 0);
	dt_ref_close(&ref);
	bc_disconnect(c);
}
END_TEST

/* ---- 7. a client that dies gives its session and memory back ------------------------- */

struct idle_ctx {
	uint64_t used0;
	size_t sessions;
	uint64_t used;
};

static bool back_to_baseline(const char *json, void *arg)
{
	struct idle_ctx *ic = arg;

	ic->sessions = dt_json_sessions(json);
	return dt_json_u64(json, "\"memory\": {", "sessions", &ic->used) && ic->sessions == 0 &&
	       ic->used == ic->used0;
}

START_TEST(test_client_death)
{
	struct idle_ctx ic = { 0 };
	bc_client *c;
	bc_stream_opts o;
	bc_stream *s;
	dt_run run = { 0 };
	dt_ref ref;
	char *json, ready;
	uint64_t used = 0;
	int up[2], down[2], st;
	pid_t pid;

	json = dt_status_ok();
	ck_assert(dt_json_u64(json, "\"memory\": {", "sessions", &ic.used0));
	ck_assert_uint_eq(dt_json_sessions(json), 0);
	free(json);

	/* up: child -> parent "streaming"; down: parent -> child "die now". */
	ck_assert_int_eq(pipe2(up, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(down, O_CLOEXEC), 0);
	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		bc_batch *b;
		int fails = 0;

		close(up[0]);
		close(down[1]);
		if (bc_connect(D.sock, &c) < 0)
			_exit(2);
		dt_opts(&o, DSET_ONE, 8, BC_SHUFFLE_GLOBAL, 3);
		o.prefetch = 4;
		if (bc_open(c, &o, &s) < 0)
			_exit(3);
		for (int i = 0; i < 3; i++) {
			fails += bc_next(s, &b, WAIT_MS) != 0;
			if (!fails && i < 2)
				bc_release(b);   /* the last one stays held */
		}
		if (fails || write(up[1], "k", 1) != 1)
			_exit(4);
		if (_i == 0 && read(down[0], &ready, 1) == 1)
			_exit(0);        /* gone without bc_close or bc_disconnect */
		pause();                 /* killed with SIGKILL below */
		_exit(5);
	}
	close(up[1]);
	close(down[0]);
	ck_assert_msg(read(up[0], &ready, 1) == 1, "the client child failed to start a stream");
	close(up[0]);

	json = dt_status_ok();
	expect(dt_json_sessions(json) == 1 && dt_json_u64(json, "\"memory\": {", "sessions", &used) &&
	       used > ic.used0, "while the child streams: %s", json);
	free(json);
	if (_i == 1)
		kill(pid, SIGKILL);
	else
		ck_assert_int_eq(write(down[1], "x", 1), 1);
	close(down[1]);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	if (_i == 0)
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
	else
		ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "child status %d", st);

	expect(dt_wait_status(D.sock, back_to_baseline, &ic, TRIES),
	       "after the client died: %zu sessions, %" PRIu64 " bytes of session memory (baseline %" PRIu64 ")",
	       ic.sessions, ic.used, ic.used0);

	/* And the daemon serves the next client as usual. */
	dt_ref_ok(&ref, DSET_ONE);
	c = dt_connect_ok();
	dt_opts(&o, DSET_ONE, 8, BC_SHUFFLE_GLOBAL, 3);
	s = dt_open_ok(c, &o);
	dt_consume_ok(s, &ref, 10, 0, &run, "after a client died");
	dt_run_free(&run);
	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
	dt_ref_close(&ref);
}
END_TEST

/* ---- 8. io_uring and pread deliver identical streams ----------------------------------- */

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

/* ---- 9. paths outside the roots, odd files, and GPU placement are refused ------------ */

struct fifo_watch {
	const char *path;
	volatile int done;
	bool blocked;
};

/* If the open is still pending after a while, see whether the daemon is stuck
 * in open(2) on the FIFO (a writer can then open it) and let it go. */
static void *fifo_watch_main(void *arg)
{
	struct fifo_watch *fw = arg;

	for (int i = 0; i < 200 && !__atomic_load_n(&fw->done, __ATOMIC_ACQUIRE); i++)
		usleep(10000);
	while (!__atomic_load_n(&fw->done, __ATOMIC_ACQUIRE)) {
		int fd = open(fw->path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);

		if (fd >= 0) {
			fw->blocked = true;
			close(fd);
		}
		usleep(10000);
	}
	return NULL;
}

START_TEST(test_refused_paths)
{
	char abs_out[PATH_MAX], link[PATH_MAX], target[PATH_MAX], path[PATH_MAX];
	struct fifo_watch fw = { 0 };
	bc_client *c = dt_connect_ok();
	bc_stream_opts o;
	bc_stream *host, *s;
	dt_run run = { 0 };
	dt_ref ref;
	pthread_t t;
	int r;

	dt_ref_ok(&ref, DSET_ONE);
	dt_opts(&o, DSET_ONE, 8, BC_SHUFFLE_NONE, 0);
	host = dt_open_ok(c, &o);
	dt_consume_ok(host, &ref, 2, 0, &run, "host stream before the refusals");

	/* A real dataset, but outside the root; and something that is no dataset at all. */
	snprintf(abs_out, sizeof(abs_out), "%s/" DSET_ONE, dt_g.packs);
	dt_open_refused(c, abs_out, -EACCES, abs_out);
	dt_open_refused(c, "/etc/passwd", -EACCES, "/etc/passwd");
	dt_open_refused(c, "../x", -EACCES, "../x");
	dt_open_refused(c, "shards/../../x", -EACCES, "shards/../../x");

	/* Symlinks inside the root that lead out of it, absolute or relative. */
	ck_assert_int_eq(symlink(abs_out, dt_root_path(&D, "abs-link.bpk", link, sizeof(link))), 0);
	dt_open_refused(c, "abs-link.bpk", -EACCES, "abs-link.bpk");
	snprintf(target, sizeof(target), "../../packs/" DSET_ONE);
	ck_assert_int_eq(symlink(target, dt_root_path(&D, "rel-link.bpk", link, sizeof(link))), 0);
	dt_open_refused(c, "rel-link.bpk", -EACCES, "rel-link.bpk");
	ck_assert_int_eq(symlink("/dev/null", dt_root_path(&D, "null.bpk", link, sizeof(link))), 0);
	dt_open_refused(c, "null.bpk", -EACCES, "null.bpk");

	dt_open_refused(c, "missing.bpk", -ENOENT, "missing.bpk");
	dt_open_refused(c, dt_root_path(&D, "missing.bpk", path, sizeof(path)), -ENOENT, path);
	ck_assert_int_eq(mkdir(dt_root_path(&D, "empty", path, sizeof(path)), 0755), 0);
	dt_open_refused(c, "empty", -ENODATA, "empty");

	/* A FIFO is no dataset; opening it must neither succeed nor hang the daemon. */
	fw.path = dt_root_path(&D, "fifo.bpk", path, sizeof(path));
	ck_assert_int_eq(mkfifo(fw.path, 0644), 0);
	ck_assert_int_eq(pthread_create(&t, NULL, fifo_watch_main, &fw), 0);
	dt_opts(&o, "fifo.bpk", 4, BC_SHUFFLE_NONE, 0);
	s = NULL;
	r = bc_open(c, &o, &s);
	__atomic_store_n(&fw.done, 1, __ATOMIC_RELEASE);
	pthread_join(t, NULL);
	if (r == 0)
		bc_close(s);
	expect(!fw.blocked, "the daemon blocked in open(2) on a FIFO in its root (freed by the "
	       "test opening the write end); the open then gave %s (%d): \"%s\"", bc_strerror(r),
	       r, bc_client_error(c));
	expect(r == -EINVAL && strstr(bc_client_error(c), "fifo.bpk"),
	       "open fifo.bpk: %s (%d): \"%s\", expected -EINVAL naming it", bc_strerror(r), r,
	       bc_client_error(c));

	/* An absolute path under the root is fine. */
	dt_opts(&o, dt_root_path(&D, DSET_ONE, path, sizeof(path)), 8, BC_SHUFFLE_NONE, 0);
	s = dt_open_ok(c, &o);
	dt_consume_ok(s, &ref, 3, 0, &run, "absolute path under the root");
	ck_assert_int_eq(bc_close(s), 0);

	/* GPU placement on a daemon without CUDA: refused, host sessions unharmed. */
	if (!cuda_available()) {
		dt_opts(&o, DSET_ONE, 8, BC_SHUFFLE_NONE, 0);
		o.device = 0;
		s = NULL;
		r = bc_open(c, &o, &s);
		if (r == 0)
			bc_close(s);
		expect(r == -ENODEV && strstr(bc_client_error(c), "no CUDA device"),
		       "device 0 without CUDA: %s (%d): \"%s\"", bc_strerror(r), r,
		       bc_client_error(c));
	} else {
		/* With a device: a GPU session, or a clear refusal; never harm to the host stream. */
		dt_opts(&o, DSET_ONE, 8, BC_SHUFFLE_NONE, 0);
		o.device = 0;
		s = NULL;
		r = bc_open(c, &o, &s);
		if (r == 0)
			bc_close(s);
		printf("NOTE: CUDA device present; device 0 open gave %s (%d): %s\n",
		       bc_strerror(r), r, bc_client_error(c));
		expect(r == 0 || r == -EOPNOTSUPP, "device 0 with CUDA: %s (%d): \"%s\"",
		       bc_strerror(r), r, bc_client_error(c));
	}
	dt_consume_ok(host, &ref, 5, 0, &run, "host stream after the refusals");
	ck_assert_int_eq(bc_close(host), 0);
	/* Closed sessions leave the list once their last reads are back; refused ones never join. */
	expect(dt_wait_sessions(D.sock, 0, TRIES), "refused opens left sessions behind");
	dt_run_free(&run);
	dt_ref_close(&ref);
	bc_disconnect(c);
}
END_TEST

/* ---- 10. protocol abuse from a raw socket ----------------------------------------------- */

enum abuse {
	ABUSE_GARBAGE, ABUSE_MAGIC, ABUSE_STATUS_FIRST, ABUSE_OPEN_FIRST, ABUSE_OVERSIZE,
	ABUSE_EMPTY, ABUSE_SECOND_HELLO, ABUSE_SHORT_OPEN, ABUSE_VERSION, ABUSE_HEADER_VERSION,
	ABUSE_REPLY_TYPE, ABUSE_FDS, ABUSE_COUNT,
};

static const char *const abuse_names[] = {
	"garbage bytes", "wrong magic", "STATUS before HELLO", "OPEN before HELLO",
	"oversize datagram", "empty datagram", "second HELLO", "truncated OPEN",
	"unsupported HELLO range", "unsupported header version", "a daemon-to-client type",
	"file descriptors",
};

/* Send the abuse; @return the ERROR code it should draw (0: any, or none). */
static int abuse_send(int fd, enum abuse a)
{
	bp_msg_hello h = { .min_version = 1, .max_version = 1 };
	bp_msg_open m = { .batch_size = 1, .world = 1, .placement = BP_PLACEMENT_HOST,
			  .path = DSET_ONE, .path_len = sizeof(DSET_ONE) - 1 };
	static uint8_t buf[BP_MSG_MAX + 4096];
	uint64_t st = 0x9e3779b97f4a7c15u;
	size_t len = 0;
	int code = 0;

	switch (a) {
	case ABUSE_GARBAGE:
		for (len = 0; len < 61; len++)
			buf[len] = (uint8_t)((st = st * 6364136223846793005u + 1) >> 56);
		code = -EBADMSG;
		break;
	case ABUSE_MAGIC:
		len = (size_t)bp_msg_hello_encode(&h, buf, sizeof(buf));
		buf[0] ^= 0xff;
		code = -EBADMSG;
		break;
	case ABUSE_STATUS_FIRST:
		len = (size_t)bp_msg_status_encode(buf, sizeof(buf));
		code = -EPROTO;
		break;
	case ABUSE_OPEN_FIRST:
		len = (size_t)bp_msg_open_encode(&m, buf, sizeof(buf));
		code = -EPROTO;
		break;
	case ABUSE_OVERSIZE:
		/* A HELLO header claiming the whole oversized length. */
		len = sizeof(buf);
		memset(buf, 'x', len);
		bp_msg_hello_encode(&h, buf, sizeof(buf));
		buf[8] = (uint8_t)len, buf[9] = (uint8_t)(len >> 8), buf[10] = (uint8_t)(len >> 16);
		code = -EBADMSG;
		break;
	case ABUSE_EMPTY:
		len = 0;
		break;
	case ABUSE_SECOND_HELLO:
	case ABUSE_SHORT_OPEN:
	case ABUSE_REPLY_TYPE:
		ck_assert_int_eq(dt_raw_hello(fd, NULL), 0);
		if (a == ABUSE_SECOND_HELLO) {
			len = (size_t)bp_msg_hello_encode(&h, buf, sizeof(buf));
			code = -EPROTO;
		} else if (a == ABUSE_REPLY_TYPE) {
			bp_msg_session sm = { .session = 1 };

			len = (size_t)bp_msg_session_encode(BP_MSG_CLOSED, &sm, buf, sizeof(buf));
			code = -EPROTO;
		} else {
			/* A valid header over a body cut short. */
			len = (size_t)bp_msg_open_encode(&m, buf, sizeof(buf)) - 8;
			buf[8] = (uint8_t)len, buf[9] = (uint8_t)(len >> 8);
			buf[10] = buf[11] = 0;
			code = -EBADMSG;
		}
		break;
	case ABUSE_VERSION:
		h.min_version = h.max_version = 99;
		len = (size_t)bp_msg_hello_encode(&h, buf, sizeof(buf));
		code = -EPROTONOSUPPORT;
		break;
	case ABUSE_HEADER_VERSION:
		/* A good magic with a version this daemon does not speak, whatever follows. */
		len = (size_t)bp_msg_hello_encode(&h, buf, sizeof(buf));
		buf[6] = 2, buf[7] = 0;
		code = -EPROTONOSUPPORT;
		break;
	case ABUSE_FDS: {
		union {
			struct cmsghdr h;
			char b[CMSG_SPACE(sizeof(int))];
		} ctl;
		struct iovec iov;
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
				     .msg_controllen = sizeof(ctl.b) };
		struct cmsghdr *cm;
		int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);

		ck_assert_int_eq(dt_raw_hello(fd, NULL), 0);
		len = (size_t)bp_msg_status_encode(buf, sizeof(buf));
		iov = (struct iovec){ .iov_base = buf, .iov_len = len };
		memset(&ctl, 0, sizeof(ctl));
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &devnull, sizeof(int));
		ck_assert_int_eq(sendmsg(fd, &mh, MSG_NOSIGNAL), (ssize_t)len);
		close(devnull);
		return -EBADMSG;
	}
	case ABUSE_COUNT:
		break;
	}
	ck_assert_int_eq(send(fd, buf, len, MSG_NOSIGNAL), (ssize_t)len);
	return code;
}

START_TEST(test_protocol_abuse)
{
	bc_client *c;
	bc_stream_opts o;
	bc_stream *s;
	dt_run run = { 0 };
	dt_ref ref;

	for (int a = 0; a < ABUSE_COUNT; a++) {
		int fd = dt_raw_connect(D.sock), want, got, r;

		ck_assert_int_ge(fd, 0);
		want = abuse_send(fd, (enum abuse)a);
		r = dt_raw_expect_close(fd, &got, WAIT_MS);
		/* An ERROR, or a closed connection: either is a refusal. */
		expect(r == 0 || got < 0, "%s: neither answered nor closed", abuse_names[a]);
		expect(!want || !got || got == want, "%s: answered %s (%d), expected %s (%d)",
		       abuse_names[a], bc_strerror(got), got, bc_strerror(want), want);
		close(fd);
	}

	/* Nobody else noticed. */
	dt_ref_ok(&ref, DSET_BLK);
	c = dt_connect_ok();
	dt_opts(&o, DSET_BLK, 16, BC_SHUFFLE_GLOBAL, 4);
	s = dt_open_ok(c, &o);
	dt_consume_ok(s, &ref, bc_stream_batches_per_epoch(s) + 1, 0, &run, "after the abuse");
	dt_run_free(&run);
	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
	dt_ref_close(&ref);
}
END_TEST

/* ---- 11. the memory budget ---------------------------------------------------------------- */

START_TEST(test_memory_budget)
{
	bc_client *c = dt_connect_ok();
	bc_stream *s = NULL, *held[64];
	bc_stream_opts o;
	dt_run run = { 0 };
	dt_ref ref;
	bp_msg_hello_ok ok;
	size_t nheld = 0;
	int fd, r;

	/* The daemon's largest batch, from its HELLO_OK. */
	fd = dt_raw_connect(D.sock);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(dt_raw_hello(fd, &ok), 0);
	close(fd);

	/* One session bigger than the whole budget. */
	dt_opts(&o, DSET_ONE, ok.max_batch_size, BC_SHUFFLE_GLOBAL, 1);
	o.prefetch = 64;
	r = bc_open(c, &o, &s);
	expect(r == -ENOMEM && strstr(bc_client_error(c), "memory budget"),
	       "a %u-sample batch with prefetch 64 under --memory 32M: %s (%d): \"%s\"",
	       o.batch_size, bc_strerror(r), r, bc_client_error(c));
	o.batch_size = ok.max_batch_size + 1;
	r = bc_open(c, &o, &s);
	expect(r == -EINVAL, "batch %u, over max_batch_size: %s (%d): \"%s\"", o.batch_size,
	       bc_strerror(r), r, bc_client_error(c));

	/* Sessions that fit, until the budget is spent; then one more after a close. */
	dt_opts(&o, DSET_ONE, 256, BC_SHUFFLE_GLOBAL, 1);
	o.prefetch = 8;
	while (nheld < ARRAY_SIZE(held) && (r = bc_open(c, &o, &s)) == 0)
		held[nheld++] = s;
	expect(nheld >= 1 && r == -ENOMEM && strstr(bc_client_error(c), "memory budget"),
	       "%zu sessions of batch 256 opened, then %s (%d): \"%s\"", nheld, bc_strerror(r), r,
	       bc_client_error(c));
	ck_assert_int_eq(bc_close(held[--nheld]), 0);
	/* The close is answered after the session is let go; its memory may come back later. */
	for (int i = 0; i < TRIES && (r = bc_open(c, &o, &s)) == -ENOMEM; i++)
		usleep(10000);
	expect(r == 0, "no room after closing a session: %s (%d): \"%s\"", bc_strerror(r), r,
	       bc_client_error(c));
	held[nheld++] = s;
	dt_ref_ok(&ref, DSET_ONE);
	dt_consume_ok(s, &ref, bc_stream_batches_per_epoch(s), 0, &run, "a session within budget");
	dt_run_free(&run);
	dt_ref_close(&ref);
	while (nheld)
		ck_assert_int_eq(bc_close(held[--nheld]), 0);
	bc_disconnect(c);
}
END_TEST

/* ---- 12. hostile control memory ends that session only ------------------------------------ */

START_TEST(test_hostile_control)
{
	bp_msg_open m = { .seed = 1, .batch_size = 8, .world = 1, .prefetch = 4,
			  .placement = BP_PLACEMENT_HOST, .shuffle = BP_SHUFFLE_NONE,
			  .path = DSET_ONE, .path_len = sizeof(DSET_ONE) - 1 };
	const unsigned want_seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE;
	bc_client *c = dt_connect_ok();
	bc_stream_opts o;
	bc_stream *good;
	dt_run run = { 0 };
	dt_ref ref, ref1;
	bp_msg_ready ready;
	const volatile bp_ring_header *hdr;
	const bp_ring_desc *d;
	const bp_ring_sample *t;
	bp_ring_ctrl *ctrl;
	uint8_t *data;
	struct pollfd pfd;
	uint64_t one = 1;
	int fds[BP_READY_FDS], fd, r;
	void *m2;

	dt_ref_ok(&ref, DSET_BLK);
	dt_ref_ok(&ref1, DSET_ONE);
	dt_opts(&o, DSET_BLK, 20, BC_SHUFFLE_GLOBAL, 9);
	good = dt_open_ok(c, &o);
	dt_consume_ok(good, &ref, 3, 0, &run, "good stream before");

	fd = dt_raw_connect(D.sock);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(dt_raw_hello(fd, NULL), 0);
	r = dt_raw_open(fd, &m, &ready, fds);
	expect(r == 0, "raw OPEN: %s (%d)", bc_strerror(r), r);

	/* The data memfd is the daemon's alone: no writable mapping, no resizing, no writes. */
	expect((fcntl(fds[0], F_GET_SEALS) & want_seals) == want_seals, "data memfd seals %#x",
	       fcntl(fds[0], F_GET_SEALS));
	m2 = mmap(NULL, ready.data_size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
	expect(m2 == MAP_FAILED && errno == EPERM, "data memfd mapped writable (%s)",
	       m2 == MAP_FAILED ? strerror(errno) : "succeeded");
	errno = 0;
	expect(ftruncate(fds[0], 0) < 0 && errno == EPERM, "data memfd shrunk (%s)",
	       strerror(errno));
	errno = 0;
	expect(ftruncate(fds[0], (off_t)ready.data_size * 2) < 0 && errno == EPERM,
	       "data memfd grown (%s)", strerror(errno));
	errno = 0;
	expect(pwrite(fds[0], "x", 1, 0) < 0 && errno == EPERM, "data memfd written (%s)",
	       strerror(errno));
	errno = 0;
	expect(ftruncate(fds[1], 0) < 0 && errno == EPERM, "control memfd shrunk (%s)",
	       strerror(errno));

	data = mmap(NULL, ready.data_size, PROT_READ, MAP_SHARED, fds[0], 0);
	ck_assert_ptr_ne(data, MAP_FAILED);
	ctrl = mmap(NULL, ready.ctrl_size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[1], 0);
	ck_assert_ptr_ne(ctrl, MAP_FAILED);
	hdr = (const bp_ring_header *)data;
	ck_assert_uint_eq(hdr->magic, BP_RING_MAGIC);
	ck_assert_uint_eq(hdr->slots, ready.slots);

	/* Read batch 0 straight off the ring: the layout of ring.h, byte exact. */
	expect(dt_ring_wait_produced(hdr, 1, TRIES), "nothing published on the raw session");
	d = (const bp_ring_desc *)(data + BP_RING_HEADER_SIZE);
	expect(d->seq == 0 && d->epoch == 0 && d->batch == 0 && d->count == 8 && d->status == 0,
	       "descriptor 0: seq %" PRIu64 " epoch %" PRIu64 " batch %" PRIu64 " count %u status %d",
	       d->seq, d->epoch, d->batch, d->count, d->status);
	t = (const bp_ring_sample *)(data + d->record);
	for (uint32_t i = 0; i < d->count; i++) {
		expect(t[i].id == i, "raw batch 0 sample %u has id %" PRIu64, i, t[i].id);
		expect(dt_ref_check(&ref1, t[i].id, data + d->payload + t[i].offset,
				    (size_t)t[i].size, E, sizeof(E)) == 0, "raw batch 0: %s", E);
	}

	/* Harmless noise first (informational fields), then a release of a batch never published. */
	ctrl->consumed = UINT64_MAX;
	ctrl->reserved = 0xdeadbeef;
	__atomic_store_n(&ctrl->release[0], (uint64_t)ready.slots * 1000 + 1, __ATOMIC_RELEASE);
	ck_assert_int_eq(write(fds[2], &one, sizeof(one)), (ssize_t)sizeof(one));
	expect(dt_ring_wait_stopped(hdr, TRIES), "the daemon did not end the session "
	       "after a release mark for a batch never published");
	expect(hdr->error == -EPROTO, "stopped with error %d, expected -EPROTO", hdr->error);
	/* ... and poked the published pipe (nothing else wrote it: we never slept). */
	pfd = (struct pollfd){ .fd = fds[3], .events = POLLIN };
	expect(poll(&pfd, 1, WAIT_MS) == 1 && (pfd.revents & POLLIN),
	       "the published pipe was not poked when the session stopped");
	expect(dt_wait_sessions(D.sock, 1, TRIES), "the hostile session was not let go");

	/* The normal stream goes on. */
	dt_consume_ok(good, &ref, bc_stream_batches_per_epoch(good), 0, &run, "good stream after");
	expect_sampler_order(&run, &ref, &o);
	munmap(data, ready.data_size);
	munmap(ctrl, ready.ctrl_size);
	for (int i = 0; i < BP_READY_FDS; i++)
		close(fds[i]);
	close(fd);
	dt_run_free(&run);
	ck_assert_int_eq(bc_close(good), 0);
	dt_ref_close(&ref);
	dt_ref_close(&ref1);
	bc_disconnect(c);
}
END_TEST

/* ---- 13. held batches stay intact; holding every slot is -ENOBUFS ----------------------------- */

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

/* ---- 14. options that do not fit are refused with -EINVAL; the connection stays usable ------ */

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
	tcase_add_loop_test(dt_tcase(s, "corrupt_block", setup), test_corrupt_block, 0,
			    ARRAY_SIZE(datasets));
	tcase_add_loop_test(dt_tcase(s, "client_death", setup), test_client_death, 0, 2);
	tcase_add_test(dt_tcase(s, "io_engines", dt_setup_dir), test_io_engines);
	tcase_add_test(dt_tcase(s, "refused_paths", setup), test_refused_paths);
	tcase_add_test(dt_tcase(s, "protocol_abuse", setup), test_protocol_abuse);
	tcase_add_test(dt_tcase(s, "memory_budget", setup_mem32), test_memory_budget);
	tcase_add_test(dt_tcase(s, "hostile_control", setup), test_hostile_control);
	tcase_add_test(dt_tcase(s, "held_batches", setup), test_held_batches);
	tcase_add_test(dt_tcase(s, "bad_options", setup), test_bad_options);
	return s;
}

int main(void)
{
	return dt_check_main(&D, daemon_suite);
}
