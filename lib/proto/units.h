/* SPDX-License-Identifier: MIT */
/*
 * units.h - sizes as people write them ("64M", "1.5GiB", "4096") and as
 * programs print them.
 *
 * Sizes appear on every command line and in the configuration file, so the
 * daemon and every tool parse them with this one function, so a size means
 * the same wherever it is written:
 *   - a decimal number of bytes ("4096"), or a number with an optional
 *     fraction and a unit ("1.5G");
 *   - K, M, G, T and KiB, MiB, GiB, TiB are powers of 1024;
 *     KB, MB, GB, TB are powers of 1000; B is bytes;
 *   - letters in any case ("4gib", "2 gb" = "2GB"): there are no bits here;
 *   - blanks (spaces, tabs) may stand between the number and the unit.
 * A fraction needs a unit (no "1.5" bytes) and is rounded down to whole
 * bytes. bp_format_size() writes binary units, which parse back.
 */
#ifndef BATCHD_PROTO_UNITS_H
#define BATCHD_PROTO_UNITS_H

#include <stddef.h>
#include <stdint.h>

/* The accepted forms, for messages that refuse a size. */
#define BP_SIZE_FORMS "a number of bytes, or a number with a unit: K, M, G, T or KiB, MiB, " \
	"GiB, TiB (powers of 1024), KB, MB, GB, TB (powers of 1000), e.g. 4096, 512M, 1.5 GiB, 2GB"

/* The same for a --help text: one line ending in a newline. */
#define BP_SIZE_HELP "SIZE: bytes, or K, M, G, T (= KiB, MiB, GiB, TiB, powers of 1024) or " \
	"KB, MB, GB, TB (powers of 1000).\n"

/*
 * Parse s into *ret (written only on success). @return 0; -EINVAL for
 * anything but a size as above (empty, negative, a fraction of a byte,
 * an unknown unit, junk after the unit); -ERANGE when over 2^64-1.
 * Thread: any; keeps no state.
 */
int bp_parse_size(const char *s, uint64_t *ret);

/* Format bytes as "1.50 GiB" / "512 B" into buf; returns buf. Thread: any. */
const char *bp_format_size(uint64_t bytes, char *buf, size_t len);

#endif
