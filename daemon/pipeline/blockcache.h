/* SPDX-License-Identifier: MIT */
/*
 * blockcache.h - decoded blocks shared by every session and thread, within a
 * byte budget.
 *
 * A batch that needs only part of a block (several samples per block, or
 * block-shuffled reading that takes a few samples from each block of a
 * window) would otherwise read and decompress the whole block again for
 * every batch that touches it. The cache keeps recently decoded blocks,
 * and makes concurrent requests for a block that is being loaded wait for
 * that one load instead of starting their own: each block is read and
 * decoded once per stay in the cache, whoever asks.
 *
 * Entries are reference-counted; only unreferenced, loaded entries are
 * evicted, least recently used first. When even that cannot make room, or
 * the block is larger than a quarter of the budget, the caller decodes
 * into private scratch memory instead (BD_CACHE_BYPASS). Entries live in
 * a region of the budget's size (hugetlb pages where reserved), faulted
 * in ahead of use and reused (region.h): a cold pass filling the cache
 * meets no page fault in its decode threads.
 *
 * Thread rules: every function may be called from any thread (the
 * pipeline's I/O threads look blocks up, its decode workers fill and put
 * them); one mutex guards the table (held only for table updates, never
 * for I/O or decode).
 */
#ifndef BATCHD_DAEMON_CACHE_H
#define BATCHD_DAEMON_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct bd_cache bd_cache;
typedef struct bd_cache_entry bd_cache_entry;

enum bd_cache_result {
	BD_CACHE_HIT,     /* *ret is loaded: copy from bd_cache_data(), then put */
	BD_CACHE_LOAD,    /* *ret is new and yours to fill: bd_cache_loaded() or _failed() */
	BD_CACHE_WAIT,    /* someone is loading it: `waiter` will be handed back by them */
	BD_CACHE_BYPASS,  /* no room: load into your own memory, uncached */
};

typedef struct bd_cache_key {
	uint64_t dataset;        /* bd_dataset uid: never reused, unlike a pointer */
	uint64_t shard, block;
} bd_cache_key;

/*
 * budget 0 disables caching (every get returns BYPASS). Waiters are chained
 * through a `void *` at byte link_offset inside each waiter object.
 */
int bd_cache_new(uint64_t budget, size_t link_offset, bd_cache **ret);

/*
 * The bytes a cache of `budget` holds from bd_cache_new to bd_cache_free
 * beyond the budget (0 for budget 0): its bucket table, and its region's
 * rounding up to whole huge pages. The budget is the blocks', so whoever
 * sizes the cache charges these beside it. Any thread.
 */
uint64_t bd_cache_table_bytes(uint64_t budget);
void bd_cache_free(bd_cache *c);

/*
 * Look up key (a block of `size` raw bytes). On WAIT, `waiter` is queued
 * on the entry and returned by bd_cache_loaded()/_failed() of the loader.
 * @return enum bd_cache_result.
 */
int bd_cache_get(bd_cache *c, const bd_cache_key *key, uint64_t size, void *waiter,
		 bd_cache_entry **ret);

/*
 * A hint: key will be looked up soon. Starts loading its bucket, so that
 * a thread walking many keys overlaps their memory misses.
 */
void bd_cache_prefetch(const bd_cache *c, const bd_cache_key *key);

uint8_t *bd_cache_data(bd_cache_entry *e);

/*
 * The loader finished filling e: it becomes a hit for everyone. @return the
 * list of waiters (chained through link_offset), each holding a reference
 * to e. The loader keeps its own reference.
 */
void *bd_cache_loaded(bd_cache *c, bd_cache_entry *e);

/* The load failed: e is dropped; @return the waiters (holding no reference). */
void *bd_cache_failed(bd_cache *c, bd_cache_entry *e);

/* Drop a reference. */
void bd_cache_put(bd_cache *c, bd_cache_entry *e);

typedef struct bd_cache_stats {
	uint64_t hits, misses, waits, bypasses, evictions, bytes, entries, budget;
	uint64_t table_bytes;    /* the bucket table and the region's rounding; not in bytes */
	/*
	 * The region the entries live in (region.h): bytes in entries
	 * (headers included), the highest entry's end, what the prefault
	 * thread faulted in; the pages it got ("thp", "hugetlb", "normal",
	 * "mixed"; "none" without a budget) and how it prefaults.
	 */
	uint64_t region_used, region_high, region_populated;
	const char *pages, *prefault;
} bd_cache_stats;
void bd_cache_get_stats(bd_cache *c, bd_cache_stats *ret);

#endif
