/* SPDX-License-Identifier: MIT */
/*
 * hostile-client.c - a tenant who tries to hurt the others, for the soak
 * (tools/test/soak.sh SOAK_HOSTILE=N) and tools/bench/bench-hostile.sh.
 *
 * A shared batchd must keep serving everyone else, charge every byte it
 * spends to someone and give it all back when the attack ends. Each mode is
 * one way a local client can try otherwise:
 *
 *   silent    connect N sockets and never say HELLO
 *   noread    HELLO, then send STATUS requests forever and never read a reply
 *   keepfd    open a session, keep its data memfd mapped (every page read),
 *             close the session, repeat up to N times: pages the daemon
 *             wrote stay alive in this process
 *   flood     sessions with the largest batch the daemon allows over a
 *             dataset of tiny blocks, consumed as fast as possible
 *   counters  a session whose control memfd gets absurd wait counters
 *
 * Usage: hostile-client -s SOCKET -m MODE -t SECONDS [-n N] [DATASET]
 *
 * It runs until SECONDS pass (or SIGTERM) and prints one line of counts,
 * "mode=... connections=N refused=N dropped=N sessions=N batches=N". Being
 * refused or disconnected is what the daemon is meant to do to it: those
 * are counted, not errors. Exit status 0, or 2 for bad usage.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "batchclient.h"
#include "cli.h"
#include "protocol.h"
#include "ring.h"

static const char usage_text[] =
	"usage: hostile-client -s SOCKET -m silent|noread|keepfd|flood|counters -t SECONDS\n"
	"                      [-n N] [DATASET]\n";

#define MAX_CONNS 4096

static struct {
	const char *sock, *mode, *dataset;
	double until;
	uint64_t n;
	uint64_t connections, refused, dropped, sessions, batches;
} g;

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static bool over(void)
{
	return stop || cli_now() >= g.until;
}

/* ---- the raw protocol --------------------------------------------------------- */

static int raw_connect(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", g.sock);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int r = -errno;

		close(fd);
		g.refused++;
		return r;
	}
	g.connections++;
	return fd;
}

/* One datagram within timeout_ms, with up to nfds descriptors. @return its length, 0 at EOF. */
static int raw_recv(int fd, uint8_t *buf, size_t cap, int *fds, int nfds, int timeout_ms)
{
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int) * BP_READY_FDS_GPU)];
	} ctl;
	struct iovec iov = { .iov_base = buf, .iov_len = cap };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
			     .msg_controllen = sizeof(ctl.b) };
	struct pollfd pf = { .fd = fd, .events = POLLIN };
	int got = 0;
	ssize_t n;

	if (poll(&pf, 1, timeout_ms) <= 0)
		return -ETIMEDOUT;
	n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	if (n < 0)
		return errno == ECONNRESET ? 0 : -errno;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);

		for (size_t i = 0; cm->cmsg_type == SCM_RIGHTS && i < k; i++) {
			int d = ((int *)CMSG_DATA(cm))[i];

			if (got < nfds)
				fds[got++] = d;
			else
				close(d);
		}
	}
	return (int)n;
}

static int raw_send(int fd, const uint8_t *buf, int len)
{
	return send(fd, buf, (size_t)len, MSG_NOSIGNAL | MSG_DONTWAIT) == len ? 0 : -errno;
}

/* Connect and say HELLO. @return the socket, or a negative errno. */
static int raw_hello(void)
{
	bp_msg_hello h = { .min_version = 1, .max_version = 1, .name = "hostile", .name_len = 7 };
	uint8_t buf[512];
	int fd = raw_connect(), n;

	if (fd < 0)
		return fd;
	n = bp_msg_hello_encode(&h, buf, sizeof(buf));
	if (n < 0 || raw_send(fd, buf, n) < 0 || raw_recv(fd, buf, sizeof(buf), NULL, 0, 5000) <= 0) {
		close(fd);
		g.dropped++;
		return -ECONNRESET;
	}
	return fd;
}

/* OPEN the dataset; on READY its descriptors into fds. @return 0 or a negative errno. */
static int raw_open(int fd, uint32_t batch, bp_msg_ready *ret, int fds[BP_READY_FDS])
{
	bp_msg_open m = { .batch_size = batch, .world = 1, .placement = BP_PLACEMENT_HOST,
			  .path = g.dataset, .path_len = (uint32_t)strlen(g.dataset) };
	bp_msg_header h;
	uint8_t buf[BP_MSG_MAX];
	int n = bp_msg_open_encode(&m, buf, sizeof(buf)), got;

	if (n < 0 || raw_send(fd, buf, n) < 0)
		return -ECONNRESET;
	for (int i = 0; i < BP_READY_FDS; i++)
		fds[i] = -1;
	got = raw_recv(fd, buf, sizeof(buf), fds, BP_READY_FDS, 30000);
	if (got <= 0 || bp_msg_header_decode(buf, (size_t)got, &h) < 0)
		return -ECONNRESET;
	if (h.type != BP_MSG_READY || bp_msg_ready_decode(buf, (size_t)got, ret) < 0 || fds[0] < 0 ||
	    fds[1] < 0) {
		for (int i = 0; i < BP_READY_FDS; i++)
			if (fds[i] >= 0)
				close(fds[i]);
		g.refused++;
		return -EPERM;
	}
	g.sessions++;
	return 0;
}

static void close_fds(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

static void idle(void)
{
	while (!over())
		cli_sleep_ms(50);
}

/* ---- the modes ------------------------------------------------------------------ */

static void run_silent(void)
{
	static int conns[MAX_CONNS];
	uint64_t open = 0;

	while (!over()) {
		/* Top up to N silent connections; the daemon may close them. */
		for (uint64_t i = 0; i < open; i++) {
			struct pollfd pf = { .fd = conns[i], .events = POLLIN };
			uint8_t b[256];

			if (poll(&pf, 1, 0) == 1 && recv(conns[i], b, sizeof(b), MSG_DONTWAIT) <= 0) {
				close(conns[i]);
				conns[i--] = conns[--open];
				g.dropped++;
			}
		}
		while (open < g.n && open < MAX_CONNS) {
			int fd = raw_connect();

			if (fd < 0)
				break;
			conns[open++] = fd;
		}
		cli_sleep_ms(100);
	}
	while (open)
		close(conns[--open]);
}

static void run_noread(void)
{
	uint8_t buf[64];
	int n = bp_msg_status_encode(buf, sizeof(buf)), fd = -1;

	while (!over()) {
		if (fd < 0 && (fd = raw_hello()) < 0) {
			cli_sleep_ms(100);
			continue;
		}
		if (raw_send(fd, buf, n) < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				cli_sleep_ms(10);
				continue;
			}
			/* Disconnected for not reading: what the daemon should do. */
			close(fd);
			fd = -1;
			g.dropped++;
		}
	}
	if (fd >= 0)
		close(fd);
}

/* Map the data memfd and read every page, so this process holds them all. */
static void *hold_pages(int fd, uint64_t size)
{
	volatile const uint8_t *p = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
	uint64_t sum = 0;

	if (p == MAP_FAILED)
		return NULL;
	for (uint64_t off = 0; off < size; off += 4096)
		sum += p[off];
	(void)sum;
	return (void *)p;
}

static void run_keepfd(void)
{
	uint64_t held = 0;

	while (!over() && held < g.n) {
		bp_msg_ready r;
		bp_msg_session cl;
		uint8_t buf[64];
		int fds[BP_READY_FDS], fd = raw_hello(), n;

		if (fd < 0 || raw_open(fd, 1, &r, fds) < 0) {
			if (fd >= 0)
				close(fd);
			cli_sleep_ms(100);
			continue;
		}
		if (hold_pages(fds[0], r.data_size))
			held++;
		cl.session = r.session;
		n = bp_msg_session_encode(BP_MSG_CLOSE, &cl, buf, sizeof(buf));
		if (n > 0)
			(void)raw_send(fd, buf, n);
		/* Keep only the mapping: the daemon's session, socket and the other fds go. */
		close_fds(fds, BP_READY_FDS);
		close(fd);
	}
	idle();
}

static void run_flood(void)
{
	bc_client *c = NULL;

	while (!over()) {
		bc_stream_opts o;
		bc_stream *s;
		bc_batch *b;
		int r;

		if (!c && bc_connect(g.sock, &c) < 0) {
			c = NULL;
			g.refused++;
			cli_sleep_ms(100);
			continue;
		}
		bc_stream_opts_init(&o);
		o.dataset = g.dataset;
		o.batch_size = (uint32_t)(g.n ? g.n : 65536);
		o.shuffle = BC_SHUFFLE_GLOBAL;
		if (bc_open(c, &o, &s) < 0) {
			g.refused++;
			bc_disconnect(c);
			c = NULL;
			cli_sleep_ms(100);
			continue;
		}
		g.sessions++;
		while (!over() && (r = bc_next(s, &b, 1000)) >= 0)
			if (r == 0) {
				g.batches++;
				bc_release(b);
			}
		bc_close(s);
	}
	bc_disconnect(c);
}

static void run_counters(void)
{
	while (!over()) {
		bp_msg_ready r;
		int fds[BP_READY_FDS], fd = raw_hello();
		volatile bp_ring_ctrl *ctrl;

		if (fd < 0 || raw_open(fd, 1, &r, fds) < 0) {
			if (fd >= 0)
				close(fd);
			cli_sleep_ms(100);
			continue;
		}
		ctrl = mmap(NULL, r.ctrl_size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[1], 0);
		for (uint64_t i = 0; ctrl != MAP_FAILED && !over(); i++) {
			/* Counters no trainer could reach, jumping back and forth. */
			ctrl->consumed = i & 1 ? UINT64_MAX : 0;
			ctrl->wait_ns = i & 1 ? UINT64_MAX / 3 : 1;
			ctrl->waits = i & 1 ? UINT64_MAX : 0;
			for (unsigned k = 0; k < BP_RING_WAIT_BUCKETS; k++)
				ctrl->wait_hist[k] = i & 1 ? UINT64_MAX / BP_RING_WAIT_BUCKETS : 0;
			cli_sleep_ms(5);
		}
		if (ctrl != MAP_FAILED)
			munmap((void *)ctrl, r.ctrl_size);
		close_fds(fds, BP_READY_FDS);
		close(fd);
	}
}

static const struct {
	const char *name;
	void (*run)(void);
	bool dataset;
	uint64_t n;   /* default N */
} modes[] = {
	{ "silent", run_silent, false, 64 },
	{ "noread", run_noread, false, 0 },
	{ "keepfd", run_keepfd, true, 4 },
	{ "flood", run_flood, true, 65536 },
	{ "counters", run_counters, true, 0 },
};

int main(int argc, char **argv)
{
	uint64_t secs = 0;
	size_t m;
	int opt;

	cli_init("hostile-client", usage_text);
	g.n = UINT64_MAX;
	while ((opt = getopt(argc, argv, "s:m:t:n:")) != -1) {
		switch (opt) {
		case 's': g.sock = optarg; break;
		case 'm': g.mode = optarg; break;
		case 't':
			if (cli_parse_u64(optarg, &secs) < 0)
				return cli_usage("-t: '%s' is not a number of seconds", optarg);
			break;
		case 'n':
			if (cli_parse_u64(optarg, &g.n) < 0)
				return cli_usage("-n: '%s' is not a number", optarg);
			break;
		default: return cli_usage(NULL);
		}
	}
	if (!g.sock || !g.mode || !secs)
		return cli_usage("-s, -m and -t are required");
	for (m = 0; m < sizeof(modes) / sizeof(modes[0]) && strcmp(modes[m].name, g.mode); m++)
		;
	if (m == sizeof(modes) / sizeof(modes[0]))
		return cli_usage("-m: '%s' is not silent, noread, keepfd, flood or counters", g.mode);
	if (modes[m].dataset && optind + 1 != argc)
		return cli_usage("-m %s needs one DATASET", g.mode);
	g.dataset = optind < argc ? argv[optind] : NULL;
	if (g.n == UINT64_MAX)
		g.n = modes[m].n;
	signal(SIGTERM, on_term);
	signal(SIGPIPE, SIG_IGN);
	g.until = cli_now() + (double)secs;
	modes[m].run();
	printf("mode=%s connections=%llu refused=%llu dropped=%llu sessions=%llu batches=%llu\n",
	       g.mode, (unsigned long long)g.connections, (unsigned long long)g.refused,
	       (unsigned long long)g.dropped, (unsigned long long)g.sessions,
	       (unsigned long long)g.batches);
	return 0;
}
