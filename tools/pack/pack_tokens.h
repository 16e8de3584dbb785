/* SPDX-License-Identifier: MIT */
/*
 * pack_tokens.h - the inputs of `batchd-pack create --tokens`: tokenized
 * documents for a token pack (PACK.md §Token packs, docs/packs.md).
 *
 * An input is a flat token file (NAME.bin, the whole file ids of the
 * --tokens width, documents ending after each --eos id), a Megatron pair
 * (PREFIX.bin and PREFIX.idx: each sequence a document), a NumPy .npy (a
 * 1-D stream split as a flat file, or a 2-D array of rows, each a
 * document) or a .jsonl (a line a document: an array of ids, or an
 * object's input_ids, tokens or ids). The scan reads every id once,
 * streaming, and keeps 16 bytes a document (where it starts in its file,
 * how many ids, whether --eos is appended to it), so the packing pass
 * reads each document where the scan found it, converted to the pack's
 * width, and checks again that it is what the scan saw.
 *
 * Thread rules: single-threaded, as pack_input.h; but pack_tokens_name,
 * which any thread may call once the scan is done.
 */
#ifndef BATCHD_TOOLS_PACK_TOKENS_H
#define BATCHD_TOOLS_PACK_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "pack_input.h"

/*
 * Add token input path to in (in->tok set): which kind it is by its name
 * (.npy, .jsonl, .idx, .bin: Megatron's when PREFIX.idx is beside it, else
 * flat), or a Megatron PREFIX of PREFIX.bin and PREFIX.idx. A flat .bin
 * without --eos is refused here, having no document boundaries.
 * @return 0, or a negative errno with a message naming path.
 */
int pack_tokens_add(pack_inputs *in, const char *path);

/*
 * Scan p: every id read and checked against the width, the documents
 * found and sized (an --eos id appended where it is due), each within the
 * sample limit; an empty document refused naming it, or with
 * in->fo.allow_empty left out and counted in in->tally. Sets p->count.
 * @return 0, or a negative errno with a message naming the file, the
 * document (or line) and the token.
 */
int pack_tokens_scan(pack_inputs *in, pack_input *p);

/* Document i of a scanned p: its bytes in the pack. */
uint64_t pack_tokens_size(const pack_input *p, uint64_t i);
/* All of p's documents' bytes in the pack, and the largest one's. */
void pack_tokens_totals(const pack_input *p, uint64_t *ret_bytes, uint64_t *ret_max);
/* "FILE: document I" (a JSONL line: "FILE:LINE") into buf. Any thread once scanned. */
void pack_tokens_name(const pack_input *p, uint64_t i, char *buf, size_t len);
/* Free what add and the scan keep of p. */
void pack_tokens_free(pack_input *p);

/* Reads the documents of one input, in the packing pass. */
typedef struct pack_tokens_reader pack_tokens_reader;

/* @return 0, or a negative errno with a message naming p's file. */
int pack_tokens_open(const pack_inputs *in, const pack_input *p, pack_tokens_reader **ret);
void pack_tokens_close(pack_tokens_reader *r); /* NULL is fine */
/*
 * Document i of the reader's input into dst (pack_tokens_size bytes):
 * read where the scan found it, converted to the width, the --eos id
 * appended where due. @return 0, or a negative errno with a message
 * naming the document: -EIO when the file ends early, -EINVAL when it
 * is not what the scan read (the file changed while packing).
 */
int pack_tokens_read(pack_tokens_reader *r, uint64_t i, uint8_t *dst);

#endif
