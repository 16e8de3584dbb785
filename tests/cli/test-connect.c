/* SPDX-License-Identifier: MIT */
/*
 * test-connect.c - the Check suite for what bc_connect says when it fails
 * (bc_client_error(NULL), client/batchclient.h): the socket it tried, how
 * that path was chosen (the argument, $BATCHD_SOCKET, the system default,
 * $XDG_RUNTIME_DIR) and what to do, for no socket file, a socket nobody
 * listens on, a socket the user may not open, a path too long, and a
 * daemon that speaks other protocol versions (a stand-in server thread
 * here, which also answers HELLO_OK to show that success clears the
 * message). The message is per thread: another thread's failure is not
 * ours.
 *
 * A socket of mode 0 refuses only users other than root: as root that case
 * is left out, and the suite says so on stdout.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <check.h>

#include "batchclient.h"
#include "protocol.h"

static char g_dir[] = "/tmp/test-connect-XXXXXX";

static void path_in(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", g_dir, name);
	unlink(buf);
}

/* A bound SOCK_SEQPACKET socket at path, listening when listen_too. @return its fd. */
static int bound(const char *path, int listen_too)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	ck_assert_msg(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "bind %s: %s", path,
		      strerror(errno));
	if (listen_too)
		ck_assert_int_eq(listen(fd, 4), 0);
	return fd;
}

/* bc_connect(sock) fails with want; its message holds every one of words (NULL-ended). */
static void expect_refused(const char *sock, int want, const char *const *words)
{
	bc_client *c = (bc_client *)&c;
	const char *msg;

	ck_assert_int_eq(bc_connect(sock, &c), want);
	ck_assert_ptr_eq(c, (bc_client *)&c);      /* *ret untouched */
	msg = bc_client_error(NULL);
	for (; *words; words++)
		ck_assert_msg(strstr(msg, *words), "bc_client_error(NULL) lacks \"%s\": \"%s\"",
			      *words, msg);
}

START_TEST(no_socket_file)
{
	char sock[256], head[320];
	const char *const words[] = { head, "No such file or directory",
		"is batchd running? (systemctl start batchd, or batchd --socket PATH)", NULL };

	path_in(sock, sizeof(sock), "nothing-here.sock");
	snprintf(head, sizeof(head), "cannot connect to batchd at %s (the socket path given): ",
		 sock);
	expect_refused(sock, -ENOENT, words);
}
END_TEST

START_TEST(nobody_listens)
{
	char sock[256];
	const char *const words[] = { sock, "Connection refused", "is batchd running?", NULL };
	int fd;

	path_in(sock, sizeof(sock), "deaf.sock");
	fd = bound(sock, 0);
	expect_refused(sock, -ECONNREFUSED, words);
	close(fd);
}
END_TEST

START_TEST(not_allowed)
{
	char sock[256];
	const char *const words[] = { sock, "Permission denied",
		"join the batchd group (usermod -aG batchd $USER, then log in again)", NULL };
	int fd;

	path_in(sock, sizeof(sock), "mode0.sock");
	fd = bound(sock, 1);
	ck_assert_int_eq(chmod(sock, 0), 0);
	expect_refused(sock, -EACCES, words);
	close(fd);
}
END_TEST

START_TEST(from_batchd_socket)
{
	char sock[256], head[320];
	const char *const words[] = { head, "is batchd running?", NULL };

	path_in(sock, sizeof(sock), "env.sock");
	setenv("BATCHD_SOCKET", sock, 1);
	snprintf(head, sizeof(head), "at %s (from $BATCHD_SOCKET)", sock);
	expect_refused(NULL, -ENOENT, words);
}
END_TEST

/* With no $BATCHD_SOCKET: the system socket if it exists, else $XDG_RUNTIME_DIR's. */
START_TEST(from_defaults)
{
	static const char *const sys[] = { "at /run/batchd/batchd.sock (the system default: "
		"$BATCHD_SOCKET is unset)", "set $BATCHD_SOCKET to its socket", NULL };
	char head[320];
	const char *const xdg[] = { head, "is batchd running?", NULL };

	if (access("/run/batchd/batchd.sock", F_OK) == 0) {
		printf("from_defaults: /run/batchd/batchd.sock exists here; its case is left out\n");
		return;
	}
	unsetenv("BATCHD_SOCKET");
	unsetenv("XDG_RUNTIME_DIR");
	expect_refused(NULL, -ENOENT, sys);
	setenv("XDG_RUNTIME_DIR", g_dir, 1);
	snprintf(head, sizeof(head), "at %s/batchd.sock ($XDG_RUNTIME_DIR/batchd.sock: "
		 "$BATCHD_SOCKET is unset and there is no /run/batchd/batchd.sock)", g_dir);
	expect_refused(NULL, -ENOENT, xdg);
}
END_TEST

START_TEST(too_long)
{
	static const char *const words[] = { "a socket path holds at most 107 bytes", NULL };
	char sock[300];

	memset(sock, 'x', sizeof(sock) - 1);
	sock[sizeof(sock) - 1] = '\0';
	expect_refused(sock, -ENAMETOOLONG, words);
}
END_TEST

/* ---- a stand-in daemon: refuses the first HELLO, accepts the second ------------ */

static void *stand_in(void *arg)
{
	static const char why[] = "protocol versions 1..1 not supported (daemon speaks 99..99)";
	int lfd = *(int *)arg;

	for (int i = 0; i < 2; i++) {
		uint8_t buf[512];
		int fd = accept(lfd, NULL, NULL), n;

		if (fd < 0)
			return NULL;
		if (recv(fd, buf, sizeof(buf), 0) > 0) {
			bp_msg_error e = { .code = -EPROTONOSUPPORT, .message = why,
					   .message_len = sizeof(why) - 1 };
			bp_msg_hello_ok ok = { .version = BP_PROTO_VERSION, .max_sessions = 1,
					       .max_batch_size = 1, .server = "stand-in",
					       .server_len = 8 };

			n = i == 0 ? bp_msg_error_encode(&e, buf, sizeof(buf)) :
			    bp_msg_hello_ok_encode(&ok, buf, sizeof(buf));
			if (n > 0)
				send(fd, buf, (size_t)n, MSG_NOSIGNAL);
		}
		if (i == 0)
			close(fd);
		else
			shutdown(fd, SHUT_WR);
	}
	return NULL;
}

START_TEST(other_protocol_then_success)
{
	char sock[256], versions[96];
	const char *const words[] = { sock, "batchd refused: protocol versions 1..1 not supported "
		"(daemon speaks 99..99)", versions, "upgrade whichever of batchd and libbatchclient "
		"is older", NULL };
	bc_client *c = NULL;
	pthread_t t;
	int lfd;

	path_in(sock, sizeof(sock), "stand-in.sock");
	lfd = bound(sock, 1);
	ck_assert_int_eq(pthread_create(&t, NULL, stand_in, &lfd), 0);
	snprintf(versions, sizeof(versions), "this libbatchclient speaks protocol versions %u..%u",
		 BP_PROTO_MIN_VERSION, BP_PROTO_VERSION);
	expect_refused(sock, -EPROTONOSUPPORT, words);
	ck_assert_int_eq(bc_connect(sock, &c), 0);
	ck_assert_ptr_nonnull(c);
	ck_assert_str_eq(bc_client_error(NULL), "");
	bc_disconnect(c);
	pthread_join(t, NULL);
	close(lfd);
}
END_TEST

static void *fail_once(void *arg)
{
	bc_client *c;

	return (void *)(intptr_t)bc_connect((const char *)arg, &c);
}

/* A failure on another thread leaves this thread's message alone. */
START_TEST(per_thread)
{
	char sock[256];
	pthread_t t;
	void *r;

	path_in(sock, sizeof(sock), "other-thread.sock");
	ck_assert_int_eq(pthread_create(&t, NULL, fail_once, sock), 0);
	pthread_join(t, &r);
	ck_assert_int_eq((int)(intptr_t)r, -ENOENT);
	ck_assert_str_eq(bc_client_error(NULL), "");
}
END_TEST

static Suite *connect_suite(void)
{
	Suite *s = suite_create("connect");
	TCase *tc = tcase_create("messages");

	tcase_add_test(tc, no_socket_file);
	tcase_add_test(tc, nobody_listens);
	if (geteuid() != 0)
		tcase_add_test(tc, not_allowed);
	else
		printf("not_allowed left out: running as root, which a socket of mode 0 lets in\n");
	tcase_add_test(tc, from_batchd_socket);
	tcase_add_test(tc, from_defaults);
	tcase_add_test(tc, too_long);
	tcase_add_test(tc, other_protocol_then_success);
	tcase_add_test(tc, per_thread);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr;
	int failed;
	char cmd[64];

	if (!mkdtemp(g_dir)) {
		perror("mkdtemp");
		return EXIT_FAILURE;
	}
	sr = srunner_create(connect_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", g_dir);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
