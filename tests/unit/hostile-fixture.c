/* SPDX-License-Identifier: MIT */
/*
 * hostile-fixture.c - the allocation cap, scratch files and base samples
 * the hostile-pack suites share (hostile-fixture.h), compiled into each of
 * them so that both run their tests under the same cap.
 */
#include "hostile-fixture.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <check.h>

#ifdef HOSTILE_ASAN
/* Read by ASan at startup; ASAN_OPTIONS from the environment still wins. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
	return "max_allocation_size_mb=256:allocator_may_return_null=1";
}
#endif

#if !defined(HOSTILE_ASAN) && !defined(HOSTILE_TSAN)
static uint64_t vm_size(void)
{
	unsigned long pages = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fscanf(f, "%lu", &pages), 1);
	fclose(f);
	return (uint64_t)pages * (uint64_t)sysconf(_SC_PAGESIZE);
}
#endif

void cap_allocations(void)
{
#if !defined(HOSTILE_ASAN) && !defined(HOSTILE_TSAN)
	struct rlimit rl;

	ck_assert_int_eq(getrlimit(RLIMIT_AS, &rl), 0);
	rl.rlim_cur = vm_size() + ALLOC_CAP;
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_cur > rl.rlim_max)
		rl.rlim_cur = rl.rlim_max;
	ck_assert_int_eq(setrlimit(RLIMIT_AS, &rl), 0);
#endif
}

void tmp_make(scratch_file *t)
{
	const char *base = getenv("TMPDIR");

	snprintf(t->dir, sizeof(t->dir), "%s/test-hostile-pack.XXXXXX", base && *base ? base : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(t->dir));
	snprintf(t->path, sizeof(t->path), "%s/hostile.bpk", t->dir);
}

void tmp_done(scratch_file *t)
{
	unlink(t->path);
	rmdir(t->dir);
}

void write_file(const char *path, const uint8_t *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, buf, len), (ssize_t)len);
	ck_assert_int_eq(close(fd), 0);
}

void base_samples(pt_samples *s, size_t n)
{
	pt_samples_make(s, n, 4096, 4096, PT_TEXT, 1234);
}
