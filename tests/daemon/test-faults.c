/* SPDX-License-Identifier: MIT */
/*
 * test-faults.c - faults injected under a real batchd: the daemon started
 * with BATCHD_FAULTS (daemon/base/fault.h) in its environment, and a disk
 * that answers EIO, EAGAIN or in dribbles, late completions, io_uring or
 * O_DIRECT missing, malloc failing at every point in turn.
 *
 * Why a suite of its own: test-daemon.c proves what a healthy daemon
 * delivers; this one proves that what goes wrong underneath it costs
 * exactly what it should: the affected batch or session, with a reason,
 * and nothing else. Delivered samples are compared byte for byte with the
 * reference reader (and with a run without faults); every fixture ends by
 * stopping the daemon with SIGTERM and asserting exit 0, which in
 * sanitizer builds also means LeakSanitizer found nothing. What a client
 * does to the daemon (dies, stops, floods, scribbles) is the other faults
 * suite, test-faults-clients.c; both start their daemon through
 * faults-fixture.h.
 *
 * Needs batchd built with -Dfault_injection=true (meson only builds this
 * suite then). BATCHD, BATCHD_PACK name the binaries. Paths that try to
 * leave the roots have a suite of their own, test-paths.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <check.h>

#include "daemon-testlib.h"
#include "faults-fixture.h"
#include "ring.h"
#include "sampler.h"

static char E[2048];             /* why dt_* failed */

/* ---- fixtures --------------------------------------------------------------- */

/*
 * Start D with BATCHD_FAULTS=faults, keeping the exit status of a daemon
 * that does not come up. @return 0 up (D.pid set), 1 exited before
 * answering (wait status in *ret_st); fails the test when it never answered.
 */
static int spawn_daemon(const char *faults, int *ret_st)
{
	int r = start_env(faults, NULL, true);

	if (r == 1)
		*ret_st = D.exit_status;
	ck_assert_msg(r >= 0, "batchd with %s never answered", faults);
	return r;
}

static void stop_ok(const char *what)
{
	ck_assert_msg(dt_daemon_stop(&D) == 0, "%s: batchd did not exit 0 at SIGTERM", what);
}

/* ---- helpers ------------------------------------------------------------------ */

/* Do two runs hold the same batches (epoch, index, ids, bytes) and the same failures? */
static void expect_same_run(const dt_run *a, const dt_run *b, const char *what)
{
	expect(a->nev == b->nev, "%s: %zu events vs %zu without faults", what, b->nev, a->nev);
	for (size_t k = 0; k < a->nev; k++) {
		const dt_event *x = &a->ev[k], *y = &b->ev[k];

		expect(x->result == y->result && x->epoch == y->epoch && x->batch == y->batch &&
		       x->count == y->count,
		       "%s: event %zu is (%d, %" PRIu64 ", %" PRIu64 ", %u samples), without faults "
		       "(%d, %" PRIu64 ", %" PRIu64 ", %u samples)", what, k, y->result, y->epoch,
		       y->batch, y->count, x->result, x->epoch, x->batch, x->count);
		for (uint32_t i = 0; x->result == 0 && i < x->count; i++)
			expect(a->ids[x->first + i] == b->ids[y->first + i] &&
			       a->hashes[x->first + i] == b->hashes[y->first + i],
			       "%s: batch %" PRIu64 " sample %u: id %" PRIu64 " (hash %016" PRIx64
			       ") vs %" PRIu64 " (hash %016" PRIx64 ") without faults", what, x->batch,
			       i, b->ids[y->first + i], b->hashes[y->first + i], a->ids[x->first + i],
			       a->hashes[x->first + i]);
	}
}

/* ---- metrics ----------------------------------------------------------------------------- */

/* The value of the first sample line that starts with `series ` in a Prometheus text. */
static bool metric_u64(const char *text, const char *series, uint64_t *ret)
{
	size_t n = strlen(series);

	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (!strncmp(p, series, n) && p[n] == ' ')
			return sscanf(p + n + 1, "%" SCNu64, ret) == 1;
	return false;
}

static uint64_t metric_ok(const char *series)
{
	bc_client *c = dt_connect_ok();
	char *text = NULL;
	uint64_t v = 0;
	int r = bc_metrics(c, &text);

	expect(r == 0, "bc_metrics: %s", bc_strerror(r));
	expect(metric_u64(text, series, &v), "no %s in the metrics", series);
	free(text);
	bc_disconnect(c);
	return v;
}

/* ---- the streams that faults must not change ----------------------------------------- */

static const struct stream_case {
	const char *dataset;
	enum bc_shuffle mode;
	uint32_t batch;
} streams[] = {
	{ DSET_BLK, BC_SHUFFLE_GLOBAL, 32 },  /* partial blocks: the decoded-block cache */
	{ DSET_SHARDS, BC_SHUFFLE_BLOCK, 16 },
	{ DSET_ONE, BC_SHUFFLE_NONE, 64 },    /* whole blocks decoded in place */
};

/* One epoch of each of the first n streams on a fresh connection, checked against the packs. */
static void record_streams(dt_run *runs, size_t n, const char *what)
{
	bc_client *c = dt_connect_ok();
	char label[512];

	for (size_t k = 0; k < n; k++) {
		bc_stream_opts o;
		bc_stream *s;
		dt_ref ref;
		uint64_t nb;

		dt_ref_ok(&ref, streams[k].dataset);
		dt_opts(&o, streams[k].dataset, streams[k].batch, streams[k].mode, 77);
		s = dt_open_ok(c, &o);
		nb = bc_stream_batches_per_epoch(s);
		snprintf(label, sizeof(label), "%s: %s, %s shuffle", what, streams[k].dataset,
			 bp_shuffle_name(streams[k].mode));
		dt_consume_ok(s, &ref, nb + 1, DT_STOP_EPOCH_END, &runs[k], label);
		expect(runs[k].batches == nb && runs[k].epoch_ends == 1 && runs[k].failures == 0,
		       "%s: %zu batches, %zu failures, %zu epoch ends; expected %" PRIu64 ", 0, 1",
		       label, runs[k].batches, runs[k].failures, runs[k].epoch_ends, nb);
		ck_assert_int_eq(bc_close(s), 0);
		dt_ref_close(&ref);
	}
	bc_disconnect(c);
}

/* The streams under faults (and engine/direct options) equal the clean runs. */
static void compare_streams(const dt_run *clean, size_t n, const char *faults, const char *what)
{
	dt_run runs[ARRAY_SIZE(streams)];
	char label[512];

	memset(runs, 0, sizeof(runs));
	start_faults(faults);
	record_streams(runs, n, what);
	stop_ok(what);
	for (size_t k = 0; k < n; k++) {
		snprintf(label, sizeof(label), "%s: %s", what, streams[k].dataset);
		expect_same_run(&clean[k], &runs[k], label);
		dt_run_free(&runs[k]);
	}
}

/* ---- 1. short reads and EAGAIN change nothing ------------------------------------------ */

START_TEST(test_short_eagain)
{
	static const struct {
		const char *faults, *engine, *direct;
	} runs[] = {
		{ "read:short=100", NULL, "off" },
		{ "read:every=3:errno=EAGAIN", NULL, NULL },
		{ "read:short=100;read:every=3:errno=EAGAIN", "pread", "off" },
		{ "read:short=4096", NULL, NULL },   /* O_DIRECT: short by whole blocks */
		/* Last, so that a failure here hides none of the above. */
		{ "read:short=100", NULL, NULL },
	};
	dt_run clean[ARRAY_SIZE(streams)];
	char what[160];

	memset(clean, 0, sizeof(clean));
	start_faults(NULL);
	record_streams(clean, ARRAY_SIZE(streams), "without faults");
	stop_ok("without faults");
	for (size_t i = 0; i < ARRAY_SIZE(runs); i++) {
		D.engine = runs[i].engine;
		D.direct = runs[i].direct;
		snprintf(what, sizeof(what), "BATCHD_FAULTS=%s, --io-engine %s, --direct %s",
			 runs[i].faults, runs[i].engine ? runs[i].engine : "auto",
			 runs[i].direct ? runs[i].direct : "auto");
		compare_streams(clean, ARRAY_SIZE(streams), runs[i].faults, what);
	}
	for (size_t k = 0; k < ARRAY_SIZE(streams); k++)
		dt_run_free(&clean[k]);
}
END_TEST

/* ---- 2. EIO every Nth read fails those batches, with a reason; the rest is exact ---------- */

/* Does reason name the dataset and one of the blocks batch (epoch, batch) of sp reads? */
static bool reason_names_batch(const char *reason, dt_ref *ref, const char *dataset,
			       const bd_sampler *sp, uint64_t epoch, uint64_t batch)
{
	uint64_t ids[256];
	char want[PATH_MAX + 64];
	uint32_t n = bd_sampler_batch_len(sp, batch);

	snprintf(want, sizeof(want), "dataset %s: ", dataset);
	if (!strstr(reason, want) || n > ARRAY_SIZE(ids))
		return false;
	bd_sampler_batch(sp, epoch, batch, ids);
	for (uint32_t i = 0; i < n; i++) {
		bp_pack_sample ps;
		const char *name, *base;
		size_t shard;

		if (bp_dataset_locate(ref->ds, ids[i], &shard, &ps) < 0)
			return false;
		name = bp_dataset_shard(ref->ds, shard)->name;
		base = strrchr(name, '/');
		/* The daemon names a one-file dataset's shard as it was asked for, relative. */
		snprintf(want, sizeof(want), "shard %s: block %" PRIu64 ":", base ? base + 1 : name,
			 ps.block);
		if (strstr(reason, want))
			return true;
	}
	return false;
}

/* Take one epoch of s one event at a time, keeping every failure's reason. */
struct failure {
	uint64_t epoch, batch;
	int result;
	char reason[BP_RING_REASON_MAX + 1];
};

static size_t consume_failing(bc_stream *s, dt_ref *ref, uint64_t batches, dt_run *run,
			      struct failure *fails, size_t max_fails, const char *what)
{
	size_t nf = 0;

	while (run->batches + run->failures < batches) {
		size_t before = run->failures;

		dt_consume_ok(s, ref, 1, DT_KEEP_FAILURES, run, what);
		if (run->failures > before && nf < max_fails) {
			const dt_event *ev = &run->ev[run->nev - 1];

			fails[nf].epoch = ev->epoch;
			fails[nf].batch = ev->batch;
			fails[nf].result = ev->result;
			snprintf(fails[nf].reason, sizeof(fails[nf].reason), "%s", run->last_error);
			nf++;
		}
	}
	return nf;
}

START_TEST(test_eio_every)
{
	static const char *const sets[] = { DSET_ONE, DSET_SHARDS };
	struct failure fails[128];
	uint64_t errors0, errors, failed_one = 0;
	bc_client *c;

	start_faults("read:every=50:errno=EIO");
	errors0 = metric_ok("batchd_errors_total{kind=\"read\"}");
	c = dt_connect_ok();
	for (size_t k = 0; k < ARRAY_SIZE(sets); k++) {
		bc_stream_opts o;
		bc_stream *s;
		bd_sampler sp;
		dt_run run = { 0 };
		dt_ref ref;
		uint64_t nb;
		size_t nf;
		char what[128];

		snprintf(what, sizeof(what), "EIO every 50th read, %s", sets[k]);
		dt_ref_ok(&ref, sets[k]);
		dt_opts(&o, sets[k], 10, BC_SHUFFLE_NONE, 0);
		dt_sampler_for(&sp, &ref, &o);
		s = dt_open_ok(c, &o);
		nb = bc_stream_batches_per_epoch(s);
		nf = consume_failing(s, &ref, nb, &run, fails, ARRAY_SIZE(fails), what);
		/* To the end of the epoch, and on into the next: no hang, no stop. */
		dt_consume_ok(s, &ref, 2, DT_KEEP_FAILURES, &run, what);
		expect(run.epoch_ends == 1, "%s: %zu epoch ends", what, run.epoch_ends);
		expect(run.failures >= 1 && run.batches >= nb / 2,
		       "%s: %zu of %" PRIu64 " batches failed", what, run.failures, nb);
		for (size_t i = 0; i < nf; i++) {
			expect(fails[i].result == -EIO, "%s: batch %" PRIu64 " failed with %s (%d), "
			       "expected -EIO", what, fails[i].batch, bc_strerror(fails[i].result),
			       fails[i].result);
			expect(strstr(fails[i].reason, "read failed") &&
			       reason_names_batch(fails[i].reason, &ref, sets[k], &sp, fails[i].epoch,
						  fails[i].batch),
			       "%s: batch %" PRIu64 " failed with \"%s\", which names no block of "
			       "dataset %s that batch reads", what, fails[i].batch, fails[i].reason,
			       sets[k]);
		}
		/* The batches that arrived are in place and exact (dt_consume checked the bytes). */
		for (size_t i = 0; i < run.nev; i++) {
			const dt_event *ev = &run.ev[i];

			if (ev->result != 0)
				continue;
			for (uint32_t j = 0; j < ev->count; j++)
				expect(run.ids[ev->first + j] == ev->batch * 10 + j, "%s: batch %" PRIu64
				       " sample %u is id %" PRIu64, what, ev->batch, j,
				       run.ids[ev->first + j]);
		}
		if (k == 0)
			failed_one = run.failures;
		printf("%s: %zu of %" PRIu64 " batches failed, e.g. \"%s\"\n", what,
		       run.failures, nb, nf ? fails[0].reason : "");
		dt_run_free(&run);
		ck_assert_int_eq(bc_close(s), 0);
		dt_ref_close(&ref);
	}
	bc_disconnect(c);
	/* Each failed batch of one.bpk (one sample per block, no cache) is at least one failed read. */
	errors = metric_ok("batchd_errors_total{kind=\"read\"}") - errors0;
	expect(errors >= failed_one && errors >= 1,
	       "batchd_errors_total{kind=\"read\"} went up by %" PRIu64 "; %" PRIu64 " batches of "
	       DSET_ONE " alone failed", errors, failed_one);
}
END_TEST

/* ---- 3. a persistent EIO at one shard offset fails exactly the batches reading it ---------- */

START_TEST(test_eio_offset)
{
	char faults[512], want[256];
	const bp_shard *sh;
	bp_pack_block blk, best = { 0 };
	uint64_t block = 0, lo, hi, off, nb;
	bc_client *c;
	bc_stream_opts o;
	bc_stream *s, *other;
	bd_sampler sp;
	dt_run run = { 0 }, orun = { 0 };
	dt_ref ref, ref1;
	size_t si, hits = 0;

	dt_ref_ok(&ref, DSET_SHARDS);
	dt_ref_ok(&ref1, DSET_ONE);
	si = bp_dataset_shard_count(ref.ds) > 1 ? 1 : 0;
	sh = bp_dataset_shard(ref.ds, si);
	/* The block with the most stored bytes: its middle is far from its neighbours. */
	for (uint64_t b = 0; b < sh->index.block_count; b++) {
		bp_pack_index_block(&sh->index, b, &blk);
		if (blk.stored_size > best.stored_size)
			best = blk, block = b;
	}
	ck_assert_uint_gt(best.stored_size, 16);
	off = best.offset + best.stored_size / 2;
	/* An O_DIRECT read of a neighbour rounds out to 4 KiB: keep the fault out of its reach. */
	if (best.stored_size / 2 < 4096)
		D.direct = "off";
	lo = sh->first_sample + best.first_sample;
	hi = lo + best.sample_count;
	snprintf(faults, sizeof(faults), "read:shard=%s:offset=%" PRIu64 ":errno=EIO", sh->name, off);
	start_faults(faults);

	c = dt_connect_ok();
	dt_opts(&o, DSET_SHARDS, 10, BC_SHUFFLE_GLOBAL, 31);
	dt_sampler_for(&sp, &ref, &o);
	s = dt_open_ok(c, &o);
	nb = bc_stream_batches_per_epoch(s);
	/* A stream on another dataset alongside: never touched. */
	{
		bc_stream_opts oo;

		dt_opts(&oo, DSET_ONE, 25, BC_SHUFFLE_GLOBAL, 5);
		other = dt_open_ok(c, &oo);
	}
	for (uint64_t k = 0; k < 2 * nb; k++) {
		dt_consume_ok(s, &ref, 1, DT_KEEP_FAILURES, &run, "persistent EIO stream");
		if (run.ev[run.nev - 1].result < 0) {
			snprintf(want, sizeof(want), "dataset %s: shard %s: block %" PRIu64 ": read failed",
				 DSET_SHARDS, sh->name, block);
			expect(strstr(run.last_error, want), "batch %" PRIu64 " failed with \"%s\", "
			       "expected a reason containing \"%s\"", run.ev[run.nev - 1].batch,
			       run.last_error, want);
		}
		if (k % 8 == 0)
			dt_consume_ok(other, &ref1, 1, 0, &orun, "a stream beside the faulty one");
	}
	/* The second epoch's end, announced before anything of the third. */
	dt_consume_ok(s, &ref, 1, DT_KEEP_FAILURES | DT_STOP_EPOCH_END, &run, "persistent EIO stream");
	dt_consume_ok(other, &ref1, bc_stream_batches_per_epoch(other), 0, &orun,
		   "a stream beside the faulty one");
	ck_assert_uint_eq(orun.failures, 0);

	/* Exactly the batches that hold a sample of that block failed, in both epochs. */
	for (size_t i = 0, k = 0; i < run.nev; i++) {
		const dt_event *ev = &run.ev[i];
		uint64_t ids[16];
		bool hit = false;

		if (ev->result == BC_EPOCH_END)
			continue;
		expect(ev->epoch == k / nb && ev->batch == k % nb, "event %zu is (%" PRIu64 ", %"
		       PRIu64 "), expected batch %zu", i, ev->epoch, ev->batch, k);
		bd_sampler_batch(&sp, ev->epoch, ev->batch, ids);
		for (uint32_t j = 0; j < bd_sampler_batch_len(&sp, ev->batch); j++)
			hit |= ids[j] >= lo && ids[j] < hi;
		hits += hit;
		expect(hit ? ev->result == -EIO : ev->result == 0,
		       "shard %s block %" PRIu64 " (samples %" PRIu64 "..%" PRIu64 ") unreadable at "
		       "byte %" PRIu64 ": epoch %" PRIu64 " batch %" PRIu64 " gave %s (%d)", sh->name,
		       block, lo, hi - 1, off, ev->epoch, ev->batch, bc_strerror(ev->result),
		       ev->result);
		k++;
	}
	expect(run.epoch_ends == 2, "two epochs announced %zu ends", run.epoch_ends);
	expect(hits >= 2 && run.failures == hits, "%zu batches hold the block, %zu failed", hits,
	       run.failures);
	dt_run_free(&run);
	dt_run_free(&orun);
	ck_assert_int_eq(bc_close(s), 0);
	ck_assert_int_eq(bc_close(other), 0);
	bc_disconnect(c);
	dt_ref_close(&ref);
	dt_ref_close(&ref1);
}
END_TEST

/* ---- 4. late completions: the same bytes, only later ---------------------------------------- */

START_TEST(test_delayed)
{
	const size_t n = 2;      /* the cached and the block-shuffled stream; one.bpk is 1000 reads */
	dt_run clean[ARRAY_SIZE(streams)];
	double t0;

	memset(clean, 0, sizeof(clean));
	start_faults(NULL);
	record_streams(clean, n, "without faults");
	stop_ok("without faults");
	t0 = now_s();
	compare_streams(clean, n, "read:every=5:delay_ms=50", "every 5th completion 50 ms late");
	printf("delayed completions: %.2f s\n", now_s() - t0);
	for (size_t k = 0; k < n; k++)
		dt_run_free(&clean[k]);
}
END_TEST

/* ---- 5. io_uring unavailable, O_DIRECT unsupported: the fallbacks, identical output --------- */

START_TEST(test_fallbacks)
{
	dt_run clean[ARRAY_SIZE(streams)], runs[ARRAY_SIZE(streams)];
	char why[128], *json;
	bool uring = dt_io_uring_usable(why, sizeof(why)), had_direct;

	memset(clean, 0, sizeof(clean));
	memset(runs, 0, sizeof(runs));
	if (!uring)
		printf("SKIP io_uring reference run: %s; comparing with pread\n", why);
	D.engine = uring ? "io_uring" : "pread";
	start_faults(NULL);
	record_streams(clean, ARRAY_SIZE(streams), D.engine);
	had_direct = dt_log_contains(&D, "O_DIRECT reads");
	stop_ok(D.engine);

	/* io_uring setup refused: auto falls back to pread and says so. */
	D.engine = NULL;
	start_faults("uring:setup=EPERM");
	json = dt_status_ok();
	expect(strstr(json, "\"io_engine\": \"pread\""), "io_uring setup refused, status says %s",
	       json);
	free(json);
	record_streams(runs, ARRAY_SIZE(streams), "uring:setup=EPERM");
	stop_ok("uring:setup=EPERM");
	for (size_t k = 0; k < ARRAY_SIZE(streams); k++) {
		expect_same_run(&clean[k], &runs[k], "io_uring unavailable");
		dt_run_free(&runs[k]);
	}

	/* O_DIRECT unsupported: buffered reads (even when asked for auto), same bytes. */
	memset(runs, 0, sizeof(runs));
	D.direct = "auto";
	start_faults("direct:off");
	record_streams(runs, ARRAY_SIZE(streams), "direct:off");
	expect(!dt_log_contains(&D, "O_DIRECT reads") && dt_log_contains(&D, "buffered reads"),
	       "direct:off: the datasets were not opened for buffered reads");
	stop_ok("direct:off");
	for (size_t k = 0; k < ARRAY_SIZE(streams); k++) {
		expect_same_run(&clean[k], &runs[k], "O_DIRECT unsupported");
		dt_run_free(&runs[k]);
		dt_run_free(&clean[k]);
	}
	if (!had_direct)
		printf("NOTE: the reference run used buffered reads already (no O_DIRECT on %s)\n",
		       dt_g.dir);

	/* Asked for io_uring by name when it cannot be set up: a clean refusal to start. */
	if (uring) {
		int st;

		D.engine = "io_uring";
		D.direct = NULL;
		expect(spawn_daemon("uring:setup=EPERM", &st) == 1,
		       "--io-engine io_uring started with io_uring refused");
		expect(WIFEXITED(st) && WEXITSTATUS(st) == 1 &&
		       dt_log_contains(&D, "cannot start the I/O engine") &&
		       !dt_log_contains(&D, "Sanitizer"),
		       "--io-engine io_uring with io_uring refused: exit %s %d, %s",
		       WIFEXITED(st) ? "status" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) :
		       WTERMSIG(st), dt_log_contains(&D, "Sanitizer") ? "and a sanitizer report "
		       "(see the log)" : "without \"cannot start the I/O engine\" in the log");
	}
}
END_TEST

/* ---- 6. allocation failure at every point in turn ----------------------------------------- */

enum alloc_end { AE_CLEAN, AE_START, AE_OPEN, AE_BATCH, AE_STREAM, AE_LATER };

static const char *const alloc_end_names[] = {
	"clean", "refused to start", "bc_open failed", "a batch failed", "the stream ended",
	"failed after the epoch",
};

/* One run with alloc:countdown=n: what happened, and anything wrong in *bad. */
static enum alloc_end alloc_run(unsigned n, dt_ref *ref, char *note, size_t notelen, char *bad,
				size_t badlen)
{
	char faults[64];
	enum alloc_end end = AE_CLEAN;
	bc_client *c = NULL;
	bc_stream_opts o;
	bc_stream *s = NULL;
	int st, r;

	snprintf(faults, sizeof(faults), "alloc:countdown=%u", n);
	note[0] = bad[0] = '\0';
	if (spawn_daemon(faults, &st) == 1) {
		/* Before the socket: only a clean exit with a message will do. */
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 1 || dt_log_contains(&D, "Sanitizer") ||
		    !dt_log_contains(&D, "Cannot allocate memory"))
			snprintf(bad, badlen, "exited at startup with %s %d%s", WIFEXITED(st) ? "status"
				 : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st),
				 dt_log_contains(&D, "Sanitizer") ? " and a sanitizer report" : "");
		snprintf(note, notelen, "batchd refused to start");
		return AE_START;
	}
	r = bc_connect(D.sock, &c);
	if (r < 0) {
		snprintf(bad, badlen, "bc_connect: %s", bc_strerror(r));
		goto out;
	}
	dt_opts(&o, DSET_BLK, 100, BC_SHUFFLE_NONE, 0);
	o.prefetch = 4;
	r = bc_open(c, &o, &s);
	if (r < 0) {
		end = AE_OPEN;
		snprintf(note, notelen, "bc_open: %s: \"%s\"", bc_strerror(r), bc_client_error(c));
		if (r != -ENOMEM || !bc_client_error(c)[0]) {
			snprintf(bad, badlen, "bc_open failed with %s (%d) and message \"%s\"; expected "
				 "-ENOMEM with a message", bc_strerror(r), r, bc_client_error(c));
			goto out;
		}
		/* The countdown is spent: the next open must work and stream cleanly. */
		r = bc_open(c, &o, &s);
		if (r < 0) {
			snprintf(bad, badlen, "after an -ENOMEM open, the next failed: %s: \"%s\"",
				 bc_strerror(r), bc_client_error(c));
			goto out;
		}
	}
	for (;;) {
		uint64_t epoch, batch, e2, b2;
		bc_batch *b;

		bc_stream_position(s, &epoch, &batch);
		r = bc_next(s, &b, WAIT_MS);
		if (r == BC_EPOCH_END)
			break;
		if (r == 0) {
			bool in_order = bc_batch_epoch(b) == epoch && bc_batch_index(b) == batch &&
					bc_batch_count(b) == 100 &&
					bc_batch_sample_id(b, 0) == batch * 100;

			if (!in_order || dt_batch_check(b, ref, E, sizeof(E)) < 0)
				snprintf(bad, badlen, "batch %" PRIu64 " is wrong: %.500s", batch,
					 in_order ? E : "not the batch the sampler plans");
			bc_release(b);
			if (bad[0])
				goto out;
			continue;
		}
		bc_stream_position(s, &e2, &b2);
		if (r == -ETIMEDOUT) {
			snprintf(bad, badlen, "no batch (%" PRIu64 ", %" PRIu64 ") within %d ms", epoch,
				 batch, WAIT_MS);
			goto out;
		}
		if (e2 != epoch || b2 != batch) {
			/* A failed batch: -ENOMEM and a reason; the stream goes on. */
			if (end < AE_BATCH)
				end = AE_BATCH;
			snprintf(note, notelen, "batch %" PRIu64 ": %s: \"%s\"", batch, bc_strerror(r),
				 bc_stream_error(s));
			if (r != -ENOMEM || !bc_stream_error(s)[0]) {
				snprintf(bad, badlen, "batch %" PRIu64 " failed with %s (%d): \"%s\"; "
					 "expected -ENOMEM with a reason", batch, bc_strerror(r), r,
					 bc_stream_error(s));
				goto out;
			}
			continue;
		}
		/* The session ended (it could not plan): -ENOMEM, said so. */
		end = AE_STREAM;
		snprintf(note, notelen, "stream ended at batch %" PRIu64 ": %s: \"%s\"", batch,
			 bc_strerror(r), bc_stream_error(s));
		if (r != -ENOMEM)
			snprintf(bad, badlen, "stream ended with %s (%d): \"%s\"; expected -ENOMEM",
				 bc_strerror(r), r, bc_stream_error(s));
		break;
	}
out:
	if (s)
		bc_close(s);
	bc_disconnect(c);
	if (!bad[0]) {
		struct idle_ctx ic = { .used = 0 };

		/* Everything given back: no session, no staging memory (the cache may keep blocks). */
		if (!dt_wait_status(D.sock, idle_reached, &ic, TRIES))
			snprintf(bad, badlen, "%zu sessions holding %" PRIu64 " bytes left after the "
				 "client closed", ic.got_sessions, ic.got_used);
	}
	if (end == AE_CLEAN && (dt_log_contains(&D, "Cannot allocate memory") ||
				dt_log_contains(&D, "out of memory"))) {
		end = AE_LATER;
		snprintf(note, notelen, "the epoch was clean; the log reports a failed allocation");
	}
	r = dt_daemon_stop(&D);
	if (r != 0 && !bad[0])
		snprintf(bad, badlen, "batchd exited with status %d at SIGTERM%s", r,
			 dt_log_contains(&D, "LeakSanitizer") ? " (LeakSanitizer: a leak)" : "");
	return end;
}

START_TEST(test_alloc_countdown)
{
	const double budget_s = 25;
	char note[512], bad[768], log[8192] = "", missed[4096] = "";
	size_t at = 0, mat = 0;
	unsigned clean_in_a_row = 0, n, runs = 0, counts[6] = { 0 };
	double t0 = now_s();
	dt_ref ref;

	dt_ref_ok(&ref, DSET_BLK);
	/*
	 * N by one while small, then in growing steps; done once 16 runs in a
	 * row never met the countdown (the whole open and epoch fit below N;
	 * a failed cache allocation is silent, so a few clean runs prove nothing).
	 * The steps grow by an eighth, so a late failure (one that only a
	 * run's timing reaches, as under ThreadSanitizer) still leaves room for
	 * 16 more runs below the bound; the time budget ends it in any case.
	 */
	for (n = 1; n <= 4000; ) {
		enum alloc_end end = alloc_run(n, &ref, note, sizeof(note), bad, sizeof(bad));
		double spent = now_s() - t0;

		runs++;
		counts[end]++;
		if (end != AE_CLEAN && at < sizeof(log) - 200)
			at += (size_t)snprintf(log + at, sizeof(log) - at, "  N=%u: %s: %s\n", n,
					       alloc_end_names[end], note);
		if (bad[0] && mat < sizeof(missed) - 200)
			mat += (size_t)snprintf(missed + mat, sizeof(missed) - mat, "  N=%u: %s\n", n,
						bad);
		clean_in_a_row = end == AE_CLEAN ? clean_in_a_row + 1 : 0;
		if (clean_in_a_row >= 16)
			break;
		if (spent > budget_s) {
			printf("NOTE: allocation countdown stopped at N=%u after %.1f s\n", n, spent);
			break;
		}
		n += n < 128 && spent < budget_s / 2 ? 1 : n / 8;
	}
	printf("allocation countdown: %u runs (N up to %u) in %.1f s: %u clean, %u refused to start, "
	       "%u failed opens, %u failed batches, %u ended streams, %u later failures\n%s",
	       runs, n, now_s() - t0, counts[AE_CLEAN], counts[AE_START], counts[AE_OPEN],
	       counts[AE_BATCH], counts[AE_STREAM], counts[AE_LATER], log);
	dt_ref_close(&ref);
	expect(!mat, "allocation failures not handled cleanly:\n%s", missed);
	expect(clean_in_a_row >= 16, "no run got through without meeting the countdown (N <= %u)", n);
	expect(counts[AE_OPEN] + counts[AE_BATCH] + counts[AE_STREAM] + counts[AE_LATER] > 0,
	       "no allocation failure ever reached a session");
}
END_TEST

/* ---- the suite ------------------------------------------------------------------------------ */

static Suite *faults_suite(void)
{
	Suite *s = suite_create("faults");

	tcase_add_test(dt_tcase(s, "short_eagain", dt_setup_dir), test_short_eagain);
	tcase_add_test(dt_tcase(s, "eio_every", dt_setup_dir), test_eio_every);
	tcase_add_test(dt_tcase(s, "eio_offset", dt_setup_dir), test_eio_offset);
	tcase_add_test(dt_tcase(s, "delayed", dt_setup_dir), test_delayed);
	tcase_add_test(dt_tcase(s, "fallbacks", dt_setup_dir), test_fallbacks);
	tcase_add_test(dt_tcase(s, "alloc_countdown", dt_setup_dir), test_alloc_countdown);
	return s;
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);   /* notes reach the log before a failing test exits */
	unsetenv("BATCHD_FAULTS");
	return dt_check_main(&D, faults_suite);
}
