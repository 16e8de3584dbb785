/* SPDX-License-Identifier: MIT */
/*
 * session_flow.c - the session's loop: planning ahead, publishing in
 * order, reclaiming released records, queueing GPU copies, and the
 * pipeline's and the GPU thread's events
 * (see session_priv.h for how the session's files divide the work).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fault.h"
#include "log.h"
#include "session_priv.h"

static void queue_copies(bd_session *s);


/*
 * Wake the client: one byte into the published pipe. A full pipe means a
 * wake-up is pending already, so a failed write loses nothing.
 */
void bd__session_poke_client(bd_session *s)
{
	if (write(s->pub_w, "", 1) < 0) {
		/* Full: the client has a wake-up waiting. */
	}
}

static void plan(bd_session *s)
{
	while (!s->closing) {
		int r = 0;

		while (!s->closing && s->next_seq - s->reclaimed < s->slots &&
		       s->inflight < s->max_jobs && (r = bd__session_plan_one(s)) == 1)
			;
		if (s->closing)
			return;
		if (r < 0) {
			bd_log(LOG_ERR, "session %" PRIu64 " (%s): cannot plan a batch: %s", s->id,
			       s->dset->name, strerror(-r));
			bd_session_close(s, r);
			return;
		}
		/*
		 * Batches in the pipeline or on the GPU call us again when their
		 * events come back (and bd__session_reclaim() reads the client's marks then),
		 * and with every published batch released the client holds
		 * nothing to free; only otherwise are we waiting for the client.
		 */
		if (s->reclaimed == s->published || s->inflight || s->gpu_pending)
			return;
		/*
		 * Out of room: ask the client to poke us, then look once more
		 * (seq_cst store, then seq_cst loads of the marks: the Dekker pair
		 * of ring.h). The flag stays set only while we really wait, so a
		 * client that sees it while holding batches knows it holds the
		 * stream up.
		 */
		__atomic_store_n(&s->ctrl->daemon_hungry, 1, __ATOMIC_SEQ_CST);
		{
			uint64_t before = s->reclaimed;

			bd__session_reclaim(s);
			if (s->closing)
				return;
			if (s->reclaimed == before) {
				/* A client asleep waiting for a batch should learn it holds us up. */
				if (__atomic_load_n(&s->ctrl->client_sleeping, __ATOMIC_SEQ_CST))
					bd__session_poke_client(s);
				return;
			}
			__atomic_store_n(&s->ctrl->daemon_hungry, 0, __ATOMIC_RELAXED);
		}
	}
}

/* ---- publication and release ------------------------------------------------------------ */

void bd__session_publish(bd_session *s)
{
	uint64_t before = s->published;

	while (s->published < s->next_seq) {
		uint64_t seq = s->published;
		slot *sl = &s->slot[seq % s->slots];
		bp_ring_desc *d;

		if (sl->state != SLOT_FINAL && sl->state != SLOT_FINAL_COPYING)
			break;
		d = (bp_ring_desc *)(s->data + bp_ring_desc_offset(s->slots, seq));
		*d = (bp_ring_desc){
			.seq = seq,
			.epoch = sl->epoch,
			.batch = sl->batch,
			.record = s->arena_off + sl->rec_off,
			.payload = s->arena_off + sl->rec_off + sl->head,
			.count = sl->count,
			.status = sl->status,
			.device = s->gpu ? (seq % s->slots) * s->slot_bytes : 0,
		};
		if (sl->status < 0) {
			/* The reason is in the record already, in place of the sample table. */
			d->count = 0;
			d->payload = d->record;
			s->failed++;
			sl->payload = 0;
			bd_log(LOG_WARNING, "session %" PRIu64 ": batch %" PRIu64 " of epoch %" PRIu64
			       " failed: %s", s->id, d->batch, d->epoch, (const char *)record(s, sl));
		} else {
			d->payload_size = sl->payload;
			s->bytes += sl->payload;
		}
		sl->state = sl->state == SLOT_FINAL ? SLOT_PUBLISHED : SLOT_PUBLISHED_COPYING;
		s->published++;
		/*
		 * The record and descriptor are visible before the count (release);
		 * seq_cst also orders it before the load of client_sleeping below.
		 */
		__atomic_store_n(&s->hdr->produced, s->published, __ATOMIC_SEQ_CST);
	}
	if (s->published == before)
		return;
	if (__atomic_load_n(&s->ctrl->client_sleeping, __ATOMIC_SEQ_CST))
		bd__session_poke_client(s);
}

/*
 * Reclaim released records in order. Every mark is the client's word and
 * may be anything: a mark for a batch never published, or one that does
 * not belong in its slot, ends the session.
 */
void bd__session_reclaim(bd_session *s)
{
	uint64_t before = s->reclaimed;

	while (s->reclaimed < s->published) {
		uint32_t i = (uint32_t)(s->reclaimed % s->slots);
		uint64_t mark = __atomic_load_n(&s->ctrl->release[i], __ATOMIC_SEQ_CST);

		if (mark == s->reclaimed + 1) {
			/* Released, but our copy may still be reading the host bytes. */
			if (s->slot[i].state != SLOT_PUBLISHED)
				break;
			if (s->slot[i].status >= 0) {
				s->delivered++;
				s->delivered_bytes += s->slot[i].payload;
			}
			bd_arena_free(&s->arena, s->slot[i].rec_size);
			s->reclaimed++;
			continue;
		}
		if (mark != 0 && (mark % s->slots != (i + 1) % s->slots || mark > s->reclaimed + 1)) {
			bd_log(LOG_WARNING, "session %" PRIu64 ": client broke the ring protocol "
			       "(release mark %" PRIu64 " in slot %u, expected at most %" PRIu64
			       "); ending the session", s->id, mark, i, s->reclaimed + 1);
			s->violation = true;
			bd_session_close(s, -EPROTO);
			return;
		}
		break;
	}
	if (s->reclaimed != before)
		s->progress_ns = bd_now_ns();
}

static void on_released(uv_poll_t *h, int status, int events)
{
	bd_session *s = h->data;
	char drain[256];

	while (read(s->rel_r, drain, sizeof(drain)) > 0)
		;
	__atomic_store_n(&s->ctrl->daemon_hungry, 0, __ATOMIC_RELAXED);
	bd__session_reclaim(s);
	plan(s);
}

void bd_session_start(bd_session *s)
{
	if (uv_poll_start(&s->released_poll, UV_READABLE, on_released) == 0)
		s->poll_started = true;
	plan(s);
	/* After the first batches: their blocks are queued ahead of the warmer's. */
	bd__session_warm_start(s);
}

/* ---- events: the pipeline's and the GPU thread's word on a batch ----------------------- */

/* A batch moved on: publish what is ready, take the client's releases, plan more. */
static void progress(bd_session *s)
{
	bd__session_publish(s);
	bd__session_reclaim(s);
	plan(s);
}

/*
 * A batch's record is final (decoded, or failed with its reason): a GPU
 * session queues its copy, in seq order; a host one publishes it as it is.
 */
void bd__session_record_final(bd_session *s, slot *sl)
{
	if (s->gpu) {
		sl->state = SLOT_DECODED;
		queue_copies(s);
	} else {
		sl->state = SLOT_FINAL;
	}
}

static void decoded(bd_session *s, slot *sl, int status, const char *reason)
{
	s->inflight--;
	if (s->closing) {
		bd__session_maybe_end(s);
		return;
	}
	if (s->sel.image_slot >= 0)
		bd__session_image_outcome(s, sl, status, reason);
	else if (status < 0)
		fail_slot(s, sl, status, reason);
	bd__session_record_final(s, sl);
	progress(s);
}

static void enqueued(bd_session *s, slot *sl, int status, const char *reason)
{
	if (status < 0)
		s->gpu_pending--; /* the last event of this copy */
	if (s->closing) {
		bd__session_maybe_end(s);
		return;
	}
	if (status < 0) {
		/* Nothing was copied: publish the batch as failed, with the reason. */
		fail_slot(s, sl, status, reason);
		sl->state = SLOT_FINAL;
	} else {
		sl->state = SLOT_FINAL_COPYING;
	}
	progress(s);
}

static void copied(bd_session *s, slot *sl, int status, const char *reason)
{
	s->gpu_pending--;
	if (s->closing) {
		bd__session_maybe_end(s);
		return;
	}
	if (status < 0) {
		/* Published already, and the client waits on it: end the stream, say why. */
		bd_log(LOG_ERR, "session %" PRIu64 ": %s; ending the session", s->id, reason);
		bd_session_close(s, status);
		return;
	}
	/* ENQUEUED came first: gpu.c hands a copy's events over in order. */
	if (sl->state == SLOT_FINAL_COPYING)
		sl->state = SLOT_FINAL;
	else if (sl->state == SLOT_PUBLISHED_COPYING)
		sl->state = SLOT_PUBLISHED;
	bd__session_reclaim(s);
	plan(s);
}

/* The one way a batch's progress comes back (a bd_job_event_fn). */
void bd__session_on_job_event(void *owner, uint64_t seq, enum bd_job_event ev, int status,
			 const char *reason)
{
	bd_session *s = owner;
	slot *sl = &s->slot[seq % s->slots];

	switch (ev) {
	case BD_JOB_DECODED:
		decoded(s, sl, status, reason);
		break;
	case BD_JOB_ENQUEUED:
		enqueued(s, sl, status, reason);
		break;
	case BD_JOB_COPIED:
		copied(s, sl, status, reason);
		break;
	}
}

/*
 * Queue the copies of decoded batches, in seq order however the pipeline
 * finished them: the GPU thread keeps a session's copies in the order it
 * gets them, and a copy waiting for its device slot must not hold up an
 * older batch's.
 */
static void queue_copies(bd_session *s)
{
	while (s->copy_next < s->next_seq) {
		uint64_t seq = s->copy_next;
		slot *sl = &s->slot[seq % s->slots];

		if (sl->state != SLOT_DECODED)
			break;
		sl->state = SLOT_COPYING;
		s->copy_next++;
		if (sl->status == 0) {
			char why[128];
			int r;

			/* Published once issued (ENQUEUED), reclaimable once done (COPIED). */
			r = bd_gpu_copy(s->gpu, seq, record(s, sl) + sl->head,
					sl->payload);
			if (r == 0) {
				s->gpu_pending++;
				continue;
			}
			snprintf(why, sizeof(why), "cannot queue the copy to the GPU: %s", strerror(-r));
			fail_slot(s, sl, r, why);
		}
		/* A failed batch is published as it is: nothing to copy. */
		sl->state = SLOT_FINAL;
	}
}
