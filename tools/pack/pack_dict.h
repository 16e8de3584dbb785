/* SPDX-License-Identifier: MIT */
/*
 * pack_dict.h - whether and which zstd dictionary `batchd-pack create`
 * gives a pack: dictionaries pay for small blocks only, so one is trained
 * and tried on a sample of the inputs before it is used.
 *
 * Thread rules: called from the main thread; training uses o->threads.
 */
#ifndef BATCHD_TOOLS_PACK_DICT_H
#define BATCHD_TOOLS_PACK_DICT_H

#include <stddef.h>

#include "pack_create.h"
#include "pack_input.h"

/*
 * Train a dictionary when it should pay: small blocks and a measurable gain
 * on the training set, counting the dictionary's own bytes. With DICT_ON
 * the dictionary is kept whatever the gain. @return 0 with *ret_dict set
 * (NULL when none; the caller frees it), or a negative errno with a message.
 */
int pack_train_dict(pack_inputs *in, const pack_create_opts *o, void **ret_dict, size_t *ret_size);

#endif
