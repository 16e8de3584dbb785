/* SPDX-License-Identifier: MIT */
/*
 * pack_s3.c - batchd-pack's remote side (pack_s3.h), a module that
 * batchd-pack loads (dlopen) only for an s3:// or http(s):// path, so
 * that libcurl and the dozens of libraries it brings cost nothing to the
 * local commands, which scripts run thousands of times.
 *
 * The pack code works on files, so a remote pack passes through local
 * ones: `create` writes the pack in a private temporary directory (mode
 * 0700, under $TMPDIR), and this module opens what it wrote and unlinks it
 * before the upload starts, so an interrupted upload leaves nothing on
 * disk and no half-written object in the bucket (a multipart upload is
 * aborted; the object appears only when it is complete). `info` and
 * `verify` fetch into unlinked temporary files (O_TMPFILE) and open those
 * as the shards: every byte for verify, and for info only the ranges the
 * pack reader reads when it opens a shard (header, dictionary, sections,
 * index and footer), so that info on a large pack costs a few small
 * GETs. Every GET carries If-Match with the ETag seen when the dataset
 * was listed, so an object replaced meanwhile fails the command instead
 * of mixing versions.
 *
 * A name resolves as the daemon resolves it (docs/remote.md):
 * the object itself if there is one, else the *.bpk objects directly
 * under NAME/ in bytewise order, those starting with '.' skipped.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "endian.h"
#include "pack.h"
#include "pack_s3.h"
#include "progress.h"

#define FETCH_PIECE (64ull << 20)   /* verify fetches an object in GETs of this size */
#define FETCH_WHOLE (4ull << 20)    /* info fetches an object this small whole */

static const char *env(const char *a, const char *b)
{
	const char *v = getenv(a);

	if (v && *v)
		return v;
	v = b ? getenv(b) : NULL;
	return v && *v ? v : NULL;
}

/* A client for r's flags, with the tools' fallbacks to the environment. */
static int client(const pack_remote *r, bp_s3 **ret)
{
	static bool inited;
	bp_s3_config c = r->cfg;
	char err[512];
	int e;

	if (!inited && bp_s3_global_init() < 0) {
		fprintf(stderr, "batchd-pack: cannot start libcurl\n");
		return -ENOMEM;
	}
	inited = true;
	if (!c.endpoint)
		c.endpoint = env("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL");
	if (!c.region)
		c.region = env("AWS_REGION", "AWS_DEFAULT_REGION");
	c.allow_env = true;
	c.retries = BP_S3_DEFAULT_RETRIES;
	e = bp_s3_new(&c, ret, err, sizeof(err));
	if (e < 0)
		fprintf(stderr, "batchd-pack: %s\n", err);
	return e;
}

static int parse_loc(const char *path, bp_s3_loc *loc)
{
	char err[512];
	int e = bp_s3_loc_parse(path, loc, err, sizeof(err));

	if (e < 0)
		fprintf(stderr, "batchd-pack: %s\n", err);
	return e;
}

static int said(int err, const bp_s3_error *e)
{
	fprintf(stderr, "batchd-pack: %s\n", e->msg);
	return err;
}

/* ---- create ----------------------------------------------------------------------- */

/* The packs create wrote under dir (itself, or its *.bpk entries), opened and unlinked. */
typedef struct written {
	char **names;
	int *fds;
	size_t n;
} written;

static void written_free(written *w)
{
	for (size_t i = 0; i < w->n; i++) {
		free(w->names[i]);
		close(w->fds[i]);
	}
	free(w->names);
	free(w->fds);
}

static int take_one(written *w, int dirfd, const char *name)
{
	char **names = realloc(w->names, (w->n + 1) * sizeof(*names));
	int *fds = names ? realloc(w->fds, (w->n + 1) * sizeof(*fds)) : NULL;

	if (names)
		w->names = names;
	if (!names || !fds)
		return -ENOMEM;
	w->fds = fds;
	if (!(w->names[w->n] = strdup(name)))
		return -ENOMEM;
	if ((w->fds[w->n] = openat(dirfd, name, O_RDONLY | O_CLOEXEC)) < 0) {
		free(w->names[w->n]);
		return -errno;
	}
	w->n++;
	unlinkat(dirfd, name, 0);
	return 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Open and unlink what pack_create left in tmp/out (a file or a directory of shards). */
static int take_written(const char *tmp, bool sharded, written *w)
{
	int top = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC), r = 0;
	char **names = NULL;
	size_t n = 0;
	struct dirent *de;
	DIR *d;
	int sub;

	if (top < 0)
		return -errno;
	if (!sharded) {
		r = take_one(w, top, "out.bpk");
		close(top);
		return r;
	}
	sub = openat(top, "out", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	close(top);
	if (sub < 0 || !(d = fdopendir(sub))) {
		if (sub >= 0)
			close(sub);
		return -errno;
	}
	while (r == 0 && (de = readdir(d))) {
		char **v;

		if (de->d_name[0] == '.')
			continue;
		if (!(v = realloc(names, (n + 1) * sizeof(*v))) || !(v[n] = strdup(de->d_name)))
			r = -ENOMEM;
		if (v)
			names = v;
		n += r == 0;
	}
	if (n)
		qsort(names, n, sizeof(*names), by_name);
	for (size_t i = 0; i < n; i++) {
		if (r == 0)
			r = take_one(w, dirfd(d), names[i]);
		free(names[i]);
	}
	free(names);
	closedir(d);
	return r;
}

/* The upload's progress line across all packs of a dataset. */
typedef struct sent {
	progress prog;
	uint64_t before;         /* bytes of the packs already uploaded */
	unsigned parts;          /* PUTs done: bp_s3_upload_fd reports after each */
} sent;

static void upload_progress(void *ctx, uint64_t done)
{
	sent *u = ctx;

	u->parts++;
	progress_update(&u->prog, u->before + done, false);
}

/* Each pack of w to out (itself, or OUT/NAME for shards). */
static int upload_all(const bp_s3 *s, const bp_s3_loc *out, const char *path, bool sharded,
		      const written *w, uint64_t part)
{
	uint64_t total = 0, *sizes = calloc(w->n ? w->n : 1, sizeof(*sizes));
	char etag[BP_S3_ETAG_MAX] = "";
	size_t klen = strlen(out->key);
	sent u = { 0 };
	int r = 0;

	if (!sizes)
		return -ENOMEM;
	for (size_t i = 0; i < w->n && r == 0; i++) {
		struct stat st;

		r = fstat(w->fds[i], &st) < 0 ? -errno : 0;
		sizes[i] = r == 0 ? (uint64_t)st.st_size : 0;
		total += sizes[i];
	}
	progress_start(&u.prog, "uploading", total);
	while (klen && out->key[klen - 1] == '/')
		klen--;
	for (size_t i = 0; i < w->n && r == 0; i++) {
		bp_s3_loc l = { .bucket = out->bucket };
		bp_s3_error e;

		if (asprintf(&l.key, "%.*s%s%s", (int)klen, out->key, sharded ? "/" : "",
			     sharded ? w->names[i] : "") < 0) {
			r = -ENOMEM;
			break;
		}
		r = bp_s3_upload_fd(s, &l, w->fds[i], sizes[i], part, upload_progress, &u, etag, &e);
		if (r < 0)
			said(r, &e);
		u.before += sizes[i];
		free(l.key);
	}
	progress_end(&u.prog);
	if (r == 0)
		printf("%s: uploaded %zu object%s, %" PRIu64 " bytes, %u part%s%s%s%s\n", path, w->n,
		       w->n == 1 ? "" : "s", total, u.parts, u.parts == 1 ? "" : "s",
		       sharded ? "" : " (ETag ", sharded ? "" : etag, sharded ? "" : ")");
	free(sizes);
	return r;
}

/* Refuse an OUT that exists (the object, or packs under the prefix), as local create does. */
static int check_absent(const bp_s3 *s, const bp_s3_loc *out, bool sharded, const char *path)
{
	bp_s3_object o, *v = NULL;
	bp_s3_error e;
	char *prefix = NULL;
	size_t n = 0;
	int r;

	if (!sharded) {
		r = bp_s3_head(s, out, &o, &e);
		if (r == 0) {
			free(o.key);
			fprintf(stderr, "batchd-pack: %s: already exists; delete it or choose another "
				"name\n", path);
			return -EEXIST;
		}
		return r == -ENOENT ? 0 : said(r, &e);
	}
	if (asprintf(&prefix, "%s%s", out->key,
		     out->key[0] && out->key[strlen(out->key) - 1] != '/' ? "/" : "") < 0)
		return -ENOMEM;
	r = bp_s3_list(s, out->bucket, prefix, 0, &v, &n, &e);
	free(prefix);
	if (r < 0)
		return said(r, &e);
	bp_s3_objects_free(v, n);
	if (n) {
		fprintf(stderr, "batchd-pack: %s: already holds %zu object%s; delete them or choose "
			"another prefix\n", path, n, n == 1 ? "" : "s");
		return -EEXIST;
	}
	return 0;
}

/* OUT as a location create can write to. @return 0 or -EINVAL/-ENOMEM, said. */
static int out_loc(const char *out, bool sharded, bp_s3_loc *loc)
{
	int r = parse_loc(out, loc);

	if (r == 0 && (loc->plain || !loc->key[0] ||
		       (!sharded && loc->key[strlen(loc->key) - 1] == '/'))) {
		fprintf(stderr, "batchd-pack: %s: create writes to s3://BUCKET/KEY (a prefix only "
			"with --shard-size)\n", out);
		bp_s3_loc_free(loc);
		r = -EINVAL;
	}
	return r;
}

static int mod_prepare(const char *out, bool sharded, const pack_remote *rem)
{
	bp_s3_loc loc = { 0 };
	bp_s3 *s = NULL;
	int r = out_loc(out, sharded, &loc);

	if (r == 0 && (r = client(rem, &s)) == 0)
		r = check_absent(s, &loc, sharded, out);
	bp_s3_free(s);
	bp_s3_loc_free(&loc);
	return r;
}

static int mod_upload(const char *out, const char *tmp, bool sharded, const pack_remote *rem)
{
	char local[4200];
	bp_s3_loc loc = { 0 };
	written w = { 0 };
	bp_s3 *s = NULL;
	int r;

	/* Opened and unlinked before the upload: nothing stays behind from here on. */
	if ((r = take_written(tmp, sharded, &w)) < 0)
		fprintf(stderr, "batchd-pack: %s: cannot reopen the packs written: %s\n", tmp,
			strerror(-r));
	if (sharded) {
		snprintf(local, sizeof(local), "%s/out", tmp);
		rmdir(local);
	}
	rmdir(tmp);
	if (r == 0 && (r = out_loc(out, sharded, &loc)) == 0 && (r = client(rem, &s)) == 0)
		r = upload_all(s, &loc, out, sharded, &w, rem->part_size);
	written_free(&w);
	bp_s3_free(s);
	bp_s3_loc_free(&loc);
	return r;
}

/* ---- info and verify ---------------------------------------------------------------- */

/* An unlinked temporary file of size bytes (sparse until fetched). */
static int tmp_file(uint64_t size)
{
	char path[4096];
	int fd = open(pack_tmp_root(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);

	if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
		snprintf(path, sizeof(path), "%s/.batchd-pack-XXXXXX", pack_tmp_root());
		fd = mkostemp(path, O_CLOEXEC);
		if (fd >= 0)
			unlink(path);
	}
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) < 0) {
		int r = -errno;

		close(fd);
		return r;
	}
	return fd;
}

static int get(const bp_s3 *s, const bp_s3_loc *loc, const bp_s3_object *o, uint64_t off,
	       uint64_t len, int fd)
{
	bp_s3_error e;
	int r = bp_s3_get_to_fd(s, loc, o->etag, off, len, fd, off, &e);

	return r < 0 ? said(r, &e) : 0;
}

/* Every byte, in pieces, with a progress line. */
static int fetch_whole(const bp_s3 *s, const bp_s3_loc *loc, const bp_s3_object *o, int fd,
		       progress *p, uint64_t *done)
{
	for (uint64_t off = 0; off < o->size; off += FETCH_PIECE) {
		uint64_t len = o->size - off < FETCH_PIECE ? o->size - off : FETCH_PIECE;
		int r = get(s, loc, o, off, len, fd);

		if (r < 0)
			return r;
		*done += len;
		if (p)
			progress_update(p, *done, false);
	}
	return 0;
}

/*
 * What opening a shard reads: header and footer, then the dictionary and
 * index they place, then the sections between the last block (from the
 * index's last block entry) and the index. A shard whose header or
 * footer does not decode is fetched whole, for the reader to name its fault.
 */
static int fetch_open(const bp_s3 *s, const bp_s3_loc *loc, const bp_s3_object *o, int fd)
{
	uint8_t head[BP_PACK_HEADER_SIZE], foot[BP_PACK_FOOTER_SIZE], last[16];
	uint64_t data_end, done = 0;
	bp_pack_fault fault = { 0 };
	bp_pack_header h;
	bp_pack_footer f;
	int r;

	if (o->size <= FETCH_WHOLE)
		return fetch_whole(s, loc, o, fd, NULL, &done);
	if ((r = get(s, loc, o, 0, sizeof(head), fd)) < 0 ||
	    (r = get(s, loc, o, o->size - sizeof(foot), sizeof(foot), fd)) < 0)
		return r;
	if (bp_pread_full(fd, head, sizeof(head), 0) < 0 ||
	    bp_pread_full(fd, foot, sizeof(foot), o->size - sizeof(foot)) < 0 ||
	    bp_pack_header_decode(head, sizeof(head), &h, &fault) < 0 ||
	    bp_pack_footer_decode(foot, o->size, &h, &f, &fault) < 0)
		return fetch_whole(s, loc, o, fd, NULL, &done);
	if ((h.dict_size && (r = get(s, loc, o, h.data_offset - h.dict_size, h.dict_size, fd)) < 0) ||
	    (r = get(s, loc, o, f.index_offset, f.index_size, fd)) < 0)
		return r;
	if (bp_pread_full(fd, last, sizeof(last), f.index_offset + 56 * (f.block_count - 1)) < 0)
		return fetch_whole(s, loc, o, fd, NULL, &done);
	data_end = bp_le64(last) + bp_le64(last + 8);
	if (data_end < h.data_offset || data_end > f.index_offset)
		return fetch_whole(s, loc, o, fd, NULL, &done);
	return data_end < f.index_offset ? get(s, loc, o, data_end, f.index_offset - data_end, fd)
					 : 0;
}

static bool is_pack(const char *key, size_t prefix_len)
{
	const char *name = key + prefix_len;
	size_t n = strlen(name);

	return n > 4 && name[0] != '.' && !strchr(name, '/') && !strcmp(name + n - 4, ".bpk");
}

/* The *.bpk objects directly under prefix (with its '/'), kept in *v, *n. */
static int list_packs(const bp_s3 *s, const bp_s3_loc *loc, const char *prefix, bp_s3_object **v,
		      size_t *n)
{
	size_t plen = strlen(prefix), k = 0;
	bp_s3_error e;
	int r = bp_s3_list(s, loc->bucket, prefix, BP_DATASET_MAX_SHARDS + 1000u, v, n, &e);

	if (r < 0)
		return said(r, &e);
	for (size_t i = 0; i < *n; i++) {
		if (is_pack((*v)[i].key, plen))
			(*v)[k++] = (*v)[i];
		else
			free((*v)[i].key);
	}
	*n = k;
	return 0;
}

/*
 * What path names: its object, or the packs under path/. @return 0 with
 * *v, *n (n >= 1) and *dir; a negative errno, message printed.
 */
static int resolve(const bp_s3 *s, const bp_s3_loc *loc, const char *path, bp_s3_object **v,
		   size_t *n, bool *dir)
{
	size_t klen = strlen(loc->key);
	bp_s3_error head = { 0 };
	char *prefix = NULL;
	int r = -ENOENT;

	*dir = true;
	if (loc->plain || (klen && loc->key[klen - 1] != '/')) {
		if (!(*v = calloc(1, sizeof(**v))))
			return -ENOMEM;
		r = bp_s3_head(s, loc, *v, &head);
		/* A *.bpk names an object, never a prefix: no listing after its 404. */
		if (r == 0 || r != -ENOENT || loc->plain ||
		    (klen > 4 && !strcmp(loc->key + klen - 4, ".bpk"))) {
			*n = r == 0;
			*dir = false;
			if (r == 0)
				return 0;
			free(*v);
			*v = NULL;
			return said(r, &head);
		}
		free(*v);
		*v = NULL;
	}
	if (asprintf(&prefix, "%s%s", loc->key, klen && loc->key[klen - 1] != '/' ? "/" : "") < 0)
		return -ENOMEM;
	r = list_packs(s, loc, prefix, v, n);
	if (r == 0 && *n == 0) {
		bp_s3_objects_free(*v, 0);
		*v = NULL;
		if (head.msg[0])
			fprintf(stderr, "batchd-pack: %s: no such object (HTTP %ld %s), and no *.bpk "
				"objects under s3://%s/%s\n", path, head.status,
				head.code[0] ? head.code : "Not Found", loc->bucket, prefix);
		else
			fprintf(stderr, "batchd-pack: %s: no *.bpk objects under s3://%s/%s\n", path,
				loc->bucket, prefix);
		r = head.msg[0] ? -ENOENT : -ENODATA;
	}
	free(prefix);
	return r;
}

/* The objects fetched into temporary files, as a shard set for the pack reader. */
static int fetch_set(const bp_s3 *s, const bp_s3_loc *loc, const char *path,
		     const bp_s3_object *v, size_t n, bool dir, bool whole, bp_shard_set *set)
{
	uint64_t total = 0, done = 0;
	progress prog;
	int r = 0;

	set->names = calloc(n, sizeof(*set->names));
	set->fds = malloc(n * sizeof(*set->fds));
	if (!set->names || !set->fds)
		return -ENOMEM;
	set->dir = dir;
	for (size_t i = 0; i < n; i++) {
		set->fds[i] = -1;
		total += v[i].size;
	}
	set->count = n;
	progress_start(&prog, "fetching", whole ? total : 0);
	for (size_t i = 0; i < n && r == 0; i++) {
		bp_s3_loc one = { .plain = loc->plain, .bucket = loc->bucket, .key = v[i].key };
		const char *base = strrchr(v[i].key, '/');

		/* Faults name a shard by its name under the prefix, a one-file pack by path. */
		if (!(set->names[i] = strdup(!dir ? path : base ? base + 1 : v[i].key)))
			r = -ENOMEM;
		else if ((r = set->fds[i] = tmp_file(v[i].size)) < 0)
			fprintf(stderr, "batchd-pack: a temporary file in %s: %s\n", pack_tmp_root(),
				strerror(-r));
		else
			r = whole ? fetch_whole(s, &one, &v[i], set->fds[i], &prog, &done)
				  : fetch_open(s, &one, &v[i], set->fds[i]);
	}
	progress_end(&prog);
	return r < 0 ? r : 0;
}

static int mod_open(const char *path, const pack_remote *rem, bool whole, bp_dataset **ret,
		    bp_dataset_fault *fault, bool *faulted)
{
	bp_shard_set set = { 0 };
	bp_s3_object *v = NULL;
	bp_s3_loc loc = { 0 };
	bp_s3 *s = NULL;
	size_t n = 0;
	bool dir;
	int r;

	*faulted = false;
	if ((r = parse_loc(path, &loc)) < 0)
		return r;
	if ((r = client(rem, &s)) == 0 && (r = resolve(s, &loc, path, &v, &n, &dir)) == 0)
		r = fetch_set(s, &loc, path, v, n, dir, whole, &set);
	if (r == 0)
		*faulted = (r = bp_dataset_from_set(&set, ret, fault)) < 0;
	bp_shard_set_close(&set);
	bp_s3_objects_free(v, n);
	bp_s3_free(s);
	bp_s3_loc_free(&loc);
	return r;
}

__attribute__((visibility("default")))
const pack_s3_mod pack_s3_mod_v1 = {
	.abi = PACK_S3_ABI,
	.prepare = mod_prepare,
	.upload = mod_upload,
	.open = mod_open,
};
