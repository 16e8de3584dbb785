/* SPDX-License-Identifier: MIT */
/*
 * bench_svg.h - the distribution of a run's latencies as an SVG chart:
 * `disk --svg` (read latency) and `pipeline --svg` (the waits in bc_next),
 * beside sweep's bandwidth chart (bench_sweep.c).
 *
 * The chart is a cumulative distribution: for each latency t on a log
 * axis, the share of all observations that took t or less, one line per
 * series, with the 50%, 90% and 99% levels ruled across, so a median and
 * a tail read off it at once. Thread rules: none (a file, written once).
 */
#ifndef BATCHD_TOOLS_BENCH_SVG_H
#define BATCHD_TOOLS_BENCH_SVG_H

#include <stddef.h>

#include "bench_stats.h"

typedef struct bench_svg_series {
	const char *name;        /* in the legend */
	const bench_hist *h;     /* ns values */
} bench_svg_series;

/*
 * Write the chart of n series (empty ones left out) to path, titled title,
 * its x axis "what (ms, log scale)". @return 0 or -errno; -ENODATA when
 * every series is empty.
 */
int bench_svg_cdf(const char *path, const char *title, const char *what,
		  const bench_svg_series *s, size_t n);

#endif
