/* SPDX-License-Identifier: MIT */
/*
 * pack_file_priv.h - what pack_file.c (opening datasets) and pack_read.c
 * (reading and verifying them) share.
 */
#ifndef BATCHD_LIB_PACK_FILE_PRIV_H
#define BATCHD_LIB_PACK_FILE_PRIV_H

#include <stdint.h>

#include "pack_fields.h"
#include "pack_file.h"

/* Fill fault (when not NULL) with what went wrong where. @return err. */
int bp__fault_set(bp_dataset_fault *fault, const char *shard, int err, const char *what,
		  uint64_t offset, int64_t block);

/* Metadata reads: a shard that ends before its own header says is a truncated pack (EBADMSG). */
int bp__read_meta(const bp_shard *sh, void *buf, size_t len, uint64_t off);

/*
 * Read the sections a batch needs (schema, columns, sizes) of a validated
 * shard and check them; *ret_bytes (malloc'd) holds what *ret points into.
 */
int bp__fields_load(const bp_shard *sh, uint8_t **ret_bytes, bp_pack_fields *ret,
		    bp_dataset_fault *fault);

#endif
