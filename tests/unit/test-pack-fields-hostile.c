/* SPDX-License-Identifier: MIT */
/*
 * test-pack-fields-hostile.c - the Check suite for what a reader of
 * samples with fields (PACK.md §Fields) must refuse, each with the rule
 * it breaks.
 *
 * Every byte of the sections is covered: flipping any one of them makes
 * the open or the verify fail. The schema codec refuses hostile schemas,
 * and the writer the same rules (-EINVAL); columns and sizes that lie are
 * refused at open; a key block entry that lies about its codec or its
 * stored size is refused when decoded.
 *
 * Its own suite because these tests attack shards, where
 * test-pack-fields.c takes sound ones from writer to reader; both build
 * them from the record sets of pack-fields-fixture.c.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <xxhash.h>

#include "pack-fields-fixture.h"
#include "pack-testlib.h"
#include "pack.h"
#include "pack_fields.h"
#include "pack_file.h"

/* ---- every byte of the sections ---------------------------------------------------------- */

/*
 * Flip each byte of a shard with every section kind, the sections and
 * everything else: the open or the verify fails (and the whole-shard
 * parse refuses it outright, blocks aside, whose bytes it does not read).
 */
START_TEST(test_section_flips)
{
	bp_dataset_fault fault;
	uint64_t data_offset, data_end, index_offset;
	bp_pack_view v;
	uint8_t *buf;
	size_t len;
	recs r;

	recs_make(&r, &full_schema, 12, 8, true, "flip");
	recs_build(&r, 3, 0, &buf, &len);
	ck_assert_int_eq(bp_pack_parse(buf, len, &v, NULL), 0);
	data_offset = v.header.data_offset;
	data_end = v.index.data_end;
	index_offset = v.footer.index_offset;
	ck_assert_uint_lt(data_end, index_offset);
	for (uint64_t at = 0; at < len; at++) {
		bp_dataset *ds;
		int r1;

		buf[at] ^= 0x10;
		if (at < data_offset || at >= data_end)
			ck_assert_int_lt(bp_pack_parse(buf, len, &v, NULL), 0);
		r1 = open_bytes(buf, len, &ds, &fault);
		if (r1 == 0) {
			ck_assert_int_eq(bp_dataset_verify(ds, NULL, NULL, &fault), -EBADMSG);
			ck_assert_ptr_nonnull(fault.pack.what);
			bp_dataset_close(ds);
		} else {
			ck_assert(r1 == -EBADMSG || r1 == -ENOTSUP || r1 == -E2BIG);
		}
		buf[at] ^= 0x10;
	}
	free(buf);
	recs_free(&r);
}
END_TEST

/* ---- hostile schemas ---------------------------------------------------------------------- */

/* Encode a checked schema into a fresh buffer. */
static uint8_t *encode_schema(const bp_schema *s, size_t *len)
{
	uint8_t *buf;

	ck_assert_int_eq(bp_schema_check(s, NULL), 0);
	*len = bp_schema_encoded_size(s);
	buf = malloc(*len);
	ck_assert_ptr_nonnull(buf);
	bp_schema_encode(s, buf);
	return buf;
}

static void expect_decode(const uint8_t *buf, size_t len, int err, const char *what)
{
	bp_pack_fault f = { 0 };
	bp_schema out = { 0 };

	ck_assert_int_eq(bp_schema_decode(buf, len, &out, &f), err);
	ck_assert_str_eq(f.what, what);
	ck_assert_uint_le(f.offset, len);
	ck_assert_ptr_null(out.fields);
}

/* buf decodes; what it decoded is freed. */
static void expect_decodes(const uint8_t *buf, size_t len)
{
	bp_schema out = { 0 };

	ck_assert_int_eq(bp_schema_decode(buf, len, &out, NULL), 0);
	ck_assert_uint_ge(out.count, 1);
	bp_schema_clear(&out);
}

START_TEST(test_schema_codec)
{
	bp_schema out;
	size_t len;
	uint8_t *buf = encode_schema(&full_schema, &len);

	ck_assert_int_eq(bp_schema_decode(buf, len, &out, NULL), 0);
	ck_assert_uint_eq(out.count, 7);
	for (uint32_t f = 0; f < 7; f++) {
		ck_assert_str_eq(out.fields[f].name, full_schema.fields[f].name);
		ck_assert_uint_eq(out.fields[f].type, full_schema.fields[f].type);
		ck_assert_uint_eq(out.fields[f].class_count, full_schema.fields[f].class_count);
	}
	ck_assert_str_eq(out.fields[1].classes[0], "cat");
	bp_schema_clear(&out);
	ck_assert_uint_eq(out.count, 0);
	/* Every truncation is refused. */
	for (size_t n = 0; n < len; n++) {
		bp_schema o = { 0 };

		ck_assert_int_eq(bp_schema_decode(buf, n, &o, NULL), -EINVAL);
	}
	ck_assert_str_eq(bp_field_type_name(BP_FIELD_FLOAT32), "float32");
	ck_assert_ptr_null(bp_field_type_name(9));
	ck_assert_uint_eq(bp_field_type_parse("str"), BP_FIELD_STR);
	ck_assert_uint_eq(bp_field_type_parse("string"), 0);
	ck_assert_uint_eq(bp_field_scalar_size(BP_FIELD_FLOAT32), 4);
	ck_assert_uint_eq(bp_field_scalar_size(BP_FIELD_STR), 0);
	free(buf);
}
END_TEST

START_TEST(test_schema_hostile)
{
	size_t len;
	uint8_t *buf = encode_schema(&labelled_schema, &len), *big;

	/* Field 0 "image": head at 4, name at 20; field 1 "label": head at 25, name at 41, classes at 46. */
	ck_assert_uint_eq(len, 4 + 16 + 5 + 16 + 5 + 5 + 5 + 6);
	buf[20] = '/';
	expect_decode(buf, len, -EINVAL, "field name must be 1-64 characters of [A-Za-z0-9_.-]");
	buf[20] = 0;
	expect_decode(buf, len, -EINVAL, "field name must be 1-64 characters of [A-Za-z0-9_.-]");
	memcpy(buf + 20, "label", 5);
	expect_decode(buf, len, -EINVAL, "two fields have the same name");
	memcpy(buf + 20, "image", 5);
	buf[4] = BP_FIELD_FLOAT64; /* classes are on field 1; field 0 now float64 is fine */
	expect_decodes(buf, len);
	buf[4] = BP_FIELD_BYTES;
	buf[25] = BP_FIELD_STR;
	expect_decode(buf, len, -EINVAL, "class names on a field that is not int64");
	buf[25] = 6;
	expect_decode(buf, len, -EINVAL, "unknown field type");
	buf[25] = BP_FIELD_INT64;
	buf[26] = 1;
	expect_decode(buf, len, -EINVAL, "reserved schema byte is not zero");
	buf[26] = 0;
	pt_put_le32(buf + 29, BP_CLASS_MAX + 1);
	expect_decode(buf, len, -E2BIG, "more class names than the limit (2^20)");
	pt_put_le32(buf + 29, 1000); /* more classes than bytes left */
	expect_decode(buf, len, -EINVAL, "schema truncated in a class name");
	pt_put_le32(buf + 29, 3);
	pt_put_le64(buf + 33, 8);
	expect_decode(buf, len, -EINVAL, "fixed size on a field that is not bytes");
	pt_put_le64(buf + 33, 0);
	buf[46] = 0;
	buf[47] = 0;
	expect_decode(buf, len, -EINVAL, "class name length not in 1-1024");
	buf[46] = 3;
	buf[48] = 0;
	expect_decode(buf, len, -EINVAL, "class name holds a NUL byte");
	buf[48] = 'c';
	pt_put_le32(buf, 0);
	expect_decode(buf, len, -EINVAL, "schema has no fields");
	pt_put_le32(buf, BP_FIELD_MAX + 1);
	expect_decode(buf, len, -E2BIG, "schema has more than 64 fields");
	pt_put_le32(buf, 1);
	expect_decode(buf, len, -EINVAL, "trailing bytes after the schema");
	pt_put_le32(buf, 2);
	buf[6] = 65;
	expect_decode(buf, len, -EINVAL, "field name length not in 1-64");
	buf[6] = 5;
	expect_decodes(buf, len);
	big = calloc(1, BP_SCHEMA_MAX + 1);
	ck_assert_ptr_nonnull(big);
	expect_decode(big, BP_SCHEMA_MAX + 1, -E2BIG, "schema over the 64 MiB limit");
	free(big);
	free(buf);
}
END_TEST

/* What a writer is handed: the same rules, -EINVAL. */
START_TEST(test_schema_check)
{
	static char *one[] = { "x" };
	static char *empty[] = { "" };
	bp_field f[2] = { { .name = "a", .type = BP_FIELD_BYTES } };
	bp_schema s = { .count = 1, .fields = f };
	bp_pack_fault pf;

	ck_assert_int_eq(bp_schema_check(&s, &pf), 0);
	strcpy(f[0].name, "a b");
	ck_assert_int_eq(bp_schema_check(&s, &pf), -EINVAL);
	strcpy(f[0].name, "a");
	f[0].class_count = 1;
	f[0].classes = one;
	ck_assert_int_eq(bp_schema_check(&s, &pf), -EINVAL);
	ck_assert_str_eq(pf.what, "class names on a field that is not int64");
	f[0].type = BP_FIELD_INT64;
	ck_assert_int_eq(bp_schema_check(&s, &pf), 0);
	f[0].classes = empty;
	ck_assert_int_eq(bp_schema_check(&s, &pf), -EINVAL);
	ck_assert_str_eq(pf.what, "class name must be 1-1024 bytes");
	f[0].class_count = BP_CLASS_MAX + 1;
	ck_assert_int_eq(bp_schema_check(&s, &pf), -EINVAL);
	f[0].class_count = 0;
	f[0].type = 0;
	ck_assert_int_eq(bp_schema_check(&s, &pf), -EINVAL);
	ck_assert_str_eq(pf.what, "unknown field type");
	s.count = 0;
	ck_assert_int_eq(bp_schema_check(&s, &pf), -EINVAL);
	s.count = BP_FIELD_MAX + 1;
	ck_assert_int_eq(bp_schema_check(&s, &pf), -EINVAL);
}
END_TEST

/* ---- hostile columns and sizes ------------------------------------------------------------ */

/* Change buf (a v3 pack) by poke, reseal, and expect the open to fail with what. */
static void expect_open_fails(uint8_t *buf, size_t len, int err, const char *what)
{
	bp_dataset_fault fault = { 0 };
	bp_pack_fault pf = { 0 };
	bp_pack_view v;
	bp_dataset *ds;

	pt_reseal(buf, len, true);
	ck_assert_int_eq(open_bytes(buf, len, &ds, &fault), err);
	ck_assert_str_eq(fault.pack.what, what);
	ck_assert_uint_lt(fault.pack.offset, len);
	ck_assert_int_eq(bp_pack_parse(buf, len, &v, &pf), err);
	ck_assert_str_eq(pf.what, what);
}

START_TEST(test_bad_columns)
{
	uint64_t size;
	uint8_t *buf, *col, *sizes, *str, *orig;
	size_t len;
	recs r;

	recs_make(&r, &full_schema, 10, 6, true, "col");
	recs_build(&r, 3, 0, &buf, &len);
	orig = malloc(len);
	memcpy(orig, buf, len);

	col = pt_section(buf, len, BP_SECTION_COLUMN, 1, &size);
	ck_assert_ptr_nonnull(col);
	ck_assert_uint_eq(size, 10 * 8);
	pt_put_le64(col + 8 * 4, 3);
	expect_open_fails(buf, len, -EBADMSG, "label outside its field's classes");
	pt_put_le64(col + 8 * 4, UINT64_MAX); /* -1 */
	expect_open_fails(buf, len, -EBADMSG, "label outside its field's classes");
	memcpy(buf, orig, len);

	sizes = pt_section(buf, len, BP_SECTION_SIZES, BP_SECTION_NO_FIELD, &size);
	ck_assert_ptr_nonnull(sizes);
	ck_assert_uint_eq(size, 10 * 3 * 4);
	/* Sample 2's image one byte longer and its meta one shorter: sums hold, mask does not. */
	pt_put_le32(sizes + (2 * 3 + 0) * 4, pt_le32(sizes + (2 * 3 + 0) * 4) + 1);
	expect_open_fails(buf, len, -EBADMSG, "field sizes do not add up to the sample");
	pt_put_le32(sizes + (2 * 3 + 1) * 4, 15);
	expect_open_fails(buf, len, -EBADMSG, "bytes field not of its fixed size");
	memcpy(buf, orig, len);

	str = pt_section(buf, len, BP_SECTION_STR, 4, &size);
	ck_assert_ptr_nonnull(str);
	pt_put_le64(str + 8 * 3, pt_le64(str + 8 * 4) + 1);
	expect_open_fails(buf, len, -EBADMSG, "str offsets decrease");
	memcpy(buf, orig, len);
	pt_put_le64(str, 1);
	expect_open_fails(buf, len, -EBADMSG, "str offsets do not start at 0");
	memcpy(buf, orig, len);
	pt_put_le64(str + 8 * 10, pt_le64(str + 8 * 10) + 1);
	expect_open_fails(buf, len, -EBADMSG, "str offsets do not end at the section's end");
	memcpy(buf, orig, len);
	pt_put_le64(str + 8, BP_STR_MAX + 1);
	expect_open_fails(buf, len, -E2BIG, "str value over the size limit");
	free(orig);
	free(buf);
	recs_free(&r);
}
END_TEST

/* A key block entry that lies about its codec or its stored size, decoded directly. */
START_TEST(test_key_block_decode)
{
	uint8_t raw[4 + 3] = { 3, 0, 0, 0, 'a', 'b', 'c' }, out[16];
	bp_pack_key_block kb = { .stored_size = 7, .raw_size = 7, .codec = BP_CODEC_RAW, .count = 1,
				 .hash = XXH3_64bits(raw, 7) };
	ZSTD_DCtx *dctx = ZSTD_createDCtx();
	bp_pack_fault pf;
	const char *key;
	size_t len;

	ck_assert_int_eq(bp_pack_dctx_init(dctx), 0);
	ck_assert_int_eq(bp_pack_key_block_decode(&kb, 100, raw, dctx, out, sizeof(out), &pf), 0);
	bp_pack_key_block_key(out, 1, 0, &key, &len);
	ck_assert_uint_eq(len, 3);
	ck_assert_mem_eq(key, "abc", 3);
	ck_assert_int_eq(bp_pack_key_block_decode(&kb, 100, raw, dctx, out, 6, &pf), -EINVAL);
	kb.codec = 9;
	ck_assert_int_eq(bp_pack_key_block_decode(&kb, 100, raw, dctx, out, sizeof(out), &pf),
			 -ENOTSUP);
	kb.codec = BP_CODEC_RAW;
	kb.stored_size = 5;
	ck_assert_int_eq(bp_pack_key_block_decode(&kb, 100, raw, dctx, out, sizeof(out), &pf),
			 -EBADMSG);
	ck_assert_uint_eq(pf.offset, 100);
	kb.stored_size = 7;
	kb.hash ^= 1;
	ck_assert_int_eq(bp_pack_key_block_decode(&kb, 100, raw, dctx, out, sizeof(out), &pf),
			 -EBADMSG);
	ck_assert_str_eq(pf.what, "key block checksum mismatch");
	kb.codec = BP_CODEC_ZSTD;
	kb.hash ^= 1;
	ck_assert_int_eq(bp_pack_key_block_decode(&kb, 100, raw, dctx, out, sizeof(out), &pf),
			 -EBADMSG);
	ck_assert_str_eq(pf.what, "block is not a zstd frame");
	ZSTD_freeDCtx(dctx);
}
END_TEST

static Suite *pack_fields_hostile_suite(void)
{
	Suite *s = suite_create("pack-fields-hostile");
	TCase *tc = tcase_create("hostile");

	tcase_add_test(tc, test_section_flips);
	tcase_add_test(tc, test_schema_codec);
	tcase_add_test(tc, test_schema_hostile);
	tcase_add_test(tc, test_schema_check);
	tcase_add_test(tc, test_bad_columns);
	tcase_add_test(tc, test_key_block_decode);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr;
	int failed;

	sr = srunner_create(pack_fields_hostile_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
