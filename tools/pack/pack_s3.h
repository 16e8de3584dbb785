/* SPDX-License-Identifier: MIT */
/*
 * pack_s3.h - what batchd-pack (tools/pack/pack_remote.c) and its remote module
 * (tools/pack/pack_s3.c, batchd-pack-s3.so) say to each other: one table of
 * functions, found with dlsym as pack_s3_mod_v1 and checked by its abi
 * number, so a module of another build is refused instead of misread.
 * Each function prints its own messages (stderr, naming the location),
 * but for the fault of a dataset that does not validate, which open
 * hands back for the caller to word as for a local dataset.
 *
 * Thread rules: called from the main thread.
 */
#ifndef BATCHD_TOOLS_PACK_S3_H
#define BATCHD_TOOLS_PACK_S3_H

#include <stdbool.h>
#include <stdlib.h>

#include "pack_file.h"
#include "pack_remote.h"

#define PACK_S3_ABI 1u

typedef struct pack_s3_mod {
	unsigned abi;            /* PACK_S3_ABI */
	/*
	 * Before packing: out is an s3:// location create may write (an
	 * object, or a prefix when sharded), the credentials work and nothing
	 * is there yet. @return 0 or a negative errno.
	 */
	int (*prepare)(const char *out, bool sharded, const pack_remote *r);
	/*
	 * After packing into tmp (tmp/out.bpk, or the shards in tmp/out):
	 * open and remove them and tmp, then upload them to out. @return 0 or
	 * a negative errno.
	 */
	int (*upload)(const char *out, const char *tmp, bool sharded, const pack_remote *r);
	/*
	 * The remote dataset at path (pack_remote_open). @return 0 with *ret;
	 * a negative errno, with *faulted true when it is the pack reader's
	 * refusal, described by fault and not yet printed.
	 */
	int (*open)(const char *path, const pack_remote *r, bool whole, bp_dataset **ret,
		    bp_dataset_fault *fault, bool *faulted);
} pack_s3_mod;

/* Where temporary packs and fetched shards go: $TMPDIR, else /tmp. */
static inline const char *pack_tmp_root(void)
{
	const char *t = getenv("TMPDIR");

	return t && *t ? t : "/tmp";
}

#endif
