/* SPDX-License-Identifier: MIT */
/*
 * pack_tokfile.c - token files as bytes (pack_tokfile.h): ids of any
 * integer type checked and converted to the pack's width, the .npy header,
 * the Megatron .idx, and a JSONL line of ids.
 *
 * Everything here parses what a user's file says, so nothing it reads is
 * used before it is checked: lengths against what the buffer holds, counts
 * against what the file can hold before they are multiplied, and every id
 * against the width before it is stored. A refusal names the first thing
 * wrong and, where there is one, what to do about it.
 */
#include <errno.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "endian.h"
#include "pack.h"
#include "pack_file.h"
#include "pack_tokfile.h"

__attribute__((format(printf, 3, 4)))
static int say(char *why, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, len, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* ---- ids -------------------------------------------------------------------- */

size_t pack_tok_size(enum pack_tok_type t)
{
	static const size_t size[] = { 1, 1, 2, 2, 4, 4, 8, 8 };

	return size[t];
}

const char *pack_tok_name(enum pack_tok_type t)
{
	static const char *const name[] = { "uint8", "int8", "uint16", "int16",
					     "uint32", "int32", "uint64", "int64" };

	return name[t];
}

enum pack_tok_type pack_tok_of_width(uint32_t width)
{
	return width == 2 ? TOK_U16 : TOK_U32;
}

/* Id i of type t at p as stored; *ret_negative for a negative signed one (its value then meaningless). */
static uint64_t raw_id(enum pack_tok_type t, const uint8_t *p, size_t i, bool *ret_negative)
{
	const uint8_t *e = p + i * pack_tok_size(t);
	uint64_t v;

	switch (t) {
	case TOK_U8: v = e[0]; break;
	case TOK_I8: v = e[0]; *ret_negative = e[0] & 0x80; return v;
	case TOK_U16: v = (uint64_t)e[0] | (uint64_t)e[1] << 8; break;
	case TOK_I16:
		v = (uint64_t)e[0] | (uint64_t)e[1] << 8;
		*ret_negative = e[1] & 0x80;
		return v;
	case TOK_U32: v = bp_le32(e); break;
	case TOK_I32: v = bp_le32(e); *ret_negative = e[3] & 0x80; return v;
	case TOK_U64: v = bp_le64(e); break;
	default: v = bp_le64(e); *ret_negative = e[7] & 0x80; return v;
	}
	*ret_negative = false;
	return v;
}

uint64_t pack_tok_get(enum pack_tok_type t, const uint8_t *p, size_t i)
{
	bool neg;

	return raw_id(t, p, i, &neg);
}

/* Why id text (the value as written) at position pos is no id of width. */
static void range_why(char *why, size_t len, uint64_t pos, bool negative, const char *text,
		      uint32_t width)
{
	if (negative)
		snprintf(why, len, "token %" PRIu64 ": id %s is negative: token ids are 0 or more",
			 pos, text);
	else if (width == 2)
		snprintf(why, len, "token %" PRIu64 ": id %s does not fit uint16 (0..65535): use "
			 "--tokens uint32", pos, text);
	else
		snprintf(why, len, "token %" PRIu64 ": id %s does not fit uint32 as batchd delivers "
			 "ids (int32: 0..2147483647)", pos, text);
}

size_t pack_tok_convert(enum pack_tok_type t, const uint8_t *src, size_t n, uint32_t width,
			uint8_t *dst, uint64_t first, char *why, size_t why_len)
{
	uint64_t max = bp_tokens_max_id(width);
	char text[32];

	/* The common case first: ids already of the pack's width and in range. */
	if (t == pack_tok_of_width(width) && width == 2) {
		if (dst && dst != src)
			memcpy(dst, src, n * 2);
		return n;
	}
	for (size_t i = 0; i < n; i++) {
		bool neg;
		uint64_t v = raw_id(t, src, i, &neg);

		if (neg || v > max) {
			if (neg)
				snprintf(text, sizeof(text), "%" PRId64,
					 t == TOK_I8 ? (int64_t)(int8_t)v
					 : t == TOK_I16 ? (int64_t)(int16_t)v
					 : t == TOK_I32 ? (int64_t)(int32_t)v : (int64_t)v);
			else
				snprintf(text, sizeof(text), "%" PRIu64, v);
			range_why(why, why_len, first + i, neg, text, width);
			return i;
		}
		if (!dst)
			continue;
		if (width == 2) {
			dst[i * 2] = (uint8_t)v;
			dst[i * 2 + 1] = (uint8_t)(v >> 8);
		} else {
			bp_put_le32(dst + i * 4, (uint32_t)v);
		}
	}
	return n;
}

/* ---- .npy --------------------------------------------------------------------- */

/* A cursor over the header's dict, a Python literal. */
typedef struct lit {
	const char *p, *end;
} lit;

static void skip_ws(lit *l)
{
	while (l->p < l->end && (*l->p == ' ' || *l->p == '\t' || *l->p == '\n' || *l->p == '\r'))
		l->p++;
}

static bool take(lit *l, char c)
{
	skip_ws(l);
	if (l->p < l->end && *l->p == c) {
		l->p++;
		return true;
	}
	return false;
}

/* A quoted string (no escapes: numpy writes none) into s[0..*n). */
static bool string_lit(lit *l, const char **s, size_t *n)
{
	char q;
	const char *start;

	skip_ws(l);
	if (l->p >= l->end || (*l->p != '\'' && *l->p != '"'))
		return false;
	q = *l->p++;
	for (start = l->p; l->p < l->end && *l->p != q; l->p++)
		if (*l->p == '\\')
			return false;
	if (l->p >= l->end)
		return false;
	*s = start;
	*n = (size_t)(l->p++ - start);
	return true;
}

static bool word(lit *l, const char *w)
{
	size_t n = strlen(w);

	skip_ws(l);
	if ((size_t)(l->end - l->p) < n || memcmp(l->p, w, n) != 0)
		return false;
	l->p += n;
	return true;
}

/* A tuple of at most 2 non-negative ints ("(3,)", "(3, 4)", "()"; Python 2's "3L" too). */
static int shape_lit(lit *l, uint64_t dims[2], uint32_t *ndim, char *why, size_t why_len)
{
	*ndim = 0;
	if (!take(l, '('))
		return say(why, why_len, "shape is not a tuple");
	for (;;) {
		uint64_t v = 0;
		size_t digits = 0;

		if (take(l, ')'))
			return 0;
		skip_ws(l);
		for (; l->p < l->end && *l->p >= '0' && *l->p <= '9'; l->p++, digits++) {
			if (v > (UINT64_MAX - 9) / 10)
				return say(why, why_len, "a dimension of the shape is too large");
			v = v * 10 + (uint64_t)(*l->p - '0');
		}
		if (!digits)
			return say(why, why_len, "shape is not a tuple of sizes");
		if (l->p < l->end && *l->p == 'L')
			l->p++;
		if (*ndim == 2)
			return say(why, why_len, "an array of more than 2 dimensions; token ids are a "
				   "1-D stream or a 2-D array of documents");
		dims[(*ndim)++] = v;
		if (!take(l, ',')) {
			if (take(l, ')'))
				return 0;
			return say(why, why_len, "shape is not a tuple of sizes");
		}
	}
}

/* descr ("<u2", "|u1", ...) into *ret. */
static int descr_type(const char *s, size_t n, enum pack_tok_type *ret, char *why, size_t why_len)
{
	static const enum pack_tok_type u[] = { TOK_U8, TOK_U16, 0, TOK_U32, 0, 0, 0, TOK_U64 };
	static const enum pack_tok_type i[] = { TOK_I8, TOK_I16, 0, TOK_I32, 0, 0, 0, TOK_I64 };
	unsigned size;

	if (n != 3 || (s[2] != '1' && s[2] != '2' && s[2] != '4' && s[2] != '8'))
		return say(why, why_len, "dtype '%.*s' is not an integer type numpy writes (<u2, <i4, "
			   "...)", (int)(n > 16 ? 16 : n), s);
	size = (unsigned)(s[2] - '0');
	if (s[1] == 'f' || s[1] == 'c')
		return say(why, why_len, "dtype '%.3s' holds floating-point numbers, not token ids; "
			   "save the ids as integers (np.uint16, np.uint32, ...)", s);
	if (s[1] != 'u' && s[1] != 'i')
		return say(why, why_len, "dtype '%.3s' is not an integer type", s);
	if (s[0] == '>' && size > 1)
		return say(why, why_len, "dtype '%.3s' is big-endian; save it little-endian "
			   "(arr.astype('<%c%u'))", s, s[1], size);
	if (s[0] != '<' && s[0] != '|' && !(s[0] == '>' && size == 1))
		return say(why, why_len, "dtype '%.3s' is not of a known byte order", s);
	*ret = s[1] == 'u' ? u[size - 1] : i[size - 1];
	return 0;
}

/* The header's dict: descr, fortran_order, shape, each once and nothing else. */
static int npy_dict(lit *l, pack_npy *a, bool *fortran, uint64_t dims[2], char *why,
		    size_t why_len)
{
	unsigned seen = 0;
	int r;

	if (!take(l, '{'))
		return say(why, why_len, "header is not a dict");
	while (!take(l, '}')) {
		const char *key, *s;
		size_t klen, n;
		unsigned bit;

		if (!string_lit(l, &key, &klen) || !take(l, ':'))
			return say(why, why_len, "header is not a dict of quoted keys");
		bit = klen == 5 && !memcmp(key, "descr", 5)           ? 1
		      : klen == 13 && !memcmp(key, "fortran_order", 13) ? 2
		      : klen == 5 && !memcmp(key, "shape", 5)           ? 4 : 0;
		if (!bit || (seen & bit))
			return say(why, why_len, "header key '%.*s' is %s", (int)(klen > 32 ? 32 : klen),
				   key, bit ? "given twice" : "not one of descr, fortran_order, shape");
		seen |= bit;
		if (bit == 1 && (!string_lit(l, &s, &n)))
			return say(why, why_len, "descr is not a string (a structured dtype?)");
		if (bit == 1 && (r = descr_type(s, n, &a->type, why, why_len)) < 0)
			return r;
		if (bit == 2 && !(*fortran = word(l, "True")) && !word(l, "False"))
			return say(why, why_len, "fortran_order is neither True nor False");
		if (bit == 4 && (r = shape_lit(l, dims, &a->ndim, why, why_len)) < 0)
			return r;
		if (!take(l, ',') && !(skip_ws(l), l->p < l->end && *l->p == '}'))
			return say(why, why_len, "header dict is malformed");
	}
	skip_ws(l);
	if (l->p != l->end)
		return say(why, why_len, "text after the header's dict");
	if (seen != 7)
		return say(why, why_len, "header lacks %s", !(seen & 1) ? "descr"
			   : !(seen & 2) ? "fortran_order" : "shape");
	return 0;
}

int pack_npy_parse(const uint8_t *buf, size_t len, uint64_t file_size, pack_npy *ret, char *why,
		   size_t why_len)
{
	uint64_t dims[2] = { 0, 0 }, head, hlen, count, bytes;
	pack_npy a = { 0 };
	bool fortran = false;
	lit l;
	int r;

	if (len > file_size)
		len = (size_t)file_size;
	if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0)
		return say(why, why_len, "not a .npy file (no \\x93NUMPY magic)");
	if (buf[6] < 1 || buf[6] > 3)
		return say(why, why_len, ".npy format version %u.%u; versions 1 to 3 are read", buf[6],
			   buf[7]);
	head = buf[6] == 1 ? 10 : 12;
	if (len < head)
		return say(why, why_len, "header truncated");
	hlen = buf[6] == 1 ? (uint64_t)buf[8] | (uint64_t)buf[9] << 8 : bp_le32(buf + 8);
	if (hlen > PACK_NPY_HEADER_MAX - head)
		return say(why, why_len, "header of %" PRIu64 " bytes; at most %u are read", hlen,
			   PACK_NPY_HEADER_MAX);
	if (head + hlen > len)
		return say(why, why_len, "header of %" PRIu64 " bytes runs past the file's end", hlen);
	l = (lit){ (const char *)buf + head, (const char *)buf + head + hlen };
	r = npy_dict(&l, &a, &fortran, dims, why, why_len);
	if (r < 0)
		return r;
	if (a.ndim == 0)
		return say(why, why_len, "a 0-dimensional array (one number) holds no documents");
	if (a.ndim == 2 && fortran)
		return say(why, why_len, "a Fortran-ordered 2-D array; save it C-ordered "
			   "(np.ascontiguousarray)");
	a.data_offset = head + hlen;
	a.rows = dims[0];
	a.cols = a.ndim == 2 ? dims[1] : 1;
	if (a.cols && a.rows > UINT64_MAX / a.cols)
		return say(why, why_len, "shape of more elements than any file holds");
	count = a.rows * a.cols;
	bytes = count > UINT64_MAX / 8 ? UINT64_MAX : count * pack_tok_size(a.type);
	if (bytes != file_size - a.data_offset) {
		char shape[64];

		if (a.ndim == 2)
			snprintf(shape, sizeof(shape), "(%" PRIu64 ", %" PRIu64 ")", a.rows, a.cols);
		else
			snprintf(shape, sizeof(shape), "(%" PRIu64 ",)", a.rows);
		if (bytes == UINT64_MAX)
			return say(why, why_len, "shape %s of %s needs more bytes than any file holds",
				   shape, pack_tok_name(a.type));
		return say(why, why_len, "shape %s of %s needs %" PRIu64 " bytes after the header, "
			   "but the file has %" PRIu64 ": truncated, or not this array", shape,
			   pack_tok_name(a.type), bytes, file_size - a.data_offset);
	}
	*ret = a;
	return 0;
}

/* ---- Megatron .idx ------------------------------------------------------------- */

enum {
	IDX_VERSION = 9,
	IDX_DTYPE = 17,
	IDX_SEQUENCES = 18,
	IDX_DOCS = 26,
	IDX_HEAD = 34,
};

/* Megatron's dtype codes (megatron/core/datasets/indexed_dataset.py, DType). */
static int idx_type(uint8_t code, enum pack_tok_type *ret, char *why, size_t why_len)
{
	static const int8_t types[] = { -1, TOK_U8, TOK_I8, TOK_I16, TOK_I32, TOK_I64, -2, -2,
					TOK_U16 };

	if (code >= sizeof(types) || types[code] == -1)
		return say(why, why_len, "dtype code %u is none Megatron writes (1-8)", code);
	if (types[code] == -2)
		return say(why, why_len, "dtype code %u holds floating-point numbers, not token ids",
			   code);
	*ret = (enum pack_tok_type)types[code];
	return 0;
}

/* Every sequence: sizes, and pointers laid end to end from 0 inside the .bin. */
static int idx_sequences(const pack_idx *x, uint64_t bin_size, const char *bin_name, char *why,
			 size_t why_len)
{
	uint64_t at = 0, item = pack_tok_size(x->type);

	for (uint64_t i = 0; i < x->sequences; i++) {
		int32_t size = (int32_t)bp_le32(x->sizes + i * 4);
		int64_t ptr = (int64_t)bp_le64(x->pointers + i * 8);
		uint64_t end;

		if (size < 0)
			return say(why, why_len, "sequence %" PRIu64 " has size %" PRId32
				   ": the .idx is damaged; rebuild it", i, size);
		if (ptr < 0 || (uint64_t)ptr != at)
			return say(why, why_len, "sequence %" PRIu64 " starts at byte %" PRId64 ", not "
				   "at byte %" PRIu64 " where the one before it ends: the .idx is "
				   "damaged or not Megatron's; rebuild it", i, ptr, at);
		end = at + (uint64_t)size * item; /* < 2^63 + 2^34: cannot wrap */
		if (end > bin_size)
			return say(why, why_len, "sequence %" PRIu64 " ends at byte %" PRIu64 ", past "
				   "%s's %" PRIu64 " bytes: the .idx does not belong to this .bin; "
				   "rebuild it", i, end, bin_name, bin_size);
		at = end;
	}
	if (at != bin_size)
		return say(why, why_len, "its sequences end at byte %" PRIu64 ", but %s has %" PRIu64
			   " bytes: the .idx does not belong to this .bin; rebuild it", at, bin_name,
			   bin_size);
	return 0;
}

/* doc_idx: from 0 to the sequence count, never decreasing. */
static int idx_documents(const pack_idx *x, char *why, size_t why_len)
{
	uint64_t prev = 0;

	for (uint64_t d = 0; d < x->doc_entries; d++) {
		uint64_t v = bp_le64(x->doc_idx + d * 8);

		if ((d == 0 && v != 0) || v < prev || v > x->sequences)
			return say(why, why_len, "document index entry %" PRIu64 " is %" PRId64
				   "; entries run from 0 to the %" PRIu64 " sequences, never "
				   "decreasing: the .idx is damaged; rebuild it", d, (int64_t)v,
				   x->sequences);
		prev = v;
	}
	if (prev != x->sequences)
		return say(why, why_len, "the document index ends at sequence %" PRIu64 " of %"
			   PRIu64 ": the .idx is damaged; rebuild it", prev, x->sequences);
	return 0;
}

int pack_idx_parse(const uint8_t *buf, size_t len, uint64_t bin_size, const char *bin_name,
		   pack_idx *ret, char *why, size_t why_len)
{
	pack_idx x = { 0 };
	uint64_t room;
	int r;

	if (len < IDX_HEAD || memcmp(buf, PACK_IDX_MAGIC, 9) != 0)
		return say(why, why_len, "not a Megatron index (no MMIDIDX magic)");
	if (bp_le64(buf + IDX_VERSION) != 1)
		return say(why, why_len, "index version %" PRIu64 "; version 1 is read",
			   bp_le64(buf + IDX_VERSION));
	r = idx_type(buf[IDX_DTYPE], &x.type, why, why_len);
	if (r < 0)
		return r;
	x.sequences = bp_le64(buf + IDX_SEQUENCES);
	x.doc_entries = bp_le64(buf + IDX_DOCS);
	room = len - IDX_HEAD;
	/* Bounded by the file first, so the products below cannot wrap. */
	if (x.sequences > room / 12 || x.doc_entries > room / 8 ||
	    x.sequences * 12 + x.doc_entries * 8 != room)
		return say(why, why_len, "%" PRIu64 " sequences and %" PRIu64 " document index "
			   "entries do not fill its %zu bytes: the .idx is truncated or damaged",
			   x.sequences, x.doc_entries, len);
	if (x.doc_entries == 0)
		return say(why, why_len, "no document index (Megatron's starts with 0)");
	x.sizes = buf + IDX_HEAD;
	x.pointers = x.sizes + x.sequences * 4;
	x.doc_idx = x.pointers + x.sequences * 8;
	r = idx_sequences(&x, bin_size, bin_name, why, why_len);
	if (r == 0)
		r = idx_documents(&x, why, why_len);
	if (r < 0)
		return r;
	*ret = x;
	return 0;
}

void pack_idx_sequence(const pack_idx *x, uint64_t i, uint64_t *ret_offset, uint64_t *ret_count)
{
	*ret_offset = bp_le64(x->pointers + i * 8);
	*ret_count = bp_le32(x->sizes + i * 4);
}

/* ---- JSONL ---------------------------------------------------------------------- */

/* The array of ids a line's value holds, or NULL. */
static json_object *ids_of(json_object *o)
{
	static const char *const members[] = { "input_ids", "tokens", "ids" };
	json_object *v;

	if (json_object_is_type(o, json_type_array))
		return o;
	if (!json_object_is_type(o, json_type_object))
		return NULL;
	for (size_t i = 0; i < sizeof(members) / sizeof(members[0]); i++)
		if (json_object_object_get_ex(o, members[i], &v))
			return json_object_is_type(v, json_type_array) ? v : NULL;
	return NULL;
}

/* Element i of the array, checked and stored at dst. */
static int json_id(json_object *e, size_t i, uint32_t width, uint8_t *dst, char *why,
		   size_t why_len)
{
	const char *text = json_object_to_json_string_ext(e, JSON_C_TO_STRING_PLAIN);
	int64_t v;

	if (!json_object_is_type(e, json_type_int))
		return say(why, why_len, "token %zu is %.40s%s, not an integer id", i, text,
			   json_object_is_type(e, json_type_string) ? " (a JSON string)" : "");
	v = json_object_get_int64(e);
	if (v < 0 || (uint64_t)v > bp_tokens_max_id(width)) {
		range_why(why, why_len, i, v < 0, text, width);
		return -EINVAL;
	}
	if (width == 2) {
		dst[i * 2] = (uint8_t)v;
		dst[i * 2 + 1] = (uint8_t)(v >> 8);
	} else {
		bp_put_le32(dst + i * 4, (uint32_t)v);
	}
	return 0;
}

int pack_jsonl_ids(void *tokener, const char *line, size_t len, uint32_t width, size_t max_ids,
		   uint8_t **buf, size_t *cap, size_t *ret_count, char *why, size_t why_len)
{
	json_tokener *tok = tokener;
	json_object *o, *arr;
	size_t n, end;
	int r = 0;

	if (len > INT_MAX)
		return say(why, why_len, "line of %zu bytes; at most %d are read", len, INT_MAX);
	json_tokener_reset(tok);
	o = json_tokener_parse_ex(tok, line, (int)len);
	end = o ? json_tokener_get_parse_end(tok) : 0;
	/* Blanks may follow the value; line is not NUL-terminated. */
	while (o && end < len && (line[end] == ' ' || line[end] == '\t' || line[end] == '\r'))
		end++;
	if (!o || end < len) {
		enum json_tokener_error err = json_tokener_get_error(tok);

		json_object_put(o);
		return say(why, why_len, "not one JSON value: %s", o ? "text after it"
			   : err == json_tokener_continue ? "it does not end on this line"
			   : json_tokener_error_desc(err));
	}
	arr = ids_of(o);
	if (!arr) {
		json_object_put(o);
		return say(why, why_len, "neither a JSON array of token ids nor an object whose "
			   "input_ids, tokens or ids member is one");
	}
	n = json_object_array_length(arr);
	if (n > max_ids)
		r = -E2BIG;
	else if (n * width > *cap)
		r = bp_buf_reserve(buf, cap, n * width);
	for (size_t i = 0; r == 0 && i < n; i++)
		r = json_id(json_object_array_get_idx(arr, i), i, width, *buf, why, why_len);
	json_object_put(o);
	if (r == 0)
		*ret_count = n;
	return r;
}
