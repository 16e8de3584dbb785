/* SPDX-License-Identifier: MIT */
/*
 * pack-fields-fixture.c - the record sets the fields suites share
 * (pack-fields-fixture.h), compiled into each of them.
 */
#include "pack-fields-fixture.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <check.h>

static char *cls3[] = { "cat", "dog", "fish" };

static bp_field full_fields[] = {
	{ .name = "image", .type = BP_FIELD_BYTES },
	{ .name = "label", .type = BP_FIELD_INT64, .class_count = 3, .classes = cls3 },
	{ .name = "mask", .type = BP_FIELD_BYTES },
	{ .name = "score", .type = BP_FIELD_FLOAT32 },
	{ .name = "caption", .type = BP_FIELD_STR },
	{ .name = "weight", .type = BP_FIELD_FLOAT64 },
	{ .name = "meta", .type = BP_FIELD_BYTES },
};
const bp_schema full_schema = { .count = 7, .fields = full_fields };
const bp_schema labelled_schema = { .count = 2, .fields = full_fields };
const bp_schema two_schema = { .count = 3, .fields = full_fields };

void recs_make(recs *r, const bp_schema *schema, size_t n, uint64_t seed, bool keys,
	       const char *key_prefix)
{
	uint64_t st = seed, *sizes = calloc(n, sizeof(*sizes));
	uint32_t nf = schema->count;

	ck_assert_ptr_nonnull(sizes);
	*r = (recs){ .schema = schema, .n = n };
	r->vals = calloc(n * nf, sizeof(*r->vals));
	r->text = calloc(n * nf, sizeof(*r->text));
	ck_assert(r->vals && r->text);
	if (keys) {
		r->keys = calloc(n, sizeof(*r->keys));
		ck_assert_ptr_nonnull(r->keys);
	}
	for (size_t i = 0; i < n; i++) {
		for (uint32_t f = 0; f < nf; f++) {
			const bp_field *fd = &schema->fields[f];
			bp_field_value *v = &r->vals[i * nf + f];
			char buf[128];
			int len;

			switch (fd->type) {
			case BP_FIELD_BYTES:
				v->size = strcmp(fd->name, "mask") == 0 ? 16 : pt_rand_range(&st, 0, 300);
				sizes[i] += v->size;
				break;
			case BP_FIELD_INT64:
				v->i64 = fd->class_count ? (int64_t)pt_rand_range(&st, 0, fd->class_count - 1)
							 : (int64_t)pt_rand(&st);
				break;
			case BP_FIELD_FLOAT32:
			case BP_FIELD_FLOAT64:
				v->f64 = ((double)pt_rand_range(&st, 0, 200000) - 100000.0) / 7.0;
				break;
			case BP_FIELD_STR:
				len = i % 5 == 4 ? 0 : snprintf(buf, sizeof(buf), "caption %zu: %llu", i,
								(unsigned long long)pt_rand(&st));
				r->text[i * nf + f] = strndup(buf, (size_t)len);
				v->data = r->text[i * nf + f];
				v->size = (uint64_t)len;
				break;
			}
		}
		if (keys) {
			char buf[128];

			snprintf(buf, sizeof(buf), "%s/class%d/%06zu.jpg", key_prefix, (int)(i % 7), i);
			r->keys[i] = strdup(buf);
		}
	}
	pt_samples_sized(&r->s, sizes, n, 0, seed + 1);
	free(sizes);
}

void recs_free(recs *r)
{
	for (size_t i = 0; i < r->n; i++) {
		if (r->keys)
			free(r->keys[i]);
		for (uint32_t f = 0; f < r->schema->count; f++)
			free(r->text[i * r->schema->count + f]);
	}
	free(r->keys);
	free(r->text);
	free(r->vals);
	pt_samples_free(&r->s);
}

static pt_fields recs_fields(const recs *r)
{
	return (pt_fields){ .schema = r->schema, .vals = r->vals,
			    .keys = (const char *const *)r->keys };
}

void recs_build(const recs *r, size_t per_block, uint64_t frame_size, uint8_t **buf,
		size_t *len)
{
	pt_fields pf = recs_fields(r);

	ck_assert_int_eq(pt_pack_build_fields(&r->s, per_block, frame_size, &pf, buf, len), 0);
}

int open_bytes(const uint8_t *buf, size_t len, bp_dataset **ret, bp_dataset_fault *fault)
{
	int fd = memfd_create("fields", MFD_CLOEXEC), r;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, buf, len), (ssize_t)len);
	r = bp_dataset_fdopen(fd, "fields.bpk", ret, fault);
	close(fd);
	return r;
}

/* A temporary directory holding the given shards as NNN.bpk. */
void write_dir(char *dir, uint8_t **bufs, const size_t *lens, size_t n)
{
	strcpy(dir, "/tmp/test-pack-fields-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	for (size_t i = 0; i < n; i++) {
		char path[128];
		int fd;

		snprintf(path, sizeof(path), "%s/%03zu.bpk", dir, i);
		fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(write(fd, bufs[i], lens[i]), (ssize_t)lens[i]);
		close(fd);
	}
}

void remove_dir(const char *dir, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char path[128];

		snprintf(path, sizeof(path), "%s/%03zu.bpk", dir, i);
		unlink(path);
	}
	rmdir(dir);
}

bp_pack_writer *new_writer(int *fd)
{
	bp_pack_writer *w;

	*fd = memfd_create("w", MFD_CLOEXEC);
	ck_assert_int_ge(*fd, 0);
	ck_assert_int_eq(bp_pack_writer_new(*fd, NULL, 0, &w), 0);
	return w;
}
