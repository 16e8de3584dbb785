/* SPDX-License-Identifier: MIT */
/*
 * io.c - the block-read engine of one I/O thread: one io_uring, or pread(2)
 * when io_uring is unavailable (see io.h for the contract).
 *
 * Why it is shaped this way: a thread queues a whole batch of block reads,
 * hands them to the kernel in one io_uring_enter, then takes completions
 * one at a time so each block goes on to decode while the rest are in
 * flight.
 * Everything that makes a read incomplete (short reads from io-wq or at a
 * buffer boundary, -EAGAIN, -EINTR) is absorbed here by resubmitting the
 * remainder, so the caller only ever sees a whole block, an EOF-short
 * block, or an errno. The same bookkeeping (settle) serves both
 * engines, so the pread fallback behaves exactly like the ring.
 *
 * Ring setup follows fio: ask for CQSIZE (CQ twice the SQ, so the CQ can
 * never overflow while at most queue_depth requests are in flight),
 * SUBMIT_ALL (a request that fails at submission, e.g. a bad fd, does not
 * hold back the rest of the batch), COOP_TASKRUN and SINGLE_ISSUER|
 * DEFER_TASKRUN (completions are run when the owner thread enters the
 * kernel to wait, with no IPI or signal interrupting it), dropping one flag
 * at a time while older kernels answer -EINVAL.
 */
#include "io.h"

#include <errno.h>
#include <poll.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <liburing.h>

/* liburing 2.3 defines these; older headers may not. */
#ifndef IORING_SETUP_CQSIZE
#define IORING_SETUP_CQSIZE (1U << 3)
#endif
#ifndef IORING_SETUP_SUBMIT_ALL
#define IORING_SETUP_SUBMIT_ALL (1U << 7)
#endif
#ifndef IORING_SETUP_COOP_TASKRUN
#define IORING_SETUP_COOP_TASKRUN (1U << 8)
#endif
#ifndef IORING_SETUP_SINGLE_ISSUER
#define IORING_SETUP_SINGLE_ISSUER (1U << 12)
#endif
#ifndef IORING_SETUP_DEFER_TASKRUN
#define IORING_SETUP_DEFER_TASKRUN (1U << 13)
#endif

/* -EAGAIN/-EINTR in a row, without a byte of progress, before giving up. */
#define MAX_RETRIES 64u

struct bd_io {
	bd_io_engine engine;       /* BD_IO_URING or BD_IO_PREAD */
	unsigned depth;
	unsigned inflight;         /* submitted, not yet returned by wait */
	unsigned setup_flags;

	struct iovec *bufs;        /* registered buffers (copy), or NULL */
	unsigned nbufs;
	int *file_slot;            /* registered files: fd -> slot, -1 if none; or NULL */
	unsigned nfile_slot;       /* entries of file_slot (largest fd + 1) */

	/* test hooks, see bd_io_opts */
	uint32_t max_read;
	unsigned fault_every;
	int fault_errno;
	unsigned long completions; /* raw completions seen, for fault_every */

	/* BD_IO_URING */
	struct io_uring ring;
	bool ring_live;
	int watch_fd;              /* bd_io_watch: -1 when none */
	bool watch_armed;          /* a poll on watch_fd is in the ring */
	char watch_token;          /* its user_data points here */

	/* BD_IO_PREAD: FIFO of queued requests, depth slots */
	bd_io_req **fifo;
	unsigned head, count;
};

/* ---- shared bookkeeping ------------------------------------------------- */

static uint32_t remaining(const bd_io_req *req)
{
	return req->len - req->priv_done;
}

/* Size of the next read of @req: the remainder, capped by the test hook. */
static uint32_t chunk(const bd_io *io, const bd_io_req *req)
{
	uint32_t n = remaining(req);

	if (io->max_read && n > io->max_read)
		n = io->max_read;
	return n;
}

/* Where the next read of @req lands; never does arithmetic on a NULL buf. */
static uint8_t *cursor(const bd_io_req *req)
{
	return req->priv_done ? req->buf + req->priv_done : req->buf;
}

/* Whether @req lies wholly inside registered buffer buf_index. */
static bool fixed_buf(const bd_io *io, const bd_io_req *req)
{
	const struct iovec *v;
	uintptr_t base, p;

	if (req->buf_index < 0 || (unsigned)req->buf_index >= io->nbufs)
		return false;
	v = &io->bufs[req->buf_index];
	base = (uintptr_t)v->iov_base;
	p = (uintptr_t)req->buf;
	return p >= base && p - base <= v->iov_len &&
	       req->len <= v->iov_len - (p - base);
}

/* The fixed-file slot of @fd, or -1 when it is not registered. */
static int fixed_file(const bd_io *io, int fd)
{
	if (fd < 0 || (unsigned)fd >= io->nfile_slot)
		return -1;
	return io->file_slot[fd];
}

/*
 * Folds one raw result (bytes or -errno, as read(2) or a CQE gives it) into
 * @req. Returns true when @req is finished and req->result is set; false
 * when the remainder must be read again.
 */
static bool settle(bd_io *io, bd_io_req *req, int32_t res)
{
	if (io->fault_every && ++io->completions % io->fault_every == 0)
		res = -io->fault_errno;

	if (res == -EAGAIN || res == -EINTR) {
		if (++req->priv_retries <= MAX_RETRIES)
			return false;
		req->result = res;
		return true;
	}
	if (res < 0) {
		req->result = res;
		return true;
	}
	if (res == 0) {
		/* End of file: the request is done with what it has. */
		req->result = (int32_t)req->priv_done;
		return true;
	}
	/* A kernel never returns more than asked; clamp rather than overrun. */
	if ((uint32_t)res > remaining(req))
		res = (int32_t)remaining(req);
	req->priv_retries = 0;
	req->priv_done += (uint32_t)res;
	if (req->priv_done < req->len)
		return false;
	req->result = (int32_t)req->priv_done;
	return true;
}

/* ---- io_uring ----------------------------------------------------------- */

/*
 * Creates the ring, dropping one setup flag at a time (in this order) for
 * as long as the kernel answers -EINVAL. Any other error ends the attempt.
 */
static int uring_setup(bd_io *io)
{
	static const unsigned drop[] = {
		IORING_SETUP_DEFER_TASKRUN,
		IORING_SETUP_SINGLE_ISSUER,
		IORING_SETUP_COOP_TASKRUN,
		IORING_SETUP_SUBMIT_ALL,
		IORING_SETUP_CQSIZE,
	};
	unsigned flags = IORING_SETUP_CQSIZE | IORING_SETUP_SUBMIT_ALL |
			 IORING_SETUP_COOP_TASKRUN | IORING_SETUP_SINGLE_ISSUER |
			 IORING_SETUP_DEFER_TASKRUN;
	size_t i = 0;
	int r;

	for (;;) {
		struct io_uring_params p;

		memset(&p, 0, sizeof(p));
		p.flags = flags;
		p.cq_entries = 2 * io->depth;
		r = io_uring_queue_init_params(io->depth, &io->ring, &p);
		if (r == 0)
			break;
		if (r != -EINVAL || i == sizeof(drop) / sizeof(drop[0]))
			return r;
		flags &= ~drop[i++];
	}
	io->ring_live = true;
	io->setup_flags = io->ring.flags;
	/*
	 * Optional: saves an fd lookup per io_uring_enter. The registration
	 * belongs to this thread, which is one more reason every call must
	 * come from the owner. Failure (kernel < 5.18) changes nothing else.
	 */
	(void)io_uring_register_ring_fd(&io->ring);
	return 0;
}

/* Prepares the next read of @req in the SQ; the kernel sees it at submit. */
static int uring_queue(bd_io *io, bd_io_req *req)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);
	int slot = fixed_file(io, req->fd), r;

	if (!sqe) {
		/*
		 * The SQ has queue_depth (rounded up) slots and each request
		 * holds at most one, so this is only a safety net.
		 */
		r = io_uring_submit(&io->ring);
		if (r < 0)
			return r;
		sqe = io_uring_get_sqe(&io->ring);
		if (!sqe)
			return -EBUSY;
	}
	if (fixed_buf(io, req))
		io_uring_prep_read_fixed(sqe, slot >= 0 ? slot : req->fd,
					 cursor(req), chunk(io, req),
					 req->offset + req->priv_done,
					 req->buf_index);
	else
		io_uring_prep_read(sqe, slot >= 0 ? slot : req->fd,
				   cursor(req), chunk(io, req),
				   req->offset + req->priv_done);
	if (slot >= 0)
		sqe->flags |= IOSQE_FIXED_FILE;
	io_uring_sqe_set_data(sqe, req);
	return 0;
}

/*
 * Hands queued SQEs to the kernel and, when no CQE is ready, waits for one.
 * With DEFER_TASKRUN the CQ stays empty until we enter with GETEVENTS,
 * which submit_and_wait(1) does.
 */
static int uring_enter(bd_io *io)
{
	unsigned want = io_uring_cq_ready(&io->ring) ? 0 : 1;
	int r;

	if (!want && !io_uring_sq_ready(&io->ring))
		return 0;
	r = io_uring_submit_and_wait(&io->ring, want);
	if (r >= 0 || r == -EINTR)
		return 0;
	/*
	 * -EAGAIN/-EBUSY: the kernel cannot take more submissions right now.
	 * If some of ours are already in the kernel, wait for one of them
	 * without submitting; the SQ is retried on the next round.
	 */
	if ((r == -EAGAIN || r == -EBUSY) &&
	    io->inflight > io_uring_sq_ready(&io->ring)) {
		struct io_uring_cqe *cqe;

		r = io_uring_wait_cqe(&io->ring, &cqe);
		return r == -EINTR ? 0 : r;
	}
	return r;
}

/* Keep a one-shot poll on the watched fd in the ring while we wait. */
static void uring_arm_watch(bd_io *io)
{
	struct io_uring_sqe *sqe;

	if (io->watch_fd < 0 || io->watch_armed)
		return;
	sqe = io_uring_get_sqe(&io->ring);
	if (!sqe)
		return; /* SQ full of reads: their completions wake us anyway */
	io_uring_prep_poll_add(sqe, io->watch_fd, POLLIN);
	io_uring_sqe_set_data(sqe, &io->watch_token);
	io->watch_armed = true;
}

/*
 * Takes one finished request among the CQEs already posted, without
 * entering the kernel to wait. A request needing another read is requeued
 * and submitted at once (a short read must not sit in the SQ while the
 * caller works). @return 1 and *ret_req; 0 when no finished request is
 * ready; -EAGAIN when the watched fd's poll completed.
 */
static int uring_take(bd_io *io, bd_io_req **ret_req)
{
	struct io_uring_cqe *cqe;

	while (io_uring_peek_cqe(&io->ring, &cqe) == 0 && cqe) {
		bd_io_req *req = io_uring_cqe_get_data(cqe);
		int32_t res = cqe->res;
		int r;

		io_uring_cqe_seen(&io->ring, cqe);
		if ((void *)req == &io->watch_token) {
			io->watch_armed = false;
			return -EAGAIN;
		}
		if (!settle(io, req, res)) {
			r = uring_queue(io, req);
			if (r == 0) {
				/*
				 * Queued: the request is the kernel's again, whatever
				 * this submit says; one that fails leaves the SQE for
				 * the next enter, which retries it or reports the error.
				 */
				(void)io_uring_submit(&io->ring);
				continue;
			}
			req->result = r;
		}
		io->inflight--;
		*ret_req = req;
		return 1;
	}
	return 0;
}

/* Enter the kernel until a request is finished (see uring_take). */
static int uring_wait(bd_io *io, bd_io_req **ret_req)
{
	for (;;) {
		int r;

		uring_arm_watch(io);
		r = uring_enter(io);
		if (r < 0)
			return r;
		r = uring_take(io, ret_req);
		if (r)
			return r < 0 ? r : 0;
	}
}

/* ---- pread -------------------------------------------------------------- */

static int pread_wait(bd_io *io, bd_io_req **ret_req)
{
	bd_io_req *req = io->fifo[io->head];

	io->head = (io->head + 1) % io->depth;
	io->count--;
	for (;;) {
		ssize_t n = pread(req->fd, cursor(req), chunk(io, req),
				  (off_t)(req->offset + req->priv_done));

		if (settle(io, req, n < 0 ? -errno : (int32_t)n))
			break;
	}
	io->inflight--;
	*ret_req = req;
	return 0;
}

/* ---- public ------------------------------------------------------------- */

int bd_io_new(const bd_io_opts *o, bd_io **ret_io)
{
	static const bd_io_opts defaults = { .engine = BD_IO_AUTO };
	bd_io *io;
	int r = 0;

	if (!o)
		o = &defaults;
	if (!ret_io || o->engine > BD_IO_PREAD ||
	    o->queue_depth > BD_IO_MAX_DEPTH || o->force_setup_error < 0 ||
	    o->fault_errno < 0)
		return -EINVAL;

	io = calloc(1, sizeof(*io));
	if (!io)
		return -ENOMEM;
	io->depth = o->queue_depth ? o->queue_depth : BD_IO_DEFAULT_DEPTH;
	io->watch_fd = -1;
	io->max_read = o->fault_max_read;
	io->fault_every = o->fault_every;
	io->fault_errno = o->fault_errno;

	if (o->engine != BD_IO_PREAD) {
		r = o->force_setup_error ? -o->force_setup_error
					 : uring_setup(io);
		if (r == 0)
			io->engine = BD_IO_URING;
		else if (o->engine == BD_IO_URING)
			goto fail_free;
	}
	if (!io->ring_live) {
		io->engine = BD_IO_PREAD;
		io->fifo = calloc(io->depth, sizeof(*io->fifo));
		if (!io->fifo) {
			r = -ENOMEM;
			goto fail_free;
		}
	}
	*ret_io = io;
	return 0;

fail_free:
	free(io);
	return r;
}

void bd_io_free(bd_io *io)
{
	bd_io_req *req;

	if (!io)
		return;
	/* The kernel may still write into callers' buffers: let it finish. */
	io->watch_fd = -1;
	while (io->inflight) {
		int r = bd_io_wait(io, &req);

		if (r != 0 && r != -EAGAIN)
			break;
	}
	if (io->ring_live)
		io_uring_queue_exit(&io->ring);
	free(io->fifo);
	free(io->bufs);
	free(io->file_slot);
	free(io);
}

bd_io_engine bd_io_engine_of(const bd_io *io)
{
	return io->engine;
}

const char *bd_io_engine_name(bd_io_engine e)
{
	switch (e) {
	case BD_IO_AUTO:
		return "auto";
	case BD_IO_URING:
		return "io_uring";
	case BD_IO_PREAD:
		return "pread";
	}
	return "unknown";
}

unsigned bd_io_setup_flags(const bd_io *io)
{
	return io->setup_flags;
}

int bd_io_register(bd_io *io, const struct iovec *iov, unsigned n)
{
	struct iovec *copy;
	unsigned i;
	int r;

	if (!iov || n == 0 || n > BD_IO_MAX_BUFFERS)
		return -EINVAL;
	for (i = 0; i < n; i++)
		if (!iov[i].iov_base || iov[i].iov_len == 0)
			return -EINVAL;
	if (io->bufs || io->inflight)
		return -EBUSY;

	copy = malloc(n * sizeof(*copy));
	if (!copy)
		return -ENOMEM;
	memcpy(copy, iov, n * sizeof(*copy));
	if (io->ring_live) {
		r = io_uring_register_buffers(&io->ring, copy, n);
		if (r < 0) {
			free(copy);
			return r;
		}
	}
	io->bufs = copy;
	io->nbufs = n;
	return 0;
}

int bd_io_register_files(bd_io *io, const int *fds, unsigned n)
{
	unsigned i, top = 0;
	int *slot;
	int r;

	if (!fds || n == 0 || n > BD_IO_MAX_FILES)
		return -EINVAL;
	for (i = 0; i < n; i++) {
		if (fds[i] < 0)
			return -EINVAL;
		if ((unsigned)fds[i] >= top)
			top = (unsigned)fds[i] + 1;
	}
	if (io->file_slot || io->inflight)
		return -EBUSY;

	slot = malloc(top * sizeof(*slot));
	if (!slot)
		return -ENOMEM;
	for (i = 0; i < top; i++)
		slot[i] = -1;
	for (i = 0; i < n; i++) {
		if (slot[fds[i]] >= 0) {
			free(slot);
			return -EINVAL;
		}
		slot[fds[i]] = (int)i;
	}
	if (io->ring_live) {
		r = io_uring_register_files(&io->ring, fds, n);
		if (r < 0) {
			free(slot);
			return r;
		}
	}
	io->file_slot = slot;
	io->nfile_slot = top;
	return 0;
}

int bd_io_submit(bd_io *io, bd_io_req *req)
{
	int r;

	if (!req || req->len > INT32_MAX ||
	    req->offset > (uint64_t)INT64_MAX - req->len ||
	    (!req->buf && req->len) ||
	    (req->buf_index >= 0 && (unsigned)req->buf_index >= io->nbufs))
		return -EINVAL;
	if (io->inflight >= io->depth)
		return -EBUSY;

	req->priv_done = 0;
	req->priv_retries = 0;
	if (io->engine == BD_IO_URING) {
		r = uring_queue(io, req);
		if (r < 0)
			return r;
	} else {
		io->fifo[(io->head + io->count) % io->depth] = req;
		io->count++;
	}
	io->inflight++;
	return 0;
}

int bd_io_watch(bd_io *io, int fd)
{
	if (io->engine != BD_IO_URING)
		return -EOPNOTSUPP;
	io->watch_fd = fd;
	return 0;
}

int bd_io_wait(bd_io *io, bd_io_req **ret_req)
{
	if (!io->inflight)
		return -ENOENT;
	if (io->engine == BD_IO_URING)
		return uring_wait(io, ret_req);
	return pread_wait(io, ret_req);
}

int bd_io_wait_many(bd_io *io, bd_io_req **reqs, unsigned max)
{
	unsigned n = 1;
	int r;

	if (!reqs || max == 0)
		return -EINVAL;
	r = bd_io_wait(io, &reqs[0]);
	if (r < 0)
		return r;
	while (io->engine == BD_IO_URING && n < max && io->inflight) {
		r = uring_take(io, &reqs[n]);
		if (r <= 0)
			break;  /* none ready, or the watch: reported next call */
		n++;
	}
	return (int)n;
}

int bd_io_poll(bd_io *io, bd_io_req **ret_req)
{
	int r;

	if (!io->inflight)
		return -ENOENT;
	if (io->engine != BD_IO_URING) {
		r = pread_wait(io, ret_req);
		return r < 0 ? r : 1;
	}
	/* What is posted already first: no system call. */
	r = uring_take(io, ret_req);
	if (r)
		return r;
	/* GETEVENTS too: with DEFER_TASKRUN nothing is posted until we enter for it. */
	r = io_uring_submit_and_get_events(&io->ring);
	if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY)
		return r;
	return uring_take(io, ret_req);
}

unsigned bd_io_inflight(const bd_io *io)
{
	return io->inflight;
}

/* ---- O_DIRECT alignment -------------------------------------------------- */

/*
 * The kernel's struct statx (include/uapi/linux/stat.h), restated so the
 * DIO fields are there whatever glibc's or the kernel headers' vintage:
 * the layout is ABI and only ever grows into __spare3.
 */
struct dio_statx {
	uint32_t mask;
	uint32_t blksize;
	uint64_t attributes;
	uint32_t nlink, uid, gid;
	uint16_t mode, spare0;
	uint64_t ino, size, blocks, attributes_mask;
	struct { int64_t sec; uint32_t nsec; int32_t reserved; } ts[4];
	uint32_t rdev_major, rdev_minor, dev_major, dev_minor;
	uint64_t mnt_id;
	uint32_t dio_mem_align;
	uint32_t dio_offset_align;
	uint64_t spare3[12];
};
_Static_assert(offsetof(struct dio_statx, mnt_id) == 144, "statx layout");
_Static_assert(offsetof(struct dio_statx, dio_mem_align) == 152, "statx layout");
_Static_assert(offsetof(struct dio_statx, dio_offset_align) == 156, "statx layout");
_Static_assert(sizeof(struct dio_statx) == 256, "statx layout");

#define DIOALIGN_MASK 0x2000u
#define DIO_FALLBACK 4096u

static bool pow2(uint32_t v)
{
	return v && !(v & (v - 1));
}

int bd_io_dio_align(int fd, uint32_t *ret_mem_align, uint32_t *ret_offset_align)
{
	uint32_t mem = DIO_FALLBACK, off = DIO_FALLBACK;
	struct stat st;

	/* fstat first: it gives -EBADF for a bad fd even without statx. */
	if (fstat(fd, &st) < 0)
		return -errno;
#ifdef SYS_statx
	{
		struct dio_statx stx;

		memset(&stx, 0, sizeof(stx));
		if (syscall(SYS_statx, fd, "", AT_EMPTY_PATH,
			    DIOALIGN_MASK, &stx) == 0 &&
		    (stx.mask & DIOALIGN_MASK)) {
			/* Reported, and zero: no O_DIRECT for this file. */
			if (!stx.dio_offset_align || !stx.dio_mem_align)
				return -EOPNOTSUPP;
			if (pow2(stx.dio_mem_align) &&
			    pow2(stx.dio_offset_align)) {
				mem = stx.dio_mem_align;
				off = stx.dio_offset_align;
			}
		}
		/* statx missing (ENOSYS) or silent on DIO: the fallback. */
	}
#endif
	if (ret_mem_align)
		*ret_mem_align = mem;
	if (ret_offset_align)
		*ret_offset_align = off;
	return 0;
}
