/* SPDX-License-Identifier: MIT */
/*
 * pack_input.c - enumerate and read batchd-pack's inputs (see pack_input.h):
 * directories, tar archives member by member, record files; the schema of
 * plain inputs, and the check that keys are unique. Class folders, grouped
 * tars and manifests are scanned by pack_labels.c, pack_group.c and
 * pack_manifest.c, and tar members are found (their names made plain) by
 * pack_tar.c.
 *
 * Files can change between the scan and the packing pass; every read checks
 * it got exactly the size the scan saw, so a changed file stops the pack
 * with a message instead of silently shifting sample boundaries. A tree
 * can change too: a directory swapped for a symlink leading out would
 * have a read by path pack a file from anywhere. So a directory input is
 * opened once, walked by descriptors, and its files (and a manifest's)
 * are read beneath that descriptor following no symlink (pack_beneath.h):
 * what the scan checked is what is read, or the pack stops naming the file.
 */
#include <archive.h>
#include <archive_entry.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pack.h"
#include "pack_beneath.h"
#include "pack_file.h"
#include "pack_input.h"
#include "pack_scan.h"
#include "pack_tokens.h"
#include "units.h"

int pack__err(int err, const char *path, const char *what)
{
	fprintf(stderr, "batchd-pack: %s: %s%s%s\n", path, what, err ? ": " : "",
		err ? strerror(-err) : "");
	return err ? err : -EINVAL;
}

int pack__too_big(const char *path, const char *member, uint64_t size)
{
	char lim[32];

	fprintf(stderr, "batchd-pack: %s%s%s: sample of %llu bytes is over the %s limit\n", path,
		member ? ":" : "", member ? member : "", (unsigned long long)size,
		bp_format_size(BP_PACK_MAX_SAMPLE, lim, sizeof(lim)));
	return -E2BIG;
}

/* The next slot of in->v, zeroed. */
static pack_input *input_push(pack_inputs *in)
{
	pack_input *v = realloc(in->v, (in->n + 1) * sizeof(*v));

	if (!v)
		return NULL;
	in->v = v;
	memset(&v[in->n], 0, sizeof(*v));
	v[in->n].root_fd = -1;
	return &v[in->n++];
}

int pack_inputs_add(pack_inputs *in, const char *path, uint64_t record_size, bool records)
{
	pack_input *p;
	struct stat st;

	if (stat(path, &st) < 0)
		return pack__err(-errno, path, "cannot open input");
	if (records && !S_ISREG(st.st_mode))
		return pack__err(0, path, "--records needs a regular file");
	if (!records && !S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
		return pack__err(0, path, "input is neither a directory nor a tar file");

	p = input_push(in);
	if (!p || !(p->path = strdup(path)))
		return -ENOMEM;
	/* "dir/" and "dir" name the same samples. */
	for (size_t n = strlen(p->path); n > 1 && p->path[n - 1] == '/'; n--)
		p->path[n - 1] = '\0';
	p->kind = records ? INPUT_RECORDS : S_ISDIR(st.st_mode) ? INPUT_DIR : INPUT_TAR;
	p->record_size = record_size;
	return 0;
}

int pack_inputs_add_manifest(pack_inputs *in, const char *path)
{
	size_t len = strlen(path);
	pack_input *p;
	struct stat st;

	if (stat(path, &st) < 0)
		return pack__err(-errno, path, "cannot open manifest");
	if (!S_ISREG(st.st_mode))
		return pack__err(0, path, "a manifest is a regular .csv or .jsonl file");
	if (!(len > 4 && !strcmp(path + len - 4, ".csv")) &&
	    !(len > 6 && !strcmp(path + len - 6, ".jsonl")))
		return pack__err(0, path, "a manifest's name ends in .csv or .jsonl (its format)");
	p = input_push(in);
	if (!p || !(p->path = strdup(path)))
		return -ENOMEM;
	p->kind = INPUT_MANIFEST;
	return 0;
}

int pack_inputs_add_column(pack_inputs *in, const char *spec)
{
	const char *colon = strrchr(spec, ':');
	pack_column *v;
	uint32_t type;

	type = colon ? bp_field_type_parse(colon + 1) : 0;
	if (!colon || !pack__field_name_ok(spec, (size_t)(colon - spec)) || type == 0 ||
	    type == BP_FIELD_BYTES) {
		fprintf(stderr, "batchd-pack: --column '%s': expected NAME:TYPE, NAME of "
				"[A-Za-z0-9_.-] (up to %u bytes), TYPE one of int64, float32, "
				"float64, str\n", spec, BP_FIELD_NAME_MAX);
		return -EINVAL;
	}
	for (size_t i = 0; i < in->fo.ncolumns; i++) {
		if (strlen(in->fo.columns[i].name) == (size_t)(colon - spec) &&
		    !memcmp(in->fo.columns[i].name, spec, (size_t)(colon - spec))) {
			fprintf(stderr, "batchd-pack: --column '%s': column given twice\n", spec);
			return -EINVAL;
		}
	}
	v = realloc(in->fo.columns, (in->fo.ncolumns + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	in->fo.columns = v;
	v[in->fo.ncolumns].type = type;
	v[in->fo.ncolumns].name = strndup(spec, (size_t)(colon - spec));
	if (!v[in->fo.ncolumns].name)
		return -ENOMEM;
	in->fo.ncolumns++;
	return 0;
}

int pack__entry_push(pack_input *in, size_t *cap, const pack_entry *e)
{
	if (in->count == *cap) {
		size_t n = *cap ? *cap * 2 : 1024;
		pack_entry *v = realloc(in->entries, n * sizeof(*v));

		if (!v)
			return -ENOMEM;
		in->entries = v;
		*cap = n;
	}
	in->entries[in->count++] = *e;
	return 0;
}

/* ---- schemas and values ------------------------------------------------- */

bool pack__field_name_ok(const char *name, size_t len)
{
	if (len == 0 || len > BP_FIELD_NAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		if (!isalnum((unsigned char)name[i]) && !strchr("_.-", name[i]))
			return false;
	}
	return true;
}

int pack__schema_add(bp_schema *s, const char *name, uint32_t type)
{
	bp_field *v = realloc(s->fields, (s->count + 1) * sizeof(*v));

	if (!v)
		return -ENOMEM;
	s->fields = v;
	memset(&v[s->count], 0, sizeof(*v));
	snprintf(v[s->count].name, sizeof(v[s->count].name), "%s", name);
	v[s->count].type = type;
	return (int)s->count++;
}

void pack__schema_free(bp_schema *s)
{
	for (uint32_t f = 0; s->fields && f < s->count; f++) {
		for (uint32_t c = 0; s->fields[f].classes && c < s->fields[f].class_count; c++)
			free(s->fields[f].classes[c]);
		free(s->fields[f].classes);
	}
	free(s->fields);
	memset(s, 0, sizeof(*s));
}

int pack__parse_i64(const char *s, size_t len, bool trim, int64_t *ret)
{
	char buf[32], *end;
	long long v;

	while (trim && len && isspace((unsigned char)*s)) {
		s++;
		len--;
	}
	while (trim && len && isspace((unsigned char)s[len - 1]))
		len--;
	if (len == 0 || len >= sizeof(buf))
		return len ? -ERANGE : -EINVAL;
	memcpy(buf, s, len);
	buf[len] = '\0';
	/* strtoll alone would take leading blanks and a "+". */
	if (!isdigit((unsigned char)buf[buf[0] == '-']))
		return -EINVAL;
	errno = 0;
	v = strtoll(buf, &end, 10);
	if (*end)
		return -EINVAL;
	if (errno == ERANGE)
		return -ERANGE;
	*ret = v;
	return 0;
}

/* ---- directories -------------------------------------------------------- */

/*
 * The walk goes by descriptors, never by path: the input's directory is
 * opened once (p->root_fd) and each subdirectory relative to its parent
 * with O_NOFOLLOW, so a directory swapped for a symlink mid-scan is an
 * error rather than a way out of the tree, and the reads (read_file)
 * open every file beneath the same root descriptor, following no symlink.
 *
 * Nothing is left out without a word: a symlink, a FIFO, a socket or a
 * device is named and left out (never opened: opening a FIFO blocks until
 * a writer comes). Each regular file is opened once here, so that one
 * that cannot be read stops the pack before any work rather than an hour
 * into it, or with --on-error=skip is left out before its key and size
 * count. What is left out is said once the walk is done, in bytewise
 * order of path as the samples are, not in the file system's order; with
 * --on-error=fail the first file that cannot be read in that order fails
 * the pack. Names starting with '.' (.DS_Store, .git, .ipynb_checkpoints)
 * are ignored and counted, not walked.
 */
enum note_kind { NOTE_SPECIAL, NOTE_SYMLINK, NOTE_UNREADABLE };

/* Something below the root left out. */
typedef struct tree_note {
	char *rel;               /* its path below the root */
	enum note_kind kind;
	const char *why;         /* a static string */
	int err;                 /* NOTE_UNREADABLE: the negative errno */
} tree_note;

typedef struct tree_walk {
	pack_input *in;
	const pack_fields_opts *fo;
	pack_tally *tally;
	size_t cap;
	tree_note *notes;
	size_t nnotes, notes_cap;
	char rel[PATH_MAX];      /* the path below the root being looked at */
} tree_walk;

/* "ROOT/REL" for a message ("/" as ROOT has its own separator). */
static const char *tree_where(const tree_walk *w, const char *rel, char *buf, size_t len)
{
	size_t n = strlen(w->in->path);

	snprintf(buf, len, "%s%s%s", w->in->path, n && w->in->path[n - 1] == '/' ? "" : "/", rel);
	return buf;
}

static int tree_fail(const tree_walk *w, int err, const char *what)
{
	char where[PATH_MAX + 4096];

	return pack__err(err, tree_where(w, w->rel, where, sizeof(where)), what);
}

/* Note w->rel as left out, to be said after the walk. @return 0 or -ENOMEM. */
static int tree_note_add(tree_walk *w, enum note_kind kind, const char *why, int err)
{
	tree_note *v = w->notes;

	if (w->nnotes == w->notes_cap) {
		v = realloc(v, (w->notes_cap = w->notes_cap * 2 + 16) * sizeof(*v));
		if (!v)
			return -ENOMEM;
		w->notes = v;
	}
	v[w->nnotes] = (tree_note){ .rel = strdup(w->rel), .kind = kind, .why = why, .err = err };
	return v[w->nnotes].rel ? (w->nnotes++, 0) : -ENOMEM;
}

/*
 * w->rel could not be opened or read (err): noted, and said after the
 * walk. Running out of memory or descriptors is the machine's trouble,
 * not the file's, and fails at once whatever --on-error says.
 */
static int tree_unreadable(tree_walk *w, int err, const char *what)
{
	if (err == -ENOMEM || err == -EMFILE || err == -ENFILE)
		return tree_fail(w, err, what);
	return tree_note_add(w, NOTE_UNREADABLE, what, err);
}

/* Why a file that is neither regular, a directory nor a symlink is no sample. */
static const char *special_why(mode_t mode)
{
	if (S_ISFIFO(mode))
		return "not a regular file (a FIFO)";
	if (S_ISSOCK(mode))
		return "not a regular file (a socket)";
	if (S_ISCHR(mode))
		return "not a regular file (a character device)";
	return S_ISBLK(mode) ? "not a regular file (a block device)"
			     : "not a regular file (of no type known)";
}

/* One regular file at w->rel, base in directory dfd, found by fstatat. */
static int tree_file(tree_walk *w, int dfd, const char *base, const struct stat *st)
{
	char *name, where[PATH_MAX + 4096];
	int fd;

	if ((uint64_t)st->st_size > BP_PACK_MAX_SAMPLE)
		return pack__too_big(tree_where(w, w->rel, where, sizeof(where)), NULL,
				     (uint64_t)st->st_size);
	/* O_NONBLOCK: what fstatat saw as a regular file may be a FIFO by now. */
	fd = openat(dfd, base, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return tree_unreadable(w, -errno, "cannot open");
	close(fd);
	name = strdup(w->rel);
	if (!name || pack__entry_push(w->in, &w->cap,
				      &(pack_entry){ .name = name, .size = (uint64_t)st->st_size }) < 0) {
		free(name);
		return -ENOMEM;
	}
	return 0;
}

static int tree_dir(tree_walk *w, int fd, size_t len);

/* The entry base of directory dfd, at w->rel (at: where base starts in it). */
static int tree_entry(tree_walk *w, int dfd, const char *base, size_t at)
{
	struct stat st;
	int sub;

	if (fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return tree_unreadable(w, -errno, "cannot read");
	if (S_ISREG(st.st_mode))
		return tree_file(w, dfd, base, &st);
	if (S_ISDIR(st.st_mode)) {
		/* O_NOFOLLOW: what fstatat saw as a directory may be a symlink by now. */
		sub = openat(dfd, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		return sub < 0 ? tree_unreadable(w, -errno, "cannot read directory")
			       : tree_dir(w, sub, at + strlen(base));
	}
	if (S_ISLNK(st.st_mode))
		return tree_note_add(w, NOTE_SYMLINK, "a symbolic link (nothing below an input is "
				     "followed)", 0);
	return tree_note_add(w, NOTE_SPECIAL, special_why(st.st_mode), 0);
}

/* Every regular file below directory fd (taken), whose path below the root is w->rel[0..len). */
static int tree_dir(tree_walk *w, int fd, size_t len)
{
	DIR *d = fdopendir(fd);
	struct dirent *de;
	int r = 0;

	if (!d) {
		close(fd);
		return tree_fail(w, -errno, "cannot read directory");
	}
	while (r == 0 && (errno = 0, de = readdir(d))) {
		size_t n = strlen(de->d_name), at = len ? len + 1 : 0;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (de->d_name[0] == '.' && !w->fo->include_hidden) {
			w->tally->hidden++;
			continue;
		}
		if (at + n >= sizeof(w->rel)) {
			w->rel[len] = '\0';
			r = tree_fail(w, -ENAMETOOLONG, "cannot walk directory");
			break;
		}
		if (len)
			w->rel[len] = '/';
		memcpy(w->rel + at, de->d_name, n + 1);
		r = tree_entry(w, dirfd(d), de->d_name, at);
	}
	if (r == 0 && errno) {
		w->rel[len] = '\0';
		r = tree_unreadable(w, -errno, "cannot read directory");
	}
	closedir(d);
	return r;
}

static int by_note(const void *a, const void *b)
{
	return strcmp(((const tree_note *)a)->rel, ((const tree_note *)b)->rel);
}

/*
 * Say what the walk left out, in bytewise order of path, and count it;
 * with --on-error=fail, a file that could not be read instead fails the
 * pack, the first named. @return 0 or that file's negative errno.
 */
static int tree_report(tree_walk *w)
{
	char where[PATH_MAX + 4096];
	const tree_note *first = NULL;
	size_t unreadable = 0;

	if (w->nnotes)
		qsort(w->notes, w->nnotes, sizeof(*w->notes), by_note);
	for (size_t i = 0; i < w->nnotes; i++) {
		if (w->notes[i].kind == NOTE_UNREADABLE && !unreadable++)
			first = &w->notes[i];
	}
	if (first && w->fo->on_error == ON_ERROR_FAIL) {
		fprintf(stderr, "batchd-pack: %s: %s: %s (--on-error=skip would leave it out)\n",
			tree_where(w, first->rel, where, sizeof(where)), first->why,
			strerror(-first->err));
		if (unreadable > 1)
			fprintf(stderr, "batchd-pack: %s: and %zu more below it that cannot be read\n",
				w->in->path, unreadable - 1);
		return first->err;
	}
	for (size_t i = 0; i < w->nnotes; i++) {
		const tree_note *t = &w->notes[i];

		w->tally->special += t->kind == NOTE_SPECIAL;
		w->tally->symlinks += t->kind == NOTE_SYMLINK;
		w->tally->unreadable += t->kind == NOTE_UNREADABLE;
		fprintf(stderr, "batchd-pack: %s: left out: %s%s%s\n",
			tree_where(w, t->rel, where, sizeof(where)), t->why, t->err ? ": " : "",
			t->err ? strerror(-t->err) : "");
	}
	return 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(((const pack_entry *)a)->name, ((const pack_entry *)b)->name);
}

static int scan_dir(pack_inputs *all, pack_input *in)
{
	uint64_t hidden = all->tally.hidden;
	tree_walk *w;
	int fd, r;

	/* The input itself may be a symlink: the user named it. Nothing below it is followed. */
	in->root_fd = open(in->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (in->root_fd < 0)
		return pack__err(-errno, in->path, "cannot open directory");
	/* A description of its own: readdir's offset is not the root's to move. */
	fd = openat(in->root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return pack__err(-errno, in->path, "cannot read directory");
	w = calloc(1, sizeof(*w));
	if (!w) {
		close(fd);
		return -ENOMEM;
	}
	w->in = in;
	w->fo = &all->fo;
	w->tally = &all->tally;
	r = tree_dir(w, fd, 0);
	if (r == 0)
		r = tree_report(w);
	for (size_t i = 0; i < w->nnotes; i++)
		free(w->notes[i].rel);
	free(w->notes);
	free(w);
	if (r < 0)
		return r;
	if (in->count == 0 && all->tally.hidden > hidden)
		return pack__err(0, in->path, "directory holds no regular files to pack but hidden "
				 "ones (names starting with '.'; --include-hidden packs them)");
	if (in->count == 0)
		return pack__err(0, in->path, "directory holds no regular files to pack");
	qsort(in->entries, in->count, sizeof(*in->entries), by_name);
	return 0;
}

/* ---- record files --------------------------------------------------------- */

static int scan_records(pack_input *in)
{
	struct stat st;

	if (in->record_size == 0)
		return pack__err(0, in->path, "record size must be at least 1 byte");
	if (in->record_size > BP_PACK_MAX_SAMPLE)
		return pack__too_big(in->path, NULL, in->record_size);
	if (stat(in->path, &st) < 0)
		return pack__err(-errno, in->path, "cannot stat");
	if (st.st_size == 0)
		return pack__err(0, in->path, "record file is empty");
	if ((uint64_t)st.st_size % in->record_size) {
		fprintf(stderr, "batchd-pack: %s: size %lld is not a multiple of the record size %llu\n",
			in->path, (long long)st.st_size, (unsigned long long)in->record_size);
		return -EINVAL;
	}
	in->count = (uint64_t)st.st_size / in->record_size;
	return 0;
}

/* Sample i of input p: its bytes. */
static uint64_t size_of(const pack_input *p, uint64_t i)
{
	return p->kind == INPUT_RECORDS ? p->record_size
	       : p->kind == INPUT_TOKENS ? pack_tokens_size(p, i) : p->entries[i].size;
}

uint64_t pack_inputs_size(const pack_inputs *in, uint64_t i)
{
	for (size_t k = 0; k < in->n; k++) {
		const pack_input *p = &in->v[k];

		if (i < p->count)
			return size_of(p, i);
		i -= p->count;
	}
	return 0;
}

void pack_inputs_fields(const pack_inputs *in, uint64_t i, bp_field_value *vals,
			const char **ret_key, size_t *ret_len)
{
	for (size_t k = 0; k < in->n; k++) {
		const pack_input *p = &in->v[k];
		const pack_entry *e;

		if (i >= p->count) {
			i -= p->count;
			continue;
		}
		e = &p->entries[i];
		if (e->vals)
			memcpy(vals, e->vals, in->schema.count * sizeof(*vals));
		else
			vals[0] = (bp_field_value){ .size = e->size };
		*ret_key = in->keys ? (e->key ? e->key : e->name) : NULL;
		*ret_len = in->keys ? strlen(*ret_key) : 0;
		return;
	}
}

/* ---- keys ------------------------------------------------------------------ */

typedef struct key_ref {
	const char *key;
	const pack_input *p;
	const pack_entry *e;
	uint64_t id;             /* sample order, so duplicates are named first one first */
} key_ref;

static int by_key(const void *a, const void *b)
{
	const key_ref *x = a, *y = b;
	int c = strcmp(x->key, y->key);

	return c ? c : x->id < y->id ? -1 : x->id > y->id;
}

/* "DIR/NAME", "TAR:MEMBER" (grouped: "TAR:KEY"), "MANIFEST:LINE" for a key's message. */
static void key_where(const key_ref *k, char *buf, size_t len)
{
	if (k->p->kind == INPUT_MANIFEST)
		snprintf(buf, len, "%s:%u", k->p->path, k->e->line);
	else if (k->p->kind == INPUT_DIR)
		snprintf(buf, len, "%s/%s", k->p->path, k->e->name);
	else
		snprintf(buf, len, "%s:%s", k->p->path, k->e->name);
}

/* A key must be 1..BP_KEY_MAX bytes; say which sample's is not. */
static int key_check(const key_ref *k)
{
	size_t len = strlen(k->key);
	char where[4352];

	if (len >= 1 && len <= BP_KEY_MAX)
		return 0;
	key_where(k, where, sizeof(where));
	fprintf(stderr, "batchd-pack: %s: key '%.64s%s' is %zu bytes; keys are 1 to %u bytes "
			"(or pass --no-keys)\n", where, k->key, len > 64 ? "..." : "", len, BP_KEY_MAX);
	return -EINVAL;
}

int pack__check_keys(const pack_inputs *in)
{
	char a[4352], b[4352];
	uint64_t n = 0, total = 1;
	key_ref *v;
	int r = 0;

	for (size_t k = 0; k < in->n; k++)
		total += in->v[k].count;
	v = malloc(total * sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (size_t k = 0; k < in->n; k++) {
		for (uint64_t i = 0; i < in->v[k].count; i++) {
			const pack_entry *e = &in->v[k].entries[i];

			v[n] = (key_ref){ .key = e->key ? e->key : e->name, .p = &in->v[k], .e = e,
					  .id = n };
			if ((r = key_check(&v[n++])) < 0)
				goto out;
		}
	}
	qsort(v, n, sizeof(*v), by_key);
	for (uint64_t i = 1; i < n; i++) {
		if (strcmp(v[i - 1].key, v[i].key))
			continue;
		key_where(&v[i - 1], a, sizeof(a));
		key_where(&v[i], b, sizeof(b));
		if (in->fo.layout == LAYOUT_GROUPS)
			fprintf(stderr, "batchd-pack: %s: duplicate key '%s': a sample's members "
					"must be adjacent in the archive\n", v[i].p->path, v[i].key);
		else
			fprintf(stderr, "batchd-pack: duplicate key '%s' (%s and %s); keys must be "
					"unique: rename one, or pass --no-keys\n", v[i].key, a, b);
		r = -EEXIST;
		goto out;
	}
out:
	free(v);
	return r;
}

/* ---- the scan ----------------------------------------------------------------- */

static void entry_name(const pack_inputs *in, const pack_input *p, uint64_t i,
		       const char *member, char *buf, size_t len);

/*
 * Warn of each sample of p whose bytes are a file or member of 0 bytes,
 * and count them: it is packed, but an empty image or record fails
 * whoever reads it, far from here; the warning names it while it can be
 * fixed. A grouped tar's empty fields are --allow-missing's business.
 */
static void note_empty(pack_inputs *in, const pack_input *p)
{
	char name[4352];

	if (p->kind == INPUT_RECORDS || p->kind == INPUT_TOKENS ||
	    (p->kind == INPUT_TAR && in->fo.layout == LAYOUT_GROUPS))
		return;
	for (uint64_t i = 0; i < p->count; i++) {
		if (p->entries[i].size)
			continue;
		in->tally.empty++;
		if (in->fo.allow_empty)
			continue;
		entry_name(in, p, i, NULL, name, sizeof(name));
		fprintf(stderr, "batchd-pack: warning: %s: empty (0 bytes), packed as an empty "
				"sample (--allow-empty: no warning)\n", name);
	}
}

static int scan_one(pack_inputs *in, pack_input *p)
{
	int r;

	switch (p->kind) {
	case INPUT_DIR:
		r = scan_dir(in, p);
		return r == 0 && in->fo.layout == LAYOUT_LABELS ? pack__labels_scan(in, p) : r;
	case INPUT_TAR:
		return in->fo.layout == LAYOUT_GROUPS ? pack__group_scan(in, p) : pack__tar_scan(p);
	case INPUT_MANIFEST:
		return pack__manifest_scan(in, p);
	case INPUT_RECORDS:
		return scan_records(p);
	case INPUT_TOKENS:
		return pack_tokens_scan(in, p);
	}
	return -EINVAL;
}

/* Plain files and members: one bytes field "data" and keys, unless records have none. */
static int settle_plain(pack_inputs *in)
{
	for (size_t k = 0; k < in->n; k++) {
		if (in->v[k].kind == INPUT_RECORDS)
			return 0;
	}
	if (in->fo.no_keys)
		return 0;
	in->fields = in->keys = true;
	return pack__schema_add(&in->schema, "data", BP_FIELD_BYTES) < 0 ? -ENOMEM : 0;
}

int pack_inputs_scan(pack_inputs *in)
{
	int r;

	in->samples = in->raw_bytes = in->max_sample = 0;
	in->tally = (pack_tally){ 0 };
	for (size_t k = 0; k < in->n; k++) {
		pack_input *p = &in->v[k];

		if ((r = scan_one(in, p)) < 0)
			return r;
		note_empty(in, p);
		in->samples += p->count;
		if (p->kind == INPUT_RECORDS) {
			in->raw_bytes += p->count * p->record_size;
			if (p->record_size > in->max_sample)
				in->max_sample = p->record_size;
			continue;
		}
		if (p->kind == INPUT_TOKENS) {
			uint64_t bytes, max;

			pack_tokens_totals(p, &bytes, &max);
			in->raw_bytes += bytes;
			in->max_sample = max > in->max_sample ? max : in->max_sample;
			continue;
		}
		for (uint64_t i = 0; i < p->count; i++) {
			in->raw_bytes += p->entries[i].size;
			if (p->entries[i].size > in->max_sample)
				in->max_sample = p->entries[i].size;
		}
	}
	if (in->tok.width) {
		/* A token pack's schema and TOKENS section are the writer's (set_tokens). */
		return in->samples ? 0 : pack__err(0, in->v[0].path, "no documents to pack");
	} else if (in->fo.layout == LAYOUT_FILES) {
		r = settle_plain(in);
	} else {
		in->fields = true;
		in->keys = !in->fo.no_keys;
		r = 0;
	}
	/* A grouped tar's keys were checked before its values (pack__group_scan). */
	return r == 0 && in->keys && in->fo.layout != LAYOUT_GROUPS ? pack__check_keys(in) : r;
}

void pack_inputs_free(pack_inputs *in)
{
	for (size_t k = 0; k < in->n; k++) {
		pack_input *p = &in->v[k];

		for (uint64_t i = 0; p->entries && i < p->count; i++) {
			pack_entry *e = &p->entries[i];

			for (uint32_t f = 0; e->vals && f < in->schema.count; f++) {
				if (in->schema.fields[f].type == BP_FIELD_STR)
					free((void *)e->vals[f].data);
			}
			free(e->vals);
			free(e->name);
			free(e->key);
		}
		free(p->entries);
		free(p->path);
		free(p->root);
		pack_tokens_free(p);
		if (p->root_fd >= 0)
			close(p->root_fd);
	}
	for (size_t c = 0; c < in->fo.ncolumns; c++)
		free(in->fo.columns[c].name);
	free(in->fo.columns);
	pack__schema_free(&in->schema);
	free(in->v);
	memset(in, 0, sizeof(*in));
}

/* ---- iteration ------------------------------------------------------------ */

struct pack_iter {
	const pack_inputs *in;
	size_t input;            /* current input */
	uint64_t i;              /* sample within it; valid after next() */
	bool started;
	int fd;                  /* INPUT_RECORDS: the file; INPUT_DIR, INPUT_MANIFEST: the root */
	struct archive *tar;
	struct archive_entry *entry;
	uint32_t unread;         /* grouped tar: members of the current sample not yet read */
	pack_tokens_reader *tokens; /* INPUT_TOKENS */
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
	pack_tokens_close(it->tokens);
	it->tokens = NULL;
	it->started = false;
	it->unread = 0;
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
		return pack__tar_open(p->path, &it->tar);
	if (p->kind == INPUT_TOKENS)
		return pack_tokens_open(it->in, p, &it->tokens);
	/* A directory's files are read beneath the descriptor the scan walked, never by path. */
	if (p->kind != INPUT_RECORDS) {
		it->fd = fcntl(p->root_fd, F_DUPFD_CLOEXEC, 0);
		return it->fd < 0 ? pack__err(-errno, p->path, "cannot open input") : 0;
	}
	it->fd = open(p->path, O_RDONLY | O_CLOEXEC);
	if (it->fd < 0)
		return pack__err(-errno, p->path, "cannot open input");
	return 0;
}

static bool grouped(const pack_iter *it, const pack_input *p)
{
	return p->kind == INPUT_TAR && it->in->fo.layout == LAYOUT_GROUPS;
}

/* Position the archive at the current sample's member (a grouped sample's are read by read()). */
static int iter_tar_step(pack_iter *it, const pack_input *p)
{
	int r;

	if (grouped(it, p)) {
		/* Skip what a skipped sample left unread; libarchive skips its data. */
		for (; it->unread; it->unread--) {
			if ((r = pack__tar_next(it->tar, p->path, NULL, &it->entry)) <= 0)
				return r < 0 ? r : pack__err(0, p->path, "archive changed while packing");
		}
		it->unread = p->entries[it->i].members;
		return 0;
	}
	r = pack__tar_next(it->tar, p->path, NULL, &it->entry);
	if (r < 0)
		return r;
	return r == 0 ? pack__err(0, p->path, "archive changed while packing") : 0;
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
			if (p->kind == INPUT_TAR && (r = iter_tar_step(it, p)) < 0)
				return r;
			*ret_size = size_of(p, it->i);
			return 1;
		}
		iter_close_input(it);
		it->input++;
	}
	return 0;
}

/*
 * Sample i of input p by name into buf; member: a plain tar's member path
 * as the archive spells it (NULL: as the scan made it plain).
 */
static void entry_name(const pack_inputs *in, const pack_input *p, uint64_t i,
		       const char *member, char *buf, size_t len)
{
	if (p->kind == INPUT_DIR)
		snprintf(buf, len, "%s/%s", p->path, p->entries[i].name);
	else if (p->kind == INPUT_TOKENS)
		pack_tokens_name(p, i, buf, len);
	else if (p->kind == INPUT_MANIFEST)
		snprintf(buf, len, "%s/%s (%s:%u)", p->root, p->entries[i].name, p->path,
			 p->entries[i].line);
	else if (p->kind == INPUT_TAR && in->fo.layout == LAYOUT_GROUPS)
		snprintf(buf, len, "%s: key %s", p->path, p->entries[i].name);
	else if (p->kind == INPUT_TAR)
		snprintf(buf, len, "%s:%s", p->path, member ? member : p->entries[i].name);
	else
		snprintf(buf, len, "%s: record %llu", p->path, (unsigned long long)i);
}

const char *pack_iter_name(pack_iter *it)
{
	const pack_input *p = &it->in->v[it->input];

	entry_name(it->in, p, it->i, p->kind == INPUT_TAR && !grouped(it, p)
		   ? archive_entry_pathname(it->entry) : NULL, it->name, sizeof(it->name));
	return it->name;
}

void pack_inputs_name(const pack_inputs *in, uint64_t id, char *buf, size_t len)
{
	uint64_t i = id;

	for (size_t k = 0; k < in->n; k++) {
		if (i < in->v[k].count) {
			entry_name(in, &in->v[k], i, NULL, buf, len);
			return;
		}
		i -= in->v[k].count;
	}
	snprintf(buf, len, "sample %llu", (unsigned long long)id);
}

/* Why a file the scan found cannot be opened now. */
static int open_failed(pack_iter *it, int err)
{
	const char *why = "cannot open";

	if (err == -ELOOP)
		why = "cannot open: a symlink is on its path now, which the scan did not see (the "
		      "input changed while packing; nothing below an input is read through a symlink)";
	else if (err == -ENOTDIR)
		why = "cannot open: a directory on its path is no longer one (the input changed "
		      "while packing)";
	return pack__err(err, pack_iter_name(it), why);
}

static int read_file(pack_iter *it, const pack_input *p, uint8_t *dst)
{
	uint64_t size = p->entries[it->i].size;
	struct stat st;
	uint8_t probe;
	int fd, r;

	/*
	 * Beneath the root the scan walked, following no symlink (manifest
	 * paths were resolved to real names below it at the scan): what was
	 * checked is what is read. O_NONBLOCK: a FIFO swapped in does not hang.
	 */
	fd = pack_open_beneath(it->fd, p->entries[it->i].name, O_RDONLY | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return open_failed(it, fd);
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return pack__err(0, pack_iter_name(it), "no longer a regular file (the input "
			"changed while packing)");
	}
	r = bp_pread_full(fd, dst, size, 0);
	/* One more byte must not exist: the file must not have grown either. */
	if (r == 0 && pread(fd, &probe, 1, (off_t)size) != 0)
		r = -ENODATA;
	close(fd);
	if (r == -ENODATA)
		return pack__err(0, pack_iter_name(it), "file changed size while packing");
	if (r < 0)
		return pack__err(r, pack_iter_name(it), "cannot read");
	return 0;
}

int pack_iter_read(pack_iter *it, uint8_t *dst)
{
	const pack_input *p = &it->in->v[it->input];
	int r;

	switch (p->kind) {
	case INPUT_DIR:
	case INPUT_MANIFEST:
		return read_file(it, p, dst);
	case INPUT_TOKENS:
		return pack_tokens_read(it->tokens, it->i, dst);
	case INPUT_RECORDS:
		r = bp_pread_full(it->fd, dst, p->record_size, it->i * p->record_size);
		return r < 0 ? pack__err(r == -ENODATA ? -EIO : r, pack_iter_name(it), "cannot read")
			     : 0;
	case INPUT_TAR:
		if (grouped(it, p)) {
			r = pack__group_read(it->in, p, &p->entries[it->i], it->tar, dst);
			it->unread = 0;
			return r;
		}
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
