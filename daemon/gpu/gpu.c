/* SPDX-License-Identifier: MIT */
/*
 * gpu.c - the GPU thread: pinned staging, device slots, copies, events
 * (see gpu.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "batchd-build.h"
#include "cuda_probe.h"
#include "gpu.h"
#include "log.h"
#include "metrics.h"
#include "units.h"

#if BATCHD_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "cudrv.h"
#include "util.h"

/* cudaHostRegister in pieces: huge single registrations fail or stall on some drivers. */
#define PIN_CHUNK (UINT64_C(1) << 30)

enum op_state { OP_WAITING, OP_ISSUED };

struct op;

typedef struct gpu_event {
	struct gpu_event *next;
	struct op *op;
	enum bd_job_event kind;
	int status;
	bool last;              /* the op is the loop's to free after this one */
	char reason[192];
} gpu_event;

/* One batch's copy. Allocated on the loop, owned by the GPU thread until its last event. */
typedef struct op {
	struct op *next;
	bd_gpu_session *gs;
	uint64_t seq;
	const void *src;
	uint64_t bytes;
	uint64_t issued_ns;
	enum op_state state;
	bool waited;
	gpu_event ev[2];        /* ENQUEUED, COPIED */
} op;

struct bd_gpu {
	uv_loop_t *loop;
	uv_async_t async;
	pthread_t thread;
	bool started;

	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop;
	op *submit, **submit_tail;           /* loop -> GPU thread */
	gpu_event *events, **events_tail;    /* GPU thread -> loop */

	/* GPU thread only: one pass over the work list, and the device it has current. */
	uint64_t pass;
	int device;

	/* Loop thread only. */
	uint64_t device_bytes;
	uint32_t sessions, unpinned;

	/*
	 * Devices lost to a sticky error: set once by the GPU thread (reason
	 * first, then the flag with release), read by both threads.
	 */
	bool dead[BD_CUDA_MAX_DEVICES];
	char dead_why[BD_CUDA_MAX_DEVICES][192];
};

struct bd_gpu_session {
	bd_gpu *g;
	bd_job_event_fn event;
	void *owner;
	int device;
	uint32_t slots;
	uint64_t slot_bytes, size;
	cudaStream_t stream;
	cudaEvent_t *ready, *released, *done;
	CUdeviceptr base;
	bool mapped;
	int fd;
	uint8_t *host;
	uint64_t host_len, pinned_len;
	uint64_t session;                    /* the session's id, for the log */
	char unpinned_why[160];              /* why staging is pageable ("" when pinned) */
	bool cancelled;                      /* atomic: loop writes, GPU thread reads */

	/* GPU thread only: this pass already met an older op of ours that must go first. */
	uint64_t waiting_pass, issued_pass;

	/* GPU thread writes, loop reads (relaxed atomics). */
	uint64_t copies, copy_bytes, copy_ns, slot_waits;
};

#define STAT_ADD(p, v) __atomic_fetch_add((p), (v), __ATOMIC_RELAXED)
#define STAT_GET(p) __atomic_load_n((p), __ATOMIC_RELAXED)

/* ---- GPU thread ------------------------------------------------------------------------ */

static void emit(bd_gpu *g, op *o, enum bd_job_event kind, int status, bool last,
		 const char *reason)
{
	gpu_event *ev = &o->ev[kind - 1];

	ev->next = NULL;
	ev->op = o;
	ev->kind = kind;
	ev->status = status;
	ev->last = last;
	snprintf(ev->reason, sizeof(ev->reason), "%s", reason);
	pthread_mutex_lock(&g->lock);
	*g->events_tail = ev;
	g->events_tail = &ev->next;
	pthread_mutex_unlock(&g->lock);
	uv_async_send(&g->async);
}

static int cuda_errno(cudaError_t e)
{
	switch (e) {
	case cudaSuccess:
		return 0;
	case cudaErrorMemoryAllocation:
		return -ENOMEM;
	case cudaErrorNoDevice:
	case cudaErrorInvalidDevice:
	case cudaErrorInsufficientDriver:
		return -ENODEV;
	default:
		return -EIO;
	}
}

/*
 * CUDA's sticky errors: the device's context is corrupt (a kernel faulted,
 * the hardware failed) and every later call on it fails the same way
 * until the process exits. Retrying is pointless and every batch would fail.
 */
static bool sticky(cudaError_t e)
{
	switch (e) {
	case cudaErrorIllegalAddress:
	case cudaErrorLaunchTimeout:
	case cudaErrorAssert:
	case cudaErrorHardwareStackError:
	case cudaErrorIllegalInstruction:
	case cudaErrorMisalignedAddress:
	case cudaErrorInvalidAddressSpace:
	case cudaErrorInvalidPc:
	case cudaErrorLaunchFailure:
	case cudaErrorECCUncorrectable:
		return true;
	default:
		return false;
	}
}

static bool is_dead(const bd_gpu *g, int device)
{
	return device >= 0 && device < BD_CUDA_MAX_DEVICES &&
	       __atomic_load_n(&g->dead[device], __ATOMIC_ACQUIRE);
}

/* GPU thread: e on device is sticky; stop using the device, once, saying why. */
static void kill_device(bd_gpu *g, int device, cudaError_t e)
{
	if (device < 0 || device >= BD_CUDA_MAX_DEVICES || is_dead(g, device))
		return;
	snprintf(g->dead_why[device], sizeof(g->dead_why[device]), "CUDA device %d is unusable "
		 "after a sticky error (%s, CUDA error %d): restart batchd to use it again", device,
		 cudaGetErrorString(e), (int)e);
	__atomic_store_n(&g->dead[device], true, __ATOMIC_RELEASE);
	bd_log(LOG_CRIT, "%s; its GPU sessions end, new ones are refused, host sessions carry on",
	       g->dead_why[device]);
}

static cudaError_t issue(op *o)
{
	bd_gpu_session *gs = o->gs;
	uint32_t slot = (uint32_t)(o->seq % gs->slots);
	uint8_t *dst = (uint8_t *)(uintptr_t)(gs->base + slot * gs->slot_bytes);
	const uint8_t *src = o->src;
	uint64_t left = o->bytes;
	cudaError_t e = cudaSuccess;
	bool queued = false;

	/*
	 * One copy per pinned piece: a source range spanning two host
	 * registrations is not pinned memory to the driver.
	 */
	while (left && e == cudaSuccess) {
		uint64_t at = (uint64_t)(src - gs->host), n = left;

		if (gs->pinned_len && at / PIN_CHUNK != (at + n - 1) / PIN_CHUNK)
			n = PIN_CHUNK - at % PIN_CHUNK;
		e = cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, gs->stream);
		queued |= e == cudaSuccess;
		dst += n;
		src += n;
		left -= n;
	}
	if (e == cudaSuccess)
		e = cudaEventRecord(gs->ready[slot], gs->stream);
	/* Completion is read from a private event: the client can record `ready` too. */
	if (e == cudaSuccess)
		e = cudaEventRecord(gs->done[slot], gs->stream);
	/* A failure after a copy was queued: let it finish before the host bytes can go. */
	if (e != cudaSuccess && queued)
		cudaStreamSynchronize(gs->stream);
	return e;
}

/* Make `device` current on the GPU thread, calling the runtime only when it changes. */
static void use_device(bd_gpu *g, int device)
{
	if (g->device != device && cudaSetDevice(device) == cudaSuccess)
		g->device = device;
}

/*
 * Move every op as far as it goes without blocking. Ops of one session
 * advance in order: a copy is issued only after the older ones were, and
 * completions are read oldest first. @return whether anything moved.
 */
static bool step(bd_gpu *g, op **list, op ***tail)
{
	bool moved = false;
	op **pp = list, *next;

	g->pass++;
	for (op *o = *list; o; o = next) {
		bd_gpu_session *gs = o->gs;
		uint32_t slot = (uint32_t)(o->seq % gs->slots);
		enum bd_job_event kind = BD_JOB_ENQUEUED;
		int status = 0;
		char reason[160] = "";
		cudaError_t e;

		next = o->next;
		if (is_dead(g, gs->device)) {
			status = -EIO;
			snprintf(reason, sizeof(reason), "%s", g->dead_why[gs->device]);
			kind = o->state == OP_WAITING ? BD_JOB_ENQUEUED : BD_JOB_COPIED;
			goto finish;
		}
		if (o->state == OP_WAITING) {
			if (gs->waiting_pass == g->pass)
				goto keep;      /* an older copy of the session waits: keep order */
			if (__atomic_load_n(&gs->cancelled, __ATOMIC_ACQUIRE)) {
				status = -ECANCELED;
				snprintf(reason, sizeof(reason), "the session closed");
				goto finish;
			}
			use_device(g, gs->device);
			e = cudaEventQuery(gs->released[slot]);
			if (e == cudaErrorNotReady) {
				/* The client's stream still reads the slot's last batch. */
				if (!o->waited)
					STAT_ADD(&gs->slot_waits, 1);
				o->waited = true;
				gs->waiting_pass = g->pass;
				goto keep;
			}
			if (e == cudaSuccess)
				e = issue(o);
			if (e != cudaSuccess) {
				cudaGetLastError();
				if (sticky(e))
					kill_device(g, gs->device, e);
				status = cuda_errno(e);
				snprintf(reason, sizeof(reason), "CUDA copy into device slot %u: %s", slot,
					 cudaGetErrorString(e));
				goto finish;
			}
			o->state = OP_ISSUED;
			o->issued_ns = bd_now_ns();
			emit(g, o, BD_JOB_ENQUEUED, 0, false, "");
			moved = true;
		}
		/* OP_ISSUED: completions come in stream order, so ask for the oldest only. */
		if (gs->issued_pass == g->pass)
			goto keep;
		use_device(g, gs->device);
		e = cudaEventQuery(gs->done[slot]);
		if (e == cudaErrorNotReady) {
			gs->issued_pass = g->pass;
			goto keep;
		}
		kind = BD_JOB_COPIED;
		if (e == cudaSuccess) {
			STAT_ADD(&gs->copies, 1);
			STAT_ADD(&gs->copy_bytes, o->bytes);
			STAT_ADD(&gs->copy_ns, bd_now_ns() - o->issued_ns);
		} else {
			cudaGetLastError();
			if (sticky(e))
				kill_device(g, gs->device, e);
			status = cuda_errno(e);
			snprintf(reason, sizeof(reason), "CUDA copy into device slot %u failed: %s", slot,
				 cudaGetErrorString(e));
		}
finish:
		/* Unlink first: after its last event the op belongs to the loop thread. */
		*pp = next;
		if (!next)
			*tail = pp;
		emit(g, o, kind, status, true, reason);
		moved = true;
		continue;
keep:
		pp = &o->next;
	}
	return moved;
}

static void *gpu_main(void *arg)
{
	bd_gpu *g = arg;
	op *work = NULL, **tail = &work;
	uint64_t nap_ns = 0;

	pthread_setname_np(pthread_self(), "batchd-gpu");
	pthread_mutex_lock(&g->lock);
	for (;;) {
		if (g->submit) {
			*tail = g->submit;
			tail = g->submit_tail;
			g->submit = NULL;
			g->submit_tail = &g->submit;
		}
		if (!work) {
			if (g->stop)
				break;
			nap_ns = 0;
			pthread_cond_wait(&g->cond, &g->lock);
			continue;
		}
		pthread_mutex_unlock(&g->lock);
		if (step(g, &work, &tail))
			nap_ns = 0;
		else
			/* Waiting on the GPU: poll, backing off from 20 us to 1 ms. */
			nap_ns = nap_ns ? (nap_ns * 2 > 1000000 ? 1000000 : nap_ns * 2) : 20000;
		pthread_mutex_lock(&g->lock);
		if (nap_ns && !g->submit) {
			struct timespec ts;

			clock_gettime(CLOCK_MONOTONIC, &ts);
			ts.tv_nsec += (long)nap_ns;
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&g->cond, &g->lock, &ts);
		}
	}
	pthread_mutex_unlock(&g->lock);
	return NULL;
}

/* ---- loop thread ------------------------------------------------------------------------- */

static void on_async(uv_async_t *a)
{
	bd_gpu *g = a->data;
	gpu_event *list;

	pthread_mutex_lock(&g->lock);
	list = g->events;
	g->events = NULL;
	g->events_tail = &g->events;
	pthread_mutex_unlock(&g->lock);
	while (list) {
		gpu_event *ev = list;
		op *o = ev->op;

		list = ev->next;
		/* The session, and so gs, lives until the op's last event is in. */
		o->gs->event(o->gs->owner, o->seq, ev->kind, ev->status, ev->reason);
		if (ev->last)
			free(o);
	}
}

int bd_gpu_new(uv_loop_t *loop, bd_gpu **ret)
{
	pthread_condattr_t ca;
	bd_gpu *g = bd_calloc(1, sizeof(*g));
	int r;

	if (!g)
		return -ENOMEM;
	g->loop = loop;
	g->device = -1;
	g->submit_tail = &g->submit;
	g->events_tail = &g->events;
	pthread_mutex_init(&g->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&g->cond, &ca);
	pthread_condattr_destroy(&ca);
	if (uv_async_init(loop, &g->async, on_async) < 0) {
		pthread_cond_destroy(&g->cond);
		pthread_mutex_destroy(&g->lock);
		free(g);
		return -ENOMEM;
	}
	g->async.data = g;
	r = pthread_create(&g->thread, NULL, gpu_main, g);
	if (r) {
		bd_gpu_free(g);
		return -r;
	}
	g->started = true;
	*ret = g;
	return 0;
}

static void on_async_closed(uv_handle_t *h)
{
	bd_gpu *g = h->data;

	pthread_cond_destroy(&g->cond);
	pthread_mutex_destroy(&g->lock);
	free(g);
}

void bd_gpu_free(bd_gpu *g)
{
	if (!g)
		return;
	if (g->started) {
		pthread_mutex_lock(&g->lock);
		g->stop = true;
		pthread_cond_signal(&g->cond);
		pthread_mutex_unlock(&g->lock);
		pthread_join(g->thread, NULL);
	}
	/* Every session was freed, after its ops' last events: nothing is left to deliver. */
	uv_close((uv_handle_t *)&g->async, on_async_closed);
}

int bd_gpu_copy(bd_gpu_session *gs, uint64_t seq, const void *src, uint64_t bytes)
{
	bd_gpu *g = gs->g;
	op *o = bd_calloc(1, sizeof(*o));

	if (!o)
		return -ENOMEM;
	o->gs = gs;
	o->seq = seq;
	o->src = src;
	o->bytes = bytes;
	o->state = OP_WAITING;
	pthread_mutex_lock(&g->lock);
	*g->submit_tail = o;
	g->submit_tail = &o->next;
	pthread_cond_signal(&g->cond);
	pthread_mutex_unlock(&g->lock);
	return 0;
}

void bd_gpu_session_cancel(bd_gpu_session *gs)
{
	__atomic_store_n(&gs->cancelled, true, __ATOMIC_RELEASE);
	pthread_mutex_lock(&gs->g->lock);
	pthread_cond_signal(&gs->g->cond);
	pthread_mutex_unlock(&gs->g->lock);
}

/* Pin the staging in chunks; on any failure undo it all and stage unpinned. */
/*
 * Why staging could not be pinned, into why: the device cannot register
 * host memory at all, or cudaHostRegister's own error. The driver pins
 * registered memory without charging RLIMIT_MEMLOCK, so the limit is never
 * the reason; what fails in practice is a device or platform without the
 * capability (some virtualised GPUs) or the driver running out of memory
 * for the page tables.
 */
static cudaError_t register_staging(bd_gpu_session *gs, char *why, size_t len)
{
	cudaError_t e;
	int ok = 0;

	e = cudaDeviceGetAttribute(&ok, cudaDevAttrHostRegisterSupported, gs->device);
	if (e == cudaSuccess && !ok) {
		snprintf(why, len, "device %d cannot register host memory "
			 "(cudaDevAttrHostRegisterSupported is 0)", gs->device);
		return cudaErrorNotSupported;
	}
	for (uint64_t off = 0; off < gs->host_len; off += PIN_CHUNK) {
		uint64_t n = gs->host_len - off < PIN_CHUNK ? gs->host_len - off : PIN_CHUNK;

		e = cudaHostRegister(gs->host + off, n, cudaHostRegisterDefault);
		if (e != cudaSuccess) {
			snprintf(why, len, "cudaHostRegister: %s (CUDA error %d)",
				 cudaGetErrorString(e), (int)e);
			return e;
		}
		gs->pinned_len = off + n;
	}
	return cudaSuccess;
}

/* Pin the session's staging arena, or say why it stays pageable. */
static void pin(bd_gpu_session *gs)
{
	static bool logged;
	char why[160] = "", a[32];

	if (register_staging(gs, why, sizeof(why)) == cudaSuccess)
		return;
	cudaGetLastError();
	for (uint64_t off = 0; off < gs->pinned_len; off += PIN_CHUNK)
		cudaHostUnregister(gs->host + off);
	gs->pinned_len = 0;
	snprintf(gs->unpinned_why, sizeof(gs->unpinned_why), "%s", why);
	if (!logged) {
		logged = true;
		bd_log(LOG_WARNING, "cannot pin %s of staging memory for a GPU session (%s): staging "
		       "stays pageable, so host-to-device copies are slower and not asynchronous "
		       "(logged once; `batchctl status` counts unpinned sessions)",
		       bp_format_size(gs->host_len, a, sizeof(a)), why);
	}
}

/* What the session stages from, one line per GPU session (tests/gpu/run.sh reads it). */
static void log_start(const bd_gpu_session *gs)
{
	char a[32], b[32];

	bp_format_size(gs->host_len, a, sizeof(a));
	bp_format_size(gs->size, b, sizeof(b));
	if (gs->pinned_len)
		bd_log(LOG_INFO, "session %" PRIu64 ": GPU %d, %u device slots (%s), staging %s "
		       "pinned", gs->session, gs->device, gs->slots, b, a);
	else
		bd_log(LOG_INFO, "session %" PRIu64 ": GPU %d, %u device slots (%s), staging %s "
		       "pageable: %s", gs->session, gs->device, gs->slots, b, a,
		       gs->unpinned_why[0] ? gs->unpinned_why : "nothing to stage");
}

/* The copies the session made: count, bytes, and their rate while copying. */
static void log_end(bd_gpu_session *gs)
{
	uint64_t n = STAT_GET(&gs->copies), bytes = STAT_GET(&gs->copy_bytes);
	uint64_t ns = STAT_GET(&gs->copy_ns);
	char a[32];

	bd_log(LOG_INFO, "session %" PRIu64 ": GPU %d copies: %" PRIu64 " (%s) at %.2f GB/s "
	       "(bytes over summed copy time), staging %s", gs->session, gs->device, n,
	       bp_format_size(bytes, a, sizeof(a)), ns ? (double)bytes / (double)ns : 0.0,
	       gs->pinned_len ? "pinned" : "pageable");
}

static int make_events(bd_gpu_session *gs, bp_ring_gpu_slot *slots, char *err, size_t errlen)
{
	const unsigned ipc = cudaEventInterprocess | cudaEventDisableTiming;

	for (uint32_t i = 0; i < gs->slots; i++) {
		cudaError_t e = cudaEventCreateWithFlags(&gs->ready[i], ipc);

		if (e == cudaSuccess)
			e = cudaEventCreateWithFlags(&gs->released[i], ipc);
		if (e == cudaSuccess)
			e = cudaEventCreateWithFlags(&gs->done[i], cudaEventDisableTiming);
		if (e == cudaSuccess)
			e = cudaIpcGetEventHandle((cudaIpcEventHandle_t *)slots[i].ready, gs->ready[i]);
		if (e == cudaSuccess)
			e = cudaIpcGetEventHandle((cudaIpcEventHandle_t *)slots[i].released,
						  gs->released[i]);
		if (e != cudaSuccess) {
			cudaGetLastError();
			snprintf(err, errlen, "CUDA events for device slot %u: %s", i,
				 cudaGetErrorString(e));
			return cuda_errno(e);
		}
	}
	return 0;
}

static int make_memory(bd_gpu_session *gs, char *err, size_t errlen)
{
	CUmemAllocationProp prop = {
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = gs->device },
		.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
	};
	CUmemAccessDesc acc = {
		.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = gs->device },
		.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
	};
	CUmemGenericAllocationHandle h = 0;
	const bp_cudrv *d;
	const char *what;
	size_t gran = 0;
	char why[256], a[32];
	CUresult e;

	d = bp_cudrv_load(why, sizeof(why));
	if (!d) {
		snprintf(err, errlen, "no CUDA device: %s", why);
		return -ENODEV;
	}
	what = "cuMemGetAllocationGranularity";
	e = d->MemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
	if (e != CUDA_SUCCESS || gran == 0)
		goto fail;
	gs->size = (gs->slots * gs->slot_bytes + gran - 1) / gran * gran;
	what = "cuMemCreate";
	e = d->MemCreate(&h, gs->size, &prop, 0);
	if (e != CUDA_SUCCESS) {
		h = 0;
		goto fail;
	}
	what = "cuMemAddressReserve";
	e = d->MemAddressReserve(&gs->base, gs->size, gran, 0, 0);
	if (e != CUDA_SUCCESS) {
		gs->base = 0;
		goto fail;
	}
	what = "cuMemMap";
	e = d->MemMap(gs->base, gs->size, 0, h, 0);
	if (e != CUDA_SUCCESS)
		goto fail;
	gs->mapped = true;
	what = "cuMemSetAccess";
	e = d->MemSetAccess(gs->base, gs->size, &acc, 1);
	if (e != CUDA_SUCCESS)
		goto fail;
	what = "cuMemExportToShareableHandle";
	e = d->MemExportToShareableHandle(&gs->fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	if (e != CUDA_SUCCESS) {
		gs->fd = -1;
		goto fail;
	}
	fcntl(gs->fd, F_SETFD, FD_CLOEXEC);
	/* The mapping and the fd hold the memory from here on. */
	d->MemRelease(h);
	return 0;
fail:
	if (h)
		d->MemRelease(h);
	if (e == CUDA_ERROR_OUT_OF_MEMORY)
		snprintf(err, errlen, "device memory: %s for %u device slots does not fit on CUDA "
			 "device %d; lower prefetch or the batch size",
			 bp_format_size(gs->size, a, sizeof(a)), gs->slots, gs->device);
	else
		snprintf(err, errlen, "%s on CUDA device %d: %s", what, gs->device,
			 bp_cudrv_strerror(d, e, why, sizeof(why)));
	return bp_cudrv_errno(e);
}

void bd_gpu_session_free(bd_gpu_session *gs)
{
	const bp_cudrv *d = bp_cudrv_load(NULL, 0);

	if (!gs)
		return;
	if (gs->g)
		log_end(gs);
	cudaSetDevice(gs->device);
	/* Our stream waits on nothing outside this process: this always returns. */
	if (gs->stream) {
		cudaStreamSynchronize(gs->stream);
		cudaStreamDestroy(gs->stream);
	}
	for (uint32_t i = 0; i < gs->slots; i++) {
		if (gs->ready && gs->ready[i])
			cudaEventDestroy(gs->ready[i]);
		if (gs->released && gs->released[i])
			cudaEventDestroy(gs->released[i]);
		if (gs->done && gs->done[i])
			cudaEventDestroy(gs->done[i]);
	}
	if (d && gs->mapped)
		d->MemUnmap(gs->base, gs->size);
	if (d && gs->base)
		d->MemAddressFree(gs->base, gs->size);
	if (gs->fd >= 0)
		close(gs->fd);
	for (uint64_t off = 0; off < gs->pinned_len; off += PIN_CHUNK)
		cudaHostUnregister(gs->host + off);
	cudaGetLastError();
	if (gs->g) {
		gs->g->sessions--;
		gs->g->device_bytes -= gs->size;
		if (!gs->pinned_len && gs->host_len)
			gs->g->unpinned--;
	}
	free(gs->ready);
	free(gs->released);
	free(gs->done);
	free(gs);
}

uint64_t bd_gpu_session_bytes(uint32_t slots)
{
	bd_gpu_session *gs = NULL;

	/* 16: what malloc adds to each of the 4 + slots allocations. */
	return sizeof(*gs) + (uint64_t)slots * (sizeof(*gs->ready) + sizeof(*gs->released) +
						sizeof(*gs->done) + sizeof(op) + 16) + 4 * 16;
}

int bd_gpu_session_new(bd_gpu *g, const bd_gpu_session_cfg *cfg, bp_ring_gpu *table,
		       bp_ring_gpu_slot *slots, int *ret_fd, bd_gpu_session **ret, char *err,
		       size_t errlen)
{
	bd_gpu_session *gs = bd_calloc(1, sizeof(*gs));
	cudaError_t e;
	int r;

	if (!gs)
		return -ENOMEM;
	if (is_dead(g, cfg->device)) {
		snprintf(err, errlen, "%s (host sessions are served)", g->dead_why[cfg->device]);
		free(gs);
		return -ENODEV;
	}
	gs->event = cfg->event;
	gs->owner = cfg->owner;
	gs->session = cfg->session;
	gs->device = cfg->device;
	gs->slots = cfg->slots;
	gs->slot_bytes = cfg->slot_bytes;
	gs->host = cfg->host;
	gs->host_len = cfg->host_len;
	gs->fd = -1;
	gs->ready = bd_calloc(cfg->slots, sizeof(*gs->ready));
	gs->released = bd_calloc(cfg->slots, sizeof(*gs->released));
	gs->done = bd_calloc(cfg->slots, sizeof(*gs->done));
	if (!gs->ready || !gs->released || !gs->done) {
		r = -ENOMEM;
		goto fail;
	}
	e = cudaSetDevice(cfg->device);
	if (e == cudaSuccess)
		e = cudaStreamCreateWithFlags(&gs->stream, cudaStreamNonBlocking);
	if (e != cudaSuccess) {
		cudaGetLastError();
		gs->stream = NULL;
		snprintf(err, errlen, "CUDA device %d: %s", cfg->device, cudaGetErrorString(e));
		r = cuda_errno(e);
		goto fail;
	}
	r = make_memory(gs, err, errlen);
	if (r == 0)
		r = make_events(gs, slots, err, errlen);
	if (r < 0)
		goto fail;
	pin(gs);
	log_start(gs);

	*table = (bp_ring_gpu){
		.magic = BP_RING_GPU_MAGIC,
		.size = gs->size,
		.slot_bytes = gs->slot_bytes,
		.slots = gs->slots,
		.pinned = gs->pinned_len != 0,
		.ordinal = gs->device,
		.pid_ns = bp_pid_ns(),
	};
	memcpy(table->uuid, cfg->uuid, sizeof(table->uuid));
	gs->g = g;
	g->sessions++;
	g->device_bytes += gs->size;
	if (!gs->pinned_len && gs->host_len)
		g->unpinned++;
	*ret_fd = gs->fd;
	*ret = gs;
	return 0;
fail:
	bd_gpu_session_free(gs);
	return r;
}

void bd_gpu_session_get_info(const bd_gpu_session *gs, bd_gpu_session_info *ret)
{
	*ret = (bd_gpu_session_info){
		.device = gs->device,
		.pinned = gs->pinned_len != 0,
		.device_bytes = gs->size,
		.copies = STAT_GET(&gs->copies),
		.copy_bytes = STAT_GET(&gs->copy_bytes),
		.copy_ns = STAT_GET(&gs->copy_ns),
		.slot_waits = STAT_GET(&gs->slot_waits),
	};
}

const char *bd_gpu_device_lost(const bd_gpu *g, int device)
{
	return g && is_dead(g, device) ? g->dead_why[device] : NULL;
}

void bd_gpu_totals(const bd_gpu *g, uint64_t *ret_device_bytes, uint32_t *ret_sessions,
		   uint32_t *ret_unpinned)
{
	*ret_device_bytes = g ? g->device_bytes : 0;
	*ret_sessions = g ? g->sessions : 0;
	*ret_unpinned = g ? g->unpinned : 0;
}

#else /* !BATCHD_HAVE_CUDA */

int bd_gpu_new(uv_loop_t *loop, bd_gpu **ret)
{
	(void)loop;
	*ret = NULL;
	return -ENODEV;
}

void bd_gpu_free(bd_gpu *g)
{
	(void)g;
}

int bd_gpu_session_new(bd_gpu *g, const bd_gpu_session_cfg *cfg, bp_ring_gpu *table,
		       bp_ring_gpu_slot *slots, int *ret_fd, bd_gpu_session **ret, char *err,
		       size_t errlen)
{
	(void)g;
	(void)cfg;
	(void)table;
	(void)slots;
	(void)ret_fd;
	(void)ret;
	snprintf(err, errlen, "no CUDA device: batchd was built without CUDA");
	return -ENODEV;
}

int bd_gpu_copy(bd_gpu_session *gs, uint64_t seq, const void *src, uint64_t bytes)
{
	(void)gs;
	(void)seq;
	(void)src;
	(void)bytes;
	return -ENODEV;
}

void bd_gpu_session_cancel(bd_gpu_session *gs)
{
	(void)gs;
}

void bd_gpu_session_free(bd_gpu_session *gs)
{
	(void)gs;
}

void bd_gpu_session_get_info(const bd_gpu_session *gs, bd_gpu_session_info *ret)
{
	(void)gs;
	memset(ret, 0, sizeof(*ret));
}

const char *bd_gpu_device_lost(const bd_gpu *g, int device)
{
	(void)g;
	(void)device;
	return NULL;
}

void bd_gpu_totals(const bd_gpu *g, uint64_t *ret_device_bytes, uint32_t *ret_sessions,
		   uint32_t *ret_unpinned)
{
	(void)g;
	*ret_device_bytes = 0;
	*ret_sessions = 0;
	*ret_unpinned = 0;
}

#endif
