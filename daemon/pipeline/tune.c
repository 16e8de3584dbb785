/* SPDX-License-Identifier: MIT */
/*
 * tune.c - the decode worker count (see tune.h).
 */
#include <stdbool.h>

#include "tune.h"

void bd_tune_init(bd_tune *t, unsigned max)
{
	*t = (bd_tune){ .max = max ? max : 1 };
	t->active = t->max;
}

/* now - *last, and *last = now; a total that fell (its sessions ended) gives 0. */
static uint64_t delta(uint64_t *last, uint64_t now)
{
	uint64_t d = now >= *last ? now - *last : 0;

	*last = now;
	return d;
}

unsigned bd_tune_hold(bd_tune *t, const bd_tune_sample *s)
{
	t->busy_ns = s->busy_ns;
	t->wait_ns = s->wait_ns;
	t->calm = 0;
	t->active = t->max;
	return t->active;
}

unsigned bd_tune_step(bd_tune *t, const bd_tune_sample *s)
{
	uint64_t busy = delta(&t->busy_ns, s->busy_ns);
	uint64_t waited = delta(&t->wait_ns, s->wait_ns);
	uint64_t span = s->interval_ns ? s->interval_ns : 1;
	/* Busy time in hundredths of an interval: 100 is one worker all the time. */
	uint64_t load = busy * 100 / span;
	bool stalled = waited * 100 > span;
	bool saturated = s->queued > 0 || load >= 85ull * t->active;

	if (stalled && saturated) {
		t->calm = 0;
		if (t->active < t->max) {
			t->active++;
			t->ups++;
		}
		return t->active;
	}
	/*
	 * Calm, or waiting on something else (the disk): more decoders would
	 * not help. One fewer once that many intervals in a row could have
	 * done with one fewer.
	 */
	if (t->active == 1 || load > 70ull * (t->active - 1)) {
		t->calm = 0;
		return t->active;
	}
	if (++t->calm >= BD_TUNE_CALM_STEPS) {
		t->active--;
		t->downs++;
		t->calm = 0;
	}
	return t->active;
}
