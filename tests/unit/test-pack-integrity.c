/* SPDX-License-Identifier: MIT */
/*
 * test-pack-integrity.c - the Check suite for whole .bpk packs
 * (lib/pack/pack.c) written by bp_pack_writer: what goes in comes out,
 * and any change to the file is caught.
 *
 * Round trips: packs of one sample, many samples a block, one a block,
 * with a dictionary, raw blocks and empty samples parse to the layout
 * PACK.md gives (header, dictionary, blocks, index, footer, nothing else)
 * and decode, block by block, to every sample byte for byte. Damage: the
 * format promises that every byte of a pack is covered by some check
 * (PACK.md §Checksums), so small packs have every byte flipped and are
 * truncated at every length, and each copy must be refused by the parse
 * or by a block's decode, never read back as data.
 *
 * These tests run the reader over whole files, where test-pack.c and
 * test-pack-block.c check the header, the footer and a block alone.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <xxhash.h>
#include <zstd.h>

#include "pack-testlib.h"
#include "pack.h"

/* A small dictionary trained once in main(), before Check forks the tests. */
static uint8_t g_dict[1024];
static size_t g_dict_size;

static bool is_content_errno(int r)
{
	return r == -EBADMSG || r == -ENOTSUP || r == -E2BIG;
}

/* ---- whole packs -------------------------------------------------------- */

typedef struct pack_case {
	const char *name;
	size_t n, min_size, max_size, per_block;
	enum pt_kind kind;
	bool dict;
} pack_case;

static const pack_case pack_cases[] = {
	{ "one sample", 1, 500, 500, 1, PT_TEXT, false },
	{ "many per block", 60, 0, 700, 8, PT_MIXED, false },
	{ "one per block", 20, 1, 300, 1, PT_TEXT, false },
	{ "dictionary, many per block", 40, 0, 0, 10, PT_JSON, true },
	{ "dictionary, one per block", 12, 0, 0, 1, PT_JSON, true },
	{ "raw blocks", 16, 50, 400, 4, PT_RANDOM, false },
	{ "empty samples", 9, 0, 0, 3, PT_TEXT, false },
};

static void make_case(const pack_case *pc, pt_samples *s, uint8_t **buf, size_t *len)
{
	pt_samples_make(s, pc->n, pc->min_size, pc->max_size, pc->kind, 1000 + pc->n);
	ck_assert_int_eq(pt_pack_build(s, pc->per_block, pc->dict ? g_dict : NULL,
				       pc->dict ? g_dict_size : 0, 3, buf, len), 0);
}

/* Decode every block of a parsed pack and compare every sample with s. */
static void check_samples(const bp_pack_view *v, const uint8_t *buf, const pt_samples *s,
			  size_t per_block)
{
	ZSTD_DCtx *d = pt_dctx_new();
	ZSTD_DDict *dd = NULL;
	uint64_t id = 0;

	if (v->dict) {
		dd = ZSTD_createDDict(v->dict, v->header.dict_size);
		ck_assert_ptr_nonnull(dd);
	}
	for (uint64_t bi = 0; bi < v->index.block_count; bi++) {
		bp_pack_block b;
		bp_pack_fault f = { .what = NULL };
		uint8_t *raw;
		uint64_t fill = 0;

		bp_pack_index_block(&v->index, bi, &b);
		ck_assert_uint_eq(b.first_sample, bi * per_block);
		ck_assert_uint_eq(b.sample_count,
				  s->n - b.first_sample < per_block ? s->n - b.first_sample : per_block);
		raw = malloc(b.raw_size ? b.raw_size : 1);
		ck_assert_msg(bp_pack_block_decode(&b, buf + b.offset, d, dd, raw, b.raw_size, &f) == 0,
			      "block %" PRIu64 ": %s", bi, f.what ? f.what : "?");
		for (uint64_t k = 0; k < b.sample_count; k++, id++) {
			bp_pack_sample smp;
			uint64_t off, size;

			bp_pack_index_sample(&v->index, id, &smp);
			bp_pack_index_sample_span(&v->index, id, &off, &size);
			ck_assert_uint_eq(smp.block, bi);
			ck_assert_uint_eq(smp.offset, fill);
			ck_assert_uint_eq(smp.size, s->sizes[id]);
			ck_assert_uint_eq(off, smp.offset);
			ck_assert_uint_eq(size, smp.size);
			if (size)
				ck_assert_mem_eq(raw + off, pt_sample(s, id), size);
			fill += size;
		}
		ck_assert_uint_eq(fill, b.raw_size);
		free(raw);
	}
	ck_assert_uint_eq(id, s->n);
	ZSTD_freeDDict(dd);
	ZSTD_freeDCtx(d);
}

START_TEST(test_pack_roundtrip)
{
	const pack_case *pc = &pack_cases[_i];
	pt_samples s;
	uint8_t *buf;
	size_t len;
	bp_pack_view v;
	bp_pack_fault f = { .what = NULL };
	uint64_t blocks = (pc->n + pc->per_block - 1) / pc->per_block;
	size_t codecs[3] = { 0 };

	make_case(pc, &s, &buf, &len);
	ck_assert_msg(bp_pack_parse(buf, len, &v, &f) == 0, "%s: %s", pc->name,
		      f.what ? f.what : "?");
	ck_assert_uint_eq(v.footer.block_count, blocks);
	ck_assert_uint_eq(v.index.block_count, blocks);
	ck_assert_uint_eq(v.footer.sample_count, s.n);
	ck_assert_uint_eq(v.index.sample_count, s.n);
	ck_assert_uint_eq(v.footer.raw_bytes, s.total);
	ck_assert_uint_eq(v.footer.max_sample, s.max_size);

	/* Layout: header, dictionary, blocks, index, footer, nothing else. */
	if (pc->dict) {
		ck_assert_ptr_eq(v.dict, buf + BP_PACK_HEADER_SIZE);
		ck_assert_uint_eq(v.header.dict_size, g_dict_size);
		ck_assert_mem_eq(v.dict, g_dict, g_dict_size);
		ck_assert_uint_eq(v.header.dict_hash, XXH3_64bits(g_dict, g_dict_size));
	} else {
		ck_assert_ptr_null(v.dict);
		ck_assert_uint_eq(v.header.dict_size, 0);
	}
	ck_assert_uint_eq(v.header.data_offset, BP_PACK_HEADER_SIZE + v.header.dict_size);
	ck_assert_uint_eq(v.footer.index_offset + v.footer.index_size + BP_PACK_FOOTER_SIZE, len);
	ck_assert_uint_eq(v.footer.index_size,
			  blocks * BP_PACK_BLOCK_ENTRY + s.n * BP_PACK_SAMPLE_ENTRY);
	ck_assert_uint_eq(v.footer.fingerprint,
			  XXH3_64bits(buf + v.footer.index_offset, v.footer.index_size));
	ck_assert_uint_eq(v.footer.checksum, bp_pack_checksum(buf, buf + len - BP_PACK_FOOTER_SIZE));

	for (uint64_t bi = 0, next = v.header.data_offset; bi < blocks; bi++) {
		bp_pack_block b;

		bp_pack_index_block(&v.index, bi, &b);
		ck_assert_uint_eq(b.offset, next);
		ck_assert_uint_eq(b.stored_hash, XXH3_64bits(buf + b.offset, b.stored_size));
		ck_assert_uint_lt(b.codec, 3);
		codecs[b.codec]++;
		if (b.codec == BP_CODEC_RAW)
			ck_assert_uint_eq(b.stored_size, b.raw_size);
		else
			ck_assert_uint_lt(b.stored_size, b.raw_size);
		next = b.offset + b.stored_size;
		if (bi == blocks - 1)
			ck_assert_uint_eq(next, v.footer.index_offset);
	}
	switch (pc->kind) {
	case PT_RANDOM:
		ck_assert_uint_eq(codecs[BP_CODEC_RAW], blocks);
		break;
	case PT_JSON:
		ck_assert_uint_eq(codecs[BP_CODEC_ZSTD_DICT], blocks);
		break;
	case PT_MIXED:
		ck_assert_uint_gt(codecs[BP_CODEC_ZSTD], 0);
		break;
	case PT_TEXT:
		if (s.total == 0)
			ck_assert_uint_eq(codecs[BP_CODEC_RAW], blocks);
		else if (pc->per_block > 1 || s.max_size > 100)
			ck_assert_uint_gt(codecs[BP_CODEC_ZSTD], 0);
		break;
	}

	check_samples(&v, buf, &s, pc->per_block);
	free(buf);
	pt_samples_free(&s);
}
END_TEST

/* ---- corruption ---------------------------------------------------------- */

enum outcome {
	REJECTED_BY_PARSE,
	REJECTED_BY_BLOCK,
	ACCEPTED_SAME,
	ACCEPTED_DIFFERENT,
};

/*
 * Parse buf and decode every block, as a reader would. Any sample that
 * decodes must equal the original; report how (or whether) damage showed.
 */
static enum outcome read_pack(const uint8_t *buf, size_t len, const pt_samples *s,
			      ZSTD_DCtx *d, int *ret_err)
{
	bp_pack_view v;
	bp_pack_fault f = { .what = NULL };
	ZSTD_DDict *dd = NULL;
	enum outcome out = ACCEPTED_SAME;
	int r;

	r = bp_pack_parse(buf, len, &v, &f);
	*ret_err = r;
	if (r < 0) {
		ck_assert_ptr_nonnull(f.what);
		ck_assert_msg(is_content_errno(r), "parse returned %d (%s)", r, f.what);
		return REJECTED_BY_PARSE;
	}
	if (v.index.sample_count != s->n)
		return ACCEPTED_DIFFERENT;
	if (v.dict) {
		dd = ZSTD_createDDict(v.dict, v.header.dict_size);
		ck_assert_ptr_nonnull(dd);
	}
	for (uint64_t bi = 0; bi < v.index.block_count && out == ACCEPTED_SAME; bi++) {
		bp_pack_block b;
		uint8_t *raw;

		bp_pack_index_block(&v.index, bi, &b);
		if (b.raw_size > s->total) {
			out = ACCEPTED_DIFFERENT;
			break;
		}
		raw = malloc(b.raw_size ? b.raw_size : 1);
		f.what = NULL;
		r = bp_pack_block_decode(&b, buf + b.offset, d, dd, raw, b.raw_size, &f);
		if (r < 0) {
			ck_assert_ptr_nonnull(f.what);
			ck_assert_int_eq(r, -EBADMSG);
			*ret_err = r;
			out = REJECTED_BY_BLOCK;
		}
		for (uint64_t id = b.first_sample; r == 0 && id < b.first_sample + b.sample_count;
		     id++) {
			uint64_t off, size;

			bp_pack_index_sample_span(&v.index, id, &off, &size);
			if (size != s->sizes[id] || memcmp(raw + off, pt_sample(s, id), size) != 0)
				out = ACCEPTED_DIFFERENT;
		}
		free(raw);
	}
	ZSTD_freeDDict(dd);
	return out;
}

static const pack_case flip_cases[] = {
	{ "mixed, several per block", 24, 0, 200, 5, PT_MIXED, false },
	{ "dictionary, one per block", 8, 0, 0, 1, PT_JSON, true },
};

/* Damage every byte in turn: each must be caught, never read back as data. */
START_TEST(test_flip_every_byte)
{
	static const uint8_t masks[] = { 0x01, 0x80, 0xff };
	const pack_case *pc = &flip_cases[_i];
	ZSTD_DCtx *d = pt_dctx_new();
	size_t by_parse = 0, by_block = 0;
	pt_samples s;
	uint8_t *buf, *copy;
	size_t len;
	int err;

	make_case(pc, &s, &buf, &len);
	ck_assert_uint_le(len, 8192); /* keep the O(len^2) loop quick */
	ck_assert_int_eq(read_pack(buf, len, &s, d, &err), ACCEPTED_SAME);
	copy = malloc(len);
	for (size_t m = 0; m < sizeof(masks); m++) {
		for (size_t i = 0; i < len; i++) {
			enum outcome o;

			memcpy(copy, buf, len);
			copy[i] ^= masks[m];
			o = read_pack(copy, len, &s, d, &err);
			ck_assert_msg(o == REJECTED_BY_PARSE || o == REJECTED_BY_BLOCK,
				      "%s: byte %zu ^ 0x%02x of %zu went unnoticed (%s)", pc->name,
				      i, masks[m], len,
				      o == ACCEPTED_SAME ? "samples unchanged" : "samples changed");
			if (o == REJECTED_BY_PARSE)
				by_parse++;
			else
				by_block++;
		}
	}
	/* Both layers took part: metadata by parse, block bytes by decode. */
	ck_assert_uint_gt(by_parse, 0);
	ck_assert_uint_gt(by_block, 0);
	free(copy);
	free(buf);
	pt_samples_free(&s);
	ZSTD_freeDCtx(d);
}
END_TEST

START_TEST(test_truncate_every_length)
{
	const pack_case *pc = &flip_cases[_i];
	pt_samples s;
	uint8_t *buf;
	size_t len;

	make_case(pc, &s, &buf, &len);
	for (size_t n = 0; n < len; n++) {
		uint8_t *p = malloc(n ? n : 1);
		bp_pack_view v;
		bp_pack_fault f = { .what = NULL };
		int r;

		memcpy(p, buf, n);
		r = bp_pack_parse(p, n, &v, &f);
		ck_assert_msg(r == -EBADMSG, "%s: truncated to %zu of %zu: got %d", pc->name, n,
			      len, r);
		ck_assert_ptr_nonnull(f.what);
		free(p);
	}
	/* Bytes appended after the footer are damage too. */
	{
		uint8_t *p = malloc(len + 1);
		bp_pack_view v;

		memcpy(p, buf, len);
		p[len] = 0;
		ck_assert_int_eq(bp_pack_parse(p, len + 1, &v, NULL), -EBADMSG);
		free(p);
	}
	free(buf);
	pt_samples_free(&s);
}
END_TEST

static Suite *pack_integrity_suite(void)
{
	Suite *s = suite_create("pack-integrity");
	TCase *tc;

	tc = tcase_create("pack_roundtrip");
	tcase_add_loop_test(tc, test_pack_roundtrip, 0,
			    (int)(sizeof(pack_cases) / sizeof(pack_cases[0])));
	suite_add_tcase(s, tc);

	tc = tcase_create("corruption");
	tcase_add_loop_test(tc, test_flip_every_byte, 0,
			    (int)(sizeof(flip_cases) / sizeof(flip_cases[0])));
	tcase_add_loop_test(tc, test_truncate_every_length, 0,
			    (int)(sizeof(flip_cases) / sizeof(flip_cases[0])));
	suite_add_tcase(s, tc);	return s;
}

int main(void)
{
	SRunner *sr;
	int failed;

	/* Trained once here so every forked test shares the same dictionary. */
	g_dict_size = pt_dict_train(g_dict, sizeof(g_dict), 2000, 4242);

	sr = srunner_create(pack_integrity_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
