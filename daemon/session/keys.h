/* SPDX-License-Identifier: MIT */
/*
 * keys.h - the sample keys a session's batches carry (lib/pack/PACK.md, Keys).
 *
 * A shuffled batch touches nearly a key block a sample, so reading keys
 * as batches need them decodes about a key block per sample. Where the
 * dataset is small enough, every key is therefore read once at open into a
 * table the session copies from (bd_key_table); otherwise a reader decodes
 * a batch's keys in id order, each key block once a batch, into a scratch
 * of the batch's keys (bd_batch_keys). Either is charged to the session
 * that holds it.
 *
 * Thread rules: bd_key_table_read runs on any thread (the open's lookup
 * runs it on the thread pool); a table is read-only once read. A
 * bd_batch_keys belongs to its session's loop thread.
 */
#ifndef BATCHD_KEYS_H
#define BATCHD_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include "pack_fields.h"
#include "ring.h"

/* Key i is bytes[end[i - 1], end[i]) (end[-1] = 0). */
typedef struct bd_key_table bd_key_table;

/* The most key bytes a table holds: a dataset with more is read per batch. */
#define BD_KEY_TABLE_MAX (UINT64_C(64) << 20)

/*
 * Every key of ds, in id order (one decode a key block). @return the
 * table, or NULL when ds has more than max_samples samples or keys of
 * more than BD_KEY_TABLE_MAX bytes, and on any failure (a damaged key
 * block is then reported per batch by the reader).
 */
bd_key_table *bd_key_table_read(const bp_dataset *ds, uint64_t max_samples);
/* NULL is fine. */
void bd_key_table_free(bd_key_table *t);
/* Heap bytes it holds (0 for NULL). */
uint64_t bd_key_table_bytes(const bd_key_table *t);
/* Bytes of sample id's key (id < the dataset's samples). */
uint64_t bd_key_table_len(const bd_key_table *t, uint64_t id);

/* The keys of the batch being planned, from a table or a reader. */
typedef struct bd_batch_keys {
	bd_key_table *table;    /* every key, read at open; or NULL and ... */
	bp_key_reader *reader;  /* ... a reader of the keys a batch needs */
	uint64_t *pos;          /* reader: each sample's key in buf, ... */
	char *buf;              /* ... which holds the batch's keys (cap bytes, at
				 * most batch_size x BP_KEY_MAX: charged so) */
	uint64_t cap;
} bd_batch_keys;

/*
 * Heap bytes k holds at most for batches of batch_size over ds: its
 * table, or a reader (its directories, a key block stored and decoded, a
 * key-hash page, a zstd context) and a batch of the longest keys.
 */
uint64_t bd_batch_keys_bytes(const bd_batch_keys *k, const bp_dataset *ds, uint32_t batch_size);
/* Without a table: the reader and the scratch. @return 0 or -ENOMEM. */
int bd_batch_keys_start(bd_batch_keys *k, const bp_dataset *ds, uint32_t batch_size);
/* Free what k holds, its table included; leaves it empty. */
void bd_batch_keys_clear(bd_batch_keys *k);
/*
 * The keys of the n samples ids[0..n), their lengths into span[i].size,
 * taken in the order order[0..n) (sorted by id, so that a key block is
 * decoded once a batch). @return 0, or the key reader's error with why
 * set.
 */
int bd_batch_keys_read(bd_batch_keys *k, const uint64_t *ids, const uint32_t *order,
		       uint32_t n, bp_ring_span *span, char *why, size_t whylen);
/* The keys bd_batch_keys_read found, each to its span of dst. */
void bd_batch_keys_copy(const bd_batch_keys *k, const uint64_t *ids, uint32_t n,
			const bp_ring_span *span, uint8_t *dst);

#endif
