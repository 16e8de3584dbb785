/* SPDX-License-Identifier: MIT */
/*
 * test-faults.c - faults and hostile clients: a real batchd started with
 * BATCHD_FAULTS (daemon/base/fault.h) in its environment, and clients that die,
 * stop, flood and scribble on the shared memory they were given.
 *
 * Why a suite of its own: test-daemon.c proves what a healthy daemon
 * delivers; this one proves that what goes wrong underneath it (a disk that
 * answers EIO, EAGAIN or in dribbles, late completions, io_uring or
 * O_DIRECT missing, malloc failing at every point in turn) and what a
 * client does to it (SIGKILL at every protocol state, SIGSTOP past the
 * lease, a thousand open/kill cycles, a flood of opens, release marks
 * repeated, reordered or from the future) costs exactly what it should: the affected batch or session, with
 * a reason, and nothing else. Delivered samples are compared byte for byte
 * with the reference reader (and with a run without faults); memory and
 * descriptors are read back from the status document and /proc; every
 * fixture ends by stopping the daemon with SIGTERM and asserting exit 0,
 * which in sanitizer builds also means LeakSanitizer found nothing.
 *
 * Needs batchd built with -Dfault_injection=true (meson only builds this
 * suite then). BATCHD, BATCHD_PACK name the binaries; BATCHD_TEST_CYCLES
 * (optional) the number of open/kill cycles. Paths that try to leave the
 * roots have a suite of their own, test-paths.c.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <linux/io_uring.h>

#include "daemon-testlib.h"
#include "ring.h"
#include "sampler.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif
/* ThreadSanitizer shadows every byte the daemon writes several times over. */
#if defined(__SANITIZE_THREAD__)
#define TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TSAN 1
#endif
#endif
#ifndef TSAN
#define TSAN 0
#endif

static dt_daemon D;
static char E[2048];             /* why dt_* failed */

/* Fail with the daemon's recent log (daemon-testlib.h). */
#define expect dt_expect

/* ---- fixtures --------------------------------------------------------------- */

/*
 * Start D with BATCHD_FAULTS=faults (NULL or "": none) and, when asan_extra
 * is set, ASAN_OPTIONS extended by it (it means nothing to other builds) in
 * its environment alone, with a fresh log: what a test looks for there is
 * about this daemon. @return as dt_daemon_start (1: it exited at startup
 * and may_exit was asked for; the wait status in D.exit_status).
 */
static int start_env(const char *faults, const char *asan_extra, bool may_exit)
{
	char fenv[512], aenv[1024];
	const char *env[3] = { NULL };
	size_t n = 0;
	int r;

	if (faults && *faults) {
		snprintf(fenv, sizeof(fenv), "BATCHD_FAULTS=%s", faults);
		env[n++] = fenv;
	}
	if (asan_extra)
		env[n++] = dt_asan_options_env(aenv, sizeof(aenv), asan_extra);
	ck_assert_int_eq(truncate(D.log, 0) == 0 || errno == ENOENT, 1);
	D.env = env;
	D.may_exit = may_exit;
	r = dt_daemon_start(&D);
	D.env = NULL;
	D.may_exit = false;
	return r;
}

/* start_env that must come up, with the fault layer active when faults are asked for. */
static void start_faults_asan(const char *faults, const char *asan_extra)
{
	int r = start_env(faults, asan_extra, false);

	ck_assert_msg(r == 0, "batchd with BATCHD_FAULTS=\"%s\" did not start", faults ? faults : "");
	/* A build without the fault layer would ignore the variable and prove nothing. */
	if (faults && *faults)
		expect(dt_log_contains(&D, "fault injection active"),
		       "batchd did not report BATCHD_FAULTS=\"%s\" active (built without "
		       "-Dfault_injection=true?)", faults);
}

static void start_faults(const char *faults)
{
	start_faults_asan(faults, NULL);
}

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

/*
 * AddressSanitizer keeps freed memory in quarantine (up to 256 MiB) before
 * reusing it, so a daemon's RSS grows with every free whatever it does with
 * its memory: off for the tests that weigh RSS; leak checking stays on.
 */
#define ASAN_NO_QUARANTINE "quarantine_size_mb=0:thread_local_quarantine_size_kb=0"

static void stop_ok(const char *what)
{
	ck_assert_msg(dt_daemon_stop(&D) == 0, "%s: batchd did not exit 0 at SIGTERM", what);
}

/* ---- helpers ------------------------------------------------------------------ */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

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

/* ---- status, metrics, /proc ---------------------------------------------------------- */

/*
 * What "the daemon is back to idle" means: a number of sessions and
 * clients, and the sessions' memory (the cache may keep what they read:
 * the ram tier keeps every block).
 */
struct idle_ctx {
	size_t sessions, clients;    /* wanted; clients counts the status request itself */
	uint64_t used;               /* the sessions' memory (status memory.sessions) */
	size_t got_sessions;         /* last seen */
	uint64_t got_clients, got_used;
};

static bool idle_reached(const char *json, void *arg)
{
	struct idle_ctx *ic = arg;

	ic->got_sessions = dt_json_sessions(json);
	return dt_json_u64(json, "\"memory\": {", "sessions", &ic->got_used) &&
	       dt_json_u64(json, NULL, "clients", &ic->got_clients) &&
	       ic->got_sessions == ic->sessions && ic->got_used == ic->used &&
	       (!ic->clients || ic->got_clients == ic->clients);
}

static void expect_idle(struct idle_ctx *ic, int tries, const char *what)
{
	expect(dt_wait_status(D.sock, idle_reached, ic, tries),
	       "%s: %zu sessions, %" PRIu64 " clients, %" PRIu64 " bytes used; expected %zu, %zu, %"
	       PRIu64, what, ic->got_sessions, ic->got_clients, ic->got_used, ic->sessions,
	       ic->clients, ic->used);
}

/* The sessions' memory now, lingering included (not the cache: see idle_ctx). */
static uint64_t used_now(void)
{
	return dt_status_u64("memory.sessions");
}

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

/* VmRSS of pid in KiB, 0 when unreadable. */
static uint64_t proc_rss_kib(pid_t pid)
{
	char path[64], line[256];
	uint64_t kib = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %" SCNu64, &kib) == 1)
			break;
	fclose(f);
	return kib;
}

/* Open descriptors of pid, -1 when unreadable. */
static int proc_fds(pid_t pid)
{
	char path[64];
	struct dirent *e;
	int n = 0;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	if (!d)
		return -1;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

struct fds_ctx {
	int want, got;
};

static bool fds_back(void *arg)
{
	struct fds_ctx *fc = arg;

	fc->got = proc_fds(D.pid);
	return fc->got >= 0 && fc->got <= fc->want;
}

/*
 * The daemon's descriptors once quiet: the fewest seen over 200 ms (it
 * closes the connection of a status request only after answering it).
 */
static int proc_fds_settled(pid_t pid)
{
	int least = proc_fds(pid);

	for (int i = 0; i < 20; i++) {
		int n;

		dt_sleep_ms(10);
		n = proc_fds(pid);
		if (n >= 0 && n < least)
			least = n;
	}
	return least;
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

/* ---- 7. the lease: a stopped client loses its session, a releasing one never ------------------ */

static void setup_lease(void)
{
	static char conf[256];
	static const char *args[3];
	FILE *f;

	dt_setup_dir();
	snprintf(conf, sizeof(conf), "%s/lease.conf", D.dir);
	f = fopen(conf, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "[session]\nlease_timeout = 1\n");
	fclose(f);
	args[0] = "-c";
	args[1] = conf;
	args[2] = NULL;
	D.args = args;
	start_faults(NULL);
}

START_TEST(test_lease)
{
	struct idle_ctx ic = { 0 };
	int up[2], down[2], st, result = 0;
	bc_client *c;
	bc_stream_opts o;
	bc_stream *s;
	bc_batch *b;
	dt_ref ref;
	double t0, gone_s;
	uint64_t taken = 0;
	pid_t pid;

	ic.used = used_now();
	ck_assert_int_eq(pipe2(up, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(down, O_CLOEXEC), 0);
	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		char x;
		int r, held = 0;

		close(up[0]);
		close(down[1]);
		if (bc_connect(D.sock, &c) < 0)
			_exit(2);
		dt_opts(&o, DSET_ONE, 8, BC_SHUFFLE_NONE, 0);
		o.prefetch = 2;
		if (bc_open(c, &o, &s) < 0)
			_exit(3);
		/* Take every batch it can, release none. */
		while ((r = bc_next(s, &b, WAIT_MS)) == 0)
			held++;
		if (r != -ENOBUFS || held < 2 || write(up[1], &held, sizeof(held)) != sizeof(held))
			_exit(4);
		/* Stopped here by the parent; continued after the lease ended the session. */
		if (read(down[0], &x, 1) != 1)
			_exit(5);
		r = bc_next(s, &b, 0);
		if (write(up[1], &r, sizeof(r)) != sizeof(r))
			_exit(6);
		_exit(0);
	}
	close(up[1]);
	close(down[0]);
	ck_assert_msg(read(up[0], &result, sizeof(result)) == sizeof(result),
		      "the client child did not get to hold its batches");
	ck_assert_int_eq(kill(pid, SIGSTOP), 0);
	ck_assert_int_eq(waitpid(pid, &st, WUNTRACED), pid);
	ck_assert(WIFSTOPPED(st));
	t0 = now_s();
	/*
	 * Lease 1 s, checked once a second: the session is gone within a few
	 * seconds; its shared memory stays charged while the stopped client
	 * still maps it, and is back once the client has exited.
	 */
	expect(dt_wait_sessions(D.sock, 0, 600), "a stopped client past the lease: its session "
	       "is still listed");
	gone_s = now_s() - t0;
	expect(used_now() > ic.used, "a stopped client past the lease: the memory it still maps "
	       "is no longer charged");
	expect(dt_log_contains(&D, "the lease"), "the daemon did not log the lease expiry");
	kill(pid, SIGCONT);
	ck_assert_int_eq(write(down[1], "x", 1), 1);
	ck_assert_msg(read(up[0], &result, sizeof(result)) == sizeof(result),
		      "the continued child did not report");
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x", st);
	expect_idle(&ic, 600, "the stopped client exited after the lease");
	expect(result == -ETIME, "after the lease, the stopped client's bc_next gave %s (%d), "
	       "expected -ETIME", bc_strerror(result), result);
	close(up[0]);
	close(down[1]);
	printf("lease: a stopped client's session was gone %.2f s after SIGSTOP\n", gone_s);

	/* A slow trainer that keeps releasing outlives the lease many times over. */
	dt_ref_ok(&ref, DSET_ONE);
	c = dt_connect_ok();
	dt_opts(&o, DSET_ONE, 8, BC_SHUFFLE_NONE, 0);
	o.prefetch = 2;
	s = dt_open_ok(c, &o);
	t0 = now_s();
	while (now_s() - t0 < 2.6) {
		int r = bc_next(s, &b, WAIT_MS);

		expect(r == 0, "a releasing client, %.1f s in: bc_next %s (%d): %s", now_s() - t0,
		       bc_strerror(r), r, bc_stream_error(s));
		expect(dt_batch_check(b, &ref, E, sizeof(E)) == 0 && bc_batch_index(b) == taken,
		       "a releasing client, batch %" PRIu64 ": %s", taken, E);
		dt_sleep_ms(300);   /* work on it, well under the lease */
		ck_assert_int_eq(bc_release(b), 0);
		taken++;
	}
	{
		char *json = dt_status_ok();

		expect(dt_json_sessions(json) == 1, "the releasing client's session is gone: %s", json);
		free(json);
	}
	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
	dt_ref_close(&ref);
}
END_TEST

/* ---- 8. a client killed at every protocol state ----------------------------------------------- */

enum kill_state { KS_CONNECTED, KS_HELLO, KS_OPEN_SENT, KS_READY, KS_CONSUMING, KS_COUNT };

static const char *const kill_state_names[] = {
	"right after connect", "after HELLO", "with an OPEN pending", "after READY, before mapping",
	"mid-consume, holding batches",
};

static const bp_msg_open raw_open_one = {
	.seed = 1, .batch_size = 8, .world = 1, .prefetch = 4, .placement = BP_PLACEMENT_HOST,
	.shuffle = BP_SHUFFLE_NONE, .path = DSET_ONE, .path_len = sizeof(DSET_ONE) - 1,
};

/* In a child: reach state ks, tell the parent, wait to be killed. */
static void __attribute__((noreturn)) child_to_state(enum kill_state ks, int up)
{
	uint8_t buf[BP_MSG_MAX];
	bp_msg_ready ready;
	int fds[BP_READY_FDS], fd = -1, n;

	if (ks == KS_CONSUMING) {
		bc_client *c;
		bc_stream_opts o;
		bc_stream *s;
		bc_batch *b;

		dt_opts(&o, DSET_ONE, 8, BC_SHUFFLE_GLOBAL, 3);
		o.prefetch = 4;
		if (bc_connect(D.sock, &c) < 0 || bc_open(c, &o, &s) < 0 ||
		    bc_next(s, &b, WAIT_MS) != 0 || bc_next(s, &b, WAIT_MS) != 0)
			_exit(2);
	} else {
		fd = dt_raw_connect(D.sock);
		if (fd < 0 || (ks >= KS_HELLO && dt_raw_hello(fd, NULL) < 0))
			_exit(2);
		if (ks == KS_OPEN_SENT) {
			n = bp_msg_open_encode(&raw_open_one, buf, sizeof(buf));
			if (n < 0 || send(fd, buf, (size_t)n, MSG_NOSIGNAL) != n)
				_exit(3);
		}
		if (ks == KS_READY && dt_raw_open(fd, &raw_open_one, &ready, fds) < 0)
			_exit(4);
	}
	if (write(up, "k", 1) != 1)
		_exit(5);
	for (;;)
		pause();
}

START_TEST(test_kill_states)
{
	struct idle_ctx ic = { .sessions = 1, .clients = 2 };
	bc_client *c;
	bc_stream_opts o;
	bc_stream *s;
	dt_run run = { 0 };
	dt_ref ref;

	start_faults(NULL);
	dt_ref_ok(&ref, DSET_ONE);
	c = dt_connect_ok();
	dt_opts(&o, DSET_ONE, 16, BC_SHUFFLE_GLOBAL, 8);
	s = dt_open_ok(c, &o);
	dt_consume_ok(s, &ref, 3, 0, &run, "the normal stream");
	ic.used = used_now();
	for (int ks = 0; ks < KS_COUNT; ks++) {
		char what[128], k;
		int up[2], st;
		pid_t pid;

		snprintf(what, sizeof(what), "a client killed %s", kill_state_names[ks]);
		ck_assert_int_eq(pipe2(up, O_CLOEXEC), 0);
		fflush(NULL);
		pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			close(up[0]);
			child_to_state((enum kill_state)ks, up[1]);
		}
		close(up[1]);
		expect(read(up[0], &k, 1) == 1, "%s: the child never got there", what);
		close(up[0]);
		ck_assert_int_eq(kill(pid, SIGKILL), 0);
		ck_assert_int_eq(waitpid(pid, &st, 0), pid);
		ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
		/* Only the normal stream's session and client (and the status request) remain. */
		expect_idle(&ic, TRIES, what);
		dt_consume_ok(s, &ref, 10, 0, &run, what);
	}
	expect(run.failures == 0, "the normal stream had %zu failed batches", run.failures);
	dt_run_free(&run);
	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
	dt_ref_close(&ref);
}
END_TEST

/* ---- 9. a thousand open/kill cycles leave RSS and descriptors flat --------------------------- */

static unsigned cycles_wanted(void)
{
	const char *v = getenv("BATCHD_TEST_CYCLES");
	unsigned n = v && *v ? (unsigned)strtoul(v, NULL, 10) : 0;

	return n >= 60 ? n : SANITIZED ? 300 : 1000;
}

START_TEST(test_open_kill_cycles)
{
	struct idle_ctx ic = { .sessions = 0, .clients = 1 };
	unsigned cycles = cycles_wanted();
	struct fds_ctx fc;
	uint64_t rss50 = 0, rss, cache50 = 0, cache;
	int fds50 = 0, fds;
	double t0 = now_s();

	start_faults_asan(NULL, ASAN_NO_QUARANTINE);
	ic.used = used_now();
	for (unsigned i = 0; i < cycles; i++) {
		bool die = i % 2;    /* killed while streaming, or gone with _exit(0) */
		int up[2], st;
		char k;
		pid_t pid;

		ck_assert_int_eq(pipe2(up, O_CLOEXEC), 0);
		fflush(NULL);
		pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			bc_client *c;
			bc_stream_opts o;
			bc_stream *s;
			bc_batch *b;

			close(up[0]);
			dt_opts(&o, DSET_ONE, 8, i % 3 ? BC_SHUFFLE_GLOBAL : BC_SHUFFLE_NONE, i);
			o.prefetch = 2;
			if (bc_connect(D.sock, &c) < 0)
				_exit(2);
			if (bc_open(c, &o, &s) < 0)
				_exit(3);
			if (bc_next(s, &b, WAIT_MS) != 0)
				_exit(4);
			if (!die)
				_exit(0);    /* no bc_close, no bc_disconnect */
			if (write(up[1], "k", 1) != 1)
				_exit(5);
			for (;;)
				pause();
		}
		close(up[1]);
		if (die) {
			expect(read(up[0], &k, 1) == 1, "cycle %u: the child did not stream", i);
			kill(pid, SIGKILL);
		}
		close(up[0]);
		ck_assert_int_eq(waitpid(pid, &st, 0), pid);
		expect(die ? WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL
			   : WIFEXITED(st) && WEXITSTATUS(st) == 0,
		       "cycle %u: child status %#x (2 connect, 3 open, 4 first batch failed)", i, st);
		if (i + 1 == 50) {
			expect_idle(&ic, TRIES, "after 50 open/kill cycles");
			rss50 = proc_rss_kib(D.pid);
			cache50 = dt_status_u64("cache.bytes");
			fds50 = proc_fds_settled(D.pid);
			ck_assert(rss50 > 0 && fds50 > 0);
		}
	}
	expect_idle(&ic, TRIES, "after the open/kill cycles");
	rss = proc_rss_kib(D.pid);
	fc.want = fds50;
	dt_wait_for(fds_back, &fc, 100);
	fds = fc.got;
	printf("%u open/kill cycles in %.1f s: VmRSS %" PRIu64 " KiB -> %" PRIu64 " KiB, fds %d -> %d\n",
	       cycles, now_s() - t0, rss50, rss, fds50, fds);
	expect(fds <= fds50, "descriptors grew from %d after 50 cycles to %d after %u", fds50, fds,
	       cycles);
	/*
	 * The block cache may keep more of what later cycles read (the ram
	 * tier), and touch more pages of its bucket table (one bucket per
	 * 16 KiB of its budget), which ThreadSanitizer shadows several times
	 * over: neither is a leak.
	 */
	cache = dt_status_u64("cache.bytes");
	expect(rss <= rss50 + (TSAN ? 16384 : 4096) + (cache > cache50 ? (cache - cache50) >> 10 : 0),
	       "VmRSS grew from %" PRIu64 " KiB after 50 cycles to %" PRIu64 " KiB after %u, the "
	       "block cache from %" PRIu64 " to %" PRIu64 " KiB", rss50, rss, cycles, cache50 >> 10,
	       cache >> 10);
}
END_TEST

/* ---- 10. release marks repeated, reordered, from the future ------------------------------------ */

struct raw_session {
	int sock, fds[BP_READY_FDS];
	bp_msg_ready ready;
	const uint8_t *data;
	bp_ring_ctrl *ctrl;
	const volatile bp_ring_header *hdr;
};

/* Batch seq off the ring: descriptor and bytes as ring.h lays them out (shuffle none). */
static void raw_check(struct raw_session *rs, dt_ref *ref, uint64_t seq)
{
	const bp_ring_desc *d;
	const bp_ring_sample *t;
	uint64_t nb = rs->ready.batches_per_epoch;

	expect(dt_ring_wait_produced(rs->hdr, seq + 1, TRIES), "raw session: batch %" PRIu64 " never "
	       "published (state %u, error %d)", seq, rs->hdr->state, rs->hdr->error);
	d = (const bp_ring_desc *)(rs->data + BP_RING_HEADER_SIZE +
				   (seq % rs->ready.slots) * BP_RING_DESC_SIZE);
	expect(d->seq == seq && d->epoch == seq / nb && d->batch == seq % nb && d->status == 0 &&
	       d->count == rs->ready.batch_size,
	       "raw session: descriptor of batch %" PRIu64 ": seq %" PRIu64 " epoch %" PRIu64
	       " batch %" PRIu64 " count %u status %d", seq, d->seq, d->epoch, d->batch, d->count,
	       d->status);
	t = (const bp_ring_sample *)(rs->data + d->record);
	for (uint32_t i = 0; i < d->count; i++) {
		uint64_t id = (seq % nb) * rs->ready.batch_size + i;

		expect(t[i].id == id, "raw batch %" PRIu64 " sample %u has id %" PRIu64, seq, i,
		       t[i].id);
		expect(dt_ref_check(ref, id, rs->data + d->payload + t[i].offset, (size_t)t[i].size,
				    E, sizeof(E)) == 0, "raw batch %" PRIu64 ": %s", seq, E);
	}
}

/* Store a release mark and poke the daemon, as libbatchclient does. */
static void raw_mark(struct raw_session *rs, uint32_t slot, uint64_t mark)
{
	uint64_t one = 1;

	__atomic_store_n(&rs->ctrl->release[slot], mark, __ATOMIC_SEQ_CST);
	ck_assert_int_eq(write(rs->fds[2], &one, sizeof(one)), (ssize_t)sizeof(one));
}

static void raw_release(struct raw_session *rs, uint64_t seq)
{
	raw_mark(rs, (uint32_t)(seq % rs->ready.slots), seq + 1);
}

struct released_ctx {
	uint64_t session, want, got;
};

static bool released_at_least(const char *json, void *arg)
{
	struct released_ctx *rc = arg;
	char anchor[64];

	snprintf(anchor, sizeof(anchor), "{\"id\": %" PRIu64 ",", rc->session);
	return dt_json_u64(json, anchor, "released", &rc->got) && rc->got >= rc->want;
}

static void expect_released(struct raw_session *rs, uint64_t n, const char *what)
{
	struct released_ctx rc = { .session = rs->ready.session, .want = n };

	expect(dt_wait_status(D.sock, released_at_least, &rc, TRIES), "%s: the daemon reclaimed %" PRIu64
	       " batches, expected %" PRIu64, what, rc.got, n);
	/* And not more than were released. */
	expect(rc.got == n, "%s: the daemon reclaimed %" PRIu64 " batches, only %" PRIu64
	       " were released", what, rc.got, n);
}

START_TEST(test_release_marks)
{
	struct raw_session rs = { 0 };
	bc_client *c;
	bc_stream_opts o;
	bc_stream *good;
	dt_run run = { 0 };
	dt_ref ref, ref1;
	uint64_t seq, slots;
	struct pollfd pfd;
	int r;

	start_faults(NULL);
	dt_ref_ok(&ref, DSET_BLK);
	dt_ref_ok(&ref1, DSET_ONE);
	c = dt_connect_ok();
	dt_opts(&o, DSET_BLK, 20, BC_SHUFFLE_GLOBAL, 9);
	good = dt_open_ok(c, &o);
	dt_consume_ok(good, &ref, 3, 0, &run, "good stream before");

	rs.sock = dt_raw_connect(D.sock);
	ck_assert_int_ge(rs.sock, 0);
	ck_assert_int_eq(dt_raw_hello(rs.sock, NULL), 0);
	r = dt_raw_open(rs.sock, &raw_open_one, &rs.ready, rs.fds);
	expect(r == 0, "raw OPEN: %s (%d)", bc_strerror(r), r);
	slots = rs.ready.slots;
	ck_assert_uint_ge(slots, 4);
	rs.data = mmap(NULL, rs.ready.data_size, PROT_READ, MAP_SHARED, rs.fds[0], 0);
	ck_assert_ptr_ne(rs.data, MAP_FAILED);
	rs.ctrl = mmap(NULL, rs.ready.ctrl_size, PROT_READ | PROT_WRITE, MAP_SHARED, rs.fds[1], 0);
	ck_assert_ptr_ne(rs.ctrl, MAP_FAILED);
	rs.hdr = (const bp_ring_header *)rs.data;

	for (seq = 0; seq < 4; seq++)
		raw_check(&rs, &ref1, seq);
	/* Repeated: the same mark twice. */
	raw_release(&rs, 0);
	raw_release(&rs, 0);
	expect_released(&rs, 1, "release 0 twice");
	/* Reordered: 2 before 1 (nothing moves until 1 comes), then 3. */
	raw_release(&rs, 2);
	expect_released(&rs, 1, "release 2 before 1");
	raw_release(&rs, 1);
	expect_released(&rs, 3, "then release 1");
	raw_release(&rs, 3);
	raw_release(&rs, 3);
	expect_released(&rs, 4, "release 3 twice");
	/* Round the ring a few times, in order; every record reused intact. */
	for (; seq < 4 * slots; seq++) {
		raw_check(&rs, &ref1, seq);
		raw_release(&rs, seq);
		/* A stale mark (two laps old) in the slot of a batch not yet released. */
		if (seq == 2 * slots) {
			raw_check(&rs, &ref1, seq + 1);
			raw_mark(&rs, (uint32_t)((seq + 1) % slots), seq + 2 - 2 * slots);
			expect_released(&rs, seq + 1, "a stale mark two laps old");
		}
	}
	expect_released(&rs, seq, "in-order releases");
	dt_consume_ok(good, &ref, 5, 0, &run, "good stream beside the raw one");

	/* From the future: the right slot, a thousand laps ahead. */
	raw_check(&rs, &ref1, seq);
	raw_mark(&rs, (uint32_t)(seq % slots), seq + 1 + 1000 * slots);
	expect(dt_ring_wait_stopped(rs.hdr, TRIES), "a release mark %" PRIu64 " laps ahead did "
	       "not end the session", (uint64_t)1000);
	expect(rs.hdr->error == -EPROTO, "stopped with error %d, expected -EPROTO", rs.hdr->error);
	pfd = (struct pollfd){ .fd = rs.fds[3], .events = POLLIN };
	expect(poll(&pfd, 1, WAIT_MS) == 1 && (pfd.revents & POLLIN),
	       "the published pipe was not poked when the session stopped");
	/* The raw session goes, counted as a ring violation; the good one stays. */
	expect(dt_wait_sessions(D.sock, 1, TRIES), "the hostile session was not let go");
	expect(dt_status_u64("ring_violations") == 1, "ring_violations is not 1");
	dt_consume_ok(good, &ref, bc_stream_batches_per_epoch(good), 0, &run, "good stream after");
	expect(run.failures == 0, "the good stream had %zu failures", run.failures);
	munmap((void *)rs.data, rs.ready.data_size);
	munmap(rs.ctrl, rs.ready.ctrl_size);
	for (int i = 0; i < BP_READY_FDS; i++)
		close(rs.fds[i]);
	close(rs.sock);
	dt_run_free(&run);
	ck_assert_int_eq(bc_close(good), 0);
	bc_disconnect(c);
	dt_ref_close(&ref);
	dt_ref_close(&ref1);
}
END_TEST

/* ---- 11. a flood of opens: refused at the limits, memory bounded, all freed ------------------- */

static void setup_flood(void)
{
	dt_setup_dir();
	D.memory = "64M";
	start_faults_asan(NULL, ASAN_NO_QUARANTINE);
}

START_TEST(test_open_flood)
{
	static const struct {
		uint32_t batch, prefetch;
		int code;
		const char *what;
	} phases[] = {
		{ 256, 8, -ENOMEM, "large sessions until the memory budget refuses" },
		{ 4, 1, -EMFILE, "small sessions until the per-connection limit refuses" },
	};
	struct idle_ctx ic = { .sessions = 0, .clients = 1 };
	struct fds_ctx fc;
	/* The daemon's own heap, threads and read buffers at work; sanitizer shadow on top. */
	const uint64_t margin_kib = SANITIZED ? 65536 : 32768;
	uint64_t rss0, budget_kib;
	int fds0;

	/* Warm up first: the daemon keeps datasets it opened open for the next session. */
	{
		bc_client *c = dt_connect_ok();
		bc_stream_opts o;

		dt_opts(&o, DSET_ONE, 4, BC_SHUFFLE_NONE, 0);
		ck_assert_int_eq(bc_close(dt_open_ok(c, &o)), 0);
		bc_disconnect(c);
	}
	ic.used = 0;
	expect_idle(&ic, TRIES, "after a warm-up session");
	rss0 = proc_rss_kib(D.pid);
	fds0 = proc_fds_settled(D.pid);
	ck_assert(rss0 > 0 && fds0 > 0);
	ic.used = used_now();
	budget_kib = dt_status_u64("memory.budget") / 1024;
	for (size_t p = 0; p < ARRAY_SIZE(phases); p++) {
		static int held[128][BP_READY_FDS];
		bp_msg_open m = raw_open_one;
		bp_msg_hello_ok ok;
		bp_msg_ready ready;
		size_t n = 0;
		uint64_t rss;
		int fd = dt_raw_connect(D.sock), r;

		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(dt_raw_hello(fd, &ok), 0);
		m.batch_size = phases[p].batch;
		m.prefetch = phases[p].prefetch;
		while (n < ARRAY_SIZE(held) && (r = dt_raw_open(fd, &m, &ready, held[n])) == 0)
			n++;
		expect(n >= 1 && r == phases[p].code, "%s: %zu sessions, then %s (%d); expected %s",
		       phases[p].what, n, bc_strerror(r), r, bc_strerror(phases[p].code));
		if (phases[p].code == -EMFILE)
			expect(n == ok.max_sessions, "%s: %zu sessions, HELLO_OK said %u",
			       phases[p].what, n, ok.max_sessions);
		/* Let the daemon stage all it will for every session, then weigh it. */
		dt_sleep_ms(SANITIZED ? 1500 : 500);
		rss = proc_rss_kib(D.pid);
		printf("%s: %zu sessions; VmRSS %" PRIu64 " KiB -> %" PRIu64 " KiB (budget %" PRIu64
		       " KiB)\n", phases[p].what, n, rss0, rss, budget_kib);
		if (TSAN)
			printf("NOTE: RSS bound not checked under ThreadSanitizer (its shadow of the "
			       "staged bytes outweighs them)\n");
		else
			expect(rss < rss0 + budget_kib + margin_kib, "%s: VmRSS grew from %" PRIu64
			       " KiB to %" PRIu64 " KiB, over the %" PRIu64 " KiB budget and a %"
			       PRIu64 " KiB margin", phases[p].what, rss0, rss, budget_kib, margin_kib);
		/* The client goes: everything it held comes back. */
		close(fd);
		for (size_t i = 0; i < n; i++)
			for (int k = 0; k < BP_READY_FDS; k++)
				close(held[i][k]);
		expect_idle(&ic, TRIES, phases[p].what);
		fc.want = fds0;
		expect(dt_wait_for(fds_back, &fc, TRIES), "%s: the daemon holds %d descriptors, %d "
		       "before", phases[p].what, fc.got, fds0);
	}
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
	tcase_add_test(dt_tcase(s, "lease", setup_lease), test_lease);
	tcase_add_test(dt_tcase(s, "kill_states", dt_setup_dir), test_kill_states);
	tcase_add_test(dt_tcase(s, "open_kill_cycles", dt_setup_dir), test_open_kill_cycles);
	tcase_add_test(dt_tcase(s, "release_marks", dt_setup_dir), test_release_marks);
	tcase_add_test(dt_tcase(s, "open_flood", setup_flood), test_open_flood);
	return s;
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);   /* notes reach the log before a failing test exits */
	unsetenv("BATCHD_FAULTS");
	return dt_check_main(&D, faults_suite);
}
