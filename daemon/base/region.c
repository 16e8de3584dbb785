/* SPDX-License-Identifier: MIT */
/*
 * region.c - a huge-page region, its two-level segregated fit allocator
 * and its prefault thread (see region.h).
 *
 * Every block starts with its header: the block physically before it
 * (NULL for the first) and its size, header included, a multiple of 16
 * whose bit 0 says free. A free block also holds the links of its size
 * class's list. Class (fl, sl) holds the sizes [2^fl + sl x 2^(fl-4),
 * 2^fl + (sl+1) x 2^(fl-4)); fl_map has bit fl set when any list of fl
 * is non-empty, sl_map[fl] bit sl when list (fl, sl) is.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include "region.h"
#include "util.h"

#define SL_BITS 4u
#define SL_COUNT (1u << SL_BITS)
#define FL_COUNT 64u
#define ALIGN 16u
#define FREE_BIT 1u
#define MIN_BLOCK 32u            /* a header and a free block's two links */

typedef struct blk {
	struct blk *prev;        /* the block before it in the region, or NULL */
	uint64_t size;           /* bytes, this header included; bit 0: free */
	struct blk *next_free;   /* free blocks only: its class's list */
	struct blk *prev_free;
} blk;

_Static_assert(offsetof(blk, next_free) == BD_REGION_HEADER, "the header is what a block pays");

struct bd_region {
	uint8_t *base;
	uint64_t size;           /* bytes of blocks (mapped: map_len) */
	size_t map_len;
	bd_pages mapped;
	uint64_t used, blocks;
	uint64_t fl_map;
	uint32_t sl_map[FL_COUNT];
	blk *head[FL_COUNT][SL_COUNT];

	/* The prefault thread: it populates [0, populated) up to high + ahead. */
	uint64_t high;           /* atomic: written under the owner's lock, read by the thread */
	uint64_t populated;      /* atomic: written by the thread */
	uint64_t ahead;
	int prefault;            /* 0 off, 1 MADV_POPULATE_WRITE, 2 a write per page */
	bool thread_started, stop;
	pthread_mutex_t mu;      /* the thread's wake-ups; never held while populating */
	pthread_cond_t cond;
	pthread_t thread;
	bd_pages pages;          /* read once populated memory shows what it is */
	bool pages_read;
};

static uint64_t size_of(const blk *b)
{
	return b->size & ~(uint64_t)FREE_BIT;
}

static bool is_free(const blk *b)
{
	return b->size & FREE_BIT;
}

/* The block after b, or NULL at the region's end. */
static blk *next_of(const bd_region *r, const blk *b)
{
	uint8_t *n = (uint8_t *)b + size_of(b);

	return n < r->base + r->size ? (blk *)(void *)n : NULL;
}

/* The class a free block of `size` is listed in. */
static void class_of(uint64_t size, uint32_t *fl, uint32_t *sl)
{
	uint32_t f = 63u - (uint32_t)__builtin_clzll(size);

	*fl = f;
	*sl = (uint32_t)(size >> (f - SL_BITS)) ^ SL_COUNT;
}

/* The first class whose every block holds `size`: size rounded up to its class's top. */
static void class_for(uint64_t size, uint32_t *fl, uint32_t *sl)
{
	uint32_t f = 63u - (uint32_t)__builtin_clzll(size);

	size += ((uint64_t)1 << (f - SL_BITS)) - 1;
	class_of(size, fl, sl);
}

static void list_insert(bd_region *r, blk *b)
{
	uint32_t fl, sl;

	class_of(size_of(b), &fl, &sl);
	b->prev_free = NULL;
	b->next_free = r->head[fl][sl];
	if (b->next_free)
		b->next_free->prev_free = b;
	r->head[fl][sl] = b;
	r->fl_map |= (uint64_t)1 << fl;
	r->sl_map[fl] |= 1u << sl;
}

static void list_remove(bd_region *r, blk *b)
{
	uint32_t fl, sl;

	class_of(size_of(b), &fl, &sl);
	if (b->prev_free)
		b->prev_free->next_free = b->next_free;
	else
		r->head[fl][sl] = b->next_free;
	if (b->next_free)
		b->next_free->prev_free = b->prev_free;
	if (!r->head[fl][sl]) {
		r->sl_map[fl] &= ~(1u << sl);
		if (!r->sl_map[fl])
			r->fl_map &= ~((uint64_t)1 << fl);
	}
}

/* A free block of class (fl, sl) or above, or NULL. */
static blk *find_free(const bd_region *r, uint32_t fl, uint32_t sl)
{
	uint32_t sl_bits = r->sl_map[fl] & (~0u << sl);
	uint64_t fl_bits;

	if (!sl_bits) {
		fl_bits = fl + 1 < FL_COUNT ? r->fl_map & (~(uint64_t)0 << (fl + 1)) : 0;
		if (!fl_bits)
			return NULL;
		fl = (uint32_t)__builtin_ctzll(fl_bits);
		sl_bits = r->sl_map[fl];
	}
	return r->head[fl][__builtin_ctz(sl_bits)];
}

/*
 * A free block of need's own class that holds it, among the first few
 * listed: a cache of equal blocks frees one exactly the size the next
 * asks for, which the rounded-up class (find_free) would pass over.
 */
static blk *exact_fit(const bd_region *r, uint64_t need)
{
	uint32_t fl, sl, seen = 0;

	class_of(need, &fl, &sl);
	for (blk *b = r->head[fl][sl]; b && seen < 8; b = b->next_free, seen++)
		if (size_of(b) >= need)
			return b;
	return NULL;
}

/* ---- the prefault thread ------------------------------------------------------------- */

static uint64_t load(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

/* Fault [from, to) in, writable, without changing a byte. @return false when it cannot. */
static bool populate(bd_region *r, uint64_t from, uint64_t to)
{
	long page = sysconf(_SC_PAGESIZE);

	if (__atomic_load_n(&r->prefault, __ATOMIC_RELAXED) == 1)
		return bd_pages_populate(r->base + from, to - from) == 0;
	/* A write fault that keeps the byte: another thread may be filling the block there. */
	for (uint64_t at = from; at < to; at += (uint64_t)(page > 0 ? page : 4096))
		__atomic_fetch_or(r->base + at, 0, __ATOMIC_RELAXED);
	return true;
}

/*
 * Where the thread should have populated to: ahead of the highest block,
 * whole huge pages; nothing before the first block (an idle daemon holds
 * no more than the probe's page).
 */
static uint64_t target(const bd_region *r)
{
	uint64_t high = load(&r->high), t = high + r->ahead;

	if (!high)
		return 0;
	t = (t + BD_HUGE_PAGE - 1) & ~((uint64_t)BD_HUGE_PAGE - 1);
	return t < r->size ? t : r->size;
}

static void *prefault_main(void *arg)
{
	bd_region *r = arg;

	pthread_mutex_lock(&r->mu);
	while (!r->stop) {
		uint64_t from = load(&r->populated), to = target(r);

		if (from >= to) {
			pthread_cond_wait(&r->cond, &r->mu);
			continue;
		}
		pthread_mutex_unlock(&r->mu);
		/* A huge page at a time: a stop waits for one, not for the whole span. */
		if (to > from + BD_HUGE_PAGE)
			to = from + BD_HUGE_PAGE;
		if (!populate(r, from, to)) {
			/* Refused (out of memory, or the kind of pages): the blocks fault as they fill. */
			__atomic_store_n(&r->prefault, 0, __ATOMIC_RELAXED);
			pthread_mutex_lock(&r->mu);
			break;
		}
		pthread_mutex_lock(&r->mu);
		__atomic_store_n(&r->populated, to, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

/* Wake the thread when the blocks came within half of `ahead` of what it populated. */
static void note_high(bd_region *r, uint64_t end)
{
	if (end <= r->high)
		return;
	__atomic_store_n(&r->high, end, __ATOMIC_RELEASE);
	if (!r->thread_started || end + r->ahead / 2 < load(&r->populated))
		return;
	pthread_mutex_lock(&r->mu);
	pthread_cond_signal(&r->cond);
	pthread_mutex_unlock(&r->mu);
}

/* Which way this kernel prefaults: MADV_POPULATE_WRITE (5.14) when it takes it. */
static int probe_prefault(bd_region *r)
{
	uint64_t first = BD_HUGE_PAGE < r->size ? BD_HUGE_PAGE : r->size;
	int e = bd_pages_populate(r->base, first);

	if (e == 0) {
		__atomic_store_n(&r->populated, first, __ATOMIC_RELEASE);
		return 1;
	}
	return e == -EINVAL ? 2 : 0;
}

/* ---- the region ------------------------------------------------------------------------ */

int bd_region_new(uint64_t size, bd_pages want, uint64_t ahead, bd_region **ret)
{
	bd_region *r;
	blk *b;

	if (!size || size > (UINT64_C(1) << 62))
		return -EINVAL;
	r = bd_calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->base = bd_pages_map((size_t)size, want, &r->map_len, &r->mapped);
	if (!r->base) {
		free(r);
		return -ENOMEM;
	}
	r->size = r->map_len & ~(uint64_t)(ALIGN - 1);
	r->pages = r->mapped;
	/* One free block, the whole region (the mapping is untouched: its header faults one page). */
	b = (blk *)(void *)r->base;
	b->prev = NULL;
	b->size = r->size | FREE_BIT;
	list_insert(r, b);
	r->ahead = ahead;
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cond, NULL);
	if (ahead) {
		r->prefault = probe_prefault(r);
		if (r->prefault && pthread_create(&r->thread, NULL, prefault_main, r) == 0)
			r->thread_started = true;
	}
	*ret = r;
	return 0;
}

void bd_region_free(bd_region *r)
{
	if (!r)
		return;
	if (r->thread_started) {
		pthread_mutex_lock(&r->mu);
		r->stop = true;
		pthread_cond_signal(&r->cond);
		pthread_mutex_unlock(&r->mu);
		pthread_join(r->thread, NULL);
	}
	pthread_cond_destroy(&r->cond);
	pthread_mutex_destroy(&r->mu);
	bd_pages_unmap(r->base, r->map_len);
	free(r);
}

void *bd_region_alloc(bd_region *r, uint64_t size)
{
	uint64_t need;
	uint32_t fl, sl;
	blk *b, *rest, *n;

	if (size > r->size)
		return NULL;
	need = (size + BD_REGION_HEADER + ALIGN - 1) & ~(uint64_t)(ALIGN - 1);
	if (need < MIN_BLOCK)
		need = MIN_BLOCK;
	if (!(b = exact_fit(r, need))) {
		class_for(need, &fl, &sl);
		if (fl >= FL_COUNT || !(b = find_free(r, fl, sl)))
			return NULL;
	}
	list_remove(r, b);
	/* The rest, if a block's worth, stays free above it: blocks in use grow upwards. */
	if (size_of(b) - need >= MIN_BLOCK) {
		rest = (blk *)(void *)((uint8_t *)b + need);
		rest->prev = b;
		rest->size = (size_of(b) - need) | FREE_BIT;
		if ((n = next_of(r, rest)))
			n->prev = rest;
		b->size = need;
		list_insert(r, rest);
	} else {
		b->size = size_of(b);
	}
	r->used += size_of(b);
	r->blocks++;
	note_high(r, (uint64_t)((uint8_t *)b - r->base) + size_of(b));
	return (uint8_t *)b + BD_REGION_HEADER;
}

uint64_t bd_region_cost(const void *p)
{
	return size_of((const blk *)(const void *)((const uint8_t *)p - BD_REGION_HEADER));
}

void bd_region_release(bd_region *r, void *p)
{
	blk *b, *n;

	if (!p)
		return;
	b = (blk *)(void *)((uint8_t *)p - BD_REGION_HEADER);
	r->used -= size_of(b);
	r->blocks--;
	b->size |= FREE_BIT;
	/* Merge with the free neighbours: the one after, then the one before. */
	if ((n = next_of(r, b)) && is_free(n)) {
		list_remove(r, n);
		b->size += size_of(n);
		if ((n = next_of(r, b)))
			n->prev = b;
	}
	if (b->prev && is_free(b->prev)) {
		blk *pb = b->prev;

		list_remove(r, pb);
		pb->size += size_of(b);
		if ((n = next_of(r, pb)))
			n->prev = pb;
		b = pb;
	}
	list_insert(r, b);
}

void bd_region_get_stats(bd_region *r, bd_region_stats *ret)
{
	uint64_t populated = load(&r->populated);
	int prefault = __atomic_load_n(&r->prefault, __ATOMIC_RELAXED);

	*ret = (bd_region_stats){
		.size = r->size,
		.used = r->used,
		.blocks = r->blocks,
		.high = load(&r->high),
		.populated = populated,
		.prefault = prefault == 1 ? "populate" : prefault == 2 ? "touch" : "off",
		.pages = r->pages,
	};
	/* What the kernel gave shows once pages are in: read smaps once, then keep it. */
	if (!r->pages_read && (populated || ret->high)) {
		r->pages = bd_pages_of(r->base, r->mapped);
		r->pages_read = true;
		ret->pages = r->pages;
	}
}
