/* SPDX-License-Identifier: MIT */
/*
 * test-service.c - batchd as a service: what an operator relies on once it
 * runs unattended. A real batchd started with `-c FILE` on a temporary
 * socket, real clients through libbatchclient, and the daemon's own
 * reports (status JSON, Prometheus metrics, batchctl) read back and
 * checked against traffic the test made itself.
 *
 * Each TCase is one behaviour: SIGHUP reloads keep sessions running and a
 * bad file changes nothing (nor does a budget lowered below what is held
 * let new sessions in); SIGTERM drains with clients connected (one of them
 * asleep in bc_next); per-uid session limits (also when the opens arrive
 * together) and memory limits; metrics text that parses and adds up to
 * what the client received; peer credentials in the session list;
 * [access] allow-lists (supplementary groups too, as root); socket mode
 * and group; the HTTP /metrics listener; batchctl's reporting commands;
 * names that need escaping; reports bigger than a socket buffer for a
 * client slow to read them. Delivered samples are
 * compared byte for byte with the packs (daemon-testlib.h's reference
 * reader), and every daemon is stopped with SIGTERM and must exit 0, so a
 * sanitizer build also fails on leaks at exit.
 *
 * BATCHD, BATCHD_PACK and BATCHCTL name the binaries (meson sets them).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
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
#include <json-c/json.h>

#include "daemon-testlib.h"
#include "json_path.h"

static dt_daemon D;
static char CONF[256];           /* D.dir/batchd.conf, the daemon's -c FILE */
static char E[2048];             /* why dt_* failed */

/* Fail with the daemon's recent log (daemon-testlib.h). */
#define expect dt_expect

/* ---- small helpers ------------------------------------------------------------- */

/*
 * As root, tests run peers as other users: let them reach the socket
 * (the temporary directories are 0700) and return true; else false.
 */
static bool can_switch_users(void)
{
	if (geteuid() != 0)
		return false;
	ck_assert_int_eq(chmod(dt_g.dir, 0711), 0);
	ck_assert_int_eq(chmod(D.dir, 0711), 0);
	return true;
}

/* In a forked child: become uid/gid with exactly these supplementary groups. */
static int drop_to(uid_t uid, gid_t gid, const gid_t *groups, size_t ngroups)
{
	if (setgroups(ngroups, groups) < 0 || setgid(gid) < 0 || setuid(uid) < 0)
		return -1;
	return getuid() == uid && getegid() == gid ? 0 : -1;
}

/* Write the daemon's configuration file (atomically: a reload never sees half of it). */
__attribute__((format(printf, 1, 2)))
static void conf_write(const char *fmt, ...)
{
	char tmp[300];
	va_list ap;
	FILE *f;
	int r;

	snprintf(tmp, sizeof(tmp), "%s.tmp", CONF);
	f = fopen(tmp, "w");
	ck_assert_msg(f != NULL, "create %s: %s", tmp, strerror(errno));
	va_start(ap, fmt);
	r = vfprintf(f, fmt, ap);
	va_end(ap);
	ck_assert_msg(r >= 0 && fclose(f) == 0, "write %s", tmp);
	ck_assert_msg(rename(tmp, CONF) == 0, "rename to %s: %s", CONF, strerror(errno));
}

static void start_ok(void)
{
	expect(dt_daemon_start(&D) == 0, "batchd -c %s did not start", CONF);
}

static void opts(bc_stream_opts *o, const char *dataset, uint32_t batch)
{
	bc_stream_opts_init(o);
	o->dataset = dataset;
	o->batch_size = batch;
	o->shuffle = BC_SHUFFLE_NONE;
}

/* bc_open that must fail with want: @return the daemon's message (in c). */
static const char *open_fails(bc_client *c, const bc_stream_opts *o, int want)
{
	bc_stream *s = NULL;
	int r = bc_open(c, o, &s);

	if (r == 0)
		bc_close(s);
	expect(r == want, "bc_open %s: %s (%d), expected %s (%d): \"%s\"", o->dataset,
	       bc_strerror(r), r, bc_strerror(want), want, r ? bc_client_error(c) : "");
	expect(bc_client_error(c)[0], "bc_open %s refused (%d) without a message", o->dataset, r);
	return bc_client_error(c);
}

/* Take n batches, each checked byte for byte against ref and released. */
static void consume_ok(bc_stream *s, dt_ref *ref, size_t n, const char *what)
{
	dt_run run = { 0 };

	dt_consume_ok(s, ref, n, 0, &run, what);
	expect(run.batches == n, "%s: %zu batches, expected %zu", what, run.batches, n);
	dt_run_free(&run);
}

/* ---- status JSON (json-c) ------------------------------------------------------------ */

static json_object *sessions_of(json_object *status)
{
	json_object *a = json_path_get(status, "sessions");

	expect(a && json_object_is_type(a, json_type_array), "status JSON: no sessions array");
	return a;
}

/* The session opened by process pid on dataset (NULL: any), or NULL. */
static json_object *session_by_pid(json_object *sessions, pid_t pid, const char *dataset)
{
	for (size_t i = 0; i < json_object_array_length(sessions); i++) {
		json_object *se = json_object_array_get_idx(sessions, i);
		json_object *p = json_path_get(se, "pid"), *d = json_path_get(se, "dataset");

		if (p && json_object_get_int64(p) == pid &&
		    (!dataset || (d && !strcmp(json_object_get_string(d), dataset))))
			return se;
	}
	return NULL;
}

/* ---- Prometheus text exposition, parsed back ---------------------------------------- */

typedef struct prom_sample {
	char name[128];
	char labels[10240];        /* as written, without the braces; "" for none */
	double value;
	size_t family;
} prom_sample;

typedef struct prom_family {
	char name[128];
	char type[16];            /* "" until # TYPE */
	bool help;
	size_t samples;
	bool closed;              /* another family's samples came after this one's */
} prom_family;

typedef struct prom {
	prom_sample *s;
	size_t n, cap;
	prom_family *f;
	size_t nf, fcap;
} prom;

static void prom_free(prom *p)
{
	free(p->s);
	free(p->f);
	memset(p, 0, sizeof(*p));
}

__attribute__((format(printf, 4, 5)))
static int prom_fail(char *err, size_t len, int line, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(err, len, "line %d: ", line);

	va_start(ap, fmt);
	vsnprintf(err + n, len - (size_t)n, fmt, ap);
	va_end(ap);
	return -1;
}

static bool name_start(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}

static bool name_char(char c)
{
	return name_start(c) || (c >= '0' && c <= '9');
}

/* A metric name at *p (advanced past it) into buf. @return its length, 0 if none. */
static size_t read_name(const char **p, char *buf, size_t len, bool label)
{
	const char *q = *p;
	size_t n;

	if (!name_start(*q) || (label && *q == ':'))
		return 0;
	while (name_char(*q) && !(label && *q == ':'))
		q++;
	n = (size_t)(q - *p);
	if (n >= len)
		return 0;
	memcpy(buf, *p, n);
	buf[n] = '\0';
	*p = q;
	return n;
}

static ssize_t family_find(const prom *p, const char *name)
{
	for (size_t i = 0; i < p->nf; i++)
		if (!strcmp(p->f[i].name, name))
			return (ssize_t)i;
	return -1;
}

static size_t family_get(prom *p, const char *name)
{
	ssize_t i = family_find(p, name);

	if (i >= 0)
		return (size_t)i;
	if (p->nf == p->fcap) {
		p->fcap = p->fcap ? 2 * p->fcap : 64;
		p->f = realloc(p->f, p->fcap * sizeof(*p->f));
		ck_assert(p->f != NULL);
	}
	memset(&p->f[p->nf], 0, sizeof(p->f[0]));
	snprintf(p->f[p->nf].name, sizeof(p->f[0].name), "%s", name);
	return p->nf++;
}

/* The family a sample name belongs to: itself, or a histogram's/summary's base name. */
static ssize_t sample_family(const prom *p, const char *name)
{
	static const char *const suffixes[] = { "_bucket", "_sum", "_count" };
	ssize_t i = family_find(p, name);

	if (i >= 0 && p->f[i].type[0])
		return i;
	for (size_t k = 0; k < ARRAY_SIZE(suffixes); k++) {
		size_t n = strlen(name), m = strlen(suffixes[k]);
		char base[128];

		if (n <= m || strcmp(name + n - m, suffixes[k]))
			continue;
		snprintf(base, sizeof(base), "%.*s", (int)(n - m), name);
		i = family_find(p, base);
		if (i >= 0 && (!strcmp(p->f[i].type, "histogram") ||
			       (!strcmp(p->f[i].type, "summary") && k > 0)))
			return i;
	}
	return -1;
}

/* Labels: name="value" pairs, comma separated, escapes \\ \" \n only. */
static int read_labels(const char **pp, char *buf, size_t len, char *err, size_t errlen, int line)
{
	const char *p = *pp, *start = p;
	char lname[128];
	size_t n;

	for (;;) {
		if (*p == '}')
			break;
		if (!read_name(&p, lname, sizeof(lname), true))
			return prom_fail(err, errlen, line, "bad label name at \"%.20s\"", p);
		if (*p++ != '=' || *p++ != '"')
			return prom_fail(err, errlen, line, "label %s: expected =\"", lname);
		while (*p && *p != '"' && *p != '\n') {
			if (*p == '\\') {
				p++;
				if (*p != '\\' && *p != '"' && *p != 'n')
					return prom_fail(err, errlen, line, "label %s: bad escape", lname);
			}
			p++;
		}
		if (*p++ != '"')
			return prom_fail(err, errlen, line, "label %s: unterminated value", lname);
		if (*p == ',')
			p++;
		else if (*p != '}')
			return prom_fail(err, errlen, line, "after label %s: expected , or }", lname);
	}
	n = (size_t)(p - start);
	if (n >= len)
		return prom_fail(err, errlen, line, "labels too long");
	memcpy(buf, start, n);
	buf[n] = '\0';
	*pp = p + 1;
	return 0;
}

/* One sample value: a Go-style float ("+Inf", "-Inf", "NaN" included). */
static int read_value(const char **pp, double *ret)
{
	const char *p = *pp;
	char *end;

	if (!strncmp(p, "+Inf", 4) || !strncmp(p, "-Inf", 4)) {
		*ret = p[0] == '+' ? INFINITY : -INFINITY;
		*pp = p + 4;
		return 0;
	}
	if (!strncmp(p, "NaN", 3)) {
		*ret = NAN;
		*pp = p + 3;
		return 0;
	}
	if (!*p || *p == ' ' || *p == '\n')
		return -1;
	errno = 0;
	*ret = strtod(p, &end);
	if (end == p || errno == ERANGE)
		return -1;
	*pp = end;
	return 0;
}

/*
 * Parse text, checking the exposition rules: every line a comment, a
 * # HELP / # TYPE, or "name{labels} value [timestamp]"; # TYPE before the
 * family's samples; a family's samples together; no series twice; every
 * family with both # HELP and # TYPE; the text ends with a newline.
 * @return 0, or -1 with why in err.
 */
static int prom_parse(const char *text, prom *p, char *err, size_t errlen)
{
	ssize_t current = -1;
	int line = 0;

	memset(p, 0, sizeof(*p));
	if (!*text || text[strlen(text) - 1] != '\n')
		return prom_fail(err, errlen, 0, "the text does not end with a newline");
	while (*text) {
		const char *nl = strchr(text, '\n'), *q = text;
		char name[128];
		prom_sample *s;
		ssize_t fam;

		line++;
		if (nl == text) {
			text++;
			continue;
		}
		if (*q == '#') {
			bool help = !strncmp(q, "# HELP ", 7), type = !strncmp(q, "# TYPE ", 7);
			size_t f;

			if (!help && !type) {
				text = nl + 1;
				continue;
			}
			q += 7;
			if (!read_name(&q, name, sizeof(name), false) || (*q != ' ' && q != nl))
				return prom_fail(err, errlen, line, "bad metric name in %.7s", text);
			f = family_get(p, name);
			if (p->f[f].samples)
				return prom_fail(err, errlen, line, "%s: metadata after its samples", name);
			if (help) {
				if (p->f[f].help)
					return prom_fail(err, errlen, line, "%s: second # HELP", name);
				if (*q != ' ' || q + 1 >= nl)
					return prom_fail(err, errlen, line, "%s: empty # HELP", name);
				p->f[f].help = true;
			} else {
				char type_name[16];
				size_t n = (size_t)(nl - q - 1);

				if (p->f[f].type[0])
					return prom_fail(err, errlen, line, "%s: second # TYPE", name);
				if (*q != ' ' || n == 0 || n >= sizeof(type_name))
					return prom_fail(err, errlen, line, "%s: bad # TYPE", name);
				memcpy(type_name, q + 1, n);
				type_name[n] = '\0';
				if (strcmp(type_name, "counter") && strcmp(type_name, "gauge") &&
				    strcmp(type_name, "histogram") && strcmp(type_name, "summary") &&
				    strcmp(type_name, "untyped"))
					return prom_fail(err, errlen, line, "%s: unknown type %s", name,
							 type_name);
				snprintf(p->f[f].type, sizeof(p->f[f].type), "%s", type_name);
			}
			text = nl + 1;
			continue;
		}

		if (p->n == p->cap) {
			p->cap = p->cap ? 2 * p->cap : 256;
			p->s = realloc(p->s, p->cap * sizeof(*p->s));
			ck_assert(p->s != NULL);
		}
		s = &p->s[p->n];
		memset(s, 0, sizeof(*s));
		if (!read_name(&q, s->name, sizeof(s->name), false))
			return prom_fail(err, errlen, line, "bad sample line \"%.60s\"", text);
		if (*q == '{') {
			q++;
			if (read_labels(&q, s->labels, sizeof(s->labels), err, errlen, line) < 0)
				return -1;
		}
		if (*q++ != ' ' || read_value(&q, &s->value) < 0)
			return prom_fail(err, errlen, line, "%s: bad value in \"%.60s\"", s->name, text);
		if (*q == ' ') {         /* an optional timestamp (integer ms) */
			q++;
			if (*q == '-')
				q++;
			if (*q < '0' || *q > '9')
				return prom_fail(err, errlen, line, "%s: bad timestamp", s->name);
			while (*q >= '0' && *q <= '9')
				q++;
		}
		if (q != nl)
			return prom_fail(err, errlen, line, "%s: junk after the value: \"%.*s\"", s->name,
					 (int)(nl - q), q);
		fam = sample_family(p, s->name);
		if (fam < 0)
			return prom_fail(err, errlen, line, "%s: sample without a # TYPE before it",
					 s->name);
		if (p->f[fam].closed)
			return prom_fail(err, errlen, line, "%s: family %s is split", s->name,
					 p->f[fam].name);
		if (current >= 0 && current != fam)
			p->f[current].closed = true;
		current = fam;
		s->family = (size_t)fam;
		p->f[fam].samples++;
		for (size_t i = 0; i < p->n; i++)
			if (!strcmp(p->s[i].name, s->name) && !strcmp(p->s[i].labels, s->labels))
				return prom_fail(err, errlen, line, "%s{%s}: series listed twice", s->name,
						 s->labels);
		p->n++;
		text = nl + 1;
	}
	for (size_t i = 0; i < p->nf; i++)
		if (!p->f[i].help || !p->f[i].type[0])
			return prom_fail(err, errlen, line, "family %s lacks # %s", p->f[i].name,
					 p->f[i].help ? "TYPE" : "HELP");
	return 0;
}

/*
 * The value of the series name whose labels contain every comma-separated
 * `k="v"` of match ("" or NULL: the series without labels). @return false
 * when no series (or more than one) matches.
 */
static bool prom_get(const prom *p, const char *name, const char *match, double *ret)
{
	size_t found = 0;

	for (size_t i = 0; i < p->n; i++) {
		bool ok;

		if (strcmp(p->s[i].name, name))
			continue;
		if (!match || !*match) {
			ok = !p->s[i].labels[0];
		} else {
			char m[256], *save = NULL;

			snprintf(m, sizeof(m), "%s", match);
			ok = true;
			for (char *kv = strtok_r(m, ",", &save); kv && ok; kv = strtok_r(NULL, ",", &save))
				ok = strstr(p->s[i].labels, kv) != NULL;
		}
		if (ok) {
			*ret = p->s[i].value;
			found++;
		}
	}
	return found == 1;
}

/* Samples of name (any labels). */
static size_t prom_count(const prom *p, const char *name)
{
	size_t n = 0;

	for (size_t i = 0; i < p->n; i++)
		n += !strcmp(p->s[i].name, name);
	return n;
}

/*
 * Check a histogram family (without labels other than le): buckets in
 * increasing le, cumulative counts, a last +Inf bucket equal to _count, a
 * _sum. @return _count, or -1 with why in err.
 */
static double prom_check_hist(const prom *p, const char *family, char *err, size_t errlen)
{
	char bucket[160], name[160];
	double last_le = -INFINITY, last = 0, count, sum;
	size_t n = 0;
	bool inf = false;

	snprintf(bucket, sizeof(bucket), "%s_bucket", family);
	for (size_t i = 0; i < p->n; i++) {
		const char *le;
		double v;

		if (strcmp(p->s[i].name, bucket))
			continue;
		le = strstr(p->s[i].labels, "le=\"");
		if (!le || inf) {
			snprintf(err, errlen, "%s: bucket {%.200s} %s", family, p->s[i].labels,
				 le ? "after +Inf" : "without le");
			return -1;
		}
		le += 4;
		if (!strncmp(le, "+Inf\"", 5)) {
			inf = true;
			v = INFINITY;
		} else {
			char *end;

			v = strtod(le, &end);
			if (end == le || *end != '"') {
				snprintf(err, errlen, "%s: bad le in {%.200s}", family, p->s[i].labels);
				return -1;
			}
		}
		if (!(v > last_le) || p->s[i].value < last || p->s[i].value != floor(p->s[i].value)) {
			snprintf(err, errlen, "%s: bucket le=%g count %g after le=%g count %g: not "
				 "increasing/cumulative", family, v, p->s[i].value, last_le, last);
			return -1;
		}
		last_le = v;
		last = p->s[i].value;
		n++;
	}
	snprintf(name, sizeof(name), "%s_count", family);
	if (!prom_get(p, name, NULL, &count)) {
		snprintf(err, errlen, "%s: no _count", family);
		return -1;
	}
	snprintf(name, sizeof(name), "%s_sum", family);
	if (!prom_get(p, name, NULL, &sum) || !(sum >= 0)) {
		snprintf(err, errlen, "%s: no _sum (or a negative one)", family);
		return -1;
	}
	if (n < 2 || !inf || last != count) {
		snprintf(err, errlen, "%s: %zu buckets, +Inf %s, last %g, _count %g", family, n,
			 inf ? "present" : "missing", last, count);
		return -1;
	}
	return count;
}

/* The metrics text through bc_metrics on a fresh connection. Caller frees. */
static char *metrics_text_ok(void)
{
	bc_client *c = dt_connect_ok();
	char *text = NULL;
	int r = bc_metrics(c, &text);

	expect(r == 0 && text, "bc_metrics: %s (%d): %s", bc_strerror(r), r, bc_client_error(c));
	bc_disconnect(c);
	return text;
}

/* Fetch and parse the metrics; the parse must succeed. */
static void metrics_ok(prom *p)
{
	char *text = metrics_text_ok();
	int r = prom_parse(text, p, E, sizeof(E));

	expect(r == 0, "metrics do not parse: %s\n%s", E, text);
	free(text);
}

/* One value from fresh metrics (NAN when the series is missing). */
static double metric(const char *name, const char *match)
{
	prom p;
	double v;

	metrics_ok(&p);
	if (!prom_get(&p, name, match, &v))
		v = NAN;
	prom_free(&p);
	return v;
}

/* Poll until metric name{match} == want (up to TRIES x 10 ms). @return the last value. */
static double metric_wait(const char *name, const char *match, double want)
{
	double v = NAN;

	for (int i = 0; i < TRIES; i++) {
		v = metric(name, match);
		if (v == want)
			break;
		dt_sleep_ms(10);
	}
	return v;
}

/* ---- fixtures -------------------------------------------------------------------- */

static void setup(void)
{
	dt_setup_dir();
	snprintf(CONF, sizeof(CONF), "%s/batchd.conf", D.dir);
	D.config = CONF;
}

/* The usual file: our socket, root/ as the only root, log level level. */
static void conf_basic(const char *level, const char *extra)
{
	conf_write("# test-service\n[daemon]\nsocket = %s\nlog_level = %s\n[datasets]\nroot = %s\n%s",
		   D.sock, level, D.root, extra ? extra : "");
}

/* SIGHUP, then wait until reloads + reload failures reach `applied` + `failed`. */
static void hup_and_wait(double applied, double failed)
{
	double a = NAN, f = NAN;

	expect(kill(D.pid, SIGHUP) == 0, "kill SIGHUP: %s", strerror(errno));
	for (int i = 0; i < TRIES; i++) {
		prom p;

		metrics_ok(&p);
		if (!prom_get(&p, "batchd_reloads_total", NULL, &a) ||
		    !prom_get(&p, "batchd_reload_failures_total", NULL, &f))
			a = f = NAN;
		prom_free(&p);
		if (a + f >= applied + failed)
			break;
		dt_sleep_ms(10);
	}
	expect(a == applied && f == failed, "after SIGHUP: batchd_reloads_total %g (want %g), "
	       "batchd_reload_failures_total %g (want %g)", a, applied, f, failed);
}

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
	conf_basic("notice", NULL);
	start_ok();
	dt_ref_ok(&ref_one, DSET_ONE);
	dt_ref_ok(&ref_blk, DSET_BLK);
	c = dt_connect_ok();
	opts(&o, DSET_ONE, 7);
	s1 = dt_open_ok(c, &o);
	consume_ok(s1, &ref_one, 5, "before any reload");
	expect(!dt_log_contains(&D, "opened " DSET_ONE), "an INFO line was logged at level notice");

	/* A bad file: an unknown key on line 7. Nothing of it may apply (root B, debug). */
	conf_write("# test-service: bad\n[daemon]\nsocket = %s\nlog_level = debug\n[datasets]\n"
		   "root = %s\nno_such_key = 1\n", D.sock, rootb);
	hup_and_wait(0, 1);
	snprintf(needle, sizeof(needle), "%s:7:", CONF);
	expect(dt_log_contains(&D, needle), "the refused reload's message does not name %s", needle);
	expect(dt_log_contains(&D, "no_such_key"), "the refused reload's message does not name the key");
	expect(dt_status_u64("reloads") == 0, "status counts a refused reload as applied");
	consume_ok(s1, &ref_one, 5, "after the refused reload");
	/* The old configuration stays: root A, not B; level notice. */
	opts(&o, "bonly.bpk", 7);
	open_fails(c, &o, -ENOENT);
	opts(&o, DSET_BLK, 9);
	s2 = dt_open_ok(c, &o);
	consume_ok(s2, &ref_blk, 3, "a new session on root A after the refused reload");
	ck_assert_int_eq(bc_close(s2), 0);
	expect(!dt_log_contains(&D, "opened " DSET_BLK),
	       "the refused reload changed the log level to debug anyway");

	/* A good file: root B only, log level debug. */
	conf_write("# test-service: good\n[daemon]\nsocket = %s\nlog_level = debug\n[datasets]\n"
		   "root = %s\n", D.sock, rootb);
	hup_and_wait(1, 1);
	expect(dt_log_contains(&D, "configuration reloaded"), "no \"configuration reloaded\" line");
	st = dt_status_json_ok();
	expect(dt_ju64(st, "reloads") == 1, "status: reloads %" PRIu64 ", expected 1", dt_ju64(st, "reloads"));
	json_object_put(st);

	opts(&o, "bonly.bpk", 9);
	s2 = dt_open_ok(c, &o);
	consume_ok(s2, &ref_blk, 4, "a session on root B after the reload");
	expect(dt_log_contains(&D, "opened bonly.bpk"), "log level debug did not take effect: no "
	       "INFO line for the new session");
	opts(&o, DSET_ONE, 7);
	open_fails(c, &o, -ENOENT);             /* relative: not under B */
	opts(&o, abs_one, 7);
	open_fails(c, &o, -EACCES);             /* absolute under A: outside the roots now */
	expect(strstr(bc_client_error(c), "outside"), "refusal of %s: \"%s\"", abs_one,
	       bc_client_error(c));

	/* The first session never noticed: it carries on exactly where it was. */
	consume_ok(s1, &ref_one, 20, "the first session after the good reload");
	ck_assert_int_eq(bc_close(s2), 0);
	for (int i = 0; i < TRIES && !dt_log_contains(&D, " ended"); i++)
		dt_sleep_ms(10);
	expect(dt_log_contains(&D, " ended"), "no DEBUG \"session ... ended\" line after the reload");

	expect(metric("batchd_reloads_total", NULL) == 1, "batchd_reloads_total is not 1");
	expect(metric("batchd_reload_failures_total", NULL) == 1,
	       "batchd_reload_failures_total is not 1");
	ck_assert_int_eq(bc_close(s1), 0);
	bc_disconnect(c);
	dt_ref_close(&ref_one);
	dt_ref_close(&ref_blk);
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

	conf_basic("info", "[memory]\nbudget = 256M\n");
	start_ok();
	dt_ref_ok(&ref, DSET_ONE);
	c = dt_connect_ok();
	opts(&o, DSET_ONE, 1000);
	o.prefetch = 8;
	while (n < 4)
		s[n++] = dt_open_ok(c, &o);
	used = dt_status_u64("memory.sessions");
	expect(used > (UINT64_C(16) << 20), "4 sessions hold only %" PRIu64 " bytes", used);

	conf_basic("info", "[memory]\nbudget = 16M\n");
	hup_and_wait(1, 0);
	expect(dt_status_u64("memory.budget") == (UINT64_C(16) << 20), "the budget did not change");
	consume_ok(s[0], &ref, 3, "a session that holds memory over the new budget");
	opts(&o, DSET_ONE, 10);
	msg = open_fails(c, &o, -ENOMEM);
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

	conf_basic("info", NULL);
	start_ok();
	dt_ref_ok(&ref_blk, DSET_BLK);
	dt_ref_ok(&ref_sh, DSET_SHARDS);

	/* The sleeper: 4 slots (prefetch 2 + 2), its own connection. */
	ct = dt_connect_ok();
	opts(&o, DSET_ONE, 5);
	o.prefetch = 2;
	sl.s = dt_open_ok(ct, &o);
	ck_assert_int_eq(pthread_create(&th, NULL, sleeper_run, &sl), 0);

	/* Two busy streams on a second connection, and a connection with none. */
	cm = dt_connect_ok();
	opts(&o, DSET_BLK, 16);
	s2 = dt_open_ok(cm, &o);
	opts(&o, DSET_SHARDS, 32);
	s3 = dt_open_ok(cm, &o);
	consume_ok(s2, &ref_blk, 3, "stream 2 before SIGTERM");
	consume_ok(s3, &ref_sh, 3, "stream 3 before SIGTERM");
	idle = dt_connect_ok();

	/* Wait until the sleeper has taken everything published and nothing more comes. */
	for (int i = 0; i < TRIES && stable < 20; i++) {
		json_object *st = dt_status_json_ok(), *se = session_by_pid(sessions_of(st), getpid(), DSET_ONE);
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

/* ---- 3. per-uid limits --------------------------------------------------------------- */

START_TEST(test_sessions_per_uid)
{
	bc_client *c1, *c2;
	bc_stream *s[3];
	bc_stream_opts o;
	dt_ref ref;
	const char *msg;
	char uid[32];
	int r = -1;

	conf_basic("info", "[limits]\nsessions_per_uid = 2\n");
	start_ok();
	dt_ref_ok(&ref, DSET_ONE);
	c1 = dt_connect_ok();
	c2 = dt_connect_ok();
	opts(&o, DSET_ONE, 10);
	s[0] = dt_open_ok(c1, &o);
	s[1] = dt_open_ok(c2, &o);   /* the limit is per user, not per connection */
	consume_ok(s[0], &ref, 2, "first session");

	msg = open_fails(c1, &o, -EUSERS);
	snprintf(uid, sizeof(uid), "uid %u", (unsigned)getuid());
	expect(strstr(msg, "sessions_per_uid") && strstr(msg, uid), "third session's refusal does not "
	       "name the limit and the user: \"%s\"", msg);
	msg = open_fails(c2, &o, -EUSERS);
	expect(strstr(msg, "sessions_per_uid"), "refusal on the second connection: \"%s\"", msg);
	expect(dt_status_u64("refused.limit") == 2, "status refused.limit is not 2");

	/* Closing one makes room (once it has ended, which is asynchronous). */
	ck_assert_int_eq(bc_close(s[1]), 0);
	for (int i = 0; i < TRIES; i++) {
		r = bc_open(c2, &o, &s[2]);
		if (r != -EUSERS)
			break;
		dt_sleep_ms(10);
	}
	expect(r == 0, "after closing a session, a new one: %s (%d): %s", bc_strerror(r), r,
	       bc_client_error(c2));
	consume_ok(s[2], &ref, 3, "the session opened after one closed");
	consume_ok(s[0], &ref, 3, "the first session, still running");
	msg = open_fails(c1, &o, -EUSERS);
	(void)msg;

	ck_assert_int_eq(bc_close(s[0]), 0);
	ck_assert_int_eq(bc_close(s[2]), 0);
	bc_disconnect(c1);
	bc_disconnect(c2);
	dt_ref_close(&ref);
}
END_TEST

/*
 * The limit holds when the opens arrive together: OPENs on several
 * connections sent before any answer (the daemon loads datasets off the
 * loop, so a check that ignores opens in progress lets them all through).
 */
START_TEST(test_sessions_per_uid_concurrent)
{
	enum { CONNS = 6 };
	int fd[CONNS], ok = 0, refused = 0;
	bp_msg_open m = { .batch_size = 10, .world = 1, .placement = BP_PLACEMENT_HOST,
			  .shuffle = BP_SHUFFLE_NONE, .path = DSET_SHARDS,
			  .path_len = (uint32_t)strlen(DSET_SHARDS) };
	uint8_t buf[BP_MSG_MAX];
	json_object *st;
	int n;

	conf_basic("info", "[limits]\nsessions_per_uid = 2\n");
	start_ok();
	for (int i = 0; i < CONNS; i++) {
		fd[i] = dt_raw_connect(D.sock);
		expect(fd[i] >= 0, "connect %d: %s", i, strerror(-fd[i]));
		expect(dt_raw_hello(fd[i], NULL) == 0, "HELLO on connection %d", i);
	}
	n = bp_msg_open_encode(&m, buf, sizeof(buf));
	ck_assert_int_gt(n, 0);
	for (int i = 0; i < CONNS; i++)
		expect(send(fd[i], buf, (size_t)n, MSG_NOSIGNAL) == n, "send OPEN %d", i);
	for (int i = 0; i < CONNS; i++) {
		int fds[BP_READY_FDS], got = 0, k;
		bp_msg_error e;
		bp_msg_ready ready;

		k = dt_raw_recv(fd[i], buf, sizeof(buf), fds, BP_READY_FDS, &got, WAIT_MS);
		expect(k > 0, "no answer to OPEN %d (%d)", i, k);
		for (int j = 0; j < got; j++)
			close(fds[j]);
		if (bp_msg_error_decode(buf, (size_t)k, &e) == 0) {
			expect(e.code == -EUSERS, "OPEN %d refused with %d: %.*s", i, e.code,
			       (int)e.message_len, e.message);
			refused++;
		} else {
			expect(bp_msg_ready_decode(buf, (size_t)k, &ready) == 0, "OPEN %d: neither "
			       "READY nor ERROR", i);
			ok++;
		}
	}
	st = dt_status_json_ok();
	expect(ok == 2 && refused == CONNS - 2 && json_object_array_length(sessions_of(st)) == 2,
	       "%d simultaneous OPENs by one uid with sessions_per_uid = 2: %d opened, %d refused, "
	       "%zu sessions in the status", CONNS, ok, refused,
	       json_object_array_length(sessions_of(st)));
	json_object_put(st);
	for (int i = 0; i < CONNS; i++)
		close(fd[i]);
}
END_TEST

START_TEST(test_memory_per_uid)
{
	bc_stream *s[64];
	bc_stream_opts o, big;
	bc_client *c;
	json_object *st, *se;
	const char *msg;
	uint64_t one, limit = UINT64_C(32) << 20;
	size_t n = 0, fit;
	dt_ref ref;

	/* A budget far above the per-user limit: only the per-user limit can refuse. */
	conf_basic("info", "[memory]\nbudget = 2G\n[limits]\nmemory_per_uid = 32M\n");
	start_ok();
	dt_ref_ok(&ref, DSET_ONE);
	c = dt_connect_ok();

	/* One session too big for a user (about 70 MiB), well within the budget. */
	opts(&big, DSET_ONE, 4096);
	big.prefetch = 8;
	msg = open_fails(c, &big, -ENOMEM);
	expect(strstr(msg, "memory limit per user") && strstr(msg, "memory_per_uid") &&
	       !strstr(msg, "memory budget"), "refusal of a 4096-sample session: \"%s\"", msg);

	/* Same-sized small sessions up to the limit, then one more is refused. */
	opts(&o, DSET_ONE, 256);
	o.prefetch = 8;
	s[n++] = dt_open_ok(c, &o);
	st = dt_status_json_ok();
	se = session_by_pid(sessions_of(st), getpid(), NULL);
	expect(se, "our session is not in the status");
	one = dt_ju64(se, "memory");
	json_object_put(st);
	expect(one > 0 && one <= limit / 2, "one session holds %" PRIu64 " bytes", one);
	fit = (size_t)(limit / one);
	expect(fit < ARRAY_SIZE(s), "%zu sessions of %" PRIu64 " bytes fit", fit, one);
	while (n < fit)
		s[n++] = dt_open_ok(c, &o);
	msg = open_fails(c, &o, -ENOMEM);
	expect(strstr(msg, "memory limit per user"), "session %zu (of %" PRIu64 " bytes, %zu held) "
	       "refused with: \"%s\"", n + 1, one, n, msg);
	expect(dt_status_u64("refused.memory") == 2, "status refused.memory is not 2");
	expect(dt_status_u64("memory.sessions") == one * n, "status memory.sessions is not %zu x %" PRIu64,
	       n, one);
	consume_ok(s[0], &ref, 2, "a session at the limit");

	/* Closing one gives its share back. */
	ck_assert_int_eq(bc_close(s[--n]), 0);
	{
		bc_stream *x = NULL;
		int r = -ENOMEM;

		for (int i = 0; i < TRIES && r == -ENOMEM; i++) {
			r = bc_open(c, &o, &x);
			if (r == -ENOMEM)
				dt_sleep_ms(10);
		}
		expect(r == 0, "after closing one, a session of the same size: %s (%d): %s",
		       bc_strerror(r), r, bc_client_error(c));
		s[n++] = x;
	}
	while (n)
		ck_assert_int_eq(bc_close(s[--n]), 0);
	bc_disconnect(c);
	dt_ref_close(&ref);
}
END_TEST

/* ---- 4. metrics parsed back and checked against known traffic ---------------------------- */

START_TEST(test_metrics_traffic)
{
	const size_t N = 23, M = 6;
	bc_stream_opts o;
	bc_stream *s;
	bc_client *c;
	bc_batch *b, *held = NULL;
	dt_ref ref;
	prom p;
	char match[64], *text;
	uint64_t bytes1 = 0, bytes2 = 0;
	double v, count;
	size_t taken;
	int r;

	conf_basic("info", NULL);
	start_ok();
	dt_ref_ok(&ref, DSET_ONE);

	/* Before any traffic: everything parses, the totals are 0. */
	metrics_ok(&p);
	expect(prom_get(&p, "batchd_batches_delivered_total", NULL, &v) && v == 0,
	       "batchd_batches_delivered_total before any traffic: %g", v);
	expect(prom_get(&p, "batchd_build_info", "version=\"", &v) && v == 1, "no batchd_build_info");
	count = prom_check_hist(&p, "batchd_client_wait_seconds", E, sizeof(E));
	expect(count == 0, "batchd_client_wait_seconds before traffic: %s", count < 0 ? E : "count not 0");
	prom_free(&p);

	/* Exactly N batches, every byte counted, all released; prefetch runs ahead of us. */
	c = dt_connect_ok();
	opts(&o, DSET_ONE, 10);
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
	v = metric_wait("batchd_session_batches_delivered_total", match, (double)N);
	expect(v == (double)N, "batchd_session_batches_delivered_total %g, expected %zu", v, N);
	/* The prefetched batches are published, but not delivered. */
	for (int i = 0; i < TRIES; i++) {
		v = metric("batchd_session_batches_published_total", match);
		if (v > (double)N)
			break;
		dt_sleep_ms(10);
	}
	expect(v > (double)N, "batchd_session_batches_published_total %g: no prefetch beyond %zu", v, N);
	metrics_ok(&p);
	expect(prom_get(&p, "batchd_session_batches_delivered_total", match, &v) && v == (double)N,
	       "delivered counts prefetched batches: %g, expected %zu", v, N);
	expect(prom_get(&p, "batchd_session_bytes_delivered_total", match, &v) && v == (double)bytes1,
	       "batchd_session_bytes_delivered_total %g, the client received %" PRIu64, v, bytes1);
	expect(prom_get(&p, "batchd_batches_delivered_total", NULL, &v) && v == (double)N,
	       "batchd_batches_delivered_total with the session open: %g, expected %zu", v, N);
	expect(prom_get(&p, "batchd_sessions", NULL, &v) && v == 1, "batchd_sessions %g", v);
	expect(prom_get(&p, "batchd_session_memory_bytes", match, &v) && v > 0,
	       "batchd_session_memory_bytes of our session: %g", v);
	prom_free(&p);
	ck_assert_int_eq(bc_close(s), 0);

	/* Closed and ended: the totals keep it. */
	v = metric_wait("batchd_sessions", NULL, 0);
	expect(v == 0, "batchd_sessions %g after close", v);
	metrics_ok(&p);
	expect(prom_get(&p, "batchd_batches_delivered_total", NULL, &v) && v == (double)N,
	       "batchd_batches_delivered_total %g, the client took and released %zu", v, N);
	expect(prom_get(&p, "batchd_bytes_delivered_total", NULL, &v) && v == (double)bytes1,
	       "batchd_bytes_delivered_total %g, the client received %" PRIu64 " bytes", v, bytes1);
	count = prom_check_hist(&p, "batchd_client_wait_seconds", E, sizeof(E));
	expect(count == (double)N, "batchd_client_wait_seconds: %s", count < 0 ? E : "count is not N");
	expect(prom_get(&p, "batchd_sessions_ended_total", NULL, &v) && v == 1,
	       "batchd_sessions_ended_total %g", v);
	expect(prom_count(&p, "batchd_session_batches_delivered_total") == 0,
	       "per-session series of an ended session remain");
	{
		static const char *const hists[] = { "batchd_read_latency_seconds", "batchd_decode_seconds" };

		for (size_t k = 0; k < ARRAY_SIZE(hists); k++) {
			count = prom_check_hist(&p, hists[k], E, sizeof(E));
			expect(count > 0, "%s: %s", hists[k], count < 0 ? E : "no observations after traffic");
		}
	}
	expect(prom_get(&p, "batchd_io_blocks_read_total", NULL, &v) && v > 0,
	       "batchd_io_blocks_read_total %g after traffic", v);
	prom_free(&p);

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
	v = metric_wait("batchd_batches_delivered_total", NULL, (double)(N + M));
	expect(v == (double)(N + M), "batchd_batches_delivered_total %g with %zu released and one held, "
	       "expected %zu", v, M, N + M);
	(void)held;
	ck_assert_int_eq(bc_close(s), 0);
	v = metric_wait("batchd_sessions", NULL, 0);
	metrics_ok(&p);
	expect(prom_get(&p, "batchd_batches_delivered_total", NULL, &v) && v == (double)(N + M),
	       "batchd_batches_delivered_total %g after closing with a batch held, expected %zu", v,
	       N + M);
	expect(prom_get(&p, "batchd_bytes_delivered_total", NULL, &v) && v == (double)(bytes1 + bytes2),
	       "batchd_bytes_delivered_total %g, expected %" PRIu64, v, bytes1 + bytes2);
	count = prom_check_hist(&p, "batchd_client_wait_seconds", E, sizeof(E));
	expect(count == (double)(N + M + 1), "batchd_client_wait_seconds_count: %s (%g), expected %zu "
	       "(every bc_next that returned a batch)", count < 0 ? E : "wrong", count, N + M + 1);
	expect(prom_get(&p, "batchd_sessions_ended_total", NULL, &v) && v == 2,
	       "batchd_sessions_ended_total %g", v);
	prom_free(&p);

	/* The status document agrees with the metrics. */
	{
		json_object *st = dt_status_json_ok();

		expect(dt_ju64(st, "ended.batches") == N + M && dt_ju64(st, "ended.bytes") == bytes1 + bytes2 &&
		       dt_ju64(st, "ended.sessions") == 2, "status ended: %s",
		       json_object_to_json_string(json_path_get(st, "ended")));
		json_object_put(st);
	}
	/* A raw look at the text: the last line ends with a newline, no blank lines. */
	text = metrics_text_ok();
	expect(!strstr(text, "\n\n"), "blank line in the metrics");
	free(text);
	bc_disconnect(c);
	dt_ref_close(&ref);
}
END_TEST

/* ---- 5. peer credentials in the session list --------------------------------------------- */

START_TEST(test_peer_credentials)
{
	int up[2], down[2], st;
	bc_stream_opts o;
	bc_stream *s;
	bc_client *c;
	json_object *status, *se;
	pid_t child;
	char ch, match[96];
	double v;

	/* As root, the second trainer runs as another user, so uids differ too. */
	bool other = can_switch_users();
	uid_t child_uid = other ? 12347 : getuid();

	conf_basic("info", other ? "[daemon]\nsocket_mode = 0666\n" : NULL);
	start_ok();
	c = dt_connect_ok();
	opts(&o, DSET_ONE, 10);
	s = dt_open_ok(c, &o);

	ck_assert_int_eq(pipe(up), 0);
	ck_assert_int_eq(pipe(down), 0);
	fflush(NULL);
	child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0) {
		/* A second trainer process: its own connection and stream. */
		bc_client *cc = NULL;
		bc_stream *cs = NULL;
		bc_stream_opts co;
		bc_batch *b;
		char go;

		close(up[0]);
		close(down[1]);
		if (other && drop_to(child_uid, child_uid, NULL, 0) < 0)
			_exit(4);
		bc_stream_opts_init(&co);
		co.dataset = DSET_BLK;
		co.batch_size = 5;
		if (bc_connect(D.sock, &cc) < 0 || bc_open(cc, &co, &cs) < 0 ||
		    bc_next(cs, &b, WAIT_MS) != 0)
			_exit(2);
		bc_release(b);
		if (write(up[1], "r", 1) != 1 || read(down[0], &go, 1) != 1)
			_exit(3);
		bc_close(cs);
		bc_disconnect(cc);
		_exit(0);
	}
	close(up[1]);
	close(down[0]);
	expect(read(up[0], &ch, 1) == 1, "the child did not open its stream");

	status = dt_status_json_ok();
	se = session_by_pid(sessions_of(status), getpid(), DSET_ONE);
	expect(se, "no session with our pid %d in %s", (int)getpid(), json_object_to_json_string(status));
	expect(dt_ju64(se, "uid") == getuid(), "our session's uid %" PRIu64 ", we are %u",
	       dt_ju64(se, "uid"), (unsigned)getuid());
	se = session_by_pid(sessions_of(status), child, DSET_BLK);
	expect(se, "no session with the child's pid %d in %s", (int)child,
	       json_object_to_json_string(status));
	expect(dt_ju64(se, "uid") == child_uid, "the child's session uid %" PRIu64 ", expected %u",
	       dt_ju64(se, "uid"), (unsigned)child_uid);
	expect(json_object_array_length(sessions_of(status)) == 2, "%zu sessions, expected 2",
	       json_object_array_length(sessions_of(status)));
	json_object_put(status);

	/* The metrics label sessions with the same credentials. */
	snprintf(match, sizeof(match), "uid=\"%u\",pid=\"%d\"", (unsigned)child_uid, (int)child);
	v = metric("batchd_session_memory_bytes", match);
	expect(v > 0, "batchd_session_memory_bytes{%s}: %g", match, v);

	expect(write(down[1], "g", 1) == 1, "cannot tell the child to go");
	expect(waitpid(child, &st, 0) == child && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	       "the child trainer failed (status %d)", st);
	close(up[0]);
	close(down[1]);
	/* Its session goes with it; ours stays. */
	v = metric_wait("batchd_sessions", NULL, 1);
	expect(v == 1, "batchd_sessions %g after the child left", v);
	status = dt_status_json_ok();
	expect(!session_by_pid(sessions_of(status), child, NULL), "the child's session outlived it");
	expect(session_by_pid(sessions_of(status), getpid(), DSET_ONE), "our session is gone");
	json_object_put(status);

	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
}
END_TEST

/* ---- 6. [access] allow-lists --------------------------------------------------------------- */

enum { ALLOW_NONE = 0, ALLOW_OURS = 1, ALLOW_OTHER = 2, ALLOW_NAME = 3 };

static const struct access_case {
	int uid, gid;             /* ALLOW_* for allow_uid / allow_gid */
	bool allowed;
} access_cases[] = {
	{ ALLOW_OTHER, ALLOW_NONE, false },
	{ ALLOW_OURS, ALLOW_NONE, true },
	{ ALLOW_NONE, ALLOW_OURS, true },
	{ ALLOW_OTHER, ALLOW_OURS, true },     /* passes by group */
	{ ALLOW_OTHER, ALLOW_OTHER, false },
	{ ALLOW_NAME, ALLOW_NONE, true },      /* our user by name */
};

#define OTHER_ID 12345u

static void access_line(char *buf, size_t len, const char *key, int kind, unsigned ours)
{
	struct passwd *pw;

	switch (kind) {
	case ALLOW_OURS:
		snprintf(buf, len, "%s = %u\n", key, ours);
		break;
	case ALLOW_OTHER:
		snprintf(buf, len, "%s = %u\n", key, OTHER_ID);
		break;
	case ALLOW_NAME:
		/* By name when we have one (a container may not), else by number. */
		pw = getpwuid(ours);
		if (pw)
			snprintf(buf, len, "%s = %s\n", key, pw->pw_name);
		else
			snprintf(buf, len, "%s = %u\n", key, ours);
		break;
	default:
		buf[0] = '\0';
	}
}

START_TEST(test_access_lists)
{
	const struct access_case *k = &access_cases[_i];
	char lu[128], lg[128], extra[300];
	bc_stream_opts o;
	bc_client *c = NULL;
	bc_stream *s;
	dt_ref ref;
	int r;

	ck_assert(getuid() != OTHER_ID && getgid() != OTHER_ID);
	access_line(lu, sizeof(lu), "allow_uid", k->uid, (unsigned)getuid());
	access_line(lg, sizeof(lg), "allow_gid", k->gid, (unsigned)getgid());
	snprintf(extra, sizeof(extra), "[access]\n%s%s", lu, lg);
	conf_basic("info", extra);
	D.any_answer = !k->allowed;
	start_ok();
	dt_ref_ok(&ref, DSET_ONE);

	if (k->allowed) {
		c = dt_connect_ok();
		opts(&o, DSET_ONE, 10);
		s = dt_open_ok(c, &o);
		consume_ok(s, &ref, 3, "an allowed peer's stream");
		ck_assert_int_eq(bc_close(s), 0);
		bc_disconnect(c);
		expect(dt_status_u64("denied") == 0, "status counts denied connections for an allowed peer");
	} else {
		uint8_t buf[BP_MSG_MAX];
		bp_msg_error e;
		char *text = NULL;
		char want[64];
		int fd = dt_raw_connect(D.sock), n;

		/* At the protocol level: an ERROR (-EACCES, naming the uid), then the close. */
		expect(fd >= 0, "connect: %s", strerror(-fd));
		n = dt_raw_recv(fd, buf, sizeof(buf), NULL, 0, NULL, 10000);
		expect(n > 0 && bp_msg_error_decode(buf, (size_t)n, &e) == 0,
		       "a denied peer got %d bytes, not an ERROR", n);
		snprintf(want, sizeof(want), "uid %u", (unsigned)getuid());
		expect(e.code == -EACCES && memmem(e.message, e.message_len, want, strlen(want)),
		       "denied with %d \"%.*s\"", e.code, (int)e.message_len, e.message);
		n = dt_raw_recv(fd, buf, sizeof(buf), NULL, 0, NULL, 10000);
		expect(n == 0, "the daemon kept a denied connection open (%d)", n);
		close(fd);

		/* Through libbatchclient: refused (the ERROR, or the close if HELLO lost the race). */
		r = bc_connect(D.sock, &c);
		expect(r == -EACCES || r == -EPIPE || r == -ECONNRESET, "bc_connect of a denied peer: "
		       "%s (%d)", bc_strerror(r), r);
		if (r == 0)
			bc_disconnect(c);
		if (r != -EACCES)
			fprintf(stderr, "test-service: note: bc_connect of a denied peer returned %s, not "
				"-EACCES\n", bc_strerror(r));
		r = dt_status(D.sock, &text);
		free(text);
		expect(r < 0, "a denied peer fetched the status");

		/* Let ourselves in (SIGHUP), and see the refusals counted. */
		access_line(lu, sizeof(lu), "allow_uid", ALLOW_OURS, (unsigned)getuid());
		snprintf(extra, sizeof(extra), "[access]\n%s", lu);
		conf_basic("info", extra);
		kill(D.pid, SIGHUP);
		for (int i = 0; i < TRIES && (r = bc_connect(D.sock, &c)) != 0; i++)
			dt_sleep_ms(10);
		expect(r == 0, "still denied after the reload allowed our uid: %s", bc_strerror(r));
		bc_disconnect(c);
		{
			json_object *st = dt_status_json_ok();
			uint64_t denied = dt_ju64(st, "denied");

			expect(denied >= 3 && dt_ju64(st, "reloads") == 1, "status: denied %" PRIu64
			       " (at least 3 expected), reloads %" PRIu64, denied, dt_ju64(st, "reloads"));
			expect(metric("batchd_errors_total", "kind=\"denied\"") == (double)denied,
			       "batchd_errors_total{kind=\"denied\"} disagrees with status (%" PRIu64 ")",
			       denied);
			json_object_put(st);
		}
		expect(dt_log_contains(&D, "not in the [access] allow-lists"),
		       "the log does not say why peers were cut off");
	}
	dt_ref_close(&ref);
}
END_TEST

/* A peer in an allowed group only through a supplementary group (SO_PEERGROUPS). */
START_TEST(test_access_supplementary)
{
	const gid_t allowed = 4243;
	uint8_t buf[BP_MSG_MAX];
	bp_msg_error e;
	int fd, n;

	if (!can_switch_users()) {
		fprintf(stderr, "test-service: SKIP access_supplementary: needs root to run peers "
			"as other users\n");
		return;
	}
	conf_write("[daemon]\nsocket = %s\nsocket_mode = 0666\n[datasets]\nroot = %s\n"
		   "[access]\nallow_gid = %u\n", D.sock, D.root, (unsigned)allowed);
	D.any_answer = true;      /* we (root) are not in the lists */
	start_ok();

	for (int member = 1; member >= 0; member--) {
		pid_t child;
		int st;

		fflush(NULL);
		child = fork();
		ck_assert_int_ge(child, 0);
		if (child == 0) {
			bc_client *c = NULL;
			bc_stream *s = NULL;
			bc_stream_opts o;
			bc_batch *b;
			int r;

			if (drop_to(12346, 12346, &allowed, member ? 1 : 0) < 0)
				_exit(10);
			r = bc_connect(D.sock, &c);
			if (!member)
				_exit(r == -EACCES || r == -EPIPE || r == -ECONNRESET ? 0 : 11);
			if (r < 0)
				_exit(12);
			bc_stream_opts_init(&o);
			o.dataset = DSET_ONE;
			o.batch_size = 10;
			if (bc_open(c, &o, &s) < 0 || bc_next(s, &b, WAIT_MS) != 0)
				_exit(13);
			bc_release(b);
			bc_close(s);
			bc_disconnect(c);
			_exit(0);
		}
		expect(waitpid(child, &st, 0) == child && WIFEXITED(st) && WEXITSTATUS(st) == 0,
		       "uid 12346 %s supplementary group %u: child status %d (10 setup, 11 let in, "
		       "12 refused, 13 stream failed)", member ? "in" : "not in", (unsigned)allowed,
		       WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	}
	/* And we, by uid and primary group in neither list, are refused. */
	fd = dt_raw_connect(D.sock);
	expect(fd >= 0, "connect: %s", strerror(-fd));
	n = dt_raw_recv(fd, buf, sizeof(buf), NULL, 0, NULL, 10000);
	expect(n > 0 && bp_msg_error_decode(buf, (size_t)n, &e) == 0 && e.code == -EACCES,
	       "root, in neither list, was not refused with -EACCES (%d bytes)", n);
	close(fd);
}
END_TEST

/* ---- 7. socket mode and group ---------------------------------------------------------------- */

/* A group to give the socket: ours, or (as root, who may) one we are not in. */
static gid_t other_gid(void)
{
	gid_t groups[64];
	int n;

	if (geteuid() == 0)
		return 4242;
	n = getgroups((int)ARRAY_SIZE(groups), groups);
	for (int i = 0; i < n; i++)
		if (groups[i] != getegid())
			return groups[i];
	return getegid();
}

START_TEST(test_socket_access)
{
	struct stat sb;
	gid_t g = other_gid();
	bc_client *c;

	if (_i == 2) {
		/* A group that does not exist: refused at start, so refused by a reload too. */
		conf_write("[daemon]\nsocket = %s\nsocket_mode = 0600\n[datasets]\nroot = %s\n",
			   D.sock, D.root);
		start_ok();
		conf_write("[daemon]\nsocket = %s\nsocket_mode = 0666\nsocket_group = "
			   "no-such-group-batchd\n[datasets]\nroot = %s\n", D.sock, D.root);
		hup_and_wait(0, 1);
		expect(dt_log_contains(&D, "reload refused") &&
		       dt_log_contains(&D, "no-such-group-batchd"), "the log does not say the reload "
		       "was refused for the unknown group");
		expect(stat(D.sock, &sb) == 0 && (sb.st_mode & 07777) == 0600, "a refused reload "
		       "changed the socket mode to %04o", (unsigned)(sb.st_mode & 07777));
		return;
	}
	if (_i == 0) {
		/* The defaults: 0660, our group. */
		conf_basic("info", NULL);
		start_ok();
		expect(stat(D.sock, &sb) == 0 && S_ISSOCK(sb.st_mode), "no socket at %s", D.sock);
		expect((sb.st_mode & 07777) == 0660, "default socket mode %04o, expected 0660",
		       (unsigned)(sb.st_mode & 07777));
		expect(sb.st_gid == getegid(), "default socket group %u, expected %u",
		       (unsigned)sb.st_gid, (unsigned)getegid());
		return;
	}
	conf_write("[daemon]\nsocket = %s\nsocket_mode = 0600\nsocket_group = %u\n[datasets]\n"
		   "root = %s\n", D.sock, (unsigned)g, D.root);
	start_ok();
	expect(stat(D.sock, &sb) == 0 && S_ISSOCK(sb.st_mode), "no socket at %s", D.sock);
	expect((sb.st_mode & 07777) == 0600, "socket mode %04o, expected 0600",
	       (unsigned)(sb.st_mode & 07777));
	expect(sb.st_gid == g, "socket group %u, expected %u", (unsigned)sb.st_gid, (unsigned)g);
	c = dt_connect_ok();
	bc_disconnect(c);

	/* A reload applies a new mode to the socket that is already there. */
	conf_write("[daemon]\nsocket = %s\nsocket_mode = 0640\nsocket_group = %u\n[datasets]\n"
		   "root = %s\n", D.sock, (unsigned)g, D.root);
	hup_and_wait(1, 0);
	expect(stat(D.sock, &sb) == 0 && (sb.st_mode & 07777) == 0640 && sb.st_gid == g,
	       "after the reload: socket mode %04o group %u, expected 0640 group %u",
	       (unsigned)(sb.st_mode & 07777), (unsigned)sb.st_gid, (unsigned)g);
}
END_TEST

/* ---- 8. the HTTP /metrics listener ------------------------------------------------------------ */

/* A port free on 127.0.0.1 right now. */
static int free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = -1;

	if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
		port = ntohs(sa.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

/*
 * A hand-written HTTP/1.0 request; the whole response (read until the
 * server closes) into *ret (caller frees). @return the status code, or -1.
 */
static int http_request(int port, const char *method, const char *path, char **ret_body)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				  .sin_port = htons((uint16_t)port) };
	char req[256], *resp = NULL, *body;
	size_t len = 0, cap = 0;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), code = -1, n;

	*ret_body = NULL;
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		goto out;
	n = snprintf(req, sizeof(req), "%s %s HTTP/1.0\r\nHost: 127.0.0.1:%d\r\n"
		     "User-Agent: test-service\r\n\r\n", method, path, port);
	if (send(fd, req, (size_t)n, MSG_NOSIGNAL) != n)
		goto out;
	for (;;) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		ssize_t k;

		if (poll(&pf, 1, 10000) <= 0)
			goto out;            /* no answer, or no close, within 10 s */
		if (len + 4096 + 1 > cap) {
			cap = cap ? 2 * cap : 65536;
			resp = realloc(resp, cap);
			ck_assert(resp != NULL);
		}
		k = recv(fd, resp + len, cap - len - 1, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			goto out;
		if (k == 0)
			break;
		len += (size_t)k;
	}
	resp[len] = '\0';
	if (sscanf(resp, "HTTP/1.%*d %d", &code) != 1)
		code = -1;
	body = strstr(resp, "\r\n\r\n");
	*ret_body = strdup(body ? body + 4 : "");
out:
	free(resp);
	if (fd >= 0)
		close(fd);
	return code;
}

START_TEST(test_http_metrics)
{
	int port = free_port(), code;
	char extra[96], *body = NULL;
	bc_stream_opts o;
	bc_stream *s;
	bc_client *c;
	dt_ref ref;
	prom p;
	double v;

	ck_assert_int_gt(port, 0);
	snprintf(extra, sizeof(extra), "[metrics]\nlisten = 127.0.0.1:%d\n", port);
	conf_basic("info", extra);
	if (dt_daemon_start(&D) < 0) {
		if (dt_log_contains(&D, "without libmicrohttpd")) {
			fprintf(stderr, "test-service: SKIP http_metrics: batchd was built without "
				"libmicrohttpd\n");
			return;
		}
		expect(0, "batchd with [metrics] listen = 127.0.0.1:%d did not start", port);
	}
	expect(dt_log_contains(&D, "metrics on http://"), "the startup line does not name the listener");

	/* Traffic first, so the numbers mean something. */
	dt_ref_ok(&ref, DSET_ONE);
	c = dt_connect_ok();
	opts(&o, DSET_ONE, 10);
	s = dt_open_ok(c, &o);
	consume_ok(s, &ref, 4, "a stream before scraping");
	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
	v = metric_wait("batchd_sessions", NULL, 0);
	expect(v == 0, "batchd_sessions %g", v);

	code = http_request(port, "GET", "/metrics", &body);
	expect(code == 200, "GET /metrics: HTTP status %d", code);
	expect(strstr(body, "batchd_build_info"), "GET /metrics: no batchd_build_info in %.200s", body);
	expect(prom_parse(body, &p, E, sizeof(E)) == 0, "GET /metrics does not parse: %s", E);
	expect(prom_get(&p, "batchd_batches_delivered_total", NULL, &v) && v == 4,
	       "over HTTP: batchd_batches_delivered_total %g, expected 4", v);
	expect(metric("batchd_batches_delivered_total", NULL) == v,
	       "HTTP and the socket disagree on batchd_batches_delivered_total");
	prom_free(&p);
	free(body);

	code = http_request(port, "GET", "/nope", &body);
	expect(code == 404, "GET /nope: HTTP status %d, expected 404", code);
	free(body);
	code = http_request(port, "POST", "/metrics", &body);
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

			fprintf(stderr, "test-service: batchctl %s exited %d:\n", argv[3], WEXITSTATUS(st));
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
	prom p;
	int r;

	conf_basic("info", NULL);
	start_ok();
	dt_ref_ok(&ref, DSET_ONE);
	c = dt_connect_ok();
	opts(&o, DSET_ONE, 10);
	o.shuffle = BC_SHUFFLE_GLOBAL;
	o.seed = 7;
	s = dt_open_ok(c, &o);
	consume_ok(s, &ref, 4, "the stream batchctl looks at");
	/* Let the daemon account for the released batches before looking. */
	expect(metric_wait("batchd_batches_delivered_total", NULL, 4) == 4, "not 4 batches delivered");

	r = batchctl(&out, (const char *[]){ "sessions", "--json", NULL });
	expect(r == 0, "batchctl sessions --json exited %d", r);
	j = parse_json_ok(out, json_type_array, "sessions --json");
	expect(json_object_array_length(j) == 1, "batchctl sessions --json: %zu sessions: %s",
	       json_object_array_length(j), out);
	se = session_by_pid(j, getpid(), DSET_ONE);
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
	expect(prom_parse(out, &p, E, sizeof(E)) == 0, "batchctl metrics does not parse: %s", E);
	{
		double v;
		char match[48];

		snprintf(match, sizeof(match), "pid=\"%d\"", (int)getpid());
		expect(prom_get(&p, "batchd_session_batches_delivered_total", match, &v) && v == 4,
		       "batchctl metrics: our session delivered %g", v);
	}
	prom_free(&p);
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
	prom p;
	double v;
	int r;

	snprintf(a, sizeof(a), "%s/" DSET_ONE, dt_g.packs);
	dt_root_path(&D, name, b, sizeof(b));
	ck_assert_int_eq(link(a, b), 0);
	conf_basic("info", NULL);
	start_ok();
	dt_ref_ok(&ref, DSET_ONE);
	c = dt_connect_ok();
	opts(&o, name, 10);
	s = dt_open_ok(c, &o);
	consume_ok(s, &ref, 2, "a stream on an oddly named dataset");

	st = dt_status_json_ok();
	se = session_by_pid(sessions_of(st), getpid(), name);
	expect(se, "status does not give the dataset name back intact: %s",
	       json_object_to_json_string(st));
	json_object_put(st);

	text = metrics_text_ok();
	r = prom_parse(text, &p, E, sizeof(E));
	expect(r == 0, "metrics with an odd dataset name do not parse: %s\n%s", E, text);
	snprintf(match, sizeof(match), "dataset=\"we\\\"ird\\\\na\\nme\t.bpk\"");
	expect(prom_get(&p, "batchd_session_memory_bytes", match, &v) && v > 0,
	       "no batchd_session_memory_bytes{%s} in:\n%s", match, text);
	prom_free(&p);
	free(text);

	r = batchctl(&out, (const char *[]){ "sessions", "--json", NULL });
	expect(r == 0, "batchctl sessions --json exited %d", r);
	{
		json_object *j = parse_json_ok(out, json_type_array, "sessions --json");

		expect(session_by_pid(j, getpid(), name), "batchctl sessions --json mangles the name: %s",
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
	prom p;
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
			fprintf(stderr, "test-service: SKIP large_reports: RLIMIT_NOFILE %lu is under "
				"%zu\n", (unsigned long)rl.rlim_cur, 6 * nsess + 256);
			return;
		}
	}

	conf_basic("info", NULL);
	start_ok();
	c = calloc(nconn, sizeof(*c));
	st = calloc(nsess, sizeof(*st));
	ck_assert(c && st);
	opts(&o, rel, 1);
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
	expect(j && json_object_array_length(sessions_of(j)) == nsess, "the status (%zu bytes) does "
	       "not list %zu sessions", strlen(text), nsess);
	json_object_put(j);
	free(text);
	text = slow_report(fd, true, 500);
	expect(text, "metrics with %zu sessions (long paths), read after 0.5 s: %s", nsess, E);
	expect(prom_parse(text, &p, E, sizeof(E)) == 0, "the metrics (%zu bytes) do not parse: %s",
	       strlen(text), E);
	expect(prom_count(&p, "batchd_session_memory_bytes") == nsess, "%zu sessions in the metrics, "
	       "expected %zu", prom_count(&p, "batchd_session_memory_bytes"), nsess);
	prom_free(&p);
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

static TCase *tcase(Suite *s, const char *name)
{
	return dt_tcase(s, name, setup);
}

static Suite *service_suite(void)
{
	Suite *s = suite_create("service");

	tcase_add_test(tcase(s, "reload"), test_reload);
	tcase_add_test(tcase(s, "reload_budget"), test_reload_budget);
	tcase_add_test(tcase(s, "sigterm_drain"), test_sigterm_drain);
	tcase_add_test(tcase(s, "sessions_per_uid"), test_sessions_per_uid);
	tcase_add_test(tcase(s, "sessions_per_uid_concurrent"), test_sessions_per_uid_concurrent);
	tcase_add_test(tcase(s, "memory_per_uid"), test_memory_per_uid);
	tcase_add_test(tcase(s, "metrics_traffic"), test_metrics_traffic);
	tcase_add_test(tcase(s, "peer_credentials"), test_peer_credentials);
	tcase_add_loop_test(tcase(s, "access_lists"), test_access_lists, 0, ARRAY_SIZE(access_cases));
	tcase_add_test(tcase(s, "access_supplementary"), test_access_supplementary);
	tcase_add_loop_test(tcase(s, "socket_access"), test_socket_access, 0, 3);
	tcase_add_test(tcase(s, "http_metrics"), test_http_metrics);
	tcase_add_test(tcase(s, "batchctl"), test_batchctl);
	tcase_add_test(tcase(s, "report_escaping"), test_report_escaping);
	tcase_add_test(tcase(s, "large_reports"), test_large_reports);
	return s;
}

int main(void)
{
	return dt_check_main(&D, service_suite);
}
