/* SPDX-License-Identifier: MIT */
/*
 * progress.h - one self-rewriting status line on a terminal.
 *
 * Long-running tools show bytes done, rate and time left on stderr when it
 * is a TTY, at most a few times a second, and stay silent otherwise so
 * logs and pipes get only results.
 */
#ifndef BATCHD_TOOLS_PROGRESS_H
#define BATCHD_TOOLS_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

typedef struct progress {
	bool enabled;
	const char *label;
	uint64_t total;          /* 0 when unknown */
	double start, last;      /* monotonic seconds (cli_now) */
} progress;

void progress_start(progress *p, const char *label, uint64_t total);
/* Redraw if enough time has passed (or force). */
void progress_update(progress *p, uint64_t done, bool force);
/* Clear the line. */
void progress_end(progress *p);

#endif
