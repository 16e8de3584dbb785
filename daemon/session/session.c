/* SPDX-License-Identifier: MIT */
/*
 * session.c - a session's life: creation (schedule, sizing, shared memory,
 * mapping), READY, ending, and what the rest of the daemon reads of it
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

bd_linger *bd__session_linger_of(const bd_session *s)
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
	return bd_linger_add(l, fd, bytes, s->uid, s->env.budget) ? bytes : 0;
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
	l = bd__session_linger_of(s);
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
	bd_budget_give(s->env.budget, BD_BUDGET_SESSIONS, s->memory - kept);
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
	bd_mix_free(s->mix);
	bd_seqs_free(s->seqs);
	free(s->pcs);
	free(s->frags);
	free(s->fkey);
	free(s->forder);
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
bd_sampler_cfg bd__session_sampler_cfg(const bd_dataset *d, const bd_seqs *q,
				       const bd_mix *x, const bp_msg_open *m)
{
	uint64_t per_block = q ? q->chunk : d->samples_per_block;

	/* A mixture's epoch is positions of its stream, each mapped by sources.c. */
	if (x)
		return (bd_sampler_cfg){ .samples = x->epoch, .seed = m->seed, .rank = m->rank,
					 .world = m->world, .batch_size = m->batch_size,
					 .drop_last = m->drop_last, .mode = BP_SHUFFLE_NONE,
					 .chunk = 1, .start_epoch = m->start_epoch,
					 .start_sample = m->start_sample };
	return (bd_sampler_cfg){
		.samples = q ? q->count : bp_dataset_samples(d->ds),
		.fingerprint = bp_dataset_fingerprint(d->ds),
		.seed = m->seed,
		.rank = m->rank,
		.world = m->world,
		.batch_size = m->batch_size,
		.drop_last = m->drop_last,
		.mode = (enum bp_shuffle)m->shuffle,
		.chunk = per_block ? per_block : 1,
		.window = m->window,
		.start_epoch = m->start_epoch,
		.start_sample = m->start_sample,
	};
}

const bd_dataset *bd__session_source(const bd_session *s, uint64_t id, uint64_t *ret_local,
				     uint32_t *ret_source)
{
	uint32_t i = 0;

	*ret_local = id;
	if (s->mix)
		i = bd_mix_source_of(s->mix, id, ret_local);
	if (ret_source)
		*ret_source = i;
	return s->mix ? s->mix->src[i].dset : s->dset;
}

/* OPEN's stride, 0 taken as 1 (protocol.h). */
uint64_t bd__session_stride(const bp_msg_open *m)
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
	bd_sampler_cfg sc = bd__session_sampler_cfg(d, s->seqs, s->mix, m);
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
	if (s->seqs) {
		size_t frags = (size_t)n * (s->mix ? s->mix->max_frags : s->seqs->max_frags);

		s->pcs = bd_calloc(s->mix ? s->mix->max_pieces : s->seqs->max_pieces,
				   sizeof(*s->pcs));
		s->frags = bd_calloc(frags, sizeof(*s->frags));
		s->fkey = bd_calloc(frags, sizeof(*s->fkey));
		s->forder = bd_calloc(frags, sizeof(*s->forder));
		if (!s->pcs || !s->frags || !s->fkey || !s->forder)
			return -ENOMEM;
	}
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
		.flags = (s->sel.keys ? BP_RING_KEYS : 0) | (s->sel.image_skip ? BP_RING_SKIPS : 0),
	};
	bp_schema_encode(s->sel.schema, s->data + s->schema_off);
}


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
		.event = bd__session_on_job_event,
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
				 const bd_seqs *q, const bp_msg_open *m)
{
	uint64_t per_block = q ? q->chunk : d->samples_per_block ? d->samples_per_block : 1;
	uint64_t blocks = (m->batch_size + per_block - 1) / per_block;
	uint64_t mean = (q ? (uint64_t)q->row * q->width
			 : bp_dataset_raw_bytes(d->ds) / bp_dataset_samples(d->ds)) * m->batch_size;
	uint64_t want = blocks ? (env->read_depth + blocks - 1) / blocks : 0;

	if (mean && want > AUTO_PREFETCH_BYTES / mean)
		want = AUTO_PREFETCH_BYTES / mean;
	if (want > env->max_prefetch)
		want = env->max_prefetch;
	return want > env->default_prefetch ? (unsigned)want : env->default_prefetch;
}

int bd_session_new(const bd_session_env *env, uint64_t id, bd_dataset *d,
		   const bp_msg_open *m, uint64_t largest, bd_key_table **keys, bd_seqs **seqs,
		   bd_mix **mix, int device, const bd_session_quota *q, bd_session **ret, char *err,
		   size_t errlen)
{
	unsigned prefetch = m->prefetch ? m->prefetch
			    : default_prefetch(env, d, seqs ? *seqs : NULL, m);
	bd_session *s = session_alloc(env, id, d, m);
	int r;

	if (!s)
		return -ENOMEM;
	/* Taken now, handed back should the session fail (a retry opens with them). */
	if (seqs) {
		s->seqs = *seqs;
		*seqs = NULL;
	}
	if (mix) {
		s->mix = *mix;
		*mix = NULL;
	}
	/* Whose limit its memory counts against, from the charge (s->memory) on. */
	s->uid = q ? q->uid : BD_LINGER_NO_UID;
	r = bd_selection_parse(d->ds, s->mix ? &s->mix->schema : s->seqs ? &s->seqs->schema : NULL,
			       m, &s->sel, err, errlen);
	s->sel.image.max_pixels = env->image_max_pixels;
	/* Taken now, for bd__session_measure() to charge; handed back should the session fail. */
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
		r = bd__session_measure(s, prefetch, device, largest, err, errlen);
	if (r == 0)
		r = bd__session_charge(s, q, prefetch, err, errlen);
	if (r == -ENOMEM && s->keys.table && keys && !d->robj)
		r = bd__session_charge_without_keys(s, keys, device, q, prefetch, err, errlen);
	if (r == 0)
		r = alloc_tables(s);
	if (r == 0)
		r = map(s, err, errlen);
	if (r < 0)
		goto fail;
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
	/* A retry (waiting for memory) opens with the same keys and sequences. */
	if (keys && s->keys.table) {
		*keys = s->keys.table;
		s->keys.table = NULL;
	}
	if (seqs) {
		*seqs = s->seqs;
		s->seqs = NULL;
	}
	if (mix) {
		*mix = s->mix;
		s->mix = NULL;
	}
	session_free(s);
	return r;
}

int bd_session_ready(const bd_session *s, bp_msg_ready *ret, int fds[BP_READY_FDS_GPU])
{
	*ret = (bp_msg_ready){
		.session = s->id,
		.fingerprint = s->mix ? s->mix->fingerprint : bp_dataset_fingerprint(s->dset->ds),
		.samples = s->mix ? s->mix->epoch : s->seqs ? s->seqs->count
			   : bp_dataset_samples(s->dset->ds),
		.batches_per_epoch = s->batches_per_epoch,
		.data_size = s->data_size,
		.ctrl_size = s->ctrl_size,
		.max_sample = s->mix ? s->mix->max_sample
			      : s->seqs ? (uint64_t)s->seqs->row * BD_SEQ_ID_BYTES
			      : bp_dataset_max_sample(s->dset->ds),
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

void bd__session_maybe_end(bd_session *s)
{
	if (!s->closing || s->inflight || s->warm.inflight || s->gpu_pending || s->ended)
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
		bd__session_reclaim(s);
		if (s->closing)
			return; /* the marks broke the protocol: bd__session_reclaim() closed it */
	}
	s->closing = true;
	s->close_reason = reason;
	s->hdr->error = reason;
	__atomic_store_n(&s->hdr->state, BP_RING_STOPPED, __ATOMIC_RELEASE);
	bd__session_poke_client(s);
	if (s->poll_started)
		uv_poll_stop(&s->released_poll);
	if (s->gpu)
		bd_gpu_session_cancel(s->gpu);
	/* Blocks not yet read would be thrown away: let the session end sooner. */
	bd_pipeline_cancel(s->env.pipeline, s);
	bd__session_warm_stop(s);
	bd__session_maybe_end(s);
}

void bd_session_detach(bd_session *s)
{
	s->detached = true;
	bd__session_maybe_end(s);
}

uint64_t bd_session_id(const bd_session *s)
{
	return s->id;
}

const char *bd_session_dataset(const bd_session *s)
{
	return s->dset->name;
}

uint32_t bd_session_versions(const bd_session *s, const bd_dataset **out)
{
	out[0] = s->dset;
	for (uint32_t i = 1; s->mix && i < s->mix->n; i++)
		out[i] = s->mix->src[i].dset;
	return s->mix ? s->mix->n : 1;
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

const bd_mix *bd_session_mixture(const bd_session *s)
{
	return s->mix;
}

const bd_seqs *bd_session_sequences(const bd_session *s)
{
	return s->seqs;
}

/* The client's last word on its waits, as far as it is possible. */
static void fold_client(bd_session *s)
{
	if (s->ctrl)
		bd_wait_acct_fold(&s->acct, s->ctrl, s->published, bd_now_ns() - s->opened_ns);
}

/* The bytes of the versions s reads, each once. */
static uint64_t versions_bytes(const bd_session *s)
{
	const bd_dataset *v[BP_MIX_SOURCES_MAX];
	uint32_t n = bd_session_versions(s, v);
	uint64_t sum = 0;

	for (uint32_t i = 0; i < n; i++) {
		uint32_t j = 0;

		while (j < i && v[j] != v[i])
			j++;
		if (j == i)
			sum += v[i]->bytes;
	}
	return sum;
}

void bd_session_get_info(bd_session *s, bd_session_info *ret)
{
	uint64_t epoch, batch, tepoch, tbatch;

	bd_sampler_locate(&s->sampler, s->req.start_batch + s->published * bd__session_stride(&s->req), &epoch,
			  &batch);
	bd_sampler_locate(&s->sampler, s->req.start_batch + s->delivered * bd__session_stride(&s->req),
			  &tepoch, &tbatch);
	fold_client(s);

	*ret = (bd_session_info){
		.id = s->id,
		.published = s->published,
		.released = s->reclaimed,
		.failed = s->failed,
		.skipped = s->skipped,
		.bytes = s->bytes,
		.delivered = s->delivered,
		.delivered_bytes = s->delivered_bytes,
		.memory = s->memory,
		.memory_heap = s->memory ? s->heap : 0,
		.dataset_memory = versions_bytes(s),
		.planned = s->next_seq,
		.epoch = epoch,
		.batch = batch,
		.trainer_epoch = tepoch,
		.trainer_batch = tbatch,
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
	ret->warm = s->warm.state;
	ret->warm_bytes = s->warm.queued_bytes;
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
