/* SPDX-License-Identifier: MIT */
/*
 * pack_read.h - the reading commands of batchd-pack: `ls` (samples with
 * their keys and field values), `cat` (one field of one sample, by id or
 * key), and the schema and token parts of `info`.
 *
 * Thread rules: called from the main thread.
 */
#ifndef BATCHD_TOOLS_PACK_READ_H
#define BATCHD_TOOLS_PACK_READ_H

#include <stdbool.h>

#include "pack_file.h"

/* Say why opening path failed (r, with fault when it names one). */
void pack_say_open_fault(const char *path, int r, const bp_dataset_fault *fault);
/* Open path, printing a message naming it on failure. @return 0 or a negative errno. */
int pack_open_dataset(const char *path, bp_dataset **ret);

/* `batchd-pack ls` and `batchd-pack cat` (argv[0] is the command). @return the exit status. */
int pack_cmd_ls(int argc, char **argv);
int pack_cmd_cat(int argc, char **argv);

/* info's lines on keys and fields. */
void pack_info_fields_text(const bp_dataset *ds);
/* info --json's "keys" and "fields" members, each followed by ", " unless last. */
void pack_info_fields_json(const bp_dataset *ds, bool last);
/* info's lines on a token pack's tokens (nothing for another pack). */
void pack_info_tokens_text(const bp_dataset *ds);
/* info --json's "tokens" member (null for another pack) and ", ". */
void pack_info_tokens_json(const bp_dataset *ds);

#endif
