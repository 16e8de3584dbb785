/* SPDX-License-Identifier: MIT */
/*
 * connection.c - libbatchclient's connection to batchd: the socket's
 * messages (file descriptors included, truncation checked), finding the
 * socket and saying why a connect failed, HELLO, and the requests that
 * answer text (status, metrics). Streams are in batchclient.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "batchclient.h"
#include "client_priv.h"
#include "protocol.h"
#include "ring.h"
#include "socket_path.h"

#define REPLY_TIMEOUT_S 120   /* opening a big dataset may read a large index */

/* ---- socket ---------------------------------------------------------------------- */

int bc__send_all(bc_client *c, const uint8_t *msg, int len)
{
	ssize_t n;

	do
		n = send(c->fd, msg, (size_t)len, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n != len) {
		c->dead = true;
		return -EPIPE;
	}
	return 0;
}

void bc__close_fds(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		close(fds[i]);
}

/* Keep up to nfds of the descriptors mh carries in fds and close the rest. @return how many kept. */
static int take_fds(struct msghdr *mh, int *fds, int nfds)
{
	int got = 0;

	for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
		int *p = (int *)CMSG_DATA(cm);
		int k;

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		k = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (int i = 0; i < k; i++) {
			if (got < nfds)
				fds[got++] = p[i];
			else
				close(p[i]);
		}
	}
	return got;
}

/*
 * Receive one reply into c->buf, with up to nfds of the descriptors it
 * carries in fds (*ret_nfds of them, the caller's; the rest are closed).
 * A GOODBYE in its place marks the client dead and fails the call, its
 * text kept in c->err.
 * @return the message length; -EMFILE when the kernel dropped
 * descriptors at our limit (c->last_len holds the length of what came);
 * -ETIMEDOUT when nothing came within REPLY_TIMEOUT_S, -EPIPE, -EBADMSG
 * or -ESHUTDOWN (GOODBYE), each with the client dead.
 */
int bc__recv_reply(bc_client *c, int *fds, int nfds, int *ret_nfds)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int) * BP_READY_FDS_GPU)];
	} ctl;
	struct iovec iov = { .iov_base = c->buf, .iov_len = sizeof(c->buf) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			     .msg_controllen = sizeof(ctl.buf) };
	bp_msg_header h;
	int got;
	ssize_t n;

	do
		n = recvmsg(c->fd, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
		/* The answer may still come, and would be taken for the next request's. */
		c->dead = true;
		return -ETIMEDOUT;
	}
	if (n <= 0) {
		c->dead = true;
		return -EPIPE;
	}
	c->last_len = (int)n;
	got = take_fds(&mh, fds, nfds);
	/* At our fd limit the kernel drops descriptors and says so. */
	if (mh.msg_flags & MSG_CTRUNC) {
		bc__close_fds(fds, got);
		return -EMFILE;
	}
	if (bp_msg_header_decode(c->buf, (size_t)n, &h) < 0) {
		bc__close_fds(fds, got);
		c->dead = true;
		return -EBADMSG;
	}
	if (h.type == BP_MSG_GOODBYE) {
		bp_msg_text t;

		if (bp_msg_text_decode(BP_MSG_GOODBYE, c->buf, (size_t)n, &t) == 0)
			snprintf(c->err, sizeof(c->err), "%.*s", (int)t.text_len, t.text);
		bc__close_fds(fds, got);
		c->dead = true;
		return -ESHUTDOWN;
	}
	*ret_nfds = got;
	return (int)n;
}

int bc__reply_timeout_s(const bc_client *c)
{
	struct timeval tv = { .tv_sec = REPLY_TIMEOUT_S };
	socklen_t len = sizeof(tv);

	if (getsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &len) < 0)
		return REPLY_TIMEOUT_S;
	return (int)tv.tv_sec + (tv.tv_usec >= 500000);
}

/* If buf holds an ERROR, keep its message and return its code; else 0. */
int bc__reply_error(bc_client *c, const uint8_t *buf, int len)
{
	bp_msg_error e;

	if (bp_msg_error_decode(buf, (size_t)len, &e) < 0)
		return 0;
	snprintf(c->err, sizeof(c->err), "%.*s", (int)e.message_len, e.message);
	return e.code;
}

/* ---- connection ------------------------------------------------------------------- */

/* How bc_connect chose its socket, said in its error. */
enum socket_source { SOCK_ARG, SOCK_ENV, SOCK_RUN, SOCK_XDG };

static const char *const source_names[] = {
	[SOCK_ARG] = "the socket path given",
	[SOCK_ENV] = "from $BATCHD_SOCKET",
	[SOCK_RUN] = "the system default: $BATCHD_SOCKET is unset",
	[SOCK_XDG] = "$XDG_RUNTIME_DIR/batchd.sock: $BATCHD_SOCKET is unset and there is no "
		     "/run/batchd/batchd.sock",
};

/*
 * Why the last bc_connect on this thread failed: there is no client to hold
 * it, and a thread's own slot keeps concurrent connects from mixing words.
 */
static _Thread_local char t_connect_err[BP_ERRMSG_MAX + 512];

/* Write the default socket's path to buf. @return its enum socket_source, or -ENAMETOOLONG. */
static int default_socket(char *buf, size_t len)
{
	const char *env = getenv("BATCHD_SOCKET");
	int r;

	if (env && *env)
		return snprintf(buf, len, "%s", env) < (int)len ? SOCK_ENV : -ENAMETOOLONG;
	r = bp_socket_default(buf, len);
	return r < 0 ? r : r == BP_SOCKET_IS_SYSTEM ? SOCK_RUN : SOCK_XDG;
}

/* What to do about connect error r; daemon: the daemon's refusal, "" if it said none. */
static const char *connect_fix(int r, const char *daemon, char *buf, size_t len)
{
	switch (-r) {
	case ENOENT:
	case ECONNREFUSED:
		return "is batchd running? (systemctl start batchd, or batchd --socket PATH)";
	case EACCES:
	case EPERM:
		if (*daemon)
			return "ask its administrator to allow you in batchd.conf [access]";
		return "join the batchd group (usermod -aG batchd $USER, then log in again)";
	case EPROTONOSUPPORT:
		snprintf(buf, len, "this libbatchclient speaks protocol versions %u..%u: upgrade "
			 "whichever of batchd and libbatchclient is older", BP_PROTO_MIN_VERSION,
			 BP_PROTO_VERSION);
		return buf;
	case ENAMETOOLONG:
		snprintf(buf, len, "a socket path holds at most %zu bytes: use a shorter one",
			 sizeof(((struct sockaddr_un *)NULL)->sun_path) - 1);
		return buf;
	case ETIMEDOUT:
	case EAGAIN:
		snprintf(buf, len, "batchd did not answer within %d s: is it stuck? (batchctl "
			 "status, journalctl -u batchd)", REPLY_TIMEOUT_S);
		return buf;
	case ENOTSOCK:
	case EBADMSG:
		return "that path is not batchd's socket: check --socket or $BATCHD_SOCKET";
	case ESHUTDOWN:
	case EPIPE:
		return "batchd hung up before answering: its log says why (journalctl -u batchd)";
	default:
		return NULL;
	}
}

/* Keep why connecting to path (chosen by src) failed with r. @return r. */
static int connect_failed(int r, const char *path, enum socket_source src, const char *daemon)
{
	char buf[160];
	const char *fix = connect_fix(r, daemon, buf, sizeof(buf));

	snprintf(t_connect_err, sizeof(t_connect_err), "cannot connect to batchd at %s (%s): "
		 "%s%s%s%s%s", path, source_names[src], *daemon ? "batchd refused: " : "",
		 *daemon ? daemon : strerror(-r), fix ? ": " : "", fix ? fix : "",
		 src == SOCK_RUN && (-r == ENOENT || -r == ECONNREFUSED) ?
		 "; a batchd of your own: set $BATCHD_SOCKET to its socket" : "");
	return r;
}

void bc_stream_opts_init(bc_stream_opts *o)
{
	if (!o)
		return;
	memset(o, 0, sizeof(*o));
	o->struct_size = sizeof(*o);
	o->batch_size = 1;
	o->shuffle = BC_SHUFFLE_GLOBAL;
	o->world = 1;
	o->device = BC_HOST;
	o->batch_stride = 1;
}

/* Connect c's socket to path and say HELLO. @return 0 or a negative errno (reason in c->err). */
static int hello(bc_client *c, const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = REPLY_TIMEOUT_S };
	bp_msg_hello h = { .min_version = BP_PROTO_MIN_VERSION, .max_version = BP_PROTO_VERSION,
			   .name = "libbatchclient", .name_len = 14 };
	bp_msg_hello_ok ok;
	int n, nfds, r;

	memcpy(sa.sun_path, path, strlen(path) + 1);
	if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -errno;
	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));

	n = bp_msg_hello_encode(&h, c->buf, sizeof(c->buf));
	if (n < 0)
		return n;
	/*
	 * A daemon that refuses us ([access]) answers ERROR and hangs up, maybe
	 * before our HELLO went out: read its answer either way.
	 */
	r = bc__send_all(c, c->buf, n);
	c->dead = false;
	n = bc__recv_reply(c, NULL, 0, &nfds);
	if (n < 0 && r < 0)
		n = r;
	if (n < 0)
		return n;
	if ((r = bc__reply_error(c, c->buf, n)) < 0)
		return r;
	if (bp_msg_hello_ok_decode(c->buf, (size_t)n, &ok) < 0)
		return -EBADMSG;
	return 0;
}

int bc_connect(const char *socket_path, bc_client **ret)
{
	char path[sizeof(((struct sockaddr_un *)NULL)->sun_path)];
	enum socket_source src = SOCK_ARG;
	bc_client *c;
	int r;

	t_connect_err[0] = '\0';
	if (!ret)
		return -EINVAL;
	if (socket_path) {
		if (strlen(socket_path) >= sizeof(path))
			return connect_failed(-ENAMETOOLONG, socket_path, src, "");
		strcpy(path, socket_path);
	} else if ((r = default_socket(path, sizeof(path))) < 0) {
		const char *env = getenv("BATCHD_SOCKET");

		return connect_failed(r, env && *env ? env : "$XDG_RUNTIME_DIR/batchd.sock",
				      env && *env ? SOCK_ENV : SOCK_XDG, "");
	} else {
		src = (enum socket_source)r;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return connect_failed(-ENOMEM, path, src, "");
	pthread_mutex_init(&c->mu, NULL);
	c->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	r = c->fd < 0 ? -errno : hello(c, path);
	if (r < 0) {
		connect_failed(r, path, src, c->err);
		bc_disconnect(c);
		return r;
	}
	*ret = c;
	return 0;
}

void bc_disconnect(bc_client *c)
{
	if (!c)
		return;
	if (c->fd >= 0)
		close(c->fd);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

const char *bc_client_error(const bc_client *c)
{
	return c ? c->err : t_connect_err;
}

/*
 * Send an empty request and collect its text reply, which may come in
 * several parts (all but the last marked BP_TEXT_MORE).
 */
static int request_text(bc_client *c, int (*encode)(uint8_t *, size_t), uint16_t reply_type,
			char **ret)
{
	char *text = NULL;
	size_t len = 0;
	bp_msg_text t;
	int n, nfds, r;

	if (!c || !ret)
		return -EINVAL;
	pthread_mutex_lock(&c->mu);
	if (c->dead) {
		r = -EPIPE;
		goto out;
	}
	n = encode(c->buf, sizeof(c->buf));
	if (n < 0 || (r = bc__send_all(c, c->buf, n)) < 0) {
		r = n < 0 ? n : r;
		goto out;
	}
	do {
		char *grown;

		n = bc__recv_reply(c, NULL, 0, &nfds);
		if (n < 0) {
			r = n;
			goto out;
		}
		if ((r = bc__reply_error(c, c->buf, n)) < 0)
			goto out;
		if (bp_msg_text_decode(reply_type, c->buf, (size_t)n, &t) < 0) {
			r = -EBADMSG;
			goto out;
		}
		grown = realloc(text, len + t.text_len + 1);
		if (!grown) {
			r = -ENOMEM;
			goto out;
		}
		text = grown;
		memcpy(text + len, t.text, t.text_len);
		len += t.text_len;
		text[len] = '\0';
	} while (t.code == BP_TEXT_MORE);
	*ret = text;
	text = NULL;
	r = 0;
out:
	pthread_mutex_unlock(&c->mu);
	free(text);
	return r;
}

int bc_status(bc_client *c, char **ret_json)
{
	return request_text(c, bp_msg_status_encode, BP_MSG_STATUS_REPLY, ret_json);
}

int bc_metrics(bc_client *c, char **ret_text)
{
	return request_text(c, bp_msg_metrics_encode, BP_MSG_METRICS_REPLY, ret_text);
}

