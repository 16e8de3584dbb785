/* SPDX-License-Identifier: MIT */
/*
 * pack_input.c - enumerate and read batchd-pack's inputs (see pack_input.h).
 *
 * Files can change between the scan and the packing pass; every read checks
 * it got exactly the size the scan saw, so a changed file stops the pack
 * with a message instead of silently shifting sample boundaries.
 */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pack.h"
#include "pack_file.h"
#include "pack_input.h"
#include "units.h"

static int err_msg(int err, const char *path, const char *what)
{
	fprintf(stderr, "batchd-pack: %s: %s%s%s\n", path, what, err ? ": " : "",
		err ? strerror(-err) : "");
	return err ? err : -EINVAL;
}

static int too_big(const char *path, const char *member, uint64_t size)
{
	char lim[32];

	fprintf(stderr, "batchd-pack: %s%s%s: sample of %llu bytes is over the %s limit\n", path,
		member ? ":" : "", member ? member : "", (unsigned long long)size,
		bp_format_size(BP_PACK_MAX_SAMPLE, lim, sizeof(lim)));
	return -E2BIG;
}

int pack_inputs_add(pack_inputs *in, const char *path, uint64_t record_size, bool records)
{
	pack_input *v, *p;
	struct stat st;

	if (stat(path, &st) < 0)
		return err_msg(-errno, path, "cannot open input");
	if (records && !S_ISREG(st.st_mode))
		return err_msg(0, path, "--records needs a regular file");
	if (!records && !S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
		return err_msg(0, path, "input is neither a directory nor a tar file");

	v = realloc(in->v, (in->n + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	in->v = v;
	p = &v[in->n];
	memset(p, 0, sizeof(*p));
	p->path = strdup(path);
	if (!p->path)
		return -ENOMEM;
	/* "dir/" and "dir" name the same samples. */
	for (size_t n = strlen(p->path); n > 1 && p->path[n - 1] == '/'; n--)
		p->path[n - 1] = '\0';
	p->kind = records ? INPUT_RECORDS : S_ISDIR(st.st_mode) ? INPUT_DIR : INPUT_TAR;
	p->record_size = record_size;
	in->n++;
	return 0;
}

static int entry_push(pack_input *in, size_t *cap, char *name, uint64_t size)
{
	if (in->count == *cap) {
		size_t n = *cap ? *cap * 2 : 1024;
		pack_entry *e = realloc(in->entries, n * sizeof(*e));

		if (!e)
			return -ENOMEM;
		in->entries = e;
		*cap = n;
	}
	in->entries[in->count++] = (pack_entry){ .name = name, .size = size };
	return 0;
}

/* ---- directories -------------------------------------------------------- */

/* nftw has no user pointer; the scan is single-threaded, so a static is fine. */
static struct {
	pack_input *in;
	size_t root_len, cap;
	int err;
} walk;

static int walk_one(const char *fpath, const struct stat *sb, int type, struct FTW *ftw)
{
	char *name;

	if (type == FTW_DNR || type == FTW_NS) {
		walk.err = err_msg(-EACCES, fpath, "cannot read");
		return 1;
	}
	if (type != FTW_F || !S_ISREG(sb->st_mode))
		return 0; /* directories, symlinks, devices, sockets: not samples */
	if ((uint64_t)sb->st_size > BP_PACK_MAX_SAMPLE) {
		walk.err = too_big(fpath, NULL, (uint64_t)sb->st_size);
		return 1;
	}
	name = strdup(fpath + walk.root_len);
	if (!name || entry_push(walk.in, &walk.cap, name, (uint64_t)sb->st_size) < 0) {
		free(name);
		walk.err = -ENOMEM;
		return 1;
	}
	return 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(((const pack_entry *)a)->name, ((const pack_entry *)b)->name);
}

static int scan_dir(pack_input *in)
{
	size_t len = strlen(in->path);

	walk.in = in;
	walk.cap = 0;
	walk.err = 0;
	/* Names start after the root and its separator (a root ending in '/', as "/", has its own). */
	walk.root_len = len && in->path[len - 1] == '/' ? len : len + 1;
	if (nftw(in->path, walk_one, 64, FTW_PHYS) < 0 && !walk.err)
		return err_msg(-errno, in->path, "cannot walk directory");
	if (walk.err)
		return walk.err;
	if (in->count == 0)
		return err_msg(0, in->path, "directory holds no regular files");
	qsort(in->entries, in->count, sizeof(*in->entries), by_name);
	return 0;
}

/* ---- tar archives --------------------------------------------------------- */

static int tar_open(const char *path, struct archive **ret)
{
	struct archive *a = archive_read_new();

	if (!a)
		return -ENOMEM;
	archive_read_support_filter_all(a);
	archive_read_support_format_tar(a);
	archive_read_support_format_gnutar(a);
	if (archive_read_open_filename(a, path, 1 << 20) != ARCHIVE_OK) {
		fprintf(stderr, "batchd-pack: %s: cannot read tar archive: %s\n", path,
			archive_error_string(a));
		archive_read_free(a);
		return -EINVAL;
	}
	*ret = a;
	return 0;
}

/* Next regular member: 1, 0 at the end, negative on error (message printed). */
static int tar_next(struct archive *a, const char *path, struct archive_entry **ret)
{
	struct archive_entry *e;
	int r;

	while ((r = archive_read_next_header(a, &e)) == ARCHIVE_OK || r == ARCHIVE_WARN) {
		if (archive_entry_filetype(e) == AE_IFREG) {
			*ret = e;
			return 1;
		}
	}
	if (r == ARCHIVE_EOF)
		return 0;
	fprintf(stderr, "batchd-pack: %s: bad tar archive: %s\n", path, archive_error_string(a));
	return -EINVAL;
}

static int scan_tar(pack_input *in)
{
	struct archive_entry *e;
	struct archive *a;
	size_t cap = 0;
	int r;

	r = tar_open(in->path, &a);
	if (r < 0)
		return r;
	while ((r = tar_next(a, in->path, &e)) == 1) {
		uint64_t size = archive_entry_size_is_set(e) ? (uint64_t)archive_entry_size(e) : 0;

		if (size > BP_PACK_MAX_SAMPLE) {
			r = too_big(in->path, archive_entry_pathname(e), size);
			break;
		}
		r = entry_push(in, &cap, NULL, size);
		if (r < 0)
			break;
	}
	archive_read_free(a);
	if (r < 0)
		return r;
	if (in->count == 0)
		return err_msg(0, in->path, "tar archive holds no regular files");
	return 0;
}

/* ---- record files --------------------------------------------------------- */

static int scan_records(pack_input *in)
{
	struct stat st;

	if (in->record_size == 0)
		return err_msg(0, in->path, "record size must be at least 1 byte");
	if (in->record_size > BP_PACK_MAX_SAMPLE)
		return too_big(in->path, NULL, in->record_size);
	if (stat(in->path, &st) < 0)
		return err_msg(-errno, in->path, "cannot stat");
	if (st.st_size == 0)
		return err_msg(0, in->path, "record file is empty");
	if ((uint64_t)st.st_size % in->record_size) {
		fprintf(stderr, "batchd-pack: %s: size %lld is not a multiple of the record size %llu\n",
			in->path, (long long)st.st_size, (unsigned long long)in->record_size);
		return -EINVAL;
	}
	in->count = (uint64_t)st.st_size / in->record_size;
	return 0;
}

uint64_t pack_inputs_size(const pack_inputs *in, uint64_t i)
{
	for (size_t k = 0; k < in->n; k++) {
		const pack_input *p = &in->v[k];

		if (i < p->count)
			return p->kind == INPUT_RECORDS ? p->record_size : p->entries[i].size;
		i -= p->count;
	}
	return 0;
}

int pack_inputs_scan(pack_inputs *in)
{
	in->samples = in->raw_bytes = in->max_sample = 0;
	for (size_t k = 0; k < in->n; k++) {
		pack_input *p = &in->v[k];
		int r = p->kind == INPUT_DIR ? scan_dir(p)
		      : p->kind == INPUT_TAR ? scan_tar(p)
					     : scan_records(p);

		if (r < 0)
			return r;
		in->samples += p->count;
		if (p->kind == INPUT_RECORDS) {
			in->raw_bytes += p->count * p->record_size;
			if (p->record_size > in->max_sample)
				in->max_sample = p->record_size;
			continue;
		}
		for (uint64_t i = 0; i < p->count; i++) {
			in->raw_bytes += p->entries[i].size;
			if (p->entries[i].size > in->max_sample)
				in->max_sample = p->entries[i].size;
		}
	}
	return 0;
}

void pack_inputs_free(pack_inputs *in)
{
	for (size_t k = 0; k < in->n; k++) {
		pack_input *p = &in->v[k];

		for (uint64_t i = 0; p->entries && i < p->count; i++)
			free(p->entries[i].name);
		free(p->entries);
		free(p->path);
	}
	free(in->v);
	memset(in, 0, sizeof(*in));
}

/* ---- iteration ------------------------------------------------------------ */

struct pack_iter {
	const pack_inputs *in;
	size_t input;            /* current input */
	uint64_t i;              /* sample within it; valid after next() */
	bool started;
	int fd;                  /* INPUT_RECORDS: the file; INPUT_DIR: the root */
	struct archive *tar;
	struct archive_entry *entry;
	char name[4352];
};

int pack_iter_new(const pack_inputs *in, pack_iter **ret)
{
	pack_iter *it = calloc(1, sizeof(*it));

	if (!it)
		return -ENOMEM;
	it->in = in;
	it->fd = -1;
	*ret = it;
	return 0;
}

static void iter_close_input(pack_iter *it)
{
	if (it->fd >= 0)
		close(it->fd);
	it->fd = -1;
	if (it->tar)
		archive_read_free(it->tar);
	it->tar = NULL;
	it->started = false;
}

void pack_iter_free(pack_iter *it)
{
	if (!it)
		return;
	iter_close_input(it);
	free(it);
}

static int iter_open_input(pack_iter *it, const pack_input *p)
{
	it->i = 0;
	it->started = true;
	if (p->kind == INPUT_TAR)
		return tar_open(p->path, &it->tar);
	it->fd = open(p->path, O_RDONLY | O_CLOEXEC | (p->kind == INPUT_DIR ? O_DIRECTORY : 0));
	if (it->fd < 0)
		return err_msg(-errno, p->path, "cannot open input");
	return 0;
}

int pack_iter_next(pack_iter *it, uint64_t *ret_size)
{
	while (it->input < it->in->n) {
		const pack_input *p = &it->in->v[it->input];
		int r;

		if (!it->started) {
			r = iter_open_input(it, p);
			if (r < 0)
				return r;
		} else {
			it->i++;
		}
		if (it->i < p->count) {
			if (p->kind == INPUT_TAR) {
				r = tar_next(it->tar, p->path, &it->entry);
				if (r < 0)
					return r;
				if (r == 0)
					return err_msg(0, p->path, "archive changed while packing");
			}
			*ret_size = p->kind == INPUT_RECORDS ? p->record_size : p->entries[it->i].size;
			return 1;
		}
		iter_close_input(it);
		it->input++;
	}
	return 0;
}

const char *pack_iter_name(pack_iter *it)
{
	const pack_input *p = &it->in->v[it->input];

	if (p->kind == INPUT_DIR)
		snprintf(it->name, sizeof(it->name), "%s/%s", p->path, p->entries[it->i].name);
	else if (p->kind == INPUT_TAR)
		snprintf(it->name, sizeof(it->name), "%s:%s", p->path,
			 archive_entry_pathname(it->entry));
	else
		snprintf(it->name, sizeof(it->name), "%s: record %llu", p->path,
			 (unsigned long long)it->i);
	return it->name;
}

static int read_file(pack_iter *it, const pack_input *p, uint8_t *dst)
{
	uint64_t size = p->entries[it->i].size;
	uint8_t probe;
	int fd, r;

	fd = openat(it->fd, p->entries[it->i].name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return err_msg(-errno, pack_iter_name(it), "cannot open");
	r = bp_pread_full(fd, dst, size, 0);
	/* One more byte must not exist: the file must not have grown either. */
	if (r == 0 && pread(fd, &probe, 1, (off_t)size) != 0)
		r = -ENODATA;
	close(fd);
	if (r == -ENODATA)
		return err_msg(0, pack_iter_name(it), "file changed size while packing");
	if (r < 0)
		return err_msg(r, pack_iter_name(it), "cannot read");
	return 0;
}

int pack_iter_read(pack_iter *it, uint8_t *dst)
{
	const pack_input *p = &it->in->v[it->input];
	int r;

	switch (p->kind) {
	case INPUT_DIR:
		return read_file(it, p, dst);
	case INPUT_RECORDS:
		r = bp_pread_full(it->fd, dst, p->record_size, it->i * p->record_size);
		return r < 0 ? err_msg(r == -ENODATA ? -EIO : r, pack_iter_name(it), "cannot read")
			     : 0;
	case INPUT_TAR:
		for (uint64_t got = 0, size = p->entries[it->i].size; got < size;) {
			la_ssize_t n = archive_read_data(it->tar, dst + got, size - got);

			if (n <= 0) {
				fprintf(stderr, "batchd-pack: %s: cannot read member: %s\n",
					pack_iter_name(it),
					n < 0 ? archive_error_string(it->tar) : "archive ended early");
				return -EIO;
			}
			got += (uint64_t)n;
		}
		return 0;
	}
	return -EINVAL;
}
