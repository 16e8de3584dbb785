/* SPDX-License-Identifier: MIT */
/*
 * session_priv.h - what the files of a session share: its state, a slot's
 * state, the planner's scratch, and the calls between the files.
 *
 *   session.c       creation (schedule, shared memory, mapping), READY,
 *                   ending, and what the rest of the daemon reads of it
 *   session_size.c  sizing and admission: the memory a session needs and
 *                   whether the budget has it (callable from any thread)
 *   session_plan.c  one batch into a record and a job: its samples, their
 *                   blocks, the layout of its payload
 *   session_flow.c  the loop: planning ahead, publishing in order,
 *                   reclaiming released records, the pipeline's and the
 *                   GPU thread's events
 *   session_images.c a decoded batch's bad images: named, or left out
 *   session_warm.c  a ram-tier dataset read ahead in file order on the
 *                   first pass, beside the batches
 *
 * Everything here runs on the loop thread but session_size.c's sizing
 * (bd_session_largest_batch, from a libuv worker at open).
 */
#ifndef BATCHD_DAEMON_SESSION_PRIV_H
#define BATCHD_DAEMON_SESSION_PRIV_H

#include <stdio.h>

#include "arena.h"
#include "fields.h"
#include "linger.h"
#include "sequences.h"
#include "session.h"
#include "units.h"
#include "util.h"
#include "wait_acct.h"

/*
 * Where a slot's batch is. Host sessions go PLANNED -> FINAL -> PUBLISHED.
 * GPU sessions go PLANNED -> DECODED -> COPYING (its copy queued) ->
 * FINAL_COPYING (issued: ENQUEUED came) and on to FINAL, PUBLISHED_COPYING
 * or PUBLISHED as COPIED comes and the batch's turn to be published does,
 * in either order; a batch that failed, or whose copy could not be issued,
 * goes straight to FINAL. A record is reclaimed only when PUBLISHED: the
 * client released it and no copy reads it.
 */
enum slot_state {
	SLOT_PLANNED = 0,       /* in the pipeline */
	SLOT_DECODED,           /* GPU: the pipeline is done, the copy not yet queued */
	SLOT_COPYING,           /* GPU: the copy queued, not yet issued */
	SLOT_FINAL_COPYING,     /* to publish in order; the copy still reads the record */
	SLOT_FINAL,             /* to publish in order */
	SLOT_PUBLISHED_COPYING, /* published; the copy still reads the record */
	SLOT_PUBLISHED,         /* published; reclaimed once the client releases it */
};

typedef struct slot {
	enum slot_state state;
	int32_t status;         /* 0, or why the batch failed (the reason is in the record) */
	uint64_t epoch, batch;  /* its place in the schedule */
	uint32_t count;         /* samples (fewer than planned once bad images are left out) */
	uint64_t rec_off, rec_size;
	uint64_t head;          /* the payload's offset in the record: table_bytes of the planned count */
	uint64_t payload;       /* payload bytes, as planned; 0 once published as failed */
} slot;

/* Where one sample of the batch being planned comes from. */
typedef struct loc {
	const bd_dataset *dset; /* the session's, or a mixture's source's */
	uint64_t local;         /* the sample's id there */
	uint32_t source;        /* a mixture's source index (0: the session's dataset);
				 * a token session sets only this */
	uint32_t shard;
	uint32_t frames;        /* blocks from `block` on: 1, or a framed sample's frames */
	uint64_t block, src, size;
} loc;

/*
 * Where the regions of the batch being planned lie in its payload: per
 * selected field (fields.h order) and the keys' after them, and per value
 * slot the offset of its field's region.
 */
/* One block's bytes of a token session's batch: to its row's tokens (session_plan.c). */
typedef struct seq_frag {
	const bd_seq_block *block;
	uint64_t src, size;
	uint64_t dst;           /* offset in the tokens region */
	uint32_t source;        /* a mixture's source (0: the session's dataset) */
} seq_frag;

typedef struct layout {
	uint64_t off[BP_FIELD_MAX + 1], size[BP_FIELD_MAX + 1];
	uint64_t voff[BP_FIELD_MAX + 1];
	uint64_t payload;
	uint32_t nblocks;       /* blocks the batch reads, frames counted */
	uint32_t nfrags;        /* a token batch's fragments (session_plan.c) */
} layout;

/* The session's reading ahead in file order (session_warm.c). The pipeline's owner is &warm. */
typedef struct bd_warm {
	enum bd_warm_state state;
	uint32_t source, shard; /* the cursor: the next block to queue */
	uint64_t block;
	uint64_t seq;           /* warm jobs queued so far */
	uint32_t inflight;      /* ... and in the pipeline now */
	uint64_t queued_bytes;  /* stored bytes of the blocks queued */
	uint64_t failed;        /* warm jobs that came back failed (not for want of room) */
	uint64_t started_ns;
	uint64_t room;          /* the block cache's budget, when it started */
	uint64_t sources;       /* bit i: a warm job read source i (BP_MIX_SOURCES_MAX is 64) */
} bd_warm;

struct bd_session {
	bd_session_env env;
	uint64_t id;
	bd_dataset *dset;
	bd_sampler sampler;
	bp_msg_open req;
	bd_selection sel;       /* the fields and keys its batches carry */
	bd_seqs *seqs;          /* a token session's sequences (sequences.h); NULL: samples */
	bd_mix *mix;            /* ... its mixture of sources (sources.h); NULL: one source */
	bd_seq_piece *pcs;      /* ... the planner's scratch: a row's pieces, */
	seq_frag *frags;        /* a batch's fragments (batch_size x max_frags) */
	uint64_t *fkey;         /* and their order by block */
	uint32_t *forder;
	bd_batch_keys keys;     /* with sel.keys: where its batches' keys come from */
	uint64_t schema_off, schema_size; /* the encoded schema in the data memfd */
	uid_t uid;              /* whose memory_per_uid the session counts against */
	uint32_t slots;
	uint64_t batches_per_epoch;

	/*
	 * Wake-ups go through pipes, not eventfds: the client gets its own
	 * ends (separate open file descriptions), so it cannot clear
	 * O_NONBLOCK on ours and block the loop thread.
	 */
	int data_fd, ctrl_fd, rel_r, rel_w, pub_r, pub_w;
	uint8_t *data;
	uint64_t data_size, ctrl_size;
	uint64_t heap;          /* bookkeeping bytes charged: see heap_bytes() */
	uint64_t memory;        /* charged now: data_size + ctrl_size + heap, 0 once released */
	bp_ring_header *hdr;
	bp_ring_ctrl *ctrl;
	uint64_t arena_off;     /* where the arena of records starts in data */
	bd_arena arena;

	/* GPU sessions: the device side, and copies whose last event is still to come. */
	bd_gpu_session *gpu;
	int gpu_fd;
	uint64_t slot_bytes;
	uint64_t gpu_off;       /* the device table in data */
	uint32_t gpu_pending;
	uint64_t copy_next;     /* next batch whose copy to queue: copies go in seq order */

	slot *slot;
	uint64_t next_seq;      /* next batch to plan */
	uint64_t plan_epoch;    /* the epoch of the batch being planned: its images' key */
	uint64_t published;     /* batches published */
	uint64_t reclaimed;     /* batches whose records were reclaimed */
	uint32_t inflight;      /* jobs in the pipeline */
	bd_warm warm;           /* reading ahead: its jobs are not in inflight */
	uint32_t max_jobs;      /* ... at most: see jobs_in_flight() */
	uint64_t failed, bytes;
	uint64_t skipped;       /* bad images left out of their batches (on_error=skip) */
	uint64_t delivered, delivered_bytes; /* released by the client after publication */

	uint64_t *ids;          /* planning scratch, batch_size each */
	loc *locs;
	uint32_t *order;
	bp_ring_span *vals;     /* ... and batch_size per value slot (fields.h), slot-major */
	layout lay;             /* the batch the scratch describes */
	uint64_t measured;      /* next_seq + 1 when the scratch describes batch next_seq; else 0 */

	bd_wait_acct acct;      /* the client's wait counters as accepted so far (wait_acct.h) */

	uv_poll_t released_poll;
	bool poll_started, closing, ended, violation;
	int close_reason;       /* what bd_session_close was given */
	bool detached;          /* the client closed the session or went away */
	bool released;          /* release_memory() has run */
	uint64_t opened_ns;
	uint64_t progress_ns;   /* last time the client released a batch (or opened) */
};

/* The record's tables: where its payload starts. */
static inline uint64_t table_bytes(const bd_session *s, uint32_t n)
{
	return bd_selection_head(&s->sel, n);
}

static inline uint64_t record_bytes(const bd_session *s, uint32_t n, uint64_t payload)
{
	uint64_t r = table_bytes(s, n) + payload;

	return BD_ALIGN_UP(r > BP_RING_REASON_MAX ? r : BP_RING_REASON_MAX, BP_RING_RECORD_ALIGN);
}

/* The bytes of a slot's record. */
static inline uint8_t *record(const bd_session *s, const slot *sl)
{
	return s->data + s->arena_off + sl->rec_off;
}

/* The batch failed: its reason replaces the sample table in the record. */
static inline void fail_slot(bd_session *s, slot *sl, int status, const char *reason)
{
	sl->status = status;
	snprintf((char *)record(s, sl), BP_RING_REASON_MAX, "%s", reason);
}

/* session.c: shared memory, the schedule's settings, the end. */
bd_linger *bd__session_linger_of(const bd_session *s);
bd_sampler_cfg bd__session_sampler_cfg(const bd_dataset *d, const bd_seqs *q,
				       const bd_mix *x, const bp_msg_open *m);
uint64_t bd__session_stride(const bp_msg_open *m);
/*
 * Session id `id`'s dataset (a mixture's source's, else the session's),
 * its item's id there, and its source index (0 but in a mixture).
 */
const bd_dataset *bd__session_source(const bd_session *s, uint64_t id, uint64_t *ret_local,
				     uint32_t *ret_source);
void bd__session_maybe_end(bd_session *s);

/* session_size.c: what bd_session_new sizes and charges. @return 0 or a
 * negative errno with err set. bd__session_charge takes the session's
 * bytes from the budget (s->memory; release_memory gives them back),
 * evicting unused dataset versions when that makes room. */
int bd__session_measure(bd_session *s, unsigned prefetch, int device, uint64_t largest,
			char *err, size_t errlen);
int bd__session_charge(bd_session *s, const bd_session_quota *q, unsigned prefetch,
		       char *err, size_t errlen);
int bd__session_charge_without_keys(bd_session *s, bd_key_table **keys, int device,
				    const bd_session_quota *q, unsigned prefetch, char *err,
				    size_t errlen);

/* session_plan.c: the next batch planned. @return 1 planned, 0 no room
 * yet, or a negative errno. */
int bd__session_plan_one(bd_session *s);

/*
 * session_warm.c: start reading the session's ram-tier datasets ahead in
 * file order, when it should (the file's head comment); stop (the
 * session closes: its warm jobs come back cancelled, counted in
 * warm.inflight until then). And what a session charges for it.
 */
void bd__session_warm_start(bd_session *s);
void bd__session_warm_stop(bd_session *s);
/* Whether it may (what it reads, how, from where), and what it charges for it then (else 0). */
bool bd__session_may_warm(const bd_session *s);
uint64_t bd__session_warm_bytes(const bd_session *s);

/* session_flow.c: publishing, reclaiming, waking the client, events. */
void bd__session_publish(bd_session *s);
void bd__session_record_final(bd_session *s, slot *sl);
void bd__session_reclaim(bd_session *s);
void bd__session_poke_client(bd_session *s);
void bd__session_on_job_event(void *owner, uint64_t seq, enum bd_job_event ev, int status,
			      const char *reason);

/*
 * An image session's batch is decoded (status, reason: the DECODED
 * event's): name the image that failed it, or leave its bad images out
 * of the record (session_images.c); a failed batch gets its reason.
 */
void bd__session_image_outcome(bd_session *s, slot *sl, int status, const char *reason);

#endif
