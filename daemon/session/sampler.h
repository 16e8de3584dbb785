/* SPDX-License-Identifier: MIT */
/*
 * sampler.h - the deterministic sampler: which sample ids a rank reads, in
 * which order, for every batch of every epoch (docs/architecture.md, "Plan").
 *
 * Why it exists: shuffling a dataset of billions of samples must not cost a
 * table of billions of ids, must not depend on libc's rand() or on the
 * compiler, and must let a session resume at (epoch, batches consumed)
 * without replaying anything. So an epoch's order is never stored: it is a
 * pure function of (samples, fingerprint, seed, epoch, mode[, chunk,
 * window]) that maps a position to a sample id in O(1), computed with
 * integer arithmetic only (splitmix64 finalizers), so every machine and
 * every build gives bit-identical orders.
 *
 * Modes, for a dataset of n samples:
 *   BP_SHUFFLE_NONE    identity: position p holds id p (file order).
 *   BP_SHUFFLE_GLOBAL  a keyed bijection on [0, n): an 8-round balanced
 *                      Feistel network over the smallest power-of-two
 *                      domain of an even number of bits (>= 2) that holds
 *                      n, with cycle walking (re-apply until the value is
 *                      < n; the domain is < 4n, so < 4 rounds of walking are
 *                      expected). Round keys come from (fingerprint, seed,
 *                      epoch).
 *   BP_SHUFFLE_BLOCK   near-sequential reads for HDDs and big blocks. The id
 *                      space is cut into chunks of `chunk` consecutive ids;
 *                      a partial last chunk (n % chunk ids) stays at the very
 *                      end of the epoch order, in id order. The full chunks
 *                      are permuted by one keyed Feistel bijection; then each
 *                      consecutive group of `window` permuted chunks forms a
 *                      window (the last window may hold fewer chunks), and
 *                      the positions inside each window are permuted by
 *                      another keyed bijection over that window's size (keyed
 *                      by the window's index too). Reading one window touches
 *                      exactly `window` chunks, so a reader with `window`
 *                      blocks in flight reads each block once; yet both the
 *                      chunk order and the order inside every window change
 *                      with each epoch. Degenerate case: when chunk > n there
 *                      is no full chunk and the order is the identity.
 *
 * Ranks stripe the global order (lib/proto/schedule.h has the arithmetic, shared
 * with libbatchclient). An epoch's schedule starts at global position S:
 * S = start_sample for start_epoch, 0 for every other epoch. With rem =
 * n - S: per_rank = drop_last ? floor(rem / world) : ceil(rem / world);
 * batches = drop_last ? floor(per_rank / B) : ceil(per_rank / B); every
 * batch holds B samples except, without drop_last, the final one, which
 * holds last_len = per_rank - (batches - 1) * B, the same on every rank.
 * Batch j of rank r holds positions S + j*B*world + r*B + i (i < B); the
 * final batch without drop_last holds base + r*last_len + i (i < last_len)
 * with base = S + (batches - 1)*B*world. Positions >= n wrap modulo n,
 * padding with the first samples of the epoch order. So all ranks get the
 * same number of batches of the same sizes; the union over ranks of one
 * epoch is every position of [S, n) exactly once plus world * per_rank -
 * rem padding samples (without drop_last), or at most once (with
 * drop_last); and after k < batches lockstep steps the ranks have consumed
 * exactly the positions [S, S + k*B*world).
 *
 * Resume: any (epoch, batch) is computed directly; nothing depends on the
 * batches before it. A checkpoint is (epoch, samples consumed by all
 * ranks): resuming with start_sample S + k*B*world at the same world and
 * batch size gives exactly the batches that continuing would have; at any
 * other world or batch size it covers [S + k*B*world, n) exactly once.
 * drop_last with start_sample > 0 may leave start_epoch no batch: the
 * stream then begins with the next epoch.
 *
 * Locality: a rank reads runs of B consecutive positions, and the ranks of
 * one step read B*world consecutive positions between them, so in block
 * mode the sessions of one node read the same blocks at about the same
 * time and the daemon's shared reads serve each block once.
 *
 * Complexity: init O(1); order/position O(1) (a few dozen 64-bit multiplies,
 * amortised over cycle walking); bd_sampler_batch O(batch_len); no
 * allocation anywhere; sizeof(bd_sampler) is a constant.
 *
 * Thread rules: every function is pure and reentrant. A bd_sampler is read
 * only after bd_sampler_init(), so any number of threads may share one.
 */
#ifndef BATCHD_DAEMON_SAMPLER_H
#define BATCHD_DAEMON_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "protocol.h"   /* enum bp_shuffle */
#include "schedule.h"

/* The largest dataset the sampler accepts. */
#define BD_SAMPLER_MAX_SAMPLES  (UINT64_C(1) << 63)
/* Chunks per window when bd_sampler_cfg.window is 0. */
#define BD_SAMPLER_DEFAULT_WINDOW 16u


typedef struct bd_sampler_cfg {
	uint64_t samples;       /* dataset size n, 1 <= n <= 2^63 */
	uint64_t fingerprint;   /* dataset fingerprint */
	uint64_t seed;
	uint32_t rank, world;   /* 0 <= rank < world, world >= 1 */
	uint32_t batch_size;    /* >= 1 */
	bool drop_last;
	enum bp_shuffle mode;
	uint64_t chunk;         /* block mode: samples per chunk (>= 1), e.g. mean samples per pack block; ignored otherwise */
	uint32_t window;        /* block mode: chunks per shuffle window (0 = BD_SAMPLER_DEFAULT_WINDOW); ignored otherwise */
	uint64_t start_epoch;   /* the epoch whose schedule starts at start_sample */
	uint64_t start_sample;  /* < samples: global positions of start_epoch already consumed */
} bd_sampler_cfg;

/*
 * Derived constants only; fill with bd_sampler_init() and treat as read-only.
 * A plain struct so callers can embed it; the fields are private.
 */
typedef struct bd_sampler {
	uint64_t n;
	uint64_t key;            /* absorbed (fingerprint, seed) */
	bp_schedule full;        /* every epoch but start_epoch */
	bp_schedule first;       /* start_epoch, from start_sample */
	uint64_t start_epoch;
	uint32_t rank;
	enum bp_shuffle mode;
	uint32_t global_half;    /* global: Feistel half width in bits */
	/* block mode */
	uint64_t chunk;
	uint64_t full_chunks;    /* n / chunk */
	uint64_t win_chunks;     /* chunks per window, min(window, full_chunks) */
	uint64_t win_span;       /* positions per full window, win_chunks * chunk */
	uint64_t windows;        /* ceil(full_chunks / win_chunks) */
	uint64_t last_win_span;  /* positions in the last window */
	uint32_t chunk_half;     /* Feistel half widths: chunk permutation, */
	uint32_t win_half;       /* full windows, */
	uint32_t last_win_half;  /* the last window */
} bd_sampler;

/*
 * Validate cfg and fill s with the derived constants. Any thread.
 * @return 0; -EINVAL when a field is out of range (samples 0 or > 2^63,
 * world 0, rank >= world, batch_size 0, unknown mode, block mode with
 * chunk 0, start_sample >= samples); -ERANGE when drop_last leaves a full
 * epoch no batch (n < world * batch_size).
 * s is written only on success.
 */
int bd_sampler_init(bd_sampler *s, const bd_sampler_cfg *cfg);

/* Batches of a full epoch (start_sample 0), >= 1 and the same for every rank. */
uint64_t bd_sampler_batches_per_epoch(const bd_sampler *s);

/*
 * Batches of `epoch`: fewer for start_epoch when start_sample > 0 (0 when
 * drop_last leaves none), bd_sampler_batches_per_epoch() for every other.
 */
uint64_t bd_sampler_epoch_batches(const bd_sampler *s, uint64_t epoch);

/* Positions per rank of a full epoch (including padding), the same for every rank. */
uint64_t bd_sampler_samples_per_rank(const bd_sampler *s);

/*
 * Samples in batch `batch` of a full epoch: batch_size, except the final
 * batch without drop_last, which may be shorter. 0 when batch >= batches.
 */
uint32_t bd_sampler_batch_len(const bd_sampler *s, uint64_t batch);

/* The same for batch `batch` of `epoch` (start_epoch has its own schedule). */
uint32_t bd_sampler_epoch_batch_len(const bd_sampler *s, uint64_t epoch, uint64_t batch);

/*
 * Where the g-th batch counted from (start_epoch, 0) lies, the start
 * epoch having bd_sampler_epoch_batches(start_epoch) batches: writes its
 * (epoch, batch within that epoch).
 */
void bd_sampler_locate(const bd_sampler *s, uint64_t g, uint64_t *ret_epoch, uint64_t *ret_batch);

/*
 * Write the sample ids of batch `batch` (< bd_sampler_epoch_batches(epoch))
 * of `epoch` for this rank into ids[0 .. epoch_batch_len(epoch, batch)).
 * O(batch_len), no allocation. Writes nothing when batch is out of range.
 */
void bd_sampler_batch(const bd_sampler *s, uint64_t epoch, uint64_t batch, uint64_t *ids);

/*
 * The sample id at position `pos` of `epoch`'s global order (before the rank
 * split). pos >= n is taken modulo n (the padding rule). O(1).
 */
uint64_t bd_sampler_order(const bd_sampler *s, uint64_t epoch, uint64_t pos);

/*
 * The inverse of bd_sampler_order: the position of sample `id` (< n; larger
 * ids are taken modulo n) in `epoch`'s global order. O(1).
 */
uint64_t bd_sampler_position(const bd_sampler *s, uint64_t epoch, uint64_t id);

#endif /* BATCHD_DAEMON_SAMPLER_H */
