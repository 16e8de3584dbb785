/* SPDX-License-Identifier: MIT */
/*
 * test-client-signals.c - libbatchclient when batchd goes away under a
 * trainer.
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
 * bc_next's documented errno and a reason in bc_stream_error().
 *
 * The trainer looks at its stream's control page through client_priv.h
 * (the daemon_hungry flag of proto/ring.h): that is the one precondition
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
	BLOCKED,                 /* blocked, none pending: the library's own must not be left pending */
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

static Suite *client_signals_suite(void)
{
	Suite *s = suite_create("client-signals");

	tcase_add_loop_test(dt_tcase(s, "daemon_gone", setup), test_daemon_gone, 0,
			    ARRAY_SIZE(endings));
	return s;
}

int main(void)
{
	return dt_check_main(&D, client_signals_suite);
}
