/* SPDX-License-Identifier: MIT */
/*
 * sampler-testlib.c - the helpers the sampler suites share (see
 * sampler-testlib.h), linked into test-sampler and test-sampler-resume.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>

#include <check.h>

#include "sampler-testlib.h"

const enum bp_shuffle st_all_modes[3] = {
	BP_SHUFFLE_NONE, BP_SHUFFLE_GLOBAL, BP_SHUFFLE_BLOCK,
};

bd_sampler_cfg st_cfg_of(uint64_t n, enum bp_shuffle mode, uint64_t seed)
{
	bd_sampler_cfg c = {
		.samples = n,
		.fingerprint = UINT64_C(0x0123456789abcdef),
		.seed = seed,
		.rank = 0,
		.world = 1,
		.batch_size = 1,
		.drop_last = false,
		.mode = mode,
		.chunk = 8,
		.window = 4,
	};
	return c;
}

void st_init_ok(bd_sampler *s, const bd_sampler_cfg *c)
{
	int r = bd_sampler_init(s, c);

	ck_assert_msg(r == 0, "init n=%" PRIu64 " mode=%d world=%u rank=%u B=%u: %d",
		      c->samples, (int)c->mode, c->world, c->rank, c->batch_size, r);
}

/*
 * The striped rule, written out independently of lib/proto/schedule.c: sample
 * i of rank r's batch b (len samples; every batch before it held B of each
 * rank's) of an epoch that starts at global position S.
 */
uint64_t st_striped(uint64_t S, uint64_t b, uint32_t B, uint32_t world, uint32_t r,
		    uint32_t len, uint32_t i)
{
	return S + b * B * (uint64_t)world + (uint64_t)r * len + i;
}
