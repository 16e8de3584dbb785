/* SPDX-License-Identifier: MIT */
/*
 * test-metrics.c - batchd's reports: Prometheus metrics text that parses
 * by the exposition rules and adds up to exactly the traffic the test made
 * (batches, bytes, histograms, per-session series that go with their
 * session); the HTTP /metrics listener; batchctl's reporting commands
 * (sessions, stats, status, metrics, top; usage and unreachable-daemon
 * exits); names that need escaping, intact in JSON, labels and batchctl;
 * reports bigger than a socket buffer for a client slow to read them; the
 * session-end log line, which tells a CLOSE from a client that hung up;
 * the CUDA probe's reason logged as it is.
 *
 * One of the service suites (service-testlib.h): a real batchd started with
 * `-c FILE`, real clients through libbatchclient, the reports read back.
 *
 * BATCHD, BATCHD_PACK and BATCHCTL name the binaries (meson sets them).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
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

/* ---- 4. metrics parsed back and checked against known traffic ---------------------------- */

/*
 * Our session's stall (match: its labels) is what our bc_next calls took,
 * as the status has it, a ratio in 0..1; no price, no cost series.
 */
static void expect_our_stall(const sv_prom *p, const char *match)
{
	json_object *st = dt_status_json_ok();
	json_object *se = sv_session_by_pid(sv_sessions_of(st), getpid(), DSET_ONE);
	double v = NAN, ratio = NAN;

	expect(sv_prom_get(p, "batchd_session_stall_seconds_total", match, &v) &&
	       fabs(v - json_object_get_double(json_path_get(se, "wait_s"))) < 1e-6 && v > 0,
	       "batchd_session_stall_seconds_total %g, status: %s", v, json_object_to_json_string(se));
	expect(sv_prom_get(p, "batchd_session_stall_ratio", match, &ratio) && ratio >= 0 && ratio <= 1,
	       "batchd_session_stall_ratio %g", ratio);
	json_object_put(st);
	expect(sv_prom_count(p, "batchd_session_stall_cost_total") == 0 &&
	       sv_prom_count(p, "batchd_stall_cost_total") == 0,
	       "stall cost series without [metrics] gpu_hour_price");
}

/* The stall total is the clients' waits summed (batchd_client_wait_seconds_sum), and not 0. */
static void expect_stall_total_is_waits(const sv_prom *p)
{
	double sum = NAN, v = NAN;

	expect(sv_prom_get(p, "batchd_client_wait_seconds_sum", NULL, &sum) &&
	       sv_prom_get(p, "batchd_stall_seconds_total", NULL, &v) && v == sum && v > 0,
	       "batchd_stall_seconds_total %g, the clients waited %g s in all", v, sum);
}

START_TEST(test_metrics_traffic)
{
	const size_t N = 23, M = 6;
	bc_stream_opts o;
	bc_stream *s;
	bc_client *c;
	bc_batch *b, *held = NULL;
	dt_ref ref;
	sv_prom p;
	char match[64], *text;
	uint64_t bytes1 = 0, bytes2 = 0;
	double v, count;
	size_t taken;
	int r;

	sv_conf_basic("info", NULL);
	sv_start_ok();
	dt_ref_ok(&ref, DSET_ONE);

	/* Before any traffic: everything parses, the totals are 0. */
	sv_metrics_ok(&p);
	expect(sv_prom_get(&p, "batchd_batches_delivered_total", NULL, &v) && v == 0,
	       "batchd_batches_delivered_total before any traffic: %g", v);
	expect(sv_prom_get(&p, "batchd_build_info", "version=\"", &v) && v == 1, "no batchd_build_info");
	count = sv_prom_check_hist(&p, "batchd_client_wait_seconds", E, sizeof(E));
	expect(count == 0, "batchd_client_wait_seconds before traffic: %s", count < 0 ? E : "count not 0");
	sv_prom_free(&p);

	/* Exactly N batches, every byte counted, all released; prefetch runs ahead of us. */
	c = dt_connect_ok();
	dt_opts(&o, DSET_ONE, 10, BC_SHUFFLE_NONE, 0);
	o.prefetch = 4;
	s = dt_open_ok(c, &o);
	for (taken = 0; taken < N; taken++) {
		size_t len;

		r = bc_next(s, &b, WAIT_MS);
		expect(r == 0, "batch %zu: %s (%d): %s", taken, bc_strerror(r), r, bc_stream_error(s));
		expect(dt_batch_check(b, &ref, E, sizeof(E)) == 0, "batch %zu: %s", taken, E);
		bc_batch_data(b, &len);
		bytes1 += len;
		ck_assert_int_eq(bc_release(b), 0);
	}
	snprintf(match, sizeof(match), "pid=\"%d\"", (int)getpid());
	v = sv_metric_wait("batchd_session_batches_delivered_total", match, (double)N);
	expect(v == (double)N, "batchd_session_batches_delivered_total %g, expected %zu", v, N);
	/* The prefetched batches are published, but not delivered. */
	for (int i = 0; i < TRIES; i++) {
		v = sv_metric("batchd_session_batches_published_total", match);
		if (v > (double)N)
			break;
		dt_sleep_ms(10);
	}
	expect(v > (double)N, "batchd_session_batches_published_total %g: no prefetch beyond %zu", v, N);
	sv_metrics_ok(&p);
	expect(sv_prom_get(&p, "batchd_session_batches_delivered_total", match, &v) && v == (double)N,
	       "delivered counts prefetched batches: %g, expected %zu", v, N);
	expect(sv_prom_get(&p, "batchd_session_bytes_delivered_total", match, &v) && v == (double)bytes1,
	       "batchd_session_bytes_delivered_total %g, the client received %" PRIu64, v, bytes1);
	expect(sv_prom_get(&p, "batchd_batches_delivered_total", NULL, &v) && v == (double)N,
	       "batchd_batches_delivered_total with the session open: %g, expected %zu", v, N);
	expect(sv_prom_get(&p, "batchd_sessions", NULL, &v) && v == 1, "batchd_sessions %g", v);
	expect(sv_prom_get(&p, "batchd_session_memory_bytes", match, &v) && v > 0,
	       "batchd_session_memory_bytes of our session: %g", v);
	expect_our_stall(&p, match);
	sv_prom_free(&p);
	ck_assert_int_eq(bc_close(s), 0);

	/* Closed and ended: the totals keep it. */
	v = sv_metric_wait("batchd_sessions", NULL, 0);
	expect(v == 0, "batchd_sessions %g after close", v);
	sv_metrics_ok(&p);
	expect(sv_prom_get(&p, "batchd_batches_delivered_total", NULL, &v) && v == (double)N,
	       "batchd_batches_delivered_total %g, the client took and released %zu", v, N);
	expect(sv_prom_get(&p, "batchd_bytes_delivered_total", NULL, &v) && v == (double)bytes1,
	       "batchd_bytes_delivered_total %g, the client received %" PRIu64 " bytes", v, bytes1);
	count = sv_prom_check_hist(&p, "batchd_client_wait_seconds", E, sizeof(E));
	expect(count == (double)N, "batchd_client_wait_seconds: %s", count < 0 ? E : "count is not N");
	expect_stall_total_is_waits(&p);
	expect(sv_prom_get(&p, "batchd_sessions_ended_total", NULL, &v) && v == 1,
	       "batchd_sessions_ended_total %g", v);
	expect(sv_prom_count(&p, "batchd_session_batches_delivered_total") == 0,
	       "per-session series of an ended session remain");
	{
		static const char *const hists[] = { "batchd_read_latency_seconds", "batchd_decode_seconds" };

		for (size_t k = 0; k < ARRAY_SIZE(hists); k++) {
			count = sv_prom_check_hist(&p, hists[k], E, sizeof(E));
			expect(count > 0, "%s: %s", hists[k], count < 0 ? E : "no observations after traffic");
		}
	}
	expect(sv_prom_get(&p, "batchd_io_blocks_read_total", NULL, &v) && v > 0,
	       "batchd_io_blocks_read_total %g after traffic", v);
	sv_prom_free(&p);

	/* A second stream: M released, one taken and still held when it closes. */
	s = dt_open_ok(c, &o);
	for (taken = 0; taken <= M; taken++) {
		size_t len;

		r = bc_next(s, &b, WAIT_MS);
		expect(r == 0, "second stream, batch %zu: %s (%d)", taken, bc_strerror(r), r);
		if (taken == M) {
			held = b;
			break;
		}
		bc_batch_data(b, &len);
		bytes2 += len;
		ck_assert_int_eq(bc_release(b), 0);
	}
	v = sv_metric_wait("batchd_batches_delivered_total", NULL, (double)(N + M));
	expect(v == (double)(N + M), "batchd_batches_delivered_total %g with %zu released and one held, "
	       "expected %zu", v, M, N + M);
	(void)held;
	ck_assert_int_eq(bc_close(s), 0);
	v = sv_metric_wait("batchd_sessions", NULL, 0);
	sv_metrics_ok(&p);
	expect(sv_prom_get(&p, "batchd_batches_delivered_total", NULL, &v) && v == (double)(N + M),
	       "batchd_batches_delivered_total %g after closing with a batch held, expected %zu", v,
	       N + M);
	expect(sv_prom_get(&p, "batchd_bytes_delivered_total", NULL, &v) && v == (double)(bytes1 + bytes2),
	       "batchd_bytes_delivered_total %g, expected %" PRIu64, v, bytes1 + bytes2);
	count = sv_prom_check_hist(&p, "batchd_client_wait_seconds", E, sizeof(E));
	expect(count == (double)(N + M + 1), "batchd_client_wait_seconds_count: %s (%g), expected %zu "
	       "(every bc_next that returned a batch)", count < 0 ? E : "wrong", count, N + M + 1);
	expect(sv_prom_get(&p, "batchd_sessions_ended_total", NULL, &v) && v == 2,
	       "batchd_sessions_ended_total %g", v);
	sv_prom_free(&p);

	/* The status document agrees with the metrics. */
	{
		json_object *st = dt_status_json_ok();

		expect(dt_ju64(st, "ended.batches") == N + M && dt_ju64(st, "ended.bytes") == bytes1 + bytes2 &&
		       dt_ju64(st, "ended.sessions") == 2, "status ended: %s",
		       json_object_to_json_string(json_path_get(st, "ended")));
		json_object_put(st);
	}
	/* A raw look at the text: the last line ends with a newline, no blank lines. */
	text = sv_metrics_text_ok();
	expect(!strstr(text, "\n\n"), "blank line in the metrics");
	free(text);
	bc_disconnect(c);
	dt_ref_close(&ref);
}
END_TEST

/* ---- 8. the HTTP /metrics listener ------------------------------------------------------------ */

START_TEST(test_http_metrics)
{
	int port = dt_free_port(), code;
	char extra[96], *body = NULL;
	bc_stream_opts o;
	bc_stream *s;
	bc_client *c;
	dt_ref ref;
	sv_prom p;
	double v;

	ck_assert_int_gt(port, 0);
	snprintf(extra, sizeof(extra), "[metrics]\nlisten = 127.0.0.1:%d\n", port);
	sv_conf_basic("info", extra);
	if (dt_daemon_start(&D) < 0) {
		if (dt_log_contains(&D, "without libmicrohttpd")) {
			fprintf(stderr, "test-metrics: SKIP http_metrics: batchd was built without "
				"libmicrohttpd\n");
			return;
		}
		expect(0, "batchd with [metrics] listen = 127.0.0.1:%d did not start", port);
	}
	expect(dt_log_contains(&D, "metrics on http://"), "the startup line does not name the listener");

	/* Traffic first, so the numbers mean something. */
	dt_ref_ok(&ref, DSET_ONE);
	c = dt_connect_ok();
	dt_opts(&o, DSET_ONE, 10, BC_SHUFFLE_NONE, 0);
	s = dt_open_ok(c, &o);
	sv_consume_ok(s, &ref, 4, "a stream before scraping");
	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
	v = sv_metric_wait("batchd_sessions", NULL, 0);
	expect(v == 0, "batchd_sessions %g", v);

	code = dt_http_request(port, "GET", "/metrics", &body);
	expect(code == 200, "GET /metrics: HTTP status %d", code);
	expect(strstr(body, "batchd_build_info"), "GET /metrics: no batchd_build_info in %.200s", body);
	expect(sv_prom_parse(body, &p, E, sizeof(E)) == 0, "GET /metrics does not parse: %s", E);
	expect(sv_prom_get(&p, "batchd_batches_delivered_total", NULL, &v) && v == 4,
	       "over HTTP: batchd_batches_delivered_total %g, expected 4", v);
	expect(sv_metric("batchd_batches_delivered_total", NULL) == v,
	       "HTTP and the socket disagree on batchd_batches_delivered_total");
	sv_prom_free(&p);
	free(body);

	code = dt_http_request(port, "GET", "/nope", &body);
	expect(code == 404, "GET /nope: HTTP status %d, expected 404", code);
	free(body);
	code = dt_http_request(port, "POST", "/metrics", &body);
	expect(code >= 400 && code < 500, "POST /metrics: HTTP status %d, expected 4xx", code);
	free(body);
	dt_ref_close(&ref);
}
END_TEST

/* ---- 9. batchctl ------------------------------------------------------------------------------ */

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

			fprintf(stderr, "test-metrics: batchctl %s exited %d:\n", argv[3], WEXITSTATUS(st));
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

/* ---- 10. the cost of waiting ----------------------------------------------------------------- */

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

/* The session's series of family name in p, NAN when missing. */
static double session_series(const sv_prom *p, const char *name, uint64_t id)
{
	char match[48];
	double v;

	snprintf(match, sizeof(match), "session=\"%" PRIu64 "\"", id);
	return sv_prom_get(p, name, match, &v) ? v : NAN;
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
	v = session_series(&p, "batchd_session_stall_ratio", ready.session);
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
	v = session_series(&p, "batchd_session_stall_ratio", ready.session);
	expect(v == 0, "a trainer that never waited: stall ratio %g", v);
	v = session_series(&p, "batchd_session_stall_seconds_total", ready.session);
	expect(v == 0, "a trainer that never waited: %g stall seconds", v);
	sv_prom_free(&p);

	/* 0.25 s of waiting, in a session older than that (the daemon clamps to its age). */
	dt_sleep_ms(400);
	ctrl->consumed = 2;
	ctrl->waits = 2;
	ctrl->wait_hist[BP_RING_WAIT_BUCKETS - 1] = 2;
	ctrl->wait_ns = 250000000;
	sv_metrics_ok(&p);
	v = session_series(&p, "batchd_session_stall_seconds_total", ready.session);
	expect(v == 0.25, "batchd_session_stall_seconds_total %g, the trainer waited 0.25 s", v);
	v = session_series(&p, "batchd_session_stall_cost_total", ready.session);
	expect(fabs(v - 0.0025) < 1e-12, "batchd_session_stall_cost_total %g, expected 0.0025 "
	       "(36 / 3600 x 0.25 s x 1 GPU)", v);
	v = session_series(&p, "batchd_session_stall_ratio", ready.session);
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

/* Descriptors for need more: raise the soft limit if we may. @return whether there is room. */
static bool fd_room(size_t need, const char *test)
{
	struct rlimit rl;

	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_cur < need) {
		rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need ? need : rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
		getrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur >= need)
		return true;
	fprintf(stderr, "test-metrics: SKIP %s: RLIMIT_NOFILE %lu is under %zu\n", test,
		(unsigned long)rl.rlim_cur, need);
	return false;
}

/* Sessions a connection holds in the tests with many sessions. */
#define SESSIONS_PER_CONN 50u

/*
 * n sessions on path, batch 1, prefetch 1, SESSIONS_PER_CONN to a
 * connection: c gets ceil(n / SESSIONS_PER_CONN) connections, st n streams.
 */
static void open_many(bc_client **c, bc_stream **st, size_t n, const char *path)
{
	bc_stream_opts o;

	dt_opts(&o, path, 1, BC_SHUFFLE_NONE, 0);
	o.prefetch = 1;
	for (size_t i = 0; i < n; i++) {
		if (i % SESSIONS_PER_CONN == 0)
			c[i / SESSIONS_PER_CONN] = dt_connect_ok();
		st[i] = dt_open_ok(c[i / SESSIONS_PER_CONN], &o);
	}
}

/* Close what open_many opened. */
static void close_many(bc_client **c, bc_stream **st, size_t n)
{
	for (size_t i = 0; i < n; i++)
		ck_assert_int_eq(bc_close(st[i]), 0);
	for (size_t i = 0; i < (n + SESSIONS_PER_CONN - 1) / SESSIONS_PER_CONN; i++)
		bc_disconnect(c[i]);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * More sessions than the metrics list one by one (256): the oldest 256
 * are listed in every per-session family, the others counted as omitted,
 * the totals count all.
 */
START_TEST(test_session_bound)
{
	enum { BOUND = 256, EXTRA = 3, N = BOUND + EXTRA };
	bc_client *c[(N + SESSIONS_PER_CONN - 1) / SESSIONS_PER_CONN] = { 0 };
	static const char *const families[] = {
		"batchd_session_memory_bytes", "batchd_session_batches_delivered_total",
		"batchd_session_stall_seconds_total", "batchd_session_stall_ratio",
	};
	bc_stream *st[N];
	uint64_t ids[N];
	json_object *j, *list;
	sv_prom p;
	double v;

	if (!fd_room(6 * N + 4 * N + 256, "session_bound"))
		return;
	sv_conf_basic("info", NULL);
	sv_start_ok();
	open_many(c, st, N, DSET_ONE);
	j = dt_status_json_ok();
	list = sv_sessions_of(j);
	expect(list && json_object_array_length(list) == N, "status lists %zu sessions, not %d",
	       list ? json_object_array_length(list) : 0, N);
	for (size_t i = 0; i < N; i++)
		ids[i] = dt_ju64(json_object_array_get_idx(list, i), "id");
	json_object_put(j);
	qsort(ids, N, sizeof(ids[0]), cmp_u64);

	sv_metrics_ok(&p);
	for (size_t k = 0; k < ARRAY_SIZE(families); k++)
		expect(sv_prom_count(&p, families[k]) == BOUND, "%s: %zu series with %d sessions open, "
		       "expected %d", families[k], sv_prom_count(&p, families[k]), N, BOUND);
	expect(sv_prom_get(&p, "batchd_metrics_sessions_omitted", NULL, &v) && v == EXTRA,
	       "batchd_metrics_sessions_omitted %g, expected %d", v, EXTRA);
	expect(sv_prom_get(&p, "batchd_sessions", NULL, &v) && v == N, "batchd_sessions %g", v);
	/* The oldest are listed, the newest left out. */
	for (size_t i = 0; i < N; i++) {
		bool listed = !isnan(session_series(&p, "batchd_session_memory_bytes", ids[i]));

		expect(listed == (i < BOUND), "session %" PRIu64 " (%zu of %d by age) is %s", ids[i],
		       i + 1, N, listed ? "listed" : "not listed");
	}
	sv_prom_free(&p);
	close_many(c, st, N);
}
END_TEST

/*
 * A raw request for a text report (status or metrics) from a client that
 * is slow to read: it sleeps before reading, as a busy trainer's thread
 * might. @return the whole text (caller frees), or NULL with why in E.
 */
static char *slow_report(int fd, bool metrics, int sleep_before_ms)
{
	uint8_t buf[BP_MSG_MAX];
	uint16_t type = metrics ? BP_MSG_METRICS_REPLY : BP_MSG_STATUS_REPLY;
	char *text = NULL;
	size_t len = 0;
	int n = metrics ? bp_msg_metrics_encode(buf, sizeof(buf)) : bp_msg_status_encode(buf, sizeof(buf));
	unsigned parts = 0;
	bp_msg_text t;

	if (n <= 0 || send(fd, buf, (size_t)n, MSG_NOSIGNAL) != n) {
		snprintf(E, sizeof(E), "cannot send the request");
		return NULL;
	}
	dt_sleep_ms(sleep_before_ms);
	do {
		n = dt_raw_recv(fd, buf, sizeof(buf), NULL, 0, NULL, WAIT_MS);
		if (n <= 0 || bp_msg_text_decode(type, buf, (size_t)n, &t) < 0) {
			snprintf(E, sizeof(E), "part %u (after %zu bytes): %s", parts + 1, len,
				 n == 0 ? "the daemon closed the connection" : n < 0 ? strerror(-n)
				 : "not a reply part");
			free(text);
			return NULL;
		}
		text = realloc(text, len + t.text_len + 1);
		ck_assert(text != NULL);
		memcpy(text + len, t.text, t.text_len);
		len += t.text_len;
		text[len] = '\0';
		parts++;
	} while (t.code == BP_TEXT_MORE);
	return text;
}

/*
 * Reports bigger than the socket's send buffer reach a client that does
 * not read them at once (the daemon must not give up on a full socket in
 * the middle of a reply). Long dataset paths make each session's share
 * large, so a hundred-odd sessions are enough.
 */
START_TEST(test_large_reports)
{
	enum { LEVEL = 200 };
	char rel[BP_PATH_MAX], path[PATH_MAX], a[PATH_MAX], comp[LEVEL + 1];
	long wmem = 212992;
	size_t nsess, nconn, at = 0;
	bc_client **c;
	bc_stream **st;
	json_object *j;
	char *text;
	FILE *f;
	sv_prom p;
	int fd;

	/* root/ddd.../ddd.../one.bpk, about 3900 bytes relative to the root. */
	memset(comp, 'd', LEVEL);
	comp[LEVEL] = '\0';
	rel[0] = '\0';
	while (at + LEVEL + 1 + 16 < 3900) {
		at += (size_t)snprintf(rel + at, sizeof(rel) - at, "%s/", comp);
		dt_root_path(&D, rel, path, sizeof(path));
		ck_assert_msg(mkdir(path, 0755) == 0, "mkdir %s: %s", path, strerror(errno));
	}
	snprintf(rel + at, sizeof(rel) - at, DSET_ONE);
	dt_root_path(&D, rel, path, sizeof(path));
	snprintf(a, sizeof(a), "%s/" DSET_ONE, dt_g.packs);
	ck_assert_int_eq(link(a, path), 0);

	/* Enough sessions for replies of about three send buffers. */
	f = fopen("/proc/sys/net/core/wmem_default", "r");
	if (f) {
		if (fscanf(f, "%ld", &wmem) != 1)
			wmem = 212992;
		fclose(f);
	}
	nsess = (size_t)(3 * wmem / 3500) + 1;
	nconn = (nsess + SESSIONS_PER_CONN - 1) / SESSIONS_PER_CONN;
	/* Four descriptors per stream here, six per session in batchd (which inherits the limit). */
	if (!fd_room(6 * nsess + 256, "large_reports"))
		return;

	sv_conf_basic("info", NULL);
	sv_start_ok();
	c = calloc(nconn, sizeof(*c));
	st = calloc(nsess, sizeof(*st));
	ck_assert(c && st);
	open_many(c, st, nsess, rel);

	fd = dt_raw_connect(D.sock);
	expect(fd >= 0 && dt_raw_hello(fd, NULL) == 0, "raw connection");
	text = slow_report(fd, false, 500);
	expect(text, "status with %zu sessions (long paths), read after 0.5 s: %s", nsess, E);
	j = json_tokener_parse(text);
	expect(j && json_object_array_length(sv_sessions_of(j)) == nsess, "the status (%zu bytes) does "
	       "not list %zu sessions", strlen(text), nsess);
	json_object_put(j);
	free(text);
	text = slow_report(fd, true, 500);
	expect(text, "metrics with %zu sessions (long paths), read after 0.5 s: %s", nsess, E);
	expect(sv_prom_parse(text, &p, E, sizeof(E)) == 0, "the metrics (%zu bytes) do not parse: %s",
	       strlen(text), E);
	expect(sv_prom_count(&p, "batchd_session_memory_bytes") == nsess, "%zu sessions in the metrics, "
	       "expected %zu", sv_prom_count(&p, "batchd_session_memory_bytes"), nsess);
	sv_prom_free(&p);
	free(text);
	close(fd);

	close_many(c, st, nsess);
	free(st);
	free(c);
}
END_TEST

/*
 * Without CUDA the log gives the probe's reason as a line of its own, not
 * wrapped in words of batchd's that repeat it ("serving host sessions only").
 */
START_TEST(test_cuda_line)
{
	json_object *st;
	char line[320];

	sv_conf_basic("info", NULL);
	sv_start_ok();
	st = dt_status_json_ok();
	if (json_object_get_boolean(json_path_get(st, "cuda.available"))) {
		printf("cuda_line: CUDA is available here: no reason to log, nothing to check\n");
		json_object_put(st);
		return;
	}
	snprintf(line, sizeof(line), "]: %s\n",
		 json_object_get_string(json_path_get(st, "cuda.reason")));
	json_object_put(st);
	expect(strlen(line) > 4 && dt_log_contains(&D, line), "no line \"%s\" in the log", line);
	expect(!dt_log_contains(&D, "serving host sessions only"),
	       "the log wraps the CUDA probe's reason in its own words");
}
END_TEST

/* ---- the suite ------------------------------------------------------------------------------------ */

static Suite *metrics_suite(void)
{
	Suite *s = suite_create("metrics");

	tcase_add_test(sv_tcase(s, "metrics_traffic"), test_metrics_traffic);
	tcase_add_test(sv_tcase(s, "http_metrics"), test_http_metrics);
	tcase_add_test(sv_tcase(s, "batchctl"), test_batchctl);
	tcase_add_test(sv_tcase(s, "report_escaping"), test_report_escaping);
	tcase_add_test(sv_tcase(s, "large_reports"), test_large_reports);
	tcase_add_test(sv_tcase(s, "stall_cost"), test_stall_cost);
	tcase_add_test(sv_tcase(s, "stall_price"), test_stall_price);
	tcase_add_test(sv_tcase(s, "session_bound"), test_session_bound);
	tcase_add_test(sv_tcase(s, "cuda_line"), test_cuda_line);
	return s;
}

int main(void)
{
	return dt_check_main(&D, metrics_suite);
}
