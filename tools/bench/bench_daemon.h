/* SPDX-License-Identifier: MIT */
/*
 * bench_daemon.h - a private batchd for `batchd-bench pipeline`: found,
 * started on a temporary socket, waited for, stopped and cleaned up.
 *
 * Why: a pipeline run without --socket measures a batchd of its own, so
 * that nothing else shares it and it never outlives the benchmark
 * (PR_SET_PDEATHSIG). Its log goes to a file in the temporary directory
 * and is shown when it fails to start or stop cleanly.
 *
 * Thread rules: the main thread of batchd-bench; starting forks.
 */
#ifndef BATCHD_TOOLS_BENCH_DAEMON_H
#define BATCHD_TOOLS_BENCH_DAEMON_H

#include <stdbool.h>
#include <sys/types.h>

typedef struct bench_daemon {
	char dir[96], sock[128], log[128];   /* dir is at most 60 + 21 bytes */
	pid_t pid;                           /* 0 when not running */
} bench_daemon;

/*
 * Start the batchd binary `batchd` (NULL: search, see bench_daemon.c) on
 * a socket in a new temporary directory, serving root, with --memory
 * memory when not NULL, and wait up to a minute for it to answer.
 * @return 0 (d->sock is its socket), or -1 after saying why (and showing
 * its log). Either way, call bench_daemon_stop() afterwards.
 */
int bench_daemon_start(bench_daemon *d, const char *batchd, const char *memory, const char *root);

/*
 * Stop the batchd (SIGTERM, then SIGKILL after 30 s), show its log when
 * show_log or when it did not exit with 0, and remove its directory.
 * @return its exit status, or -1 when none was running or it had to be killed.
 */
int bench_daemon_stop(bench_daemon *d, bool show_log);

#endif
