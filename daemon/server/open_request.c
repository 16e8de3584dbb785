/* SPDX-License-Identifier: MIT */
/*
 * open_request.c - OPEN requests: the limits a new session must fit, the dataset
 * lookup (which can block on disk, so it runs on libuv's thread pool
 * while the requesting connection is paused), then the session itself,
 * its entry in the server's table and the READY that hands it over.
 * Refusals are counted by kind for the errors metric.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset.h"
#include "linger.h"
#include "log.h"
#include "machine.h"
#include "open_pool.h"
#include "remote.h"
#include "s3.h"
#include "server_state.h"

_Static_assert((int)BD_CFG_TIER_RAM == (int)BD_TIER_RAM && (int)BD_CFG_TIER_PAGE == (int)BD_TIER_PAGE &&
	       (int)BD_CFG_TIER_DIRECT == (int)BD_TIER_DIRECT, "[memory] tier names the tiers in order");

/* ---- refusals ----------------------------------------------------------------------- */

static enum bd_refusal refusal_kind(int r)
{
	switch (r) {
	case -ENOENT:
	case -ENODATA:
		return BD_REFUSED_NOT_FOUND;
	case -EACCES:
	case -EPERM:
		return BD_REFUSED_ACCESS;
	case -EINVAL:
	case -ERANGE:
		return BD_REFUSED_INVALID;
	case -ENOMEM:
		return BD_REFUSED_MEMORY;
	case -EMFILE:
	case -EUSERS:
		return BD_REFUSED_LIMIT;
	case -EBADMSG:
	case -ENOTSUP:
	case -E2BIG:
		return BD_REFUSED_CORRUPT;
	case -ENODEV:
		return BD_REFUSED_DEVICE;
	default:
		return BD_REFUSED_OTHER;
	}
}

static void vrefuse(client *c, enum bd_refusal kind, int code, const char *fmt, va_list ap)
{
	char text[BP_ERRMSG_MAX + 1];

	c->srv->totals.refused[kind]++;
	vsnprintf(text, sizeof(text), fmt, ap);
	bd_log(LOG_NOTICE, "client pid %d uid %u: open refused: %s", (int)c->pid, (unsigned)c->uid,
	       text);
	bd__client_error(c, code, "%s", text);
}

/* Answer an OPEN with an error, counted by kind. */
__attribute__((format(printf, 3, 4)))
static void refuse(client *c, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vrefuse(c, refusal_kind(code), code, fmt, ap);
	va_end(ap);
}

/* The same for a GPU placement the daemon cannot serve (whatever the errno). */
__attribute__((format(printf, 3, 4)))
static void refuse_device(client *c, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vrefuse(c, BD_REFUSED_DEVICE, code, fmt, ap);
	va_end(ap);
}

/* ---- the lookup, on the thread pool --------------------------------------------------- */

typedef struct open_work {
	uv_work_t w;            /* on libuv's pool: the local roots */
	bd_open_job job;        /* on the remote opens' pool (open_pool.h): every root */
	bool remote;            /* the lookup goes on the remote pool: a bucket may be reached */
	size_t nlocal;          /* roots[0, nlocal) are local, the rest remotes */
	uv_timer_t retry;       /* waiting for ending sessions' memory (open_session) */
	bool retrying;          /* retry is initialised: the work is freed once it closed */
	uint64_t wait_since_ns; /* when the first try was refused for memory; 0: not refused */
	uint64_t retry_ms;      /* the next wait */
	client *c;
	bp_msg_open m;
	int device;             /* the daemon's CUDA ordinal, or -1: host */
	char *path;
	char *fields;           /* the OPEN's field list, or NULL: m.fields points here */
	char decode_field[BP_FIELD_NAME_MAX + 1]; /* the decoded field's name: m.decode.field points here */
	char **roots;
	size_t nroots;
	bd_read_policy policy;
	bd_dataset *d;
	uint64_t largest;       /* the schedule's largest batch (bd_session_largest_batch) */
	bd_key_table *keys;     /* ... and the dataset's keys, when read whole; NULL: none */
	bd_seqs *seqs;          /* ... and a token session's sequences; NULL: none */
	bd_mix *mix;            /* ... and a mixture's other sources; NULL: none */
	char *src_path[BP_MIX_SOURCES_MAX]; /* a mixture's paths ([0]: path): m.source[i].path */
	uint64_t sized;         /* the version (bd_dataset uid) largest was found over; 0: none */
	int r;
	char err[BP_ERRMSG_MAX];
} open_work;

/* Not an errno: the name is not under the local roots, so the remote pool looks for it next. */
#define TRY_REMOTE 1

/*
 * A mixture's other sources, looked up as the first one was and, for
 * tokens, cut into the same sequences (sources.h). @return 0 with
 * ow->mix, or <0 with ow->err naming the source.
 */
static int lookup_sources(open_work *ow)
{
	bd_dataset *d[BP_MIX_SOURCES_MAX] = { ow->d };
	bd_seqs *q[BP_MIX_SOURCES_MAX] = { ow->seqs };
	uint32_t n = ow->m.sources, i;
	int r = 0;

	for (i = 1; i < n && r == 0; i++) {
		r = bd_dataset_get((const char *const *)ow->roots, ow->nroots, ow->src_path[i],
				   &ow->policy, &d[i], ow->err, sizeof(ow->err));
		if (r == 0 && ow->m.sequences)
			r = bd_seqs_new(d[i]->ds, d[i]->name, ow->m.sequences, ow->m.seq_len, &q[i],
					ow->err, sizeof(ow->err));
	}
	if (r == 0)
		r = bd_mix_new(d, ow->m.sequences ? q : NULL, &ow->m, &ow->mix, ow->err,
			       sizeof(ow->err));
	if (r == -ENOMEM)
		snprintf(ow->err, sizeof(ow->err), "out of memory opening a mixture's sources");
	/* Whatever the mixture did not take. */
	for (i = 1; i < n; i++) {
		bd_seqs_free(q[i]);
		bd_dataset_put(d[i]);
	}
	return r;
}

/* The lookup: on libuv's pool the local roots alone, on the remote pool every root. */
static void lookup(open_work *ow)
{
	ow->r = bd_dataset_get((const char *const *)ow->roots, ow->remote ? ow->nroots : ow->nlocal,
			       ow->path, &ow->policy, &ow->d, ow->err, sizeof(ow->err));
	if (!ow->remote && ow->nroots > ow->nlocal && ow->path[0] != '/' &&
	    (ow->r == -ENOENT || (ow->r == -EACCES && !ow->nlocal))) {
		ow->r = TRY_REMOTE;
		return;
	}
	/*
	 * The sizing reads the start epochs' sample sizes: here, not on the
	 * loop, and once per version (a retry that finds the same one keeps
	 * it). An invalid schedule leaves it 0 for bd_session_new to refuse.
	 */
	if (ow->r < 0 || ow->d->uid == ow->sized)
		return;
	/* Another version: its own keys and sequences. */
	bd_key_table_free(ow->keys);
	ow->keys = NULL;
	bd_seqs_free(ow->seqs);
	ow->seqs = NULL;
	bd_mix_free(ow->mix);
	ow->mix = NULL;
	if (ow->m.sequences &&
	    (ow->r = bd_seqs_new(ow->d->ds, ow->d->name, ow->m.sequences, ow->m.seq_len, &ow->seqs,
				 ow->err, sizeof(ow->err))) < 0) {
		if (ow->r == -ENOMEM)
			snprintf(ow->err, sizeof(ow->err), "out of memory cutting dataset %s into "
				 "sequences", ow->d->name);
		bd_dataset_put(ow->d);
		ow->d = NULL;
		return;
	}
	if (ow->m.sources && (ow->r = lookup_sources(ow)) < 0) {
		bd_dataset_put(ow->d);
		ow->d = NULL;
		return;
	}
	if (bd_session_largest_batch(ow->d, ow->seqs, ow->mix, &ow->m, &ow->largest,
				     &ow->keys) == -ENOMEM) {
		bd_dataset_put(ow->d);
		ow->d = NULL;
		ow->r = -ENOMEM;
		snprintf(ow->err, sizeof(ow->err), "out of memory sizing the session");
		return;
	}
	ow->sized = ow->d->uid;
}

static void open_work_run(uv_work_t *w)
{
	lookup(w->data);
}

static void open_job_run(bd_open_job *job)
{
	/* The fetcher shares its requests among users: this lookup's reads are job->uid's. */
	bd_remote_thread_uid(job->uid);
	lookup((open_work *)((char *)job - offsetof(open_work, job)));
	bd_remote_thread_uid(BD_REMOTE_DAEMON_UID);
}

static void open_work_free(open_work *ow)
{
	for (size_t i = 0; i < ow->nroots; i++)
		free(ow->roots[i]);
	free(ow->roots);
	free(ow->path);
	free(ow->fields);
	bd_key_table_free(ow->keys);
	bd_seqs_free(ow->seqs);
	bd_mix_free(ow->mix);
	for (uint32_t i = 1; i < BP_MIX_SOURCES_MAX; i++)
		free(ow->src_path[i]);
	free(ow);
}


/* ---- the session ------------------------------------------------------------------------ */

static int cmp_ptr(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t)*(const void *const *)a, y = (uintptr_t)*(const void *const *)b;

	return x < y ? -1 : x > y;
}

/* Is d among v[0..n) (sorted)? */
static bool holds(const bd_dataset *const *v, size_t n, const bd_dataset *d)
{
	return n && bsearch(&d, v, n, sizeof(*v), cmp_ptr);
}

/*
 * What the client's uid holds already, against [limits] memory_per_uid:
 * its sessions, and once each the dataset versions they read (a
 * mixture's sources each). d[0..nd) (nd may be 0) are the new session's
 * versions: uid_dataset is the bytes of those the uid reads not yet, each
 * once. With no per-uid limit, nothing is counted.
 */
static bd_session_quota uid_quota(bd_server *srv, uid_t uid, const bd_dataset *const *d,
				  uint32_t nd)
{
	bd_session_quota quota = { .uid = uid, .uid_limit = srv->cfg.memory_per_uid };
	const bd_dataset *one[BP_MIX_SOURCES_MAX], **v;
	size_t n = 0, kept = 0, room = 1;

	if (!quota.uid_limit)
		return quota;
	for (entry *x = srv->entries; x; x = x->next)
		if (x->uid == uid)
			room += bd_session_versions(x->s, one);
	/* Without room to sort the versions, each counts once per session: more, never less. */
	v = calloc(room, sizeof(*v));
	for (entry *x = srv->entries; x; x = x->next) {
		bd_session_info si;

		if (x->uid != uid)
			continue;
		bd_session_get_info(x->s, &si);
		quota.uid_used += si.memory;
		if (v)
			n += bd_session_versions(x->s, v + n);
		else
			quota.uid_used += si.dataset_memory;
	}
	if (v && n)
		qsort(v, n, sizeof(*v), cmp_ptr);
	for (size_t i = 0; v && i < n; i++)
		if (!i || v[i] != v[i - 1])
			v[kept++] = v[i];
	for (size_t i = 0; i < kept; i++)
		quota.uid_used += v[i]->bytes;
	/* Without the table, every new version counts: more, never less. */
	for (uint32_t i = 0; i < nd; i++) {
		uint32_t j = 0;

		while (j < i && d[j] != d[i])
			j++;
		if (j == i && !holds(v, kept, d[i]))
			quota.uid_dataset += d[i]->bytes;
	}
	free(v);
	return quota;
}

/* The versions the session being opened reads: ow->d, then a mixture's other sources'. */
static uint32_t open_versions(const open_work *ow, const bd_dataset **out)
{
	uint32_t n = 0;

	out[n++] = ow->d;
	for (uint32_t i = 1; ow->mix && i < ow->mix->n; i++)
		out[n++] = ow->mix->src[i].dset;
	return n;
}

/* The server's entry for a new session. @return it, or NULL when out of memory. */
static entry *track(bd_server *srv, client *c, bd_session *s)
{
	entry *e = calloc(1, sizeof(*e));

	if (!e)
		return NULL;
	e->s = s;
	e->c = c;
	e->uid = c->uid;
	e->pid = c->pid;
	e->next = srv->entries;
	srv->entries = e;
	srv->nsessions++;
	c->sessions++;
	srv->next_session++;
	return e;
}

/*
 * Hand the session to its client. @return 0, or negative errno when the
 * client did not get READY; the session is then closed and detached.
 */
static int send_ready(client *c, entry *e, bd_session *s, bp_msg_ready *ready)
{
	uint8_t out[256];
	int fds[BP_READY_FDS_GPU], nfds;
	int n;

	nfds = bd_session_ready(s, ready, fds);
	n = bp_msg_ready_encode(ready, out, sizeof(out));
	if (n < 0) {
		bd_log(LOG_ERR, "session %" PRIu64 ": cannot encode READY: %s", ready->session,
		       strerror(-n));
		bd__client_error(c, n, "internal error: cannot describe the session");
		e->c = NULL;
		c->sessions--;
		bd_session_close(s, n);
		bd_session_detach(s);
		return n;
	}
	if (bd__client_send(c, out, n, fds, nfds) < 0) {
		/* The client never got READY: nothing of the session is in its hands. */
		bd_session_close(s, -EPIPE);
		bd_session_detach(s);
		return -EPIPE;
	}
	return 0;
}

/*
 * Global shuffle over blocks of many samples that the cache cannot hold
 * decodes far more than it delivers: say so at open, with what to change.
 */
static void warn_amplification(const open_work *ow, entry *e)
{
	uint64_t cache = ow->c->srv->cache_budget, raw = bp_dataset_raw_bytes(ow->d->ds);

	e->amplification = bd_dataset_amplification(ow->d, ow->m.shuffle, cache);
	if (e->amplification < 2.0)
		return;
	bd_log(LOG_NOTICE, "session %" PRIu64 ": global shuffle over %s, blocks of %.0f samples, "
	       "%" PRIu64 " MiB decoded against a %" PRIu64 " MiB block cache: about %.1fx the "
	       "delivered bytes will be decoded; repack with batchd-pack create --block-size 0 (one "
	       "sample per block), raise [memory] cache above %" PRIu64 " MiB, or use shuffle=block",
	       bd_session_id(e->s), ow->path,
	       (double)bp_dataset_samples(ow->d->ds) / (double)bp_dataset_blocks(ow->d->ds),
	       raw >> 20, cache >> 20, e->amplification, raw >> 20);
}

/* A token session's rows: how many, how full, what is left out. */
static void log_sequences(const bd_seqs *q, uint64_t session)
{
	if (!q)
		return;
	bd_log(LOG_INFO, "session %" PRIu64 ": %s rows of %u tokens: %" PRIu64 " rows of %" PRIu64
	       " tokens in %" PRIu64 " documents; padding %.2f%%, %" PRIu64 " tokens in no row",
	       session, q->mode == BP_SEQUENCES_PACKED ? "packed" : "window", q->row, q->count,
	       q->tokens, q->documents, 100.0 * bd_seqs_padding(q), q->tokens - q->placed);
}

static void log_opened(const open_work *ow, const bp_msg_ready *ready)
{
	const client *c = ow->c;
	char to[32], resume[80] = "";

	if (ow->device >= 0)
		snprintf(to, sizeof(to), "CUDA device %d", ow->device);
	else
		snprintf(to, sizeof(to), "host memory");
	/* Elastic resume and strides, only when asked for: the line of before otherwise. */
	if (ow->m.start_sample || ow->m.batch_stride > 1)
		snprintf(resume, sizeof(resume), ", epoch %" PRIu64 " from sample %" PRIu64
			 ", batch stride %u", ow->m.start_epoch, ow->m.start_sample,
			 ow->m.batch_stride ? ow->m.batch_stride : 1);
	bd_log(LOG_INFO, "session %" PRIu64 ": client pid %d uid %u opened %s (batch %u, %s, rank %u/%u, "
	       "%" PRIu64 " batches/epoch%s, to %s)", ready->session, (int)c->pid, (unsigned)c->uid,
	       ow->path, ow->m.batch_size, bp_shuffle_name(ow->m.shuffle), ow->m.rank, ow->m.world,
	       ready->batches_per_epoch, resume, to);
}

/*
 * An open refused for memory waits while memory is on its way back:
 * sessions ending (their jobs in flight still write into their memfds)
 * and memfds lingering (linger.h). A client that exits or is killed and
 * reopens at once finds its old session still ending; the wait lets the
 * reopen see that memory back instead of being refused. It retries after
 * OPEN_RETRY_MS, then twice as long each time up to OPEN_RETRY_MAX_MS
 * (each try looks the dataset up again, on the thread pool), and gives up
 * after OPEN_WAIT_MS, or as soon as nothing is coming back: the budget is
 * held by live sessions.
 */
#define OPEN_RETRY_MS 1u
#define OPEN_RETRY_MAX_MS 32u
#define OPEN_WAIT_MS 2000u

/* Does memory that sessions and clients hold now come back without anyone's doing? */
static bool memory_coming_back(bd_server *srv)
{
	if (bd_linger_bytes(bd_pipeline_linger(srv->pipeline)))
		return true;
	for (entry *x = srv->entries; x; x = x->next)
		if (bd_session_closing(x->s))
			return true;
	return false;
}

static void open_finish(open_work *ow);
static void open_retry(uv_timer_t *t);

/*
 * Wait for the memory of ending sessions (see OPEN_WAIT_MS); the first
 * retry comes whatever is ending, so that a connection the loop has not
 * yet seen close gets one turn to. @return true when the open waits.
 */
static bool wait_for_memory(open_work *ow)
{
	bd_server *srv = ow->c->srv;
	uint64_t now = bd_now_ns();

	if (!ow->wait_since_ns) {
		ow->wait_since_ns = now;
		ow->retry_ms = OPEN_RETRY_MS;
	} else if (now - ow->wait_since_ns >= OPEN_WAIT_MS * UINT64_C(1000000) ||
		 !memory_coming_back(srv))
		return false;
	if (!ow->retrying) {
		if (uv_timer_init(srv->loop, &ow->retry) < 0)
			return false;
		ow->retry.data = ow;
		ow->retrying = true;
	}
	if (uv_timer_start(&ow->retry, open_retry, ow->retry_ms, 0) < 0)
		return false;
	ow->retry_ms = ow->retry_ms * 2 < OPEN_RETRY_MAX_MS ? ow->retry_ms * 2 : OPEN_RETRY_MAX_MS;
	return true;
}

/*
 * The dataset is loaded: make the session, track it, send READY, start it.
 * @return false when it waits for memory (open_retry calls again).
 */
static bool open_session(open_work *ow)
{
	client *c = ow->c;
	bd_server *srv = c->srv;
	const bd_dataset *versions[BP_MIX_SOURCES_MAX];
	bd_session_quota quota = uid_quota(srv, c->uid, versions, open_versions(ow, versions));
	bp_msg_ready ready;
	char err[BP_ERRMSG_MAX] = "";
	bd_session *s;
	entry *e;
	int r;

	ow->m.path = ow->path;
	/* The session takes the dataset reference, on failure too: a retry looks it up again. */
	r = bd_session_new(&srv->env, srv->next_session, ow->d, &ow->m, ow->largest, &ow->keys,
			   &ow->seqs, &ow->mix, ow->device, &quota, &s, err, sizeof(err));
	if (r < 0)
		ow->d = NULL;
	if (r == -ENOMEM && wait_for_memory(ow))
		return false;
	if (r < 0) {
		if (ow->device >= 0 && r != -ENOMEM)
			refuse_device(c, r, "%s", err[0] ? err : strerror(-r));
		else
			refuse(c, r, "%s", err[0] ? err : strerror(-r));
		return true;
	}
	e = track(srv, c, s);
	if (!e) {
		bd_session_close(s, -ENOMEM);
		bd_session_detach(s);
		bd__client_error(c, -ENOMEM, "out of memory");
		return true;
	}
	if (send_ready(c, e, s, &ready) < 0)
		return true;
	log_opened(ow, &ready);
	log_sequences(bd_session_sequences(s), ready.session);
	if (ow->wait_since_ns)
		bd_log(LOG_INFO, "session %" PRIu64 ": opened after waiting %.1f ms for the memory of "
		       "ending sessions", ready.session, (double)(bd_now_ns() - ow->wait_since_ns) / 1e6);
	warn_amplification(ow, e);
	bd_session_start(s);
	bd__server_notify_status(srv);
	return true;
}

static void open_done(open_work *ow);

static void open_work_done(uv_work_t *w, int status)
{
	open_done(w->data);
}

static void open_job_done(bd_open_job *job)
{
	open_done((open_work *)((char *)job - offsetof(open_work, job)));
}

/* The lookup to its pool: libuv's, or the remote opens'. @return 0 or -ENOMEM. */
static int queue_lookup(open_work *ow)
{
	bd_server *srv = ow->c->srv;

	if (!ow->remote)
		return uv_queue_work(srv->loop, &ow->w, open_work_run, open_work_done) < 0 ? -ENOMEM : 0;
	ow->job = (bd_open_job){ .work = open_job_run, .done = open_job_done, .uid = ow->c->uid };
	bd_open_pool_queue(srv->open_pool, &ow->job);
	return 0;
}

static void open_done(open_work *ow)
{
	client *c = ow->c;
	bd_server *srv = c->srv;

	if (ow->r == TRY_REMOTE && !c->gone && !srv->stopping) {
		ow->remote = true;
		ow->r = 0;
		ow->err[0] = '\0';
		queue_lookup(ow);
		return;
	}
	if (ow->r == TRY_REMOTE)
		ow->r = -ECANCELED;
	if (c->gone || srv->stopping)
		bd_dataset_put(ow->d);
	else if (ow->r == -ENOMEM && wait_for_memory(ow))
		return; /* a version to load that did not fit: ending sessions may make room */
	else if (ow->r < 0)
		refuse(c, ow->r, "%s", ow->err);
	else if (!open_session(ow))
		return; /* waiting for memory: open_retry looks the dataset up again */
	open_finish(ow);
}

static void on_retry_closed(uv_handle_t *h)
{
	open_work_free(h->data);
}

/* The open is over, whatever came of it: the connection reads its next request. */
static void open_finish(open_work *ow)
{
	client *c = ow->c;
	bd_server *srv = c->srv;

	srv->opening--;
	if (ow->retrying)
		uv_close((uv_handle_t *)&ow->retry, on_retry_closed);
	else
		open_work_free(ow);
	bd__client_resume(c);
	bd__server_stop_if_drained(srv);
}

/*
 * What the opening uid holds now, for a version the lookup may load
 * (bd_read_policy): its sessions, their versions, and what its clients
 * keep of ended ones.
 */
static void uid_held_now(open_work *ow)
{
	bd_server *srv = ow->c->srv;

	ow->policy.uid_held = uid_quota(srv, ow->c->uid, NULL, 0).uid_used +
			      bd_linger_uid_bytes(bd_pipeline_linger(srv->pipeline), ow->c->uid);
}

/* Try again: the lookup (the cached version, unless the files changed) and the session. */
static void open_retry(uv_timer_t *t)
{
	open_work *ow = t->data;
	client *c = ow->c;

	if (c->gone || c->srv->stopping) {
		open_finish(ow);
		return;
	}
	ow->r = 0;
	ow->err[0] = '\0';
	uid_held_now(ow);
	if (queue_lookup(ow) < 0) {
		bd__client_error(c, -ENOMEM, "out of memory");
		open_finish(ow);
	}
}

/* ---- the request ------------------------------------------------------------------------ */

/* Sessions the uid holds, opens still in flight included. */
static unsigned uid_sessions(bd_server *srv, uid_t uid)
{
	unsigned mine = 0;

	for (entry *x = srv->entries; x; x = x->next)
		mine += x->uid == uid;
	/* Each busy connection has one open in flight. */
	for (client *o = srv->clients; o; o = o->next)
		mine += o->busy && o->uid == uid;
	return mine;
}

/* The limits a new session must fit. @return 0, or negative errno (refused). */
static int check_limits(client *c, const bp_msg_open *m)
{
	bd_server *srv = c->srv;
	unsigned mine;

	if (m->batch_size > MAX_BATCH_SIZE) {
		refuse(c, -EINVAL, "batch size %u is over the limit of %u (fixed, not a setting): "
		       "open with a smaller batch", m->batch_size, MAX_BATCH_SIZE);
		return -EINVAL;
	}
	if (c->sessions >= MAX_SESSIONS_PER_CLIENT) {
		refuse(c, -EMFILE, "too many sessions: this connection holds %u, the most one connection may "
		       "(fixed, not a setting): close one, or open it on another connection",
		       c->sessions);
		return -EMFILE;
	}
	if (srv->nsessions + srv->opening >= MAX_SESSIONS) {
		refuse(c, -EMFILE, "too many sessions: the daemon holds %u (with those opening), the "
		       "most it may (fixed, not a setting): close sessions or wait for some to end",
		       srv->nsessions + srv->opening);
		return -EMFILE;
	}
	if (!srv->cfg.sessions_per_uid)
		return 0;
	mine = uid_sessions(srv, c->uid);
	if (mine >= srv->cfg.sessions_per_uid) {
		refuse(c, -EUSERS, "uid %u already holds %u sessions, the limit per user "
		       "([limits] sessions_per_uid = %u): close one of them or raise [limits] "
		       "sessions_per_uid", (unsigned)c->uid, mine, srv->cfg.sessions_per_uid);
		return -EUSERS;
	}
	return 0;
}

/*
 * The lookup's inputs, copied: the roots are a snapshot, so a reload does
 * not change them under a running lookup. @return it, or NULL when out of
 * memory.
 */
static open_work *open_work_new(client *c, const bp_msg_open *m, int device)
{
	const bd_config *cfg = &c->srv->cfg;
	open_work *ow = calloc(1, sizeof(*ow));

	if (!ow)
		return NULL;
	ow->w.data = ow;
	ow->c = c;
	ow->m = *m;
	ow->m.path = NULL;
	ow->device = device;
	ow->policy = (bd_read_policy){
		.direct = cfg->direct == BD_CFG_DIRECT_ON ? BD_DIRECT_ON
			  : cfg->direct == BD_CFG_DIRECT_OFF ? BD_DIRECT_OFF : BD_DIRECT_AUTO,
		/* The configuration's names are the tiers', in the same order. */
		.tier = (enum bd_tier)cfg->tier,
		.cache_budget = c->srv->cache_budget,
		/* Read on the worker thread, when a version loads: what is free then. */
		.memory_now = bd_machine_memory,
		.budget = &c->srv->ledger,
		.uid = c->uid,
		.uid_limit = cfg->memory_per_uid,
	};
	ow->path = strndup(m->path, m->path_len);
	ow->roots = calloc(cfg->nroots + cfg->nremotes + 1, sizeof(*ow->roots));
	if (!ow->path || !ow->roots)
		goto nomem;
	/* The list lives in the receive buffer, which the next request reuses. */
	if (m->fields_len) {
		ow->fields = strndup(m->fields, m->fields_len);
		if (!ow->fields)
			goto nomem;
		ow->m.fields = ow->fields;
	}
	if (m->decode.kind) {
		snprintf(ow->decode_field, sizeof(ow->decode_field), "%.*s", (int)m->decode.field_len,
			 m->decode.field);
		ow->m.decode.field = ow->decode_field;
	}
	for (uint32_t i = 1; i < m->sources; i++) {
		ow->src_path[i] = strndup(m->source[i].path, m->source[i].path_len);
		if (!ow->src_path[i])
			goto nomem;
		ow->m.source[i].path = ow->src_path[i];
	}
	for (; ow->nroots < cfg->nroots; ow->nroots++)
		if (!(ow->roots[ow->nroots] = strdup(cfg->roots[ow->nroots])))
			goto nomem;
	/* The remotes follow the local roots: a name is looked for on local disks first. */
	for (size_t i = 0; i < cfg->nremotes; i++, ow->nroots++)
		if (!(ow->roots[ow->nroots] = strdup(cfg->remotes[i])))
			goto nomem;
	ow->nlocal = cfg->nroots;
	/* A bucket's location goes straight to the remote pool; a name looks on local disks first. */
	ow->remote = c->srv->open_pool && bp_s3_is_remote(ow->path);
	return ow;
nomem:
	open_work_free(ow);
	return NULL;
}

void bd__client_open(client *c, const bp_msg_open *m)
{
	bd_server *srv = c->srv;
	open_work *ow;
	int device = -1;

	if (m->placement != BP_PLACEMENT_HOST) {
		char err[BP_ERRMSG_MAX];

		/* No GPU thread means no devices (server.c, start_gpu): pick says so. */
		device = bd_cuda_pick(&srv->cuda, m->device_uuid, m->placement, err, sizeof(err));
		if (device < 0) {
			refuse_device(c, device, "%s", err);
			return;
		}
	}
	if (check_limits(c, m) < 0)
		return;
	ow = open_work_new(c, m, device);
	if (!ow) {
		bd__client_error(c, -ENOMEM, "out of memory");
		return;
	}
	uid_held_now(ow);
	bd__client_pause(c);
	srv->opening++;
	if (queue_lookup(ow) < 0) {
		srv->opening--;
		bd__client_resume(c);
		open_work_free(ow);
		bd__client_error(c, -ENOMEM, "out of memory");
	}
}
