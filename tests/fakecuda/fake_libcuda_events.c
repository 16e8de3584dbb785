/* SPDX-License-Identifier: MIT */
/*
 * fake_libcuda_events.c - the fake driver's events (fake_libcuda_priv.h).
 * An event opened from an IPC handle is an entry of a table: either filled
 * by the in-process fake daemon (handle "FAKEIPC", the entry's index;
 * fake_cuda_event_new) or made by the fake runtime in another process
 * (handle FAKE_CUDA_RT_IPC_MAGIC), whose state is then that process's
 * shared event table, mapped here (fake_cuda.h). Streams are synchronous,
 * so an event is complete once recorded, but for what fake_libcuda.c's top
 * comment says delays it; a stream that waited on an event not complete
 * yet (cuStreamWaitEvent) has its later work wait for it on the host
 * (fake_cuda_stream_waits, which the fake runtime calls too).
 *
 * The tests read the table through fake_cuda_event and tell a fake daemon's
 * copy pending with fake_cuda_event_pending. The wait table is under
 * g_lock; the event table is the driver calls' thread's, but for the
 * atomics the fake runtime's threads read.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>

#include "fake_cuda.h"
#include "fake_libcuda_priv.h"

#define EVENTS 4096
#define OPEN_MAGIC 0x0fe7e7e7u

/* What an opened CUevent points to: its entry of g_ev. */
struct opened {
	unsigned magic;
	int index;
};

static struct fake_cuda_event g_ev[EVENTS];
static void (*g_on_record)(int index, void *stream);
/*
 * Waits made with cuStreamWaitEvent on events whose state is another
 * process's (g_lock): the stream's later work is ordered after them.
 */
#define WAITS 256
struct wait {
	uintptr_t stream;
	int index;
};
static struct wait g_waits[WAITS];
static int g_nwaits;

/* ---- test-only entry points ---------------------------------------------------------------- */

/* A free entry of the event table, marked used. @return its index, or -1. */
static int event_slot(void)
{
	for (int i = 0; i < EVENTS; i++) {
		if (!g_ev[i].used) {
			memset(&g_ev[i], 0, sizeof(g_ev[i]));
			g_ev[i].used = 1;
			g_ev[i].record_device = -1;
			return i;
		}
	}
	return -1;
}

/* A new event; its IPC handle (64 bytes) goes into handle. @return its index. */
API int fake_cuda_event_new(unsigned char handle[64])
{
	int i = event_slot();

	if (i >= 0) {
		memset(handle, 0, 64);
		memcpy(handle, "FAKEIPC", 8);
		memcpy(handle + 8, &i, sizeof(i));
	}
	return i;
}

API const struct fake_cuda_event *fake_cuda_event(int index)
{
	return index >= 0 && index < EVENTS ? &g_ev[index] : NULL;
}

API void fake_cuda_event_free(int index)
{
	if (index >= 0 && index < EVENTS)
		g_ev[index].used = 0;
}

/*
 * The in-process fake daemon's record of event `index` is pending (1)
 * until it says it completed (0): its copy has not landed. Meanwhile
 * cuEventQuery answers not ready, and cuEventSynchronize and a stream that
 * waited on it (fake_cuda_stream_waits) wait.
 */
API void fake_cuda_event_pending(int index, int pending)
{
	if (index >= 0 && index < EVENTS)
		__atomic_store_n(&g_ev[index].pending, pending, __ATOMIC_RELEASE);
}

/* Called at every cuEventRecord, before it returns (NULL: none). */
API void fake_cuda_on_record(void (*cb)(int index, void *stream))
{
	g_on_record = cb;
}

/* ---- waits --------------------------------------------------------------------------------- */

/*
 * Take one wait of `stream` (index -1) or one on event `index` (whatever
 * its stream) off the table. @return its event, or -1.
 */
static int wait_take(uintptr_t stream, int index)
{
	int ev = -1;

	pthread_mutex_lock(&g_lock);
	for (int i = 0; i < g_nwaits && ev < 0; i++) {
		if (index >= 0 ? g_waits[i].index == index : g_waits[i].stream == stream) {
			ev = g_waits[i].index;
			g_waits[i] = g_waits[--g_nwaits];
		}
	}
	pthread_mutex_unlock(&g_lock);
	return ev;
}

/* Sleep until event i completed: its shared state, or the fake daemon's word. */
static void event_wait(int i)
{
	const struct timespec ms = { .tv_sec = 0, .tv_nsec = 1000000 };

	if (g_ev[i].shared)
		fake_cuda_shm_wait(g_ev[i].shm, g_ev[i].shared);
	while (__atomic_load_n(&g_ev[i].pending, __ATOMIC_ACQUIRE))
		nanosleep(&ms, NULL);
}

/* Is event i's last record still running (its copy not landed)? */
static int event_busy(int i)
{
	return (g_ev[i].shared && !fake_cuda_shm_done(g_ev[i].shared)) ||
	       __atomic_load_n(&g_ev[i].pending, __ATOMIC_ACQUIRE);
}

/*
 * Like a GPU, which runs a stream's work after the events it waited for:
 * block until they completed (fake_cuda.h). Only events that were not
 * complete when waited on are in the table.
 */
API void fake_cuda_stream_waits(uintptr_t stream)
{
	int i;

	while ((i = wait_take(stream, -1)) >= 0)
		event_wait(i);
}

/* ---- the driver calls ---------------------------------------------------------------------- */

static struct opened *opened(CUevent ev)
{
	struct opened *o = (struct opened *)ev;

	return o && o->magic == OPEN_MAGIC ? o : NULL;
}

/*
 * Map the exporting process's shared event table and find the event of a
 * fake runtime's handle there. @return 0 and the mapping in *ret_shm (NULL
 * where the exporter has no table: its events complete at once), or -1
 * for a handle of an event that no longer lives.
 */
static int open_shared(const CUipcEventHandle *h, struct fake_cuda_shm **ret_shm)
{
	struct fake_cuda_shm *t;
	int32_t pid, index;
	uint32_t serial;
	struct stat st;
	char name[64];
	int fd;

	*ret_shm = NULL;
	memcpy(&pid, h->reserved + 8, sizeof(pid));
	memcpy(&serial, h->reserved + 12, sizeof(serial));
	memcpy(&index, h->reserved + 16, sizeof(index));
	if (index < 0 || index >= FAKE_CUDA_SHM_EVENTS)
		return 0;
	snprintf(name, sizeof(name), FAKE_CUDA_SHM_NAME, (int)pid);
	fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
	if (fd < 0 || fstat(fd, &st) < 0 || (size_t)st.st_size < sizeof(*t)) {
		fprintf(stderr, "fake libcuda: no shared event table %s (%s): event %d of process %d "
			"completes at once\n", name, fd < 0 ? strerror(errno) : "too short",
			(int)index, (int)pid);
		if (fd >= 0)
			close(fd);
		return 0;
	}
	t = mmap(NULL, sizeof(*t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (t == MAP_FAILED)
		return 0;
	if (memcmp(t->magic, FAKE_CUDA_SHM_MAGIC, sizeof(t->magic)) != 0 ||
	    __atomic_load_n(&t->ev[index].serial, __ATOMIC_ACQUIRE) != serial) {
		munmap(t, sizeof(*t));
		return -1;
	}
	*ret_shm = t;
	return 0;
}

/* Free entry i of an event opened from a fake runtime's handle. */
static void event_drop(int i)
{
	if (g_ev[i].shm)
		munmap(g_ev[i].shm, sizeof(*g_ev[i].shm));
	g_ev[i].shm = NULL;
	g_ev[i].shared = NULL;
	g_ev[i].used = 0;
}

static CUresult f_IpcOpenEventHandle(CUevent *ev, CUipcEventHandle h)
{
	static const char rt_magic[8] = FAKE_CUDA_RT_IPC_MAGIC;
	struct fake_cuda_shm *shm = NULL;
	struct opened *o;
	int i, remote = 0;

	FAIL_POINT("cuIpcOpenEventHandle");
	need_ctx();
	if (memcmp(h.reserved, rt_magic, sizeof(rt_magic)) == 0) {
		uint64_t ns;

		/* CUDA IPC handles do not cross PID namespaces (a trainer in another container). */
		memcpy(&ns, h.reserved + 24, sizeof(ns));
		if (ns && ns != fake_cuda_pid_ns())
			return CUDA_ERROR_INVALID_HANDLE;
		/* A fake runtime's event in another process: its state is in that one's table. */
		if (open_shared(&h, &shm) < 0)
			return CUDA_ERROR_INVALID_VALUE;   /* destroyed: not the client's fault */
		i = event_slot();
		if (i < 0) {
			if (shm)
				munmap(shm, sizeof(*shm));
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		g_ev[i].remote = remote = 1;
		if (shm) {
			int32_t index;

			memcpy(&index, h.reserved + 16, sizeof(index));
			g_ev[i].shm = shm;
			g_ev[i].shared = &shm->ev[index];
		}
	} else {
		memcpy(&i, h.reserved + 8, sizeof(i));
		if (memcmp(h.reserved, "FAKEIPC", 8) != 0 || i < 0 || i >= EVENTS || !g_ev[i].used)
			return CUDA_ERROR_INVALID_VALUE;   /* a hostile daemon's handle: not the client's fault */
	}
	o = calloc(1, sizeof(*o));
	if (!o) {
		if (remote)
			event_drop(i);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	o->magic = OPEN_MAGIC;
	o->index = i;
	*ev = (CUevent)(void *)o;
	g_n.events++;
	return CUDA_SUCCESS;
}

static CUresult f_EventRecord(CUevent ev, CUstream stream)
{
	struct opened *o = opened(ev);
	int dev = need_ctx();

	FAIL_POINT("cuEventRecord");
	if (!o)
		return bad(CUDA_ERROR_INVALID_HANDLE);
	/* The record follows the stream's waits: never complete before them. */
	fake_cuda_stream_waits((uintptr_t)stream);
	g_ev[o->index].records++;
	g_ev[o->index].record_stream = (void *)stream;
	g_ev[o->index].record_device = dev;
	if (g_ev[o->index].shared) {
		const char *s = getenv(FAKE_CUDA_DELAY_ENV);
		long ms = s ? atol(s) : 0;

		/*
		 * Before the caller goes on to store its release mark: whoever
		 * sees the mark and then queries the event sees this record.
		 */
		__atomic_store_n(&g_ev[o->index].shared->completes_at,
				 ms > 0 ? fake_cuda_now_ns() + (int64_t)ms * 1000000 : 0,
				 __ATOMIC_RELEASE);
	}
	if (g_on_record)
		g_on_record(o->index, (void *)stream);
	return CUDA_SUCCESS;
}

static CUresult f_EventQuery(CUevent ev)
{
	struct opened *o = opened(ev);

	if (!o)
		return bad(CUDA_ERROR_INVALID_HANDLE);
	return event_busy(o->index) ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

/* Streams are synchronous here: an event is complete once recorded, unless delayed. */
static CUresult f_EventSynchronize(CUevent ev)
{
	struct opened *o = opened(ev);

	need_ctx();
	if (!o)
		return bad(CUDA_ERROR_INVALID_HANDLE);
	g_ev[o->index].syncs++;
	event_wait(o->index);
	return CUDA_SUCCESS;
}

static CUresult f_EventDestroy(CUevent ev)
{
	struct opened *o = opened(ev);

	FAIL_POINT("cuEventDestroy");
	need_ctx();
	if (!o)
		return bad(CUDA_ERROR_INVALID_HANDLE);
	/* A stream's wait outlives the event, as in CUDA: keep its table mapped till then. */
	while (wait_take(0, o->index) >= 0)
		event_wait(o->index);
	if (g_ev[o->index].remote)
		event_drop(o->index);
	o->magic = 0;
	free(o);
	g_n.events--;
	return CUDA_SUCCESS;
}

static CUresult f_StreamWaitEvent(CUstream stream, CUevent ev, unsigned int flags)
{
	struct opened *o = opened(ev);

	FAIL_POINT("cuStreamWaitEvent");
	need_ctx();
	if (!o)
		return bad(CUDA_ERROR_INVALID_HANDLE);
	g_ev[o->index].waits++;
	g_ev[o->index].wait_stream = (void *)stream;
	g_ev[o->index].wait_flags = flags;
	if (event_busy(o->index)) {
		int full;

		pthread_mutex_lock(&g_lock);
		full = g_nwaits == WAITS;
		if (!full)
			g_waits[g_nwaits++] = (struct wait){ (uintptr_t)stream, o->index };
		pthread_mutex_unlock(&g_lock);
		/* No room to remember it: wait now, which is late enough. */
		if (full)
			event_wait(o->index);
	}
	return CUDA_SUCCESS;
}

/* The stream's own work is synchronous here: what it waits for is the events it waited on. */
static CUresult f_StreamSynchronize(CUstream stream)
{
	FAIL_POINT("cuStreamSynchronize");
	need_ctx();
	fake_cuda_stream_waits((uintptr_t)stream);
	g_n.stream_syncs++;
	return CUDA_SUCCESS;
}

const struct drv__proc drv__event_procs[] = {
	DRV_PROC(IpcOpenEventHandle), DRV_PROC(EventRecord), DRV_PROC(EventQuery),
	DRV_PROC(EventSynchronize), DRV_PROC(EventDestroy), DRV_PROC(StreamWaitEvent),
	DRV_PROC(StreamSynchronize),
	{ NULL, NULL },
};
