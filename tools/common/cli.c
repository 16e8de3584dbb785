/* SPDX-License-Identifier: MIT */
/*
 * cli.c - shared command-line helpers (see cli.h).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static const char *prog_name = "batchd";
static const char *usage_str = "";

void cli_init(const char *prog, const char *usage_text)
{
	prog_name = prog;
	usage_str = usage_text;
}

int cli_usage(const char *fmt, ...)
{
	va_list ap;

	if (fmt) {
		va_start(ap, fmt);
		fprintf(stderr, "%s: ", prog_name);
		vfprintf(stderr, fmt, ap);
		fputc('\n', stderr);
		va_end(ap);
	}
	/* The error stays on the screen: the usage is one command away, not printed over it. */
	fprintf(stderr, "Try '%s --help' for the commands and options.\n", prog_name);
	return 2;
}

int cli_usage_full(void)
{
	fputs(usage_str, stderr);
	return 2;
}

bool cli_help_asked(int argc, char **argv)
{
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
			return true;
	return false;
}

int cli_help(void)
{
	fputs(usage_str, stdout);
	return 0;
}

int cli_run(const cli_cmd *cmds, size_t n, int argc, char **argv)
{
	for (size_t i = 0; i < n; i++)
		if (argc > 1 && !strcmp(argv[1], cmds[i].name))
			return cli_help_asked(argc - 1, argv + 1) ? cli_help()
				: cmds[i].run(argc - 1, argv + 1);
	return -1;
}

int cli_parse_u64(const char *s, uint64_t *ret)
{
	unsigned long long v;
	char *end;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end)
		return -EINVAL;
	*ret = v;
	return 0;
}

double cli_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void cli_sleep_ms(uint64_t ms)
{
	struct timespec ts = { .tv_sec = (time_t)(ms / 1000),
			       .tv_nsec = (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}
