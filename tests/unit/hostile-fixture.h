/* SPDX-License-Identifier: MIT */
/*
 * hostile-fixture.h - what the hostile-pack suites share
 * (test-hostile-pack.c, test-hostile-sections.c): the allocation cap every
 * test runs under, scratch files for the dataset readers, and the base
 * samples a forged pack starts from.
 *
 * A forged pack must be rejected before anything is sized by its lie, so
 * both suites run each test under the same cap (see cap_allocations) and
 * prove it is in force the same way. Not thread-safe; Check suites only.
 */
#ifndef BATCHD_TESTS_HOSTILE_FIXTURE_H
#define BATCHD_TESTS_HOSTILE_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "pack-testlib.h"

#define MiB (UINT64_C(1) << 20)

/* Most any single test may allocate (and, without ASan, map in all). */
#define ALLOC_CAP (256 * MiB)

#if defined(__SANITIZE_ADDRESS__)
#define HOSTILE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HOSTILE_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define HOSTILE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define HOSTILE_TSAN 1
#endif
#endif

/*
 * Checked fixture: runs in the forked child before each test. Caps the
 * address space at its current size + ALLOC_CAP (RLIMIT_AS); under
 * AddressSanitizer, which reserves terabytes of address space, the cap is
 * ASan's own on any single allocation instead, set by the
 * __asan_default_options in hostile-fixture.c; under ThreadSanitizer there
 * is none.
 */
void cap_allocations(void);

/* A scratch file path, unlinked (with its directory) by tmp_done(). */
typedef struct scratch_file {
	char dir[4096];
	char path[4200];
} scratch_file;

/* A fresh scratch directory and a path in it, for a pack written to disk. */
void tmp_make(scratch_file *t);
void tmp_done(scratch_file *t);
/* Write len bytes of buf to path, replacing it. */
void write_file(const char *path, const uint8_t *buf, size_t len);

/* The base samples: n samples of 4096 bytes of text. */
void base_samples(pt_samples *s, size_t n);

#endif
