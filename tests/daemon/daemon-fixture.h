/* SPDX-License-Identifier: MIT */
/*
 * daemon-fixture.h - what the two daemon suites (test-daemon.c, what a
 * trainer gets from a healthy batchd; test-daemon-isolation.c, what goes
 * wrong in one session costs that session alone) share: the suite's
 * daemon and its fixture, the datasets their per-dataset loops run over,
 * and the check that a run's batches carry exactly the sampler's ids.
 *
 * Why a file of its own: both suites start the daemon and check orders
 * the same way; compiled into each (tests/daemon/meson.build) rather than
 * written twice.
 *
 * Thread rules: the test's main thread only, as daemon-testlib.h.
 */
#ifndef BATCHD_TESTS_DAEMON_FIXTURE_H
#define BATCHD_TESTS_DAEMON_FIXTURE_H

#include "daemon-testlib.h"

/* The suite's daemon under test (main() hands it to dt_check_main). */
extern dt_daemon D;

/* Fail with the daemon's recent log (daemon-testlib.h). */
#define expect dt_expect

/* The three test datasets, in the order loop tests take them (_i). */
extern const char *const datasets[3];

/* Fixture: the daemon's tree, and the daemon started with its defaults. */
void setup(void);

/* Do the run's batches carry exactly the sampler's ids (not checked for block shuffle)? */
void expect_sampler_order(const dt_run *run, const dt_ref *ref, const bc_stream_opts *o);

#endif
