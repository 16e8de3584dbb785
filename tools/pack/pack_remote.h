/* SPDX-License-Identifier: MIT */
/*
 * pack_remote.h - batchd-pack on remote datasets (s3.h): `create` to
 * s3://BUCKET/KEY (packed in a temporary directory, uploaded, removed),
 * and `info` and `verify` of s3:// and http(s):// datasets (fetched into
 * unlinked temporary files and read there as local shards). The flags
 * are parsed here; the work is done by the module batchd-pack-s3.so
 * (pack_s3.h), loaded at the first remote path, so that the local
 * commands never load libcurl.
 *
 * Thread rules: called from the main thread.
 */
#ifndef BATCHD_TOOLS_PACK_REMOTE_H
#define BATCHD_TOOLS_PACK_REMOTE_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>

#include "pack_create.h"
#include "pack_file.h"
#include "s3.h"

/* The remote flags, as getopt_long codes. */
enum {
	O_REMOTE_ENDPOINT = 0x400, O_REMOTE_REGION, O_REMOTE_ADDRESSING, O_REMOTE_PROFILE,
	O_REMOTE_PART_SIZE,
};

#define PACK_REMOTE_OPTIONS \
	{ "endpoint", required_argument, NULL, O_REMOTE_ENDPOINT }, \
	{ "region", required_argument, NULL, O_REMOTE_REGION }, \
	{ "addressing", required_argument, NULL, O_REMOTE_ADDRESSING }, \
	{ "profile", required_argument, NULL, O_REMOTE_PROFILE }

/* The flags' usage lines, for --help. */
#define PACK_REMOTE_HELP \
	"remote (OUT of create, PATH of info and verify: s3://BUCKET/KEY; info and verify\n" \
	"also https://HOST/PATH, a one-file pack read without signing):\n" \
	"  --endpoint URL     the S3 endpoint (default $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL,\n" \
	"                     else https://s3.REGION.amazonaws.com)\n" \
	"  --region R         the bucket's region (default $AWS_REGION, $AWS_DEFAULT_REGION,\n" \
	"                     else us-east-1)\n" \
	"  --addressing auto|path|virtual  bucket in the path or the host name (auto: the\n" \
	"                     host for *.amazonaws.com, else the path)\n" \
	"  --profile P        the profile of ~/.aws/credentials (default $AWS_PROFILE, else\n" \
	"                     default); $AWS_ACCESS_KEY_ID and $AWS_SECRET_ACCESS_KEY first\n" \
	"  --part-size SIZE   create: multipart upload in parts of SIZE (5M..5G, default 64M)\n"

typedef struct pack_remote {
	bp_s3_config cfg;
	uint64_t part_size;      /* 0: bp_s3_upload_fd's choice */
} pack_remote;

/*
 * A remote flag (code c, argument arg) into r. @return 0 when taken, 2
 * (usage printed) for a bad value, -1 when c is not a remote flag.
 */
int pack_remote_option(pack_remote *r, int c, const char *arg);

/* Is s a remote location (s3://, http://, https://)? As bp_s3_is_remote, without linking it. */
bool pack_is_remote(const char *s);

/* Any remote flag set while path is local: a usage error. @return 0 or 2 (usage printed). */
int pack_remote_check(const pack_remote *r, const char *path);

/*
 * `create OUT` for a remote OUT: pack into a temporary directory under
 * $TMPDIR (else /tmp), upload every pack written, remove the temporary
 * files. A one-file pack becomes the object OUT; with --shard-size, OUT is
 * a prefix and each shard NAME becomes OUT/NAME. @return 0 or a negative
 * errno (message printed).
 */
int pack_remote_create(const char *out, pack_inputs *in, pack_create_opts *o,
		       const pack_remote *r);

/*
 * Open the remote dataset at path: one object, or the *.bpk objects
 * directly under path/ (names starting with '.' skipped, bytewise order).
 * whole: fetch every byte (verify); else only what opening reads (the
 * header, dictionary, sections, index and footer of each shard).
 * @return 0 with *ret (bp_dataset_close); a negative errno, message printed.
 */
int pack_remote_open(const char *path, const pack_remote *r, bool whole, bp_dataset **ret);

#endif
