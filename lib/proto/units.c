/* SPDX-License-Identifier: MIT */
/*
 * units.c - parse and print byte sizes (see units.h).
 *
 * The parse is exact integer arithmetic (a 128-bit product for the
 * fraction), so "1.5GiB" is 1610612736 bytes on every machine and a size
 * that overflows is refused instead of wrapping. A fraction that does not
 * come to whole bytes is rounded down.
 */
#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "units.h"

/* GCC and Clang have it on every target batchd builds for. */
__extension__ typedef unsigned __int128 u128;

#define MAX_FRAC_DIGITS 18   /* 10^18 fits a uint64_t; later digits cannot change a byte count */

/*
 * The unit at s (already past the blanks): "" and "B" are bytes; K, M, G,
 * T alone or with "iB" are powers of 1024; with "B" alone, powers of 1000.
 * Letters in any case. @return 0 with the multiplier in *ret, -EINVAL.
 */
static int unit(const char *s, uint64_t *ret)
{
	static const char letters[] = "KMGT";
	const char *u;
	uint64_t base, m = 1;

	if (*s == '\0' || !strcasecmp(s, "B")) {
		*ret = 1;
		return 0;
	}
	/* strchr() finds the terminator too: s is not empty here. */
	u = strchr(letters, toupper((unsigned char)*s));
	if (!u)
		return -EINVAL;
	s++;
	if (*s == '\0' || !strcasecmp(s, "iB"))
		base = 1024;
	else if (!strcasecmp(s, "B"))
		base = 1000;
	else
		return -EINVAL;
	for (const char *p = letters; p <= u; p++)
		m *= base;
	*ret = m;
	return 0;
}

int bp_parse_size(const char *s, uint64_t *ret)
{
	uint64_t whole = 0, frac_num = 0, frac_den = 1, mult;
	u128 v;
	bool frac = false, over = false;
	const char *p = s;

	if (!s || !isdigit((unsigned char)*p))
		return -EINVAL;
	for (; isdigit((unsigned char)*p); p++) {
		/* Keep scanning past an overflow: junk after it is still -EINVAL. */
		if (whole > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
			over = true;
		else
			whole = whole * 10 + (uint64_t)(*p - '0');
	}
	if (*p == '.') {
		p++;
		if (!isdigit((unsigned char)*p))
			return -EINVAL;
		frac = true;
		for (unsigned n = 0; isdigit((unsigned char)*p); p++, n++) {
			if (n < MAX_FRAC_DIGITS) {
				frac_num = frac_num * 10 + (uint64_t)(*p - '0');
				frac_den *= 10;
			}
		}
	}
	while (*p == ' ' || *p == '\t')
		p++;
	if (unit(p, &mult) < 0)
		return -EINVAL;
	/* "1.5" bytes, or "1.5 B": a fraction needs a unit it divides. */
	if (frac && mult == 1)
		return -EINVAL;
	if (over)
		return -ERANGE;
	v = (u128)whole * mult +
	    (u128)frac_num * mult / frac_den;
	if (v > UINT64_MAX)
		return -ERANGE;
	*ret = (uint64_t)v;
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
