/* SPDX-License-Identifier: MIT */
/*
 * daemon-testlib-raw.c - a protocol client that speaks to batchd's socket
 * without libbatchclient (see daemon-testlib.h), for the tests that send
 * what libbatchclient never would and read exactly what comes back.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon-testlib.h"

int dt_raw_connect(const char *sock)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int r = -errno;

		close(fd);
		return r;
	}
	return fd;
}

int dt_raw_recv(int fd, uint8_t *buf, size_t cap, int *fds, int nfds, int *ret_nfds,
		int timeout_ms)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int) * 16)];
	} ctl;
	struct iovec iov = { .iov_base = buf, .iov_len = cap };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			     .msg_controllen = sizeof(ctl.buf) };
	struct pollfd pf = { .fd = fd, .events = POLLIN };
	int got = 0, r;
	ssize_t n;

	if (ret_nfds)
		*ret_nfds = 0;
	do
		r = poll(&pf, 1, timeout_ms);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	if (r == 0)
		return -ETIMEDOUT;
	do
		n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == ECONNRESET ? 0 : -errno;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		int *p = (int *)CMSG_DATA(cm);
		size_t k;

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			if (got < nfds)
				fds[got++] = p[i];
			else
				close(p[i]);
		}
	}
	if (ret_nfds)
		*ret_nfds = got;
	else
		for (int i = 0; i < got; i++)
			close(fds[i]);
	return (int)n;
}

int dt_raw_hello(int fd, bp_msg_hello_ok *ret)
{
	bp_msg_hello h = { .min_version = BP_PROTO_MIN_VERSION, .max_version = BP_PROTO_VERSION,
			   .name = "test-daemon raw", .name_len = 15 };
	uint8_t buf[BP_MSG_MAX];
	bp_msg_hello_ok ok;
	int n = bp_msg_hello_encode(&h, buf, sizeof(buf));

	if (n < 0)
		return n;
	if (send(fd, buf, (size_t)n, MSG_NOSIGNAL) != n)
		return -errno;
	n = dt_raw_recv(fd, buf, sizeof(buf), NULL, 0, NULL, 30000);
	if (n <= 0)
		return n ? n : -EPIPE;
	n = bp_msg_hello_ok_decode(buf, (size_t)n, &ok);
	if (n == 0 && ret) {
		*ret = ok;
		ret->server = NULL;
	}
	return n;
}

int dt_raw_open(int fd, const bp_msg_open *m, bp_msg_ready *ret, int fds[BP_READY_FDS])
{
	uint8_t buf[BP_MSG_MAX];
	bp_msg_error e;
	int n = bp_msg_open_encode(m, buf, sizeof(buf)), got;

	if (n < 0)
		return n;
	if (send(fd, buf, (size_t)n, MSG_NOSIGNAL) != n)
		return -errno;
	n = dt_raw_recv(fd, buf, sizeof(buf), fds, BP_READY_FDS, &got, 30000);
	if (n <= 0)
		return n ? n : -EPIPE;
	if (bp_msg_error_decode(buf, (size_t)n, &e) == 0) {
		for (int i = 0; i < got; i++)
			close(fds[i]);
		return e.code < 0 ? e.code : -EPROTO;
	}
	if (bp_msg_ready_decode(buf, (size_t)n, ret) < 0 || got != BP_READY_FDS) {
		for (int i = 0; i < got; i++)
			close(fds[i]);
		return -EBADMSG;
	}
	return 0;
}

int dt_raw_expect_close(int fd, int *ret_code, int timeout_ms)
{
	uint8_t buf[BP_MSG_MAX];

	*ret_code = 0;
	for (;;) {
		bp_msg_error e;
		int n = dt_raw_recv(fd, buf, sizeof(buf), NULL, 0, NULL, timeout_ms);

		if (n == -ETIMEDOUT)
			return n;
		if (n <= 0)
			return 0; /* EOF, or reset: closed either way */
		if (bp_msg_error_decode(buf, (size_t)n, &e) == 0 && !*ret_code) {
			*ret_code = e.code;
			/* Answered: a close should follow soon; don't wait long for it. */
			timeout_ms = timeout_ms < 2000 ? timeout_ms : 2000;
		}
	}
}
