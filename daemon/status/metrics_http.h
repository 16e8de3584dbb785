/* SPDX-License-Identifier: MIT */
/*
 * metrics_http.h - an optional loopback HTTP listener serving GET /metrics in the
 * Prometheus text format ([metrics] listen = HOST:PORT).
 *
 * libmicrohttpd does the HTTP on its own thread; for each scrape that
 * thread asks the loop thread (uv_async) to build the text, and waits for
 * it, so the metrics are always built where the state lives.
 *
 * Thread rules: bd_http_start / bd_http_stop on the loop thread.
 */
#ifndef BATCHD_DAEMON_HTTP_H
#define BATCHD_DAEMON_HTTP_H

#include <uv.h>

#include "metrics.h"
#include "util.h"

typedef struct bd_http bd_http;

/* Builds the metrics text into out; called on the loop thread. */
typedef void (*bd_http_render)(void *ctx, bd_text *out);

/*
 * Listen on listen ("A.B.C.D:PORT"). @return 0, -EOPNOTSUPP when built
 * without libmicrohttpd, -EADDRINUSE / -errno when the listener cannot start.
 */
int bd_http_start(uv_loop_t *loop, const char *listen, bd_http_render render, void *ctx,
		  bd_http **ret);

/* Stop the listener and free it (its async handle closes through the loop). NULL is fine. */
void bd_http_stop(bd_http *h);

#endif
