/* SPDX-License-Identifier: MIT */
/*
 * sampler-testlib.h - what the sampler suites (tests/unit/test-sampler.c,
 * test-sampler-resume.c) share: assertions quiet enough for loops over
 * every position, the three shuffle modes, a small configuration to
 * start from, and the striped rule that deals positions to ranks,
 * written out independently of lib/proto/schedule.c.
 *
 * Thread rules: called from a test's one thread.
 */
#ifndef BATCHD_TESTS_SAMPLER_TESTLIB_H
#define BATCHD_TESTS_SAMPLER_TESTLIB_H

#include <inttypes.h>
#include <stdint.h>

#include <check.h>

#include "sampler.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/*
 * For hot loops: Check reports the location of every passing ck_assert to
 * the parent through a pipe, a write(2) each, which would dominate the run
 * time of loops over 10^5 positions. This only talks on failure.
 */
#define expect_eq(a, b) do { \
	uint64_t a_ = (a), b_ = (b); \
	if (a_ != b_) \
		ck_abort_msg("%s:%d: %s == %s: %" PRIu64 " != %" PRIu64, \
			     __func__, __LINE__, #a, #b, a_, b_); \
} while (0)
#define expect(cond, ...) do { if (!(cond)) ck_abort_msg(__VA_ARGS__); } while (0)

/* None, global, block: a loop test's _i indexes it. */
extern const enum bp_shuffle st_all_modes[3];

/*
 * n samples in mode with seed; one rank, batches of 1, no drop_last,
 * chunks of 8 in windows of 4, a fixed fingerprint.
 */
bd_sampler_cfg st_cfg_of(uint64_t n, enum bp_shuffle mode, uint64_t seed);

/* bd_sampler_init(s, c) succeeds (asserted, naming the configuration). */
void st_init_ok(bd_sampler *s, const bd_sampler_cfg *c);

/*
 * The striped rule, written out independently of lib/proto/schedule.c: sample
 * i of rank r's batch b (len samples; every batch before it held B of each
 * rank's) of an epoch that starts at global position S.
 */
uint64_t st_striped(uint64_t S, uint64_t b, uint32_t B, uint32_t world, uint32_t r,
		    uint32_t len, uint32_t i);

#endif
