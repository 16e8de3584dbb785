/* SPDX-License-Identifier: MIT */
/*
 * sort.h - an index array sorted by 64-bit keys, in place.
 *
 * Why not qsort_r: the planner sorts every batch's samples by id on the
 * loop thread (session_plan.c), and glibc's qsort_r may take a heap
 * buffer the size of the array for its merge sort: memory no budget
 * charges, on the hot path. This quicksort allocates nothing and needs
 * no comparison callback. Any thread.
 */
#ifndef BATCHD_DAEMON_SORT_H
#define BATCHD_DAEMON_SORT_H

#include <stdint.h>

/*
 * Order o[0..n) so that keys[o[i]] never decreases (not stable: o's
 * entries of equal keys come in any order). Median-of-three quicksort,
 * insertion sort below 17 entries; O(n log n) expected, depth <= log2 n.
 */
void bd_sort_by_key(uint32_t *o, const uint64_t *keys, uint32_t n);

#endif
