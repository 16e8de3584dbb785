/* SPDX-License-Identifier: MIT */
/*
 * s3-testlib.c - the loopback HTTP server the S3 client's suites share
 * (see s3-testlib.h), linked into test-s3 and test-s3-errors.
 */
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>

#include "s3-testlib.h"
#include "s3.h"

/* Read a request's head from c into req (len bytes, NUL-terminated). */
static void read_head(int c, char *req, size_t len)
{
	ssize_t got = 0, k;

	req[0] = '\0';
	while (got < (ssize_t)len - 1 && (k = read(c, req + got, len - 1 - (size_t)got)) > 0) {
		got += k;
		req[got] = '\0';
		if (strstr(req, "\r\n\r\n"))
			break;
	}
}

pid_t s3t_server(s3t_answer_fn answer, const void *ctx, int *ret_port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM, 0);
	pid_t pid;

	ck_assert_int_ge(l, 0);
	ck_assert_int_eq(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(listen(l, 16), 0);
	ck_assert_int_eq(getsockname(l, (struct sockaddr *)&a, &alen), 0);
	*ret_port = ntohs(a.sin_port);
	if ((pid = fork()) != 0) {
		close(l);
		return pid;
	}
	for (unsigned n = 0;; n++) {
		char req[4096];
		int c = accept(l, NULL, NULL);

		if (c < 0)
			_exit(1);
		read_head(c, req, sizeof(req));
		answer(c, req, n, ctx);
		close(c);
	}
}

void s3t_server_stop(pid_t pid)
{
	int st;

	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
}

int s3t_run(Suite *s)
{
	SRunner *sr;
	int failed;

	if (bp_s3_global_init() < 0)
		return EXIT_FAILURE;
	sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
