/* SPDX-License-Identifier: MIT */
/*
 * pack_labels.c - class folders (create --labels dirname), as torchvision's
 * ImageFolder reads them: DIR/CLASS/.../FILE is a sample of class CLASS,
 * whose label is CLASS's index among DIR's first-level directories in
 * bytewise order (the order Python's sorted() gives names). Every such
 * directory is a class, one without files too, so that indices match
 * ImageFolder's; symlinks are not classes, as the walk does not follow
 * them. The class names go into the schema, on the int64 field "label".
 *
 * Hidden directories (names starting with '.') are where this parts from
 * ImageFolder: torchvision's find_classes (0.14 read; pytorch/vision#2831)
 * makes .ipynb_checkpoints a class like any other, which moves every label
 * after it, while the walk here ignores names starting with '.' unless
 * --include-hidden. So a hidden first-level directory is no class either
 * (else it would be an empty class whose index moves the others), and
 * each is named, saying how ImageFolder differs, since labels that do
 * not match a model's are found late; --include-hidden gives
 * ImageFolder's classes exactly.
 *
 * Thread rules: single-threaded, as pack_input.h.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pack_scan.h"

static int by_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * The first-level directories of root (not symlinks to one; hidden ones
 * only when hidden), in bytewise order: the class names, as torchvision's
 * ImageFolder indexes them.
 */
static int list_classes(const char *root, int root_fd, bool hidden, char ***ret, uint32_t *ret_n)
{
	/* The directory the scan walked, by its descriptor (a description of its own for readdir). */
	int fd = openat(root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd < 0 ? NULL : fdopendir(fd);
	char **v = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	int r = 0;

	if (!d) {
		r = -errno;
		if (fd >= 0)
			close(fd);
		return pack__err(r, root, "cannot list directory");
	}
	while (r == 0 && (de = readdir(d))) {
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode))
			continue;
		if (de->d_name[0] == '.' && !hidden) {
			fprintf(stderr, "batchd-pack: %s/%s: hidden directory, not a class; torchvision's "
					"ImageFolder counts it as one, moving the labels of the classes "
					"after it (--include-hidden counts it too)\n", root, de->d_name);
			continue;
		}
		if (n == cap) {
			char **w = realloc(v, (cap = cap * 2 + 16) * sizeof(*v));

			if (!w) {
				r = -ENOMEM;
				break;
			}
			v = w;
		}
		if (!(v[n] = strdup(de->d_name)))
			r = -ENOMEM;
		else
			n++;
	}
	closedir(d);
	if (r == 0 && n > BP_CLASS_MAX)
		r = pack__err(-E2BIG, root, "too many class directories");
	if (r < 0) {
		while (n)
			free(v[--n]);
		free(v);
		return r;
	}
	qsort(v, n, sizeof(*v), by_str);
	*ret = v;
	*ret_n = (uint32_t)n;
	return 0;
}

int pack__labels_scan(pack_inputs *in, pack_input *p)
{
	bp_field *label;
	int r, f;

	if (pack__schema_add(&in->schema, "data", BP_FIELD_BYTES) < 0 ||
	    (f = pack__schema_add(&in->schema, "label", BP_FIELD_INT64)) < 0)
		return -ENOMEM;
	label = &in->schema.fields[f];
	r = list_classes(p->path, p->root_fd, in->fo.include_hidden, &label->classes,
			 &label->class_count);
	if (r < 0)
		return r;
	for (uint64_t i = 0; i < p->count; i++) {
		pack_entry *e = &p->entries[i];
		const char *slash = strchr(e->name, '/');
		char cls[NAME_MAX + 1], *key = cls, **at = NULL;

		if (slash && (size_t)(slash - e->name) <= NAME_MAX) {
			snprintf(cls, sizeof(cls), "%.*s", (int)(slash - e->name), e->name);
			at = bsearch(&key, label->classes, label->class_count, sizeof(char *), by_str);
		}
		if (!at) {
			fprintf(stderr, "batchd-pack: %s/%s: not inside a class directory (--labels "
					"dirname takes DIR/CLASS/.../FILE; move it into one or leave "
					"it out)\n", p->path, e->name);
			return -EINVAL;
		}
		e->vals = calloc(2, sizeof(*e->vals));
		if (!e->vals)
			return -ENOMEM;
		e->vals[0].size = e->size;
		e->vals[1].i64 = at - label->classes;
	}
	return 0;
}

