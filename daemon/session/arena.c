/* SPDX-License-Identifier: MIT */
/*
 * arena.c - the byte ring of a session's batch records (see arena.h).
 *
 * The live records are [tail, head) when not wrapped, else [tail, end)
 * followed by [0, head), with head <= tail.
 */
#include "arena.h"

void bd_arena_init(bd_arena *a, uint64_t size)
{
	*a = (bd_arena){ .size = size };
}

static uint64_t place(bd_arena *a, uint64_t off, uint64_t size)
{
	a->head = off + size;
	a->live++;
	return off;
}

bool bd_arena_alloc(bd_arena *a, uint64_t size, uint64_t *ret_off)
{
	if (a->live == 0) {
		/* Empty: start over at 0, whatever the old records left. */
		if (size > a->size)
			return false;
		a->tail = 0;
		a->wrapped = false;
		*ret_off = place(a, 0, size);
		return true;
	}
	if (!a->wrapped) {
		/* Room at the end, else wrap to the start if the oldest record has moved on. */
		if (a->size - a->head >= size) {
			*ret_off = place(a, a->head, size);
			return true;
		}
		if (a->tail < size)
			return false;
		a->end = a->head;
		a->wrapped = true;
		*ret_off = place(a, 0, size);
		return true;
	}
	/* Wrapped: the room is [head, tail). */
	if (a->tail - a->head < size)
		return false;
	*ret_off = place(a, a->head, size);
	return true;
}

void bd_arena_free(bd_arena *a, uint64_t size)
{
	a->tail += size;
	a->live--;
	/* The last record before the gap went: the oldest is now the one at 0. */
	if (a->wrapped && a->tail == a->end) {
		a->tail = 0;
		a->wrapped = false;
	}
}
