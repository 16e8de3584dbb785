/* SPDX-License-Identifier: MIT */
/*
 * service-testlib.h - what the service suites (test-reload.c,
 * test-limits.c, test-access.c, test-metrics*.c) share on top of
 * daemon-testlib.h: a batchd started with `-c FILE` whose file the test
 * rewrites, the status document's sessions, and the Prometheus text
 * exposition parsed back and checked against its rules.
 *
 * Why a file of its own: the service suites are one behaviour each of batchd
 * as a service, but all of them configure it through a file, reload it
 * with SIGHUP and read its reports; one parser of the metrics text keeps
 * them reading it alike (and strictly: a series that breaks the
 * exposition rules fails every suite that looks at it).
 *
 * Everything acts on the suite's daemon (dt_suite_daemon) and fails the
 * test, with the daemon's log, when it cannot do what it says.
 *
 * Thread rules: the test's main thread only.
 */
#ifndef BATCHD_TESTS_SERVICE_TESTLIB_H
#define BATCHD_TESTS_SERVICE_TESTLIB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <check.h>
#include <json-c/json.h>

#include "daemon-testlib.h"

/* ---- the configuration file ---- */

/* dir/batchd.conf of the suite's daemon, its -c FILE (set by sv_setup). */
extern char sv_conf[256];

/* Fixture: dt_setup_dir, and the daemon is to start with -c sv_conf. */
void sv_setup(void);
/* A TCase named name in s, with the fixtures sv_setup and dt_teardown. */
TCase *sv_tcase(Suite *s, const char *name);
/* Write sv_conf (atomically: a reload never sees half of it). */
__attribute__((format(printf, 1, 2)))
void sv_conf_write(const char *fmt, ...);
/* The usual file: the daemon's socket, root/ as the only root, log level level, then extra. */
void sv_conf_basic(const char *level, const char *extra);
/* Start the suite's daemon on sv_conf. */
void sv_start_ok(void);
/* SIGHUP, then wait until reloads + reload failures reach `applied` + `failed`, exactly. */
void sv_hup_and_wait(double applied, double failed);

/* ---- sessions ---- */

/* Take exactly n batches, each checked byte for byte against ref and released. */
void sv_consume_ok(bc_stream *s, dt_ref *ref, size_t n, const char *what);
/* The sessions array of a status document (borrowed). */
json_object *sv_sessions_of(json_object *status);
/* The session opened by process pid on dataset (NULL: any) in sessions, or NULL. */
json_object *sv_session_by_pid(json_object *sessions, pid_t pid, const char *dataset);

/* ---- Prometheus text exposition, parsed back ---- */

typedef struct sv_prom_sample {
	char name[128];
	char labels[10240];        /* as written, without the braces; "" for none */
	double value;
	size_t family;
} sv_prom_sample;

typedef struct sv_prom_family {
	char name[128];
	char type[16];            /* "" until # TYPE */
	bool help;
	size_t samples;
	bool closed;              /* another family's samples came after this one's */
} sv_prom_family;

typedef struct sv_prom {
	sv_prom_sample *s;
	size_t n, cap;
	sv_prom_family *f;
	size_t nf, fcap;
} sv_prom;

/*
 * Parse text, checking the exposition rules: every line a comment, a
 * # HELP / # TYPE, or "name{labels} value [timestamp]"; # TYPE before the
 * family's samples; a family's samples together; no series twice; every
 * family with both # HELP and # TYPE; the text ends with a newline.
 * @return 0, or -1 with why in err. Free p with sv_prom_free either way.
 */
int sv_prom_parse(const char *text, sv_prom *p, char *err, size_t errlen);
void sv_prom_free(sv_prom *p);
/*
 * The value of the series name whose labels contain every comma-separated
 * `k="v"` of match ("" or NULL: the series without labels). @return false
 * when no series (or more than one) matches.
 */
bool sv_prom_get(const sv_prom *p, const char *name, const char *match, double *ret);
/* Samples of name (any labels). */
size_t sv_prom_count(const sv_prom *p, const char *name);
/* The value of family name's series for session id (session="id"), NAN when missing. */
double sv_prom_session(const sv_prom *p, const char *name, uint64_t id);
/*
 * Check a histogram family (without labels other than le): buckets in
 * increasing le, cumulative counts, a last +Inf bucket equal to _count, a
 * _sum. @return _count, or -1 with why in err.
 */
double sv_prom_check_hist(const sv_prom *p, const char *family, char *err, size_t errlen);
/* The metrics text through bc_metrics on a fresh connection. Caller frees. */
char *sv_metrics_text_ok(void);
/* Fetch and parse the metrics; the parse must succeed. */
void sv_metrics_ok(sv_prom *p);
/* One value from fresh metrics (NAN when the series is missing). */
double sv_metric(const char *name, const char *match);
/* Poll until metric name{match} == want (up to TRIES x 10 ms). @return the last value. */
double sv_metric_wait(const char *name, const char *match, double want);

#endif
