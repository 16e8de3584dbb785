/* SPDX-License-Identifier: MIT */
/*
 * ring_reader.c - the trainer's side of a stream's ring (lib/proto/ring.h):
 * bc_next takes published batches, bc_release gives them back, and the
 * bc_batch_ calls read them, through the read-only mapping or, for
 * bc_batch_*_writable, the trainer's private copy-on-write one, whose
 * copies each batch drops at release (drop_private).
 *
 * Taking a ready batch costs no system call: the daemon's release store of
 * `produced` makes the descriptor and record readable, and everything read
 * from the data memfd is checked against the mapping (and, on GPU streams,
 * the device slot) before it is handed out. Only a stream with nothing
 * ready sleeps, on the published pipe, after announcing it in the control
 * memfd; it also stops waiting, with -ENOBUFS, when the batches it holds
 * keep the daemon from publishing. Everything here runs on the thread
 * that uses the stream (batchclient.h), and raises no SIGPIPE there even
 * when the daemon is gone (poke_daemon).
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "batchclient.h"
#include "client_priv.h"
#include "ring.h"

#define HOLD_GRACE_MS 200     /* how long a stall caused by held batches must last */

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * The region entries of a record at rec for count samples: each inside
 * the payload, a scalar's exactly its dense array. The entries are read
 * from the daemon's mapping once here and used from ours (b->regions)
 * later; a region is checked again at use, so a daemon rewriting it
 * cannot lead us outside the payload either.
 */
static bool regions_ok(const bc_stream *s, const bp_ring_span *reg, const bp_ring_desc *d)
{
	for (uint32_t i = 0; i < s->schema.count + 1; i++) {
		int32_t k = s->lay.region[i < s->schema.count ? i : BP_FIELD_MAX];
		bp_ring_span x;
		size_t scalar;

		if (k < 0)
			continue;
		x = reg[k];
		if (x.offset > d->payload_size || x.size > d->payload_size - x.offset)
			return false;
		scalar = i < s->schema.count ? bp_field_scalar_size(s->schema.fields[i].type) : 0;
		if (scalar && x.size != (uint64_t)d->count * scalar)
			return false;
	}
	return true;
}

/* Fill b from descriptor d of batch seq, checking every offset against the mappings. */
static int batch_bind(bc_stream *s, bc_batch *b, const bp_ring_desc *d, uint64_t seq)
{
	uint64_t head = bc__record_head(s, d->count);
	const bp_ring_span *regions;
	void *dev = NULL;
	int r;

	if (d->count > s->r.batch_size || d->record >= s->r.data_size ||
	    head > s->r.data_size - d->record || d->payload > s->r.data_size ||
	    d->payload_size > s->r.data_size - d->payload)
		return -EBADMSG;
	regions = (const bp_ring_span *)(s->data + d->record + (uint64_t)d->count *
					 sizeof(bp_ring_sample));
	if (s->lay.regions && !regions_ok(s, regions, d))
		return -EBADMSG;
	b->skipped = NULL;
	b->nskipped = 0;
	if (s->skips) {
		/* After the tables: a count k and k ids, all before the payload. */
		const uint64_t *list = (const uint64_t *)(s->data + d->record + head);
		uint64_t k, room = d->payload > d->record + head ? d->payload - d->record - head : 0;

		if (room < sizeof(uint64_t))
			return -EBADMSG;
		k = __atomic_load_n(&list[0], __ATOMIC_RELAXED);
		if (k > s->r.batch_size - d->count || (k + 1) * sizeof(uint64_t) > room)
			return -EBADMSG;
		b->skipped = list + 1;
		b->nskipped = (uint32_t)k;
	}
	if ((r = bc__gpu_bind(s, d, seq, &dev)) < 0)
		return r;
	b->s = s;
	b->seq = seq;
	b->d = *d;
	b->table = (const bp_ring_sample *)(s->data + d->record);
	b->regions = s->lay.regions ? regions : NULL;
	b->values = s->lay.regions ? regions + s->lay.regions : NULL;
	b->payload = s->data + d->payload;
	b->dev = dev;
	b->stream = NULL;
	b->held = true;
	b->writable = false;
	return 0;
}

#define PAGEMAP_PRESENT (1ull << 63)
#define PAGEMAP_SWAPPED (1ull << 62)
#define PAGEMAP_FILE    (1ull << 61)  /* a page of the file (or shared), not a private copy */

/*
 * Whether any page of [lo, hi) in the writable mapping is a private copy
 * (present or swapped, and not the file's page), read from
 * /proc/self/pagemap. A range whose pages are all the file's needs no
 * madvise, which would also unmap the pages only read and make the next
 * batch there fault them in again. true when pagemap cannot tell.
 */
static bool has_copies(const bc_stream *s, uint64_t lo, uint64_t hi, uint64_t page)
{
	uint64_t ent[512];
	uint64_t first = (uint64_t)(uintptr_t)(s->wdata + lo) / page, pages = (hi - lo) / page;

	if (s->pagemap_fd < 0)
		return true;
	for (uint64_t i = 0; i < pages;) {
		uint64_t n = pages - i < 512 ? pages - i : 512;
		ssize_t got = pread(s->pagemap_fd, ent, n * sizeof(ent[0]),
				    (off_t)((first + i) * sizeof(ent[0])));

		if (got != (ssize_t)(n * sizeof(ent[0])))
			return true;
		for (uint64_t k = 0; k < n; k++)
			if ((ent[k] & (PAGEMAP_PRESENT | PAGEMAP_SWAPPED)) && !(ent[k] & PAGEMAP_FILE))
				return true;
		i += n;
	}
	return false;
}

/*
 * Drop the trainer's private copies of b's pages in the writable mapping,
 * so that it shows the daemon's bytes there again. A batch's bytes,
 * [record, payload + payload_size), share no page with another batch's:
 * records start on a BP_RING_RECORD_ALIGN boundary and stream_map maps
 * the writable view only where pages are no larger. The bounds were
 * checked against data_size by batch_bind; a daemon that lies in them can
 * only make the trainer lose its own writes to another batch it holds.
 */
static void drop_private(const bc_batch *b)
{
	const bc_stream *s = b->s;
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t lo = b->d.record < b->d.payload ? b->d.record : b->d.payload;
	uint64_t hi = b->d.payload + b->d.payload_size;
	uint64_t rec_end = b->d.record + bc__record_head(s, b->d.count);

	if (rec_end > hi)
		hi = rec_end;
	lo &= ~(page - 1);
	hi = (hi + page - 1) & ~(page - 1);
	/* madvise cannot fail on a range inside our own mapping (its end is page-rounded too). */
	if (has_copies(s, lo, hi, page))
		(void)madvise(s->wdata + lo, hi - lo, MADV_DONTNEED);
}

/*
 * Make b's writable view fresh, the first time one is asked for: pages a
 * write after an earlier bc_release privatised (the trainer kept a
 * pointer) are dropped, so the view starts as the daemon's bytes.
 * @return 0; -EINVAL for a released batch; the mapping's errno, with the
 * reason in the stream's error, when there is no writable view.
 */
static int make_writable(bc_batch *b)
{
	bc_stream *s = b->s;

	if (!b->held)
		return -EINVAL;
	if (!s->wdata) {
		snprintf(s->err, sizeof(s->err), "no writable view of the batches: %s; copy a batch "
			 "to write into it", s->wdata_err == -EOPNOTSUPP
			 ? "this machine's pages are larger than the ring's record alignment"
			 : strerror(-s->wdata_err));
		return s->wdata_err;
	}
	if (!b->writable) {
		drop_private(b);
		b->writable = true;
	}
	return 0;
}

/*
 * One byte into the released pipe, without SIGPIPE. The daemon made the
 * pipe (PROTOCOL.md), so it cannot be a socket that takes MSG_NOSIGNAL;
 * once the daemon has stopped or died, a plain write(2) would raise
 * SIGPIPE and kill a trainer that keeps the default action. So SIGPIPE is
 * blocked in this thread for the write, a SIGPIPE the write itself raised
 * is taken back with sigtimedwait, and the mask is restored: a SIGPIPE
 * that was pending before (for some other reason) is left alone, and other
 * threads are not touched. Costs three system calls, only on the wake-up
 * path (the daemon waits for room). @return 0, or negative errno: -EAGAIN
 * when the pipe is full, -EPIPE when nobody reads it any more.
 */
static int poke_daemon(int fd)
{
	static const struct timespec no_wait;
	sigset_t pipe_only, old, pending;
	bool was_pending;
	ssize_t n;
	int r;

	sigemptyset(&pipe_only);
	sigaddset(&pipe_only, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_only, &old); /* cannot fail: SIG_BLOCK, a valid set */
	was_pending = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE);
	do
		n = write(fd, "", 1);
	while (n < 0 && errno == EINTR);
	r = n < 0 ? -errno : 0;
	if (r == -EPIPE && !was_pending) {
		/* The write raised it for this thread: take it before unblocking. */
		while (sigtimedwait(&pipe_only, NULL, &no_wait) < 0 && errno == EINTR)
			;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return r;
}

/*
 * Hand slot seq back to the daemon, poking it if it waits for room. A
 * daemon that no longer reads the pipe is gone: s->daemon_gone, for
 * bc_next to say so.
 */
static void ring_release(bc_stream *s, uint64_t seq)
{
	/* seq_cst store, then seq_cst load: the Dekker pair of ring.h. */
	__atomic_store_n(&s->ctrl->release[seq % s->r.slots], seq + 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&s->ctrl->daemon_hungry, __ATOMIC_SEQ_CST)) {
		__atomic_store_n(&s->ctrl->daemon_hungry, 0, __ATOMIC_RELAXED);
		/* -EAGAIN: the pipe is full, the daemon has a wake-up pending anyway. */
		if (poke_daemon(s->released_fd) == -EPIPE)
			s->daemon_gone = true;
	}
}

/*
 * Why the daemon stopped the ring, in s->err: over whatever is there (the
 * reason of a batch that failed before, say), which is not why. @return
 * the errno it gave, or -ESHUTDOWN when it gave none that is one.
 */
static int stopped_error(bc_stream *s)
{
	int e = __atomic_load_n(&s->hdr->error, __ATOMIC_RELAXED);

	if (e >= 0 || e <= -4096)
		e = -ESHUTDOWN;
	snprintf(s->err, sizeof(s->err), "the daemon ended the stream: %s",
		 e == -EPROTO ? "ring protocol violation"
		 : e == -ETIME ? "lease expired: no batch released for [session] lease_timeout"
		 : e == -ESHUTDOWN ? "it is stopping" : strerror(-e));
	return e;
}

/* The daemon died or exited while the ring still ran: say so (why: how we know) in s->err. */
static int gone_error(bc_stream *s, const char *why)
{
	snprintf(s->err, sizeof(s->err), "the daemon is gone: %s", why);
	return -EPIPE;
}

/*
 * Report how long a bc_next that delivered a batch took, for the daemon's
 * metrics (stall time). Only this thread writes these fields.
 */
static void account_wait(bc_stream *s, uint64_t ns)
{
	unsigned b = 0;

	while (b < BP_RING_WAIT_BUCKETS - 1 && ns > BP_RING_WAIT_BOUND_NS(b))
		b++;
	__atomic_store_n(&s->ctrl->wait_ns, s->ctrl->wait_ns + ns, __ATOMIC_RELAXED);
	__atomic_store_n(&s->ctrl->waits, s->ctrl->waits + 1, __ATOMIC_RELAXED);
	__atomic_store_n(&s->ctrl->wait_hist[b], s->ctrl->wait_hist[b] + 1, __ATOMIC_RELAXED);
}

/* Step past batch s->consumed, taken or skipped; the daemon shows the count (informational). */
static void consume(bc_stream *s)
{
	s->consumed++;
	__atomic_store_n(&s->ctrl->consumed, s->consumed, __ATOMIC_RELAXED);
}

/*
 * A batch the daemon could not build (d, status < 0): keep its reason,
 * give its slot back and step past it. @return its status.
 */
static int skip_failed(bc_stream *s, const bp_ring_desc *d)
{
	snprintf(s->err, sizeof(s->err), "%.*s", (int)BP_RING_REASON_MAX - 1,
		 (const char *)(s->data + (d->record < s->r.data_size - BP_RING_REASON_MAX ?
					   d->record : 0)));
	ring_release(s, s->consumed);
	consume(s);
	return d->status > -4096 ? d->status : -EIO;
}

/*
 * Take batch s->consumed, which the daemon has published. @return 0 with
 * *ret set; BC_EPOCH_END, once, before the first batch of a new epoch
 * (nothing taken); a failed batch's status (stepped past); -ENOBUFS when
 * every slot is held; -EBADMSG for a descriptor that is not that batch's.
 */
static int take_published(bc_stream *s, bc_batch **ret)
{
	const bp_ring_desc *shared = (const bp_ring_desc *)(s->data +
		bp_ring_desc_offset(s->r.slots, s->consumed));
	/* A copy: the daemon can still write its own mapping, so every check is made on ours. */
	bp_ring_desc d = *shared;
	bc_batch *b;
	int r;

	if (d.seq != s->consumed)
		return -EBADMSG;
	if (d.epoch != s->epoch && !s->epoch_end_said) {
		s->epoch_end_said = true;
		return BC_EPOCH_END;
	}
	s->epoch = d.epoch;
	s->epoch_end_said = false;
	if (d.status < 0)
		return skip_failed(s, &d);
	if (s->held >= s->r.slots)
		return -ENOBUFS;
	b = &s->batches[s->consumed % s->r.slots];
	r = batch_bind(s, b, &d, s->consumed);
	if (r < 0)
		return r;
	s->held++;
	consume(s);
	*ret = b;
	return 0;
}

/*
 * Whether the batches we hold keep the daemon from publishing the next
 * one, so that waiting for it would never end. *stuck_since: when the
 * daemon was first seen waiting for room while we held batches (0: not).
 * @return 0 to wait, or -ENOBUFS.
 */
static int held_stall(bc_stream *s, int64_t *stuck_since)
{
	/* The daemon cannot publish into slots we hold. */
	if (s->held >= s->r.slots)
		return -ENOBUFS;
	/*
	 * Nor when it waits for room that only our held batches would free
	 * (records are reclaimed in order). It may be about to see a release
	 * of ours, so give it a moment before saying so.
	 */
	if (!s->held || !__atomic_load_n(&s->ctrl->daemon_hungry, __ATOMIC_SEQ_CST)) {
		*stuck_since = 0;
		return 0;
	}
	if (*stuck_since == 0) {
		*stuck_since = now_ms();
	} else if (now_ms() - *stuck_since >= HOLD_GRACE_MS) {
		snprintf(s->err, sizeof(s->err), "the stream waits for room that the %u batch%s "
			 "held would free: release batches (in order) first",
			 s->held, s->held == 1 ? "" : "es");
		return -ENOBUFS;
	}
	return 0;
}

/*
 * How long the next sleep may last: *ret_wait ms, -1 for no limit.
 * deadline: now_ms() at which timeout_ms (> 0) runs out. @return 0, or
 * -ETIMEDOUT when there is no time left to wait.
 */
static int wait_budget(const bc_stream *s, int timeout_ms, int64_t deadline, int *ret_wait)
{
	int wait = -1;

	if (timeout_ms == 0)
		return -ETIMEDOUT;
	if (timeout_ms > 0) {
		int64_t left = deadline - now_ms();

		if (left <= 0)
			return -ETIMEDOUT;
		wait = (int)left;
	}
	/* While holding batches, look again now and then: they may be the hold-up. */
	if (s->held && (wait < 0 || wait > HOLD_GRACE_MS / 4))
		wait = HOLD_GRACE_MS / 4;
	*ret_wait = wait;
	return 0;
}

/*
 * Sleep up to wait ms (-1: no limit) on the published pipe, and on the
 * socket for the daemon's hang-up. @return 0 to look at the ring again;
 * the stop's error, -EPIPE (the daemon is gone) or poll's errno.
 */
static int sleep_published(bc_stream *s, int wait)
{
	struct pollfd pf[2];
	char drain[64];

	/* Announce the sleep, then look again before sleeping (see ring.h). */
	__atomic_store_n(&s->ctrl->client_sleeping, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&s->hdr->produced, __ATOMIC_SEQ_CST) > s->consumed ||
	    __atomic_load_n(&s->hdr->state, __ATOMIC_SEQ_CST) != BP_RING_RUNNING) {
		__atomic_store_n(&s->ctrl->client_sleeping, 0, __ATOMIC_RELAXED);
		return 0;
	}
	pf[0] = (struct pollfd){ .fd = s->published_fd, .events = POLLIN };
	pf[1] = (struct pollfd){ .fd = s->c->fd, .events = 0 }; /* hang-up only */
	if (poll(pf, 2, wait) < 0 && errno != EINTR) {
		__atomic_store_n(&s->ctrl->client_sleeping, 0, __ATOMIC_RELAXED);
		return -errno;
	}
	__atomic_store_n(&s->ctrl->client_sleeping, 0, __ATOMIC_RELAXED);
	if (pf[0].revents & POLLIN) {
		if (read(s->published_fd, drain, sizeof(drain)) < 0) {
			/* Drained by an earlier wake-up: harmless. */
		}
	}
	if ((pf[1].revents & (POLLHUP | POLLERR)) &&
	    __atomic_load_n(&s->hdr->produced, __ATOMIC_ACQUIRE) <= s->consumed) {
		if (__atomic_load_n(&s->hdr->state, __ATOMIC_ACQUIRE) != BP_RING_RUNNING)
			return stopped_error(s);
		return gone_error(s, "it hung up the connection");
	}
	return 0;
}

/* bc_next, less the accounting: look at the ring, and sleep while nothing is there. */
static int next_batch(bc_stream *s, bc_batch **ret, int timeout_ms)
{
	int64_t deadline = timeout_ms > 0 ? now_ms() + timeout_ms : 0, stuck_since = 0;

	for (;;) {
		int wait, r;

		/* s->err still says which batch could not be handed back, and why. */
		if (s->gpu_broken)
			return -EIO;
		/* Acquire: pairs with the daemon's release store, the batch is whole (ring.h). */
		if (__atomic_load_n(&s->hdr->produced, __ATOMIC_ACQUIRE) > s->consumed)
			return take_published(s, ret);
		if (__atomic_load_n(&s->hdr->state, __ATOMIC_ACQUIRE) != BP_RING_RUNNING)
			return stopped_error(s);
		/* Nothing more will come: do not wait for a hang-up (timeout 0 would never). */
		if (s->daemon_gone)
			return gone_error(s, "it no longer reads the released pipe");
		if ((r = held_stall(s, &stuck_since)) < 0 ||
		    (r = wait_budget(s, timeout_ms, deadline, &wait)) < 0 ||
		    (r = sleep_published(s, wait)) < 0)
			return r;
	}
}

int bc_next(bc_stream *s, bc_batch **ret, int timeout_ms)
{
	uint64_t t0;
	int r;

	if (!s || !ret)
		return -EINVAL;
	t0 = now_ns();
	r = next_batch(s, ret, timeout_ms);
	if (r == 0)
		account_wait(s, now_ns() - t0);
	return r;
}

int bc_release(bc_batch *b)
{
	bc_stream *s;
	int r = 0;

	if (!b || !b->held)
		return -EINVAL;
	s = b->s;
	/*
	 * The event before the mark: once the daemon sees the mark it waits
	 * for the event, which must then stand for our last use. When neither
	 * the record nor draining the stream works, the mark is never stored:
	 * a slot kept from the daemon only stops this stream, a slot handed
	 * back early lets it overwrite memory a kernel still reads.
	 */
	if (b->dev)
		r = bc__gpu_record_release(b);
	/* Before the mark: the daemon may reuse the memory right after it. */
	if (b->writable) {
		drop_private(b);
		b->writable = false;
	}
	b->held = false;
	s->held--;
	if (r < 0) {
		s->gpu_broken = true;
		return r;
	}
	ring_release(s, b->seq);
	return 0;
}

int bc_batch_sync(bc_batch *b)
{
	if (!b || !b->held || !b->dev)
		return -EINVAL;
	return bc__gpu_sync(b);
}

/* The accessors take NULL (what a failed bc_next leaves in a NULL-initialised pointer). */

void *bc_batch_device_data(const bc_batch *b, size_t *ret_len)
{
	void *dev = b ? b->dev : NULL;

	if (ret_len)
		*ret_len = dev ? (size_t)b->d.payload_size : 0;
	return dev;
}

uint64_t bc_batch_epoch(const bc_batch *b) { return b ? b->d.epoch : 0; }
uint64_t bc_batch_index(const bc_batch *b) { return b ? b->d.batch : 0; }
uint32_t bc_batch_count(const bc_batch *b) { return b ? b->d.count : 0; }

uint32_t bc_batch_skipped(const bc_batch *b, const uint64_t **ret_ids)
{
	if (ret_ids)
		*ret_ids = b ? b->skipped : NULL;
	return b ? b->nskipped : 0;
}

uint64_t bc_batch_sample_id(const bc_batch *b, uint32_t i)
{
	return b && i < b->d.count ? b->table[i].id : UINT64_MAX;
}

int bc_batch_sample(const bc_batch *b, uint32_t i, const void **ret_data, size_t *ret_len)
{
	const bp_ring_sample *t;

	if (!b || !ret_data || !ret_len)
		return -EINVAL;
	if (i >= b->d.count)
		return -ERANGE;
	t = &b->table[i];
	if (t->offset > b->d.payload_size || t->size > b->d.payload_size - t->offset)
		return -EBADMSG;
	*ret_data = b->payload + t->offset;
	*ret_len = (size_t)t->size;
	return 0;
}

/*
 * Field f's region of b's payload (f = BP_FIELD_MAX: the keys'): the
 * whole payload for a plain record. @return 0, -ERANGE, -ENODATA, or
 * -EBADMSG for one outside the payload (the daemon's mapping changed).
 */
static int region(const bc_batch *b, uint32_t f, bp_ring_span *ret)
{
	const bc_stream *s = b->s;
	bp_ring_span x;
	int32_t k;

	if (f >= s->schema.count && f != BP_FIELD_MAX)
		return -ERANGE;
	k = s->lay.region[f];
	if (k < 0)
		return -ENODATA;
	if (!b->regions) {
		*ret = (bp_ring_span){ .offset = 0, .size = b->d.payload_size };
		return 0;
	}
	x = b->regions[k];
	if (x.offset > b->d.payload_size || x.size > b->d.payload_size - x.offset)
		return -EBADMSG;
	*ret = x;
	return 0;
}

/* Sample i's span of field f (a bytes or str field, or the keys), checked to lie in its region. */
static int value(const bc_batch *b, uint32_t f, uint32_t i, bp_ring_span *ret)
{
	const bc_stream *s = b->s;
	bp_ring_span reg, x;
	int r = region(b, f, &reg);

	if (r < 0)
		return r;
	if ((int32_t)f == s->lay.lead) {
		x = (bp_ring_span){ .offset = b->table[i].offset, .size = b->table[i].size };
	} else if (s->lay.table[f] >= 0 && b->values) {
		x = b->values[(uint64_t)s->lay.table[f] * b->d.count + i];
	} else {
		return -EBADMSG;
	}
	if (x.offset < reg.offset || x.offset - reg.offset > reg.size ||
	    x.size > reg.size - (x.offset - reg.offset))
		return -EBADMSG;
	*ret = x;
	return 0;
}

const void *bc_batch_data(const bc_batch *b, size_t *ret_len)
{
	bp_ring_span lead = { 0 };

	if (b && b->s->lay.lead >= 0 && region(b, (uint32_t)b->s->lay.lead, &lead) < 0)
		lead.size = 0;
	if (ret_len)
		*ret_len = (size_t)lead.size;
	return b ? b->payload + lead.offset : NULL;
}

int bc_batch_field(const bc_batch *b, uint32_t field, const void **ret_data, size_t *ret_len)
{
	bp_ring_span reg;
	int r;

	if (!b || !ret_data || !ret_len)
		return -EINVAL;
	if (field >= b->s->schema.count)
		return -ERANGE;
	if ((r = region(b, field, &reg)) < 0)
		return r;
	*ret_data = b->payload + reg.offset;
	*ret_len = (size_t)reg.size;
	return 0;
}

/* p, a pointer into b's read-only view, in the writable one. */
static void *in_writable(const bc_batch *b, const void *p)
{
	return b->s->wdata + ((const uint8_t *)p - b->s->data);
}

int bc_batch_data_writable(bc_batch *b, void **ret_data, size_t *ret_len)
{
	const void *p;
	size_t n;
	int r;

	if (!b || !ret_data || !ret_len)
		return -EINVAL;
	if ((r = make_writable(b)) < 0)
		return r;
	p = bc_batch_data(b, &n);
	*ret_data = in_writable(b, p);
	*ret_len = n;
	return 0;
}

int bc_batch_field_writable(bc_batch *b, uint32_t field, void **ret_data, size_t *ret_len)
{
	const void *p;
	size_t n;
	int r;

	if (!b || !ret_data || !ret_len)
		return -EINVAL;
	if ((r = bc_batch_field(b, field, &p, &n)) < 0 || (r = make_writable(b)) < 0)
		return r;
	*ret_data = in_writable(b, p);
	*ret_len = n;
	return 0;
}

int bc_batch_field_sample(const bc_batch *b, uint32_t field, uint32_t i, const void **ret_data,
			  size_t *ret_len)
{
	bp_ring_span x;
	size_t scalar;
	int r;

	if (!b || !ret_data || !ret_len)
		return -EINVAL;
	if (field >= b->s->schema.count || i >= b->d.count)
		return -ERANGE;
	scalar = bp_field_scalar_size(b->s->schema.fields[field].type);
	if (scalar) {
		/* Its region is exactly count values (regions_ok). */
		if ((r = region(b, field, &x)) < 0)
			return r;
		if (x.size != (uint64_t)b->d.count * scalar)
			return -EBADMSG;
		x = (bp_ring_span){ .offset = x.offset + (uint64_t)i * scalar, .size = scalar };
	} else if ((r = value(b, field, i, &x)) < 0) {
		return r;
	}
	*ret_data = b->payload + x.offset;
	*ret_len = (size_t)x.size;
	return 0;
}

int bc_batch_sample_key(const bc_batch *b, uint32_t i, const char **ret_key, size_t *ret_len)
{
	bp_ring_span x;
	int r;

	if (!b || !ret_key || !ret_len)
		return -EINVAL;
	if (!b->s->keys)
		return -ENODATA;
	if (i >= b->d.count)
		return -ERANGE;
	if ((r = value(b, BP_FIELD_MAX, i, &x)) < 0)
		return r;
	*ret_key = (const char *)b->payload + x.offset;
	*ret_len = (size_t)x.size;
	return 0;
}

void bc_stream_position(const bc_stream *s, uint64_t *ret_epoch, uint64_t *ret_batch)
{
	uint64_t epoch = 0, batch = 0;

	/*
	 * The next batch is seq `consumed` of a stream that began at
	 * (start_epoch, start_batch) and takes every stride-th; READY's
	 * batches_per_epoch is never 0 (bp_msg_ready_decode).
	 */
	if (s)
		bp_schedule_locate(s->start_epoch, s->first_batches, s->r.batches_per_epoch,
				   s->start_batch + s->consumed * s->stride, &epoch, &batch);
	if (ret_epoch)
		*ret_epoch = epoch;
	if (ret_batch)
		*ret_batch = batch;
}
