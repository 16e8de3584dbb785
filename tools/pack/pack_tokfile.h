/* SPDX-License-Identifier: MIT */
/*
 * pack_tokfile.h - the token files `batchd-pack create --tokens` reads,
 * as bytes: a NumPy .npy header, a Megatron MMapIndexedDataset .idx
 * (MMIDIDX), a JSONL line of ids, and token ids of any integer type
 * checked and converted to the pack's width.
 *
 * Pure: every function takes the caller's bytes, does no I/O and keeps no
 * state, and treats what it reads as hostile (sizes and counts are
 * checked before they are multiplied or used), so each can be fed any
 * bytes (tests/fuzz/fuzz-tokens.c does exactly that). pack_tokens.c
 * reads the files and names them in its messages; a refusal here says
 * what is wrong in `why`, the file's name left to the caller.
 *
 * Thread rules: reentrant.
 */
#ifndef BATCHD_TOOLS_PACK_TOKFILE_H
#define BATCHD_TOOLS_PACK_TOKFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The integer types a token file may hold its ids in. */
enum pack_tok_type { TOK_U8, TOK_I8, TOK_U16, TOK_I16, TOK_U32, TOK_I32, TOK_U64, TOK_I64 };

/* Bytes one id of type t takes: 1, 2, 4 or 8. */
size_t pack_tok_size(enum pack_tok_type t);
/* "uint8", "int8", ..., "int64". */
const char *pack_tok_name(enum pack_tok_type t);
/* The pack's id type of width bytes (2: TOK_U16, 4: TOK_U32). */
enum pack_tok_type pack_tok_of_width(uint32_t width);

/* Id i of type t at p (little-endian), one pack_tok_convert accepted. */
uint64_t pack_tok_get(enum pack_tok_type t, const uint8_t *p, size_t i);

/*
 * Convert n ids of type t at src to the pack's width (2 or 4 bytes,
 * little-endian) at dst (n x width bytes; may be NULL to check only),
 * each checked: none negative, none over bp_tokens_max_id(width); first
 * is the index of src[0] in its document, for why.
 * @return n when all are ids, else the index of the first that is not
 * (why then says which and what to do: "token 17: id 70000 does not fit
 * uint16 (0..65535): use --tokens uint32").
 */
size_t pack_tok_convert(enum pack_tok_type t, const uint8_t *src, size_t n, uint32_t width,
			uint8_t *dst, uint64_t first, char *why, size_t why_len);

/* ---- .npy ----------------------------------------------------------------- */

#define PACK_NPY_HEADER_MAX 65536u /* bytes before the array: the magic, the lengths, the dict */

typedef struct pack_npy {
	enum pack_tok_type type;
	uint64_t data_offset;    /* where the array's bytes start */
	uint32_t ndim;           /* 1: a stream of ids; 2: rows of cols ids each */
	uint64_t rows, cols;     /* 1-D: rows ids, cols 1 */
} pack_npy;

/*
 * Parse a .npy header (format version 1, 2 or 3) from buf[0..len), the
 * first bytes of a file of file_size bytes (len: all of them, or at least
 * PACK_NPY_HEADER_MAX): the magic, the dict of descr (a little-endian or
 * one-byte integer type), fortran_order (False, but for 1-D) and shape
 * (1 or 2 dimensions), and the array's bytes exactly filling the rest of
 * the file. @return 0, or -EINVAL with why set; ret written only on success.
 */
int pack_npy_parse(const uint8_t *buf, size_t len, uint64_t file_size, pack_npy *ret, char *why,
		   size_t why_len);

/* ---- Megatron .idx ---------------------------------------------------------- */

#define PACK_IDX_MAGIC "MMIDIDX\0\0" /* 9 bytes */

/*
 * A Megatron-LM MMapIndexedDataset index: the header (magic, u64 version
 * 1, u8 dtype code, u64 sequence count, u64 document-index count), then
 * int32 sizes[sequences], int64 pointers[sequences] (byte offsets into the
 * .bin), int64 doc_idx[count]. Megatron writes len(doc_idx) as the count:
 * one more than its documents, doc_idx starting at 0 and ending at the
 * sequence count.
 */
typedef struct pack_idx {
	enum pack_tok_type type;
	uint64_t sequences;
	uint64_t doc_entries;
	const uint8_t *sizes, *pointers, *doc_idx; /* into the caller's bytes */
} pack_idx;

/*
 * Parse and check a whole .idx held in buf[0..len) against its .bin of
 * bin_size bytes (named bin_name in why): the header, the tables' sizes
 * filling the file exactly, every size not negative, the pointers from 0,
 * each where the previous sequence ends, each sequence within the .bin and
 * the last ending exactly at its end, doc_idx from 0 up to the sequence
 * count, never decreasing. @return 0, or -EINVAL with why set ("sequence
 * 17 ends at byte 123456, past x.bin's 120000 bytes: the .idx does not
 * belong to this .bin; rebuild it"); ret written only on success.
 */
int pack_idx_parse(const uint8_t *buf, size_t len, uint64_t bin_size, const char *bin_name,
		   pack_idx *ret, char *why, size_t why_len);
/* Sequence i (< sequences) of a parsed index: its byte offset in the .bin and its ids. */
void pack_idx_sequence(const pack_idx *x, uint64_t i, uint64_t *ret_offset, uint64_t *ret_count);

/* ---- JSONL ------------------------------------------------------------------- */

/*
 * One JSONL line, line[0..len) (no newline): a JSON array of ids, or an
 * object whose member input_ids, tokens or ids (the first there, in that
 * order) is one. Its ids, checked as pack_tok_convert checks them, go to
 * *buf (grown with realloc as needed, *cap its bytes; the caller frees it)
 * at width bytes each, their count to *ret_count. tok is the caller's
 * json-c tokener (json_tokener *).
 * @return 0; -EINVAL with why set (not JSON, no array, an element that is
 * no integer: "token 3 is 1.5, not an integer id", an id out of range);
 * -E2BIG when there are more than max_ids; -ENOMEM.
 */
int pack_jsonl_ids(void *tok, const char *line, size_t len, uint32_t width, size_t max_ids,
		   uint8_t **buf, size_t *cap, size_t *ret_count, char *why, size_t why_len);

#endif
