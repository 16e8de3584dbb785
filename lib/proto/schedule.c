/* SPDX-License-Identifier: MIT */
/*
 * schedule.c - the striped rank schedule and a stream's batch sequence
 * (see schedule.h for the rule).
 *
 * Overflow: rem <= 2^63 and world < 2^32, so world * per_rank < rem +
 * world and every position computed here is below 2^63 + 2^32.
 */
#include "schedule.h"

#include <errno.h>

#define SAMPLES_MAX (UINT64_C(1) << 63)

int bp_schedule_init(bp_schedule *ret, uint64_t samples, uint64_t start, uint32_t world,
		     uint32_t batch_size, bool drop_last)
{
	bp_schedule p = { .start = start, .world = world, .batch_size = batch_size };
	uint64_t rem;

	if (samples == 0 || samples > SAMPLES_MAX || world == 0 || batch_size == 0 ||
	    start >= samples)
		return -EINVAL;
	rem = samples - start;
	p.per_rank = rem / world;
	if (!drop_last && rem % world)
		p.per_rank++;
	p.batches = p.per_rank / batch_size;
	p.last_len = batch_size;
	if (!drop_last && p.per_rank % batch_size) {
		p.last_len = (uint32_t)(p.per_rank % batch_size);
		p.batches++;
	}
	*ret = p;
	return 0;
}

uint32_t bp_schedule_batch_len(const bp_schedule *p, uint64_t batch)
{
	if (batch >= p->batches)
		return 0;
	return batch == p->batches - 1 ? p->last_len : p->batch_size;
}

uint64_t bp_schedule_batch_first(const bp_schedule *p, uint32_t rank, uint64_t batch)
{
	/* Every batch before this one took batch_size positions of each rank. */
	uint64_t base = p->start + batch * p->batch_size * (uint64_t)p->world;

	return base + (uint64_t)rank * bp_schedule_batch_len(p, batch);
}

void bp_schedule_locate(uint64_t start_epoch, uint64_t first, uint64_t every, uint64_t g,
			uint64_t *ret_epoch, uint64_t *ret_batch)
{
	if (g < first) {
		*ret_epoch = start_epoch;
		*ret_batch = g;
		return;
	}
	g -= first;
	*ret_epoch = start_epoch + 1 + g / every;
	*ret_batch = g % every;
}
