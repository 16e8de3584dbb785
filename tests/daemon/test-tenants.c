/* SPDX-License-Identifier: MIT */
/*
 * test-tenants.c - one client cannot take more than its share from the
 * others: a real batchd on a temporary socket, raw protocol clients that
 * misbehave, and libbatchclient ones that should not notice.
 *
 * Each TCase is one way a client could otherwise get round the limits:
 * keeping a session's shared memory after closing it (it stays charged to
 * the budget and to the uid until the client lets go), opening sessions
 * whose daemon-side bookkeeping is far larger than their shared memory
 * (it is charged too), queueing so many tiny blocks that everybody else's
 * first batch waits behind them (sessions are served round-robin), and
 * writing absurd wait counters into the control memfd (they are clamped).
 * Every fixture stops the daemon with SIGTERM and asserts it exits 0.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <check.h>

#include "daemon-testlib.h"
#include "pack-testlib.h"
#include "pipeline_priv.h"
#include "ring.h"
#include "session.h"

static dt_daemon D;

#define expect dt_expect

#define LIMIT (UINT64_C(16) << 20)   /* memory_per_uid: the smallest allowed */

#define TINY "tiny.bpk"              /* made by setup_tiny: TINY_SAMPLES of 16 bytes, one per block */
#define TINY_SAMPLES 20000u

/* ---- fixtures --------------------------------------------------------------- */

static void setup_limited(void)
{
	dt_conf_start("[memory]\nbudget = 1G\n[limits]\nmemory_per_uid = 16M\n");
}

static void setup(void)
{
	dt_conf_start("[memory]\nbudget = 2G\n");
}

/* A pack of TINY_SAMPLES 16-byte samples, one per block, in the daemon's root. */
static void setup_tiny(void)
{
	char path[PATH_MAX];
	pt_samples s;
	int fd;

	dt_conf_start("[memory]\nbudget = 2G\n");
	pt_samples_make(&s, TINY_SAMPLES, 16, 16, PT_TEXT, 7);
	fd = open(dt_root_path(&D, TINY, path, sizeof(path)), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC,
		  0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pt_pack_write(fd, &s, 1, NULL, 0, 1, NULL), 0);
	close(fd);
	pt_samples_free(&s);
}

/* ---- helpers ------------------------------------------------------------------ */

static bp_msg_open open_msg(const char *path, uint32_t batch, uint32_t prefetch)
{
	return (bp_msg_open){ .seed = 1, .batch_size = batch, .world = 1, .prefetch = prefetch,
			      .placement = BP_PLACEMENT_HOST, .shuffle = BP_SHUFFLE_NONE,
			      .path = path, .path_len = (uint32_t)strlen(path) };
}

/* A raw connection that said HELLO. */
static int raw_conn(void)
{
	int fd = dt_raw_connect(D.sock);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(dt_raw_hello(fd, NULL), 0);
	return fd;
}

/* CLOSE session id on conn and wait for CLOSED. */
static void raw_close(int conn, uint64_t id)
{
	uint8_t buf[BP_MSG_MAX];
	bp_msg_session m = { .session = id }, back;
	int n = bp_msg_session_encode(BP_MSG_CLOSE, &m, buf, sizeof(buf)), got, fds[BP_READY_FDS];

	ck_assert_int_gt(n, 0);
	ck_assert_int_eq(send(conn, buf, (size_t)n, MSG_NOSIGNAL), n);
	n = dt_raw_recv(conn, buf, sizeof(buf), fds, BP_READY_FDS, &got, WAIT_MS);
	expect(n > 0 && bp_msg_session_decode(BP_MSG_CLOSED, buf, (size_t)n, &back) == 0 &&
	       back.session == id, "no CLOSED for session %" PRIu64 " (%d)", id, n);
}

/* The status JSON's memory.sessions: every byte charged to sessions, ended or not. */
static uint64_t charged(void)
{
	char *json = dt_status_ok();
	uint64_t v = UINT64_MAX;

	expect(dt_json_u64(json, "\"memory\": {\"budget\"", "sessions", &v), "no memory in status");
	free(json);
	return v;
}

/* One session's number from the status JSON. */
static uint64_t session_u64(uint64_t id, const char *key)
{
	char *json = dt_status_ok(), at[64];
	uint64_t v = UINT64_MAX;

	snprintf(at, sizeof(at), "{\"id\": %" PRIu64 ", ", id);
	expect(dt_json_u64(json, at, key, &v), "session %" PRIu64 " has no %s in the status", id,
	       key);
	free(json);
	return v;
}

static bool charged_is(const char *json, void *want)
{
	uint64_t v;

	return dt_json_u64(json, "\"memory\": {\"budget\"", "sessions", &v) &&
	       v == *(const uint64_t *)want;
}

static void expect_charged(uint64_t want, const char *when)
{
	expect(dt_wait_status(D.sock, charged_is, &want, TRIES), "%s: %" PRIu64 " bytes charged, "
	       "expected %" PRIu64, when, charged(), want);
}

/* ---- 1. memory a client keeps after its session ended stays charged ------------------------ */

/* The session the test keeps memory of: between half the limit and the limit. */
#define KEEP_BATCH 700u
#define KEEP_PREFETCH 2u

START_TEST(test_linger)
{
	bp_msg_open m = open_msg(DSET_ONE, KEEP_BATCH, KEEP_PREFETCH);
	bp_msg_ready ready, r2;
	int conn = raw_conn(), fds[BP_READY_FDS], fds2[BP_READY_FDS], keep, r;
	uint64_t one;
	void *map;

	r = dt_raw_open(conn, &m, &ready, fds);
	expect(r == 0, "raw OPEN: %s (%d)", bc_strerror(r), r);
	one = session_u64(ready.session, "memory");
	expect(one <= LIMIT && one + ready.data_size > LIMIT, "a session of %" PRIu64 " bytes "
	       "(data memfd %" PRIu64 ") cannot show the limit of %" PRIu64, one, ready.data_size,
	       LIMIT);
	expect(charged() == one, "%" PRIu64 " bytes charged for one session of %" PRIu64,
	       charged(), one);

	/* Close the session, keeping a descriptor and a mapping of the data memfd. */
	keep = dup(fds[0]);
	map = mmap(NULL, ready.data_size, PROT_READ, MAP_SHARED, fds[0], 0);
	ck_assert_ptr_ne(map, MAP_FAILED);
	for (int i = 0; i < BP_READY_FDS; i++)
		close(fds[i]);
	raw_close(conn, ready.session);
	expect(dt_wait_sessions(D.sock, 0, TRIES), "the closed session is still listed");
	/* The data memfd stays charged; its control memfd and the bookkeeping do not. */
	expect_charged(ready.data_size, "closed, data memfd kept");
	r = dt_raw_open(conn, &m, &r2, fds2);
	expect(r == -ENOMEM, "a second session over the limit, the first one's memory kept: %s (%d)",
	       bc_strerror(r), r);
	expect(dt_log_contains(&D, "memory limit per user"), "the refusal does not name the limit");
	/* What the ended session's kept memory holds counts against the 16 MiB limit. */
	expect(dt_log_contains(&D, " of the 16.0 MiB [limits] memory_per_uid allows: open with a "
			       "smaller prefetch or batch, close one of its sessions, or raise "
			       "[limits] memory_per_uid"), "the refusal does not give the limit and "
	       "the setting to raise");

	/* The descriptor goes, the mapping stays: still charged. */
	close(keep);
	dt_sleep_ms(50);
	expect_charged(ready.data_size, "closed, data memfd mapped");
	r = dt_raw_open(conn, &m, &r2, fds2);
	expect(r == -ENOMEM, "a second session, the first one's memory still mapped: %s (%d)",
	       bc_strerror(r), r);

	/* The mapping goes: the memory is gone, and so is the charge. */
	munmap(map, ready.data_size);
	expect_charged(0, "data memfd let go");
	r = dt_raw_open(conn, &m, &r2, fds2);
	expect(r == 0, "a session once the memory was let go: %s (%d)", bc_strerror(r), r);

	/* Cut off (no CLOSE) while mapping the data memfd: the same. */
	map = mmap(NULL, r2.data_size, PROT_READ, MAP_SHARED, fds2[0], 0);
	ck_assert_ptr_ne(map, MAP_FAILED);
	for (int i = 0; i < BP_READY_FDS; i++)
		close(fds2[i]);
	close(conn);
	expect(dt_wait_sessions(D.sock, 0, TRIES), "the cut-off session is still listed");
	expect_charged(r2.data_size, "cut off, data memfd mapped");
	munmap(map, r2.data_size);
	expect_charged(0, "cut off, data memfd let go");
}
END_TEST

/*
 * A client that lets go as it closes is uncharged the moment its session
 * ends, so it can reopen at once, every time. (The session itself ends
 * once its blocks in flight are back: that short wait is the old one.)
 */
START_TEST(test_reopen)
{
	bc_client *c = dt_connect_ok();
	bc_stream_opts o;

	dt_opts(&o, DSET_ONE, KEEP_BATCH, BC_SHUFFLE_NONE, 1);
	o.prefetch = KEEP_PREFETCH;
	for (int i = 0; i < 20; i++) {
		bc_stream *s = dt_open_ok(c, &o);
		bc_batch *b;
		int r = bc_next(s, &b, WAIT_MS);

		expect(r == 0, "reopen %d: bc_next: %s (%d)", i, bc_strerror(r), r);
		bc_release(b);
		ck_assert_int_eq(bc_close(s), 0);
		expect(dt_wait_sessions(D.sock, 0, TRIES), "reopen %d: the session did not end", i);
		expect(charged() == 0, "reopen %d: %" PRIu64 " bytes still charged once the session "
		       "ended", i, charged());
	}
	bc_disconnect(c);
}
END_TEST

/* ---- 2. the daemon's bookkeeping for a session is charged to it ---------------------------- */

START_TEST(test_bookkeeping)
{
	const uint32_t n = DSET_SAMPLES, prefetch = 8;
	bp_msg_open m = open_msg(DSET_ONE, n, prefetch);
	bp_msg_ready ready;
	int conn = raw_conn(), fds[BP_READY_FDS], r;
	uint64_t mem, heap, jobs, scratch, njobs;

	r = dt_raw_open(conn, &m, &ready, fds);
	expect(r == 0, "raw OPEN: %s (%d)", bc_strerror(r), r);
	mem = session_u64(ready.session, "memory");
	expect(mem > ready.data_size + ready.ctrl_size, "session memory %" PRIu64 " is only the "
	       "shared memory (%" PRIu64 ")", mem, ready.data_size + ready.ctrl_size);
	heap = mem - ready.data_size - ready.ctrl_size;
	/*
	 * The jobs in flight (session.h), each a task per block (one sample
	 * per block: n) and a piece per sample, and the planner's ids,
	 * locations and order.
	 */
	njobs = (BD_SESSION_JOB_PIECES + n - 1) / n;
	njobs = njobs < 2 ? 2 : njobs > ready.slots ? ready.slots : njobs;
	jobs = njobs * (sizeof(bd_job) + n * (sizeof(bd_task) + sizeof(bd_piece)));
	scratch = (uint64_t)n * (sizeof(uint64_t) + sizeof(uint32_t) + 5 * sizeof(uint64_t));
	expect(heap >= jobs + scratch && heap <= jobs + scratch + (64u << 10) + n * 64u,
	       "bookkeeping charged: %" PRIu64 " bytes; jobs in flight take %" PRIu64
	       " and the planner %" PRIu64, heap, jobs, scratch);
	expect(charged() == mem, "%" PRIu64 " bytes charged for a session of %" PRIu64, charged(),
	       mem);
	/* ... and no more jobs than that are ever out at once. */
	for (int i = 0; i < 20; i++) {
		uint64_t out = session_u64(ready.session, "inflight");

		expect(out <= njobs, "%" PRIu64 " jobs in flight, %" PRIu64 " charged", out, njobs);
	}
	for (int i = 0; i < BP_READY_FDS; i++)
		close(fds[i]);
	close(conn);
	expect_charged(0, "session ended");
}
END_TEST

/* ---- 3. a session's huge backlog of tiny blocks does not hold another's first batch -------- */

START_TEST(test_fair)
{
	const uint32_t prefetch = 8;
	bp_msg_open m = open_msg(TINY, TINY_SAMPLES, prefetch);
	bp_msg_ready ready;
	int conn = raw_conn(), fds[BP_READY_FDS], r;
	bc_client *c;
	bc_stream_opts o;
	bc_stream *s;
	bc_batch *b;
	uint64_t ahead;

	/* prefetch + 2 batches of TINY_SAMPLES blocks each, queued at once. */
	r = dt_raw_open(conn, &m, &ready, fds);
	expect(r == 0, "raw OPEN: %s (%d)", bc_strerror(r), r);

	c = dt_connect_ok();
	dt_opts(&o, DSET_ONE, 1, BC_SHUFFLE_NONE, 1);
	s = dt_open_ok(c, &o);
	r = bc_next(s, &b, WAIT_MS);
	expect(r == 0, "bc_next: %s (%d)", bc_strerror(r), r);
	ahead = session_u64(ready.session, "published");
	/* Served FIFO, the second client waited for all of them. */
	expect(ahead < ready.slots / 2, "%" PRIu64 " of the first session's %u queued batches were "
	       "published before the second session's first batch", ahead, ready.slots);
	bc_release(b);
	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
	for (int i = 0; i < BP_READY_FDS; i++)
		close(fds[i]);
	close(conn);
}
END_TEST

/* ---- 4. wait counters a client writes are clamped --------------------------------------------- */

/* The first value of metric `name` (no labels) in the metrics text. */
static double metric(const char *name)
{
	bc_client *c = dt_connect_ok();
	char *text = NULL, pat[128];
	const char *p;
	double v = -1;
	int r = bc_metrics(c, &text);

	expect(r == 0 && text, "bc_metrics: %s (%d)", bc_strerror(r), r);
	bc_disconnect(c);
	snprintf(pat, sizeof(pat), "\n%s ", name);
	p = strstr(text, pat);
	expect(p && sscanf(p + strlen(pat), "%lf", &v) == 1, "no %s in the metrics", name);
	free(text);
	return v;
}

/* The metrics' client waits: at most one per batch ever published (slots), for at most the uptime. */
static void expect_waits_within(uint32_t slots, const char *when)
{
	double count = metric("batchd_client_wait_seconds_count");
	double sum = metric("batchd_client_wait_seconds_sum");
	double uptime = metric("batchd_uptime_seconds");

	expect(count <= (double)slots, "%s: wait count %g with %u batches ever published", when,
	       count, slots);
	expect(sum <= uptime, "%s: waited %g s in %g s of uptime", when, sum, uptime);
}

START_TEST(test_wait_clamped)
{
	bp_msg_open m = open_msg(DSET_ONE, 8, 4);
	bp_msg_ready ready;
	bp_ring_ctrl *ctrl;
	int conn = raw_conn(), fds[BP_READY_FDS], r;
	uint64_t published, consumed, waits;
	char *json, at[64];

	r = dt_raw_open(conn, &m, &ready, fds);
	expect(r == 0, "raw OPEN: %s (%d)", bc_strerror(r), r);
	ctrl = mmap(NULL, ready.ctrl_size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[1], 0);
	ck_assert_ptr_ne(ctrl, MAP_FAILED);
	ctrl->waits = UINT64_C(1) << 62;
	ctrl->wait_ns = UINT64_C(1) << 62;
	ctrl->consumed = UINT64_C(1) << 62;
	for (unsigned i = 0; i < BP_RING_WAIT_BUCKETS; i++)
		ctrl->wait_hist[i] = UINT64_C(1) << 58;

	/* One status, so that the three numbers are of one moment. */
	json = dt_status_ok();
	snprintf(at, sizeof(at), "{\"id\": %" PRIu64 ", ", ready.session);
	expect(dt_json_u64(json, at, "published", &published) &&
	       dt_json_u64(json, at, "consumed", &consumed) && dt_json_u64(json, at, "waits", &waits),
	       "session %" PRIu64 " is not in the status", ready.session);
	free(json);
	expect(consumed <= published && waits <= published, "consumed %" PRIu64 " and waits %"
	       PRIu64 " of %" PRIu64 " published", consumed, waits, published);
	expect_waits_within(ready.slots, "session open");

	/* The numbers folded into the totals when the session ends are the clamped ones. */
	munmap(ctrl, ready.ctrl_size);
	for (int i = 0; i < BP_READY_FDS; i++)
		close(fds[i]);
	close(conn);
	expect(dt_wait_sessions(D.sock, 0, TRIES), "the session is still listed");
	expect_waits_within(ready.slots, "session ended");
}
END_TEST

static Suite *make_suite(void)
{
	Suite *s = suite_create("tenants");

	tcase_add_test(dt_tcase(s, "linger", setup_limited), test_linger);
	tcase_add_test(dt_tcase(s, "reopen", setup_limited), test_reopen);
	tcase_add_test(dt_tcase(s, "bookkeeping", setup), test_bookkeeping);
	tcase_add_test(dt_tcase(s, "fair", setup_tiny), test_fair);
	tcase_add_test(dt_tcase(s, "wait_clamped", setup), test_wait_clamped);
	return s;
}

int main(void)
{
	return dt_check_main(&D, make_suite);
}
