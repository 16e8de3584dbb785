/* SPDX-License-Identifier: MIT */
/*
 * bench_sweep.c - `batchd-bench sweep`: read bandwidth over a grid of
 * block sizes and queue depths, as a table, a CSV and an SVG chart.
 *
 * Why: choosing batchd's block size (at pack time) and queue depth (in
 * batchd.conf) is choosing a point on this grid. The chart shows for each
 * block size where more requests in flight stop buying bandwidth: the
 * disk has saturated, and a deeper queue only adds latency. Each point is
 * one bench_disk_run (time-based, same file, same pattern); the SVG is
 * written by hand, plain XML, so it needs no library and opens anywhere.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "bench_disk.h"
#include "cli.h"
#include "units.h"

#define MAX_LIST 16

typedef struct sweep_point {
	uint32_t bs;
	unsigned qd;
	double bw, iops, mean_ns, runtime_s;
	uint64_t p50, p99, p999, io_bytes;
	bench_hist *clat;        /* kept for --json */
} sweep_point;

typedef struct sweep {
	bench_disk_opts o;       /* the fixed options; bs and qd vary */
	uint64_t bs[MAX_LIST], qd[MAX_LIST];
	size_t nbs, nqd;
	sweep_point *pt;         /* nbs * nqd, row-major by block size */
	uint64_t region;
	bool direct;
} sweep;

static const char *const palette[] = {
	"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
};

/* ---- SVG ------------------------------------------------------------------------ */

/* A 1-2-2.5-5 step giving about five ticks up to max. */
static double nice_step(double max)
{
	static const double mult[] = { 1, 2, 2.5, 5, 10 };
	double raw = max / 5, mag;

	if (!(raw > 0))
		return 1;
	mag = pow(10, floor(log10(raw)));
	for (size_t i = 0; i < sizeof(mult) / sizeof(mult[0]); i++)
		if (mult[i] * mag >= raw)
			return mult[i] * mag;
	return 10 * mag;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

enum { W = 880, H = 520, PL = 90, PR = W - 170, PT = 56, PB = H - 64 };

static double x_of(double lo, double hi, uint64_t qd)
{
	if (hi <= lo)
		return (PL + PR) / 2.0;
	return PL + 20 + (log2((double)qd) - lo) / (hi - lo) * (PR - PL - 40);
}

static double y_of(double mbs, double ymax)
{
	return PB - mbs / ymax * (PB - PT);
}

/* The chart's scale: queue depths sorted, their log2 range, the bandwidth axis. */
typedef struct svg_scale {
	uint64_t qds[MAX_LIST];
	double lo, hi, ymax, step;
} svg_scale;

static void svg_scale_of(const sweep *s, svg_scale *sc)
{
	memcpy(sc->qds, s->qd, s->nqd * sizeof(sc->qds[0]));
	qsort(sc->qds, s->nqd, sizeof(sc->qds[0]), cmp_u64);
	sc->lo = log2((double)sc->qds[0]);
	sc->hi = log2((double)sc->qds[s->nqd - 1]);
	sc->ymax = 0;
	for (size_t i = 0; i < s->nbs * s->nqd; i++)
		if (s->pt[i].bw / 1e6 > sc->ymax)
			sc->ymax = s->pt[i].bw / 1e6;
	sc->step = nice_step(sc->ymax);
	sc->ymax = sc->step * ceil(sc->ymax / sc->step);
	if (!(sc->ymax > 0))
		sc->ymax = sc->step;
}

/* The frame: title, grid, ticks at every queue depth swept, axes and their labels. */
static void svg_frame(FILE *f, const sweep *s, const svg_scale *sc)
{
	fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
		"viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"13\">\n"
		"<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H, W, H, W, H);
	fprintf(f, "<text x=\"%d\" y=\"28\" font-size=\"16\" text-anchor=\"middle\">"
		"batchd-bench sweep: %s, %s, %u thread%s, ", (PL + PR) / 2,
		bench_disk_rw_name(&s->o), s->direct ? "O_DIRECT" : "buffered", s->o.threads,
		s->o.threads == 1 ? "" : "s");
	bench_xml_text(f, s->o.path);
	fputs("</text>\n", f);

	for (double v = 0; v <= sc->ymax + sc->step / 2; v += sc->step) {
		double y = y_of(v, sc->ymax);

		fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#dddddd\"/>\n",
			PL, y, PR, y);
		fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", PL - 8, y + 4, v);
	}
	for (size_t i = 0; i < s->nqd; i++) {
		double x = x_of(sc->lo, sc->hi, sc->qds[i]);

		fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"black\"/>\n",
			x, PB, x, PB + 6);
		fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%" PRIu64 "</text>\n",
			x, PB + 21, sc->qds[i]);
	}
	fprintf(f, "<polyline points=\"%d,%d %d,%d %d,%d\" fill=\"none\" stroke=\"black\"/>\n",
		PL, PT, PL, PB, PR, PB);
	fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">queue depth (requests in flight, "
		"log scale)</text>\n", (PL + PR) / 2, H - 20);
	fprintf(f, "<text x=\"24\" y=\"%d\" text-anchor=\"middle\" transform=\"rotate(-90 24 %d)\">"
		"bandwidth (MB/s)</text>\n", (PT + PB) / 2, (PT + PB) / 2);
}

/* Block size b's line, points in queue-depth order, and its legend entry. */
static void svg_line(FILE *f, const sweep *s, const svg_scale *sc, size_t b)
{
	const char *color = palette[b % (sizeof(palette) / sizeof(palette[0]))];
	double ly = PT + 10 + 22.0 * (double)b;
	char buf[64];

	fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", color);
	for (size_t q = 0; q < s->nqd; q++)
		for (size_t k = 0; k < s->nqd; k++)
			if (s->qd[k] == sc->qds[q]) {
				const sweep_point *p = &s->pt[b * s->nqd + k];

				fprintf(f, "%s%.1f,%.1f", q ? " " : "", x_of(sc->lo, sc->hi, p->qd),
					y_of(p->bw / 1e6, sc->ymax));
				break;
			}
	fputs("\"/>\n", f);
	for (size_t k = 0; k < s->nqd; k++) {
		const sweep_point *p = &s->pt[b * s->nqd + k];

		fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n",
			x_of(sc->lo, sc->hi, p->qd), y_of(p->bw / 1e6, sc->ymax), color);
	}
	fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"%s\" "
		"stroke-width=\"3\"/>\n", PR + 20, ly, PR + 48, ly, color);
	fprintf(f, "<text x=\"%d\" y=\"%.1f\">bs %s</text>\n", PR + 56, ly + 4,
		bp_format_size(s->bs[b], buf, sizeof(buf)));
}

/* Bandwidth (MB/s) against queue depth (log2 axis), one line per block size. */
static int write_svg(const sweep *s, const char *out)
{
	svg_scale sc;
	FILE *f = fopen(out, "w");

	if (!f)
		return -errno;
	svg_scale_of(s, &sc);
	svg_frame(f, s, &sc);
	for (size_t b = 0; b < s->nbs; b++)
		svg_line(f, s, &sc, b);
	fputs("</svg>\n", f);
	if (fclose(f) != 0)
		return -errno;
	return 0;
}

/* ---- CSV, JSON, table --------------------------------------------------------------- */

static int write_csv(const sweep *s, const char *out)
{
	FILE *f = fopen(out, "w");

	if (!f)
		return -errno;
	fputs("rw,bs,qd,threads,direct,io_bytes,runtime_ms,bw_bytes,iops,clat_mean_ns,"
	      "clat_p50_ns,clat_p99_ns,clat_p99.9_ns\n", f);
	for (size_t i = 0; i < s->nbs * s->nqd; i++) {
		const sweep_point *p = &s->pt[i];

		fprintf(f, "%s,%u,%u,%u,%d,%" PRIu64 ",%.3f,%.0f,%.3f,%.1f,%" PRIu64 ",%" PRIu64
			",%" PRIu64 "\n", bench_disk_rw_name(&s->o), p->bs, p->qd, s->o.threads,
			s->direct ? 1 : 0, p->io_bytes, p->runtime_s * 1e3, p->bw, p->iops, p->mean_ns,
			p->p50, p->p99, p->p999);
	}
	if (fclose(f) != 0)
		return -errno;
	return 0;
}

static void print_json(const sweep *s)
{
	fputs("{\"mode\": \"sweep\", \"file\": ", stdout);
	bench_json_string(stdout, s->o.path);
	printf(", \"rw\": \"%s\", \"threads\": %u, \"direct\": %d, \"size\": %" PRIu64
	       ", \"runtime_s\": %.3f, \"points\": [", bench_disk_rw_name(&s->o), s->o.threads,
	       s->direct ? 1 : 0, s->region, s->o.runtime);
	for (size_t i = 0; i < s->nbs * s->nqd; i++) {
		const sweep_point *p = &s->pt[i];

		printf("%s{\"bs\": %u, \"iodepth\": %u, \"io_bytes\": %" PRIu64 ", \"runtime_ms\": %.6f"
		       ", \"bw_bytes\": %.0f, \"iops\": %.3f, \"clat_ns\": ", i ? ", " : "", p->bs, p->qd,
		       p->io_bytes, p->runtime_s * 1e3, p->bw, p->iops);
		bench_hist_json(p->clat, stdout);
		putchar('}');
	}
	puts("]}");
}

static void print_table(const sweep *s)
{
	char buf[32];

	printf("sweep: %s, %s, %u thread%s, %.3g s per point, %s (%s)\n", bench_disk_rw_name(&s->o),
	       s->direct ? "O_DIRECT" : "buffered", s->o.threads, s->o.threads == 1 ? "" : "s",
	       s->o.runtime, s->o.path, bp_format_size(s->region, buf, sizeof(buf)));
	printf("%-10s", "MB/s");
	for (size_t q = 0; q < s->nqd; q++)
		printf(" %9s%-3" PRIu64, "qd ", s->qd[q]);
	putchar('\n');
	for (size_t b = 0; b < s->nbs; b++) {
		double best = 0;
		size_t knee = 0;

		printf("%-10s", bp_format_size(s->bs[b], buf, sizeof(buf)));
		for (size_t q = 0; q < s->nqd; q++) {
			double v = s->pt[b * s->nqd + q].bw / 1e6;

			printf(" %12.1f", v);
			if (v > best)
				best = v;
		}
		/* The shallowest queue giving 90% of this block size's best. */
		for (size_t q = 0; q < s->nqd; q++)
			if (s->pt[b * s->nqd + q].bw / 1e6 >= 0.9 * best &&
			    (s->qd[q] < s->qd[knee] || s->pt[b * s->nqd + knee].bw / 1e6 < 0.9 * best))
				knee = q;
		printf("   (90%% of best at qd %" PRIu64 ")\n", s->qd[knee]);
	}
}

/* ---- the command ---------------------------------------------------------------------- */

static int run_sweep(sweep *s)
{
	size_t n = s->nbs * s->nqd, done = 0;
	bool tty = isatty(STDERR_FILENO);
	bench_disk_result *res = malloc(sizeof(*res));
	char err[512], buf[32];
	int r = 0;

	if (!res)
		return -ENOMEM;
	for (size_t b = 0; b < s->nbs && r == 0; b++) {
		for (size_t q = 0; q < s->nqd && r == 0; q++, done++) {
			sweep_point *p = &s->pt[b * s->nqd + q];
			bench_disk_opts o = s->o;

			o.bs = (uint32_t)s->bs[b];
			o.qd = (unsigned)s->qd[q];
			o.progress = false;
			if (tty)
				fprintf(stderr, "\r\033[Ksweep: bs %s, qd %u (%zu/%zu)",
					bp_format_size(o.bs, buf, sizeof(buf)), o.qd, done + 1, n);
			r = bench_disk_run(&o, res, err, sizeof(err));
			if (r < 0) {
				fprintf(stderr, "%sbatchd-bench: bs %u, qd %u: %s\n", tty ? "\r\033[K" : "",
					o.bs, o.qd, err);
				break;
			}
			*p = (sweep_point){
				.bs = o.bs, .qd = o.qd, .io_bytes = res->io_bytes, .runtime_s = res->runtime_s,
				.bw = res->runtime_s > 0 ? (double)res->io_bytes / res->runtime_s : 0,
				.iops = res->runtime_s > 0 ? (double)res->ios / res->runtime_s : 0,
				.mean_ns = bench_hist_mean(&res->clat),
				.p50 = bench_hist_percentile(&res->clat, 50),
				.p99 = bench_hist_percentile(&res->clat, 99),
				.p999 = bench_hist_percentile(&res->clat, 99.9),
				.clat = p->clat,
			};
			*p->clat = res->clat;
			s->region = res->region;
			s->direct = res->direct;
			s->o.direct = res->direct ? 1 : 0;   /* settled: no note per point */
		}
	}
	if (tty)
		fputs("\r\033[K", stderr);
	free(res);
	return r;
}

enum { O_SVG = 400, O_CSV };

/* Where the results go besides the table. */
typedef struct sweep_out {
	const char *svg, *csv;
	bool json;
} sweep_out;

/* --bs or --qd: a list, each value at most max. @return 0, or the usage exit status. */
static int parse_grid(int ch, const char *arg, sweep *s)
{
	if (ch == BENCH_O_BS) {
		if (bench_parse_list(arg, true, s->bs, MAX_LIST, &s->nbs) < 0)
			return cli_usage("--bs: '%s' is not a list of up to %d sizes above 0, "
					 "comma-separated (\"4K,64K,1M\"); a size is " BP_SIZE_FORMS,
					 arg, MAX_LIST);
		for (size_t i = 0; i < s->nbs; i++)
			if (s->bs[i] > BENCH_DISK_MAX_BS)
				return cli_usage("--bs: %" PRIu64 " is over 1 GiB", s->bs[i]);
		return 0;
	}
	if (bench_parse_list(arg, false, s->qd, MAX_LIST, &s->nqd) < 0)
		return cli_usage("--qd: '%s' is not a list of up to %d numbers (\"1,4,16\")",
				 arg, MAX_LIST);
	for (size_t i = 0; i < s->nqd; i++)
		if (s->qd[i] > BD_IO_MAX_DEPTH)
			return cli_usage("--qd: %" PRIu64 " is over %u", s->qd[i], BD_IO_MAX_DEPTH);
	return 0;
}

/* argv into s (defaults first) and out. @return 0, or the usage exit status. */
static int parse_args(int argc, char **argv, sweep *s, sweep_out *out)
{
	static const struct option opts[] = {
		BENCH_DISK_LONGOPTS,
		{ "bs", required_argument, NULL, BENCH_O_BS },
		{ "qd", required_argument, NULL, BENCH_O_QD },
		{ "iodepth", required_argument, NULL, BENCH_O_QD },
		{ "svg", required_argument, NULL, O_SVG },
		{ "csv", required_argument, NULL, O_CSV },
		{ "json", no_argument, NULL, BENCH_O_JSON },
		{ NULL, 0, NULL, 0 },
	};
	int ch, r;

	memset(s, 0, sizeof(*s));
	memset(out, 0, sizeof(*out));
	bench_disk_opts_init(&s->o);
	s->o.random = true;
	s->o.runtime = 2;
	bench_parse_list("4K,64K,1M", true, s->bs, MAX_LIST, &s->nbs);
	bench_parse_list("1,2,4,8,16,32,64", false, s->qd, MAX_LIST, &s->nqd);
	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "-:", opts, NULL)) != -1) {
		switch (ch) {
		case 1:
			if (s->o.path)
				return cli_usage("sweep: unexpected argument '%s'", optarg);
			s->o.path = optarg;
			continue;
		case BENCH_O_BS:
		case BENCH_O_QD:
			if ((r = parse_grid(ch, optarg, s)))
				return r;
			continue;
		case O_SVG: out->svg = optarg; continue;
		case O_CSV: out->csv = optarg; continue;
		case BENCH_O_JSON: out->json = true; continue;
		case ':':
			return cli_usage("sweep: '%s' needs a value", argv[optind - 1]);
		case '?':
			return cli_usage("sweep: unknown option '%s'", argv[optind - 1]);
		}
		if (bench_disk_option(&s->o, ch, optarg))
			return 2;
	}
	if (!s->o.path)
		return cli_usage("sweep: missing FILE");
	for (size_t b = 0; b < s->nbs; b++)
		for (size_t q = 0; q < s->nqd; q++)
			if (s->bs[b] * s->qd[q] > BENCH_DISK_MAX_BUFFERS)
				return cli_usage("--qd x --bs: %" PRIu64 " x %" PRIu64 " bytes of buffers is "
						 "over 4 GiB", s->qd[q], s->bs[b]);
	return 0;
}

/* The table or JSON, then the SVG and CSV asked for. @return the exit status. */
static int report(const sweep *s, const sweep_out *out)
{
	int r, rc = 0;

	if (out->json)
		print_json(s);
	else
		print_table(s);
	if (out->svg && (r = write_svg(s, out->svg)) < 0) {
		fprintf(stderr, "batchd-bench: %s: %s\n", out->svg, strerror(-r));
		rc = 1;
	}
	if (out->csv && (r = write_csv(s, out->csv)) < 0) {
		fprintf(stderr, "batchd-bench: %s: %s\n", out->csv, strerror(-r));
		rc = 1;
	}
	return rc;
}

int bench_cmd_sweep(int argc, char **argv)
{
	uint64_t file_size;
	sweep_out out;
	char err[512];
	sweep s;
	int rc = parse_args(argc, argv, &s, &out);

	if (rc)
		return rc;
	if (bench_disk_prepare(&s.o, &file_size, err, sizeof(err)) < 0) {
		fprintf(stderr, "batchd-bench: %s\n", err);
		return 1;
	}
	rc = 1;
	s.pt = calloc(s.nbs * s.nqd, sizeof(*s.pt));
	if (!s.pt)
		goto oom;
	for (size_t i = 0; i < s.nbs * s.nqd; i++) {
		s.pt[i].clat = malloc(sizeof(bench_hist));
		if (!s.pt[i].clat)
			goto oom;
	}
	if (run_sweep(&s) == 0)
		rc = report(&s, &out);
	goto out;
oom:
	fprintf(stderr, "batchd-bench: out of memory\n");
out:
	for (size_t i = 0; s.pt && i < s.nbs * s.nqd; i++)
		free(s.pt[i].clat);
	free(s.pt);
	return rc;
}
