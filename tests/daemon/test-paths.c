/* SPDX-License-Identifier: MIT */
/*
 * test-paths.c - paths that try to leave the roots: "..", absolute paths
 * outside them, symlinks out (absolute, relative, through /proc magic
 * links), FIFOs, devices, directories where a pack should be and loops.
 * Each is refused with its documented errno and a message, the root still
 * serves afterwards, and, where strace can trace batchd, the trace shows
 * that nothing outside the root was ever opened while refusing.
 *
 * Why a suite of its own: the faults suite (test-faults.c) proves what
 * goes wrong underneath the daemon costs what it should; this one proves
 * what a client may name cannot reach outside what the daemon serves. It
 * runs a real batchd as the other daemon suites do (daemon-testlib.h) and
 * stops it with SIGTERM, asserting exit 0.
 *
 * BATCHD, BATCHD_PACK name the binaries. The strace part is skipped, with a
 * message, when strace is missing or cannot trace.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>

#include "daemon-testlib.h"

static dt_daemon D;

/* Fail with the daemon's recent log (daemon-testlib.h). */
#define expect dt_expect

/* ---- paths that try to leave the roots: refused, nothing outside opened ------------------------ */

static pid_t traced_pid;         /* batchd under strace: strace does not take it along */

static void kill_traced(void)
{
	if (traced_pid > 0)
		kill(traced_pid, SIGKILL);
}

/* Find prog on $PATH into buf. */
static bool which(const char *prog, char *buf, size_t len)
{
	const char *path = getenv("PATH");
	char *copy = strdup(path && *path ? path : "/usr/bin:/bin"), *save = NULL, *dir;
	bool found = false;

	ck_assert_ptr_nonnull(copy);
	for (dir = strtok_r(copy, ":", &save); dir && !found; dir = strtok_r(NULL, ":", &save)) {
		snprintf(buf, len, "%s/%s", dir, prog);
		found = access(buf, X_OK) == 0;
	}
	free(copy);
	return found;
}

/* Can strace trace a child here (ptrace may be forbidden)? */
static bool strace_works(const char *strace, char *why, size_t len)
{
	int st;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);

		dup2(null, 1);
		dup2(null, 2);
		execl(strace, strace, "-f", "-qq", "-e", "trace=openat", "-o", "/dev/null", "/bin/true",
		      (char *)NULL);
		_exit(127);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return true;
	snprintf(why, len, "%s cannot trace a child here (status %#x; ptrace forbidden?)", strace,
		 st);
	return false;
}

/* Link the shards of DSET_SHARDS into root/name (a dataset directory to spoil). */
static void shards_copy(const char *name)
{
	char dir[PATH_MAX], a[PATH_MAX * 2], b[PATH_MAX * 2];
	dt_ref ref;

	dt_ref_ok(&ref, DSET_SHARDS);
	dt_root_path(&D, name, dir, sizeof(dir));
	ck_assert_int_eq(mkdir(dir, 0755), 0);
	for (size_t i = 0; i < bp_dataset_shard_count(ref.ds); i++) {
		snprintf(a, sizeof(a), "%s/%s/%s", dt_g.packs, DSET_SHARDS,
			 bp_dataset_shard(ref.ds, i)->name);
		snprintf(b, sizeof(b), "%s/%s", dir, bp_dataset_shard(ref.ds, i)->name);
		ck_assert_int_eq(link(a, b), 0);
	}
	dt_ref_close(&ref);
}

/*
 * Files the C runtime opens by itself while the requests are served (glibc
 * reads overcommit_memory when it trims a thread's heap): no request's doing,
 * and no way out of the root.
 */
static const char *const runtime_files[] = {
	"/proc/sys/vm/overcommit_memory",
};

static bool runtime_file(const char *path)
{
	for (size_t i = 0; i < ARRAY_SIZE(runtime_files); i++)
		if (!strcmp(path, runtime_files[i]))
			return true;
	return false;
}

/* Every openat/openat2 between the markers that returned a descriptor: under root? */
static void check_trace(const char *trace, const char *root, char *bad, size_t badlen,
			size_t *ret_inside, bool *ret_marked)
{
	FILE *f = fopen(trace, "r");
	char *line = NULL;
	size_t cap = 0, at = 0, rl = strlen(root);
	int phase = 0;          /* 0 before the begin marker, 1 between, 2 after the end */

	*ret_inside = 0;
	bad[0] = '\0';
	ck_assert_ptr_nonnull(f);
	while (getline(&line, &cap, f) > 0) {
		char *eq, *end, *path;
		long fd;

		if (strstr(line, "faults-mark-begin.bpk"))
			phase = 1;
		if (strstr(line, "faults-mark-end.bpk"))
			phase = 2;
		if (phase != 1 || !strstr(line, "openat") || !(eq = strstr(line, ") = ")))
			continue;
		while (strstr(eq + 1, ") = "))
			eq = strstr(eq + 1, ") = ");
		fd = strtol(eq + 4, &end, 10);
		if (fd < 0)
			continue;
		path = *end == '<' ? end + 1 : NULL;
		end = path ? strrchr(path, '>') : NULL;
		if (end)
			*end = '\0';
		if (path && !strncmp(path, root, rl) && (path[rl] == '/' || path[rl] == '\0')) {
			(*ret_inside)++;
			continue;
		}
		if (path && runtime_file(path)) {
			printf("NOTE: batchd (its C runtime) opened %s while serving the requests\n",
			       path);
			continue;
		}
		if (at < badlen - 1)
			at += (size_t)snprintf(bad + at, badlen - at, "%s%s", at ? "; " : "",
					       path ? path : line);
	}
	*ret_marked = phase == 2;
	free(line);
	fclose(f);
}

START_TEST(test_path_escapes)
{
	char aenv[1024];
	const char *env[] = { aenv, NULL };
	char strace[PATH_MAX], why[PATH_MAX + 128] = "", trace[PATH_MAX], wrapper[PATH_MAX];
	char p[PATH_MAX], t[PATH_MAX * 2], root[PATH_MAX], bad[4096], proc_out[64];
	const char *batchd = dt_g.batchd;
	bool traced = which("strace", strace, sizeof(strace)) &&
		      strace_works(strace, why, sizeof(why));
	bool have_dev;
	int outfd, r;
	bc_client *c;
	bc_stream_opts o;
	bc_stream *s;
	dt_run run = { 0 };
	dt_ref ref;

	if (!traced && !why[0])
		snprintf(why, sizeof(why), "strace is not installed");
	if (!traced)
		printf("SKIP the strace check of path escapes: %s (refusals still checked)\n", why);
	ck_assert_ptr_nonnull(realpath(D.root, root));

	/* Ways out of the root, and things in it that are no dataset. */
	snprintf(t, sizeof(t), "%s/" DSET_ONE, dt_g.packs);
	ck_assert_int_eq(symlink(t, dt_root_path(&D, "esc.bpk", p, sizeof(p))), 0);
	ck_assert_int_eq(symlink("../../packs/" DSET_ONE, dt_root_path(&D, "rel-esc.bpk", p,
								       sizeof(p))), 0);
	outfd = open(t, O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(outfd, 0);
	snprintf(proc_out, sizeof(proc_out), "/proc/%d/fd/%d", (int)getpid(), outfd);
	ck_assert_int_eq(symlink(proc_out, dt_root_path(&D, "magic.bpk", p, sizeof(p))), 0);
	snprintf(t, sizeof(t), "/proc/self/root%s/" DSET_ONE, dt_g.packs);
	ck_assert_int_eq(symlink(t, dt_root_path(&D, "self-magic.bpk", p, sizeof(p))), 0);
	ck_assert_int_eq(mkfifo(dt_root_path(&D, "fifo.bpk", p, sizeof(p)), 0644), 0);
	have_dev = mknod(dt_root_path(&D, "dev.bpk", p, sizeof(p)), S_IFCHR | 0644,
			 makedev(1, 3)) == 0;
	if (!have_dev)
		printf("SKIP the device node: mknod: %s\n", strerror(errno));
	shards_copy("dirpack");
	ck_assert_int_eq(mkdir(dt_root_path(&D, "dirpack/x.bpk", p, sizeof(p)), 0755), 0);
	shards_copy("linkpack");
	snprintf(t, sizeof(t), "%s/" DSET_ONE, dt_g.packs);
	ck_assert_int_eq(symlink(t, dt_root_path(&D, "linkpack/zz.bpk", p, sizeof(p))), 0);

	if (traced) {
		FILE *f;

		snprintf(trace, sizeof(trace), "%s/openat.trace", D.dir);
		snprintf(wrapper, sizeof(wrapper), "%s/batchd-strace.sh", D.dir);
		f = fopen(wrapper, "w");
		ck_assert_ptr_nonnull(f);
		fprintf(f, "#!/bin/sh\nexec '%s' -f -y -qq -e trace=openat,openat2 -o '%s' '%s' \"$@\"\n",
			strace, trace, batchd);
		fclose(f);
		ck_assert_int_eq(chmod(wrapper, 0755), 0);
		dt_g.batchd = wrapper;   /* this test's process only */
	}
	/* LeakSanitizer cannot run under ptrace: the other cases check for leaks. */
	D.env = env;
	dt_asan_options_env(aenv, sizeof(aenv), traced ? "detect_leaks=0" : "");
	r = dt_daemon_start(&D);
	D.env = NULL;
	dt_g.batchd = batchd;
	ck_assert_msg(r == 0, "batchd did not start");
	if (traced) {
		traced_pid = (pid_t)dt_status_u64("pid");
		atexit(kill_traced);
	}

	c = dt_connect_ok();
	dt_open_refused(c, "faults-mark-begin.bpk", -ENOENT, NULL);
	dt_open_refused(c, "..", -EACCES, NULL);
	dt_open_refused(c, "../../etc/passwd", -EACCES, NULL);
	dt_open_refused(c, "shards/../../" DSET_ONE, -EACCES, NULL);
	dt_open_refused(c, "/etc/passwd", -EACCES, NULL);
	snprintf(t, sizeof(t), "%s/" DSET_ONE, dt_g.packs);
	dt_open_refused(c, t, -EACCES, NULL);
	dt_open_refused(c, "esc.bpk", -EACCES, NULL);
	dt_open_refused(c, "rel-esc.bpk", -EACCES, NULL);
	dt_open_refused(c, "magic.bpk", -EACCES, NULL);
	dt_open_refused(c, "self-magic.bpk", -EACCES, NULL);
	dt_open_refused(c, proc_out, -EACCES, NULL);
	dt_open_refused(c, "/proc/self/fd/0", -EACCES, NULL);
	dt_open_refused(c, "fifo.bpk", -EINVAL, NULL);
	if (have_dev)
		dt_open_refused(c, "dev.bpk", -EINVAL, NULL);
	dt_open_refused(c, "dirpack", -EINVAL, NULL);
	dt_open_refused(c, "dirpack/x.bpk", -ENODATA, NULL);
	dt_open_refused(c, "linkpack", -ELOOP, NULL);
	dt_open_refused(c, "faults-mark-end.bpk", -ENOENT, NULL);
	close(outfd);

	/* The root still serves. */
	dt_ref_ok(&ref, DSET_ONE);
	dt_opts(&o, DSET_ONE, 8, BC_SHUFFLE_NONE, 0);
	s = dt_open_ok(c, &o);
	dt_consume_ok(s, &ref, 3, 0, &run, "after the refusals");
	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
	dt_run_free(&run);
	dt_ref_close(&ref);

	if (traced) {
		size_t inside;
		bool marked;

		/* SIGTERM to batchd itself; strace exits with its status. */
		ck_assert_int_eq(kill(traced_pid, SIGTERM), 0);
		r = dt_daemon_wait(&D, 60000);
		traced_pid = 0;
		ck_assert_msg(r == 0, "batchd under strace exited with %d", r);
		check_trace(trace, root, bad, sizeof(bad), &inside, &marked);
		expect(marked, "the trace %s lacks the begin/end markers", trace);
		printf("strace: %zu descriptors opened under %s while refusing, none elsewhere%s\n",
		       inside, root, bad[0] ? " (NOT: see the failure)" : "");
		expect(!bad[0], "batchd opened outside its root while refusing paths: %s", bad);
		expect(inside >= 1, "the trace shows no open at all under the root: is -y working?");
	}
}
END_TEST

/* ---- the suite ------------------------------------------------------------------------------ */

static Suite *paths_suite(void)
{
	Suite *s = suite_create("paths");

	tcase_add_test(dt_tcase(s, "path_escapes", dt_setup_dir), test_path_escapes);
	return s;
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);   /* notes reach the log before a failing test exits */
	unsetenv("BATCHD_FAULTS");
	return dt_check_main(&D, paths_suite);
}
