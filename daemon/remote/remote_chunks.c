/* SPDX-License-Identifier: MIT */
/*
 * remote_chunks.c - each cached object's chunk table, the LRU list of
 * chunks, and the memory both take.
 *
 * An object's size comes from the bucket (a HEAD's Content-Length, a
 * listing's Size, a map found on disk), so a table sized by it would let
 * a server decide an allocation: one HEAD claiming 15 TiB with 64 KiB
 * chunks once cost 10 GB. An object's table is a hash of the records of
 * the chunks in use instead (open addressing on the chunk's index, linear
 * probing, at most half full): a record is made when a read first touches
 * its chunk and freed once the chunk is idle again (absent, unpinned,
 * unwaited, nothing to punch), so what the tables hold follows what is
 * cached and in flight, not what is claimed, and a chunk costs the same
 * however scattered the cached ones are. Objects over S3's 5 TiB limit
 * are refused outright. Records and slot arrays are counted in
 * R.table_bytes, which never goes over R.table_max (bd_remote_table_budget,
 * set aside from the sessions' budget): an open or a read that would go
 * over is refused with ENOMEM.
 *
 * The chunk functions are called under R.mu; R.table_bytes is atomic, so
 * that records are made and freed outside it too.
 */
#include <errno.h>
#include <stdlib.h>

#include "remote_priv.h"

/* Slots an object's table starts with, and the fewest it shrinks to. */
#define MIN_SLOTS 8u

/*
 * What one chunk in use may cost: its record with malloc's header, and the
 * slots it holds (a table at most half full, a quarter just after it grew).
 */
#define CHUNK_COST (sizeof(bd_chunk) + 16 + 4 * sizeof(bd_chunk *))

uint64_t bd_remote_table_budget(uint64_t max_size, uint32_t chunk)
{
	/* A record for every chunk max_size holds, and slack for opens. */
	return BD_REMOTE_TABLE_BASE + max_size / chunk * (CHUNK_COST + 64);
}

uint64_t bd__chunk_len(const bd_robj *o, uint32_t i)
{
	uint64_t off = (uint64_t)i * R.chunk;

	return o->size - off < R.chunk ? o->size - off : R.chunk;
}

/* Count n more bytes of tables, if they fit. */
static bool charge(size_t n)
{
	uint64_t cur = __atomic_load_n(&R.table_bytes, __ATOMIC_RELAXED);

	do {
		if (cur + n > R.table_max)
			return false;
	} while (!__atomic_compare_exchange_n(&R.table_bytes, &cur, cur + n, true, __ATOMIC_RELAXED,
					      __ATOMIC_RELAXED));
	return true;
}

static void uncharge(size_t n)
{
	__atomic_sub_fetch(&R.table_bytes, n, __ATOMIC_RELAXED);
}

size_t bd__robj_table_need(uint64_t size, size_t record)
{
	(void)size; /* the table grows with the chunks in use, not with the size claimed */
	return record + MIN_SLOTS * sizeof(bd_chunk *);
}

/* Allocate n charged bytes (zeroed) for o's table. @return NULL: over table_max or no memory. */
static void *table_alloc(bd_robj *o, size_t n)
{
	void *v;

	if (!charge(n))
		return NULL;
	if (!(v = calloc(1, n))) {
		uncharge(n);
		return NULL;
	}
	o->table_bytes += n;
	return v;
}

static void table_free(bd_robj *o, void *v, size_t n)
{
	free(v);
	o->table_bytes -= n;
	uncharge(n);
}

int bd__chunks_init(bd_robj *o, size_t record)
{
	size_t n = bd__robj_table_need(o->size, record);

	if (!charge(n))
		return -ENOSPC;
	if (!(o->slots = calloc(MIN_SLOTS, sizeof(*o->slots)))) {
		uncharge(n);
		return -ENOMEM;
	}
	o->nslots = MIN_SLOTS;
	o->table_bytes = n;
	return 0;
}

void bd__chunks_free(bd_robj *o)
{
	for (uint32_t s = 0; o->slots && s < o->nslots; s++)
		free(o->slots[s]);
	free(o->slots);
	o->slots = NULL;
	o->nslots = o->nused = 0;
	uncharge(o->table_bytes);
	o->table_bytes = 0;
}

/* Chunk i's home slot in a table of nslots (a power of two): Fibonacci hashing. */
static uint32_t home(uint32_t i, uint32_t nslots)
{
	return (uint32_t)(((uint64_t)i * UINT64_C(0x9E3779B97F4A7C15)) >> 32) & (nslots - 1);
}

/* Put c in slots (nslots of them, a power of two, with a free one). */
static void place(bd_chunk **slots, uint32_t nslots, bd_chunk *c)
{
	uint32_t s = home(c->idx, nslots);

	while (slots[s])
		s = (s + 1) & (nslots - 1);
	slots[s] = c;
}

/* o's records moved to a table of n slots. @return false: over table_max or no memory (o as it was). */
static bool rehash(bd_robj *o, uint32_t n)
{
	bd_chunk **slots = table_alloc(o, (size_t)n * sizeof(*slots));

	if (!slots)
		return false;
	for (uint32_t s = 0; s < o->nslots; s++)
		if (o->slots[s])
			place(slots, n, o->slots[s]);
	table_free(o, o->slots, (size_t)o->nslots * sizeof(*o->slots));
	o->slots = slots;
	o->nslots = n;
	return true;
}

bd_chunk *bd__chunk_if(const bd_robj *o, uint32_t i)
{
	for (uint32_t s = home(i, o->nslots);; s = (s + 1) & (o->nslots - 1)) {
		bd_chunk *c = o->slots[s];

		if (!c || c->idx == i)
			return c;
	}
}

bd_chunk *bd__chunk(bd_robj *o, uint32_t i)
{
	bd_chunk *c = bd__chunk_if(o, i);

	if (c)
		return c;
	/* At most half full, so that a probe ends soon. */
	if ((o->nused + 1) * 2 > o->nslots && !rehash(o, o->nslots * 2))
		return NULL;
	if (!(c = table_alloc(o, sizeof(*c))))
		return NULL;
	c->obj = o;
	c->idx = i;
	place(o->slots, o->nslots, c);
	o->nused++;
	return c;
}

bd_chunk *bd__chunk_next(const bd_robj *o, const bd_chunk *prev)
{
	uint32_t s = 0;

	if (prev) {
		s = home(prev->idx, o->nslots);
		while (o->slots[s] != prev)
			s = (s + 1) & (o->nslots - 1);
		s++;
	}
	for (; s < o->nslots; s++)
		if (o->slots[s])
			return o->slots[s];
	return NULL;
}

/* Is c idle: absent, unpinned, unwaited, with nothing to punch? */
static bool idle(const bd_chunk *c)
{
	return c->state == BD_CHUNK_ABSENT && !c->pins && !c->waiters && !c->punch;
}

void bd__chunks_trim(bd_robj *o)
{
	uint32_t keep = 0, n = MIN_SLOTS;
	bd_chunk **slots;

	for (uint32_t s = 0; s < o->nslots; s++)
		keep += o->slots[s] && !idle(o->slots[s]);
	if (keep == o->nused)
		return;
	while (n < 2 * keep)
		n *= 2;
	/*
	 * Into a new table: a slot emptied in place would cut the probe runs
	 * through it. Without the memory for one, the idle records stay (they
	 * are charged) until a later trim.
	 */
	if (!(slots = table_alloc(o, (size_t)n * sizeof(*slots))))
		return;
	for (uint32_t s = 0; s < o->nslots; s++) {
		bd_chunk *c = o->slots[s];

		if (c && idle(c))
			table_free(o, c, sizeof(*c));
		else if (c)
			place(slots, n, c);
	}
	table_free(o, o->slots, (size_t)o->nslots * sizeof(*o->slots));
	o->slots = slots;
	o->nslots = n;
	o->nused = keep;
}

/* ---- the LRU ----------------------------------------------------------------------------- */

void bd__lru_remove(bd_chunk *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		R.lru_head = c->next;
	if (c->next)
		c->next->prev = c->prev;
	else
		R.lru_tail = c->prev;
	c->prev = c->next = NULL;
	c->on_lru = false;
}

void bd__lru_append(bd_chunk *c)
{
	c->prev = R.lru_tail;
	c->next = NULL;
	if (R.lru_tail)
		R.lru_tail->next = c;
	else
		R.lru_head = c;
	R.lru_tail = c;
	c->on_lru = true;
}

bool bd__evict_one(void)
{
	bd_chunk *c = R.lru_head;
	bd_robj *o;
	uint64_t n;

	if (!c)
		return false;
	o = c->obj;
	n = bd__chunk_len(o, c->idx);
	bd__lru_remove(c);
	c->state = BD_CHUNK_ABSENT;
	if (!c->punch) {
		c->punch = true;
		o->punches++;
	}
	o->dirty = true;
	R.cache_bytes -= n;
	R.stats.evicted_bytes += n;
	return true;
}
