/* SPDX-License-Identifier: MIT */
/*
 * machine.c - how much memory this daemon may plan with: the kernel's
 * MemAvailable (what can be had without swapping), or the room left under
 * the daemon's cgroup limit when that is lower, as in a container or a
 * systemd unit with MemoryMax=. Both cgroup v2 (memory.max and
 * memory.current of the unified hierarchy) and v1 (memory.limit_in_bytes
 * and memory.usage_in_bytes of the memory controller) are read. The
 * default memory budget and the choice of a dataset's memory tier
 * (dataset.c) are made from it.
 *
 * Thread rules: any thread (it only reads files).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "machine.h"

/* The first number in the file, or 0 when unreadable or "max". */
static uint64_t read_u64(const char *path)
{
	FILE *f = fopen(path, "re");
	uint64_t v = 0;

	if (!f)
		return 0;
	if (fscanf(f, "%" SCNu64, &v) != 1)
		v = 0;
	fclose(f);
	return v;
}

/* /proc/meminfo's MemAvailable in bytes, or 0. */
static uint64_t mem_available(const char *proc)
{
	char path[512], line[256];
	uint64_t kib = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/meminfo", proc);
	f = fopen(path, "re");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %" SCNu64 " kB", &kib) == 1)
			break;
	fclose(f);
	return kib << 10;
}

/* What limit - usage leaves under one cgroup directory's pair of files; UINT64_MAX: no limit. */
static uint64_t cgroup_room(const char *dir, const char *limit_file, const char *usage_file)
{
	char path[1024];
	uint64_t limit, usage;

	snprintf(path, sizeof(path), "%s/%s", dir, limit_file);
	limit = read_u64(path);
	/* "max" (v2), or v1's page-rounded LLONG_MAX: no limit. */
	if (!limit || limit >= (UINT64_C(1) << 62))
		return UINT64_MAX;
	snprintf(path, sizeof(path), "%s/%s", dir, usage_file);
	usage = read_u64(path);
	return usage < limit ? limit - usage : 0;
}

/* The room under the daemon's own cgroup (v2, or v1's memory controller); UINT64_MAX: none. */
static uint64_t cgroup_limit_room(const char *proc, const char *sys)
{
	char path[512], line[1024], dir[1400];
	uint64_t room = UINT64_MAX;
	FILE *f;

	snprintf(path, sizeof(path), "%s/self/cgroup", proc);
	f = fopen(path, "re");
	if (!f)
		return UINT64_MAX;
	while (fgets(line, sizeof(line), f)) {
		char *ctl = strchr(line, ':'), *cg = ctl ? strchr(ctl + 1, ':') : NULL;
		uint64_t r = UINT64_MAX;

		if (!cg)
			continue;
		*cg++ = '\0';
		cg[strcspn(cg, "\n")] = '\0';
		if (!strcmp(ctl + 1, "")) {
			snprintf(dir, sizeof(dir), "%s/fs/cgroup%s", sys, cg);
			r = cgroup_room(dir, "memory.max", "memory.current");
		} else if (strstr(ctl + 1, "memory")) {
			snprintf(dir, sizeof(dir), "%s/fs/cgroup/memory%s", sys, cg);
			r = cgroup_room(dir, "memory.limit_in_bytes", "memory.usage_in_bytes");
		}
		if (r < room)
			room = r;
	}
	fclose(f);
	return room;
}

uint64_t bd_machine_memory_at(const char *proc, const char *sys)
{
	uint64_t avail = mem_available(proc), room = cgroup_limit_room(proc, sys);

	return room < avail ? room : avail;
}

uint64_t bd_machine_memory(void)
{
	return bd_machine_memory_at("/proc", "/sys");
}
