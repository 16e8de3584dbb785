/* SPDX-License-Identifier: MIT */
/*
 * test-machine.c - the Check suite for daemon/base/machine.c, the memory the
 * daemon plans with: MemAvailable, or the room under its cgroup's limit
 * when lower (v2 memory.max - memory.current, v1 limit_in_bytes -
 * usage_in_bytes), "max" and v1's unlimited value meaning no limit. Each
 * case builds a /proc and /sys tree of its own in a temporary directory.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <check.h>

#include "machine.h"

#define MiB (UINT64_C(1) << 20)

static char g_dir[256], g_proc[300], g_sys[300];

static void put(const char *rel, const char *text)
{
	char path[600], *slash;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", g_dir, rel);
	/* mkdir -p of the file's directory. */
	for (slash = strchr(path + strlen(g_dir) + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
		*slash = '\0';
		ck_assert(mkdir(path, 0755) == 0 || errno == EEXIST);
		*slash = '/';
	}
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
}

static void setup(void)
{
	snprintf(g_dir, sizeof(g_dir), "%s/batchd-machine.XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(g_dir));
	snprintf(g_proc, sizeof(g_proc), "%s/proc", g_dir);
	snprintf(g_sys, sizeof(g_sys), "%s/sys", g_dir);
	/* 8 GiB available. */
	put("proc/meminfo", "MemTotal:       16777216 kB\nMemFree:  1000 kB\n"
	    "MemAvailable:    8388608 kB\nBuffers: 1 kB\n");
}

static void teardown(void)
{
	char cmd[600];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
	ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_no_cgroup_file)
{
	/* No /proc/self/cgroup: MemAvailable alone. */
	ck_assert_uint_eq(bd_machine_memory_at(g_proc, g_sys), 8192 * MiB);
}
END_TEST

START_TEST(test_v2_limit)
{
	put("proc/self/cgroup", "0::/system.slice/batchd.service\n");
	put("sys/fs/cgroup/system.slice/batchd.service/memory.max", "2147483648\n");
	put("sys/fs/cgroup/system.slice/batchd.service/memory.current", "536870912\n");
	ck_assert_uint_eq(bd_machine_memory_at(g_proc, g_sys), 1536 * MiB);
	/* Over its limit already: nothing to plan with. */
	put("sys/fs/cgroup/system.slice/batchd.service/memory.current", "3000000000\n");
	ck_assert_uint_eq(bd_machine_memory_at(g_proc, g_sys), 0);
	/* "max": no limit. */
	put("sys/fs/cgroup/system.slice/batchd.service/memory.max", "max\n");
	ck_assert_uint_eq(bd_machine_memory_at(g_proc, g_sys), 8192 * MiB);
}
END_TEST

START_TEST(test_v1_limit)
{
	put("proc/self/cgroup", "9:name=systemd:/\n4:memory:/jobs/7\n1:cpu:/\n0::/\n");
	/* v1's "no limit": LLONG_MAX rounded to a page. */
	put("sys/fs/cgroup/memory/jobs/7/memory.limit_in_bytes", "9223372036854771712\n");
	put("sys/fs/cgroup/memory/jobs/7/memory.usage_in_bytes", "1048576\n");
	ck_assert_uint_eq(bd_machine_memory_at(g_proc, g_sys), 8192 * MiB);
	put("sys/fs/cgroup/memory/jobs/7/memory.limit_in_bytes", "1073741824\n");
	ck_assert_uint_eq(bd_machine_memory_at(g_proc, g_sys), 1023 * MiB);
}
END_TEST

START_TEST(test_real_machine)
{
	/* This machine's own figures: something, and no more than MemTotal. */
	FILE *f = fopen("/proc/meminfo", "re");
	uint64_t total_kib = 0;
	char line[256];

	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f) && sscanf(line, "MemTotal: %" SCNu64 " kB", &total_kib) != 1)
		;
	fclose(f);
	ck_assert_uint_gt(total_kib, 0);
	ck_assert_uint_gt(bd_machine_memory(), 0);
	ck_assert_uint_le(bd_machine_memory(), total_kib * 1024);
}
END_TEST

static Suite *machine_suite(void)
{
	Suite *s = suite_create("machine");
	TCase *tc = tcase_create("memory");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_no_cgroup_file);
	tcase_add_test(tc, test_v2_limit);
	tcase_add_test(tc, test_v1_limit);
	tcase_add_test(tc, test_real_machine);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(machine_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
