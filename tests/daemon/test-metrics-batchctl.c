/* SPDX-License-Identifier: MIT */
/*
 * test-metrics-batchctl.c - batchd's reports as people read them, and what
 * waiting costs: batchctl's reporting commands (sessions, stats, status,
 * metrics, top; usage and unreachable-daemon exits); names that need
 * escaping, intact in JSON, labels and batchctl; a trainer's stall
 * seconds, ratio and cost at a GPU-hour price in the metrics, the status
 * and batchctl, bad prices refused at reload; the session-end log line,
 * which tells a CLOSE from a client that hung up.
 *
 * Why a suite of its own: test-metrics.c checks the reports against the
 * traffic that made them; this one checks what is built on them (batchctl,
 * run as a program, and the stall's price) with clients, raw ones among
 * them, that set their own wait counters. One of the service suites
 * (service-testlib.h): a real batchd started with `-c FILE`, real clients
 * through libbatchclient, the reports read back.
 *
 * BATCHD, BATCHD_PACK and BATCHCTL name the binaries (meson sets them).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>
#include <json-c/json.h>

#include "daemon-testlib.h"
#include "json_path.h"
#include "service-testlib.h"
#include "units.h"

static dt_daemon D;
static char E[2048];             /* why dt_* failed */

/* Fail with the daemon's recent log (daemon-testlib.h). */
#define expect dt_expect

/* ---- 1. batchctl ------------------------------------------------------------------------------ */

/*
 * Run batchctl -s SOCK args..., stdout and stderr into files of D.dir.
 * @return its exit status (-1: did not run); *ret_out its stdout (caller frees).
 */
static int batchctl(char **ret_out, const char *const *args)
{
	const char *tool = getenv("BATCHCTL");
	char out[300], err[300], *argv[16];
	int n = 0, st, fo, fe;
	FILE *f;
	pid_t pid;

	*ret_out = NULL;
	ck_assert_msg(tool && access(tool, X_OK) == 0, "set BATCHCTL to the built batchctl");
	snprintf(out, sizeof(out), "%s/batchctl.out", D.dir);
	snprintf(err, sizeof(err), "%s/batchctl.err", D.dir);
	argv[n++] = (char *)tool;
	argv[n++] = "-s";
	argv[n++] = D.sock;
	for (; *args && n < (int)ARRAY_SIZE(argv) - 1; args++)
		argv[n++] = (char *)*args;
	argv[n] = NULL;
	fo = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	fe = open(err, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ck_assert(fo >= 0 && fe >= 0);
	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(fo, 1);
		dup2(fe, 2);
		execv(argv[0], argv);
		_exit(127);
	}
	close(fo);
	close(fe);
	while (waitpid(pid, &st, 0) < 0)
		ck_assert_int_eq(errno, EINTR);
	f = fopen(out, "r");
	if (f) {
		size_t cap = 0;

		if (getdelim(ret_out, &cap, '\0', f) < 0) {
			free(*ret_out);
			*ret_out = strdup("");
		}
		fclose(f);
	}
	if (WIFEXITED(st) && WEXITSTATUS(st) != 0) {
		f = fopen(err, "r");
		if (f) {
			char line[512];

			fprintf(stderr, "test-metrics-batchctl: batchctl %s exited %d:\n", argv[3],
				WEXITSTATUS(st));
			while (fgets(line, sizeof(line), f))
				fputs(line, stderr);
			fclose(f);
		}
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static json_object *parse_json_ok(const char *text, json_type type, const char *what)
{
	json_object *o = json_tokener_parse(text);

	expect(o && json_object_is_type(o, type), "batchctl %s: not JSON of the right type: %.300s",
	       what, text);
	return o;
}

/*
 * batchctl status --json (the daemon's document), status (for people: no
 * JSON) and top --count 1, whose cache figure must be the cache's, with
 * our session (pid: " PID ") open.
 */
static void status_and_top(const char *pid)
{
	char *out, line[320], cache[32], cache_budget[32], memory[32];
	json_object *j;
	int r;

	r = batchctl(&out, (const char *[]){ "status", "--json", NULL });
	expect(r == 0, "batchctl status --json exited %d", r);
	j = parse_json_ok(out, json_type_object, "status --json");
	expect(dt_ju64(j, "pid") == (uint64_t)D.pid, "batchctl status --json: pid %" PRIu64 ", batchd is %d",
	       dt_ju64(j, "pid"), (int)D.pid);
	/*
	 * The trainer's position (the batches it released) apart from how far
	 * batchd staged (epoch, batch), and how many batches lie between.
	 */
	expect(dt_ju64(j, "sessions.0.ahead") ==
	       dt_ju64(j, "sessions.0.published") - dt_ju64(j, "sessions.0.delivered") &&
	       dt_ju64(j, "sessions.0.trainer_epoch") == 0 &&
	       dt_ju64(j, "sessions.0.trainer_batch") == dt_ju64(j, "sessions.0.delivered") &&
	       (dt_ju64(j, "sessions.0.epoch") > 0 ||
		dt_ju64(j, "sessions.0.batch") >= dt_ju64(j, "sessions.0.trainer_batch")),
	       "trainer at %" PRIu64 ":%" PRIu64 " (delivered %" PRIu64 "), staged to %" PRIu64
	       ":%" PRIu64 ", ahead %" PRIu64, dt_ju64(j, "sessions.0.trainer_epoch"),
	       dt_ju64(j, "sessions.0.trainer_batch"), dt_ju64(j, "sessions.0.delivered"),
	       dt_ju64(j, "sessions.0.epoch"), dt_ju64(j, "sessions.0.batch"),
	       dt_ju64(j, "sessions.0.ahead"));
	/* What top must show under "cache": the cache's bytes and budget, not the memory's. */
	bp_format_size(dt_ju64(j, "cache.bytes"), cache, sizeof(cache));
	bp_format_size(dt_ju64(j, "cache.budget"), cache_budget, sizeof(cache_budget));
	bp_format_size(dt_ju64(j, "memory.used"), memory, sizeof(memory));
	json_object_put(j);
	free(out);

	/* For people: the daemon, its resources and sessions, and no JSON. */
	r = batchctl(&out, (const char *[]){ "status", NULL });
	snprintf(line, sizeof(line), "%-22s %s\n", "socket", D.sock);
	expect(r == 0 && strstr(out, line) && strstr(out, "memory budget") &&
	       strstr(out, "I/O engine") && strstr(out, "CUDA") && strstr(out, "block cache") &&
	       strstr(out, "1 open, 0 ended; 4 batches") && strstr(out, DSET_ONE " (1 session)") &&
	       strstr(out, pid) && strstr(out, "STALL%") && !strchr(out, '{'),
	       "batchctl status (exit %d): %s", r, out);
	free(out);

	r = batchctl(&out, (const char *[]){ "top", "--count", "1", NULL });
	snprintf(line, sizeof(line), "  cache %s / %s\n", cache, cache_budget);
	expect(r == 0 && strstr(out, "UID") && strstr(out, "DATASET") && strstr(out, pid) &&
	       strstr(out, DSET_ONE) && strstr(out, "STALL%") && !strstr(out, "\033[") &&
	       strstr(out, line) && !strstr(out, "GPU 0"),
	       "batchctl top --count 1 (exit %d, not a TTY: no escapes; cache %s of %s, memory %s; "
	       "no GPU telemetry: no GPU lines): %s", r, cache, cache_budget, memory, out);
	free(out);
}

START_TEST(test_batchctl)
{
	bc_stream_opts o;
	bc_stream *s;
	bc_client *c;
	dt_ref ref;
	json_object *j, *se;
	char *out, pid[32];
	sv_prom p;
	int r;

	sv_conf_basic("info", NULL);
	sv_start_ok();
	dt_ref_ok(&ref, DSET_ONE);
	c = dt_connect_ok();
	dt_opts(&o, DSET_ONE, 10, BC_SHUFFLE_NONE, 0);
	o.shuffle = BC_SHUFFLE_GLOBAL;
	o.seed = 7;
	s = dt_open_ok(c, &o);
	sv_consume_ok(s, &ref, 4, "the stream batchctl looks at");
	/* Let the daemon account for the released batches before looking. */
	expect(sv_metric_wait("batchd_batches_delivered_total", NULL, 4) == 4, "not 4 batches delivered");

	r = batchctl(&out, (const char *[]){ "sessions", "--json", NULL });
	expect(r == 0, "batchctl sessions --json exited %d", r);
	j = parse_json_ok(out, json_type_array, "sessions --json");
	expect(json_object_array_length(j) == 1, "batchctl sessions --json: %zu sessions: %s",
	       json_object_array_length(j), out);
	se = sv_session_by_pid(j, getpid(), DSET_ONE);
	expect(se, "batchctl sessions --json does not list our stream (pid %d): %s", (int)getpid(), out);
	expect(dt_ju64(se, "uid") == getuid() && dt_ju64(se, "batch_size") == 10 &&
	       !strcmp(json_object_get_string(json_path_get(se, "shuffle")), "global") &&
	       dt_ju64(se, "delivered") == 4 && json_path_get(se, "mb_per_s") &&
	       json_path_get(se, "stall_pct"),
	       "batchctl sessions --json, our session: %s", json_object_to_json_string(se));
	json_object_put(j);
	free(out);

	r = batchctl(&out, (const char *[]){ "sessions", NULL });
	snprintf(pid, sizeof(pid), " %d ", (int)getpid());
	expect(r == 0 && strstr(out, "PID") && strstr(out, pid) && strstr(out, DSET_ONE) &&
	       strstr(out, "STALL%") && strstr(out, "LOST-GPU-s") && !strstr(out, "COST"),
	       "batchctl sessions (exit %d, no price: no cost) does not show our pid: %s", r, out);
	free(out);

	r = batchctl(&out, (const char *[]){ "stats", "--json", NULL });
	expect(r == 0, "batchctl stats --json exited %d", r);
	j = parse_json_ok(out, json_type_object, "stats --json");
	expect(dt_ju64(j, "sessions") == 1 && dt_ju64(j, "batches_delivered") == 4 &&
	       dt_ju64(j, "clients") >= 1 && dt_ju64(j, "memory_budget") > 0 &&
	       json_object_get_string(json_path_get(j, "version"))[0],
	       "batchctl stats --json: %s", out);
	json_object_put(j);
	free(out);

	r = batchctl(&out, (const char *[]){ "stats", NULL });
	expect(r == 0 && strstr(out, "delivered") && strstr(out, "4 batches") &&
	       strstr(out, "s of GPU-time lost (1 GPU a session)\n"),
	       "batchctl stats (exit %d, no price: no cost): %s", r, out);
	free(out);

	r = batchctl(&out, (const char *[]){ "metrics", NULL });
	expect(r == 0, "batchctl metrics exited %d", r);
	expect(sv_prom_parse(out, &p, E, sizeof(E)) == 0, "batchctl metrics does not parse: %s", E);
	{
		double v;
		char match[48];

		snprintf(match, sizeof(match), "pid=\"%d\"", (int)getpid());
		expect(sv_prom_get(&p, "batchd_session_batches_delivered_total", match, &v) && v == 4,
		       "batchctl metrics: our session delivered %g", v);
	}
	sv_prom_free(&p);
	free(out);

	status_and_top(pid);
	r = batchctl(&out, (const char *[]){ "top", "--count", "2", "--interval-ms", "50", NULL });
	expect(r == 0 && strstr(out, "sessions 1"), "batchctl top --count 2 (exit %d): %s", r, out);
	free(out);

	/* Usage errors exit 2; an unreachable daemon exits 1. */
	r = batchctl(&out, (const char *[]){ "sessions", "--bogus", NULL });
	expect(r == 2, "batchctl sessions --bogus exited %d, expected 2", r);
	free(out);
	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
	ck_assert_int_eq(dt_daemon_stop(&D), 0);
	r = batchctl(&out, (const char *[]){ "stats", NULL });
	expect(r == 1, "batchctl stats with no daemon exited %d, expected 1", r);
	free(out);
	dt_ref_close(&ref);
}
END_TEST

/*
 * A dataset whose name needs escaping (quote, backslash, newline, tab)
 * shows up intact in the status JSON, the metrics labels and batchctl.
 */
START_TEST(test_report_escaping)
{
	static const char name[] = "we\"ird\\na\nme\t.bpk";
	char a[PATH_MAX], b[PATH_MAX], match[128], *text, *out;
	bc_stream_opts o;
	bc_stream *s;
	bc_client *c;
	json_object *st, *se;
	dt_ref ref;
	sv_prom p;
	double v;
	int r;

	snprintf(a, sizeof(a), "%s/" DSET_ONE, dt_g.packs);
	dt_root_path(&D, name, b, sizeof(b));
	ck_assert_int_eq(link(a, b), 0);
	sv_conf_basic("info", NULL);
	sv_start_ok();
	dt_ref_ok(&ref, DSET_ONE);
	c = dt_connect_ok();
	dt_opts(&o, name, 10, BC_SHUFFLE_NONE, 0);
	s = dt_open_ok(c, &o);
	sv_consume_ok(s, &ref, 2, "a stream on an oddly named dataset");

	st = dt_status_json_ok();
	se = sv_session_by_pid(sv_sessions_of(st), getpid(), name);
	expect(se, "status does not give the dataset name back intact: %s",
	       json_object_to_json_string(st));
	json_object_put(st);

	text = sv_metrics_text_ok();
	r = sv_prom_parse(text, &p, E, sizeof(E));
	expect(r == 0, "metrics with an odd dataset name do not parse: %s\n%s", E, text);
	snprintf(match, sizeof(match), "dataset=\"we\\\"ird\\\\na\\nme\t.bpk\"");
	expect(sv_prom_get(&p, "batchd_session_memory_bytes", match, &v) && v > 0,
	       "no batchd_session_memory_bytes{%s} in:\n%s", match, text);
	sv_prom_free(&p);
	free(text);

	r = batchctl(&out, (const char *[]){ "sessions", "--json", NULL });
	expect(r == 0, "batchctl sessions --json exited %d", r);
	{
		json_object *j = parse_json_ok(out, json_type_array, "sessions --json");

		expect(sv_session_by_pid(j, getpid(), name), "batchctl sessions --json mangles the name: %s",
		       out);
		json_object_put(j);
	}
	free(out);
	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
	dt_ref_close(&ref);
}
END_TEST

/* ---- 2. the cost of waiting ------------------------------------------------------------------ */

/* The element of a status document's "sessions" with this id, or NULL (borrowed). */
static json_object *session_by_id(json_object *st, uint64_t id)
{
	json_object *list = sv_sessions_of(st);

	for (size_t i = 0; list && i < json_object_array_length(list); i++)
		if (dt_ju64(json_object_array_get_idx(list, i), "id") == id)
			return json_object_array_get_idx(list, i);
	return NULL;
}

static double jf64(json_object *o, const char *path)
{
	json_object *v = json_path_get(o, path);

	return v ? json_object_get_double(v) : NAN;
}

/* A raw session on DSET_ONE (its control memory mapped into *ret_ctrl), once it published 2. */
static int stall_session(bp_msg_ready *ready, bp_ring_ctrl **ret_ctrl, int fds[BP_READY_FDS])
{
	bp_msg_open m = { .seed = 1, .batch_size = 10, .world = 1, .prefetch = 4,
			  .placement = BP_PLACEMENT_HOST, .shuffle = BP_SHUFFLE_NONE,
			  .path = DSET_ONE, .path_len = (uint32_t)strlen(DSET_ONE) };
	int conn = dt_raw_connect(D.sock), r;

	expect(conn >= 0 && dt_raw_hello(conn, NULL) == 0, "raw connection");
	r = dt_raw_open(conn, &m, ready, fds);
	expect(r == 0, "raw OPEN: %s (%d)", bc_strerror(r), r);
	*ret_ctrl = mmap(NULL, ready->ctrl_size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[1], 0);
	ck_assert_ptr_ne(*ret_ctrl, MAP_FAILED);
	for (int i = 0; i < TRIES; i++) {
		json_object *st = dt_status_json_ok();
		uint64_t published = dt_ju64(session_by_id(st, ready->session), "published");

		json_object_put(st);
		if (published >= 2)
			return conn;
		dt_sleep_ms(10);
	}
	expect(0, "session %" PRIu64 " published fewer than 2 batches", ready->session);
	return -1;
}

/*
 * End a stall_session: with send_close, CLOSE it and wait for CLOSED as a
 * trainer's bc_close does; without, hang up with the session open.
 */
static void stall_session_end(int conn, const bp_msg_ready *ready, bp_ring_ctrl *ctrl,
			      int fds[BP_READY_FDS], bool send_close)
{
	bp_msg_session m = { .session = ready->session };
	uint8_t buf[BP_MSG_MAX];
	int n;

	if (send_close) {
		n = bp_msg_session_encode(BP_MSG_CLOSE, &m, buf, sizeof(buf));
		expect(n > 0 && send(conn, buf, (size_t)n, MSG_NOSIGNAL) == n,
		       "CLOSE session %" PRIu64 ": %s", ready->session, strerror(errno));
		n = dt_raw_recv(conn, buf, sizeof(buf), NULL, 0, NULL, 30000);
		expect(n > 0 && bp_msg_session_decode(BP_MSG_CLOSED, buf, (size_t)n, &m) == 0 &&
		       m.session == ready->session, "no CLOSED for session %" PRIu64 " (%d)",
		       ready->session, n);
	}
	munmap(ctrl, ready->ctrl_size);
	for (int i = 0; i < BP_READY_FDS; i++)
		close(fds[i]);
	close(conn);
	expect(dt_wait_sessions(D.sock, 0, TRIES), "session %" PRIu64 " is still listed",
	       ready->session);
}

/* batchctl sessions, stats and stats --json with one session that waited 0.25 s, at 36 a GPU-hour. */
static void expect_stall_in_batchctl(void)
{
	char *out;
	int r;

	r = batchctl(&out, (const char *[]){ "sessions", NULL });
	expect(r == 0 && strstr(out, "LOST-GPU-s") && strstr(out, "COST") && strstr(out, " 0.25 ") &&
	       strstr(out, " 0.0025"), "batchctl sessions (exit %d) with a price: %s", r, out);
	free(out);
	r = batchctl(&out, (const char *[]){ "stats", NULL });
	expect(r == 0 && strstr(out, "0.250 s waiting for data = 0.250 s of GPU-time lost") &&
	       strstr(out, "cost 0.0025 at 36 a GPU-hour"), "batchctl stats (exit %d): %s", r, out);
	free(out);
	r = batchctl(&out, (const char *[]){ "stats", "--json", NULL });
	{
		json_object *j = parse_json_ok(out, json_type_object, "stats --json");

		expect(r == 0 && jf64(j, "stall_seconds") == 0.25 && jf64(j, "lost_gpu_seconds") == 0.25 &&
		       fabs(jf64(j, "stall_cost") - 0.0025) < 1e-12 && jf64(j, "gpu_hour_price") == 36,
		       "batchctl stats --json: %s", out);
		json_object_put(j);
	}
	free(out);
}

/* A trainer always waiting reads ~1; the totals then hold its stall and its cost (0.01 a second). */
static void expect_always_waiting(void)
{
	int fds[BP_READY_FDS], conn;
	bp_msg_ready ready;
	bp_ring_ctrl *ctrl;
	char line[256];
	sv_prom p;
	double v;

	conn = stall_session(&ready, &ctrl, fds);
	ctrl->wait_ns = UINT64_C(1) << 62;
	dt_sleep_ms(50);
	sv_metrics_ok(&p);
	v = sv_prom_session(&p, "batchd_session_stall_ratio", ready.session);
	expect(v > 0.99 && v <= 1, "a trainer always waiting: stall ratio %g", v);
	sv_prom_free(&p);
	/* Hung up without a CLOSE: the log says the client went, not that it closed. */
	stall_session_end(conn, &ready, ctrl, fds, false);
	snprintf(line, sizeof(line), "session %" PRIu64 " ended (client gone): uid %u, dataset "
		 DSET_ONE ", ", ready.session, (unsigned)getuid());
	expect(dt_log_contains(&D, line), "no line \"%s...\" in the log", line);
	snprintf(line, sizeof(line), "session %" PRIu64 " ended (closed by its client)",
		 ready.session);
	expect(!dt_log_contains(&D, line), "a session whose client hung up: \"%s\"", line);
	sv_metrics_ok(&p);
	expect(sv_prom_get(&p, "batchd_stall_seconds_total", NULL, &v) && v > 0.25 + 0.05,
	       "batchd_stall_seconds_total %g after a session in bc_next for over 50 ms", v);
	{
		double cost = NAN;

		expect(sv_prom_get(&p, "batchd_stall_cost_total", NULL, &cost) &&
		       fabs(cost - 0.01 * v) < 1e-9 * v, "batchd_stall_cost_total %g for %g s", cost, v);
	}
	sv_prom_free(&p);
}

/*
 * A trainer that says it waited 0.25 s: its stall seconds, ratio and cost
 * (at 36 a GPU-hour, 0.01 a second) in the metrics, the status and
 * batchctl, and in the totals and the log line once it ended; one that
 * never waited reads 0, one always waiting ~1.
 */
START_TEST(test_stall_cost)
{
	int fds[BP_READY_FDS], conn;
	bp_msg_ready ready;
	bp_ring_ctrl *ctrl;
	json_object *st, *se;
	char line[256];
	double v, age;
	sv_prom p;

	sv_conf_basic("info", "[metrics]\ngpu_hour_price = 36\n");
	sv_start_ok();
	conn = stall_session(&ready, &ctrl, fds);
	sv_metrics_ok(&p);
	v = sv_prom_session(&p, "batchd_session_stall_ratio", ready.session);
	expect(v == 0, "a trainer that never waited: stall ratio %g", v);
	v = sv_prom_session(&p, "batchd_session_stall_seconds_total", ready.session);
	expect(v == 0, "a trainer that never waited: %g stall seconds", v);
	sv_prom_free(&p);

	/* 0.25 s of waiting, in a session older than that (the daemon clamps to its age). */
	dt_sleep_ms(400);
	ctrl->consumed = 2;
	ctrl->waits = 2;
	ctrl->wait_hist[BP_RING_WAIT_BUCKETS - 1] = 2;
	ctrl->wait_ns = 250000000;
	sv_metrics_ok(&p);
	v = sv_prom_session(&p, "batchd_session_stall_seconds_total", ready.session);
	expect(v == 0.25, "batchd_session_stall_seconds_total %g, the trainer waited 0.25 s", v);
	v = sv_prom_session(&p, "batchd_session_stall_cost_total", ready.session);
	expect(fabs(v - 0.0025) < 1e-12, "batchd_session_stall_cost_total %g, expected 0.0025 "
	       "(36 / 3600 x 0.25 s x 1 GPU)", v);
	v = sv_prom_session(&p, "batchd_session_stall_ratio", ready.session);
	expect(v > 0 && v < 0.25 / 0.4, "batchd_session_stall_ratio %g: 0.25 s in over 0.4 s", v);
	expect(sv_prom_get(&p, "batchd_stall_seconds_total", NULL, &v) && v == 0.25,
	       "batchd_stall_seconds_total %g with one session that waited 0.25 s", v);
	expect(sv_prom_get(&p, "batchd_stall_cost_total", NULL, &v) && fabs(v - 0.0025) < 1e-12,
	       "batchd_stall_cost_total %g", v);
	expect(sv_prom_get(&p, "batchd_metrics_sessions_omitted", NULL, &v) && v == 0,
	       "batchd_metrics_sessions_omitted %g with one session", v);
	sv_prom_free(&p);

	st = dt_status_json_ok();
	se = session_by_id(st, ready.session);
	age = jf64(se, "age_s");
	expect(jf64(se, "stall_seconds") == 0.25 && fabs(jf64(se, "stall_cost") - 0.0025) < 1e-12 &&
	       fabs(jf64(se, "stall_ratio") * age - 0.25) < 1e-3,   /* age_s is to the ms */
	       "status, the session: %s", json_object_to_json_string(se));
	expect(jf64(st, "stall.seconds") == 0.25 && jf64(st, "stall.gpu_hour_price") == 36 &&
	       dt_ju64(st, "stall.gpus_per_session") == 1, "status stall: %s",
	       json_object_to_json_string(json_path_get(st, "stall")));
	json_object_put(st);

	expect_stall_in_batchctl();

	/* CLOSEd: the totals keep it, the log says it and that its client closed it. */
	stall_session_end(conn, &ready, ctrl, fds, true);
	sv_metrics_ok(&p);
	expect(sv_prom_get(&p, "batchd_stall_seconds_total", NULL, &v) && v == 0.25,
	       "batchd_stall_seconds_total %g after the session ended", v);
	expect(sv_prom_count(&p, "batchd_session_stall_seconds_total") == 0,
	       "the ended session's stall series remain");
	sv_prom_free(&p);
	snprintf(line, sizeof(line), "session %" PRIu64 " ended (closed by its client): uid %u, dataset "
		 DSET_ONE ", 0 batches, 0 B, 0.0 MB/s mean, stall ", ready.session, (unsigned)getuid());
	expect(dt_log_contains(&D, line), "no line \"%s...\" in the log", line);
	expect(dt_log_contains(&D, "%, lost GPU-time 0.25 s (cost 0.0025)"),
	       "the session's last line does not give its lost GPU-time and cost");

	expect_always_waiting();
}
END_TEST

/* [metrics] gpu_hour_price: a bad one is refused at reload and the old price stays; 0 ends the cost series. */
START_TEST(test_stall_price)
{
	static const char *const bad[][2] = {
		{ "-1", "[metrics] gpu_hour_price: '-1' is not a price" },
		{ "nan", "[metrics] gpu_hour_price: 'nan' is not a price" },
		{ "inf", "[metrics] gpu_hour_price: 'inf' is not a price" },
		{ "1e999", "[metrics] gpu_hour_price: '1e999' is not a price" },
		{ "2.50 EUR", "[metrics] gpu_hour_price: '2.50 EUR' is not a number" },
		{ "", "[metrics] gpu_hour_price: '' is not a number" },
	};
	char extra[96];
	sv_prom p;
	double v;

	sv_conf_basic("info", "[metrics]\ngpu_hour_price = 2.50\n");
	sv_start_ok();
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		snprintf(extra, sizeof(extra), "[metrics]\ngpu_hour_price = %s\n", bad[i][0]);
		sv_conf_basic("info", extra);
		sv_hup_and_wait(0, (double)(i + 1));
		expect(dt_log_contains(&D, bad[i][1]), "gpu_hour_price = %s: no \"%s\" in the log",
		       bad[i][0], bad[i][1]);
	}
	{
		json_object *st = dt_status_json_ok();

		expect(jf64(st, "stall.gpu_hour_price") == 2.5, "the price after refused reloads: %s",
		       json_object_to_json_string(json_path_get(st, "stall")));
		json_object_put(st);
	}
	sv_metrics_ok(&p);
	expect(sv_prom_get(&p, "batchd_stall_cost_total", NULL, &v) && v == 0,
	       "batchd_stall_cost_total %g at 2.50 before any stall", v);
	sv_prom_free(&p);

	sv_conf_basic("info", "[metrics]\ngpu_hour_price = 0\n");
	sv_hup_and_wait(1, (double)ARRAY_SIZE(bad));
	sv_metrics_ok(&p);
	expect(sv_prom_count(&p, "batchd_stall_cost_total") == 0, "cost series with no price");
	expect(sv_prom_get(&p, "batchd_stall_seconds_total", NULL, &v) && v == 0,
	       "batchd_stall_seconds_total %g with no price", v);
	sv_prom_free(&p);
}
END_TEST

/* ---- the suite ------------------------------------------------------------------------------------ */

static Suite *metrics_batchctl_suite(void)
{
	Suite *s = suite_create("metrics-batchctl");

	tcase_add_test(sv_tcase(s, "batchctl"), test_batchctl);
	tcase_add_test(sv_tcase(s, "report_escaping"), test_report_escaping);
	tcase_add_test(sv_tcase(s, "stall_cost"), test_stall_cost);
	tcase_add_test(sv_tcase(s, "stall_price"), test_stall_price);
	return s;
}

int main(void)
{
	return dt_check_main(&D, metrics_batchctl_suite);
}
