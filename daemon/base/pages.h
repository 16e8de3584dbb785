/* SPDX-License-Identifier: MIT */
/*
 * pages.h - read buffers on huge pages where the kernel gives them, and
 * what they actually got.
 *
 * A buffer on 2 MiB pages is physically contiguous in 2 MiB runs, so a
 * large O_DIRECT read is one device segment where separate 4 KiB pages
 * may exceed the device's max_segments and split the request; on the
 * build machine's virtio disk huge-page buffers read 1 MiB blocks several
 * times faster. Huge pages come from the hugetlb pool (MAP_HUGETLB: none
 * unless vm.nr_hugepages reserves some) or as transparent huge pages
 * (2 MiB aligned and madvise(MADV_HUGEPAGE)); a kind the kernel refuses
 * falls back silently, and bd_pages_of says afterwards what the faulted
 * pages are (THP may also be refused page by page). The daemon's read
 * pool and batchd-bench disk both map their buffers here.
 *
 * Thread rules: any thread.
 */
#ifndef BATCHD_DAEMON_PAGES_H
#define BATCHD_DAEMON_PAGES_H

#include <stddef.h>

#define BD_HUGE_PAGE ((size_t)2 << 20)

/*
 * Asked for: NORMAL, HUGE (hugetlb if reserved, else THP), HUGETLB, THP.
 * Got (bd_pages_of): NORMAL, HUGETLB, THP, or MIXED (part of it huge).
 */
typedef enum bd_pages {
	BD_PAGES_NORMAL,
	BD_PAGES_HUGE,
	BD_PAGES_HUGETLB,
	BD_PAGES_THP,
	BD_PAGES_MIXED,
} bd_pages;

/* "normal", "huge", "hugetlb", "thp", "mixed". */
const char *bd_pages_name(bd_pages p);

/*
 * Anonymous memory of at least len bytes, untouched (so that a later
 * io_uring_register_buffers faults and pins it). Huge kinds round len up
 * to 2 MiB and align the start to 2 MiB. *ret_len is the length to unmap,
 * *ret_mapped the kind mapped (NORMAL where a huge kind was refused).
 * @return the memory, or NULL when out of memory.
 */
void *bd_pages_map(size_t len, bd_pages want, size_t *ret_len, bd_pages *ret_mapped);

/*
 * Fault [p, p + len) in, writable, without changing a byte
 * (MADV_POPULATE_WRITE, Linux 5.14), so that first writes meet no page
 * fault. @return 0; -EINVAL where the kernel has no such advice; another
 * -errno (-ENOMEM: out of memory, or a part not mapped).
 */
int bd_pages_populate(void *p, size_t len);

/* Unmap what bd_pages_map returned. NULL is fine. */
void bd_pages_unmap(void *p, size_t len);

/*
 * What the faulted-in memory at p sits on (its resident part: THP when
 * all of that is), from the smaps entry of the mapping that holds it (costs a walk of the process's mappings: call it
 * once, not per request). Without a readable smaps, `mapped` stands.
 */
bd_pages bd_pages_of(const void *p, bd_pages mapped);

#endif
