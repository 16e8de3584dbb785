/* SPDX-License-Identifier: MIT */
/*
 * budget.h - the memory budget's ledger: what sessions and dataset
 * versions hold of it, and the one place where room is taken.
 *
 * The budget ([memory] budget) is shared by the block cache, whose share
 * is fixed at start, and what is left (`total`) by two kinds of holders:
 * sessions (their shared memory, the daemon heap they may hold, and memfds
 * their clients keep after they ended: linger.h), admitted on the loop
 * thread; and dataset versions (indexes, dictionaries, lookup tables,
 * field sections: dataset.h), admitted on libuv's workers as they load.
 * Both take from the same bytes, so an admission checks and takes under
 * one lock: two of them never both get the last bytes, and what status
 * reads is one consistent picture. Giving back never waits for room.
 *
 * Thread rules: any thread; bd_budget_set on the loop thread (start,
 * reload). The lock is a leaf: nothing else is taken while it is held.
 */
#ifndef BATCHD_DAEMON_BUDGET_H
#define BATCHD_DAEMON_BUDGET_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum bd_budget_kind {
	BD_BUDGET_SESSIONS,      /* sessions' memfds and heap, and memfds lingering after them */
	BD_BUDGET_DATASETS,      /* dataset versions in memory, and loads admitted and running */
	BD_BUDGET_KINDS
} bd_budget_kind;

/* The ledger's figures at one moment. */
typedef struct bd_budget_view {
	uint64_t total;          /* what sessions and datasets may hold together */
	uint64_t memory;         /* the [memory] budget in force: total + the block cache's */
	bool automatic;          /* memory is auto's: half the memory available at start */
	uint64_t held[BD_BUDGET_KINDS];
} bd_budget_view;

typedef struct bd_budget {
	pthread_mutex_t mu;
	bd_budget_view v;        /* under mu */
} bd_budget;

/* An empty ledger of total 0 (nothing fits until bd_budget_set). */
void bd_budget_init(bd_budget *b);
void bd_budget_destroy(bd_budget *b);

/*
 * The budget in force: memory bytes, of which the block cache takes
 * `cache` (its blocks and its bucket table); automatic: memory is auto's.
 * What is held stays, also when it is more than the new total: nothing
 * more is taken until enough is given back.
 */
void bd_budget_set(bd_budget *b, uint64_t memory, uint64_t cache, bool automatic);

/*
 * Take bytes for kind k when they fit (everything held + bytes <= total).
 * @return true when taken (0 bytes always are); false: nothing changed.
 */
bool bd_budget_take(bd_budget *b, bd_budget_kind k, uint64_t bytes);

/* Give back bytes k took (never below 0). NULL b is fine: nothing was taken. */
void bd_budget_give(bd_budget *b, bd_budget_kind k, uint64_t bytes);

/* The figures now. */
void bd_budget_get(bd_budget *b, bd_budget_view *ret);

/* Everything held (every kind) in v. */
uint64_t bd_budget_used(const bd_budget_view *v);

/*
 * What a refusal tells the operator to change, into buf: "raise [memory]
 * budget (1.00 GiB, of which the block cache, [memory] cache, takes 512
 * MiB) or lower [memory] cache", or "... (16.0 MiB; no block cache)".
 * @return buf.
 */
const char *bd_budget_remedy(const bd_budget_view *v, char *buf, size_t len);

#endif
