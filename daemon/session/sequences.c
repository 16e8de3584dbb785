/* SPDX-License-Identifier: MIT */
/*
 * sequences.c - a token pack's stream cut into windows or packed into
 * rows (see sequences.h and docs/tokens.md).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol.h"
#include "sequences.h"
#include "sort.h"
#include "util.h"

/* ---- the stream ---------------------------------------------------------------------- */

/*
 * Every block of every shard in order, with its first stream byte. A
 * token cut by a block boundary (a frame size that is no multiple of the
 * width) would have to be put together from two blocks: refused.
 */
static int map_blocks(bd_seqs *q, const bp_dataset *ds, const char *name, char *err,
		      size_t errlen)
{
	uint64_t at = 0, g = 0;

	q->nblocks = bp_dataset_blocks(ds);
	q->block = bd_calloc(q->nblocks + 1, sizeof(*q->block));
	if (!q->block)
		return -ENOMEM;
	q->heap += (q->nblocks + 1) * sizeof(*q->block) + BD_MALLOC_OVERHEAD;
	for (size_t s = 0; s < bp_dataset_shard_count(ds); s++) {
		const bp_pack_index *idx = &bp_dataset_shard(ds, s)->index;

		for (uint64_t b = 0; b < idx->block_count; b++, g++) {
			bp_pack_block blk;

			bp_pack_index_block(idx, b, &blk);
			if (blk.raw_size % q->width) {
				snprintf(err, errlen, "dataset %s: shard %s: block %" PRIu64 " holds "
					 "%" PRIu64 " bytes, which cuts a token of %u bytes: repack "
					 "with a --frame-size that is a multiple of %u", name,
					 bp_dataset_shard(ds, s)->name, b, blk.raw_size, q->width,
					 q->width);
				return -EINVAL;
			}
			q->block[g] = (bd_seq_block){ .start = at, .block = b, .shard = (uint32_t)s };
			at += blk.raw_size;
		}
	}
	q->block[g].start = at;
	return 0;
}

/* The block holding stream byte x (< the stream's end): the last one starting at or before it. */
static uint64_t block_of(const bd_seqs *q, uint64_t x)
{
	uint64_t lo = 0, hi = q->nblocks;

	/* Empty blocks share their start with the next: the last of a run holds x. */
	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;

		if (q->block[mid].start <= x)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

uint32_t bd_seqs_fragments(const bd_seqs *q, const bd_seq_piece *pc, bd_seq_frag_fn fn,
			   void *ctx)
{
	uint64_t lo = pc->start * q->width, hi = lo + (uint64_t)pc->len * q->width;
	uint32_t n = 0;

	if (lo == hi)
		return 0;
	for (uint64_t b = block_of(q, lo); lo < hi; b++) {
		const bd_seq_block *blk = &q->block[b];
		uint64_t end = q->block[b + 1].start, take = (end < hi ? end : hi) - lo;

		if (take == 0)
			continue;
		if (fn)
			fn(ctx, blk, lo - blk->start, take,
			   (uint32_t)((lo - pc->start * q->width) / q->width));
		lo += take;
		n++;
	}
	return n;
}

/*
 * The most blocks a window of `bytes` stream bytes can touch: at most one
 * more than the block starts inside it, counted for a window that begins
 * at each block's start (two pointers over the blocks).
 */
static uint32_t window_blocks(const bd_seqs *q, uint64_t bytes)
{
	uint64_t most = 0, j = 0;

	for (uint64_t i = 0; i < q->nblocks; i++) {
		if (j < i)
			j = i;
		while (j + 1 < q->nblocks && q->block[j + 1].start < q->block[i].start + bytes)
			j++;
		if (j - i + 1 > most)
			most = j - i + 1;
	}
	return (uint32_t)(most + 1);
}

/* ---- packing ------------------------------------------------------------------------- */

/* One document's rest (or a whole short document) waiting in a group. */
typedef struct item {
	uint64_t start;
	uint32_t len;
	uint32_t next;              /* once placed: the next piece of its row, UINT32_MAX: none */
} item;

/* An open row of the group: its room, its pieces (a list through items), the next row of its room. */
typedef struct open_row {
	uint32_t room, head, tail, next;
} open_row;

#define NONE UINT32_MAX

/* The packer: the output tables growing, the current group and its open rows by room. */
typedef struct packer {
	bd_seqs *q;
	uint64_t cap_seqs, cap_pieces, cap_items, cap_rows;
	item *items;
	uint64_t *key;
	uint32_t *order;
	uint32_t nitems;
	uint64_t group_tokens;
	open_row *rows;
	uint32_t nrows;
	uint32_t *by_room;          /* row + 1 list heads */
	uint64_t *bits;             /* which rooms have an open row */
} packer;

static int grow(void **p, uint64_t *cap, uint64_t need, size_t size)
{
	uint64_t c = *cap ? *cap : 64;
	void *n;

	if (need <= *cap)
		return 0;
	while (c < need)
		c *= 2;
	n = bd_realloc(*p, c * size);
	if (!n)
		return -ENOMEM;
	*p = n;
	*cap = c;
	return 0;
}

/* Room for one more sequence of at most n pieces in the tables. */
static int reserve(packer *k, uint64_t n)
{
	bd_seqs *q = k->q;

	if (grow((void **)&q->first, &k->cap_seqs, q->count + 2, sizeof(*q->first)) < 0 ||
	    grow((void **)&q->piece, &k->cap_pieces, q->npieces + n, sizeof(*q->piece)) < 0)
		return -ENOMEM;
	return 0;
}

/* The sequence whose pieces were just appended is complete. */
static void close_seq(bd_seqs *q, uint64_t first)
{
	uint64_t n = q->npieces - first;

	q->first[q->count++] = first;
	q->first[q->count] = q->npieces;
	if (n > q->max_pieces)
		q->max_pieces = (uint32_t)n;
}

/* A full row of one document's tokens. */
static int emit_full(packer *k, uint64_t start)
{
	bd_seqs *q = k->q;

	if (reserve(k, 1) < 0)
		return -ENOMEM;
	q->piece[q->npieces++] = (bd_seq_piece){ .start = start, .len = q->row, .at = 0 };
	q->placed += q->row;
	close_seq(q, q->npieces - 1);
	return 0;
}

static void room_set(packer *k, uint32_t r, bool on)
{
	if (on)
		k->bits[r / 64] |= UINT64_C(1) << (r % 64);
	else
		k->bits[r / 64] &= ~(UINT64_C(1) << (r % 64));
}

/* The smallest room >= len that an open row has, or NONE. */
static uint32_t room_at_least(const packer *k, uint32_t len)
{
	uint32_t words = k->q->row / 64 + 1;

	for (uint32_t w = len / 64; w < words; w++) {
		uint64_t v = k->bits[w];

		if (w == len / 64)
			v &= ~UINT64_C(0) << (len % 64);
		if (v)
			return w * 64 + (uint32_t)__builtin_ctzll(v);
	}
	return NONE;
}

/* Row `r` onto the list of its room, or off the list of room `room` (its head). */
static void file_row(packer *k, uint32_t r)
{
	uint32_t room = k->rows[r].room;

	k->rows[r].next = k->by_room[room];
	k->by_room[room] = r;
	room_set(k, room, true);
}

static uint32_t unfile_row(packer *k, uint32_t room)
{
	uint32_t r = k->by_room[room];

	k->by_room[room] = k->rows[r].next;
	if (k->by_room[room] == NONE)
		room_set(k, room, false);
	return r;
}

/* Item i into the open row with the least room that holds it, else a new row. */
static int place(packer *k, uint32_t i)
{
	uint32_t room = room_at_least(k, k->items[i].len), r;

	if (room != NONE) {
		r = unfile_row(k, room);
		k->items[k->rows[r].tail].next = i;
	} else {
		if (grow((void **)&k->rows, &k->cap_rows, k->nrows + 1, sizeof(*k->rows)) < 0)
			return -ENOMEM;
		r = k->nrows++;
		k->rows[r] = (open_row){ .room = k->q->row, .head = i };
	}
	k->rows[r].tail = i;
	k->rows[r].room -= k->items[i].len;
	k->items[i].next = NONE;
	file_row(k, r);
	return 0;
}

/* Row r's pieces, in the order they went in, as the next sequence. */
static int emit_row(packer *k, uint32_t r)
{
	bd_seqs *q = k->q;
	uint64_t first = q->npieces, n = 0;
	uint32_t at = 0;

	for (uint32_t i = k->rows[r].head; i != NONE; i = k->items[i].next)
		n++;
	if (reserve(k, n) < 0)
		return -ENOMEM;
	for (uint32_t i = k->rows[r].head; i != NONE; i = k->items[i].next) {
		q->piece[q->npieces++] = (bd_seq_piece){ .start = k->items[i].start,
							 .len = k->items[i].len, .at = at };
		at += k->items[i].len;
	}
	q->placed += at;
	close_seq(q, first);
	return 0;
}

/*
 * The group's items, best fit decreasing: longest first (ties in stream
 * order), each into the open row with the least room that holds it, else
 * a new one. Rows come out in the order they were opened.
 */
static int pack_group(packer *k)
{
	bd_seqs *q = k->q;
	int r = 0;

	for (uint32_t i = 0; i < k->nitems; i++) {
		k->key[i] = ((uint64_t)(q->row - k->items[i].len) << 40) | i;
		k->order[i] = i;
	}
	bd_sort_by_key(k->order, k->key, k->nitems);
	k->nrows = 0;
	for (uint32_t i = 0; i < k->nitems && r == 0; i++)
		r = place(k, k->order[i]);
	for (uint32_t row = 0; row < k->nrows && r == 0; row++)
		r = emit_row(k, row);
	for (uint32_t i = 0; i < k->nrows; i++)
		k->by_room[k->rows[i].room] = NONE;
	memset(k->bits, 0, (q->row / 64 + 1) * sizeof(*k->bits));
	k->nitems = 0;
	k->group_tokens = 0;
	return r;
}

/* A document of len tokens from stream token start: full rows now, its rest to the group. */
static int add_document(packer *k, uint64_t start, uint64_t len)
{
	bd_seqs *q = k->q;
	int r;

	for (; len >= q->row; start += q->row, len -= q->row)
		if ((r = emit_full(k, start)) < 0)
			return r;
	if (len == 0)
		return 0;
	if (grow((void **)&k->items, &k->cap_items, k->nitems + 1, sizeof(*k->items)) < 0)
		return -ENOMEM;
	k->items[k->nitems++] = (item){ .start = start, .len = (uint32_t)len };
	k->group_tokens += len;
	if (k->group_tokens >= (uint64_t)BD_SEQ_GROUP_ROWS * q->row)
		return pack_group(k);
	return 0;
}

/* The key and order scratch for the largest group: every item at least one token. */
static int packer_init(packer *k, bd_seqs *q)
{
	uint64_t most = (uint64_t)BD_SEQ_GROUP_ROWS * q->row + q->row;

	*k = (packer){ .q = q };
	k->key = bd_calloc(most, sizeof(*k->key));
	k->order = bd_calloc(most, sizeof(*k->order));
	k->by_room = bd_calloc(q->row + 1, sizeof(*k->by_room));
	k->bits = bd_calloc(q->row / 64 + 1, sizeof(*k->bits));
	if (!k->key || !k->order || !k->by_room || !k->bits)
		return -ENOMEM;
	for (uint32_t i = 0; i <= q->row; i++)
		k->by_room[i] = NONE;
	return 0;
}

static void packer_free(packer *k)
{
	free(k->items);
	free(k->key);
	free(k->order);
	free(k->rows);
	free(k->by_room);
	free(k->bits);
}

/* Every document in stream order through the packer; the tables trimmed to size. */
static int pack(bd_seqs *q, const bp_dataset *ds)
{
	uint64_t start = 0, docs = bp_dataset_samples(ds);
	packer k;
	int r = packer_init(&k, q);

	for (uint64_t id = 0; r == 0 && id < docs; id++) {
		bp_pack_sample ps;
		size_t shard;

		bp_dataset_locate(ds, id, &shard, &ps);
		r = add_document(&k, start, ps.size / q->width);
		start += ps.size / q->width;
	}
	if (r == 0 && k.nitems)
		r = pack_group(&k);
	packer_free(&k);
	if (r < 0)
		return r;
	q->heap += (q->count + 1) * sizeof(*q->first) + q->npieces * sizeof(*q->piece) +
		   2 * BD_MALLOC_OVERHEAD;
	return 0;
}

/* The most fragments any packed row reads: its pieces' blocks, counted. */
static uint32_t packed_frags(const bd_seqs *q)
{
	uint32_t most = 0;

	for (uint64_t k = 0; k < q->count; k++) {
		uint32_t n = 0;

		for (uint64_t p = q->first[k]; p < q->first[k + 1]; p++)
			n += bd_seqs_fragments(q, &q->piece[p], NULL, NULL);
		if (n > most)
			most = n;
	}
	return most;
}

/* ---- the session's view --------------------------------------------------------------- */

/* The fields a batch of q carries (sequences.h). */
static void make_schema(bd_seqs *q)
{
	static const char *const names[] = { "tokens", "position_ids", "cu_seqlens" };
	uint32_t n = q->mode == BP_SEQUENCES_PACKED ? 3 : 1;

	for (uint32_t i = 0; i < n; i++) {
		q->field[i] = (bp_field){ .type = BP_FIELD_BYTES,
					  .fixed_size = i < 2 ? (uint64_t)q->row * BD_SEQ_ID_BYTES : 0 };
		snprintf(q->field[i].name, sizeof(q->field[i].name), "%s", names[i]);
	}
	q->schema = (bp_schema){ .count = n, .fields = q->field };
}

/* What makes ds no source of sequences, into err. @return 0 or -EINVAL. */
static int check_pack(const bp_dataset *ds, const char *name, bp_tokens *t, char *err,
		      size_t errlen)
{
	if (bp_dataset_tokens(ds, t) < 0) {
		snprintf(err, errlen, "dataset %s is no token pack, and sequences are cut from token "
			 "ids: pack the tokenized documents with batchd-pack create OUT --tokens "
			 "uint16|uint32 (docs/tokens.md), or open it without seq_len", name);
		return -EINVAL;
	}
	return 0;
}

/*
 * The sequences in use, shared: sessions of one version, mode and seq_len
 * (the ranks of a job, its DataLoader workers) hold one table between
 * them. A version is alive while a session holds its sequences, so its
 * pack's address names it here.
 */
static pthread_mutex_t shared_mu = PTHREAD_MUTEX_INITIALIZER;
static bd_seqs *shared;

/* A live table for (ds, mode, seq_len), a reference taken; or NULL. Under shared_mu. */
static bd_seqs *shared_find(const bp_dataset *ds, uint8_t mode, uint32_t seq_len)
{
	for (bd_seqs *q = shared; q; q = q->next)
		if (q->ds == ds && q->mode == mode && q->seq_len == seq_len) {
			q->refs++;
			return q;
		}
	return NULL;
}

static void destroy(bd_seqs *q)
{
	free(q->block);
	free(q->first);
	free(q->piece);
	free(q);
}

/* A table of its own: what bd_seqs_new builds when no session shares one. */
static int build(const bp_dataset *ds, const char *name, uint8_t mode, uint32_t seq_len,
		 bd_seqs **ret, char *err, size_t errlen)
{
	bd_seqs *q;
	bp_tokens t;
	int r;

	if ((r = check_pack(ds, name, &t, err, errlen)) < 0)
		return r;
	q = bd_calloc(1, sizeof(*q));
	if (!q)
		return -ENOMEM;
	*q = (bd_seqs){ .mode = mode, .seq_len = seq_len, .row = seq_len + 1,
			.width = t.width, .tokens = t.tokens, .documents = t.documents,
			.pad = t.eos == BP_TOKENS_NO_EOS ? 0 : (int32_t)t.eos,
			.heap = sizeof(*q) + BD_MALLOC_OVERHEAD };
	make_schema(q);
	r = map_blocks(q, ds, name, err, errlen);
	if (r == 0 && mode == BP_SEQUENCES_WINDOWS) {
		q->count = q->tokens / q->row;
		q->placed = q->count * q->row;
		q->max_pieces = 1;
		q->max_frags = window_blocks(q, (uint64_t)q->row * q->width);
	} else if (r == 0) {
		r = pack(q, ds);
		if (r == 0)
			q->max_frags = packed_frags(q);
	}
	if (r == 0 && q->count == 0) {
		snprintf(err, errlen, "dataset %s holds %" PRIu64 " tokens, not one window of "
			 "seq_len + 1 = %u: open it with a smaller seq_len", name, q->tokens, q->row);
		r = -EINVAL;
	}
	if (r < 0) {
		destroy(q);
		return r;
	}
	q->chunk = q->nblocks ? (uint32_t)(q->count / q->nblocks) : 1;
	if (q->chunk < 1)
		q->chunk = 1;
	*ret = q;
	return 0;
}

int bd_seqs_new(const bp_dataset *ds, const char *name, uint8_t mode, uint32_t seq_len,
		bd_seqs **ret, char *err, size_t errlen)
{
	bd_seqs *q, *other;
	int r;

	pthread_mutex_lock(&shared_mu);
	q = shared_find(ds, mode, seq_len);
	pthread_mutex_unlock(&shared_mu);
	if (q) {
		*ret = q;
		return 0;
	}
	/* Built unlocked (a pass over every document); a session that built it meanwhile wins. */
	if ((r = build(ds, name, mode, seq_len, &q, err, errlen)) < 0)
		return r;
	pthread_mutex_lock(&shared_mu);
	other = shared_find(ds, mode, seq_len);
	if (!other) {
		q->ds = ds;
		q->refs = 1;
		q->next = shared;
		shared = q;
	}
	pthread_mutex_unlock(&shared_mu);
	if (other) {
		destroy(q);
		q = other;
	}
	*ret = q;
	return 0;
}

uint32_t bd_seqs_sessions(const bd_seqs *q)
{
	uint32_t n;

	pthread_mutex_lock(&shared_mu);
	n = q->refs;
	pthread_mutex_unlock(&shared_mu);
	return n;
}

void bd_seqs_free(bd_seqs *q)
{
	if (!q)
		return;
	pthread_mutex_lock(&shared_mu);
	if (--q->refs) {
		pthread_mutex_unlock(&shared_mu);
		return;
	}
	for (bd_seqs **p = &shared; *p; p = &(*p)->next)
		if (*p == q) {
			*p = q->next;
			break;
		}
	pthread_mutex_unlock(&shared_mu);
	destroy(q);
}

uint32_t bd_seqs_pieces(const bd_seqs *q, uint64_t k, bd_seq_piece *out)
{
	uint64_t n;

	if (q->mode == BP_SEQUENCES_WINDOWS) {
		out[0] = (bd_seq_piece){ .start = k * q->row, .len = q->row, .at = 0 };
		return 1;
	}
	n = q->first[k + 1] - q->first[k];
	memcpy(out, q->piece + q->first[k], n * sizeof(*out));
	return (uint32_t)n;
}

uint32_t bd_seqs_positions(const bd_seqs *q, const bd_seq_piece *pc, uint32_t n, int32_t *pos)
{
	uint32_t used = 0;

	for (uint32_t p = 0; p < n; p++) {
		for (uint32_t j = 0; j < pc[p].len; j++)
			pos[pc[p].at + j] = (int32_t)j;
		used += pc[p].len;
	}
	memset(pos + used, 0, (size_t)(q->row - used) * sizeof(*pos));
	return used;
}

uint32_t bd_seqs_boundaries(const bd_seqs *q, const bd_seq_piece *pc, uint32_t n, uint32_t i,
			    int32_t *out)
{
	uint32_t c = 0, L = q->seq_len;
	int64_t base = (int64_t)i * L;

	if (i == 0 && out)
		out[c] = 0;
	if (i == 0)
		c++;
	/* Pieces lie in row order from 0: each one that starts among the inputs ends a segment. */
	for (uint32_t p = 0; p < n && pc[p].at < L; p++) {
		uint32_t end = pc[p].at + pc[p].len < L ? pc[p].at + pc[p].len : L;

		if (out)
			out[c] = (int32_t)(base + end);
		c++;
		if (end == L)
			return c;
	}
	/* The padding is a segment of its own. */
	if (out)
		out[c] = (int32_t)(base + L);
	return c + 1;
}

uint64_t bd_seqs_boundary_bytes(uint8_t mode, uint32_t max_pieces)
{
	/* Row 0's leading 0, a boundary a piece, and the padding's. */
	return mode == BP_SEQUENCES_PACKED ? ((uint64_t)max_pieces + 2) * BD_SEQ_ID_BYTES : 0;
}

double bd_seqs_padding(const bd_seqs *q)
{
	double all = (double)q->count * q->row;

	return all > 0 ? 1.0 - (double)q->placed / all : 0;
}
