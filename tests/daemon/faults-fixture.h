/* SPDX-License-Identifier: MIT */
/*
 * faults-fixture.h - what the two faults suites (test-faults.c, faults
 * injected under the daemon; test-faults-clients.c, clients that die,
 * stop, flood and scribble) share: the suite's daemon, started with
 * BATCHD_FAULTS (daemon/base/fault.h) in its environment, and what "back
 * to idle" means when a test waits for everything to be given back.
 *
 * Why a file of its own: both suites start their daemon and weigh its
 * sessions the same way; compiled into each (tests/daemon/meson.build)
 * rather than written twice.
 *
 * Thread rules: the test's main thread only, as daemon-testlib.h.
 */
#ifndef BATCHD_TESTS_FAULTS_FIXTURE_H
#define BATCHD_TESTS_FAULTS_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon-testlib.h"

/* The suite's daemon under test (main() hands it to dt_check_main). */
extern dt_daemon D;

/* Fail with the daemon's recent log (daemon-testlib.h). */
#define expect dt_expect

/*
 * Start D with BATCHD_FAULTS=faults (NULL or "": none) and, when asan_extra
 * is set, ASAN_OPTIONS extended by it (it means nothing to other builds) in
 * its environment alone, with a fresh log: what a test looks for there is
 * about this daemon. @return as dt_daemon_start (1: it exited at startup
 * and may_exit was asked for; the wait status in D.exit_status).
 */
int start_env(const char *faults, const char *asan_extra, bool may_exit);
/* start_env that must come up, with the fault layer active when faults are asked for. */
void start_faults_asan(const char *faults, const char *asan_extra);
/* start_faults_asan without ASAN_OPTIONS of its own. */
void start_faults(const char *faults);

/* CLOCK_MONOTONIC in seconds. */
double now_s(void);

/*
 * What "the daemon is back to idle" means: a number of sessions and
 * clients, and the sessions' memory (the cache may keep what they read:
 * the ram tier keeps every block).
 */
struct idle_ctx {
	size_t sessions, clients;    /* wanted; clients counts the status request itself */
	uint64_t used;               /* the sessions' memory (status memory.sessions) */
	size_t got_sessions;         /* last seen */
	uint64_t got_clients, got_used;
};

/* dt_wait_status predicate: has the status json reached the idle_ctx arg? */
bool idle_reached(const char *json, void *arg);
/* Wait up to tries polls for D to reach ic; fail the test (what: the step) otherwise. */
void expect_idle(struct idle_ctx *ic, int tries, const char *what);
/* The sessions' memory now, lingering included (not the cache: see idle_ctx). */
uint64_t used_now(void);

#endif
