/* SPDX-License-Identifier: MIT */
/*
 * fake_libcuda_memory.c - the fake driver's device memory
 * (fake_libcuda_priv.h), as the VMM calls batchd and a GPU stream make:
 * an allocation is a memfd (cuMemCreate makes one, exporting it dups it,
 * importing takes any memfd), a reserved range is PROT_NONE address space,
 * and mapping an allocation into it maps the memfd MAP_SHARED there,
 * readable and writable only once cuMemSetAccess granted the current
 * device, so a device pointer is host memory and what one process copies
 * into it the other reads.
 *
 * It holds the client to what the real driver refuses: whole granules,
 * unmapping before freeing a range, the right device given access, no
 * stale allocation handle; and counts what is held (handles, reserved,
 * mapped) for the tests. The fake runtime asks which addresses are
 * device memory from any thread (fake_cuda_device_range), so the range
 * table is under g_lock.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cuda.h>

#include "fake_cuda.h"
#include "fake_libcuda_priv.h"

#define RANGES 64
#define ALLOC_MAGIC 0xa110ca7eu

/* What an allocation handle points to: its memfd. */
struct alloc {
	unsigned magic;
	int fd;
	int exportable;        /* made with POSIX fd handles requested, or imported */
	uint64_t size;
};

/* A reserved address range: whether an allocation is mapped there, and accessible. */
struct range {
	CUdeviceptr base;
	size_t size;
	int used, mapped, access;
};

static struct range g_ranges[RANGES];

/* ---- the fake runtime's hook, and the driver calls ----------------------------------------- */

API int fake_cuda_device_range(uintptr_t p, size_t len)
{
	int ok = 0;

	pthread_mutex_lock(&g_lock);
	for (int i = 0; i < RANGES && !ok; i++) {
		const struct range *r = &g_ranges[i];

		ok = r->used && r->mapped && r->access && p >= r->base &&
		     len <= r->size && p - r->base <= r->size - len;
	}
	pthread_mutex_unlock(&g_lock);
	return ok;
}

/* Called with g_lock held. */
static struct range *range_at(CUdeviceptr p, size_t size)
{
	for (int i = 0; i < RANGES; i++)
		if (g_ranges[i].used && g_ranges[i].base == p && g_ranges[i].size == size)
			return &g_ranges[i];
	return NULL;
}

static struct alloc *alloc_of(CUmemGenericAllocationHandle h)
{
	struct alloc *a = (struct alloc *)(uintptr_t)h;

	return a && a->magic == ALLOC_MAGIC ? a : NULL;
}

static CUresult f_MemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *p,
					      CUmemAllocationGranularity_flags o)
{
	if (p->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    p->location.type != CU_MEM_LOCATION_TYPE_DEVICE || p->location.id < 0 ||
	    p->location.id >= DEVICES)
		return bad(CUDA_ERROR_INVALID_VALUE);
	*g = FAKE_CUDA_GRANULARITY;
	return CUDA_SUCCESS;
}

/* Device memory is a memfd of the size asked for (which must be whole granules). */
static CUresult f_MemCreate(CUmemGenericAllocationHandle *h, size_t size,
			    const CUmemAllocationProp *p, unsigned long long flags)
{
	struct alloc *a;
	int fd;

	FAIL_POINT("cuMemCreate");
	need_ctx();
	if (size == 0 || size % FAKE_CUDA_GRANULARITY || flags ||
	    p->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    p->location.type != CU_MEM_LOCATION_TYPE_DEVICE || p->location.id < 0 ||
	    p->location.id >= DEVICES)
		return bad(CUDA_ERROR_INVALID_VALUE);
	if (size > FAKE_CUDA_TOTAL_MEMORY)
		return CUDA_ERROR_OUT_OF_MEMORY;
	fd = memfd_create("fake-cuda-device-memory", MFD_CLOEXEC);
	if (fd < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	a = calloc(1, sizeof(*a));
	if (!a || ftruncate(fd, (off_t)size) < 0) {
		free(a);
		close(fd);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	a->magic = ALLOC_MAGIC;
	a->fd = fd;
	a->size = size;
	a->exportable = !!(p->requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	*h = (CUmemGenericAllocationHandle)(uintptr_t)a;
	g_n.handles++;
	return CUDA_SUCCESS;
}

/* The shareable handle is a new descriptor of the memfd (the caller owns it). */
static CUresult f_MemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h,
					     CUmemAllocationHandleType type,
					     unsigned long long flags)
{
	struct alloc *a = alloc_of(h);
	int fd;

	FAIL_POINT("cuMemExportToShareableHandle");
	if (!a || flags || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || !a->exportable)
		return bad(CUDA_ERROR_INVALID_VALUE);
	fd = dup(a->fd);
	if (fd < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*(int *)out = fd;
	return CUDA_SUCCESS;
}

static CUresult f_MemcpyDtoH(void *dst, CUdeviceptr src, size_t n)
{
	need_ctx();
	if (n && !fake_cuda_device_range((uintptr_t)src, n))
		return bad(CUDA_ERROR_INVALID_VALUE);
	memcpy(dst, (const void *)(uintptr_t)src, n);
	return CUDA_SUCCESS;
}

static CUresult f_MemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os,
					       CUmemAllocationHandleType type)
{
	int fd = (int)(intptr_t)os;
	struct alloc *a;
	struct stat st;

	FAIL_POINT("cuMemImportFromShareableHandle");
	need_ctx();
	if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return bad(CUDA_ERROR_INVALID_VALUE);
	if (fstat(fd, &st) < 0 || st.st_size <= 0)
		return bad(CUDA_ERROR_INVALID_VALUE);
	a = calloc(1, sizeof(*a));
	if (!a)
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* Like the driver: the allocation does not depend on the caller's descriptor. */
	a->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	a->size = (uint64_t)st.st_size;
	a->exportable = 1;
	a->magic = ALLOC_MAGIC;
	*h = (CUmemGenericAllocationHandle)(uintptr_t)a;
	g_n.handles++;
	g_n.imports++;
	return CUDA_SUCCESS;
}

static CUresult f_MemRelease(CUmemGenericAllocationHandle h)
{
	struct alloc *a = alloc_of(h);

	FAIL_POINT("cuMemRelease");
	need_ctx();
	if (!a)
		return bad(CUDA_ERROR_INVALID_VALUE);
	close(a->fd);
	a->magic = 0;
	free(a);
	g_n.handles--;
	return CUDA_SUCCESS;
}

static CUresult f_MemAddressReserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr,
				    unsigned long long flags)
{
	CUresult e = CUDA_ERROR_OUT_OF_MEMORY;
	void *m;

	FAIL_POINT("cuMemAddressReserve");
	need_ctx();
	if (size == 0 || addr || flags || (align & (align - 1)))
		return bad(CUDA_ERROR_INVALID_VALUE);
	pthread_mutex_lock(&g_lock);
	for (int i = 0; i < RANGES; i++) {
		if (!g_ranges[i].used) {
			m = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
				 -1, 0);
			if (m == MAP_FAILED)
				break;
			g_ranges[i] = (struct range){ .base = (CUdeviceptr)(uintptr_t)m, .size = size,
						      .used = 1 };
			*p = g_ranges[i].base;
			g_n.reserved++;
			e = CUDA_SUCCESS;
			break;
		}
	}
	pthread_mutex_unlock(&g_lock);
	return e;
}

static CUresult f_MemAddressFree(CUdeviceptr p, size_t size)
{
	struct range *r;
	int ok;

	FAIL_POINT("cuMemAddressFree");
	need_ctx();
	pthread_mutex_lock(&g_lock);
	r = range_at(p, size);
	ok = r && !r->mapped;
	if (ok) {
		munmap((void *)(uintptr_t)p, size);
		r->used = 0;
		g_n.reserved--;
	}
	pthread_mutex_unlock(&g_lock);
	return ok ? CUDA_SUCCESS : bad(CUDA_ERROR_INVALID_VALUE);
}

static CUresult f_MemMap(CUdeviceptr p, size_t size, size_t offset,
			 CUmemGenericAllocationHandle h, unsigned long long flags)
{
	struct alloc *a = alloc_of(h);
	CUresult e = CUDA_SUCCESS;
	struct range *r;

	FAIL_POINT("cuMemMap");
	need_ctx();
	pthread_mutex_lock(&g_lock);
	r = range_at(p, size);
	if (!r || r->mapped || !a || flags || offset > a->size || size > a->size - offset)
		e = CUDA_ERROR_INVALID_VALUE;
	/* No access until cuMemSetAccess grants it, as on a GPU. */
	else if (mmap((void *)(uintptr_t)p, size, PROT_NONE, MAP_SHARED | MAP_FIXED, a->fd,
		      (off_t)offset) == MAP_FAILED)
		e = CUDA_ERROR_OUT_OF_MEMORY;
	else
		r->mapped = 1;
	if (e == CUDA_SUCCESS)
		g_n.mapped++;
	pthread_mutex_unlock(&g_lock);
	return e == CUDA_ERROR_INVALID_VALUE ? bad(e) : e;
}

static CUresult f_MemUnmap(CUdeviceptr p, size_t size)
{
	struct range *r;
	int ok;

	FAIL_POINT("cuMemUnmap");
	need_ctx();
	pthread_mutex_lock(&g_lock);
	r = range_at(p, size);
	ok = r && r->mapped;
	if (ok) {
		mmap((void *)(uintptr_t)p, size, PROT_NONE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
		r->mapped = r->access = 0;
		g_n.mapped--;
	}
	pthread_mutex_unlock(&g_lock);
	return ok ? CUDA_SUCCESS : bad(CUDA_ERROR_INVALID_VALUE);
}

static CUresult f_MemSetAccess(CUdeviceptr p, size_t size, const CUmemAccessDesc *d,
			       size_t count)
{
	int dev = need_ctx(), ok;
	struct range *r;

	FAIL_POINT("cuMemSetAccess");
	pthread_mutex_lock(&g_lock);
	r = range_at(p, size);
	ok = r && r->mapped && count == 1 && d->location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
	     d->location.id == dev && d->flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	if (ok) {
		mprotect((void *)(uintptr_t)p, size, PROT_READ | PROT_WRITE);
		r->access = 1;
	}
	pthread_mutex_unlock(&g_lock);
	return ok ? CUDA_SUCCESS : bad(CUDA_ERROR_INVALID_VALUE);
}

const struct drv__proc drv__memory_procs[] = {
	DRV_PROC(MemGetAllocationGranularity), DRV_PROC(MemCreate), DRV_PROC(MemRelease),
	DRV_PROC(MemExportToShareableHandle), DRV_PROC(MemImportFromShareableHandle),
	DRV_PROC(MemAddressReserve), DRV_PROC(MemAddressFree), DRV_PROC(MemMap), DRV_PROC(MemUnmap),
	DRV_PROC(MemSetAccess), DRV_PROC(MemcpyDtoH),
	{ NULL, NULL },
};
