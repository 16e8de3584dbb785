/* SPDX-License-Identifier: MIT */
/*
 * metrics.c - histograms and Prometheus text (see metrics.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "util.h"

void bd_hist_add(bd_hist *h, uint64_t ns)
{
	unsigned b = 0;

	while (b < BD_HIST_BUCKETS - 1 && ns > BP_RING_WAIT_BOUND_NS(b))
		b++;
	__atomic_fetch_add(&h->bucket[b], 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&h->sum_ns, ns, __ATOMIC_RELAXED);
	__atomic_fetch_add(&h->count, 1, __ATOMIC_RELAXED);
}

void bd_hist_read(const bd_hist *h, bd_hist *ret)
{
	ret->count = __atomic_load_n(&h->count, __ATOMIC_RELAXED);
	ret->sum_ns = __atomic_load_n(&h->sum_ns, __ATOMIC_RELAXED);
	for (unsigned i = 0; i < BD_HIST_BUCKETS; i++)
		ret->bucket[i] = __atomic_load_n(&h->bucket[i], __ATOMIC_RELAXED);
}

void bd_hist_merge(bd_hist *dst, const bd_hist *src)
{
	dst->count += src->count;
	dst->sum_ns += src->sum_ns;
	for (unsigned i = 0; i < BD_HIST_BUCKETS; i++)
		dst->bucket[i] += src->bucket[i];
}

void bd_prom_head(bd_text *t, const char *name, const char *type, const char *help)
{
	bd_text_printf(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void bd_prom_u64(bd_text *t, const char *name, const char *labels, uint64_t v)
{
	if (labels && *labels)
		bd_text_printf(t, "%s{%s} %llu\n", name, labels, (unsigned long long)v);
	else
		bd_text_printf(t, "%s %llu\n", name, (unsigned long long)v);
}

void bd_prom_f64(bd_text *t, const char *name, const char *labels, double v)
{
	if (labels && *labels)
		bd_text_printf(t, "%s{%s} %.9g\n", name, labels, v);
	else
		bd_text_printf(t, "%s %.9g\n", name, v);
}

/* ns as seconds in plain decimals, no exponent, no trailing zeros: "0.000016", "4". */
static const char *seconds(uint64_t ns, char *buf, size_t len)
{
	size_t n = (size_t)snprintf(buf, len, "%" PRIu64 ".%09" PRIu64, ns / 1000000000u,
				    ns % 1000000000u);

	while (n > 1 && buf[n - 1] == '0')
		buf[--n] = '\0';
	if (buf[n - 1] == '.')
		buf[n - 1] = '\0';
	return buf;
}

void bd_prom_hist(bd_text *t, const char *name, const char *labels, const bd_hist *h)
{
	const char *sep = labels && *labels ? "," : "";
	uint64_t cum = 0;
	char le[32];

	if (!labels)
		labels = "";
	for (unsigned i = 0; i < BD_HIST_BUCKETS - 1; i++) {
		cum += h->bucket[i];
		bd_text_printf(t, "%s_bucket{%s%sle=\"%s\"} %llu\n", name, labels, sep,
			       seconds(BP_RING_WAIT_BOUND_NS(i), le, sizeof(le)),
			       (unsigned long long)cum);
	}
	cum += h->bucket[BD_HIST_BUCKETS - 1];
	/* +Inf equals the count by definition; use the buckets' sum so they agree. */
	bd_text_printf(t, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep,
		       (unsigned long long)cum);
	if (*labels) {
		bd_text_printf(t, "%s_sum{%s} %.9g\n", name, labels, (double)h->sum_ns / 1e9);
		bd_text_printf(t, "%s_count{%s} %llu\n", name, labels, (unsigned long long)cum);
	} else {
		bd_text_printf(t, "%s_sum %.9g\n", name, (double)h->sum_ns / 1e9);
		bd_text_printf(t, "%s_count %llu\n", name, (unsigned long long)cum);
	}
}

const char *bd_prom_escape(const char *s, char *buf, size_t len)
{
	size_t o = 0;

	for (; *s && o + 3 < len; s++) {
		if (*s == '\\' || *s == '"') {
			buf[o++] = '\\';
			buf[o++] = *s;
		} else if (*s == '\n') {
			buf[o++] = '\\';
			buf[o++] = 'n';
		} else {
			buf[o++] = *s;
		}
	}
	buf[o] = '\0';
	return buf;
}
