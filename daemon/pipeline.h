/* SPDX-License-Identifier: MIT */
/*
 * pipeline.h - the data plane: I/O threads read blocks, decode workers
 * check and decompress them into staged batches.
 *
 * The loop thread hands over a bd_job (one batch: a list of block tasks,
 * each with the pieces of its raw bytes the batch needs and where they go).
 * An I/O thread reads each block's stored bytes (rounded out to the O_DIRECT
 * alignment) into a buffer from a pool registered with its io_uring, and
 * passes the block to a decode worker, which verifies the stored hash,
 * decompresses (straight into the batch when the block is exactly what the
 * batch needs, else into scratch and then copies), and checks the raw
 * hash. The last task of a job posts it back to the loop thread, which
 * publishes it. Failures fail the job (first reason wins), never a thread.
 *
 * Thread rules: bd_pipeline_new/submit/free on the loop thread; the done
 * callback runs on the loop thread. Everything else is internal.
 */
#ifndef BATCHD_DAEMON_PIPELINE_H
#define BATCHD_DAEMON_PIPELINE_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "cache.h"
#include "dataset.h"
#include "io.h"
#include "metrics.h"
#include "ring.h"

typedef struct bd_job bd_job;

/* A byte range of a block's raw bytes and where the batch wants it. */
typedef struct bd_piece {
	uint64_t src;
	uint64_t size;
	uint8_t *dst;
} bd_piece;

/* One block read and decode. */
typedef struct bd_task {
	bd_job *job;
	const bd_dataset *dset;
	uint32_t shard;
	uint64_t block;
	bp_pack_block blk;
	uint32_t first_piece, npieces;
	bool direct_dst;            /* pieces tile the block: decode into pieces[first].dst */
	struct bd_cache_entry *centry; /* the cached block this task loads or copies from */
	bool cache_load;            /* this task decodes into centry for everyone */
	/* I/O state, owned by the I/O then the decode thread. */
	bd_io_req req;
	uint8_t *buf;
	int32_t pool_slot;          /* -1: buf was malloc'd */
	uint64_t t_submit;          /* ns, CLOCK_MONOTONIC: for the read latency histogram */
	uint32_t skip;              /* stored bytes start at buf + skip */
	struct bd_task *next;
} bd_task;

struct bd_job {
	void *owner;                /* the session */
	uint64_t seq;
	uint64_t epoch, batch;      /* its place in the schedule */
	uint32_t count;             /* samples */
	bd_task *tasks;
	uint32_t ntasks;
	bd_piece *pieces;
	uint32_t pending;           /* tasks not yet finished (atomic) */
	int32_t status;             /* 0, or the first failure's negative errno (atomic) */
	char reason[BP_RING_REASON_MAX];
	struct bd_job *next;
};

typedef struct bd_pipeline_opts {
	bd_io_engine engine;
	unsigned queue_depth;
	unsigned io_threads;
	unsigned decode_threads;
	uint32_t pool_buffers;      /* registered read buffers */
	uint32_t pool_buffer_size;  /* bytes each; larger reads get their own buffer */
	uint64_t cache_budget;      /* decoded-block cache bytes; 0 = none */
} bd_pipeline_opts;

typedef struct bd_pipeline bd_pipeline;

typedef void (*bd_job_done_fn)(bd_job *job, void *ctx);

/* Start the threads. @return 0, -ENOMEM, or the io engine's setup error. */
int bd_pipeline_new(uv_loop_t *loop, const bd_pipeline_opts *o, bd_job_done_fn done, void *ctx,
		    bd_pipeline **ret);
/* Queue a job (loop thread). job->pending must equal job->ntasks (>= 1). */
void bd_pipeline_submit(bd_pipeline *p, bd_job *job);
/* Stop and join every thread; jobs still queued are not run. */
void bd_pipeline_free(bd_pipeline *p);

/* The engine the I/O threads run, and the io_uring setup flags accepted. */
bd_io_engine bd_pipeline_engine(const bd_pipeline *p);
unsigned bd_pipeline_setup_flags(const bd_pipeline *p);

/* Counters for status (approximate, relaxed loads). */
typedef struct bd_pipeline_stats {
	uint64_t blocks_read, bytes_read, blocks_decoded, raw_bytes, failures;
	uint64_t direct_decodes;    /* blocks decompressed straight into a batch */
	uint64_t cache_hits, cache_misses, cache_waits, cache_bypasses, cache_evictions;
	uint64_t cache_bytes, cache_budget;
	uint64_t reads_inflight;    /* gauge: block reads in the engines now */
	uint64_t read_errors;       /* reads that failed or came back short */
	uint64_t checksum_errors;   /* blocks whose stored or raw bytes did not match */
	uint64_t decode_errors;     /* other decode failures (frame, size, memory) */
	/* failures = read_errors + checksum_errors + decode_errors */
} bd_pipeline_stats;
void bd_pipeline_get_stats(const bd_pipeline *p, bd_pipeline_stats *ret);

/* Read latency (submission to completion) and decode time histograms. */
void bd_pipeline_get_hists(const bd_pipeline *p, bd_hist *read, bd_hist *decode);

#endif
