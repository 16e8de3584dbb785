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
 * Thread rules: any thread; the functions keep no state (the option
 * parsers print through cli_usage, for single-threaded tools).
 */
#ifndef BATCHD_TOOLS_TRAINER_H
#define BATCHD_TOOLS_TRAINER_H

#include <stdbool.h>
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

#endif
