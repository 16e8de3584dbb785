/* SPDX-License-Identifier: MIT */
/*
 * pack_file.c - open datasets (a .bpk or a directory of them) from disk
 * (samples are read and datasets verified in pack_read.c).
 *
 * Opening does all the distrust up front: each shard's header, dictionary,
 * footer and index are read with pread(2) and validated by pack.c before
 * the dataset is handed out, so lookups afterwards cannot go out of bounds.
 * Only block contents are checked lazily, when a block is decoded.
 */
#define ZSTD_STATIC_LINKING_ONLY /* ZSTD_estimateDDictSize */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>
#include <zstd.h>

#include "pack_fields.h"
#include "pack_file.h"
#include "pack_file_priv.h"

struct bp_dataset {
	bp_shard *shards;
	size_t shard_count;
	uint64_t samples, blocks, raw_bytes, stored_bytes, max_sample, max_block, framed;
	uint32_t max_frames;
	uint64_t fingerprint;
	bp_pack_ranges *shard_map; /* global sample id -> shard, without a search */
	size_t lookup_bytes;       /* the shard map and every shard's lookup table */
	bp_schema schema;          /* the shards' schema; fixed sizes where all shards agree */
	bool keys;                 /* every shard has keys */
	size_t field_bytes;        /* the shards' loaded sections and their tables */
	bool has_tokens;           /* every shard is a token pack: tokens summed over them */
	bp_tokens tokens;
};

/* Private per-shard storage lives after the public part. */
typedef struct shard_priv {
	bp_shard pub;
	uint8_t *index_bytes;
	uint8_t *dict_bytes;
	bp_pack_lookup *lookup;  /* pub.index.lookup: sample -> block without a search */
	uint8_t *section_bytes;  /* the sections loaded at open (bp_pack_fields_extent) */
	bp_pack_fields fields;   /* pointing into section_bytes */
	/* As read, for the index's checksum (shard_meta, then shard_body). */
	uint8_t header[BP_PACK_HEADER_SIZE], footer[BP_PACK_FOOTER_SIZE];
} shard_priv;

int bp__fault_set(bp_dataset_fault *fault, const char *shard, int err, const char *what,
		  uint64_t offset, int64_t block)
{
	if (fault) {
		fault->pack.what = what;
		fault->pack.offset = offset;
		fault->pack.block = block;
		snprintf(fault->shard, sizeof(fault->shard), "%s", shard ? shard : "");
	}
	return err;
}

int bp__read_meta(const bp_shard *sh, void *buf, size_t len, uint64_t off)
{
	int r = bp_shard_pread(sh, buf, len, off);

	return r == -ENODATA ? -EBADMSG : r;
}

static void shard_release(shard_priv *s)
{
	if (s->pub.fd >= 0)
		close(s->pub.fd);
	ZSTD_freeDDict(s->pub.ddict);
	bp_pack_lookup_free(s->lookup);
	free(s->index_bytes);
	free(s->dict_bytes);
	bp_pack_fields_clear(&s->fields);
	free(s->section_bytes);
	free(s->pub.name);
}

/*
 * Read the sections a batch needs (schema, columns, sizes) of a validated
 * shard and check them; *ret_bytes holds what *ret points into.
 */
int bp__fields_load(const bp_shard *sh, uint8_t **ret_bytes, bp_pack_fields *ret,
		    bp_dataset_fault *fault)
{
	bp_pack_fault pf = { 0 };
	uint64_t off, size;
	uint8_t *bytes = NULL;
	int r;

	bp_pack_fields_extent(&sh->index, &off, &size);
	if (size) {
		bytes = malloc(size);
		if (!bytes)
			return -ENOMEM;
		r = bp__read_meta(sh, bytes, size, off);
		if (r < 0) {
			free(bytes);
			return bp__fault_set(fault, sh->name, r, "cannot read sections", off, -1);
		}
	}
	r = bp_pack_fields_parse(&sh->index, bytes, off, size, ret, &pf);
	if (r < 0) {
		free(bytes);
		return pf.what ? bp__fault_set(fault, sh->name, r, pf.what, pf.offset, pf.block) : r;
	}
	*ret_bytes = bytes;
	return 0;
}

/*
 * Read and check one shard's header and footer: what it will hold is
 * known from here on (shard_bound). On failure the caller releases s.
 */
static int shard_meta(shard_priv *s, bp_dataset_fault *fault)
{
	uint8_t *header = s->header, *footer = s->footer;
	bp_shard *sh = &s->pub;
	bp_pack_fault pf = { 0 };
	struct stat st;
	int r;

	if (fstat(sh->fd, &st) < 0)
		return bp__fault_set(fault, sh->name, -errno, "cannot stat shard", 0, -1);
	if (!S_ISREG(st.st_mode))
		return bp__fault_set(fault, sh->name, -EINVAL, "shard is not a regular file", 0, -1);
	sh->file_size = (uint64_t)st.st_size;

	if (sh->file_size < BP_PACK_HEADER_SIZE + BP_PACK_FOOTER_SIZE)
		return bp__fault_set(fault, sh->name, -EBADMSG, "file too short to be a pack",
				 sh->file_size, -1);
	r = bp__read_meta(sh, header, BP_PACK_HEADER_SIZE, 0);
	if (r < 0)
		return bp__fault_set(fault, sh->name, r, "cannot read header", 0, -1);
	r = bp_pack_header_decode(header, BP_PACK_HEADER_SIZE, &sh->header, &pf);
	if (r < 0)
		goto bad;
	r = bp__read_meta(sh, footer, BP_PACK_FOOTER_SIZE, sh->file_size - BP_PACK_FOOTER_SIZE);
	if (r < 0)
		return bp__fault_set(fault, sh->name, r, "cannot read footer",
				 sh->file_size - BP_PACK_FOOTER_SIZE, -1);
	r = bp_pack_footer_decode(footer, sh->file_size, &sh->header, &sh->footer, &pf);
	if (r < 0)
		goto bad;
	return 0;
bad:
	return bp__fault_set(fault, sh->name, r, pf.what, pf.offset, pf.block);
}

/*
 * The most heap bytes shard_body allocates for sh's dictionary, index and
 * lookup table, from its checked header and footer.
 */
static uint64_t shard_bound(const bp_shard *sh)
{
	uint64_t n = sh->footer.index_size + sh->header.dict_size;

	if (sh->header.dict_size)
		n += ZSTD_estimateDDictSize((size_t)sh->header.dict_size, ZSTD_dlm_byCopy);
	return n + bp_pack_lookup_bound(sh->footer.block_count, sh->footer.sample_count,
					sh->footer.version != BP_PACK_VERSION);
}

/* The dictionary of a shard whose header names one, checked and digested for zstd. */
static int dict_load(shard_priv *s, bp_dataset_fault *fault)
{
	bp_shard *sh = &s->pub;
	int r;

	s->dict_bytes = malloc(sh->header.dict_size);
	if (!s->dict_bytes)
		return -ENOMEM;
	r = bp__read_meta(sh, s->dict_bytes, sh->header.dict_size, sh->header.dict_offset);
	if (r < 0)
		return bp__fault_set(fault, sh->name, r, "cannot read dictionary",
				 sh->header.dict_offset, -1);
	if (XXH3_64bits(s->dict_bytes, sh->header.dict_size) != sh->header.dict_hash)
		return bp__fault_set(fault, sh->name, -EBADMSG, "dictionary checksum mismatch",
				 sh->header.dict_offset, -1);
	sh->dict = s->dict_bytes;
	sh->ddict = ZSTD_createDDict(s->dict_bytes, sh->header.dict_size);
	if (!sh->ddict)
		return bp__fault_set(fault, sh->name, -EBADMSG, "dictionary is not usable by zstd",
				 sh->header.dict_offset, -1);
	return 0;
}

/*
 * Read and validate the rest of a shard shard_meta has read: dictionary,
 * index, lookup table, and the sections (once set's charge, when there is
 * one, agreed to their bytes). On failure the caller releases s.
 */
static int shard_body(shard_priv *s, const bp_shard_set *set, bp_dataset_fault *fault)
{
	bp_shard *sh = &s->pub;
	bp_pack_fault pf = { 0 };
	uint64_t off, size;
	int r;

	if (sh->header.dict_size && (r = dict_load(s, fault)) < 0)
		return r;
	/* The footer check bounded index_size by BP_PACK_MAX_INDEX. */
	s->index_bytes = malloc(sh->footer.index_size);
	if (!s->index_bytes)
		return -ENOMEM;
	r = bp__read_meta(sh, s->index_bytes, sh->footer.index_size, sh->footer.index_offset);
	if (r < 0)
		return bp__fault_set(fault, sh->name, r, "cannot read index", sh->footer.index_offset, -1);
	r = bp_pack_index_parse(&sh->header, &sh->footer, s->header, s->footer, s->index_bytes,
				&sh->index, &pf);
	if (r < 0)
		return bp__fault_set(fault, sh->name, r, pf.what, pf.offset, pf.block);
	r = bp_pack_lookup_new(&sh->index, &s->lookup);
	if (r < 0)
		return r;
	sh->index.lookup = s->lookup;
	bp_pack_fields_extent(&sh->index, &off, &size);
	if (size && set->charge && (r = set->charge(set->charge_ctx, size, 0)) < 0)
		return r;
	return bp__fields_load(sh, &s->section_bytes, &s->fields, fault);
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool is_shard_name(const char *name)
{
	size_t n = strlen(name);

	/* Hidden names are writers' temporaries; never part of a dataset. */
	return name[0] != '.' && n > 4 && strcmp(name + n - 4, ".bpk") == 0;
}

/* List the *.bpk names in directory fd, sorted bytewise. */
static int list_shards(int fd, char ***ret_names, size_t *ret_count)
{
	char **names = NULL, **grown;
	size_t n = 0, cap = 0;
	struct dirent *de;
	DIR *d;
	int dfd, r = 0;

	dfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (dfd < 0)
		return -errno;
	d = fdopendir(dfd);
	if (!d) {
		r = -errno;
		close(dfd);
		return r;
	}
	while ((errno = 0, de = readdir(d))) {
		if (!is_shard_name(de->d_name))
			continue;
		if (n == BP_DATASET_MAX_SHARDS) {
			r = -E2BIG;
			goto out;
		}
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			grown = realloc(names, cap * sizeof(*names));
			if (!grown) {
				r = -ENOMEM;
				goto out;
			}
			names = grown;
		}
		names[n] = strdup(de->d_name);
		if (!names[n]) {
			r = -ENOMEM;
			goto out;
		}
		n++;
	}
	if (errno)
		r = -errno;
out:
	closedir(d);
	if (r < 0) {
		while (n)
			free(names[--n]);
		free(names);
		return r;
	}
	if (n)
		qsort(names, n, sizeof(*names), name_cmp);
	*ret_names = names;
	*ret_count = n;
	return 0;
}

static uint64_t shard_first(const void *ctx, uint64_t i)
{
	return bp_dataset_shard(ctx, (size_t)i)->first_sample;
}

/* The shard map and every shard's table, built once the shards' first ids are known. */
static int build_lookups(bp_dataset *ds)
{
	int r = bp_pack_ranges_new(ds->shard_count, ds->samples, shard_first, ds, &ds->shard_map);

	/* Shards are never empty (the footer check), so only -ENOMEM is left. */
	if (r < 0)
		return r;
	ds->lookup_bytes = bp_pack_ranges_bytes(ds->shard_map);
	for (size_t i = 0; i < ds->shard_count; i++)
		ds->lookup_bytes += bp_pack_lookup_bytes(((shard_priv *)ds->shards)[i].lookup);
	return 0;
}

/* Whether two schemas have the same fields (names, types, classes), whatever their fixed sizes. */
static bool same_fields(const bp_schema *a, const bp_schema *b)
{
	if (a->count != b->count)
		return false;
	for (uint32_t i = 0; i < a->count; i++) {
		const bp_field *x = &a->fields[i], *y = &b->fields[i];

		if (strcmp(x->name, y->name) != 0 || x->type != y->type ||
		    x->class_count != y->class_count)
			return false;
		for (uint32_t c = 0; c < x->class_count; c++)
			if (strcmp(x->classes[c], y->classes[c]) != 0)
				return false;
	}
	return true;
}

/*
 * Shard i's tokens into the dataset's: token packs all or none, of one
 * width and one end-of-document id. @return 0 or -EBADMSG with fault set.
 */
static int merge_tokens(bp_dataset *ds, size_t i, bp_dataset_fault *fault)
{
	const shard_priv *sh = &((const shard_priv *)ds->shards)[i];
	const bp_tokens *t = &sh->fields.tokens;
	const char *what = NULL;

	if (i == 0) {
		ds->has_tokens = sh->fields.has_tokens;
		ds->tokens = (bp_tokens){ .width = t->width, .eos = t->eos };
	}
	if (sh->fields.has_tokens != ds->has_tokens)
		what = "shards mix token packs and other packs";
	else if (ds->has_tokens && t->width != ds->tokens.width)
		what = "shards' token widths differ";
	else if (ds->has_tokens && t->eos != ds->tokens.eos)
		what = "shards' end-of-document ids differ";
	if (what)
		return bp__fault_set(fault, sh->pub.name, -EBADMSG, what, sh->pub.index.data_end, -1);
	/* Each shard's counts are below 2^64 / width and the shards few: no wrap. */
	ds->tokens.tokens += t->tokens;
	ds->tokens.documents += t->documents;
	if (t->max_id > ds->tokens.max_id)
		ds->tokens.max_id = t->max_id;
	return 0;
}

/*
 * The dataset's schema: every shard's must have the same fields; a bytes
 * field keeps its fixed size only where every shard has that one. Token
 * packs' tokens with it.
 */
static int merge_schemas(bp_dataset *ds, bp_dataset_fault *fault)
{
	const shard_priv *shards = (const shard_priv *)ds->shards;
	int r = bp_schema_copy(&shards[0].fields.schema, &ds->schema);

	if (r < 0)
		return r;
	ds->keys = true;
	for (size_t i = 0; i < ds->shard_count; i++) {
		const bp_pack_fields *pf = &shards[i].fields;
		uint64_t off, size;

		if (!same_fields(&ds->schema, &pf->schema))
			return bp__fault_set(fault, shards[i].pub.name, -EBADMSG,
					 "shards' schemas differ", shards[i].pub.index.data_end, -1);
		for (uint32_t f = 0; f < ds->schema.count; f++)
			if (ds->schema.fields[f].fixed_size != pf->schema.fields[f].fixed_size)
				ds->schema.fields[f].fixed_size = 0;
		ds->keys = ds->keys && pf->keys;
		if ((r = merge_tokens(ds, i, fault)) < 0)
			return r;
		bp_pack_fields_extent(&shards[i].pub.index, &off, &size);
		ds->field_bytes += size + bp_pack_fields_bytes(pf);
	}
	return 0;
}

static int dataset_finish(bp_dataset *ds, bp_dataset_fault *fault)
{
	uint64_t *fps = malloc(ds->shard_count * sizeof(*fps));
	int r;

	if (!fps)
		return -ENOMEM;
	for (size_t i = 0; i < ds->shard_count; i++) {
		bp_shard *sh = &((shard_priv *)ds->shards)[i].pub;

		/* Global ids must stay below 2^63 so they fit every signed consumer. */
		if (sh->footer.sample_count > (UINT64_C(1) << 63) - ds->samples) {
			free(fps);
			return bp__fault_set(fault, sh->name, -E2BIG, "dataset over 2^63 samples", 0, -1);
		}
		sh->first_sample = ds->samples;
		ds->samples += sh->footer.sample_count;
		ds->blocks += sh->footer.block_count;
		ds->raw_bytes += sh->footer.raw_bytes;
		ds->stored_bytes += sh->index.data_end - sh->header.data_offset;
		ds->framed += sh->index.framed;
		if (sh->index.max_frames > ds->max_frames)
			ds->max_frames = sh->index.max_frames;
		if (sh->footer.max_sample > ds->max_sample)
			ds->max_sample = sh->footer.max_sample;
		for (uint64_t b = 0; b < sh->footer.block_count; b++) {
			bp_pack_block blk;

			bp_pack_index_block(&sh->index, b, &blk);
			if (blk.raw_size > ds->max_block)
				ds->max_block = blk.raw_size;
		}
		fps[i] = sh->footer.fingerprint;
	}
	ds->fingerprint = bp_pack_dataset_fingerprint(fps, ds->shard_count);
	free(fps);
	r = merge_schemas(ds, fault);
	return r < 0 ? r : build_lookups(ds);
}

int bp_dataset_openat(int dirfd, const char *path, bp_dataset **ret, bp_dataset_fault *fault)
{
	int fd, r;

	if (!path || !ret)
		return -EINVAL;
	/* O_NONBLOCK: a FIFO must be refused, not waited on (no effect on regular files). */
	fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return bp__fault_set(fault, path, -errno, "cannot open dataset", 0, -1);
	r = bp_dataset_fdopen(fd, path, ret, fault);
	close(fd);
	return r;
}

int bp_shard_openat(int dirfd, const char *name, int *ret_fd)
{
	struct stat st, now;
	char proc[64];
	int pathfd, fd, r = 0;

	pathfd = openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (pathfd < 0)
		return -errno;
	if (fstat(pathfd, &st) < 0) {
		r = -errno;
		goto out;
	}
	if (S_ISLNK(st.st_mode) || !S_ISREG(st.st_mode)) {
		r = S_ISLNK(st.st_mode) ? -ELOOP : -EINVAL;
		goto out;
	}
	/* The same inode, reopened for reading: nothing can be swapped in between. */
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", pathfd);
	fd = open(proc, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0 && errno == ENOENT) {
		/* No /proc: by name again, O_NONBLOCK in case a FIFO took its place. */
		fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
		if (fd >= 0 && (fstat(fd, &now) < 0 || now.st_dev != st.st_dev ||
				now.st_ino != st.st_ino)) {
			close(fd);
			fd = -1;
			errno = EAGAIN;
		}
	}
	if (fd < 0) {
		r = -errno;
		goto out;
	}
	*ret_fd = fd;
out:
	close(pathfd);
	return r;
}

void bp_shard_set_close(bp_shard_set *set)
{
	if (!set)
		return;
	for (size_t i = 0; i < set->count; i++) {
		if (set->fds && set->fds[i] >= 0)
			close(set->fds[i]);
		if (set->names)
			free(set->names[i]);
	}
	free(set->fds);
	free(set->names);
	free(set->read_ctx);
	*set = (bp_shard_set){ 0 };
}

/* Open every listed entry of directory fd; a fault names the first that fails. */
static int open_entries(int fd, bp_shard_set *set, bp_dataset_fault *fault)
{
	for (size_t i = 0; i < set->count; i++) {
		int r = bp_shard_openat(fd, set->names[i], &set->fds[i]);

		if (r == -EINVAL)
			return bp__fault_set(fault, set->names[i], r, "shard is not a regular file", 0, -1);
		if (r == -ELOOP)
			return bp__fault_set(fault, set->names[i], r, "shard is a symbolic link", 0, -1);
		if (r < 0)
			return bp__fault_set(fault, set->names[i], r, "cannot open shard", 0, -1);
	}
	return 0;
}

int bp_shard_set_open(int fd, const char *name, bp_shard_set *ret, bp_dataset_fault *fault)
{
	bp_shard_set set = { 0 };
	struct stat st;
	int r;

	if (fd < 0 || !name || !ret)
		return -EINVAL;
	if (fstat(fd, &st) < 0)
		return bp__fault_set(fault, name, -errno, "cannot stat dataset", 0, -1);
	if (S_ISDIR(st.st_mode)) {
		set.dir = true;
		r = list_shards(fd, &set.names, &set.count);
		if (r < 0)
			return bp__fault_set(fault, name, r, "cannot list dataset directory", 0, -1);
		if (set.count == 0) {
			free(set.names);
			return bp__fault_set(fault, name, -ENODATA, "directory holds no .bpk shards", 0, -1);
		}
	} else if (!S_ISREG(st.st_mode)) {
		return bp__fault_set(fault, name, -EINVAL, "dataset is neither a file nor a directory",
				 0, -1);
	} else {
		set.count = 1;
		set.names = calloc(1, sizeof(*set.names));
		if (!set.names || !(set.names[0] = strdup(name))) {
			free(set.names);
			return -ENOMEM;
		}
	}
	set.fds = malloc(set.count * sizeof(*set.fds));
	if (!set.fds) {
		r = -ENOMEM;
		goto fail;
	}
	for (size_t i = 0; i < set.count; i++)
		set.fds[i] = -1;
	if (set.dir) {
		r = open_entries(fd, &set, fault);
	} else {
		set.fds[0] = fcntl(fd, F_DUPFD_CLOEXEC, 0);
		r = set.fds[0] < 0 ? -errno : 0;
	}
	if (r < 0)
		goto fail;
	*ret = set;
	return 0;
fail:
	bp_shard_set_close(&set);
	return r;
}

/*
 * Ask how's charge for every shard's index, dictionary and lookup table,
 * and the shard map, once their headers and footers are read. @return 0,
 * or the charge's refusal.
 */
static int charge_indexes(const bp_dataset *ds, const bp_shard_set *how)
{
	uint64_t bytes = 0, index = 0, samples = 0;

	if (!how->charge)
		return 0;
	for (size_t i = 0; i < ds->shard_count; i++) {
		const bp_shard *sh = &((const shard_priv *)ds->shards)[i].pub;

		bytes += shard_bound(sh);
		index += sh->footer.index_size;
		samples += sh->footer.sample_count;
	}
	/* The shard map is a table of ranges: a lookup's bound covers it. */
	bytes += bp_pack_lookup_bound(ds->shard_count, samples, false);
	return how->charge(how->charge_ctx, bytes, index);
}

int bp_dataset_from_set(bp_shard_set *set, bp_dataset **ret, bp_dataset_fault *fault)
{
	/* The set is emptied below: what its charge is, kept. */
	const bp_shard_set how = { .charge = set->charge, .charge_ctx = set->charge_ctx };
	shard_priv *shards;
	bp_dataset *ds;
	int r;

	ds = calloc(1, sizeof(*ds));
	shards = calloc(set->count, sizeof(*shards));
	if (!ds || !shards) {
		free(ds);
		free(shards);
		bp_shard_set_close(set);
		return -ENOMEM;
	}
	ds->shards = &shards[0].pub;
	ds->shard_count = set->count;
	/* The dataset owns the names and descriptors from here on, also on failure. */
	for (size_t i = 0; i < set->count; i++) {
		shards[i].pub.name = set->names[i];
		shards[i].pub.fd = set->fds[i];
		shards[i].pub.read = set->read;
		shards[i].pub.read_ctx = set->read_ctx ? set->read_ctx[i] : NULL;
		set->names[i] = NULL;
		set->fds[i] = -1;
	}
	bp_shard_set_close(set);
	for (size_t i = 0; i < ds->shard_count; i++) {
		r = shard_meta(&shards[i], fault);
		if (r < 0)
			goto fail;
	}
	r = charge_indexes(ds, &how);
	for (size_t i = 0; r == 0 && i < ds->shard_count; i++)
		r = shard_body(&shards[i], &how, fault);
	if (r < 0)
		goto fail;
	r = dataset_finish(ds, fault);
	if (r < 0)
		goto fail;
	*ret = ds;
	return 0;
fail:
	bp_dataset_close(ds);
	return r;
}

int bp_dataset_fdopen(int fd, const char *name, bp_dataset **ret, bp_dataset_fault *fault)
{
	bp_shard_set set;
	int r;

	if (fd < 0 || !name || !ret)
		return -EINVAL;
	r = bp_shard_set_open(fd, name, &set, fault);
	return r < 0 ? r : bp_dataset_from_set(&set, ret, fault);
}

void bp_dataset_close(bp_dataset *ds)
{
	shard_priv *shards;

	if (!ds)
		return;
	shards = (shard_priv *)ds->shards;
	for (size_t i = 0; i < ds->shard_count; i++)
		shard_release(&shards[i]);
	free(shards);
	bp_pack_ranges_free(ds->shard_map);
	bp_schema_clear(&ds->schema);
	free(ds);
}

uint64_t bp_dataset_samples(const bp_dataset *ds) { return ds->samples; }
uint64_t bp_dataset_blocks(const bp_dataset *ds) { return ds->blocks; }
uint64_t bp_dataset_raw_bytes(const bp_dataset *ds) { return ds->raw_bytes; }
uint64_t bp_dataset_stored_bytes(const bp_dataset *ds) { return ds->stored_bytes; }
uint64_t bp_dataset_max_sample(const bp_dataset *ds) { return ds->max_sample; }
uint64_t bp_dataset_max_block(const bp_dataset *ds) { return ds->max_block; }
uint64_t bp_dataset_framed(const bp_dataset *ds) { return ds->framed; }
uint32_t bp_dataset_max_frames(const bp_dataset *ds) { return ds->max_frames; }
uint64_t bp_dataset_fingerprint(const bp_dataset *ds) { return ds->fingerprint; }
size_t bp_dataset_shard_count(const bp_dataset *ds) { return ds->shard_count; }
size_t bp_dataset_lookup_bytes(const bp_dataset *ds) { return ds->lookup_bytes; }

/* Heap bytes a schema holds: its fields and their class names. */
static uint64_t schema_bytes(const bp_schema *sc)
{
	uint64_t n = (uint64_t)sc->count * sizeof(bp_field);

	for (uint32_t f = 0; f < sc->count; f++)
		for (uint32_t c = 0; c < sc->fields[f].class_count; c++)
			n += sizeof(char *) + strlen(sc->fields[f].classes[c]) + 1;
	return n;
}

uint64_t bp_dataset_held_bytes(const bp_dataset *ds)
{
	const shard_priv *shards = (const shard_priv *)ds->shards;
	uint64_t n = sizeof(*ds) + ds->shard_count * sizeof(*shards) + ds->lookup_bytes +
		     ds->field_bytes + schema_bytes(&ds->schema);

	for (size_t i = 0; i < ds->shard_count; i++) {
		const bp_shard *sh = &shards[i].pub;

		n += strlen(sh->name) + 1 + sh->footer.index_size + sh->header.dict_size;
		if (sh->ddict)
			n += ZSTD_sizeof_DDict(sh->ddict);
	}
	return n;
}

const bp_schema *bp_dataset_schema(const bp_dataset *ds) { return &ds->schema; }
bool bp_dataset_has_keys(const bp_dataset *ds) { return ds->keys; }

int bp_dataset_tokens(const bp_dataset *ds, bp_tokens *ret)
{
	if (!ds->has_tokens)
		return -ENODATA;
	*ret = ds->tokens;
	return 0;
}
size_t bp_dataset_field_bytes(const bp_dataset *ds) { return ds->field_bytes; }

const bp_pack_fields *bp_dataset_shard_fields(const bp_dataset *ds, size_t i)
{
	return &((const shard_priv *)ds->shards)[i].fields;
}

size_t bp_dataset_shard_of(const bp_dataset *ds, uint64_t id)
{
	return (size_t)bp_pack_ranges_find(ds->shard_map, id);
}

const bp_shard *bp_dataset_shard(const bp_dataset *ds, size_t i)
{
	return i < ds->shard_count ? &((shard_priv *)ds->shards)[i].pub : NULL;
}

int bp_dataset_locate(const bp_dataset *ds, uint64_t id, size_t *ret_shard,
		      bp_pack_sample *ret_sample)
{
	const bp_shard *sh;
	size_t shard;

	if (id >= ds->samples)
		return -ERANGE;
	shard = (size_t)bp_pack_ranges_find(ds->shard_map, id);
	sh = &((const shard_priv *)ds->shards)[shard].pub;
	bp_pack_index_sample(&sh->index, id - sh->first_sample, ret_sample);
	*ret_shard = shard;
	return 0;
}
