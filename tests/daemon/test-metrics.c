/* SPDX-License-Identifier: MIT */
/*
 * test-metrics.c - batchd's metrics: Prometheus metrics text that parses
 * by the exposition rules and adds up to exactly the traffic the test made
 * (batches, bytes, histograms, per-session series that go with their
 * session); the HTTP /metrics listener; the bound on sessions listed one
 * by one; reports bigger than a socket buffer for a client slow to read
 * them; the CUDA probe's reason logged as it is.
 *
 * One of the service suites (service-testlib.h): a real batchd started with
 * `-c FILE`, real clients through libbatchclient, the reports read back.
 * batchctl's views of them and the price of waiting are a suite of their
 * own, test-metrics-batchctl.c.
 *
 * BATCHD and BATCHD_PACK name the binaries (meson sets them).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
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

/* ---- 1. metrics parsed back and checked against known traffic ---------------------------- */

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
	/* Bucket bounds a person reads: plain decimals, no exponents, no 1.04858. */
	expect(strstr(text, "batchd_client_wait_seconds_bucket{le=\"0.000001\"}") &&
	       strstr(text, "batchd_client_wait_seconds_bucket{le=\"0.004\"}") &&
	       strstr(text, "batchd_client_wait_seconds_bucket{le=\"0.256\"}") &&
	       strstr(text, "batchd_client_wait_seconds_bucket{le=\"4\"}") &&
	       !strstr(text, "e-0") && !strstr(text, "le=\"1.04858\""),
	       "histogram bounds are not 0.000001 .. 0.004 .. 4");
	free(text);
	bc_disconnect(c);
	dt_ref_close(&ref);
}
END_TEST

/* ---- 2. the HTTP /metrics listener ------------------------------------------------------------ */

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

/* ---- 3. many sessions, and reports larger than a socket buffer ---------------------------------- */

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
		bool listed = !isnan(sv_prom_session(&p, "batchd_session_memory_bytes", ids[i]));

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

/* ---- 4. the CUDA probe's reason in the log ------------------------------------------------------- */

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
	tcase_add_test(sv_tcase(s, "large_reports"), test_large_reports);
	tcase_add_test(sv_tcase(s, "session_bound"), test_session_bound);
	tcase_add_test(sv_tcase(s, "cuda_line"), test_cuda_line);
	return s;
}

int main(void)
{
	return dt_check_main(&D, metrics_suite);
}
