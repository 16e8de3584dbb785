/* SPDX-License-Identifier: MIT */
/*
 * test-client-signals.c - libbatchclient when batchd goes away under a
 * trainer, and on the values failed calls leave behind.
 *
 * Why a suite of its own: the other suites run with SIGPIPE ignored
 * (dt_check_main), as a careful server would, so they cannot see a
 * library that raises SIGPIPE; a C trainer keeps the default action and
 * dies of it, with no message. Here the trainer is a forked child that
 * restores SIG_DFL (in some cases it blocks SIGPIPE, with or without one
 * pending, and the library must leave both as it found them), takes a
 * batch, and waits until the daemon waits for that batch's release (so
 * bc_release must poke the daemon's released pipe); then the test kills
 * or stops the daemon: the child must exit of its own accord, with
 * bc_next's documented errno and a reason in bc_stream_error(). The
 * other case calls every accessor on the NULLs a failed bc_connect,
 * bc_open or bc_next leaves in NULL-initialised pointers, and checks the
 * values batchclient.h documents for them.
 *
 * The trainer looks at its stream's control page through client_priv.h
 * (the daemon_hungry flag of lib/proto/ring.h): that is the one precondition
 * that no public call shows, and without it the release would not write
 * the pipe at all. BATCHD and BATCHD_PACK name the binaries (meson sets
 * them).
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>

#include "client_priv.h"
#include "daemon-testlib.h"
#include "ring.h"

static dt_daemon D;

/* Fail with the daemon's recent log (daemon-testlib.h). */
#define expect dt_expect

static void setup(void)
{
	dt_setup_dir();
	ck_assert_msg(dt_daemon_start(&D) == 0, "batchd did not start");
}

/* ---- the daemon goes away ---------------------------------------------------------- */

/* The trainer's SIGPIPE mask while it releases: the library must leave it as it was. */
enum mask {
	UNBLOCKED,               /* the default: a SIGPIPE kills */
	BLOCKED,                 /* blocked, none pending: the library's own must not stay */
	BLOCKED_PENDING,         /* blocked, one pending already: it must still be pending after */
};

/* How the test ends the daemon, and what the trainer must see then. */
static const struct {
	int sig;
	enum mask mask;
	int daemon_status;       /* dt_daemon_wait: its exit status, 128 + signal when killed */
	int next;                /* bc_next, once the published batches are drained */
	const char *reason;      /* in bc_stream_error() */
} endings[] = {
	{ SIGKILL, UNBLOCKED, 128 + SIGKILL, -EPIPE, "the daemon is gone" },
	{ SIGTERM, UNBLOCKED, 0, -ESHUTDOWN, "it is stopping" },
	{ SIGKILL, BLOCKED, 128 + SIGKILL, -EPIPE, "the daemon is gone" },
	{ SIGKILL, BLOCKED_PENDING, 128 + SIGKILL, -EPIPE, "the daemon is gone" },
};

/* What the trainer child reports through its pipe. */
typedef struct report {
	int step;                /* 0: all done; else the step that failed */
	int r;                   /* that step's result */
	int hungry;              /* daemon_hungry just before bc_release */
	int release;             /* bc_release of the held batch */
	int blocked, pending;    /* SIGPIPE blocked, pending in the trainer after it */
	int next;                /* bc_next (timeout 0) after the drained batches */
	int next_wait;           /* bc_next (WAIT_MS) once more */
	int drained;             /* batches still delivered after the daemon went */
	int status;              /* bc_status on the client */
	int close;               /* bc_close */
	char err[BP_RING_REASON_MAX + 1];
} report;

enum { STEP_CONNECT = 1, STEP_OPEN, STEP_TAKE, STEP_HUNGRY, STEP_PIPE };

/* Wait (up to TRIES polls of 10 ms) for the daemon to wait for our releases. */
static bool daemon_waits_for_release(bc_stream *s)
{
	for (int i = 0; i < TRIES; i++) {
		if (__atomic_load_n(&s->ctrl->daemon_hungry, __ATOMIC_SEQ_CST))
			return true;
		dt_sleep_ms(10);
	}
	return false;
}

/* Release what is published, then report how bc_next ends (the stream is dead by now). */
static void drain(bc_stream *s, report *rep)
{
	bc_batch *b = NULL;
	int r = 0;

	/* Bounded: a dead daemon publishes nothing more, at most a ring of batches is left. */
	while (rep->drained < 1000 && ((r = bc_next(s, &b, 0)) == 0 || r == BC_EPOCH_END)) {
		if (r == 0) {
			bc_release(b);
			rep->drained++;
		}
	}
	rep->next = r;
	snprintf(rep->err, sizeof(rep->err), "%s", bc_stream_error(s));
	b = NULL;
	rep->next_wait = bc_next(s, &b, WAIT_MS);
}

/*
 * The trainer: a C program with SIGPIPE at its default action. Tells up
 * when it holds a batch the daemon waits for, waits on down for the
 * daemon to be gone, then releases and reads on. @return never: exits 0
 * with the report written to up, or dies (the test's failure).
 */
static void trainer(int up, int down, enum mask mask)
{
	report rep = { 0 };
	bc_stream_opts o;
	sigset_t pipe_only, now;
	bc_client *c = NULL;
	bc_stream *s = NULL;
	bc_batch *b = NULL;
	char go, told = 'f';
	char *json = NULL;

	signal(SIGPIPE, SIG_DFL);
	sigemptyset(&pipe_only);
	sigaddset(&pipe_only, SIGPIPE);
	sigprocmask(SIG_UNBLOCK, &pipe_only, NULL);
	if ((rep.r = bc_connect(D.sock, &c)) < 0) {
		rep.step = STEP_CONNECT;
		goto out;
	}
	dt_opts(&o, DSET_ONE, 8, BC_SHUFFLE_NONE, 0);
	o.prefetch = 2;
	if ((rep.r = bc_open(c, &o, &s)) < 0) {
		rep.step = STEP_OPEN;
		goto out;
	}
	if ((rep.r = bc_next(s, &b, WAIT_MS)) != 0) {
		rep.step = STEP_TAKE;
		goto out;
	}
	if (!daemon_waits_for_release(s)) {
		rep.step = STEP_HUNGRY;
		goto out;
	}
	told = 'k';
	if (write(up, &told, 1) != 1 || read(down, &go, 1) != 1) {
		rep.step = STEP_PIPE;
		goto out;
	}
	rep.hungry = (int)__atomic_load_n(&s->ctrl->daemon_hungry, __ATOMIC_SEQ_CST);
	if (mask != UNBLOCKED)
		sigprocmask(SIG_BLOCK, &pipe_only, NULL);
	if (mask == BLOCKED_PENDING)
		raise(SIGPIPE);
	rep.release = bc_release(b);
	sigprocmask(SIG_BLOCK, NULL, &now);
	rep.blocked = sigismember(&now, SIGPIPE);
	sigpending(&now);
	rep.pending = sigismember(&now, SIGPIPE);
	drain(s, &rep);
	rep.status = bc_status(c, &json);
	free(json);
	rep.close = bc_close(s);
	bc_disconnect(c);
out:
	/* Failed before the daemon went: 'f', then the report says where. */
	if (told == 'f' && write(up, &told, 1) != 1)
		_exit(8);
	_exit(write(up, &rep, sizeof(rep)) == (ssize_t)sizeof(rep) ? 0 : 9);
}

/*
 * batchd stopped (SIGTERM) or killed (SIGKILL) while a trainer holds a
 * batch the daemon waits for: the trainer's bc_release writes a pipe
 * nobody reads, and must neither die of SIGPIPE nor lose the reason.
 */
START_TEST(test_daemon_gone)
{
	int up[2], down[2], st, r;
	report rep;
	char ready;
	pid_t pid;

	ck_assert_int_eq(pipe(up), 0);
	ck_assert_int_eq(pipe(down), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(up[0]);
		close(down[1]);
		trainer(up[1], down[0], endings[_i].mask);
	}
	close(up[1]);
	close(down[0]);
	memset(&rep, 0, sizeof(rep));
	if (read(up[0], &ready, 1) != 1 || ready != 'k') {
		r = (int)read(up[0], &rep, sizeof(rep));
		waitpid(pid, &st, 0);
		expect(0, "the trainer did not get a batch the daemon waits for: step %d: %s (%d) "
		       "(report %d bytes, status %d)", rep.step, bc_strerror(rep.r), rep.r, r, st);
	}

	ck_assert_int_eq(kill(D.pid, endings[_i].sig), 0);
	r = dt_daemon_wait(&D, 60000);
	ck_assert_msg(r == endings[_i].daemon_status, "batchd after %s: status %d, expected %d",
		      strsignal(endings[_i].sig), r, endings[_i].daemon_status);

	ck_assert_int_eq(write(down[1], "x", 1), 1);
	close(down[1]);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(!WIFSIGNALED(st), "the trainer died of signal %d (%s) after batchd's %s",
		      WIFSIGNALED(st) ? WTERMSIG(st) : 0, WIFSIGNALED(st) ?
		      strsignal(WTERMSIG(st)) : "", strsignal(endings[_i].sig));
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "trainer status %d", st);
	memset(&rep, 0, sizeof(rep));
	ck_assert_int_eq(read(up[0], &rep, sizeof(rep)), (ssize_t)sizeof(rep));
	close(up[0]);

	ck_assert_msg(rep.step == 0, "trainer step %d failed: %s (%d)", rep.step,
		      bc_strerror(rep.r), rep.r);
	/* Otherwise the release wrote no pipe and the case proves nothing. */
	ck_assert_msg(rep.hungry, "the daemon no longer waited for the release");
	ck_assert_int_eq(rep.release, 0);
	ck_assert_msg(rep.blocked == (endings[_i].mask != UNBLOCKED),
		      "bc_release left SIGPIPE %sblocked", rep.blocked ? "" : "un");
	ck_assert_msg(rep.pending == (endings[_i].mask == BLOCKED_PENDING),
		      rep.pending ? "bc_release left its own SIGPIPE pending"
		      : "bc_release swallowed a SIGPIPE that was pending before it");
	ck_assert_msg(rep.next == endings[_i].next, "bc_next after %s: %s (%d), expected %s (%d)",
		      strsignal(endings[_i].sig), bc_strerror(rep.next), rep.next,
		      bc_strerror(endings[_i].next), endings[_i].next);
	ck_assert_msg(strstr(rep.err, endings[_i].reason), "bc_stream_error after %s: \"%s\"",
		      strsignal(endings[_i].sig), rep.err);
	ck_assert_msg(rep.next_wait == endings[_i].next, "bc_next again: %s (%d)",
		      bc_strerror(rep.next_wait), rep.next_wait);
	ck_assert_msg(rep.status == -EPIPE || rep.status == -ESHUTDOWN, "bc_status: %s (%d)",
		      bc_strerror(rep.status), rep.status);
	ck_assert_int_eq(rep.close, 0);
}
END_TEST

/* ---- what failed calls leave --------------------------------------------------------- */

/* A socket file nobody listens on: connect(2) says ECONNREFUSED. */
static void dead_socket(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	ck_assert_uint_lt(strlen(path), sizeof(sa.sun_path));
	strcpy(sa.sun_path, path);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
}

/* Every bc_client call on what a failed bc_connect leaves: NULL. */
static void expect_null_client(void)
{
	bc_stream_opts o;
	bc_stream *s = NULL;
	char *text = (char *)"untouched";

	ck_assert_ptr_nonnull(bc_client_error(NULL));
	ck_assert_str_eq(bc_client_error(NULL), "");
	ck_assert_int_eq(bc_status(NULL, &text), -EINVAL);
	ck_assert_int_eq(bc_metrics(NULL, &text), -EINVAL);
	ck_assert_str_eq(text, "untouched");
	bc_stream_opts_init(&o);
	o.dataset = DSET_ONE;
	ck_assert_int_eq(bc_open(NULL, &o, &s), -EINVAL);
	ck_assert_ptr_null(s);
	bc_stream_opts_init(NULL);
	bc_disconnect(NULL);
}

/* Every bc_stream call on what a failed bc_open leaves: NULL. */
static void expect_null_stream(void)
{
	uint64_t epoch = 7, batch = 7;
	bc_batch *b = NULL;

	ck_assert_ptr_nonnull(bc_stream_error(NULL));
	ck_assert_str_eq(bc_stream_error(NULL), "");
	ck_assert_int_eq(bc_stream_device(NULL), BC_HOST);
	ck_assert_uint_eq(bc_stream_batches_per_epoch(NULL), 0);
	ck_assert_uint_eq(bc_stream_samples(NULL), 0);
	ck_assert_uint_eq(bc_stream_fingerprint(NULL), 0);
	ck_assert_uint_eq(bc_stream_max_sample(NULL), 0);
	bc_stream_position(NULL, &epoch, &batch);
	ck_assert_uint_eq(epoch, 0);
	ck_assert_uint_eq(batch, 0);
	bc_stream_position(NULL, NULL, NULL);
	ck_assert_int_eq(bc_next(NULL, &b, 0), -EINVAL);
	ck_assert_ptr_null(b);
	ck_assert_int_eq(bc_close(NULL), 0);
}

/* Every bc_batch call on what a failed bc_next leaves: NULL. */
static void expect_null_batch(void)
{
	const void *data = "untouched";
	size_t len = 7;

	ck_assert_uint_eq(bc_batch_epoch(NULL), 0);
	ck_assert_uint_eq(bc_batch_index(NULL), 0);
	ck_assert_uint_eq(bc_batch_count(NULL), 0);
	ck_assert_uint_eq(bc_batch_sample_id(NULL, 0), UINT64_MAX);
	ck_assert_int_eq(bc_batch_sample(NULL, 0, &data, &len), -EINVAL);
	ck_assert_str_eq(data, "untouched");
	ck_assert_uint_eq(len, 7);
	ck_assert_ptr_null(bc_batch_data(NULL, &len));
	ck_assert_uint_eq(len, 0);
	len = 7;
	ck_assert_ptr_null(bc_batch_device_data(NULL, &len));
	ck_assert_uint_eq(len, 0);
	ck_assert_ptr_null(bc_batch_data(NULL, NULL));
	ck_assert_int_eq(bc_batch_wait_stream(NULL, NULL), -EINVAL);
	ck_assert_int_eq(bc_release(NULL), -EINVAL);
}

START_TEST(test_failed_calls)
{
	char path[sizeof(D.dir) + 32];
	bc_stream_opts o;
	bc_client *c = NULL;
	bc_stream *s = NULL;
	bc_batch *b = NULL;
	int r;

	/* No socket there: -ENOENT, and *ret as it was. */
	snprintf(path, sizeof(path), "%s/no-such.sock", D.dir);
	r = bc_connect(path, &c);
	ck_assert_msg(r == -ENOENT, "bc_connect %s: %s (%d)", path, bc_strerror(r), r);
	ck_assert_ptr_null(c);
	/* A socket nobody listens on: -ECONNREFUSED. */
	snprintf(path, sizeof(path), "%s/dead.sock", D.dir);
	dead_socket(path);
	r = bc_connect(path, &c);
	ck_assert_msg(r == -ECONNREFUSED, "bc_connect %s: %s (%d)", path, bc_strerror(r), r);
	ck_assert_ptr_null(c);
	ck_assert_int_eq(bc_connect(path, NULL), -EINVAL);
	expect_null_client();

	/* No such dataset: the daemon's -ENOENT and message, *ret as it was. */
	c = dt_connect_ok();
	dt_opts(&o, "no-such.bpk", 8, BC_SHUFFLE_NONE, 0);
	r = bc_open(c, &o, &s);
	expect(r == -ENOENT, "bc_open no-such.bpk: %s (%d): %s", bc_strerror(r), r,
	       bc_client_error(c));
	ck_assert_ptr_null(s);
	expect(bc_client_error(c)[0], "bc_open's refusal came without a message");
	ck_assert_int_eq(bc_open(c, &o, NULL), -EINVAL);
	ck_assert_int_eq(bc_status(c, NULL), -EINVAL);
	expect_null_stream();

	/* A live stream: a NULL ret is refused, not written. */
	dt_opts(&o, DSET_ONE, 8, BC_SHUFFLE_NONE, 0);
	s = dt_open_ok(c, &o);
	ck_assert_int_eq(bc_next(s, NULL, 0), -EINVAL);
	bc_stream_position(s, NULL, NULL);
	ck_assert_int_eq(bc_next(s, &b, WAIT_MS), 0);
	ck_assert_int_eq(bc_batch_sample(b, 0, NULL, NULL), -EINVAL);
	ck_assert_int_eq(bc_release(b), 0);
	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
	expect_null_batch();
}
END_TEST

static Suite *client_signals_suite(void)
{
	Suite *s = suite_create("client-signals");

	tcase_add_loop_test(dt_tcase(s, "daemon_gone", setup), test_daemon_gone, 0,
			    ARRAY_SIZE(endings));
	tcase_add_test(dt_tcase(s, "failed_calls", setup), test_failed_calls);
	return s;
}

int main(void)
{
	return dt_check_main(&D, client_signals_suite);
}
