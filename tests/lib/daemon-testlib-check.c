/* SPDX-License-Identifier: MIT */
/*
 * daemon-testlib-check.c - the Check suites' side of daemon-testlib.h:
 * main(), fixtures, and the calls that fail the test (with the daemon's
 * log) instead of returning an error: connect, open, consume, status.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include "daemon-testlib.h"
#include "json_path.h"
#include "sampler.h"

dt_daemon *dt_suite_daemon;
static char E[2048];             /* why a dt_* call failed */


int dt_check_main(dt_daemon *d, Suite *(*make)(void))
{
	SRunner *sr;
	int failed;

	dt_suite_daemon = d;
	signal(SIGPIPE, SIG_IGN);
	/* Made here, in the parent, so it is removed even when a forked test fails. */
	if (dt_global_setup() < 0) {
		dt_global_teardown();
		return EXIT_FAILURE;
	}
	sr = srunner_create(make());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	dt_global_teardown();
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

TCase *dt_tcase(Suite *s, const char *name, void (*setup)(void))
{
	TCase *tc = tcase_create(name);

	tcase_add_checked_fixture(tc, setup, dt_teardown);
	suite_add_tcase(s, tc);
	return tc;
}

void dt_setup_dir(void)
{
	ck_assert_int_eq(dt_daemon_init(dt_suite_daemon), 0);
}

void dt_conf_write(const char *extra)
{
	dt_daemon *d = dt_suite_daemon;
	static char conf[sizeof(d->dir) + 16];
	FILE *f;

	snprintf(conf, sizeof(conf), "%s/batchd.conf", d->dir);
	f = fopen(conf, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "[daemon]\nsocket = %s\nlog_level = info\n[datasets]\nroot = %s\n%s", d->sock,
		d->root, extra);
	fclose(f);
	d->config = conf;
}

void dt_conf_start(const char *extra)
{
	dt_setup_dir();
	dt_conf_write(extra);
	ck_assert_msg(dt_daemon_start(dt_suite_daemon) == 0, "batchd did not start");
}

void dt_teardown(void)
{
	if (dt_suite_daemon->pid)
		ck_assert_msg(dt_daemon_stop(dt_suite_daemon) == 0,
			      "batchd did not stop cleanly on SIGTERM");
	dt_rm_rf(dt_suite_daemon->dir);
}

bc_client *dt_connect_ok(void)
{
	bc_client *c = NULL;
	int r = bc_connect(dt_suite_daemon->sock, &c);

	dt_expect(r == 0, "bc_connect %s: %s (%d)", dt_suite_daemon->sock, bc_strerror(r), r);
	return c;
}

bc_stream *dt_open_ok(bc_client *c, const bc_stream_opts *o)
{
	bc_stream *s = NULL;
	int r = bc_open(c, o, &s);

	dt_expect(r == 0, "bc_open %s: %s (%d): %s", o->dataset, bc_strerror(r), r,
		  bc_client_error(c));
	return s;
}

void dt_ref_ok(dt_ref *ref, const char *name)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", dt_g.packs, name);
	ck_assert_msg(dt_ref_open(ref, path) == 0, "reference open %s", path);
}

void dt_consume_ok(bc_stream *s, dt_ref *ref, size_t batches, unsigned flags, dt_run *run,
		   const char *what)
{
	int r = dt_consume(s, ref, batches, flags, WAIT_MS, run, E, sizeof(E));

	dt_expect(r == 0, "%s: %s", what, E);
}

char *dt_status_ok(void)
{
	char *json = NULL;
	int r = dt_status(dt_suite_daemon->sock, &json);

	dt_expect(r == 0, "bc_status: %s (%d)", bc_strerror(r), r);
	return json;
}

const char *dt_open_fails(bc_client *c, const bc_stream_opts *o, int want)
{
	bc_stream *s = NULL;
	int r = bc_open(c, o, &s);

	if (r == 0)
		bc_close(s);
	dt_expect(r == want, "bc_open %s: %s (%d), expected %s (%d): \"%s\"", o->dataset,
		  bc_strerror(r), r, bc_strerror(want), want, r ? bc_client_error(c) : "");
	dt_expect(bc_client_error(c)[0], "bc_open %s refused (%d) without a message", o->dataset, r);
	return bc_client_error(c);
}

const char *dt_open_refused(bc_client *c, const char *path, int code, const char *mention)
{
	bc_stream_opts o;
	const char *msg;

	dt_opts(&o, path, 4, BC_SHUFFLE_NONE, 0);
	msg = dt_open_fails(c, &o, code);
	dt_expect(!mention || strstr(msg, mention), "open %s: the message \"%s\" does not mention "
		  "\"%s\"", path, msg, mention);
	return msg;
}

json_object *dt_status_json_ok(void)
{
	char *text = dt_status_ok();
	json_object *o = json_tokener_parse(text);

	dt_expect(o && json_object_is_type(o, json_type_object),
		  "status is not a JSON object: %.300s", text);
	free(text);
	return o;
}

uint64_t dt_ju64(json_object *o, const char *path)
{
	json_object *v = json_path_get(o, path);

	dt_expect(v && json_object_is_type(v, json_type_int), "status JSON: no integer \"%s\" in %s",
		  path, json_object_to_json_string(o));
	return (uint64_t)json_object_get_int64(v);
}

uint64_t dt_session_u64(const char *dataset, const char *key)
{
	json_object *st = dt_status_json_ok(), *sessions, *found = NULL;
	size_t matches = 0;
	uint64_t v;

	ck_assert_msg(json_object_object_get_ex(st, "sessions", &sessions),
		      "the status has no sessions");
	for (size_t i = 0; i < json_object_array_length(sessions); i++) {
		json_object *se = json_object_array_get_idx(sessions, i), *name;

		if (!dataset || (json_object_object_get_ex(se, "dataset", &name) &&
				 !strcmp(json_object_get_string(name), dataset))) {
			found = se;
			matches++;
		}
	}
	ck_assert_msg(matches == 1, "%zu sessions on %s in the status", matches,
		      dataset ? dataset : "any dataset");
	v = dt_ju64(found, key);
	json_object_put(st);
	return v;
}

uint64_t dt_status_u64(const char *path)
{
	json_object *st = dt_status_json_ok();
	uint64_t v = dt_ju64(st, path);

	json_object_put(st);
	return v;
}

void dt_opts(bc_stream_opts *o, const char *dataset, uint32_t batch, enum bc_shuffle mode,
	     uint64_t seed)
{
	bc_stream_opts_init(o);
	o->dataset = dataset;
	o->batch_size = batch;
	o->shuffle = mode;
	o->seed = seed;
}

void dt_sampler_for(struct bd_sampler *sp, const dt_ref *ref, const bc_stream_opts *o)
{
	bd_sampler_cfg cfg = {
		.samples = bp_dataset_samples(ref->ds),
		.fingerprint = bp_dataset_fingerprint(ref->ds),
		.seed = o->seed,
		.rank = o->rank,
		.world = o->world,
		.batch_size = o->batch_size,
		.drop_last = o->drop_last,
		.mode = (enum bp_shuffle)o->shuffle,
		.chunk = 1,
		.window = o->window,
		.start_epoch = o->start_epoch,
		.start_sample = o->start_sample,
	};

	ck_assert_int_eq(bd_sampler_init(sp, &cfg), 0);
}

/* ---- HTTP (the /metrics listener) ---- */

int dt_free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = -1;

	if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
		port = ntohs(sa.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

int dt_http_request(int port, const char *method, const char *path, char **ret_body)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				  .sin_port = htons((uint16_t)port) };
	char req[256], *resp = NULL, *body;
	size_t len = 0, cap = 0;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), code = -1, n;

	*ret_body = NULL;
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		goto out;
	n = snprintf(req, sizeof(req), "%s %s HTTP/1.0\r\nHost: 127.0.0.1:%d\r\n"
		     "User-Agent: batchd-tests\r\n\r\n", method, path, port);
	if (send(fd, req, (size_t)n, MSG_NOSIGNAL) != n)
		goto out;
	for (;;) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		ssize_t k;

		if (poll(&pf, 1, 10000) <= 0)
			goto out;            /* no answer, or no close, within 10 s */
		if (len + 4096 + 1 > cap) {
			cap = cap ? 2 * cap : 65536;
			resp = realloc(resp, cap);
			ck_assert(resp != NULL);
		}
		k = recv(fd, resp + len, cap - len - 1, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			goto out;
		if (k == 0)
			break;
		len += (size_t)k;
	}
	resp[len] = '\0';
	if (sscanf(resp, "HTTP/1.%*d %d", &code) != 1)
		code = -1;
	body = strstr(resp, "\r\n\r\n");
	*ret_body = strdup(body ? body + 4 : "");
out:
	free(resp);
	if (fd >= 0)
		close(fd);
	return code;
}
