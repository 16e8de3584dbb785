/* SPDX-License-Identifier: MIT */
/*
 * pack_read.c - batchd-pack's views of a dataset's fields: `ls`, `cat`
 * and the schema part of `info` (see pack_read.h, docs/packs.md).
 *
 * `ls` prints one line per sample, "ID KEY FIELD=VALUE...", so it must
 * stay one line whatever a key or text holds: a key or str value that is
 * empty or holds a blank, a control byte, a quote or a backslash is
 * printed in double quotes with C escapes (\", \\, \n, \t, \r, \xHH),
 * and so is a key "-", which alone means "no key"; anything else, UTF-8
 * included, as it is. Floats print in the fewest
 * digits that read back to the stored value.
 *
 * `cat` takes a sample as an id or a key: an operand of digits only is an
 * id (as before keys existed), anything else a key; --id N and --key K say
 * which outright. In a pack without keys an operand that is not an id is
 * a usage error, as it was before keys.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "pack.h"
#include "pack_fields.h"
#include "pack_file.h"
#include "pack_read.h"

void pack_say_open_fault(const char *path, int r, const bp_dataset_fault *fault)
{
	char msg[512];

	if (fault->pack.what && (r == -EBADMSG || r == -ENOTSUP || r == -E2BIG)) {
		bp_dataset_fault_format(fault, msg, sizeof(msg));
		fprintf(stderr, "batchd-pack: %s: %s\n", path, msg);
	} else if (fault->pack.what) {
		fprintf(stderr, "batchd-pack: %s: %s%s%s: %s\n", path,
			strcmp(fault->shard, path) ? fault->shard : "",
			strcmp(fault->shard, path) ? ": " : "", fault->pack.what, strerror(-r));
	} else {
		fprintf(stderr, "batchd-pack: %s: %s\n", path, strerror(-r));
	}
}

int pack_open_dataset(const char *path, bp_dataset **ret)
{
	bp_dataset_fault fault = { 0 };
	int r;

	r = bp_dataset_openat(AT_FDCWD, path, ret, &fault);
	if (r < 0)
		pack_say_open_fault(path, r, &fault);
	return r;
}

/* A read fault as one message naming the dataset. */
static void say_fault(const char *path, int r, const bp_dataset_fault *fault)
{
	char msg[512];

	if (fault->pack.what) {
		bp_dataset_fault_format(fault, msg, sizeof(msg));
		fprintf(stderr, "batchd-pack: %s: %s\n", path, msg);
	} else {
		fprintf(stderr, "batchd-pack: %s: %s\n", path, strerror(-r));
	}
}

/* ---- values as text ---------------------------------------------------------- */

/* s as one token of an ls line: bare, or quoted with C escapes (a lone "-" too: it means no key). */
static void put_text(const char *s, size_t len)
{
	bool bare = len > 0 && !(len == 1 && s[0] == '-');

	for (size_t i = 0; i < len && bare; i++) {
		unsigned char c = (unsigned char)s[i];

		bare = c > 0x20 && c != 0x7f && c != '"' && c != '\\';
	}
	if (bare) {
		fwrite(s, 1, len, stdout);
		return;
	}
	putchar('"');
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c == '\n')
			fputs("\\n", stdout);
		else if (c == '\t')
			fputs("\\t", stdout);
		else if (c == '\r')
			fputs("\\r", stdout);
		else if (c < 0x20 || c == 0x7f)
			printf("\\x%02x", c);
		else
			putchar(c);
	}
	putchar('"');
}

/*
 * v in the fewest significant digits that read back to it (as a float for
 * float32), without an exponent where the digits before the point fit
 * ("100", not "1e+02"); "null" for a value JSON cannot carry.
 */
static void format_float(double v, bool single, char *buf, size_t len)
{
	int p = 1;

	if (!isfinite(v)) {
		snprintf(buf, len, "null");
		return;
	}
	for (; p < 17; p++) {
		snprintf(buf, len, "%.*g", p, v);
		if (single ? strtof(buf, NULL) == (float)v : strtod(buf, NULL) == v)
			break;
	}
	if (fabs(v) >= 1 && fabs(v) < 1e17 && (int)floor(log10(fabs(v))) + 1 > p)
		p = (int)floor(log10(fabs(v))) + 1;
	snprintf(buf, len, "%.*g", p, v);
}

/* A column's minimum or maximum as text: integers exactly (below 2^53), floats as above. */
static void format_bound(double v, uint32_t type, char *buf, size_t len)
{
	if (type == BP_FIELD_INT64 && isfinite(v))
		snprintf(buf, len, "%.0f", v);
	else
		format_float(v, type == BP_FIELD_FLOAT32, buf, len);
}

/* Scalar field f of sample id as text into buf. */
static void format_scalar(const bp_dataset *ds, uint64_t id, uint32_t f, char *buf, size_t len)
{
	uint32_t type = bp_dataset_schema(ds)->fields[f].type;
	union { int64_t i; float f32; double f64; } v;

	bp_dataset_field_scalar(ds, id, f, &v);
	if (type == BP_FIELD_INT64)
		snprintf(buf, len, "%" PRId64, v.i);
	else
		format_float(type == BP_FIELD_FLOAT32 ? (double)v.f32 : v.f64,
			     type == BP_FIELD_FLOAT32, buf, len);
}

/* ---- ls ------------------------------------------------------------------------ */

/* "A:B" (either side may be empty) into [*a, *b) within n samples. @return 0 or -EINVAL. */
static int parse_range(const char *s, uint64_t n, uint64_t *a, uint64_t *b)
{
	const char *colon = strchr(s, ':');
	char left[32];

	if (!colon || (size_t)(colon - s) >= sizeof(left))
		return -EINVAL;
	snprintf(left, sizeof(left), "%.*s", (int)(colon - s), s);
	*a = 0;
	*b = n;
	if (left[0] && cli_parse_u64(left, a) < 0)
		return -EINVAL;
	if (colon[1] && cli_parse_u64(colon + 1, b) < 0)
		return -EINVAL;
	if (*b > n)
		*b = n;
	return *a <= *b || *a >= n ? 0 : -EINVAL;
}

static void ls_fields(const bp_dataset *ds, uint64_t id)
{
	const bp_schema *s = bp_dataset_schema(ds);
	char buf[64];

	for (uint32_t f = 0; f < s->count; f++) {
		const bp_field *fd = &s->fields[f];
		const uint8_t *text;
		uint64_t off, size;

		printf(" %s=", fd->name);
		if (fd->type == BP_FIELD_BYTES) {
			bp_dataset_field_span(ds, id, f, &off, &size);
			printf("<%" PRIu64 " bytes>", size);
		} else if (fd->type == BP_FIELD_STR) {
			bp_dataset_field_str(ds, id, f, &text, &size);
			put_text((const char *)text, size);
		} else {
			format_scalar(ds, id, f, buf, sizeof(buf));
			fputs(buf, stdout);
		}
	}
	putchar('\n');
}

static int ls_run(const char *path, const bp_dataset *ds, uint64_t a, uint64_t b)
{
	bp_dataset_fault fault = { 0 };
	bp_key_reader *kr = NULL;
	int r = 0;

	if (bp_dataset_has_keys(ds) && (r = bp_key_reader_new(ds, &kr)) < 0) {
		fprintf(stderr, "batchd-pack: %s: cannot read keys: %s\n", path, strerror(-r));
		return 1;
	}
	for (uint64_t id = a; id < b; id++) {
		const char *key;
		size_t len;

		printf("%" PRIu64 " ", id);
		if (!kr) {
			putchar('-');
		} else if ((r = bp_key_reader_get(kr, id, &key, &len, &fault)) < 0) {
			fflush(stdout);
			say_fault(path, r, &fault);
			break;
		} else {
			put_text(key, len);
		}
		ls_fields(ds, id);
	}
	bp_key_reader_free(kr);
	if (fflush(stdout) != 0 && r == 0) {
		fprintf(stderr, "batchd-pack: writing to stdout: %s\n", strerror(errno));
		r = -EIO;
	}
	return r < 0 ? 1 : 0;
}

int pack_cmd_ls(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "range", required_argument, NULL, 'r' },
		{ NULL, 0, NULL, 0 },
	};
	const char *path = NULL, *range = NULL;
	uint64_t a, b;
	bp_dataset *ds;
	int c, r;

	optind = 1;
	while ((c = getopt_long(argc, argv, "-", opts, NULL)) != -1) {
		if (c == 'r')
			range = optarg;
		else if (c == 1 && !path)
			path = optarg;
		else if (c == 1)
			return cli_usage("ls: unexpected argument '%s'", optarg);
		else
			return cli_usage(NULL);
	}
	if (!path)
		return cli_usage("ls: missing PATH");
	if (pack_open_dataset(path, &ds) < 0)
		return 1;
	a = 0;
	b = bp_dataset_samples(ds);
	if (range && parse_range(range, bp_dataset_samples(ds), &a, &b) < 0) {
		bp_dataset_close(ds);
		return cli_usage("ls: --range '%s' is not A:B with A <= B (sample ids, either may "
				 "be left out)", range);
	}
	r = ls_run(path, ds, a, b);
	bp_dataset_close(ds);
	return r;
}

/* ---- cat ------------------------------------------------------------------------ */

typedef struct cat_args {
	const char *path, *sample, *key, *id, *field;
} cat_args;

static int cat_parse(int argc, char **argv, cat_args *a)
{
	static const struct option opts[] = {
		{ "field", required_argument, NULL, 'f' },
		{ "key", required_argument, NULL, 'k' },
		{ "id", required_argument, NULL, 'i' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "-", opts, NULL)) != -1) {
		if (c == 'f')
			a->field = optarg;
		else if (c == 'k')
			a->key = optarg;
		else if (c == 'i')
			a->id = optarg;
		else if (c == 1 && !a->path)
			a->path = optarg;
		else if (c == 1 && !a->sample)
			a->sample = optarg;
		else if (c == 1)
			return cli_usage("cat: unexpected argument '%s'", optarg);
		else
			return cli_usage(NULL);
	}
	if (!a->path || (!!a->sample + !!a->key + !!a->id) != 1)
		return cli_usage("cat: expected PATH and one of ID, KEY, --id N, --key K");
	/* Digits only is an id, even one too large to be one: keys of digits need --key. */
	if (a->sample && a->sample[0] && strspn(a->sample, "0123456789") == strlen(a->sample))
		a->id = a->sample;
	else if (a->sample && a->sample[0])
		a->key = a->sample;
	else if (a->sample || (a->key && !a->key[0]))
		return cli_usage("cat: an empty KEY names no sample (keys are 1 to %u bytes)",
				 BP_KEY_MAX);
	if (a->id) {
		uint64_t v;

		if (cli_parse_u64(a->id, &v) < 0)
			return cli_usage("cat: '%s' is not a sample id", a->id);
	}
	return 0;
}

/* The sample a names: its id, or the id of its key. @return 0, -1 (said why) or 2 (usage). */
static int cat_resolve(const cat_args *a, const bp_dataset *ds, uint64_t *ret)
{
	bp_dataset_fault fault = { 0 };
	bp_key_reader *kr = NULL;
	int r;

	if (a->id) {
		cli_parse_u64(a->id, ret);
		if (*ret < bp_dataset_samples(ds))
			return 0;
		fprintf(stderr, "batchd-pack: %s: no sample %" PRIu64 " (the dataset has %" PRIu64
				")\n", a->path, *ret, bp_dataset_samples(ds));
		return -1;
	}
	if (!bp_dataset_has_keys(ds) && a->sample)
		return cli_usage("cat: '%s' is not a sample id, and %s stores no keys", a->sample,
				 a->path);
	if (!bp_dataset_has_keys(ds)) {
		fprintf(stderr, "batchd-pack: %s: stores no keys (packed with --no-keys or "
				"--records); name the sample by id\n", a->path);
		return -1;
	}
	r = bp_key_reader_new(ds, &kr);
	if (r == 0)
		r = bp_key_reader_find(kr, a->key, strlen(a->key), ret, &fault);
	bp_key_reader_free(kr);
	if (r == -ENOENT)
		fprintf(stderr, "batchd-pack: %s: no sample has key '%s'\n", a->path, a->key);
	else if (r < 0)
		say_fault(a->path, r, &fault);
	return r < 0 ? -1 : 0;
}

/* Field f of sample id to stdout: bytes and str as stored, a scalar as text and a newline. */
static int cat_write(const char *path, const bp_dataset *ds, uint64_t id, uint32_t f)
{
	const bp_field *fd = &bp_dataset_schema(ds)->fields[f];
	bp_dataset_fault fault = { 0 };
	bp_sample_reader *rd = NULL;
	const uint8_t *data;
	uint64_t off = 0, size;
	char buf[64];
	int r = 0;

	if (fd->type == BP_FIELD_BYTES) {
		r = bp_sample_reader_new(ds, &rd);
		if (r == 0)
			r = bp_sample_reader_get(rd, id, &data, &size, &fault);
		if (r < 0) {
			say_fault(path, r, &fault);
			bp_sample_reader_free(rd);
			return 1;
		}
		bp_dataset_field_span(ds, id, f, &off, &size);
	} else if (fd->type == BP_FIELD_STR) {
		bp_dataset_field_str(ds, id, f, &data, &size);
	} else {
		format_scalar(ds, id, f, buf, sizeof(buf));
		strcat(buf, "\n");
		data = (const uint8_t *)buf;
		size = strlen(buf);
	}
	r = bp_write_full(STDOUT_FILENO, data + off, size);
	if (r < 0)
		fprintf(stderr, "batchd-pack: writing to stdout: %s\n", strerror(-r));
	bp_sample_reader_free(rd);
	return r < 0 ? 1 : 0;
}

int pack_cmd_cat(int argc, char **argv)
{
	cat_args a = { 0 };
	const bp_schema *s;
	bp_dataset *ds;
	uint64_t id;
	int r = cat_parse(argc, argv, &a), f = 0;

	if (r)
		return r;
	if (pack_open_dataset(a.path, &ds) < 0)
		return 1;
	s = bp_dataset_schema(ds);
	if (a.field && (f = bp_schema_find(s, a.field)) < 0) {
		fprintf(stderr, "batchd-pack: %s: no field '%s' (fields:", a.path, a.field);
		for (uint32_t k = 0; k < s->count; k++)
			fprintf(stderr, " %s", s->fields[k].name);
		fprintf(stderr, ")\n");
		r = 1;
	}
	while (!a.field && (uint32_t)f < s->count && s->fields[f].type != BP_FIELD_BYTES)
		f++;
	if (r == 0 && (uint32_t)f == s->count) {
		fprintf(stderr, "batchd-pack: %s: no bytes field; name one with --field\n", a.path);
		r = 1;
	}
	if (r == 0 && (r = cat_resolve(&a, ds, &id)) == 0)
		r = cat_write(a.path, ds, id, (uint32_t)f);
	else if (r < 0)
		r = 1;
	bp_dataset_close(ds);
	return r;
}

/* ---- info ------------------------------------------------------------------------- */

/* Field f's smallest and largest value as text into lo and hi; false (both "null") when it has none. */
static bool field_bounds(const bp_dataset *ds, uint32_t f, char *lo, char *hi, size_t len)
{
	uint32_t type = bp_dataset_schema(ds)->fields[f].type;
	double min, max;

	snprintf(lo, len, "null");
	snprintf(hi, len, "null");
	if (!bp_field_scalar_size(type) || !bp_dataset_samples(ds))
		return false;
	bp_dataset_field_range(ds, f, &min, &max);
	format_bound(min, type, lo, len);
	format_bound(max, type, hi, len);
	return true;
}

void pack_info_fields_text(const bp_dataset *ds)
{
	const bp_schema *s = bp_dataset_schema(ds);
	char lo[64], hi[64];

	printf("keys          %s\n", bp_dataset_has_keys(ds) ? "stored" : "none");
	for (uint32_t f = 0; f < s->count; f++) {
		const bp_field *fd = &s->fields[f];

		printf("field         %s %s", fd->name, bp_field_type_name(fd->type));
		if (fd->type == BP_FIELD_BYTES && fd->fixed_size)
			printf(" fixed %" PRIu64 " bytes", fd->fixed_size);
		if (field_bounds(ds, f, lo, hi, sizeof(lo)))
			printf(" min %s max %s", lo, hi);
		if (fd->class_count) {
			printf(" classes %u (", fd->class_count);
			for (uint32_t c = 0; c < fd->class_count && c < 8; c++) {
				printf("%s", c ? " " : "");
				put_text(fd->classes[c], strlen(fd->classes[c]));
			}
			printf("%s)", fd->class_count > 8 ? " ..." : "");
		}
		putchar('\n');
	}
}

void pack_info_fields_json(const bp_dataset *ds, bool last)
{
	const bp_schema *s = bp_dataset_schema(ds);
	char lo[64], hi[64];

	printf("\"keys\": %s, \"fields\": [", bp_dataset_has_keys(ds) ? "true" : "false");
	for (uint32_t f = 0; f < s->count; f++) {
		const bp_field *fd = &s->fields[f];

		field_bounds(ds, f, lo, hi, sizeof(lo));
		printf("%s{\"name\": \"%s\", \"type\": \"%s\", \"min\": %s, \"max\": %s, "
		       "\"classes\": %u, \"fixed_size\": %" PRIu64 "}", f ? ", " : "", fd->name,
		       bp_field_type_name(fd->type), lo, hi, fd->class_count, fd->fixed_size);
	}
	printf("]%s", last ? "" : ", ");
}

/* ---- token packs ------------------------------------------------------------------ */

void pack_info_tokens_text(const bp_dataset *ds)
{
	bp_tokens t;

	if (bp_dataset_tokens(ds, &t) < 0)
		return;
	printf("dtype         %s\n", t.width == 2 ? "uint16" : "uint32");
	printf("documents     %" PRIu64 "\n", t.documents);
	printf("tokens        %" PRIu64 "\n", t.tokens);
	if (t.eos == BP_TOKENS_NO_EOS)
		printf("eos           none\n");
	else
		printf("eos           %" PRIu64 "\n", t.eos);
	printf("max id        %" PRIu64 "\n", t.max_id);
	printf("mean document %.1f tokens\n", (double)t.tokens / (double)t.documents);
	printf("longest doc   %" PRIu64 " tokens\n", bp_dataset_max_sample(ds) / t.width);
}

void pack_info_tokens_json(const bp_dataset *ds)
{
	bp_tokens t;

	if (bp_dataset_tokens(ds, &t) < 0) {
		printf("\"tokens\": null, ");
		return;
	}
	printf("\"tokens\": {\"dtype\": \"%s\", \"documents\": %" PRIu64 ", \"tokens\": %" PRIu64
	       ", \"eos\": ", t.width == 2 ? "uint16" : "uint32", t.documents, t.tokens);
	if (t.eos == BP_TOKENS_NO_EOS)
		printf("null");
	else
		printf("%" PRIu64, t.eos);
	printf(", \"max_id\": %" PRIu64 ", \"mean_document\": %.2f, \"longest_document\": %" PRIu64
	       "}, ", t.max_id, (double)t.tokens / (double)t.documents,
	       bp_dataset_max_sample(ds) / t.width);
}
