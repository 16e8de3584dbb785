/* SPDX-License-Identifier: MIT */
/*
 * pack_tokens.c - the token inputs of `batchd-pack create --tokens` (see
 * pack_tokens.h): which file an input is, the scan that finds and checks
 * its documents, and the reads of the packing pass.
 *
 * Token files are large (tens of GB), so nothing here holds a file: the
 * scan streams it in 4 MiB reads and keeps 16 bytes a document, and the
 * packing pass reads one document at a time where the scan found it. Only
 * a Megatron .idx is read whole, for the scan (12 bytes a sequence), and a
 * JSONL line at a time.
 *
 * What the scan saw is what is packed: the packing pass reads each
 * document again and checks its ids and boundaries as the scan did (a
 * flat file's documents still end at the --eos id, an appended id is still
 * due), so a file that changes while packing stops the pack naming it
 * instead of shifting documents.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "endian.h"
#include "pack.h"
#include "pack_file.h"
#include "pack_scan.h"
#include "pack_tokens.h"
#include "pack_tokfile.h"
#include "units.h"

#define CHUNK (UINT64_C(4) << 20) /* bytes a read of the scan */
#define EOS_ADDED (UINT32_C(1) << 31)

enum src_kind { SRC_FLAT, SRC_MEGATRON, SRC_NPY, SRC_JSONL };

/* One document: where its ids start in the file, how many, whether --eos follows them. */
typedef struct tok_doc {
	uint64_t src;            /* byte offset of its first id; a JSONL line's first byte */
	uint32_t n;              /* ids in the file */
	uint32_t aux;            /* EOS_ADDED; below it a JSONL line's length */
} tok_doc;

struct pack_tokens_src {
	enum src_kind kind;
	char *path;              /* the file the ids are read from: .bin, .npy, .jsonl */
	char *idx_path;          /* SRC_MEGATRON: the index */
	enum pack_tok_type type; /* the ids' type in path (not JSONL) */
	uint32_t width;          /* the pack's: 2 or 4 */
	bool split;              /* a stream cut after each --eos id (flat .bin, 1-D .npy) */
	uint64_t data_offset, data_end; /* the ids' bytes in path */
	uint64_t file_size;      /* path's size at the scan */
	tok_doc *docs;
	uint32_t *lines;         /* SRC_JSONL: each document's line */
	uint64_t ndocs, cap;
	uint64_t bytes, max;     /* the documents' bytes in the pack, and the largest's */
};

__attribute__((format(printf, 2, 3)))
static int fail(int err, const char *fmt, ...)
{
	va_list ap;

	fputs("batchd-pack: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return err;
}

static bool ends_with(const char *s, const char *tail)
{
	size_t n = strlen(s), t = strlen(tail);

	return n > t && strcmp(s + n - t, tail) == 0;
}

static bool regular(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* ---- which input ------------------------------------------------------------------ */

/* prefix + tail, or NULL (out of memory). */
static char *with_tail(const char *prefix, size_t len, const char *tail)
{
	char *s;

	return asprintf(&s, "%.*s%s", (int)len, prefix, tail) < 0 ? NULL : s;
}

/* A Megatron pair of prefix[0..len): both files there. @return 0, -ENOENT (not both), -ENOMEM. */
static int megatron(struct pack_tokens_src *t, const char *prefix, size_t len)
{
	t->path = with_tail(prefix, len, ".bin");
	t->idx_path = with_tail(prefix, len, ".idx");
	if (!t->path || !t->idx_path)
		return -ENOMEM;
	if (!regular(t->path) || !regular(t->idx_path))
		return -ENOENT;
	t->kind = SRC_MEGATRON;
	return 0;
}

/* What path is: a .npy, a .jsonl, a Megatron pair, a flat .bin. @return 0 or -errno (said). */
static int classify(const pack_inputs *in, struct pack_tokens_src *t, const char *path)
{
	size_t n = strlen(path);
	int r;

	if (ends_with(path, ".npy") || ends_with(path, ".jsonl")) {
		if (!regular(path))
			return fail(-ENOENT, "%s: no such file", path);
		t->kind = ends_with(path, ".npy") ? SRC_NPY : SRC_JSONL;
		t->path = strdup(path);
		return t->path ? 0 : -ENOMEM;
	}
	if (ends_with(path, ".idx") || ends_with(path, ".bin")) {
		r = megatron(t, path, n - 4);
		if (r != -ENOENT)
			return r;
		if (ends_with(path, ".idx"))
			return fail(-ENOENT, "%s: a Megatron index needs its %s beside it", path,
				    t->path);
		if (!regular(path))
			return fail(-ENOENT, "%s: no such file", path);
		if (in->tok.eos == BP_TOKENS_NO_EOS)
			return fail(-EINVAL, "%s: a flat token file has no document boundaries: give "
				    "--eos ID (the id that ends each document), or pack a .idx/.jsonl",
				    path);
		free(t->path);
		t->path = strdup(path);
		t->kind = SRC_FLAT;
		return t->path ? 0 : -ENOMEM;
	}
	r = megatron(t, path, n);
	if (r == -ENOENT)
		return fail(-EINVAL, "%s: not a token input: a flat .bin, a Megatron PREFIX (of "
			    "PREFIX.bin and PREFIX.idx, or either file), a .npy or a .jsonl", path);
	return r;
}

int pack_tokens_add(pack_inputs *in, const char *path)
{
	struct pack_tokens_src *t = calloc(1, sizeof(*t));
	pack_input *v;
	int r;

	if (!t)
		return -ENOMEM;
	t->width = in->tok.width;
	r = classify(in, t, path);
	v = r == 0 ? realloc(in->v, (in->n + 1) * sizeof(*v)) : NULL;
	if (!v) {
		free(t->path);
		free(t->idx_path);
		free(t);
		return r < 0 ? r : -ENOMEM;
	}
	in->v = v;
	v[in->n] = (pack_input){ .kind = INPUT_TOKENS, .path = strdup(path), .root_fd = -1,
				 .tok = t };
	in->n++;
	return v[in->n - 1].path ? 0 : -ENOMEM;
}

void pack_tokens_free(pack_input *p)
{
	struct pack_tokens_src *t = p->tok;

	if (!t)
		return;
	free(t->path);
	free(t->idx_path);
	free(t->docs);
	free(t->lines);
	free(t);
	p->tok = NULL;
}

/* ---- the scan ---------------------------------------------------------------------- */

/* A file read forward in large chunks. */
typedef struct chunks {
	int fd;
	uint8_t *buf;
	uint64_t off, len;       /* buf holds the file's bytes [off, off + len) */
} chunks;

/*
 * Bytes at file offset at (want at most, whole items of item bytes):
 * *ret points at them, *ret_len how many (> 0). @return 0 or -errno.
 */
static int chunk_at(chunks *c, uint64_t at, uint64_t want, size_t item, const uint8_t **ret,
		    uint64_t *ret_len)
{
	uint64_t avail = at >= c->off && at < c->off + c->len ? c->off + c->len - at : 0;
	ssize_t got;

	avail -= avail % item;
	if (!avail) {
		do
			got = pread(c->fd, c->buf, CHUNK, (off_t)at);
		while (got < 0 && errno == EINTR);
		if (got < 0)
			return -errno;
		c->off = at;
		c->len = (uint64_t)got;
		avail = c->len - c->len % item;
		if (!avail)
			return -ENODATA;
	}
	*ret = c->buf + (at - c->off);
	*ret_len = avail < want ? avail : want;
	return 0;
}

/* What the scan of one input works with. */
typedef struct scan {
	pack_inputs *in;
	pack_input *p;
	struct pack_tokens_src *t;
	uint32_t width;
	uint64_t eos, max_ids;   /* ids a document may hold: the sample limit over the width */
	chunks c;
	char why[512];
} scan;

/* A document too large for a sample (n ids, at least). */
static int too_big(const scan *s, const char *where, uint64_t n)
{
	char lim[32];

	return fail(-E2BIG, "%s: a document of %s%" PRIu64 " tokens is over the %s sample limit%s",
		    where, n > s->max_ids ? "over " : "", n > s->max_ids ? s->max_ids : n,
		    bp_format_size(BP_PACK_MAX_SAMPLE, lim, sizeof(lim)),
		    s->t->split ? " (is --eos the id that ends each document?)" : "");
}

/* Document where (n ids at byte src of the file, --eos appended or not) added to the table. */
static int push_doc(scan *s, const char *where, uint64_t src, uint64_t n, bool added,
		    uint32_t aux, uint32_t line)
{
	struct pack_tokens_src *t = s->t;
	uint64_t bytes = (n + added) * s->width;

	if (n + added > s->max_ids)
		return too_big(s, where, n + added);
	if (t->ndocs == t->cap) {
		uint64_t cap = t->cap ? t->cap * 2 : 1024;
		tok_doc *d = realloc(t->docs, cap * sizeof(*d));
		uint32_t *l = t->kind == SRC_JSONL ? realloc(t->lines, cap * sizeof(*l)) : NULL;

		if (d)
			t->docs = d;
		if (l)
			t->lines = l;
		if (!d || (t->kind == SRC_JSONL && !l))
			return -ENOMEM;
		t->cap = cap;
	}
	t->docs[t->ndocs] = (tok_doc){ .src = src, .n = (uint32_t)n,
				       .aux = aux | (added ? EOS_ADDED : 0) };
	if (t->lines)
		t->lines[t->ndocs] = line;
	t->ndocs++;
	t->bytes += bytes;
	if (bytes > t->max)
		t->max = bytes;
	s->in->tally.tokens += n + added;
	s->in->tally.eos_added += added;
	return 0;
}

/* An empty document: refused naming where, or with --allow-empty left out and counted. */
static int empty_doc(scan *s, const char *where)
{
	if (s->in->fo.allow_empty) {
		s->in->tally.empty_docs++;
		return 0;
	}
	return fail(-EINVAL, "%s: an empty document (no token ids); remove it, or pass "
		    "--allow-empty to leave such documents out", where);
}

/*
 * A stream (a flat .bin, a 1-D .npy): documents end after each --eos id,
 * and a last run without one is a document too.
 */
static int scan_split(scan *s)
{
	struct pack_tokens_src *t = s->t;
	size_t item = pack_tok_size(t->type);
	uint64_t at = t->data_offset, start = at, in_doc = 0, doc = 0;
	char where[4200];
	int r;

	while (at < t->data_end) {
		const uint8_t *p;
		uint64_t got, k;

		r = chunk_at(&s->c, at, t->data_end - at, item, &p, &got);
		if (r < 0)
			return fail(r == -ENODATA ? -EIO : r, "%s: cannot read%s", t->path,
				    r == -ENODATA ? ": the file is shorter than at its start" : "");
		k = got / item;
		for (uint64_t i = 0, j; i < k; i = j) {
			for (j = i; j < k && pack_tok_get(t->type, p, j) != s->eos; j++)
				;
			j += j < k; /* the --eos id ends its document */
			snprintf(where, sizeof(where), "%s: document %" PRIu64, t->path, doc);
			if (pack_tok_convert(t->type, p + i * item, j - i, s->width, NULL, in_doc, s->why,
					     sizeof(s->why)) != j - i)
				return fail(-EINVAL, "%s, %s", where, s->why);
			in_doc += j - i;
			if (in_doc > s->max_ids)
				return too_big(s, where, in_doc);
			if (pack_tok_get(t->type, p, j - 1) != s->eos)
				continue;
			r = push_doc(s, where, start, in_doc, false, 0, 0);
			if (r < 0)
				return r;
			start = at + j * item;
			in_doc = 0;
			doc++;
		}
		at += k * item;
	}
	snprintf(where, sizeof(where), "%s: document %" PRIu64, t->path, doc);
	return in_doc ? push_doc(s, where, start, in_doc, false, 0, 0) : 0;
}

/* One document of n ids at byte src (a Megatron sequence, a row of a 2-D .npy), named where. */
static int scan_doc(scan *s, const char *where, uint64_t src, uint64_t n)
{
	struct pack_tokens_src *t = s->t;
	size_t item = pack_tok_size(t->type);
	uint64_t last = 0;
	int r;

	if (n == 0)
		return empty_doc(s, where);
	if (n > s->max_ids)
		return too_big(s, where, n);
	for (uint64_t pos = 0; pos < n;) {
		const uint8_t *p;
		uint64_t got, k;

		r = chunk_at(&s->c, src + pos * item, (n - pos) * item, item, &p, &got);
		if (r < 0)
			return fail(r == -ENODATA ? -EIO : r, "%s: cannot read%s", where,
				    r == -ENODATA ? ": the file ends early" : "");
		k = got / item;
		if (pack_tok_convert(t->type, p, k, s->width, NULL, pos, s->why, sizeof(s->why)) != k)
			return fail(-EINVAL, "%s, %s", where, s->why);
		last = pack_tok_get(t->type, p, k - 1);
		pos += k;
	}
	return push_doc(s, where, src, n, s->eos != BP_TOKENS_NO_EOS && last != s->eos, 0, 0);
}

/* Read all of path into *ret (its size at most limit). @return 0 or -errno (said). */
static int read_whole(const char *path, uint64_t limit, uint8_t **ret, size_t *ret_len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), r;
	struct stat st;
	uint8_t *buf;

	if (fd < 0)
		return fail(-errno, "%s: cannot open: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_size > limit) {
		close(fd);
		return fail(-E2BIG, "%s: over %" PRIu64 " bytes", path, limit);
	}
	buf = malloc(st.st_size ? (size_t)st.st_size : 1);
	r = buf ? bp_pread_full(fd, buf, (size_t)st.st_size, 0) : -ENOMEM;
	close(fd);
	if (r < 0) {
		free(buf);
		return r == -ENOMEM ? r : fail(r == -ENODATA ? -EIO : r, "%s: cannot read", path);
	}
	*ret = buf;
	*ret_len = (size_t)st.st_size;
	return 0;
}

/* A Megatron pair: the index read and checked against the .bin, then each sequence's ids. */
static int scan_megatron(scan *s)
{
	struct pack_tokens_src *t = s->t;
	char where[4200];
	uint8_t *buf = NULL;
	size_t len = 0;
	pack_idx x;
	int r = read_whole(t->idx_path, UINT64_C(1) << 40, &buf, &len);

	if (r < 0)
		return r;
	r = pack_idx_parse(buf, len, t->file_size, t->path, &x, s->why, sizeof(s->why));
	if (r < 0) {
		free(buf);
		return fail(r, "%s: %s", t->idx_path, s->why);
	}
	t->type = x.type;
	t->data_end = t->file_size;
	for (uint64_t i = 0; r == 0 && i < x.sequences; i++) {
		uint64_t off, n;

		pack_idx_sequence(&x, i, &off, &n);
		snprintf(where, sizeof(where), "%s: sequence %" PRIu64, t->path, i);
		r = scan_doc(s, where, off, n);
	}
	free(buf);
	return r;
}

/* A .npy: its header, then a 1-D stream split at --eos or a 2-D array's rows. */
static int scan_npy(scan *s)
{
	struct pack_tokens_src *t = s->t;
	uint64_t want = t->file_size < PACK_NPY_HEADER_MAX ? t->file_size : PACK_NPY_HEADER_MAX;
	char where[4200];
	const uint8_t *p;
	uint64_t got = 0;
	pack_npy a;
	int r = want ? chunk_at(&s->c, 0, want, 1, &p, &got) : -ENODATA;

	if (r < 0 && r != -ENODATA)
		return fail(r, "%s: cannot read", t->path);
	r = pack_npy_parse(got ? p : (const uint8_t *)"", got, t->file_size, &a, s->why,
			   sizeof(s->why));
	if (r < 0)
		return fail(r, "%s: %s", t->path, s->why);
	t->type = a.type;
	t->data_offset = a.data_offset;
	t->data_end = t->file_size;
	if (a.ndim == 1) {
		if (s->eos == BP_TOKENS_NO_EOS)
			return fail(-EINVAL, "%s: a 1-D array is a flat token stream with no document "
				    "boundaries: give --eos ID (the id that ends each document), or "
				    "save the documents as rows of a 2-D array", t->path);
		t->split = true;
		return scan_split(s);
	}
	for (uint64_t row = 0; r == 0 && row < a.rows; row++) {
		snprintf(where, sizeof(where), "%s: row %" PRIu64, t->path, row);
		r = scan_doc(s, where, a.data_offset + row * a.cols * pack_tok_size(a.type), a.cols);
	}
	return r;
}

/* A .jsonl: a document a line, blank lines skipped. */
static int scan_jsonl(scan *s)
{
	struct pack_tokens_src *t = s->t;
	FILE *f = fdopen(dup(s->c.fd), "rb");
	json_tokener *tok = json_tokener_new();
	uint8_t *ids = NULL;
	size_t cap = 0, ids_cap = 0, n;
	char *line = NULL, where[4200];
	uint64_t at = 0;
	uint32_t no = 0;
	ssize_t len;
	int r = f && tok ? 0 : -ENOMEM;

	while (r == 0 && (len = getline(&line, &cap, f)) > 0) {
		uint64_t start = at;
		bool added;

		at += (uint64_t)len;
		no++;
		len -= line[len - 1] == '\n';
		if (strspn(line, " \t\r") >= (size_t)len)
			continue;
		snprintf(where, sizeof(where), "%s:%u", t->path, no);
		r = pack_jsonl_ids(tok, line, (size_t)len, s->width, s->max_ids, &ids, &ids_cap, &n,
				   s->why, sizeof(s->why));
		if (r == -EINVAL)
			r = fail(r, "%s: %s", where, s->why);
		else if (r == -E2BIG)
			r = too_big(s, where, s->max_ids + 1);
		else if (r == 0 && n == 0)
			r = empty_doc(s, where);
		else if (r == 0) {
			added = s->eos != BP_TOKENS_NO_EOS &&
				pack_tok_get(pack_tok_of_width(s->width), ids, n - 1) != s->eos;
			r = push_doc(s, where, start, n, added, (uint32_t)len, no);
		}
	}
	if (r == 0 && f && ferror(f))
		r = fail(-EIO, "%s: cannot read", t->path);
	if (f)
		fclose(f);
	json_tokener_free(tok);
	free(line);
	free(ids);
	return r;
}

int pack_tokens_scan(pack_inputs *in, pack_input *p)
{
	struct pack_tokens_src *t = p->tok;
	scan s = { .in = in, .p = p, .t = t, .width = in->tok.width, .eos = in->tok.eos,
		   .max_ids = BP_PACK_MAX_SAMPLE / in->tok.width };
	struct stat st;
	int r = 0;

	s.c.fd = open(t->path, O_RDONLY | O_CLOEXEC);
	if (s.c.fd < 0)
		return fail(-errno, "%s: cannot open: %s", t->path, strerror(errno));
	if (fstat(s.c.fd, &st) < 0 || !S_ISREG(st.st_mode))
		r = fail(-EINVAL, "%s: not a regular file", t->path);
	t->file_size = (uint64_t)st.st_size;
	t->type = pack_tok_of_width(s.width);
	t->data_end = t->file_size;
	s.c.buf = r == 0 ? malloc(CHUNK) : NULL;
	if (r == 0 && !s.c.buf)
		r = -ENOMEM;
	posix_fadvise(s.c.fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	if (r == 0 && t->kind == SRC_FLAT && t->file_size % s.width)
		r = fail(-EINVAL, "%s: size %" PRIu64 " is not a multiple of %u bytes: not a flat "
			 "file of %s ids (--tokens), or truncated", t->path, t->file_size, s.width,
			 pack_tok_name(t->type));
	if (r == 0 && t->kind == SRC_FLAT)
		t->split = true;
	if (r == 0)
		r = t->kind == SRC_FLAT ? scan_split(&s)
		    : t->kind == SRC_MEGATRON ? scan_megatron(&s)
		    : t->kind == SRC_NPY ? scan_npy(&s) : scan_jsonl(&s);
	free(s.c.buf);
	close(s.c.fd);
	p->count = t->ndocs;
	return r;
}

uint64_t pack_tokens_size(const pack_input *p, uint64_t i)
{
	const tok_doc *d = &p->tok->docs[i];

	return ((uint64_t)d->n + !!(d->aux & EOS_ADDED)) * p->tok->width;
}

void pack_tokens_totals(const pack_input *p, uint64_t *ret_bytes, uint64_t *ret_max)
{
	*ret_bytes = p->tok->bytes;
	*ret_max = p->tok->max;
}

void pack_tokens_name(const pack_input *p, uint64_t i, char *buf, size_t len)
{
	const struct pack_tokens_src *t = p->tok;

	if (t->kind == SRC_JSONL)
		snprintf(buf, len, "%s:%u", t->path, t->lines[i]);
	else
		snprintf(buf, len, "%s: document %" PRIu64, t->path, i);
}

/* ---- the packing pass --------------------------------------------------------------- */

struct pack_tokens_reader {
	const pack_input *p;
	const struct pack_tokens_src *t;
	uint64_t eos;
	int fd;
	json_tokener *tok;       /* SRC_JSONL */
	uint8_t *buf, *ids;      /* a document as read; a JSONL line's ids */
	size_t buf_cap, ids_cap;
	char why[512];
};

int pack_tokens_open(const pack_inputs *in, const pack_input *p, pack_tokens_reader **ret)
{
	pack_tokens_reader *r = calloc(1, sizeof(*r));
	struct stat st;

	if (!r)
		return -ENOMEM;
	*r = (pack_tokens_reader){ .p = p, .t = p->tok, .eos = in->tok.eos };
	r->fd = open(r->t->path, O_RDONLY | O_CLOEXEC);
	if (r->fd < 0) {
		free(r);
		return fail(-errno, "%s: cannot open: %s", p->tok->path, strerror(errno));
	}
	if (fstat(r->fd, &st) < 0 || (uint64_t)st.st_size != r->t->file_size) {
		pack_tokens_close(r);
		return fail(-EINVAL, "%s: changed size since the scan (the input changed while "
			    "packing)", p->tok->path);
	}
	posix_fadvise(r->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	if (r->t->kind == SRC_JSONL && !(r->tok = json_tokener_new())) {
		pack_tokens_close(r);
		return -ENOMEM;
	}
	*ret = r;
	return 0;
}

void pack_tokens_close(pack_tokens_reader *r)
{
	if (!r)
		return;
	if (r->fd >= 0)
		close(r->fd);
	if (r->tok)
		json_tokener_free(r->tok);
	free(r->buf);
	free(r->ids);
	free(r);
}

/* Document i, n ids of the pack's width at ids, against what the scan saw of it. */
static bool as_scanned(const pack_tokens_reader *r, uint64_t i, const uint8_t *ids, uint64_t n)
{
	const struct pack_tokens_src *t = r->t;
	enum pack_tok_type w = pack_tok_of_width(t->width);
	bool last_eos = pack_tok_get(w, ids, n - 1) == r->eos;

	if (!t->split)
		return !!(t->docs[i].aux & EOS_ADDED) == (r->eos != BP_TOKENS_NO_EOS && !last_eos);
	for (uint64_t k = 0; k + 1 < n; k++)
		if (pack_tok_get(w, ids, k) == r->eos)
			return false;
	/* A stream's documents end with the id, but for its last, which may run without. */
	return last_eos || i + 1 == t->ndocs;
}

/* A JSONL document's line read and parsed again: its ids into r->ids. */
static int read_line(pack_tokens_reader *r, uint64_t i, const char *name)
{
	const tok_doc *d = &r->t->docs[i];
	size_t len = d->aux & ~EOS_ADDED, n = 0;
	int err = bp_buf_reserve(&r->buf, &r->buf_cap, len);

	if (err == 0)
		err = bp_pread_full(r->fd, r->buf, len, d->src);
	if (err == 0)
		err = pack_jsonl_ids(r->tok, (const char *)r->buf, len, r->t->width, d->n, &r->ids,
				     &r->ids_cap, &n, r->why, sizeof(r->why));
	if (err == -ENOMEM)
		return err;
	if (err == 0 && n == d->n)
		return 0;
	return fail(err == -ENODATA ? -EIO : -EINVAL, "%s: not the line the scan read (the input "
		    "changed while packing)%s%s", name, err == -EINVAL ? ": " : "",
		    err == -EINVAL ? r->why : "");
}

int pack_tokens_read(pack_tokens_reader *r, uint64_t i, uint8_t *dst)
{
	const struct pack_tokens_src *t = r->t;
	const tok_doc *d = &t->docs[i];
	size_t item = pack_tok_size(t->type);
	bool same = t->type == pack_tok_of_width(t->width);
	char name[4200];
	int err = 0;

	pack_tokens_name(r->p, i, name, sizeof(name));
	if (t->kind == SRC_JSONL) {
		err = read_line(r, i, name);
		if (err < 0)
			return err;
		memcpy(dst, r->ids, (size_t)d->n * t->width);
	} else {
		/* Ids already of the pack's width are read in place and checked there. */
		if (!same)
			err = bp_buf_reserve(&r->buf, &r->buf_cap, (size_t)d->n * item);
		if (err == 0)
			err = bp_pread_full(r->fd, same ? dst : r->buf, (size_t)d->n * item, d->src);
		if (err < 0)
			return fail(err == -ENODATA ? -EIO : err, "%s: cannot read%s", name,
				    err == -ENODATA ? ": the file ends early" : "");
		if (pack_tok_convert(t->type, same ? dst : r->buf, d->n, t->width, dst, 0, r->why,
				     sizeof(r->why)) != d->n)
			return fail(-EINVAL, "%s: not the ids the scan read (the input changed while "
				    "packing): %s", name, r->why);
	}
	if (!as_scanned(r, i, dst, d->n))
		return fail(-EINVAL, "%s: its document boundaries are not those the scan found "
			    "(the input changed while packing)", name);
	if (!(d->aux & EOS_ADDED))
		return 0;
	if (t->width == 2) {
		dst[d->n * 2] = (uint8_t)r->eos;
		dst[d->n * 2 + 1] = (uint8_t)(r->eos >> 8);
	} else {
		bp_put_le32(dst + (size_t)d->n * 4, (uint32_t)r->eos);
	}
	return 0;
}
