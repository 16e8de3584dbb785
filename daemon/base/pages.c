/* SPDX-License-Identifier: MIT */
/*
 * pages.c - huge-page buffers and what they got (see pages.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>

#include "pages.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

const char *bd_pages_name(bd_pages p)
{
	switch (p) {
	case BD_PAGES_NORMAL:
		return "normal";
	case BD_PAGES_HUGE:
		return "huge";
	case BD_PAGES_HUGETLB:
		return "hugetlb";
	case BD_PAGES_THP:
		return "thp";
	case BD_PAGES_MIXED:
		return "mixed";
	}
	return "unknown";
}

/* len rounded up to 2 MiB, 2 MiB aligned, advised for THP. NULL when out of memory. */
static void *map_thp(size_t huge_len, bd_pages *ret_mapped)
{
	uint8_t *p, *aligned;

	p = mmap(NULL, huge_len + BD_HUGE_PAGE, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	/* Keep the aligned part; give back the head and tail. */
	aligned = (uint8_t *)(((uintptr_t)p + BD_HUGE_PAGE - 1) & ~((uintptr_t)BD_HUGE_PAGE - 1));
	if (aligned > p)
		munmap(p, (size_t)(aligned - p));
	if (aligned + huge_len < p + huge_len + BD_HUGE_PAGE)
		munmap(aligned + huge_len, (size_t)(p + BD_HUGE_PAGE - aligned));
	*ret_mapped = madvise(aligned, huge_len, MADV_HUGEPAGE) == 0 ? BD_PAGES_THP
								     : BD_PAGES_NORMAL;
	return aligned;
}

void *bd_pages_map(size_t len, bd_pages want, size_t *ret_len, bd_pages *ret_mapped)
{
	size_t huge_len = (len + BD_HUGE_PAGE - 1) & ~(BD_HUGE_PAGE - 1);
	void *p;

	if (!len || huge_len < len)
		return NULL;
	if (want == BD_PAGES_HUGETLB || want == BD_PAGES_HUGE) {
		p = mmap(NULL, huge_len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
		if (p != MAP_FAILED) {
			*ret_len = huge_len;
			*ret_mapped = BD_PAGES_HUGETLB;
			return p;
		}
		/* None reserved: the other huge kind when that was allowed, else normal. */
		want = want == BD_PAGES_HUGE ? BD_PAGES_THP : BD_PAGES_NORMAL;
	}
	if (want == BD_PAGES_THP) {
		p = map_thp(huge_len, ret_mapped);
		if (p)
			*ret_len = huge_len;
		return p;
	}
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	*ret_len = len;
	*ret_mapped = BD_PAGES_NORMAL;
	return p;
}

int bd_pages_populate(void *p, size_t len)
{
	return madvise(p, len, MADV_POPULATE_WRITE) == 0 ? 0 : -errno;
}

void bd_pages_unmap(void *p, size_t len)
{
	if (p)
		munmap(p, len);
}

bd_pages bd_pages_of(const void *p, bd_pages mapped)
{
	uint64_t size_kb = 0, rss_kb = 0, page_kb = 0, thp_kb = 0;
	FILE *f = fopen("/proc/self/smaps", "re");
	bool in = false;
	char line[4096];         /* a whole line: a mapping's line ends in its path */

	if (!f)
		return mapped;
	while (fgets(line, sizeof(line), f)) {
		uintptr_t lo, hi;

		if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " ", &lo, &hi) == 2) {
			if (in)
				break;
			in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
		} else if (in) {
			(void)(sscanf(line, "Size: %" SCNu64 " kB", &size_kb) ||
			       sscanf(line, "Rss: %" SCNu64 " kB", &rss_kb) ||
			       sscanf(line, "KernelPageSize: %" SCNu64 " kB", &page_kb) ||
			       sscanf(line, "AnonHugePages: %" SCNu64 " kB", &thp_kb));
		}
	}
	fclose(f);
	if (!size_kb)
		return mapped;
	if (page_kb >= BD_HUGE_PAGE >> 10)
		return BD_PAGES_HUGETLB;
	if (!thp_kb)
		return BD_PAGES_NORMAL;
	/* Of what is faulted in: a region populated in part is THP if that part is. */
	return thp_kb >= (rss_kb ? rss_kb : size_kb) ? BD_PAGES_THP : BD_PAGES_MIXED;
}
