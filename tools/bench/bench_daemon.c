/* SPDX-License-Identifier: MIT */
/*
 * bench_daemon.c - start and stop the private batchd of a pipeline
 * benchmark (see bench_daemon.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "batchclient.h"
#include "bench_daemon.h"
#include "cli.h"

static bool executable(const char *p)
{
	struct stat st;

	return p && stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, X_OK) == 0;
}

/*
 * --batchd, $BATCHD, next to this binary (installed side by side, the build
 * tree's ../daemon/batchd, or ../sbin/batchd), the path of the build that
 * made this binary, then $PATH.
 */
static const char *find_batchd(const char *given, char *buf, size_t len)
{
	static const char *const rel[] = { "batchd", "../daemon/batchd", "../sbin/batchd" };
	char self[PATH_MAX];
	ssize_t n;

	if (given)
		return given;
	if (executable(getenv("BATCHD")))
		return getenv("BATCHD");
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = '\0';
		for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
			snprintf(buf, len, "%s/%s", dirname(self), rel[i]);
			if (executable(buf))
				return buf;
			self[n] = '\0';   /* dirname may have written into it */
		}
	}
#ifdef BATCHD_BENCH_BATCHD
	if (executable(BATCHD_BENCH_BATCHD))
		return BATCHD_BENCH_BATCHD;
#endif
	return "batchd";          /* execvp searches $PATH */
}

static void dump_log(const bench_daemon *d)
{
	char line[1024];
	FILE *f = fopen(d->log, "r");

	if (!f)
		return;
	fprintf(stderr, "---- batchd log ----\n");
	while (fgets(line, sizeof(line), f))
		fputs(line, stderr);
	fprintf(stderr, "--------------------\n");
	fclose(f);
}

int bench_daemon_start(bench_daemon *d, const char *batchd, const char *memory, const char *root)
{
	const char *tmp = getenv("TMPDIR");
	char bin_buf[PATH_MAX];
	const char *bin = find_batchd(batchd, bin_buf, sizeof(bin_buf));
	char *argv[16];
	int n = 0, logfd;

	/* A socket path must fit in sun_path (108 bytes): a long TMPDIR will not do. */
	if (!tmp || !*tmp || strlen(tmp) > 60)
		tmp = "/tmp";
	snprintf(d->dir, sizeof(d->dir), "%s/batchd-bench.XXXXXX", tmp);
	if (!mkdtemp(d->dir)) {
		fprintf(stderr, "batchd-bench: mkdtemp %s: %s\n", d->dir, strerror(errno));
		d->dir[0] = '\0';
		return -1;
	}
	snprintf(d->sock, sizeof(d->sock), "%s/batchd.sock", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/batchd.log", d->dir);
	argv[n++] = (char *)bin;
	argv[n++] = "--no-config";      /* the machine's batchd.conf must not change the run */
	argv[n++] = "--socket";
	argv[n++] = d->sock;
	argv[n++] = "--root";
	argv[n++] = (char *)root;
	if (memory) {
		argv[n++] = "--memory";
		argv[n++] = (char *)memory;
	}
	argv[n] = NULL;

	logfd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (logfd < 0)
		return -1;
	fflush(NULL);
	d->pid = fork();
	if (d->pid < 0) {
		close(logfd);
		return -1;
	}
	if (d->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGTERM);     /* never outlive the benchmark */
		dup2(logfd, 1);
		dup2(logfd, 2);
		execvp(argv[0], argv);
		fprintf(stderr, "batchd-bench: cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(logfd);

	/* Up to a minute: sanitizer builds and a cold CUDA probe start slowly. */
	for (int i = 0; i < 6000; i++) {
		bc_client *c;
		int st;

		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			d->pid = 0;
			fprintf(stderr, "batchd-bench: %s exited (status %d) before answering\n", bin,
				WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
			dump_log(d);
			return -1;
		}
		if (bc_connect(d->sock, &c) == 0) {
			bc_disconnect(c);
			return 0;
		}
		cli_sleep_ms(10);
	}
	fprintf(stderr, "batchd-bench: %s never answered on %s (last try: %s)\n", bin, d->sock,
		bc_client_error(NULL));
	dump_log(d);
	return -1;
}

int bench_daemon_stop(bench_daemon *d, bool show_log)
{
	int st = 0, rc = -1;
	bool had = d->pid > 0;

	if (had) {
		kill(d->pid, SIGTERM);
		for (int i = 0; i < 3000; i++) {
			if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
				rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
				break;
			}
			cli_sleep_ms(10);
		}
		if (rc < 0) {
			kill(d->pid, SIGKILL);
			waitpid(d->pid, &st, 0);
		}
		d->pid = 0;
	}
	if (show_log || (had && rc != 0))
		dump_log(d);
	if (d->dir[0]) {
		unlink(d->sock);
		unlink(d->log);
		rmdir(d->dir);
	}
	return rc;
}
