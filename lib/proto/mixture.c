/* SPDX-License-Identifier: MIT */
/*
 * mixture.c - weights as counts over a period, and the period's slots
 * (see mixture.h).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "mixture.h"

int bp_mix_check(const double *w, uint32_t n, char *buf, size_t len)
{
	if (n < 2 || n > BP_MIX_SOURCES_MAX) {
		snprintf(buf, len, "a mixture has 2 .. %u sources, not %u", BP_MIX_SOURCES_MAX, n);
		return 1;
	}
	for (uint32_t i = 0; i < n; i++)
		if (!isfinite(w[i]) || !(w[i] > 0)) {
			snprintf(buf, len, "source %u's weight %g must be a finite number above 0 "
				 "(weights are relative: 0.7, 0.2, 0.1 or 7, 2, 1)", i, w[i]);
			return 1;
		}
	return 0;
}

/* Does period N hold every weight exactly (to 1e-9 of a count)? */
static int exact_at(const double *w, uint32_t n, double sum, uint32_t period)
{
	for (uint32_t i = 0; i < n; i++) {
		double c = w[i] / sum * period;

		if (c < 0.5 || fabs(c - nearbyint(c)) > 1e-9 * period)
			return 0;
	}
	return 1;
}

int bp_mix_counts(const double *w, uint32_t n, uint32_t *counts, uint32_t *ret_period)
{
	char why[8];
	double sum = 0, rest[BP_MIX_SOURCES_MAX];
	uint32_t period = 0, given = 0;

	if (bp_mix_check(w, n, why, sizeof(why)))
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++)
		sum += w[i];
	for (uint32_t p = n; p <= BP_MIX_PERIOD_MAX && !period; p++)
		if (exact_at(w, n, sum, p))
			period = p;
	if (!period)
		period = BP_MIX_PERIOD_MAX;
	/* Floors, at least 1 each, then the largest remainders (ties to the lower index). */
	for (uint32_t i = 0; i < n; i++) {
		double c = w[i] / sum * period;
		double f = floor(c + 1e-9 * period);

		counts[i] = f < 1 ? 1 : (uint32_t)f;
		rest[i] = c - counts[i];
		given += counts[i];
	}
	while (given < period) {
		uint32_t best = 0;

		for (uint32_t i = 1; i < n; i++)
			if (rest[i] > rest[best])
				best = i;
		counts[best]++;
		rest[best] -= 1;
		given++;
	}
	while (given > period) {
		uint32_t best = UINT32_MAX;

		for (uint32_t i = 0; i < n; i++)
			if (counts[i] > 1 && (best == UINT32_MAX || rest[i] < rest[best]))
				best = i;
		counts[best]--;
		rest[best] += 1;
		given--;
	}
	*ret_period = period;
	return 0;
}

void bp_mix_slots(const uint32_t *counts, uint32_t n, uint32_t period, uint8_t *slot,
		  uint32_t *rank)
{
	int64_t current[BP_MIX_SOURCES_MAX] = { 0 };
	uint32_t used[BP_MIX_SOURCES_MAX] = { 0 };

	/* Smooth weighted round robin: everyone gains its count, the most ahead is served. */
	for (uint32_t r = 0; r < period; r++) {
		uint32_t best = 0;

		for (uint32_t i = 0; i < n; i++) {
			current[i] += counts[i];
			if (current[i] > current[best])
				best = i;
		}
		current[best] -= period;
		slot[r] = (uint8_t)best;
		rank[r] = used[best]++;
	}
}

uint64_t bp_mix_used(const uint32_t *counts, const uint8_t *slot, const uint32_t *rank,
		     uint32_t period, uint32_t i, uint64_t pos)
{
	uint64_t full = pos / period * counts[i];
	uint32_t r = (uint32_t)(pos % period);

	/* Source i's slots before r: the rank of its next slot at or after r, else all of them. */
	for (uint32_t k = r; k < period; k++)
		if (slot[k] == i)
			return full + rank[k];
	return full + counts[i];
}
