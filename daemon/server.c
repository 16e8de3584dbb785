/* SPDX-License-Identifier: MIT */
/*
 * server.c - accept clients, decode their messages, run their sessions
 * (see server.h and proto/PROTOCOL.md).
 */
#include <errno.h>
#include <grp.h>
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
#include "http.h"
#include "log.h"
#include "server_state.h"
#include "service.h"
#include "util.h"

#define MAX_SESSIONS_PER_CLIENT 64u
#define MAX_SESSIONS            4096u
#define MAX_CLIENTS             1024u
#define MAX_BATCH_SIZE          65536u
#define STOP_GRACE_MS           10000

/* ---- sending ----------------------------------------------------------------------- */

static void client_drop(client *c, const char *why);

static void client_poll_update(client *c);

/* One sendmsg of a whole datagram. @return 0, -EAGAIN (socket full), or -errno. */
static int send_now(int fd, const uint8_t *msg, size_t len, const int *fds, int nfds)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int) * BP_READY_FDS_GPU)];
	} ctl;
	struct iovec iov = { .iov_base = (void *)msg, .iov_len = len };
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
		n = sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	/* SOCK_SEQPACKET sends a datagram whole or not at all. */
	return (size_t)n == len ? 0 : -EIO;
}

static void outq_free(outmsg *m)
{
	for (int i = 0; i < m->nfds; i++)
		close(m->fds[i]);
	free(m);
}

/* Write queued replies while the socket takes them. */
static void outq_flush(client *c)
{
	while (c->outq) {
		outmsg *m = c->outq;
		int r = send_now(c->fd, m->data, m->len, m->fds, m->nfds);

		if (r == -EAGAIN)
			return;
		if (r < 0) {
			client_drop(c, strerror(-r));
			return;
		}
		c->outq = m->next;
		if (!c->outq)
			c->outq_tail = NULL;
		c->outq_bytes -= m->len;
		outq_free(m);
	}
}

/*
 * Send a reply (with descriptors for READY). Replies that do not fit in
 * the socket now are queued, in order, and written when it drains; a
 * client that lets more than MAX_OUTQ bytes pile up is not reading and is
 * cut off, so its queue stays bounded.
 */
static int send_msg(client *c, const uint8_t *msg, int len, const int *fds, int nfds)
{
	outmsg *m;
	int r = -EAGAIN;

	if (c->gone)
		return -EPIPE;
	if (!c->outq) {
		r = send_now(c->fd, msg, (size_t)len, fds, nfds);
		if (r == 0)
			return 0;
		if (r != -EAGAIN) {
			client_drop(c, strerror(-r));
			return -EPIPE;
		}
	}
	if (c->outq_bytes + (size_t)len > MAX_OUTQ) {
		client_drop(c, "not reading its replies");
		return -EPIPE;
	}
	m = malloc(sizeof(*m) + (size_t)len);
	if (!m) {
		client_drop(c, "out of memory queueing a reply");
		return -EPIPE;
	}
	m->next = NULL;
	m->len = (size_t)len;
	memcpy(m->data, msg, (size_t)len);
	/* Our own copies: the session's descriptors may be gone when this is sent. */
	for (m->nfds = 0; m->nfds < nfds; m->nfds++) {
		m->fds[m->nfds] = fcntl(fds[m->nfds], F_DUPFD_CLOEXEC, 0);
		if (m->fds[m->nfds] < 0) {
			outq_free(m);
			client_drop(c, "cannot duplicate descriptors for a queued reply");
			return -EPIPE;
		}
	}
	if (c->outq_tail)
		c->outq_tail->next = m;
	else
		c->outq = m;
	c->outq_tail = m;
	c->outq_bytes += m->len;
	client_poll_update(c);
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

static void notify_status(bd_server *srv);

/* ---- clients -------------------------------------------------------------------------- */

static void on_client_readable(uv_poll_t *h, int status, int events);
static void on_client_event(uv_poll_t *h, int status, int events);

/* Read while no request is in flight; write while replies are queued. */
static void client_poll_update(client *c)
{
	int events = (c->busy ? 0 : UV_READABLE) | (c->outq ? UV_WRITABLE : 0);

	if (c->gone)
		return;
	if (events)
		uv_poll_start(&c->poll, events, on_client_event);
	else
		uv_poll_stop(&c->poll);
}

static void client_free_if_done(client *c)
{
	if (!c->gone || c->busy || !c->closed_handle)
		return;
	while (c->outq) {
		outmsg *m = c->outq;

		c->outq = m->next;
		outq_free(m);
	}
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
		bd_session_detach(e->s);
	}
	for (p = &srv->clients; *p; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	srv->nclients--;
	uv_close((uv_handle_t *)&c->poll, on_client_closed);
}

/* The client broke the protocol: count it and cut it off. */
static void violation(client *c, const char *why)
{
	c->srv->totals.protocol_violations++;
	client_drop(c, why);
}

static enum bd_refusal refusal_kind(int r)
{
	switch (r) {
	case -ENOENT:
	case -ENODATA:
		return BD_REFUSED_NOT_FOUND;
	case -EACCES:
	case -EPERM:
		return BD_REFUSED_ACCESS;
	case -EINVAL:
	case -ERANGE:
		return BD_REFUSED_INVALID;
	case -ENOMEM:
		return BD_REFUSED_MEMORY;
	case -EMFILE:
	case -EUSERS:
		return BD_REFUSED_LIMIT;
	case -EBADMSG:
	case -ENOTSUP:
	case -E2BIG:
		return BD_REFUSED_CORRUPT;
	case -ENODEV:
		return BD_REFUSED_DEVICE;
	default:
		return BD_REFUSED_OTHER;
	}
}

static void vrefuse(client *c, enum bd_refusal kind, int code, const char *fmt, va_list ap)
{
	char text[BP_ERRMSG_MAX + 1];

	c->srv->totals.refused[kind]++;
	vsnprintf(text, sizeof(text), fmt, ap);
	bd_log(LOG_NOTICE, "client pid %d uid %u: open refused: %s", (int)c->pid, (unsigned)c->uid,
	       text);
	send_error(c, code, "%s", text);
}

/* Answer an OPEN with an error, counted by kind. */
__attribute__((format(printf, 3, 4)))
static void refuse(client *c, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vrefuse(c, refusal_kind(code), code, fmt, ap);
	va_end(ap);
}

/* The same for a GPU placement the daemon cannot serve (whatever the errno). */
__attribute__((format(printf, 3, 4)))
static void refuse_device(client *c, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vrefuse(c, BD_REFUSED_DEVICE, code, fmt, ap);
	va_end(ap);
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

	bd_session_info si;
	bd_hist h;

	/* Fold the session's counters into the totals before it goes. */
	bd_session_get_info(s, &si);
	srv->totals.sessions++;
	srv->totals.batches += si.delivered;
	srv->totals.bytes += si.delivered_bytes;
	srv->totals.failed += si.failed;
	srv->totals.ring_violations += si.protocol_violation;
	h.count = si.waits;
	h.sum_ns = si.wait_ns;
	memcpy(h.bucket, si.wait_hist, sizeof(h.bucket));
	bd_hist_merge(&srv->totals.wait, &h);

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
	if (!srv->stopping)
		notify_status(srv);
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
	int device;             /* the daemon's CUDA ordinal, or -1: host */
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
	client_poll_update(c);
}

static void open_work_done(uv_work_t *w, int status)
{
	open_work *ow = w->data;
	client *c = ow->c;
	bd_server *srv = c->srv;
	uint8_t out[256];
	bp_msg_ready ready;
	int fds[BP_READY_FDS_GPU], nfds;
	bd_session_quota quota;
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
		refuse(c, r, "%s", ow->err);
		goto out;
	}
	err[0] = '\0';
	ow->m.path = ow->path;
	quota = (bd_session_quota){ .uid = c->uid, .uid_limit = srv->cfg.memory_per_uid };
	for (entry *x = srv->entries; x; x = x->next) {
		bd_session_info si;

		if (x->uid != c->uid)
			continue;
		bd_session_get_info(x->s, &si);
		quota.uid_used += si.memory;
	}
	r = bd_session_new(&srv->env, srv->next_session, ow->d, &ow->m, ow->device, &quota, &s,
			   err, sizeof(err));
	if (r < 0) {
		if (ow->device >= 0 && r != -ENOMEM)
			refuse_device(c, r, "%s", err[0] ? err : strerror(-r));
		else
			refuse(c, r, "%s", err[0] ? err : strerror(-r));
		goto out;
	}
	e = calloc(1, sizeof(*e));
	if (!e) {
		bd_session_close(s, -ENOMEM);
		bd_session_detach(s);
		send_error(c, -ENOMEM, "out of memory");
		goto out;
	}
	e->s = s;
	e->c = c;
	e->uid = c->uid;
	e->pid = c->pid;
	e->next = srv->entries;
	srv->entries = e;
	srv->nsessions++;
	c->sessions++;
	srv->next_session++;

	nfds = bd_session_ready(s, &ready, fds);
	n = bp_msg_ready_encode(&ready, out, sizeof(out));
	if (n < 0) {
		bd_log(LOG_ERR, "session %" PRIu64 ": cannot encode READY: %s", ready.session,
		       strerror(-n));
		send_error(c, n, "internal error: cannot describe the session");
		e->c = NULL;
		c->sessions--;
		bd_session_close(s, n);
		bd_session_detach(s);
		goto out;
	}
	if (send_msg(c, out, n, fds, nfds) < 0) {
		/* The client never got READY: nothing of the session is in its hands. */
		bd_session_close(s, -EPIPE);
		bd_session_detach(s);
		goto out;
	}
	if (ow->device >= 0)
		snprintf(err, sizeof(err), "CUDA device %d", ow->device);
	else
		snprintf(err, sizeof(err), "host memory");
	bd_log(LOG_INFO, "session %" PRIu64 ": client pid %d uid %u opened %s (batch %u, %s, rank %u/%u, "
	       "%" PRIu64 " batches/epoch, to %s)", ready.session, (int)c->pid, (unsigned)c->uid,
	       ow->path, ow->m.batch_size, bp_shuffle_name(ow->m.shuffle), ow->m.rank, ow->m.world,
	       ready.batches_per_epoch, err);
	bd_session_start(s);
	notify_status(srv);
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
	int device = -1;

	if (bp_msg_open_decode(buf, len, &m) < 0) {
		send_error(c, -EBADMSG, "malformed OPEN message");
		violation(c, "malformed OPEN");
		return;
	}
	if (m.placement != BP_PLACEMENT_HOST) {
		char err[BP_ERRMSG_MAX];

		/* No GPU thread means no devices (bd_server_new): pick says so. */
		device = bd_cuda_pick(&srv->cuda, m.device_uuid, m.placement, err, sizeof(err));
		if (device < 0) {
			refuse_device(c, device, "%s", err);
			return;
		}
	}
	if (m.batch_size > MAX_BATCH_SIZE) {
		refuse(c, -EINVAL, "batch size %u is over the limit of %u", m.batch_size,
		       MAX_BATCH_SIZE);
		return;
	}
	if (c->sessions >= MAX_SESSIONS_PER_CLIENT || srv->nsessions + srv->opening >= MAX_SESSIONS) {
		refuse(c, -EMFILE, "too many sessions (%u per connection, %u in all)",
		       MAX_SESSIONS_PER_CLIENT, MAX_SESSIONS);
		return;
	}
	if (srv->cfg.sessions_per_uid) {
		unsigned mine = 0;

		for (entry *x = srv->entries; x; x = x->next)
			mine += x->uid == c->uid;
		/* Opens still in flight count too: each busy connection has one. */
		for (client *o = srv->clients; o; o = o->next)
			mine += o->busy && o->uid == c->uid;
		if (mine >= srv->cfg.sessions_per_uid) {
			refuse(c, -EUSERS, "uid %u already holds %u sessions, the limit per user "
			       "([limits] sessions_per_uid)", (unsigned)c->uid, mine);
			return;
		}
	}

	ow = calloc(1, sizeof(*ow));
	if (!ow) {
		send_error(c, -ENOMEM, "out of memory");
		return;
	}
	ow->w.data = ow;
	ow->c = c;
	ow->m = m;
	ow->device = device;
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
	client_poll_update(c);
	srv->opening++;
	if (uv_queue_work(srv->loop, &ow->w, open_work_run, open_work_done) < 0) {
		srv->opening--;
		c->busy = false;
		client_poll_update(c);
		goto nomem;
	}
	return;
nomem:
	open_work_free(ow);
	send_error(c, -ENOMEM, "out of memory");
}

/* ---- status and metrics ---------------------------------------------------------- */

/* Send a text reply, split into parts of at most BP_STATUS_MAX bytes. */
static void send_text(client *c, uint16_t type, const bd_text *t)
{
	bd_server *srv = c->srv;
	size_t at = 0;

	if (t->oom) {
		send_error(c, -ENOMEM, "out of memory building the reply");
		return;
	}
	do {
		size_t n = t->len - at > BP_STATUS_MAX ? BP_STATUS_MAX : t->len - at;
		bp_msg_text m = {
			.code = at + n < t->len ? BP_TEXT_MORE : 0,
			.text = t->p ? t->p + at : "",
			.text_len = (uint32_t)n,
		};
		int k = bp_msg_text_encode(type, &m, srv->buf, sizeof(srv->buf));

		if (k < 0 || send_msg(c, srv->buf, k, NULL, 0) < 0)
			return;
		at += n;
	} while (at < t->len);
}

static void handle_report(client *c, uint16_t type)
{
	bd_text t = { 0 };

	if (type == BP_MSG_STATUS)
		bd__server_status(c->srv, &t);
	else
		bd__server_metrics(c->srv, &t);
	send_text(c, type == BP_MSG_STATUS ? BP_MSG_STATUS_REPLY : BP_MSG_METRICS_REPLY, &t);
	bd_text_free(&t);
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
		violation(c, "malformed HELLO");
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
		violation(c, "malformed CLOSE");
		return;
	}
	if (!client_find_session(c->srv, c, m.session, &e)) {
		send_error(c, -ENOENT, "no session %" PRIu64 " on this connection", m.session);
		return;
	}
	e->c = NULL;
	c->sessions--;
	bd_session_close(e->s, 0);
	bd_session_detach(e->s);
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
		violation(c, "malformed message");
		return;
	}
	if (!c->hello && h.type != BP_MSG_HELLO) {
		send_error(c, -EPROTO, "%s before HELLO", bp_msg_type_name(h.type));
		violation(c, "request before HELLO");
		return;
	}
	switch (h.type) {
	case BP_MSG_HELLO:
		if (c->hello) {
			send_error(c, -EPROTO, "second HELLO");
			violation(c, "second HELLO");
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
	case BP_MSG_METRICS:
		if ((h.type == BP_MSG_STATUS ? bp_msg_status_decode(buf, len)
					     : bp_msg_metrics_decode(buf, len)) < 0) {
			send_error(c, -EBADMSG, "malformed %s message", bp_msg_type_name(h.type));
			violation(c, "malformed request");
			return;
		}
		handle_report(c, h.type);
		return;
	default:
		send_error(c, -EPROTO, "%s is not a request", bp_msg_type_name(h.type));
		violation(c, "not a request");
	}
}

static void on_client_event(uv_poll_t *h, int status, int events)
{
	client *c = h->data;

	if (status < 0) {
		client_drop(c, uv_strerror(status));
		return;
	}
	if (events & UV_WRITABLE) {
		outq_flush(c);
		if (!c->gone && !c->outq)
			client_poll_update(c);
	}
	if ((events & UV_READABLE) && !c->gone)
		on_client_readable(h, status, events);
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
			violation(c, had_fds ? "sent file descriptors" : "oversized message");
			return;
		}
		handle_message(c, srv->buf, (size_t)n);
	}
}

/* The [access] allow-lists: a peer passes by uid, by gid, or by a supplementary group. */
static bool peer_allowed(bd_server *srv, int fd, const client *c)
{
	gid_t groups[256];
	socklen_t gl = sizeof(groups);

	if (!srv->cfg.nallow_uids && !srv->cfg.nallow_gids)
		return true;
	for (size_t i = 0; i < srv->cfg.nallow_uids; i++)
		if (srv->cfg.allow_uids[i] == c->uid)
			return true;
	for (size_t i = 0; i < srv->cfg.nallow_gids; i++)
		if (srv->cfg.allow_gids[i] == c->gid)
			return true;
	if (srv->cfg.nallow_gids && getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &gl) == 0) {
		for (size_t g = 0; g < gl / sizeof(gid_t); g++)
			for (size_t i = 0; i < srv->cfg.nallow_gids; i++)
				if (srv->cfg.allow_gids[i] == groups[g])
					return true;
	}
	return false;
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
		if (!peer_allowed(srv, fd, c)) {
			srv->totals.denied++;
			send_error(c, -EACCES, "uid %u is not allowed to use this batchd ([access])",
				   (unsigned)c->uid);
			client_drop(c, "not in the [access] allow-lists");
			continue;
		}
		client_poll_update(c);
	}
}

/* ---- listening ---------------------------------------------------------------------------- */

/* A group name or number. @return 0 or -EINVAL. */
static int resolve_group(const char *g, gid_t *ret)
{
	struct group *gr = getgrnam(g);
	unsigned long gid;
	char *end;

	if (gr) {
		*ret = gr->gr_gid;
		return 0;
	}
	errno = 0;
	gid = strtoul(g, &end, 10);
	if (!*g || *end || errno || gid >= (gid_t)-1)
		return -EINVAL;
	*ret = (gid_t)gid;
	return 0;
}

/* Apply [daemon] socket_mode and socket_group to the socket file. */
static int socket_access(bd_server *srv, const char *path)
{
	const char *g = srv->cfg.socket_group;
	gid_t gid;

	if (g && resolve_group(g, &gid) < 0)
		return bd_log_ret(LOG_ERR, -EINVAL, "socket %s: group %s does not exist", path, g);
	if (g && chown(path, (uid_t)-1, gid) < 0)
		return bd_log_ret(LOG_ERR, -errno, "socket %s: chown to group %s: %s", path, g,
				  strerror(errno));
	if (chmod(path, srv->cfg.socket_mode) < 0)
		return bd_log_ret(LOG_ERR, -errno, "socket %s: chmod %o: %s", path,
				  srv->cfg.socket_mode, strerror(errno));
	return 0;
}

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
	r = socket_access(srv, path);
	if (r < 0) {
		close(fd);
		unlink(path);
		return r;
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

static void on_watchdog(uv_timer_t *t)
{
	/* Pinged from the loop: a loop stuck anywhere stops the pings. */
	bd_service_notify("WATCHDOG=1");
}

/* Once a second: end sessions whose clients stopped releasing ([session] lease_timeout). */
static void on_lease_check(uv_timer_t *t)
{
	bd_server *srv = t->data;
	uint64_t lease_ns = (uint64_t)srv->cfg.lease_timeout * 1000000000u;

	if (!lease_ns)
		return;
	for (entry *e = srv->entries; e; e = e->next)
		bd_session_lease_expired(e->s, lease_ns);
}

static void notify_status(bd_server *srv)
{
	bd_service_notify("STATUS=serving %u session%s on %s; I/O %s; CUDA %s; memory %" PRIu64
			  " of %" PRIu64 " MiB", srv->nsessions, srv->nsessions == 1 ? "" : "s",
			  srv->socket_path, bd_io_engine_name(bd_pipeline_engine(srv->pipeline)),
			  srv->cuda.devices ? "available" : "unavailable", srv->budget_used >> 20,
			  srv->cfg.memory_budget >> 20);
}

/* What a reload cannot change without a restart: say so, keep the running value. */
static void reload_fixed(bd_server *srv, bd_config *next)
{
	const bd_config *cur = &srv->cfg;

#define FIXED(cond, what) \
	do { \
		if (cond) \
			bd_log(LOG_WARNING, "reload: %s changed; it takes effect at restart", what); \
	} while (0)
	FIXED((cur->socket || next->socket) &&
	      (!cur->socket || !next->socket || strcmp(cur->socket, next->socket)), "[daemon] socket");
	FIXED(cur->io_engine != next->io_engine, "[io] engine");
	FIXED(cur->direct != next->direct, "[io] direct");
	FIXED(cur->queue_depth != next->queue_depth, "[io] queue_depth");
	FIXED(cur->io_threads != next->io_threads, "[io] threads");
	FIXED(cur->decode_threads != next->decode_threads, "[decode] threads");
	FIXED((cur->metrics_listen || next->metrics_listen) &&
	      (!cur->metrics_listen || !next->metrics_listen ||
	       strcmp(cur->metrics_listen, next->metrics_listen)), "[metrics] listen");
#undef FIXED
	/* Keep what the running daemon was built with. */
	free(next->socket);
	next->socket = cur->socket ? strdup(cur->socket) : NULL;
	free(next->metrics_listen);
	next->metrics_listen = cur->metrics_listen ? strdup(cur->metrics_listen) : NULL;
	next->io_engine = cur->io_engine;
	next->direct = cur->direct;
	next->queue_depth = cur->queue_depth;
	next->io_threads = cur->io_threads;
	next->decode_threads = cur->decode_threads;
}

/*
 * SIGHUP: read the same file and flags again. Roots, limits, access lists,
 * the memory budget, prefetch defaults and the log level apply to new
 * sessions at once; running sessions keep what they have. A bad file
 * changes nothing.
 */
static void reload(bd_server *srv)
{
	char err[512];
	bd_config next;
	int r;

	bd_service_notify("RELOADING=1");
	bd_config_init(&next);
	r = bd_config_from_args(&next, srv->argc, srv->argv, err, sizeof(err));
	if (r != 0) {
		srv->totals.reload_failures++;
		bd_log(LOG_ERR, "reload refused, the running configuration stays: %s",
		       r < 0 ? err : "unexpected --help/--version");
		bd_config_free(&next);
		bd_service_notify("READY=1");
		notify_status(srv);
		return;
	}
	if (next.socket_group && resolve_group(next.socket_group, &(gid_t){ 0 }) < 0) {
		srv->totals.reload_failures++;
		bd_log(LOG_ERR, "reload refused, the running configuration stays: [daemon] "
		       "socket_group: group %s does not exist", next.socket_group);
		bd_config_free(&next);
		bd_service_notify("READY=1");
		notify_status(srv);
		return;
	}
	reload_fixed(srv, &next);
	bd_config_free(&srv->cfg);
	srv->cfg = next;
	if (!srv->socket_activated)
		socket_access(srv, srv->socket_path);
	bd_log_set_level(srv->cfg.log_level);
	/* The block cache keeps its start-time size until a restart. */
	srv->env.budget_total = srv->cfg.memory_budget > srv->cache_budget
				? srv->cfg.memory_budget - srv->cache_budget : 0;
	srv->env.default_prefetch = srv->cfg.prefetch;
	srv->env.max_prefetch = srv->cfg.max_prefetch;
	srv->totals.reloads++;
	bd_log(LOG_NOTICE, "configuration reloaded: %zu dataset root%s, memory budget %" PRIu64
	       " MiB, log level %s", srv->cfg.nroots, srv->cfg.nroots == 1 ? "" : "s",
	       srv->cfg.memory_budget >> 20, bd_config_log_level_name(srv->cfg.log_level));
	bd_service_notify("READY=1");
	notify_status(srv);
}

static void on_sighup(uv_signal_t *h, int sig)
{
	reload(h->data);
}

static void render_metrics(void *ctx, bd_text *out)
{
	bd__server_metrics(ctx, out);
}

int bd_server_new(uv_loop_t *loop, bd_config *cfg, int argc, char **argv,
		  const bd_cuda_state *cuda, bd_server **ret)
{
	bd_server *srv = calloc(1, sizeof(*srv));
	bd_pipeline_opts po;
	uint64_t wd;
	char path[108];
	int r;

	if (!srv)
		return -ENOMEM;
	srv->loop = loop;
	srv->cfg = *cfg;
	memset(cfg, 0, sizeof(*cfg));
	srv->argc = argc;
	srv->argv = argv;
	srv->cuda = *cuda;
	srv->listen_fd = -1;
	srv->next_session = 1;
	srv->started_ns = bd_now_ns();

	if (srv->cfg.socket)
		snprintf(path, sizeof(path), "%s", srv->cfg.socket);
	else if ((r = bd_config_default_socket(path, sizeof(path))) < 0) {
		bd_log(LOG_ERR, "no socket path: set [daemon] socket, --socket, RUNTIME_DIRECTORY or "
		       "XDG_RUNTIME_DIR");
		goto fail;
	}

	/* Decoded blocks for partial-block batches: a quarter of the budget, at most 256 MiB. */
	srv->cache_budget = srv->cfg.memory_budget / 4 < (UINT64_C(256) << 20)
			    ? srv->cfg.memory_budget / 4 : (UINT64_C(256) << 20);
	po = (bd_pipeline_opts){
		.engine = srv->cfg.io_engine == BD_CFG_IO_URING ? BD_IO_URING
			  : srv->cfg.io_engine == BD_CFG_IO_PREAD ? BD_IO_PREAD : BD_IO_AUTO,
		.queue_depth = srv->cfg.queue_depth,
		.io_threads = srv->cfg.io_threads,
		.decode_threads = srv->cfg.decode_threads,
		.pool_buffers = 64,
		.pool_buffer_size = 512u << 10,
		.cache_budget = srv->cache_budget,
	};
	r = bd_pipeline_new(loop, &po, on_job_done, srv, &srv->pipeline);
	if (r < 0) {
		bd_log(LOG_ERR, "cannot start the I/O engine (%s): %s",
		       bd_config_io_engine_name(srv->cfg.io_engine), strerror(-r));
		goto fail;
	}
	if (srv->cuda.devices) {
		r = bd_gpu_new(loop, bd_session_gpu_event, &srv->gpu);
		if (r < 0) {
			snprintf(srv->cuda.reason, sizeof(srv->cuda.reason),
				 "cannot start the GPU thread: %s", strerror(-r));
			srv->cuda.devices = 0;
			srv->gpu = NULL;
		}
	}
	srv->env = (bd_session_env){
		.loop = loop,
		.pipeline = srv->pipeline,
		.gpu = srv->gpu,
		.cuda = &srv->cuda,
		.budget_used = &srv->budget_used,
		.budget_total = srv->cfg.memory_budget - srv->cache_budget,
		.default_prefetch = srv->cfg.prefetch,
		.max_prefetch = srv->cfg.max_prefetch,
		.ended = on_session_ended,
		.ctx = srv,
	};

	r = bd_service_listen_fd();
	if (r == -EINVAL) {
		bd_log(LOG_ERR, "socket activation: the passed socket is not one listening "
		       "AF_UNIX SOCK_SEQPACKET socket (ListenSequentialPacket=)");
		goto fail;
	}
	if (r >= 0) {
		struct sockaddr_un sa;
		socklen_t sl = sizeof(sa);

		srv->listen_fd = r;
		srv->socket_activated = true;
		fcntl(r, F_SETFL, fcntl(r, F_GETFL) | O_NONBLOCK);
		fcntl(r, F_SETFD, FD_CLOEXEC);
		if (getsockname(r, (struct sockaddr *)&sa, &sl) == 0 && sa.sun_path[0])
			snprintf(srv->socket_path, sizeof(srv->socket_path), "%s", sa.sun_path);
	} else if ((r = listen_on(srv, path)) < 0) {
		goto fail;
	}
	if (srv->cfg.metrics_listen) {
		r = bd_http_start(loop, srv->cfg.metrics_listen, render_metrics, srv, &srv->http);
		if (r < 0) {
			bd_log(LOG_ERR, "[metrics] listen %s: %s", srv->cfg.metrics_listen,
			       r == -EOPNOTSUPP ? "batchd was built without libmicrohttpd"
						: strerror(-r));
			goto fail;
		}
	}
	uv_poll_init(loop, &srv->listen_poll, srv->listen_fd);
	srv->listen_poll.data = srv;
	uv_poll_start(&srv->listen_poll, UV_READABLE, on_accept);
	uv_signal_init(loop, &srv->sigterm);
	uv_signal_init(loop, &srv->sigint);
	uv_signal_init(loop, &srv->sighup);
	srv->sigterm.data = srv->sigint.data = srv->sighup.data = srv;
	uv_signal_start(&srv->sigterm, on_signal, SIGTERM);
	uv_signal_start(&srv->sigint, on_signal, SIGINT);
	uv_signal_start(&srv->sighup, on_sighup, SIGHUP);
	uv_timer_init(loop, &srv->stop_timer);
	uv_timer_init(loop, &srv->watchdog);
	uv_timer_init(loop, &srv->lease);
	srv->lease.data = srv;
	uv_timer_start(&srv->lease, on_lease_check, 1000, 1000);
	wd = bd_service_watchdog_usec();
	if (wd)
		uv_timer_start(&srv->watchdog, on_watchdog, 0, wd / 2000 ? wd / 2000 : 1);
	signal(SIGPIPE, SIG_IGN);

	bd_log(LOG_NOTICE, "listening on %s%s; I/O %s (%u thread%s, queue depth %u), %u decode "
	       "threads, memory budget %" PRIu64 " MiB, %zu dataset root%s; CUDA: %s%s%s%s",
	       srv->socket_path, srv->socket_activated ? " (socket activation)" : "",
	       bd_io_engine_name(bd_pipeline_engine(srv->pipeline)), srv->cfg.io_threads,
	       srv->cfg.io_threads == 1 ? "" : "s", srv->cfg.queue_depth, srv->cfg.decode_threads,
	       srv->cfg.memory_budget >> 20, srv->cfg.nroots, srv->cfg.nroots == 1 ? "" : "s",
	       srv->cuda.devices ? "available" : "unavailable, host sessions only: ",
	       srv->cuda.devices ? "" : srv->cuda.reason,
	       srv->http ? "; metrics on http://" : "", srv->http ? srv->cfg.metrics_listen : "");
	/* Ready only now: the socket is bound, the I/O backend and CUDA state are known. */
	bd_service_notify("READY=1");
	notify_status(srv);
	*ret = srv;
	return 0;
fail:
	bd_gpu_free(srv->gpu);
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
		bd_service_notify("STOPPING=1");
		uv_poll_stop(&srv->listen_poll);
		uv_close((uv_handle_t *)&srv->listen_poll, NULL);
		close(srv->listen_fd);
		/* A socket systemd made is systemd's to remove. */
		if (!srv->socket_activated)
			unlink(srv->socket_path);
		bd_http_stop(srv->http);
		srv->http = NULL;
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
	uv_close((uv_handle_t *)&srv->watchdog, NULL);
	uv_close((uv_handle_t *)&srv->lease, NULL);
	uv_close((uv_handle_t *)&srv->sigterm, NULL);
	uv_close((uv_handle_t *)&srv->sigint, NULL);
	uv_close((uv_handle_t *)&srv->sighup, NULL);
	if (srv->pipeline) {
		bd_pipeline_free(srv->pipeline);
		srv->pipeline = NULL;
	}
	bd_gpu_free(srv->gpu);
	srv->gpu = NULL;
}

void bd_server_free(bd_server *srv)
{
	if (!srv)
		return;
	bd_dataset_cache_clear();
	bd_config_free(&srv->cfg);
	free(srv);
}
