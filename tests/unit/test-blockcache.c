/* SPDX-License-Identifier: MIT */
/*
 * test-blockcache.c - the Check suite for daemon/pipeline/blockcache.c, the decoded-block
 * cache every session shares.
 *
 * The cache promises (blockcache.h) that a block is read and decoded once per
 * stay, whoever asks: the first requester loads it, everyone who asks
 * while it loads waits and is handed back by the loader, everyone after
 * that hits. It stays within a byte budget by evicting idle entries, least
 * recently used first, never one in use, and sends what cannot fit (or is
 * over a quarter of the budget) around it. Each TCase tests one of those
 * promises, asserting the exact results, waiter lists, data and counters;
 * one case runs the hand-off across threads, so the ThreadSanitizer build
 * sees the table's locking.
 *
 * The cache's sources (with util.c and fault.c, for its allocators) are
 * compiled into this executable, as the other daemon module suites do.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <check.h>

#include "batchd-build.h"
#include "blockcache.h"
#include "fault.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* A request that may wait: the cache chains waiters through `link`. */
typedef struct waiter {
	int id;
	void *link;
	void *owner;              /* threads case: the hand_off it belongs to */
	bool handed_back;
	bd_cache_entry *entry;    /* threads case: the entry it was handed back for */
} waiter;

#define LINK offsetof(waiter, link)

static bd_cache_key key(uint64_t dataset, uint64_t shard, uint64_t block)
{
	return (bd_cache_key){ .dataset = dataset, .shard = shard, .block = block };
}

static bd_cache *cache_ok(uint64_t budget)
{
	bd_cache *c = NULL;

	ck_assert_int_eq(bd_cache_new(budget, LINK, &c), 0);
	ck_assert_ptr_nonnull(c);
	return c;
}

static bd_cache_stats stats(bd_cache *c)
{
	bd_cache_stats st;

	bd_cache_get_stats(c, &st);
	return st;
}

static void expect_stats(bd_cache *c, uint64_t hits, uint64_t misses, uint64_t waits,
			 uint64_t bypasses, uint64_t evictions, uint64_t bytes, uint64_t entries)
{
	bd_cache_stats st = stats(c);

	ck_assert_uint_eq(st.hits, hits);
	ck_assert_uint_eq(st.misses, misses);
	ck_assert_uint_eq(st.waits, waits);
	ck_assert_uint_eq(st.bypasses, bypasses);
	ck_assert_uint_eq(st.evictions, evictions);
	ck_assert_uint_eq(st.bytes, bytes);
	ck_assert_uint_eq(st.entries, entries);
}

/* The block's bytes as a loader decodes them: a pattern of the key. */
static void fill(uint8_t *p, uint64_t size, const bd_cache_key *k)
{
	for (uint64_t i = 0; i < size; i++)
		p[i] = (uint8_t)(k->dataset * 131 + k->shard * 31 + k->block * 7 + i);
}

static bool holds(const uint8_t *p, uint64_t size, const bd_cache_key *k)
{
	for (uint64_t i = 0; i < size; i++)
		if (p[i] != (uint8_t)(k->dataset * 131 + k->shard * 31 + k->block * 7 + i))
			return false;
	return true;
}

/* Get k as its first requester: LOAD, fill, loaded (nobody waiting). Keeps the reference. */
static bd_cache_entry *load_ok(bd_cache *c, const bd_cache_key *k, uint64_t size)
{
	bd_cache_entry *e = NULL;

	ck_assert_int_eq(bd_cache_get(c, k, size, NULL, &e), BD_CACHE_LOAD);
	ck_assert_ptr_nonnull(e);
	fill(bd_cache_data(e), size, k);
	ck_assert_ptr_null(bd_cache_loaded(c, e));
	return e;
}

/* Load k and drop the reference: an idle, loaded entry. */
static void resident(bd_cache *c, const bd_cache_key *k, uint64_t size)
{
	bd_cache_put(c, load_ok(c, k, size));
}

/* Get k, which must be a hit holding its bytes. Keeps the reference. */
static bd_cache_entry *hit_ok(bd_cache *c, const bd_cache_key *k, uint64_t size)
{
	bd_cache_entry *e = NULL;

	ck_assert_int_eq(bd_cache_get(c, k, size, NULL, &e), BD_CACHE_HIT);
	ck_assert_ptr_nonnull(e);
	ck_assert(holds(bd_cache_data(e), size, k));
	return e;
}

/* Is k resident and loaded? (A hit, its reference dropped again.) */
static bool is_resident(bd_cache *c, const bd_cache_key *k, uint64_t size)
{
	bd_cache_entry *e = NULL;
	int r = bd_cache_get(c, k, size, NULL, &e);

	if (r == BD_CACHE_HIT) {
		ck_assert(holds(bd_cache_data(e), size, k));
		bd_cache_put(c, e);
		return true;
	}
	/* Not there: the probe loaded it; take it out again as a failed load. */
	ck_assert_int_eq(r, BD_CACHE_LOAD);
	ck_assert_ptr_null(bd_cache_failed(c, e));
	return false;
}

/* ---- hit ------------------------------------------------------------------------ */

/* Once loaded, a block is a hit for everyone, with the loader's bytes, as one entry. */
START_TEST(test_hit)
{
	bd_cache *c = cache_ok(1 << 20);
	bd_cache_key k = key(7, 2, 40);
	bd_cache_entry *e = load_ok(c, &k, 1000), *h1, *h2;

	expect_stats(c, 0, 1, 0, 0, 0, 1000, 1);
	h1 = hit_ok(c, &k, 1000);
	h2 = hit_ok(c, &k, 1000);
	ck_assert_ptr_eq(h1, e);
	ck_assert_ptr_eq(h2, e);
	expect_stats(c, 2, 1, 0, 0, 0, 1000, 1);
	bd_cache_put(c, h1);
	bd_cache_put(c, h2);
	bd_cache_put(c, e);
	/* Idle now: still a hit. */
	bd_cache_put(c, hit_ok(c, &k, 1000));
	expect_stats(c, 3, 1, 0, 0, 0, 1000, 1);
	bd_cache_free(c);
}
END_TEST

/* A key is all three fields: a block that differs in any one is another block. */
START_TEST(test_hit_key_fields)
{
	static const bd_cache_key others[] = {
		{ .dataset = 8, .shard = 2, .block = 40 },
		{ .dataset = 7, .shard = 3, .block = 40 },
		{ .dataset = 7, .shard = 2, .block = 41 },
		{ .dataset = 40, .shard = 2, .block = 7 },
	};
	bd_cache *c = cache_ok(1 << 20);
	bd_cache_key k = key(7, 2, 40);

	resident(c, &k, 512);
	for (size_t i = 0; i < ARRAY_SIZE(others); i++) {
		bd_cache_entry *e = NULL;

		ck_assert_int_eq(bd_cache_get(c, &others[i], 512, NULL, &e), BD_CACHE_LOAD);
		fill(bd_cache_data(e), 512, &others[i]);
		ck_assert_ptr_null(bd_cache_loaded(c, e));
		bd_cache_put(c, e);
	}
	expect_stats(c, 0, 5, 0, 0, 0, 5 * 512, 5);
	/* Each holds its own bytes. */
	bd_cache_put(c, hit_ok(c, &k, 512));
	for (size_t i = 0; i < ARRAY_SIZE(others); i++)
		bd_cache_put(c, hit_ok(c, &others[i], 512));
	expect_stats(c, 5, 5, 0, 0, 0, 5 * 512, 5);
	bd_cache_free(c);
}
END_TEST

/* ---- load: the first requester loads, the others wait ------------------------------ */

START_TEST(test_load_first_requester)
{
	bd_cache *c = cache_ok(1 << 20);
	bd_cache_key k = key(1, 0, 3);
	bd_cache_entry *const sentinel = (bd_cache_entry *)(uintptr_t)0x5a5a5a5a;
	bd_cache_entry *e = NULL, *got = sentinel;
	waiter w[3] = { { .id = 0 }, { .id = 1 }, { .id = 2 } };

	ck_assert_int_eq(bd_cache_get(c, &k, 4096, NULL, &e), BD_CACHE_LOAD);
	ck_assert_ptr_nonnull(e);
	/* Counted as soon as it is claimed: room is taken before the load. */
	expect_stats(c, 0, 1, 0, 0, 0, 4096, 1);
	/* Everyone else, while it loads: WAIT, queued, *ret left alone, no second load. */
	for (size_t i = 0; i < ARRAY_SIZE(w); i++) {
		ck_assert_int_eq(bd_cache_get(c, &k, 4096, &w[i], &got), BD_CACHE_WAIT);
		ck_assert_ptr_eq(got, sentinel);
	}
	expect_stats(c, 0, 1, 3, 0, 0, 4096, 1);
	fill(bd_cache_data(e), 4096, &k);
	{
		waiter *list = bd_cache_loaded(c, e);
		size_t n = 0;

		/* Every waiter handed back once (newest first, as they were chained). */
		for (waiter *p = list; p; p = p->link, n++) {
			ck_assert_ptr_eq(p, &w[ARRAY_SIZE(w) - 1 - n]);
			p->handed_back = true;
		}
		ck_assert_uint_eq(n, ARRAY_SIZE(w));
	}
	for (size_t i = 0; i < ARRAY_SIZE(w); i++)
		ck_assert(w[i].handed_back);
	/* After the load: hits, no more waits or misses. */
	bd_cache_put(c, hit_ok(c, &k, 4096));
	expect_stats(c, 1, 1, 3, 0, 0, 4096, 1);
	for (size_t i = 0; i < ARRAY_SIZE(w); i++)
		bd_cache_put(c, e);    /* the waiters' references */
	bd_cache_put(c, e);            /* the loader's */
	bd_cache_free(c);
}
END_TEST

/* ---- wait: waiters are released when the load settles ------------------------------- */

/*
 * Success: each waiter comes back holding a reference, so the entry is not
 * evicted until every one of them has put it; then it is idle like any other.
 */
START_TEST(test_wait_loaded)
{
	/* Room for exactly four 1 KiB blocks, none over a quarter of it. */
	bd_cache *c = cache_ok(4096);
	bd_cache_key k = key(2, 1, 9);
	bd_cache_entry *e = NULL;
	waiter w[2] = { { .id = 0 }, { .id = 1 } };
	waiter *list;

	ck_assert_int_eq(bd_cache_get(c, &k, 1024, NULL, &e), BD_CACHE_LOAD);
	ck_assert_int_eq(bd_cache_get(c, &k, 1024, &w[0], &(bd_cache_entry *){ NULL }),
			 BD_CACHE_WAIT);
	ck_assert_int_eq(bd_cache_get(c, &k, 1024, &w[1], &(bd_cache_entry *){ NULL }),
			 BD_CACHE_WAIT);
	fill(bd_cache_data(e), 1024, &k);
	list = bd_cache_loaded(c, e);
	ck_assert_ptr_eq(list, &w[1]);
	ck_assert_ptr_eq(w[1].link, &w[0]);
	ck_assert_ptr_null(w[0].link);
	/* The loader lets go; the waiters' references keep it. Fill the cache. */
	bd_cache_put(c, e);
	for (uint64_t b = 100; b < 103; b++)
		resident(c, &(bd_cache_key){ 2, 1, b }, 1024);
	expect_stats(c, 0, 4, 2, 0, 0, 4096, 4);
	/* A new block evicts the oldest idle one (100), not the held one. */
	resident(c, &(bd_cache_key){ 2, 1, 200 }, 1024);
	expect_stats(c, 0, 5, 2, 0, 1, 4096, 4);
	/* One waiter done: still held by the other; the next goes is 101. */
	bd_cache_put(c, e);
	resident(c, &(bd_cache_key){ 2, 1, 201 }, 1024);
	expect_stats(c, 0, 6, 2, 0, 2, 4096, 4);
	/* Both done: idle, the most recently used; 102, 200, 201 go before it. */
	bd_cache_put(c, e);
	for (uint64_t b = 202; b < 205; b++)
		resident(c, &(bd_cache_key){ 2, 1, b }, 1024);
	expect_stats(c, 0, 9, 2, 0, 5, 4096, 4);
	resident(c, &(bd_cache_key){ 2, 1, 205 }, 1024);
	expect_stats(c, 0, 10, 2, 0, 6, 4096, 4);
	ck_assert(is_resident(c, &(bd_cache_key){ 2, 1, 202 }, 1024));
	ck_assert(!is_resident(c, &k, 1024));
	bd_cache_free(c);
}
END_TEST

/* Failure: the waiters come back holding nothing; the entry is gone; the next get loads again. */
START_TEST(test_wait_failed)
{
	bd_cache *c = cache_ok(1 << 20);
	bd_cache_key k = key(3, 0, 0);
	bd_cache_entry *e = NULL, *e2 = NULL;
	waiter w[2] = { { .id = 0 }, { .id = 1 } };
	waiter *list;

	ck_assert_int_eq(bd_cache_get(c, &k, 2000, NULL, &e), BD_CACHE_LOAD);
	ck_assert_int_eq(bd_cache_get(c, &k, 2000, &w[0], &(bd_cache_entry *){ NULL }),
			 BD_CACHE_WAIT);
	ck_assert_int_eq(bd_cache_get(c, &k, 2000, &w[1], &(bd_cache_entry *){ NULL }),
			 BD_CACHE_WAIT);
	list = bd_cache_failed(c, e);
	ck_assert_ptr_eq(list, &w[1]);
	ck_assert_ptr_eq(w[1].link, &w[0]);
	ck_assert_ptr_null(w[0].link);
	/* Nothing left of it: no bytes, no entry (the waiters hold no reference to put). */
	expect_stats(c, 0, 1, 2, 0, 0, 0, 0);
	/* The first waiter to ask again loads it anew; the second waits on that load. */
	ck_assert_int_eq(bd_cache_get(c, &k, 2000, NULL, &e2), BD_CACHE_LOAD);
	ck_assert_int_eq(bd_cache_get(c, &k, 2000, &w[0], &(bd_cache_entry *){ NULL }),
			 BD_CACHE_WAIT);
	expect_stats(c, 0, 2, 3, 0, 0, 2000, 1);
	fill(bd_cache_data(e2), 2000, &k);
	ck_assert_ptr_eq(bd_cache_loaded(c, e2), &w[0]);
	bd_cache_put(c, e2);
	bd_cache_put(c, e2);
	bd_cache_put(c, hit_ok(c, &k, 2000));
	expect_stats(c, 1, 2, 3, 0, 0, 2000, 1);
	bd_cache_free(c);
}
END_TEST

/* ---- wait, across threads ------------------------------------------------------------ */

enum { THREADS = 8, BLOCK = 3000 };

typedef struct hand_off {
	bd_cache *c;
	bd_cache_key k;
	pthread_barrier_t start;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	waiter w[THREADS];
	int result[THREADS];
	bool data_ok[THREADS];
	int handed[THREADS];      /* times waiter i was handed back */
} hand_off;

/* The loader's part: wait until everyone else queued, fill, hand each waiter back. */
static void load_and_hand_back(hand_off *h, bd_cache_entry *e)
{
	struct timespec t0, now;
	waiter *list;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (stats(h->c).waits == THREADS - 1)
			break;
		sched_yield();
	} while (now.tv_sec - t0.tv_sec < 30);
	fill(bd_cache_data(e), BLOCK, &h->k);
	list = bd_cache_loaded(h->c, e);
	pthread_mutex_lock(&h->mu);
	for (waiter *p = list; p; p = p->link) {
		h->handed[p->id]++;
		p->entry = e;
		p->handed_back = true;
	}
	pthread_cond_broadcast(&h->cv);
	pthread_mutex_unlock(&h->mu);
}

static void *requester(void *arg)
{
	waiter *w = arg;
	hand_off *h = w->owner;
	bd_cache_entry *e = NULL;
	int r;

	pthread_barrier_wait(&h->start);
	r = bd_cache_get(h->c, &h->k, BLOCK, w, &e);
	h->result[w->id] = r;
	if (r == BD_CACHE_LOAD) {
		load_and_hand_back(h, e);
	} else if (r == BD_CACHE_WAIT) {
		pthread_mutex_lock(&h->mu);
		while (!w->handed_back)
			pthread_cond_wait(&h->cv, &h->mu);
		e = w->entry;
		pthread_mutex_unlock(&h->mu);
	} else if (r != BD_CACHE_HIT) {
		return NULL;
	}
	h->data_ok[w->id] = holds(bd_cache_data(e), BLOCK, &h->k);
	bd_cache_put(h->c, e);
	return NULL;
}

/* Eight threads ask at once: one loads, seven wait and are each handed back once, with the data. */
START_TEST(test_wait_threads)
{
	hand_off *h = calloc(1, sizeof(*h));
	pthread_t th[THREADS];
	int loads = 0, waits = 0;

	ck_assert_ptr_nonnull(h);
	h->c = cache_ok(1 << 20);
	h->k = key(4, 1, 77);
	ck_assert_int_eq(pthread_barrier_init(&h->start, NULL, THREADS), 0);
	pthread_mutex_init(&h->mu, NULL);
	pthread_cond_init(&h->cv, NULL);
	for (int i = 0; i < THREADS; i++) {
		h->w[i].id = i;
		h->w[i].owner = h;
		ck_assert_int_eq(pthread_create(&th[i], NULL, requester, &h->w[i]), 0);
	}
	for (int i = 0; i < THREADS; i++)
		ck_assert_int_eq(pthread_join(th[i], NULL), 0);
	for (int i = 0; i < THREADS; i++) {
		loads += h->result[i] == BD_CACHE_LOAD;
		waits += h->result[i] == BD_CACHE_WAIT;
		ck_assert_msg(h->data_ok[i], "thread %d (result %d) saw wrong bytes", i, h->result[i]);
		ck_assert_int_eq(h->handed[i], h->result[i] == BD_CACHE_WAIT ? 1 : 0);
	}
	ck_assert_int_eq(loads, 1);
	ck_assert_int_eq(waits, THREADS - 1);
	expect_stats(h->c, 0, 1, THREADS - 1, 0, 0, BLOCK, 1);
	bd_cache_free(h->c);
	pthread_barrier_destroy(&h->start);
	pthread_mutex_destroy(&h->mu);
	pthread_cond_destroy(&h->cv);
	free(h);
}
END_TEST

/* ---- evict ---------------------------------------------------------------------------- */

/* Idle entries go least recently used first, and only as many as the new block needs. */
START_TEST(test_evict_lru)
{
	bd_cache *c = cache_ok(4 * 4096);
	bd_cache_key k[6];

	for (int i = 0; i < 6; i++)
		k[i] = key(9, 0, (uint64_t)i);
	for (int i = 0; i < 4; i++)
		resident(c, &k[i], 4096);
	expect_stats(c, 0, 4, 0, 0, 0, 4 * 4096, 4);
	/* Use block 0 again: block 1 is now the least recently used. */
	bd_cache_put(c, hit_ok(c, &k[0], 4096));
	resident(c, &k[4], 4096);
	expect_stats(c, 1, 5, 0, 0, 1, 4 * 4096, 4);
	/* A block of 2 KiB takes the 4 KiB of block 2 (the next oldest), not more. */
	resident(c, &k[5], 2048);
	expect_stats(c, 1, 6, 0, 0, 2, 3 * 4096 + 2048, 4);
	/* What is left: 0, 3, 4, 5 (probing 0, 3, 4 and 5 only hits). */
	ck_assert(is_resident(c, &k[0], 4096));
	ck_assert(is_resident(c, &k[3], 4096));
	ck_assert(is_resident(c, &k[4], 4096));
	ck_assert(is_resident(c, &k[5], 2048));
	expect_stats(c, 5, 6, 0, 0, 2, 3 * 4096 + 2048, 4);
	/* 1 and 2 are gone (each probe loads it, evicting, then fails it away). */
	ck_assert(!is_resident(c, &k[1], 4096));
	ck_assert(!is_resident(c, &k[2], 4096));
	bd_cache_free(c);
}
END_TEST

/* An entry in use (referenced, or still loading) is never evicted; with no idle one, BYPASS. */
START_TEST(test_evict_not_in_use)
{
	bd_cache *c = cache_ok(4 * 1024);
	bd_cache_key held = key(5, 0, 0), loading = key(5, 0, 1);
	bd_cache_entry *h, *l = NULL, *e = NULL;

	h = load_ok(c, &held, 1024);                 /* loaded, still referenced */
	ck_assert_int_eq(bd_cache_get(c, &loading, 1024, NULL, &l), BD_CACHE_LOAD);
	resident(c, &(bd_cache_key){ 5, 0, 2 }, 1024);
	resident(c, &(bd_cache_key){ 5, 0, 3 }, 1024);
	/* Full. New blocks can only take the two idle ones... */
	resident(c, &(bd_cache_key){ 5, 0, 4 }, 1024);
	resident(c, &(bd_cache_key){ 5, 0, 5 }, 1024);
	expect_stats(c, 0, 6, 0, 0, 2, 4 * 1024, 4);
	/* ... and while those are held too, a new block goes around the cache. */
	{
		bd_cache_entry *a = hit_ok(c, &(bd_cache_key){ 5, 0, 4 }, 1024);
		bd_cache_entry *b = hit_ok(c, &(bd_cache_key){ 5, 0, 5 }, 1024);

		ck_assert_int_eq(bd_cache_get(c, &(bd_cache_key){ 5, 0, 6 }, 1024, NULL, &e),
				 BD_CACHE_BYPASS);
		expect_stats(c, 2, 6, 0, 1, 2, 4 * 1024, 4);
		bd_cache_put(c, a);
		bd_cache_put(c, b);
	}
	/* The held and the loading block survived all of it. */
	fill(bd_cache_data(l), 1024, &loading);
	ck_assert_ptr_null(bd_cache_loaded(c, l));
	bd_cache_put(c, l);
	bd_cache_put(c, h);
	ck_assert(is_resident(c, &held, 1024));
	ck_assert(is_resident(c, &loading, 1024));
	bd_cache_free(c);
}
END_TEST

/* ---- budget accounting ------------------------------------------------------------------- */

/* bytes is the sum of the resident blocks' sizes, through loads, failures and evictions. */
START_TEST(test_budget_bytes)
{
	static const uint64_t sizes[] = { 1000, 1, 0, 2500, 1024, 77 };
	bd_cache *c = cache_ok(10000);
	bd_cache_entry *e = NULL;
	uint64_t sum = 0;

	ck_assert_uint_eq(stats(c).budget, 10000);
	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		resident(c, &(bd_cache_key){ 6, 0, i }, sizes[i]);
		sum += sizes[i];
		ck_assert_uint_eq(stats(c).bytes, sum);
		ck_assert_uint_eq(stats(c).entries, i + 1);
	}
	/* A failed load gives its bytes back at once. */
	ck_assert_int_eq(bd_cache_get(c, &(bd_cache_key){ 6, 1, 0 }, 2000, NULL, &e), BD_CACHE_LOAD);
	ck_assert_uint_eq(stats(c).bytes, sum + 2000);
	ck_assert_ptr_null(bd_cache_failed(c, e));
	ck_assert_uint_eq(stats(c).bytes, sum);
	/* Three blocks of 2500 more: the first two fit (9602 of 10000). */
	resident(c, &(bd_cache_key){ 6, 2, 0 }, 2500);
	ck_assert_uint_eq(stats(c).bytes, sum + 2500);
	ck_assert_uint_eq(stats(c).evictions, 0);
	resident(c, &(bd_cache_key){ 6, 2, 1 }, 2500);
	resident(c, &(bd_cache_key){ 6, 2, 2 }, 2500);
	/*
	 * The third would make 12102: the oldest go until it fits, blocks 0
	 * (1000), 1 (1), 2 (0) and 3 (2500): 8601 left.
	 */
	{
		bd_cache_stats st = stats(c);

		ck_assert_uint_le(st.bytes, 10000);
		ck_assert_uint_eq(st.bytes, 1024 + 77 + 3 * 2500);
		ck_assert_uint_eq(st.evictions, 4);
		ck_assert_uint_eq(st.entries, 5);
	}
	bd_cache_free(c);
}
END_TEST

/* Over a quarter of the budget, or a budget of 0: BYPASS, counted, nothing taken. */
START_TEST(test_budget_bypass)
{
	bd_cache *c = cache_ok(4000), *off = cache_ok(0);
	bd_cache_entry *const sentinel = (bd_cache_entry *)(uintptr_t)0x5a5a5a5a;
	bd_cache_entry *e = sentinel;

	ck_assert_int_eq(bd_cache_get(c, &(bd_cache_key){ 1, 1, 1 }, 1001, NULL, &e), BD_CACHE_BYPASS);
	ck_assert_ptr_eq(e, sentinel);
	expect_stats(c, 0, 0, 0, 1, 0, 0, 0);
	/* Exactly a quarter is cached. */
	resident(c, &(bd_cache_key){ 1, 1, 1 }, 1000);
	expect_stats(c, 0, 1, 0, 1, 0, 1000, 1);
	ck_assert_int_eq(bd_cache_get(off, &(bd_cache_key){ 1, 1, 1 }, 1, NULL, &e), BD_CACHE_BYPASS);
	ck_assert_int_eq(bd_cache_get(off, &(bd_cache_key){ 1, 1, 1 }, 0, NULL, &e), BD_CACHE_BYPASS);
	ck_assert_ptr_eq(e, sentinel);
	expect_stats(off, 0, 0, 0, 2, 0, 0, 0);
	ck_assert_uint_eq(stats(off).budget, 0);
	bd_cache_free(c);
	bd_cache_free(off);
	bd_cache_free(NULL);
}
END_TEST

/*
 * The region holds the entries' headers too: a budget its blocks fill
 * exactly (two huge pages of 512 KiB blocks) keeps as many as fit with
 * their headers, evicting the oldest for the next rather than growing, and
 * says so in its stats; its pages are named.
 */
START_TEST(test_budget_region)
{
	bd_cache *c = cache_ok(4 << 20);
	bd_cache_stats st;

	for (uint64_t b = 0; b < 8; b++)
		resident(c, &(bd_cache_key){ 1, 1, b }, 512 << 10);
	st = stats(c);
	ck_assert_uint_eq(st.entries, 7);
	ck_assert_uint_eq(st.evictions, 1);
	for (uint64_t b = 1; b < 8; b++)
		ck_assert(is_resident(c, &(bd_cache_key){ 1, 1, b }, 512 << 10));
	/* Last: probing a missing block loads it, evicting the oldest again. */
	ck_assert(!is_resident(c, &(bd_cache_key){ 1, 1, 0 }, 512 << 10));
	ck_assert_uint_le(st.region_used, UINT64_C(4) << 20);
	ck_assert_uint_ge(st.region_used, st.bytes);
	/* The prefault thread runs ahead of the highest entry (to the region's end here). */
	for (int i = 0; i < 5000 && stats(c).region_populated < (UINT64_C(4) << 20); i++)
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	ck_assert_uint_eq(stats(c).region_populated, UINT64_C(4) << 20);
	ck_assert_msg(strcmp(st.pages, "none") != 0, "pages %s", st.pages);
	ck_assert_uint_eq(st.table_bytes, bd_cache_table_bytes(4 << 20));
	bd_cache_free(c);
}
END_TEST

/* ---- allocation failure ------------------------------------------------------------------ */

/*
 * A failed allocation in bd_cache_new (the cache, its table, its LRU
 * sentinel, its region): -ENOMEM and nothing made, AddressSanitizer
 * checks nothing leaks. Entries come from the region, never from the
 * heap: a fifth allocation failing leaves loads working. Needs the fault
 * layer (-Dfault_injection=true): the countdown counts this process's
 * allocations through util.h from the start of the test's forked child.
 */
START_TEST(test_nomem)
{
#if BATCHD_FAULT_INJECTION
	char rule[32];
	bd_cache *c = NULL;

	/* _i 0-3: bd_cache_new's first .. fourth allocation fails; 4: the fifth (no entry's). */
	snprintf(rule, sizeof(rule), "alloc:countdown=%d", 1 + _i);
	ck_assert_int_eq(setenv("BATCHD_FAULTS", rule, 1), 0);
	ck_assert_int_eq(bd_fault_init(), 0);
	if (_i < 4) {
		ck_assert_int_eq(bd_cache_new(1 << 20, LINK, &c), -ENOMEM);
		ck_assert_ptr_null(c);
		return;
	}
	c = cache_ok(1 << 20);
	resident(c, &(bd_cache_key){ 1, 2, 3 }, 100);
	expect_stats(c, 0, 1, 0, 0, 0, 100, 1);
	bd_cache_free(c);
#else
	fprintf(stderr, "test-cache: note: nomem needs -Dfault_injection=true; not checked\n");
#endif
}
END_TEST

static Suite *cache_suite(void)
{
	Suite *s = suite_create("cache");
	TCase *tc;

	tc = tcase_create("hit");
	tcase_add_test(tc, test_hit);
	tcase_add_test(tc, test_hit_key_fields);
	suite_add_tcase(s, tc);

	tc = tcase_create("load");
	tcase_add_test(tc, test_load_first_requester);
	suite_add_tcase(s, tc);

	tc = tcase_create("wait");
	tcase_add_test(tc, test_wait_loaded);
	tcase_add_test(tc, test_wait_failed);
	tcase_add_test(tc, test_wait_threads);
	suite_add_tcase(s, tc);

	tc = tcase_create("evict");
	tcase_add_test(tc, test_evict_lru);
	tcase_add_test(tc, test_evict_not_in_use);
	suite_add_tcase(s, tc);

	tc = tcase_create("budget");
	tcase_add_test(tc, test_budget_bytes);
	tcase_add_test(tc, test_budget_bypass);
	tcase_add_test(tc, test_budget_region);
	suite_add_tcase(s, tc);

	tc = tcase_create("nomem");
	tcase_add_loop_test(tc, test_nomem, 0, 5);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr;
	int failed;

	unsetenv("BATCHD_FAULTS");
	sr = srunner_create(cache_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
