/* SPDX-License-Identifier: MIT */
/*
 * bench_disk.h - one disk read job of batchd-bench, shared by the `disk`
 * and `sweep` modes.
 *
 * Why it exists: a user sizing batchd wants to know what the disk gives
 * to the daemon's own read path, and will check that number against fio.
 * So the job reads with daemon/pipeline/io.c, the engine batchd itself uses
 * (io_uring with registered buffers and files and batched completion, or
 * pread where io_uring is refused), in fio's patterns with fio's meaning
 * of every knob: sequential or
 * uniformly random offsets aligned to the block size (each block once
 * per pass, like fio's random map), a fixed queue depth kept full,
 * O_DIRECT, a time-based run with no ramp or a size-based one that reads
 * the region exactly once, and completion latency measured from
 * submission to completion into a log-linear histogram.
 *
 * Threads: each of `threads` workers has its own file descriptor, ring,
 * buffers and histogram, and a disjoint share of the blocks (sequential:
 * a contiguous range; random: a range of positions of one permutation of
 * the whole region), so a size-based run reads every block exactly once
 * whatever the thread count. Thread rules: bench_disk_* are called from
 * one thread, which waits for the workers it starts.
 */
#ifndef BATCHD_TOOLS_BENCH_DISK_H
#define BATCHD_TOOLS_BENCH_DISK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "bench_stats.h"
#include "io.h"
#include "pages.h"

#define BENCH_DISK_MAX_BS (UINT32_C(1) << 30)      /* one registered buffer at most */
#define BENCH_DISK_MAX_THREADS 1024u
#define BENCH_DISK_MAX_BUFFERS (UINT64_C(4) << 30) /* qd * bs per thread */

/*
 * The pages under the read buffers. Asked for: NORMAL (default), HUGE
 * (hugetlb pages if the kernel has some reserved, else transparent huge
 * pages), HUGETLB (MAP_HUGETLB, what fio's iomem=mmaphuge and shmhuge
 * use), THP (madvise(MADV_HUGEPAGE)). Got, after the pages were faulted
 * in (read back from /proc/self/smaps): NORMAL, THP, HUGETLB or MIXED
 * (some 2 MiB ranges huge, some not, or threads that differ). A request
 * the kernel refuses (no hugetlb pages reserved, THP off) falls back to
 * normal pages, and the result says so.
 */
typedef bd_pages bench_pages;
#define BENCH_PAGES_NORMAL BD_PAGES_NORMAL
#define BENCH_PAGES_HUGE BD_PAGES_HUGE
#define BENCH_PAGES_HUGETLB BD_PAGES_HUGETLB
#define BENCH_PAGES_THP BD_PAGES_THP
#define BENCH_PAGES_MIXED BD_PAGES_MIXED

typedef struct bench_disk_opts {
	const char *path;
	bool random;             /* randread, else read (sequential) */
	uint32_t bs;
	unsigned qd;
	unsigned threads;
	int direct;              /* 1 O_DIRECT, 0 buffered, -1 O_DIRECT if it works */
	uint64_t size;           /* bytes of the file to read (and to create); 0 = all */
	double runtime;          /* seconds; 0: read the region once (size-based) */
	bd_io_engine engine;     /* BD_IO_URING or BD_IO_PREAD */
	uint64_t seed;
	bool fixedbufs;          /* register the buffers (io_uring) */
	bool registerfiles;      /* register the file (io_uring) */
	bench_pages pages;       /* the buffers' pages asked for (not MIXED) */
	bool progress;           /* a progress line when stderr is a terminal */
} bench_disk_opts;

/*
 * Defaults: sequential, 128 KiB, QD 32, 1 thread, direct auto, io_uring,
 * fixed buffers and files, normal pages (like fio's default iomem=malloc).
 */
void bench_disk_opts_init(bench_disk_opts *o);

typedef struct bench_disk_result {
	uint64_t region;         /* bytes of the file the job reads from */
	uint64_t io_bytes;       /* bytes read (completed reads only) */
	uint64_t ios;            /* reads completed */
	double runtime_s;        /* first submission to last completion */
	double usr_s, sys_s;     /* CPU time of the workers' read loops (RUSAGE_THREAD) */
	bool direct;             /* what was used */
	bool fixedbufs, registerfiles;
	bool hugepages;          /* every buffer on huge pages (pages is THP or HUGETLB) */
	bench_pages pages;       /* what the buffers got */
	bd_io_engine engine;
	unsigned setup_flags;
	bench_hist clat;         /* ns, submission to completion */
} bench_disk_result;

/*
 * Makes sure o->path holds at least o->size bytes: creates it (or extends
 * it) with pseudo-random data, synced, like fio lays out a file. A block
 * device is used as it is. @return 0 and the usable size in
 * *ret_file_size; -errno with a message in err.
 */
int bench_disk_prepare(const bench_disk_opts *o, uint64_t *ret_file_size, char *err, size_t errlen);

/*
 * Runs the job on a prepared file. res is large (a histogram): the caller
 * allocates it. @return 0 with *res filled; -errno with a message in err
 * (bad alignment for O_DIRECT, a failed read naming its offset, ...).
 */
int bench_disk_run(const bench_disk_opts *o, bench_disk_result *res, char *err, size_t errlen);

/*
 * Command-line options shared by `disk` and `sweep` (getopt_long codes).
 * BENCH_DISK_LONGOPTS lists those both take with one value each; --bs and
 * --qd are single values for `disk` and lists for `sweep`, so each mode
 * adds them itself.
 */
enum {
	BENCH_O_RW = 300, BENCH_O_BS, BENCH_O_QD, BENCH_O_THREADS, BENCH_O_DIRECT,
	BENCH_O_BUFFERED, BENCH_O_SIZE, BENCH_O_RUNTIME, BENCH_O_ENGINE, BENCH_O_SEED,
	BENCH_O_NOFIXED, BENCH_O_NOFILES, BENCH_O_HUGE, BENCH_O_JSON, BENCH_O_SVG,
};
#define BENCH_DISK_LONGOPTS \
	{ "rw", required_argument, NULL, BENCH_O_RW }, \
	{ "threads", required_argument, NULL, BENCH_O_THREADS }, \
	{ "direct", optional_argument, NULL, BENCH_O_DIRECT }, \
	{ "buffered", no_argument, NULL, BENCH_O_BUFFERED }, \
	{ "size", required_argument, NULL, BENCH_O_SIZE }, \
	{ "runtime", required_argument, NULL, BENCH_O_RUNTIME }, \
	{ "seed", required_argument, NULL, BENCH_O_SEED }, \
	{ "no-fixedbufs", no_argument, NULL, BENCH_O_NOFIXED }, \
	{ "no-registerfiles", no_argument, NULL, BENCH_O_NOFILES }, \
	{ "hugepages", optional_argument, NULL, BENCH_O_HUGE }

/*
 * Applies option @ch (a BENCH_O_* code) with its value @arg to @o.
 * @return 0; 2 after printing a usage error naming the option; 1 when
 * @ch is not one of these options.
 */
int bench_disk_option(bench_disk_opts *o, int ch, const char *arg);

/* fio's names and meanings: "read", "randread". */
const char *bench_disk_rw_name(const bench_disk_opts *o);

/* "normal", "huge", "hugetlb", "thp", "mixed": the JSON's names (--hugepages= takes hugetlb, thp). */
const char *bench_pages_name(bench_pages p);

/* The result as one JSON object / as a few human lines. */
void bench_disk_json(const bench_disk_opts *o, const bench_disk_result *res, FILE *f);
void bench_disk_human(const bench_disk_opts *o, const bench_disk_result *res, FILE *f);

#endif
