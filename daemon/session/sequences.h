/* SPDX-License-Identifier: MIT */
/*
 * sequences.h - a token pack read as sequences: the samples of a token
 * session (docs/tokens.md; OPEN's sequences trailer, PROTOCOL.md).
 *
 * A token pack's documents lie end to end in its blocks, so the pack is
 * one stream of token ids. A token session's sample k is not a document
 * but sequence k of seq_len + 1 tokens (a row), made of pieces of that
 * stream:
 *
 *   windows  row k is stream tokens [k·row, (k+1)·row): every token in
 *            exactly one window; the last stream_tokens % row tokens are
 *            in none (the tail, reported).
 *   packed   whole documents packed into rows, best fit decreasing within
 *            groups of consecutive documents (BD_SEQ_GROUP_ROWS rows of
 *            tokens a group); a document longer than a row is cut into
 *            full rows and a rest. Every token in exactly one row; the
 *            rest of a row is padding.
 *
 * Both are a pure function of (pack, mode, seq_len), so the sampler,
 * ranks and elastic resume work over sequence indexes unchanged, and the
 * batches of a session are what any other session over the same pack,
 * mode and seq_len gets for the same positions.
 *
 * What a batch carries (the schema the ring holds, built here): `tokens`,
 * row·4 bytes a sample, int32 ids; packed adds `position_ids` (row·4
 * bytes, each document's positions from 0, padding 0) and `cu_seqlens`
 * (int32, the boundaries of the documents over the inputs, the first
 * seq_len tokens of each row, in the batch's flattened coordinates: the
 * values end to end are FlashAttention's cu_seqlens for the batch).
 *
 * Thread rules: bd_seqs_new runs on the open's worker thread (packing is
 * a pass over every document); the result is read-only after, shared by
 * the sessions over the same pack, mode and seq_len, and the planner
 * reads it on the loop thread.
 */
#ifndef BATCHD_DAEMON_SEQUENCES_H
#define BATCHD_DAEMON_SEQUENCES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pack.h"
#include "pack_fields.h"
#include "pack_file.h"

/* Rows of tokens a packing group holds: best fit looks this far for a document that fits. */
#define BD_SEQ_GROUP_ROWS 64u

/* The int32 ids and positions a batch carries. */
#define BD_SEQ_ID_BYTES 4u

/* One piece of a row: tokens [start, start + len) of the stream at row position `at`. */
typedef struct bd_seq_piece {
	uint64_t start;
	uint32_t len;
	uint32_t at;
} bd_seq_piece;

/* Where a block of the stream is: its shard, its index there and its first stream byte. */
typedef struct bd_seq_block {
	uint64_t start;
	uint64_t block;
	uint32_t shard;
} bd_seq_block;

typedef struct bd_seqs {
	uint8_t mode;               /* BP_SEQUENCES_WINDOWS or BP_SEQUENCES_PACKED */
	uint32_t seq_len, row;      /* row = seq_len + 1 tokens a sample */
	uint32_t width;             /* stored bytes a token: 2 or 4 */
	int32_t pad;                /* the id padding takes: the pack's end-of-document id, else 0 */
	uint64_t count;             /* sequences: the session's samples */
	uint64_t tokens;            /* tokens in the stream */
	uint64_t placed;            /* ... in sequences: windows leave the tail out */
	uint64_t documents;
	uint64_t nblocks;           /* blocks of the stream, every shard's in order */
	bd_seq_block *block;        /* nblocks + 1: the last one's start is the stream's end */
	/* Packed: sequence k's pieces are piece[first[k] .. first[k + 1]). */
	uint64_t *first;
	bd_seq_piece *piece;
	uint64_t npieces;
	uint32_t max_pieces;        /* the most pieces a row holds */
	uint32_t max_frags;         /* the most (block, piece) fragments a row reads */
	uint32_t chunk;             /* sequences a block holds, about (block shuffle's chunk) */
	bp_field field[3];
	bp_schema schema;           /* tokens[, position_ids, cu_seqlens] */
	/*
	 * Bytes held, charged to every session that reads the table: shared
	 * tables are charged once per session, more than they hold, never less.
	 */
	uint64_t heap;
	/* Sharing (bd_seqs_new): the pack it is of, its sessions, the next shared table. */
	const bp_dataset *ds;
	uint32_t refs;
	struct bd_seqs *next;
} bd_seqs;

/*
 * The sequences of token pack ds (called `name` in messages) for OPEN's
 * mode and seq_len: the table another session holds for the same, shared,
 * else one built now. @return 0; -EINVAL with err when ds is no token
 * pack, holds no full window, or has a block that cuts a token; -ENOMEM.
 */
int bd_seqs_new(const bp_dataset *ds, const char *name, uint8_t mode, uint32_t seq_len,
		bd_seqs **ret, char *err, size_t errlen);

/* Drop a reference (NULL is fine); the last one frees the table. Any thread. */
void bd_seqs_free(bd_seqs *q);

/* How many hold q now (sessions, and opens under way). Any thread. */
uint32_t bd_seqs_sessions(const bd_seqs *q);

/* Sequence k's pieces into out (q->max_pieces of room). @return how many. */
uint32_t bd_seqs_pieces(const bd_seqs *q, uint64_t k, bd_seq_piece *out);

/*
 * The blocks piece pc reads: for each, fn(ctx, block, src, size, token)
 * with the block's bytes [src, src + size) holding the piece's tokens
 * from `token` (counted from the piece's start) on. @return how many.
 */
typedef void (*bd_seq_frag_fn)(void *ctx, const bd_seq_block *b, uint64_t src, uint64_t size,
			       uint32_t token);
uint32_t bd_seqs_fragments(const bd_seqs *q, const bd_seq_piece *pc, bd_seq_frag_fn fn,
			   void *ctx);

/*
 * A row's position_ids (row int32) from its pieces: each piece counts
 * from 0, the padding is 0. @return the tokens the row holds.
 */
uint32_t bd_seqs_positions(const bd_seqs *q, const bd_seq_piece *pc, uint32_t n, int32_t *pos);

/*
 * Row i of a batch: its cu_seqlens boundaries (int32, in the batch's
 * flattened coordinates over the first seq_len tokens of each row),
 * written to out when not NULL: the leading 0 for row 0, then each
 * segment's end. @return how many.
 */
uint32_t bd_seqs_boundaries(const bd_seqs *q, const bd_seq_piece *pc, uint32_t n, uint32_t i,
			    int32_t *out);

/*
 * The most bytes of cu_seqlens one row of `mode` carries when a row holds
 * at most max_pieces pieces (a session's, or a mixture's over its sources).
 */
uint64_t bd_seqs_boundary_bytes(uint8_t mode, uint32_t max_pieces);

/* Padding tokens over all rows, as a fraction of the rows' tokens. */
double bd_seqs_padding(const bd_seqs *q);

#endif
