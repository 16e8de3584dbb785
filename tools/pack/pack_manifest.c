/* SPDX-License-Identifier: MIT */
/*
 * pack_manifest.c - manifests for `batchd-pack create OUT --manifest FILE`:
 * a CSV file (RFC 4180: a header row, quoted fields, "" for a quote, LF or
 * CRLF) or a JSONL file (one JSON object a line), one row per sample.
 *
 * The `path` column names the sample's file, relative to the manifest's
 * directory, and becomes the bytes field "data"; the path as written is
 * the key. Every other column becomes a field of its own, in column order,
 * typed by --column NAME:TYPE or else by its values: all integers int64,
 * all numbers float64, anything else (or any JSON string) str; a column
 * of integers with one beyond int64 is refused, never made float64 (that
 * would round its other values too). Paths are resolved at the scan and
 * must stay inside the manifest's directory (no "..", no absolute path,
 * no symlink out), so a manifest cannot reach files its author's
 * directory does not hold; each is then opened beneath that directory's
 * descriptor following no symlink, at the scan and again when packing, so
 * a directory swapped for a symlink after the scan leads nowhere. Every
 * refusal names the file and line.
 *
 * Thread rules: single-threaded, as pack_input.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <json-c/json.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pack.h"
#include "pack_beneath.h"
#include "pack_file.h"
#include "pack_scan.h"

#define MANIFEST_MAX (UINT64_C(16) << 30) /* bytes of a manifest read whole */

typedef struct cell {
	char *s;                 /* not NUL-terminated */
	size_t len;
	bool quoted;             /* a JSON string: always str */
} cell;

/* A manifest as rows of cells, the header's names first. */
typedef struct table {
	const char *path;
	char *buf;               /* CSV: the file, cells point into it */
	bool owned;              /* JSONL: every cell and name is its own allocation */
	char **names;
	size_t ncols;
	cell *cells;             /* nrows x ncols */
	size_t nrows, cap;
	uint32_t *lines;         /* per row: the line it starts on */
} table;

static void table_free(table *t)
{
	for (size_t i = 0; t->owned && i < t->nrows * t->ncols; i++)
		free(t->cells[i].s);
	for (size_t c = 0; t->names && c < t->ncols; c++)
		free(t->names[c]);
	free(t->names);
	free(t->cells);
	free(t->lines);
	free(t->buf);
}

__attribute__((format(printf, 3, 4)))
static int fail(const table *t, uint32_t line, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "batchd-pack: %s:%u: ", t->path, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return -EINVAL;
}

/* Room for one more row. */
static int row_reserve(table *t)
{
	if (t->nrows == t->cap) {
		size_t cap = t->cap * 2 + 256;
		cell *c = realloc(t->cells, cap * t->ncols * sizeof(*c));
		uint32_t *l;

		if (!c)
			return -ENOMEM;
		t->cells = c;
		l = realloc(t->lines, cap * sizeof(*l));
		if (!l)
			return -ENOMEM;
		t->lines = l;
		t->cap = cap;
	}
	return 0;
}

static int read_whole(const char *path, char **ret, size_t *ret_len)
{
	FILE *f = fopen(path, "rb");
	struct stat st;
	char *buf;

	if (!f)
		return pack__err(-errno, path, "cannot open manifest");
	if (fstat(fileno(f), &st) < 0 || (uint64_t)st.st_size > MANIFEST_MAX) {
		fclose(f);
		return pack__err(-E2BIG, path, "manifest over 16 GiB");
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf || fread(buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
		fclose(f);
		free(buf);
		return buf ? pack__err(-EIO, path, "cannot read manifest") : -ENOMEM;
	}
	fclose(f);
	buf[st.st_size] = '\0';
	*ret = buf;
	*ret_len = (size_t)st.st_size;
	return 0;
}

/* ---- CSV ------------------------------------------------------------------- */

typedef struct csv {
	table *t;
	char *p, *end;
	uint32_t line;
} csv;

/*
 * One field at c->p, unquoted in place into *ret. @return 1 when a record
 * separator (or the end) follows, 0 for a comma, -EINVAL (said why).
 */
static int csv_field(csv *c, cell *ret, uint32_t row_line)
{
	char *out = c->p, *start = c->p;

	if (c->p < c->end && *c->p == '"') {
		for (c->p++;; c->p++) {
			if (c->p >= c->end)
				return fail(c->t, row_line, "a quoted field is not closed");
			if (*c->p == '"' && c->p + 1 < c->end && c->p[1] == '"')
				c->p++;
			else if (*c->p == '"')
				break;
			c->line += *c->p == '\n';
			*out++ = *c->p;
		}
		c->p++;
	} else {
		for (; c->p < c->end && !strchr(",\r\n", *c->p); c->p++) {
			if (*c->p == '"')
				return fail(c->t, c->line, "a quote inside an unquoted field "
					    "(quote the whole field, doubling its quotes)");
		}
		out = c->p;
	}
	/* A quoted field was copied down over its opening quote. */
	*ret = (cell){ .s = start, .len = (size_t)(out - start) };
	if (c->p < c->end && *c->p == ',') {
		c->p++;
		return 0;
	}
	if (c->p + 1 < c->end && c->p[0] == '\r' && c->p[1] == '\n')
		c->p++;
	if (c->p < c->end && *c->p != '\r' && *c->p != '\n')
		return fail(c->t, c->line, "text after a quoted field's closing quote");
	c->p += c->p < c->end;
	c->line++;
	return 1;
}

/* One record's fields into v (at most max, *ret_n of them). @return 0 or -EINVAL. */
static int csv_record(csv *c, cell *v, size_t max, size_t *ret_n, uint32_t *ret_line)
{
	uint32_t line = c->line;
	size_t n = 0;
	cell tmp;
	int r;

	do {
		r = csv_field(c, n < max ? &v[n] : &tmp, line);
		if (r < 0)
			return r;
		n++;
	} while (r == 0);
	*ret_n = n;
	*ret_line = line;
	return 0;
}

static int csv_parse(table *t, size_t len)
{
	csv c = { .t = t, .p = t->buf, .end = t->buf + len, .line = 1 };
	cell head[BP_FIELD_MAX + 1];
	uint32_t line;
	size_t n;
	int r;

	/* Spreadsheets may start the file with a UTF-8 byte-order mark. */
	if (len >= 3 && !memcmp(c.p, "\xef\xbb\xbf", 3))
		c.p += 3;
	if (c.p == c.end)
		return fail(t, 1, "empty manifest: a header row naming the columns comes first");
	if ((r = csv_record(&c, head, BP_FIELD_MAX + 1, &n, &line)) < 0)
		return r;
	if (n > BP_FIELD_MAX)
		return fail(t, 1, "%zu columns; a manifest has at most %u", n, BP_FIELD_MAX);
	t->ncols = n;
	t->names = calloc(n, sizeof(*t->names));
	for (size_t i = 0; t->names && i < n; i++) {
		if (!(t->names[i] = strndup(head[i].s, head[i].len)))
			return -ENOMEM;
	}
	if (!t->names)
		return -ENOMEM;
	while (c.p < c.end) {
		if ((r = row_reserve(t)) < 0)
			return r;
		r = csv_record(&c, &t->cells[t->nrows * t->ncols], t->ncols, &n, &line);
		if (r < 0)
			return r;
		if (n != t->ncols)
			return fail(t, line, "%zu fields; the header has %zu columns", n, t->ncols);
		t->lines[t->nrows++] = line;
	}
	return 0;
}

/* ---- JSONL ----------------------------------------------------------------- */

/* Copy value v of column name into *ret. @return 0 or -EINVAL (said why). */
static int json_cell(table *t, uint32_t line, const char *name, json_object *v, cell *ret)
{
	json_type type = json_object_get_type(v);
	const char *s;

	if (type != json_type_string && type != json_type_int && type != json_type_double)
		return fail(t, line, "'%s' is a JSON %s; values are numbers or strings", name,
			    json_type_to_name(type));
	s = type == json_type_string ? json_object_get_string(v)
				     : json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN);
	ret->len = type == json_type_string ? (size_t)json_object_get_string_len(v) : strlen(s);
	ret->quoted = type == json_type_string;
	ret->s = malloc(ret->len + 1);
	if (!ret->s)
		return -ENOMEM;
	memcpy(ret->s, s, ret->len);
	return 0;
}

/* The first row's member names are the columns. */
static int json_columns(table *t, uint32_t line, json_object *o)
{
	size_t n = (size_t)json_object_object_length(o), i = 0;

	if (n == 0 || n > BP_FIELD_MAX)
		return fail(t, line, "%zu members; a row has 1 to %u", n, BP_FIELD_MAX);
	t->names = calloc(n, sizeof(*t->names));
	if (!t->names)
		return -ENOMEM;
	t->ncols = n;
	json_object_object_foreach(o, k, v) {
		(void)v;
		if (!(t->names[i++] = strdup(k)))
			return -ENOMEM;
	}
	return 0;
}

static int json_row(table *t, uint32_t line, json_object *o)
{
	cell *row;
	int r;

	if (!json_object_is_type(o, json_type_object))
		return fail(t, line, "not a JSON object; each line is one {\"path\": ..., ...} row");
	if (!t->names && (r = json_columns(t, line, o)) < 0)
		return r;
	if ((size_t)json_object_object_length(o) != t->ncols)
		return fail(t, line, "%d members; line %u has %zu (every row has the same)",
			    json_object_object_length(o), t->nrows ? t->lines[0] : line, t->ncols);
	if ((r = row_reserve(t)) < 0)
		return r;
	row = &t->cells[t->nrows * t->ncols];
	for (size_t c = 0; c < t->ncols; c++) {
		json_object *v;

		if (!json_object_object_get_ex(o, t->names[c], &v))
			return fail(t, line, "no '%s' member, which line %u has", t->names[c],
				    t->lines[0]);
		if ((r = json_cell(t, line, t->names[c], v, &row[c])) < 0) {
			while (c)
				free(row[--c].s);
			return r;
		}
	}
	t->lines[t->nrows++] = line;
	return 0;
}

/* -?D+: a decimal integer as CSV and JSON write one, whatever its size. */
static bool integer(const char *s, size_t len)
{
	size_t i = len && s[0] == '-';

	if (i == len)
		return false;
	for (; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
	}
	return true;
}

/* Whether the integer literal s[0..len) (-?D+) lies beyond what json-c holds: int64 and uint64. */
static bool beyond_json_c(const char *s, size_t len)
{
	bool neg = s[0] == '-';
	const char *lim = neg ? "9223372036854775808" : "18446744073709551615";
	size_t z = neg, n;

	while (z + 1 < len && s[z] == '0')
		z++;
	n = len - z;
	return n > strlen(lim) || (n == strlen(lim) && memcmp(s + z, lim, n) > 0);
}

/*
 * json-c saturates an integer beyond int64 and uint64 to the nearest
 * limit without a word, so such a literal is looked for in the line
 * itself, before json-c reads it: refused naming the member (the last
 * string before it), whatever --column says, since no type could get its
 * value back. @return 0 or -EINVAL (said why).
 */
static int json_big_ints(const table *t, uint32_t line, const char *p, const char *eol)
{
	const char *key = "", *str = "";
	int key_len = 0, str_len = 0;

	while (p < eol) {
		size_t n;

		if (*p == '"') {
			for (str = ++p; p < eol && *p != '"'; p++)
				p += *p == '\\' && p + 1 < eol;
			str_len = (int)(p - str);
			p += p < eol;
			continue;
		}
		if (*p == ':') {
			key = str;
			key_len = str_len;
		}
		n = *p == '-' || (*p >= '0' && *p <= '9') ? strspn(p + 1, "0123456789.eE+-") + 1 : 1;
		if (n > 1 && integer(p, n) && beyond_json_c(p, n))
			return fail(t, line, "member '%.*s': the integer %.*s%s is beyond what a JSON "
				    "number can carry here (int64 and uint64); write it as a JSON "
				    "string (\"%.*s%s\") and pass --column %.*s:str to keep it as text",
				    key_len, key, (int)(n > 64 ? 64 : n), p, n > 64 ? "..." : "",
				    (int)(n > 64 ? 64 : n), p, n > 64 ? "..." : "", key_len, key);
		p += n;
	}
	return 0;
}

static int jsonl_parse(table *t, size_t len)
{
	json_tokener *tok = json_tokener_new();
	char *p = t->buf, *end = t->buf + len;
	uint32_t line = 1;
	int r = 0;

	if (!tok)
		return -ENOMEM;
	t->owned = true;
	for (; r == 0 && p < end; line++) {
		char *nl = memchr(p, '\n', (size_t)(end - p)), *eol = nl ? nl : end;
		json_object *o;

		if (strspn(p, " \t\r") >= (size_t)(eol - p)) { /* a blank line */
			p = eol + 1;
			continue;
		}
		if ((r = json_big_ints(t, line, p, eol)) < 0)
			break;
		json_tokener_reset(tok);
		o = json_tokener_parse_ex(tok, p, (int)(eol - p));
		if (!o || json_tokener_get_parse_end(tok) + strspn(p + json_tokener_get_parse_end(tok),
								     " \t\r") != (size_t)(eol - p))
			r = fail(t, line, "not one JSON object: %s", o ? "text after it"
				 : json_tokener_get_error(tok) == json_tokener_continue
				 ? "it does not end on this line"
				 : json_tokener_error_desc(json_tokener_get_error(tok)));
		else
			r = json_row(t, line, o);
		json_object_put(o);
		p = eol + 1;
	}
	json_tokener_free(tok);
	if (r == 0 && t->nrows == 0)
		return fail(t, line, "no rows");
	return r;
}

/* ---- columns to fields ----------------------------------------------------- */

/* A decimal number as CSV and JSON write them: -?D+(.D*)?([eE][+-]?D+)? or -?.D+... */
static bool numeric(const char *s, size_t len)
{
	size_t i = 0, digits = 0;

	i += i < len && (s[i] == '-' || s[i] == '+');
	for (; i < len && s[i] >= '0' && s[i] <= '9'; i++)
		digits++;
	if (i < len && s[i] == '.')
		for (i++; i < len && s[i] >= '0' && s[i] <= '9'; i++)
			digits++;
	if (!digits)
		return false;
	if (i < len && (s[i] == 'e' || s[i] == 'E')) {
		size_t d = 0;

		i++;
		i += i < len && (s[i] == '-' || s[i] == '+');
		for (; i < len && s[i] >= '0' && s[i] <= '9'; i++)
			d++;
		if (!d)
			return false;
	}
	return i == len;
}

/* Parse a float column's cell. @return 0, -EINVAL (not a number), -ERANGE (does not fit). */
static int parse_float(const cell *c, uint32_t type, double *ret)
{
	char buf[512], *end;
	double v;

	if (!numeric(c->s, c->len) || c->len >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, c->s, c->len);
	buf[c->len] = '\0';
	errno = 0;
	v = strtod(buf, &end);
	if (*end)
		return -EINVAL;
	/* ERANGE also reports underflow, which rounds to a representable value. */
	if (!isfinite(v) || (type == BP_FIELD_FLOAT32 && fabs(v) > FLT_MAX))
		return -ERANGE;
	*ret = v;
	return 0;
}

/*
 * The type of column c: --column's, else the narrowest its values allow.
 * A column of integers is int64 even when one does not fit (cell_value
 * then refuses that one): as float64 every value over 2^53 would round.
 */
static uint32_t column_type(const pack_inputs *in, const table *t, size_t c)
{
	bool ints = true, nums = true;
	double f;

	for (size_t k = 0; k < in->fo.ncolumns; k++) {
		if (!strcmp(in->fo.columns[k].name, t->names[c]))
			return in->fo.columns[k].type;
	}
	for (size_t r = 0; r < t->nrows && nums; r++) {
		const cell *x = &t->cells[r * t->ncols + c];

		if (x->quoted)
			return BP_FIELD_STR;
		ints = ints && integer(x->s, x->len);
		nums = nums && (ints || parse_float(x, BP_FIELD_FLOAT64, &f) == 0);
	}
	return ints ? BP_FIELD_INT64 : nums ? BP_FIELD_FLOAT64 : BP_FIELD_STR;
}

/* The cell's value into v as field f's type. @return 0 or -EINVAL (said why). */
static int cell_value(const table *t, size_t row, size_t c, uint32_t type, bp_field_value *v)
{
	const cell *x = &t->cells[row * t->ncols + c];
	const char *tn = bp_field_type_name(type);
	int r;

	if (type == BP_FIELD_STR) {
		char *s;

		if (x->len > BP_STR_MAX)
			return fail(t, t->lines[row], "column %s: %zu bytes; str values are at most "
				    "%u", t->names[c], x->len, BP_STR_MAX);
		if (!(s = malloc(x->len + 1)))
			return -ENOMEM;
		memcpy(s, x->s, x->len);
		*v = (bp_field_value){ .data = s, .size = x->len };
		return 0;
	}
	r = type == BP_FIELD_INT64 ? pack__parse_i64(x->s, x->len, false, &v->i64)
				   : parse_float(x, type, &v->f64);
	if (r == -ERANGE && type == BP_FIELD_INT64)
		return fail(t, t->lines[row], "column %s: '%.*s%s' does not fit int64 "
			    "(-9223372036854775808 to 9223372036854775807), and an integer is never "
			    "rounded to a float; to keep it exactly, store the column as text with "
			    "--column %s:str", t->names[c], (int)(x->len > 64 ? 64 : x->len), x->s,
			    x->len > 64 ? "..." : "", t->names[c]);
	if (r == -ERANGE)
		return fail(t, t->lines[row], "column %s: '%.*s' does not fit %s", t->names[c],
			    (int)(x->len > 64 ? 64 : x->len), x->s, tn);
	if (r < 0)
		return fail(t, t->lines[row], "column %s: '%.*s' is not %s %s%s", t->names[c],
			    (int)(x->len > 64 ? 64 : x->len), x->s,
			    type == BP_FIELD_INT64 ? "an" : "a", tn,
			    type == BP_FIELD_INT64 ? " (a decimal integer)" : " (a finite number)");
	return 0;
}

/* Column names as field names; the path column; --column names that exist. */
static int check_columns(const pack_inputs *in, const table *t, size_t *ret_path)
{
	size_t path = SIZE_MAX;

	for (size_t c = 0; c < t->ncols; c++) {
		if (!strcmp(t->names[c], "path")) {
			path = c;
			continue;
		}
		if (!pack__field_name_ok(t->names[c], strlen(t->names[c])) ||
		    !strcmp(t->names[c], "data"))
			return fail(t, t->owned ? t->lines[0] : 1, "column '%.80s': a field name "
				    "is [A-Za-z0-9_.-], up to %u bytes, and not 'data' (the path "
				    "column's)", t->names[c], BP_FIELD_NAME_MAX);
		for (size_t d = 0; d < c; d++) {
			if (!strcmp(t->names[c], t->names[d]))
				return fail(t, t->owned ? t->lines[0] : 1, "column '%s' appears twice",
					    t->names[c]);
		}
	}
	if (path == SIZE_MAX)
		return fail(t, t->owned ? t->lines[0] : 1, "no 'path' column (each row's file, relative to the manifest's "
			    "directory)");
	for (size_t k = 0; k < in->fo.ncolumns; k++) {
		size_t c = 0;

		while (c < t->ncols && strcmp(t->names[c], in->fo.columns[k].name))
			c++;
		if (c == t->ncols || c == path) {
			fprintf(stderr, "batchd-pack: --column %s: %s %s\n", in->fo.columns[k].name,
				c == path ? "the path column is the bytes field 'data', not typed in" :
				"no such column in", t->path);
			return -EINVAL;
		}
	}
	*ret_path = path;
	return 0;
}

/*
 * The file at name (a real path below root_fd, no symlink in it): its
 * stat, looked at through a descriptor opened as the packing pass will
 * open it. @return 0, or a negative errno (-ELOOP: a symlink appeared).
 */
static int stat_beneath(int root_fd, const char *name, struct stat *st)
{
	int fd = pack_open_beneath(root_fd, name, O_RDONLY | O_NONBLOCK | O_NOCTTY), r = 0;

	if (fd < 0)
		return fd;
	if (fstat(fd, st) < 0)
		r = -errno;
	close(fd);
	return r;
}

/*
 * Resolve row's path beneath the manifest's directory p->root (real path),
 * then open it beneath p->root_fd following no symlink, as the packing
 * pass will. @return 0 with the path below root in *ret_name and the
 * file's size, or -EINVAL (said why).
 */
static int resolve(const table *t, size_t row, const cell *x, const pack_input *p,
		   char **ret_name, uint64_t *ret_size)
{
	char *joined = NULL, *real = NULL, *name = NULL;
	const char *root = p->root;
	size_t rl = strlen(root);
	struct stat st;
	int r = -EINVAL;

	if (x->len == 0 || memchr(x->s, '\0', x->len) || x->s[0] == '/')
		return fail(t, t->lines[row], "path '%.*s': paths are relative to the manifest's "
			    "directory", (int)x->len, x->s);
	if (asprintf(&joined, "%s/%.*s", root, (int)x->len, x->s) < 0)
		return -ENOMEM;
	/* Symlinks that stay inside are allowed: the real name below root is what gets read. */
	real = realpath(joined, NULL);
	if (!real)
		r = fail(t, t->lines[row], "path '%.*s': %s", (int)x->len, x->s, strerror(errno));
	else if (strncmp(real, root, rl) || real[rl] != '/')
		r = fail(t, t->lines[row], "path '%.*s' escapes the manifest's directory %s",
			 (int)x->len, x->s, root);
	else if ((r = stat_beneath(p->root_fd, real + rl + 1, &st)) < 0)
		r = fail(t, t->lines[row], "path '%.*s' (%s): %s%s", (int)x->len, x->s, real,
			 strerror(-r), r == -ELOOP ? " (a symlink appeared on it while scanning; "
			 "nothing is read through a symlink leading out)" : "");
	else if (!S_ISREG(st.st_mode))
		r = fail(t, t->lines[row], "path '%.*s' is not a regular file", (int)x->len, x->s);
	else if ((uint64_t)st.st_size > BP_PACK_MAX_SAMPLE)
		r = fail(t, t->lines[row], "path '%.*s': over the 256 MiB sample limit", (int)x->len,
			 x->s);
	else if (!(name = strdup(real + rl + 1)))
		r = -ENOMEM;
	else
		r = 0;
	if (r == 0) {
		*ret_name = name;
		*ret_size = (uint64_t)st.st_size;
	}
	free(joined);
	free(real);
	return r;
}

/* Row into entry e (zeroed, pushed already): name, key, size, values. */
static int row_entry(pack_inputs *in, pack_input *p, const table *t, size_t row, size_t path,
		     pack_entry *e)
{
	const cell *x = &t->cells[row * t->ncols + path];
	int r;

	e->line = t->lines[row];
	if ((r = resolve(t, row, x, p, &e->name, &e->size)) < 0)
		return r;
	e->key = strndup(x->s, x->len);
	e->vals = calloc(in->schema.count, sizeof(*e->vals));
	if (!e->key || !e->vals)
		return -ENOMEM;
	e->vals[0].size = e->size;
	for (size_t c = 0, f = 1; c < t->ncols; c++) {
		if (c == path)
			continue;
		r = cell_value(t, row, c, in->schema.fields[f].type, &e->vals[f]);
		if (r < 0)
			return r;
		f++;
	}
	return 0;
}

static int build(pack_inputs *in, pack_input *p, const table *t)
{
	size_t path = 0, cap = 0;
	int r;

	if ((r = check_columns(in, t, &path)) < 0)
		return r;
	if (pack__schema_add(&in->schema, "data", BP_FIELD_BYTES) < 0)
		return -ENOMEM;
	for (size_t c = 0; c < t->ncols; c++) {
		if (c != path && pack__schema_add(&in->schema, t->names[c], column_type(in, t, c)) < 0)
			return -ENOMEM;
	}
	for (size_t row = 0; row < t->nrows; row++) {
		if ((r = pack__entry_push(p, &cap, &(pack_entry){ 0 })) < 0)
			return r;
		if ((r = row_entry(in, p, t, row, path, &p->entries[p->count - 1])) < 0)
			return r;
	}
	return 0;
}

int pack__manifest_scan(pack_inputs *in, pack_input *p)
{
	table t = { .path = p->path };
	size_t len = strlen(p->path), n = 0;
	char *dir = strdup(p->path);
	int r;

	if (!dir)
		return -ENOMEM;
	p->root = realpath(dirname(dir), NULL);
	free(dir);
	if (!p->root)
		return pack__err(-errno, p->path, "cannot resolve the manifest's directory");
	/* Every row's file is opened beneath this descriptor, at the scan and when packing. */
	p->root_fd = open(p->root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (p->root_fd < 0)
		return pack__err(-errno, p->root, "cannot open the manifest's directory");
	if ((r = read_whole(p->path, &t.buf, &n)) < 0)
		return r;
	r = len > 4 && !strcmp(p->path + len - 4, ".csv") ? csv_parse(&t, n) : jsonl_parse(&t, n);
	if (r == 0 && t.nrows == 0)
		r = fail(&t, 2, "no rows after the header");
	if (r == 0)
		r = build(in, p, &t);
	table_free(&t);
	return r;
}
