/* SPDX-License-Identifier: MIT */
/*
 * service-testlib.c - the configuration file, status and Prometheus
 * readers shared by the service suites (see service-testlib.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "json_path.h"
#include "service-testlib.h"

/* Write the daemon's configuration file (atomically: a reload never sees half of it). */
__attribute__((format(printf, 1, 2)))
void sv_conf_write(const char *fmt, ...)
{
	char tmp[300];
	va_list ap;
	FILE *f;
	int r;

	snprintf(tmp, sizeof(tmp), "%s.tmp", sv_conf);
	f = fopen(tmp, "w");
	ck_assert_msg(f != NULL, "create %s: %s", tmp, strerror(errno));
	va_start(ap, fmt);
	r = vfprintf(f, fmt, ap);
	va_end(ap);
	ck_assert_msg(r >= 0 && fclose(f) == 0, "write %s", tmp);
	ck_assert_msg(rename(tmp, sv_conf) == 0, "rename to %s: %s", sv_conf, strerror(errno));
}

void sv_start_ok(void)
{
	dt_expect(dt_daemon_start(dt_suite_daemon) == 0, "batchd -c %s did not start", sv_conf);
}

/* Take n batches, each checked byte for byte against ref and released. */
void sv_consume_ok(bc_stream *s, dt_ref *ref, size_t n, const char *what)
{
	dt_run run = { 0 };

	dt_consume_ok(s, ref, n, 0, &run, what);
	dt_expect(run.batches == n, "%s: %zu batches, expected %zu", what, run.batches, n);
	dt_run_free(&run);
}

/* ---- status JSON (json-c) ------------------------------------------------------------ */

json_object *sv_sessions_of(json_object *status)
{
	json_object *a = json_path_get(status, "sessions");

	dt_expect(a && json_object_is_type(a, json_type_array), "status JSON: no sessions array");
	return a;
}

/* The session opened by process pid on dataset (NULL: any), or NULL. */
json_object *sv_session_by_pid(json_object *sessions, pid_t pid, const char *dataset)
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


void sv_prom_free(sv_prom *p)
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

static ssize_t family_find(const sv_prom *p, const char *name)
{
	for (size_t i = 0; i < p->nf; i++)
		if (!strcmp(p->f[i].name, name))
			return (ssize_t)i;
	return -1;
}

static size_t family_get(sv_prom *p, const char *name)
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
static ssize_t sample_family(const sv_prom *p, const char *name)
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
int sv_prom_parse(const char *text, sv_prom *p, char *err, size_t errlen)
{
	ssize_t current = -1;
	int line = 0;

	memset(p, 0, sizeof(*p));
	if (!*text || text[strlen(text) - 1] != '\n')
		return prom_fail(err, errlen, 0, "the text does not end with a newline");
	while (*text) {
		const char *nl = strchr(text, '\n'), *q = text;
		char name[128];
		sv_prom_sample *s;
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
bool sv_prom_get(const sv_prom *p, const char *name, const char *match, double *ret)
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
size_t sv_prom_count(const sv_prom *p, const char *name)
{
	size_t n = 0;

	for (size_t i = 0; i < p->n; i++)
		n += !strcmp(p->s[i].name, name);
	return n;
}

double sv_prom_session(const sv_prom *p, const char *name, uint64_t id)
{
	char match[48];
	double v;

	snprintf(match, sizeof(match), "session=\"%" PRIu64 "\"", id);
	return sv_prom_get(p, name, match, &v) ? v : NAN;
}

/*
 * Check a histogram family (without labels other than le): buckets in
 * increasing le, cumulative counts, a last +Inf bucket equal to _count, a
 * _sum. @return _count, or -1 with why in err.
 */
double sv_prom_check_hist(const sv_prom *p, const char *family, char *err, size_t errlen)
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
	if (!sv_prom_get(p, name, NULL, &count)) {
		snprintf(err, errlen, "%s: no _count", family);
		return -1;
	}
	snprintf(name, sizeof(name), "%s_sum", family);
	if (!sv_prom_get(p, name, NULL, &sum) || !(sum >= 0)) {
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
char *sv_metrics_text_ok(void)
{
	bc_client *c = dt_connect_ok();
	char *text = NULL;
	int r = bc_metrics(c, &text);

	dt_expect(r == 0 && text, "bc_metrics: %s (%d): %s", bc_strerror(r), r, bc_client_error(c));
	bc_disconnect(c);
	return text;
}

/* Fetch and parse the metrics; the parse must succeed. */
void sv_metrics_ok(sv_prom *p)
{
	char *text = sv_metrics_text_ok(), why[1024];
	int r = sv_prom_parse(text, p, why, sizeof(why));

	dt_expect(r == 0, "metrics do not parse: %s\n%s", why, text);
	free(text);
}

/* One value from fresh metrics (NAN when the series is missing). */
double sv_metric(const char *name, const char *match)
{
	sv_prom p;
	double v;

	sv_metrics_ok(&p);
	if (!sv_prom_get(&p, name, match, &v))
		v = NAN;
	sv_prom_free(&p);
	return v;
}

/* Poll until metric name{match} == want (up to TRIES x 10 ms). @return the last value. */
double sv_metric_wait(const char *name, const char *match, double want)
{
	double v = NAN;

	for (int i = 0; i < TRIES; i++) {
		v = sv_metric(name, match);
		if (v == want)
			break;
		dt_sleep_ms(10);
	}
	return v;
}

/* ---- fixtures -------------------------------------------------------------------- */

char sv_conf[256];

void sv_setup(void)
{
	dt_setup_dir();
	snprintf(sv_conf, sizeof(sv_conf), "%s/batchd.conf", dt_suite_daemon->dir);
	dt_suite_daemon->config = sv_conf;
}

/* The usual file: our socket, root/ as the only root, log level level. */
void sv_conf_basic(const char *level, const char *extra)
{
	sv_conf_write("# test-service\n[daemon]\nsocket = %s\nlog_level = %s\n[datasets]\nroot = %s\n%s",
		      dt_suite_daemon->sock, level, dt_suite_daemon->root, extra ? extra : "");
}

/* SIGHUP, then wait until reloads + reload failures reach `applied` + `failed`. */
void sv_hup_and_wait(double applied, double failed)
{
	double a = NAN, f = NAN;

	dt_expect(kill(dt_suite_daemon->pid, SIGHUP) == 0, "kill SIGHUP: %s", strerror(errno));
	for (int i = 0; i < TRIES; i++) {
		sv_prom p;

		sv_metrics_ok(&p);
		if (!sv_prom_get(&p, "batchd_reloads_total", NULL, &a) ||
		    !sv_prom_get(&p, "batchd_reload_failures_total", NULL, &f))
			a = f = NAN;
		sv_prom_free(&p);
		if (a + f >= applied + failed)
			break;
		dt_sleep_ms(10);
	}
	dt_expect(a == applied && f == failed, "after SIGHUP: batchd_reloads_total %g (want %g), "
	       "batchd_reload_failures_total %g (want %g)", a, applied, f, failed);
}

TCase *sv_tcase(Suite *s, const char *name)
{
	return dt_tcase(s, name, sv_setup);
}
