/* SPDX-License-Identifier: MIT */
/*
 * test-metrics.c - batchd's reports: Prometheus metrics text that parses
 * by the exposition rules and adds up to exactly the traffic the test made
 * (batches, bytes, histograms, per-session series that go with their
 * session); the HTTP /metrics listener; batchctl's reporting commands
 * (sessions, stats, status, metrics, top; usage and unreachable-daemon
 * exits); names that need escaping, intact in JSON, labels and batchctl;
 * reports bigger than a socket buffer for a client slow to read them.
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

static dt_daemon D;
static char E[2048];             /* why dt_* failed */

/* Fail with the daemon's recent log (daemon-testlib.h). */
#define expect dt_expect

/* ---- 4. metrics parsed back and checked against known traffic ---------------------------- */

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
	expect(r == 0 && strstr(out, "PID") && strstr(out, pid) && strstr(out, DSET_ONE),
	       "batchctl sessions (exit %d) does not show our pid: %s", r, out);
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
	expect(r == 0 && strstr(out, "delivered") && strstr(out, "4 batches"),
	       "batchctl stats (exit %d): %s", r, out);
	free(out);

	r = batchctl(&out, (const char *[]){ "status", "--json", NULL });
	expect(r == 0, "batchctl status --json exited %d", r);
	j = parse_json_ok(out, json_type_object, "status --json");
	expect(dt_ju64(j, "pid") == (uint64_t)D.pid, "batchctl status --json: pid %" PRIu64 ", batchd is %d",
	       dt_ju64(j, "pid"), (int)D.pid);
	json_object_put(j);
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

	r = batchctl(&out, (const char *[]){ "top", "--count", "1", NULL });
	expect(r == 0 && strstr(out, "UID") && strstr(out, "DATASET") && strstr(out, pid) &&
	       strstr(out, DSET_ONE) && !strstr(out, "\033["),
	       "batchctl top --count 1 (exit %d, not a TTY: no escapes): %s", r, out);
	free(out);
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
	enum { PER_CONN = 50, LEVEL = 200 };
	char rel[BP_PATH_MAX], path[PATH_MAX], a[PATH_MAX], comp[LEVEL + 1];
	long wmem = 212992;
	size_t nsess, nconn, at = 0;
	bc_client **c;
	bc_stream **st;
	bc_stream_opts o;
	struct rlimit rl;
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
	nconn = (nsess + PER_CONN - 1) / PER_CONN;
	/* Four descriptors per stream here, six per session in batchd (which inherits the limit). */
	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_cur < 6 * nsess + 256) {
		rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > 6 * nsess + 256
			      ? 6 * nsess + 256 : rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
		getrlimit(RLIMIT_NOFILE, &rl);
		if (rl.rlim_cur < 6 * nsess + 256) {
			fprintf(stderr, "test-metrics: SKIP large_reports: RLIMIT_NOFILE %lu is under "
				"%zu\n", (unsigned long)rl.rlim_cur, 6 * nsess + 256);
			return;
		}
	}

	sv_conf_basic("info", NULL);
	sv_start_ok();
	c = calloc(nconn, sizeof(*c));
	st = calloc(nsess, sizeof(*st));
	ck_assert(c && st);
	dt_opts(&o, rel, 1, BC_SHUFFLE_NONE, 0);
	o.prefetch = 1;
	for (size_t i = 0; i < nsess; i++) {
		if (i % PER_CONN == 0)
			c[i / PER_CONN] = dt_connect_ok();
		st[i] = dt_open_ok(c[i / PER_CONN], &o);
	}

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

	for (size_t i = 0; i < nsess; i++)
		ck_assert_int_eq(bc_close(st[i]), 0);
	for (size_t i = 0; i < nconn; i++)
		bc_disconnect(c[i]);
	free(st);
	free(c);
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
	return s;
}

int main(void)
{
	return dt_check_main(&D, metrics_suite);
}
