/* SPDX-License-Identifier: MIT */
/*
 * test-limits.c - batchd's per-user limits as a service: [limits]
 * sessions_per_uid refuses the session over it with -EUSERS and a message
 * naming the limit and the user (per user, not per connection; also when
 * the opens arrive together, before any answer), and closing one makes
 * room; memory_per_uid refuses with -ENOMEM a session that would take a
 * user over it, whatever the global budget, and counts what it holds.
 * [memory] budget refuses a session over what the block cache leaves (over
 * the whole budget, with no cache), and a cache that leaves too little is
 * cut with a warning. Every refusal
 * gives its figures and the setting that would change it (or says the
 * limit is fixed).
 *
 * One of the service suites (service-testlib.h): a real batchd started with
 * `-c FILE` on a temporary socket, real clients through libbatchclient and
 * raw protocol connections, the refusals read back from the status.
 *
 * BATCHD, BATCHD_PACK and BATCHCTL name the binaries (meson sets them).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <check.h>
#include <json-c/json.h>

#include "daemon-testlib.h"
#include "json_path.h"
#include "service-testlib.h"

static dt_daemon D;

/* Fail with the daemon's recent log (daemon-testlib.h). */
#define expect dt_expect

/* ---- 3. per-uid limits --------------------------------------------------------------- */

START_TEST(test_sessions_per_uid)
{
	bc_client *c1, *c2;
	bc_stream *s[3];
	bc_stream_opts o;
	dt_ref ref;
	const char *msg;
	char uid[32];
	int r = -1;

	sv_conf_basic("info", "[limits]\nsessions_per_uid = 2\n");
	sv_start_ok();
	dt_ref_ok(&ref, DSET_ONE);
	c1 = dt_connect_ok();
	c2 = dt_connect_ok();
	dt_opts(&o, DSET_ONE, 10, BC_SHUFFLE_NONE, 0);
	s[0] = dt_open_ok(c1, &o);
	s[1] = dt_open_ok(c2, &o);   /* the limit is per user, not per connection */
	sv_consume_ok(s[0], &ref, 2, "first session");

	msg = dt_open_fails(c1, &o, -EUSERS);
	snprintf(uid, sizeof(uid), "uid %u", (unsigned)getuid());
	expect(strstr(msg, "sessions_per_uid") && strstr(msg, uid), "third session's refusal does not "
	       "name the limit and the user: \"%s\"", msg);
	snprintf(uid, sizeof(uid), "uid %u already holds 2 sessions", (unsigned)getuid());
	expect(strstr(msg, uid) && strstr(msg, "([limits] sessions_per_uid = 2)") &&
	       strstr(msg, "raise [limits] sessions_per_uid"), "the refusal does not give the "
	       "figures and the setting to raise: \"%s\"", msg);
	msg = dt_open_fails(c2, &o, -EUSERS);
	expect(strstr(msg, "sessions_per_uid"), "refusal on the second connection: \"%s\"", msg);
	expect(dt_status_u64("refused.limit") == 2, "status refused.limit is not 2");

	/* Closing one makes room (once it has ended, which is asynchronous). */
	ck_assert_int_eq(bc_close(s[1]), 0);
	for (int i = 0; i < TRIES; i++) {
		r = bc_open(c2, &o, &s[2]);
		if (r != -EUSERS)
			break;
		dt_sleep_ms(10);
	}
	expect(r == 0, "after closing a session, a new one: %s (%d): %s", bc_strerror(r), r,
	       bc_client_error(c2));
	sv_consume_ok(s[2], &ref, 3, "the session opened after one closed");
	sv_consume_ok(s[0], &ref, 3, "the first session, still running");
	msg = dt_open_fails(c1, &o, -EUSERS);
	(void)msg;

	ck_assert_int_eq(bc_close(s[0]), 0);
	ck_assert_int_eq(bc_close(s[2]), 0);
	bc_disconnect(c1);
	bc_disconnect(c2);
	dt_ref_close(&ref);
}
END_TEST

/*
 * The limit holds when the opens arrive together: OPENs on several
 * connections sent before any answer (the daemon loads datasets off the
 * loop, so a check that ignores opens in progress lets them all through).
 */
START_TEST(test_sessions_per_uid_concurrent)
{
	enum { CONNS = 6 };
	int fd[CONNS], ok = 0, refused = 0;
	bp_msg_open m = { .batch_size = 10, .world = 1, .placement = BP_PLACEMENT_HOST,
			  .shuffle = BP_SHUFFLE_NONE, .path = DSET_SHARDS,
			  .path_len = (uint32_t)strlen(DSET_SHARDS) };
	uint8_t buf[BP_MSG_MAX];
	json_object *st;
	int n;

	sv_conf_basic("info", "[limits]\nsessions_per_uid = 2\n");
	sv_start_ok();
	for (int i = 0; i < CONNS; i++) {
		fd[i] = dt_raw_connect(D.sock);
		expect(fd[i] >= 0, "connect %d: %s", i, strerror(-fd[i]));
		expect(dt_raw_hello(fd[i], NULL) == 0, "HELLO on connection %d", i);
	}
	n = bp_msg_open_encode(&m, buf, sizeof(buf));
	ck_assert_int_gt(n, 0);
	for (int i = 0; i < CONNS; i++)
		expect(send(fd[i], buf, (size_t)n, MSG_NOSIGNAL) == n, "send OPEN %d", i);
	for (int i = 0; i < CONNS; i++) {
		int fds[BP_READY_FDS], got = 0, k;
		bp_msg_error e;
		bp_msg_ready ready;

		k = dt_raw_recv(fd[i], buf, sizeof(buf), fds, BP_READY_FDS, &got, WAIT_MS);
		expect(k > 0, "no answer to OPEN %d (%d)", i, k);
		for (int j = 0; j < got; j++)
			close(fds[j]);
		if (bp_msg_error_decode(buf, (size_t)k, &e) == 0) {
			expect(e.code == -EUSERS, "OPEN %d refused with %d: %.*s", i, e.code,
			       (int)e.message_len, e.message);
			refused++;
		} else {
			expect(bp_msg_ready_decode(buf, (size_t)k, &ready) == 0, "OPEN %d: neither "
			       "READY nor ERROR", i);
			ok++;
		}
	}
	st = dt_status_json_ok();
	expect(ok == 2 && refused == CONNS - 2 && json_object_array_length(sv_sessions_of(st)) == 2,
	       "%d simultaneous OPENs by one uid with sessions_per_uid = 2: %d opened, %d refused, "
	       "%zu sessions in the status", CONNS, ok, refused,
	       json_object_array_length(sv_sessions_of(st)));
	json_object_put(st);
	for (int i = 0; i < CONNS; i++)
		close(fd[i]);
}
END_TEST

START_TEST(test_memory_per_uid)
{
	bc_stream *s[64];
	bc_stream_opts o, big;
	bc_client *c;
	json_object *st, *se;
	const char *msg;
	uint64_t one, limit = UINT64_C(32) << 20;
	size_t n = 0, fit;
	dt_ref ref;

	/* A budget far above the per-user limit: only the per-user limit can refuse. */
	sv_conf_basic("info", "[memory]\nbudget = 2G\n[limits]\nmemory_per_uid = 32M\n");
	sv_start_ok();
	dt_ref_ok(&ref, DSET_ONE);
	c = dt_connect_ok();

	/* One session too big for a user (about 70 MiB), well within the budget. */
	dt_opts(&big, DSET_ONE, 4096, BC_SHUFFLE_NONE, 0);
	big.prefetch = 8;
	msg = dt_open_fails(c, &big, -ENOMEM);
	expect(strstr(msg, "memory limit per user") && strstr(msg, "memory_per_uid") &&
	       !strstr(msg, "memory budget"), "refusal of a 4096-sample session: \"%s\"", msg);
	expect(strstr(msg, "dataset " DSET_ONE " with batch 4096 and prefetch 8 needs ") &&
	       strstr(msg, " holds 0 B of the 32.0 MiB [limits] memory_per_uid allows: open with a "
		      "smaller prefetch or batch, close one of its sessions, or raise [limits] "
		      "memory_per_uid"), "the refusal does not give the figures and the settings: "
	       "\"%s\"", msg);

	/* Same-sized small sessions up to the limit, then one more is refused. */
	dt_opts(&o, DSET_ONE, 256, BC_SHUFFLE_NONE, 0);
	o.prefetch = 8;
	s[n++] = dt_open_ok(c, &o);
	st = dt_status_json_ok();
	se = sv_session_by_pid(sv_sessions_of(st), getpid(), NULL);
	expect(se, "our session is not in the status");
	one = dt_ju64(se, "memory");
	json_object_put(st);
	expect(one > 0 && one <= limit / 2, "one session holds %" PRIu64 " bytes", one);
	fit = (size_t)(limit / one);
	expect(fit < ARRAY_SIZE(s), "%zu sessions of %" PRIu64 " bytes fit", fit, one);
	while (n < fit)
		s[n++] = dt_open_ok(c, &o);
	msg = dt_open_fails(c, &o, -ENOMEM);
	expect(strstr(msg, "memory limit per user"), "session %zu (of %" PRIu64 " bytes, %zu held) "
	       "refused with: \"%s\"", n + 1, one, n, msg);
	expect(dt_status_u64("refused.memory") == 2, "status refused.memory is not 2");
	expect(dt_status_u64("memory.sessions") == one * n, "status memory.sessions is not %zu x %" PRIu64,
	       n, one);
	sv_consume_ok(s[0], &ref, 2, "a session at the limit");

	/* Closing one gives its share back. */
	ck_assert_int_eq(bc_close(s[--n]), 0);
	{
		bc_stream *x = NULL;
		int r = -ENOMEM;

		for (int i = 0; i < TRIES && r == -ENOMEM; i++) {
			r = bc_open(c, &o, &x);
			if (r == -ENOMEM)
				dt_sleep_ms(10);
		}
		expect(r == 0, "after closing one, a session of the same size: %s (%d): %s",
		       bc_strerror(r), r, bc_client_error(c));
		s[n++] = x;
	}
	while (n)
		ck_assert_int_eq(bc_close(s[--n]), 0);
	bc_disconnect(c);
	dt_ref_close(&ref);
}
END_TEST

/*
 * A session of batch 4096 and prefetch 8 on c, over the budget: refused
 * with -ENOMEM and a message that names the dataset and the request.
 * @return the message (in c).
 */
static const char *refused_big(bc_client *c)
{
	static const char want[] = "memory budget: dataset " DSET_ONE " with batch 4096 and "
		"prefetch 8 needs ";
	bc_stream_opts big;
	const char *msg;

	dt_opts(&big, DSET_ONE, 4096, BC_SHUFFLE_NONE, 0);
	big.prefetch = 8;
	msg = dt_open_fails(c, &big, -ENOMEM);
	expect(!strncmp(msg, want, strlen(want)), "refusal: \"%s\"", msg);
	return msg;
}

/*
 * The memory budget: a cache that leaves sessions too little is cut, with a
 * warning that names both settings; a session over what is left is refused
 * with its need, what sessions may use, the budget and the cache, and what
 * to change.
 */
START_TEST(test_memory_budget)
{
	bc_client *c;
	const char *msg;

	sv_conf_basic("info", "[memory]\nbudget = 64M\ncache = 60M\n");
	sv_start_ok();
	expect(dt_log_contains(&D, "[memory] cache = 60.0 MiB leaves sessions less than 16.0 MiB of "
			       "the 64.0 MiB [memory] budget: the cache gets 48.0 MiB; lower [memory] "
			       "cache or raise [memory] budget"), "no warning naming the cache, the "
	       "budget and what to change");
	c = dt_connect_ok();
	msg = refused_big(c);
	/* 16 MiB less the cache's bucket table, a few KiB, and the dataset's index and tables */
	expect(strstr(msg, "; sessions may use 15.") && strstr(msg, " MiB and 0 B of it is in use: "
	       "open with a smaller prefetch or batch, raise [memory] budget (64.0 MiB, of which the "
	       "block cache, [memory] cache, takes 48.") && strstr(msg, " MiB) or lower [memory] "
	       "cache; dataset indexes and tables in memory take ") && strstr(msg, " KiB of the "
	       "budget besides"), "the refusal does not give the figures and the settings: \"%s\"",
	       msg);
	expect(dt_status_u64("refused.memory") == 1, "status refused.memory is not 1");
	bc_disconnect(c);
}
END_TEST

/* With no block cache the refusal says so, and the budget is the one setting to change. */
START_TEST(test_memory_budget_no_cache)
{
	bc_client *c;
	const char *msg;

	sv_conf_basic("info", "[memory]\nbudget = 16M\ncache = 0\n");
	sv_start_ok();
	c = dt_connect_ok();
	msg = refused_big(c);
	expect(strstr(msg, "; sessions may use 15.") && strstr(msg, " MiB and 0 B of it is in use: "
		      "open with a smaller prefetch or batch or raise [memory] budget (16.0 MiB; "
		      "no block cache); dataset indexes and tables in memory take ") &&
	       !strstr(msg, "[memory] cache"),
	       "the refusal without a cache does not give the figures and the setting: \"%s\"", msg);
	bc_disconnect(c);
}
END_TEST

/*
 * The limits that are not settings say so: a batch over the largest, and
 * more sessions on one connection than it may hold.
 */
START_TEST(test_fixed_limits)
{
	bc_stream *s[64];
	bc_stream_opts o;
	bc_client *c;
	const char *msg;
	size_t n = 0;

	sv_conf_basic("info", NULL);
	sv_start_ok();
	c = dt_connect_ok();
	dt_opts(&o, DSET_ONE, 65537, BC_SHUFFLE_NONE, 0);
	msg = dt_open_fails(c, &o, -EINVAL);
	expect(!strcmp(msg, "batch size 65537 is over the limit of 65536 (fixed, not a setting): "
		       "open with a smaller batch"), "refusal of batch 65537: \"%s\"", msg);

	dt_opts(&o, DSET_ONE, 1, BC_SHUFFLE_NONE, 0);
	o.prefetch = 1;
	while (n < ARRAY_SIZE(s))
		s[n++] = dt_open_ok(c, &o);
	msg = dt_open_fails(c, &o, -EMFILE);
	expect(!strcmp(msg, "too many sessions: this connection holds 64, the most one connection "
		       "may (fixed, not a setting): close one, or open it on another connection"),
	       "refusal of the 65th session: \"%s\"", msg);
	while (n)
		ck_assert_int_eq(bc_close(s[--n]), 0);
	bc_disconnect(c);
}
END_TEST

/* ---- the suite ------------------------------------------------------------------------------------ */

static Suite *limits_suite(void)
{
	Suite *s = suite_create("limits");

	tcase_add_test(sv_tcase(s, "sessions_per_uid"), test_sessions_per_uid);
	tcase_add_test(sv_tcase(s, "sessions_per_uid_concurrent"), test_sessions_per_uid_concurrent);
	tcase_add_test(sv_tcase(s, "memory_per_uid"), test_memory_per_uid);
	tcase_add_test(sv_tcase(s, "memory_budget"), test_memory_budget);
	tcase_add_test(sv_tcase(s, "memory_budget_no_cache"), test_memory_budget_no_cache);
	tcase_add_test(sv_tcase(s, "fixed_limits"), test_fixed_limits);
	return s;
}

int main(void)
{
	return dt_check_main(&D, limits_suite);
}
