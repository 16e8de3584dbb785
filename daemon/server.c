/* SPDX-License-Identifier: MIT */
/*
 * server.c - accept clients, decode their messages, run their sessions
 * (see server.h and proto/PROTOCOL.md).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "batchd-build.h"
#include "dataset.h"
#include "log.h"
#include "pipeline.h"
#include "protocol.h"
#include "server.h"
#include "session.h"

#define MAX_SESSIONS_PER_CLIENT 64u
#define MAX_SESSIONS            4096u
#define MAX_CLIENTS             1024u
#define MAX_BATCH_SIZE          65536u
#define STOP_GRACE_MS           10000

typedef struct client client;
typedef struct entry entry;

/* A session as the server tracks it. */
struct entry {
	bd_session *s;
	client *c;               /* NULL once its client is gone */
	entry *next;
};

struct client {
	bd_server *srv;
	int fd;
	uv_poll_t poll;
	uid_t uid;
	gid_t gid;
	pid_t pid;
	bool hello, busy, gone, closed_handle;
	unsigned sessions;
	client *next;
};

struct bd_server {
	uv_loop_t *loop;
	bd_config cfg;
	bd_cuda_state cuda;
	char socket_path[108];
	int listen_fd;
	uv_poll_t listen_poll;
	uv_signal_t sigterm, sigint;
	uv_timer_t stop_timer;
	bd_pipeline *pipeline;
	bd_session_env env;
	client *clients;
	unsigned nclients;
	entry *entries;
	unsigned nsessions, opening;
	uint64_t next_session;
	uint64_t budget_used;
	bool stopping;
	uint8_t buf[BP_MSG_MAX];
};

/* ---- sending ----------------------------------------------------------------------- */

static void client_drop(client *c, const char *why);

static int send_msg(client *c, const uint8_t *msg, int len, const int *fds, int nfds)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int) * BP_READY_FDS)];
	} ctl;
	struct iovec iov = { .iov_base = (void *)msg, .iov_len = (size_t)len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n;

	if (nfds) {
		struct cmsghdr *cm;

		memset(&ctl, 0, sizeof(ctl));
		mh.msg_control = ctl.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
	}
	do
		n = sendmsg(c->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n != len) {
		/* Replies are small; a client whose socket is full is not reading. */
		client_drop(c, n < 0 ? strerror(errno) : "short send");
		return -EPIPE;
	}
	return 0;
}

__attribute__((format(printf, 3, 4)))
static void send_error(client *c, int code, const char *fmt, ...)
{
	char text[BP_ERRMSG_MAX + 1];
	uint8_t out[BP_ERRMSG_MAX + 64];
	bp_msg_error m = { .code = code, .message = text };
	va_list ap;
	int n;

	/* Codes outside the errno range would not encode: report them as EIO. */
	if (code >= 0 || code <= -4096)
		m.code = -EIO;
	va_start(ap, fmt);
	n = vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	m.message_len = n < 0 ? 0 : (uint32_t)n > BP_ERRMSG_MAX ? BP_ERRMSG_MAX : (uint32_t)n;
	n = bp_msg_error_encode(&m, out, sizeof(out));
	if (n > 0)
		send_msg(c, out, n, NULL, 0);
}

/* ---- clients -------------------------------------------------------------------------- */

static void on_client_readable(uv_poll_t *h, int status, int events);

static void client_free_if_done(client *c)
{
	if (!c->gone || c->busy || !c->closed_handle)
		return;
	free(c);
}

static void on_client_closed(uv_handle_t *h)
{
	client *c = h->data;

	close(c->fd);
	c->closed_handle = true;
	client_free_if_done(c);
}

/* Cut the connection: its sessions end, its memory goes back to the budget. */
static void client_drop(client *c, const char *why)
{
	bd_server *srv = c->srv;
	client **p;

	if (c->gone)
		return;
	c->gone = true;
	if (why)
		bd_log(LOG_NOTICE, "client pid %d uid %u: disconnected: %s", (int)c->pid,
		       (unsigned)c->uid, why);
	for (entry *e = srv->entries; e; e = e->next) {
		if (e->c != c)
			continue;
		e->c = NULL;
		bd_session_close(e->s, 0);
	}
	for (p = &srv->clients; *p; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	srv->nclients--;
	uv_close((uv_handle_t *)&c->poll, on_client_closed);
}

static client *client_find_session(bd_server *srv, client *c, uint64_t id, entry **ret)
{
	for (entry *e = srv->entries; e; e = e->next)
		if (e->c == c && bd_session_id(e->s) == id) {
			*ret = e;
			return c;
		}
	return NULL;
}

/* ---- sessions ---------------------------------------------------------------------------- */

static void on_session_ended(bd_session *s, void *ctx)
{
	bd_server *srv = ctx;

	for (entry **p = &srv->entries; *p; p = &(*p)->next) {
		entry *e = *p;

		if (e->s != s)
			continue;
		if (e->c)
			e->c->sessions--;
		*p = e->next;
		free(e);
		srv->nsessions--;
		break;
	}
	bd_log(LOG_DEBUG, "session %" PRIu64 " ended", bd_session_id(s));
	if (srv->stopping && !srv->nsessions && !srv->opening)
		bd_server_stop(srv);
}

static void on_job_done(bd_job *job, void *ctx)
{
	bd_session_job_done(job);
}

typedef struct open_work {
	uv_work_t w;
	client *c;
	bp_msg_open m;
	char *path;
	char **roots;
	size_t nroots;
	enum bd_direct_mode direct;
	bd_dataset *d;
	int r;
	char err[BP_ERRMSG_MAX];
} open_work;

static void open_work_run(uv_work_t *w)
{
	open_work *ow = w->data;

	ow->r = bd_dataset_get((const char *const *)ow->roots, ow->nroots, ow->path, ow->direct,
			       &ow->d, ow->err, sizeof(ow->err));
}

static void open_work_free(open_work *ow)
{
	for (size_t i = 0; i < ow->nroots; i++)
		free(ow->roots[i]);
	free(ow->roots);
	free(ow->path);
	free(ow);
}

static void client_resume(client *c)
{
	c->busy = false;
	if (c->gone) {
		client_free_if_done(c);
		return;
	}
	uv_poll_start(&c->poll, UV_READABLE, on_client_readable);
}

static void open_work_done(uv_work_t *w, int status)
{
	open_work *ow = w->data;
	client *c = ow->c;
	bd_server *srv = c->srv;
	uint8_t out[256];
	bp_msg_ready ready;
	int fds[BP_READY_FDS];
	bd_session *s;
	entry *e;
	char err[BP_ERRMSG_MAX];
	int n, r = ow->r;

	srv->opening--;
	if (c->gone || srv->stopping) {
		bd_dataset_put(ow->d);
		goto out;
	}
	if (r < 0) {
		bd_log(LOG_NOTICE, "client pid %d uid %u: open refused: %s", (int)c->pid,
		       (unsigned)c->uid, ow->err);
		send_error(c, r, "%s", ow->err);
		goto out;
	}
	err[0] = '\0';
	ow->m.path = ow->path;
	r = bd_session_new(&srv->env, srv->next_session, ow->d, &ow->m, &s, err, sizeof(err));
	if (r < 0) {
		bd_log(LOG_NOTICE, "client pid %d uid %u: open %s refused: %s", (int)c->pid,
		       (unsigned)c->uid, ow->path, err[0] ? err : strerror(-r));
		send_error(c, r, "%s", err[0] ? err : strerror(-r));
		goto out;
	}
	e = calloc(1, sizeof(*e));
	if (!e) {
		bd_session_close(s, -ENOMEM);
		send_error(c, -ENOMEM, "out of memory");
		goto out;
	}
	e->s = s;
	e->c = c;
	e->next = srv->entries;
	srv->entries = e;
	srv->nsessions++;
	c->sessions++;
	srv->next_session++;

	bd_session_ready(s, &ready, fds);
	n = bp_msg_ready_encode(&ready, out, sizeof(out));
	if (n < 0) {
		bd_log(LOG_ERR, "session %" PRIu64 ": cannot encode READY: %s", ready.session,
		       strerror(-n));
		send_error(c, n, "internal error: cannot describe the session");
		e->c = NULL;
		c->sessions--;
		bd_session_close(s, n);
		goto out;
	}
	if (send_msg(c, out, n, fds, BP_READY_FDS) < 0) {
		bd_session_close(s, -EPIPE);
		goto out;
	}
	bd_log(LOG_INFO, "session %" PRIu64 ": client pid %d uid %u opened %s (batch %u, %s, rank %u/%u, "
	       "%" PRIu64 " batches/epoch)", ready.session, (int)c->pid, (unsigned)c->uid, ow->path,
	       ow->m.batch_size, ow->m.shuffle == BP_SHUFFLE_NONE ? "none"
	       : ow->m.shuffle == BP_SHUFFLE_GLOBAL ? "global" : "block", ow->m.rank, ow->m.world,
	       ready.batches_per_epoch);
	bd_session_start(s);
out:
	open_work_free(ow);
	client_resume(c);
	if (srv->stopping && !srv->nsessions && !srv->opening)
		bd_server_stop(srv);
}

static void handle_open(client *c, const uint8_t *buf, size_t len)
{
	bd_server *srv = c->srv;
	open_work *ow;
	bp_msg_open m;

	if (bp_msg_open_decode(buf, len, &m) < 0) {
		send_error(c, -EBADMSG, "malformed OPEN message");
		client_drop(c, "malformed OPEN");
		return;
	}
	if (m.placement != BP_PLACEMENT_HOST) {
		if (srv->cuda.devices == 0)
			send_error(c, -ENODEV, "no CUDA device: %s", srv->cuda.reason);
		else
			send_error(c, -EOPNOTSUPP, "GPU placement (device %d) is not supported by this "
				   "daemon yet; open a host session", m.placement);
		return;
	}
	if (m.batch_size > MAX_BATCH_SIZE) {
		send_error(c, -EINVAL, "batch size %u is over the limit of %u", m.batch_size,
			   MAX_BATCH_SIZE);
		return;
	}
	if (c->sessions >= MAX_SESSIONS_PER_CLIENT || srv->nsessions + srv->opening >= MAX_SESSIONS) {
		send_error(c, -EMFILE, "too many sessions (%u per connection, %u in all)",
			   MAX_SESSIONS_PER_CLIENT, MAX_SESSIONS);
		return;
	}

	ow = calloc(1, sizeof(*ow));
	if (!ow) {
		send_error(c, -ENOMEM, "out of memory");
		return;
	}
	ow->w.data = ow;
	ow->c = c;
	ow->m = m;
	ow->direct = srv->cfg.direct == BD_CFG_DIRECT_ON ? BD_DIRECT_ON
		     : srv->cfg.direct == BD_CFG_DIRECT_OFF ? BD_DIRECT_OFF : BD_DIRECT_AUTO;
	ow->path = strndup(m.path, m.path_len);
	ow->roots = calloc(srv->cfg.nroots + 1, sizeof(*ow->roots));
	if (!ow->path || !ow->roots)
		goto nomem;
	/* A snapshot: a reload must not change the roots under a running lookup. */
	for (; ow->nroots < srv->cfg.nroots; ow->nroots++)
		if (!(ow->roots[ow->nroots] = strdup(srv->cfg.roots[ow->nroots])))
			goto nomem;
	ow->m.path = NULL;
	c->busy = true;
	uv_poll_stop(&c->poll);
	srv->opening++;
	if (uv_queue_work(srv->loop, &ow->w, open_work_run, open_work_done) < 0) {
		srv->opening--;
		c->busy = false;
		uv_poll_start(&c->poll, UV_READABLE, on_client_readable);
		goto nomem;
	}
	return;
nomem:
	open_work_free(ow);
	send_error(c, -ENOMEM, "out of memory");
}

/* ---- status ----------------------------------------------------------------------------- */

/* Append a JSON string (escaped) to out. */
static size_t json_str(char *out, size_t cap, size_t at, const char *s)
{
	if (at < cap)
		out[at] = '"';
	at++;
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		char esc[8];
		int n;

		if (ch == '"' || ch == '\\')
			n = snprintf(esc, sizeof(esc), "\\%c", ch);
		else if (ch < 0x20)
			n = snprintf(esc, sizeof(esc), "\\u%04x", ch);
		else
			n = snprintf(esc, sizeof(esc), "%c", ch);
		for (int i = 0; i < n; i++, at++)
			if (at < cap)
				out[at] = esc[i];
	}
	if (at < cap)
		out[at] = '"';
	return at + 1;
}

__attribute__((format(printf, 4, 5)))
static size_t json_fmt(char *out, size_t cap, size_t at, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(at < cap ? out + at : NULL, at < cap ? cap - at : 0, fmt, ap);
	va_end(ap);
	return at + (size_t)(n > 0 ? n : 0);
}

static void handle_status(client *c)
{
	bd_server *srv = c->srv;
	static char text[BP_STATUS_MAX];
	bd_pipeline_stats ps;
	size_t at = 0, cap = sizeof(text);
	bp_msg_text m = { 0 };
	bool first = true;
	int n;

	bd_pipeline_get_stats(srv->pipeline, &ps);
	at = json_fmt(text, cap, at, "{\"version\": \"%s\", \"io_engine\": \"%s\", "
		      "\"io_setup_flags\": %u, \"direct\": \"%s\", ", BATCHD_VERSION,
		      bd_io_engine_name(bd_pipeline_engine(srv->pipeline)),
		      bd_pipeline_setup_flags(srv->pipeline), bd_config_direct_name(srv->cfg.direct));
	at = json_fmt(text, cap, at, "\"cuda\": {\"available\": %s, \"devices\": %d, "
		      "\"driver_version\": %d, \"runtime_version\": %d, \"reason\": ",
		      srv->cuda.devices ? "true" : "false", srv->cuda.devices,
		      srv->cuda.driver_version, srv->cuda.runtime_version);
	at = json_str(text, cap, at, srv->cuda.devices ? "" : srv->cuda.reason);
	at = json_fmt(text, cap, at, "}, \"memory\": {\"budget\": %" PRIu64 ", \"used\": %" PRIu64
		      "}, \"clients\": %u, \"threads\": {\"io\": %u, \"decode\": %u}, "
		      "\"pipeline\": {\"blocks_read\": %" PRIu64 ", \"bytes_read\": %" PRIu64
		      ", \"blocks_decoded\": %" PRIu64 ", \"raw_bytes\": %" PRIu64
		      ", \"direct_decodes\": %" PRIu64 ", \"failures\": %" PRIu64 "}, "
		      "\"cache\": {\"budget\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"hits\": %" PRIu64
		      ", \"misses\": %" PRIu64 ", \"waits\": %" PRIu64 ", \"bypasses\": %" PRIu64
		      ", \"evictions\": %" PRIu64 "}, \"sessions\": [",
		      srv->cfg.memory_budget, srv->budget_used + ps.cache_bytes, srv->nclients,
		      srv->cfg.io_threads, srv->cfg.decode_threads, ps.blocks_read, ps.bytes_read,
		      ps.blocks_decoded, ps.raw_bytes, ps.direct_decodes, ps.failures, ps.cache_budget,
		      ps.cache_bytes, ps.cache_hits, ps.cache_misses, ps.cache_waits, ps.cache_bypasses,
		      ps.cache_evictions);
	for (entry *e = srv->entries; e; e = e->next) {
		bd_session_info si;

		bd_session_get_info(e->s, &si);
		at = json_fmt(text, cap, at, "%s{\"id\": %" PRIu64 ", \"dataset\": ", first ? "" : ", ",
			      si.id);
		at = json_str(text, cap, at, bd_session_dataset(e->s));
		at = json_fmt(text, cap, at, ", \"pid\": %d, \"uid\": %u, \"batch_size\": %u, "
			      "\"epoch\": %" PRIu64 ", \"batch\": %" PRIu64 ", \"published\": %" PRIu64
			      ", \"released\": %" PRIu64 ", \"failed\": %" PRIu64 ", \"bytes\": %" PRIu64
			      ", \"memory\": %" PRIu64 ", \"slots\": %u, \"inflight\": %u}",
			      e->c ? (int)e->c->pid : 0, e->c ? (unsigned)e->c->uid : 0, si.batch_size,
			      si.epoch, si.batch, si.published, si.released, si.failed, si.bytes,
			      si.memory, si.slots, si.inflight);
		first = false;
	}
	at = json_fmt(text, cap, at, "]}");
	if (at >= cap) {
		/* Too many sessions to list: say so rather than send half a document. */
		at = (size_t)snprintf(text, cap, "{\"version\": \"%s\", \"error\": \"status too large "
				      "(%u sessions)\"}", BATCHD_VERSION, srv->nsessions);
	}
	m.text = text;
	m.text_len = (uint32_t)at;
	n = bp_msg_text_encode(BP_MSG_STATUS_REPLY, &m, srv->buf, sizeof(srv->buf));
	if (n > 0)
		send_msg(c, srv->buf, n, NULL, 0);
}

/* ---- requests --------------------------------------------------------------------------- */

static void handle_hello(client *c, const uint8_t *buf, size_t len)
{
	bp_msg_hello h;
	bp_msg_hello_ok ok = {
		.version = BP_PROTO_VERSION,
		.max_sessions = MAX_SESSIONS_PER_CLIENT,
		.max_batch_size = MAX_BATCH_SIZE,
		.server = BATCHD_VERSION,
		.server_len = (uint32_t)strlen(BATCHD_VERSION),
	};
	uint8_t out[256];
	int n;

	if (bp_msg_hello_decode(buf, len, &h) < 0) {
		send_error(c, -EBADMSG, "malformed HELLO message");
		client_drop(c, "malformed HELLO");
		return;
	}
	if (h.min_version > BP_PROTO_VERSION || h.max_version < BP_PROTO_MIN_VERSION) {
		send_error(c, -EPROTONOSUPPORT, "protocol versions %u..%u not supported (daemon speaks "
			   "%u..%u)", h.min_version, h.max_version, BP_PROTO_MIN_VERSION,
			   BP_PROTO_VERSION);
		client_drop(c, "no common protocol version");
		return;
	}
	ok.version = h.max_version < BP_PROTO_VERSION ? h.max_version : BP_PROTO_VERSION;
	n = bp_msg_hello_ok_encode(&ok, out, sizeof(out));
	if (n > 0 && send_msg(c, out, n, NULL, 0) == 0)
		c->hello = true;
}

static void handle_close(client *c, const uint8_t *buf, size_t len)
{
	bp_msg_session m;
	uint8_t out[64];
	entry *e;
	int n;

	if (bp_msg_session_decode(BP_MSG_CLOSE, buf, len, &m) < 0) {
		send_error(c, -EBADMSG, "malformed CLOSE message");
		client_drop(c, "malformed CLOSE");
		return;
	}
	if (!client_find_session(c->srv, c, m.session, &e)) {
		send_error(c, -ENOENT, "no session %" PRIu64 " on this connection", m.session);
		return;
	}
	e->c = NULL;
	c->sessions--;
	bd_session_close(e->s, 0);
	n = bp_msg_session_encode(BP_MSG_CLOSED, &m, out, sizeof(out));
	if (n > 0)
		send_msg(c, out, n, NULL, 0);
}

static void handle_message(client *c, const uint8_t *buf, size_t len)
{
	bp_msg_header h;
	int r = bp_msg_header_decode(buf, len, &h);

	if (r < 0) {
		send_error(c, r, r == -EPROTONOSUPPORT ? "unsupported protocol version"
						       : "malformed message header");
		client_drop(c, "malformed message");
		return;
	}
	if (!c->hello && h.type != BP_MSG_HELLO) {
		send_error(c, -EPROTO, "%s before HELLO", bp_msg_type_name(h.type));
		client_drop(c, "request before HELLO");
		return;
	}
	switch (h.type) {
	case BP_MSG_HELLO:
		if (c->hello) {
			send_error(c, -EPROTO, "second HELLO");
			client_drop(c, "second HELLO");
			return;
		}
		handle_hello(c, buf, len);
		return;
	case BP_MSG_OPEN:
		handle_open(c, buf, len);
		return;
	case BP_MSG_CLOSE:
		handle_close(c, buf, len);
		return;
	case BP_MSG_STATUS:
		if (bp_msg_status_decode(buf, len) < 0) {
			send_error(c, -EBADMSG, "malformed STATUS message");
			client_drop(c, "malformed STATUS");
			return;
		}
		handle_status(c);
		return;
	default:
		send_error(c, -EPROTO, "%s is not a request", bp_msg_type_name(h.type));
		client_drop(c, "not a request");
	}
}

static void on_client_readable(uv_poll_t *h, int status, int events)
{
	client *c = h->data;
	bd_server *srv = c->srv;

	/* One request at a time: an OPEN pauses the connection until answered. */
	while (!c->gone && !c->busy) {
		union {
			struct cmsghdr h;
			char buf[CMSG_SPACE(sizeof(int) * 16)];
		} ctl;
		struct iovec iov = { .iov_base = srv->buf, .iov_len = sizeof(srv->buf) };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
				     .msg_controllen = sizeof(ctl.buf) };
		bool had_fds = false;
		ssize_t n = recvmsg(c->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			client_drop(c, n == 0 ? NULL : strerror(errno));
			return;
		}
		/* Clients never send descriptors: close any, and cut the sender off. */
		for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
			if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
				int *fds = (int *)CMSG_DATA(cm);
				size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);

				for (size_t i = 0; i < k; i++)
					close(fds[i]);
				had_fds = true;
			}
		}
		if (had_fds || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
			send_error(c, -EBADMSG, had_fds ? "clients may not send file descriptors"
							: "message too large");
			client_drop(c, had_fds ? "sent file descriptors" : "oversized message");
			return;
		}
		handle_message(c, srv->buf, (size_t)n);
	}
}

static void on_accept(uv_poll_t *h, int status, int events)
{
	bd_server *srv = h->data;

	for (;;) {
		struct ucred cred;
		socklen_t cl = sizeof(cred);
		client *c;
		int fd = accept4(srv->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				bd_log(LOG_WARNING, "accept: %s", strerror(errno));
			return;
		}
		if (srv->nclients >= MAX_CLIENTS || srv->stopping) {
			close(fd);
			continue;
		}
		c = calloc(1, sizeof(*c));
		if (!c || uv_poll_init(srv->loop, &c->poll, fd) < 0) {
			free(c);
			close(fd);
			continue;
		}
		c->srv = srv;
		c->fd = fd;
		c->poll.data = c;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0) {
			c->uid = cred.uid;
			c->gid = cred.gid;
			c->pid = cred.pid;
		}
		c->next = srv->clients;
		srv->clients = c;
		srv->nclients++;
		uv_poll_start(&c->poll, UV_READABLE, on_client_readable);
	}
}

/* ---- listening ---------------------------------------------------------------------------- */

static int listen_on(bd_server *srv, const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int fd, r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return bd_log_ret(LOG_ERR, -ENAMETOOLONG, "socket %s: path too long", path);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return bd_log_ret(LOG_ERR, -errno, "socket: %s", strerror(errno));
	/* A socket file left by a daemon that died: replace it if nobody answers. */
	if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode)) {
		int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

		if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			close(probe);
			close(fd);
			return bd_log_ret(LOG_ERR, -EADDRINUSE, "socket %s: another batchd is running",
					  path);
		}
		if (probe >= 0)
			close(probe);
		unlink(path);
	}
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 128) < 0) {
		r = -errno;
		close(fd);
		return bd_log_ret(LOG_ERR, r, "socket %s: %s", path, strerror(-r));
	}
	srv->listen_fd = fd;
	snprintf(srv->socket_path, sizeof(srv->socket_path), "%s", path);
	return 0;
}

static void on_signal(uv_signal_t *h, int sig)
{
	bd_server *srv = h->data;

	bd_log(LOG_NOTICE, "%s: stopping", strsignal(sig));
	bd_server_stop(srv);
}

static void on_stop_timeout(uv_timer_t *t)
{
	bd_log(LOG_WARNING, "sessions did not drain in %d ms; exiting anyway", STOP_GRACE_MS);
	uv_stop(t->loop);
}

int bd_server_new(uv_loop_t *loop, bd_config *cfg, const bd_cuda_state *cuda, bd_server **ret)
{
	bd_server *srv = calloc(1, sizeof(*srv));
	bd_pipeline_opts po;
	char path[108];
	int r;

	if (!srv)
		return -ENOMEM;
	srv->loop = loop;
	srv->cfg = *cfg;
	memset(cfg, 0, sizeof(*cfg));
	srv->cuda = *cuda;
	srv->listen_fd = -1;
	srv->next_session = 1;

	if (srv->cfg.socket)
		snprintf(path, sizeof(path), "%s", srv->cfg.socket);
	else if ((r = bd_config_default_socket(path, sizeof(path))) < 0) {
		bd_log(LOG_ERR, "no socket path: set [daemon] socket, --socket, RUNTIME_DIRECTORY or "
		       "XDG_RUNTIME_DIR");
		goto fail;
	}

	po = (bd_pipeline_opts){
		.engine = srv->cfg.io_engine == BD_CFG_IO_URING ? BD_IO_URING
			  : srv->cfg.io_engine == BD_CFG_IO_PREAD ? BD_IO_PREAD : BD_IO_AUTO,
		.queue_depth = srv->cfg.queue_depth,
		.io_threads = srv->cfg.io_threads,
		.decode_threads = srv->cfg.decode_threads,
		.pool_buffers = 64,
		.pool_buffer_size = 512u << 10,
		/* Decoded blocks for partial-block batches: a quarter of the budget, at most 256 MiB. */
		.cache_budget = srv->cfg.memory_budget / 4 < (UINT64_C(256) << 20)
				? srv->cfg.memory_budget / 4 : (UINT64_C(256) << 20),
	};
	r = bd_pipeline_new(loop, &po, on_job_done, srv, &srv->pipeline);
	if (r < 0) {
		bd_log(LOG_ERR, "cannot start the I/O engine (%s): %s",
		       bd_config_io_engine_name(srv->cfg.io_engine), strerror(-r));
		goto fail;
	}
	srv->env = (bd_session_env){
		.loop = loop,
		.pipeline = srv->pipeline,
		.budget_used = &srv->budget_used,
		.budget_total = srv->cfg.memory_budget - po.cache_budget,
		.default_prefetch = srv->cfg.prefetch,
		.max_prefetch = srv->cfg.max_prefetch,
		.ended = on_session_ended,
		.ctx = srv,
	};

	r = listen_on(srv, path);
	if (r < 0)
		goto fail;
	uv_poll_init(loop, &srv->listen_poll, srv->listen_fd);
	srv->listen_poll.data = srv;
	uv_poll_start(&srv->listen_poll, UV_READABLE, on_accept);
	uv_signal_init(loop, &srv->sigterm);
	uv_signal_init(loop, &srv->sigint);
	srv->sigterm.data = srv->sigint.data = srv;
	uv_signal_start(&srv->sigterm, on_signal, SIGTERM);
	uv_signal_start(&srv->sigint, on_signal, SIGINT);
	uv_timer_init(loop, &srv->stop_timer);
	signal(SIGPIPE, SIG_IGN);

	bd_log(LOG_NOTICE, "listening on %s; I/O %s (%u thread%s, queue depth %u), %u decode threads, "
	       "memory budget %" PRIu64 " MiB, %zu dataset root%s; CUDA: %s%s", srv->socket_path,
	       bd_io_engine_name(bd_pipeline_engine(srv->pipeline)), srv->cfg.io_threads,
	       srv->cfg.io_threads == 1 ? "" : "s", srv->cfg.queue_depth, srv->cfg.decode_threads,
	       srv->cfg.memory_budget >> 20, srv->cfg.nroots, srv->cfg.nroots == 1 ? "" : "s",
	       srv->cuda.devices ? "available" : "unavailable, host sessions only: ",
	       srv->cuda.devices ? "" : srv->cuda.reason);
	*ret = srv;
	return 0;
fail:
	if (srv->pipeline)
		bd_pipeline_free(srv->pipeline);
	bd_config_free(&srv->cfg);
	free(srv);
	return r;
}

void bd_server_stop(bd_server *srv)
{
	if (!srv->stopping) {
		uint8_t out[128];
		bp_msg_text bye = { .code = -ESHUTDOWN, .text = "batchd is stopping", .text_len = 18 };
		int n = bp_msg_text_encode(BP_MSG_GOODBYE, &bye, out, sizeof(out));

		srv->stopping = true;
		uv_poll_stop(&srv->listen_poll);
		uv_close((uv_handle_t *)&srv->listen_poll, NULL);
		close(srv->listen_fd);
		unlink(srv->socket_path);
		for (entry *e = srv->entries; e; e = e->next)
			bd_session_close(e->s, -ESHUTDOWN);
		while (srv->clients) {
			client *c = srv->clients;

			if (n > 0)
				send_msg(c, out, n, NULL, 0);
			client_drop(c, NULL);
		}
		uv_timer_start(&srv->stop_timer, on_stop_timeout, STOP_GRACE_MS, 0);
	}
	if (srv->nsessions || srv->opening)
		return; /* on_session_ended / open_work_done call again */
	/* Everything is back: close the long-lived handles so uv_run returns. */
	uv_timer_stop(&srv->stop_timer);
	uv_close((uv_handle_t *)&srv->stop_timer, NULL);
	uv_close((uv_handle_t *)&srv->sigterm, NULL);
	uv_close((uv_handle_t *)&srv->sigint, NULL);
	if (srv->pipeline) {
		bd_pipeline_free(srv->pipeline);
		srv->pipeline = NULL;
	}
}

void bd_server_free(bd_server *srv)
{
	if (!srv)
		return;
	bd_dataset_cache_clear();
	bd_config_free(&srv->cfg);
	free(srv);
}
