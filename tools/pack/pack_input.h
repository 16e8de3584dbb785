/* SPDX-License-Identifier: MIT */
/*
 * pack_input.h - the samples batchd-pack packs: files below a directory,
 * members of a tar archive, fixed-size records of a file, the rows of a
 * manifest, the documents of token files (pack_tokens.h); and, for each
 * sample, its key and the values of its fields.
 *
 * Packing walks the inputs more than once (a scan for sizes and limits, a
 * pass over a few samples to train a dictionary, the packing pass), always
 * in the same order, so each input is described once (pack_inputs_scan) and
 * then iterated as often as needed. Iteration is sequential because tar
 * members can only be read in archive order; skipping a sample is cheap.
 *
 * The scan also settles the schema (docs/packs.md): one bytes
 * field "data" for plain files and members, "data" and an int64 "label"
 * for class folders, one field per extension for WebDataset-style tars,
 * "data" and a field per column for manifests. Every value but the bytes
 * themselves is read at the scan and kept with its entry, so the packing
 * pass can hand the writer any sample's fields when its block is written.
 *
 * Thread rules: single-threaded, but for pack_inputs_name (any thread once
 * the scan is done).
 */
#ifndef BATCHD_TOOLS_PACK_INPUT_H
#define BATCHD_TOOLS_PACK_INPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pack_fields.h"
#include "pack_writer.h"

enum pack_input_kind { INPUT_DIR, INPUT_TAR, INPUT_RECORDS, INPUT_MANIFEST, INPUT_TOKENS };

/* How samples get their fields (create's --labels, --group-by, --manifest). */
enum pack_layout {
	LAYOUT_FILES,            /* one bytes field "data" */
	LAYOUT_LABELS,           /* "data" and "label": the index of the first-level directory */
	LAYOUT_GROUPS,           /* tar members sharing a key form a sample, a field per extension */
	LAYOUT_MANIFEST,         /* a manifest's rows: "data" from the path column, the other columns */
};

typedef struct pack_entry {
	char *name;              /* DIR, MANIFEST: path below the root; TAR: member path;
				  * grouped TAR: the key; RECORDS: NULL */
	char *key;               /* MANIFEST: the path as the manifest writes it; else NULL (the key is name) */
	uint64_t size;           /* raw bytes: the sample's bytes fields end to end */
	bp_field_value *vals;    /* a value per schema field; NULL for a schema of "data" alone */
	uint32_t members;        /* grouped TAR: the sample's members in the archive */
	uint32_t line;           /* MANIFEST: the line its row starts on */
} pack_entry;

typedef struct pack_input {
	enum pack_input_kind kind;
	char *path;
	uint64_t record_size;    /* INPUT_RECORDS */
	/* Filled by the scan. */
	uint64_t count;          /* samples */
	pack_entry *entries;     /* every kind but INPUT_RECORDS, in sample order */
	char *root;              /* INPUT_MANIFEST: the directory its paths are relative to */
	int root_fd;             /* INPUT_DIR, INPUT_MANIFEST: that directory, opened at the scan;
				  * every file is opened beneath it, following no symlink
				  * (pack_beneath.h); -1 before */
	struct pack_tokens_src *tok; /* INPUT_TOKENS: its file and documents (pack_tokens.h) */
} pack_input;

/* --column NAME:TYPE for a manifest. */
typedef struct pack_column {
	char *name;
	uint32_t type;           /* enum bp_field_type, not bytes */
} pack_column;

/* create's --on-error: what a file below a directory input that cannot be read does. */
enum pack_on_error {
	ON_ERROR_FAIL,           /* fails the pack, naming it (the default) */
	ON_ERROR_SKIP,           /* is left out, named and counted */
};

/* What create's options ask of the scan; zero is plain files with keys. */
typedef struct pack_fields_opts {
	enum pack_layout layout;
	enum pack_on_error on_error; /* --on-error (the packing pass's too: pack_create.h) */
	bool include_hidden;     /* --include-hidden: walk names starting with '.' too */
	bool allow_empty;        /* --allow-empty: no warning for a sample of 0 bytes */
	bool no_keys;            /* --no-keys */
	bool allow_missing;      /* --allow-missing: a group's missing bytes field is empty */
	bool missing_int_set;    /* --missing-int VALUE: a group's missing int64 field */
	int64_t missing_int;
	pack_column *columns;    /* --column, in command-line order */
	size_t ncolumns;
} pack_fields_opts;

/*
 * What the scan left out of the samples, or warned of, by reason: the
 * summary line's counts (each left out is also named on stderr as found).
 */
typedef struct pack_tally {
	uint64_t special;        /* FIFOs, sockets, devices below a directory: never opened */
	uint64_t symlinks;       /* below a directory: not followed */
	uint64_t unreadable;     /* --on-error=skip: files and directories that could not be opened */
	uint64_t hidden;         /* names starting with '.' below a directory, not walked */
	uint64_t empty;          /* samples of 0 bytes, packed (warned of but with --allow-empty) */
	uint64_t empty_docs;     /* --tokens --allow-empty: empty documents, left out */
	uint64_t eos_added;      /* --tokens --eos: documents the id was appended to */
	uint64_t tokens;         /* --tokens: token ids in the documents packed */
} pack_tally;

/* create's --tokens and --eos: a token pack (PACK.md §Token packs). */
typedef struct pack_tokens_opts {
	uint32_t width;          /* 2 (uint16) or 4 (uint32); 0: no token pack */
	uint64_t eos;            /* the end-of-document id, or BP_TOKENS_NO_EOS */
} pack_tokens_opts;

typedef struct pack_inputs {
	pack_input *v;
	size_t n;
	pack_fields_opts fo;     /* set before the scan */
	pack_tokens_opts tok;    /* set before the inputs are added */
	/* Filled by the scan. */
	uint64_t samples, raw_bytes, max_sample;
	pack_tally tally;
	bool fields;             /* the pack gets a schema (footer v3); else the bytes of old */
	bool keys;               /* ... and keys */
	bp_schema schema;        /* when fields */
} pack_inputs;

/* Add an input: a directory or tar file (kind chosen by stat), or records. */
int pack_inputs_add(pack_inputs *in, const char *path, uint64_t record_size, bool records);
/* Add a manifest (.csv or .jsonl; message printed on error). */
int pack_inputs_add_manifest(pack_inputs *in, const char *path);
/* Add --column SPEC ("NAME:TYPE"). @return 0, -EINVAL (message printed), -ENOMEM. */
int pack_inputs_add_column(pack_inputs *in, const char *spec);

/*
 * Scan every input: list files, read tar headers (and the values of
 * integer members), parse manifests, size record files; settle the schema
 * and check keys for duplicates. Checks every sample against the pack
 * limits. Below a directory, names starting with '.' are ignored (but with
 * fo.include_hidden), and what is not a sample (a symlink, a FIFO, a
 * socket, a device) is left out, each named on stderr; every regular file
 * is opened once, so that one that cannot be read fails the scan naming
 * it, or with fo.on_error ON_ERROR_SKIP is left out, named. A sample of 0
 * bytes is warned of (but with fo.allow_empty). All of it is counted in
 * in->tally. On error prints a message naming the input (and the line,
 * key or member) and returns a negative errno.
 */
int pack_inputs_scan(pack_inputs *in);

void pack_inputs_free(pack_inputs *in);

/* Size of global sample i (0 <= i < in->samples), for choosing training samples. */
uint64_t pack_inputs_size(const pack_inputs *in, uint64_t i);

/*
 * The writer's view of global sample i when in->fields: a value per schema
 * field into vals, and its key (*ret_key, *ret_len; NULL and 0 without keys).
 * Pointers stay valid until pack_inputs_free.
 */
void pack_inputs_fields(const pack_inputs *in, uint64_t i, bp_field_value *vals,
			const char **ret_key, size_t *ret_len);

/*
 * A printable name for global sample i, as pack_iter_name gives it (a tar
 * member by its plain path) into buf. Unlike the rest of this header, any
 * thread may call it once the scan is done: it only reads what the scan
 * left, which nothing changes after it.
 */
void pack_inputs_name(const pack_inputs *in, uint64_t i, char *buf, size_t len);

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
