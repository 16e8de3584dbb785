/* SPDX-License-Identifier: MIT */
/*
 * tune.h - how many decode workers run: as few as keep the trainers from
 * waiting.
 *
 * On a small machine the trainer and batchd share the cores, and every
 * decode worker that runs while the trainer computes takes CPU from it:
 * on 2 cores, two decode workers woken by each refill of a batch slow a
 * CPU-bound trainer down even though one worker could keep up. So the
 * loop thread samples, every BD_TUNE_INTERVAL_MS, the decode workers' busy
 * time, the tasks waiting for one, and the time the sessions' clients
 * waited for batches (their own account, wait_acct.h), and moves the
 * number of active workers one step:
 *
 *   up    when clients waited (over 1% of the interval) while decoding was
 *         the bottleneck: tasks were queued, or the active workers were
 *         busy 85% of the time or more;
 *   down  after BD_TUNE_CALM_STEPS intervals in a row without such a wait
 *         (waits on the disk do not count) in which one worker fewer would
 *         have done the same work at 70% busy or less.
 *
 * It starts with every worker active (no slow start for the first
 * session) and never goes below one or above [decode] threads. A client can claim waits it did not have; that can
 * raise the count at most to the configured threads, the CPU the operator
 * gave the daemon. [decode] autotune = no keeps every worker active.
 *
 * Thread rules: loop thread (pure: no state but the bd_tune).
 */
#ifndef BATCHD_DAEMON_TUNE_H
#define BATCHD_DAEMON_TUNE_H

#include <stdint.h>

#define BD_TUNE_INTERVAL_MS 200u
#define BD_TUNE_CALM_STEPS 5u

typedef struct bd_tune {
	unsigned active, max;
	unsigned calm;           /* intervals in a row that one worker fewer could have served */
	uint64_t busy_ns, wait_ns; /* the totals at the last step */
	unsigned ups, downs;     /* steps taken, for status */
} bd_tune;

/* What one interval's sample says: totals so far, and the queue now. */
typedef struct bd_tune_sample {
	uint64_t interval_ns;    /* since the last step */
	uint64_t busy_ns;        /* decode workers' busy time, all summed, since start */
	uint64_t wait_ns;        /* the sessions' clients' wait time, summed, since start */
	uint64_t queued;         /* tasks waiting for a decode worker now */
} bd_tune_sample;

/* Start with max workers (at least 1) all active. */
void bd_tune_init(bd_tune *t, unsigned max);

/*
 * One interval: @return the number of workers to run from now on. Totals
 * that went backwards (sessions ended, taking their waits with them) count
 * as no change.
 */
unsigned bd_tune_step(bd_tune *t, const bd_tune_sample *s);

/* Autotune off: every worker active, the totals noted so that a later step starts from here. */
unsigned bd_tune_hold(bd_tune *t, const bd_tune_sample *s);

#endif
