/* SPDX-License-Identifier: MIT */
/*
 * remote.c - remote objects cached on local disk, and the fetcher thread
 * that fills the cache (see remote.h for the design; the map files are
 * remote_map.c's).
 *
 * Chunk states: ABSENT (nothing on disk; maybe partial bytes of a failed
 * fetch, never read), FETCHING (a fetch is queued, waiting for a retry or
 * on the wire, or its cached bytes are being checked), PRESENT (its bytes
 * are in the data file). A chunk is on the LRU list exactly when it is
 * PRESENT and unpinned. Every state change happens under R.mu; the bytes
 * of a FETCHING chunk are written by the fetcher thread alone, so no
 * reader ever sees them before PRESENT. Each chunk's XXH3-64 is taken as
 * its bytes come and kept in the map; a chunk found on disk at start is
 * PRESENT but unverified until its bytes match it (remote_verify.c), so
 * a file swapped in the cache directory is never served.
 */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "log.h"
#include "pack_file.h"
#include "remote_priv.h"
#include "units.h"
#include "util.h"

struct bd_remote_state R = { .mu = PTHREAD_MUTEX_INITIALIZER, .quiet = PTHREAD_COND_INITIALIZER,
			     .objdir = -1 };

/* ---- waiters ----------------------------------------------------------------------------- */

/* One acquire still missing chunks. */
typedef struct waiter {
	bd_robj_ready_fn ready;
	void *ctx;
	void *owner;             /* whose read: bd_remote_abandon(owner) tells it at once */
	bd_robj *obj;            /* the chunks [first, last] of obj it pins */
	uint32_t first, last;
	unsigned missing;        /* chunks not settled yet */
	int err;                 /* the first failure */
	char why[BP_S3_MSG_MAX];
	struct waiter *next;     /* on the list of those to call */
	struct waiter *prev_open, *next_open; /* on R's list of those unsettled (waiting) */
} waiter;

/* Acquires waiting, each until it is settled or abandoned. Under R.mu. */
static waiter *waiting;

static void waiting_remove(waiter *w)
{
	if (w->prev_open)
		w->prev_open->next_open = w->next_open;
	else if (waiting == w)
		waiting = w->next_open;
	if (w->next_open)
		w->next_open->prev_open = w->prev_open;
	w->prev_open = w->next_open = NULL;
}

/* A waiter's place on one chunk's list. */
typedef struct wnode {
	waiter *w;
	struct wnode *next;
} wnode;

void bd__settle_waiters(bd_chunk *c, int err, const char *why, waiter **done)
{
	wnode *n = c->waiters, *next;

	c->waiters = NULL;
	for (; n; n = next) {
		waiter *w = n->w;

		next = n->next;
		free(n);
		if (err && !w->err) {
			w->err = err;
			snprintf(w->why, sizeof(w->why), "%s", why);
		}
		if (--w->missing == 0) {
			waiting_remove(w);
			w->next = *done;
			*done = w;
		}
	}
}

/* Outside the lock: tell each settled waiter, and free it. */
static void call_waiters(waiter *done)
{
	while (done) {
		waiter *next = done->next;

		done->ready(done->ctx, done->err, done->why);
		free(done);
		done = next;
	}
}

/* ---- fetches ----------------------------------------------------------------------------- */

bd_fetch *bd__fetch_new(bd_robj *o, uint32_t i)
{
	bd_fetch *f = calloc(1, sizeof(*f));

	if (!f)
		return NULL;
	f->obj = o;
	f->idx = i;
	f->off = (uint64_t)i * R.chunk;
	f->len = bd__chunk_len(o, i);
	o->refs++;
	return f;
}

/* ---- users' shares ----------------------------------------------------------------------- */

/* One user's fetches: queued, and on the wire. Under R.mu. */
typedef struct bd_fetch_user {
	uint32_t uid;
	unsigned queued, inflight;
	struct bd_fetch_user *next;
} bd_fetch_user;

/* Users without an entry of their own (out of memory) share this one. */
static bd_fetch_user spare_user = { .uid = BD_REMOTE_DAEMON_UID };

static __thread uint32_t thread_uid = BD_REMOTE_DAEMON_UID;

void bd_remote_thread_uid(uint32_t uid)
{
	thread_uid = uid;
}

/* uid's entry, made when it has none. Under R.mu. */
static bd_fetch_user *user_of(uint32_t uid)
{
	bd_fetch_user *u;

	for (u = R.users; u; u = u->next)
		if (u->uid == uid)
			return u;
	if (!(u = calloc(1, sizeof(*u))))
		return &spare_user;
	u->uid = uid;
	u->next = R.users;
	R.users = u;
	return u;
}

/*
 * What one user may have on the wire now: requests / users with fetches,
 * or three quarters of requests alone, so that a newcomer's fetch finds a
 * request free however long the others' take. Under R.mu; frees the
 * entries of users with nothing left.
 */
static unsigned user_cap(void)
{
	unsigned active = 0;

	for (bd_fetch_user **p = &R.users; *p;) {
		bd_fetch_user *u = *p;

		if (!u->queued && !u->inflight) {
			*p = u->next;
			free(u);
			continue;
		}
		active++;
		p = &u->next;
	}
	if (active <= 1)
		return R.requests - R.requests / 4 ? R.requests - R.requests / 4 : 1;
	return R.requests / active ? R.requests / active : 1;
}

static void users_free(void)
{
	while (R.users) {
		bd_fetch_user *u = R.users;

		R.users = u->next;
		free(u);
	}
}

/* ---- fetches, continued ------------------------------------------------------------------ */

int bd__queue_fetch(bd_robj *o, uint32_t i, uint32_t uid)
{
	bd_fetch *f = bd__fetch_new(o, i);

	if (!f)
		return -ENOMEM;
	f->uid = uid;
	user_of(uid)->queued++;
	if (R.queue_tail)
		R.queue_tail->next = f;
	else
		R.queue_head = f;
	R.queue_tail = f;
	R.queued++;
	bd__chunk_if(o, i)->state = BD_CHUNK_FETCHING;
	return 0;
}

void bd__remote_wake(void)
{
	if (R.multi)
		curl_multi_wakeup(R.multi);
}

/* Take w off c's list of waiters. Under R.mu. */
static void unlist(bd_chunk *c, const waiter *w)
{
	for (wnode **p = &c->waiters; *p;) {
		wnode *n = *p;

		if (n->w == w) {
			*p = n->next;
			free(n);
		} else {
			p = &n->next;
		}
	}
}

/* Undo an acquire's pins on chunks [first, end) and w's places on their lists. Under R.mu. */
static void unpin(bd_robj *o, uint32_t first, uint32_t end, waiter *w)
{
	for (uint32_t i = first; i < end; i++) {
		bd_chunk *c = bd__chunk_if(o, i);

		unlist(c, w);
		if (--c->pins == 0 && c->state == BD_CHUNK_PRESENT)
			bd__lru_append(c);
	}
}

/* The chunks [off, off+len) covers. @return false for an empty range or one past o's end. */
static bool span(const bd_robj *o, uint64_t off, uint64_t len, uint32_t *first, uint32_t *last)
{
	if (len == 0 || off > o->size || len > o->size - off)
		return false;
	*first = (uint32_t)(off / R.chunk);
	*last = (uint32_t)((off + len - 1) / R.chunk);
	return true;
}

int bd_robj_acquire(bd_robj *o, uint64_t off, uint64_t len, uint32_t uid, void *owner,
		    bd_robj_ready_fn ready, void *ctx)
{
	uint32_t first, last, i;
	waiter *w = NULL;
	bool queued = false, fetch = false;

	if (!span(o, off, len, &first, &last))
		return len == 0 ? 0 : -EINVAL;
	pthread_mutex_lock(&R.mu);
	/* Chunks it could never all hold at once: waiting for room would wait forever. */
	if ((uint64_t)(last - first + 1) * R.chunk > R.max_size) {
		char a[32], b[32];

		snprintf(o->last_err, sizeof(o->last_err), "%s: a read of %s needs more than [cache] "
			 "max_size (%s) at once: raise max_size", o->name,
			 bp_format_size(len, a, sizeof(a)), bp_format_size(R.max_size, b, sizeof(b)));
		pthread_mutex_unlock(&R.mu);
		return -EFBIG;
	}
	/* Stopping: no new waiter, so that none is called once bd_remote_cancel returned. */
	if (R.cancel) {
		pthread_mutex_unlock(&R.mu);
		return -ECANCELED;
	}
	for (i = first; i <= last; i++) {
		bd_chunk *c = bd__chunk(o, i);
		wnode *n;

		if (!c) {
			/* Nothing of i is pinned yet: undo only those before it. */
			unpin(o, first, i, w);
			pthread_mutex_unlock(&R.mu);
			free(w);
			return -ENOMEM;
		}
		if (c->on_lru)
			bd__lru_remove(c);
		c->pins++;
		if (c->state == BD_CHUNK_PRESENT && !c->unverified)
			continue;
		if (!w && !(w = calloc(1, sizeof(*w))))
			goto nomem;
		n = malloc(sizeof(*n));
		if (!n || (c->state == BD_CHUNK_ABSENT && bd__queue_fetch(o, i, uid) < 0) ||
		    (c->state == BD_CHUNK_PRESENT && bd__verify_queue(o, i, uid) < 0)) {
			free(n);
			goto nomem;
		}
		queued |= c->state == BD_CHUNK_FETCHING;
		/* Unverified: on disk, being checked (remote_verify.c); else on its way from the bucket. */
		fetch |= !c->unverified;
		n->w = w;
		n->next = c->waiters;
		c->waiters = n;
		w->missing++;
	}
	if (!fetch)
		R.stats.hit_bytes += len;
	if (!w) {
		pthread_mutex_unlock(&R.mu);
		return 0;
	}
	w->ready = ready;
	w->ctx = ctx;
	w->owner = owner;
	w->obj = o;
	w->first = first;
	w->last = last;
	w->next_open = waiting;
	if (waiting)
		waiting->prev_open = w;
	waiting = w;
	pthread_mutex_unlock(&R.mu);
	if (queued)
		bd__remote_wake();
	return 1;
nomem:
	/* A fetch already queued still lands, for the next reader. */
	unpin(o, first, i + 1, w);
	pthread_mutex_unlock(&R.mu);
	free(w);
	return -ENOMEM;
}

void bd_robj_release(bd_robj *o, uint64_t off, uint64_t len)
{
	uint32_t first, last;
	bool room = false;

	if (!span(o, off, len, &first, &last))
		return;
	pthread_mutex_lock(&R.mu);
	for (uint32_t i = first; i <= last; i++) {
		bd_chunk *c = bd__chunk_if(o, i);

		if (--c->pins == 0 && c->state == BD_CHUNK_PRESENT) {
			bd__lru_append(c);
			room = true;
		}
		/* Fetching for nobody now (its reads were abandoned): the fetcher drops it. */
		if (c->pins == 0 && c->state == BD_CHUNK_FETCHING) {
			R.unwanted = true;
			room = true;
		}
	}
	/* A fetch waiting for room may go now; an unwanted one is dropped. */
	room = room && (R.unwanted || (R.queue_head && R.waiting_room));
	pthread_mutex_unlock(&R.mu);
	if (room)
		bd__remote_wake();
}

void bd_remote_abandon(void *owner)
{
	static const char why[] = "the session ended";
	waiter *done = NULL;

	if (!owner)
		return;
	pthread_mutex_lock(&R.mu);
	for (waiter *w = waiting, *next; w; w = next) {
		next = w->next_open;
		if (w->owner != owner)
			continue;
		for (uint32_t i = w->first; i <= w->last; i++)
			unlist(bd__chunk_if(w->obj, i), w);
		waiting_remove(w);
		w->err = -ECANCELED;
		snprintf(w->why, sizeof(w->why), "%s", why);
		w->next = done;
		done = w;
	}
	pthread_mutex_unlock(&R.mu);
	call_waiters(done);
}

void bd_robj_invalidate(bd_robj *o, uint64_t off, uint64_t len)
{
	uint32_t first, last;

	if (!span(o, off, len, &first, &last))
		return;
	pthread_mutex_lock(&R.mu);
	for (uint32_t i = first; i <= last; i++) {
		bd_chunk *c = bd__chunk_if(o, i);

		if (!c || c->state != BD_CHUNK_PRESENT)
			continue;
		if (c->on_lru)
			bd__lru_remove(c);
		c->state = BD_CHUNK_ABSENT;
		R.cache_bytes -= bd__chunk_len(o, i);
		o->dirty = true;
		/* A reader still holding it reads on; the space goes at the next sync. */
		if (!c->punch) {
			c->punch = true;
			o->punches++;
		}
		R.sync_asked = true;
	}
	pthread_mutex_unlock(&R.mu);
	bd__remote_wake();
}

/* ---- the synchronous read ---------------------------------------------------------------- */

typedef struct sync_wait {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool done;
	int err;
	char why[BP_S3_MSG_MAX];
} sync_wait;

static void sync_ready(void *ctx, int err, const char *why)
{
	sync_wait *s = ctx;

	pthread_mutex_lock(&s->mu);
	s->done = true;
	s->err = err;
	snprintf(s->why, sizeof(s->why), "%s", why ? why : "");
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

int bd_robj_read(void *ctx, void *buf, size_t len, uint64_t off)
{
	bd_robj *o = ctx;
	sync_wait s = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
	int r;

	if (off > o->size || len > o->size - off)
		return -ENODATA;
	r = bd_robj_acquire(o, off, len, thread_uid, NULL, sync_ready, &s);
	if (r < 0)
		return r;
	if (r == 1) {
		pthread_mutex_lock(&s.mu);
		while (!s.done)
			pthread_cond_wait(&s.cv, &s.mu);
		pthread_mutex_unlock(&s.mu);
		r = s.err;
		if (r < 0) {
			pthread_mutex_lock(&R.mu);
			snprintf(o->last_err, sizeof(o->last_err), "%s", s.why);
			pthread_mutex_unlock(&R.mu);
		}
	}
	if (r == 0)
		r = bp_pread_full(o->fd, buf, len, off);
	bd_robj_release(o, off, len);
	pthread_cond_destroy(&s.cv);
	pthread_mutex_destroy(&s.mu);
	return r;
}

bool bd_robj_failed(bd_robj *o, char *buf, size_t len)
{
	bool failed;

	pthread_mutex_lock(&R.mu);
	failed = o->last_err[0] != '\0';
	snprintf(buf, len, "%s", o->last_err);
	pthread_mutex_unlock(&R.mu);
	return failed;
}

const char *bd_robj_etag(const bd_robj *o)
{
	return o->etag;
}

int bd_robj_fd(const bd_robj *o)
{
	return o->fd;
}

/* ---- the fetcher thread ------------------------------------------------------------------ */

static uint64_t now_ms(void)
{
	return bd_now_ns() / 1000000u;
}

/*
 * Make room for len more bytes: evict least recently used unpinned chunks
 * onto the punch list. Under R.mu. @return whether len fits now.
 */
static bool make_room(uint64_t len)
{
	while (R.cache_bytes + R.reserved + len > R.max_size && bd__evict_one())
		R.punch_pending = true;
	return R.cache_bytes + R.reserved + len <= R.max_size;
}

static size_t on_body(void *ctx, const char *data, size_t n)
{
	bd_fetch *f = ctx;

	if (f->got + n > f->len)
		return 0; /* more than asked: the server ignored the range */
	if (bp_pwrite_full(f->obj->fd, data, n, f->off + f->got) < 0) {
		f->werr = errno;
		return 0;
	}
	XXH3_64bits_update(f->hs, data, n);
	f->got += n;
	__atomic_add_fetch(&R.stats_bytes, n, __ATOMIC_RELAXED);
	return n;
}

/* Put f on the wire. Under R.mu (f's chunk is FETCHING, its room reserved). @return 0 or -ENOMEM. */
static int start(bd_fetch *f)
{
	if (!f->hs && !(f->hs = XXH3_createState()))
		return -ENOMEM;
	XXH3_64bits_reset(f->hs);
	f->got = 0;
	f->werr = 0;
	f->h = bp_s3_request_get(R.s3, &f->obj->loc, f->obj->etag, f->off, f->len, on_body, f);
	if (!f->h)
		return -ENOMEM;
	if (curl_multi_add_handle(R.multi, f->h) != CURLM_OK) {
		bp_s3_request_free(f->h);
		f->h = NULL;
		return -ENOMEM;
	}
	R.inflight++;
	user_of(f->uid)->inflight++;
	R.stats.requests++;
	f->wnext = R.wire;
	R.wire = f;
	return 0;
}

static void off_wire(bd_fetch *f)
{
	for (bd_fetch **p = &R.wire; *p; p = &(*p)->wnext)
		if (*p == f) {
			*p = f->wnext;
			break;
		}
	curl_multi_remove_handle(R.multi, f->h);
	bp_s3_request_free(f->h);
	f->h = NULL;
	R.inflight--;
	user_of(f->uid)->inflight--;
}

/* Take f, after prev (NULL: f is the head), off the queue. Under R.mu. */
static void dequeue(bd_fetch *prev, bd_fetch *f)
{
	if (prev)
		prev->next = f->next;
	else
		R.queue_head = f->next;
	if (R.queue_tail == f)
		R.queue_tail = prev;
	f->next = NULL;
	R.queued--;
	user_of(f->uid)->queued--;
}

/* Start what may start: due retries first, then the queue, while requests and room allow. */
static void start_fetches(void)
{
	uint64_t now = now_ms();
	unsigned cap;

	R.waiting_room = false;
	for (bd_fetch **p = &R.retry; *p;) {
		bd_fetch *f = *p;

		if (f->due_ms > now || R.inflight >= R.requests) {
			p = &f->next;
			continue;
		}
		*p = f->next;
		if (start(f) < 0) {
			f->next = *p;
			*p = f;
			break;
		}
	}
	/* In order of arrival, skipping users at their share. */
	cap = user_cap();
	for (bd_fetch *prev = NULL, *f = R.queue_head, *next; f && R.inflight < R.requests; f = next) {
		bd_fetch_user *u = user_of(f->uid);

		next = f->next;
		if (u->inflight >= cap) {
			prev = f;
			continue;
		}
		if (!make_room(f->len)) {
			R.waiting_room = true;
			break;
		}
		R.reserved += f->len;
		if (start(f) < 0) {
			/* Out of memory: it stays queued where it is. */
			R.reserved -= f->len;
			break;
		}
		/* Off the queue: start put it on the wire. */
		dequeue(prev, f);
	}
}

/* f's chunk is not on disk after all: ABSENT, whatever part of it came released at the next punch. */
static void fetch_undone(bd_fetch *f, bd_chunk *c)
{
	c->state = BD_CHUNK_ABSENT;
	if (f->got > 0 && !c->punch) {
		c->punch = true;
		f->obj->punches++;
		R.punch_pending = true;
	}
}

/* Free f, done with; its room reserved is given back. Under R.mu. */
static void fetch_free(bd_fetch *f)
{
	R.reserved -= f->len;
	bd__robj_unref(f->obj);
	XXH3_freeState(f->hs);
	free(f);
}

/* f is over, with err (0: its chunk is on disk). Under R.mu; waiters to call go on *done. */
static void conclude(bd_fetch *f, int err, const char *why, waiter **done)
{
	bd_robj *o = f->obj;
	bd_chunk *c = bd__chunk_if(o, f->idx);

	if (err == 0) {
		c->state = BD_CHUNK_PRESENT;
		c->hash = XXH3_64bits_digest(f->hs);
		c->unverified = false;
		R.cache_bytes += f->len;
		R.stats.fetched_bytes += f->len;
		o->dirty = true;
		o->landed = true;
		if (c->pins == 0)
			bd__lru_append(c);
	} else {
		fetch_undone(f, c);
		R.stats.errors++;
		snprintf(o->last_err, sizeof(o->last_err), "%s", why);
	}
	bd__settle_waiters(c, err, why, done);
	fetch_free(f);
}

/* Does any read still want f's chunk? A waiter pins it too. Under R.mu. */
static bool wanted(const bd_fetch *f)
{
	return bd__chunk_if(f->obj, f->idx)->pins > 0;
}

/* Drop f, wanted by nobody: its chunk goes back to ABSENT, as if never asked for. Under R.mu. */
static void drop(bd_fetch *f)
{
	fetch_undone(f, bd__chunk_if(f->obj, f->idx));
	R.stats.dropped++;
	fetch_free(f);
}

/*
 * Drop the fetches no read wants any more (their sessions ended): on the
 * wire, due to retry, queued. Under R.mu.
 */
static void drop_unwanted(void)
{
	unsigned n = 0;

	R.unwanted = false;
	for (bd_fetch **p = &R.wire; *p;) {
		bd_fetch *f = *p;

		if (wanted(f)) {
			p = &f->wnext;
			continue;
		}
		off_wire(f); /* unlinks f from *p */
		drop(f);
		n++;
	}
	for (bd_fetch **p = &R.retry; *p;) {
		bd_fetch *f = *p;

		if (wanted(f)) {
			p = &f->next;
			continue;
		}
		*p = f->next;
		drop(f);
		n++;
	}
	for (bd_fetch *prev = NULL, *f = R.queue_head, *next; f; f = next) {
		next = f->next;
		if (wanted(f)) {
			prev = f;
			continue;
		}
		dequeue(prev, f);
		R.reserved += f->len; /* fetch_free gives back what a started fetch holds */
		drop(f);
		n++;
	}
	if (n)
		bd_log(LOG_DEBUG, "remote: %u fetch%s dropped: no read wants them any more", n,
		       n == 1 ? "" : "es");
}

/* Attempts a fetch makes on a full disk, each after evicting what it needs and more. */
#define BD_REMOTE_FULL_RETRIES 16u

/*
 * Evict least recently used chunks worth four times len, to give a full
 * disk room (their space goes at the next sync's punches). Under R.mu.
 * @return whether anything was evicted.
 */
static bool free_disk(uint64_t len)
{
	uint64_t before = R.cache_bytes;

	while (before - R.cache_bytes < 4 * len && bd__evict_one())
		R.punch_pending = true;
	return R.cache_bytes < before;
}

/*
 * f could not write what came (werr): on a full disk, room is made and f
 * retried, as long as retries last and something could be evicted; else
 * it fails with the cause. Under R.mu.
 */
static void write_failed(bd_fetch *f, int werr, waiter **done)
{
	char msg[BP_S3_MSG_MAX];

	/* Not the bucket's fault: these retries are the disk's own, while eviction frees room. */
	if (werr == ENOSPC && f->full < BD_REMOTE_FULL_RETRIES && !R.cancel && free_disk(f->len)) {
		f->full++;
		f->due_ms = now_ms() + bp_s3_backoff_ms(f->full);
		f->next = R.retry;
		R.retry = f;
		R.stats.retries++;
		bd_log(LOG_NOTICE, "remote cache %s: the disk is full (ENOSPC) writing %s: evicted "
		       "chunks to make room, retrying", R.dir, f->obj->name);
		return;
	}
	snprintf(msg, sizeof(msg), "remote cache %s: writing the bytes of %s: %s%s", R.dir,
		 f->obj->name, strerror(werr), werr == ENOSPC ? ": the disk is full and nothing "
		 "more can be evicted: lower [cache] max_size to what its disk holds" : "");
	bd_log(LOG_WARNING, "%s", msg);
	conclude(f, -werr, msg, done);
}

/* A request finished with curl result code: done, retried later, or failed. Under R.mu. */
static void finished(bd_fetch *f, CURLcode code, waiter **done)
{
	bp_s3_error e = { 0 };
	int r;

	r = bp_s3_request_result(f->h, (int)code, &f->obj->loc, &e);
	off_wire(f);
	if (f->werr) {
		write_failed(f, f->werr, done);
		return;
	}
	if (r == 0 && f->got != f->len) {
		r = -EPROTO;
		e.retryable = true;
		snprintf(e.msg, sizeof(e.msg), "%s: %llu of %llu bytes of a range came",
			 f->obj->name, (unsigned long long)f->got, (unsigned long long)f->len);
	}
	if (r == 0) {
		conclude(f, 0, "", done);
		return;
	}
	if (e.retryable && f->attempt < R.retries && !R.cancel) {
		f->attempt++;
		f->due_ms = now_ms() + bp_s3_backoff_ms(f->attempt);
		f->next = R.retry;
		R.retry = f;
		R.stats.retries++;
		bd_log(LOG_DEBUG, "remote: %s: retry %u in %llu ms", e.msg, f->attempt,
		       (unsigned long long)(f->due_ms - now_ms()));
		return;
	}
	if (R.cancel && e.retryable)
		r = -ECANCELED;
	if (r == -ESTALE)
		snprintf(e.msg, sizeof(e.msg), "%s changed in the bucket since the session opened "
			 "(ETag %s is gone): open the dataset again for the new version",
			 f->obj->name, f->obj->etag);
	bd_log(LOG_WARNING, "remote: %s", e.msg);
	conclude(f, r, e.msg, done);
}

/* Fail every fetch (on the wire, queued, due to retry) with -ECANCELED: the daemon stops. Under R.mu. */
static void cancel_all(waiter **done)
{
	static const char why[] = "batchd is stopping";

	while (R.wire) {
		bd_fetch *f = R.wire;

		off_wire(f);
		conclude(f, -ECANCELED, why, done);
	}
	while (R.queue_head) {
		bd_fetch *f = R.queue_head;

		R.queue_head = f->next;
		R.queued--;
		user_of(f->uid)->queued--;
		R.reserved += f->len; /* conclude gives back what a started fetch holds */
		conclude(f, -ECANCELED, why, done);
	}
	R.queue_tail = NULL;
	while (R.retry) {
		bd_fetch *f = R.retry;

		R.retry = f->next;
		conclude(f, -ECANCELED, why, done);
	}
	bd__verify_cancel(why, done);
}

/* How long the fetcher may sleep: until the next retry is due, a second at most. */
static int poll_timeout(void)
{
	uint64_t now = now_ms(), t = 1000;

	for (bd_fetch *f = R.retry; f; f = f->next)
		if (f->due_ms <= now)
			return 0;
		else if (f->due_ms - now < t)
			t = f->due_ms - now;
	return (int)t;
}

static void *fetcher_main(void *arg)
{
	uint64_t last_sync = now_ms();
	(void)arg;

	for (;;) {
		waiter *done = NULL;
		CURLMsg *m;
		int running, left;
		bool stop, cancel, deletes, tick, verify;

		curl_multi_perform(R.multi, &running);
		pthread_mutex_lock(&R.mu);
		while ((m = curl_multi_info_read(R.multi, &left)))
			if (m->msg == CURLMSG_DONE) {
				bd_fetch *f = bp_s3_request_ctx(m->easy_handle);

				finished(f, m->data.result, &done);
			}
		cancel = R.cancel;
		if (cancel) {
			cancel_all(&done);
		} else {
			if (R.unwanted)
				drop_unwanted();
			start_fetches();
		}
		stop = R.stop;
		deletes = R.delete_pending || R.sync_asked;
		R.sync_asked = false;
		verify = R.verify != NULL;
		pthread_mutex_unlock(&R.mu);
		call_waiters(done);
		if (verify) {
			done = NULL;
			bd__verify_run(&done);
			call_waiters(done);
		}
		if (cancel) {
			/* Everything settled and told: bd_remote_cancel may return. */
			pthread_mutex_lock(&R.mu);
			R.cancelled = true;
			pthread_cond_broadcast(&R.quiet);
			pthread_mutex_unlock(&R.mu);
		}
		/* Files: punches after their maps, deletions, and every map each second. */
		tick = now_ms() - last_sync >= 1000;
		if (tick || stop || deletes || R.punch_pending)
			bd__remote_sync(tick || stop);
		if (tick)
			last_sync = now_ms();
		if (stop)
			break;
		curl_multi_poll(R.multi, NULL, 0, poll_timeout(), NULL);
	}
	return NULL;
}

/* ---- start, stop, stats ------------------------------------------------------------------ */

unsigned bd_remote_files_budget(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return 1u << 20;
	return rl.rlim_cur / 2 > 16 ? (unsigned)(rl.rlim_cur / 2) : 16;
}

int bd_remote_start(const bd_remote_opts *o, char *err, size_t errlen)
{
	int r;

	R.chunk = o->chunk;
	R.max_size = o->max_size;
	R.table_max = bd_remote_table_budget(o->max_size, o->chunk);
	R.files_max = bd_remote_files_budget();
	R.requests = o->requests ? o->requests : BD_REMOTE_DEFAULT_REQUESTS;
	R.retries = o->s3.retries;
	r = bp_s3_new(&o->s3, &R.s3, err, errlen);
	if (r < 0)
		return r;
	r = bd__remote_open_dir(o->dir, err, errlen);
	if (r < 0)
		goto fail_s3;
	R.multi = curl_multi_init();
	if (!R.multi) {
		r = -ENOMEM;
		snprintf(err, errlen, "remote: out of memory");
		goto fail_dir;
	}
	/* Reuse connections to the endpoint: as many as requests in flight. */
	curl_multi_setopt(R.multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)R.requests);
	curl_multi_setopt(R.multi, CURLMOPT_MAXCONNECTS, (long)R.requests);
	r = -pthread_create(&R.thread, NULL, fetcher_main, NULL);
	if (r < 0) {
		snprintf(err, errlen, "remote: cannot start the fetcher thread: %s", strerror(-r));
		goto fail_multi;
	}
	R.started = true;
	bd_log(LOG_INFO, "remote: cache %s: %llu MiB of %llu MiB in %zu objects, chunks of %u KiB, "
	       "%u requests in flight, credentials: %s", o->dir,
	       (unsigned long long)(R.cache_bytes >> 20), (unsigned long long)(R.max_size >> 20),
	       R.nobjects, R.chunk >> 10, R.requests, bp_s3_credentials_source(R.s3));
	return 0;
fail_multi:
	curl_multi_cleanup(R.multi);
	R.multi = NULL;
fail_dir:
	bd__remote_close_dir();
fail_s3:
	bp_s3_free(R.s3);
	R.s3 = NULL;
	return r;
}

void bd_remote_cancel(void)
{
	if (!R.started)
		return;
	pthread_mutex_lock(&R.mu);
	R.cancel = true;
	R.cancelled = false;
	pthread_mutex_unlock(&R.mu);
	bd__remote_wake();
	pthread_mutex_lock(&R.mu);
	while (!R.cancelled)
		pthread_cond_wait(&R.quiet, &R.mu);
	pthread_mutex_unlock(&R.mu);
}

void bd_remote_stop(void)
{
	if (!R.started)
		return;
	/* Nothing on the wire or waiting once this returns; then the fetcher's last sync. */
	bd_remote_cancel();
	pthread_mutex_lock(&R.mu);
	R.stop = true;
	pthread_mutex_unlock(&R.mu);
	bd__remote_wake();
	pthread_join(R.thread, NULL);
	curl_multi_cleanup(R.multi);
	R.multi = NULL;
	bd__remote_close_dir();
	bp_s3_free(R.s3);
	R.s3 = NULL;
	free(R.verify_buf);
	R.verify_buf = NULL;
	users_free();
	R.started = false;
}

bool bd_remote_enabled(void)
{
	return R.started;
}

const bp_s3 *bd_remote_s3(void)
{
	return R.s3;
}

const char *bd_remote_dir(void)
{
	return R.dir;
}

void bd_remote_count_failure(void)
{
	pthread_mutex_lock(&R.mu);
	R.stats.errors++;
	pthread_mutex_unlock(&R.mu);
}

void bd_remote_stats_get(bd_remote_stats *ret)
{
	pthread_mutex_lock(&R.mu);
	*ret = R.stats;
	ret->bytes = __atomic_load_n(&R.stats_bytes, __ATOMIC_RELAXED);
	/* The opens' HEADs and listings, retries included. */
	if (R.s3) {
		bp_s3_stats st;

		bp_s3_stats_get(R.s3, &st);
		ret->requests += st.requests;
		ret->retries += st.retries;
		ret->bytes += st.bytes;
	}
	ret->inflight = R.inflight;
	ret->queued = R.queued;
	ret->cache_bytes = R.cache_bytes;
	ret->max_size = R.max_size;
	ret->objects = R.nobjects;
	ret->files = __atomic_load_n(&R.files, __ATOMIC_RELAXED);
	ret->files_max = R.files_max;
	ret->table_bytes = __atomic_load_n(&R.table_bytes, __ATOMIC_RELAXED);
	ret->table_max = R.table_max;
	pthread_mutex_unlock(&R.mu);
}
