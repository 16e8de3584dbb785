/* SPDX-License-Identifier: MIT */
/*
 * batchd-pack - create, inspect, verify and read batchd datasets.
 *
 *   batchd-pack create OUT INPUT... [options]
 *   batchd-pack create OUT --manifest FILE [options]
 *   batchd-pack create OUT --tokens uint16|uint32 [--eos ID] INPUT... [options]
 *   batchd-pack info PATH [--json] [remote options]
 *   batchd-pack verify PATH [remote options]
 *   batchd-pack ls PATH [--range A:B]
 *   batchd-pack cat PATH ID|KEY [--field NAME]
 *
 * OUT and PATH may be remote (s3://BUCKET/KEY; PATH also https://): see
 * pack_remote.h.
 *
 * Exit status: 0 success, 1 failure (message on stderr naming the file),
 * 2 usage error.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zstd.h>

#include "batchd-build.h"
#include "cli.h"
#include "pack.h"
#include "pack_create.h"
#include "pack_file.h"
#include "pack_image.h"
#include "pack_read.h"
#include "pack_remote.h"
#include "pack_scan.h"
#include "pack_tokens.h"
#include "progress.h"
#include "units.h"

/*
 * The usage in three literals, joined once at start (usage()): one literal
 * would be over the 4095 bytes C99 has every compiler take.
 */
static const char usage_create[] =
	"usage: batchd-pack create OUT INPUT... [options]\n"
	"       batchd-pack create OUT --manifest FILE.csv|FILE.jsonl [--column NAME:TYPE]...\n"
	"       batchd-pack create OUT --tokens uint16|uint32 [--eos ID] INPUT... [options]\n"
	"       batchd-pack info PATH [--json] [--endpoint URL] [--region R]\n"
	"                        [--addressing auto|path|virtual] [--profile P]\n"
	"       batchd-pack verify PATH [--endpoint URL] [--region R]\n"
	"                          [--addressing auto|path|virtual] [--profile P]\n"
	"       batchd-pack ls PATH [--range A:B]\n"
	"       batchd-pack cat PATH ID|KEY [--id N|--key K] [--field NAME]\n"
	"\n"
	"create: INPUT is a directory (every regular file below it is a sample, in\n"
	"bytewise order of relative path, keyed by that path; names starting with '.'\n"
	"are ignored, symlinks, FIFOs, sockets and devices left out, each named), a\n"
	".tar archive (regular members in archive order, keyed by member path) or\n"
	"--records SIZE FILE (fixed-size records, no keys). A sample's bytes are the\n"
	"field \"data\". The summary line counts what was left out, and why.\n"
	"  --on-error fail|skip  a file below a directory that cannot be read (and with\n"
	"                     --check-images or --max-side, an image that does not\n"
	"                     decode) fails the pack naming it (fail, the default) or\n"
	"                     is left out (skip), named and counted\n"
	"  --include-hidden   pack names starting with '.' below a directory too\n"
	"  --allow-empty      no warning for a sample of 0 bytes (packed either way)\n"
	"  --labels dirname   DIR/CLASS/...: an int64 field \"label\", the index of CLASS\n"
	"                     among DIR's subdirectories in bytewise order (names kept)\n"
	"  --group-by key     TAR in the WebDataset layout: members KEY.EXT form a sample,\n"
	"                     a field per EXT (cls, label: int64; else bytes)\n"
	"  --allow-missing    --group-by: a sample lacking a bytes field stores it empty\n"
	"  --missing-int N    --group-by --allow-missing: a lacking int64 field is N\n"
	"  --manifest FILE    a row per sample: path (relative to FILE's directory) and\n"
	"                     columns typed by their values (int64, float64, else str)\n"
	"  --column NAME:TYPE --manifest: column NAME as int64, float32, float64 or str\n"
	"  --no-keys          store no keys (plain inputs: the pack bytes of before keys)\n"
	"  --level N          zstd level (default 3)\n"
	"  --block-size SIZE  target raw bytes per block; 0 = one sample per block (default)\n"
	"  --frame-size SIZE  store a larger sample as frames of SIZE bytes, a block each,\n"
	"                     decoded in parallel (4K..256M, default 4M)\n"
	"  --dict, --no-dict  force or forbid a trained dictionary (default: when it pays)\n"
	"  --threads N        compression threads (default: all cores)\n"
	"  --shard-size SIZE  write OUT as a directory of shards of about SIZE stored bytes\n"
	"  --records SIZE FILE  add FILE as records of SIZE bytes (repeatable)\n"
	"  --max-side N       re-encode each image (JPEG, PNG, WebP) whose longer side is\n"
	"                     over N (16..65535) as an RGB JPEG with that side N, aspect\n"
	"                     kept; other images and bytes are stored as read\n"
	"  --jpeg-quality Q   --max-side: the JPEGs' quality, 1..100 (default 90)\n"
	"  --check-images     decode every image (JPEG, PNG, WebP by its first bytes)\n"
	"                     whole, as batchd would; one that does not decode is named\n"
	"                     with the decoder's reason (see --on-error)\n";

/* Token packs (create --tokens): what INPUT is there, and the options that change. */
static const char usage_tokens[] =
	"create --tokens: a token pack of tokenized documents (a sample a document, its\n"
	"token ids little-endian; docs/packs.md). INPUT is a flat token file NAME.bin\n"
	"(ids of the --tokens type, a document ending after each --eos id), a Megatron\n"
	"PREFIX.bin and PREFIX.idx (a sequence a document; either file or PREFIX), a .npy\n"
	"(1-D: a stream as a flat file; 2-D: a row a document) or a .jsonl (a line a\n"
	"document: [ids] or {\"input_ids\": [ids]}); inputs in order, kinds mixed.\n"
	"  --tokens uint16|uint32  the ids' type in the pack (uint32: ids up to 2^31-1)\n"
	"  --eos ID           the end-of-document id: it cuts flat streams into documents\n"
	"                     and is appended to every other document not ending with it\n"
	"  --allow-empty      leave empty documents out (counted) rather than refuse them\n"
	"  Defaults change: --block-size 128K, no dictionary unless --dict. Not with\n"
	"  --labels, --group-by, --manifest, --records, --max-side, --check-images,\n"
	"  --no-keys: a token pack has one field and no keys.\n";

static const char usage_rest[] =
	BP_SIZE_HELP
	PACK_REMOTE_HELP
	"ls: a line per sample, ID KEY FIELD=VALUE... (KEY - without keys; bytes fields\n"
	"as NAME=<N bytes>; a key or text holding blanks, quotes or control bytes is\n"
	"printed quoted with C escapes).\n"
	"cat: a field's bytes to stdout (default the first bytes field; a scalar as\n"
	"text). An operand of digits is an id, else a key; --id and --key say which.\n";

/* ---- create ---------------------------------------------------------------- */

enum {
	O_LEVEL = 256, O_BLOCK, O_FRAME, O_DICT, O_NODICT, O_THREADS, O_SHARD, O_RECORDS,
	O_LABELS, O_GROUP, O_MANIFEST, O_COLUMN, O_NOKEYS, O_MISSING, O_MISSING_INT,
	O_MAX_SIDE, O_JPEG_QUALITY, O_ON_ERROR, O_HIDDEN, O_EMPTY, O_CHECK_IMAGES,
	O_TOKENS, O_EOS,
};

/* The block size a token pack gets unless --block-size says: whole documents, 128 KiB a block. */
#define TOKENS_BLOCK_SIZE (UINT64_C(128) << 10)

/*
 * The inputs as the command line names them, added once it is all read:
 * what an operand is (a directory or tar, or a token file with --tokens)
 * depends on options that may come after it.
 */
typedef struct pending {
	const char *path;
	uint64_t record_size;    /* --records SIZE FILE; 0 for an operand */
} pending;

typedef struct create_args {
	pending *v;
	size_t n;
	bool block_size;         /* --block-size given */
	bool eos;                /* --eos given */
	uint64_t eos_id;
} create_args;

/* Note input path (a record file of record_size bytes a record, or an operand). @return 0 or 1 (said). */
static int pend(create_args *a, const char *path, uint64_t record_size)
{
	pending *v = realloc(a->v, (a->n + 1) * sizeof(*v));

	if (!v) {
		fprintf(stderr, "batchd-pack: out of memory\n");
		return 1;
	}
	a->v = v;
	v[a->n++] = (pending){ path, record_size };
	return 0;
}

/* A sized option: --block-size, --frame-size, --shard-size. @return 0, or the usage exit status. */
static int create_size(pack_create_opts *o, int c, const char *arg)
{
	if (c == O_BLOCK) {
		if (bp_parse_size(arg, &o->block_size) < 0 || o->block_size > BP_PACK_MAX_BLOCK)
			return cli_usage("--block-size: '%s' is not a size up to 256M (" BP_SIZE_FORMS ")", arg);
		return 0;
	}
	if (c == O_FRAME) {
		if (bp_parse_size(arg, &o->frame_size) < 0 || o->frame_size < BP_PACK_MIN_FRAME ||
		    o->frame_size > BP_PACK_MAX_BLOCK)
			return cli_usage("--frame-size: '%s' is not a size from 4K to 256M (" BP_SIZE_FORMS ")", arg);
		return 0;
	}
	if (bp_parse_size(arg, &o->shard_size) < 0 || o->shard_size == 0)
		return cli_usage("--shard-size: '%s' is not a size above 0 (" BP_SIZE_FORMS ")", arg);
	return 0;
}

/* --records SIZE FILE: FILE is the next argument. @return 0, 1 (said why) or the usage exit status. */
static int create_records(create_args *a, const char *out, const char *arg, int argc, char **argv)
{
	uint64_t v;

	if (bp_parse_size(arg, &v) < 0 || v == 0)
		return cli_usage("--records: '%s' is not a record size above 0 (" BP_SIZE_FORMS ")", arg);
	if (optind >= argc)
		return cli_usage("--records %s: missing FILE", arg);
	if (!out)
		return cli_usage("--records: name OUT before the inputs");
	return pend(a, argv[optind++], v);
}

/* --tokens uint16|uint32, --eos ID. @return 0 or the usage exit status. */
static int create_tokens(pack_inputs *in, create_args *a, int c, const char *arg)
{
	if (c == O_EOS) {
		if (cli_parse_u64(arg, &a->eos_id) < 0)
			return cli_usage("--eos: '%s' is not a token id", arg);
		a->eos = true;
		return 0;
	}
	if (!strcmp(arg, "uint16"))
		in->tok.width = 2;
	else if (!strcmp(arg, "uint32"))
		in->tok.width = 4;
	else
		return cli_usage("--tokens: '%s' is not a token type; uint16 or uint32", arg);
	return 0;
}

/*
 * --tokens against the options that give samples fields, keys or images,
 * and --eos and the block, frame and dictionary defaults of a token pack.
 * @return 0 or the usage exit status.
 */
static int tokens_check(pack_inputs *in, pack_create_opts *o, const create_args *a)
{
	static const char *const layouts[] = { "", "--labels", "--group-by", "--manifest" };
	uint64_t max = bp_tokens_max_id(in->tok.width);
	bool records = false;

	for (size_t i = 0; i < a->n; i++)
		records = records || a->v[i].record_size;
	if (a->eos && !in->tok.width)
		return cli_usage("--eos: only with --tokens uint16|uint32 (a token pack)");
	if (!in->tok.width)
		return 0;
	if (in->fo.layout != LAYOUT_FILES)
		return cli_usage("--tokens: not with %s (a token pack's one field is its documents' "
				 "ids)", layouts[in->fo.layout]);
	if (records)
		return cli_usage("--tokens: not with --records (give a flat token file as INPUT, "
				 "with --eos)");
	if (o->max_side || o->check_images)
		return cli_usage("--tokens: not with %s (token ids are no images)",
				 o->max_side ? "--max-side" : "--check-images");
	if (in->fo.no_keys)
		return cli_usage("--tokens: not with --no-keys (a token pack never stores keys: a "
				 "document is found by its id)");
	if (a->eos && a->eos_id > max)
		return cli_usage("--eos: %" PRIu64 " is not a %s token id (0..%" PRIu64 ")", a->eos_id,
				 in->tok.width == 2 ? "uint16" : "uint32", max);
	if (o->frame_size % in->tok.width)
		return cli_usage("--frame-size: with --tokens %s, a multiple of %u bytes (a frame "
				 "holds whole token ids)", in->tok.width == 2 ? "uint16" : "uint32",
				 in->tok.width);
	in->tok.eos = a->eos ? a->eos_id : BP_TOKENS_NO_EOS;
	o->block_size = a->block_size ? o->block_size : TOKENS_BLOCK_SIZE;
	if (o->dict == DICT_AUTO)
		o->dict = DICT_OFF;
	return 0;
}

/* The inputs named, in command-line order. @return 0 or 1 (one that cannot be used, said). */
static int add_inputs(pack_inputs *in, const create_args *a)
{
	for (size_t i = 0; i < a->n; i++) {
		const pending *p = &a->v[i];
		int r = in->tok.width ? pack_tokens_add(in, p->path)
				      : pack_inputs_add(in, p->path, p->record_size, p->record_size != 0);

		if (r < 0)
			return 1;
	}
	return 0;
}

/* The options that give samples fields. @return 0, 1 (said why) or the usage exit status. */
static int create_fields(pack_inputs *in, int c, const char *arg)
{
	enum pack_layout want = c == O_LABELS ? LAYOUT_LABELS
			      : c == O_GROUP ? LAYOUT_GROUPS : LAYOUT_MANIFEST;
	int64_t v;

	switch (c) {
	case O_NOKEYS: in->fo.no_keys = true; return 0;
	case O_MISSING: in->fo.allow_missing = true; return 0;
	case O_COLUMN: return pack_inputs_add_column(in, arg) < 0 ? 2 : 0;
	case O_MISSING_INT:
		if (pack__parse_i64(arg, strlen(arg), false, &v) < 0)
			return cli_usage("--missing-int: '%s' is not an int64", arg);
		in->fo.missing_int = v;
		in->fo.missing_int_set = true;
		return 0;
	}
	if (in->fo.layout != LAYOUT_FILES && in->fo.layout != want)
		return cli_usage("create: --labels, --group-by and --manifest exclude each other");
	if (c == O_LABELS && strcmp(arg, "dirname"))
		return cli_usage("--labels: '%s' is not a labelling; 'dirname' is the one there is",
				 arg);
	if (c == O_GROUP && strcmp(arg, "key"))
		return cli_usage("--group-by: '%s' is not a grouping; 'key' is the one there is",
				 arg);
	in->fo.layout = want;
	return c == O_MANIFEST && pack_inputs_add_manifest(in, arg) < 0 ? 1 : 0;
}

/*
 * --on-error, --include-hidden, --allow-empty: what becomes of what is
 * no good sample. @return 0 or the usage exit status.
 */
static int create_scan(pack_inputs *in, int c, const char *arg)
{
	if (c == O_HIDDEN) {
		in->fo.include_hidden = true;
		return 0;
	}
	if (c == O_EMPTY) {
		in->fo.allow_empty = true;
		return 0;
	}
	if (!strcmp(arg, "fail"))
		in->fo.on_error = ON_ERROR_FAIL;
	else if (!strcmp(arg, "skip"))
		in->fo.on_error = ON_ERROR_SKIP;
	else
		return cli_usage("--on-error: '%s' is not a policy; 'fail' (the default) or 'skip'",
				 arg);
	return 0;
}

/* --max-side N, --jpeg-quality Q. @return 0 or the usage exit status. */
static int create_fit(pack_create_opts *o, int c, const char *arg)
{
	uint64_t v;

	if (c == O_MAX_SIDE) {
		if (cli_parse_u64(arg, &v) < 0 || v < PACK_FIT_SIDE_MIN || v > PACK_FIT_SIDE_MAX)
			return cli_usage("--max-side: '%s' is not a side in pixels (%u..%u)", arg,
					 PACK_FIT_SIDE_MIN, PACK_FIT_SIDE_MAX);
		o->max_side = (uint32_t)v;
		return 0;
	}
	if (cli_parse_u64(arg, &v) < 0 || v < 1 || v > 100)
		return cli_usage("--jpeg-quality: '%s' is not a JPEG quality (1..100)", arg);
	o->jpeg_quality = (int)v;
	return 0;
}

/* The inputs and options together make sense. @return 0 or the usage exit status. */
static int create_check(const pack_inputs *in, pack_create_opts *o)
{
	const pack_fields_opts *fo = &in->fo;
	size_t manifests = 0, records = 0;

	for (size_t i = 0; i < in->n; i++) {
		manifests += in->v[i].kind == INPUT_MANIFEST;
		records += in->v[i].kind == INPUT_RECORDS;
	}
	if (fo->layout == LAYOUT_LABELS && (in->n != 1 || in->v[0].kind != INPUT_DIR))
		return cli_usage("--labels dirname: expected one INPUT, a directory of class folders");
	if (fo->layout == LAYOUT_GROUPS && (in->n != 1 || in->v[0].kind != INPUT_TAR))
		return cli_usage("--group-by key: expected one INPUT, a tar archive");
	if (fo->layout == LAYOUT_MANIFEST && (in->n != 1 || manifests != 1))
		return cli_usage("--manifest: expected one manifest and no other INPUT");
	if (fo->ncolumns && fo->layout != LAYOUT_MANIFEST)
		return cli_usage("--column: only with --manifest");
	if ((fo->allow_missing || fo->missing_int_set) && fo->layout != LAYOUT_GROUPS)
		return cli_usage("--allow-missing, --missing-int: only with --group-by key");
	if (fo->missing_int_set && !fo->allow_missing)
		return cli_usage("--missing-int: only with --allow-missing");
	if (records && fo->layout != LAYOUT_FILES)
		return cli_usage("--records: not with --labels, --group-by or --manifest");
	if (o->jpeg_quality && !o->max_side)
		return cli_usage("--jpeg-quality: only with --max-side N (the size to re-encode "
				 "larger images at)");
	if (o->max_side && records)
		return cli_usage("--max-side: not with --records (records keep their size)");
	if (o->check_images && records)
		return cli_usage("--check-images: not with --records (a record is no image file; "
				 "pack image files from a directory, tar or manifest)");
	if (o->max_side && !o->jpeg_quality)
		o->jpeg_quality = PACK_FIT_QUALITY;
	return 0;
}

/* The options and operands of create, read in order. @return 0 or an exit status (said). */
static int create_options(int argc, char **argv, pack_create_opts *o, pack_inputs *in,
			  pack_remote *rem, const char **out, create_args *a)
{
	static const struct option opts[] = {
		{ "level", required_argument, NULL, O_LEVEL },
		{ "block-size", required_argument, NULL, O_BLOCK },
		{ "frame-size", required_argument, NULL, O_FRAME },
		{ "dict", no_argument, NULL, O_DICT },
		{ "no-dict", no_argument, NULL, O_NODICT },
		{ "threads", required_argument, NULL, O_THREADS },
		{ "shard-size", required_argument, NULL, O_SHARD },
		{ "records", required_argument, NULL, O_RECORDS },
		{ "labels", required_argument, NULL, O_LABELS },
		{ "group-by", required_argument, NULL, O_GROUP },
		{ "manifest", required_argument, NULL, O_MANIFEST },
		{ "column", required_argument, NULL, O_COLUMN },
		{ "no-keys", no_argument, NULL, O_NOKEYS },
		{ "allow-missing", no_argument, NULL, O_MISSING },
		{ "missing-int", required_argument, NULL, O_MISSING_INT },
		{ "max-side", required_argument, NULL, O_MAX_SIDE },
		{ "jpeg-quality", required_argument, NULL, O_JPEG_QUALITY },
		{ "on-error", required_argument, NULL, O_ON_ERROR },
		{ "include-hidden", no_argument, NULL, O_HIDDEN },
		{ "allow-empty", no_argument, NULL, O_EMPTY },
		{ "check-images", no_argument, NULL, O_CHECK_IMAGES },
		{ "tokens", required_argument, NULL, O_TOKENS },
		{ "eos", required_argument, NULL, O_EOS },
		PACK_REMOTE_OPTIONS,
		{ "part-size", required_argument, NULL, O_REMOTE_PART_SIZE },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t v;
	int c, r = 0;

	optind = 1;
	/* "-" first: keep operands in place so inputs stay in command-line order. */
	while (r == 0 && (c = getopt_long(argc, argv, "-", opts, NULL)) != -1) {
		switch (c) {
		case 1:
			if (!*out)
				*out = optarg;
			else
				r = pend(a, optarg, 0);
			break;
		case O_LEVEL:
			if (cli_parse_u64(optarg, &v) < 0 || v < 1 || v > (uint64_t)ZSTD_maxCLevel())
				return cli_usage("--level: '%s' is not a zstd level (1..22)", optarg);
			o->level = (int)v;
			break;
		case O_BLOCK:
		case O_FRAME:
		case O_SHARD:
			a->block_size = a->block_size || c == O_BLOCK;
			r = create_size(o, c, optarg);
			break;
		case O_TOKENS:
		case O_EOS:
			r = create_tokens(in, a, c, optarg);
			break;
		case O_DICT: o->dict = DICT_ON; break;
		case O_NODICT: o->dict = DICT_OFF; break;
		case O_THREADS:
			if (cli_parse_u64(optarg, &v) < 0 || v < 1 || v > 1024)
				return cli_usage("--threads: '%s' is not a thread count (1..1024)", optarg);
			o->threads = (unsigned)v;
			break;
		case O_RECORDS:
			r = create_records(a, *out, optarg, argc, argv);
			break;
		case O_MAX_SIDE:
		case O_JPEG_QUALITY:
			r = create_fit(o, c, optarg);
			break;
		case O_CHECK_IMAGES:
			o->check_images = true;
			break;
		case O_ON_ERROR:
		case O_HIDDEN:
		case O_EMPTY:
			r = create_scan(in, c, optarg);
			break;
		case O_LABELS:
		case O_GROUP:
		case O_MANIFEST:
		case O_COLUMN:
		case O_NOKEYS:
		case O_MISSING:
		case O_MISSING_INT:
			r = create_fields(in, c, optarg);
			break;
		default:
			if ((r = pack_remote_option(rem, c, optarg)) < 0)
				return cli_usage(NULL);
		}
	}
	return r;
}

/* argv into o, in and *out. @return 0, 1 (an input that cannot be used, said) or the usage exit status. */
static int create_parse(int argc, char **argv, pack_create_opts *o, pack_inputs *in,
			pack_remote *rem, const char **out)
{
	create_args a = { 0 };
	int r = create_options(argc, argv, o, in, rem, out, &a);

	if (r == 0 && !*out)
		r = cli_usage("create: missing OUT");
	else if (r == 0 && a.n == 0 && in->n == 0)
		r = cli_usage("create: missing INPUT");
	if (r == 0)
		r = tokens_check(in, o, &a);
	if (r == 0)
		r = add_inputs(in, &a);
	free(a.v);
	if (r)
		return r;
	return create_check(in, o) || pack_remote_check(rem, *out) ? 2 : 0;
}

static int cmd_create(int argc, char **argv)
{
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	pack_create_opts o = { .level = 3, .dict = DICT_AUTO, .frame_size = BP_PACK_FRAME_SIZE,
			       .threads = cores > 0 ? (unsigned)cores : 1 };
	pack_inputs in = { 0 };
	pack_remote rem = { 0 };
	const char *out = NULL;
	int r = create_parse(argc, argv, &o, &in, &rem, &out);

	if (r == 0 && pack_is_remote(out))
		r = pack_remote_create(out, &in, &o, &rem) < 0 ? 1 : 0;
	else if (r == 0)
		r = pack_create(out, &in, &o) < 0 ? 1 : 0;
	pack_inputs_free(&in);
	return r;
}

/* ---- info ------------------------------------------------------------------ */

/* Blocks by codec, the largest dictionary, and the codecs used ("zstd,zstd+dict"). */
typedef struct info_codecs {
	uint64_t blocks[3];
	uint64_t frames;         /* blocks that are frames of framed samples */
	uint64_t dict_bytes;
	char names[64];
} info_codecs;

static void count_codecs(const bp_dataset *ds, info_codecs *ic)
{
	memset(ic, 0, sizeof(*ic));
	for (size_t i = 0; i < bp_dataset_shard_count(ds); i++) {
		const bp_shard *sh = bp_dataset_shard(ds, i);

		if (sh->header.dict_size > ic->dict_bytes)
			ic->dict_bytes = sh->header.dict_size;
		for (uint64_t k = 0; k < sh->footer.block_count; k++) {
			bp_pack_block blk;

			bp_pack_index_block(&sh->index, k, &blk);
			ic->blocks[blk.codec]++;
			ic->frames += blk.frames != 0;
		}
	}
	for (uint32_t k = 0; k < 3; k++) {
		if (!ic->blocks[k])
			continue;
		if (ic->names[0])
			strcat(ic->names, ",");
		strcat(ic->names, bp_pack_codec_name(k));
	}
}

static double raw_ratio(const bp_dataset *ds)
{
	return bp_dataset_stored_bytes(ds)
		? (double)bp_dataset_raw_bytes(ds) / (double)bp_dataset_stored_bytes(ds)
		: 1.0;
}

/* Samples per block. */
static double per_block(const bp_dataset *ds)
{
	return bp_dataset_blocks(ds) ? (double)bp_dataset_samples(ds) / (double)bp_dataset_blocks(ds)
				     : 0.0;
}

/*
 * What global shuffle costs over this pack: a whole block decoded per
 * sample unless batchd's block cache holds the decoded dataset.
 */
static void info_shuffle(const bp_dataset *ds)
{
	char raw[32];

	if (!bp_dataset_samples(ds))
		return;
	if (per_block(ds) < 2.0) {
		printf("shuffle       any: about one sample per block, each decoded once per epoch\n");
		return;
	}
	printf("shuffle       global decodes a block of %.1f samples per sample unless batchd's "
	       "block cache holds the %s decoded ([memory] cache); for global shuffle of more than "
	       "the cache, repack with --block-size 0 (one sample per block, the default), or "
	       "read it with shuffle=block\n", per_block(ds),
	       bp_format_size(bp_dataset_raw_bytes(ds), raw, sizeof(raw)));
}

static void info_json(const bp_dataset *ds, const info_codecs *ic)
{
	printf("{\"samples\": %" PRIu64 ", \"blocks\": %" PRIu64 ", \"shards\": %zu, "
	       "\"raw_bytes\": %" PRIu64 ", \"stored_bytes\": %" PRIu64 ", \"ratio\": %.4f, "
	       "\"codec\": \"%s\", \"codec_blocks\": {\"raw\": %" PRIu64 ", \"zstd\": %" PRIu64
	       ", \"zstd+dict\": %" PRIu64 "}, \"dict_bytes\": %" PRIu64 ", "
	       "\"max_sample\": %" PRIu64 ", \"mean_sample\": %.1f, "
	       "\"max_block\": %" PRIu64 ", \"framed_samples\": %" PRIu64 ", "
	       "\"frame_blocks\": %" PRIu64 ", \"fingerprint\": \"%016" PRIx64 "\", "
	       "\"samples_per_block\": %.2f, ",
	       bp_dataset_samples(ds), bp_dataset_blocks(ds), bp_dataset_shard_count(ds),
	       bp_dataset_raw_bytes(ds), bp_dataset_stored_bytes(ds), raw_ratio(ds), ic->names,
	       ic->blocks[0], ic->blocks[1], ic->blocks[2], ic->dict_bytes,
	       bp_dataset_max_sample(ds),
	       (double)bp_dataset_raw_bytes(ds) / (double)bp_dataset_samples(ds),
	       bp_dataset_max_block(ds), bp_dataset_framed(ds), ic->frames,
	       bp_dataset_fingerprint(ds), per_block(ds));
	pack_info_tokens_json(ds);
	pack_info_fields_json(ds, true);
	printf("}\n");
}

static void info_text(const char *path, const bp_dataset *ds, const info_codecs *ic)
{
	char a[32], b[32];

	printf("dataset       %s\n", path);
	printf("samples       %" PRIu64 "\n", bp_dataset_samples(ds));
	printf("blocks        %" PRIu64 "\n", bp_dataset_blocks(ds));
	printf("shards        %zu\n", bp_dataset_shard_count(ds));
	printf("raw bytes     %" PRIu64 " (%s)\n", bp_dataset_raw_bytes(ds),
	       bp_format_size(bp_dataset_raw_bytes(ds), a, sizeof(a)));
	printf("stored bytes  %" PRIu64 " (%s)\n", bp_dataset_stored_bytes(ds),
	       bp_format_size(bp_dataset_stored_bytes(ds), b, sizeof(b)));
	printf("ratio         %.2f\n", raw_ratio(ds));
	printf("codec         %s (raw %" PRIu64 ", zstd %" PRIu64 ", zstd+dict %" PRIu64
	       " blocks)\n", ic->names, ic->blocks[0], ic->blocks[1], ic->blocks[2]);
	printf("dictionary    %" PRIu64 " bytes\n", ic->dict_bytes);
	printf("max sample    %" PRIu64 " bytes\n", bp_dataset_max_sample(ds));
	printf("mean sample   %.1f bytes\n",
	       (double)bp_dataset_raw_bytes(ds) / (double)bp_dataset_samples(ds));
	printf("max block     %" PRIu64 " bytes\n", bp_dataset_max_block(ds));
	printf("framed        %" PRIu64 " samples in %" PRIu64 " frames\n", bp_dataset_framed(ds),
	       ic->frames);
	printf("fingerprint   %016" PRIx64 "\n", bp_dataset_fingerprint(ds));
	pack_info_tokens_text(ds);
	pack_info_fields_text(ds);
	info_shuffle(ds);
}

/*
 * info's and verify's arguments: PATH, the remote flags, and for info
 * --json. @return 0 or the usage exit status.
 */
static int read_parse(int argc, char **argv, const char **path, pack_remote *rem, bool *json)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		PACK_REMOTE_OPTIONS,
		{ NULL, 0, NULL, 0 },
	};
	int c, r;

	optind = 1;
	while ((c = getopt_long(argc, argv, "-", opts, NULL)) != -1) {
		if (c == 'j' && json)
			*json = true;
		else if (c == 1 && !*path)
			*path = optarg;
		else if (c == 1)
			return cli_usage("%s: unexpected argument '%s'", argv[0], optarg);
		else if (c == 'j' || (r = pack_remote_option(rem, c, optarg)) < 0)
			return cli_usage(NULL);
		else if (r)
			return r;
	}
	if (!*path)
		return cli_usage("%s: missing PATH", argv[0]);
	return pack_remote_check(rem, *path);
}

/* PATH opened, local or remote (whole: every byte fetched). @return 0 or a negative errno, said. */
static int open_any(const char *path, const pack_remote *rem, bool whole, bp_dataset **ret)
{
	return pack_is_remote(path) ? pack_remote_open(path, rem, whole, ret)
				     : pack_open_dataset(path, ret);
}

static int cmd_info(int argc, char **argv)
{
	pack_remote rem = { 0 };
	const char *path = NULL;
	bool json = false;
	info_codecs ic;
	bp_dataset *ds;
	int r = read_parse(argc, argv, &path, &rem, &json);

	if (r)
		return r;
	if (open_any(path, &rem, false, &ds) < 0)
		return 1;
	count_codecs(ds, &ic);
	if (json)
		info_json(ds, &ic);
	else
		info_text(path, ds, &ic);
	bp_dataset_close(ds);
	return 0;
}

/* ---- verify ---------------------------------------------------------------- */

static void verify_progress(void *ctx, uint64_t stored_done, uint64_t raw_done)
{
	progress_update(ctx, stored_done, false);
}

static int cmd_verify(int argc, char **argv)
{
	bp_dataset_fault fault = { 0 };
	char msg[512], raw[32];
	pack_remote rem = { 0 };
	const char *path = NULL;
	bp_dataset *ds;
	progress prog;
	double t0, secs;
	int r = read_parse(argc, argv, &path, &rem, NULL);

	if (r)
		return r;
	t0 = cli_now();
	if (open_any(path, &rem, true, &ds) < 0)
		return 1;
	progress_start(&prog, "verifying", bp_dataset_stored_bytes(ds));
	r = bp_dataset_verify(ds, verify_progress, &prog, &fault);
	progress_end(&prog);
	secs = cli_now() - t0;
	if (r < 0) {
		if (fault.pack.what) {
			bp_dataset_fault_format(&fault, msg, sizeof(msg));
			fprintf(stderr, "batchd-pack: %s: %s\n", path, msg);
		} else {
			fprintf(stderr, "batchd-pack: %s: %s\n", path, strerror(-r));
		}
		bp_dataset_close(ds);
		return 1;
	}
	printf("%s: OK: %" PRIu64 " samples, %" PRIu64 " blocks, %zu shards, %s decoded and "
	       "checked in %.2f s (%.1f MB/s)\n",
	       path, bp_dataset_samples(ds), bp_dataset_blocks(ds), bp_dataset_shard_count(ds),
	       bp_format_size(bp_dataset_raw_bytes(ds), raw, sizeof(raw)), secs,
	       secs > 0 ? (double)bp_dataset_raw_bytes(ds) / secs / 1e6 : 0.0);
	bp_dataset_close(ds);
	return 0;
}

/* The whole usage text, for cli_init. */
static const char *usage(void)
{
	static char text[sizeof(usage_create) + sizeof(usage_tokens) + sizeof(usage_rest)];

	snprintf(text, sizeof(text), "%s%s%s", usage_create, usage_tokens, usage_rest);
	return text;
}

int main(int argc, char **argv)
{
	static const cli_cmd cmds[] = {
		{ "create", cmd_create },
		{ "info", cmd_info },
		{ "verify", cmd_verify },
		{ "ls", pack_cmd_ls },
		{ "cat", pack_cmd_cat },
	};
	int r;

	cli_init("batchd-pack", usage());
	if (argc < 2)
		return cli_usage_full();
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))
		return cli_help();
	if (!strcmp(argv[1], "--version")) {
		printf("batchd-pack %s\n", BATCHD_VERSION);
		return 0;
	}
	r = cli_run(cmds, sizeof(cmds) / sizeof(cmds[0]), argc, argv);
	return r >= 0 ? r : cli_usage("unknown command '%s'", argv[1]);
}
