/* SPDX-License-Identifier: MIT */
/*
 * pack_create.h - `batchd-pack create`: turn inputs into a pack or shards.
 *
 * Thread rules: called from the main thread; starts and joins its own
 * compression workers (which also re-encode images for --max-side and
 * decode them for --check-images).
 */
#ifndef BATCHD_TOOLS_PACK_CREATE_H
#define BATCHD_TOOLS_PACK_CREATE_H

#include <stdbool.h>
#include <stdint.h>

#include "pack_input.h"

enum pack_dict_mode { DICT_AUTO, DICT_OFF, DICT_ON };

typedef struct pack_create_opts {
	int level;               /* zstd level */
	uint64_t block_size;     /* target raw bytes per block; 0 = one sample per block */
	uint64_t frame_size;     /* larger samples go in frames of this many bytes */
	enum pack_dict_mode dict;
	unsigned threads;        /* compression workers, >= 1 */
	uint64_t shard_size;     /* 0 = one file; else OUT is a directory of shards */
	const char *name;        /* OUT as the summary line names it (a remote OUT), or NULL */
	uint32_t max_side;       /* re-encode images larger than this (pack_image.h); 0 = never */
	int jpeg_quality;        /* ... as JPEGs of this quality, 1 .. 100 */
	bool check_images;       /* decode every image whole (pack_image.h); with the inputs'
				  * fo.on_error ON_ERROR_SKIP, leave out a sample whose does not */
} pack_create_opts;

/*
 * Scan the inputs and write OUT. Nothing appears under OUT unless the whole
 * pack was written and synced (temporary name, then rename). Messages name
 * the file involved. @return 0 or a negative errno (message printed).
 */
int pack_create(const char *out, pack_inputs *in, const pack_create_opts *o);

#endif
