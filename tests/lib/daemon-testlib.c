/* SPDX-License-Identifier: MIT */
/*
 * daemon-testlib.c - datasets, a daemon under test, a reference reader, a
 * recording consumer and status polling for the tests that run a real
 * batchd (see daemon-testlib.h). The raw protocol client is
 * daemon-testlib-raw.c, the Check suites' helpers daemon-testlib-check.c.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/io_uring.h>
#include <xxhash.h>

#include "daemon-testlib.h"
#include "pack-testlib.h"
#include "sampler.h"

dt_global dt_g;

#define SAMPLE_SEED UINT64_C(0x5eed0fba7c4d)

/* Not check.h's deprecated fail(): ours (below) writes why into err. */
#undef fail

/* ---- small helpers ----------------------------------------------------------- */

__attribute__((format(printf, 3, 4)))
static int fail(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
	return -1;
}

void dt_sleep_ms(int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

bool dt_wait_for(bool (*pred)(void *ctx), void *ctx, int tries)
{
	for (int i = 0; i < tries; i++) {
		if (pred(ctx))
			return true;
		dt_sleep_ms(10);
	}
	return pred(ctx);
}

struct status_pred {
	const char *sock;
	bool (*pred)(const char *json, void *ctx);
	void *ctx;
};

static bool status_holds(void *arg)
{
	struct status_pred *sp = arg;
	char *json = NULL;
	bool ok;

	if (dt_status(sp->sock, &json) < 0)
		return false;
	ok = sp->pred(json, sp->ctx);
	free(json);
	return ok;
}

bool dt_wait_status(const char *sock, bool (*pred)(const char *json, void *ctx), void *ctx,
		    int tries)
{
	struct status_pred sp = { .sock = sock, .pred = pred, .ctx = ctx };

	return dt_wait_for(status_holds, &sp, tries);
}

struct ring_pred {
	const volatile bp_ring_header *hdr;
	uint64_t produced;
};

static bool ring_produced(void *arg)
{
	struct ring_pred *rp = arg;

	return __atomic_load_n(&rp->hdr->produced, __ATOMIC_ACQUIRE) >= rp->produced;
}

static bool ring_stopped(void *arg)
{
	struct ring_pred *rp = arg;

	return __atomic_load_n(&rp->hdr->state, __ATOMIC_ACQUIRE) == BP_RING_STOPPED;
}

bool dt_ring_wait_produced(const volatile bp_ring_header *hdr, uint64_t n, int tries)
{
	struct ring_pred rp = { .hdr = hdr, .produced = n };

	return dt_wait_for(ring_produced, &rp, tries);
}

bool dt_ring_wait_stopped(const volatile bp_ring_header *hdr, int tries)
{
	struct ring_pred rp = { .hdr = hdr };

	return dt_wait_for(ring_stopped, &rp, tries);
}

bool dt_io_uring_usable(char *why, size_t len)
{
	struct io_uring_params p;
	long fd;

	memset(&p, 0, sizeof(p));
	fd = syscall(__NR_io_uring_setup, 4, &p);
	if (fd < 0) {
		snprintf(why, len, "io_uring_setup: %s", strerror(errno));
		return false;
	}
	close((int)fd);
	return true;
}

static int rm_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	remove(path);
	return 0;
}

void dt_rm_rf(const char *path)
{
	nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Run argv (argv[0] a path) with stdout/stderr appended to log. @return exit status or -1. */
static int run_tool(char *const argv[], const char *log)
{
	int st, fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	pid_t pid;

	if (fd < 0)
		return -1;
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		close(fd);
		return -1;
	}
	if (pid == 0) {
		dup2(fd, 1);
		dup2(fd, 2);
		execv(argv[0], argv);
		_exit(127);
	}
	close(fd);
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int write_file(const char *path, const void *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	bool ok;

	if (fd < 0)
		return -1;
	ok = len == 0 || write(fd, buf, len) == (ssize_t)len;
	close(fd);
	return ok ? 0 : -1;
}

/* Link every regular file of dir `from` into dir `to` (made here). */
static int link_dir(const char *from, const char *to)
{
	DIR *d = opendir(from);
	struct dirent *e;
	int r = 0;

	if (!d || mkdir(to, 0755) < 0) {
		if (d)
			closedir(d);
		return -1;
	}
	while ((e = readdir(d))) {
		char a[PATH_MAX + 512], b[PATH_MAX + 512];

		if (e->d_name[0] == '.')
			continue;
		snprintf(a, sizeof(a), "%s/%s", from, e->d_name);
		snprintf(b, sizeof(b), "%s/%s", to, e->d_name);
		if (link(a, b) < 0)
			r = -1;
	}
	closedir(d);
	return r;
}

/* ---- datasets ----------------------------------------------------------------- */

/* keys: the samples' file names as keys (batchd-pack's default); else a pack before fields. */
static int make_pack(const char *out, const char *in, const char *block, const char *shard,
		     bool keys)
{
	char log[PATH_MAX];
	char *argv[16];
	int n = 0;

	snprintf(log, sizeof(log), "%s/batchd-pack.log", dt_g.dir);
	argv[n++] = (char *)dt_g.batchd_pack;
	argv[n++] = "create";
	argv[n++] = (char *)out;
	argv[n++] = (char *)in;
	argv[n++] = "--threads";
	argv[n++] = "2";
	if (block) {
		argv[n++] = "--block-size";
		argv[n++] = (char *)block;
	}
	if (shard) {
		argv[n++] = "--shard-size";
		argv[n++] = (char *)shard;
	}
	if (!keys)
		argv[n++] = "--no-keys";
	argv[n] = NULL;
	if (run_tool(argv, log) != 0) {
		fprintf(stderr, "test-daemon: batchd-pack create %s failed; see %s\n", out, log);
		return -1;
	}
	return 0;
}

int dt_global_setup(void)
{
	const char *tmp = getenv("TMPDIR");
	char in[192], path[PATH_MAX], shard[32];
	pt_samples s;
	bp_dataset *ds;
	bp_dataset_fault fault;
	struct stat st;

	dt_g.batchd = getenv("BATCHD");
	dt_g.batchd_pack = getenv("BATCHD_PACK");
	if (!dt_g.batchd || access(dt_g.batchd, X_OK) < 0 || !dt_g.batchd_pack ||
	    access(dt_g.batchd_pack, X_OK) < 0) {
		fprintf(stderr, "test-daemon: set BATCHD and BATCHD_PACK to the built batchd and "
			"batchd-pack (meson test does)\n");
		return -1;
	}
	/* Socket paths must fit in sun_path: keep the tree short. */
	snprintf(dt_g.dir, sizeof(dt_g.dir), "%s/batchd-test-XXXXXX",
		 tmp && *tmp && strlen(tmp) < 40 ? tmp : "/tmp");
	if (!mkdtemp(dt_g.dir)) {
		perror("test-daemon: mkdtemp");
		return -1;
	}
	snprintf(dt_g.packs, sizeof(dt_g.packs), "%s/packs", dt_g.dir);
	snprintf(in, sizeof(in), "%s/in", dt_g.dir);
	if (mkdir(dt_g.packs, 0755) < 0 || mkdir(in, 0755) < 0)
		return -1;

	/* Sizes 0..4 KiB, about one in eight empty, half random and half text. */
	pt_samples_make(&s, DSET_SAMPLES, 0, 4096, PT_MIXED, SAMPLE_SEED);
	for (size_t i = 0; i < s.n; i++) {
		snprintf(path, sizeof(path), "%s/%04zu", in, i);
		if (write_file(path, pt_sample(&s, i), s.sizes[i]) < 0) {
			pt_samples_free(&s);
			return -1;
		}
	}
	pt_samples_free(&s);

	snprintf(path, sizeof(path), "%s/" DSET_ONE, dt_g.packs);
	if (make_pack(path, in, NULL, NULL, true) < 0)
		return -1;
	snprintf(path, sizeof(path), "%s/" DSET_BLK, dt_g.packs);
	if (make_pack(path, in, "16K", NULL, false) < 0 || stat(path, &st) < 0)
		return -1;
	/* A bit over a third of the stored bytes per shard: three shards. */
	snprintf(shard, sizeof(shard), "%lld", (long long)(st.st_size / 3 + st.st_size / 16));
	snprintf(path, sizeof(path), "%s/" DSET_SHARDS, dt_g.packs);
	if (make_pack(path, in, "16K", shard, true) < 0)
		return -1;
	if (bp_dataset_openat(AT_FDCWD, path, &ds, &fault) < 0)
		return -1;
	dt_g.shards = bp_dataset_shard_count(ds);
	bp_dataset_close(ds);
	dt_rm_rf(in);
	return 0;
}

void dt_global_teardown(void)
{
	if (dt_g.dir[0])
		dt_rm_rf(dt_g.dir);
}

/* ---- the daemon ------------------------------------------------------------------ */

int dt_daemon_init(dt_daemon *d)
{
	char a[PATH_MAX], b[PATH_MAX];

	memset(d, 0, sizeof(*d));
	snprintf(d->dir, sizeof(d->dir), "%s/t-XXXXXX", dt_g.dir);
	if (!mkdtemp(d->dir))
		return -1;
	snprintf(d->root, sizeof(d->root), "%s/root", d->dir);
	snprintf(d->sock, sizeof(d->sock), "%s/sock", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/batchd.log", d->dir);
	if (mkdir(d->root, 0755) < 0)
		return -1;
	for (int i = 0; i < 2; i++) {
		const char *name = i ? DSET_BLK : DSET_ONE;

		snprintf(a, sizeof(a), "%s/%s", dt_g.packs, name);
		snprintf(b, sizeof(b), "%s/%s", d->root, name);
		if (link(a, b) < 0)
			return -1;
	}
	snprintf(a, sizeof(a), "%s/" DSET_SHARDS, dt_g.packs);
	snprintf(b, sizeof(b), "%s/" DSET_SHARDS, d->root);
	return link_dir(a, b);
}

const char *dt_root_path(const dt_daemon *d, const char *name, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%s", d->root, name);
	return buf;
}

bool dt_log_contains(const dt_daemon *d, const char *needle)
{
	FILE *f = fopen(d->log, "r");
	char *text = NULL;
	size_t cap = 0;
	bool found = false;

	if (!f)
		return false;
	/* The whole log at once: a needle may span fgets-sized pieces. */
	if (getdelim(&text, &cap, '\0', f) > 0)
		found = strstr(text, needle) != NULL;
	free(text);
	fclose(f);
	return found;
}

void dt_daemon_dump_log(const dt_daemon *d, int max_lines)
{
	FILE *f = fopen(d->log, "r");
	char line[1024];
	long *starts;
	int n = 0;

	if (!f)
		return;
	starts = calloc((size_t)max_lines, sizeof(*starts));
	if (!starts) {
		fclose(f);
		return;
	}
	/* Remember where the last max_lines lines start, then print from the oldest. */
	for (;;) {
		long at = ftell(f);

		if (!fgets(line, sizeof(line), f))
			break;
		starts[n++ % max_lines] = at;
		while (!strchr(line, '\n') && fgets(line, sizeof(line), f))
			;
	}
	fprintf(stderr, "---- batchd log %s (last %d lines) ----\n", d->log,
		n < max_lines ? n : max_lines);
	if (n) {
		fseek(f, starts[n > max_lines ? n % max_lines : 0], SEEK_SET);
		while (fgets(line, sizeof(line), f))
			fputs(line, stderr);
	}
	fprintf(stderr, "---- end of batchd log ----\n");
	free(starts);
	fclose(f);
}

/* batchd's command line for d into argv (cap entries, NULL-terminated). */
static void daemon_argv(const dt_daemon *d, char **argv, size_t cap)
{
	size_t n = 0;

	argv[n++] = (char *)dt_g.batchd;
	if (d->config) {
		argv[n++] = "-c";
		argv[n++] = (char *)d->config;
	} else {
		/* Never the machine's SYSCONFDIR/batchd/batchd.conf. */
		argv[n++] = "--no-config";
		argv[n++] = "--socket";
		argv[n++] = (char *)d->sock;
		argv[n++] = "--root";
		argv[n++] = (char *)d->root;
		argv[n++] = "--log-level";
		argv[n++] = "debug";
	}
	if (d->engine) {
		argv[n++] = "--io-engine";
		argv[n++] = (char *)d->engine;
	}
	if (d->direct) {
		argv[n++] = "--direct";
		argv[n++] = (char *)d->direct;
	}
	if (d->memory) {
		argv[n++] = "--memory";
		argv[n++] = (char *)d->memory;
	}
	for (size_t i = 0; d->args && d->args[i] && n < cap - 1; i++)
		argv[n++] = (char *)d->args[i];
	argv[n] = NULL;
}

/* Fork and exec argv with d's environment, stderr to d's log. @return the pid, or -1. */
static pid_t spawn(const dt_daemon *d, char *const argv[])
{
	pid_t parent = getpid(), pid;
	int logfd = open(d->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	int nullfd = open("/dev/null", O_RDWR | O_CLOEXEC);

	if (logfd < 0 || nullfd < 0) {
		if (logfd >= 0)
			close(logfd);
		if (nullfd >= 0)
			close(nullfd);
		return -1;
	}
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		/* A test that fails exits at once, without teardown: take the daemon with it. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		/* The daemon's own environment: putenv keeps the (copied) strings. */
		for (size_t i = 0; d->env && d->env[i]; i++)
			putenv((char *)d->env[i]);
		dup2(nullfd, 0);
		dup2(nullfd, 1);
		dup2(logfd, 2);
		execv(argv[0], argv);
		_exit(127);
	}
	close(logfd);
	close(nullfd);
	return pid;
}

/* Wait until d's socket answers (or d exits): @return as dt_daemon_start. */
static int await_answer(dt_daemon *d)
{
	/*
	 * Up to a minute: sanitizer builds and a cold CUDA probe are slow to
	 * start. Polled often: the allocation countdown starts it many times.
	 */
	for (int i = 0; i < 30000; i++) {
		bc_client *c;
		int st, r;

		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			d->pid = 0;
			d->exit_status = st;
			if (d->may_exit)
				return 1;
			fprintf(stderr, "test-daemon: batchd exited (status %d) before answering\n",
				WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
			dt_daemon_dump_log(d, 40);
			return -1;
		}
		r = bc_connect(d->sock, &c);
		if (r == 0) {
			bc_disconnect(c);
			return 0;
		}
		/* Refused by the daemon (not "nobody there"): it is up. */
		if (d->any_answer && r != -ENOENT && r != -ECONNREFUSED && r != -EAGAIN)
			return 0;
		dt_sleep_ms(2);
	}
	fprintf(stderr, "test-daemon: batchd never answered on %s\n", d->sock);
	dt_daemon_dump_log(d, 40);
	return -1;
}

int dt_daemon_start(dt_daemon *d)
{
	char *argv[40];
	pid_t pid;

	daemon_argv(d, argv, sizeof(argv) / sizeof(argv[0]));
	pid = spawn(d, argv);
	if (pid < 0)
		return -1;
	d->pid = pid;
	return await_answer(d);
}

const char *dt_asan_options_env(char *buf, size_t len, const char *extra)
{
	const char *cur = getenv("ASAN_OPTIONS");

	snprintf(buf, len, "ASAN_OPTIONS=%s%s%s", cur ? cur : "", cur && *cur ? ":" : "", extra);
	return buf;
}

int dt_daemon_wait(dt_daemon *d, int timeout_ms)
{
	int st, r;

	if (!d->pid)
		return -1;
	for (int i = 0; i <= timeout_ms / 10; i++) {
		pid_t w = waitpid(d->pid, &st, WNOHANG);

		if (w == d->pid) {
			d->pid = 0;
			r = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
			if (r != 0) {
				fprintf(stderr, "test-daemon: batchd stopped with status %d\n", r);
				dt_daemon_dump_log(d, 200);
			}
			return r;
		}
		if (w < 0 && errno != EINTR)
			return -1;
		dt_sleep_ms(10);
	}
	return -ETIMEDOUT;
}

int dt_daemon_stop(dt_daemon *d)
{
	int st, r;

	if (!d->pid)
		return -1;
	kill(d->pid, SIGTERM);
	/* The daemon gives sessions 10 s to drain; wait longer than that. */
	r = dt_daemon_wait(d, 60000);
	if (r != -ETIMEDOUT)
		return r;
	fprintf(stderr, "test-daemon: batchd did not exit within 60 s of SIGTERM\n");
	dt_daemon_dump_log(d, 80);
	kill(d->pid, SIGKILL);
	waitpid(d->pid, &st, 0);
	d->pid = 0;
	return -1;
}

/* ---- reference reader --------------------------------------------------------------- */

int dt_ref_open(dt_ref *ref, const char *path)
{
	bp_dataset_fault fault;

	memset(ref, 0, sizeof(*ref));
	if (bp_dataset_openat(AT_FDCWD, path, &ref->ds, &fault) < 0)
		return -1;
	if (bp_sample_reader_new(ref->ds, &ref->r) < 0) {
		bp_dataset_close(ref->ds);
		ref->ds = NULL;
		return -1;
	}
	return 0;
}

void dt_ref_close(dt_ref *ref)
{
	bp_sample_reader_free(ref->r);
	bp_dataset_close(ref->ds);
	memset(ref, 0, sizeof(*ref));
}

int dt_ref_check(dt_ref *ref, uint64_t id, const void *data, size_t len, char *err,
		 size_t errlen)
{
	bp_dataset_fault fault;
	const uint8_t *want;
	uint64_t size;
	int r = bp_sample_reader_get(ref->r, id, &want, &size, &fault);

	if (r < 0)
		return fail(err, errlen, "reference read of sample %" PRIu64 ": %s", id, strerror(-r));
	if (size != len)
		return fail(err, errlen, "sample %" PRIu64 ": %zu bytes delivered, %" PRIu64
			    " in the pack", id, len, size);
	if (len && memcmp(want, data, len) != 0)
		return fail(err, errlen, "sample %" PRIu64 ": bytes differ from the pack", id);
	return 0;
}

/* ---- recording consumer ----------------------------------------------------------------- */

void dt_run_free(dt_run *run)
{
	free(run->ev);
	free(run->ids);
	free(run->hashes);
	memset(run, 0, sizeof(*run));
}

static dt_event *run_event(dt_run *run)
{
	if (run->nev == run->evcap) {
		size_t cap = run->evcap ? run->evcap * 2 : 64;
		dt_event *e = realloc(run->ev, cap * sizeof(*e));

		if (!e)
			abort();
		run->ev = e;
		run->evcap = cap;
	}
	memset(&run->ev[run->nev], 0, sizeof(run->ev[0]));
	run->ev[run->nev].first = run->nids;
	return &run->ev[run->nev++];
}

static void run_sample(dt_run *run, uint64_t id, uint64_t hash)
{
	if (run->nids == run->idcap) {
		size_t cap = run->idcap ? run->idcap * 2 : 1024;
		uint64_t *a = realloc(run->ids, cap * sizeof(*a));
		uint64_t *b = a ? realloc(run->hashes, cap * sizeof(*b)) : NULL;

		if (!a || !b)
			abort();
		run->ids = a;
		run->hashes = b;
		run->idcap = cap;
	}
	run->ids[run->nids] = id;
	run->hashes[run->nids++] = hash;
}

int dt_batch_check(const bc_batch *b, dt_ref *ref, char *err, size_t errlen)
{
	uint32_t n = bc_batch_count(b);
	const uint8_t *all;
	const void *p;
	size_t total, at = 0, len;

	all = bc_batch_data(b, &total);
	for (uint32_t i = 0; i < n; i++) {
		uint64_t id = bc_batch_sample_id(b, i);

		if (bc_batch_sample(b, i, &p, &len) < 0)
			return fail(err, errlen, "batch %" PRIu64 ": sample %u unreadable",
				    bc_batch_index(b), i);
		/* The payload is the samples back to back, in sample order. */
		if ((const uint8_t *)p != all + at || at + len > total)
			return fail(err, errlen, "batch %" PRIu64 ": sample %u is not at payload "
				    "offset %zu", bc_batch_index(b), i, at);
		at += len;
		if (ref && dt_ref_check(ref, id, p, len, err, errlen) < 0)
			return -1;
	}
	if (at != total)
		return fail(err, errlen, "batch %" PRIu64 ": payload of %zu bytes holds %zu of samples",
			    bc_batch_index(b), total, at);
	if (bc_batch_sample(b, n, &p, &len) != -ERANGE)
		return fail(err, errlen, "bc_batch_sample(count) is not -ERANGE");
	return 0;
}

/* Check and record one batch; released whatever happens. */
static int take_batch(bc_stream *s, bc_batch *b, dt_ref *ref, uint64_t want_epoch,
		      uint64_t want_batch, dt_run *run, char *err, size_t errlen)
{
	uint32_t n = bc_batch_count(b);
	dt_event *ev = run_event(run);
	const void *p;
	size_t len;
	int r = -1;

	ev->epoch = bc_batch_epoch(b);
	ev->batch = bc_batch_index(b);
	ev->count = n;
	run->batches++;
	if (ev->epoch != want_epoch || ev->batch != want_batch) {
		fail(err, errlen, "batch (%" PRIu64 ", %" PRIu64 ") arrived where bc_stream_position "
		     "said (%" PRIu64 ", %" PRIu64 ")", ev->epoch, ev->batch, want_epoch, want_batch);
		goto out;
	}
	if (dt_batch_check(b, ref, err, errlen) < 0)
		goto out;
	for (uint32_t i = 0; i < n; i++) {
		bc_batch_sample(b, i, &p, &len);
		run_sample(run, bc_batch_sample_id(b, i), XXH64(p, len, 0));
	}
	r = 0;
out:
	if (bc_release(b) != 0 && r == 0)
		r = fail(err, errlen, "bc_release failed");
	if (r == 0 && bc_release(b) != -EINVAL)
		r = fail(err, errlen, "a second bc_release is not -EINVAL");
	return r;
}

int dt_consume(bc_stream *s, dt_ref *ref, size_t max_batches, unsigned flags, int timeout_ms,
	       dt_run *run, char *err, size_t errlen)
{
	size_t taken = 0;

	while (taken < max_batches) {
		uint64_t epoch, batch;
		bc_batch *b;
		dt_event *ev;
		int r;

		bc_stream_position(s, &epoch, &batch);
		r = bc_next(s, &b, timeout_ms);
		if (r == 0) {
			taken++;
			if (take_batch(s, b, ref, epoch, batch, run, err, errlen) < 0)
				return -1;
			continue;
		}
		if (r == BC_EPOCH_END) {
			ev = run_event(run);
			ev->result = r;
			ev->epoch = epoch;
			run->epoch_ends++;
			if (flags & DT_STOP_EPOCH_END)
				return 0;
			continue;
		}
		if (r == -ETIMEDOUT)
			return fail(err, errlen, "no batch (%" PRIu64 ", %" PRIu64 ") within %d ms",
				    epoch, batch, timeout_ms);
		if (!(flags & DT_KEEP_FAILURES) || r == -ESHUTDOWN || r == -EPIPE || r == -EPROTO ||
		    r == -ENOBUFS)
			return fail(err, errlen, "bc_next at (%" PRIu64 ", %" PRIu64 "): %s (%d): %s",
				    epoch, batch, bc_strerror(r), r, bc_stream_error(s));
		/* A batch the daemon could not build: the stream moves past it. */
		taken++;
		ev = run_event(run);
		ev->result = r;
		ev->epoch = epoch;
		ev->batch = batch;
		run->failures++;
		snprintf(run->last_error, sizeof(run->last_error), "%s", bc_stream_error(s));
	}
	return 0;
}

/* ---- status ------------------------------------------------------------------------ */

int dt_status(const char *sock, char **ret_json)
{
	bc_client *c;
	int r = bc_connect(sock, &c);

	if (r < 0)
		return r;
	r = bc_status(c, ret_json);
	bc_disconnect(c);
	return r;
}

bool dt_json_u64(const char *json, const char *after, const char *key, uint64_t *ret)
{
	const char *p = after ? strstr(json, after) : json;
	char pat[64];

	if (!p)
		return false;
	snprintf(pat, sizeof(pat), "\"%s\": ", key);
	p = strstr(p, pat);
	return p && sscanf(p + strlen(pat), "%" SCNu64, ret) == 1;
}

size_t dt_json_sessions(const char *json)
{
	const char *p = strstr(json, "\"sessions\": [");
	size_t n = 0;

	if (!p)
		return (size_t)-1;
	while ((p = strstr(p, "{\"id\": ")))
		n++, p++;
	return n;
}

static bool sessions_are(const char *json, void *want)
{
	return dt_json_sessions(json) == *(const size_t *)want;
}

bool dt_wait_sessions(const char *sock, size_t n, int tries)
{
	return dt_wait_status(sock, sessions_are, &n, tries);
}
