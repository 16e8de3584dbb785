/* SPDX-License-Identifier: MIT */
/*
 * fault.c - the test-only fault layer (see fault.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"

#if BATCHD_FAULT_INJECTION
static bd_fault_read reads;
static int uring_setup;
static bool direct_off;
static bool key_table_off;
static uint64_t alloc_countdown, alloc_after, alloc_calls;

static int errno_named(const char *s)
{
	static const struct { const char *name; int err; } names[] = {
		{ "EIO", EIO }, { "EAGAIN", EAGAIN }, { "EINTR", EINTR }, { "EPERM", EPERM },
		{ "ENOSYS", ENOSYS }, { "ENOMEM", ENOMEM }, { "EINVAL", EINVAL },
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(s, names[i].name))
			return names[i].err;
	return 0;
}

static int bad(const char *rule)
{
	fprintf(stderr, "batchd: BATCHD_FAULTS: cannot understand '%s'\n", rule);
	return -EINVAL;
}

static int parse_rule(char *rule)
{
	char *save = NULL, *kind = strtok_r(rule, ":", &save), *opt;
	int err = 0;
	uint64_t offset = 0;
	char shard[256] = "";
	bool have_offset = false;

	if (!kind)
		return 0;
	while ((opt = strtok_r(NULL, ":", &save))) {
		char *eq = strchr(opt, '=');
		const char *v = eq ? eq + 1 : "";

		if (eq)
			*eq = '\0';
		if (!strcmp(kind, "read") && !strcmp(opt, "every"))
			reads.every = (unsigned)strtoul(v, NULL, 10);
		else if (!strcmp(kind, "read") && !strcmp(opt, "errno"))
			err = errno_named(v);
		else if (!strcmp(kind, "read") && !strcmp(opt, "short"))
			reads.short_max = (uint32_t)strtoul(v, NULL, 10);
		else if (!strcmp(kind, "read") && !strcmp(opt, "delay_ms"))
			reads.delay_ms = (unsigned)strtoul(v, NULL, 10);
		else if (!strcmp(kind, "read") && !strcmp(opt, "shard"))
			snprintf(shard, sizeof(shard), "%s", v);
		else if (!strcmp(kind, "read") && !strcmp(opt, "offset")) {
			offset = strtoull(v, NULL, 10);
			have_offset = true;
		} else if (!strcmp(kind, "alloc") && !strcmp(opt, "countdown"))
			alloc_countdown = strtoull(v, NULL, 10);
		else if (!strcmp(kind, "alloc") && !strcmp(opt, "after"))
			alloc_after = strtoull(v, NULL, 10);
		else if (!strcmp(kind, "uring") && !strcmp(opt, "setup"))
			uring_setup = errno_named(v);
		else if (!strcmp(kind, "direct") && !strcmp(opt, "off"))
			direct_off = true;
		else if (!strcmp(kind, "keys") && !strcmp(opt, "no_table"))
			key_table_off = true;
		else
			return bad(opt);
	}
	if (!strcmp(kind, "read") && shard[0]) {
		if (!have_offset || !err)
			return bad("read:shard= needs offset= and errno=");
		snprintf(reads.shard, sizeof(reads.shard), "%s", shard);
		reads.offset = offset;
		reads.shard_err = err;
	} else if (!strcmp(kind, "read")) {
		reads.err = err;
	} else if (strcmp(kind, "alloc") && strcmp(kind, "uring") && strcmp(kind, "direct") &&
		   strcmp(kind, "keys")) {
		return bad(kind);
	}
	return 0;
}

int bd_fault_init(void)
{
	const char *env = getenv("BATCHD_FAULTS");
	char *copy, *save = NULL, *rule;
	int r = 0;

	if (!env || !*env)
		return 0;
	copy = strdup(env);
	if (!copy)
		return -ENOMEM;
	for (rule = strtok_r(copy, ";", &save); rule && r == 0; rule = strtok_r(NULL, ";", &save))
		r = parse_rule(rule);
	free(copy);
	if (r == 0)
		fprintf(stderr, "batchd: fault injection active: %s\n", env);
	return r;
}

const bd_fault_read *bd_fault_reads(void)
{
	return &reads;
}

int bd_fault_uring_setup(void)
{
	return uring_setup;
}

bool bd_fault_key_table_off(void)
{
	return key_table_off;
}

bool bd_fault_direct_off(void)
{
	return direct_off;
}

bool bd_fault_alloc_fails(void)
{
	uint64_t n = __atomic_add_fetch(&alloc_calls, 1, __ATOMIC_RELAXED);

	return (alloc_countdown && n == alloc_countdown) || (alloc_after && n > alloc_after);
}
#endif
