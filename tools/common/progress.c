/* SPDX-License-Identifier: MIT */
/*
 * progress.c - terminal progress line (see progress.h).
 */
#include <stdio.h>
#include <unistd.h>

#include "cli.h"
#include "progress.h"
#include "units.h"

void progress_start(progress *p, const char *label, uint64_t total)
{
	p->enabled = isatty(STDERR_FILENO);
	p->label = label;
	p->total = total;
	p->start = p->last = cli_now();
}

void progress_update(progress *p, uint64_t done, bool force)
{
	char d[32], t[32], r[32];
	double now, el, rate;

	if (!p->enabled)
		return;
	now = cli_now();
	if (!force && now - p->last < 0.2)
		return;
	p->last = now;
	el = now - p->start;
	rate = el > 0 ? (double)done / el : 0;
	bp_format_size(done, d, sizeof(d));
	bp_format_size((uint64_t)rate, r, sizeof(r));
	if (p->total && done <= p->total) {
		double left = rate > 0 ? (double)(p->total - done) / rate : 0;

		fprintf(stderr, "\r\033[K%s %5.1f%%  %s / %s  %s/s  ETA %d:%02d", p->label,
			100.0 * (double)done / (double)p->total, d,
			bp_format_size(p->total, t, sizeof(t)), r, (int)left / 60, (int)left % 60);
	} else {
		fprintf(stderr, "\r\033[K%s %s  %s/s", p->label, d, r);
	}
	fflush(stderr);
}

void progress_end(progress *p)
{
	if (p->enabled)
		fprintf(stderr, "\r\033[K");
}
