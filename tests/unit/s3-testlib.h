/* SPDX-License-Identifier: MIT */
/*
 * s3-testlib.h - what the S3 client's suites (tests/unit/test-s3.c,
 * test-s3-errors.c) share: an HTTP server on loopback in a child process,
 * answering each connection as the suite's function says, so that replies
 * reach the client through curl as a server's would; and their main().
 *
 * Thread rules: called from a test's one thread; the server is a forked
 * child, ended with s3t_server_stop.
 */
#ifndef BATCHD_TESTS_S3_TESTLIB_H
#define BATCHD_TESTS_S3_TESTLIB_H

#include <sys/types.h>

#include <check.h>

/*
 * Answer connection number n (0, 1, ...) on fd, whose request (its head,
 * NUL-terminated, cut at 4 KiB) is req. The connection is closed after.
 */
typedef void (*s3t_answer_fn)(int fd, const char *req, unsigned n, const void *ctx);

/* A child answering every connection with answer(..., ctx). @return its pid; *ret_port. */
pid_t s3t_server(s3t_answer_fn answer, const void *ctx, int *ret_port);

/* End the child started by s3t_server and reap it. */
void s3t_server_stop(pid_t pid);

/* A suite's main(): curl's global init, then run s. @return the exit status. */
int s3t_run(Suite *s);

#endif
