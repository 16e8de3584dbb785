/* SPDX-License-Identifier: MIT */
/*
 * metrics_http.c - the /metrics HTTP listener (see metrics_http.h).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "batchd-build.h"
#include "metrics_http.h"
#include "util.h"

#if BATCHD_HAVE_MICROHTTPD
#include <microhttpd.h>

#define RENDER_TIMEOUT_S 5

struct bd_http {
	struct MHD_Daemon *mhd;
	uv_async_t async;
	bd_http_render render;
	void *ctx;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t asked, done;    /* render generations, guarded by mu */
	bd_text text;            /* guarded by mu */
	bool closing;            /* guarded by mu */
};

static void on_async(uv_async_t *a)
{
	bd_http *h = a->data;
	bd_text t = { 0 };

	h->render(h->ctx, &t);
	pthread_mutex_lock(&h->mu);
	bd_text_free(&h->text);
	h->text = t;
	h->done = h->asked;
	pthread_cond_broadcast(&h->cv);
	pthread_mutex_unlock(&h->mu);
}

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned code, const char *type,
			     const char *body, size_t len)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body,
								 MHD_RESPMEM_MUST_COPY);
	enum MHD_Result ret;

	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	ret = MHD_queue_response(conn, code, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_size, void **state)
{
	static const char plain[] = "text/plain; charset=utf-8";
	bd_http *h = cls;
	struct timespec deadline;
	enum MHD_Result ret;
	uint64_t gen;

	if (strcmp(method, "GET") && strcmp(method, "HEAD"))
		return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, plain, "GET only\n", 9);
	if (strcmp(url, "/metrics"))
		return reply(conn, MHD_HTTP_NOT_FOUND, plain, "see /metrics\n", 13);

	pthread_mutex_lock(&h->mu);
	gen = ++h->asked;
	pthread_mutex_unlock(&h->mu);
	uv_async_send(&h->async);

	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += RENDER_TIMEOUT_S;
	pthread_mutex_lock(&h->mu);
	while (h->done < gen && !h->closing &&
	       pthread_cond_timedwait(&h->cv, &h->mu, &deadline) == 0)
		;
	if (h->done < gen || h->text.oom)
		ret = reply(conn, MHD_HTTP_SERVICE_UNAVAILABLE, plain, "batchd is busy or stopping\n", 27);
	else
		ret = reply(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8",
			    h->text.p ? h->text.p : "", h->text.len);
	pthread_mutex_unlock(&h->mu);
	return ret;
}

int bd_http_start(uv_loop_t *loop, const char *listen, bd_http_render render, void *ctx,
		  bd_http **ret)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	const char *colon = strrchr(listen, ':');
	char host[64];
	bd_http *h;

	if (!colon || (size_t)(colon - listen) >= sizeof(host))
		return -EINVAL;
	memcpy(host, listen, (size_t)(colon - listen));
	host[colon - listen] = '\0';
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
		return -EINVAL;
	sa.sin_port = htons((uint16_t)atoi(colon + 1));

	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->render = render;
	h->ctx = ctx;
	pthread_mutex_init(&h->mu, NULL);
	pthread_cond_init(&h->cv, NULL);
	if (uv_async_init(loop, &h->async, on_async) < 0) {
		free(h);
		return -ENOMEM;
	}
	h->async.data = h;
	h->mhd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, ntohs(sa.sin_port), NULL, NULL,
				  on_request, h, MHD_OPTION_SOCK_ADDR, &sa,
				  MHD_OPTION_CONNECTION_LIMIT, 16u,
				  MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
	if (!h->mhd) {
		int err = errno ? -errno : -EADDRINUSE;

		bd_http_stop(h);
		return err;
	}
	*ret = h;
	return 0;
}

static void on_closed(uv_handle_t *handle)
{
	bd_http *h = handle->data;

	bd_text_free(&h->text);
	pthread_cond_destroy(&h->cv);
	pthread_mutex_destroy(&h->mu);
	free(h);
}

void bd_http_stop(bd_http *h)
{
	if (!h)
		return;
	pthread_mutex_lock(&h->mu);
	h->closing = true;
	pthread_cond_broadcast(&h->cv);
	pthread_mutex_unlock(&h->mu);
	/* Joins libmicrohttpd's thread: no request handler runs after this. */
	if (h->mhd)
		MHD_stop_daemon(h->mhd);
	uv_close((uv_handle_t *)&h->async, on_closed);
}
#else
int bd_http_start(uv_loop_t *loop, const char *listen, bd_http_render render, void *ctx,
		  bd_http **ret)
{
	(void)loop, (void)listen, (void)render, (void)ctx, (void)ret;
	return -EOPNOTSUPP;
}

void bd_http_stop(bd_http *h)
{
	(void)h;
}
#endif
