/* SPDX-License-Identifier: MIT */
/*
 * batchclient.c - the client side of batchd (see batchclient.h,
 * lib/proto/PROTOCOL.md and lib/proto/ring.h): the connection, and streams from
 * OPEN to CLOSE.
 *
 * Requests go over the socket under the client's lock, one at a time, and
 * are answered in order. Batches never touch the socket: the stream maps
 * the session's data memfd read-only (after checking it is sealed, so the
 * daemon cannot truncate it under us either), and ring_reader.c walks the
 * ring. GPU streams also map the daemon's device allocation when they open;
 * that side lives in gpu_stream.c, behind the bc__gpu_ calls of
 * client_priv.h, so that nothing here needs CUDA.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "batchclient.h"
#include "client_priv.h"
#include "protocol.h"
#include "ring.h"

/* The public orders are the protocol's (lib/proto/protocol.h), value for value. */
_Static_assert(BC_SHUFFLE_NONE == (int)BP_SHUFFLE_NONE && BC_SHUFFLE_GLOBAL == (int)BP_SHUFFLE_GLOBAL &&
	       BC_SHUFFLE_BLOCK == (int)BP_SHUFFLE_BLOCK && BP_SHUFFLE_MODES == 3,
	       "enum bc_shuffle must equal enum bp_shuffle");


/* The public field types are the pack's (lib/pack/pack_fields.h), value for value. */
_Static_assert(BC_FIELD_BYTES == (int)BP_FIELD_BYTES && BC_FIELD_INT64 == (int)BP_FIELD_INT64 &&
	       BC_FIELD_FLOAT32 == (int)BP_FIELD_FLOAT32 && BC_FIELD_FLOAT64 == (int)BP_FIELD_FLOAT64 &&
	       BC_FIELD_STR == (int)BP_FIELD_STR, "enum bc_field_type must equal enum bp_field_type");

/* ---- streams ------------------------------------------------------------------------ */

int bc__bad_ring(bc_stream *s, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(s->err, sizeof(s->err), fmt, ap);
	va_end(ap);
	return -EBADMSG;
}

/*
 * Where a record keeps each field, from the schema and the selection
 * (ring.h, "Fields"): the rules the daemon lays records out by.
 */
static void layout_derive(bc_stream *s)
{
	const bp_schema *sc = &s->schema;
	bc_layout *lay = &s->lay;
	uint32_t selected = 0, region = 0, table = 0;

	lay->lead = -1;
	for (uint32_t i = 0; i < BP_FIELD_MAX + 1; i++)
		lay->region[i] = lay->table[i] = -1;
	for (uint32_t i = 0; i < sc->count; i++) {
		if (!(s->fields & (UINT64_C(1) << i)))
			continue;
		selected++;
		lay->region[i] = (int32_t)region++;
		if (sc->fields[i].type == BP_FIELD_BYTES && lay->lead < 0)
			lay->lead = (int32_t)i;
		else if (sc->fields[i].type == BP_FIELD_BYTES || sc->fields[i].type == BP_FIELD_STR)
			lay->table[i] = (int32_t)table++;
	}
	if (s->keys) {
		lay->region[BP_FIELD_MAX] = (int32_t)region++;
		lay->table[BP_FIELD_MAX] = (int32_t)table++;
	}
	lay->tables = table;
	lay->regions = selected == 1 && lay->lead >= 0 && !s->keys ? 0 : region;
}

uint64_t bc__record_head(const bc_stream *s, uint32_t n)
{
	uint64_t b = (uint64_t)n * sizeof(bp_ring_sample);

	if (s->lay.regions)
		b += (uint64_t)s->lay.regions * sizeof(bp_ring_span) +
		     (uint64_t)s->lay.tables * n * sizeof(bp_ring_span);
	return b;
}

/*
 * The schema and selection the ring header names, decoded from the data
 * memfd and checked like anything else the daemon wrote. A header with
 * no schema is from a daemon that predates fields: one bytes field.
 */
static int stream_schema(bc_stream *s)
{
	const bp_ring_header *h = s->hdr;
	uint64_t off = h->schema_offset, size = h->schema_size, mask = h->fields;
	bp_pack_fault fault = { 0 };
	int r;

	if (size == 0) {
		r = bp_schema_copy(bp_schema_default(), &s->schema);
		if (r < 0)
			return r;
		mask = 1;
	} else {
		if (off < sizeof(bp_ring_header) || off > s->r.data_size ||
		    size > s->r.data_size - off || size > BP_SCHEMA_MAX)
			return bc__bad_ring(s, "the ring header's schema (%" PRIu64 " bytes at %" PRIu64
					    ") lies outside the session's memory", size, off);
		r = bp_schema_decode(s->data + off, (size_t)size, &s->schema, &fault);
		if (r == -ENOMEM)
			return r;
		if (r < 0)
			return bc__bad_ring(s, "the session's schema is damaged: %s (byte %" PRIu64 ")",
					    fault.what ? fault.what : strerror(-r), fault.offset);
	}
	if (mask == 0 || (s->schema.count < 64 && mask >> s->schema.count) ||
	    (h->flags & ~(BP_RING_KEYS | BP_RING_SKIPS)) || (size == 0 && h->flags))
		return bc__bad_ring(s, "the ring header's selection (fields %#" PRIx64 ", flags %#x) "
				    "does not fit the schema's %u fields", mask, h->flags,
				    s->schema.count);
	s->fields = mask;
	s->keys = (h->flags & BP_RING_KEYS) != 0;
	s->skips = (h->flags & BP_RING_SKIPS) != 0;
	s->info = calloc(s->schema.count, sizeof(*s->info));
	if (!s->info)
		return -ENOMEM;
	for (uint32_t i = 0; i < s->schema.count; i++) {
		const bp_field *f = &s->schema.fields[i];

		s->info[i] = (bc_field_info){ .name = f->name, .type = f->type,
					      .class_count = f->class_count,
					      .classes = f->class_count ? (const char *const *)f->classes
								 : NULL,
					      .fixed_size = f->fixed_size,
					      .selected = (mask >> i) & 1 };
	}
	layout_derive(s);
	return 0;
}

/* Map the session's memory, checking it is what the daemon said it is. */
static int stream_map(bc_stream *s)
{
	const unsigned want = F_SEAL_SHRINK | F_SEAL_GROW;
	struct stat st;
	void *m;

	if (fstat(s->data_fd, &st) < 0 || (uint64_t)st.st_size != s->r.data_size ||
	    fstat(s->ctrl_fd, &st) < 0 || (uint64_t)st.st_size != s->r.ctrl_size)
		return bc__bad_ring(s, "the session's memfds are not the sizes READY announced");
	if ((fcntl(s->data_fd, F_GET_SEALS) & want) != want ||
	    (fcntl(s->ctrl_fd, F_GET_SEALS) & want) != want)
		return bc__bad_ring(s, "the session's memfds are not sealed against resizing");
	if (s->r.slots == 0 || s->r.slots > BP_RING_MAX_SLOTS ||
	    s->r.data_size < bp_ring_arena_offset(s->r.slots) ||
	    s->r.ctrl_size < bp_ring_ctrl_size(s->r.slots))
		return bc__bad_ring(s, "READY's sizes do not fit %u slots", s->r.slots);
	m = mmap(NULL, s->r.data_size, PROT_READ, MAP_SHARED, s->data_fd, 0);
	if (m == MAP_FAILED)
		return -errno;
	s->data = m;
	s->hdr = m;
	/*
	 * The same memory once more, copy-on-write, for the writable views
	 * (batchclient.h, bc_batch_data_writable). F_SEAL_FUTURE_WRITE refuses
	 * writable shared mappings only; a private one reads the daemon's
	 * pages until the trainer writes one, which then becomes its own copy.
	 * A kernel that refuses it costs the trainer only those views.
	 */
	if ((uint64_t)sysconf(_SC_PAGESIZE) > BP_RING_RECORD_ALIGN) {
		/* Batches could share a page: dropping one's copies would drop another's. */
		s->wdata_err = -EOPNOTSUPP;
	} else {
		m = mmap(NULL, s->r.data_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE,
			 s->data_fd, 0);
		if (m == MAP_FAILED)
			s->wdata_err = -errno;
		else
			s->wdata = m;
		/* Without it every release drops the batch's pages, copied or not (ring_reader.c). */
		if (s->wdata)
			s->pagemap_fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	}
	m = mmap(NULL, s->r.ctrl_size, PROT_READ | PROT_WRITE, MAP_SHARED, s->ctrl_fd, 0);
	if (m == MAP_FAILED)
		return -errno;
	s->ctrl = m;
	if (s->hdr->magic != BP_RING_MAGIC || s->hdr->version != BP_RING_VERSION ||
	    s->hdr->slots != s->r.slots || s->hdr->data_size != s->r.data_size)
		return bc__bad_ring(s, "the ring header does not match READY");
	return stream_schema(s);
}

static void stream_free(bc_stream *s)
{
	bc__gpu_free(s);
	if (s->data)
		munmap((void *)s->data, s->r.data_size);
	if (s->wdata)
		munmap(s->wdata, s->r.data_size);
	if (s->ctrl)
		munmap(s->ctrl, s->r.ctrl_size);
	const int fds[] = { s->data_fd, s->ctrl_fd, s->released_fd, s->published_fd, s->gpu_fd,
			    s->pagemap_fd };

	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(s->batches);
	free(s->info);
	free(s->slot);
	free(s->rank);
	bp_schema_clear(&s->schema);
	free(s);
}

/*
 * End session id on the daemon: CLOSE, and read its answer. c->mu held.
 * @return 0, the daemon's error, or -EPIPE / -ESHUTDOWN when it is gone.
 */
static int session_close(bc_client *c, uint64_t id)
{
	bp_msg_session m = { .session = id };
	int n, nfds, r;

	if (c->dead)
		return -EPIPE;
	n = bp_msg_session_encode(BP_MSG_CLOSE, &m, c->buf, sizeof(c->buf));
	if (n < 0)
		return n;
	if ((r = bc__send_all(c, c->buf, n)) < 0)
		return r;
	n = bc__recv_reply(c, NULL, 0, &nfds);
	return n < 0 ? n : bc__reply_error(c, c->buf, n);
}

/* The options as the caller's struct_size has them, the defaults for what it lacks. */
#define OPTS_FIRST_SIZE offsetof(bc_stream_opts, fields)
#define OPTS_STRIDE_END (offsetof(bc_stream_opts, batch_stride) + sizeof(uint32_t))

static bool opts_copy(const bc_stream_opts *o, bc_stream_opts *ret)
{
	if (!o || o->struct_size < OPTS_FIRST_SIZE)
		return false;
	memset(ret, 0, sizeof(*ret));
	memcpy(ret, o, o->struct_size < sizeof(*ret) ? o->struct_size : sizeof(*ret));
	/* A caller from before batch_stride takes every batch. */
	if (o->struct_size < OPTS_STRIDE_END)
		ret->batch_stride = 1;
	return true;
}

static bp_msg_open open_msg(const bc_stream_opts *o);
static bool sources_why(const bc_stream_opts *o, char *why, size_t len);

/*
 * What bc_open refuses with -EINVAL before anything goes to the daemon:
 * c->err says which value and what is allowed. @return 0 or -EINVAL.
 */
static int opts_check(bc_client *c, const bc_stream_opts *o)
{
	char why[sizeof(c->err)] = "";

	if (o->nsources && (o->dataset || !o->sources))
		snprintf(why, sizeof(why), "a mixture names its datasets in sources (%u of them): "
			 "leave bc_stream_opts.dataset NULL%s", o->nsources,
			 o->sources ? "" : ", and point sources at them");
	else if (o->nsources && sources_why(o, why, sizeof(why)))
		;
	else if (!o->dataset && !o->nsources)
		snprintf(why, sizeof(why), "no dataset: set bc_stream_opts.dataset");
	else if (o->batch_size == 0)
		snprintf(why, sizeof(why), "batch_size 0: a batch holds at least 1 sample");
	else if (o->world == 0)
		snprintf(why, sizeof(why), "world 0: a job has at least 1 rank");
	else if (o->rank >= o->world)
		snprintf(why, sizeof(why), "rank %u is not below world %u", o->rank, o->world);
	else if ((unsigned)o->shuffle > BC_SHUFFLE_BLOCK)
		snprintf(why, sizeof(why), "shuffle %d is not BC_SHUFFLE_NONE (0), _GLOBAL (1) or "
			 "_BLOCK (2)", (int)o->shuffle);
	else if (o->device < BC_HOST || o->device > 255)
		snprintf(why, sizeof(why), "device %d is neither BC_HOST (-1) nor a CUDA ordinal "
			 "0 .. 255", o->device);
	else if (o->fields && strlen(o->fields) > BP_FIELD_LIST_MAX)
		snprintf(why, sizeof(why), "field list of %zu bytes is over the %u allowed",
			 strlen(o->fields), BP_FIELD_LIST_MAX);
	else if (o->batch_stride == 0 || o->batch_stride > BP_STRIDE_MAX)
		snprintf(why, sizeof(why), "batch_stride %u must be 1 .. %u", o->batch_stride,
			 BP_STRIDE_MAX);
	else if (o->decode.field || o->sequences || o->seq_len) {
		bp_msg_open m = open_msg(o);

		if (!bp_msg_open_why(&m, why, sizeof(why)))
			return 0;
	} else {
		return 0;
	}
	pthread_mutex_lock(&c->mu);
	memcpy(c->err, why, sizeof(why));
	pthread_mutex_unlock(&c->mu);
	return -EINVAL;
}

/* What is wrong with a mixture's sources, into why. @return whether anything is. */
static bool sources_why(const bc_stream_opts *o, char *why, size_t len)
{
	double w[BP_MIX_SOURCES_MAX];

	if (o->nsources < 2 || o->nsources > BP_MIX_SOURCES_MAX) {
		snprintf(why, len, "nsources %u: a mixture has 2 .. %u sources", o->nsources,
			 BP_MIX_SOURCES_MAX);
		return true;
	}
	for (uint32_t i = 0; i < o->nsources; i++) {
		if (!o->sources[i].dataset) {
			snprintf(why, len, "source %u has no dataset", i);
			return true;
		}
		w[i] = o->sources[i].weight;
	}
	return bp_mix_check(w, o->nsources, why, len) != 0;
}

/* A mixture's counts (checked by sources_why) into m. */
static void sources_msg(const bc_stream_opts *o, bp_msg_open *m)
{
	double w[BP_MIX_SOURCES_MAX];
	uint32_t counts[BP_MIX_SOURCES_MAX], period;

	if (!o->nsources)
		return;
	for (uint32_t i = 0; i < o->nsources; i++)
		w[i] = o->sources[i].weight;
	if (bp_mix_counts(w, o->nsources, counts, &period) < 0)
		return;
	m->sources = o->nsources;
	m->epoch_samples = o->epoch_samples;
	m->path = o->sources[0].dataset;
	m->path_len = (uint32_t)strnlen(m->path, BP_PATH_MAX + 1);
	for (uint32_t i = 0; i < o->nsources; i++) {
		m->source[i].count = counts[i];
		if (i) {
			m->source[i].path = o->sources[i].dataset;
			m->source[i].path_len = (uint32_t)strnlen(m->source[i].path, BP_PATH_MAX + 1);
		}
	}
}

static bp_open_decode decode_msg(const bc_decode *d)
{
	bool center = d->crop == BC_CROP_CENTER;

	if (!d->field)
		return (bp_open_decode){ .kind = 0 };
	return (bp_open_decode){
		.kind = BP_DECODE_IMAGE,
		.crop = (uint8_t)d->crop,
		.layout = d->nhwc ? BP_LAYOUT_NHWC : BP_LAYOUT_NCHW,
		.height = d->height,
		.width = d->width,
		.resize = center ? d->resize : 0,
		/* torchvision's defaults travel as numbers: the daemon checks them like any. */
		.scale_min = d->scale_min || d->scale_max ? d->scale_min : 0.08f,
		.scale_max = d->scale_min || d->scale_max ? d->scale_max : 1.0f,
		.ratio_min = d->ratio_min || d->ratio_max ? d->ratio_min : 3.0f / 4.0f,
		.ratio_max = d->ratio_min || d->ratio_max ? d->ratio_max : 4.0f / 3.0f,
		.flip = d->flip,
		.on_error = d->skip_bad ? BP_ON_ERROR_SKIP : BP_ON_ERROR_FAIL,
		.field = d->field,
		.field_len = (uint32_t)strnlen(d->field, 65),
	};
}

static bp_msg_open open_msg(const bc_stream_opts *o)
{
	bp_msg_open m = {
		.seed = o->seed,
		.start_epoch = o->start_epoch,
		.start_batch = o->start_batch,
		.batch_size = o->batch_size,
		.rank = o->rank,
		.world = o->world,
		.prefetch = o->prefetch,
		.window = o->window,
		.placement = o->device,
		.shuffle = (uint8_t)o->shuffle,
		.drop_last = o->drop_last,
		.keys = o->keys,
		.fields = o->fields,
		.fields_len = o->fields ? (uint32_t)strlen(o->fields) : 0,
		.path = o->dataset,
		.path_len = o->dataset ? (uint32_t)strnlen(o->dataset, BP_PATH_MAX + 1) : 0,
		.start_sample = o->start_sample,
		.batch_stride = o->batch_stride,
		.decode = decode_msg(&o->decode),
		.sequences = (uint8_t)o->sequences,
		.seq_len = o->seq_len,
	};

	sources_msg(o, &m);
	return m;
}

/* A stream for o that holds nothing yet: stream_free takes it as it is. */
static bc_stream *stream_new(bc_client *c, const bc_stream_opts *o)
{
	bc_stream *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->c = c;
	s->device = o->device;
	s->data_fd = s->ctrl_fd = s->released_fd = s->published_fd = s->gpu_fd = -1;
	s->pagemap_fd = -1;
	s->epoch = o->start_epoch;
	s->start_epoch = o->start_epoch;
	s->start_batch = o->start_batch;
	s->stride = o->batch_stride;
	return s;
}

/* c->mu held. */
static int open_send(bc_client *c, const bp_msg_open *m)
{
	int n = bp_msg_open_encode(m, c->buf, sizeof(c->buf));

	if (n == -EINVAL)
		bp_msg_open_why(m, c->err, sizeof(c->err));
	return n < 0 ? n : bc__send_all(c, c->buf, n);
}

/*
 * A daemon from before fields takes the OPEN flags for reserved bytes and
 * answers a malformed message: say what it did not understand. c->mu held.
 */
static void old_daemon(bc_client *c, const bp_msg_open *m, int r)
{
	static const char why[] = "the daemon refused the field selection, keys, start_sample, "
				  "batch_stride, image decoding or token sequences (a batchd from "
				  "before them?): ";
	size_t keep = strlen(c->err), room = sizeof(c->err) - sizeof(why);

	if (r != -EBADMSG || (!m->fields_len && !m->keys && !m->start_sample &&
			      m->batch_stride <= 1 && !m->decode.kind && !m->sequences))
		return;
	/* Its own message after ours, cut to what fits. */
	keep = keep < room ? keep : room;
	memmove(c->err + sizeof(why) - 1, c->err, keep);
	memcpy(c->err, why, sizeof(why) - 1);
	c->err[sizeof(why) - 1 + keep] = '\0';
}

/*
 * Receive OPEN's answer, c->mu held. @return 0 with READY decoded into
 * s->r and its *ret_nfds descriptors in fds, now the caller's; or the
 * daemon's error, or negative errno, with the descriptors closed.
 */
static int ready_recv(bc_client *c, bc_stream *s, int *fds, int *ret_nfds)
{
	int nfds = 0, n, r;

	n = bc__recv_reply(c, fds, BP_READY_FDS_GPU, &nfds);
	if (n == -EMFILE && bp_msg_ready_decode(c->buf, (size_t)c->last_len, &s->r) == 0) {
		/* We are out of descriptors, but the daemon made the session: end it. */
		session_close(c, s->r.session);
		snprintf(c->err, sizeof(c->err), "out of file descriptors (RLIMIT_NOFILE) receiving "
			 "the session's shared memory");
	}
	if (n < 0)
		return n;
	if ((r = bc__reply_error(c, c->buf, n)) < 0) {
		bc__close_fds(fds, nfds);
		return r;
	}
	if (bp_msg_ready_decode(c->buf, (size_t)n, &s->r) < 0) {
		bc__close_fds(fds, nfds);
		return -EBADMSG;
	}
	*ret_nfds = nfds;
	return 0;
}

/* A READY we cannot use: its descriptors closed, its session ended. c->mu held. */
static void ready_refuse(bc_client *c, const bc_stream *s, int *fds, int nfds)
{
	bc__close_fds(fds, nfds);
	session_close(c, s->r.session);
}

/*
 * Check that READY (s->r, with nfds descriptors in fds) answers OPEN m,
 * and that this process can reach the GPU of a GPU session (no_gpu: why
 * it cannot, NULL when it can or the stream is a host stream). c->mu held. @return 0, or -EBADMSG / -ENODEV with
 * the READY refused and c->err set.
 */
static int ready_check(bc_client *c, const bp_msg_open *m, const bc_stream *s, int *fds,
		       int nfds, const char *no_gpu)
{
	int want_fds = s->device != BC_HOST ? BP_READY_FDS_GPU : BP_READY_FDS;

	if (nfds != want_fds || s->r.placement != m->placement) {
		ready_refuse(c, s, fds, nfds);
		snprintf(c->err, sizeof(c->err), "READY (placement %d, %d descriptors) does not "
			 "answer OPEN (placement %d, %d descriptors expected)", s->r.placement, nfds,
			 m->placement, want_fds);
		return -EBADMSG;
	}
	if (no_gpu) {
		/* The daemon has a GPU for us, but we cannot reach it. */
		ready_refuse(c, s, fds, nfds);
		snprintf(c->err, sizeof(c->err), "no CUDA device in this process: %s", no_gpu);
		return -ENODEV;
	}
	return 0;
}

/*
 * No answer to OPEN m in time: say which dataset, and what an open waits
 * for, in c->err (not "waiting for a batch": there is no stream yet).
 * c->mu held.
 */
static void open_timed_out(bc_client *c, const bp_msg_open *m)
{
	snprintf(c->err, sizeof(c->err), "batchd did not answer the OPEN of %.*s within %d s "
		 "(an open reads the dataset's index; a remote one waits for its bucket and the "
		 "fetcher: batchctl status shows them); this connection serves no more requests: "
		 "connect again", (int)(m->path_len < 512 ? m->path_len : 512), m->path,
		 bc__reply_timeout_s(c));
}

/*
 * OPEN m and take the READY that answers it into s: its sizes in s->r,
 * its descriptors in s's fds. no_gpu as for ready_check.
 * @return 0, or negative errno with c->err set where the daemon or we had
 * more to say; s holds nothing then.
 */
static int open_session(bc_client *c, const bp_msg_open *m, bc_stream *s, const char *no_gpu)
{
	int fds[BP_READY_FDS_GPU], nfds = 0, r;

	pthread_mutex_lock(&c->mu);
	if (c->dead) {
		r = -EPIPE;
		goto unlock;
	}
	if ((r = open_send(c, m)) < 0 || (r = ready_recv(c, s, fds, &nfds)) < 0 ||
	    (r = ready_check(c, m, s, fds, nfds, no_gpu)) < 0) {
		if (r == -ETIMEDOUT)
			open_timed_out(c, m);
		old_daemon(c, m, r);
		goto unlock;
	}
	c->err[0] = '\0';
	s->data_fd = fds[0];
	s->ctrl_fd = fds[1];
	s->released_fd = fds[2];
	s->published_fd = fds[3];
	if (s->device != BC_HOST)
		s->gpu_fd = fds[4];
unlock:
	pthread_mutex_unlock(&c->mu);
	return r;
}

/*
 * Map what READY handed over: the memfds, then on GPU streams the device
 * memory, which must be on the device with UUID uuid. @return 0, or
 * negative errno with s->err set where there is more to say.
 */
static int stream_attach(bc_stream *s, const uint8_t uuid[16])
{
	int r;

	s->batches = calloc(s->r.slots ? s->r.slots : 1, sizeof(*s->batches));
	r = s->batches ? stream_map(s) : -ENOMEM;
	if (r == 0 && s->device != BC_HOST)
		r = bc__gpu_open(s, uuid);
	return r;
}

/*
 * Free a stream that failed after the daemon made its session: end the
 * session rather than leave it to the connection, and say why (err) in
 * c->err.
 */
static void stream_abandon(bc_stream *s, int err)
{
	bc_client *c = s->c;

	pthread_mutex_lock(&c->mu);
	session_close(c, s->r.session);
	snprintf(c->err, sizeof(c->err), "%s", s->err[0] ? s->err : strerror(-err));
	pthread_mutex_unlock(&c->mu);
	stream_free(s);
}

/*
 * The start epoch's batches, from the one schedule the daemon computes
 * too (lib/proto/schedule.h): READY gives the samples. With drop_last it may
 * hold none, and the first batch is then of the next epoch. @return 0, or
 * -EBADMSG with s->err set for a READY that cannot answer the OPEN.
 */
static int stream_schedule(bc_stream *s, const bc_stream_opts *o)
{
	bp_schedule p;

	if (bp_schedule_init(&p, s->r.samples, o->start_sample, o->world, o->batch_size,
			     o->drop_last) < 0)
		return bc__bad_ring(s, "READY's %" PRIu64 " samples do not hold start_sample %"
				    PRIu64, s->r.samples, o->start_sample);
	s->first_batches = p.batches;
	if (p.batches == 0)
		s->epoch = s->start_epoch + 1;
	return 0;
}

/* A mixture's counts and the period's slots, for bc_stream_source_used. @return 0 or -ENOMEM. */
static int stream_mixture(bc_stream *s, const bp_msg_open *m)
{
	if (!m->sources)
		return 0;
	s->nsources = m->sources;
	for (uint32_t i = 0; i < m->sources; i++) {
		s->count[i] = m->source[i].count;
		s->period += s->count[i];
	}
	s->slot = calloc(s->period, sizeof(*s->slot));
	s->rank = calloc(s->period, sizeof(*s->rank));
	if (!s->slot || !s->rank)
		return -ENOMEM;
	bp_mix_slots(s->count, s->nsources, s->period, s->slot, s->rank);
	return 0;
}

int bc_open(bc_client *c, const bc_stream_opts *caller, bc_stream **ret)
{
	char nocuda[256] = "";
	const char *no_gpu = NULL;
	bc_stream_opts opts, *o = &opts;
	bp_msg_open m;
	bc_stream *s;
	int r;

	if (!c)
		return -EINVAL;
	if (!ret || !opts_copy(caller, &opts)) {
		pthread_mutex_lock(&c->mu);
		if (!ret || !caller)
			snprintf(c->err, sizeof(c->err), "%s", !ret ? "no pointer to return the "
				 "stream in" : "no options: fill a bc_stream_opts with "
				 "bc_stream_opts_init()");
		else
			snprintf(c->err, sizeof(c->err), "bc_stream_opts.struct_size %u is too small: "
				 "fill the options with bc_stream_opts_init()", caller->struct_size);
		pthread_mutex_unlock(&c->mu);
		return -EINVAL;
	}
	if ((r = opts_check(c, o)) < 0)
		return r;
	if (o->fields && !*o->fields)
		o->fields = NULL;
	m = open_msg(o);
	/*
	 * Without a driver the OPEN still goes out, with a zero UUID: a daemon
	 * that cannot serve GPUs either answers with its own reason, which
	 * says more than ours would.
	 */
	if (o->device != BC_HOST) {
		r = bc__gpu_uuid(c, o->device, m.device_uuid, nocuda, sizeof(nocuda));
		if (r < 0)
			return r;
		if (r == 0)
			no_gpu = nocuda;
	}
	s = stream_new(c, o);
	if (!s)
		return -ENOMEM;
	r = open_session(c, &m, s, no_gpu);
	if (r < 0) {
		free(s);
		return r;
	}
	r = stream_schedule(s, o);
	if (r == 0)
		r = stream_mixture(s, &m);
	if (r == 0)
		r = stream_attach(s, m.device_uuid);
	if (r < 0) {
		stream_abandon(s, r);
		return r;
	}
	*ret = s;
	return 0;
}

/* The accessors take NULL (what a failed bc_open leaves in a NULL-initialised pointer). */

int bc_stream_device(const bc_stream *s)
{
	return s ? s->device : BC_HOST;
}

uint64_t bc_stream_batches_per_epoch(const bc_stream *s) { return s ? s->r.batches_per_epoch : 0; }

uint64_t bc_stream_epoch_batches(const bc_stream *s, uint64_t epoch)
{
	if (!s || epoch < s->start_epoch)
		return 0;
	return epoch == s->start_epoch ? s->first_batches : s->r.batches_per_epoch;
}
uint64_t bc_stream_samples(const bc_stream *s) { return s ? s->r.samples : 0; }
uint64_t bc_stream_fingerprint(const bc_stream *s) { return s ? s->r.fingerprint : 0; }
uint32_t bc_stream_sources(const bc_stream *s) { return s ? s->nsources : 0; }

int bc_stream_source_used(const bc_stream *s, uint32_t i, uint64_t epoch, uint64_t sample,
			  uint64_t *ret)
{
	if (!s || !ret)
		return -EINVAL;
	if (i >= s->nsources)
		return -ERANGE;
	*ret = bp_mix_used(s->count, s->slot, s->rank, s->period, i,
			   epoch * s->r.samples + sample);
	return 0;
}
uint64_t bc_stream_max_sample(const bc_stream *s) { return s ? s->r.max_sample : 0; }
const char *bc_stream_error(const bc_stream *s) { return s ? s->err : ""; }

const bc_field_info *bc_stream_schema(const bc_stream *s, uint32_t *ret_count)
{
	if (ret_count)
		*ret_count = s ? s->schema.count : 0;
	return s ? s->info : NULL;
}

int bc_stream_field_index(const bc_stream *s, const char *name)
{
	if (!s || !name)
		return -EINVAL;
	return bp_schema_find(&s->schema, name);
}

int bc_close(bc_stream *s)
{
	bc_client *c;
	int r;

	if (!s)
		return 0;
	c = s->c;
	/* Our hold on the device memory first; the daemon frees its own after CLOSE. */
	bc__gpu_free(s);
	pthread_mutex_lock(&c->mu);
	r = session_close(c, s->r.session);
	pthread_mutex_unlock(&c->mu);
	stream_free(s);
	return r == -EPIPE || r == -ESHUTDOWN ? 0 : r;
}

const char *bc_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";
	case BC_EPOCH_END:
		return "end of epoch";
	case -ETIMEDOUT:
		return "timed out waiting for batchd (for a batch, or for the answer to a request)";
	case -ENOBUFS:
		return "held batches keep the daemon from staging the next: release them (in order) first";
	case -ESHUTDOWN:
		return "the daemon stopped the stream";
	case -EPIPE:
		return "the daemon is gone";
	case -EBADMSG:
		return "corrupt data or malformed message";
	case -EPROTO:
		return "ring protocol violation";
	case -ENODEV:
		return "no such device";
	default:
		return err < 0 ? strerror(-err) : "unknown result";
	}
}
