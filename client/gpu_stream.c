/* SPDX-License-Identifier: MIT */
/*
 * gpu_stream.c - the device side of a GPU stream (see batchclient.h,
 * lib/proto/PROTOCOL.md and lib/proto/ring.h).
 *
 * A GPU stream maps the daemon's device allocation (a CUDA VMM handle that
 * READY carries as a fifth descriptor) once, when it opens, and orders the
 * GPU work around each batch with the daemon's IPC events: the caller's
 * stream waits on a slot's `ready` event, and a release records the slot's
 * `released` event on it. The CUDA driver is loaded at run time
 * (lib/cudrv/cudrv.h), so the library loads and serves host streams on
 * machines without one. Nothing the daemon writes is trusted here either:
 * the device table and every descriptor's device offset are checked
 * against the layout before use.
 *
 * It lives apart from batchclient.c so that the host path reads without
 * CUDA in it. Built without CUDA's headers, only the stubs at the end are
 * compiled: no stream is a GPU stream, and bc_open refuses a device
 * placement before it would get here.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "batchd-build.h"
#include "client_priv.h"
#if BATCHD_HAVE_CUDA
#include "cudrv.h"
#endif

#if BATCHD_HAVE_CUDA
_Static_assert(sizeof(CUipcEventHandle) == BP_RING_IPC_HANDLE, "IPC event handle size");

/*
 * A GPU stream's hold on the daemon's device allocation: mapped once at
 * open, undone at close. Every field is ours (copied out of the device
 * table after checking it), so nothing here changes under us.
 */
struct bc_gpu {
	const bp_cudrv *d;
	CUdevice dev;
	CUcontext ctx;           /* dev's primary context, retained while `retained` */
	bool retained;
	CUmemGenericAllocationHandle h;
	bool imported;           /* h still to be released */
	CUdeviceptr base;        /* `size` bytes of address space, reserved while `reserved` */
	bool reserved, mapped;
	uint64_t size, slot_bytes;
	uint32_t slots;
	CUevent *ready;          /* per slot: the daemon records after its copy */
	CUevent *released;       /* per slot: we record at release */
	pid_t pid;               /* the process that mapped: CUDA does not survive fork() */
};

/*
 * Check the device table of a GPU session and copy it into t; *ret_slots
 * points at its per-slot handles. The daemon can still write its own
 * mapping of the table, so every later decision is made on the copy.
 */
static int gpu_table(bc_stream *s, bp_ring_gpu *t, const bp_ring_gpu_slot **ret_slots)
{
	uint64_t off = __atomic_load_n(&s->hdr->gpu_offset, __ATOMIC_RELAXED);
	uint64_t len = __atomic_load_n(&s->hdr->gpu_size, __ATOMIC_RELAXED);
	uint32_t slots = s->r.slots;

	if (len != bp_ring_gpu_size(slots) || off % _Alignof(bp_ring_gpu) ||
	    off > s->r.data_size || len > s->r.data_size - off)
		return bc__bad_ring(s, "the device table [%" PRIu64 ", +%" PRIu64 ") is not a %u-slot "
				    "table inside the %" PRIu64 "-byte data memfd", off, len, slots,
				    s->r.data_size);
	memcpy(t, s->data + off, sizeof(*t));
	if (t->magic != BP_RING_GPU_MAGIC || t->slots != slots)
		return bc__bad_ring(s, "the device table's magic or slot count (%u, not %u) is wrong",
				    t->slots, slots);
	/* Slot i is [i * slot_bytes, +slot_bytes): all of them inside the allocation. */
	if (t->size == 0 || t->slot_bytes % BP_RING_DEVICE_ALIGN || t->slot_bytes > t->size / slots)
		return bc__bad_ring(s, "the device table's %u slots of %" PRIu64 " bytes do not fit "
				    "its %" PRIu64 "-byte allocation at %u-byte alignment", slots,
				    t->slot_bytes, t->size, BP_RING_DEVICE_ALIGN);
	*ret_slots = (const bp_ring_gpu_slot *)(s->data + off + sizeof(*t));
	return 0;
}

/* Name a failed driver call in s->err. @return the errno it maps to. */
static int gpu_fail(bc_stream *s, const bp_cudrv *d, const char *call, CUresult e)
{
	char why[192];

	snprintf(s->err, sizeof(s->err), "CUDA device %d: %s: %s", s->device, call,
		 bp_cudrv_strerror(d, e, why, sizeof(why)));
	return bp_cudrv_errno(e);
}

/*
 * Make the stream's context current for the driver calls that follow, and
 * put the caller's back after them (gpu_leave): the events and the mapping
 * belong to the device's primary context, and a NULL stream means that
 * context's legacy default stream, whatever the calling thread had current.
 */
static int gpu_enter(bc_stream *s)
{
	CUresult e = s->gpu->d->CtxPushCurrent(s->gpu->ctx);

	return e == CUDA_SUCCESS ? 0 : gpu_fail(s, s->gpu->d, "cuCtxPushCurrent", e);
}

static void gpu_leave(bc_gpu *g)
{
	CUcontext mine;

	g->d->CtxPopCurrent(&mine);
}

int bc__gpu_uuid(bc_client *c, int ordinal, uint8_t uuid[16], char *why, size_t whylen)
{
	const bp_cudrv *d = bp_cudrv_load(why, whylen);
	const char *call = "cuDeviceGet";
	char msg[192];
	CUdevice dev;
	CUuuid u;
	CUresult e;

	if (!d)
		return 0;
	e = d->DeviceGet(&dev, ordinal);
	if (e == CUDA_SUCCESS) {
		call = "cuDeviceGetUuid";
		e = d->DeviceGetUuid(&u, dev);
	}
	if (e != CUDA_SUCCESS) {
		pthread_mutex_lock(&c->mu);
		snprintf(c->err, sizeof(c->err), "CUDA device %d: %s: %s", ordinal, call,
			 bp_cudrv_strerror(d, e, msg, sizeof(msg)));
		pthread_mutex_unlock(&c->mu);
		return bp_cudrv_errno(e);
	}
	memcpy(uuid, u.bytes, 16);
	return 1;
}

/* This process's device with that UUID. @return 0, or -ENODEV with s->err set. */
static int gpu_find(bc_stream *s, const bp_cudrv *d, const bp_ring_gpu *t, CUdevice *ret)
{
	char name[48];
	int n = 0;

	if (d->DeviceGetCount(&n) != CUDA_SUCCESS)
		n = 0;
	for (int i = 0; i < n; i++) {
		CUdevice dev;
		CUuuid u;

		if (d->DeviceGet(&dev, i) == CUDA_SUCCESS &&
		    d->DeviceGetUuid(&u, dev) == CUDA_SUCCESS &&
		    memcmp(u.bytes, t->uuid, sizeof(t->uuid)) == 0) {
			*ret = dev;
			return 0;
		}
	}
	snprintf(s->err, sizeof(s->err), "the session's device %s (the daemon's device %d) is "
		 "not visible in this process (CUDA_VISIBLE_DEVICES?)",
		 bp_cuda_uuid_str(t->uuid, name, sizeof(name)), t->ordinal);
	return -ENODEV;
}

/*
 * Map the allocation and open the slots' events, with the context current.
 * Each step is noted in g as it succeeds, so bc__gpu_free undoes exactly
 * what was done.
 */
static int gpu_map(bc_stream *s, const bp_ring_gpu_slot *slots)
{
	bc_gpu *g = s->gpu;
	const bp_cudrv *d = g->d;
	const CUmemAccessDesc acc = {
		.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = g->dev },
		.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
	};
	CUresult e;

	e = d->MemImportFromShareableHandle(&g->h, (void *)(uintptr_t)s->gpu_fd,
					    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	if (e != CUDA_SUCCESS)
		return gpu_fail(s, d, "cuMemImportFromShareableHandle", e);
	g->imported = true;
	e = d->MemAddressReserve(&g->base, (size_t)g->size, 0, 0, 0);
	if (e != CUDA_SUCCESS)
		return gpu_fail(s, d, "cuMemAddressReserve", e);
	g->reserved = true;
	e = d->MemMap(g->base, (size_t)g->size, 0, g->h, 0);
	if (e != CUDA_SUCCESS)
		return gpu_fail(s, d, "cuMemMap", e);
	g->mapped = true;
	e = d->MemSetAccess(g->base, (size_t)g->size, &acc, 1);
	if (e != CUDA_SUCCESS)
		return gpu_fail(s, d, "cuMemSetAccess", e);
	/* The mapping keeps the memory now; neither the handle nor the descriptor is needed. */
	e = d->MemRelease(g->h);
	if (e != CUDA_SUCCESS)
		return gpu_fail(s, d, "cuMemRelease", e);
	g->imported = false;
	close(s->gpu_fd);
	s->gpu_fd = -1;
	for (uint32_t i = 0; i < g->slots; i++) {
		CUipcEventHandle h;

		memcpy(h.reserved, slots[i].ready, sizeof(h.reserved));
		e = d->IpcOpenEventHandle(&g->ready[i], h);
		if (e != CUDA_SUCCESS)
			return gpu_fail(s, d, "cuIpcOpenEventHandle (ready)", e);
		memcpy(h.reserved, slots[i].released, sizeof(h.reserved));
		e = d->IpcOpenEventHandle(&g->released[i], h);
		if (e != CUDA_SUCCESS)
			return gpu_fail(s, d, "cuIpcOpenEventHandle (released)", e);
	}
	return 0;
}

/*
 * Take hold of a GPU session's device memory: find the device the table
 * names (it must be the one we asked for), retain its primary context,
 * map the allocation and open the events. On failure s->err names the
 * failing call and bc__gpu_free undoes what was done.
 */
/*
 * CUDA IPC event handles open only in the PID namespace that made them:
 * refuse a session the trainer could map but never order on, before
 * anything is opened. @return 0, or -EOPNOTSUPP with the reason in s->err.
 */
static int same_pid_ns(bc_stream *s, const bp_ring_gpu *t)
{
	uint64_t mine = bp_pid_ns();

	if (!t->pid_ns || !mine || mine == t->pid_ns)
		return 0;
	snprintf(s->err, sizeof(s->err), "CUDA device %d: this trainer runs in another PID "
		 "namespace than batchd (pid:[%" PRIu64 "], batchd's pid:[%" PRIu64 "]), and CUDA IPC "
		 "events do not cross PID namespaces: run the trainer in batchd's (Kubernetes "
		 "hostPID: true, docker --pid=host) or open the stream in host memory", s->device,
		 mine, t->pid_ns);
	return -EOPNOTSUPP;
}

static int gpu_open(bc_stream *s, const bp_cudrv *d, const uint8_t want[16])
{
	const bp_ring_gpu_slot *slots = NULL;
	char got_s[48], want_s[48];
	bp_ring_gpu t;
	bc_gpu *g;
	CUresult e;
	int r;

	if ((r = gpu_table(s, &t, &slots)) < 0)
		return r;
	if ((r = same_pid_ns(s, &t)) < 0)
		return r;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	s->gpu = g;
	g->d = d;
	g->pid = getpid();
	g->size = t.size;
	g->slot_bytes = t.slot_bytes;
	g->slots = t.slots;
	g->ready = calloc(t.slots, sizeof(*g->ready));
	g->released = calloc(t.slots, sizeof(*g->released));
	if (!g->ready || !g->released)
		return -ENOMEM;
	if ((r = gpu_find(s, d, &t, &g->dev)) < 0)
		return r;
	if (memcmp(t.uuid, want, sizeof(t.uuid)) != 0)
		return bc__bad_ring(s, "the daemon placed the session on %s, not on CUDA device %d (%s)",
				    bp_cuda_uuid_str(t.uuid, got_s, sizeof(got_s)), s->device,
				    bp_cuda_uuid_str(want, want_s, sizeof(want_s)));
	e = d->DevicePrimaryCtxRetain(&g->ctx, g->dev);
	if (e != CUDA_SUCCESS)
		return gpu_fail(s, d, "cuDevicePrimaryCtxRetain", e);
	g->retained = true;
	if ((r = gpu_enter(s)) < 0)
		return r;
	r = gpu_map(s, slots);
	gpu_leave(g);
	return r;
}

int bc__gpu_open(bc_stream *s, const uint8_t want[16])
{
	int r = gpu_open(s, bp_cudrv_load(NULL, 0), want);

	if (r < 0)
		bc__gpu_free(s);
	return r;
}

/*
 * Work the trainer queued on its batches may still read the slots: mark
 * the end of it for batches still held, and let all of it finish before
 * the memory goes from under it (unmapping does not wait). The context is
 * current.
 */
static void gpu_drain(bc_stream *s, bc_gpu *g)
{
	const bp_cudrv *d = g->d;

	for (uint32_t i = 0; s->batches && i < s->r.slots; i++) {
		const bc_batch *b = &s->batches[i];

		if (b->held && b->dev)
			d->EventRecord(g->released[b->seq % g->slots], (CUstream)b->stream);
	}
	for (uint32_t i = 0; i < g->slots; i++)
		if (g->released[i])
			d->EventSynchronize(g->released[i]);
}

/*
 * Undo gpu_open, whatever part of it was done. Only for a stream that ends
 * in this process: one that is killed needs nothing from us, the driver
 * drops its mappings, events and context references when the process goes.
 */
void bc__gpu_free(bc_stream *s)
{
	bc_gpu *g = s->gpu;
	const bp_cudrv *d;
	bool pushed;

	if (!g)
		return;
	s->gpu = NULL;
	d = g->d;
	/* A forked child closing an inherited stream: no CUDA calls, the parent's mappings stay. */
	if (g->pid != getpid())
		goto out;
	pushed = g->retained && d->CtxPushCurrent(g->ctx) == CUDA_SUCCESS;
	if (pushed && g->mapped && g->released)
		gpu_drain(s, g);
	for (uint32_t i = 0; i < g->slots; i++) {
		/* A record still pending is fine: the driver frees the event once it completes. */
		if (g->ready && g->ready[i])
			d->EventDestroy(g->ready[i]);
		if (g->released && g->released[i])
			d->EventDestroy(g->released[i]);
	}
	if (g->mapped)
		d->MemUnmap(g->base, (size_t)g->size);
	if (g->reserved)
		d->MemAddressFree(g->base, (size_t)g->size);
	if (g->imported)
		d->MemRelease(g->h);
	if (pushed)
		gpu_leave(g);
	if (g->retained)
		d->DevicePrimaryCtxRelease(g->dev);
out:
	free(g->ready);
	free(g->released);
	free(g);
}

int bc__gpu_bind(bc_stream *s, const bp_ring_desc *d, uint64_t seq, void **ret_dev)
{
	const bc_gpu *g = s->gpu;

	if (!g) {
		*ret_dev = NULL;
		return 0;
	}
	/* Device slot seq % slots, and nowhere else: the allocation is mapped read-write. */
	if (d->device != (seq % g->slots) * g->slot_bytes || d->payload_size > g->slot_bytes ||
	    d->device > g->size || d->payload_size > g->size - d->device) {
		snprintf(s->err, sizeof(s->err), "batch %" PRIu64 ": %" PRIu64 " bytes at device "
			 "offset %" PRIu64 " are not in its device slot", seq, d->payload_size,
			 d->device);
		return -EBADMSG;
	}
	*ret_dev = (void *)(uintptr_t)(g->base + d->device);
	return 0;
}

int bc__gpu_record_release(bc_batch *b)
{
	bc_stream *s = b->s;
	bc_gpu *g = s->gpu;
	CUresult e, es;

	if (gpu_enter(s) < 0)
		return -EIO;
	e = g->d->EventRecord(g->released[b->seq % g->slots], (CUstream)b->stream);
	if (e == CUDA_SUCCESS) {
		gpu_leave(g);
		return 0;
	}
	/*
	 * The record fails where the stream is not the event's context's (a
	 * green or non-primary context: CUDA_ERROR_INVALID_HANDLE). Storing
	 * the mark anyway would let the daemon overwrite memory kernels still
	 * read; waiting for the stream to drain makes it true instead.
	 */
	es = g->d->StreamSynchronize((CUstream)b->stream);
	gpu_leave(g);
	if (es == CUDA_SUCCESS)
		return 0;
	{
		char a[160], b2[160];

		snprintf(s->err, sizeof(s->err), "CUDA device %d: batch %" PRIu64 " stays held from "
			 "batchd (it must not reuse the device slot while the stream may read it): "
			 "cuEventRecord (release): %s; cuStreamSynchronize: %s; release on a stream of "
			 "the device's primary context", s->device, b->seq,
			 bp_cudrv_strerror(g->d, e, a, sizeof(a)), bp_cudrv_strerror(g->d, es, b2, sizeof(b2)));
	}
	return -EIO;
}

int bc__gpu_sync(bc_batch *b)
{
	bc_stream *s = b->s;
	bc_gpu *g = s->gpu;
	CUresult e;

	if (gpu_enter(s) < 0)
		return -EIO;
	e = g->d->EventSynchronize(g->ready[b->seq % g->slots]);
	gpu_leave(g);
	if (e != CUDA_SUCCESS) {
		gpu_fail(s, g->d, "cuEventSynchronize (ready)", e);
		return -EIO;
	}
	return 0;
}

int bc_batch_wait_stream(bc_batch *b, void *stream)
{
	bc_stream *s;
	bc_gpu *g;
	CUresult e;

	if (!b || !b->held || !b->dev)
		return -EINVAL;
	s = b->s;
	g = s->gpu;
	if (gpu_enter(s) < 0)
		return -EIO;
	/* A GPU-side wait: the CPU goes on, the stream's later work starts after the copy. */
	e = g->d->StreamWaitEvent((CUstream)stream, g->ready[b->seq % g->slots], 0);
	gpu_leave(g);
	if (e != CUDA_SUCCESS) {
		gpu_fail(s, g->d, "cuStreamWaitEvent", e);
		return -EIO;
	}
	b->stream = stream;
	return 0;
}

#else /* !BATCHD_HAVE_CUDA */

int bc__gpu_uuid(bc_client *c, int ordinal, uint8_t uuid[16], char *why, size_t whylen)
{
	snprintf(why, whylen, "libbatchclient was built without CUDA");
	return 0;
}

/* Not reached: without a driver bc_open refuses a device placement first. */
int bc__gpu_open(bc_stream *s, const uint8_t want[16])
{
	snprintf(s->err, sizeof(s->err), "libbatchclient was built without CUDA");
	return -ENODEV;
}

void bc__gpu_free(bc_stream *s)
{
}

int bc__gpu_bind(bc_stream *s, const bp_ring_desc *d, uint64_t seq, void **ret_dev)
{
	*ret_dev = NULL;
	return 0;
}

/* Not reached: no batch has device memory. */
int bc__gpu_record_release(bc_batch *b)
{
	return 0;
}

int bc__gpu_sync(bc_batch *b)
{
	return -EINVAL;
}

int bc_batch_wait_stream(bc_batch *b, void *stream)
{
	/* Built without CUDA: no stream is a GPU stream, every batch is a host batch. */
	return -EINVAL;
}
#endif
