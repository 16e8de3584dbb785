/* SPDX-License-Identifier: MIT */
/*
 * daemon-fixture.c - the daemon suites' daemon, datasets and sampler-order
 * check (see daemon-fixture.h).
 */
#include <inttypes.h>

#include <check.h>

#include "daemon-fixture.h"
#include "sampler.h"

dt_daemon D;

const char *const datasets[] = { DSET_ONE, DSET_BLK, DSET_SHARDS };

void setup(void)
{
	dt_setup_dir();
	ck_assert_msg(dt_daemon_start(&D) == 0, "batchd did not start");
}

void expect_sampler_order(const dt_run *run, const dt_ref *ref, const bc_stream_opts *o)
{
	uint64_t ids[1024];
	bd_sampler sp;

	if (o->shuffle == BC_SHUFFLE_BLOCK)
		return;
	dt_sampler_for(&sp, ref, o);
	for (size_t k = 0; k < run->nev; k++) {
		const dt_event *ev = &run->ev[k];

		if (ev->result != 0)
			continue;
		ck_assert_uint_le(ev->count, ARRAY_SIZE(ids));
		expect(ev->count == bd_sampler_epoch_batch_len(&sp, ev->epoch, ev->batch),
		       "batch %" PRIu64 ": %u samples, the sampler says %u", ev->batch, ev->count,
		       bd_sampler_epoch_batch_len(&sp, ev->epoch, ev->batch));
		bd_sampler_batch(&sp, ev->epoch, ev->batch, ids);
		for (uint32_t i = 0; i < ev->count; i++)
			expect(run->ids[ev->first + i] == ids[i],
			       "%s shuffle, epoch %" PRIu64 " batch %" PRIu64 " sample %u: id %" PRIu64
			       ", the sampler says %" PRIu64, bp_shuffle_name(o->shuffle), ev->epoch,
			       ev->batch, i, run->ids[ev->first + i], ids[i]);
	}
}
