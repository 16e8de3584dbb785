/* SPDX-License-Identifier: MIT */
/*
 * remote_chunks.c - each cached object's chunk table, the LRU list of
 * chunks, and the memory both take.
 *
 * An object's size comes from the bucket (a HEAD's Content-Length, a
 * listing's Size, a map found on disk), so a table sized by it would let
 * a server decide an allocation: one HEAD claiming 15 TiB with 64 KiB
 * chunks once cost 10 GB. The table is two-level instead: an array of
 * page pointers (8 bytes per BD_CHUNK_PAGE chunks) made with the object,
 * and pages of chunk records made when a read first touches one of their
 * chunks and freed when every chunk on them is idle again; so what the
 * tables hold follows what is cached and in flight, not what is claimed.
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

uint64_t bd_remote_table_budget(uint64_t max_size, uint32_t chunk)
{
	/* Pages enough for every chunk max_size holds, each alone on its page, and slack for opens. */
	return BD_REMOTE_TABLE_BASE + max_size / chunk * (BD_CHUNK_PAGE * sizeof(bd_chunk) + 64);
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

size_t bd__robj_table_need(uint64_t size, size_t record)
{
	uint64_t chunks = (size + R.chunk - 1) / R.chunk;

	return record + (size_t)((chunks + BD_CHUNK_PAGE - 1) / BD_CHUNK_PAGE) * sizeof(bd_chunk *);
}

int bd__chunks_init(bd_robj *o, size_t record)
{
	size_t n = bd__robj_table_need(o->size, record);

	if (!charge(n))
		return -ENOSPC;
	o->pages = calloc(npages(o) ? npages(o) : 1, sizeof(*o->pages));
	if (!o->pages) {
		uncharge(n);
		return -ENOMEM;
	}
	o->table_bytes = n;
	return 0;
}

void bd__chunks_free(bd_robj *o)
{
	for (uint32_t p = 0; o->pages && p < npages(o); p++)
		free(o->pages[p]);
	free(o->pages);
	o->pages = NULL;
	uncharge(o->table_bytes);
	o->table_bytes = 0;
}

bd_chunk *bd__chunk(bd_robj *o, uint32_t i)
{
	bd_chunk **page = &o->pages[i / BD_CHUNK_PAGE];
	uint32_t first = i / BD_CHUNK_PAGE * BD_CHUNK_PAGE;

	if (!*page) {
		if (!charge(BD_CHUNK_PAGE * sizeof(bd_chunk)))
			return NULL;
		*page = calloc(BD_CHUNK_PAGE, sizeof(bd_chunk));
		if (!*page) {
			uncharge(BD_CHUNK_PAGE * sizeof(bd_chunk));
			return NULL;
		}
		o->table_bytes += BD_CHUNK_PAGE * sizeof(bd_chunk);
		for (uint32_t k = 0; k < BD_CHUNK_PAGE; k++) {
			(*page)[k].obj = o;
			(*page)[k].idx = first + k;
		}
	}
	return &(*page)[i % BD_CHUNK_PAGE];
}

bd_chunk *bd__chunk_if(const bd_robj *o, uint32_t i)
{
	bd_chunk *page = o->pages[i / BD_CHUNK_PAGE];

	return page ? &page[i % BD_CHUNK_PAGE] : NULL;
}

bd_chunk *bd__chunk_next(const bd_robj *o, uint32_t from)
{
	for (uint32_t p = from / BD_CHUNK_PAGE; p < npages(o); p++, from = p * BD_CHUNK_PAGE)
		if (o->pages[p] && from < o->nchunks)
			return &o->pages[p][from % BD_CHUNK_PAGE];
	return NULL;
}

/* Is nothing on page p of o in use: every chunk absent, unpinned, unwaited, with nothing to punch? */
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
	for (uint32_t p = 0; p < npages(o); p++)
		if (o->pages[p] && idle(o->pages[p])) {
			free(o->pages[p]);
			o->pages[p] = NULL;
			o->table_bytes -= BD_CHUNK_PAGE * sizeof(bd_chunk);
			uncharge(BD_CHUNK_PAGE * sizeof(bd_chunk));
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
