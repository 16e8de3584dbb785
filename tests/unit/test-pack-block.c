/* SPDX-License-Identifier: MIT */
/*
 * test-pack-block.c - the Check suite for one block of a .bpk on its own
 * (lib/pack/pack.c): bp_pack_block_encode choosing zstd, a dictionary or
 * raw bytes, and its limits; bp_pack_block_decode giving back exactly the
 * bytes encoded, in place for a raw block, and refusing each way a block
 * can disagree with its index entry: a stored or raw hash, a raw size, a
 * frame without a content size, trailing or skippable bytes, a damaged
 * frame, an output buffer of the wrong size, an unknown codec.
 *
 * A block is checked against its entry alone, built here by hand with no
 * pack around it, so these tests are a suite apart from the header and
 * footer (test-pack.c) and from whole packs (test-pack-integrity.c).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <check.h>
#include <xxhash.h>
#include <zstd.h>

#include "pack-testlib.h"
#include "pack.h"

/* A small dictionary trained once in main(), before Check forks the tests. */
static uint8_t g_dict[1024];
static size_t g_dict_size;

/* ---- blocks ------------------------------------------------------------ */

/* The bp_pack_block an index would hold for enc. */
static bp_pack_block block_of(const bp_pack_encoded *enc, uint64_t raw_size)
{
	return (bp_pack_block){
		.offset = 4096,
		.stored_size = enc->stored_size,
		.raw_size = raw_size,
		.first_sample = 0,
		.sample_count = 1,
		.stored_hash = enc->stored_hash,
		.raw_hash = enc->raw_hash,
		.codec = enc->codec,
	};
}

/* Decode b from stored into a fresh exactly sized buffer and compare with want. */
static int decode_check(const bp_pack_block *b, const uint8_t *stored, const ZSTD_DDict *ddict,
			const uint8_t *want, bp_pack_fault *f)
{
	ZSTD_DCtx *d = pt_dctx_new();
	uint8_t *out = malloc(b->raw_size ? b->raw_size : 1);
	int r;

	*f = (bp_pack_fault){ .what = NULL, .block = INT64_MIN };
	r = bp_pack_block_decode(b, stored, d, ddict, out, b->raw_size, f);
	if (r == 0 && want)
		ck_assert_mem_eq(out, want, b->raw_size);
	else if (r < 0)
		ck_assert_ptr_nonnull(f->what);
	free(out);
	ZSTD_freeDCtx(d);
	return r;
}

typedef struct encoded_block {
	uint8_t *raw;
	size_t raw_size;
	uint8_t *out;
	bp_pack_encoded enc;
	bp_pack_block b;
} encoded_block;

static void encode_with(encoded_block *e, uint8_t *raw, size_t raw_size, const ZSTD_CDict *cdict)
{
	ZSTD_CCtx *c = ZSTD_createCCtx();
	size_t cap = ZSTD_compressBound(raw_size);

	ck_assert_ptr_nonnull(c);
	e->raw = raw;
	e->raw_size = raw_size;
	e->out = malloc(cap);
	ck_assert_int_eq(bp_pack_block_encode(c, cdict, 3, raw, raw_size, e->out, cap, &e->enc), 0);
	e->b = block_of(&e->enc, raw_size);
	ZSTD_freeCCtx(c);
}

static void encoded_free(encoded_block *e)
{
	free(e->raw);
	free(e->out);
}

/* A compressible block: text, stored as one zstd frame. */
static void encode_text(encoded_block *e, size_t n, uint64_t seed)
{
	uint8_t *raw = malloc(n);

	pt_fill_text(&seed, raw, n);
	encode_with(e, raw, n, NULL);
}

START_TEST(test_block_compressible)
{
	encoded_block e;
	bp_pack_fault f;

	encode_text(&e, 64 << 10, 1);
	ck_assert_uint_eq(e.enc.codec, BP_CODEC_ZSTD);
	ck_assert_ptr_eq(e.enc.stored, e.out);
	ck_assert_uint_lt(e.enc.stored_size, e.raw_size / 2);
	ck_assert_uint_eq(e.enc.raw_hash, XXH3_64bits(e.raw, e.raw_size));
	ck_assert_uint_eq(e.enc.stored_hash, XXH3_64bits(e.out, e.enc.stored_size));
	/* One frame that declares its content size. */
	ck_assert_uint_eq(ZSTD_findFrameCompressedSize(e.out, e.enc.stored_size), e.enc.stored_size);
	ck_assert_uint_eq(ZSTD_getFrameContentSize(e.out, e.enc.stored_size), e.raw_size);
	ck_assert_int_eq(decode_check(&e.b, e.out, NULL, e.raw, &f), 0);
	encoded_free(&e);
}
END_TEST

START_TEST(test_block_incompressible)
{
	uint64_t seed = 2;
	size_t n = 4096;
	uint8_t *raw = malloc(n), *copy = malloc(n);
	encoded_block e;
	bp_pack_fault f;
	ZSTD_DCtx *d = pt_dctx_new();

	pt_fill_random(&seed, raw, n);
	memcpy(copy, raw, n);
	encode_with(&e, raw, n, NULL);
	ck_assert_uint_eq(e.enc.codec, BP_CODEC_RAW);
	ck_assert_ptr_eq(e.enc.stored, raw);
	ck_assert_uint_eq(e.enc.stored_size, n);
	ck_assert_uint_eq(e.enc.raw_hash, XXH3_64bits(raw, n));
	ck_assert_uint_eq(e.enc.stored_hash, e.enc.raw_hash);
	ck_assert_int_eq(decode_check(&e.b, raw, NULL, copy, &f), 0);

	/* In place: out == stored, nothing moves. */
	ck_assert_int_eq(bp_pack_block_decode(&e.b, raw, d, NULL, raw, n, &f), 0);
	ck_assert_mem_eq(raw, copy, n);

	/* A stored-bytes fault is still caught in place. */
	raw[100] ^= 1;
	ck_assert_int_eq(bp_pack_block_decode(&e.b, raw, d, NULL, raw, n, &f), -EBADMSG);
	ZSTD_freeDCtx(d);
	free(copy);
	encoded_free(&e);
}
END_TEST

START_TEST(test_block_empty)
{
	uint8_t raw[1] = { 0x42 }, out[1] = { 0x17 };
	encoded_block e;
	bp_pack_fault f = { .what = NULL };
	ZSTD_DCtx *d = pt_dctx_new();

	encode_with(&e, raw, 0, NULL);
	ck_assert_uint_eq(e.enc.codec, BP_CODEC_RAW);
	ck_assert_uint_eq(e.enc.stored_size, 0);
	ck_assert_uint_eq(e.enc.raw_hash, XXH3_64bits(raw, 0));
	ck_assert_uint_eq(e.enc.stored_hash, e.enc.raw_hash);
	ck_assert_int_eq(bp_pack_block_decode(&e.b, raw, d, NULL, out, 0, &f), 0);
	ck_assert_uint_eq(out[0], 0x17);
	ZSTD_freeDCtx(d);
	free(e.out);
}
END_TEST

START_TEST(test_block_dict)
{
	uint64_t seed = 3;
	size_t n = 0, cap = 4096;
	uint8_t *raw = malloc(cap);
	ZSTD_CDict *cd = ZSTD_createCDict(g_dict, g_dict_size, 3);
	ZSTD_DDict *dd = ZSTD_createDDict(g_dict, g_dict_size);
	encoded_block with, without;
	bp_pack_fault f;
	uint8_t other_dict[1024];
	size_t other_size;
	ZSTD_DDict *other;

	ck_assert_ptr_nonnull(cd);
	ck_assert_ptr_nonnull(dd);
	while (n + 256 <= cap)
		n += pt_json_record(&seed, (char *)raw + n, 256);
	encode_with(&with, raw, n, cd);
	ck_assert_uint_eq(with.enc.codec, BP_CODEC_ZSTD_DICT);
	ck_assert_ptr_eq(with.enc.stored, with.out);
	ck_assert_uint_lt(with.enc.stored_size, n);
	ck_assert_uint_eq(with.enc.stored_hash, XXH3_64bits(with.out, with.enc.stored_size));

	/* The point of a dictionary: smaller than the same block without it. */
	encode_with(&without, raw, n, NULL);
	ck_assert_uint_eq(without.enc.codec, BP_CODEC_ZSTD);
	ck_assert_uint_lt(with.enc.stored_size, without.enc.stored_size);

	ck_assert_int_eq(decode_check(&with.b, with.out, dd, raw, &f), 0);
	/* Without the dictionary it cannot decode: the caller's mistake, not the pack's. */
	ck_assert_int_eq(decode_check(&with.b, with.out, NULL, NULL, &f), -EINVAL);
	/* With another dictionary it must not decode to anything. */
	other_size = pt_dict_train(other_dict, sizeof(other_dict), 1500, 99);
	other = ZSTD_createDDict(other_dict, other_size);
	ck_assert_int_eq(decode_check(&with.b, with.out, other, NULL, &f), -EBADMSG);

	ZSTD_freeDDict(other);
	ZSTD_freeDDict(dd);
	ZSTD_freeCDict(cd);
	free(without.out);
	encoded_free(&with);
}
END_TEST

START_TEST(test_block_encode_limits)
{
	ZSTD_CCtx *c = ZSTD_createCCtx();
	size_t big = BP_PACK_MAX_BLOCK + 1;
	/* Untouched pages cost nothing; the encoder must refuse before reading. */
	uint8_t *raw = mmap(NULL, big, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	uint8_t out[64], small[100] = { 0 };
	bp_pack_encoded enc;

	ck_assert_ptr_ne(raw, MAP_FAILED);
	ck_assert_int_eq(bp_pack_block_encode(c, NULL, 3, raw, big, out, SIZE_MAX, &enc), -E2BIG);
	ck_assert_int_eq(bp_pack_block_encode(c, NULL, 3, small, sizeof(small), out,
					      ZSTD_compressBound(sizeof(small)) - 1, &enc),
			 -EINVAL);
	munmap(raw, big);
	ZSTD_freeCCtx(c);
}
END_TEST

START_TEST(test_decode_bad_stored_hash)
{
	encoded_block e;
	bp_pack_fault f;
	bp_pack_block b;

	encode_text(&e, 8192, 4);
	b = e.b;
	b.stored_hash ^= 1;
	ck_assert_int_eq(decode_check(&b, e.out, NULL, NULL, &f), -EBADMSG);
	/* Flipping a stored byte is the same fault seen from the data side. */
	e.out[e.enc.stored_size / 2] ^= 0x10;
	ck_assert_int_eq(decode_check(&e.b, e.out, NULL, NULL, &f), -EBADMSG);
	encoded_free(&e);
}
END_TEST

START_TEST(test_decode_bad_raw_hash)
{
	encoded_block e;
	bp_pack_fault f;
	bp_pack_block b;

	encode_text(&e, 8192, 5);
	b = e.b;
	b.raw_hash ^= UINT64_C(1) << 63;
	ck_assert_int_eq(decode_check(&b, e.out, NULL, NULL, &f), -EBADMSG);
	encoded_free(&e);
}
END_TEST

/* The index's raw_size must agree with the size the frame declares. */
START_TEST(test_decode_bad_raw_size)
{
	encoded_block e;
	bp_pack_fault f;
	bp_pack_block b;
	ZSTD_DCtx *d = pt_dctx_new();
	uint8_t *out;

	encode_text(&e, 8192, 6);
	out = malloc(e.raw_size + 64);
	b = e.b;
	b.raw_size = e.raw_size + 1;
	f.what = NULL;
	ck_assert_int_eq(bp_pack_block_decode(&b, e.out, d, NULL, out, e.raw_size + 64, &f),
			 -EBADMSG);
	ck_assert_ptr_nonnull(f.what);
	b.raw_size = e.raw_size - 1;
	f.what = NULL;
	ck_assert_int_eq(bp_pack_block_decode(&b, e.out, d, NULL, out, e.raw_size + 64, &f),
			 -EBADMSG);
	ck_assert_ptr_nonnull(f.what);
	free(out);
	ZSTD_freeDCtx(d);
	encoded_free(&e);
}
END_TEST

/* A frame that does not declare its content size cannot be checked: rejected. */
START_TEST(test_decode_no_content_size)
{
	uint64_t seed = 7;
	size_t n = 8192, cap = ZSTD_compressBound(n), sz;
	uint8_t *raw = malloc(n), *frame = malloc(cap);
	ZSTD_CCtx *c = ZSTD_createCCtx();
	ZSTD_CStream *cs = c;
	ZSTD_outBuffer ob = { frame, cap, 0 };
	ZSTD_inBuffer ib;
	bp_pack_block b;
	bp_pack_fault f;

	pt_fill_text(&seed, raw, n);
	ib = (ZSTD_inBuffer){ raw, n, 0 };
	/* Streaming without a pledged size leaves the content size out. */
	ck_assert(!ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, 0)));
	ck_assert_uint_eq(ZSTD_compressStream2(cs, &ob, &ib, ZSTD_e_end), 0);
	sz = ob.pos;
	ck_assert_uint_eq(ZSTD_getFrameContentSize(frame, sz), ZSTD_CONTENTSIZE_UNKNOWN);
	b = (bp_pack_block){
		.offset = 4096, .stored_size = sz, .raw_size = n, .sample_count = 1,
		.stored_hash = XXH3_64bits(frame, sz), .raw_hash = XXH3_64bits(raw, n),
		.codec = BP_CODEC_ZSTD,
	};
	ck_assert_int_eq(decode_check(&b, frame, NULL, NULL, &f), -EBADMSG);
	ZSTD_freeCCtx(c);
	free(raw);
	free(frame);
}
END_TEST

/* Exactly one frame: no trailing bytes, no second frame, no short frame. */
START_TEST(test_decode_trailing_bytes)
{
	encoded_block e;
	bp_pack_fault f;
	bp_pack_block b;
	size_t sz;
	uint8_t *two;

	encode_text(&e, 8192, 8);
	sz = e.enc.stored_size;
	two = malloc(2 * sz + 3);
	memcpy(two, e.out, sz);
	memcpy(two + sz, "XYZ", 3);
	b = e.b;
	b.stored_size = sz + 3;
	b.stored_hash = XXH3_64bits(two, b.stored_size);
	ck_assert_int_eq(decode_check(&b, two, NULL, NULL, &f), -EBADMSG);

	/* A second whole frame of the same data (raw_size doubled to match). */
	memcpy(two + sz, e.out, sz);
	b = e.b;
	b.stored_size = 2 * sz;
	b.stored_hash = XXH3_64bits(two, b.stored_size);
	ck_assert_int_eq(decode_check(&b, two, NULL, NULL, &f), -EBADMSG);
	b.raw_size = 2 * e.raw_size;
	ck_assert_int_eq(decode_check(&b, two, NULL, NULL, &f), -EBADMSG);

	/* The frame cut short by one byte. */
	b = e.b;
	b.stored_size = sz - 1;
	b.stored_hash = XXH3_64bits(e.out, b.stored_size);
	ck_assert_int_eq(decode_check(&b, e.out, NULL, NULL, &f), -EBADMSG);
	free(two);
	encoded_free(&e);
}
END_TEST

/*
 * With its stored hash resealed, a damaged frame must be caught by zstd or by
 * the raw hash; a flip zstd ignores (the frame header's unused bit) may
 * decode, but only to the original bytes.
 */
START_TEST(test_decode_damaged_frame)
{
	static const uint8_t masks[] = { 0x01, 0x10, 0x80 };
	encoded_block e;
	bp_pack_fault f;
	bp_pack_block b;
	size_t caught = 0, tries = 0;
	uint8_t *copy;

	encode_text(&e, 8192, 9);
	copy = malloc(e.enc.stored_size);
	for (size_t m = 0; m < sizeof(masks); m++) {
		for (size_t i = 0; i < e.enc.stored_size; i++, tries++) {
			int r;

			memcpy(copy, e.out, e.enc.stored_size);
			copy[i] ^= masks[m];
			b = e.b;
			b.stored_hash = XXH3_64bits(copy, b.stored_size);
			/* decode_check compares with the original whenever it succeeds. */
			r = decode_check(&b, copy, NULL, e.raw, &f);
			ck_assert_msg(r == 0 || r == -EBADMSG, "byte %zu ^ 0x%02x: got %d", i,
				      masks[m], r);
			caught += r == -EBADMSG;
		}
	}
	/* Nearly every flip is fatal to a frame. */
	ck_assert_uint_gt(caught, tries * 9 / 10);
	free(copy);
	encoded_free(&e);
}
END_TEST

/* No skippable frames either side of the one frame (PACK.md §Blocks). */
START_TEST(test_decode_skippable_frame)
{
	/* Magic 0x184D2A50, 4 bytes of payload. */
	static const uint8_t skip[12] = { 0x50, 0x2a, 0x4d, 0x18, 4, 0, 0, 0, 'b', 'p', 'k', '!' };
	encoded_block e;
	bp_pack_fault f;
	bp_pack_block b;
	uint8_t *buf;
	size_t sz;

	encode_text(&e, 8192, 13);
	sz = e.enc.stored_size;
	buf = malloc(sz + sizeof(skip));
	b = e.b;
	b.stored_size = sz + sizeof(skip);

	memcpy(buf, e.out, sz);
	memcpy(buf + sz, skip, sizeof(skip));
	b.stored_hash = XXH3_64bits(buf, b.stored_size);
	ck_assert_int_eq(decode_check(&b, buf, NULL, NULL, &f), -EBADMSG);

	memcpy(buf, skip, sizeof(skip));
	memcpy(buf + sizeof(skip), e.out, sz);
	b.stored_hash = XXH3_64bits(buf, b.stored_size);
	ck_assert_int_eq(decode_check(&b, buf, NULL, NULL, &f), -EBADMSG);
	free(buf);
	encoded_free(&e);
}
END_TEST

START_TEST(test_decode_out_cap)
{
	encoded_block e;
	bp_pack_fault f = { .what = NULL };
	ZSTD_DCtx *d = pt_dctx_new();
	uint64_t seed = 10;
	uint8_t *out, raw[512];

	encode_text(&e, 8192, 11);
	out = malloc(e.raw_size);
	ck_assert_int_eq(bp_pack_block_decode(&e.b, e.out, d, NULL, out, e.raw_size - 1, &f),
			 -EINVAL);
	ck_assert_int_eq(bp_pack_block_decode(&e.b, e.out, d, NULL, out, 0, &f), -EINVAL);
	ck_assert_int_eq(bp_pack_block_decode(&e.b, e.out, d, NULL, out, e.raw_size, &f), 0);
	ck_assert_mem_eq(out, e.raw, e.raw_size);
	free(out);
	encoded_free(&e);

	/* The same for a raw block. */
	pt_fill_random(&seed, raw, sizeof(raw));
	encode_with(&e, raw, sizeof(raw), NULL);
	ck_assert_uint_eq(e.enc.codec, BP_CODEC_RAW);
	out = malloc(sizeof(raw));
	ck_assert_int_eq(bp_pack_block_decode(&e.b, raw, d, NULL, out, sizeof(raw) - 1, &f),
			 -EINVAL);
	free(out);
	free(e.out);
	ZSTD_freeDCtx(d);
}
END_TEST

START_TEST(test_decode_unknown_codec)
{
	encoded_block e;
	bp_pack_fault f;
	bp_pack_block b;

	encode_text(&e, 4096, 12);
	b = e.b;
	b.codec = 3;
	/* A codec this build does not know: not supported (PACK.md), not "damaged". */
	ck_assert_int_eq(decode_check(&b, e.out, NULL, NULL, &f), -ENOTSUP);
	b.codec = UINT32_MAX;
	ck_assert_int_eq(decode_check(&b, e.out, NULL, NULL, &f), -ENOTSUP);
	encoded_free(&e);
}
END_TEST

static Suite *pack_block_suite(void)
{
	Suite *s = suite_create("pack-block");
	TCase *tc;

	tc = tcase_create("block_encode");
	tcase_add_test(tc, test_block_compressible);
	tcase_add_test(tc, test_block_incompressible);
	tcase_add_test(tc, test_block_empty);
	tcase_add_test(tc, test_block_dict);
	tcase_add_test(tc, test_block_encode_limits);
	suite_add_tcase(s, tc);

	tc = tcase_create("block_decode_rejects");
	tcase_add_test(tc, test_decode_bad_stored_hash);
	tcase_add_test(tc, test_decode_bad_raw_hash);
	tcase_add_test(tc, test_decode_bad_raw_size);
	tcase_add_test(tc, test_decode_no_content_size);
	tcase_add_test(tc, test_decode_trailing_bytes);
	tcase_add_test(tc, test_decode_damaged_frame);
	tcase_add_test(tc, test_decode_skippable_frame);
	tcase_add_test(tc, test_decode_out_cap);
	tcase_add_test(tc, test_decode_unknown_codec);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr;
	int failed;

	/* Trained once here so every forked test shares the same dictionary. */
	g_dict_size = pt_dict_train(g_dict, sizeof(g_dict), 2000, 4242);

	sr = srunner_create(pack_block_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
