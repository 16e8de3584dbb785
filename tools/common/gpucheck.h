/* SPDX-License-Identifier: MIT */
/*
 * gpucheck.h - the trainer side of a GPU stream, for the tools: a CUDA
 * stream that waits for each batch's copy, and a check that copies the
 * batch back from device memory and compares it with the host staging copy.
 *
 * Why: batchctl consume --device and batchd-bench pipeline --device consume
 * GPU streams the way a trainer does (bc_batch_wait_stream on their own
 * non-blocking stream, bc_release recording the release event behind the
 * work queued there), and must prove what landed in device memory is the
 * batch. This keeps the CUDA runtime calls out of those tools' sources; in
 * a build without CUDA every call fails with -ENOTSUP and says so.
 *
 * Thread rules: a gpucheck belongs to one thread at a time, like the
 * bc_stream whose batches it is given. The process must not have used
 * CUDA before a fork() that it keeps using CUDA after (CUDA's own rule).
 */
#ifndef BATCHD_TOOLS_GPUCHECK_H
#define BATCHD_TOOLS_GPUCHECK_H

#include <stdbool.h>
#include <stddef.h>

#include "batchclient.h"

typedef struct gpucheck gpucheck;

/*
 * Select CUDA device `device` (this process's numbering, as in
 * bc_stream_opts.device) and create a non-blocking stream on it.
 * @return 0 with *ret set (free with gpucheck_free); -ENOTSUP when built
 * without CUDA, -ENODEV when the runtime finds no such device, -ENOMEM,
 * -EIO for another CUDA error; err says why.
 */
int gpucheck_new(int device, gpucheck **ret, char *err, size_t errlen);

/* Wait for everything queued on the stream, then destroy it. NULL is fine. */
void gpucheck_free(gpucheck *g);

/*
 * Make the stream wait (on the GPU) for b's copy to device memory, and make
 * it the stream bc_release(b) records the release event on.
 * @return 0, or -EIO with err saying why.
 */
int gpucheck_wait(gpucheck *g, bc_batch *b, char *err, size_t errlen);

/*
 * After gpucheck_wait: copy b's device payload back to the host on the
 * stream, wait for it, and compare it byte for byte with the staged
 * payload from bc_batch_data(b) on (every selected field's bytes).
 * @return 0 when identical; 1 when not (a length mismatch, no device
 * payload, or different bytes: err names the first differing offset);
 * -ENOMEM, -EIO for a CUDA error, with err saying why.
 */
int gpucheck_compare(gpucheck *g, const bc_batch *b, char *err, size_t errlen);

/*
 * gpucheck_wait, then (when compare) gpucheck_compare: what a trainer does
 * with each batch it takes. @return as gpucheck_compare (0, 1 for a
 * mismatch, -errno), or gpucheck_wait's error.
 */
int gpucheck_take(gpucheck *g, bc_batch *b, bool compare, char *err, size_t errlen);

/* Wait until all work queued on the stream has run. @return 0 or -EIO with err. */
int gpucheck_sync(gpucheck *g, char *err, size_t errlen);

#endif
