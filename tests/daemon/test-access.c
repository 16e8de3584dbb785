/* SPDX-License-Identifier: MIT */
/*
 * test-access.c - who may use batchd: peer credentials (uid, pid) in the
 * session list and the metrics labels; [access] allow-lists by uid, gid,
 * user name and supplementary group, a denied peer refused at the protocol
 * level with -EACCES and counted, let in by a reload; the socket's mode and
 * group, at start and after a reload (and a reload naming an unknown group
 * refused).
 *
 * One of the service suites (service-testlib.h). As root it runs peers as
 * other users; otherwise those parts use our own uid or are skipped with a
 * message.
 *
 * BATCHD, BATCHD_PACK and BATCHCTL name the binaries (meson sets them).
 */
#include <errno.h>
#include <grp.h>
#include <inttypes.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>
#include <json-c/json.h>

#include "daemon-testlib.h"
#include "json_path.h"
#include "service-testlib.h"

static dt_daemon D;

/* Fail with the daemon's recent log (daemon-testlib.h). */
#define expect dt_expect

/* ---- small helpers ------------------------------------------------------------- */

/*
 * As root, tests run peers as other users: let them reach the socket
 * (the temporary directories are 0700) and return true; else false.
 */
static bool can_switch_users(void)
{
	if (geteuid() != 0)
		return false;
	ck_assert_int_eq(chmod(dt_g.dir, 0711), 0);
	ck_assert_int_eq(chmod(D.dir, 0711), 0);
	return true;
}

/* In a forked child: become uid/gid with exactly these supplementary groups. */
static int drop_to(uid_t uid, gid_t gid, const gid_t *groups, size_t ngroups)
{
	if (setgroups(ngroups, groups) < 0 || setgid(gid) < 0 || setuid(uid) < 0)
		return -1;
	return getuid() == uid && getegid() == gid ? 0 : -1;
}


/* ---- 5. peer credentials in the session list --------------------------------------------- */

START_TEST(test_peer_credentials)
{
	int up[2], down[2], st;
	bc_stream_opts o;
	bc_stream *s;
	bc_client *c;
	json_object *status, *se;
	pid_t child;
	char ch, match[96];
	double v;

	/* As root, the second trainer runs as another user, so uids differ too. */
	bool other = can_switch_users();
	uid_t child_uid = other ? 12347 : getuid();

	sv_conf_basic("info", other ? "[daemon]\nsocket_mode = 0666\n" : NULL);
	sv_start_ok();
	c = dt_connect_ok();
	dt_opts(&o, DSET_ONE, 10, BC_SHUFFLE_NONE, 0);
	s = dt_open_ok(c, &o);

	ck_assert_int_eq(pipe(up), 0);
	ck_assert_int_eq(pipe(down), 0);
	fflush(NULL);
	child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0) {
		/* A second trainer process: its own connection and stream. */
		bc_client *cc = NULL;
		bc_stream *cs = NULL;
		bc_stream_opts co;
		bc_batch *b;
		char go;

		close(up[0]);
		close(down[1]);
		if (other && drop_to(child_uid, child_uid, NULL, 0) < 0)
			_exit(4);
		bc_stream_opts_init(&co);
		co.dataset = DSET_BLK;
		co.batch_size = 5;
		if (bc_connect(D.sock, &cc) < 0 || bc_open(cc, &co, &cs) < 0 ||
		    bc_next(cs, &b, WAIT_MS) != 0)
			_exit(2);
		bc_release(b);
		if (write(up[1], "r", 1) != 1 || read(down[0], &go, 1) != 1)
			_exit(3);
		bc_close(cs);
		bc_disconnect(cc);
		_exit(0);
	}
	close(up[1]);
	close(down[0]);
	expect(read(up[0], &ch, 1) == 1, "the child did not open its stream");

	status = dt_status_json_ok();
	se = sv_session_by_pid(sv_sessions_of(status), getpid(), DSET_ONE);
	expect(se, "no session with our pid %d in %s", (int)getpid(), json_object_to_json_string(status));
	expect(dt_ju64(se, "uid") == getuid(), "our session's uid %" PRIu64 ", we are %u",
	       dt_ju64(se, "uid"), (unsigned)getuid());
	se = sv_session_by_pid(sv_sessions_of(status), child, DSET_BLK);
	expect(se, "no session with the child's pid %d in %s", (int)child,
	       json_object_to_json_string(status));
	expect(dt_ju64(se, "uid") == child_uid, "the child's session uid %" PRIu64 ", expected %u",
	       dt_ju64(se, "uid"), (unsigned)child_uid);
	expect(json_object_array_length(sv_sessions_of(status)) == 2, "%zu sessions, expected 2",
	       json_object_array_length(sv_sessions_of(status)));
	json_object_put(status);

	/* The metrics label sessions with the same credentials. */
	snprintf(match, sizeof(match), "uid=\"%u\",pid=\"%d\"", (unsigned)child_uid, (int)child);
	v = sv_metric("batchd_session_memory_bytes", match);
	expect(v > 0, "batchd_session_memory_bytes{%s}: %g", match, v);

	expect(write(down[1], "g", 1) == 1, "cannot tell the child to go");
	expect(waitpid(child, &st, 0) == child && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	       "the child trainer failed (status %d)", st);
	close(up[0]);
	close(down[1]);
	/* Its session goes with it; ours stays. */
	v = sv_metric_wait("batchd_sessions", NULL, 1);
	expect(v == 1, "batchd_sessions %g after the child left", v);
	status = dt_status_json_ok();
	expect(!sv_session_by_pid(sv_sessions_of(status), child, NULL), "the child's session outlived it");
	expect(sv_session_by_pid(sv_sessions_of(status), getpid(), DSET_ONE), "our session is gone");
	json_object_put(status);

	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
}
END_TEST

/* ---- 6. [access] allow-lists --------------------------------------------------------------- */

enum { ALLOW_NONE = 0, ALLOW_OURS = 1, ALLOW_OTHER = 2, ALLOW_NAME = 3 };

static const struct access_case {
	int uid, gid;             /* ALLOW_* for allow_uid / allow_gid */
	bool allowed;
} access_cases[] = {
	{ ALLOW_OTHER, ALLOW_NONE, false },
	{ ALLOW_OURS, ALLOW_NONE, true },
	{ ALLOW_NONE, ALLOW_OURS, true },
	{ ALLOW_OTHER, ALLOW_OURS, true },     /* passes by group */
	{ ALLOW_OTHER, ALLOW_OTHER, false },
	{ ALLOW_NAME, ALLOW_NONE, true },      /* our user by name */
};

#define OTHER_ID 12345u

static void access_line(char *buf, size_t len, const char *key, int kind, unsigned ours)
{
	struct passwd *pw;

	switch (kind) {
	case ALLOW_OURS:
		snprintf(buf, len, "%s = %u\n", key, ours);
		break;
	case ALLOW_OTHER:
		snprintf(buf, len, "%s = %u\n", key, OTHER_ID);
		break;
	case ALLOW_NAME:
		/* By name when we have one (a container may not), else by number. */
		pw = getpwuid(ours);
		if (pw)
			snprintf(buf, len, "%s = %s\n", key, pw->pw_name);
		else
			snprintf(buf, len, "%s = %u\n", key, ours);
		break;
	default:
		buf[0] = '\0';
	}
}

START_TEST(test_access_lists)
{
	const struct access_case *k = &access_cases[_i];
	char lu[128], lg[128], extra[300];
	bc_stream_opts o;
	bc_client *c = NULL;
	bc_stream *s;
	dt_ref ref;
	int r;

	ck_assert(getuid() != OTHER_ID && getgid() != OTHER_ID);
	access_line(lu, sizeof(lu), "allow_uid", k->uid, (unsigned)getuid());
	access_line(lg, sizeof(lg), "allow_gid", k->gid, (unsigned)getgid());
	snprintf(extra, sizeof(extra), "[access]\n%s%s", lu, lg);
	sv_conf_basic("info", extra);
	D.any_answer = !k->allowed;
	sv_start_ok();
	dt_ref_ok(&ref, DSET_ONE);

	if (k->allowed) {
		c = dt_connect_ok();
		dt_opts(&o, DSET_ONE, 10, BC_SHUFFLE_NONE, 0);
		s = dt_open_ok(c, &o);
		sv_consume_ok(s, &ref, 3, "an allowed peer's stream");
		ck_assert_int_eq(bc_close(s), 0);
		bc_disconnect(c);
		expect(dt_status_u64("denied") == 0, "status counts denied connections for an allowed peer");
	} else {
		uint8_t buf[BP_MSG_MAX];
		bp_msg_error e;
		char *text = NULL;
		char want[64];
		int fd = dt_raw_connect(D.sock), n;

		/* At the protocol level: an ERROR (-EACCES, naming the uid), then the close. */
		expect(fd >= 0, "connect: %s", strerror(-fd));
		n = dt_raw_recv(fd, buf, sizeof(buf), NULL, 0, NULL, 10000);
		expect(n > 0 && bp_msg_error_decode(buf, (size_t)n, &e) == 0,
		       "a denied peer got %d bytes, not an ERROR", n);
		snprintf(want, sizeof(want), "uid %u", (unsigned)getuid());
		expect(e.code == -EACCES && memmem(e.message, e.message_len, want, strlen(want)),
		       "denied with %d \"%.*s\"", e.code, (int)e.message_len, e.message);
		n = dt_raw_recv(fd, buf, sizeof(buf), NULL, 0, NULL, 10000);
		expect(n == 0, "the daemon kept a denied connection open (%d)", n);
		close(fd);

		/* Through libbatchclient: refused (the ERROR, or the close if HELLO lost the race). */
		r = bc_connect(D.sock, &c);
		expect(r == -EACCES || r == -EPIPE || r == -ECONNRESET, "bc_connect of a denied peer: "
		       "%s (%d)", bc_strerror(r), r);
		if (r == 0)
			bc_disconnect(c);
		if (r != -EACCES)
			fprintf(stderr, "test-access: note: bc_connect of a denied peer returned %s, not "
				"-EACCES\n", bc_strerror(r));
		r = dt_status(D.sock, &text);
		free(text);
		expect(r < 0, "a denied peer fetched the status");

		/* Let ourselves in (SIGHUP), and see the refusals counted. */
		access_line(lu, sizeof(lu), "allow_uid", ALLOW_OURS, (unsigned)getuid());
		snprintf(extra, sizeof(extra), "[access]\n%s", lu);
		sv_conf_basic("info", extra);
		kill(D.pid, SIGHUP);
		for (int i = 0; i < TRIES && (r = bc_connect(D.sock, &c)) != 0; i++)
			dt_sleep_ms(10);
		expect(r == 0, "still denied after the reload allowed our uid: %s", bc_strerror(r));
		bc_disconnect(c);
		{
			json_object *st = dt_status_json_ok();
			uint64_t denied = dt_ju64(st, "denied");

			expect(denied >= 3 && dt_ju64(st, "reloads") == 1, "status: denied %" PRIu64
			       " (at least 3 expected), reloads %" PRIu64, denied, dt_ju64(st, "reloads"));
			expect(sv_metric("batchd_errors_total", "kind=\"denied\"") == (double)denied,
			       "batchd_errors_total{kind=\"denied\"} disagrees with status (%" PRIu64 ")",
			       denied);
			json_object_put(st);
		}
		expect(dt_log_contains(&D, "not in the [access] allow-lists"),
		       "the log does not say why peers were cut off");
	}
	dt_ref_close(&ref);
}
END_TEST

/* A peer in an allowed group only through a supplementary group (SO_PEERGROUPS). */
START_TEST(test_access_supplementary)
{
	const gid_t allowed = 4243;
	uint8_t buf[BP_MSG_MAX];
	bp_msg_error e;
	int fd, n;

	if (!can_switch_users()) {
		fprintf(stderr, "test-access: SKIP access_supplementary: needs root to run peers "
			"as other users\n");
		return;
	}
	sv_conf_write("[daemon]\nsocket = %s\nsocket_mode = 0666\n[datasets]\nroot = %s\n"
		   "[access]\nallow_gid = %u\n", D.sock, D.root, (unsigned)allowed);
	D.any_answer = true;      /* we (root) are not in the lists */
	sv_start_ok();

	for (int member = 1; member >= 0; member--) {
		pid_t child;
		int st;

		fflush(NULL);
		child = fork();
		ck_assert_int_ge(child, 0);
		if (child == 0) {
			bc_client *c = NULL;
			bc_stream *s = NULL;
			bc_stream_opts o;
			bc_batch *b;
			int r;

			if (drop_to(12346, 12346, &allowed, member ? 1 : 0) < 0)
				_exit(10);
			r = bc_connect(D.sock, &c);
			if (!member)
				_exit(r == -EACCES || r == -EPIPE || r == -ECONNRESET ? 0 : 11);
			if (r < 0)
				_exit(12);
			bc_stream_opts_init(&o);
			o.dataset = DSET_ONE;
			o.batch_size = 10;
			if (bc_open(c, &o, &s) < 0 || bc_next(s, &b, WAIT_MS) != 0)
				_exit(13);
			bc_release(b);
			bc_close(s);
			bc_disconnect(c);
			_exit(0);
		}
		expect(waitpid(child, &st, 0) == child && WIFEXITED(st) && WEXITSTATUS(st) == 0,
		       "uid 12346 %s supplementary group %u: child status %d (10 setup, 11 let in, "
		       "12 refused, 13 stream failed)", member ? "in" : "not in", (unsigned)allowed,
		       WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	}
	/* And we, by uid and primary group in neither list, are refused. */
	fd = dt_raw_connect(D.sock);
	expect(fd >= 0, "connect: %s", strerror(-fd));
	n = dt_raw_recv(fd, buf, sizeof(buf), NULL, 0, NULL, 10000);
	expect(n > 0 && bp_msg_error_decode(buf, (size_t)n, &e) == 0 && e.code == -EACCES,
	       "root, in neither list, was not refused with -EACCES (%d bytes)", n);
	close(fd);
}
END_TEST

/* ---- 7. socket mode and group ---------------------------------------------------------------- */

/* A group to give the socket: ours, or (as root, who may) one we are not in. */
static gid_t other_gid(void)
{
	gid_t groups[64];
	int n;

	if (geteuid() == 0)
		return 4242;
	n = getgroups((int)ARRAY_SIZE(groups), groups);
	for (int i = 0; i < n; i++)
		if (groups[i] != getegid())
			return groups[i];
	return getegid();
}

START_TEST(test_socket_access)
{
	struct stat sb;
	gid_t g = other_gid();
	bc_client *c;

	if (_i == 2) {
		/* A group that does not exist: refused at start, so refused by a reload too. */
		sv_conf_write("[daemon]\nsocket = %s\nsocket_mode = 0600\n[datasets]\nroot = %s\n",
			   D.sock, D.root);
		sv_start_ok();
		sv_conf_write("[daemon]\nsocket = %s\nsocket_mode = 0666\nsocket_group = "
			   "no-such-group-batchd\n[datasets]\nroot = %s\n", D.sock, D.root);
		sv_hup_and_wait(0, 1);
		expect(dt_log_contains(&D, "reload refused") &&
		       dt_log_contains(&D, "no-such-group-batchd"), "the log does not say the reload "
		       "was refused for the unknown group");
		expect(stat(D.sock, &sb) == 0 && (sb.st_mode & 07777) == 0600, "a refused reload "
		       "changed the socket mode to %04o", (unsigned)(sb.st_mode & 07777));
		return;
	}
	if (_i == 0) {
		/* The defaults: 0660, our group. */
		sv_conf_basic("info", NULL);
		sv_start_ok();
		expect(stat(D.sock, &sb) == 0 && S_ISSOCK(sb.st_mode), "no socket at %s", D.sock);
		expect((sb.st_mode & 07777) == 0660, "default socket mode %04o, expected 0660",
		       (unsigned)(sb.st_mode & 07777));
		expect(sb.st_gid == getegid(), "default socket group %u, expected %u",
		       (unsigned)sb.st_gid, (unsigned)getegid());
		return;
	}
	sv_conf_write("[daemon]\nsocket = %s\nsocket_mode = 0600\nsocket_group = %u\n[datasets]\n"
		   "root = %s\n", D.sock, (unsigned)g, D.root);
	sv_start_ok();
	expect(stat(D.sock, &sb) == 0 && S_ISSOCK(sb.st_mode), "no socket at %s", D.sock);
	expect((sb.st_mode & 07777) == 0600, "socket mode %04o, expected 0600",
	       (unsigned)(sb.st_mode & 07777));
	expect(sb.st_gid == g, "socket group %u, expected %u", (unsigned)sb.st_gid, (unsigned)g);
	c = dt_connect_ok();
	bc_disconnect(c);

	/* A reload applies a new mode to the socket that is already there. */
	sv_conf_write("[daemon]\nsocket = %s\nsocket_mode = 0640\nsocket_group = %u\n[datasets]\n"
		   "root = %s\n", D.sock, (unsigned)g, D.root);
	sv_hup_and_wait(1, 0);
	expect(stat(D.sock, &sb) == 0 && (sb.st_mode & 07777) == 0640 && sb.st_gid == g,
	       "after the reload: socket mode %04o group %u, expected 0640 group %u",
	       (unsigned)(sb.st_mode & 07777), (unsigned)sb.st_gid, (unsigned)g);
}
END_TEST

/* ---- the suite ------------------------------------------------------------------------------------ */

static Suite *access_suite(void)
{
	Suite *s = suite_create("access");

	tcase_add_test(sv_tcase(s, "peer_credentials"), test_peer_credentials);
	tcase_add_loop_test(sv_tcase(s, "access_lists"), test_access_lists, 0, ARRAY_SIZE(access_cases));
	tcase_add_test(sv_tcase(s, "access_supplementary"), test_access_supplementary);
	tcase_add_loop_test(sv_tcase(s, "socket_access"), test_socket_access, 0, 3);
	return s;
}

int main(void)
{
	return dt_check_main(&D, access_suite);
}
