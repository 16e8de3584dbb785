/* SPDX-License-Identifier: MIT */
/*
 * test-memacct.c - every byte a session costs is charged, and no more than
 * its schedule needs: a session's charge is its two memfds (as READY
 * describes them) plus its daemon heap, memory.sessions adds those up and
 * memory.used adds the dataset version's index and tables (memory.datasets,
 * charged once, still while it is kept unused) and the block cache and its
 * bucket table; a dataset of a few
 * large samples opens with batch 16 under a budget that sizing for the 16
 * largest samples refused, and delivers every byte; a client that exits or
 * is killed leaves a budget sized for one session free for an immediate
 * reopen; a trainer holding two of the largest batches still gets the
 * next, however small the average batch; and a closed session stages no
 * batch past the ones its client could still have taken.
 *
 * One of the service suites (service-testlib.h): a real batchd started with
 * `-c FILE` on a temporary socket, clients through libbatchclient and raw
 * protocol connections, the figures read back from the status.
 *
 * BATCHD, BATCHD_PACK and BATCHCTL name the binaries (meson sets them).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>
#include <json-c/json.h>

#include "daemon-testlib.h"
#include "json_path.h"
#include "pack-testlib.h"
#include "service-testlib.h"

static dt_daemon D;

/* Fail with the daemon's recent log (daemon-testlib.h). */
#define expect dt_expect

#define MIB (UINT64_C(1) << 20)

/* ---- helpers ------------------------------------------------------------------------- */

/* Our only session in the status (waiting for it to show). */
static json_object *our_session(json_object **ret_status)
{
	for (int i = 0; i < TRIES; i++) {
		json_object *st = dt_status_json_ok();
		json_object *se = sv_session_by_pid(sv_sessions_of(st), getpid(), NULL);

		if (se) {
			*ret_status = st;
			return se;
		}
		json_object_put(st);
		dt_sleep_ms(10);
	}
	expect(0, "our session is not in the status");
	return NULL;
}

static bool no_sessions(const char *json, void *ctx)
{
	uint64_t v;

	(void)ctx;
	return dt_json_sessions(json) == 0 &&
	       dt_json_u64(json, "\"memory\": {\"budget\"", "sessions", &v) && v == 0;
}

/* Every session ended and uncharged. */
static void expect_no_sessions(const char *when)
{
	expect(dt_wait_status(D.sock, no_sessions, NULL, TRIES), "%s: sessions still open or charged "
	       "(memory.sessions %" PRIu64 ")", when, dt_status_u64("memory.sessions"));
}

/* ---- 1. what is charged is what the session holds ------------------------------------- */

START_TEST(test_charged)
{
	bp_msg_open m = { .seed = 1, .batch_size = 100, .world = 1, .prefetch = 3,
			  .placement = BP_PLACEMENT_HOST, .shuffle = BP_SHUFFLE_NONE,
			  .path = DSET_ONE, .path_len = (uint32_t)strlen(DSET_ONE) };
	bp_msg_ready ready;
	json_object *st, *se;
	uint64_t memory, heap, budget, table, datasets;
	int conn, fds[BP_READY_FDS], r;

	sv_conf_basic("info", "[memory]\nbudget = 256M\ncache = 64M\n");
	sv_start_ok();
	conn = dt_raw_connect(D.sock);
	ck_assert_int_ge(conn, 0);
	ck_assert_int_eq(dt_raw_hello(conn, NULL), 0);
	r = dt_raw_open(conn, &m, &ready, fds);
	expect(r == 0, "raw OPEN: %s (%d)", bc_strerror(r), r);

	se = our_session(&st);
	memory = dt_ju64(se, "memory");
	heap = dt_ju64(se, "memory_heap");
	/* The memfds are exactly what READY hands over; the heap is the bookkeeping of 100 samples. */
	expect(memory == ready.data_size + ready.ctrl_size + heap, "session memory %" PRIu64
	       " is not data %" PRIu64 " + control %" PRIu64 " + heap %" PRIu64, memory,
	       ready.data_size, ready.ctrl_size, heap);
	expect(heap >= 100 * (8 + 4) && heap < MIB, "session heap %" PRIu64 " bytes", heap);
	expect(dt_ju64(st, "memory.sessions") == memory, "memory.sessions %" PRIu64 " is not the "
	       "session's %" PRIu64, dt_ju64(st, "memory.sessions"), memory);
	/* The block cache's bucket table: 8 bytes per 16 KiB of its budget, charged with its blocks. */
	budget = dt_ju64(st, "cache.budget");
	table = dt_ju64(st, "memory.cache_table");
	expect(budget == 64 * MIB && table == budget / 16384 * 8, "cache budget %" PRIu64
	       ", bucket table %" PRIu64 " bytes", budget, table);
	expect(dt_ju64(st, "memory.cache") == dt_ju64(st, "cache.bytes") + table,
	       "memory.cache %" PRIu64 " is not the blocks' %" PRIu64 " + the table's %" PRIu64,
	       dt_ju64(st, "memory.cache"), dt_ju64(st, "cache.bytes"), table);
	/* The version it reads: its index (at least) and tables, once, the session's and in all. */
	datasets = dt_ju64(st, "memory.datasets");
	expect(datasets >= dt_ju64(st, "datasets.bytes") && datasets == dt_ju64(se, "dataset_memory") &&
	       datasets > 0, "memory.datasets %" PRIu64 ", datasets.bytes %" PRIu64 ", the session's "
	       "dataset_memory %" PRIu64, datasets, dt_ju64(st, "datasets.bytes"),
	       dt_ju64(se, "dataset_memory"));
	expect(dt_ju64(st, "memory.used") == memory + datasets + dt_ju64(st, "memory.cache"),
	       "memory.used %" PRIu64 " is not sessions %" PRIu64 " + datasets %" PRIu64 " + cache %"
	       PRIu64, dt_ju64(st, "memory.used"), memory, datasets, dt_ju64(st, "memory.cache"));
	json_object_put(st);

	for (int i = 0; i < BP_READY_FDS; i++)
		close(fds[i]);
	close(conn);
	expect_no_sessions("after the connection closed");
	/* The version is kept for the next open, still charged (evicted when room is needed). */
	st = dt_status_json_ok();
	expect(dt_ju64(st, "memory.used") == dt_ju64(st, "memory.cache") + datasets &&
	       dt_ju64(st, "memory.datasets_unused") == datasets,
	       "once the session is gone memory.used %" PRIu64 " is not the cache's %" PRIu64
	       " and the unused version's %" PRIu64 " (memory.datasets_unused %" PRIu64 ")",
	       dt_ju64(st, "memory.used"), dt_ju64(st, "memory.cache"), datasets,
	       dt_ju64(st, "memory.datasets_unused"));
	json_object_put(st);
}
END_TEST

/* ---- 2. sized from the schedule, not the 16 largest samples ----------------------------- */

#define LARGE "large.bpk"
#define LARGE_N 512u           /* samples */
#define LARGE_EVERY 32u        /* one large sample in each 32: at most one in a batch of 16 */
#define LARGE_SIZE (2 * MIB)
#define LARGE_BATCH 16u

/*
 * Write root/name, one sample per block: n random samples, sample i
 * big_size bytes where big(i), else 1..small_max. Its path into path.
 */
static void write_pack(const char *name, size_t n, bool (*big)(size_t i), uint64_t big_size,
		       uint64_t small_max, char *path, size_t len)
{
	pt_samples smp = { .n = n, .max_size = big_size };
	uint64_t rng = n;
	int fd;

	smp.sizes = calloc(n, sizeof(*smp.sizes));
	smp.offsets = calloc(n, sizeof(*smp.offsets));
	ck_assert(smp.sizes && smp.offsets);
	for (size_t i = 0; i < n; i++) {
		smp.sizes[i] = big(i) ? big_size : pt_rand_range(&rng, 1, small_max);
		smp.offsets[i] = smp.total;
		smp.total += smp.sizes[i];
	}
	smp.data = malloc(smp.total);
	ck_assert(smp.data);
	pt_fill_random(&rng, smp.data, smp.total);
	dt_root_path(&D, name, path, len);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ck_assert_msg(fd >= 0, "create %s: %s", path, strerror(errno));
	ck_assert_int_eq(pt_pack_write(fd, &smp, 1, NULL, 0, 1, NULL), 0);
	ck_assert_int_eq(close(fd), 0);
	pt_samples_free(&smp);
}

_Static_assert(LARGE_N / LARGE_EVERY >= LARGE_BATCH, "the worst batch is LARGE_BATCH large samples");

static bool large_big(size_t i)
{
	return i % LARGE_EVERY == 7;
}

START_TEST(test_large_samples)
{
	char path[PATH_MAX];
	uint64_t worst = LARGE_BATCH * LARGE_SIZE, sessions_budget = 24 * MIB, memory;
	bc_stream_opts o;
	json_object *st;
	bc_client *c;
	bc_stream *s;
	dt_run run = { 0 };
	dt_ref ref;

	write_pack(LARGE, LARGE_N, large_big, LARGE_SIZE, 4096, path, sizeof(path));
	/*
	 * Sizing for the 16 largest samples wanted two records of them: far
	 * over what sessions get of the budget (40M less the 16M cache).
	 */
	expect(2 * worst > sessions_budget, "the worst case (%" PRIu64 " MiB) fits the sessions' "
	       "%" PRIu64 " MiB: the test shows nothing", 2 * worst / MIB, sessions_budget / MIB);

	sv_conf_basic("info", "[memory]\nbudget = 40M\ncache = 16M\n");
	sv_start_ok();
	ck_assert_int_eq(dt_ref_open(&ref, path), 0);
	c = dt_connect_ok();
	dt_opts(&o, LARGE, LARGE_BATCH, BC_SHUFFLE_NONE, 0);
	o.prefetch = 2;
	s = dt_open_ok(c, &o);
	our_session(&st);
	memory = dt_ju64(st, "memory.sessions");
	json_object_put(st);
	expect(memory <= sessions_budget && memory < 2 * worst, "the session holds %" PRIu64
	       " bytes", memory);
	/* Two epochs, every sample checked against the pack. */
	dt_consume_ok(s, &ref, 2 * LARGE_N / LARGE_BATCH, 0, &run, "large samples, batch 16");
	expect(run.batches == 2 * LARGE_N / LARGE_BATCH && run.nids == 2 * LARGE_N && !run.failures,
	       "%zu batches, %zu samples delivered, %zu failed", run.batches, run.nids, run.failures);
	expect(dt_status_u64("ended.failed") == 0 && dt_status_u64("pipeline.failures") == 0,
	       "batches failed");
	dt_run_free(&run);
	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
	dt_ref_close(&ref);
	expect(dt_status_u64("refused.memory") == 0, "an open was refused for memory");
}
END_TEST

/* ---- 3. a trainer holding two of the largest batches still gets the next -------------- */

#define CLUSTER "cluster.bpk"
#define CLUSTER_N 1072u        /* 48 samples of CLUSTER_BIG, then 1024 of 1..512 bytes */
#define CLUSTER_BIG (256u << 10)
#define CLUSTER_BATCH 16u      /* unshuffled: batches 0, 1 and 2 hold the big samples */

static bool cluster_big(size_t i)
{
	return i < 3 * CLUSTER_BATCH;
}

START_TEST(test_hold_two_largest)
{
	char path[PATH_MAX], err[512];
	bc_batch *held[2], *b;
	bc_stream_opts o;
	dt_run run = { 0 };
	bc_client *c;
	bc_stream *s;
	dt_ref ref;
	int r;

	write_pack(CLUSTER, CLUSTER_N, cluster_big, CLUSTER_BIG, 512, path, sizeof(path));
	ck_assert_int_eq(dt_ref_open(&ref, path), 0);

	sv_conf_basic("info", "[memory]\ncache = 0\n");
	sv_start_ok();
	c = dt_connect_ok();
	dt_opts(&o, CLUSTER, CLUSTER_BATCH, BC_SHUFFLE_NONE, 0);
	o.prefetch = 1;
	s = dt_open_ok(c, &o);
	/*
	 * Hold batches 0 and 1 (4 MiB each), ask for batch 2 (4 MiB too): the
	 * arena must fit a third of the largest beside two held anywhere in
	 * the ring, however small the average batch is.
	 */
	for (int i = 0; i < 2; i++) {
		r = bc_next(s, &held[i], WAIT_MS);
		expect(r == 0, "batch %d: %s (%d): %s", i, bc_strerror(r), r, bc_stream_error(s));
	}
	r = bc_next(s, &b, WAIT_MS);
	expect(r == 0, "batch 2 with batches 0 and 1 held: %s (%d): %s", bc_strerror(r), r,
	       bc_stream_error(s));
	for (int i = 0; i < 2; i++) {
		expect(dt_batch_check(held[i], &ref, err, sizeof(err)) == 0, "batch %d: %s", i, err);
		ck_assert_int_eq(bc_release(held[i]), 0);
	}
	expect(dt_batch_check(b, &ref, err, sizeof(err)) == 0, "batch 2: %s", err);
	ck_assert_int_eq(bc_release(b), 0);
	/* The rest of the epoch, every sample checked. */
	dt_consume_ok(s, &ref, CLUSTER_N / CLUSTER_BATCH - 3, 0, &run, "the rest of the epoch");
	dt_run_free(&run);
	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
	dt_ref_close(&ref);
}
END_TEST

/* ---- 4. an immediate reopen after a client exits or is killed ----------------------------- */

#define REOPEN_BATCH 512u
#define REOPEN_PREFETCH 14u    /* one session: over 2 / 3 of the smallest budget allowed */
#define REOPEN_CYCLES 12u

static void reopen_opts(bc_stream_opts *o, unsigned i)
{
	dt_opts(o, DSET_ONE, REOPEN_BATCH, i % 2 ? BC_SHUFFLE_GLOBAL : BC_SHUFFLE_NONE, i);
	o->prefetch = REOPEN_PREFETCH;
}

/*
 * The child: open, take a batch and hold it; then _exit(0) (no close, no
 * disconnect) or wait to be killed. Exit codes: 2 connect, 3 open, 4 batch.
 */
static void reopen_child(unsigned i, bool die, int up)
{
	bc_client *c;
	bc_stream_opts o;
	bc_stream *s;
	bc_batch *b;

	reopen_opts(&o, i);
	if (bc_connect(D.sock, &c) < 0)
		_exit(2);
	if (bc_open(c, &o, &s) < 0)
		_exit(3);
	if (bc_next(s, &b, WAIT_MS) != 0)
		_exit(4);
	if (!die)
		_exit(0);
	if (write(up, "k", 1) != 1)
		_exit(5);
	for (;;)
		pause();
}

START_TEST(test_reopen)
{
	char conf[128];
	uint64_t one;
	bc_stream_opts o;
	json_object *st;
	bc_client *c;
	bc_stream *s;

	/* One session's charge, then a budget that holds one and a half of it. */
	sv_conf_basic("info", "[memory]\ncache = 0\n");
	sv_start_ok();
	c = dt_connect_ok();
	reopen_opts(&o, 0);
	s = dt_open_ok(c, &o);
	our_session(&st);
	one = dt_ju64(st, "memory.sessions");
	json_object_put(st);
	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
	ck_assert_int_eq(dt_daemon_stop(&D), 0);
	expect(one * 3 / 2 > (16 * MIB), "one session is %" PRIu64 " bytes: a budget of 1.5 sessions "
	       "is below the smallest allowed", one);
	snprintf(conf, sizeof(conf), "[memory]\nbudget = %" PRIu64 "K\ncache = 0\n", one * 3 / 2 >> 10);
	sv_conf_basic("info", conf);
	sv_start_ok();

	c = dt_connect_ok();
	for (unsigned i = 0; i < REOPEN_CYCLES; i++) {
		bool die = i % 2;
		int up[2], status, r;
		pid_t pid;
		char k;

		ck_assert_int_eq(pipe2(up, O_CLOEXEC), 0);
		fflush(NULL);
		pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			close(up[0]);
			reopen_child(i, die, up[1]);
		}
		close(up[1]);
		if (die) {
			expect(read(up[0], &k, 1) == 1, "cycle %u: the child did not stream", i);
			kill(pid, SIGKILL);
		}
		close(up[0]);
		ck_assert_int_eq(waitpid(pid, &status, 0), pid);
		expect(die ? WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL
			   : WIFEXITED(status) && WEXITSTATUS(status) == 0,
		       "cycle %u: child status %#x (3: its open, right after our close, was refused)",
		       i, status);
		/* At once: the dead client's session is still ending. */
		reopen_opts(&o, i + 1);
		r = bc_open(c, &o, &s);
		expect(r == 0, "cycle %u: reopen after the client %s: %s (%d): %s", i,
		       die ? "was killed" : "exited", bc_strerror(r), r, bc_client_error(c));
		{
			bc_batch *b;

			expect(bc_next(s, &b, WAIT_MS) == 0, "cycle %u: no batch after the reopen", i);
			bc_release(b);
		}
		ck_assert_int_eq(bc_close(s), 0);
	}
	bc_disconnect(c);
	expect(dt_status_u64("refused.memory") == 0, "%" PRIu64 " opens were refused for memory",
	       dt_status_u64("refused.memory"));
	expect_no_sessions("after the reopen cycles");
}
END_TEST

/* ---- 5. nothing staged past what the client could still take ------------------------------ */

#define CLOSE_BATCH 16u
#define CLOSE_PREFETCH 2u
#define CLOSE_TAKEN 3u

START_TEST(test_close_stages_nothing_more)
{
	bc_stream_opts o;
	json_object *st, *se;
	uint64_t slots, planned, decoded;
	dt_run run = { 0 };
	bc_client *c;
	bc_stream *s;
	dt_ref ref;

	/* No cache: every block a batch needs is read and decoded for it (one sample per block). */
	sv_conf_basic("info", "[memory]\ncache = 0\n");
	sv_start_ok();
	dt_ref_ok(&ref, DSET_ONE);
	c = dt_connect_ok();
	dt_opts(&o, DSET_ONE, CLOSE_BATCH, BC_SHUFFLE_NONE, 0);
	o.prefetch = CLOSE_PREFETCH;
	s = dt_open_ok(c, &o);
	dt_consume_ok(s, &ref, CLOSE_TAKEN, 0, &run, "before the close");
	dt_run_free(&run);
	se = our_session(&st);
	slots = dt_ju64(se, "slots");
	planned = dt_ju64(se, "planned");
	json_object_put(st);
	/* The planner stays within the slots: the taken batches and the ones the ring can hold. */
	expect(slots == CLOSE_PREFETCH + 2 && planned <= CLOSE_TAKEN + slots, "%" PRIu64 " batches "
	       "planned with %u taken and %" PRIu64 " slots", planned, CLOSE_TAKEN, slots);
	ck_assert_int_eq(bc_close(s), 0);
	expect_no_sessions("after the close");
	decoded = dt_status_u64("pipeline.blocks_decoded");
	expect(decoded >= CLOSE_TAKEN * CLOSE_BATCH && decoded <= (CLOSE_TAKEN + slots) * CLOSE_BATCH,
	       "%" PRIu64 " blocks decoded for a session whose client took %u batches of %u with %"
	       PRIu64 " slots", decoded, CLOSE_TAKEN, CLOSE_BATCH, slots);
	bc_disconnect(c);
	dt_ref_close(&ref);
}
END_TEST

/* ---- the suite ------------------------------------------------------------------------------------ */

static Suite *memacct_suite(void)
{
	Suite *s = suite_create("memacct");

	tcase_add_test(sv_tcase(s, "charged"), test_charged);
	tcase_add_test(sv_tcase(s, "large_samples"), test_large_samples);
	tcase_add_test(sv_tcase(s, "hold_two_largest"), test_hold_two_largest);
	tcase_add_test(sv_tcase(s, "reopen"), test_reopen);
	tcase_add_test(sv_tcase(s, "close_stages_nothing_more"), test_close_stages_nothing_more);
	return s;
}

int main(void)
{
	return dt_check_main(&D, memacct_suite);
}
