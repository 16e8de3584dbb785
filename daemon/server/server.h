/* SPDX-License-Identifier: MIT */
/*
 * server.h - the control plane: the socket, the clients, their requests,
 * the sessions they own, the memory budget, and orderly shutdown.
 *
 * One libuv loop thread owns all of it. Opening a dataset can block on
 * disk, so it runs on libuv's thread pool while the requesting connection
 * is paused (requests are answered in order); everything else is quick.
 * A client that breaks the protocol gets an ERROR naming what it did and
 * loses its connection; its sessions end and their memory returns to the
 * budget. Nobody else notices.
 *
 * Thread rules: loop thread only.
 */
#ifndef BATCHD_DAEMON_SERVER_H
#define BATCHD_DAEMON_SERVER_H

#include <uv.h>

#include "config.h"
#include "cuda_probe.h"

typedef struct bd_server bd_server;

/*
 * Bind the socket (or take systemd's), start the pipeline threads and the
 * optional metrics listener, install SIGTERM/SIGINT (stop) and SIGHUP
 * (reload: argv is parsed again, so keep it alive), tell systemd READY=1.
 * Takes ownership of cfg. @return 0 or negative errno (logged).
 */
int bd_server_new(uv_loop_t *loop, bd_config *cfg, int argc, char **argv,
		  const bd_cuda_state *cuda, bd_server **ret);

/* Begin an orderly stop (what SIGTERM does). */
void bd_server_stop(bd_server *srv);

/* After uv_run() returns: free what is left. */
void bd_server_free(bd_server *srv);

#endif
