/* SPDX-License-Identifier: MIT */
/*
 * keys.c - a session's sample keys, from a table read at open or a
 * reader per batch (see keys.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "keys.h"
#include "util.h"

struct bd_key_table {
	uint64_t count;
	uint32_t *end;
	char *bytes;
};

/*
 * A zstd decompression context with its tables and input buffer (about
 * 100 KiB in zstd 1.5; its exact size is in the static-linking-only API).
 */
#define DCTX_BYTES (UINT64_C(192) << 10)

void bd_key_table_free(bd_key_table *t)
{
	if (!t)
		return;
	free(t->end);
	free(t->bytes);
	free(t);
}

uint64_t bd_key_table_bytes(const bd_key_table *t)
{
	if (!t)
		return 0;
	return sizeof(*t) + t->count * sizeof(*t->end) + (t->count ? t->end[t->count - 1] : 0) +
	       3 * BD_MALLOC_OVERHEAD;
}

uint64_t bd_key_table_len(const bd_key_table *t, uint64_t id)
{
	return t->end[id] - (id ? t->end[id - 1] : 0);
}

static void table_key(const bd_key_table *t, uint64_t id, const char **ret_key, size_t *ret_len)
{
	uint64_t at = id ? t->end[id - 1] : 0;

	*ret_key = t->bytes + at;
	*ret_len = t->end[id] - at;
}

/* Append key[0..len) to t (bytes of cap *cap). @return 0, or -E2BIG past the table's cap. */
static int table_add(bd_key_table *t, uint64_t id, const char *key, size_t len, uint64_t *cap)
{
	uint64_t at = id ? t->end[id - 1] : 0;

	if (at + len > BD_KEY_TABLE_MAX)
		return -E2BIG;
	if (at + len > *cap) {
		uint64_t want = *cap ? 2 * *cap : UINT64_C(1) << 16;
		char *grown;

		while (want < at + len)
			want *= 2;
		grown = realloc(t->bytes, want);
		if (!grown)
			return -ENOMEM;
		t->bytes = grown;
		*cap = want;
	}
	memcpy(t->bytes + at, key, len);
	t->end[id] = (uint32_t)(at + len);
	return 0;
}

bd_key_table *bd_key_table_read(const bp_dataset *ds, uint64_t max_samples)
{
	uint64_t samples = bp_dataset_samples(ds), cap = 0;
	bp_key_reader *kr = NULL;
	bd_key_table *t;
	int r = 0;

	if (samples > max_samples || bd_fault_key_table_off() || bp_key_reader_new(ds, &kr) < 0)
		return NULL;
	t = bd_calloc(1, sizeof(*t));
	if (t)
		t->end = bd_calloc(samples, sizeof(*t->end));
	if (!t || !t->end)
		r = -ENOMEM;
	for (uint64_t id = 0; r == 0 && id < samples; id++) {
		bp_dataset_fault fault = { 0 };
		const char *key;
		size_t len;

		r = bp_key_reader_get(kr, id, &key, &len, &fault);
		if (r == 0)
			r = table_add(t, id, key, len, &cap);
	}
	bp_key_reader_free(kr);
	if (r < 0) {
		bd_key_table_free(t);
		return NULL;
	}
	t->count = samples;
	/* What the table is charged is what it holds: no growth room. */
	if (cap > t->end[samples - 1]) {
		char *fit = realloc(t->bytes, t->end[samples - 1] ? t->end[samples - 1] : 1);

		if (fit)
			t->bytes = fit;
	}
	return t;
}

/* ---- a batch's keys ------------------------------------------------------ */

/*
 * The most a key reader holds (lib/pack/pack_fields.h): the key-block and
 * key-hash directories of every shard (32 and 16 bytes an entry), one
 * key block stored and decoded (BP_KEYS_PER_BLOCK keys of at most
 * BP_KEY_MAX bytes and their lengths), a key-hash page (16 bytes an
 * entry) and a zstd decompression context.
 */
static uint64_t reader_bytes(const bp_dataset *ds)
{
	uint64_t samples = bp_dataset_samples(ds), shards = bp_dataset_shard_count(ds);
	uint64_t dirs = 32 * (samples / BP_KEYS_PER_BLOCK + shards) +
			16 * (samples / BP_KEY_HASH_PAGE + shards) + 16 * shards;

	return dirs + 2 * (uint64_t)BP_KEYS_PER_BLOCK * (4 + BP_KEY_MAX) +
	       16 * (uint64_t)BP_KEY_HASH_PAGE + DCTX_BYTES +
	       (4 + 2 * shards) * BD_MALLOC_OVERHEAD + 256;
}

uint64_t bd_batch_keys_bytes(const bd_batch_keys *k, const bp_dataset *ds, uint32_t batch_size)
{
	if (k->table)
		return bd_key_table_bytes(k->table);
	return reader_bytes(ds) + (uint64_t)batch_size * (BP_KEY_MAX + sizeof(*k->pos)) +
	       2 * BD_MALLOC_OVERHEAD;
}

int bd_batch_keys_start(bd_batch_keys *k, const bp_dataset *ds, uint32_t batch_size)
{
	if (k->table)
		return 0;
	k->pos = bd_calloc(batch_size, sizeof(*k->pos));
	return k->pos ? bp_key_reader_new(ds, &k->reader) : -ENOMEM;
}

void bd_batch_keys_clear(bd_batch_keys *k)
{
	bp_key_reader_free(k->reader);
	bd_key_table_free(k->table);
	free(k->pos);
	free(k->buf);
	*k = (bd_batch_keys){ 0 };
}

/*
 * Keep key[0..len) of sample i in the batch's key scratch (the reader's
 * buffer is its until the next call). @return 0 or -ENOMEM.
 */
static int keep(bd_batch_keys *k, uint32_t i, const char *key, size_t len, uint64_t *at)
{
	if (*at + len > k->cap) {
		uint64_t want = k->cap ? 2 * k->cap : UINT64_C(1) << 12;
		char *grown;

		while (want < *at + len)
			want *= 2;
		grown = realloc(k->buf, want);
		if (!grown)
			return -ENOMEM;
		k->buf = grown;
		k->cap = want;
	}
	memcpy(k->buf + *at, key, len);
	k->pos[i] = *at;
	*at += len;
	return 0;
}

int bd_batch_keys_read(bd_batch_keys *k, const uint64_t *ids, const uint32_t *order,
		       uint32_t n, bp_ring_span *span, char *why, size_t whylen)
{
	uint64_t at = 0;

	for (uint32_t j = 0; j < n; j++) {
		uint32_t i = order[j];
		bp_dataset_fault fault = { 0 };
		const char *key;
		size_t len;
		int r;

		if (k->table) {
			span[i].size = bd_key_table_len(k->table, ids[i]);
			continue;
		}
		r = bp_key_reader_get(k->reader, ids[i], &key, &len, &fault);
		if (r == 0)
			r = keep(k, i, key, len, &at);
		if (r < 0) {
			snprintf(why, whylen, "cannot read the key of sample %" PRIu64 ": %s%s%s%s%s",
				 ids[i], strerror(-r), fault.shard[0] ? " in " : "", fault.shard,
				 fault.pack.what ? ": " : "", fault.pack.what ? fault.pack.what : "");
			return r;
		}
		span[i].size = len;
	}
	return 0;
}

void bd_batch_keys_copy(const bd_batch_keys *k, const uint64_t *ids, uint32_t n,
			const bp_ring_span *span, uint8_t *dst)
{
	for (uint32_t i = 0; i < n; i++) {
		const char *key;
		size_t len;

		if (k->table)
			table_key(k->table, ids[i], &key, &len);
		else
			key = k->buf + k->pos[i], len = (size_t)span[i].size;
		memcpy(dst + span[i].offset, key, len);
	}
}
