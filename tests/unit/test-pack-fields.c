/* SPDX-License-Identifier: MIT */
/*
 * test-pack-fields.c - the Check suite for samples with fields (PACK.md
 * §Fields) from writer to reader: the writer's sections, the reader's
 * columns and sizes, and the keys.
 *
 * Shards of one, two and three bytes fields beside int64, float32,
 * float64 and str fields, with and without keys, framed or not, one shard
 * or several, give back every value, span, byte and key, and every key
 * finds its sample. Packs without a schema stay what they were byte for
 * byte (hashes of the bytes the writer wrote before fields existed). The
 * fingerprint follows labels and keys.
 *
 * What a reader must refuse (every byte of the sections flipped, hostile
 * schemas, columns and sizes) is test-pack-fields-hostile.c's; both build
 * their shards from the record sets of pack-fields-fixture.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <check.h>
#include <xxhash.h>

#include "pack-fields-fixture.h"
#include "pack-testlib.h"
#include "pack.h"
#include "pack_fields.h"
#include "pack_file.h"
#include "pack_writer.h"

/* Every value of r's samples as ds gives them, from global id first on. */
static void check_recs(const bp_dataset *ds, const recs *r, uint64_t first)
{
	const bp_schema *sc = bp_dataset_schema(ds);
	bp_sample_reader *rd;
	uint32_t nf = r->schema->count;

	ck_assert_uint_eq(sc->count, nf);
	ck_assert_int_eq(bp_sample_reader_new(ds, &rd), 0);
	for (size_t i = 0; i < r->n; i++) {
		const uint8_t *data;
		uint64_t size, at = 0;

		ck_assert_int_eq(bp_sample_reader_get(rd, first + i, &data, &size, NULL), 0);
		ck_assert_uint_eq(size, r->s.sizes[i]);
		ck_assert_mem_eq(data, pt_sample(&r->s, i), size);
		for (uint32_t f = 0; f < nf; f++) {
			const bp_field_value *v = &r->vals[i * nf + f];
			uint64_t off, len;
			const uint8_t *text;
			int64_t i64;
			float f32;
			double f64;

			ck_assert_str_eq(sc->fields[f].name, r->schema->fields[f].name);
			switch (sc->fields[f].type) {
			case BP_FIELD_BYTES:
				bp_dataset_field_span(ds, first + i, f, &off, &len);
				ck_assert_uint_eq(off, at);
				ck_assert_uint_eq(len, v->size);
				at += len;
				break;
			case BP_FIELD_INT64:
				bp_dataset_field_scalar(ds, first + i, f, &i64);
				ck_assert_int_eq(i64, v->i64);
				break;
			case BP_FIELD_FLOAT32:
				bp_dataset_field_scalar(ds, first + i, f, &f32);
				ck_assert(f32 == (float)v->f64);
				break;
			case BP_FIELD_FLOAT64:
				bp_dataset_field_scalar(ds, first + i, f, &f64);
				ck_assert(f64 == v->f64);
				break;
			case BP_FIELD_STR:
				bp_dataset_field_str(ds, first + i, f, &text, &len);
				ck_assert_uint_eq(len, v->size);
				ck_assert_mem_eq(text, v->data, len);
				break;
			}
		}
		ck_assert_uint_eq(at, size);
	}
	bp_sample_reader_free(rd);
}

/* Every key of r: by id, and found by key. */
static void check_keys(const bp_dataset *ds, const recs *r, uint64_t first)
{
	bp_key_reader *kr;

	ck_assert(bp_dataset_has_keys(ds));
	ck_assert_int_eq(bp_key_reader_new(ds, &kr), 0);
	for (size_t i = 0; i < r->n; i++) {
		const char *key;
		size_t len;
		uint64_t id;

		ck_assert_int_eq(bp_key_reader_get(kr, first + i, &key, &len, NULL), 0);
		ck_assert_uint_eq(len, strlen(r->keys[i]));
		ck_assert_mem_eq(key, r->keys[i], len);
		ck_assert_int_eq(bp_key_reader_find(kr, r->keys[i], strlen(r->keys[i]), &id, NULL), 0);
		ck_assert_uint_eq(id, first + i);
	}
	bp_key_reader_free(kr);
}

/* ---- round trips -------------------------------------------------------------- */

static void roundtrip(const bp_schema *schema, size_t n, size_t per_block, uint64_t frame_size,
		      bool keys)
{
	bp_dataset_fault fault;
	bp_dataset *ds;
	uint8_t *buf;
	size_t len;
	recs r;

	recs_make(&r, schema, n, 7 + n, keys, "train");
	recs_build(&r, per_block, frame_size, &buf, &len);
	ck_assert_uint_eq(pt_le32(buf + len - BP_PACK_FOOTER_SIZE + FTR_VERSION),
			  BP_PACK_VERSION_SECTIONS);
	ck_assert_int_eq(open_bytes(buf, len, &ds, &fault), 0);
	ck_assert_uint_eq(bp_dataset_samples(ds), n);
	ck_assert(bp_dataset_has_keys(ds) == keys);
	check_recs(ds, &r, 0);
	if (keys)
		check_keys(ds, &r, 0);
	ck_assert_int_eq(bp_dataset_verify(ds, NULL, NULL, &fault), 0);
	ck_assert_uint_gt(bp_dataset_field_bytes(ds), 0);
	bp_dataset_close(ds);
	free(buf);
	recs_free(&r);
}

START_TEST(test_roundtrip_one_bytes)
{
	roundtrip(&labelled_schema, 50, 4, 0, true);
	roundtrip(&labelled_schema, 50, 1, 0, false);
}
END_TEST

START_TEST(test_roundtrip_two_bytes)
{
	roundtrip(&two_schema, 40, 3, 0, true);
}
END_TEST

START_TEST(test_roundtrip_three_bytes)
{
	roundtrip(&full_schema, 60, 5, 0, true);
	roundtrip(&full_schema, 1, 1, 0, true);
}
END_TEST

/* Frames cut through a sample's fields; spans stay the sample's own. */
START_TEST(test_roundtrip_frames)
{
	static bp_field big_fields[] = {
		{ .name = "a", .type = BP_FIELD_BYTES },
		{ .name = "b", .type = BP_FIELD_BYTES },
		{ .name = "y", .type = BP_FIELD_FLOAT64 },
	};
	static const bp_schema big = { .count = 3, .fields = big_fields };
	bp_field_value vals[6] = {
		{ .size = 9000 }, { .size = 3000 }, { .f64 = 1.5 },
		{ .size = 10 }, { .size = 0 }, { .f64 = -2.0 },
	};
	uint64_t sizes[2] = { 12000, 10 };
	const char *keys[2] = { "big", "small" };
	pt_fields pf = { .schema = &big, .vals = vals, .keys = keys };
	bp_dataset *ds;
	uint64_t off, size;
	double y;
	pt_samples s;
	uint8_t *buf;
	size_t len;

	pt_samples_sized(&s, sizes, 2, 1, 5);
	ck_assert_int_eq(pt_pack_build_fields(&s, 2, BP_PACK_MIN_FRAME, &pf, &buf, &len), 0);
	ck_assert_int_eq(open_bytes(buf, len, &ds, NULL), 0);
	ck_assert_uint_eq(bp_dataset_framed(ds), 1);
	bp_dataset_field_span(ds, 0, 1, &off, &size);
	ck_assert_uint_eq(off, 9000);
	ck_assert_uint_eq(size, 3000);
	bp_dataset_field_span(ds, 1, 1, &off, &size);
	ck_assert_uint_eq(off, 10);
	ck_assert_uint_eq(size, 0);
	bp_dataset_field_scalar(ds, 1, 2, &y);
	ck_assert(y == -2.0);
	ck_assert_int_eq(bp_dataset_verify(ds, NULL, NULL, NULL), 0);
	bp_dataset_close(ds);
	free(buf);
	pt_samples_free(&s);
}
END_TEST

/* The schema read back: names, types, classes, and the fixed size the writer found. */
START_TEST(test_schema_stored)
{
	const bp_schema *sc;
	bp_dataset *ds;
	double lo, hi;
	uint8_t *buf;
	size_t len;
	recs r;

	recs_make(&r, &full_schema, 30, 3, false, NULL);
	recs_build(&r, 4, 0, &buf, &len);
	ck_assert_int_eq(open_bytes(buf, len, &ds, NULL), 0);
	sc = bp_dataset_schema(ds);
	ck_assert_uint_eq(sc->count, 7);
	ck_assert_uint_eq(sc->fields[1].type, BP_FIELD_INT64);
	ck_assert_uint_eq(sc->fields[1].class_count, 3);
	ck_assert_str_eq(sc->fields[1].classes[2], "fish");
	ck_assert_uint_eq(sc->fields[2].fixed_size, 16);
	ck_assert_uint_eq(sc->fields[0].fixed_size, 0);
	ck_assert_int_eq(bp_schema_find(sc, "caption"), 4);
	ck_assert_int_eq(bp_schema_find(sc, "nope"), -ENOENT);
	ck_assert_uint_eq(bp_schema_bytes_fields(sc), 3);
	ck_assert_uint_eq(bp_schema_bytes_rank(sc, 6), 2);
	bp_dataset_field_range(ds, 1, &lo, &hi);
	ck_assert(lo >= 0 && hi <= 2 && lo <= hi);
	ck_assert(!bp_dataset_has_keys(ds));
	bp_dataset_close(ds);
	free(buf);
	recs_free(&r);
}
END_TEST

/* ---- datasets of several shards ------------------------------------------------- */

START_TEST(test_multi_shard)
{
	char dir[64], miss[] = "no/such/key";
	bp_dataset_fault fault;
	recs r[3];
	uint8_t *bufs[3];
	size_t lens[3];
	bp_key_reader *kr;
	bp_dataset *ds;
	uint64_t first = 0, id;

	for (size_t i = 0; i < 3; i++) {
		char prefix[16];

		snprintf(prefix, sizeof(prefix), "shard%zu", i);
		recs_make(&r[i], &full_schema, 20 + 15 * i, 100 + i, true, prefix);
		recs_build(&r[i], 3, 0, &bufs[i], &lens[i]);
	}
	write_dir(dir, bufs, lens, 3);
	ck_assert_int_eq(bp_dataset_openat(AT_FDCWD, dir, &ds, &fault), 0);
	ck_assert_uint_eq(bp_dataset_shard_count(ds), 3);
	for (size_t i = 0; i < 3; i++) {
		check_recs(ds, &r[i], first);
		check_keys(ds, &r[i], first);
		first += r[i].n;
	}
	ck_assert_uint_eq(bp_dataset_schema(ds)->fields[2].fixed_size, 16);
	ck_assert_int_eq(bp_key_reader_new(ds, &kr), 0);
	ck_assert_int_eq(bp_key_reader_find(kr, miss, strlen(miss), &id, NULL), -ENOENT);
	ck_assert_int_eq(bp_key_reader_get(kr, first, (const char **)&miss, &lens[0], NULL),
			 -EINVAL);
	bp_key_reader_free(kr);
	ck_assert_int_eq(bp_dataset_verify(ds, NULL, NULL, &fault), 0);
	bp_dataset_close(ds);
	remove_dir(dir, 3);
	for (size_t i = 0; i < 3; i++) {
		free(bufs[i]);
		recs_free(&r[i]);
	}
}
END_TEST

/* Shards of different schemas make no dataset; an old shard beside a keyed one drops the keys. */
START_TEST(test_multi_shard_schemas)
{
	bp_dataset_fault fault;
	uint8_t *bufs[2];
	size_t lens[2];
	bp_dataset *ds;
	char dir[64];
	recs a, b;

	recs_make(&a, &full_schema, 10, 1, false, NULL);
	recs_make(&b, &two_schema, 10, 2, false, NULL);
	recs_build(&a, 2, 0, &bufs[0], &lens[0]);
	recs_build(&b, 2, 0, &bufs[1], &lens[1]);
	write_dir(dir, bufs, lens, 2);
	ck_assert_int_eq(bp_dataset_openat(AT_FDCWD, dir, &ds, &fault), -EBADMSG);
	ck_assert_str_eq(fault.pack.what, "shards' schemas differ");
	ck_assert_str_eq(fault.shard, "001.bpk");
	remove_dir(dir, 2);
	free(bufs[0]);
	free(bufs[1]);
	recs_free(&a);
	recs_free(&b);

	/* A pack before fields, and one with the default schema and keys. */
	{
		bp_field_value vals[10];
		const char *keys[10] = { "a", "b", "c", "d", "e", "f", "g", "h", "i", "j" };
		pt_fields pf = { .schema = NULL, .vals = vals, .keys = keys };
		pt_samples s;

		pt_samples_make(&s, 10, 0, 100, PT_TEXT, 4);
		for (size_t i = 0; i < 10; i++)
			vals[i] = (bp_field_value){ .size = s.sizes[i] };
		ck_assert_int_eq(pt_pack_build(&s, 3, NULL, 0, 3, &bufs[0], &lens[0]), 0);
		ck_assert_int_eq(pt_pack_build_fields(&s, 3, 0, &pf, &bufs[1], &lens[1]), 0);
		write_dir(dir, bufs, lens, 2);
		ck_assert_int_eq(bp_dataset_openat(AT_FDCWD, dir, &ds, &fault), 0);
		ck_assert_uint_eq(bp_dataset_schema(ds)->count, 1);
		ck_assert_str_eq(bp_dataset_schema(ds)->fields[0].name, "data");
		ck_assert(!bp_dataset_has_keys(ds));
		ck_assert_ptr_null(NULL);
		{
			bp_key_reader *kr = NULL;

			ck_assert_int_eq(bp_key_reader_new(ds, &kr), -ENODATA);
		}
		bp_dataset_close(ds);
		remove_dir(dir, 2);
		free(bufs[0]);
		free(bufs[1]);
		pt_samples_free(&s);
	}
}
END_TEST

/* ---- keys ------------------------------------------------------------------------ */

/* Enough keys for several key blocks and key-hash pages; every one found, near misses not. */
START_TEST(test_keys_many)
{
	size_t n = 3 * BP_KEY_HASH_PAGE + 17;
	bp_field_value *vals = calloc(n, sizeof(*vals));
	char **keys = calloc(n, sizeof(*keys));
	bp_key_reader *kr;
	bp_dataset *ds;
	pt_samples s;
	uint8_t *buf;
	size_t len;

	ck_assert(vals && keys);
	pt_samples_make(&s, n, 0, 8, PT_TEXT, 9);
	for (size_t i = 0; i < n; i++) {
		char k[64];

		vals[i].size = s.sizes[i];
		snprintf(k, sizeof(k), "k%zu", i * 7919 % (n * 3));
		keys[i] = strdup(k);
	}
	{
		pt_fields pf = { .schema = NULL, .vals = vals, .keys = (const char *const *)keys };

		ck_assert_int_eq(pt_pack_build_fields(&s, 64, 0, &pf, &buf, &len), 0);
	}
	ck_assert_int_eq(open_bytes(buf, len, &ds, NULL), 0);
	ck_assert_int_eq(bp_key_reader_new(ds, &kr), 0);
	for (size_t i = 0; i < n; i++) {
		uint64_t id;
		const char *key;
		size_t klen;

		ck_assert_int_eq(bp_key_reader_find(kr, keys[i], strlen(keys[i]), &id, NULL), 0);
		ck_assert_uint_eq(id, i);
		ck_assert_int_eq(bp_key_reader_get(kr, (i * 31) % n, &key, &klen, NULL), 0);
		ck_assert_uint_eq(klen, strlen(keys[(i * 31) % n]));
		ck_assert_mem_eq(key, keys[(i * 31) % n], klen);
	}
	{
		uint64_t id;
		char k[64];

		/* Keys that are not there: other numbers, a prefix, an extension. */
		snprintf(k, sizeof(k), "k%zu", n * 3 + 1);
		ck_assert_int_eq(bp_key_reader_find(kr, k, strlen(k), &id, NULL), -ENOENT);
		ck_assert_int_eq(bp_key_reader_find(kr, "k", 1, &id, NULL), -ENOENT);
		ck_assert_int_eq(bp_key_reader_find(kr, "k0x", 3, &id, NULL), -ENOENT);
		ck_assert_int_eq(bp_key_reader_find(kr, "", 0, &id, NULL), -ENOENT);
	}
	bp_key_reader_free(kr);
	ck_assert_int_eq(bp_dataset_verify(ds, NULL, NULL, NULL), 0);
	bp_dataset_close(ds);
	for (size_t i = 0; i < n; i++)
		free(keys[i]);
	free(keys);
	free(vals);
	free(buf);
	pt_samples_free(&s);
}
END_TEST

/* ---- writer ------------------------------------------------------------------------ */

/* One raw block of n samples of the given sizes (bytes 'x'). */
static int add_raw(bp_pack_writer *w, const uint64_t *sizes, size_t n)
{
	static uint8_t raw[4096];
	bp_pack_encoded enc;
	uint64_t total = 0;

	memset(raw, 'x', sizeof(raw));
	for (size_t i = 0; i < n; i++)
		total += sizes[i];
	enc = (bp_pack_encoded){ .stored = raw, .stored_size = total, .codec = BP_CODEC_RAW,
				 .stored_hash = XXH3_64bits(raw, total) };
	enc.raw_hash = enc.stored_hash;
	return bp_pack_writer_add(w, &enc, total, sizes, n);
}

START_TEST(test_writer_refusals)
{
	static bp_field bad_fields[] = {
		{ .name = "x", .type = BP_FIELD_BYTES },
		{ .name = "x", .type = BP_FIELD_INT64 },
	};
	bp_schema bad = { .count = 2, .fields = bad_fields };
	bp_field_value v[2] = { { .size = 3 }, { .i64 = 1 } };
	uint64_t sizes[2] = { 3, 4 };
	const char *key;
	size_t klen;
	bp_pack_fault pf;
	int fd;
	bp_pack_writer *w = new_writer(&fd);

	ck_assert_int_eq(bp_pack_writer_set_schema_checked(w, &bad, true, &pf), -EINVAL);
	ck_assert_str_eq(pf.what, "two fields have the same name");
	ck_assert_int_eq(bp_pack_writer_add_fields(w, v, NULL, 0), -EINVAL);
	ck_assert_int_eq(bp_pack_writer_set_schema(w, &labelled_schema, true), 0);
	ck_assert_int_eq(bp_pack_writer_set_schema(w, &labelled_schema, true), -EINVAL);
	/* No key, a NUL in one, an over-long one, a label outside the classes. */
	ck_assert_int_eq(bp_pack_writer_add_fields(w, v, NULL, 0), -EINVAL);
	ck_assert_int_eq(bp_pack_writer_add_fields(w, v, "a\0b", 3), -EINVAL);
	ck_assert_int_eq(bp_pack_writer_add_fields(w, v, "a", 0), -EINVAL);
	{
		char long_key[BP_KEY_MAX + 1];

		memset(long_key, 'k', sizeof(long_key));
		ck_assert_int_eq(bp_pack_writer_add_fields(w, v, long_key, sizeof(long_key)), -E2BIG);
	}
	v[1].i64 = 3;
	ck_assert_int_eq(bp_pack_writer_add_fields(w, v, "a", 1), -EINVAL);
	v[1].i64 = -1;
	ck_assert_int_eq(bp_pack_writer_add_fields(w, v, "a", 1), -EINVAL);
	v[1].i64 = 2;
	ck_assert_int_eq(bp_pack_writer_add_fields(w, v, "same", 4), 0);
	ck_assert_int_eq(add_raw(w, sizes, 2), 0);
	/* Sample 1 has no fields yet: finish refuses and the writer is unchanged. */
	ck_assert_int_eq(bp_pack_writer_finish(w, NULL), -EINVAL);
	v[0].size = 5;
	ck_assert_int_eq(bp_pack_writer_add_fields(w, v, "same", 4), 0);
	/* 5 is not sample 1's 4 bytes. */
	ck_assert_int_eq(bp_pack_writer_finish(w, NULL), -EINVAL);
	bp_pack_writer_free(w);
	close(fd);

	w = new_writer(&fd);
	ck_assert_int_eq(bp_pack_writer_set_schema(w, &labelled_schema, true), 0);
	v[0].size = 3;
	ck_assert_int_eq(bp_pack_writer_add_fields(w, v, "same", 4), 0);
	v[0].size = 4;
	ck_assert_int_eq(bp_pack_writer_add_fields(w, v, "same", 4), 0);
	ck_assert_int_eq(add_raw(w, sizes, 2), 0);
	ck_assert_int_eq(bp_pack_writer_duplicate_key(w, &key, &klen), -ENOENT);
	ck_assert_int_eq(bp_pack_writer_finish(w, NULL), -EEXIST);
	ck_assert_int_eq(bp_pack_writer_duplicate_key(w, &key, &klen), 0);
	ck_assert_uint_eq(klen, 4);
	ck_assert_mem_eq(key, "same", 4);
	ck_assert_uint_eq(bp_pack_writer_offset(w), BP_PACK_HEADER_SIZE + 7);
	bp_pack_writer_free(w);
	close(fd);

	/* A schema only before the first block. */
	w = new_writer(&fd);
	ck_assert_int_eq(add_raw(w, sizes, 2), 0);
	ck_assert_int_eq(bp_pack_writer_set_schema(w, &labelled_schema, false), -EINVAL);
	bp_pack_writer_free(w);
	close(fd);
}
END_TEST

/* Values over their limits: a str value, a sample's bytes fields together; and a str without bytes. */
START_TEST(test_writer_limits)
{
	bp_pack_writer *w;
	int fd;

	w = new_writer(&fd);
	ck_assert_int_eq(bp_pack_writer_set_schema(w, &full_schema, false), 0);
	{
		static char text[BP_STR_MAX + 1];
		bp_field_value fv[7] = { { .size = 1 }, { .i64 = 0 }, { .size = 16 }, { .f64 = 0 },
					 { .data = text, .size = BP_STR_MAX + 1 }, { .f64 = 0 },
					 { .size = 0 } };

		ck_assert_int_eq(bp_pack_writer_add_fields(w, fv, NULL, 0), -E2BIG);
		fv[4].size = BP_STR_MAX;
		fv[6].size = BP_PACK_MAX_SAMPLE - 16;
		ck_assert_int_eq(bp_pack_writer_add_fields(w, fv, NULL, 0), -E2BIG);
		fv[4].data = NULL;
		fv[6].size = 0;
		ck_assert_int_eq(bp_pack_writer_add_fields(w, fv, NULL, 0), -EINVAL);
		fv[4].data = text;
		ck_assert_int_eq(bp_pack_writer_add_fields(w, fv, "k", 1), -EINVAL);
		ck_assert_int_eq(bp_pack_writer_add_fields(w, fv, NULL, 0), 0);
	}
	/* The refusals added nothing: one sample of 17 bytes finishes and reads back. */
	{
		uint64_t size = 17;
		const uint8_t *text;
		bp_dataset *ds;
		uint64_t len;

		ck_assert_int_eq(add_raw(w, &size, 1), 0);
		ck_assert_int_eq(bp_pack_writer_finish(w, NULL), 0);
		ck_assert_int_eq(bp_dataset_fdopen(fd, "limits.bpk", &ds, NULL), 0);
		ck_assert_uint_eq(bp_dataset_samples(ds), 1);
		bp_dataset_field_str(ds, 0, 4, &text, &len);
		ck_assert_uint_eq(len, BP_STR_MAX);
		bp_dataset_close(ds);
	}
	bp_pack_writer_free(w);
	close(fd);
}
END_TEST

/* ---- packs before fields ------------------------------------------------------------ */

/*
 * The writer without a schema writes exactly what it wrote before fields
 * existed: the hashes are those of the bytes written by the writer of the
 * previous format version for the same samples.
 */
START_TEST(test_old_packs_unchanged)
{
	uint64_t sizes[5] = { 100, 70000, 5, 20000, 1 };
	bp_dataset *ds;
	pt_samples s, big;
	uint8_t *buf, dict[4096];
	size_t len, dn;

	pt_samples_make(&s, 40, 0, 700, PT_MIXED, 11);
	ck_assert_int_eq(pt_pack_build(&s, 4, NULL, 0, 3, &buf, &len), 0);
	ck_assert_uint_eq(len, 9478);
	ck_assert_uint_eq(XXH3_64bits(buf, len), UINT64_C(0xaed4f5a368afab4f));
	ck_assert_int_eq(open_bytes(buf, len, &ds, NULL), 0);
	ck_assert_uint_eq(bp_dataset_schema(ds)->count, 1);
	ck_assert_str_eq(bp_dataset_schema(ds)->fields[0].name, "data");
	ck_assert_uint_eq(bp_dataset_schema(ds)->fields[0].type, BP_FIELD_BYTES);
	ck_assert(!bp_dataset_has_keys(ds));
	{
		bp_sample_reader *rd;

		ck_assert_int_eq(bp_sample_reader_new(ds, &rd), 0);
		for (size_t i = 0; i < s.n; i++) {
			const uint8_t *data;
			uint64_t size, off, fsize;

			ck_assert_int_eq(bp_sample_reader_get(rd, i, &data, &size, NULL), 0);
			ck_assert_uint_eq(size, s.sizes[i]);
			ck_assert_mem_eq(data, pt_sample(&s, i), size);
			bp_dataset_field_span(ds, i, 0, &off, &fsize);
			ck_assert_uint_eq(off, 0);
			ck_assert_uint_eq(fsize, size);
		}
		bp_sample_reader_free(rd);
	}
	ck_assert_int_eq(bp_dataset_verify(ds, NULL, NULL, NULL), 0);
	bp_dataset_close(ds);
	free(buf);

	dn = pt_dict_train(dict, sizeof(dict), 300, 5);
	ck_assert_int_eq(pt_pack_build(&s, 1, dict, dn, 3, &buf, &len), 0);
	ck_assert_uint_eq(len, 15724);
	ck_assert_uint_eq(XXH3_64bits(buf, len), UINT64_C(0x28410f5be2b7ae5b));
	free(buf);

	pt_samples_sized(&big, sizes, 5, 0x2, 12);
	ck_assert_int_eq(pt_pack_build_framed(&big, 2, 8192, NULL, 0, 3, &buf, &len), 0);
	ck_assert_uint_eq(len, 75801);
	ck_assert_uint_eq(XXH3_64bits(buf, len), UINT64_C(0xc84b451902340e58));
	ck_assert_uint_eq(pt_le32(buf + len - BP_PACK_FOOTER_SIZE + FTR_VERSION),
			  BP_PACK_VERSION_FRAMES);
	free(buf);
	pt_samples_free(&s);
	pt_samples_free(&big);
}
END_TEST

/* ---- fingerprints ---------------------------------------------------------------------- */

static uint64_t recs_fingerprint(const recs *r)
{
	uint8_t *buf;
	size_t len;
	uint64_t fp;

	recs_build(r, 4, 0, &buf, &len);
	fp = pt_le64(buf + len - BP_PACK_FOOTER_SIZE + FTR_FINGERPRINT);
	free(buf);
	return fp;
}

START_TEST(test_fingerprint_follows_fields)
{
	uint64_t base, fp;
	recs r;

	recs_make(&r, &full_schema, 20, 5, true, "fp");
	base = recs_fingerprint(&r);
	ck_assert_uint_eq(recs_fingerprint(&r), base);
	r.vals[7 * 7 + 1].i64 = (r.vals[7 * 7 + 1].i64 + 1) % 3;
	fp = recs_fingerprint(&r);
	ck_assert_uint_ne(fp, base);
	r.vals[7 * 7 + 1].i64 = (r.vals[7 * 7 + 1].i64 + 2) % 3;
	ck_assert_uint_eq(recs_fingerprint(&r), base);
	r.keys[3][0] ^= 1;
	ck_assert_uint_ne(recs_fingerprint(&r), base);
	r.keys[3][0] ^= 1;
	r.vals[2 * 7 + 5].f64 += 1;
	ck_assert_uint_ne(recs_fingerprint(&r), base);
	recs_free(&r);
}
END_TEST

static Suite *pack_fields_suite(void)
{
	Suite *s = suite_create("pack-fields");
	TCase *tc = tcase_create("roundtrip");

	tcase_add_test(tc, test_roundtrip_one_bytes);
	tcase_add_test(tc, test_roundtrip_two_bytes);
	tcase_add_test(tc, test_roundtrip_three_bytes);
	tcase_add_test(tc, test_roundtrip_frames);
	tcase_add_test(tc, test_schema_stored);
	tcase_add_test(tc, test_multi_shard);
	tcase_add_test(tc, test_multi_shard_schemas);
	tcase_add_test(tc, test_keys_many);
	tcase_add_test(tc, test_writer_refusals);
	tcase_add_test(tc, test_writer_limits);
	tcase_add_test(tc, test_old_packs_unchanged);
	tcase_add_test(tc, test_fingerprint_follows_fields);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr;
	int failed;

	sr = srunner_create(pack_fields_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
