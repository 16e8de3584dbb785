/* SPDX-License-Identifier: MIT */
/*
 * schedule.h - which epoch positions each rank's batches hold, and which
 * (epoch, batch) a stream's n-th batch is: the arithmetic of docs/architecture.md,
 * "Plan", that the daemon's sampler and libbatchclient must agree on.
 *
 * Why it lives in proto/: the client reports positions (bc_stream_position,
 * bc_stream_epoch_batches) without asking the daemon, so both sides compute
 * them with this one implementation and no formula is written twice.
 *
 * The rule, for n samples, world W, rank r, batch size B and an epoch whose
 * schedule starts at global position S (0 <= S < n): rem = n - S; without
 * drop_last per_rank = ceil(rem / W), batches = ceil(per_rank / B) and the
 * final batch holds last_len = per_rank - (batches - 1) * B; with drop_last
 * per_rank = floor(rem / W), batches = floor(per_rank / B), last_len = B.
 * Ranks stripe the order: batch j holds positions S + j*B*W + r*B + i
 * (i < B), and the final batch without drop_last starts at
 * S + (batches - 1)*B*W + r*last_len. Positions >= n wrap (pos % n). So
 * after k lockstep steps the ranks have consumed exactly the global
 * positions [S, S + k*B*W), and one number describes a checkpoint at any
 * world size.
 *
 * Thread rules: pure functions of their arguments; any thread.
 */
#ifndef BATCHD_PROTO_SCHEDULE_H
#define BATCHD_PROTO_SCHEDULE_H

#include <stdbool.h>
#include <stdint.h>

/* OPEN's batch_stride: 1 (every batch) .. BP_STRIDE_MAX. */
#define BP_STRIDE_MAX 4096u

/* One epoch's schedule, the same for every rank of its world. */
typedef struct bp_schedule {
	uint64_t start;         /* S: the first global position it covers */
	uint64_t per_rank;      /* positions per rank, padding included */
	uint64_t batches;       /* per rank; 0 when drop_last leaves none */
	uint32_t world;
	uint32_t batch_size;
	uint32_t last_len;      /* samples in the final batch */
} bp_schedule;

/*
 * The schedule of an epoch of `samples` (1 .. 2^63) starting at `start`.
 * @return 0 with *ret set (ret->batches may be 0 with drop_last); -EINVAL
 * for samples 0 or over 2^63, world 0, batch_size 0 or start >= samples.
 */
int bp_schedule_init(bp_schedule *ret, uint64_t samples, uint64_t start, uint32_t world,
		     uint32_t batch_size, bool drop_last);

/* Samples in batch `batch`: batch_size, last_len for the final one, 0 past the end. */
uint32_t bp_schedule_batch_len(const bp_schedule *p, uint64_t batch);

/*
 * The global position (before the wrap modulo samples) of rank's batch
 * `batch` (< batches): it holds bp_schedule_batch_len() consecutive
 * positions from there.
 */
uint64_t bp_schedule_batch_first(const bp_schedule *p, uint32_t rank, uint64_t batch);

/*
 * Where the g-th batch of a stream's global sequence lies: g counts batches
 * across epochs from (start_epoch, 0), start_epoch having `first` batches
 * (0 when drop_last left none) and every later epoch `every` (>= 1).
 * Writes (epoch, batch within that epoch's schedule).
 */
void bp_schedule_locate(uint64_t start_epoch, uint64_t first, uint64_t every, uint64_t g,
			uint64_t *ret_epoch, uint64_t *ret_batch);

#endif /* BATCHD_PROTO_SCHEDULE_H */
