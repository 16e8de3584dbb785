/* SPDX-License-Identifier: MIT */
/*
 * bench_svg.c - latency distributions as SVG (see bench_svg.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#include "bench.h"
#include "bench_svg.h"

enum { W = 900, H = 520, PL = 80, PR = 700, PT = 50, PB = 450 };

static const char *const palette[] = { "#1f77b4", "#d62728", "#2ca02c", "#9467bd",
				       "#ff7f0e", "#8c564b", "#e377c2", "#17becf" };

/* x of ms on the decade axis [10^lo, 10^hi]. */
static double x_of(double ms, int lo, int hi)
{
	double l = ms > 0 ? log10(ms) : lo;

	if (l < lo)
		l = lo;
	return PL + (l - lo) / (hi - lo) * (PR - PL);
}

static double y_of(double share)
{
	return PB - share * (PB - PT);
}

/* The decades that hold every series' values, in ms: [10^lo, 10^hi]. */
static int decades(const bench_svg_series *s, size_t n, int *lo, int *hi)
{
	double min = INFINITY, max = 0;

	for (size_t i = 0; i < n; i++)
		if (s[i].h->count) {
			double a = (double)s[i].h->min / 1e6, b = (double)s[i].h->max / 1e6;

			min = a > 0 && a < min ? a : min;
			max = b > max ? b : max;
		}
	if (!(max > 0))
		return -ENODATA;
	if (!isfinite(min))
		min = max;
	*lo = (int)floor(log10(min));
	*hi = (int)ceil(log10(max));
	if (*hi <= *lo)
		*hi = *lo + 1;
	return 0;
}

static void frame(FILE *f, const char *title, const char *what, int lo, int hi)
{
	fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
		"viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"13\">\n"
		"<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H, W, H, W, H);
	fprintf(f, "<text x=\"%d\" y=\"28\" font-size=\"16\" text-anchor=\"middle\">",
		(PL + PR) / 2);
	bench_xml_text(f, title);
	fputs("</text>\n", f);
	for (int k = 0; k <= 10; k++) {
		double y = y_of(k / 10.0);

		fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#eeeeee\"/>\n"
			"<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%d%%</text>\n",
			PL, y, PR, y, PL - 8, y + 4, 10 * k);
	}
	/* The levels a median and a tail are read at. */
	for (int k = 0; k < 3; k++) {
		static const double level[] = { 0.5, 0.9, 0.99 };
		double y = y_of(level[k]);

		fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#999999\" "
			"stroke-dasharray=\"4 4\"/>\n<text x=\"%d\" y=\"%.1f\" fill=\"#666666\">"
			"p%g</text>\n", PL, y, PR, y, PR + 4, y + 4, 100 * level[k]);
	}
	for (int d = lo; d <= hi; d++) {
		double x = x_of(pow(10, d), lo, hi);

		fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#dddddd\"/>\n"
			"<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n",
			x, PT, x, PB + 6, x, PB + 21, pow(10, d));
	}
	fprintf(f, "<polyline points=\"%d,%d %d,%d %d,%d\" fill=\"none\" stroke=\"black\"/>\n",
		PL, PT, PL, PB, PR, PB);
	fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">", (PL + PR) / 2, H - 20);
	bench_xml_text(f, what);
	fputs(" (ms, log scale)</text>\n", f);
	fprintf(f, "<text x=\"24\" y=\"%d\" text-anchor=\"middle\" transform=\"rotate(-90 24 %d)\">"
		"share that took this long or less</text>\n", (PT + PB) / 2, (PT + PB) / 2);
}

/* Series i: a step line through its histogram's buckets, and its legend entry. */
static void line(FILE *f, const bench_svg_series *s, size_t i, size_t shown, int lo, int hi)
{
	const char *color = palette[i % (sizeof(palette) / sizeof(palette[0]))];
	const bench_hist *h = s->h;
	double ly = PT + 10 + 22.0 * (double)shown, cum = 0;

	fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"%.1f,%.1f",
		color, x_of((double)h->min / 1e6, lo, hi), y_of(0));
	for (size_t b = 0; b < BENCH_HIST_BUCKETS; b++) {
		if (!h->bucket[b])
			continue;
		cum += (double)h->bucket[b];
		fprintf(f, " %.1f,%.1f", x_of((double)bench_hist_highest(b) / 1e6, lo, hi),
			y_of(cum / (double)h->count));
	}
	fputs("\"/>\n", f);
	fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"%s\" "
		"stroke-width=\"3\"/>\n<text x=\"%d\" y=\"%.1f\">", PR + 40, ly, PR + 64, ly, color,
		PR + 70, ly + 4);
	bench_xml_text(f, s->name);
	fprintf(f, " (%" PRIu64 ")</text>\n", h->count);
}

int bench_svg_cdf(const char *path, const char *title, const char *what,
		  const bench_svg_series *s, size_t n)
{
	int lo, hi, r = decades(s, n, &lo, &hi);
	size_t shown = 0;
	FILE *f;

	if (r < 0)
		return r;
	if (!(f = fopen(path, "w")))
		return -errno;
	frame(f, title, what, lo, hi);
	for (size_t i = 0; i < n; i++)
		if (s[i].h->count)
			line(f, &s[i], i, shown++, lo, hi);
	fputs("</svg>\n", f);
	return fclose(f) == 0 ? 0 : -errno;
}
