/* SPDX-License-Identifier: MIT */
/*
 * fuzz-remote-map.c - libFuzzer target for the remote cache's map files
 * (daemon/remote/remote_map.c, bd__map_decode).
 *
 * A map lies in [cache] dir, which anyone who may write that directory
 * can change, so its decoder takes hostile bytes. Every input is decoded
 * twice: as it is, and with its last eight bytes replaced by the XXH3-64
 * of the rest, so that the fuzzer gets past the file's own hash to the
 * structure behind it. Beyond "no crash, no sanitizer report" it checks
 * what remote_priv.h promises, and aborts when one is broken:
 *
 *  - an object decodes only for the chunk size in force, with a count of
 *    chunks that its size implies, under S3's 5 TiB, a non-empty key and an
 *    ETag under BP_S3_ETAG_MAX;
 *  - every chunk it lists is present and unverified, at an index below
 *    the count, and no other chunk is;
 *  - its tables are charged, within R.table_max, and freeing it gives
 *    every byte back (R.table_bytes is 0 again).
 *
 * Built two ways (tests/fuzz/meson.build): with -fsanitize=fuzzer as the
 * fuzzer itself, and with tests/fuzz/replay.c replaying the seed corpus
 * (tests/fuzz/corpus/remote-map) in every `meson test`.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "remote_priv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The chunk size the corpus's maps are made for (tests/fuzz/gen-remote-map-corpus.py). */
#define CHUNK (UINT32_C(64) << 10)

static void require(int ok, const char *what, long long v)
{
	if (ok)
		return;
	fprintf(stderr, "fuzz-remote-map: broken promise: %s (%lld)\n", what, v);
	abort();
}

static void check(const uint8_t *b, size_t len)
{
	bd_robj *o = bd__map_decode(b, len);
	uint32_t listed = 0;

	if (!o) {
		require(R.table_bytes == 0, "a refused map leaves nothing charged",
			(long long)R.table_bytes);
		return;
	}
	require(o->nchunks == (o->size + CHUNK - 1) / CHUNK, "nchunks follows size", o->nchunks);
	require(o->size <= BD_REMOTE_MAX_OBJECT, "size under 5 TiB", (long long)o->size);
	require(o->loc.key && o->loc.key[0], "a key", 0);
	require(strlen(o->etag) < BP_S3_ETAG_MAX, "etag terminated", 0);
	require(R.table_bytes > 0 && R.table_bytes <= R.table_max, "tables charged, within max",
		(long long)R.table_bytes);
	BD_FOR_EACH_CHUNK(o, c) {
		require(c->idx < o->nchunks, "chunk index below the count", c->idx);
		require(c->state == BD_CHUNK_ABSENT || (c->state == BD_CHUNK_PRESENT && c->unverified),
			"listed chunks present and unverified", c->idx);
		listed += c->state == BD_CHUNK_PRESENT;
	}
	require(listed <= o->nchunks, "no more present than chunks", listed);
	bd__robj_free(o);
	require(R.table_bytes == 0, "freeing gives every byte back", (long long)R.table_bytes);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *fixed;

	R.chunk = CHUNK;
	R.table_max = UINT64_C(64) << 20;
	check(data, size);
	if (size < 8 || !(fixed = malloc(size)))
		return 0;
	memcpy(fixed, data, size);
	{
		uint64_t sum = XXH3_64bits(fixed, size - 8);

		memcpy(fixed + size - 8, &sum, 8);
	}
	check(fixed, size);
	free(fixed);
	return 0;
}
