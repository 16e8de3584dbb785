/* SPDX-License-Identifier: MIT */
/*
 * gpu.h - GPU sessions: pinned staging, device slots, copies and events.
 *
 * A GPU session's data memfd (its byte ring of host records) is pinned
 * with cudaHostRegister; its device memory is one CUDA VMM allocation of
 * `slots` equal device slots, exported to a POSIX fd that READY hands to
 * the client, who maps it once. Per slot the daemon owns two interprocess
 * events: `ready`, recorded on the session's stream after the copy into
 * the slot, and `released`, which the client records on its own stream
 * when it releases the batch (see lib/proto/ring.h).
 *
 * One GPU thread serves every session. For each batch it waits until the
 * slot's `released` event has completed (polled with cudaEventQuery, never
 * waited on in a stream: the daemon's streams depend on no other process,
 * so a client that dies or stalls cannot wedge them), issues one
 * cudaMemcpyAsync and records `ready`, and reports ENQUEUED: the batch may
 * be published, the client waits on `ready` on the GPU. When the copy has
 * finished it reports COPIED: the record's host bytes may be reused.
 *
 * Lifetime: the daemon drops its own references when the session ends
 * (after every copy it issued has finished); the driver frees the device
 * memory when the last mapping goes, so memory lives exactly as long as
 * the daemon or the client still maps it, and a killed client's mappings
 * go with its process.
 *
 * Events: ENQUEUED and COPIED (job_event.h) reach the session through the
 * event function in its bd_gpu_session_cfg, the same way the pipeline's
 * DECODED does.
 *
 * Thread rules: everything here is called on the loop thread; events are
 * delivered on the loop thread.
 */
#ifndef BATCHD_DAEMON_GPU_H
#define BATCHD_DAEMON_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "job_event.h"
#include "ring.h"

typedef struct bd_gpu bd_gpu;
typedef struct bd_gpu_session bd_gpu_session;

/*
 * Start the GPU thread. Each session names its own event function
 * (bd_gpu_session_cfg, job_event.h). @return 0 or negative errno.
 */
int bd_gpu_new(uv_loop_t *loop, bd_gpu **ret);

/* Stop the thread; every session must have been freed. NULL is fine. */
void bd_gpu_free(bd_gpu *g);

typedef struct bd_gpu_session_cfg {
	int device;             /* the daemon's ordinal */
	uint8_t uuid[16];       /* its UUID, for the device table */
	uint32_t slots;
	uint64_t slot_bytes;    /* a multiple of BP_RING_DEVICE_ALIGN */
	void *host;             /* staging to pin (page-aligned) ... */
	uint64_t host_len;      /* ... and its bytes */
	bd_job_event_fn event;  /* where ENQUEUED and COPIED go ... */
	void *owner;            /* ... with this */
	uint64_t session;       /* the session's id, for the log */
} bd_gpu_session_cfg;

/*
 * Set up a session's device side and fill its device table (the header
 * and every slot's event handles). On success *ret_fd is the exported
 * allocation (owned by the session until bd_gpu_session_free). @return 0
 * or negative errno (-ENOMEM: device memory) with err saying why.
 */
/*
 * Host heap a session of `slots` slots holds at most on the daemon's side
 * of the GPU path (its record, per-slot events and flags, and a copy in
 * flight per slot), for the session's memory charge.
 */
uint64_t bd_gpu_session_bytes(uint32_t slots);

int bd_gpu_session_new(bd_gpu *g, const bd_gpu_session_cfg *cfg, bp_ring_gpu *table,
		       bp_ring_gpu_slot *slots, int *ret_fd, bd_gpu_session **ret, char *err,
		       size_t errlen);

/*
 * Copy `bytes` at src (inside the pinned staging) into device slot
 * seq % slots, once the slot is released. Events for seq follow: ENQUEUED,
 * then (when it succeeded) COPIED. @return 0, or -ENOMEM (no events follow).
 */
int bd_gpu_copy(bd_gpu_session *gs, uint64_t seq, const void *src, uint64_t bytes);

/* The session is closing: copies still waiting for their slot end with ENQUEUED -ECANCELED. */
void bd_gpu_session_cancel(bd_gpu_session *gs);

/*
 * Free the device side once every copy's last event was delivered: events,
 * stream, the daemon's mapping and fd, the staging's pinning.
 */
void bd_gpu_session_free(bd_gpu_session *gs);

typedef struct bd_gpu_session_info {
	int device;
	bool pinned;
	uint64_t device_bytes;
	uint64_t copies, copy_bytes, copy_ns;   /* finished copies, their bytes and time */
	uint64_t slot_waits;                    /* copies that had to wait for a release event */
} bd_gpu_session_info;
void bd_gpu_session_get_info(const bd_gpu_session *gs, bd_gpu_session_info *ret);

/*
 * Why `device` is lost to a sticky CUDA error (its GPU sessions ended, new
 * ones are refused until batchd restarts), or NULL while it is usable (and
 * for a NULL g). Loop thread.
 */
const char *bd_gpu_device_lost(const bd_gpu *g, int device);

/* Device bytes held by live sessions, and sessions staging from unpinned memory. */
void bd_gpu_totals(const bd_gpu *g, uint64_t *ret_device_bytes, uint32_t *ret_sessions,
		   uint32_t *ret_unpinned);

#endif
