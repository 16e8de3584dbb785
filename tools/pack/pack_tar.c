/* SPDX-License-Identifier: MIT */
/*
 * pack_tar.c - tar archives as batchd-pack's inputs: opening them with
 * every filter libarchive has, their regular members one by one, and the
 * scan of a plain (not grouped) tar, a sample per member keyed by its path.
 *
 * A member's path becomes a key that a trainer may later use as a path,
 * so it is made a plain relative path first: a leading "/" (said in a
 * warning, once an archive, as GNU tar says it), a leading "./", "." and
 * empty components are dropped, and a member with a ".." component is
 * refused naming it, as is a hard link (its bytes are another member's,
 * which a stream read in archive order no longer has; dropping it would
 * lose a sample without a word). Every pass over an archive (scan,
 * dictionary, packing) sees the same names through pack__tar_next.
 *
 * Thread rules: single-threaded, as pack_input.h.
 */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pack.h"
#include "pack_scan.h"

/* libarchive's errno for "not a format it reads" (its ARCHIVE_ERRNO_FILE_FORMAT, not public). */
#ifdef EFTYPE
#define NOT_AN_ARCHIVE EFTYPE
#else
#define NOT_AN_ARCHIVE EILSEQ
#endif

int pack__tar_open(const char *path, struct archive **ret)
{
	struct archive *a = archive_read_new();

	if (!a)
		return -ENOMEM;
	archive_read_support_filter_all(a);
	archive_read_support_format_tar(a);
	archive_read_support_format_gnutar(a);
	if (archive_read_open_filename(a, path, 1 << 20) != ARCHIVE_OK) {
		/* A plain file given as INPUT is the common case: say what it could be. */
		if (archive_errno(a) == NOT_AN_ARCHIVE)
			fprintf(stderr, "batchd-pack: %s is not a tar archive (libarchive: %s): for a "
				"file of fixed-size records use --records SIZE %s; for a directory of "
				"files pass the directory\n", path, archive_error_string(a), path);
		else
			fprintf(stderr, "batchd-pack: %s: cannot read tar archive (libarchive: %s)\n",
				path, archive_error_string(a));
		archive_read_free(a);
		return -EINVAL;
	}
	*ret = a;
	return 0;
}

/*
 * name as a plain relative path into out (room for strlen(name) + 1):
 * leading '/', "." and empty components dropped. @return 0, or -EINVAL
 * for a ".." component; *ret_abs says whether name started with '/'.
 */
static int normalise(const char *name, char *out, bool *ret_abs)
{
	size_t o = 0;

	*ret_abs = name[0] == '/';
	for (const char *p = name + strspn(name, "/"); *p; p += strspn(p, "/")) {
		size_t len = strcspn(p, "/");

		if (len == 2 && p[0] == '.' && p[1] == '.')
			return -EINVAL;
		if (!(len == 1 && p[0] == '.')) {
			if (o)
				out[o++] = '/';
			memcpy(out + o, p, len);
			o += len;
		}
		p += len;
	}
	out[o] = '\0';
	return 0;
}

/* Make e's path plain (normalise); warn of a leading '/' once when warned is given. */
static int member_name(struct archive_entry *e, const char *path, bool *warned)
{
	const char *name = archive_entry_pathname(e);
	char *plain;
	bool abs;
	int r;

	if (!name || !(plain = malloc(strlen(name) + 1)))
		return name ? -ENOMEM : pack__err(0, path, "a member has no path");
	r = normalise(name, plain, &abs);
	if (r < 0)
		fprintf(stderr, "batchd-pack: %s: member '%s' has a '..' component; keys are paths "
				"inside the archive, so such a member is refused: re-create the "
				"archive without '..' in member names\n", path, name);
	else if (!plain[0])
		r = pack__err(0, path, "a regular member's path names no file (\"/\" or \".\")");
	else if (abs && warned && !*warned) {
		fprintf(stderr, "batchd-pack: warning: %s: member '%s' is packed as '%s' (leading '/' "
				"removed, as from every absolute member)\n", path, name, plain);
		*warned = true;
	}
	if (r == 0 && strcmp(plain, name))
		archive_entry_copy_pathname(e, plain);
	free(plain);
	return r;
}

int pack__tar_next(struct archive *a, const char *path, bool *warned, struct archive_entry **ret)
{
	struct archive_entry *e;
	int r;

	while ((r = archive_read_next_header(a, &e)) == ARCHIVE_OK || r == ARCHIVE_WARN) {
		if (archive_entry_hardlink(e)) {
			fprintf(stderr, "batchd-pack: %s: member '%s' is a hard link to '%s'; hard "
					"links are refused (their bytes are another member's): re-create "
					"the archive storing every file whole (GNU tar "
					"--hard-dereference), or pack the extracted directory\n", path,
				archive_entry_pathname(e) ? archive_entry_pathname(e) : "",
				archive_entry_hardlink(e));
			return -EINVAL;
		}
		if (archive_entry_filetype(e) == AE_IFREG) {
			if ((r = member_name(e, path, warned)) < 0)
				return r;
			*ret = e;
			return 1;
		}
	}
	if (r == ARCHIVE_EOF)
		return 0;
	fprintf(stderr, "batchd-pack: %s: bad tar archive: %s\n", path, archive_error_string(a));
	return -EINVAL;
}

int pack__tar_scan(pack_input *in)
{
	struct archive_entry *e;
	struct archive *a;
	bool warned = false;
	size_t cap = 0;
	int r;

	r = pack__tar_open(in->path, &a);
	if (r < 0)
		return r;
	while ((r = pack__tar_next(a, in->path, &warned, &e)) == 1) {
		uint64_t size = archive_entry_size_is_set(e) ? (uint64_t)archive_entry_size(e) : 0;
		const char *name = archive_entry_pathname(e);
		char *copy;

		if (size > BP_PACK_MAX_SAMPLE) {
			r = pack__too_big(in->path, name, size);
			break;
		}
		copy = strdup(name);
		r = copy ? pack__entry_push(in, &cap, &(pack_entry){ .name = copy, .size = size })
			 : -ENOMEM;
		if (r < 0) {
			free(copy);
			break;
		}
	}
	archive_read_free(a);
	if (r < 0)
		return r;
	if (in->count == 0)
		return pack__err(0, in->path, "tar archive holds no regular files");
	return 0;
}
