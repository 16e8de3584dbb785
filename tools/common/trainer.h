/* SPDX-License-Identifier: MIT */
/*
 * trainer.h - what batchctl consume and batchd-bench pipeline do alike as
 * trainers: the stream options they parse the same way, the bc_next
 * outcomes that end a stream, and how the last epoch ends.
 *
 * Why: both tools are clients that take batches like a training loop; the
 * rules for when a run is over must be one rule, or the two would count
 * different things as a finished epoch or a dead stream.
 *
 * A trainer's step is either time away from the loader (--step-ms sleeps,
 * as a step waiting on a GPU does) or work on the trainer's own core
 * (--step-cpu-ms burns that much CPU time, as a step computing on the host
 * does); only the second shows what the daemon's threads take from the
 * trainer's cores.
 *
 * A run's waits in bc_next are kept whole (trainer_waits): a trainer run
 * takes thousands of batches, not millions, so 8 bytes a wait is cheap and
 * the percentiles are exact instead of a histogram's estimate.
 *
 * Thread rules: any thread; the functions keep no global state (the option
 * parsers print through cli_usage, for single-threaded tools); one
 * trainer_waits per thread.
 */
#ifndef BATCHD_TOOLS_TRAINER_H
#define BATCHD_TOOLS_TRAINER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "batchclient.h"

/*
 * --shuffle ARG (none, global or block) into so->shuffle.
 * @return 0, or the usage-error exit status (2) after saying why.
 */
int trainer_opt_shuffle(const char *arg, bc_stream_opts *so);

/*
 * --device ARG, already read as the number v, into so->device.
 * @return 0, or the usage-error exit status (2) for a number over 255.
 */
int trainer_opt_device(const char *arg, uint64_t v, bc_stream_opts *so);

/*
 * Whether bc_next's result r ends the stream (the daemon stopped, the
 * connection or the ring broke) rather than failing one batch of it.
 */
bool trainer_stream_over(int r);

/*
 * After releasing a batch of the last wanted epoch (ep counted from 0 since
 * so->start_epoch): whether that batch was the epoch's last, so that the
 * run ends without waiting for the epoch-end marker.
 */
bool trainer_last_epoch_done(bc_stream *s, const bc_stream_opts *so, uint64_t ep);

/* The longest --step-ms or --step-cpu-ms taken: an hour. */
#define TRAINER_MAX_STEP_MS 3600000u

/*
 * Spin until the calling thread has used ms milliseconds of CPU time (its
 * own CPU clock, CLOCK_THREAD_CPUTIME_ID): time the thread is preempted
 * does not count, so a step costs ms of CPU however busy the cores are.
 * A clock that cannot be read falls back to the monotonic clock.
 */
void trainer_burn_cpu_ms(uint64_t ms);

/* This process's CPU time in seconds (all its threads), or 0 where it cannot be read. */
double trainer_cpu_s(void);

/* ---- waits in bc_next --------------------------------------------------------------- */

/* Every wait of a run, in seconds. Zero-initialised is empty. */
typedef struct trainer_waits {
	double *v;               /* in arrival order until trainer_waits_stats sorts them */
	size_t n, cap;
	double sum;
} trainer_waits;

/* What a run's waits add up to, in seconds (all 0 without a wait). */
typedef struct trainer_wait_stats {
	size_t n;
	double mean, p50, p99, max;
} trainer_wait_stats;

/* Keep one wait of secs seconds. @return 0, or -ENOMEM (w unchanged). */
int trainer_waits_add(trainer_waits *w, double secs);

/*
 * The mean, p50, p99 and maximum of w's waits into *ret (sorting w->v).
 * Percentiles are nearest rank, as bench_stats.h's: the p-th is the
 * smallest wait with at least p % of the waits at or below it. So below
 * 100 waits p99 is the maximum, and a tail of a few slow waits among fast
 * ones (a first batch read cold while the rest take microseconds) shows in
 * p99 instead of hiding under the mean. From 100 waits on, a tail thinner
 * than 1 % can still hold the mean above p99: print max beside it.
 */
void trainer_waits_stats(trainer_waits *w, trainer_wait_stats *ret);

/* The nearest-rank p-th percentile (0 <= p <= 100) of sorted[0..n); 0 when n is 0. */
double trainer_percentile(const double *sorted, size_t n, double p);

/* Free w's waits and empty it; w may be NULL. */
void trainer_waits_free(trainer_waits *w);

#endif
