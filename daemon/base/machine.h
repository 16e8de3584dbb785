/* SPDX-License-Identifier: MIT */
/*
 * machine.h - the memory this daemon may plan with (machine.c): the
 * kernel's MemAvailable, or the room under the daemon's cgroup limit
 * (v2 or v1) when lower.
 *
 * Thread rules: any thread.
 */
#ifndef BATCHD_DAEMON_MACHINE_H
#define BATCHD_DAEMON_MACHINE_H

#include <stdint.h>

/* Bytes available now; 0 when /proc cannot be read. */
uint64_t bd_machine_memory(void);
/* The same, from a /proc and a /sys tree rooted elsewhere (tests). */
uint64_t bd_machine_memory_at(const char *proc, const char *sys);

#endif
