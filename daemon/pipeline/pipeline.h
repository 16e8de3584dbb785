/* SPDX-License-Identifier: MIT */
/*
 * pipeline.h - the data plane: I/O threads read blocks, decode workers
 * check and decompress them into staged batches.
 *
 * The loop thread builds a bd_job (one batch: the blocks it needs, and for
 * each block the byte ranges of its raw bytes the batch takes and where
 * they go) and submits it. An I/O thread reads each block's stored bytes
 * (rounded out to the O_DIRECT alignment) into a buffer from a pool
 * registered with its io_uring, and passes the block to a decode worker,
 * which verifies the stored hash, decompresses (straight into the batch
 * when the block is exactly what the batch needs, else into scratch and
 * then copies), and checks the raw hash. The last block of a job posts it
 * back to the loop thread, which reports BD_JOB_DECODED to the job's owner
 * (job_event.h) and frees the job. Failures fail the job (first reason
 * wins), never a thread.
 *
 * Fairness: the pipeline serves users (tenants, by uid), then their
 * owners (sessions), not jobs, in order. Each owner's tasks wait in its
 * own flow, in submission order (so an owner's older jobs are read
 * first); I/O threads take one block at a time, from the users in
 * round-robin and from each user's flows in round-robin (fairq.c). An
 * owner may have at most `session_blocks` blocks in flight at once
 * (claimed by an I/O thread and not yet decoded: in an engine, waiting on
 * the cache or in the decode queue), and a user at most share / U of
 * them across all its sessions, where U is the number of users with work
 * and share = 2 x queue_depth x io_threads (at least session_blocks).
 * The bound this gives: a newly submitted job's first block is claimed
 * after at most U - 1 blocks of other users (one turn of the
 * round-robin), and finds at most `share` blocks of others ahead of it
 * in the engines and the decode queue, however many sessions they run
 * and however many blocks those have queued. A user with many sessions
 * of huge batches of tiny blocks therefore gets 1/U of the pipeline, and
 * delays another's next block by a bounded number of blocks, not by its
 * whole backlog.
 *
 * Spans: a warm job's blocks (bd_job_set_warm: a dataset read ahead in
 * file order) that follow one another in the file are read with one read
 * of up to 1 MiB (io_thread.c, BD_SPAN_MAX). A span counts in flight as
 * one block per 128 KiB it reads, not per block it holds, and its flow
 * then gives its tenant's other flows as many turns (fairq.c, "owed"): a
 * trainer's next batch waits behind a 128 KiB read at most per block of
 * its own, however small the warm blocks are.
 *
 * The decoded-block cache (blockcache.h) is consulted by the I/O thread, when it
 * takes a block that does not tile the batch, or one that does when the
 * dataset is kept whole (the ram tier) or another session uses the same
 * version (bd_dataset_shared): a hit or a wait skips the read, so
 * sessions on one version read and decode each block once between them.
 * A hit whose pieces come to at most 16 KiB is copied and finished by the
 * I/O thread itself: waking a decode worker for so small a copy cost
 * more than the copy (tiny samples in the ram tier ran at a third of the
 * rate). The decode worker that loads an entry publishes it (or its
 * failure) and wakes the blocks that waited on it.
 *
 * Files: pipeline.c (jobs, queues, buffers, submission, completion,
 * stats), fairq.c (who is served next), io_thread.c (the I/O threads), decode.c (the decode workers),
 * pipeline_priv.h (what they share).
 *
 * Thread rules: bd_job_*, bd_pipeline_new/submit/free and the getters on
 * the loop thread; events are delivered on the loop thread.
 */
#ifndef BATCHD_DAEMON_PIPELINE_H
#define BATCHD_DAEMON_PIPELINE_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "dataset.h"
#include "image.h"
#include "io.h"
#include "job_event.h"
#include "metrics.h"

/* One batch on its way through the pipeline (opaque). */
typedef struct bd_job bd_job;

/*
 * A job for batch seq of owner (a session of user `tenant`), reading nblocks blocks into npieces byte
 * ranges: add exactly that many of each, blocks and their pieces in order
 * (bd_job_add_block, then that block's bd_job_add_piece calls). Once the
 * job is back, event(owner, seq, BD_JOB_DECODED, status, reason) is called
 * and the job freed. @return 0, or -ENOMEM.
 */
int bd_job_new(void *owner, uint32_t tenant, bd_job_event_fn event, uint64_t seq,
	       uint32_t nblocks, uint32_t npieces, bd_job **ret);

/* The next block of the job: block `block` of shard `shard` of d (a valid index). */
void bd_job_add_block(bd_job *job, const bd_dataset *d, uint32_t shard, uint64_t block);

/* Raw bytes [src, src + size) of the last block added go to dst. */
void bd_job_add_piece(bd_job *job, uint64_t src, uint64_t size, uint8_t *dst);

/*
 * Token ids [src, src + size) of the last block added, `width` bytes each
 * (2 or 4, little-endian), to dst as int32: width 4 is copied (ids are
 * below 2^31, lib/pack/PACK.md), width 2 widened (dst takes 2 x size).
 */
void bd_job_add_tokens(bd_job *job, uint64_t src, uint64_t size, uint8_t *dst, uint32_t width);

/*
 * The job's images (bd_job_add_image) are made with spec, their random
 * choices keyed by seed (lib/image); spec must outlive the job.
 *
 * bad (the batch record's image outcome, fields.h: bad[0] a count, then
 * batch indices) says which images were bad. With skip, each bad image
 * is left as it is, its index added to bad (in any order) and the job
 * goes on; the first one's reason is the DECODED event's (with status
 * 0). Without, the job fails with the image's reason alone (what lib/image
 * said, no sample named) and bad holds that image's index: the owner
 * names the sample. bad must outlive the job; the owner zeroes bad[0].
 */
void bd_job_set_image(bd_job *job, const bi_spec *spec, uint64_t seed, bool skip, uint64_t *bad);

/*
 * Raw bytes [src, src + size) of the last block added are sample id's
 * encoded image, index `index` of the batch, decoded, transformed
 * (bd_job_set_image's spec, for epoch) and written as a bi_out_bytes
 * tensor to dst.
 */
void bd_job_add_image(bd_job *job, uint64_t src, uint64_t size, uint8_t *dst, uint64_t id,
		      uint64_t epoch, uint32_t index);

/*
 * The job only loads its blocks into the block cache: it has no pieces,
 * and its blocks are in file order (a dataset read ahead of its batches,
 * session_warm.c). An I/O thread reads consecutive blocks of it that are
 * neither cached nor being loaded with one read, up to BD_SPAN_MAX bytes
 * ("Spans" above); those cached or loading are skipped. Once the
 * cache has no room for one (BD_CACHE_BYPASS), the job's other blocks
 * are skipped too and it comes back with -ENOSPC.
 */
void bd_job_set_warm(bd_job *job);

/* Free a job that was never submitted. NULL is fine. */
void bd_job_free(bd_job *job);

/*
 * Heap bytes of a job of nblocks blocks and npieces pieces (what
 * bd_job_new allocates), and the pipeline's own per-owner state while the
 * owner has work (its flow): what a session charges for its jobs in flight.
 */
uint64_t bd_job_bytes(uint32_t nblocks, uint32_t npieces);
uint64_t bd_pipeline_owner_bytes(void);

typedef struct bd_pipeline_opts {
	bd_io_engine engine;
	unsigned queue_depth;
	unsigned io_threads;
	unsigned decode_threads;
	uint32_t pool_buffers;      /* registered read buffers, end to end */
	uint32_t pool_buffer_size;  /* bytes each; a larger read takes a run of them, one larger
	                               than the pool (or finding no run free) its own memory */
	uint64_t cache_budget;      /* decoded-block cache bytes; 0 = none */
	/*
	 * Blocks of one owner in flight at once (see "Fairness" above);
	 * 0 = 2 x queue_depth x io_threads, enough for one owner alone to
	 * keep every engine full with as much again waiting for decode.
	 */
	uint32_t session_blocks;
} bd_pipeline_opts;

typedef struct bd_pipeline bd_pipeline;

/*
 * Start the threads. A job reports to the event function it was built with
 * (bd_job_new, job_event.h). @return 0, -ENOMEM, or the io engine's setup
 * error.
 */
int bd_pipeline_new(uv_loop_t *loop, const bd_pipeline_opts *o, bd_pipeline **ret);
/* Queue a job with every block (at least one) and piece added; the pipeline owns it from here. */
void bd_pipeline_submit(bd_pipeline *p, bd_job *job);
/*
 * owner submits no more (call once, when it ends; it must not submit
 * after). Its blocks that no I/O thread has taken yet are dropped, and so
 * are those waiting on a remote dataset's fetcher (bd_remote_abandon):
 * their jobs come back failed (-ECANCELED) once the blocks being read or
 * decoded are done, so an ending session waits for at most session_blocks
 * local reads, never for its whole backlog or for a slow bucket. The
 * pipeline then forgets the owner.
 */
void bd_pipeline_cancel(bd_pipeline *p, void *owner);
/* Stop and join every thread; jobs still queued are not run. */
void bd_pipeline_free(bd_pipeline *p);

/*
 * The tracker of shared memory that clients keep after their sessions
 * ended (linger.h), made on first use and freed with the pipeline.
 * Sessions use it unless bd_session_env names one: the pipeline is the one
 * daemon-wide loop object every session reaches that outlives them all.
 * @return the tracker, made with the pipeline.
 */
struct bd_linger *bd_pipeline_linger(bd_pipeline *p);

/* The registered read buffers: how many, of what size, on what pages (pages.h: "thp", ...). */
typedef struct bd_read_buffers {
	uint32_t count, size;
	const char *pages;
} bd_read_buffers;
void bd_pipeline_read_buffers(const bd_pipeline *p, bd_read_buffers *ret);

/* The engine the I/O threads run, and the io_uring setup flags accepted. */
bd_io_engine bd_pipeline_engine(const bd_pipeline *p);
unsigned bd_pipeline_setup_flags(const bd_pipeline *p);

/* Counters for status (approximate, relaxed loads). */
typedef struct bd_pipeline_stats {
	uint64_t blocks_read, bytes_read, blocks_decoded, raw_bytes, failures;
	uint64_t direct_decodes;    /* blocks decompressed straight into a batch */
	/*
	 * Copies on the way to a batch: bytes copied out of a decoded block
	 * (a cache entry or a decode buffer) into batches, and bytes of
	 * blocks stored raw copied from the read buffer to where they decode
	 * (their decode is that copy). Per byte delivered, the two summed
	 * over raw_bytes is the pipeline's copies per byte.
	 */
	uint64_t copied_bytes, stored_copies;
	/* Reads of several blocks at once (warm jobs' spans), and the blocks they read. */
	uint64_t span_reads, span_blocks;
	uint64_t cache_hits, cache_misses, cache_waits, cache_bypasses, cache_evictions;
	uint64_t cache_bytes, cache_budget;
	/* The cache's region (blockcache.h): in entries, faulted in, its pages, its prefault. */
	uint64_t cache_region_used, cache_region_populated;
	const char *cache_pages, *cache_prefault;
	uint64_t reads_inflight;    /* gauge: block reads in the engines now */
	uint64_t read_errors;       /* reads that failed or came back short */
	uint64_t checksum_errors;   /* blocks whose stored or raw bytes did not match */
	uint64_t decode_errors;     /* other decode failures (frame, size, memory) */
	uint64_t decode_busy_ns;    /* time decode workers spent on tasks, all summed */
	uint64_t decode_queued;     /* gauge: tasks waiting for a decode worker now */
	uint32_t decoders, decoders_active; /* decode workers, and how many may take tasks now */
	/* failures = read_errors + checksum_errors + decode_errors */
} bd_pipeline_stats;
void bd_pipeline_get_stats(const bd_pipeline *p, bd_pipeline_stats *ret);

/*
 * Let only the first `active` decode workers (1 .. decode_threads) take
 * tasks; the others wait without spinning until raised again (tune.h
 * decides how many). Tasks already queued are taken by the active ones.
 */
void bd_pipeline_set_decoders(bd_pipeline *p, unsigned active);

/*
 * The most the decode workers' image scratch may hold together (lib/image:
 * every worker made an image at its largest): what a session that decodes
 * images is charged besides its records. 0 for p NULL. Any thread.
 */
uint64_t bd_pipeline_image_scratch(const bd_pipeline *p);

/* Read latency (submission to completion) and decode time histograms. */
void bd_pipeline_get_hists(const bd_pipeline *p, bd_hist *read, bd_hist *decode);

#endif
