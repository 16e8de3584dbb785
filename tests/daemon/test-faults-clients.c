/* SPDX-License-Identifier: MIT */
/*
 * test-faults-clients.c - what a client does to a real batchd: SIGKILL at
 * every protocol state, SIGSTOP past the lease, a thousand open/kill
 * cycles, a flood of opens, release marks repeated, reordered or from the
 * future. Each costs exactly what it should: that client's session, with
 * a reason, and nothing else. Delivered samples are compared byte for
 * byte with the reference reader; memory and descriptors are read back
 * from the status document and /proc; every fixture ends by stopping the
 * daemon with SIGTERM and asserting exit 0, which in sanitizer builds
 * also means LeakSanitizer found nothing.
 *
 * Why a suite of its own: test-faults.c injects faults under the daemon
 * (the disk, io_uring, malloc); here nothing is injected, the clients
 * misbehave, each case on its own clock (a lease, a thousand cycles, RSS
 * weighed as sessions pile up). test-hostile-clients.c attacks the
 * control plane; these clients attack their sessions and the memory they
 * share with the daemon. It starts its daemon through faults-fixture.h and
 * runs in the faults suite (-Dfault_injection=true builds).
 *
 * BATCHD, BATCHD_PACK name the binaries; BATCHD_TEST_CYCLES (optional)
 * the number of open/kill cycles.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>

#include "daemon-testlib.h"
#include "faults-fixture.h"
#include "ring.h"

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

static char E[2048];             /* why dt_* failed */

/* ---- fixtures --------------------------------------------------------------- */

/*
 * AddressSanitizer keeps freed memory in quarantine (up to 256 MiB) before
 * reusing it, so a daemon's RSS grows with every free whatever it does with
 * its memory: off for the tests that weigh RSS; leak checking stays on.
 */
#define ASAN_NO_QUARANTINE "quarantine_size_mb=0:thread_local_quarantine_size_kb=0"

/* ---- /proc ------------------------------------------------------------------------------- */

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

/* ---- 1. the lease: a stopped client loses its session, a releasing one never ------------------ */

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

/* ---- 2. a client killed at every protocol state ----------------------------------------------- */

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

/* ---- 3. a thousand open/kill cycles leave RSS and descriptors flat --------------------------- */

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

/* ---- 4. release marks repeated, reordered, from the future ------------------------------------- */

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

/* ---- 5. a flood of opens: refused at the limits, memory bounded, all freed -------------------- */

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

static Suite *faults_clients_suite(void)
{
	Suite *s = suite_create("faults-clients");

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
	return dt_check_main(&D, faults_clients_suite);
}
