/* SPDX-License-Identifier: MIT */
/*
 * pack_file.h - datasets on disk: open a .bpk shard or a directory of shards,
 * load and validate their indexes, and read samples.
 *
 * pack.h knows the bytes; this module knows files. It is the one place that
 * turns a path into validated shards, so the tools and the daemon agree on
 * what a dataset is: one .bpk file, or a directory whose entries named *.bpk
 * (names starting with "." are writers' temporaries and are skipped) are
 * the shards, taken in bytewise file-name order; global sample ids run
 * through the shards in that order. A shard entry that is not a regular
 * file (a directory, a FIFO, a symlink) makes the open fail rather than
 * being skipped silently: a dataset is never quietly smaller than it looks.
 *
 * Opening reads every shard's header and footer, then each shard's
 * dictionary and index, with pread(2) and validates them completely (a
 * caller may refuse the memory in between: bp_shard_charge_fn), and in a shard with fields the
 * sections a batch needs (schema, columns, sizes: pack_fields.h), never
 * its keys; after a successful open every
 * sample id below bp_dataset_samples() resolves without further checks,
 * in constant time: opening also builds lookup tables (pack.h,
 * bp_pack_ranges and bp_pack_lookup) that map a global id to its shard and
 * a shard's id to its block without a search, at most 20 bytes a block and
 * 16 a shard (bp_dataset_lookup_bytes).
 * Reading block contents is left to the caller's I/O path (the daemon uses
 * io_uring); bp_sample_reader is the simple synchronous path used by tools
 * and tests.
 *
 * Thread rules: a bp_dataset is immutable after open and may be shared by
 * any number of threads. A bp_sample_reader belongs to one thread at a time.
 */
#ifndef BATCHD_PROTO_PACK_FILE_H
#define BATCHD_PROTO_PACK_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pack.h"

#define BP_DATASET_MAX_SHARDS 65536u

typedef struct bp_dataset bp_dataset;

/*
 * How a shard whose bytes are not all on local disk yet is read: a remote
 * object's cache file (daemon/remote/remote.h), fetched on demand. Reads exactly
 * len bytes at off into buf, as bp_pread_full does. @return 0; -ENODATA
 * past the end; another negative errno (the fetch failed).
 */
typedef int (*bp_shard_read_fn)(void *ctx, void *buf, size_t len, uint64_t off);

/* One shard of an open dataset. Owned by the dataset. */
typedef struct bp_shard {
	char *name;              /* file name (for a directory dataset) or the path */
	int fd;                  /* O_RDONLY|O_CLOEXEC */
	bp_shard_read_fn read;   /* NULL: pread(fd) */
	void *read_ctx;          /* read's, not owned */
	uint64_t file_size;
	uint64_t first_sample;   /* global id of the shard's sample 0 */
	bp_pack_header header;
	bp_pack_footer footer;
	bp_pack_index index;     /* view into the shard's loaded index bytes, with its lookup */
	const uint8_t *dict;     /* NULL when none */
	ZSTD_DDict *ddict;       /* NULL when none */
} bp_shard;

/* Where opening or verifying failed: the fault plus the shard's name. */
typedef struct bp_dataset_fault {
	bp_pack_fault pack;
	char shard[256];         /* "" when no particular shard is at fault */
} bp_dataset_fault;

/*
 * Open the dataset at path, relative to dirfd (AT_FDCWD for the working
 * directory). path itself may be a symlink (callers that must not follow
 * one resolve it first, as the daemon does); shards inside a directory are
 * looked at first (O_PATH|O_NOFOLLOW) and opened only when they are
 * regular files (bp_shard_openat).
 * @return 0; -ENOENT, -EACCES, ... from the file system; -ENODATA for a
 * directory holding no *.bpk; -E2BIG for more than BP_DATASET_MAX_SHARDS
 * shards or over 2^63 samples; -EBADMSG/-ENOTSUP/-E2BIG for a bad shard
 * (fault says which and where); -ENOMEM.
 * On success *ret is the dataset; free it with bp_dataset_close().
 */
int bp_dataset_openat(int dirfd, const char *path, bp_dataset **ret, bp_dataset_fault *fault);

/*
 * As bp_dataset_openat, for a dataset already open as fd (a .bpk file or a
 * directory; the caller keeps fd, the dataset holds its own descriptors).
 * name is used in faults.
 */
int bp_dataset_fdopen(int fd, const char *name, bp_dataset **ret, bp_dataset_fault *fault);

/*
 * What a caller that pays for a dataset's memory (the daemon's budget) is
 * asked before bp_dataset_from_set allocates it: `bytes` more heap bytes
 * the dataset is about to hold, of which `index` are index bytes. It is
 * asked twice over: once, after every shard's header and footer are read
 * and checked and before any dictionary or index is, for all the shards'
 * indexes, dictionaries (the bytes and zstd's digested copy) and lookup
 * tables at most (bp_pack_lookup_bound); then, for each shard with
 * fields, for its sections' bytes before they are read (index 0). What it
 * is told is never less than what the load then allocates for those
 * things; bp_dataset_held_bytes is the exact total after (which also counts
 * the records, names and the small tables over the sections). @return 0 to go on, or
 * a negative errno that stops the load: bp_dataset_from_set returns it,
 * nothing more read, fault left empty.
 */
typedef int (*bp_shard_charge_fn)(void *ctx, uint64_t bytes, uint64_t index);

/*
 * The first half of bp_dataset_fdopen on its own: the shards of the
 * dataset open as fd, each open for reading but nothing read yet, so a
 * caller (the daemon) can look at them (fstat, the footer) before deciding
 * to load them. For a directory: its shard entries in order, each opened
 * with bp_shard_openat; for a file: fd itself (duplicated), named name.
 * @return 0; errors as bp_dataset_fdopen (-ELOOP for a symlink shard,
 * -EINVAL for one that is not a regular file; fault names it). On success
 * *ret is the set; free it with bp_shard_set_close() or hand it to
 * bp_dataset_from_set().
 */
typedef struct bp_shard_set {
	char **names;            /* per shard: its file name, or name for a one-file dataset */
	int *fds;                /* per shard: O_RDONLY|O_CLOEXEC, -1 once handed over */
	size_t count;
	bool dir;                /* a directory dataset */
	bp_shard_read_fn read;   /* NULL, or how every shard is read (bp_shard.read) */
	void **read_ctx;         /* per shard, with read; not owned (freed with the set) */
	bp_shard_charge_fn charge; /* NULL, or asked before a load allocates (see above) */
	void *charge_ctx;        /* charge's, not owned */
} bp_shard_set;

int bp_shard_set_open(int fd, const char *name, bp_shard_set *ret, bp_dataset_fault *fault);

/* Close the set's descriptors and free its names; leaves it empty. NULL is fine. */
void bp_shard_set_close(bp_shard_set *set);

/*
 * The second half: load and validate the shards of set into a dataset.
 * The set's descriptors and names become the dataset's, on failure too
 * (they are closed then); set is left empty either way.
 * @return as bp_dataset_fdopen.
 */
int bp_dataset_from_set(bp_shard_set *set, bp_dataset **ret, bp_dataset_fault *fault);

/*
 * Open entry name of directory dirfd for reading only if it is a regular
 * file: it is looked at through O_PATH|O_NOFOLLOW first and that same
 * inode reopened (through /proc/self/fd), so a FIFO, a device, a
 * directory or a symlink named like a shard is never opened for real.
 * @return 0 with *ret_fd (O_RDONLY|O_CLOEXEC); -ELOOP for a symlink;
 * -EINVAL for anything else that is not a regular file; -errno.
 */
int bp_shard_openat(int dirfd, const char *name, int *ret_fd);

/* Close a dataset; NULL is fine. */
void bp_dataset_close(bp_dataset *ds);

uint64_t bp_dataset_samples(const bp_dataset *ds);
uint64_t bp_dataset_blocks(const bp_dataset *ds);
uint64_t bp_dataset_raw_bytes(const bp_dataset *ds);
uint64_t bp_dataset_stored_bytes(const bp_dataset *ds); /* sum of block stored sizes */
uint64_t bp_dataset_max_sample(const bp_dataset *ds);
uint64_t bp_dataset_max_block(const bp_dataset *ds);   /* largest raw block */
uint64_t bp_dataset_framed(const bp_dataset *ds);      /* samples stored as several frames */
/*
 * The most blocks one sample spans (1 without framed samples): a batch of
 * n samples takes at most n times as many blocks and pieces.
 */
uint32_t bp_dataset_max_frames(const bp_dataset *ds);
uint64_t bp_dataset_fingerprint(const bp_dataset *ds);
size_t bp_dataset_shard_count(const bp_dataset *ds);
/* Heap bytes of the lookup tables built at open, beside the index and dictionary bytes. */
size_t bp_dataset_lookup_bytes(const bp_dataset *ds);
/*
 * Every heap byte the open dataset holds: the dataset and its shards'
 * records and names, each shard's index, dictionary and zstd's digested
 * dictionary, the lookup tables, the field sections and their tables, the
 * schema. What keeping it in memory costs (the daemon charges it to its
 * budget); malloc's own overhead aside.
 */
uint64_t bp_dataset_held_bytes(const bp_dataset *ds);
const bp_shard *bp_dataset_shard(const bp_dataset *ds, size_t i);

/*
 * Find global sample id: its shard and its place in that shard.
 * @return 0, or -ERANGE when id >= bp_dataset_samples(). O(1): no search over
 * shards or blocks (ranges of uneven sizes cost a search over the few that
 * start near id; see bp_pack_ranges).
 */
int bp_dataset_locate(const bp_dataset *ds, uint64_t id, size_t *ret_shard,
		      bp_pack_sample *ret_sample);

/*
 * A synchronous sample reader: pread + decode, caching the last block read
 * so that neighbouring samples of one block decode once. A framed sample
 * is read frame by frame into one buffer.
 */
typedef struct bp_sample_reader bp_sample_reader;

int bp_sample_reader_new(const bp_dataset *ds, bp_sample_reader **ret);
void bp_sample_reader_free(bp_sample_reader *r);

/*
 * Read global sample id. On success *ret_data points at its bytes, valid
 * until the next call on r, and *ret_size is its size.
 * @return 0, -ERANGE (no such id), -EIO/-errno from pread, -EBADMSG for a
 * corrupt block (fault says where), -ENOMEM.
 */
int bp_sample_reader_get(bp_sample_reader *r, uint64_t id, const uint8_t **ret_data,
			 uint64_t *ret_size, bp_dataset_fault *fault);

/*
 * Check every block of every shard: read the stored bytes, check both hashes,
 * decompress, and in a token pack find its largest id (which must be the
 * TOKENS section's); then every section of a shard with fields, read
 * again, and every key block and key-hash page (bp_pack_keys_verify).
 * progress (may be NULL) is called after each shard with the
 * stored bytes checked so far. @return 0 when sound; the first fault's
 * negative errno otherwise, with fault naming shard, block and offset.
 */
int bp_dataset_verify(const bp_dataset *ds,
		      void (*progress)(void *ctx, uint64_t stored_done, uint64_t raw_done),
		      void *ctx, bp_dataset_fault *fault);

/* Format a fault as "shard NAME: block B at byte OFF: WHAT" into buf. */
void bp_dataset_fault_format(const bp_dataset_fault *fault, char *buf, size_t len);

/*
 * Whole reads and writes, shared by the pack reader, the pack writer and
 * the tools. Any thread; they keep no state.
 */

/*
 * Read exactly len bytes at off of shard sh: through sh->read when it has
 * one, else bp_pread_full on its descriptor. @return as bp_pread_full.
 * Any thread, as the shard's reader allows (the daemon's is thread-safe).
 */
int bp_shard_pread(const bp_shard *sh, void *buf, size_t len, uint64_t off);

/*
 * Read exactly len bytes at file offset off with pread(2), retrying after
 * EINTR and short reads. @return 0; -ENODATA when the file ends first;
 * another -errno from pread. buf may be partly written on failure.
 */
int bp_pread_full(int fd, void *buf, size_t len, uint64_t off);

/*
 * Write all len bytes at fd's file position with write(2), retrying after
 * EINTR and short writes. @return 0; -EIO when write(2) returns 0 (no
 * progress); another -errno from write. Part may be written on failure.
 */
int bp_write_full(int fd, const void *buf, size_t len);

/* As bp_write_full, at file offset off with pwrite(2); the file position stays. */
int bp_pwrite_full(int fd, const void *buf, size_t len, uint64_t off);

/*
 * Make *buf (capacity *cap) hold at least need bytes; when it must grow it
 * is realloc'ed to exactly need (1 for 0). @return 0, or -ENOMEM with *buf
 * and *cap unchanged. The caller frees *buf.
 */
int bp_buf_reserve(uint8_t **buf, size_t *cap, size_t need);

#endif
