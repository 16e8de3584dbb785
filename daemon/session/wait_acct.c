/* SPDX-License-Identifier: MIT */
/*
 * wait_acct.c - a client's wait counters, clamped to what is possible
 * (see wait_acct.h for the rule).
 */
#include "wait_acct.h"

/* client if it is an increase over kept, at most bound (never below kept). */
static uint64_t accept_up_to(uint64_t client, uint64_t kept, uint64_t bound)
{
	if (client <= kept)
		return kept;
	return client < bound ? client : (bound > kept ? bound : kept);
}

static uint64_t load(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

void bd_wait_acct_fold(bd_wait_acct *a, const bp_ring_ctrl *ctrl, uint64_t published,
		       uint64_t age_ns)
{
	uint64_t room, sum = 0;

	a->consumed = accept_up_to(load(&ctrl->consumed), a->consumed, published);
	a->waits = accept_up_to(load(&ctrl->waits), a->waits, published);
	a->wait_ns = accept_up_to(load(&ctrl->wait_ns), a->wait_ns, age_ns);
	for (unsigned i = 0; i < BP_RING_WAIT_BUCKETS; i++)
		sum += a->wait_hist[i];
	/* The buckets never sum to more than waits: what is left for them to grow by. */
	room = a->waits - sum;
	for (unsigned i = 0; i < BP_RING_WAIT_BUCKETS; i++) {
		uint64_t h = accept_up_to(load(&ctrl->wait_hist[i]), a->wait_hist[i],
					  a->wait_hist[i] + room);

		room -= h - a->wait_hist[i];
		a->wait_hist[i] = h;
	}
}
