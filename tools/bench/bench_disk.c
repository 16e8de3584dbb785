/* SPDX-License-Identifier: MIT */
/*
 * bench_disk.c - one disk read job: file layout, worker threads on
 * daemon/pipeline/io.c, results as fio reports them (see bench_disk.h).
 *
 * The hot loop keeps exactly qd reads in flight: each completion is timed,
 * counted and replaced by the next read before the engine is entered
 * again, and the engine hands every queued read to the kernel in the same
 * system call that waits for the next completion.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "bench_disk.h"
#include "pages.h"
#include "progress.h"
#include "units.h"

#define LAYOUT_CHUNK (UINT32_C(1) << 20)

void bench_disk_opts_init(bench_disk_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->bs = 128u << 10;
	o->qd = 32;
	o->threads = 1;
	o->direct = -1;
	o->engine = BD_IO_URING;
	o->seed = UINT64_C(0xb47c4d);
	o->fixedbufs = true;
	o->registerfiles = true;
	o->progress = true;
}

const char *bench_disk_rw_name(const bench_disk_opts *o)
{
	return o->random ? "randread" : "read";
}

const char *bench_pages_name(bench_pages p)
{
	return bd_pages_name(p);
}

__attribute__((format(printf, 3, 4)))
static int fail(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
	return -1;
}

/* ---- layout ----------------------------------------------------------------- */

/* Appends pseudo-random bytes to fd from @from up to @to, then syncs. */
static int layout(int fd, uint64_t from, uint64_t to, bool show, char *err, size_t errlen)
{
	uint64_t *chunk = malloc(LAYOUT_CHUNK);
	bench_rng rng;
	progress p;
	int r = 0;

	if (!chunk)
		return fail(err, errlen, "out of memory"), -ENOMEM;
	bench_rng_seed(&rng, from);
	progress_start(&p, "laying out", to - from);
	p.enabled = p.enabled && show;
	for (uint64_t off = from; off < to;) {
		size_t n = to - off < LAYOUT_CHUNK ? (size_t)(to - off) : LAYOUT_CHUNK;
		ssize_t w;

		/* Incompressible, so no layer below can shrink what is read back. */
		for (size_t i = 0; i < LAYOUT_CHUNK / 8; i++)
			chunk[i] = bench_rng_next(&rng);
		w = pwrite(fd, chunk, n, (off_t)off);
		if (w <= 0) {
			r = w < 0 ? -errno : -EIO;
			fail(err, errlen, "writing at byte %" PRIu64 ": %s", off, strerror(-r));
			goto out;
		}
		off += (uint64_t)w;
		progress_update(&p, off - from, false);
	}
	if (fsync(fd) < 0) {
		r = -errno;
		fail(err, errlen, "fsync: %s", strerror(errno));
	}
out:
	progress_end(&p);
	free(chunk);
	return r;
}

int bench_disk_prepare(const bench_disk_opts *o, uint64_t *ret_file_size, char *err, size_t errlen)
{
	struct stat st;
	uint64_t have;
	int fd, r;

	fd = open(o->path, O_RDWR | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT) {
		if (!o->size)
			return fail(err, errlen, "%s does not exist; give --size to create it", o->path),
			       -ENOENT;
		fd = open(o->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	} else if (fd < 0 && (errno == EACCES || errno == EROFS || errno == EISDIR)) {
		fd = open(o->path, O_RDONLY | O_CLOEXEC);    /* reading is all we need */
	}
	if (fd < 0)
		return r = -errno, fail(err, errlen, "%s: %s", o->path, strerror(errno)), r;
	if (fstat(fd, &st) < 0) {
		r = -errno;
		fail(err, errlen, "%s: %s", o->path, strerror(errno));
		goto out;
	}
	if (S_ISBLK(st.st_mode)) {
		if (ioctl(fd, BLKGETSIZE64, &have) < 0) {
			r = -errno;
			fail(err, errlen, "%s: BLKGETSIZE64: %s", o->path, strerror(errno));
			goto out;
		}
	} else if (S_ISREG(st.st_mode)) {
		have = (uint64_t)st.st_size;
		if (o->size > have) {
			r = layout(fd, have, o->size, o->progress, err, errlen);
			if (r < 0)
				goto out;
			have = o->size;
		}
	} else {
		r = -EINVAL;
		fail(err, errlen, "%s is not a regular file or a block device", o->path);
		goto out;
	}
	if (o->size && o->size > have) {
		r = -ENOSPC;
		fail(err, errlen, "%s holds %" PRIu64 " bytes, fewer than --size", o->path, have);
		goto out;
	}
	*ret_file_size = have;
	r = 0;
out:
	close(fd);
	return r;
}

/* ---- workers ------------------------------------------------------------------ */

typedef struct disk_slot {
	bd_io_req req;
	uint64_t t_submit;       /* ns */
} disk_slot;

/*
 * Start line: workers set up (ring, buffers, registration), report ready
 * and wait; the main thread opens the gate once all are ready, so no
 * worker's setup overlaps another's reads; or it aborts them all when a
 * thread could not be started.
 */
typedef struct disk_gate {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	unsigned ready;
	int state;               /* 0 wait, 1 go, -1 abort */
} disk_gate;

static bool gate_pass(disk_gate *g)
{
	int st;

	pthread_mutex_lock(&g->mu);
	g->ready++;
	pthread_cond_broadcast(&g->cv);
	while (g->state == 0)
		pthread_cond_wait(&g->cv, &g->mu);
	st = g->state;
	pthread_mutex_unlock(&g->mu);
	return st > 0;
}

static void gate_open(disk_gate *g, unsigned workers, int state)
{
	pthread_mutex_lock(&g->mu);
	while (state > 0 && g->ready < workers)
		pthread_cond_wait(&g->cv, &g->mu);
	g->state = state;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
}

typedef struct disk_worker {
	const bench_disk_opts *o;
	disk_gate *gate;
	pthread_t tid;
	int fd;
	uint64_t nblocks;        /* blocks in the whole region */
	uint64_t lo, hi;         /* this worker's positions: blocks (read) or permutation (randread) */

	/* walking through the positions */
	uint64_t pos, pass;
	bench_perm perm;
	bool exhausted;          /* size-based run: every position issued */

	_Atomic uint64_t done_bytes;
	_Atomic bool finished;

	/* results */
	int err;
	char msg[256];
	uint64_t ios, bytes, t_first, t_last;
	double usr_s, sys_s;     /* CPU this thread spent in the loop */
	bool fixedbufs, registerfiles;
	bench_pages pages;       /* what the buffers got */
	bd_io_engine engine;
	unsigned setup_flags;
	bench_hist clat;
} disk_worker;

/* The byte offset of the next read, or false when a size-based run is through. */
static bool next_offset(disk_worker *w, uint64_t *ret_off)
{
	uint64_t blk;

	if (w->exhausted)
		return false;
	blk = w->o->random ? bench_perm_at(&w->perm, w->pos) : w->pos;
	if (++w->pos == w->hi) {
		w->pos = w->lo;
		if (w->o->runtime <= 0)
			w->exhausted = true;
		else if (w->o->random)
			/* A fresh order for every pass, as fio's random map is reset. */
			bench_perm_init(&w->perm, w->nblocks, w->o->seed + ++w->pass);
	}
	*ret_off = blk * w->o->bs;
	return true;
}

static void issue(disk_worker *w, bd_io *io, disk_slot *s, uint64_t off, uint64_t now)
{
	int r;

	s->req.offset = off;
	s->t_submit = now;
	r = bd_io_submit(io, &s->req);
	if (r < 0 && !w->err) {
		w->err = r;
		snprintf(w->msg, sizeof(w->msg), "cannot queue a read: %s", strerror(-r));
	}
}

static double tv_s(struct timeval tv)
{
	return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

/*
 * Reads until the deadline (or through the positions), then completes what
 * it issued. Completions come in batches: each is timed and replaced by
 * the next read, and the whole batch of new reads goes to the kernel in the
 * one system call that also waits for the next completion.
 */
static void worker_loop(disk_worker *w, bd_io *io, disk_slot *slots, bd_io_req **done)
{
	const bench_disk_opts *o = w->o;
	uint64_t deadline = 0, now, off;
	struct rusage ru0, ru1;

	getrusage(RUSAGE_THREAD, &ru0);
	now = w->t_first = bench_now_ns();
	if (o->runtime > 0)
		deadline = now + (uint64_t)(o->runtime * 1e9);
	for (unsigned i = 0; i < o->qd && next_offset(w, &off); i++)
		issue(w, io, &slots[i], off, now);

	while (bd_io_inflight(io)) {
		int n = bd_io_wait_many(io, done, o->qd);
		bool more;

		if (n < 0) {
			w->err = n;
			snprintf(w->msg, sizeof(w->msg), "io_uring_enter: %s", strerror(-n));
			return;  /* the engine is unusable; bd_io_free reaps what it can */
		}
		now = bench_now_ns();
		more = !w->err && !(deadline && now >= deadline);
		for (int i = 0; i < n; i++) {
			bd_io_req *req = done[i];
			disk_slot *s = req->user;

			if (req->result != (int32_t)req->len) {
				if (!w->err) {
					w->err = req->result < 0 ? req->result : -EIO;
					snprintf(w->msg, sizeof(w->msg),
						 "read of %u bytes at byte %" PRIu64 ": %s", req->len,
						 req->offset, req->result < 0 ? strerror(-req->result)
									    : "short read (file shrank?)");
				}
				more = false;
				continue;
			}
			bench_hist_record(&w->clat, now - s->t_submit);
			w->ios++;
			w->bytes += req->len;
			if (more && next_offset(w, &off))
				issue(w, io, s, off, now);
		}
		atomic_store_explicit(&w->done_bytes, w->bytes, memory_order_relaxed);
	}
	w->t_last = bench_now_ns();
	getrusage(RUSAGE_THREAD, &ru1);
	w->usr_s = tv_s(ru1.ru_utime) - tv_s(ru0.ru_utime);
	w->sys_s = tv_s(ru1.ru_stime) - tv_s(ru0.ru_stime);
}

static void *worker_main(void *arg)
{
	disk_worker *w = arg;
	const bench_disk_opts *o = w->o;
	bd_io_opts io_opts = { .engine = o->engine, .queue_depth = o->qd };
	disk_slot *slots = NULL;
	bd_io_req **done = NULL;
	struct iovec *iov = NULL;
	size_t buf_len = 0;
	bench_pages mapped = BENCH_PAGES_NORMAL;
	uint8_t *buf = NULL;
	bd_io *io = NULL;
	int r;

	r = bd_io_new(&io_opts, &io);
	if (r < 0) {
		snprintf(w->msg, sizeof(w->msg), "%s setup: %s", bd_io_engine_name(o->engine),
			 strerror(-r));
		goto setup_failed;
	}
	w->engine = bd_io_engine_of(io);
	w->setup_flags = bd_io_setup_flags(io);
	slots = calloc(o->qd, sizeof(*slots));
	done = calloc(o->qd, sizeof(*done));
	iov = calloc(o->qd, sizeof(*iov));
	/*
	 * Left untouched, like the daemon's pool, so that registering them
	 * faults and pins the pages as it does for the daemon and for fio
	 * (faulting them first with a memset measured 10-20 % slower 1 MiB
	 * reads on a Firecracker VM, the page layout differing).
	 */
	buf = bd_pages_map((size_t)o->bs * o->qd, o->pages, &buf_len, &mapped);
	if (!slots || !done || !iov || !buf) {
		r = -ENOMEM;
		snprintf(w->msg, sizeof(w->msg), "cannot allocate %u buffers of %u bytes", o->qd, o->bs);
		goto setup_failed;
	}
	for (unsigned i = 0; i < o->qd; i++) {
		iov[i].iov_base = buf + (size_t)i * o->bs;
		iov[i].iov_len = o->bs;
		slots[i].req = (bd_io_req){ .fd = w->fd, .len = o->bs, .buf = iov[i].iov_base,
					    .buf_index = -1, .user = &slots[i] };
	}
	if (o->fixedbufs && w->engine == BD_IO_URING && bd_io_register(io, iov, o->qd) == 0) {
		w->fixedbufs = true;
		for (unsigned i = 0; i < o->qd; i++)
			slots[i].req.buf_index = (int)i;
	} else {
		/*
		 * Not pinned by a registration (RLIMIT_MEMLOCK too small, psync,
		 * --no-fixedbufs: the result says fixedbufs=false): fault the
		 * pages in now rather than in the first timed reads.
		 */
		memset(buf, 0, buf_len);
	}
	w->pages = bd_pages_of(buf, mapped);
	if (o->registerfiles && w->engine == BD_IO_URING && bd_io_register_files(io, &w->fd, 1) == 0)
		w->registerfiles = true;

	if (gate_pass(w->gate))
		worker_loop(w, io, slots, done);
	goto out;

setup_failed:
	w->err = r;
	gate_pass(w->gate);
out:
	bd_io_free(io);
	bd_pages_unmap(buf, buf_len);
	free(iov);
	free(done);
	free(slots);
	atomic_store_explicit(&w->finished, true, memory_order_release);
	return NULL;
}

/* ---- the job ------------------------------------------------------------------ */

/* Opens the file for reading with O_DIRECT when asked or possible. */
static int open_for_job(const bench_disk_opts *o, bool *ret_direct, char *err, size_t errlen)
{
	uint32_t mem_align, off_align;
	int fd;

	if (o->direct != 0) {
		fd = open(o->path, O_RDONLY | O_DIRECT | O_CLOEXEC);
		if (fd >= 0 && bd_io_dio_align(fd, &mem_align, &off_align) == 0) {
			if (o->bs % off_align) {
				close(fd);
				return fail(err, errlen, "--bs %u is not a multiple of the O_DIRECT "
					    "alignment (%u) of %s; use --buffered", o->bs, off_align,
					    o->path), -EINVAL;
			}
			*ret_direct = true;
			return fd;
		}
		if (fd >= 0)
			close(fd);
		else if (errno != EINVAL)
			return fail(err, errlen, "%s: %s", o->path, strerror(errno)), -errno;
		if (o->direct > 0)
			return fail(err, errlen, "%s cannot be read with O_DIRECT here; use --buffered",
				    o->path), -EOPNOTSUPP;
		fprintf(stderr, "batchd-bench: note: O_DIRECT does not work on %s; reading it "
			"buffered\n", o->path);
	}
	fd = open(o->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return fail(err, errlen, "%s: %s", o->path, strerror(errno)), -errno;
	*ret_direct = false;
	return fd;
}

static uint64_t file_bytes(int fd)
{
	struct stat st;
	uint64_t n = 0;

	if (fstat(fd, &st) < 0)
		return 0;
	if (S_ISBLK(st.st_mode))
		return ioctl(fd, BLKGETSIZE64, &n) < 0 ? 0 : n;
	return (uint64_t)st.st_size;
}

static void watch_progress(disk_worker *w, unsigned n, const bench_disk_opts *o, uint64_t region)
{
	progress p;

	progress_start(&p, bench_disk_rw_name(o), o->runtime > 0 ? 0 : region);
	p.enabled = p.enabled && o->progress;
	for (;;) {
		struct timespec ts = { .tv_nsec = 100 * 1000 * 1000 };
		uint64_t done = 0;
		unsigned fin = 0;

		for (unsigned i = 0; i < n; i++) {
			done += atomic_load_explicit(&w[i].done_bytes, memory_order_relaxed);
			fin += atomic_load_explicit(&w[i].finished, memory_order_acquire);
		}
		if (fin == n)
			break;
		progress_update(&p, done, false);
		nanosleep(&ts, NULL);
	}
	progress_end(&p);
}

/* One descriptor per thread; the first open settles O_DIRECT or not (and says so once) for all. */
static int open_files(const bench_disk_opts *o, disk_worker *w, bool *ret_direct, char *err,
		      size_t errlen)
{
	bool direct = false;

	for (unsigned i = 0; i < o->threads; i++) {
		bench_disk_opts first_choice = *o;

		if (i > 0)
			first_choice.direct = direct ? 1 : 0;
		w[i].fd = open_for_job(&first_choice, &direct, err, errlen);
		if (w[i].fd < 0)
			return w[i].fd;
	}
	*ret_direct = direct;
	return 0;
}

/* The bytes read: --size or the file, whole blocks, at least one per thread. */
static int region_of(const bench_disk_opts *o, int fd, uint64_t *ret, char *err, size_t errlen)
{
	uint64_t region = file_bytes(fd);

	if (o->size && o->size < region)
		region = o->size;
	region -= region % o->bs;
	if (region / o->bs < o->threads)
		return fail(err, errlen, "%s has %" PRIu64 " whole blocks of %u bytes, fewer than the "
			    "%u threads", o->path, region / o->bs, o->bs, o->threads), -EINVAL;
	*ret = region;
	return 0;
}

/* Give each worker its share of the region and start it. @return how many started. */
static unsigned start_workers(const bench_disk_opts *o, disk_worker *w, disk_gate *gate,
			      uint64_t region, char *err, size_t errlen)
{
	for (unsigned i = 0; i < o->threads; i++) {
		disk_worker *x = &w[i];

		x->o = o;
		x->gate = gate;
		x->nblocks = region / o->bs;
		x->lo = x->nblocks * i / o->threads;
		x->hi = x->nblocks * (i + 1) / o->threads;
		x->pos = x->lo;
		bench_perm_init(&x->perm, x->nblocks, o->seed);
		bench_hist_init(&x->clat);
		atomic_init(&x->done_bytes, 0);
		atomic_init(&x->finished, false);
		if (pthread_create(&x->tid, NULL, worker_main, x) != 0) {
			fail(err, errlen, "cannot start thread %u", i);
			return i;
		}
	}
	return o->threads;
}

/* The workers' results into res. @return 0, or the first worker's error (err says it). */
static int collect(const bench_disk_opts *o, const disk_worker *w, bench_disk_result *res,
		   char *err, size_t errlen)
{
	uint64_t first = UINT64_MAX, last = 0;
	int r = 0;

	res->fixedbufs = res->registerfiles = true;
	res->pages = w[0].pages;
	for (unsigned i = 0; i < o->threads; i++) {
		if (w[i].err && r == 0) {
			r = w[i].err;
			fail(err, errlen, "%s", w[i].msg);
		}
		res->io_bytes += w[i].bytes;
		res->usr_s += w[i].usr_s;
		res->sys_s += w[i].sys_s;
		res->ios += w[i].ios;
		res->fixedbufs = res->fixedbufs && w[i].fixedbufs;
		res->registerfiles = res->registerfiles && w[i].registerfiles;
		if (w[i].pages != res->pages)
			res->pages = BENCH_PAGES_MIXED;
		res->engine = w[i].engine;
		res->setup_flags = w[i].setup_flags;
		bench_hist_merge(&res->clat, &w[i].clat);
		if (w[i].t_first < first)
			first = w[i].t_first;
		if (w[i].t_last > last)
			last = w[i].t_last;
	}
	res->runtime_s = last > first ? (double)(last - first) / 1e9 : 0;
	res->hugepages = res->pages == BENCH_PAGES_THP || res->pages == BENCH_PAGES_HUGETLB;
	return r;
}

int bench_disk_run(const bench_disk_opts *o, bench_disk_result *res, char *err, size_t errlen)
{
	disk_gate gate = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
	disk_worker *w;
	uint64_t region;
	unsigned started;
	bool direct;
	int r;

	if (o->engine == BD_IO_PREAD && o->qd != 1)
		return fail(err, errlen, "the psync engine reads one block at a time: use --qd 1"),
		       -EINVAL;
	w = calloc(o->threads, sizeof(*w));
	if (!w)
		return fail(err, errlen, "out of memory"), -ENOMEM;
	for (unsigned i = 0; i < o->threads; i++)
		w[i].fd = -1;
	r = open_files(o, w, &direct, err, errlen);
	if (r == 0)
		r = region_of(o, w[0].fd, &region, err, errlen);
	if (r < 0)
		goto out;

	started = start_workers(o, w, &gate, region, err, errlen);
	gate_open(&gate, started, started == o->threads ? 1 : -1);
	if (started == o->threads)
		watch_progress(w, o->threads, o, region);
	for (unsigned i = 0; i < started; i++)
		pthread_join(w[i].tid, NULL);
	if (started < o->threads) {
		r = -EAGAIN;
		goto out;
	}
	memset(res, 0, sizeof(*res));
	bench_hist_init(&res->clat);
	res->region = region;
	res->direct = direct;
	r = collect(o, w, res, err, errlen);
out:
	for (unsigned i = 0; i < o->threads; i++)
		if (w[i].fd >= 0)
			close(w[i].fd);
	free(w);
	return r;
}

/* ---- reporting ------------------------------------------------------------------ */

static double per_second(const bench_disk_result *res, double v)
{
	return res->runtime_s > 0 ? v / res->runtime_s : 0;
}

void bench_disk_json(const bench_disk_opts *o, const bench_disk_result *res, FILE *f)
{
	double bw = per_second(res, (double)res->io_bytes);

	fputs("{\"mode\": \"disk\", \"file\": ", f);
	bench_json_string(f, o->path);
	fprintf(f, ", \"rw\": \"%s\", \"bs\": %u, \"iodepth\": %u, \"threads\": %u, "
		"\"direct\": %d, \"ioengine\": \"%s\", \"fixedbufs\": %s, \"registerfiles\": %s, "
		"\"hugepages\": %s, \"pages\": \"%s\", \"pages_asked\": \"%s\", \"setup_flags\": %u, "
		"\"size\": %" PRIu64 ", \"time_based\": %s, \"io_bytes\": %" PRIu64 ", "
		"\"total_ios\": %" PRIu64 ", \"runtime_ms\": %.6f, \"bw_bytes\": %.0f, \"bw\": %.0f, "
		"\"iops\": %.3f, \"usr_cpu\": %.3f, \"sys_cpu\": %.3f, \"clat_ns\": ",
		bench_disk_rw_name(o), o->bs, o->qd, o->threads, res->direct ? 1 : 0,
		res->engine == BD_IO_PREAD ? "psync" : "io_uring", res->fixedbufs ? "true" : "false",
		res->registerfiles ? "true" : "false", res->hugepages ? "true" : "false",
		bench_pages_name(res->pages), bench_pages_name(o->pages), res->setup_flags, res->region, o->runtime > 0 ? "true" : "false", res->io_bytes,
		res->ios, res->runtime_s * 1e3, bw, bw / 1024, per_second(res, (double)res->ios),
		100 * per_second(res, res->usr_s), 100 * per_second(res, res->sys_s));
	bench_hist_json(&res->clat, f);
	fputs("}\n", f);
}

/* The pages the buffers got, and whether that is less than was asked for. */
static const char *pages_desc(const bench_disk_opts *o, const bench_disk_result *res)
{
	bool asked = o->pages != BENCH_PAGES_NORMAL;

	switch (res->pages) {
	case BENCH_PAGES_HUGETLB:
		return ", hugetlb pages";
	case BENCH_PAGES_THP:
		return ", transparent huge pages";
	case BENCH_PAGES_MIXED:
		return asked ? ", partly huge pages (the kernel gave fewer than asked for)"
			     : ", partly transparent huge pages";
	default:
		return asked ? ", normal pages (huge pages refused)" : ", normal pages";
	}
}

void bench_disk_human(const bench_disk_opts *o, const bench_disk_result *res, FILE *f)
{
	const bench_hist *h = &res->clat;
	char bs[32], region[32], total[32];
	double bw = per_second(res, (double)res->io_bytes), iops = per_second(res, (double)res->ios);

	fprintf(f, "%s: bs=%s, qd=%u, threads=%u, %s%s%s%s%s, %s of %s\n", bench_disk_rw_name(o),
		bp_format_size(o->bs, bs, sizeof(bs)), o->qd, o->threads,
		res->engine == BD_IO_PREAD ? "psync" : "io_uring", res->direct ? ", O_DIRECT" : ", buffered",
		res->fixedbufs ? ", fixed buffers" : "", res->registerfiles ? ", fixed files" : "",
		pages_desc(o, res), bp_format_size(res->region, region, sizeof(region)),
		o->path);
	fprintf(f, "  read: IOPS=%.*f%s, BW=%.1fMiB/s (%.1fMB/s) (%s in %.0f ms)\n",
		iops >= 1e4 ? 1 : 0, iops >= 1e4 ? iops / 1e3 : iops, iops >= 1e4 ? "k" : "",
		bw / 1048576.0, bw / 1e6, bp_format_size(res->io_bytes, total, sizeof(total)),
		res->runtime_s * 1e3);
	fprintf(f, "    cpu: usr=%.2f%%, sys=%.2f%%, %.2f us per read\n", 100 * per_second(res, res->usr_s),
		100 * per_second(res, res->sys_s),
		res->ios ? (res->usr_s + res->sys_s) / (double)res->ios * 1e6 : 0);
	fprintf(f, "    clat (usec): min=%.1f, max=%.1f, avg=%.1f, stdev=%.1f\n",
		(double)(h->count ? h->min : 0) / 1e3, (double)h->max / 1e3, bench_hist_mean(h) / 1e3,
		bench_hist_stddev(h) / 1e3);
	fprintf(f, "    clat percentiles (usec): p50=%.1f, p90=%.1f, p99=%.1f, p99.9=%.1f\n",
		(double)bench_hist_percentile(h, 50) / 1e3, (double)bench_hist_percentile(h, 90) / 1e3,
		(double)bench_hist_percentile(h, 99) / 1e3, (double)bench_hist_percentile(h, 99.9) / 1e3);
}
