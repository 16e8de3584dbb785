/* SPDX-License-Identifier: MIT */
/*
 * sort.c - an index array sorted by the keys it points at (see sort.h).
 */
#include "sort.h"

/* Short runs: insertion sort of o[0..n) by ids[o[i]]. */
static void insert_by_key(uint32_t *o, const uint64_t *ids, uint32_t n)
{
	for (uint32_t i = 1; i < n; i++) {
		uint32_t v = o[i], j = i;
		uint64_t key = ids[v];

		for (; j && ids[o[j - 1]] > key; j--)
			o[j] = o[j - 1];
		o[j] = v;
	}
}

static uint64_t median3(uint64_t a, uint64_t b, uint64_t c)
{
	if (a < b)
		return b < c ? b : a < c ? c : a;
	return a < c ? a : b < c ? c : b;
}

/*
 * Hoare's partition of o[0..n) (n >= 3) around the median of its first,
 * middle and last keys. That pivot has a key >= it before the last place
 * and a key <= it at the first, so both scans stop inside the array and
 * both sides come out non-empty. @return the size of the left side, whose
 * keys are all <= those of the right.
 */
static uint32_t partition_by_key(uint32_t *o, const uint64_t *ids, uint32_t n)
{
	uint64_t pivot = median3(ids[o[0]], ids[o[n / 2]], ids[o[n - 1]]);
	uint32_t i = 0, j = n - 1, t;

	for (;;) {
		while (ids[o[i]] < pivot)
			i++;
		while (ids[o[j]] > pivot)
			j--;
		if (i >= j)
			return j + 1;
		t = o[i];
		o[i++] = o[j];
		o[j--] = t;
	}
}

/* Recursion on the smaller side only, so depth <= log2 n. */
void bd_sort_by_key(uint32_t *o, const uint64_t *ids, uint32_t n)
{
	while (n > 16) {
		uint32_t left = partition_by_key(o, ids, n);

		if (left < n - left) {
			bd_sort_by_key(o, ids, left);
			o += left;
			n -= left;
		} else {
			bd_sort_by_key(o + left, ids, n - left);
			n = left;
		}
	}
	insert_by_key(o, ids, n);
}
