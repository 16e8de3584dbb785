/* SPDX-License-Identifier: MIT */
/*
 * fake_cudart_memory.c - the fake runtime's memory (fake_cudart_priv.h):
 * cudaMalloc's "device" memory (anonymous host mappings, counted against
 * FAKE_CUDA_TOTAL_MEMORY for cudaMemGetInfo), cudaMallocHost's pinned host
 * memory and cudaHostRegister's ranges, all in one table of blocks, so
 * that a free or an unregister of what was never allocated or registered
 * is refused as the real runtime refuses it, and a copy can be checked to
 * touch device memory where its kind says it does (rt__is_device).
 *
 * $FAKE_CUDA_PIN_FAIL makes cudaHostRegister fail (out of memory), as
 * under a low RLIMIT_MEMLOCK.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include <cuda_runtime_api.h>

#include "fake_cuda.h"
#include "fake_cudart_priv.h"

#define BLOCKS 1024

/* Host memory registered or allocated pinned, or "device" memory from cudaMalloc. */
enum block_kind { B_FREE, B_REGISTERED, B_HOST_ALLOC, B_DEVICE_ALLOC };

struct block {
	enum block_kind kind;
	uintptr_t p;
	size_t len;
};

static struct block g_blocks[BLOCKS];
static uint64_t g_device_alloc;

/* ---- blocks (called with g_lock held) ------------------------------------------------------ */

static struct block *block_at(uintptr_t p, enum block_kind kind)
{
	for (int i = 0; i < BLOCKS; i++)
		if (g_blocks[i].kind == kind && g_blocks[i].p == p)
			return &g_blocks[i];
	return NULL;
}

static int overlaps_registered(uintptr_t p, size_t len)
{
	for (int i = 0; i < BLOCKS; i++) {
		const struct block *b = &g_blocks[i];

		if ((b->kind == B_REGISTERED || b->kind == B_HOST_ALLOC) && p < b->p + b->len &&
		    b->p < p + len)
			return 1;
	}
	return 0;
}

static struct block *block_new(enum block_kind kind, uintptr_t p, size_t len)
{
	for (int i = 0; i < BLOCKS; i++) {
		if (g_blocks[i].kind == B_FREE) {
			g_blocks[i] = (struct block){ .kind = kind, .p = p, .len = len };
			return &g_blocks[i];
		}
	}
	return NULL;
}

int rt__is_device(const void *ptr, size_t len)
{
	uintptr_t p = (uintptr_t)ptr;
	int ok = 0;

	if (len == 0)
		return 1;
	if (g_device_range && g_device_range(p, len))
		return 1;
	pthread_mutex_lock(&g_lock);
	for (int i = 0; i < BLOCKS && !ok; i++) {
		const struct block *b = &g_blocks[i];

		ok = b->kind == B_DEVICE_ALLOC && p >= b->p && len <= b->len && p - b->p <= b->len - len;
	}
	pthread_mutex_unlock(&g_lock);
	return ok;
}

/* ---- memory -------------------------------------------------------------------------------- */

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
	cudaError_t e = rt__ready();

	if (e != cudaSuccess)
		return e;
	pthread_mutex_lock(&g_lock);
	*total = FAKE_CUDA_TOTAL_MEMORY;
	*free_bytes = FAKE_CUDA_TOTAL_MEMORY - g_device_alloc;
	pthread_mutex_unlock(&g_lock);
	return cudaSuccess;
}

cudaError_t cudaMalloc(void **ret, size_t len)
{
	cudaError_t e = rt__ready();
	void *p;

	if (e != cudaSuccess)
		return e;
	if (len == 0) {
		*ret = NULL;
		return cudaSuccess;
	}
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return rt__fail(cudaErrorMemoryAllocation);
	pthread_mutex_lock(&g_lock);
	if (!block_new(B_DEVICE_ALLOC, (uintptr_t)p, len)) {
		pthread_mutex_unlock(&g_lock);
		munmap(p, len);
		return rt__fail(cudaErrorMemoryAllocation);
	}
	g_device_alloc += len;
	pthread_mutex_unlock(&g_lock);
	*ret = p;
	return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
	cudaError_t e = rt__ready();
	struct block *b;
	size_t len = 0;

	if (e != cudaSuccess || !p)
		return e;   /* cudaFree(NULL): the idiom that makes the context */
	pthread_mutex_lock(&g_lock);
	b = block_at((uintptr_t)p, B_DEVICE_ALLOC);
	if (b) {
		len = b->len;
		g_device_alloc -= len;
		b->kind = B_FREE;
	}
	pthread_mutex_unlock(&g_lock);
	if (!b)
		return rt__misuse(cudaErrorInvalidValue, __func__, "not a cudaMalloc pointer");
	munmap(p, len);
	return cudaSuccess;
}

cudaError_t cudaMallocHost(void **ret, size_t len)
{
	cudaError_t e = rt__ready();
	void *p;

	if (e != cudaSuccess)
		return e;
	p = malloc(len ? len : 1);
	if (!p)
		return rt__fail(cudaErrorMemoryAllocation);
	pthread_mutex_lock(&g_lock);
	if (!block_new(B_HOST_ALLOC, (uintptr_t)p, len)) {
		pthread_mutex_unlock(&g_lock);
		free(p);
		return rt__fail(cudaErrorMemoryAllocation);
	}
	pthread_mutex_unlock(&g_lock);
	*ret = p;
	return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p)
{
	struct block *b;

	if (!p)
		return cudaSuccess;
	pthread_mutex_lock(&g_lock);
	b = block_at((uintptr_t)p, B_HOST_ALLOC);
	if (b)
		b->kind = B_FREE;
	pthread_mutex_unlock(&g_lock);
	if (!b)
		return rt__misuse(cudaErrorInvalidValue, __func__, "not a cudaMallocHost pointer");
	free(p);
	return cudaSuccess;
}

cudaError_t cudaHostRegister(void *p, size_t len, unsigned int flags)
{
	cudaError_t e = rt__ready();

	if (e != cudaSuccess)
		return e;
	if (!p || len == 0)
		return rt__fail(cudaErrorInvalidValue);
	if (getenv("FAKE_CUDA_PIN_FAIL"))
		return rt__fail(cudaErrorMemoryAllocation);
	pthread_mutex_lock(&g_lock);
	if (overlaps_registered((uintptr_t)p, len))
		e = cudaErrorHostMemoryAlreadyRegistered;
	else if (!block_new(B_REGISTERED, (uintptr_t)p, len))
		e = cudaErrorMemoryAllocation;
	pthread_mutex_unlock(&g_lock);
	if (e == cudaErrorHostMemoryAlreadyRegistered)
		return rt__misuse(e, __func__,
				  "overlaps memory registered or allocated pinned before");
	return e == cudaSuccess ? e : rt__fail(e);
}

cudaError_t cudaHostUnregister(void *p)
{
	struct block *b;

	pthread_mutex_lock(&g_lock);
	b = block_at((uintptr_t)p, B_REGISTERED);
	if (b)
		b->kind = B_FREE;
	pthread_mutex_unlock(&g_lock);
	if (!b)
		return rt__misuse(cudaErrorHostMemoryNotRegistered, __func__,
				  "not the start of a registered range");
	return cudaSuccess;
}
