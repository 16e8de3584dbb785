/* SPDX-License-Identifier: MIT */
/*
 * job_event.h - the one way a batch's progress reaches its session.
 *
 * A batch leaves the session twice at most: to the pipeline, which reads
 * and decodes it into the session's record, and (GPU sessions) to the GPU
 * thread, which copies the record into a device slot. Both report back
 * the same way: a call of the owner's bd_job_event_fn on the loop thread,
 * naming the batch by its sequence number. The owner gives that function
 * when it hands the batch over (bd_job_new, bd_gpu_session_cfg), so no
 * one in between has to route it.
 *
 * Thread rules: an event function is called on the loop thread only.
 */
#ifndef BATCHD_DAEMON_JOB_EVENT_H
#define BATCHD_DAEMON_JOB_EVENT_H

#include <stdint.h>

enum bd_job_event {
	BD_JOB_DECODED = 0,    /* pipeline: the record is filled (0), or the batch failed (< 0) */
	BD_JOB_ENQUEUED = 1,   /* GPU: copy issued (0), publish; < 0: not copied, the last event */
	BD_JOB_COPIED = 2,     /* GPU: the copy finished (0) or failed (< 0); the last event */
};

/*
 * owner: as given with the batch; seq: the batch's sequence number;
 * status: 0 or a negative errno; reason: what failed, "" when status is 0
 * (valid during the call only: copy it to keep it).
 */
typedef void (*bd_job_event_fn)(void *owner, uint64_t seq, enum bd_job_event ev, int status,
				const char *reason);

#endif
