/* SPDX-License-Identifier: MIT */
/*
 * session.h - one trainer's stream of batches: its schedule, its shared
 * memory, and the planner that keeps `prefetch` batches staged ahead.
 *
 * A session owns a data memfd (the ring: descriptors plus an arena of
 * batch records, see lib/proto/ring.h) and a control memfd the client writes.
 * The planner walks the sampler's order batch after batch, epoch after
 * epoch, carves each batch's record out of the arena, and hands the batch
 * to the pipeline; finished batches are published strictly in order.
 * Records are reclaimed in order once the client has released them, so
 * the arena is a byte ring and never fragments beyond one wrap.
 *
 * Thread rules: everything here runs on the loop thread, but
 * bd_session_largest_batch, which any thread may call (the open runs it
 * on libuv's thread pool; session_size.c). The pipeline
 * threads touch only the bd_job they were handed (and the record bytes it
 * points into) until the job reports BD_JOB_DECODED; the GPU thread reads
 * a record from bd_gpu_copy() until BD_JOB_COPIED (job_event.h). Both
 * events come back to the session through the event function it gave
 * with the batch.
 */
#ifndef BATCHD_DAEMON_SESSION_H
#define BATCHD_DAEMON_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <uv.h>

#include "budget.h"
#include "cuda_probe.h"
#include "dataset.h"
#include "gpu.h"
#include "keys.h"
#include "pipeline.h"
#include "protocol.h"
#include "ring.h"
#include "sampler.h"
#include "sequences.h"
#include "sources.h"

typedef struct bd_session bd_session;

/*
 * A session's reading ahead of its ram-tier datasets in file order on its
 * first pass (session_warm.c): not started (off), running, done (every
 * block loaded), stopped when the cache was full or the session closed.
 */
enum bd_warm_state { BD_WARM_OFF, BD_WARM_RUNNING, BD_WARM_DONE, BD_WARM_FULL, BD_WARM_STOPPED };
const char *bd_warm_state_name(enum bd_warm_state st);

/*
 * Samples a session's batches in the pipeline add up to, about: a session
 * has ceil(this / batch_size) batches being read and decoded at once, at
 * least 2 and at most its slots; the bookkeeping of that many is charged
 * to it (bd_session_info.memory).
 */
#define BD_SESSION_JOB_PIECES 4096u

typedef struct bd_session_env {
	uv_loop_t *loop;
	bd_pipeline *pipeline;
	/*
	 * The memory budget sessions are charged to, beside the dataset
	 * versions (budget.h): the unused versions the dataset cache keeps
	 * are evicted to make room for a session (dataset.h).
	 */
	bd_budget *budget;
	unsigned default_prefetch;
	unsigned max_prefetch;
	unsigned read_depth;        /* reads the engines keep in flight: queue_depth x io_threads */
	uint64_t image_max_pixels;  /* [images] max_pixels: an image session's bi_spec.max_pixels */
	bool stream_first_pass;     /* [io] first_pass = stream: ram-tier datasets read ahead (session_warm.c) */
	bd_gpu *gpu;                /* NULL when CUDA is unusable: host sessions only */
	const bd_cuda_state *cuda;  /* the devices, when gpu is set */
	/*
	 * Where memory a client keeps after its session ended stays charged
	 * (linger.h); NULL: the pipeline's (bd_pipeline_linger).
	 */
	struct bd_linger *linger;
	/* Called when a session has fully ended (all jobs back, memory freed). */
	void (*ended)(bd_session *s, void *ctx);
	void *ctx;
} bd_session_env;

/*
 * What one user may still take: the per-uid memory limit. A dataset
 * version counts once against each uid with a session on it (the
 * budget counts it once in all).
 */
typedef struct bd_session_quota {
	uid_t uid;
	uint64_t uid_used;          /* what the uid's sessions hold now, their versions included */
	uint64_t uid_limit;         /* 0: no per-uid limit */
	/*
	 * The new session's versions (a mixture's sources') that the uid has
	 * no other session on: their bytes; 0 when it reads them all already.
	 */
	uint64_t uid_dataset;
} bd_session_quota;

/* bd_session_largest_batch: an epoch of more samples per rank is not read. */
#define BD_SESSION_SIZING_SCAN (UINT64_C(1) << 20)
/* ... and it reads epochs while their samples add up to no more than this, at most: */
#define BD_SESSION_SIZING_SAMPLES (UINT64_C(1) << 18)
#define BD_SESSION_SIZING_EPOCHS 64u

/*
 * The payload bytes of the largest batch request m's schedule over d holds
 * in its first epochs, summed from the sample tables: what a session's
 * arena and device slots are sized from. Only the batches the stream
 * takes count (every batch_stride-th from start_batch, the start epoch
 * from start_sample). Unshuffled, every full epoch holds the same batches:
 * the start epoch and batch_stride more are read; shuffled, as many epochs
 * from the start epoch on as BD_SESSION_SIZING_SAMPLES visited samples
 * allow (at least one, at most BD_SESSION_SIZING_EPOCHS). An epoch of more than
 * BD_SESSION_SIZING_SCAN samples per rank is not read: it gets the bound
 * of the batch_size largest samples (which such datasets of small samples
 * afford). A token session (q, sequences.h; x, sources.h, for a mixture; NULL for any other) has
 * samples of known sizes: no pass is made. Sizing covers the fields and keys m selects; with keys, the
 * dataset's keys are read whole when a key table pays (bd_key_table):
 * *ret_keys (may be NULL: not kept) is that table, or NULL, for
 * bd_session_new. A batch of a later epoch larger than this waits for room, or is
 * delivered failed with its reason when it can never fit. Costs one
 * sampler step and sample lookup per sample read; any thread (d's tables
 * are read only), so the open's lookup runs it on the thread pool.
 * @return 0; -EINVAL (an invalid schedule: bd_session_new says what is
 * wrong); -ENOMEM.
 */
int bd_session_largest_batch(const bd_dataset *d, const bd_seqs *q, const bd_mix *x,
			     const bp_msg_open *m, uint64_t *ret, bd_key_table **ret_keys);

/*
 * Create a session over dataset d (the session takes the reference) for
 * request m, its largest batch `largest` and key table *keys (both from
 * bd_session_largest_batch; keys may be NULL or hold NULL: the session
 * reads keys as its batches need them; on success the session has taken
 * the table and *keys is NULL, on failure it is left there), a token
 * session's sequences *seqs (bd_seqs_new over d for m; NULL or holding
 * NULL for any other session; taken as keys are) and a mixture's other
 * sources *mix (bd_mix_new; NULL or holding NULL: none; taken so too), delivering
 * to host memory (device < 0) or to the daemon's
 * CUDA device `device` (env->gpu must be set). On success *ret is the
 * session. On failure err names what was wrong. @return 0; -EINVAL (a
 * field the dataset cannot satisfy, e.g. drop_last leaving no batch),
 * -ENOMEM (memory budget, or device memory: err says how much is needed),
 * -ENODEV / -EIO (CUDA), -errno.
 */
int bd_session_new(const bd_session_env *env, uint64_t id, bd_dataset *d,
		   const bp_msg_open *m, uint64_t largest, bd_key_table **keys, bd_seqs **seqs,
		   bd_mix **mix, int device, const bd_session_quota *q, bd_session **ret, char *err,
		   size_t errlen);

/*
 * The READY message for s, and its descriptors in the order PROTOCOL.md
 * gives (they stay open in the session; the kernel dups them into the
 * message). @return how many: BP_READY_FDS, or BP_READY_FDS_GPU.
 */
int bd_session_ready(const bd_session *s, bp_msg_ready *ret, int fds[BP_READY_FDS_GPU]);

/* Start planning (after READY was sent). */
void bd_session_start(bd_session *s);

/*
 * End the session: stop planning, mark the ring stopped with `reason` (a
 * negative errno, 0 for a normal close), wake the client. Memory is freed
 * once every job in flight is back; env->ended is called then.
 */
void bd_session_close(bd_session *s, int reason);

/*
 * The client is done with the session: it sent CLOSE, went away, or never
 * got READY. Call after bd_session_close. Until then a stopped GPU session
 * keeps its device side (the client may still use its events).
 */
void bd_session_detach(bd_session *s);

/*
 * End the session if its client has held published batches without
 * releasing any for lease_ns (0: never). @return whether it was ended.
 */
bool bd_session_lease_expired(bd_session *s, uint64_t lease_ns);

uint64_t bd_session_id(const bd_session *s);
const char *bd_session_dataset(const bd_session *s);
/*
 * The dataset versions it reads (shared with the other sessions on them):
 * its own, then a mixture's other sources' (a version listed twice when
 * a mixture names it twice), into out[0 .. BP_MIX_SOURCES_MAX). @return
 * how many.
 */
uint32_t bd_session_versions(const bd_session *s, const bd_dataset **out);
/* Is it ending (bd_session_close called): its memory comes back once its jobs are in? */
bool bd_session_closing(const bd_session *s);
/* Where its dataset version is served from: "ram", "page" or "direct" (dataset.h). */
const char *bd_session_tier(const bd_session *s);
/* The fields its batches carry, comma-separated in schema order, into buf. @return buf. */
const char *bd_session_fields(const bd_session *s, char *buf, size_t len);
/* Do its batches carry the sample keys? */
bool bd_session_keys(const bd_session *s);
/* A token session's sequences (sequences.h), or NULL. */
const bd_seqs *bd_session_sequences(const bd_session *s);
/* A mixture's sources (sources.h), or NULL. */
const bd_mix *bd_session_mixture(const bd_session *s);

typedef struct bd_session_info {
	uint64_t id, published, released, failed, bytes, memory;
	uint64_t skipped;           /* bad images left out of its batches (on_error=skip) */
	uint64_t memory_heap;       /* of memory: the daemon heap; the rest is the two memfds */
	/*
	 * Its dataset versions' bytes in memory (dataset.h; a mixture's
	 * sources' each once): shared with the other sessions on them and
	 * charged once, to the version; not in memory.
	 */
	uint64_t dataset_memory;
	uint64_t planned;           /* batches staged: published, or being read and decoded */
	uint64_t delivered, delivered_bytes;  /* batches the client took and released, and their bytes */
	uint64_t epoch, batch;      /* position of the next batch to publish (how far batchd staged) */
	uint64_t trainer_epoch, trainer_batch; /* the trainer's: after the batches it released */
	uint32_t batch_size, slots, inflight;
	uint32_t rank, world;
	uint8_t shuffle;            /* enum bp_shuffle */
	bool protocol_violation;
	bool closing;               /* ending: its memory comes back once its jobs are in */
	uint64_t age_ns;            /* since the session opened */
	int device;                 /* the daemon's CUDA ordinal, or -1: host */
	bd_gpu_session_info gpu;    /* when device >= 0 */
	/*
	 * Client-reported (from the control memfd: informational only),
	 * clamped to what is possible: consumed and waits at most the batches
	 * published, wait_ns at most the session's age, the histogram at most
	 * waits in all; each only ever grows.
	 */
	uint64_t consumed, wait_ns, waits;
	uint64_t wait_hist[BP_RING_WAIT_BUCKETS];
	/*
	 * The share of its life the trainer spent stalled on data: wait_ns /
	 * age_ns, 0..1 (0: never waited; ~1: always in bc_next).
	 */
	double stall_ratio;
	int end_reason;             /* once closing: bd_session_close's reason (0: a normal close) */
	/* Its reading ahead in file order (session_warm.c), and the stored bytes it queued. */
	enum bd_warm_state warm;
	uint64_t warm_bytes;
} bd_session_info;
/*
 * GPUs a session's trainer is taken to hold: lost GPU-time is its stall
 * time times this (one trainer process per GPU, one session each).
 */
#define BD_SESSION_TRAINER_GPUS 1u
/*
 * s's figures. memory is every byte charged to the session: its shared
 * memory and the daemon heap it may hold (sample tables, jobs in flight,
 * GPU bookkeeping). The client-reported counters are folded in here, each
 * clamped (so non-const): see wait_acct.h.
 */
void bd_session_get_info(bd_session *s, bd_session_info *ret);

#endif
