/* SPDX-License-Identifier: MIT */
/*
 * test-hostile-clients.c - local clients that attack the control plane
 * rather than use it, against a real batchd started with `-c FILE` on a
 * temporary socket: a connection that sends requests and never reads its
 * replies ([limits] client_queue), one user's requests over its rate on
 * several connections ([limits] requests_per_uid: they wait, and are all
 * answered), connections that never say HELLO
 * ([limits] handshake_timeout), one user taking every connection
 * ([limits] connections_per_uid, max_connections), a daemon out of file
 * descriptors (it must neither spin nor flood its log, and must serve
 * again once descriptors are back), and users reading each other's
 * sessions in status and metrics ([access] admin_uid / admin_gid, the
 * HTTP endpoint's [metrics] sessions).
 *
 * Each case checks outcomes: the errno and message a refused client
 * reads, the daemon's counters, its log, its memory high-water mark and
 * its CPU time as a share of the time that passed (a ratio, never a
 * speed). The cross-user view needs root (to run clients as other
 * users): the `visibility` argument runs that case alone and exits 77
 * when not root. BATCHD and BATCHD_PACK name the binaries (meson sets
 * them).
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>

#include "daemon-testlib.h"

static dt_daemon D;
static char CONF[256];           /* D.dir/batchd.conf, the daemon's -c FILE */

#define expect dt_expect

/* ---- helpers ------------------------------------------------------------------------ */

__attribute__((format(printf, 1, 2)))
static void conf_write(const char *fmt, ...)
{
	char tmp[300], body[2048];
	va_list ap;
	FILE *f;

	va_start(ap, fmt);
	vsnprintf(body, sizeof(body), fmt, ap);
	va_end(ap);
	snprintf(tmp, sizeof(tmp), "%s.tmp", CONF);
	f = fopen(tmp, "w");
	ck_assert_msg(f != NULL, "create %s: %s", tmp, strerror(errno));
	fprintf(f, "[daemon]\nsocket = %s\nlog_level = info\n[datasets]\nroot = %s\n%s", D.sock,
		D.root, body);
	ck_assert_msg(fclose(f) == 0 && rename(tmp, CONF) == 0, "write %s", CONF);
}

static void setup(void)
{
	dt_setup_dir();
	snprintf(CONF, sizeof(CONF), "%s/batchd.conf", D.dir);
	D.config = CONF;
}

static void start_ok(void)
{
	expect(dt_daemon_start(&D) == 0, "batchd -c %s did not start", CONF);
}

/* The metrics text on a fresh connection. Caller frees. */
static char *metrics_text(void)
{
	bc_client *c = dt_connect_ok();
	char *text = NULL;
	int r = bc_metrics(c, &text);

	expect(r == 0 && text, "bc_metrics: %s: %s", bc_strerror(r), bc_client_error(c));
	bc_disconnect(c);
	return text;
}

/* The value of the sample line "series VALUE" (series with its labels) in text; -1 if none. */
static double sample_in(const char *text, const char *series)
{
	size_t n = strlen(series);

	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (!strncmp(p, series, n) && p[n] == ' ')
			return strtod(p + n + 1, NULL);
	return -1;
}

static double metric(const char *series)
{
	char *text = metrics_text();
	double v = sample_in(text, series);

	free(text);
	return v;
}

/* Lines of the daemon's log that contain needle. */
static size_t log_lines(const char *needle)
{
	FILE *f = fopen(D.log, "r");
	char line[4096];
	size_t n = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		n += strstr(line, needle) != NULL;
	fclose(f);
	return n;
}

/* A field of /proc/PID/status in KiB ("VmRSS", "VmHWM"). */
static uint64_t proc_kib(pid_t pid, const char *field)
{
	char path[64], line[256];
	uint64_t v = 0;
	size_t n = strlen(field);
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	ck_assert_msg(f != NULL, "open %s: %s", path, strerror(errno));
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, field, n) && line[n] == ':')
			v = strtoull(line + n + 1, NULL, 10);
	fclose(f);
	return v;
}

/* User plus system CPU time of pid, in clock ticks. */
static uint64_t proc_cpu_ticks(pid_t pid)
{
	char path[64], buf[2048], *p;
	unsigned long long ut = 0, st = 0;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	ck_assert(n > 0);
	buf[n] = '\0';
	/* After "(comm)": state is field 3, utime and stime are fields 14 and 15. */
	p = strrchr(buf, ')');
	ck_assert(p != NULL);
	ck_assert_int_eq(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
				&ut, &st), 2);
	return ut + st;
}

static double monotonic_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Descriptors pid has open. */
static unsigned proc_fds(pid_t pid)
{
	char path[64];
	unsigned n = 0;
	struct dirent *de;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	ck_assert_msg(d != NULL, "opendir %s: %s", path, strerror(errno));
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n;
}

/* A raw connection past HELLO; fails the test otherwise. */
static int raw_hello_ok(void)
{
	int fd = dt_raw_connect(D.sock), r;

	expect(fd >= 0, "connect: %s", strerror(-fd));
	r = dt_raw_hello(fd, NULL);
	expect(r == 0, "HELLO: %s (%d)", strerror(r < 0 ? -r : EPROTO), r);
	return fd;
}

/*
 * A fresh connection's first message must be ERROR code, its message
 * holding every one of the NULL-terminated needles, and then the close.
 */
static void expect_refused(int code, ...)
{
	uint8_t buf[BP_MSG_MAX];
	bp_msg_error e;
	const char *needle;
	va_list ap;
	int fd = dt_raw_connect(D.sock), n;

	expect(fd >= 0, "connect: %s", strerror(-fd));
	n = dt_raw_recv(fd, buf, sizeof(buf), NULL, 0, NULL, 10000);
	expect(n > 0 && bp_msg_error_decode(buf, (size_t)n, &e) == 0,
	       "a refused connection got %d bytes, not an ERROR", n);
	expect(e.code == code, "refused with %d \"%.*s\", expected %d", e.code, (int)e.message_len,
	       e.message, code);
	va_start(ap, code);
	while ((needle = va_arg(ap, const char *)))
		expect(memmem(e.message, e.message_len, needle, strlen(needle)),
		       "the refusal \"%.*s\" does not say \"%s\"", (int)e.message_len, e.message, needle);
	va_end(ap);
	n = dt_raw_recv(fd, buf, sizeof(buf), NULL, 0, NULL, 10000);
	expect(n == 0, "the daemon kept a refused connection open (%d)", n);
	close(fd);
}

/* A status request on fd answered in full (all its parts). @return 0 or -1. */
static int raw_status(int fd)
{
	uint8_t buf[BP_MSG_MAX];
	bp_msg_text t;
	int n = bp_msg_status_encode(buf, sizeof(buf));

	if (n <= 0 || send(fd, buf, (size_t)n, MSG_NOSIGNAL) != n)
		return -1;
	do {
		n = dt_raw_recv(fd, buf, sizeof(buf), NULL, 0, NULL, WAIT_MS);
		if (n <= 0 || bp_msg_text_decode(BP_MSG_STATUS_REPLY, buf, (size_t)n, &t) < 0)
			return -1;
	} while (t.code == BP_TEXT_MORE);
	return 0;
}

/* ---- 1. replies left unread ----------------------------------------------------------- */

#define FLOODERS 16

/*
 * Send STATUS requests on every connection, reading nothing, until the
 * daemon has cut each one off. @return how many it cut.
 */
static unsigned flood_until_cut(const int *fd, unsigned n)
{
	bool cut[FLOODERS] = { false };
	uint8_t req[64];
	int len = bp_msg_status_encode(req, sizeof(req));
	unsigned ncut = 0;

	ck_assert_int_gt(len, 0);
	for (int round = 0; round < 200000 && ncut < n; round++) {
		bool sent = false;

		for (unsigned i = 0; i < n; i++) {
			for (int k = 0; k < 64 && !cut[i]; k++) {
				ssize_t r = send(fd[i], req, (size_t)len, MSG_DONTWAIT | MSG_NOSIGNAL);

				if (r == len) {
					sent = true;
					continue;
				}
				if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
					break;
				cut[i] = true;
				ncut++;
			}
		}
		if (!sent)
			dt_sleep_ms(1);
	}
	return ncut;
}

START_TEST(test_queue_bound)
{
	char needle[128];
	int fd[FLOODERS];
	uint64_t base_kib, peak_kib;
	unsigned ncut;
	bc_client *c;
	char *json;

	/* The default client_queue (1M): what a normal daemon does (no request rate: the bound alone). */
	conf_write("[limits]\nhandshake_timeout = 0\nrequests_per_uid = 0\n");
	start_ok();
	base_kib = proc_kib(D.pid, "VmRSS");
	for (int i = 0; i < FLOODERS; i++)
		fd[i] = raw_hello_ok();
	ncut = flood_until_cut(fd, FLOODERS);
	expect(ncut == FLOODERS, "the daemon cut off %u of %d clients that never read", ncut,
	       FLOODERS);
	peak_kib = proc_kib(D.pid, "VmHWM");

	/* Everyone else is still served. */
	c = dt_connect_ok();
	expect(bc_status(c, &json) == 0, "bc_status after the flood: %s", bc_client_error(c));
	free(json);
	bc_disconnect(c);
	for (int i = 0; i < FLOODERS; i++)
		close(fd[i]);

	expect(metric("batchd_clients_dropped_total{reason=\"queue\"}") == FLOODERS,
	       "batchd_clients_dropped_total{reason=\"queue\"} is not %d", FLOODERS);
	snprintf(needle, sizeof(needle), "client pid %d uid %u: disconnected: not reading its replies",
		 (int)getpid(), (unsigned)getuid());
	expect(log_lines(needle) == FLOODERS, "%zu log lines say \"%s\", expected %d",
	       log_lines(needle), needle, FLOODERS);
	expect(log_lines("over [limits] client_queue = 1048576") == FLOODERS,
	       "the log lines do not name the limit");
	/* Once the clients are gone their queues are too. */
	expect(metric("batchd_client_queue_bytes") == 0, "queued bytes remain after the flood");
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	/* The sanitizers' quarantine and shadow memory: RSS says nothing here. */
	(void)base_kib, (void)peak_kib;
#else
	/* Each costs at most the limit and a reply: well under 16 MiB each (what they took before). */
	expect(peak_kib < base_kib + 64 * 1024, "batchd's peak RSS %" PRIu64 " KiB, %" PRIu64
	       " KiB before %d clients flooded it with requests", peak_kib, base_kib, FLOODERS);
#endif
}
END_TEST

/* ---- 1b. one user's requests, however many connections carry them ----------------------- */

#define RATE_CONNS 4
#define RATE_EACH  60

START_TEST(test_request_rate)
{
	int fd[RATE_CONNS];
	uint64_t throttled;

	/* 100 a second, as many at once: 4 connections of 1 + 60 requests are over it together. */
	conf_write("[limits]\nhandshake_timeout = 0\nrequests_per_uid = 100\n");
	start_ok();
	for (int i = 0; i < RATE_CONNS; i++)
		fd[i] = raw_hello_ok();
	/* Every request is answered, in order, on every connection: they wait, none is refused. */
	for (int k = 0; k < RATE_EACH; k++)
		for (int i = 0; i < RATE_CONNS; i++)
			expect(raw_status(fd[i]) == 0, "status %d on connection %d was not answered",
			       k, i);
	for (int i = 0; i < RATE_CONNS; i++)
		close(fd[i]);
	throttled = (uint64_t)metric("batchd_requests_throttled_total");
	/*
	 * At least one; at most every request over the 100 the bucket held
	 * (these, and metric()'s HELLO and METRICS).
	 */
	expect(throttled >= 1 && throttled <= RATE_CONNS * (RATE_EACH + 1) + 2 - 100,
	       "batchd_requests_throttled_total is %" PRIu64 " after %d requests of one user at "
	       "requests_per_uid = 100", throttled, RATE_CONNS * (RATE_EACH + 1));
	expect(dt_status_u64("connections.requests_per_uid") == 100,
	       "status does not show requests_per_uid = 100");
	/* The same count in status (the status request itself may have waited too). */
	expect(dt_status_u64("connections.throttled") >= throttled,
	       "status counts fewer waits than batchd_requests_throttled_total (%" PRIu64 ")",
	       throttled);
}
END_TEST

/* ---- 2. connections that never speak ---------------------------------------------------- */

START_TEST(test_handshake_timeout)
{
	enum { SILENT = 5 };
	int fd[SILENT], talker, code, r;
	char *text;

	conf_write("[limits]\nhandshake_timeout = 1\n");
	start_ok();
	for (int i = 0; i < SILENT; i++) {
		fd[i] = dt_raw_connect(D.sock);
		expect(fd[i] >= 0, "connect: %s", strerror(-fd[i]));
	}
	talker = raw_hello_ok();
	for (int i = 0; i < SILENT; i++) {
		r = dt_raw_expect_close(fd[i], &code, 30000);
		expect(r == 0, "a connection silent for 30 s is still open (handshake_timeout = 1)");
		expect(code == -ETIMEDOUT, "the silent connection got ERROR %d, expected -ETIMEDOUT",
		       code);
		close(fd[i]);
	}
	/* A connection past HELLO is not subject to the deadline. */
	expect(raw_status(talker) == 0, "the connection that said HELLO was not served");
	text = metrics_text();
	expect(sample_in(text, "batchd_clients_dropped_total{reason=\"handshake\"}") == SILENT,
	       "batchd_clients_dropped_total{reason=\"handshake\"} is not %d", SILENT);
	free(text);
	expect(log_lines("([limits] handshake_timeout;") >= 1, "the log does not say why");
	/* One line per 10 s, however many connections it closed. */
	expect(log_lines("([limits] handshake_timeout;") <= 2, "%zu log lines for %d silent "
	       "connections", log_lines("([limits] handshake_timeout;"), SILENT);

	/* The deadline follows a reload: 0 turns it off. */
	conf_write("[limits]\nhandshake_timeout = 0\n");
	kill(D.pid, SIGHUP);
	for (int i = 0; i < TRIES && metric("batchd_reloads_total") != 1; i++)
		dt_sleep_ms(10);
	fd[0] = dt_raw_connect(D.sock);
	expect(fd[0] >= 0, "connect: %s", strerror(-fd[0]));
	r = dt_raw_expect_close(fd[0], &code, 2500);
	expect(r == -ETIMEDOUT, "with handshake_timeout = 0 a silent connection was closed (%d)",
	       code);
	close(fd[0]);
	expect(raw_status(talker) == 0, "the talker was not served after the reload");
	close(talker);
}
END_TEST

/* ---- 3. one user holding every connection ------------------------------------------------ */

START_TEST(test_connections_per_uid)
{
	enum { CAP = 4 };
	int fd[CAP], r, refused = 2;
	char uid[32];
	bc_client *c = NULL;

	conf_write("[limits]\nconnections_per_uid = %d\n", CAP);
	start_ok();
	for (int i = 0; i < CAP; i++)
		fd[i] = raw_hello_ok();
	snprintf(uid, sizeof(uid), "uid %u ", (unsigned)getuid());
	expect_refused(-EUSERS, uid, "4 connections", "[limits] connections_per_uid", NULL);
	r = bc_connect(D.sock, &c);
	expect(r == -EUSERS, "bc_connect over the cap: %s (%d), expected -EUSERS", bc_strerror(r), r);

	/* Closing one lets one more in (refused until the daemon has seen it go). */
	close(fd[0]);
	for (int i = 0; i < TRIES && (r = bc_connect(D.sock, &c)) != 0; i++) {
		expect(r == -EUSERS, "bc_connect after a close: %s (%d)", bc_strerror(r), r);
		refused++;
		dt_sleep_ms(10);
	}
	expect(r == 0, "no connection after one of %d was closed: %s", CAP, bc_strerror(r));
	bc_disconnect(c);
	for (int i = 1; i < CAP; i++)
		close(fd[i]);
	for (int i = 0; i < TRIES && metric("batchd_clients") != 1; i++)
		dt_sleep_ms(10);
	expect(metric("batchd_connections_refused_total{reason=\"per_uid\"}") == refused,
	       "batchd_connections_refused_total{reason=\"per_uid\"} is not %d", refused);
	expect(log_lines("connection refused: uid") >= 1, "the log does not name the refusal");
}
END_TEST

/*
 * Silent connections up to max_connections lock everyone out only until
 * the handshake deadline closes them.
 */
START_TEST(test_max_connections)
{
	enum { MAX = 6 };
	int fd[MAX], code, r;
	bc_client *c = NULL;

	conf_write("[limits]\nmax_connections = %d\nhandshake_timeout = 1\n", MAX);
	start_ok();
	for (int i = 0; i < MAX; i++) {
		fd[i] = dt_raw_connect(D.sock);
		expect(fd[i] >= 0, "connect: %s", strerror(-fd[i]));
	}
	/* Accepted in the order they came: the next one is over the limit. */
	expect_refused(-EMFILE, "[limits] max_connections", NULL);
	for (int i = 0; i < MAX; i++) {
		r = dt_raw_expect_close(fd[i], &code, 30000);
		expect(r == 0 && code == -ETIMEDOUT, "silent connection %d: %d, ERROR %d", i, r, code);
		close(fd[i]);
	}
	for (int i = 0; i < TRIES && (r = bc_connect(D.sock, &c)) != 0; i++)
		dt_sleep_ms(10);
	expect(r == 0, "still locked out after the silent connections were closed: %s",
	       bc_strerror(r));
	bc_disconnect(c);
	expect(metric("batchd_connections_refused_total{reason=\"max_connections\"}") >= 1,
	       "the refusal is not counted");
}
END_TEST

/* ---- 4. out of file descriptors --------------------------------------------------------- */

START_TEST(test_out_of_fds)
{
	enum { MOST = 400, PENDING = 4 };
	int held[MOST], pending[PENDING], nheld = 0, r;
	struct rlimit rl;
	uint64_t t0, t1;
	double w0, w1, tick = (double)sysconf(_SC_CLK_TCK), share;
	bc_client *c = NULL;
	char *json;

	conf_write("[limits]\nconnections_per_uid = 0\nmax_connections = 65536\n");
	start_ok();
	/* A few descriptors above what the idle daemon holds. */
	ck_assert_int_eq(prlimit(D.pid, RLIMIT_NOFILE, NULL, &rl), 0);
	rl.rlim_cur = proc_fds(D.pid) + 12;
	ck_assert_msg(prlimit(D.pid, RLIMIT_NOFILE, &rl, NULL) == 0, "prlimit: %s", strerror(errno));

	/* Fill them with connections until the daemon can take no more. */
	while (nheld < MOST) {
		int fd = dt_raw_connect(D.sock);

		expect(fd >= 0, "connect: %s", strerror(-fd));
		if (dt_raw_hello(fd, NULL) < 0) {
			close(fd);
			break;
		}
		held[nheld++] = fd;
	}
	expect(nheld > 0 && nheld < MOST, "%d connections with a limit of %llu descriptors", nheld,
	       (unsigned long long)rl.rlim_cur);
	/* Connections waiting to be accepted keep the listening socket readable. */
	for (int i = 0; i < PENDING; i++)
		pending[i] = dt_raw_connect(D.sock);
	dt_sleep_ms(300);

	t0 = proc_cpu_ticks(D.pid);
	w0 = monotonic_s();
	dt_sleep_ms(1500);
	t1 = proc_cpu_ticks(D.pid);
	w1 = monotonic_s();
	share = (double)(t1 - t0) / tick / (w1 - w0);
	expect(share < 0.3, "batchd used %.0f%% of a CPU while out of descriptors", share * 100);
	expect(log_lines("accept:") <= 3, "%zu log lines about accept while out of descriptors",
	       log_lines("accept:"));
	expect(log_lines("accept:") >= 1, "nothing logged about running out of descriptors");

	/* Descriptors back: new clients are served again. */
	for (int i = 0; i < PENDING; i++)
		if (pending[i] >= 0)
			close(pending[i]);
	for (int i = 0; i < nheld; i++)
		close(held[i]);
	for (int i = 0; i < TRIES && (r = bc_connect(D.sock, &c)) != 0; i++)
		dt_sleep_ms(10);
	expect(r == 0, "no connection once descriptors were free again: %s", bc_strerror(r));
	expect(bc_status(c, &json) == 0, "bc_status: %s", bc_client_error(c));
	free(json);
	bc_disconnect(c);
	expect(metric("batchd_connections_refused_total{reason=\"fds\"}") >= 1,
	       "connections closed for want of descriptors are not counted");
}
END_TEST

/* ---- 5. who sees whose sessions ------------------------------------------------------- */

#define OTHER_UID 12347u
#define ADMIN_GID 4243u

/* Sessions listed in a status JSON, and the per-session metric lines in a metrics text. */
static size_t series_lines(const char *text, const char *name)
{
	size_t n = 0, len = strlen(name);

	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		n += !strncmp(p, name, len) && p[len] == '{';
	return n;
}

/*
 * In a child running as OTHER_UID (with group, when not 0, as a
 * supplementary group): open a session, then count the sessions the
 * status lists and the per-session series of the metrics. @return the
 * child's exit status: 0, or 10 + what it saw wrong.
 */
static int other_user_view(gid_t group, size_t want_listed)
{
	pid_t child;
	int st;

	fflush(NULL);
	child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0) {
		gid_t groups[1] = { group };
		bc_client *c = NULL;
		bc_stream *s = NULL;
		bc_stream_opts o;
		char *json = NULL, *text = NULL;
		uint64_t open = 0;

		if (setgroups(group ? 1 : 0, groups) < 0 || setgid(OTHER_UID) < 0 ||
		    setuid(OTHER_UID) < 0)
			_exit(2);
		dt_opts(&o, DSET_BLK, 5, BC_SHUFFLE_NONE, 0);
		if (bc_connect(D.sock, &c) < 0 || bc_open(c, &o, &s) < 0)
			_exit(3);
		if (bc_status(c, &json) < 0 || bc_metrics(c, &text) < 0)
			_exit(4);
		if (dt_json_sessions(json) != want_listed)
			_exit(10 + (int)dt_json_sessions(json));
		if (!dt_json_u64(json, "\"all_sessions\"", "open", &open) || open != 2)
			_exit(20);
		if (series_lines(text, "batchd_session_memory_bytes") != want_listed)
			_exit(30 + (int)series_lines(text, "batchd_session_memory_bytes"));
		if (sample_in(text, "batchd_sessions") != 2)
			_exit(40);
		free(json);
		free(text);
		bc_close(s);
		bc_disconnect(c);
		_exit(0);
	}
	ck_assert_int_eq(waitpid(child, &st, 0), child);
	/* Its session ends with it: the next view must not count it. */
	expect(dt_wait_sessions(D.sock, 1, TRIES), "the other user's session outlived it");
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

START_TEST(test_visibility)
{
	bc_stream_opts o;
	bc_stream *s;
	bc_client *c;
	char *json, *text;
	int st;

	/* Other users must reach the socket (the temporary directories are 0700). */
	ck_assert_int_eq(chmod(dt_g.dir, 0711), 0);
	ck_assert_int_eq(chmod(D.dir, 0711), 0);
	conf_write("[daemon]\nsocket_mode = 0666\n");
	start_ok();
	c = dt_connect_ok();
	dt_opts(&o, DSET_ONE, 10, BC_SHUFFLE_NONE, 0);
	s = dt_open_ok(c, &o);

	/* Another user sees its own session only, and the totals of both. */
	st = other_user_view(0, 1);
	expect(st == 0, "the other user's view: exit %d (10 + sessions listed, 20: all_sessions.open, "
	       "30 + session series, 40: batchd_sessions)", st);
	/* Root sees both. */
	expect(bc_status(c, &json) == 0 && bc_metrics(c, &text) == 0, "reports: %s",
	       bc_client_error(c));
	free(json);
	free(text);

	/* admin_uid and admin_gid (by a supplementary group) see everyone's. */
	conf_write("[daemon]\nsocket_mode = 0666\n[access]\nadmin_uid = %u\n", OTHER_UID);
	kill(D.pid, SIGHUP);
	for (int i = 0; i < TRIES && metric("batchd_reloads_total") != 1; i++)
		dt_sleep_ms(10);
	st = other_user_view(0, 2);
	expect(st == 0, "an admin_uid's view: exit %d", st);
	conf_write("[daemon]\nsocket_mode = 0666\n[access]\nadmin_gid = %u\n", ADMIN_GID);
	kill(D.pid, SIGHUP);
	for (int i = 0; i < TRIES && metric("batchd_reloads_total") != 2; i++)
		dt_sleep_ms(10);
	st = other_user_view(ADMIN_GID, 2);
	expect(st == 0, "an admin_gid member's view: exit %d", st);
	st = other_user_view(0, 1);
	expect(st == 0, "outside admin_gid: exit %d", st);
	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
}
END_TEST

/* HTTP has no peer: totals only, unless [metrics] sessions = yes. */
START_TEST(test_http_sessions)
{
	int port = dt_free_port();
	bc_stream_opts o;
	bc_stream *s;
	bc_client *c;
	char *body;

	ck_assert_int_gt(port, 0);
	conf_write("[metrics]\nlisten = 127.0.0.1:%d\n", port);
	if (dt_daemon_start(&D) < 0) {
		expect(dt_log_contains(&D, "without libmicrohttpd"), "batchd did not start");
		fprintf(stderr, "test-hostile-clients: SKIP http_sessions: no libmicrohttpd\n");
		return;
	}
	c = dt_connect_ok();
	dt_opts(&o, DSET_ONE, 10, BC_SHUFFLE_NONE, 0);
	s = dt_open_ok(c, &o);
	expect(dt_http_request(port, "GET", "/metrics", &body) == 200 && body &&
	       strstr(body, "\nbatchd_sessions 1\n"), "GET /metrics: no total in %.300s",
	       body ? body : "(nothing)");
	expect(series_lines(body, "batchd_session_memory_bytes") == 0,
	       "HTTP /metrics has per-session series by default");
	free(body);

	conf_write("[metrics]\nlisten = 127.0.0.1:%d\nsessions = yes\n", port);
	kill(D.pid, SIGHUP);
	for (int i = 0; i < TRIES && metric("batchd_reloads_total") != 1; i++)
		dt_sleep_ms(10);
	expect(dt_http_request(port, "GET", "/metrics", &body) == 200 && body &&
	       series_lines(body, "batchd_session_memory_bytes") == 1,
	       "with [metrics] sessions = yes HTTP /metrics has no session series");
	free(body);
	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
}
END_TEST

/* ---- the suite ------------------------------------------------------------------------ */

static TCase *tcase(Suite *s, const char *name)
{
	TCase *tc = dt_tcase(s, name, setup);

	tcase_set_timeout(tc, 240);
	return tc;
}

static Suite *hostile_suite(void)
{
	Suite *s = suite_create("hostile-clients");

	tcase_add_test(tcase(s, "queue_bound"), test_queue_bound);
	tcase_add_test(tcase(s, "request_rate"), test_request_rate);
	tcase_add_test(tcase(s, "handshake_timeout"), test_handshake_timeout);
	tcase_add_test(tcase(s, "connections_per_uid"), test_connections_per_uid);
	tcase_add_test(tcase(s, "max_connections"), test_max_connections);
	tcase_add_test(tcase(s, "out_of_fds"), test_out_of_fds);
	tcase_add_test(tcase(s, "http_sessions"), test_http_sessions);
	return s;
}

static Suite *visibility_suite(void)
{
	Suite *s = suite_create("hostile-visibility");

	tcase_add_test(tcase(s, "visibility"), test_visibility);
	return s;
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "visibility")) {
		if (geteuid() != 0) {
			fprintf(stderr, "test-hostile-clients: SKIP visibility: needs root, to run "
				"clients as another user\n");
			return 77;
		}
		return dt_check_main(&D, visibility_suite);
	}
	return dt_check_main(&D, hostile_suite);
}
