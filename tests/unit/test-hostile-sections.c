/* SPDX-License-Identifier: MIT */
/*
 * test-hostile-sections.c - packs with fields (PACK.md §Fields) built to
 * attack the reader: a section table broken rule by rule or missing, and
 * key directories, key blocks and key-hash pages that lie (found by the
 * key reader and by verify, which alone sees a key-hash entry naming the
 * wrong sample or two samples sharing a key).
 *
 * The rules are test-hostile-pack.c's: a pack made the ordinary way, one
 * lie in it, every hash, fingerprint and checksum sealed over the lie, the
 * exact errno and reason asserted, and every test run under the allocation
 * cap of hostile-fixture.c, so that nothing is sized by the lie. This
 * suite is apart because its lies are in a version-3 pack's sections,
 * resealed with pt_reseal, where test-hostile-pack.c forges the blocks,
 * frames and index every pack has.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <xxhash.h>

#include "hostile-fixture.h"
#include "pack-testlib.h"
#include "pack.h"
#include "pack_fields.h"
#include "pack_file.h"

/* ---- sections (PACK.md §Fields) -------------------------------------------- */

static char *two_classes[] = { "no", "yes" };
static bp_field sec_fields[] = {
	{ .name = "data", .type = BP_FIELD_BYTES },
	{ .name = "label", .type = BP_FIELD_INT64, .class_count = 2, .classes = two_classes },
	{ .name = "x", .type = BP_FIELD_FLOAT32 },
	{ .name = "s", .type = BP_FIELD_STR },
};
static const bp_schema sec_schema = { .count = 4, .fields = sec_fields };
#define SEC_SAMPLES 6
/* Key lengths: keys 0 and 1 alike in length, so one can be forged into the other. */
static const size_t sec_key_len[SEC_SAMPLES] = { 40, 40, 41, 42, 43, 44 };
#define SEC_KEY_BYTES (40 + 40 + 41 + 42 + 43 + 44)
static char sec_key_text[SEC_SAMPLES][48];
static const char *sec_keys[SEC_SAMPLES];

/*
 * Random keys without NUL and of unequal lengths (no repeats for zstd to
 * find): their one key block does not compress and is stored raw, so a
 * test can forge its bytes in place.
 */
static void sec_make_keys(void)
{
	uint64_t st = 4711;

	for (size_t i = 0; i < SEC_SAMPLES; i++) {
		pt_fill_random(&st, (uint8_t *)sec_key_text[i], sec_key_len[i]);
		for (size_t k = 0; k < sec_key_len[i]; k++)
			if (sec_key_text[i][k] == 0)
				sec_key_text[i][k] = 1;
		sec_key_text[i][sec_key_len[i]] = 0;
		sec_keys[i] = sec_key_text[i];
	}
}

/*
 * A version-3 pack of 6 samples with those fields and keys; its section
 * table: SCHEMA, COLUMN 1, COLUMN 2, STR 3, KEYS, KEY_DIR, KEY_HASH, KEY_HASH_DIR.
 */
static void sections_pack(uint8_t **buf, size_t *len)
{
	bp_field_value vals[SEC_SAMPLES * 4];
	pt_fields pf = { .schema = &sec_schema, .vals = vals, .keys = sec_keys };
	pt_samples s;

	sec_make_keys();
	pt_samples_make(&s, SEC_SAMPLES, 10, 40, PT_TEXT, 77);
	for (size_t i = 0; i < SEC_SAMPLES; i++) {
		vals[i * 4] = (bp_field_value){ .size = s.sizes[i] };
		vals[i * 4 + 1] = (bp_field_value){ .i64 = (int64_t)(i % 2) };
		vals[i * 4 + 2] = (bp_field_value){ .f64 = (double)i / 4 };
		vals[i * 4 + 3] = (bp_field_value){ .data = "text", .size = i % 5 };
	}
	ck_assert_int_eq(pt_pack_build_fields(&s, 2, 0, &pf, buf, len), 0);
	pt_samples_free(&s);
}

/* The sections pack, and a copy of it to restore between forgeries. */
static void sections_pair(uint8_t **buf, uint8_t **orig, size_t *len)
{
	sections_pack(buf, len);
	*orig = malloc(*len);
	ck_assert_ptr_nonnull(*orig);
	memcpy(*orig, *buf, *len);
}

/* Section-table entry i of a version-3 pack. */
static uint8_t *sec_entry(uint8_t *buf, size_t len, size_t i)
{
	const uint8_t *ft = buf + len - BP_PACK_FOOTER_SIZE;

	return buf + pt_le64(ft + FTR_INDEX_OFFSET) + pt_le64(ft + FTR_BLOCK_COUNT) * 56 +
	       pt_le64(ft + FTR_SAMPLE_COUNT) * 16 + i * BP_PACK_SECTION_ENTRY;
}

/* Both readers refuse the resealed pack with err and what, placed inside the file. */
static void expect_refused(uint8_t *buf, size_t len, int err, const char *what)
{
	bp_dataset_fault fault = { 0 };
	bp_pack_fault pf = { 0 };
	bp_pack_view v;
	bp_dataset *ds = NULL;
	scratch_file t;

	pt_reseal(buf, len, false);
	ck_assert_int_eq(bp_pack_parse(buf, len, &v, &pf), err);
	ck_assert_str_eq(pf.what, what);
	ck_assert_uint_lt(pf.offset, len);
	tmp_make(&t);
	write_file(t.path, buf, len);
	ck_assert_int_eq(bp_dataset_openat(AT_FDCWD, t.path, &ds, &fault), err);
	ck_assert_str_eq(fault.pack.what, what);
	ck_assert_ptr_null(ds);
	tmp_done(&t);
}

/* Each rule of the section table broken alone, sealed over the lie. */
START_TEST(test_section_table_forged)
{
	uint8_t *buf, *orig, *e;
	size_t len;

	sections_pair(&buf, &orig, &len);
	ck_assert_uint_eq(pt_le32(sec_entry(buf, len, 7)), BP_SECTION_KEY_HASH_DIR);

	pt_put_le32(sec_entry(buf, len, 0), BP_SECTION_COLUMN);
	expect_refused(buf, len, -EBADMSG, "section table does not start with the schema");
	memcpy(buf, orig, len);
	pt_put_le32(sec_entry(buf, len, 7), BP_SECTION_TOKENS + 1);
	expect_refused(buf, len, -ENOTSUP, "unknown section kind");
	memcpy(buf, orig, len);
	/* The key-hash directory relabelled TOKENS: not of the section's 48 bytes. */
	pt_put_le32(sec_entry(buf, len, 7), BP_SECTION_TOKENS);
	expect_refused(buf, len, -EBADMSG, "tokens section is not 48 bytes");
	memcpy(buf, orig, len);
	pt_put_le32(sec_entry(buf, len, 1) + 4, 2);
	pt_put_le32(sec_entry(buf, len, 2) + 4, 1);
	expect_refused(buf, len, -EBADMSG, "sections out of order (kind, then field)");
	memcpy(buf, orig, len);
	e = sec_entry(buf, len, 2);
	pt_put_le64(e + 8, pt_le64(e + 8) + 1);
	expect_refused(buf, len, -EBADMSG, "section does not start where the previous one ends");
	memcpy(buf, orig, len);
	pt_put_le32(sec_entry(buf, len, 0) + 4, 0);
	expect_refused(buf, len, -EBADMSG, "section names a field it cannot have");
	memcpy(buf, orig, len);
	pt_put_le64(sec_entry(buf, len, 4) + 24, 1);
	expect_refused(buf, len, -EBADMSG,
		       "hash of a section covered by its directory is not zero");
	memcpy(buf, orig, len);
	pt_put_le64(sec_entry(buf, len, 0) + 16, BP_SCHEMA_MAX + 1);
	expect_refused(buf, len, -E2BIG, "schema section over the size limit");
	memcpy(buf, orig, len);
	e = sec_entry(buf, len, 0);
	pt_put_le64(e + 16, pt_le64(e + 16) + 1000000);
	expect_refused(buf, len, -EBADMSG, "section runs past the index");
	memcpy(buf, orig, len);
	/* Moving a byte from KEY_HASH to KEY_HASH_DIR keeps the tiling, not the sizes. */
	e = sec_entry(buf, len, 6);
	pt_put_le64(e + 16, pt_le64(e + 16) - 1);
	pt_put_le64(e + 32 + 8, pt_le64(e + 32 + 8) - 1);
	pt_put_le64(e + 32 + 16, pt_le64(e + 32 + 16) + 1);
	expect_refused(buf, len, -EBADMSG, "key section size does not match the sample count");
	memcpy(buf, orig, len);
	pt_put_le32(sec_entry(buf, len, 1) + 4, 0);
	expect_refused(buf, len, -EBADMSG, "section kind does not match its field's type");
	memcpy(buf, orig, len);
	pt_put_le32(sec_entry(buf, len, 3) + 4, 4);
	expect_refused(buf, len, -EBADMSG, "section names a field the schema lacks");
	memcpy(buf, orig, len);
	/* The str field's section relabelled a column: the str field goes without. */
	pt_put_le32(sec_entry(buf, len, 3) + 4, 2);
	pt_put_le32(sec_entry(buf, len, 3), BP_SECTION_COLUMN);
	expect_refused(buf, len, -EBADMSG, "sections out of order (kind, then field)");
	free(orig);
	free(buf);
}
END_TEST

/* A version-3 footer over an index without a section table. */
START_TEST(test_section_table_missing)
{
	pt_samples s;
	uint8_t *buf;
	size_t len;
	bp_pack_view v;
	bp_pack_fault pf = { 0 };

	base_samples(&s, 4);
	ck_assert_int_eq(pt_pack_build(&s, 2, NULL, 0, 3, &buf, &len), 0);
	pt_put_le32(buf + len - BP_PACK_FOOTER_SIZE + FTR_VERSION, BP_PACK_VERSION_SECTIONS);
	pt_put_le64(buf + len - BP_PACK_FOOTER_SIZE + FTR_CHECKSUM,
		    bp_pack_checksum(buf, buf + len - BP_PACK_FOOTER_SIZE));
	ck_assert_int_eq(bp_pack_parse(buf, len, &v, &pf), -EBADMSG);
	ck_assert_str_eq(pf.what, "index size leaves no whole section table");
	free(buf);
	pt_samples_free(&s);
}
END_TEST

/* The dataset at path opens, and verify refuses it with err and what. */
static void verify_refuses(const char *path, int err, const char *what)
{
	bp_dataset_fault fault = { 0 };
	bp_dataset *ds;

	ck_assert_int_eq(bp_dataset_openat(AT_FDCWD, path, &ds, &fault), 0);
	ck_assert_int_eq(bp_dataset_verify(ds, NULL, NULL, &fault), err);
	ck_assert_str_eq(fault.pack.what, what);
	ck_assert_str_eq(fault.shard, path);
	bp_dataset_close(ds);
}

/*
 * Forged keys: the dataset opens (keys are not read at open), the key
 * reader refuses the damaged directory, block or page with its reason and
 * shard, and verify finds the same.
 */
static void expect_keys_refused(uint8_t *buf, size_t len, bool by_find, int err,
				const char *what)
{
	bp_dataset_fault fault = { 0 };
	bp_key_reader *kr;
	bp_dataset *ds;
	const char *key;
	size_t klen;
	uint64_t id;
	scratch_file t;

	pt_reseal(buf, len, true);
	tmp_make(&t);
	write_file(t.path, buf, len);
	ck_assert_int_eq(bp_dataset_openat(AT_FDCWD, t.path, &ds, &fault), 0);
	ck_assert_int_eq(bp_key_reader_new(ds, &kr), 0);
	if (by_find)
		ck_assert_int_eq(bp_key_reader_find(kr, sec_keys[3], sec_key_len[3], &id, &fault),
				 err);
	else
		ck_assert_int_eq(bp_key_reader_get(kr, 3, &key, &klen, &fault), err);
	ck_assert_str_eq(fault.pack.what, what);
	ck_assert_str_eq(fault.shard, t.path);
	bp_key_reader_free(kr);
	bp_dataset_close(ds);
	verify_refuses(t.path, err, what);
	tmp_done(&t);
}

/* Only verify can tell: the key reader's lookups still agree with themselves. */
static void expect_verify_refused(uint8_t *buf, size_t len, const char *what)
{
	bp_pack_fault pf = { 0 };
	bp_pack_view v;
	scratch_file t;

	pt_reseal(buf, len, true);
	ck_assert_int_eq(bp_pack_parse(buf, len, &v, &pf), -EBADMSG);
	ck_assert_str_eq(pf.what, what);
	tmp_make(&t);
	write_file(t.path, buf, len);
	verify_refuses(t.path, -EBADMSG, what);
	tmp_done(&t);
}

START_TEST(test_keys_forged)
{
	uint8_t *buf, *orig, *dir, *keys;
	uint64_t size;
	size_t len;

	sections_pair(&buf, &orig, &len);
	dir = pt_section(buf, len, BP_SECTION_KEY_DIR, BP_SECTION_NO_FIELD, &size);
	ck_assert_uint_eq(size, 32);
	/* One raw block: 6 lengths and the keys. */
	ck_assert_uint_eq(pt_le32(dir + 16), BP_CODEC_RAW);
	ck_assert_uint_eq(pt_le32(dir + 12), SEC_SAMPLES * 4 + SEC_KEY_BYTES);

	pt_put_le32(dir + 20, 5);
	expect_keys_refused(buf, len, false, -EBADMSG, "key block holds the wrong number of keys");
	memcpy(buf, orig, len);
	pt_put_le32(dir + 12, UINT32_MAX);
	expect_keys_refused(buf, len, false, -E2BIG, "key block over the size limit");
	memcpy(buf, orig, len);
	pt_put_le32(dir + 16, 7);
	expect_keys_refused(buf, len, false, -ENOTSUP, "unknown key block codec");
	memcpy(buf, orig, len);
	pt_put_le32(dir + 16, BP_CODEC_ZSTD);
	expect_keys_refused(buf, len, false, -EBADMSG,
			    "key block's stored size does not fit its codec");
	memcpy(buf, orig, len);

	keys = pt_section(buf, len, BP_SECTION_KEYS, BP_SECTION_NO_FIELD, &size);
	pt_put_le32(keys + 4, 0);
	pt_put_le32(keys, 80);
	expect_keys_refused(buf, len, false, -EBADMSG, "key length not in 1-4096");
	memcpy(buf, orig, len);
	pt_put_le32(keys, 39);
	expect_keys_refused(buf, len, false, -EBADMSG, "key lengths do not fill their block");
	memcpy(buf, orig, len);
	keys[24 + 40 + 40 + 41 + 2] = 0;
	expect_keys_refused(buf, len, false, -EBADMSG, "key holds a NUL byte");
	free(orig);
	free(buf);
}
END_TEST

START_TEST(test_key_hash_forged)
{
	uint8_t *buf, *orig, *keys, *hash;
	uint64_t size;
	size_t len;

	sections_pair(&buf, &orig, &len);
	keys = pt_section(buf, len, BP_SECTION_KEYS, BP_SECTION_NO_FIELD, &size);
	hash = pt_section(buf, len, BP_SECTION_KEY_HASH, BP_SECTION_NO_FIELD, &size);
	ck_assert_uint_eq(size, SEC_SAMPLES * 16);
	for (size_t i = 0; i < SEC_SAMPLES; i++)
		pt_put_le64(hash + i * 16 + 8, SEC_SAMPLES);
	expect_keys_refused(buf, len, true, -EBADMSG, "key-hash entry names no sample");
	memcpy(buf, orig, len);
	{
		uint8_t tmp[16];

		memcpy(tmp, hash + 16 * 2, 16);
		memcpy(hash + 16 * 2, hash + 16 * 3, 16);
		memcpy(hash + 16 * 3, tmp, 16);
	}
	expect_keys_refused(buf, len, true, -EBADMSG, "key-hash entries out of order");
	memcpy(buf, orig, len);

	/* The ids of two entries swapped: still sorted (their hashes differ), each naming a sample, not its own. */
	{
		uint64_t a = pt_le64(hash + 8);

		ck_assert_uint_ne(pt_le64(hash), pt_le64(hash + 16));
		pt_put_le64(hash + 8, pt_le64(hash + 16 + 8));
		pt_put_le64(hash + 16 + 8, a);
	}
	expect_verify_refused(buf, len, "key-hash entry does not match its key");
	memcpy(buf, orig, len);

	/* Key 1 made key 0: both entries get key 0's hash, in id order. */
	{
		uint64_t h0 = XXH3_64bits(sec_keys[0], 40);

		memcpy(keys + 24 + 40, keys + 24, 40);
		for (size_t i = 0; i < SEC_SAMPLES; i++) {
			uint64_t id = pt_le64(hash + i * 16 + 8);

			if (id == 0 || id == 1)
				pt_put_le64(hash + i * 16, h0);
		}
		/* Re-sort the six entries by (hash, id). */
		for (size_t i = 1; i < SEC_SAMPLES; i++)
			for (size_t k = i; k > 0; k--) {
				uint8_t *x = hash + (k - 1) * 16, *y = hash + k * 16, tmp[16];

				if (pt_le64(x) < pt_le64(y) ||
				    (pt_le64(x) == pt_le64(y) && pt_le64(x + 8) < pt_le64(y + 8)))
					break;
				memcpy(tmp, x, 16);
				memcpy(x, y, 16);
				memcpy(y, tmp, 16);
			}
	}
	expect_verify_refused(buf, len, "two samples have the same key");
	free(orig);
	free(buf);
}
END_TEST
static Suite *hostile_sections_suite(void)
{
	Suite *s = suite_create("hostile-sections");
	TCase *tc;

	tc = tcase_create("sections");
	tcase_add_checked_fixture(tc, cap_allocations, NULL);
	tcase_add_test(tc, test_section_table_forged);
	tcase_add_test(tc, test_section_table_missing);
	tcase_add_test(tc, test_keys_forged);
	tcase_add_test(tc, test_key_hash_forged);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr;
	int failed;

	sr = srunner_create(hostile_sections_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
