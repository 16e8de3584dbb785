/* SPDX-License-Identifier: MIT */
/*
 * endian.h - little-endian loads and stores for on-disk and on-wire fields.
 *
 * Written byte by byte so they are correct on any host and any alignment;
 * compilers turn them into single moves on little-endian machines.
 */
#ifndef BATCHD_PROTO_ENDIAN_H
#define BATCHD_PROTO_ENDIAN_H

#include <stdint.h>

static inline uint32_t bp_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static inline uint64_t bp_le64(const uint8_t *p)
{
	return (uint64_t)bp_le32(p) | (uint64_t)bp_le32(p + 4) << 32;
}

static inline void bp_put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static inline void bp_put_le64(uint8_t *p, uint64_t v)
{
	bp_put_le32(p, (uint32_t)v);
	bp_put_le32(p + 4, (uint32_t)(v >> 32));
}

#endif
