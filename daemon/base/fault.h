/* SPDX-License-Identifier: MIT */
/*
 * fault.h - fault injection for tests, compiled in only with
 * -Dfault_injection=true (tools/test.sh builds that way; release builds do
 * not contain it at all).
 *
 * The rules come from the BATCHD_FAULTS environment variable, read once
 * at startup: rules separated by ';', each a kind and key=value options:
 *
 *   read:every=N:errno=EIO       every Nth block read fails with EIO
 *   read:every=N:errno=EAGAIN    ... is answered EAGAIN (the engine retries)
 *   read:short=BYTES             reads return at most BYTES at a time
 *   read:shard=NAME:offset=OFF:errno=EIO
 *                                reads of shard NAME covering byte OFF fail
 *                                (every time: a persistent fault)
 *   read:every=N:delay_ms=MS     every Nth completion arrives MS late
 *   alloc:countdown=N            the Nth allocation through bd_malloc and
 *                                friends (util.h) fails (then they work again)
 *   alloc:after=N                every allocation after the Nth fails
 *   uring:setup=EPERM            io_uring setup fails (pread fallback)
 *   direct:off                   O_DIRECT is "unsupported" (buffered reads)
 *   keys:no_table                sessions read keys as batches need them, never
 *                                a dataset's keys whole at open (session.h)
 *
 * Thread rules: bd_fault_init at startup on the main thread; queries from
 * any thread (atomic counters).
 */
#ifndef BATCHD_DAEMON_FAULT_H
#define BATCHD_DAEMON_FAULT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "batchd-build.h"

typedef struct bd_fault_read {
	unsigned every;          /* 0: none */
	int err;                 /* positive errno for `every`, 0 when delaying */
	unsigned delay_ms;
	uint32_t short_max;      /* cap per read, 0: none */
	char shard[256];         /* "" : none */
	uint64_t offset;
	int shard_err;
} bd_fault_read;

#if BATCHD_FAULT_INJECTION
/* Parse BATCHD_FAULTS. @return 0, or -EINVAL with a message on stderr. */
int bd_fault_init(void);
const bd_fault_read *bd_fault_reads(void);
int bd_fault_uring_setup(void);   /* positive errno to force, 0 none */
bool bd_fault_direct_off(void);
bool bd_fault_key_table_off(void);
/* Should this allocation fail? Counts every call (util.h's allocators ask). */
bool bd_fault_alloc_fails(void);
#else
static inline int bd_fault_init(void) { return 0; }
static inline const bd_fault_read *bd_fault_reads(void) { return NULL; }
static inline int bd_fault_uring_setup(void) { return 0; }
static inline bool bd_fault_direct_off(void) { return false; }
static inline bool bd_fault_key_table_off(void) { return false; }
#endif

#endif
