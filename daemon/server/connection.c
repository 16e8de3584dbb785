/* SPDX-License-Identifier: MIT */
/*
 * connection.c - the control plane's clients and the wire to them:
 * admitting accepted connections (the [limits] on connections, the
 * [access] allow-lists), the handshake deadline, reading one request at a
 * time and dispatching it, and sending replies, queued in order when the
 * socket is full and bounded by [limits] client_queue
 * (lib/proto/PROTOCOL.md). OPEN is handed to open_request.c once decoded; a client
 * that breaks the protocol is answered with an ERROR naming what it did
 * and cut off here. Every limit is read from the configuration when it
 * applies, so a reload changes it for the next connection or request.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "batchd-build.h"
#include "log.h"
#include "server_state.h"

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
		c->srv->queued_bytes -= m->len;
		outq_free(m);
	}
}

/*
 * Send a reply (with descriptors for READY). Replies that do not fit in
 * the socket now are queued, in order, and written when it drains. The
 * queue is bounded where requests are read (over_queue), not here, so a
 * reply is never cut in the middle.
 */
int bd__client_send(client *c, const uint8_t *msg, int len, const int *fds, int nfds)
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
	c->srv->queued_bytes += m->len;
	client_poll_update(c);
	return 0;
}

/*
 * An ERROR with a printf-style message (cut at BP_ERRMSG_MAX) into out
 * (ERROR_MAX bytes), the message itself into text (BP_ERRMSG_MAX + 1
 * bytes). @return the message's length, or negative errno.
 */
#define ERROR_MAX (BP_ERRMSG_MAX + 64)
__attribute__((format(printf, 4, 0)))
static int error_encode(uint8_t *out, char *text, int code, const char *fmt, va_list ap)
{
	bp_msg_error m = { .code = code, .message = text };
	int n = vsnprintf(text, BP_ERRMSG_MAX + 1, fmt, ap);

	/* Codes outside the errno range would not encode: report them as EIO. */
	if (code >= 0 || code <= -4096)
		m.code = -EIO;
	m.message_len = n < 0 ? 0 : (uint32_t)n > BP_ERRMSG_MAX ? BP_ERRMSG_MAX : (uint32_t)n;
	return bp_msg_error_encode(&m, out, ERROR_MAX);
}

__attribute__((format(printf, 3, 4)))
void bd__client_error(client *c, int code, const char *fmt, ...)
{
	char text[BP_ERRMSG_MAX + 1];
	uint8_t out[ERROR_MAX];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = error_encode(out, text, code, fmt, ap);
	va_end(ap);
	if (n > 0)
		bd__client_send(c, out, n, NULL, 0);
}

/* ---- clients -------------------------------------------------------------------------- */

static void on_client_readable(uv_poll_t *h, int status, int events);
static void on_client_event(uv_poll_t *h, int status, int events);

/* Read while no request is in flight and the user has requests left; write while replies are queued. */
static void client_poll_update(client *c)
{
	int events = (c->busy || c->throttled ? 0 : UV_READABLE) | (c->outq ? UV_WRITABLE : 0);

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
		c->srv->queued_bytes -= m->len;
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
		/* Not 0, a CLOSE's: the session-end line tells the two apart. */
		bd_session_close(e->s, -ECONNRESET);
		bd_session_detach(e->s);
	}
	for (p = &srv->clients; *p; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	srv->nclients--;
	bd__user_put(srv, c->user);
	c->user = NULL;
	uv_close((uv_handle_t *)&c->poll, on_client_closed);
}

/* The client broke the protocol: count it and cut it off. */
static void violation(client *c, const char *why)
{
	c->srv->totals.protocol_violations++;
	client_drop(c, why);
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

void bd__client_resume(client *c)
{
	c->busy = false;
	if (c->gone) {
		client_free_if_done(c);
		return;
	}
	client_poll_update(c);
}

void bd__client_pause(client *c)
{
	c->busy = true;
	client_poll_update(c);
}

/* Tell every client the daemon is stopping, and cut it off. */
void bd__clients_goodbye(bd_server *srv)
{
	uint8_t out[128];
	bp_msg_text bye = { .code = -ESHUTDOWN, .text = "batchd is stopping", .text_len = 18 };
	int n = bp_msg_text_encode(BP_MSG_GOODBYE, &bye, out, sizeof(out));

	while (srv->clients) {
		client *c = srv->clients;

		if (n > 0)
			bd__client_send(c, out, n, NULL, 0);
		client_drop(c, NULL);
	}
}

/* ---- status and metrics replies --------------------------------------------------- */

/* Send a text reply, split into parts of at most BP_STATUS_MAX bytes. */
static void send_text(client *c, uint16_t type, const bd_text *t)
{
	bd_server *srv = c->srv;
	size_t at = 0;

	if (t->oom) {
		bd__client_error(c, -ENOMEM, "out of memory building the reply");
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

		if (k < 0 || bd__client_send(c, srv->buf, k, NULL, 0) < 0)
			return;
		at += n;
	} while (at < t->len);
}

static bool peer_admin(const bd_server *srv, const client *c);

/* A report shows the asker's own sessions, or everyone's to an admin; totals to all. */
static void handle_report(client *c, uint16_t type)
{
	bd_view v = { .all = peer_admin(c->srv, c), .mine = true, .uid = c->uid };
	bd_text t = { 0 };

	if (type == BP_MSG_STATUS)
		bd__server_status(c->srv, &v, &t);
	else
		bd__server_metrics(c->srv, &v, &t);
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
		bd__client_error(c, -EBADMSG, "malformed HELLO message");
		violation(c, "malformed HELLO");
		return;
	}
	if (h.min_version > BP_PROTO_VERSION || h.max_version < BP_PROTO_MIN_VERSION) {
		bd__client_error(c, -EPROTONOSUPPORT, "protocol versions %u..%u not supported (daemon speaks "
				 "%u..%u)", h.min_version, h.max_version, BP_PROTO_MIN_VERSION,
				 BP_PROTO_VERSION);
		client_drop(c, "no common protocol version");
		return;
	}
	ok.version = h.max_version < BP_PROTO_VERSION ? h.max_version : BP_PROTO_VERSION;
	n = bp_msg_hello_ok_encode(&ok, out, sizeof(out));
	if (n > 0 && bd__client_send(c, out, n, NULL, 0) == 0)
		c->hello = true;
}

static void handle_open(client *c, const uint8_t *buf, size_t len)
{
	bp_msg_open m;

	if (bp_msg_open_decode(buf, len, &m) < 0) {
		bd__client_error(c, -EBADMSG, "malformed OPEN message");
		violation(c, "malformed OPEN");
		return;
	}
	bd__client_open(c, &m);
}

static void handle_close(client *c, const uint8_t *buf, size_t len)
{
	bp_msg_session m;
	uint8_t out[64];
	entry *e;
	int n;

	if (bp_msg_session_decode(BP_MSG_CLOSE, buf, len, &m) < 0) {
		bd__client_error(c, -EBADMSG, "malformed CLOSE message");
		violation(c, "malformed CLOSE");
		return;
	}
	if (!client_find_session(c->srv, c, m.session, &e)) {
		bd__client_error(c, -ENOENT, "no session %" PRIu64 " on this connection", m.session);
		return;
	}
	e->c = NULL;
	c->sessions--;
	bd_session_close(e->s, 0);
	bd_session_detach(e->s);
	n = bp_msg_session_encode(BP_MSG_CLOSED, &m, out, sizeof(out));
	if (n > 0)
		bd__client_send(c, out, n, NULL, 0);
}

static void handle_message(client *c, const uint8_t *buf, size_t len)
{
	bp_msg_header h;
	int r = bp_msg_header_decode(buf, len, &h);

	if (r < 0) {
		bd__client_error(c, r, r == -EPROTONOSUPPORT ? "unsupported protocol version"
						       : "malformed message header");
		violation(c, "malformed message");
		return;
	}
	if (!c->hello && h.type != BP_MSG_HELLO) {
		bd__client_error(c, -EPROTO, "%s before HELLO", bp_msg_type_name(h.type));
		violation(c, "request before HELLO");
		return;
	}
	switch (h.type) {
	case BP_MSG_HELLO:
		if (c->hello) {
			bd__client_error(c, -EPROTO, "second HELLO");
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
			bd__client_error(c, -EBADMSG, "malformed %s message", bp_msg_type_name(h.type));
			violation(c, "malformed request");
			return;
		}
		handle_report(c, h.type);
		return;
	default:
		bd__client_error(c, -EPROTO, "%s is not a request", bp_msg_type_name(h.type));
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

/* Close the descriptors a received datagram carried. @return whether it carried any. */
static bool close_passed_fds(struct msghdr *mh)
{
	bool had = false;

	for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
			int *fds = (int *)CMSG_DATA(cm);
			size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);

			for (size_t i = 0; i < k; i++)
				close(fds[i]);
			had = true;
		}
	}
	return had;
}

/*
 * [limits] client_queue: a client that sends a request while more reply
 * bytes than that wait unread is not reading them, so it is cut off
 * instead of answered. The bound is checked when a request arrives, not
 * when a reply is queued, so one reply of any size (the status of
 * thousands of sessions) still goes out whole to a client that reads it;
 * what a client can make the daemon hold is the limit plus one reply.
 * @return true when c was cut off.
 */
static bool over_queue(client *c)
{
	bd_server *srv = c->srv;
	char why[160];

	if (c->outq_bytes <= srv->cfg.client_queue)
		return false;
	srv->totals.cut[BD_CUT_QUEUE]++;
	snprintf(why, sizeof(why), "not reading its replies: %" PRIu64 " bytes queued, over "
		 "[limits] client_queue = %" PRIu64, c->outq_bytes, srv->cfg.client_queue);
	client_drop(c, why);
	return true;
}

/* Read the throttled connections again: their users have requests anew, or wait again. */
static void on_throttle_timer(uv_timer_t *t)
{
	bd_server *srv = t->data;

	for (client *c = srv->clients; c; c = c->next)
		if (c->throttled) {
			c->throttled = false;
			client_poll_update(c);
		}
}

/*
 * [limits] requests_per_uid: c's user has no request left, so c is not
 * read until it has (the requests it sent wait in its socket).
 */
static void throttle(client *c, uint64_t wait_ns)
{
	bd_server *srv = c->srv;
	uint64_t ms = (wait_ns + 999999) / 1000000;

	c->throttled = c->waited = true;
	client_poll_update(c);
	if (!uv_is_active((uv_handle_t *)&srv->throttle))
		uv_timer_start(&srv->throttle, on_throttle_timer, ms ? ms : 1, 0);
}

static void on_client_readable(uv_poll_t *h, int status, int events)
{
	client *c = h->data;
	bd_server *srv = c->srv;
	uint64_t wait_ns;

	/* One request at a time: an OPEN pauses the connection until answered. */
	while (!c->gone && !c->busy) {
		union {
			struct cmsghdr h;
			char buf[CMSG_SPACE(sizeof(int) * 16)];
		} ctl;
		struct iovec iov = { .iov_base = srv->buf, .iov_len = sizeof(srv->buf) };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
				     .msg_controllen = sizeof(ctl.buf) };
		bool had_fds;
		ssize_t n;

		if (!bd__user_may_request(srv, c->user, &wait_ns)) {
			throttle(c, wait_ns);
			return;
		}
		n = recvmsg(c->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			client_drop(c, n == 0 ? NULL : strerror(errno));
			return;
		}
		bd__user_spend(srv, c->user);
		if (c->waited) {
			c->waited = false;
			srv->totals.throttled++;
		}
		/* Clients never send descriptors: close any, and cut the sender off. */
		had_fds = close_passed_fds(&mh);
		if (had_fds || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
			bd__client_error(c, -EBADMSG, had_fds ? "clients may not send file descriptors"
							: "message too large");
			violation(c, had_fds ? "sent file descriptors" : "oversized message");
			return;
		}
		if (over_queue(c))
			return;
		handle_message(c, srv->buf, (size_t)n);
	}
}

/* ---- admission ---------------------------------------------------------------------- */

/* The peer is in the uid list or the gid list (by its gid or a supplementary group). */
static bool peer_listed(const client *c, const uint32_t *uids, size_t nuids, const uint32_t *gids,
			size_t ngids)
{
	gid_t groups[256];
	socklen_t gl = sizeof(groups);

	for (size_t i = 0; i < nuids; i++)
		if (uids[i] == c->uid)
			return true;
	for (size_t i = 0; i < ngids; i++)
		if (gids[i] == c->gid)
			return true;
	if (ngids && getsockopt(c->fd, SOL_SOCKET, SO_PEERGROUPS, groups, &gl) == 0) {
		for (size_t g = 0; g < gl / sizeof(gid_t); g++)
			for (size_t i = 0; i < ngids; i++)
				if (gids[i] == groups[g])
					return true;
	}
	return false;
}

/* The [access] allow-lists: a peer passes by uid, by gid, or by a supplementary group. */
static bool peer_allowed(const bd_server *srv, const client *c)
{
	const bd_config *cfg = &srv->cfg;

	if (!cfg->nallow_uids && !cfg->nallow_gids)
		return true;
	return peer_listed(c, cfg->allow_uids, cfg->nallow_uids, cfg->allow_gids, cfg->nallow_gids);
}

/* Root, and the [access] admin lists, see every user's sessions in the reports. */
static bool peer_admin(const bd_server *srv, const client *c)
{
	const bd_config *cfg = &srv->cfg;

	return c->uid == 0 ||
	       peer_listed(c, cfg->admin_uids, cfg->nadmin_uids, cfg->admin_gids, cfg->nadmin_gids);
}

/*
 * Close a connection right after its last message. Shutting it down first
 * stops the peer sending more, and what it sent already (its HELLO) is
 * read and dropped: a Unix socket closed with unread data resets the
 * peer, which would then lose the ERROR before reading it.
 */
static void hang_up(int fd)
{
	shutdown(fd, SHUT_RDWR);
	for (int i = 0; i < 64; i++) {
		union {
			struct cmsghdr h;
			char buf[CMSG_SPACE(sizeof(int) * 16)];
		} ctl;
		char buf[64];
		struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
				     .msg_controllen = sizeof(ctl.buf) };

		if (recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC) <= 0)
			break;
		close_passed_fds(&mh);
	}
	close(fd);
}

/* Refuse a connection over a limit: an ERROR, a log line (at most one per 10 s), and close. */
__attribute__((format(printf, 6, 7)))
static void refuse_connection(bd_server *srv, int fd, const struct ucred *peer, enum bd_cut kind,
			      int code, const char *fmt, ...)
{
	char text[BP_ERRMSG_MAX + 1];
	uint8_t out[ERROR_MAX];
	uint64_t count;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = error_encode(out, text, code, fmt, ap);
	va_end(ap);
	/* A fresh socket has room for it: no queue, no client needed. */
	if (n > 0)
		send_now(fd, out, (size_t)n, NULL, 0);
	hang_up(fd);
	srv->totals.cut[kind]++;
	if (bd__ratelog(&srv->refused_log, 1, &count))
		bd_log(LOG_NOTICE, "client pid %d uid %u: connection refused: %s (%" PRIu64
		       " connection%s refused since the last such line)", (int)peer->pid,
		       (unsigned)peer->uid, text, count, count == 1 ? "" : "s");
}

/* [limits] max_connections and connections_per_uid. @return true when fd was refused. */
static bool over_limits(bd_server *srv, int fd, const struct ucred *peer)
{
	unsigned mine;

	if (srv->nclients >= srv->cfg.max_connections) {
		refuse_connection(srv, fd, peer, BD_CUT_MAX, -EMFILE, "batchd serves %u connections, "
				  "its limit ([limits] max_connections)", srv->nclients);
		return true;
	}
	if (!srv->cfg.connections_per_uid)
		return false;
	mine = bd__user_conns(srv, peer->uid);
	if (mine < srv->cfg.connections_per_uid)
		return false;
	refuse_connection(srv, fd, peer, BD_CUT_PER_UID, -EUSERS, "uid %u already has %u "
			  "connections, the limit per user ([limits] connections_per_uid)",
			  (unsigned)peer->uid, mine);
	return true;
}

void bd__client_accepted(bd_server *srv, int fd)
{
	/* No credentials (never on a Unix socket) make the peer nobody, not root. */
	struct ucred peer = { .pid = 0, .uid = (uid_t)-1, .gid = (gid_t)-1 };
	socklen_t cl = sizeof(peer);
	client *c;

	if (srv->stopping) {
		close(fd);
		return;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &cl) < 0)
		peer = (struct ucred){ .pid = 0, .uid = (uid_t)-1, .gid = (gid_t)-1 };
	if (over_limits(srv, fd, &peer))
		return;
	c = calloc(1, sizeof(*c));
	if (c)
		c->user = bd__user_get(srv, peer.uid);
	if (!c || !c->user || uv_poll_init(srv->loop, &c->poll, fd) < 0) {
		if (c && c->user)
			bd__user_put(srv, c->user);
		free(c);
		close(fd);
		return;
	}
	c->srv = srv;
	c->fd = fd;
	c->poll.data = c;
	c->uid = peer.uid;
	c->gid = peer.gid;
	c->pid = peer.pid;
	c->accepted_ns = bd_now_ns();
	c->next = srv->clients;
	srv->clients = c;
	srv->nclients++;
	if (!peer_allowed(srv, c)) {
		srv->totals.denied++;
		bd__client_error(c, -EACCES, "uid %u is not allowed to use this batchd ([access])",
				 (unsigned)c->uid);
		client_drop(c, "not in the [access] allow-lists");
		return;
	}
	client_poll_update(c);
	/* The timer runs for an older connection: this one's deadline comes later. */
	if (!uv_is_active((uv_handle_t *)&srv->handshake))
		bd__clients_handshake_arm(srv);
}

/* ---- the handshake deadline ----------------------------------------------------------- */

/* A connection that sent no HELLO in time: tell it why, and close it. */
static void handshake_expired(client *c)
{
	bd_server *srv = c->srv;
	unsigned limit = srv->cfg.handshake_timeout;
	uint64_t count;

	srv->totals.cut[BD_CUT_HANDSHAKE]++;
	bd__client_error(c, -ETIMEDOUT, "no HELLO within %u s of connecting ([limits] "
			 "handshake_timeout)", limit);
	/* One line per 10 s: a flood of silent connections must not flood the log. */
	if (bd__ratelog(&srv->handshake_log, 1, &count))
		bd_log(LOG_NOTICE, "client pid %d uid %u: disconnected: no HELLO within %u s "
		       "([limits] handshake_timeout; %" PRIu64 " connection%s closed so since the "
		       "last such line)", (int)c->pid, (unsigned)c->uid, limit, count,
		       count == 1 ? "" : "s");
	client_drop(c, NULL);
}

static void on_handshake_timer(uv_timer_t *t)
{
	bd_server *srv = t->data;
	uint64_t limit = (uint64_t)srv->cfg.handshake_timeout * 1000000000u, now = bd_now_ns();
	client *next;

	/* client_drop unlinks only the client it drops, so next stays valid. */
	for (client *c = srv->clients; c && limit; c = next) {
		next = c->next;
		if (!c->hello && !c->gone && now - c->accepted_ns >= limit)
			handshake_expired(c);
	}
	bd__clients_handshake_arm(srv);
}

void bd__clients_handshake_arm(bd_server *srv)
{
	uint64_t limit = (uint64_t)srv->cfg.handshake_timeout * 1000000000u;
	uint64_t oldest = UINT64_MAX, now, due;

	uv_timer_stop(&srv->handshake);
	if (!limit || srv->stopping)
		return;
	for (client *c = srv->clients; c; c = c->next)
		if (!c->hello && c->accepted_ns < oldest)
			oldest = c->accepted_ns;
	if (oldest == UINT64_MAX)
		return;
	now = bd_now_ns();
	due = oldest + limit > now ? (oldest + limit - now + 999999) / 1000000 : 0;
	srv->handshake.data = srv;
	uv_timer_start(&srv->handshake, on_handshake_timer, due, 0);
}
