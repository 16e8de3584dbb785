/* SPDX-License-Identifier: MIT */
/*
 * io-testlib.h - the fixture the read-engine suites (tests/unit/test-io.c,
 * test-io-faults.c, test-io-direct.c) share: one file of pseudo-random
 * data that every read is checked against, what the kernel offers
 * (io_uring, O_DIRECT on that file), and the helpers that build, submit
 * and check requests.
 *
 * it_run() writes the file, probes the kernel and runs a suite; the file
 * is unlinked at once, and tests reopen it through /proc/self/fd when
 * they need other flags. io_uring is probed with liburing itself, not
 * through bd_io, so a broken engine setup fails its cases rather than
 * skips them.
 *
 * Thread rules: it_run from main(); the rest from a test's thread, except
 * it_rnd and it_req_matches, which assert nothing and may be called from
 * any thread.
 */
#ifndef BATCHD_TESTS_IO_TESTLIB_H
#define BATCHD_TESTS_IO_TESTLIB_H

#include <stdbool.h>
#include <stdint.h>

#include <check.h>

#include "io.h"

#define FILE_SIZE ((4u << 20) + 1234u)   /* not a multiple of any block */
#define MAX_LEN (256u << 10)

extern int it_fd;                 /* the data file, read-only */
extern uint8_t *it_data;          /* what was written to it */
extern bool it_uring_ok;          /* the kernel sets up a plain ring */
extern char it_uring_why[128];    /* why not, where it does not */
extern bool it_direct_ok;         /* the data file opens with O_DIRECT */
extern char it_direct_why[128];   /* why not, where it does not */

/* xorshift64*: the next of a fixed sequence whatever the libc. */
uint64_t it_rnd(uint64_t *s);

/* The engine a loop test's _i names: 0 = io_uring, 1 = pread. */
extern const bd_io_engine it_engines[2];

/* Whether a case on e skips: io_uring where the kernel refuses it (said on stdout). */
bool it_skip_engine(bd_io_engine e);

/* A new engine of the kind e, checked to be what was asked. */
bd_io *it_engine_new(bd_io_engine e, unsigned depth);

/* req reads len bytes at off of fd into buf: no registered buffer, no result yet. */
void it_req_init(bd_io_req *req, int fd, uint64_t off, uint32_t len, uint8_t *buf);

/*
 * Whether a finished request holds exactly what pread(2) returns for the
 * same range (and what it_run() wrote there): false rather than an
 * assertion, so worker threads can use it too.
 */
bool it_req_matches(const bd_io_req *req);

/* Submits req, waits for it alone, and returns it. */
bd_io_req *it_read_one(bd_io *io, bd_io_req *req);

/* Waits for n requests of reqs, each exactly once, and checks them. */
void it_reap_batch(bd_io *io, bd_io_req *reqs, unsigned n);

/*
 * Add fn to s as a TCase of its own named name, run for _i in 0..runs-1:
 * 1 for a case without an engine, 2 for one on each of it_engines.
 */
void it_add(Suite *s, const char *name, const TTest *fn, int runs);

/*
 * Write the data file, probe io_uring and O_DIRECT (both said on stdout),
 * run s with Check's defaults, close the file: @return main's exit
 * status, EXIT_FAILURE too where no data file could be made.
 */
int it_run(Suite *s);

#endif
