/* SPDX-License-Identifier: MIT */
/*
 * faults-fixture.c - the faults suites' daemon and its idle check (see
 * faults-fixture.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include <check.h>

#include "faults-fixture.h"

dt_daemon D;

int start_env(const char *faults, const char *asan_extra, bool may_exit)
{
	char fenv[512], aenv[1024];
	const char *env[3] = { NULL };
	size_t n = 0;
	int r;

	if (faults && *faults) {
		snprintf(fenv, sizeof(fenv), "BATCHD_FAULTS=%s", faults);
		env[n++] = fenv;
	}
	if (asan_extra)
		env[n++] = dt_asan_options_env(aenv, sizeof(aenv), asan_extra);
	ck_assert_int_eq(truncate(D.log, 0) == 0 || errno == ENOENT, 1);
	D.env = env;
	D.may_exit = may_exit;
	r = dt_daemon_start(&D);
	D.env = NULL;
	D.may_exit = false;
	return r;
}

void start_faults_asan(const char *faults, const char *asan_extra)
{
	int r = start_env(faults, asan_extra, false);

	ck_assert_msg(r == 0, "batchd with BATCHD_FAULTS=\"%s\" did not start", faults ? faults : "");
	/* A build without the fault layer would ignore the variable and prove nothing. */
	if (faults && *faults)
		expect(dt_log_contains(&D, "fault injection active"),
		       "batchd did not report BATCHD_FAULTS=\"%s\" active (built without "
		       "-Dfault_injection=true?)", faults);
}

void start_faults(const char *faults)
{
	start_faults_asan(faults, NULL);
}

double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

bool idle_reached(const char *json, void *arg)
{
	struct idle_ctx *ic = arg;

	ic->got_sessions = dt_json_sessions(json);
	return dt_json_u64(json, "\"memory\": {", "sessions", &ic->got_used) &&
	       dt_json_u64(json, NULL, "clients", &ic->got_clients) &&
	       ic->got_sessions == ic->sessions && ic->got_used == ic->used &&
	       (!ic->clients || ic->got_clients == ic->clients);
}

void expect_idle(struct idle_ctx *ic, int tries, const char *what)
{
	expect(dt_wait_status(D.sock, idle_reached, ic, tries),
	       "%s: %zu sessions, %" PRIu64 " clients, %" PRIu64 " bytes used; expected %zu, %zu, %"
	       PRIu64, what, ic->got_sessions, ic->got_clients, ic->got_used, ic->sessions,
	       ic->clients, ic->used);
}

uint64_t used_now(void)
{
	return dt_status_u64("memory.sessions");
}
