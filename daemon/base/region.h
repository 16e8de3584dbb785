/* SPDX-License-Identifier: MIT */
/*
 * region.h - one fixed span of memory (on the huge pages asked for, where
 * the kernel gives them), carved into blocks of any size, and faulted in
 * ahead of use by a thread of its own.
 *
 * The block cache takes its entries here (blockcache.c). Allocating them
 * with malloc cost a cold epoch a page fault per 4 KiB of every block
 * the RAM tier kept (a fresh mmap for each large one, unmapped again at
 * eviction): a quarter of the daemon's time. A region is mapped once
 * (bd_pages_map: from the hugetlb pool when pages are reserved there, or
 * advised for transparent huge pages, or 4 KiB pages, as asked), and its
 * blocks are reused without returning pages to the kernel, so a page is
 * faulted in once in the daemon's life; and a prefault thread keeps the
 * pages just above the highest block handed out populated
 * (MADV_POPULATE_WRITE, Linux 5.14, a call per 2 MiB; probed, else a
 * write per page), so that the cold pass's decode threads meet no fault.
 *
 * Blocks come from a two-level segregated fit (TLSF: free blocks listed
 * by size class, 16 classes per power of two; a request takes the first
 * class that surely fits; a freed block merges with its free
 * neighbours; a freed block of exactly the size asked for is taken
 * first, as a cache of equal blocks needs): O(1) allocation and free, a
 * 16-byte header a block, nothing lost to rounding but 16-byte alignment. Placement starts at the
 * region's low end (the large free remainder is split from its start),
 * so the part in use grows upwards as the prefault thread expects.
 *
 * The region's size is all the memory it ever holds: whoever charges
 * the region charges every byte its blocks can take, headers and holes
 * included. A request may find no hole although enough bytes are free
 * (fragmentation): bd_region_alloc says so with NULL and the caller
 * frees more (the cache evicts) or does without.
 *
 * Thread rules: bd_region_alloc, bd_region_release and
 * bd_region_get_stats under the caller's lock (one thread at a time);
 * bd_region_cost on any block the caller holds.
 */
#ifndef BATCHD_DAEMON_REGION_H
#define BATCHD_DAEMON_REGION_H

#include <stdint.h>

#include "pages.h"

typedef struct bd_region bd_region;

/* Bytes a block of `size` takes in a region: its header and its rounding. */
#define BD_REGION_HEADER 16u

typedef struct bd_region_stats {
	uint64_t size;          /* the region's bytes */
	uint64_t used;          /* in blocks handed out, headers and rounding included */
	uint64_t blocks;        /* blocks handed out */
	uint64_t high;          /* the highest byte ever handed out, + 1 (from the start) */
	uint64_t populated;     /* bytes from the start the prefault thread has faulted in */
	const char *prefault;   /* "populate" (MADV_POPULATE_WRITE), "touch", or "off" */
	bd_pages pages;         /* what the pages in use are (smaps; read once they are) */
} bd_region_stats;

/*
 * A region of size bytes (rounded up to 2 MiB) of `want` pages, with a
 * prefault thread keeping `ahead` bytes above the highest block
 * populated (0: no thread). @return 0; -EINVAL (size 0, or over what a
 * region addresses); -ENOMEM.
 */
int bd_region_new(uint64_t size, bd_pages want, uint64_t ahead, bd_region **ret);

/* Stops the thread, unmaps. NULL is fine. */
void bd_region_free(bd_region *r);

/*
 * A block of at least size bytes, 16-byte aligned. @return it, or NULL
 * when no free block is that large.
 */
void *bd_region_alloc(bd_region *r, uint64_t size);

/* The bytes block p takes in its region (what stats count as used). */
uint64_t bd_region_cost(const void *p);

/* Free block p (from bd_region_alloc of r; NULL is fine). */
void bd_region_release(bd_region *r, void *p);

void bd_region_get_stats(bd_region *r, bd_region_stats *ret);

#endif
