/* SPDX-License-Identifier: MIT */
/*
 * main.c - batchd: serve mini-batches to trainers.
 *
 *   batchd [-c FILE | --no-config] [--socket PATH] [--root DIR]...
 *          [--memory SIZE] [--io-engine auto|io_uring|pread]
 *          [--direct auto|on|off] [--log-level LEVEL]
 *
 * Without -c it reads BATCHD_CONFIG_FILE (SYSCONFDIR/batchd/batchd.conf,
 * from daemon/meson.build) when that exists, so an installed daemon
 * started by hand serves what the service would.
 *
 * Runs in the foreground, logs to stderr, reloads its configuration on
 * SIGHUP and stops cleanly on SIGTERM/SIGINT (server.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <uv.h>

#include "config.h"
#include "cuda_probe.h"
#include "fault.h"
#include "log.h"
#include "s3.h"
#include "server.h"

#ifndef BATCHD_CONFIG_FILE
#error "define BATCHD_CONFIG_FILE (-DBATCHD_CONFIG_FILE=\"/etc/batchd/batchd.conf\")"
#endif

/* The startup line that says where the configuration came from. */
static void log_source(const bd_config *cfg)
{
	if (cfg->file)
		bd_log(LOG_NOTICE, "configuration file %s", cfg->file);
	else if (cfg->no_file)
		bd_log(LOG_NOTICE, "no configuration file (--no-config): defaults");
	else
		bd_log(LOG_NOTICE, "no configuration file (%s absent): defaults",
		       BATCHD_CONFIG_FILE);
}

/*
 * Descriptors: the soft limit up to the hard one (batchd uses no select()),
 * so that LimitNOFILE= alone sets what it may hold.
 */
static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= rl.rlim_max)
		return;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		bd_log(LOG_WARNING, "cannot raise RLIMIT_NOFILE to its hard limit %llu: %s",
		       (unsigned long long)rl.rlim_max, strerror(errno));
}

int main(int argc, char **argv)
{
	bd_cuda_state cuda;
	bd_server *srv = NULL;
	bd_config cfg;
	char err[512];
	uv_loop_t loop;
	int r;

	bd_config_init(&cfg);
	r = bd_config_from_args(&cfg, argc, argv, BATCHD_CONFIG_FILE, err, sizeof(err));
	if (r == 1) {
		bd_config_free(&cfg);
		return 0;
	}
	if (r == 0)
		r = bd_config_check_roots(&cfg, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "batchd: %s\n", err);
		bd_config_free(&cfg);
		return 2;
	}
	/* curl's global state, before any thread: remote datasets (remote.h). */
	if (bp_s3_global_init() < 0) {
		fprintf(stderr, "batchd: cannot initialize libcurl: out of memory\n");
		bd_config_free(&cfg);
		return 2;
	}
	if (bd_fault_init() < 0) {
		bd_config_free(&cfg);
		return 2;
	}
	bd_log_init(cfg.log_level);
	log_source(&cfg);
	raise_nofile();
	if (cfg.nroots == 0 && cfg.nremotes == 0)
		bd_log(LOG_WARNING, "no dataset roots configured ([datasets] root or remote, or "
		       "--root): every open will be refused");
	/*
	 * The reason alone: it says what is missing and what to do, and the
	 * "listening on" line that follows says that host sessions only are served.
	 */
	if (bd_cuda_probe(&cuda) < 0)
		bd_log(LOG_NOTICE, "%s", cuda.reason);

	if (uv_loop_init(&loop) < 0) {
		bd_log(LOG_ERR, "cannot create the event loop");
		bd_config_free(&cfg);
		return 1;
	}
	r = bd_server_new(&loop, &cfg, argc, argv, &cuda, &srv);
	if (r < 0) {
		bd_config_free(&cfg);
		/* Let the handles a half-started server closed finish closing. */
		uv_run(&loop, UV_RUN_NOWAIT);
		uv_loop_close(&loop);
		return 1;
	}
	uv_run(&loop, UV_RUN_DEFAULT);
	/*
	 * A stop that timed out leaves threads and handles behind: just exit,
	 * without exit()'s handlers (libuv's joins its thread pool, which may
	 * be the very thing stuck).
	 */
	if (uv_loop_close(&loop) == UV_EBUSY) {
		bd_log(LOG_WARNING, "stopped with work still in flight");
		fflush(NULL);
		_exit(0);
	}
	bd_server_free(srv);
	bd_log(LOG_NOTICE, "stopped");
	return 0;
}
