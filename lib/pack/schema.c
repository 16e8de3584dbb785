/* SPDX-License-Identifier: MIT */
/*
 * schema.c - the schema of a dataset's samples: named, typed fields, and
 * its byte encoding (PACK.md §Fields, the SCHEMA section).
 *
 * The same encoding travels in a pack's SCHEMA section and in a session's
 * memfd, where a client decodes what the daemon wrote, so the client
 * library links this file: it needs libc only. Decoding trusts nothing:
 * every count is checked against the bytes left before anything is sized
 * by it, so a hostile count costs an error, never an allocation.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "endian.h"
#include "pack_fields.h"

/* Per-field fixed part of the encoding: type, 0, name_len, class_count, fixed_size. */
#define FIELD_HEAD 16u

static int fail(bp_pack_fault *fault, int err, const char *what, uint64_t offset)
{
	if (fault) {
		fault->what = what;
		fault->offset = offset;
		fault->block = -1;
	}
	return err;
}

static const char *const type_names[] = {
	[BP_FIELD_BYTES] = "bytes",
	[BP_FIELD_INT64] = "int64",
	[BP_FIELD_FLOAT32] = "float32",
	[BP_FIELD_FLOAT64] = "float64",
	[BP_FIELD_STR] = "str",
};

const char *bp_field_type_name(uint32_t type)
{
	return type >= BP_FIELD_BYTES && type <= BP_FIELD_STR ? type_names[type] : NULL;
}

uint32_t bp_field_type_parse(const char *name)
{
	for (uint32_t t = BP_FIELD_BYTES; name && t <= BP_FIELD_STR; t++)
		if (strcmp(name, type_names[t]) == 0)
			return t;
	return 0;
}

size_t bp_field_scalar_size(uint32_t type)
{
	switch (type) {
	case BP_FIELD_INT64:
	case BP_FIELD_FLOAT64:
		return 8;
	case BP_FIELD_FLOAT32:
		return 4;
	}
	return 0;
}

int bp_schema_find(const bp_schema *s, const char *name)
{
	for (uint32_t i = 0; name && i < s->count; i++)
		if (strcmp(s->fields[i].name, name) == 0)
			return (int)i;
	return -ENOENT;
}

uint32_t bp_schema_bytes_fields(const bp_schema *s)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < s->count; i++)
		n += s->fields[i].type == BP_FIELD_BYTES;
	return n;
}

uint32_t bp_schema_bytes_rank(const bp_schema *s, uint32_t i)
{
	uint32_t n = 0;

	for (uint32_t k = 0; k < i; k++)
		n += s->fields[k].type == BP_FIELD_BYTES;
	return n;
}

static bool name_ok(const char *name, size_t len)
{
	if (len == 0 || len > BP_FIELD_NAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = name[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.' || c == '-'))
			return false;
	}
	return true;
}

/* The rules one field obeys on its own; NULL when it does. */
static const char *field_rule(const bp_field *fd)
{
	if (!name_ok(fd->name, strnlen(fd->name, BP_FIELD_NAME_MAX + 1)))
		return "field name must be 1-64 characters of [A-Za-z0-9_.-]";
	if (!bp_field_type_name(fd->type))
		return "unknown field type";
	if (fd->class_count && fd->type != BP_FIELD_INT64)
		return "class names on a field that is not int64";
	if (fd->class_count > BP_CLASS_MAX)
		return "more class names than the limit (2^20)";
	if (fd->class_count && !fd->classes)
		return "class count without class names";
	if (fd->fixed_size && fd->type != BP_FIELD_BYTES)
		return "fixed size on a field that is not bytes";
	if (fd->fixed_size > BP_PACK_MAX_SAMPLE)
		return "fixed size over the sample limit";
	for (uint32_t c = 0; c < fd->class_count; c++) {
		size_t n = fd->classes[c] ? strnlen(fd->classes[c], BP_CLASS_NAME_MAX + 1) : 0;

		if (n == 0 || n > BP_CLASS_NAME_MAX)
			return "class name must be 1-1024 bytes";
	}
	return NULL;
}

int bp_schema_check(const bp_schema *s, bp_pack_fault *fault)
{
	uint64_t size = 4;

	if (!s || s->count == 0 || !s->fields)
		return fail(fault, -EINVAL, "schema has no fields", 0);
	if (s->count > BP_FIELD_MAX)
		return fail(fault, -EINVAL, "schema has more than 64 fields", 0);
	for (uint32_t i = 0; i < s->count; i++) {
		const char *why = field_rule(&s->fields[i]);

		if (why)
			return fail(fault, -EINVAL, why, i);
		for (uint32_t k = 0; k < i; k++)
			if (strcmp(s->fields[k].name, s->fields[i].name) == 0)
				return fail(fault, -EINVAL, "two fields have the same name", i);
		size += FIELD_HEAD + strlen(s->fields[i].name);
		for (uint32_t c = 0; c < s->fields[i].class_count; c++)
			size += 2 + strlen(s->fields[i].classes[c]);
	}
	if (size > BP_SCHEMA_MAX)
		return fail(fault, -EINVAL, "encoded schema over the 64 MiB limit", 0);
	return 0;
}

uint64_t bp_schema_encoded_size(const bp_schema *s)
{
	uint64_t size = 4;

	for (uint32_t i = 0; i < s->count; i++) {
		size += FIELD_HEAD + strlen(s->fields[i].name);
		for (uint32_t c = 0; c < s->fields[i].class_count; c++)
			size += 2 + strlen(s->fields[i].classes[c]);
	}
	return size;
}

void bp_schema_encode(const bp_schema *s, uint8_t *out)
{
	bp_put_le32(out, s->count);
	out += 4;
	for (uint32_t i = 0; i < s->count; i++) {
		const bp_field *fd = &s->fields[i];
		size_t n = strlen(fd->name);

		out[0] = (uint8_t)fd->type;
		out[1] = 0;
		out[2] = (uint8_t)n;
		out[3] = (uint8_t)(n >> 8);
		bp_put_le32(out + 4, fd->class_count);
		bp_put_le64(out + 8, fd->fixed_size);
		memcpy(out + FIELD_HEAD, fd->name, n);
		out += FIELD_HEAD + n;
		for (uint32_t c = 0; c < fd->class_count; c++) {
			size_t k = strlen(fd->classes[c]);

			out[0] = (uint8_t)k;
			out[1] = (uint8_t)(k >> 8);
			memcpy(out + 2, fd->classes[c], k);
			out += 2 + k;
		}
	}
}

/*
 * The class names of one field at buf[*at..len): each a u16 length 1..1024
 * and that many bytes without NUL. Measured first, then copied into one
 * allocation holding the pointers and the NUL-terminated names, so that a
 * field's classes are freed with one free().
 */
static int decode_classes(const uint8_t *buf, size_t len, size_t *at, bp_field *fd,
			  bp_pack_fault *fault)
{
	size_t p = *at, text = 0;
	char **names, *dst;

	for (uint32_t c = 0; c < fd->class_count; c++) {
		size_t n;

		if (len - p < 2)
			return fail(fault, -EINVAL, "schema truncated in a class name", p);
		n = (size_t)buf[p] | (size_t)buf[p + 1] << 8;
		if (n == 0 || n > BP_CLASS_NAME_MAX)
			return fail(fault, -EINVAL, "class name length not in 1-1024", p);
		if (len - p - 2 < n)
			return fail(fault, -EINVAL, "schema truncated in a class name", p);
		if (memchr(buf + p + 2, 0, n))
			return fail(fault, -EINVAL, "class name holds a NUL byte", p + 2);
		p += 2 + n;
		text += n + 1;
	}
	names = malloc(fd->class_count * sizeof(*names) + text);
	if (!names)
		return -ENOMEM;
	dst = (char *)(names + fd->class_count);
	for (uint32_t c = 0; c < fd->class_count; c++) {
		size_t n = (size_t)buf[*at] | (size_t)buf[*at + 1] << 8;

		memcpy(dst, buf + *at + 2, n);
		dst[n] = '\0';
		names[c] = dst;
		dst += n + 1;
		*at += 2 + n;
	}
	fd->classes = names;
	return 0;
}

/* One field's fixed part and name at buf[*at..len), checked alone. */
static int decode_field(const uint8_t *buf, size_t len, size_t *at, bp_field *fd,
			bp_pack_fault *fault)
{
	size_t p = *at, n;

	if (len - p < FIELD_HEAD)
		return fail(fault, -EINVAL, "schema truncated in a field", p);
	n = (size_t)buf[p + 2] | (size_t)buf[p + 3] << 8;
	if (buf[p + 1] != 0)
		return fail(fault, -EINVAL, "reserved schema byte is not zero", p + 1);
	if (n == 0 || n > BP_FIELD_NAME_MAX)
		return fail(fault, -EINVAL, "field name length not in 1-64", p + 2);
	if (len - p - FIELD_HEAD < n)
		return fail(fault, -EINVAL, "schema truncated in a field name", p + FIELD_HEAD);
	fd->type = buf[p];
	fd->class_count = bp_le32(buf + p + 4);
	fd->fixed_size = bp_le64(buf + p + 8);
	memcpy(fd->name, buf + p + FIELD_HEAD, n);
	fd->name[n] = '\0';
	if (fd->class_count > BP_CLASS_MAX)
		return fail(fault, -E2BIG, "more class names than the limit (2^20)", p + 4);
	/* Names are checked on their bytes: a NUL inside one must not shorten it. */
	if (!name_ok((const char *)buf + p + FIELD_HEAD, n))
		return fail(fault, -EINVAL, "field name must be 1-64 characters of [A-Za-z0-9_.-]",
			    p + FIELD_HEAD);
	fd->classes = NULL;
	if (fd->type < BP_FIELD_BYTES || fd->type > BP_FIELD_STR)
		return fail(fault, -EINVAL, "unknown field type", p);
	if (fd->class_count && fd->type != BP_FIELD_INT64)
		return fail(fault, -EINVAL, "class names on a field that is not int64", p + 4);
	if (fd->fixed_size && fd->type != BP_FIELD_BYTES)
		return fail(fault, -EINVAL, "fixed size on a field that is not bytes", p + 8);
	if (fd->fixed_size > BP_PACK_MAX_SAMPLE)
		return fail(fault, -E2BIG, "fixed size over the sample limit", p + 8);
	*at = p + FIELD_HEAD + n;
	return 0;
}

int bp_schema_decode(const uint8_t *buf, size_t len, bp_schema *ret, bp_pack_fault *fault)
{
	bp_schema s = { 0 };
	size_t at = 4;
	uint32_t count;
	int r;

	if (!buf || len < 4)
		return fail(fault, -EINVAL, "schema truncated (no field count)", 0);
	if (len > BP_SCHEMA_MAX)
		return fail(fault, -E2BIG, "schema over the 64 MiB limit", 0);
	count = bp_le32(buf);
	if (count == 0)
		return fail(fault, -EINVAL, "schema has no fields", 0);
	if (count > BP_FIELD_MAX)
		return fail(fault, -E2BIG, "schema has more than 64 fields", 0);
	s.fields = calloc(count, sizeof(*s.fields));
	if (!s.fields)
		return -ENOMEM;
	for (s.count = 0; s.count < count; s.count++) {
		bp_field *fd = &s.fields[s.count];
		size_t start = at;

		r = decode_field(buf, len, &at, fd, fault);
		if (r == 0)
			r = decode_classes(buf, len, &at, fd, fault);
		if (r < 0)
			goto fail;
		if (bp_schema_find(&s, fd->name) >= 0) {
			r = fail(fault, -EINVAL, "two fields have the same name", start + FIELD_HEAD);
			s.count++;
			goto fail;
		}
	}
	if (at != len) {
		r = fail(fault, -EINVAL, "trailing bytes after the schema", at);
		goto fail;
	}
	*ret = s;
	return 0;
fail:
	bp_schema_clear(&s);
	return r;
}

int bp_schema_copy(const bp_schema *s, bp_schema *ret)
{
	bp_schema c = { .count = s->count };

	c.fields = calloc(s->count ? s->count : 1, sizeof(*c.fields));
	if (!c.fields)
		return -ENOMEM;
	for (uint32_t i = 0; i < s->count; i++) {
		const bp_field *from = &s->fields[i];
		bp_field *to = &c.fields[i];
		size_t text = 0;
		char *dst;

		*to = *from;
		to->classes = NULL;
		if (!from->class_count)
			continue;
		for (uint32_t k = 0; k < from->class_count; k++)
			text += strlen(from->classes[k]) + 1;
		/* One allocation a field, as bp_schema_decode makes them. */
		to->classes = malloc(from->class_count * sizeof(char *) + text);
		if (!to->classes) {
			bp_schema_clear(&c);
			return -ENOMEM;
		}
		dst = (char *)(to->classes + from->class_count);
		for (uint32_t k = 0; k < from->class_count; k++) {
			size_t n = strlen(from->classes[k]) + 1;

			memcpy(dst, from->classes[k], n);
			to->classes[k] = dst;
			dst += n;
		}
	}
	*ret = c;
	return 0;
}

void bp_schema_clear(bp_schema *s)
{
	if (!s)
		return;
	for (uint32_t i = 0; s->fields && i < s->count; i++)
		free(s->fields[i].classes);
	free(s->fields);
	*s = (bp_schema){ 0 };
}

static bp_field default_field = { .name = "data", .type = BP_FIELD_BYTES };
static const bp_schema default_schema = { .count = 1, .fields = &default_field };

const bp_schema *bp_schema_default(void)
{
	return &default_schema;
}
