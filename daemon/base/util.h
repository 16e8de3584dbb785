/* SPDX-License-Identifier: MIT */
/*
 * util.h - small pieces shared across the daemon's modules, kept apart so
 * none of them has to include another module for them: the one clock for
 * durations, the growable text buffer the status, metrics and HTTP code
 * write into, and the allocators.
 *
 * The allocators are plain malloc, calloc and realloc, except in builds
 * with -Dfault_injection=true, where an "alloc:" rule of BATCHD_FAULTS
 * (fault.h) can make them fail. The data path (cache, datasets, GPU,
 * pipeline, sessions) allocates through them where a failure must be
 * survivable, so the fault tests can prove it is.
 *
 * Thread rules: all of it from any thread; one bd_text belongs to one
 * thread at a time.
 */
#ifndef BATCHD_DAEMON_UTIL_H
#define BATCHD_DAEMON_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "batchd-build.h"

/* CLOCK_MONOTONIC in nanoseconds: the daemon's one clock for durations. */
uint64_t bd_now_ns(void);

/* A growable text buffer; a failed allocation sets oom and drops output. */
typedef struct bd_text {
	char *p;
	size_t len, cap;
	bool oom;
} bd_text;

/* Append printf-style; on allocation failure sets t->oom and appends nothing more. */
__attribute__((format(printf, 2, 3)))
void bd_text_printf(bd_text *t, const char *fmt, ...);
/* Append s as a JSON string: quoted, '"' and '\\' escaped, control bytes as \\u00XX. */
void bd_text_json_str(bd_text *t, const char *s);
/* Free the buffer and reset t to empty. */
void bd_text_free(bd_text *t);

/* x rounded up to a multiple of a (a power of two). */
#define BD_ALIGN_UP(x, a) (((x) + ((uint64_t)(a) - 1)) & ~((uint64_t)(a) - 1))

/* What malloc adds to each allocation (glibc: a size word, 16-byte rounding). */
#define BD_MALLOC_OVERHEAD 16u

#if BATCHD_FAULT_INJECTION
/* As malloc, calloc, realloc; NULL with errno ENOMEM when a fault rule says so. */
void *bd_malloc(size_t n);
void *bd_calloc(size_t n, size_t size);
void *bd_realloc(void *p, size_t n);
#else
#define bd_malloc malloc
#define bd_calloc calloc
#define bd_realloc realloc
#endif

#endif
