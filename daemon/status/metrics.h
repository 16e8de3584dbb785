/* SPDX-License-Identifier: MIT */
/*
 * metrics.h - counters, histograms, and their Prometheus text exposition.
 *
 * Histograms are fixed log-scale buckets (1 us x 4^i, the same bounds the
 * client reports its waits in, see lib/proto/ring.h), updated with relaxed
 * atomics so the I/O and decode threads can record without locks; a
 * reader may see a sum and a count from slightly different moments, which
 * Prometheus tolerates. The exposition is plain text built into a growable
 * buffer (util.h) by the loop thread.
 *
 * Thread rules: bd_hist_add from any thread; everything else on the loop
 * thread.
 */
#ifndef BATCHD_DAEMON_METRICS_H
#define BATCHD_DAEMON_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "ring.h"
#include "util.h"

#define BD_HIST_BUCKETS BP_RING_WAIT_BUCKETS

typedef struct bd_hist {
	uint64_t count;
	uint64_t sum_ns;
	uint64_t bucket[BD_HIST_BUCKETS];   /* not cumulative */
} bd_hist;

/* Record one observation of ns nanoseconds. Any thread. */
void bd_hist_add(bd_hist *h, uint64_t ns);
/* A consistent-enough copy (relaxed loads). */
void bd_hist_read(const bd_hist *h, bd_hist *ret);
/* Add src into dst (plain, loop thread). */
void bd_hist_merge(bd_hist *dst, const bd_hist *src);

/* "# HELP" and "# TYPE" lines. */
void bd_prom_head(bd_text *t, const char *name, const char *type, const char *help);
/* One sample line: name{labels} value (labels may be "" or NULL). */
void bd_prom_u64(bd_text *t, const char *name, const char *labels, uint64_t v);
void bd_prom_f64(bd_text *t, const char *name, const char *labels, double v);
/* A histogram in seconds: _bucket{le=...} (cumulative), _sum, _count. */
void bd_prom_hist(bd_text *t, const char *name, const char *labels, const bd_hist *h);

/* Escape s as a Prometheus label value into buf (quotes not included). */
const char *bd_prom_escape(const char *s, char *buf, size_t len);

#endif
