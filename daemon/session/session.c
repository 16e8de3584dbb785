/* SPDX-License-Identifier: MIT */
/*
 * session.c - schedule, stage and publish one trainer's batches
 * (see session.h and proto/ring.h).
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

#include "arena.h"
#include "fault.h"
#include "fields.h"
#include "linger.h"
#include "log.h"
#include "session.h"
#include "units.h"
#include "util.h"
#include "wait_acct.h"

typedef struct slot {
	bool done;              /* the record is final, not yet published */
	bool failed;            /* published as a failed batch */
	bool copied;            /* no copy reads the record any more (GPU: COPIED came) */
	bool decoded;           /* GPU: the pipeline is done, the copy not yet queued */
	int32_t status;         /* 0, or why the batch failed (the reason is in the record) */
	uint64_t epoch, batch;  /* its place in the schedule */
	uint32_t count;         /* samples */
	uint64_t rec_off, rec_size;
	uint64_t payload;       /* payload bytes, as planned; 0 once published as failed */
} slot;

/* Where one sample of the batch being planned comes from. */
typedef struct loc {
	uint32_t shard;
	uint32_t frames;        /* blocks from `block` on: 1, or a framed sample's frames */
	uint64_t block, src, size;
} loc;

/*
 * Where the regions of the batch being planned lie in its payload: per
 * selected field (fields.h order) and the keys' after them, and per value
 * slot the offset of its field's region.
 */
typedef struct layout {
	uint64_t off[BP_FIELD_MAX + 1], size[BP_FIELD_MAX + 1];
	uint64_t voff[BP_FIELD_MAX + 1];
	uint64_t payload;
	uint32_t nblocks;       /* blocks the batch reads, frames counted */
} layout;

struct bd_session {
	bd_session_env env;
	uint64_t id;
	bd_dataset *dset;
	bd_sampler sampler;
	bp_msg_open req;
	bd_selection sel;       /* the fields and keys its batches carry */
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
	uint64_t published;     /* batches published */
	uint64_t reclaimed;     /* batches whose records were reclaimed */
	uint32_t inflight;      /* jobs in the pipeline */
	uint32_t max_jobs;      /* ... at most: see jobs_in_flight() */
	uint64_t failed, bytes;
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
static uint64_t table_bytes(const bd_session *s, uint32_t n)
{
	return bd_selection_head(&s->sel, n);
}

static uint64_t record_bytes(const bd_session *s, uint32_t n, uint64_t payload)
{
	uint64_t r = table_bytes(s, n) + payload;

	return BD_ALIGN_UP(r > BP_RING_REASON_MAX ? r : BP_RING_REASON_MAX, BP_RING_RECORD_ALIGN);
}

/* The bytes of a slot's record. */
static uint8_t *record(const bd_session *s, const slot *sl)
{
	return s->data + s->arena_off + sl->rec_off;
}

/* The batch failed: its reason replaces the sample table in the record. */
static void fail_slot(bd_session *s, slot *sl, int status, const char *reason)
{
	sl->status = status;
	snprintf((char *)record(s, sl), BP_RING_REASON_MAX, "%s", reason);
}

/* ---- shared memory ------------------------------------------------------------------ */

static int make_memfd(const char *name, uint64_t size, unsigned seals, int *ret_fd,
		      uint8_t **ret_map)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING), r;
	void *m;

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) < 0)
		goto fail;
	m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		goto fail;
	/* F_SEAL_FUTURE_WRITE leaves this (earlier) writable mapping working. */
	if (fcntl(fd, F_ADD_SEALS, seals) < 0) {
		r = -errno;
		munmap(m, size);
		close(fd);
		return r;
	}
	*ret_fd = fd;
	*ret_map = m;
	return 0;
fail:
	r = -errno;
	close(fd);
	return r;
}

static bd_linger *linger_of(const bd_session *s)
{
	if (s->env.linger)
		return s->env.linger;
	return s->env.pipeline ? bd_pipeline_linger(s->env.pipeline) : NULL;
}

/*
 * Hand a memfd's bytes to the linger tracker while fd is still open.
 * @return the bytes that stay charged until the client lets go.
 */
static uint64_t linger(bd_session *s, bd_linger *l, int fd, uint64_t bytes)
{
	if (!s->memory || fd < 0)
		return 0;
	return bd_linger_add(l, fd, bytes, s->uid, s->env.budget_used) ? bytes : 0;
}

/*
 * Give the shared memory and the descriptors back. The memfds' bytes stay
 * charged (budget and uid) while the client still holds a descriptor or a
 * mapping of them (linger.h); the rest of the charge goes now.
 */
static void release_memory(bd_session *s)
{
	const int fds[] = { s->data_fd, s->ctrl_fd, s->rel_r, s->rel_w, s->pub_r, s->pub_w };
	bd_linger *l;
	uint64_t kept;

	/* Once only: after `ended` the tracker may be gone with the pipeline. */
	if (s->released)
		return;
	s->released = true;
	l = linger_of(s);
	/* Unpins the staging, so before the unmap. */
	bd_gpu_session_free(s->gpu);
	s->gpu = NULL;
	kept = linger(s, l, s->data_fd, s->data_size) + linger(s, l, s->ctrl_fd, s->ctrl_size);
	if (s->data)
		munmap(s->data, s->data_size);
	if (s->ctrl)
		munmap(s->ctrl, s->ctrl_size);
	s->data = NULL;
	s->ctrl = NULL;
	s->hdr = NULL;
	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		if (fds[i] >= 0)
			close(fds[i]);
	s->data_fd = s->ctrl_fd = s->rel_r = s->rel_w = s->pub_r = s->pub_w = -1;
	*s->env.budget_used -= s->memory - kept;
	s->memory = 0;
	/* A client that let go already is uncharged now, not on the next loop turn. */
	bd_linger_drain(l);
}

static void session_free(bd_session *s)
{
	release_memory(s);
	bd_batch_keys_clear(&s->keys);
	bd_dataset_put(s->dset);
	free(s->slot);
	free(s->ids);
	free(s->locs);
	free(s->order);
	free(s->vals);
	free((char *)s->req.path);
	free(s);
}

/* ---- creation: schedule, size, charge, map --------------------------------------------- */

/* The session record, owning d (put on failure too). @return NULL when out of memory. */
static bd_session *session_alloc(const bd_session_env *env, uint64_t id, bd_dataset *d,
				 const bp_msg_open *m)
{
	bd_session *s = bd_calloc(1, sizeof(*s));

	if (!s) {
		bd_dataset_put(d);
		return NULL;
	}
	s->env = *env;
	s->id = id;
	s->dset = d;
	s->req = *m;
	s->data_fd = s->ctrl_fd = s->rel_r = s->rel_w = s->pub_r = s->pub_w = -1;
	s->gpu_fd = -1;
	s->req.path = strndup(m->path, m->path_len);
	/* The selection is parsed (bd_session_new); the list is the client's buffer. */
	s->req.fields = NULL;
	s->req.fields_len = 0;
	if (!s->req.path) {
		session_free(s);
		return NULL;
	}
	return s;
}

/* The sampler request m asks for over d. */
static bd_sampler_cfg sampler_cfg(const bd_dataset *d, const bp_msg_open *m)
{
	return (bd_sampler_cfg){
		.samples = bp_dataset_samples(d->ds),
		.fingerprint = bp_dataset_fingerprint(d->ds),
		.seed = m->seed,
		.rank = m->rank,
		.world = m->world,
		.batch_size = m->batch_size,
		.drop_last = m->drop_last,
		.mode = (enum bp_shuffle)m->shuffle,
		.chunk = d->samples_per_block ? d->samples_per_block : 1,
		.window = m->window,
		.start_epoch = m->start_epoch,
		.start_sample = m->start_sample,
	};
}

/* OPEN's stride, 0 taken as 1 (protocol.h). */
static uint64_t stride(const bp_msg_open *m)
{
	return m->batch_stride ? m->batch_stride : 1;
}

/* Why bd_sampler_init refused sc (r): what the request asked that d cannot give. */
static void schedule_error(const bd_dataset *d, const bd_sampler_cfg *sc, int r, char *err,
			   size_t errlen)
{
	if (sc->start_sample >= sc->samples && sc->samples > 0)
		snprintf(err, errlen, "start_sample %" PRIu64 " is past the end of the epoch (%" PRIu64
			 " samples): resume at the next epoch with start_sample 0", sc->start_sample,
			 sc->samples);
	else if (r == -ERANGE)
		snprintf(err, errlen, "dataset %s: %" PRIu64 " samples leave no full batch of %u for "
			 "rank %u of %u with drop_last", d->name, sc->samples, sc->batch_size, sc->rank,
			 sc->world);
	else
		snprintf(err, errlen, "dataset %s: invalid schedule (%" PRIu64 " samples, batch %u, "
			 "rank %u of %u)", d->name, sc->samples, sc->batch_size, sc->rank, sc->world);
}

/* The sampler and the slots: what the request asks of the dataset. @return 0 or -EINVAL. */
static int schedule(bd_session *s, unsigned prefetch, char *err, size_t errlen)
{
	const bp_msg_open *m = &s->req;
	const bd_dataset *d = s->dset;
	bd_sampler_cfg sc = sampler_cfg(d, m);
	unsigned max = s->env.max_prefetch;
	int r = bd_sampler_init(&s->sampler, &sc);
	uint64_t first;

	if (r < 0) {
		schedule_error(d, &sc, r, err, errlen);
		return -EINVAL;
	}
	if (prefetch < 1 || prefetch > max || prefetch + 2 > BP_RING_MAX_SLOTS) {
		snprintf(err, errlen, "prefetch %u is over the limit of %u", prefetch,
			 max < BP_RING_MAX_SLOTS - 2 ? max : BP_RING_MAX_SLOTS - 2);
		return -EINVAL;
	}
	s->batches_per_epoch = bd_sampler_batches_per_epoch(&s->sampler);
	first = bd_sampler_epoch_batches(&s->sampler, m->start_epoch);
	/* drop_last may leave start_sample's epoch no batch: start_batch then counts in the next. */
	if (m->start_batch >= (first ? first : s->batches_per_epoch)) {
		snprintf(err, errlen, "start batch %" PRIu64 " is past the end of an epoch (%" PRIu64
			 " batches%s)", m->start_batch, first ? first : s->batches_per_epoch,
			 m->start_sample ? " from start_sample" : "");
		return -EINVAL;
	}
	s->slots = prefetch + 2; /* the trainer may hold a couple of batches */
	return 0;
}

/*
 * How many batches may be in the pipeline at once: enough for about
 * BD_SESSION_JOB_PIECES samples, at least 2 (one decoding while the next
 * is read) and at most slots. The pipeline serves a session a bounded
 * number of blocks at a time anyway (pipeline.h), so more jobs queued
 * behind them buy nothing, and big batches would hold `slots` jobs' worth
 * of bookkeeping. Batches decoded are freed of theirs, so staging still
 * runs `prefetch` batches ahead.
 */
static uint32_t jobs_in_flight(const bd_session *s)
{
	uint32_t n = s->req.batch_size, j = (BD_SESSION_JOB_PIECES + n - 1) / n;

	return j < 2 ? 2 : j > s->slots ? s->slots : j;
}

/*
 * The daemon heap the session may hold at most, charged with its shared
 * memory: the session and its slots, the planner's scratch (batch_size
 * each), its jobs in flight (a batch touches at most min(batch_size x
 * the most frames of a sample, blocks) blocks; a job is freed when its
 * batch is decoded), the value spans of the fields it selected, its
 * keys (the table read at open, or the reader and a batch of the longest
 * keys), the pipeline's flow, and a GPU session's per-slot state and
 * copies.
 */
static uint64_t heap_bytes(const bd_session *s, int device)
{
	/*
	 * A framed sample is a block and a piece per frame (proto/PACK.md,
	 * Frames), and each selected bytes field of a sample a piece of its
	 * own: a frame times a field bounds both.
	 */
	uint64_t n = s->req.batch_size, blocks = bp_dataset_blocks(s->dset->ds);
	uint64_t pieces = n * bp_dataset_max_frames(s->dset->ds) * s->sel.bytes;
	uint64_t job = bd_job_bytes((uint32_t)(blocks < pieces ? blocks : pieces), (uint32_t)pieces);
	uint64_t b;

	b = sizeof(bd_session) + s->req.path_len + 1 + (uint64_t)s->slots * sizeof(slot) +
	    n * (sizeof(*s->ids) + sizeof(*s->locs) + sizeof(*s->order)) + 6 * BD_MALLOC_OVERHEAD;
	b += n * s->sel.values * sizeof(*s->vals) + BD_MALLOC_OVERHEAD;
	if (s->sel.keys)
		b += bd_batch_keys_bytes(&s->keys, s->dset->ds, s->req.batch_size);
	b += (uint64_t)s->max_jobs * (job + BD_MALLOC_OVERHEAD);
	b += bd_pipeline_owner_bytes() + BD_MALLOC_OVERHEAD;
	if (device >= 0)
		b += bd_gpu_session_bytes(s->slots);
	return b;
}

/* What sizing a selection's batches needs: the keys, when it read them. */
typedef struct sizing {
	const bd_dataset *d;
	const bd_selection *sel;
	const bd_key_table *keys; /* NULL: BP_KEY_MAX each */
} sizing;

/* The payload bytes sample id adds to a batch of z's selection, region padding aside. */
static uint64_t sample_cost(const sizing *z, uint64_t id)
{
	const bd_selection *sel = z->sel;
	uint64_t cost = sel->scalar_bytes;
	uint32_t v = 0, named = sel->values - (sel->keys ? 1 : 0);

	if (bd_selection_plain(sel)) {
		bp_pack_sample ps;
		size_t shard;

		/* Ids come from the sampler and are < samples: locate cannot fail. */
		bp_dataset_locate(z->d->ds, id, &shard, &ps);
		return ps.size;
	}
	for (; v < named; v++)
		cost += bd_selection_value_size(sel, z->d->ds, v, id);
	if (sel->keys)
		cost += z->keys ? bd_key_table_len(z->keys, id) : BP_KEY_MAX;
	return cost;
}

/*
 * The payload of the largest batch m's stream takes in its first `epochs`
 * epochs: the batches its stride visits, no others (ids: batch_size of
 * scratch).
 */
static uint64_t stream_largest(const bd_sampler *sp, const bp_msg_open *m, const sizing *z,
			       uint64_t epochs, uint64_t *ids)
{
	uint64_t most = 0, epoch, batch;

	for (uint64_t g = m->start_batch;; g += stride(m)) {
		uint64_t sum = bd_selection_padding(z->sel);
		uint32_t len;

		bd_sampler_locate(sp, g, &epoch, &batch);
		if (epoch - m->start_epoch >= epochs)
			break;
		len = bd_sampler_epoch_batch_len(sp, epoch, batch);
		bd_sampler_batch(sp, epoch, batch, ids);
		for (uint32_t i = 0; i < len; i++)
			sum += sample_cost(z, ids[i]);
		if (sum > most)
			most = sum;
	}
	return most;
}

/*
 * How many epochs from start_epoch sizing reads. Unshuffled, every full
 * epoch is the same, and a stride's visits repeat after `stride` of them:
 * the start epoch and that many more (about two epochs' samples whatever
 * the stride). Shuffled, as many as SIZING_SAMPLES visited samples allow.
 */
static uint64_t sizing_epochs(const bp_msg_open *m, uint64_t per_rank)
{
	uint64_t visited = per_rank / stride(m), epochs;

	if (m->shuffle == BP_SHUFFLE_NONE)
		return (m->start_sample ? 1 : 0) + (stride(m) > 1 ? stride(m) : 1);
	epochs = BD_SESSION_SIZING_SAMPLES / (visited ? visited : 1);
	if (epochs < 1)
		epochs = 1;
	return epochs > BD_SESSION_SIZING_EPOCHS ? BD_SESSION_SIZING_EPOCHS : epochs;
}

/*
 * The largest payload of n samples of any schedule: the n largest
 * samples' selected bytes (no more than their whole bytes), every
 * selected str field's longest value (found in a pass over the dataset
 * when `scan`, else the longest a str value may be), the longest key
 * possible.
 */
static uint64_t selection_bound(const bd_dataset *d, const bd_selection *sel, uint32_t n,
				bool scan)
{
	uint64_t most = sel->bytes ? bd_dataset_batch_bound(d, n) : 0, samples;

	if (bd_selection_plain(sel))
		return most;
	samples = bp_dataset_samples(d->ds);
	most += bd_selection_padding(sel) + (uint64_t)n * sel->scalar_bytes;
	for (uint32_t k = 0; k < sel->count; k++) {
		uint32_t f = sel->field[k];
		uint64_t longest = 0;

		if (sel->schema->fields[f].type != BP_FIELD_STR)
			continue;
		if (!scan)
			longest = BP_STR_MAX;
		for (uint64_t id = 0; scan && id < samples; id++) {
			uint64_t size = bd_selection_value_size(sel, d->ds, (uint32_t)sel->slot[k], id);

			if (size > longest)
				longest = size;
		}
		most += (uint64_t)n * longest;
	}
	if (sel->keys)
		most += (uint64_t)n * BP_KEY_MAX;
	return most;
}

int bd_session_largest_batch(const bd_dataset *d, const bp_msg_open *m, uint64_t *ret,
			     bd_key_table **ret_keys)
{
	bd_sampler_cfg sc = sampler_cfg(d, m);
	uint64_t *ids, most = 0, per_rank, epochs;
	bd_selection sel;
	bd_sampler sp;
	sizing z = { .d = d, .sel = &sel };
	char err[8];
	int r;

	if (bd_sampler_init(&sp, &sc) < 0)
		return -EINVAL;
	/* A selection the dataset cannot give: bd_session_new says why. */
	if ((r = bd_selection_parse(d->ds, m, &sel, err, sizeof(err))) < 0)
		return r;
	per_rank = bd_sampler_samples_per_rank(&sp);
	if (per_rank > BD_SESSION_SIZING_SCAN) {
		*ret = selection_bound(d, &sel, m->batch_size, true);
		if (ret_keys)
			*ret_keys = NULL;
		return 0;
	}
	epochs = sizing_epochs(m, per_rank);
	ids = bd_calloc(m->batch_size, sizeof(*ids));
	if (!ids)
		return -ENOMEM;
	if (sel.keys)
		z.keys = bd_key_table_read(d->ds, BD_SESSION_SIZING_SCAN);
	most = stream_largest(&sp, m, &z, epochs, ids);
	free(ids);
	*ret = most;
	if (ret_keys)
		*ret_keys = (bd_key_table *)z.keys;
	else
		bd_key_table_free((bd_key_table *)z.keys);
	return 0;
}

/*
 * Lay out the data memfd: descriptors, arena, a GPU session's device
 * table and the schema; and count the heap the session will hold. `largest` is the
 * schedule's largest batch (bd_session_largest_batch). @return 0 or -ENODEV.
 */
static int measure(bd_session *s, unsigned prefetch, int device, uint64_t largest, char *err,
		   size_t errlen)
{
	const bd_dataset *d = s->dset;
	uint32_t batch_size = s->req.batch_size;
	uint64_t mean, most, max_rec, mean_rec;

	mean = s->sel.bytes ? bp_dataset_raw_bytes(d->ds) / bp_dataset_samples(d->ds) : 0;
	/*
	 * Text and keys have no mean at hand: the largest batch's stands in
	 * for it (an overestimate of the prefetch staging only).
	 */
	if (!bd_selection_plain(&s->sel))
		mean += s->sel.scalar_bytes + (s->sel.values > s->sel.bytes ? largest / batch_size : 0);
	max_rec = record_bytes(s, batch_size, largest);
	mean_rec = record_bytes(s, batch_size, mean * batch_size) + BP_RING_RECORD_ALIGN;
	s->arena_off = bp_ring_arena_offset(s->slots);
	/*
	 * The trainer may hold two batches (slots = prefetch + 2) and must still
	 * get the next one: with two records of up to max_rec held anywhere in
	 * the byte ring, one of the two free runs beside them has room for a
	 * third only when the ring is four of them. `prefetch` average ones on
	 * top keep the planner that far ahead of a trainer that holds nothing.
	 */
	bd_arena_init(&s->arena, 4 * max_rec + (uint64_t)prefetch * mean_rec);
	s->data_size = s->arena_off + s->arena.size;
	if (device >= 0) {
		if (!s->env.gpu || !s->env.cuda || device >= s->env.cuda->devices) {
			snprintf(err, errlen, "no CUDA device: the GPU thread is not running");
			return -ENODEV;
		}
		/*
		 * One device slot per descriptor, each with room for twice the
		 * largest batch the sizing saw (no more than the largest possible):
		 * margin for a batch of an epoch past the ones it read.
		 */
		/* On the loop thread: no pass over the dataset; the bound only caps the margin. */
		most = selection_bound(d, &s->sel, batch_size, false);
		s->slot_bytes = BD_ALIGN_UP((largest < most / 2 ? 2 * largest : most) + 1,
					 BP_RING_DEVICE_ALIGN);
		s->gpu_off = s->data_size;
		s->data_size += bp_ring_gpu_size(s->slots);
	}
	/* The schema: in the header's page when it fits there (as a plain pack's always does). */
	s->schema_size = bp_schema_encoded_size(s->sel.schema);
	if (s->schema_size <= BP_RING_HEADER_SIZE - BP_RING_SCHEMA_INLINE) {
		s->schema_off = BP_RING_SCHEMA_INLINE;
	} else {
		s->schema_off = s->data_size;
		s->data_size += BD_ALIGN_UP(s->schema_size, BP_RING_RECORD_ALIGN);
	}
	s->ctrl_size = bp_ring_ctrl_size(s->slots);
	s->max_jobs = jobs_in_flight(s);
	s->heap = heap_bytes(s, device);
	return 0;
}

/* Does the shared memory fit the daemon's budget and the uid's limit? @return 0 or -ENOMEM. */
static int charge(const bd_session *s, const bd_session_quota *q, unsigned prefetch, char *err,
		  size_t errlen)
{
	const bd_session_env *env = &s->env;
	uint64_t need = s->data_size + s->ctrl_size + s->heap, uid_used, total = env->budget_total;
	uint64_t cache = env->memory_budget > total ? env->memory_budget - total : 0;
	const char *name = s->dset->name, *how = env->memory_budget_auto ?
		", auto: half the memory available" : "";
	uint32_t batch_size = s->req.batch_size;
	bd_linger *l = linger_of(s);
	char a[32], b[32], c[32], d[32], e[32], fix[192];

	/* Memory ended sessions' clients let go of since the loop last looked is free now. */
	bd_linger_drain(l);

	/*
	 * After a reload that lowered the budget, used may exceed total. The
	 * message names the figures, the session's own remedies, where total
	 * comes from (the budget less the block cache) and the settings that
	 * change it.
	 */
	if (*env->budget_used > total || need > total - *env->budget_used) {
		bp_format_size(env->memory_budget, d, sizeof(d));
		if (cache)
			snprintf(fix, sizeof(fix), ", raise [memory] budget (%s%s, of which the block "
				 "cache, [memory] cache, takes %s) or lower [memory] cache", d, how,
				 bp_format_size(cache, e, sizeof(e)));
		else
			snprintf(fix, sizeof(fix), " or raise [memory] budget (%s%s; no block cache)",
				 d, how);
		snprintf(err, errlen, "memory budget: dataset %s with batch %u and prefetch %u needs %s; "
			 "sessions may use %s and %s of it is in use: open with a smaller prefetch "
			 "or batch%s", name, batch_size, prefetch,
			 bp_format_size(need, a, sizeof(a)),
			 bp_format_size(total, c, sizeof(c)),
			 bp_format_size(*env->budget_used, b, sizeof(b)), fix);
		return -ENOMEM;
	}
	if (!q || !q->uid_limit)
		return 0;
	/* The uid's live sessions (q), and what its clients keep of ended ones. */
	uid_used = q->uid_used + bd_linger_uid_bytes(l, q->uid);
	if (need > (q->uid_limit > uid_used ? q->uid_limit - uid_used : 0)) {
		snprintf(err, errlen, "memory limit per user: dataset %s with batch %u and prefetch %u "
			 "needs %s; uid %u holds %s of the %s [limits] memory_per_uid allows: open "
			 "with a smaller prefetch or batch, close one of its sessions, or raise "
			 "[limits] memory_per_uid", name, batch_size, prefetch,
			 bp_format_size(need, a, sizeof(a)), (unsigned)q->uid,
			 bp_format_size(uid_used, b, sizeof(b)),
			 bp_format_size(q->uid_limit, c, sizeof(c)));
		return -ENOMEM;
	}
	return 0;
}

/*
 * Over the budget with every key in memory: when reading keys as batches
 * need them costs less (keys longer than a key block's worth of the
 * longest), give the table back to *keys and charge that instead.
 * @return charge()'s result, or -ENOMEM as it was.
 */
static int charge_without_keys(bd_session *s, bd_key_table **keys, int device,
			       const bd_session_quota *q, unsigned prefetch, char *err,
			       size_t errlen)
{
	bd_key_table *t = s->keys.table;
	uint64_t with = s->heap;

	s->keys.table = NULL;
	s->heap = heap_bytes(s, device);
	if (s->heap >= with) {
		s->keys.table = t;
		s->heap = with;
		return -ENOMEM;
	}
	*keys = t;
	return charge(s, q, prefetch, err, errlen);
}

/* The slots and the planner's scratch. @return 0 or -ENOMEM. */
static int alloc_tables(bd_session *s)
{
	uint32_t n = s->req.batch_size;

	s->slot = bd_calloc(s->slots, sizeof(*s->slot));
	s->ids = bd_calloc(n, sizeof(*s->ids));
	s->locs = bd_calloc(n, sizeof(*s->locs));
	s->order = bd_calloc(n, sizeof(*s->order));
	s->vals = bd_calloc((size_t)n * (s->sel.values ? s->sel.values : 1), sizeof(*s->vals));
	if (!s->slot || !s->ids || !s->locs || !s->order || !s->vals)
		return -ENOMEM;
	return s->sel.keys ? bd_batch_keys_start(&s->keys, s->dset->ds, n) : 0;
}

/* The data and control memfds, mapped, and the two wake-up pipes. @return 0 or -errno. */
static int map(bd_session *s, char *err, size_t errlen)
{
	int *ends[2][2] = { { &s->rel_r, &s->rel_w }, { &s->pub_r, &s->pub_w } };
	int r;

	r = make_memfd("batchd-data", s->data_size,
		       F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL,
		       &s->data_fd, &s->data);
	if (r == 0)
		r = make_memfd("batchd-ctrl", s->ctrl_size, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL,
			       &s->ctrl_fd, (uint8_t **)&s->ctrl);
	if (r < 0) {
		snprintf(err, errlen, "cannot create shared memory: %s", strerror(-r));
		return r;
	}
	for (int i = 0; i < 2; i++) {
		int p[2];

		if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0) {
			r = -errno;
			snprintf(err, errlen, "cannot create wake-up pipes: %s", strerror(-r));
			return r;
		}
		*ends[i][0] = p[0];
		*ends[i][1] = p[1];
	}
	return 0;
}

static void write_header(bd_session *s)
{
	s->hdr = (bp_ring_header *)s->data;
	*s->hdr = (bp_ring_header){
		.magic = BP_RING_MAGIC,
		.version = BP_RING_VERSION,
		.header_size = BP_RING_HEADER_SIZE,
		.session = s->id,
		.data_size = s->data_size,
		.arena_offset = s->arena_off,
		.arena_size = s->arena.size,
		.batches_per_epoch = s->batches_per_epoch,
		.slots = s->slots,
		.batch_size = s->req.batch_size,
		.schema_offset = s->schema_off,
		.schema_size = s->schema_size,
		.fields = s->sel.mask,
		.flags = s->sel.keys ? BP_RING_KEYS : 0,
	};
	bp_schema_encode(s->sel.schema, s->data + s->schema_off);
}

static void on_job_event(void *owner, uint64_t seq, enum bd_job_event ev, int status,
			 const char *reason);

/* A GPU session's device side, its table in the data memfd. @return 0 or <0 with err. */
static int attach_gpu(bd_session *s, int device, char *err, size_t errlen)
{
	bd_gpu_session_cfg gc = {
		.device = device,
		.slots = s->slots,
		.slot_bytes = s->slot_bytes,
		.host = s->data + s->arena_off,
		.host_len = s->arena.size,
		.owner = s,
		.event = on_job_event,
		.session = s->id,
	};

	memcpy(gc.uuid, s->env.cuda->dev[device].uuid, sizeof(gc.uuid));
	s->hdr->gpu_offset = s->gpu_off;
	s->hdr->gpu_size = bp_ring_gpu_size(s->slots);
	return bd_gpu_session_new(s->env.gpu, &gc, (bp_ring_gpu *)(s->data + s->gpu_off),
				  (bp_ring_gpu_slot *)(s->data + s->gpu_off + sizeof(bp_ring_gpu)),
				  &s->gpu_fd, &s->gpu, err, errlen);
}

/* Batches staged ahead by default stop growing past this many bytes. */
#define AUTO_PREFETCH_BYTES ((uint64_t)32 << 20)

/*
 * Batches staged ahead when the client does not ask: [session] prefetch,
 * or more when its batches read few blocks, so that the session alone
 * keeps the engines' read_depth reads in flight (batch 1 of one-sample
 * blocks would have had 8 reads in flight on a disk that wants 64), as
 * long as that many average batches come to AUTO_PREFETCH_BYTES or less;
 * never over max_prefetch.
 */
static unsigned default_prefetch(const bd_session_env *env, const bd_dataset *d,
				 const bp_msg_open *m)
{
	uint64_t per_block = d->samples_per_block ? d->samples_per_block : 1;
	uint64_t blocks = (m->batch_size + per_block - 1) / per_block;
	uint64_t mean = bp_dataset_raw_bytes(d->ds) / bp_dataset_samples(d->ds) * m->batch_size;
	uint64_t want = blocks ? (env->read_depth + blocks - 1) / blocks : 0;

	if (mean && want > AUTO_PREFETCH_BYTES / mean)
		want = AUTO_PREFETCH_BYTES / mean;
	if (want > env->max_prefetch)
		want = env->max_prefetch;
	return want > env->default_prefetch ? (unsigned)want : env->default_prefetch;
}

int bd_session_new(const bd_session_env *env, uint64_t id, bd_dataset *d,
		   const bp_msg_open *m, uint64_t largest, bd_key_table **keys, int device,
		   const bd_session_quota *q, bd_session **ret, char *err, size_t errlen)
{
	unsigned prefetch = m->prefetch ? m->prefetch : default_prefetch(env, d, m);
	bd_session *s = session_alloc(env, id, d, m);
	int r;

	if (!s)
		return -ENOMEM;
	r = bd_selection_parse(d->ds, m, &s->sel, err, errlen);
	/* Taken now, for measure() to charge; handed back should the session fail. */
	if (r == 0 && s->sel.keys && keys && *keys) {
		s->keys.table = *keys;
		*keys = NULL;
	}
	/*
	 * A remote dataset's keys come only from the table read at open: a
	 * reader per batch would wait for the bucket on the loop thread.
	 */
	if (r == 0 && s->sel.keys && d->robj && !s->keys.table) {
		uint64_t n = bp_dataset_samples(d->ds);

		snprintf(err, errlen, "dataset %s: the keys of a remote dataset are read whole at "
			 "open (at most %llu samples, %llu MiB of keys); %s: open it without keys, "
			 "or copy it to a local root", d->name,
			 (unsigned long long)BD_SESSION_SIZING_SCAN,
			 (unsigned long long)(BD_KEY_TABLE_MAX >> 20),
			 n > BD_SESSION_SIZING_SCAN ? "this one has more samples"
			 : "these could not be read (more bytes, or a fetch failed: see the log)");
		r = n > BD_SESSION_SIZING_SCAN ? -E2BIG : -EIO;
	}
	if (r == 0)
		r = schedule(s, prefetch, err, errlen);
	if (r == 0)
		r = measure(s, prefetch, device, largest, err, errlen);
	if (r == 0)
		r = charge(s, q, prefetch, err, errlen);
	if (r == -ENOMEM && s->keys.table && keys && !d->robj)
		r = charge_without_keys(s, keys, device, q, prefetch, err, errlen);
	if (r == 0)
		r = alloc_tables(s);
	if (r == 0)
		r = map(s, err, errlen);
	if (r < 0)
		goto fail;
	s->uid = q ? q->uid : BD_LINGER_NO_UID;
	s->memory = s->data_size + s->ctrl_size + s->heap;
	*env->budget_used += s->memory;
	write_header(s);
	if (device >= 0) {
		r = attach_gpu(s, device, err, errlen);
		if (r < 0)
			goto fail;
	}
	if (uv_poll_init(env->loop, &s->released_poll, s->rel_r) < 0) {
		r = -ENOMEM;
		goto fail;
	}
	s->released_poll.data = s;
	s->poll_started = false;
	s->opened_ns = bd_now_ns();
	s->progress_ns = s->opened_ns;
	*ret = s;
	return 0;
fail:
	/* A retry (waiting for memory) opens with the same keys. */
	if (keys && s->keys.table) {
		*keys = s->keys.table;
		s->keys.table = NULL;
	}
	session_free(s);
	return r;
}

int bd_session_ready(const bd_session *s, bp_msg_ready *ret, int fds[BP_READY_FDS_GPU])
{
	*ret = (bp_msg_ready){
		.session = s->id,
		.fingerprint = bp_dataset_fingerprint(s->dset->ds),
		.samples = bp_dataset_samples(s->dset->ds),
		.batches_per_epoch = s->batches_per_epoch,
		.data_size = s->data_size,
		.ctrl_size = s->ctrl_size,
		.max_sample = bp_dataset_max_sample(s->dset->ds),
		.batch_size = s->req.batch_size,
		.slots = s->slots,
		.placement = s->req.placement,
	};
	fds[0] = s->data_fd;
	fds[1] = s->ctrl_fd;
	fds[2] = s->rel_w;
	fds[3] = s->pub_r;
	if (!s->gpu)
		return BP_READY_FDS;
	fds[4] = s->gpu_fd;
	return BP_READY_FDS_GPU;
}

/* ---- planning -------------------------------------------------------------------------- */

/*
 * Where batch (epoch, batch)'s n samples are, and the size of each one's
 * values but the key (value slots, fields.h).
 */
static void locate(bd_session *s, uint64_t epoch, uint64_t batch, uint32_t n)
{
	const bp_dataset *ds = s->dset->ds;
	uint32_t named = s->sel.values - (s->sel.keys ? 1 : 0);

	bd_sampler_batch(&s->sampler, epoch, batch, s->ids);
	for (uint32_t i = 0; i < n; i++) {
		bp_pack_sample ps;
		size_t shard;

		/* Ids come from the sampler and are < samples: locate cannot fail. */
		bp_dataset_locate(ds, s->ids[i], &shard, &ps);
		s->locs[i] = (loc){ .shard = (uint32_t)shard, .frames = ps.frames, .block = ps.block,
				    .src = ps.offset, .size = ps.size };
		s->order[i] = i;
		if (bd_selection_plain(&s->sel)) {
			s->vals[i].size = ps.size;
			continue;
		}
		for (uint32_t v = 0; v < named; v++) {
			const bp_field *fd = &s->sel.schema->fields[s->sel.vfield[v]];

			/* The one bytes field is the whole sample: no second lookup. */
			s->vals[(size_t)v * n + i].size =
				s->sel.whole && fd->type == BP_FIELD_BYTES
					? ps.size : bd_selection_value_size(&s->sel, ds, v, s->ids[i]);
		}
	}
}

/* One region of the payload: n values of slot v end to end, from *at (aligned). */
static uint64_t place_values(bd_session *s, uint32_t v, uint32_t n, uint64_t *at)
{
	bp_ring_span *span = s->vals + (size_t)v * n;
	uint64_t off = BD_ALIGN_UP(*at, BP_RING_PAYLOAD_ALIGN), size = 0;

	for (uint32_t i = 0; i < n; i++) {
		span[i].offset = size;
		size += span[i].size;
	}
	s->lay.voff[v] = off;
	*at = off + size;
	return size;
}

/*
 * Lay out the payload of n samples whose value sizes are known: the
 * lead's region first, then the other selected fields' in schema order,
 * then the keys'. @return the payload bytes.
 */
static uint64_t place_regions(bd_session *s, uint32_t n)
{
	const bd_selection *sel = &s->sel;
	layout *lay = &s->lay;
	uint64_t at = 0;

	if (sel->lead >= 0) {
		for (uint32_t k = 0; k < sel->count; k++)
			if ((int32_t)sel->field[k] == sel->lead)
				lay->size[k] = place_values(s, 0, n, &at), lay->off[k] = 0;
	}
	for (uint32_t k = 0; k < sel->count; k++) {
		uint32_t type = sel->schema->fields[sel->field[k]].type;

		if ((int32_t)sel->field[k] == sel->lead)
			continue;
		if (sel->slot[k] >= 0) {
			lay->size[k] = place_values(s, (uint32_t)sel->slot[k], n, &at);
			lay->off[k] = lay->voff[sel->slot[k]];
			continue;
		}
		lay->off[k] = BD_ALIGN_UP(at, BP_RING_PAYLOAD_ALIGN);
		lay->size[k] = (uint64_t)n * bp_field_scalar_size(type);
		at = lay->off[k] + lay->size[k];
	}
	if (sel->keys) {
		lay->size[sel->count] = place_values(s, sel->values - 1, n, &at);
		lay->off[sel->count] = lay->voff[sel->values - 1];
	}
	return at;
}

static bool same_block(const loc *a, const loc *b)
{
	return a->shard == b->shard && a->block == b->block;
}

/* Short runs: insertion sort of o[0..n) by ids[o[i]]. */
static void insert_by_id(uint32_t *o, const uint64_t *ids, uint32_t n)
{
	for (uint32_t i = 1; i < n; i++) {
		uint32_t v = o[i], j = i;
		uint64_t key = ids[v];

		for (; j && ids[o[j - 1]] > key; j--)
			o[j] = o[j - 1];
		o[j] = v;
	}
}

static uint64_t median3(uint64_t a, uint64_t b, uint64_t c)
{
	if (a < b)
		return b < c ? b : a < c ? c : a;
	return a < c ? a : b < c ? c : b;
}

/*
 * Hoare's partition of o[0..n) (n >= 3) around the median of its first,
 * middle and last keys. That pivot has a key >= it before the last place
 * and a key <= it at the first, so both scans stop inside the array and
 * both sides come out non-empty. @return the size of the left side, whose
 * keys are all <= those of the right.
 */
static uint32_t partition_by_id(uint32_t *o, const uint64_t *ids, uint32_t n)
{
	uint64_t pivot = median3(ids[o[0]], ids[o[n / 2]], ids[o[n - 1]]);
	uint32_t i = 0, j = n - 1, t;

	for (;;) {
		while (ids[o[i]] < pivot)
			i++;
		while (ids[o[j]] > pivot)
			j--;
		if (i >= j)
			return j + 1;
		t = o[i];
		o[i++] = o[j];
		o[j--] = t;
	}
}

/* Quicksort of o[0..n) by ids[o[i]]: recursion on the smaller side only, so depth <= log2 n. */
static void sort_by_id(uint32_t *o, const uint64_t *ids, uint32_t n)
{
	while (n > 16) {
		uint32_t left = partition_by_id(o, ids, n);

		if (left < n - left) {
			sort_by_id(o, ids, left);
			o += left;
			n -= left;
		} else {
			sort_by_id(o + left, ids, n - left);
			n = left;
		}
	}
	insert_by_id(o, ids, n);
}

/*
 * Order the samples by where they are read from. Global ids run through
 * the shards, their blocks and each block's bytes in order, so sorting by
 * id is sorting by (shard, block, offset), on one integer key. Batches of
 * an unshuffled epoch come in that order already: one pass sees it.
 * @return how many blocks they touch, every frame of a framed sample
 * counted (a frame is at least BP_PACK_MIN_FRAME bytes of a payload that
 * fits the session's memory: far below 2^32 of them).
 */
static uint32_t group_by_block(bd_session *s, uint32_t n)
{
	uint32_t nblocks = 0, i = 1;

	while (i < n && s->ids[i - 1] <= s->ids[i])
		i++;
	if (i < n)
		sort_by_id(s->order, s->ids, n);
	for (i = 0; i < n; i++)
		if (!i || !same_block(&s->locs[s->order[i]], &s->locs[s->order[i - 1]]))
			nblocks += s->locs[s->order[i]].frames;
	return nblocks;
}

/*
 * The pieces of sample i's selected bytes fields that a block holds: the
 * block has the sample's bytes [lo, hi), sample byte x at raw offset
 * x - base. A field's value is its span of the sample's bytes (fields.h),
 * and goes to its place in its field's region. Without `skip_empty`
 * every field gets a piece, empty or not (a whole block's samples: the
 * block is read anyway). @return the pieces added (or, with job NULL,
 * that would be).
 */
static uint32_t sample_pieces(bd_session *s, bd_job *job, uint32_t i, uint32_t n, uint64_t base,
			      uint64_t lo, uint64_t hi, bool skip_empty, uint8_t *payload)
{
	const bd_selection *sel = &s->sel;
	uint32_t added = 0;

	/* One bytes field: the sample's bytes are its value (the planner's hot path). */
	if (bd_selection_plain(sel)) {
		uint64_t size = s->locs[i].size, b = size < hi ? size : hi;

		if (lo > b || (skip_empty && lo == b))
			return 0;
		if (job)
			bd_job_add_piece(job, lo - base, b - lo,
					 payload + s->vals[i].offset + lo);
		return 1;
	}
	for (uint32_t k = 0; k < sel->count; k++) {
		uint32_t f = sel->field[k], v = (uint32_t)sel->slot[k];
		uint64_t so, ss, a, b;

		if (sel->schema->fields[f].type != BP_FIELD_BYTES)
			continue;
		if (sel->whole)
			so = 0, ss = s->locs[i].size;
		else
			bp_dataset_field_span(s->dset->ds, s->ids[i], f, &so, &ss);
		a = so > lo ? so : lo;
		b = so + ss < hi ? so + ss : hi;
		if (a > b || (skip_empty && a == b))
			continue;
		added++;
		if (job)
			bd_job_add_piece(job, a - base, b - a, payload + s->lay.voff[v] +
					 s->vals[(size_t)v * n + i].offset + (a - so));
	}
	return added;
}

/*
 * The blocks of a framed sample taken `copies` times (o[0..copies), the
 * same id over and over): each frame is a block of its own whose pieces
 * go to the sample's places plus the frame's offset, so a frame of a
 * sample of one bytes field tiles its piece, decodes straight into the
 * record and can do so on any decode worker, in parallel with the
 * sample's other frames. A frame that holds nothing the session selected
 * is not read.
 */
static void add_frames(bd_session *s, bd_job *job, const uint32_t *o, uint32_t copies,
		       uint32_t n, uint8_t *payload)
{
	const loc *l = &s->locs[o[0]];
	const bp_pack_index *idx = &bp_dataset_shard(s->dset->ds, l->shard)->index;
	uint64_t at = 0;

	for (uint32_t f = 0; f < l->frames; f++) {
		bp_pack_block b;

		bp_pack_index_block(idx, l->block + f, &b);
		if (sample_pieces(s, NULL, o[0], n, at, at, at + b.raw_size, true, payload)) {
			bd_job_add_block(job, s->dset, l->shard, l->block + f);
			for (uint32_t c = 0; c < copies; c++)
				sample_pieces(s, job, o[c], n, at, at, at + b.raw_size, true, payload);
		}
		at += b.raw_size;
	}
}

/*
 * The job reading the n samples' selected bytes fields into the record's
 * payload, block by block (nblocks of them at most, frames counted).
 * @return 0 or -ENOMEM.
 */
static int build_job(bd_session *s, uint32_t n, uint32_t nblocks, uint8_t *payload, bd_job **ret)
{
	uint32_t npieces = 0;
	bd_job *job;
	int r;

	/* A framed sample takes a piece per frame and field at most. */
	for (uint32_t i = 0; i < n; i++)
		npieces += s->locs[i].frames * s->sel.bytes;
	r = bd_job_new(s, s->uid, on_job_event, s->next_seq, nblocks, npieces, &job);
	if (r < 0)
		return r;
	for (uint32_t i = 0, run; i < n; i += run) {
		const loc *l = &s->locs[s->order[i]];

		for (run = 1; i + run < n && same_block(l, &s->locs[s->order[i + run]]); run++)
			;
		if (l->frames > 1) {
			add_frames(s, job, s->order + i, run, n, payload);
			continue;
		}
		bd_job_add_block(job, s->dset, l->shard, l->block);
		for (uint32_t k = i; k < i + run; k++) {
			uint32_t o = s->order[k];

			/* Sample byte x is raw byte src + x of the block. */
			sample_pieces(s, job, o, n, -s->locs[o].src, 0, s->locs[o].size, false,
				      payload);
		}
	}
	*ret = job;
	return 0;
}

/*
 * The record's tables (fields.h): the sample table of the lead field, and
 * for any other selection the region entries and the value tables.
 */
static void write_tables(const bd_session *s, uint32_t n, uint8_t *rec)
{
	const bd_selection *sel = &s->sel;
	bp_ring_sample *table = (bp_ring_sample *)rec;
	bp_ring_span *span = (bp_ring_span *)(table + n);
	bool lead = sel->lead >= 0;

	for (uint32_t i = 0; i < n; i++)
		table[i] = (bp_ring_sample){ .id = s->ids[i],
					     .offset = lead ? s->vals[i].offset : 0,
					     .size = lead ? s->vals[i].size : 0 };
	if (!sel->regions)
		return;
	for (uint32_t k = 0; k < sel->regions; k++)
		*span++ = (bp_ring_span){ .offset = s->lay.off[k], .size = s->lay.size[k] };
	for (uint32_t v = lead ? 1 : 0; v < sel->values; v++)
		for (uint32_t i = 0; i < n; i++) {
			const bp_ring_span *x = &s->vals[(size_t)v * n + i];

			*span++ = (bp_ring_span){ .offset = s->lay.voff[v] + x->offset,
						  .size = x->size };
		}
}

/*
 * The values that come from the dataset's columns, not its blocks:
 * scalars as dense arrays, str values end to end, and the keys.
 */
static void write_columns(bd_session *s, uint32_t n, uint8_t *payload)
{
	const bd_selection *sel = &s->sel;
	const bp_dataset *ds = s->dset->ds;

	for (uint32_t k = 0; k < sel->count; k++) {
		uint32_t f = sel->field[k], type = sel->schema->fields[f].type;
		size_t size = bp_field_scalar_size(type);
		uint8_t *dst = payload + s->lay.off[k];

		if (type == BP_FIELD_STR) {
			const bp_ring_span *x = s->vals + (size_t)sel->slot[k] * n;

			for (uint32_t i = 0; i < n; i++) {
				const uint8_t *data;
				uint64_t len;

				bp_dataset_field_str(ds, s->ids[i], f, &data, &len);
				memcpy(dst + x[i].offset, data, len);
			}
		} else if (size) {
			for (uint32_t i = 0; i < n; i++)
				bp_dataset_field_scalar(ds, s->ids[i], f, dst + (size_t)i * size);
		}
	}
	if (sel->keys)
		bd_batch_keys_copy(&s->keys, s->ids, n, s->vals + (size_t)(sel->values - 1) * n,
				   payload + s->lay.off[sel->count]);
}

static void publish(bd_session *s);
static void record_final(bd_session *s, slot *sl);

/*
 * The next batch fails before anything is staged for it: it can never fit
 * the session's staging (the arena, or a device slot: a batch of a later
 * epoch of a shuffled schedule larger than the sizing saw,
 * bd_session_largest_batch), or its keys cannot be read. It is published
 * failed, with the reason in a record of its own, and nothing is read for
 * it. @return 1 planned, 0 no room for the reason yet.
 */
static int plan_failed(bd_session *s, uint64_t epoch, uint64_t batch, uint32_t n, int status,
		       const char *why)
{
	uint64_t rec = record_bytes(s, 0, 0), off;
	slot *sl;

	if (!bd_arena_alloc(&s->arena, rec, &off))
		return 0;
	sl = &s->slot[s->next_seq % s->slots];
	*sl = (slot){ .epoch = epoch, .batch = batch, .count = n, .rec_off = off, .rec_size = rec };
	fail_slot(s, sl, status, why);
	s->next_seq++;
	s->measured = 0;
	record_final(s, sl);
	publish(s);
	return 1;
}

/*
 * Find the next batch's samples and lay out its payload, once: a batch
 * that waits for room keeps what was found (its keys were read for it).
 * @return 0, or a key reader's error with why set.
 */
static int measure_batch(bd_session *s, uint64_t epoch, uint64_t batch, uint32_t n, char *why,
			 size_t whylen)
{
	int r;

	if (s->measured == s->next_seq + 1)
		return 0;
	locate(s, epoch, batch, n);
	/* Sorted by id for the blocks, and for the keys: one decode a key block. */
	s->lay.nblocks = s->sel.bytes || s->sel.keys ? group_by_block(s, n) : 0;
	if (!s->sel.bytes)
		s->lay.nblocks = 0;
	if (s->sel.keys &&
	    (r = bd_batch_keys_read(&s->keys, s->ids, s->order, n,
				    s->vals + (size_t)(s->sel.values - 1) * n, why, whylen)) < 0)
		return r;
	s->lay.payload = place_regions(s, n);
	s->measured = s->next_seq + 1;
	return 0;
}

/*
 * Stage the next batch: its record's tables and column values now, its
 * bytes fields through a job the pipeline reads (none when it selected
 * no bytes field: the batch is final at once). @return 1 planned, 0 no
 * room, <0 error.
 */
static int plan_one(bd_session *s)
{
	uint64_t epoch, batch, payload, rec, off;
	uint32_t n;
	char why[BP_RING_REASON_MAX], a[32], b[32];
	bd_job *job = NULL;
	uint8_t *base;
	slot *sl;
	int r;

	bd_sampler_locate(&s->sampler, s->req.start_batch + s->next_seq * stride(&s->req), &epoch,
			  &batch);
	n = bd_sampler_epoch_batch_len(&s->sampler, epoch, batch);
	if ((r = measure_batch(s, epoch, batch, n, why, sizeof(why))) < 0)
		return plan_failed(s, epoch, batch, n, r, why);
	payload = s->lay.payload;
	rec = record_bytes(s, n, payload);
	if (rec > s->arena.size || (s->gpu && payload > s->slot_bytes)) {
		snprintf(why, sizeof(why), "batch %" PRIu64 " of epoch %" PRIu64 " holds %s, more "
			 "than the %s the session stages a batch in; open with a smaller batch_size",
			 batch, epoch, bp_format_size(payload, a, sizeof(a)),
			 bp_format_size(s->gpu ? s->slot_bytes : s->arena.size, b, sizeof(b)));
		return plan_failed(s, epoch, batch, n, -E2BIG, why);
	}
	if (!bd_arena_alloc(&s->arena, rec, &off))
		return 0;
	base = s->data + s->arena_off + off;
	/* Out of memory closes the session: the record is never used. */
	if (s->sel.bytes &&
	    (r = build_job(s, n, s->lay.nblocks, base + table_bytes(s, n), &job)) < 0)
		return r;
	sl = &s->slot[s->next_seq % s->slots];
	*sl = (slot){ .epoch = epoch, .batch = batch, .count = n, .rec_off = off, .rec_size = rec,
		      .payload = payload };
	s->next_seq++;
	s->measured = 0;
	write_tables(s, n, base);
	write_columns(s, n, base + table_bytes(s, n));
	if (!job) {
		record_final(s, sl);
		publish(s);
		return 1;
	}
	s->inflight++;
	bd_pipeline_submit(s->env.pipeline, job);
	return 1;
}

static void reclaim(bd_session *s);

/*
 * Wake the client: one byte into the published pipe. A full pipe means a
 * wake-up is pending already, so a failed write loses nothing.
 */
static void poke_client(bd_session *s)
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
		       s->inflight < s->max_jobs && (r = plan_one(s)) == 1)
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
		 * events come back (and reclaim() reads the client's marks then),
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

			reclaim(s);
			if (s->closing)
				return;
			if (s->reclaimed == before) {
				/* A client asleep waiting for a batch should learn it holds us up. */
				if (__atomic_load_n(&s->ctrl->client_sleeping, __ATOMIC_SEQ_CST))
					poke_client(s);
				return;
			}
			__atomic_store_n(&s->ctrl->daemon_hungry, 0, __ATOMIC_RELAXED);
		}
	}
}

/* ---- publication and release ------------------------------------------------------------ */

static void publish(bd_session *s)
{
	uint64_t before = s->published;

	while (s->published < s->next_seq) {
		uint64_t seq = s->published;
		slot *sl = &s->slot[seq % s->slots];
		bp_ring_desc *d;

		if (!sl->done)
			break;
		d = (bp_ring_desc *)(s->data + bp_ring_desc_offset(s->slots, seq));
		*d = (bp_ring_desc){
			.seq = seq,
			.epoch = sl->epoch,
			.batch = sl->batch,
			.record = s->arena_off + sl->rec_off,
			.payload = s->arena_off + sl->rec_off + table_bytes(s, sl->count),
			.count = sl->count,
			.status = sl->status,
			.device = s->gpu ? (seq % s->slots) * s->slot_bytes : 0,
		};
		if (sl->status < 0) {
			/* The reason is in the record already, in place of the sample table. */
			d->count = 0;
			d->payload = d->record;
			s->failed++;
			sl->failed = true;
			sl->payload = 0;
			bd_log(LOG_WARNING, "session %" PRIu64 ": batch %" PRIu64 " of epoch %" PRIu64
			       " failed: %s", s->id, d->batch, d->epoch, (const char *)record(s, sl));
		} else {
			d->payload_size = sl->payload;
			s->bytes += sl->payload;
			sl->failed = false;
		}
		sl->done = false;
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
		poke_client(s);
}

/*
 * Reclaim released records in order. Every mark is the client's word and
 * may be anything: a mark for a batch never published, or one that does
 * not belong in its slot, ends the session.
 */
static void reclaim(bd_session *s)
{
	uint64_t before = s->reclaimed;

	while (s->reclaimed < s->published) {
		uint32_t i = (uint32_t)(s->reclaimed % s->slots);
		uint64_t mark = __atomic_load_n(&s->ctrl->release[i], __ATOMIC_SEQ_CST);

		if (mark == s->reclaimed + 1) {
			/* Released, but our copy may still be reading the host bytes. */
			if (!s->slot[i].copied)
				break;
			if (!s->slot[i].failed) {
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
	reclaim(s);
	plan(s);
}

void bd_session_start(bd_session *s)
{
	if (uv_poll_start(&s->released_poll, UV_READABLE, on_released) == 0)
		s->poll_started = true;
	plan(s);
}

/* ---- ending -------------------------------------------------------------------------------- */

static void fold_client(bd_session *s);

static void on_poll_closed(uv_handle_t *h)
{
	bd_session *s = h->data;

	/* The client's last word on its waits, while the control memfd is mapped. */
	fold_client(s);
	/*
	 * The device side and the memory before `ended`: the GPU thread and
	 * the linger tracker may be gone once it has run (the last session of
	 * a stopping daemon).
	 */
	release_memory(s);
	if (s->env.ended)
		s->env.ended(s, s->env.ctx);
	session_free(s);
}

static void maybe_end(bd_session *s)
{
	if (!s->closing || s->inflight || s->gpu_pending || s->ended)
		return;
	/*
	 * A GPU session the daemon stopped (lease, protocol, failure) keeps its
	 * events and device memory until the client lets go: it may still wait
	 * on or record the events, and using an IPC event after its exporter
	 * destroyed it is undefined.
	 */
	if (s->gpu && !s->detached)
		return;
	s->ended = true;
	uv_close((uv_handle_t *)&s->released_poll, on_poll_closed);
}

void bd_session_close(bd_session *s, int reason)
{
	if (s->closing)
		return;
	/* Take in the client's last releases, so delivery counts are whole. */
	if (!s->violation) {
		reclaim(s);
		if (s->closing)
			return; /* the marks broke the protocol: reclaim() closed it */
	}
	s->closing = true;
	s->close_reason = reason;
	s->hdr->error = reason;
	__atomic_store_n(&s->hdr->state, BP_RING_STOPPED, __ATOMIC_RELEASE);
	poke_client(s);
	if (s->poll_started)
		uv_poll_stop(&s->released_poll);
	if (s->gpu)
		bd_gpu_session_cancel(s->gpu);
	/* Blocks not yet read would be thrown away: let the session end sooner. */
	bd_pipeline_cancel(s->env.pipeline, s);
	maybe_end(s);
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

		if (!sl->decoded)
			break;
		sl->decoded = false;
		s->copy_next++;
		if (sl->status == 0) {
			char why[128];
			int r;

			/* Published once issued (ENQUEUED), reclaimable once done (COPIED). */
			r = bd_gpu_copy(s->gpu, seq, record(s, sl) + table_bytes(s, sl->count),
					sl->payload);
			if (r == 0) {
				s->gpu_pending++;
				continue;
			}
			snprintf(why, sizeof(why), "cannot queue the copy to the GPU: %s", strerror(-r));
			fail_slot(s, sl, r, why);
		}
		/* A failed batch is published as it is: nothing to copy. */
		sl->done = true;
		sl->copied = true;
	}
}

void bd_session_detach(bd_session *s)
{
	s->detached = true;
	maybe_end(s);
}

/* ---- events: the pipeline's and the GPU thread's word on a batch ----------------------- */

/* A batch moved on: publish what is ready, take the client's releases, plan more. */
static void progress(bd_session *s)
{
	publish(s);
	reclaim(s);
	plan(s);
}

/*
 * A batch's record is final (decoded, or failed with its reason): a GPU
 * session queues its copy, in seq order; a host one publishes it as it is.
 */
static void record_final(bd_session *s, slot *sl)
{
	if (s->gpu) {
		sl->decoded = true;
		queue_copies(s);
	} else {
		sl->done = true;
		sl->copied = true;
	}
}

static void decoded(bd_session *s, slot *sl, int status, const char *reason)
{
	s->inflight--;
	if (s->closing) {
		maybe_end(s);
		return;
	}
	if (status < 0)
		fail_slot(s, sl, status, reason);
	record_final(s, sl);
	progress(s);
}

static void enqueued(bd_session *s, slot *sl, int status, const char *reason)
{
	if (status < 0)
		s->gpu_pending--; /* the last event of this copy */
	if (s->closing) {
		maybe_end(s);
		return;
	}
	if (status < 0) {
		/* Nothing was copied: publish the batch as failed, with the reason. */
		fail_slot(s, sl, status, reason);
		sl->copied = true;
	}
	sl->done = true;
	progress(s);
}

static void copied(bd_session *s, slot *sl, int status, const char *reason)
{
	s->gpu_pending--;
	if (s->closing) {
		maybe_end(s);
		return;
	}
	if (status < 0) {
		/* Published already, and the client waits on it: end the stream, say why. */
		bd_log(LOG_ERR, "session %" PRIu64 ": %s; ending the session", s->id, reason);
		bd_session_close(s, status);
		return;
	}
	sl->copied = true;
	reclaim(s);
	plan(s);
}

/* The one way a batch's progress comes back (a bd_job_event_fn). */
static void on_job_event(void *owner, uint64_t seq, enum bd_job_event ev, int status,
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

uint64_t bd_session_id(const bd_session *s)
{
	return s->id;
}

const char *bd_session_dataset(const bd_session *s)
{
	return s->dset->name;
}

bool bd_session_closing(const bd_session *s)
{
	return s->closing;
}

const char *bd_session_tier(const bd_session *s)
{
	return bd_tier_name(s->dset->tier);
}

const char *bd_session_fields(const bd_session *s, char *buf, size_t len)
{
	return bd_selection_names(&s->sel, buf, len);
}

bool bd_session_keys(const bd_session *s)
{
	return s->sel.keys;
}

/* The client's last word on its waits, as far as it is possible. */
static void fold_client(bd_session *s)
{
	if (s->ctrl)
		bd_wait_acct_fold(&s->acct, s->ctrl, s->published, bd_now_ns() - s->opened_ns);
}

void bd_session_get_info(bd_session *s, bd_session_info *ret)
{
	uint64_t epoch, batch;

	bd_sampler_locate(&s->sampler, s->req.start_batch + s->published * stride(&s->req), &epoch,
			  &batch);
	fold_client(s);

	*ret = (bd_session_info){
		.id = s->id,
		.published = s->published,
		.released = s->reclaimed,
		.failed = s->failed,
		.bytes = s->bytes,
		.delivered = s->delivered,
		.delivered_bytes = s->delivered_bytes,
		.memory = s->memory,
		.memory_heap = s->memory ? s->heap : 0,
		.planned = s->next_seq,
		.epoch = epoch,
		.batch = batch,
		.batch_size = s->req.batch_size,
		.slots = s->slots,
		.inflight = s->inflight,
		.rank = s->req.rank,
		.world = s->req.world,
		.shuffle = s->req.shuffle,
		.protocol_violation = s->violation,
		.closing = s->closing,
		.age_ns = bd_now_ns() - s->opened_ns,
		.device = -1,
		/* The client's own account, as far as it is possible (wait_acct.h). */
		.consumed = s->acct.consumed,
		.wait_ns = s->acct.wait_ns,
		.waits = s->acct.waits,
	};
	memcpy(ret->wait_hist, s->acct.wait_hist, sizeof(ret->wait_hist));
	/* wait_ns was clamped to an age taken before this one: at most 1. */
	ret->stall_ratio = ret->age_ns ? (double)ret->wait_ns / (double)ret->age_ns : 0;
	ret->end_reason = s->close_reason;
	if (s->gpu) {
		bd_gpu_session_get_info(s->gpu, &ret->gpu);
		ret->device = ret->gpu.device;
	}
}

bool bd_session_lease_expired(bd_session *s, uint64_t lease_ns)
{
	uint64_t now;

	/* Only a client that holds published batches can hold the session up. */
	if (!lease_ns || s->closing || s->reclaimed == s->published)
		return false;
	now = bd_now_ns();
	if (now - s->progress_ns < lease_ns)
		return false;
	bd_log(LOG_WARNING, "session %" PRIu64 " (%s): no batch released for %" PRIu64 " s, the "
	       "lease; ending it and returning its memory", s->id, s->dset->name,
	       (now - s->progress_ns) / 1000000000u);
	bd_session_close(s, -ETIME);
	return true;
}
