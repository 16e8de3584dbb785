/* SPDX-License-Identifier: MIT */
/*
 * mixture.h - how a session over several sources interleaves them: the
 * arithmetic of docs/tokens.md, "Mixtures", that the daemon's sampler and
 * libbatchclient's state (bc_stream_source_used) must agree on.
 *
 * Weights w_i become integer counts c_i over a period N (bp_mix_counts):
 * the smallest N <= BP_MIX_PERIOD_MAX at which every w_i·N / sum(w) is an
 * integer (to 1e-9), else N = BP_MIX_PERIOD_MAX with the largest
 * remainders rounded up; every count at least 1. The mixed stream is
 * periodic: position P holds source slot[P mod N] (bp_mix_slots: smooth
 * weighted round robin, so any prefix of a period holds each source within
 * one of its share), and it is that source's
 * c_i·floor(P / N) + rank[P mod N]-th use. So every N consecutive
 * positions hold exactly c_i of source i, and P alone says how far every
 * source has been read.
 *
 * Thread rules: pure functions of their arguments; any thread.
 */
#ifndef BATCHD_PROTO_MIXTURE_H
#define BATCHD_PROTO_MIXTURE_H

#include <stddef.h>
#include <stdint.h>

#define BP_MIX_SOURCES_MAX 64u       /* sources a session reads */
#define BP_MIX_PERIOD_MAX 65536u     /* positions of a period, at most */

/*
 * Counts for weights w[0..n) (2 <= n <= BP_MIX_SOURCES_MAX, each finite
 * and > 0) into counts[0..n), their period into *ret_period. @return 0,
 * or -EINVAL naming nothing (bp_mix_check says why).
 */
int bp_mix_counts(const double *w, uint32_t n, uint32_t *counts, uint32_t *ret_period);

/*
 * Why weights w[0..n) are refused, into buf (len bytes). @return 1 when
 * they are, 0 when they are fine.
 */
int bp_mix_check(const double *w, uint32_t n, char *buf, size_t len);

/*
 * The period's slots: slot[r], the source of position r, and rank[r], how
 * many of that source's slots come before r (r < period, the counts'
 * sum). Counts must be >= 1; O(period x n).
 */
void bp_mix_slots(const uint32_t *counts, uint32_t n, uint32_t period, uint8_t *slot,
		  uint32_t *rank);

/*
 * Uses of source i in the first `pos` positions of the mixed stream
 * (slots and ranks from bp_mix_slots).
 */
uint64_t bp_mix_used(const uint32_t *counts, const uint8_t *slot, const uint32_t *rank,
		     uint32_t period, uint32_t i, uint64_t pos);

#endif /* BATCHD_PROTO_MIXTURE_H */
