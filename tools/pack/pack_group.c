/* SPDX-License-Identifier: MIT */
/*
 * pack_group.c - tar archives in the WebDataset convention (create
 * --group-by key): the members that share a key form one sample, and
 * each member's extension names one of its fields.
 *
 * A member "dir/000123.seg.png" has key "dir/000123" (its path up to the
 * first dot of the base name) and extension "seg.png", the field name.
 * Members of a sample are adjacent in the archive, as WebDataset writes
 * and reads them; a key seen again later is refused as a duplicate.
 * Fields are the union of extensions, in bytewise order; "cls" and
 * "label" members must hold a decimal integer and become int64 fields,
 * read at the scan; every other extension is a bytes field, and the
 * sample's bytes are its bytes members laid end to end in schema order,
 * whatever their order in the archive.
 *
 * Thread rules: single-threaded, as pack_input.h.
 */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pack.h"
#include "pack_scan.h"

#define INT_MEMBER_MAX 64 /* bytes of a cls/label member: a decimal int64 and blanks */

/* A member of the sample being scanned; field indexes the extension table. */
typedef struct member {
	uint32_t field;
	uint64_t size;
	int64_t value;
} member;

typedef struct group_scan {
	pack_inputs *in;
	pack_input *p;
	struct archive *a;
	char *exts[BP_FIELD_MAX]; /* extensions in order of first appearance */
	uint32_t nexts;
	member *m;                /* one array per sample, end to end */
	size_t nm, mcap, ecap;
	uint32_t *first;          /* per sample: its first member in m */
	size_t fcap;
	bool warned;              /* of a member's leading '/' (pack__tar_next) */
} group_scan;

static bool int_ext(const char *ext)
{
	return !strcmp(ext, "cls") || !strcmp(ext, "label");
}

/*
 * Split a member path into key and extension: *ret_key_len bytes of path
 * are the key, *ret_ext the extension. @return 0 or -EINVAL (said why).
 */
static int split(const char *tar, const char *path, size_t *ret_key_len, const char **ret_ext)
{
	const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
	const char *dot = strchr(base, '.');

	if (!dot || dot == base || !pack__field_name_ok(dot + 1, strlen(dot + 1))) {
		fprintf(stderr, "batchd-pack: %s:%s: --group-by key takes members named KEY.EXT, "
				"EXT of [A-Za-z0-9_.-] up to %u bytes\n", tar, path, BP_FIELD_NAME_MAX);
		return -EINVAL;
	}
	*ret_key_len = (size_t)(dot - path);
	*ret_ext = dot + 1;
	return 0;
}

/* The index of ext in the extension table, added when new. @return it or a negative errno. */
static int ext_index(group_scan *g, const char *ext)
{
	for (uint32_t i = 0; i < g->nexts; i++) {
		if (!strcmp(g->exts[i], ext))
			return (int)i;
	}
	if (g->nexts == BP_FIELD_MAX) {
		fprintf(stderr, "batchd-pack: %s: more than %u member extensions (fields)\n",
			g->p->path, BP_FIELD_MAX);
		return -E2BIG;
	}
	g->exts[g->nexts] = strdup(ext);
	return g->exts[g->nexts] ? (int)g->nexts++ : -ENOMEM;
}

/* The decimal integer a cls/label member holds. @return 0 or -EINVAL (said why). */
static int int_value(group_scan *g, const char *path, const char *ext, uint64_t size,
		     int64_t *ret)
{
	char buf[INT_MEMBER_MAX + 1];
	la_ssize_t n = 0;
	int r = -EINVAL;

	if (size <= INT_MEMBER_MAX) {
		for (uint64_t got = 0; got < size; got += (uint64_t)n) {
			n = archive_read_data(g->a, buf + got, size - got);
			if (n <= 0) {
				fprintf(stderr, "batchd-pack: %s:%s: cannot read member: %s\n",
					g->p->path, path,
					n < 0 ? archive_error_string(g->a) : "archive ended early");
				return -EIO;
			}
		}
		r = pack__parse_i64(buf, size, true, ret);
	}
	if (r < 0)
		fprintf(stderr, "batchd-pack: %s:%s: a .%s member holds a decimal integer (int64, "
				"blanks around it allowed); this one %s\n", g->p->path, path, ext,
			r == -ERANGE ? "does not fit int64" : "does not");
	return r < 0 ? -EINVAL : 0;
}

/* Start a sample keyed path[0..key_len). @return 0 or -ENOMEM. */
static int sample_begin(group_scan *g, size_t *cap, const char *path, size_t key_len)
{
	char *key = strndup(path, key_len);

	if (g->p->count == g->fcap) {
		uint32_t *f = realloc(g->first, (g->fcap = g->fcap * 2 + 1024) * sizeof(*f));

		if (!f)
			return -ENOMEM;
		g->first = f;
	}
	if (!key || pack__entry_push(g->p, cap, &(pack_entry){ .name = key }) < 0) {
		free(key);
		return -ENOMEM;
	}
	g->first[g->p->count - 1] = (uint32_t)g->nm;
	return 0;
}

/* Add the archive's current member e to the current sample. */
static int add_member(group_scan *g, struct archive_entry *ae, const char *ext)
{
	const char *path = archive_entry_pathname(ae);
	pack_entry *e = &g->p->entries[g->p->count - 1];
	uint64_t size = archive_entry_size_is_set(ae) ? (uint64_t)archive_entry_size(ae) : 0;
	int f = ext_index(g, ext), r;
	member m = { .size = size };

	if (f < 0)
		return f;
	m.field = (uint32_t)f;
	for (size_t i = g->first[g->p->count - 1]; i < g->nm; i++) {
		if (g->m[i].field == m.field) {
			fprintf(stderr, "batchd-pack: %s:%s: a second .%s member for key %s\n",
				g->p->path, path, ext, e->name);
			return -EINVAL;
		}
	}
	if (int_ext(ext) && (r = int_value(g, path, ext, size, &m.value)) < 0)
		return r;
	if (!int_ext(ext) && (e->size += size) > BP_PACK_MAX_SAMPLE) {
		fprintf(stderr, "batchd-pack: %s: key %s: sample of %" PRIu64 " bytes and more is "
				"over the 256 MiB limit\n", g->p->path, e->name, e->size);
		return -E2BIG;
	}
	if (g->nm == g->mcap) {
		member *v = realloc(g->m, (g->mcap = g->mcap * 2 + 1024) * sizeof(*v));

		if (!v)
			return -ENOMEM;
		g->m = v;
	}
	g->m[g->nm++] = m;
	e->members++;
	return 0;
}

/* Every regular member into samples (g->m), in archive order. */
static int read_members(group_scan *g)
{
	struct archive_entry *ae;
	size_t cap = 0;
	int r;

	while ((r = pack__tar_next(g->a, g->p->path, &g->warned, &ae)) == 1) {
		const char *path = archive_entry_pathname(ae), *ext;
		const pack_entry *cur = g->p->count ? &g->p->entries[g->p->count - 1] : NULL;
		size_t key_len;

		if (!path)
			return pack__err(0, g->p->path, "a member has no path");
		if ((r = split(g->p->path, path, &key_len, &ext)) < 0)
			return r;
		if ((!cur || strlen(cur->name) != key_len || memcmp(cur->name, path, key_len)) &&
		    (r = sample_begin(g, &cap, path, key_len)) < 0)
			return r;
		if ((r = add_member(g, ae, ext)) < 0)
			return r;
	}
	if (r == 0 && g->p->count == 0)
		return pack__err(0, g->p->path, "tar archive holds no regular files");
	return r;
}

static int by_ext(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The schema: extensions in bytewise order. rank[i] = schema index of extension i. */
static int build_schema(group_scan *g, uint32_t *rank)
{
	char *sorted[BP_FIELD_MAX];

	memcpy(sorted, g->exts, g->nexts * sizeof(*sorted));
	qsort(sorted, g->nexts, sizeof(*sorted), by_ext);
	for (uint32_t i = 0; i < g->nexts; i++) {
		if (pack__schema_add(&g->in->schema, sorted[i],
				     int_ext(sorted[i]) ? BP_FIELD_INT64 : BP_FIELD_BYTES) < 0)
			return -ENOMEM;
	}
	for (uint32_t i = 0; i < g->nexts; i++)
		rank[i] = (uint32_t)bp_schema_find(&g->in->schema, g->exts[i]);
	return 0;
}

/* A field sample e lacks: empty, --missing-int, or refused naming the key. */
static int fill_missing(group_scan *g, const pack_entry *e, uint32_t f, bp_field_value *v)
{
	const bp_field *fd = &g->in->schema.fields[f];
	const pack_fields_opts *fo = &g->in->fo;

	if (fo->allow_missing && (fd->type == BP_FIELD_BYTES || fo->missing_int_set)) {
		v->i64 = fo->missing_int;
		return 0;
	}
	fprintf(stderr, "batchd-pack: %s: key %s has no .%s member, which other samples have; "
			"%s\n", g->p->path, e->name, fd->name,
		fd->type == BP_FIELD_BYTES ? "add it, or pass --allow-missing to store it empty"
		: fo->allow_missing ? "add it, or pass --missing-int VALUE to give it a value"
				    : "add it, or pass --allow-missing --missing-int VALUE");
	return -EINVAL;
}

/* Each sample's values in schema order, missing fields filled or refused. */
static int settle_values(group_scan *g)
{
	uint32_t rank[BP_FIELD_MAX], n;
	int r;

	if ((r = build_schema(g, rank)) < 0)
		return r;
	n = g->in->schema.count;
	for (uint64_t s = 0; s < g->p->count; s++) {
		pack_entry *e = &g->p->entries[s];
		bool have[BP_FIELD_MAX] = { false };

		e->vals = calloc(n, sizeof(*e->vals));
		if (!e->vals)
			return -ENOMEM;
		for (uint32_t k = 0; k < e->members; k++) {
			const member *m = &g->m[g->first[s] + k];

			have[rank[m->field]] = true;
			e->vals[rank[m->field]].size = m->size;
			e->vals[rank[m->field]].i64 = m->value;
		}
		for (uint32_t f = 0; f < n; f++) {
			if (!have[f] && (r = fill_missing(g, e, f, &e->vals[f])) < 0)
				return r;
		}
	}
	return 0;
}

int pack__group_scan(pack_inputs *in, pack_input *p)
{
	group_scan g = { .in = in, .p = p };
	int r;

	r = pack__tar_open(p->path, &g.a);
	if (r < 0)
		return r;
	r = read_members(&g);
	archive_read_free(g.a);
	/* A key seen twice is members apart, which would read as missing fields: say so first. */
	if (r == 0)
		r = pack__check_keys(in);
	if (r == 0)
		r = settle_values(&g);
	for (uint32_t i = 0; i < g.nexts; i++)
		free(g.exts[i]);
	free(g.m);
	free(g.first);
	return r;
}

int pack__group_read(const pack_inputs *in, const pack_input *p, const pack_entry *e,
		     struct archive *a, uint8_t *dst)
{
	const bp_schema *s = &in->schema;

	for (uint32_t k = 0; k < e->members; k++) {
		struct archive_entry *ae;
		const char *path, *ext;
		uint64_t at = 0;
		size_t key_len;
		int r, f;

		if ((r = pack__tar_next(a, p->path, NULL, &ae)) <= 0)
			return r < 0 ? r : pack__err(0, p->path, "archive changed while packing");
		path = archive_entry_pathname(ae);
		if (!path || split(p->path, path, &key_len, &ext) < 0 ||
		    key_len != strlen(e->name) || memcmp(path, e->name, key_len) ||
		    (f = bp_schema_find(s, ext)) < 0 ||
		    (s->fields[f].type == BP_FIELD_BYTES &&
		     (uint64_t)archive_entry_size(ae) != e->vals[f].size))
			return pack__err(0, p->path, "archive changed while packing");
		if (s->fields[f].type != BP_FIELD_BYTES)
			continue; /* read at the scan */
		for (int g = 0; g < f; g++)
			at += s->fields[g].type == BP_FIELD_BYTES ? e->vals[g].size : 0;
		for (uint64_t got = 0; got < e->vals[f].size;) {
			la_ssize_t n = archive_read_data(a, dst + at + got, e->vals[f].size - got);

			if (n <= 0) {
				fprintf(stderr, "batchd-pack: %s:%s: cannot read member: %s\n",
					p->path, path,
					n < 0 ? archive_error_string(a) : "archive ended early");
				return -EIO;
			}
			got += (uint64_t)n;
		}
	}
	return 0;
}
