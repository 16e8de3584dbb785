/* SPDX-License-Identifier: MIT */
/*
 * remote_chunks.c - each cached object's chunk table, the LRU list of
 * chunks, and the memory both take.
 *
 * An object's size comes from the bucket (a HEAD's Content-Length, a
 * listing's Size, a map found on disk), so a table sized by it would let
 * a server decide an allocation: one HEAD claiming 15 TiB with 64 KiB
 * chunks once cost 10 GB. The table has three levels instead: an array of
 * directory pointers made with the object (8 bytes per BD_CHUNK_DIR x
 * BD_CHUNK_PAGE chunks: 512 KiB for 4 TiB in 64 KiB chunks), directories of
 * page pointers and pages of chunk records made when a read first touches
 * one of their chunks, freed when every chunk below them is idle again; so
 * what the tables hold follows what is cached and in flight, not what is
 * claimed.
 * Objects over S3's 5 TiB limit are refused outright. Records, page
 * arrays and pages are counted in R.table_bytes, which never goes over
 * R.table_max (bd_remote_table_budget, set aside from the sessions'
 * budget): an open or a read that would go over is refused with ENOMEM.
 *
 * The chunk functions are called under R.mu; R.table_bytes is atomic, so
 * that records are made and freed outside it too.
 */
#include <errno.h>
#include <stdlib.h>

#include "remote_priv.h"

#define PAGE_BYTES (BD_CHUNK_PAGE * sizeof(bd_chunk))
#define DIR_BYTES (BD_CHUNK_DIR * sizeof(bd_chunk *))

uint64_t bd_remote_table_budget(uint64_t max_size, uint32_t chunk)
{
	/*
	 * A directory and a page for every chunk max_size holds, each alone in
	 * its directory (the most scattered reads), and slack for opens.
	 */
	return BD_REMOTE_TABLE_BASE + max_size / chunk * (PAGE_BYTES + DIR_BYTES + 64);
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

static uint32_t npages(const bd_robj *o)
{
	return (o->nchunks + BD_CHUNK_PAGE - 1) / BD_CHUNK_PAGE;
}

static uint32_t ndirs(const bd_robj *o)
{
	return (npages(o) + BD_CHUNK_DIR - 1) / BD_CHUNK_DIR;
}

size_t bd__robj_table_need(uint64_t size, size_t record)
{
	uint64_t chunks = (size + R.chunk - 1) / R.chunk;
	uint64_t pages = (chunks + BD_CHUNK_PAGE - 1) / BD_CHUNK_PAGE;

	return record + (size_t)((pages + BD_CHUNK_DIR - 1) / BD_CHUNK_DIR) * sizeof(bd_chunk **);
}

int bd__chunks_init(bd_robj *o, size_t record)
{
	size_t n = bd__robj_table_need(o->size, record);

	if (!charge(n))
		return -ENOSPC;
	o->dirs = calloc(ndirs(o) ? ndirs(o) : 1, sizeof(*o->dirs));
	if (!o->dirs) {
		uncharge(n);
		return -ENOMEM;
	}
	o->table_bytes = n;
	return 0;
}

void bd__chunks_free(bd_robj *o)
{
	for (uint32_t d = 0; o->dirs && d < ndirs(o); d++) {
		for (uint32_t p = 0; o->dirs[d] && p < BD_CHUNK_DIR; p++)
			free(o->dirs[d][p]);
		free(o->dirs[d]);
	}
	free(o->dirs);
	o->dirs = NULL;
	uncharge(o->table_bytes);
	o->table_bytes = 0;
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

bd_chunk *bd__chunk(bd_robj *o, uint32_t i)
{
	uint32_t p = i / BD_CHUNK_PAGE, first = p * BD_CHUNK_PAGE;
	bd_chunk ***dir = &o->dirs[p / BD_CHUNK_DIR], **page;

	if (!*dir && !(*dir = table_alloc(o, DIR_BYTES)))
		return NULL;
	page = &(*dir)[p % BD_CHUNK_DIR];
	if (!*page) {
		if (!(*page = table_alloc(o, PAGE_BYTES)))
			return NULL;
		for (uint32_t k = 0; k < BD_CHUNK_PAGE; k++) {
			(*page)[k].obj = o;
			(*page)[k].idx = first + k;
		}
	}
	return &(*page)[i % BD_CHUNK_PAGE];
}

bd_chunk *bd__chunk_if(const bd_robj *o, uint32_t i)
{
	uint32_t p = i / BD_CHUNK_PAGE;
	bd_chunk **dir = o->dirs[p / BD_CHUNK_DIR];
	bd_chunk *page = dir ? dir[p % BD_CHUNK_DIR] : NULL;

	return page ? &page[i % BD_CHUNK_PAGE] : NULL;
}

bd_chunk *bd__chunk_next(const bd_robj *o, uint32_t from)
{
	uint32_t p = from / BD_CHUNK_PAGE;

	while (from < o->nchunks) {
		bd_chunk **dir = o->dirs[p / BD_CHUNK_DIR];

		if (!dir) {
			/* A whole directory unused: on to the next one. */
			p = (p / BD_CHUNK_DIR + 1) * BD_CHUNK_DIR;
		} else if (dir[p % BD_CHUNK_DIR]) {
			return &dir[p % BD_CHUNK_DIR][from % BD_CHUNK_PAGE];
		} else {
			p++;
		}
		if ((uint64_t)p * BD_CHUNK_PAGE > from)
			from = p * BD_CHUNK_PAGE;
	}
	return NULL;
}

/* Is nothing on page in use: every chunk absent, unpinned, unwaited, with nothing to punch? */
static bool idle(const bd_chunk *page)
{
	for (uint32_t k = 0; k < BD_CHUNK_PAGE; k++)
		if (page[k].state != BD_CHUNK_ABSENT || page[k].pins || page[k].waiters ||
		    page[k].punch)
			return false;
	return true;
}

void bd__chunks_trim(bd_robj *o)
{
	for (uint32_t d = 0; d < ndirs(o); d++) {
		bd_chunk **dir = o->dirs[d];
		bool empty = true;

		for (uint32_t p = 0; dir && p < BD_CHUNK_DIR; p++) {
			if (dir[p] && idle(dir[p])) {
				table_free(o, dir[p], PAGE_BYTES);
				dir[p] = NULL;
			}
			empty &= !dir[p];
		}
		if (dir && empty) {
			table_free(o, dir, DIR_BYTES);
			o->dirs[d] = NULL;
		}
	}
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
