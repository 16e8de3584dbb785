/* SPDX-License-Identifier: MIT */
/*
 * batchd-bench - can this machine feed its GPUs? Disk, decode, pipeline,
 * block-size sweep and host-to-device benchmarks.
 *
 *   batchd-bench disk FILE ...      read FILE as batchd does; fio's numbers and JSON keys
 *   batchd-bench sweep FILE ...     bandwidth over block size x queue depth, table + SVG + CSV
 *   batchd-bench decode DATASET ... zstd decode throughput of a pack on N threads
 *   batchd-bench pipeline DATASET . a batchd and N trainer processes, end to end
 *                                   (--device N: into GPU memory)
 *   batchd-bench h2d ...            pinned vs pageable host-to-device copies (CUDA)
 *
 * This file holds main(), the usage text and the `disk` command; each
 * other mode lives in its bench_<mode>.c. Exit status: 0 success, 1
 * failure, 2 usage error (the message names the argument), 77 when the
 * mode cannot run on this machine (h2d or pipeline --device without CUDA).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batchd-build.h"
#include "bench.h"
#include "bench_disk.h"
#include "bench_svg.h"
#include "cli.h"
#include "units.h"

static const char usage_text[] =
	"usage: batchd-bench disk FILE [--rw read|randread] [--bs SIZE] [--qd N] [--threads N]\n"
	"                    [--direct[=0|1] | --buffered] [--size SIZE] [--runtime SEC]\n"
	"                    [--engine io_uring|psync] [--seed N] [--hugepages[=hugetlb|thp]]\n"
	"                    [--no-fixedbufs] [--no-registerfiles] [--json] [--svg OUT.svg]\n"
	"       batchd-bench sweep FILE [--bs LIST] [--qd LIST] [--rw read|randread]\n"
	"                    [--runtime SEC] [--threads N] [--direct[=0|1] | --buffered]\n"
	"                    [--size SIZE] [--hugepages[=hugetlb|thp]] [--svg OUT.svg] [--csv OUT.csv]\n"
	"                    [--json]\n"
	"       batchd-bench decode DATASET [--threads N] [--seconds SEC] [--round-size SIZE]\n"
	"                    [--json]\n"
	"       batchd-bench pipeline DATASET [--clients N] [--batch-size B] [--step-ms T]\n"
	"                    [--step-cpu-ms T] [--shuffle none|global|block]\n"
	"                    [--seconds SEC | --epochs E] [--prefetch P] [--socket PATH]\n"
	"                    [--batchd PATH] [--memory SIZE] [--device N [--touch] | --in-memory]\n"
	"                    [--json] [--svg OUT.svg]\n"
	"       batchd-bench h2d [--size SIZE] [--reps N] [--device N] [--json]\n"
	BP_SIZE_HELP
	"\n"
	"disk: without --runtime, reads the first --size bytes of FILE (all of it by\n"
	"default) once; with it, reads for that long. FILE is created at --size if absent.\n"
	"Read buffers are on normal pages; --hugepages puts them on hugetlb pages if\n"
	"vm.nr_hugepages reserves enough, else on transparent huge pages (=hugetlb or =thp:\n"
	"only that kind); a kind the kernel refuses falls back to normal pages, and the\n"
	"result names the pages the buffers got (JSON: \"pages\").\n"
	"Defaults: disk --rw read --bs 128K --qd 32, O_DIRECT when the file system takes it;\n"
	"sweep --rw randread --bs 4K,64K,1M --qd 1,2,4,8,16,32,64 --runtime 2 per point;\n"
	"decode --threads <all CPUs>, one pass, --round-size 256M (the stored bytes read\n"
	"into memory, untimed, before each timed decode; a larger pack is decoded in rounds\n"
	"of that size); pipeline --clients 1 --batch-size 32\n"
	"--shuffle global --seconds 10, host memory (--device N: CUDA device N; --touch\n"
	"copies every batch back and compares it); h2d --size 256M --reps 20.\n"
	"pipeline DATASET: a pack or a directory of packs; without --socket it starts a batchd\n"
	"serving DATASET's directory; with --socket PATH, a DATASET that exists here is sent\n"
	"as an absolute path (it must lie under one of that batchd's roots), anything else\n"
	"as a name relative to its roots.\n"
	"pipeline steps: --step-cpu-ms burns that much of the client's CPU time, then\n"
	"--step-ms sleeps; --in-memory runs the same loop over one epoch copied into the\n"
	"client's memory first (the baseline: no loader running).\n"
	"SEC takes s, ms or m (\"10\", \"500ms\").\n";

/* --hugepages[=hugetlb|thp]. @return 0, or 2 after the usage error. */
static int parse_pages(bench_disk_opts *o, const char *arg)
{
	if (!arg)
		o->pages = BENCH_PAGES_HUGE;
	else if (!strcmp(arg, "hugetlb"))
		o->pages = BENCH_PAGES_HUGETLB;
	else if (!strcmp(arg, "thp"))
		o->pages = BENCH_PAGES_THP;
	else
		return cli_usage("--hugepages: '%s' is not hugetlb or thp", arg);
	return 0;
}

int bench_disk_option(bench_disk_opts *o, int ch, const char *arg)
{
	uint64_t v;
	double d;

	switch (ch) {
	case BENCH_O_RW:
		if (!strcmp(arg, "read"))
			o->random = false;
		else if (!strcmp(arg, "randread"))
			o->random = true;
		else
			return cli_usage("--rw: '%s' is not read or randread", arg);
		return 0;
	case BENCH_O_BS:
		if (bp_parse_size(arg, &v) < 0 || v == 0 || v > BENCH_DISK_MAX_BS)
			return cli_usage("--bs: '%s' is not a size from 1 byte to 1 GiB (" BP_SIZE_FORMS ")", arg);
		o->bs = (uint32_t)v;
		return 0;
	case BENCH_O_QD:
		if (cli_parse_u64(arg, &v) < 0 || v == 0 || v > BD_IO_MAX_DEPTH)
			return cli_usage("--qd: '%s' is not a number from 1 to %u", arg, BD_IO_MAX_DEPTH);
		o->qd = (unsigned)v;
		return 0;
	case BENCH_O_THREADS:
		if (cli_parse_u64(arg, &v) < 0 || v == 0 || v > BENCH_DISK_MAX_THREADS)
			return cli_usage("--threads: '%s' is not a number from 1 to %u", arg,
					 BENCH_DISK_MAX_THREADS);
		o->threads = (unsigned)v;
		return 0;
	case BENCH_O_DIRECT:
		if (!arg || !strcmp(arg, "1"))
			o->direct = 1;
		else if (!strcmp(arg, "0"))
			o->direct = 0;
		else
			return cli_usage("--direct: '%s' is not 0 or 1", arg);
		return 0;
	case BENCH_O_BUFFERED:
		o->direct = 0;
		return 0;
	case BENCH_O_SIZE:
		if (bp_parse_size(arg, &v) < 0 || v == 0 || v > (UINT64_C(1) << 62))
			return cli_usage("--size: '%s' is not a size above 0 (" BP_SIZE_FORMS ")", arg);
		o->size = v;
		return 0;
	case BENCH_O_RUNTIME:
		if (bench_parse_seconds(arg, &d) < 0 || d <= 0)
			return cli_usage("--runtime: '%s' is not a duration above 0 (\"10\", \"500ms\")",
					 arg);
		o->runtime = d;
		return 0;
	case BENCH_O_ENGINE:
		if (!strcmp(arg, "io_uring"))
			o->engine = BD_IO_URING;
		else if (!strcmp(arg, "psync") || !strcmp(arg, "pread"))
			o->engine = BD_IO_PREAD;
		else
			return cli_usage("--engine: '%s' is not io_uring or psync", arg);
		return 0;
	case BENCH_O_SEED:
		if (cli_parse_u64(arg, &v) < 0)
			return cli_usage("--seed: '%s' is not a number", arg);
		o->seed = v;
		return 0;
	case BENCH_O_NOFIXED:
		o->fixedbufs = false;
		return 0;
	case BENCH_O_NOFILES:
		o->registerfiles = false;
		return 0;
	case BENCH_O_HUGE:
		return parse_pages(o, arg);
	}
	return 1;
}

/* --svg: the reads' completion latency as a distribution (bench_svg.h). @return the exit status. */
static int disk_svg(const bench_disk_opts *o, const bench_disk_result *res, const char *out)
{
	bench_svg_series s = { .name = "reads", .h = &res->clat };
	char title[256], bs[32];
	int r;

	snprintf(title, sizeof(title), "batchd-bench disk: %s, %s, bs %s, qd %u, %u thread%s, %s",
		 bench_disk_rw_name(o), res->direct ? "O_DIRECT" : "buffered",
		 bp_format_size(o->bs, bs, sizeof(bs)), o->qd, o->threads,
		 o->threads == 1 ? "" : "s", o->path);
	r = bench_svg_cdf(out, title, "read latency, submission to completion", &s, 1);
	if (r < 0) {
		fprintf(stderr, "batchd-bench: %s: %s\n", out,
			r == -ENODATA ? "no read completed: no chart" : strerror(-r));
		return 1;
	}
	return 0;
}

int bench_cmd_disk(int argc, char **argv)
{
	static const struct option opts[] = {
		BENCH_DISK_LONGOPTS,
		{ "bs", required_argument, NULL, BENCH_O_BS },
		{ "qd", required_argument, NULL, BENCH_O_QD },
		{ "iodepth", required_argument, NULL, BENCH_O_QD },
		{ "engine", required_argument, NULL, BENCH_O_ENGINE },
		{ "json", no_argument, NULL, BENCH_O_JSON },
		{ "svg", required_argument, NULL, BENCH_O_SVG },
		{ NULL, 0, NULL, 0 },
	};
	const char *svg = NULL;
	bench_disk_result *res;
	bench_disk_opts o;
	uint64_t file_size;
	bool json = false, qd_given = false;
	char err[512];
	int ch, r;

	bench_disk_opts_init(&o);
	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "-:", opts, NULL)) != -1) {
		if (ch == 1) {
			if (o.path)
				return cli_usage("disk: unexpected argument '%s'", optarg);
			o.path = optarg;
			continue;
		}
		if (ch == BENCH_O_JSON) {
			json = true;
			continue;
		}
		if (ch == BENCH_O_SVG) {
			svg = optarg;
			continue;
		}
		if (ch == '?')
			return cli_usage("disk: unknown option '%s'", argv[optind - 1]);
		if (ch == ':')
			return cli_usage("disk: '%s' needs a value", argv[optind - 1]);
		qd_given = qd_given || ch == BENCH_O_QD;
		r = bench_disk_option(&o, ch, optarg);
		if (r)
			return 2;
	}
	if (!o.path)
		return cli_usage("disk: missing FILE");
	if (o.engine == BD_IO_PREAD) {
		if (qd_given && o.qd != 1)
			fprintf(stderr, "batchd-bench: note: psync reads one block at a time; "
				"--qd %u becomes 1\n", o.qd);
		o.qd = 1;
	}
	if ((uint64_t)o.qd * o.bs > BENCH_DISK_MAX_BUFFERS)
		return cli_usage("--qd x --bs: %u x %u bytes of buffers is over 4 GiB", o.qd, o.bs);
	o.progress = !json;

	if (bench_disk_prepare(&o, &file_size, err, sizeof(err)) < 0) {
		fprintf(stderr, "batchd-bench: %s\n", err);
		return 1;
	}
	res = malloc(sizeof(*res));
	if (!res) {
		fprintf(stderr, "batchd-bench: out of memory\n");
		return 1;
	}
	r = bench_disk_run(&o, res, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "batchd-bench: %s\n", err);
		free(res);
		return 1;
	}
	if (json)
		bench_disk_json(&o, res, stdout);
	else
		bench_disk_human(&o, res, stdout);
	r = svg ? disk_svg(&o, res, svg) : 0;
	free(res);
	return r;
}

int main(int argc, char **argv)
{
	static const cli_cmd modes[] = {
		{ "disk", bench_cmd_disk },
		{ "sweep", bench_cmd_sweep },
		{ "decode", bench_cmd_decode },
		{ "pipeline", bench_cmd_pipeline },
		{ "h2d", bench_cmd_h2d },
	};
	int r;

	cli_init("batchd-bench", usage_text);
	if (argc < 2)
		return cli_usage("missing mode (disk, sweep, decode, pipeline or h2d)");
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))
		return cli_help();
	if (!strcmp(argv[1], "--version")) {
		printf("batchd-bench %s\n", BATCHD_VERSION);
		return 0;
	}
	r = cli_run(modes, sizeof(modes) / sizeof(modes[0]), argc, argv);
	return r >= 0 ? r : cli_usage("unknown mode '%s'", argv[1]);
}
