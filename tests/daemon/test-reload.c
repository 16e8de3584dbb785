/* SPDX-License-Identifier: MIT */
/*
 * test-reload.c - batchd's lifecycle signals as a service: SIGHUP reloads
 * keep running sessions as they were and apply the new file to what comes
 * after; a bad file changes nothing (it is refused, named with its line,
 * and counted); a budget lowered below what sessions hold lets no new
 * session in until enough comes back; SIGTERM with clients connected (one
 * of them asleep in bc_next) tells every one of them, within a bound, and
 * batchd exits 0 without leaving its socket behind.
 *
 * One of the service suites (service-testlib.h): a real batchd started with
 * `-c FILE` on a temporary socket, real clients through libbatchclient,
 * its status and metrics read back. Every daemon is stopped with SIGTERM and
 * must exit 0, so a sanitizer build also fails on leaks at exit.
 *
 * BATCHD, BATCHD_PACK and BATCHCTL name the binaries (meson sets them).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <json-c/json.h>

#include "daemon-testlib.h"
#include "json_path.h"
#include "service-testlib.h"

static dt_daemon D;

/* Fail with the daemon's recent log (daemon-testlib.h). */
#define expect dt_expect

/* ---- 1. SIGHUP reloads; running sessions carry on; a bad file changes nothing -------- */

START_TEST(test_reload)
{
	char rootb[256], a[PATH_MAX], b[PATH_MAX], abs_one[PATH_MAX], needle[320];
	bc_stream_opts o;
	bc_stream *s1, *s2;
	dt_ref ref_one, ref_blk;
	bc_client *c;
	json_object *st;

	/* Root B holds only "bonly.bpk" (the 16 KiB-block pack under another name). */
	snprintf(rootb, sizeof(rootb), "%s/rootb", D.dir);
	ck_assert_int_eq(mkdir(rootb, 0755), 0);
	snprintf(a, sizeof(a), "%s/" DSET_BLK, dt_g.packs);
	snprintf(b, sizeof(b), "%s/bonly.bpk", rootb);
	ck_assert_int_eq(link(a, b), 0);
	dt_root_path(&D, DSET_ONE, abs_one, sizeof(abs_one));

	/* Root A, log level notice: INFO lines such as "opened" are not logged. */
	sv_conf_basic("notice", NULL);
	sv_start_ok();
	dt_ref_ok(&ref_one, DSET_ONE);
	dt_ref_ok(&ref_blk, DSET_BLK);
	c = dt_connect_ok();
	dt_opts(&o, DSET_ONE, 7, BC_SHUFFLE_NONE, 0);
	s1 = dt_open_ok(c, &o);
	sv_consume_ok(s1, &ref_one, 5, "before any reload");
	expect(!dt_log_contains(&D, "opened " DSET_ONE), "an INFO line was logged at level notice");

	/* A bad file: an unknown key on line 7. Nothing of it may apply (root B, debug). */
	sv_conf_write("# test-service: bad\n[daemon]\nsocket = %s\nlog_level = debug\n[datasets]\n"
		   "root = %s\nno_such_key = 1\n", D.sock, rootb);
	sv_hup_and_wait(0, 1);
	snprintf(needle, sizeof(needle), "%s:7:", sv_conf);
	expect(dt_log_contains(&D, needle), "the refused reload's message does not name %s", needle);
	expect(dt_log_contains(&D, "no_such_key"), "the refused reload's message does not name the key");
	expect(dt_status_u64("reloads") == 0, "status counts a refused reload as applied");
	sv_consume_ok(s1, &ref_one, 5, "after the refused reload");
	/* The old configuration stays: root A, not B; level notice. */
	dt_opts(&o, "bonly.bpk", 7, BC_SHUFFLE_NONE, 0);
	dt_open_fails(c, &o, -ENOENT);
	dt_opts(&o, DSET_BLK, 9, BC_SHUFFLE_NONE, 0);
	s2 = dt_open_ok(c, &o);
	sv_consume_ok(s2, &ref_blk, 3, "a new session on root A after the refused reload");
	ck_assert_int_eq(bc_close(s2), 0);
	expect(!dt_log_contains(&D, "opened " DSET_BLK),
	       "the refused reload changed the log level to debug anyway");

	/* A good file: root B only, log level debug. */
	sv_conf_write("# test-service: good\n[daemon]\nsocket = %s\nlog_level = debug\n[datasets]\n"
		   "root = %s\n", D.sock, rootb);
	sv_hup_and_wait(1, 1);
	expect(dt_log_contains(&D, "configuration reloaded"), "no \"configuration reloaded\" line");
	st = dt_status_json_ok();
	expect(dt_ju64(st, "reloads") == 1, "status: reloads %" PRIu64 ", expected 1", dt_ju64(st, "reloads"));
	json_object_put(st);

	dt_opts(&o, "bonly.bpk", 9, BC_SHUFFLE_NONE, 0);
	s2 = dt_open_ok(c, &o);
	sv_consume_ok(s2, &ref_blk, 4, "a session on root B after the reload");
	expect(dt_log_contains(&D, "opened bonly.bpk"), "log level debug did not take effect: no "
	       "INFO line for the new session");
	dt_opts(&o, DSET_ONE, 7, BC_SHUFFLE_NONE, 0);
	dt_open_fails(c, &o, -ENOENT);             /* relative: not under B */
	dt_opts(&o, abs_one, 7, BC_SHUFFLE_NONE, 0);
	dt_open_fails(c, &o, -EACCES);             /* absolute under A: outside the roots now */
	expect(strstr(bc_client_error(c), "outside"), "refusal of %s: \"%s\"", abs_one,
	       bc_client_error(c));

	/* The first session never noticed: it carries on exactly where it was. */
	sv_consume_ok(s1, &ref_one, 20, "the first session after the good reload");
	ck_assert_int_eq(bc_close(s2), 0);
	for (int i = 0; i < TRIES && !dt_log_contains(&D, " ended"); i++)
		dt_sleep_ms(10);
	expect(dt_log_contains(&D, " ended"), "no DEBUG \"session ... ended\" line after the reload");

	expect(sv_metric("batchd_reloads_total", NULL) == 1, "batchd_reloads_total is not 1");
	expect(sv_metric("batchd_reload_failures_total", NULL) == 1,
	       "batchd_reload_failures_total is not 1");
	ck_assert_int_eq(bc_close(s1), 0);
	bc_disconnect(c);
	dt_ref_close(&ref_one);
	dt_ref_close(&ref_blk);
}
END_TEST

/*
 * A [datasets] root that is not there: batchd refuses to start, naming the
 * root, the file and line, and what to do; once running, a reload that
 * names one is refused and the old roots keep serving.
 */
START_TEST(test_reload_missing_root)
{
	char gone[PATH_MAX], needle[2 * PATH_MAX];
	bc_stream_opts o;
	bc_stream *st;
	dt_ref ref;
	bc_client *c;

	snprintf(gone, sizeof(gone), "%s/not-there", D.dir);
	snprintf(needle, sizeof(needle), "[datasets] root %s (%s:6): No such file or directory: "
		 "create it or remove the line", gone, sv_conf);
	sv_conf_write("# test-service: missing root\n[daemon]\nsocket = %s\n[datasets]\n"
		      "root = %s\nroot = %s\n", D.sock, D.root, gone);
	D.may_exit = true;
	ck_assert_int_eq(dt_daemon_start(&D), 1);
	D.may_exit = false;
	expect(WIFEXITED(D.exit_status) && WEXITSTATUS(D.exit_status) == 2,
	       "batchd with a missing root: wait status %d, expected exit 2", D.exit_status);
	expect(dt_log_contains(&D, needle), "the start refusal does not say \"%s\"", needle);

	sv_conf_basic("info", NULL);
	sv_start_ok();
	sv_conf_write("# test-service: missing root\n[daemon]\nsocket = %s\n[datasets]\n"
		      "root = %s\nroot = %s\n", D.sock, D.root, gone);
	sv_hup_and_wait(0, 1);
	snprintf(needle, sizeof(needle), "reload refused, the running configuration stays: "
		 "[datasets] root %s (%s:6): No such file or directory: create it or remove the line",
		 gone, sv_conf);
	expect(dt_log_contains(&D, needle), "the reload refusal does not say \"%s\"", needle);
	expect(dt_status_u64("reloads") == 0, "status counts the refused reload as applied");
	dt_ref_ok(&ref, DSET_ONE);
	c = dt_connect_ok();
	dt_opts(&o, DSET_ONE, 7, BC_SHUFFLE_NONE, 0);
	st = dt_open_ok(c, &o);
	sv_consume_ok(st, &ref, 3, "a session on the old root after the refused reload");
	ck_assert_int_eq(bc_close(st), 0);
	bc_disconnect(c);
	dt_ref_close(&ref);
}
END_TEST

/*
 * A reload that lowers [memory] budget below what sessions hold: they keep
 * it, but no new session may open until enough comes back.
 */
START_TEST(test_reload_budget)
{
	bc_stream *s[8];
	bc_stream_opts o;
	bc_client *c;
	const char *msg;
	uint64_t used;
	size_t n = 0;
	dt_ref ref;

	sv_conf_basic("info", "[memory]\nbudget = 256M\n");
	sv_start_ok();
	dt_ref_ok(&ref, DSET_ONE);
	c = dt_connect_ok();
	dt_opts(&o, DSET_ONE, 1000, BC_SHUFFLE_NONE, 0);
	o.prefetch = 8;
	while (n < 4)
		s[n++] = dt_open_ok(c, &o);
	used = dt_status_u64("memory.sessions");
	expect(used > (UINT64_C(16) << 20), "4 sessions hold only %" PRIu64 " bytes", used);

	sv_conf_basic("info", "[memory]\nbudget = 16M\n");
	sv_hup_and_wait(1, 0);
	expect(dt_status_u64("memory.budget") == (UINT64_C(16) << 20), "the budget did not change");
	sv_consume_ok(s[0], &ref, 3, "a session that holds memory over the new budget");
	dt_opts(&o, DSET_ONE, 10, BC_SHUFFLE_NONE, 0);
	msg = dt_open_fails(c, &o, -ENOMEM);
	expect(strstr(msg, "memory budget"), "refusal over the lowered budget: \"%s\"", msg);
	while (n)
		ck_assert_int_eq(bc_close(s[--n]), 0);
	bc_disconnect(c);
	dt_ref_close(&ref);
}
END_TEST

/* ---- 2. SIGTERM drains with clients connected -------------------------------------------- */

typedef struct sleeper {
	bc_stream *s;
	int first;                /* bc_next of the batch it holds */
	int result;               /* the bc_next result that ended the loop */
	unsigned calls;
	char error[BP_RING_REASON_MAX + 1];
} sleeper;

/*
 * Hold the first batch and release every later one: the daemon reclaims in
 * order, so once the ring is full it cannot publish again and this thread
 * sleeps in bc_next(-1) until something else happens.
 */
static void *sleeper_run(void *arg)
{
	sleeper *sl = arg;
	bc_batch *held = NULL, *b;

	sl->first = bc_next(sl->s, &held, WAIT_MS);
	if (sl->first != 0)
		return NULL;
	for (;;) {
		int r = bc_next(sl->s, &b, -1);

		sl->calls++;
		if (r == 0) {
			bc_release(b);
			continue;
		}
		if (r == BC_EPOCH_END)
			continue;
		/*
		 * Holding the first batch while releasing the rest stops the ring
		 * (memory is reused in order): bc_next says so; keep asking, as a
		 * trainer stuck on its held batch would, until the stop arrives.
		 */
		if (r == -ENOBUFS) {
			dt_sleep_ms(10);
			continue;
		}
		sl->result = r;
		snprintf(sl->error, sizeof(sl->error), "%s", bc_stream_error(sl->s));
		break;
	}
	bc_release(held);
	return NULL;
}

/* Take what is left on s after a stop: @return the first result that is not a batch. */
static int drain_after_stop(bc_stream *s, unsigned max_calls, unsigned *ret_calls)
{
	int r = -ETIMEDOUT;
	unsigned n;

	for (n = 0; n < max_calls; n++) {
		bc_batch *b;

		r = bc_next(s, &b, WAIT_MS);
		if (r == 0) {
			bc_release(b);
			continue;
		}
		if (r != BC_EPOCH_END)
			break;
	}
	*ret_calls = n;
	return r;
}

START_TEST(test_sigterm_drain)
{
	bc_client *ct, *cm, *idle, *late = NULL;
	bc_stream *s2, *s3;
	bc_stream_opts o;
	dt_ref ref_blk, ref_sh;
	sleeper sl = { 0 };
	pthread_t th;
	struct timespec deadline;
	struct stat sb;
	uint64_t last_pub = 0;
	unsigned calls, stable = 0;
	char *text = NULL;
	int r;

	sv_conf_basic("info", NULL);
	sv_start_ok();
	dt_ref_ok(&ref_blk, DSET_BLK);
	dt_ref_ok(&ref_sh, DSET_SHARDS);

	/* The sleeper: 4 slots (prefetch 2 + 2), its own connection. */
	ct = dt_connect_ok();
	dt_opts(&o, DSET_ONE, 5, BC_SHUFFLE_NONE, 0);
	o.prefetch = 2;
	sl.s = dt_open_ok(ct, &o);
	ck_assert_int_eq(pthread_create(&th, NULL, sleeper_run, &sl), 0);

	/* Two busy streams on a second connection, and a connection with none. */
	cm = dt_connect_ok();
	dt_opts(&o, DSET_BLK, 16, BC_SHUFFLE_NONE, 0);
	s2 = dt_open_ok(cm, &o);
	dt_opts(&o, DSET_SHARDS, 32, BC_SHUFFLE_NONE, 0);
	s3 = dt_open_ok(cm, &o);
	sv_consume_ok(s2, &ref_blk, 3, "stream 2 before SIGTERM");
	sv_consume_ok(s3, &ref_sh, 3, "stream 3 before SIGTERM");
	idle = dt_connect_ok();

	/* Wait until the sleeper has taken everything published and nothing more comes. */
	for (int i = 0; i < TRIES && stable < 20; i++) {
		json_object *st = dt_status_json_ok(), *se = sv_session_by_pid(sv_sessions_of(st), getpid(), DSET_ONE);
		uint64_t pub = se ? dt_ju64(se, "published") : 0, con = se ? dt_ju64(se, "consumed") : 0;

		stable = se && pub >= 2 && con == pub && dt_ju64(se, "inflight") == 0 && pub == last_pub
			 ? stable + 1 : 0;
		last_pub = pub;
		json_object_put(st);
		dt_sleep_ms(10);
	}
	expect(stable >= 20, "the sleeper never caught up with its full ring (published %" PRIu64 ")",
	       last_pub);

	expect(kill(D.pid, SIGTERM) == 0, "kill SIGTERM: %s", strerror(errno));

	/* The sleeper wakes up with the news, within a bound. */
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += 30;
	r = pthread_timedjoin_np(th, NULL, &deadline);
	expect(r == 0, "the client asleep in bc_next(-1) still hangs 30 s after SIGTERM");
	expect(sl.first == 0, "the sleeper's first bc_next: %s (%d)", bc_strerror(sl.first), sl.first);
	expect(sl.result == -ESHUTDOWN || sl.result == -EPIPE, "the sleeper's bc_next(-1) after "
	       "SIGTERM: %s (%d): \"%s\"", bc_strerror(sl.result), sl.result, sl.error);
	expect(sl.error[0], "the sleeper got %d without a reason in bc_stream_error", sl.result);

	/* The busy streams get what was published, then the news (never a timeout). */
	r = drain_after_stop(s2, 64, &calls);
	expect(r == -ESHUTDOWN || r == -EPIPE, "stream 2 after SIGTERM: %s (%d) after %u calls",
	       bc_strerror(r), r, calls);
	r = drain_after_stop(s3, 64, &calls);
	expect(r == -ESHUTDOWN || r == -EPIPE, "stream 3 after SIGTERM: %s (%d) after %u calls",
	       bc_strerror(r), r, calls);
	/* Requests on a connection the daemon said goodbye to fail, without hanging. */
	r = bc_status(idle, &text);
	free(text);
	expect(r == -ESHUTDOWN || r == -EPIPE, "bc_status on an idle connection after SIGTERM: %s (%d)",
	       bc_strerror(r), r);

	/* It exits 0 within a bound (the drain grace is 10 s). */
	r = dt_daemon_wait(&D, 20000);
	expect(r == 0, "batchd after SIGTERM with clients connected: %s %d",
	       r == -ETIMEDOUT ? "still running after 20 s," : "exit status", r);
	expect(stat(D.sock, &sb) < 0 && errno == ENOENT, "the socket file is left behind");
	r = bc_connect(D.sock, &late);
	expect(r == -ENOENT || r == -ECONNREFUSED, "connecting after the stop: %s (%d)",
	       bc_strerror(r), r);
	expect(dt_log_contains(&D, "stopping"), "no \"stopping\" line in the log");

	ck_assert_int_eq(bc_close(sl.s), 0);
	ck_assert_int_eq(bc_close(s2), 0);
	ck_assert_int_eq(bc_close(s3), 0);
	bc_disconnect(ct);
	bc_disconnect(cm);
	bc_disconnect(idle);
	dt_ref_close(&ref_blk);
	dt_ref_close(&ref_sh);
}
END_TEST

/* ---- the suite ------------------------------------------------------------------------------------ */

static Suite *reload_suite(void)
{
	Suite *s = suite_create("reload");

	tcase_add_test(sv_tcase(s, "reload"), test_reload);
	tcase_add_test(sv_tcase(s, "reload_budget"), test_reload_budget);
	tcase_add_test(sv_tcase(s, "reload_missing_root"), test_reload_missing_root);
	tcase_add_test(sv_tcase(s, "sigterm_drain"), test_sigterm_drain);
	return s;
}

int main(void)
{
	return dt_check_main(&D, reload_suite);
}
