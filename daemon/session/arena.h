/* SPDX-License-Identifier: MIT */
/*
 * arena.h - a byte ring of variable-size records, freed in the order they
 * were allocated.
 *
 * A session's batch records live in one fixed region of its shared memory
 * (lib/proto/ring.h). Records are planned in order and released by the client
 * in order, so the region is used as a ring: records go after the newest
 * one, and when the end has no room the next one wraps to offset 0 if the
 * oldest record has moved far enough on. The bytes between the last record
 * and the end are skipped until the ring wraps back, so the region never
 * fragments beyond one gap. Only offsets are handled here; the memory is
 * the caller's.
 *
 * Thread rules: an arena belongs to one thread (the session's: the loop).
 */
#ifndef BATCHD_DAEMON_ARENA_H
#define BATCHD_DAEMON_ARENA_H

#include <stdbool.h>
#include <stdint.h>

typedef struct bd_arena {
	uint64_t size;              /* bytes in the region */
	uint64_t head;              /* where the next record goes, when any is live */
	uint64_t tail;              /* the oldest live record */
	uint64_t end;               /* wrapped: the live records before the wrap end here */
	bool wrapped;               /* the newest records start at 0, before tail */
	uint64_t live;              /* records allocated and not yet freed */
} bd_arena;

/* An empty arena over size bytes. */
void bd_arena_init(bd_arena *a, uint64_t size);

/*
 * Room for a record of size bytes (> 0). @return true with *ret_off its
 * offset; false when it does not fit now (nothing changes).
 */
bool bd_arena_alloc(bd_arena *a, uint64_t size, uint64_t *ret_off);

/* Free the oldest live record, which was allocated with size bytes. */
void bd_arena_free(bd_arena *a, uint64_t size);

#endif
