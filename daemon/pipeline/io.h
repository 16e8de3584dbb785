/* SPDX-License-Identifier: MIT */
/*
 * io.h - the block-read engine of one I/O thread (docs/architecture.md, "Read and
 * decode"; the threads are in io_thread.c).
 *
 * Why it exists: an I/O thread queues every block read it has room for,
 * then takes completions one by one and passes each block on to the decode
 * workers while the others are still in flight. The engine hides how the
 * reads happen: an io_uring per thread when the kernel allows it, else
 * plain pread(2) done on the thread itself (io_uring refused by seccomp or
 * kernel.io_uring_disabled gives the same results, only slower). Either
 * way the caller sees the same contract: a request completes once, with
 * all `len` bytes, or fewer only at end of file, or a negative errno.
 * Short reads, -EAGAIN and -EINTR are handled inside and never reach the
 * caller.
 *
 * Thread rules: a bd_io belongs to one thread, the one that called
 * bd_io_new(); every other function taking a bd_io is called on that
 * thread only, bd_io_free() included. With io_uring this is a kernel rule,
 * not just ours: the ring is set up SINGLE_ISSUER (the kernel refuses
 * submissions from any other task with -EEXIST), with DEFER_TASKRUN
 * completions are run only when the owner enters the kernel, and a
 * registered ring fd is private to the registering thread.
 * bd_io_engine_name() and bd_io_dio_align() may be called from any thread.
 * No function here keeps global state; two bd_io in two threads never share
 * anything.
 */
#ifndef BATCHD_DAEMON_IO_H
#define BATCHD_DAEMON_IO_H

#include <stdint.h>
#include <sys/uio.h>

typedef enum bd_io_engine {
	BD_IO_AUTO = 0,   /* io_uring if it sets up, else pread */
	BD_IO_URING,
	BD_IO_PREAD,
} bd_io_engine;

#define BD_IO_DEFAULT_DEPTH 64u
#define BD_IO_MAX_DEPTH 4096u
#define BD_IO_MAX_BUFFERS 16384u  /* IORING_MAX_REG_BUFFERS */
#define BD_IO_MAX_FILES 4096u     /* bd_io_register_files: files at most */

typedef struct bd_io_opts {
	bd_io_engine engine;
	unsigned queue_depth;        /* requests in flight at most; 0 = 64 */

	/*
	 * Test hooks, all 0 in production. They act the same way on both
	 * engines.
	 *   force_setup_error  a positive errno: io_uring setup "fails" with
	 *                      it without asking the kernel (AUTO falls back
	 *                      to pread, URING returns -force_setup_error).
	 *   fault_max_read     cap each read the engine issues at this many
	 *                      bytes, so every longer request goes through the
	 *                      short-read resubmission path.
	 *   fault_every,       replace the result of every fault_every-th raw
	 *   fault_errno        completion (counted over the bd_io's life) by
	 *                      -fault_errno, as if the kernel had returned it.
	 */
	int force_setup_error;
	uint32_t fault_max_read;
	unsigned fault_every;
	int fault_errno;
} bd_io_opts;

typedef struct bd_io bd_io;

/*
 * One read. The caller owns the struct and the buffer; both must stay
 * valid and untouched from bd_io_submit() until bd_io_wait() hands the
 * request back. fd, offset, len, buf, buf_index and user are never changed
 * by the engine.
 */
typedef struct bd_io_req {
	int fd;
	uint64_t offset;
	uint32_t len;            /* at most INT32_MAX */
	uint8_t *buf;
	int buf_index;           /* registered buffer index (bd_io_register), or -1 */
	void *user;              /* the caller's */
	int32_t result;          /* on completion: bytes read (== len, or fewer
	                          * only at EOF) or -errno */

	/* Private to the engine; reset by bd_io_submit(). */
	uint32_t priv_done;      /* bytes read so far */
	uint32_t priv_retries;   /* consecutive -EAGAIN/-EINTR without progress */
} bd_io_req;

/*
 * Creates an engine. @o may be NULL (AUTO, depth 64). AUTO tries io_uring
 * and falls back to pread on any setup failure (EPERM from
 * io_uring_disabled or seccomp, ENOSYS, ENOMEM, ...); URING fails instead;
 * PREAD never makes an io_uring system call.
 *
 * io_uring setup asks for CQSIZE|COOP_TASKRUN|SINGLE_ISSUER|DEFER_TASKRUN
 * and drops DEFER_TASKRUN, SINGLE_ISSUER, COOP_TASKRUN, CQSIZE in that order
 * while the kernel answers -EINVAL; then it registers the ring fd if the
 * kernel supports that.
 *
 * @return 0 and *ret_io (free with bd_io_free()); -EINVAL for a bad
 * option (unknown engine, depth > BD_IO_MAX_DEPTH); -ENOMEM; with URING,
 * the setup error. *ret_io is written only on success.
 * Thread: the calling thread becomes the owner.
 */
int bd_io_new(const bd_io_opts *o, bd_io **ret_io);

/*
 * Waits for every request still in flight (their buffers may be reused once
 * this returns), then releases the engine. Accepts NULL.
 * Thread: owner.
 */
void bd_io_free(bd_io *io);

/* The engine actually live: BD_IO_URING or BD_IO_PREAD. Thread: owner. */
bd_io_engine bd_io_engine_of(const bd_io *io);

/* "io_uring", "pread", "auto"; "unknown" otherwise. Thread: any. */
const char *bd_io_engine_name(bd_io_engine e);

/* IORING_SETUP_* flags the kernel accepted; 0 for pread. Thread: owner. */
unsigned bd_io_setup_flags(const bd_io *io);

/*
 * Registers @n buffers for reads with buf_index >= 0 (io_uring: fixed
 * buffers, read with IORING_OP_READ_FIXED; pread: only remembered, so the
 * same requests work on both engines). Call once, before any read. The
 * iovec array is copied; the memory it describes must outlive the engine.
 *
 * @return 0; -EINVAL for n == 0, n > BD_IO_MAX_BUFFERS or a NULL/empty
 * buffer; -EBUSY if buffers are already registered or reads are in flight;
 * -ENOMEM (RLIMIT_MEMLOCK too small, or out of memory), -EFAULT, or what
 * else io_uring_register_buffers returns. On error nothing is registered
 * and the engine stays usable with buf_index = -1.
 * Thread: owner.
 */
int bd_io_register(bd_io *io, const struct iovec *iov, unsigned n);

/*
 * Registers @n open files with the engine (io_uring: fixed files, so a
 * read of one skips the kernel's per-read file lookup and reference
 * count, IOSQE_FIXED_FILE; pread: only remembered). Requests keep naming
 * the file by req->fd; a request whose fd is registered uses the fixed
 * file, any other fd is read as before. Call once, before any read; the
 * fds must stay open until the engine is freed.
 *
 * @return 0; -EINVAL for n == 0, n > BD_IO_MAX_FILES, a NULL array, a
 * negative or repeated fd; -EBUSY if files are already registered or reads
 * are in flight; -ENOMEM; or what io_uring_register_files returns (-EBADF
 * ...). On error nothing is registered and the engine stays usable.
 * Thread: owner.
 */
int bd_io_register_files(bd_io *io, const int *fds, unsigned n);

/*
 * Queues @req. The read is not handed to the kernel until bd_io_wait()
 * (one system call for the whole batch), or earlier if the submission
 * queue fills. Never blocks. With buf_index >= 0 and the request lying
 * wholly inside that registered buffer the read uses the fixed buffer;
 * a request outside it is read as a plain read.
 *
 * @return 0 (req->result is then undefined until bd_io_wait() returns it);
 * -EBUSY when queue_depth requests are already in flight; -EINVAL for a
 * NULL req, len > INT32_MAX, offset + len beyond INT64_MAX, a NULL buf
 * with len > 0, or a buf_index that names no registered buffer.
 * Errors of the read itself (a bad fd: -EBADF) come back in req->result.
 * Thread: owner.
 */
int bd_io_submit(bd_io *io, bd_io_req *req);

/*
 * Submits whatever is queued, then returns one finished request, blocking
 * until one finishes. A short read is resubmitted for the remainder (offset
 * and buffer advanced by the bytes done); a 0-byte read is end of file and
 * finishes the request with what it has; -EAGAIN and -EINTR are retried
 * (up to 64 times in a row without progress, then they finish the request
 * with that error); any other error finishes the request with
 * result = -errno. Completion order is the kernel's, not submission order.
 *
 * @return 0 and *ret_req; -ENOENT when nothing is in flight; another
 * -errno if io_uring_enter itself fails (the engine is then unusable:
 * free it). *ret_req is written only on success.
 * Thread: owner.
 */
int bd_io_wait(bd_io *io, bd_io_req **ret_req);

/*
 * bd_io_wait() for a batch: submits whatever is queued, blocks until one
 * request finishes, then also takes every other request the kernel has
 * already finished, up to @max in all, without entering the kernel again.
 * A caller that handles completions in batches (requeue them all, then
 * wait again) so pays one system call per batch instead of one per read.
 * Requests finish exactly as with bd_io_wait (short reads resubmitted,
 * -EAGAIN/-EINTR retried); a resubmission made while collecting is handed
 * to the kernel at once. The pread engine returns one request per call.
 *
 * @return n (1..max) with reqs[0..n) written; -ENOENT when nothing is in
 * flight; -EINVAL for a NULL reqs or max == 0; -EAGAIN when the watched fd
 * (bd_io_watch) fired before any request finished; another -errno as
 * bd_io_wait. If the watched fd fires after some requests were taken,
 * they are returned and the watch reports again on the next call (its
 * poll is re-armed and the fd is still readable).
 * Thread: owner.
 */
int bd_io_wait_many(bd_io *io, bd_io_req **reqs, unsigned max);

/*
 * Without waiting: submits whatever is queued, lets the kernel post what
 * has finished, and returns one finished request if there is one. For an
 * owner with other work between reads (copies out of a cache), so that
 * reads it queued reach the kernel and their completions move on without
 * a wait. The pread engine has no asynchrony: it performs the oldest read.
 * @return 1 and *ret_req; 0 when none has finished yet; -ENOENT when
 * nothing is in flight; -EAGAIN when the watched fd fired; another
 * -errno as bd_io_wait. Thread: owner.
 */
int bd_io_poll(bd_io *io, bd_io_req **ret_req);

/* Requests submitted and not yet returned by bd_io_wait(). Thread: owner. */
unsigned bd_io_inflight(const bd_io *io);

/*
 * io_uring only: also wake bd_io_wait() when fd becomes readable (an
 * eventfd another thread writes to hand this one new work). bd_io_wait
 * then returns -EAGAIN with nothing completed; the caller drains fd and
 * carries on. The pread engine never sleeps in bd_io_wait, so it has no
 * need for this: -EOPNOTSUPP.
 */
int bd_io_watch(bd_io *io, int fd);

/*
 * O_DIRECT alignment of the file behind @fd, from statx(STATX_DIOALIGN)
 * (Linux >= 6.1); both values are powers of two. When the kernel does not
 * report it, 4096/4096, which is a multiple of every logical block size in
 * use.
 *
 * @return 0 and both values; -EOPNOTSUPP when the file system says the
 * file cannot be read with O_DIRECT (read it buffered); -EBADF and other
 * statx errors. Outputs are written only on success; either may be NULL.
 * Thread: any.
 */
int bd_io_dio_align(int fd, uint32_t *ret_mem_align, uint32_t *ret_offset_align);

#endif
