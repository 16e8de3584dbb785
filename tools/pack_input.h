/* SPDX-License-Identifier: MIT */
/*
 * pack_input.h - the samples batchd-pack packs: files below a directory,
 * members of a tar archive, fixed-size records of a file.
 *
 * Packing walks the inputs more than once (a scan for sizes and limits, a
 * pass over a few samples to train a dictionary, the packing pass), always
 * in the same order, so each input is described once (pack_inputs_scan) and
 * then iterated as often as needed. Iteration is sequential because tar
 * members can only be read in archive order; skipping a sample is cheap.
 *
 * Thread rules: single-threaded.
 */
#ifndef BATCHD_TOOLS_PACK_INPUT_H
#define BATCHD_TOOLS_PACK_INPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum pack_input_kind { INPUT_DIR, INPUT_TAR, INPUT_RECORDS };

typedef struct pack_entry {
	char *name;              /* INPUT_DIR: path relative to the root; else NULL */
	uint64_t size;
} pack_entry;

typedef struct pack_input {
	enum pack_input_kind kind;
	char *path;
	uint64_t record_size;    /* INPUT_RECORDS */
	/* Filled by the scan. */
	uint64_t count;          /* samples */
	pack_entry *entries;     /* INPUT_DIR (bytewise name order), INPUT_TAR */
} pack_input;

typedef struct pack_inputs {
	pack_input *v;
	size_t n;
	uint64_t samples, raw_bytes, max_sample;
} pack_inputs;

/* Add an input: a directory or tar file (kind chosen by stat), or records. */
int pack_inputs_add(pack_inputs *in, const char *path, uint64_t record_size, bool records);

/*
 * Scan every input: list files, read tar headers, size record files. Checks
 * every sample against the pack limits. On error prints a message naming
 * the input and returns a negative errno.
 */
int pack_inputs_scan(pack_inputs *in);

void pack_inputs_free(pack_inputs *in);

/* Size of global sample i (0 <= i < in->samples), for choosing training samples. */
uint64_t pack_inputs_size(const pack_inputs *in, uint64_t i);

/* Sequential iteration over all samples of all inputs. */
typedef struct pack_iter pack_iter;

int pack_iter_new(const pack_inputs *in, pack_iter **ret);
void pack_iter_free(pack_iter *it);

/*
 * Advance to the next sample. @return 1 with its size in *ret_size, 0 at
 * the end, negative errno on error (message printed).
 */
int pack_iter_next(pack_iter *it, uint64_t *ret_size);

/*
 * Read the current sample's bytes (exactly the size next reported).
 * @return 0, or a negative errno with a message naming the sample: -EINVAL
 * for a file that changed size since the scan, -EIO for a record file or
 * archive that ends early, another -errno from open or read.
 */
int pack_iter_read(pack_iter *it, uint8_t *dst);

/* A printable name for the current sample ("dir/a/b.txt", "x.tar:member", "f: record 7"). */
const char *pack_iter_name(pack_iter *it);

#endif
