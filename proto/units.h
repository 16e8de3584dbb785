/* SPDX-License-Identifier: MIT */
/*
 * units.h - sizes as people write them ("64M", "1.5GiB", "4096") and as
 * programs print them.
 *
 * Sizes appear on every command line and in the configuration file, so the
 * daemon and every tool parse them with this one function: a decimal number
 * with an optional fraction and an optional binary suffix (K, M, G, T, with
 * or without "iB"/"B"; always powers of 1024).
 */
#ifndef BATCHD_PROTO_UNITS_H
#define BATCHD_PROTO_UNITS_H

#include <stddef.h>
#include <stdint.h>

/*
 * Parse s into *ret. @return 0, -EINVAL for anything but a whole size
 * (empty, negative, junk after the suffix), -ERANGE when over 2^64-1.
 */
int bp_parse_size(const char *s, uint64_t *ret);

/* Format bytes as "1.5 GiB" / "512 B" into buf; returns buf. */
const char *bp_format_size(uint64_t bytes, char *buf, size_t len);

#endif
