/* SPDX-License-Identifier: MIT */
/*
 * blockcache.c - the shared decoded-block cache (see blockcache.h).
 *
 * A chained hash table with one bucket per 16 KiB of budget (at least 64),
 * plus an LRU list of unreferenced loaded entries. Everything under one
 * mutex; the critical sections are a handful of pointer updates. The
 * budget is the blocks'; the bucket table's bytes and the region's
 * rounding (bd_cache_table_bytes) are charged to the daemon's memory
 * budget beside it.
 *
 * Entries (header and block in one piece) are carved from a region of
 * the budget's size (region.h), faulted in once and ahead of use, reused
 * after eviction. Its pages are hugetlb pages where enough are reserved,
 * else 4 KiB ones: transparent huge pages (MADV_HUGEPAGE) were measured
 * slower, not faster (tools/bench/bench-cold.sh --against, 1 MiB
 * samples: 0.72x the malloc'd cache, with 1.4x its CPU): with THP defrag
 * at `madvise`, every huge page faulted in may compact memory first,
 * synchronously, and a fresh daemon after another's exit found memory
 * fragmented. 4 KiB pages populated by the prefault thread (one call a
 * 2 MiB step, no trap per page) cost the decode threads nothing. The budget counts the blocks' bytes; the
 * region also holds the entries' headers, so a block that finds no hole
 * in it evicts further, and bypasses when even an empty LRU leaves none.
 */
#include <errno.h>
#include <stdint.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "blockcache.h"
#include "region.h"
#include "util.h"

enum { LOADING, READY };

struct bd_cache_entry {
	bd_cache_key key;
	uint64_t size;
	int state;
	uint32_t refs;
	void *waiters;
	bd_cache_entry *hnext;          /* hash chain */
	bd_cache_entry *lprev, *lnext;  /* LRU of idle READY entries */
	/* The block, in the same allocation: a hit touches one place, not two. */
	uint8_t data[];
};

struct bd_cache {
	pthread_mutex_t mu;
	bd_region *region;              /* the entries' memory (NULL: budget 0) */
	uint64_t budget, bytes;
	uint64_t table_bytes;           /* the bucket table's (bd_cache_table_bytes) */
	size_t link;
	bd_cache_entry **table;
	size_t nbuckets;
	bd_cache_entry *lru;            /* sentinel (no data): lnext = least recently used */
	bd_cache_stats st;
};

static void **link_of(bd_cache *c, void *w)
{
	return (void **)((char *)w + c->link);
}

static size_t bucket(const bd_cache *c, const bd_cache_key *k)
{
	uint64_t h = k->dataset * 0x9e3779b97f4a7c15ull;

	h ^= k->shard * 0xbf58476d1ce4e5b9ull;
	h ^= k->block * 0x94d049bb133111ebull;
	h ^= h >> 31;
	return (size_t)(h % c->nbuckets);
}

static bool key_eq(const bd_cache_key *a, const bd_cache_key *b)
{
	return a->dataset == b->dataset && a->shard == b->shard && a->block == b->block;
}

/* One bucket per 16 KiB of budget, at least 64; none without a budget (nothing is cached). */
static size_t buckets_for(uint64_t budget)
{
	if (!budget)
		return 0;
	return budget / 16384 > 64 ? (size_t)(budget / 16384) : 64;
}

/* The region's bytes for a budget: whole huge pages. */
static uint64_t region_bytes(uint64_t budget)
{
	return (budget + BD_HUGE_PAGE - 1) & ~((uint64_t)BD_HUGE_PAGE - 1);
}

/*
 * How far above the highest entry the prefault thread keeps pages in:
 * 1/16 of the budget, 4 .. 64 MiB (64 MiB is 20 ms of a fast NVMe disk's
 * reads; the thread populates several times faster).
 */
static uint64_t prefault_ahead(uint64_t budget)
{
	uint64_t a = budget / 16;

	a = a < (UINT64_C(4) << 20) ? UINT64_C(4) << 20 : a > (UINT64_C(64) << 20)
	    ? UINT64_C(64) << 20 : a;
	return a < region_bytes(budget) ? a : region_bytes(budget);
}

uint64_t bd_cache_table_bytes(uint64_t budget)
{
	return (uint64_t)buckets_for(budget) * sizeof(bd_cache_entry *) +
	       region_bytes(budget) - budget;
}

int bd_cache_new(uint64_t budget, size_t link_offset, bd_cache **ret)
{
	bd_cache *c = bd_calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	c->budget = budget;
	c->link = link_offset;
	c->nbuckets = buckets_for(budget);
	c->table_bytes = bd_cache_table_bytes(budget);
	c->table = c->nbuckets ? bd_calloc(c->nbuckets, sizeof(*c->table)) : NULL;
	c->lru = bd_calloc(1, sizeof(*c->lru));
	if ((c->nbuckets && !c->table) || !c->lru ||
	    (budget && bd_region_new(region_bytes(budget), BD_PAGES_HUGETLB,
				     prefault_ahead(budget), &c->region) < 0)) {
		free(c->table);
		free(c->lru);
		free(c);
		return -ENOMEM;
	}
	c->lru->lnext = c->lru->lprev = c->lru;
	c->st.budget = budget;
	pthread_mutex_init(&c->mu, NULL);
	*ret = c;
	return 0;
}

static void lru_unlink(bd_cache_entry *e)
{
	if (!e->lnext)
		return;
	e->lprev->lnext = e->lnext;
	e->lnext->lprev = e->lprev;
	e->lnext = e->lprev = NULL;
}

static void lru_push(bd_cache *c, bd_cache_entry *e)
{
	e->lprev = c->lru->lprev;
	e->lnext = c->lru;
	c->lru->lprev->lnext = e;
	c->lru->lprev = e;
}

static void table_remove(bd_cache *c, bd_cache_entry *e)
{
	for (bd_cache_entry **p = &c->table[bucket(c, &e->key)]; *p; p = &(*p)->hnext)
		if (*p == e) {
			*p = e->hnext;
			return;
		}
}

static void entry_destroy(bd_cache *c, bd_cache_entry *e)
{
	c->bytes -= e->size;
	c->st.entries--;
	bd_region_release(c->region, e);
}

void bd_cache_free(bd_cache *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->nbuckets; i++)
		while (c->table[i]) {
			bd_cache_entry *e = c->table[i];

			c->table[i] = e->hnext;
			entry_destroy(c, e);
		}
	free(c->table);
	free(c->lru);
	bd_region_free(c->region);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

/* Evict the least recently used idle entry. @return false when none is idle. */
static bool evict_one(bd_cache *c)
{
	bd_cache_entry *e = c->lru->lnext;

	if (e == c->lru)
		return false;
	lru_unlink(e);
	table_remove(c, e);
	entry_destroy(c, e);
	c->st.evictions++;
	return true;
}

/*
 * An entry with room for size bytes of block, its header zeroed: the
 * budget's room made by evicting idle entries, oldest first, then a hole
 * in the region, evicting on while there is none. NULL: no room.
 */
static bd_cache_entry *entry_alloc(bd_cache *c, uint64_t size)
{
	bd_cache_entry *e;

	while (c->bytes + size > c->budget)
		if (!evict_one(c))
			return NULL;
	while (!(e = bd_region_alloc(c->region, sizeof(*e) + size)))
		if (!evict_one(c))
			return NULL;
	memset(e, 0, sizeof(*e));
	return e;
}

int bd_cache_get(bd_cache *c, const bd_cache_key *key, uint64_t size, void *waiter,
		 bd_cache_entry **ret)
{
	bd_cache_entry *e;
	size_t b;
	int r;

	/* A block over a quarter of the budget would evict too much to be worth it. */
	if (!c->budget || size > c->budget / 4) {
		pthread_mutex_lock(&c->mu);
		c->st.bypasses++;
		pthread_mutex_unlock(&c->mu);
		return BD_CACHE_BYPASS;
	}
	pthread_mutex_lock(&c->mu);
	b = bucket(c, key);
	for (e = c->table[b]; e; e = e->hnext)
		if (key_eq(&e->key, key))
			break;
	if (e && e->state == READY) {
		lru_unlink(e);
		e->refs++;
		c->st.hits++;
		*ret = e;
		r = BD_CACHE_HIT;
	} else if (e) {
		*link_of(c, waiter) = e->waiters;
		e->waiters = waiter;
		c->st.waits++;
		r = BD_CACHE_WAIT;
	} else if (!(e = entry_alloc(c, size))) {
		c->st.bypasses++;
		r = BD_CACHE_BYPASS;
	} else {
		e->key = *key;
		e->size = size;
		e->state = LOADING;
		e->refs = 1;
		e->hnext = c->table[b];
		c->table[b] = e;
		c->bytes += size;
		c->st.entries++;
		c->st.misses++;
		*ret = e;
		r = BD_CACHE_LOAD;
	}
	pthread_mutex_unlock(&c->mu);
	return r;
}

void bd_cache_prefetch(const bd_cache *c, const bd_cache_key *key)
{
	/* Only the bucket's address: nothing is read, so no lock is needed. */
	if (c->nbuckets)
		__builtin_prefetch(&c->table[bucket(c, key)]);
}

uint8_t *bd_cache_data(bd_cache_entry *e)
{
	return e->data;
}

void *bd_cache_loaded(bd_cache *c, bd_cache_entry *e)
{
	void *w;
	uint32_t n = 0;

	pthread_mutex_lock(&c->mu);
	e->state = READY;
	w = e->waiters;
	e->waiters = NULL;
	for (void *p = w; p; p = *link_of(c, p))
		n++;
	e->refs += n;
	pthread_mutex_unlock(&c->mu);
	return w;
}

void *bd_cache_failed(bd_cache *c, bd_cache_entry *e)
{
	void *w;

	pthread_mutex_lock(&c->mu);
	w = e->waiters;
	e->waiters = NULL;
	table_remove(c, e);
	/* Only the loader held it: nobody else can see it now. */
	entry_destroy(c, e);
	pthread_mutex_unlock(&c->mu);
	return w;
}

void bd_cache_put(bd_cache *c, bd_cache_entry *e)
{
	pthread_mutex_lock(&c->mu);
	if (--e->refs == 0)
		lru_push(c, e);
	pthread_mutex_unlock(&c->mu);
}

void bd_cache_get_stats(bd_cache *c, bd_cache_stats *ret)
{
	bd_region_stats rs = { 0 };

	pthread_mutex_lock(&c->mu);
	if (c->region)
		bd_region_get_stats(c->region, &rs);
	*ret = c->st;
	ret->bytes = c->bytes;
	ret->table_bytes = c->table_bytes;
	ret->region_used = rs.used;
	ret->region_high = rs.high;
	ret->region_populated = rs.populated;
	ret->pages = rs.size ? bd_pages_name(rs.pages) : "none";
	ret->prefault = rs.size ? rs.prefault : "off";
	pthread_mutex_unlock(&c->mu);
}
