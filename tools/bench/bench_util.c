/* SPDX-License-Identifier: MIT */
/*
 * bench_util.c - clocks, duration and list parsing, JSON strings for
 * batchd-bench (see bench.h). Kept apart from the modes so the unit tests
 * can link it alone.
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"
#include "units.h"

uint64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

double bench_now(void)
{
	return (double)bench_now_ns() / 1e9;
}

int bench_parse_seconds(const char *s, double *ret)
{
	double v, scale = 1;
	char *end;

	if (!s || !(isdigit((unsigned char)s[0]) || (s[0] == '.' && isdigit((unsigned char)s[1]))))
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s)
		return -EINVAL;
	if (!strcmp(end, "ms"))
		scale = 1e-3;
	else if (!strcmp(end, "m"))
		scale = 60;
	else if (strcmp(end, "s") && *end)
		return -EINVAL;
	v *= scale;
	/* strtod takes "inf" and "nan" only without a leading digit: excluded above. */
	if (!(v >= 0) || v > 86400)
		return -EINVAL;
	*ret = v;
	return 0;
}

int bench_parse_list(const char *s, bool sizes, uint64_t *out, size_t max, size_t *ret_n)
{
	char item[64];
	size_t n = 0;

	if (!s || !*s)
		return -EINVAL;
	for (;;) {
		const char *comma = strchr(s, ',');
		size_t len = comma ? (size_t)(comma - s) : strlen(s);
		uint64_t v;
		int r;

		if (len == 0 || len >= sizeof(item))
			return -EINVAL;
		memcpy(item, s, len);
		item[len] = '\0';
		r = sizes ? bp_parse_size(item, &v) : cli_parse_u64(item, &v);
		if (r < 0 || v == 0)
			return -EINVAL;
		if (n == max)
			return -E2BIG;
		out[n++] = v;
		if (!comma)
			break;
		s = comma + 1;
	}
	*ret_n = n;
	return 0;
}

void bench_json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p < 0x20)
			fprintf(f, "\\u%04x", *p);
		else
			fputc(*p, f);
	}
	fputc('"', f);
}

unsigned bench_ncpus(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n > 0 ? (unsigned)n : 1u;
}

void bench_xml_text(FILE *f, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '&': fputs("&amp;", f); break;
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '"': fputs("&quot;", f); break;
		default:
			if ((unsigned char)*s >= 0x20)
				fputc(*s, f);
		}
	}
}
