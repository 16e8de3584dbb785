/* SPDX-License-Identifier: MIT */
/*
 * wait_acct.h - what the daemon believes of a client's own account of its
 * waits: the counters the client writes into the control memfd, clamped
 * to what could have happened.
 *
 * consumed, waits, wait_ns and wait_hist[] (lib/proto/ring.h) are the client's
 * to write, and a hostile one may write anything there; status and metrics
 * show them, and the totals add them up when a session ends. The daemon
 * keeps what it accepted so far and takes in only increases that are
 * possible: consumed and waits up to the batches published (bc_next
 * counts a wait only when it delivers a batch), wait_ns up to the
 * session's age (one thread waits on a stream at a time), and each
 * histogram bucket's increase only while the buckets sum to at most
 * waits. A value that went down is ignored. An honest client's counters
 * are taken as they are (a bucket incremented before its waits was seen
 * is taken in at the next fold).
 *
 * Thread rules: one wait_acct belongs to one thread (the session's: the loop).
 */
#ifndef BATCHD_DAEMON_WAIT_ACCT_H
#define BATCHD_DAEMON_WAIT_ACCT_H

#include <stdint.h>

#include "ring.h"

typedef struct bd_wait_acct {
	uint64_t consumed, wait_ns, waits;
	uint64_t wait_hist[BP_RING_WAIT_BUCKETS];
} bd_wait_acct;

/*
 * Take in the client's counters from ctrl (read once each, relaxed), with
 * `published` batches published so far and the session age_ns old.
 */
void bd_wait_acct_fold(bd_wait_acct *a, const bp_ring_ctrl *ctrl, uint64_t published,
		       uint64_t age_ns);

#endif
