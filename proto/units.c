/* SPDX-License-Identifier: MIT */
/*
 * units.c - parse and print byte sizes (see units.h).
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "units.h"

static int suffix_shift(const char *s, unsigned *ret)
{
	static const char units[] = "KMGT";
	const char *u;

	if (*s == '\0') {
		*ret = 0;
		return 0;
	}
	u = strchr(units, toupper((unsigned char)*s));
	if (!u)
		return -EINVAL;
	s++;
	/* Accept K, KB, KiB (all binary). */
	if (*s == 'i' || *s == 'I')
		s++;
	if (*s == 'b' || *s == 'B')
		s++;
	if (*s != '\0')
		return -EINVAL;
	*ret = 10u * (unsigned)(u - units + 1);
	return 0;
}

int bp_parse_size(const char *s, uint64_t *ret)
{
	uint64_t whole = 0, frac_num = 0, frac_den = 1, v;
	unsigned shift;
	const char *p = s;

	if (!s || !isdigit((unsigned char)*p))
		return -EINVAL;
	for (; isdigit((unsigned char)*p); p++) {
		if (whole > (UINT64_MAX - 9) / 10)
			return -ERANGE;
		whole = whole * 10 + (uint64_t)(*p - '0');
	}
	if (*p == '.') {
		p++;
		if (!isdigit((unsigned char)*p))
			return -EINVAL;
		for (; isdigit((unsigned char)*p); p++) {
			if (frac_den < UINT64_C(1000000000000)) {
				frac_num = frac_num * 10 + (uint64_t)(*p - '0');
				frac_den *= 10;
			}
		}
	}
	while (*p == ' ')
		p++;
	if (suffix_shift(p, &shift) < 0)
		return -EINVAL;
	if (shift && whole > (UINT64_MAX >> shift))
		return -ERANGE;
	v = whole << shift;
	if (frac_num) {
		/* The fraction of a unit: exact for the precisions people write. */
		uint64_t extra = (uint64_t)((long double)frac_num / (long double)frac_den *
					    (long double)(UINT64_C(1) << shift));
		if (v > UINT64_MAX - extra)
			return -ERANGE;
		v += extra;
	}
	*ret = v;
	return 0;
}

const char *bp_format_size(uint64_t bytes, char *buf, size_t len)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	double v = (double)bytes;
	size_t u = 0;

	while (v >= 1024.0 && u + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1024.0;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%llu B", (unsigned long long)bytes);
	else
		snprintf(buf, len, "%.*f %s", v < 10 ? 2 : v < 100 ? 1 : 0, v, units[u]);
	return buf;
}
