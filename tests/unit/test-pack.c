/* SPDX-License-Identifier: MIT */
/*
 * test-pack.c - the Check suite for lib/pack/pack.c: the .bpk codecs and
 * validators, fed both packs written by bp_pack_writer and packs crafted
 * byte by byte.
 *
 * The format promises that every byte of a pack is covered by some check
 * (PACK.md §Checksums), so besides round trips this suite flips every byte
 * of small packs and truncates them at every length. The index's semantic
 * rules, one fault at a time, are test-pack-index.c's.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
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

static bool is_content_errno(int r)
{
	return r == -EBADMSG || r == -ENOTSUP || r == -E2BIG;
}

/* ---- header ------------------------------------------------------------ */

static bp_pack_header header_with_dict(uint64_t dict_size)
{
	return (bp_pack_header){
		.version = BP_PACK_VERSION,
		.dict_offset = dict_size ? BP_PACK_HEADER_SIZE : 0,
		.dict_size = dict_size,
		.dict_hash = dict_size ? UINT64_C(0x0123456789abcdef) : 0,
		.data_offset = BP_PACK_HEADER_SIZE + dict_size,
	};
}

/* Decode hdr; on failure check a reason is given and *ret was not written. */
static int header_result(const uint8_t *hdr, size_t len)
{
	bp_pack_fault f = { .what = NULL };
	bp_pack_header h, sentinel;
	int r;

	memset(&h, 0x5a, sizeof(h));
	memcpy(&sentinel, &h, sizeof(h));
	r = bp_pack_header_decode(hdr, len, &h, &f);
	if (r < 0) {
		ck_assert_ptr_nonnull(f.what);
		ck_assert_uint_lt(f.offset, BP_PACK_HEADER_SIZE);
		ck_assert_int_eq(f.block, -1);
		ck_assert_mem_eq(&h, &sentinel, sizeof(h));
	}
	return r;
}

START_TEST(test_header_roundtrip)
{
	static const uint64_t dict_sizes[] = { 0, 1, 1000, BP_PACK_MAX_DICT };

	for (size_t i = 0; i < sizeof(dict_sizes) / sizeof(dict_sizes[0]); i++) {
		bp_pack_header in = header_with_dict(dict_sizes[i]), out;
		uint8_t buf[BP_PACK_HEADER_SIZE];

		memset(buf, 0xee, sizeof(buf));
		bp_pack_header_encode(&in, buf);
		ck_assert_int_eq(bp_pack_header_decode(buf, sizeof(buf), &out, NULL), 0);
		ck_assert_uint_eq(out.version, in.version);
		ck_assert_uint_eq(out.dict_offset, in.dict_offset);
		ck_assert_uint_eq(out.dict_size, in.dict_size);
		ck_assert_uint_eq(out.dict_hash, in.dict_hash);
		ck_assert_uint_eq(out.data_offset, in.data_offset);
	}
}
END_TEST

/* The encoded bytes follow PACK.md: little-endian fields at fixed offsets. */
START_TEST(test_header_layout)
{
	bp_pack_header in = header_with_dict(1000);
	uint8_t buf[BP_PACK_HEADER_SIZE];

	memset(buf, 0xee, sizeof(buf));
	bp_pack_header_encode(&in, buf);
	ck_assert_mem_eq(buf + HDR_MAGIC, "\x89" "BPK\r\n\x1a\n", 8);
	ck_assert_uint_eq(pt_le32(buf + HDR_VERSION), 1);
	ck_assert_uint_eq(pt_le32(buf + HDR_SIZE), BP_PACK_HEADER_SIZE);
	ck_assert_uint_eq(pt_le64(buf + HDR_FLAGS), 0);
	ck_assert_uint_eq(pt_le64(buf + HDR_DICT_OFFSET), 64);
	ck_assert_uint_eq(pt_le64(buf + HDR_DICT_SIZE), 1000);
	ck_assert_uint_eq(pt_le64(buf + HDR_DICT_HASH), UINT64_C(0x0123456789abcdef));
	ck_assert_uint_eq(pt_le64(buf + HDR_DATA_OFFSET), 1064);
	ck_assert_uint_eq(pt_le64(buf + HDR_RESERVED), 0);
}
END_TEST

START_TEST(test_header_bad_magic)
{
	uint8_t buf[BP_PACK_HEADER_SIZE];
	bp_pack_header h = header_with_dict(0);

	for (size_t i = 0; i < 8; i++) {
		bp_pack_header_encode(&h, buf);
		buf[HDR_MAGIC + i] ^= 0x20;
		ck_assert_int_eq(header_result(buf, sizeof(buf)), -EBADMSG);
	}
	/* The footer's magic is not a header's. */
	bp_pack_header_encode(&h, buf);
	memcpy(buf, BP_PACK_FOOTER_MAGIC, 8);
	ck_assert_int_eq(header_result(buf, sizeof(buf)), -EBADMSG);
}
END_TEST

START_TEST(test_header_bad_version)
{
	static const uint32_t versions[] = { 0, 2, 0x100, UINT32_MAX };
	uint8_t buf[BP_PACK_HEADER_SIZE];
	bp_pack_header h = header_with_dict(0);

	for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]); i++) {
		bp_pack_header_encode(&h, buf);
		pt_put_le32(buf + HDR_VERSION, versions[i]);
		ck_assert_int_eq(header_result(buf, sizeof(buf)), -ENOTSUP);
	}
}
END_TEST

/* Reserved bytes must be zero; the header size is fixed; no flags exist yet. */
START_TEST(test_header_reserved)
{
	uint8_t buf[BP_PACK_HEADER_SIZE];
	bp_pack_header h = header_with_dict(0);

	for (size_t i = HDR_RESERVED; i < BP_PACK_HEADER_SIZE; i++) {
		bp_pack_header_encode(&h, buf);
		buf[i] = 1;
		ck_assert_int_eq(header_result(buf, sizeof(buf)), -EBADMSG);
	}
	bp_pack_header_encode(&h, buf);
	pt_put_le32(buf + HDR_SIZE, 63);
	ck_assert_int_eq(header_result(buf, sizeof(buf)), -EBADMSG);
	pt_put_le32(buf + HDR_SIZE, 128);
	ck_assert_int_eq(header_result(buf, sizeof(buf)), -EBADMSG);

	/* A flag is a feature this build does not know: not supported. */
	for (size_t bit = 0; bit < 64; bit += 9) {
		bp_pack_header_encode(&h, buf);
		pt_put_le64(buf + HDR_FLAGS, UINT64_C(1) << bit);
		ck_assert_int_eq(header_result(buf, sizeof(buf)), -ENOTSUP);
	}
}
END_TEST

START_TEST(test_header_dict_fields)
{
	uint8_t buf[BP_PACK_HEADER_SIZE];
	bp_pack_header h;

	/* Over the dictionary limit (with otherwise consistent fields). */
	h = header_with_dict(BP_PACK_MAX_DICT + 1);
	bp_pack_header_encode(&h, buf);
	ck_assert_int_eq(header_result(buf, sizeof(buf)), -E2BIG);
	h = header_with_dict(UINT64_MAX - BP_PACK_HEADER_SIZE);
	bp_pack_header_encode(&h, buf);
	ck_assert_int_eq(header_result(buf, sizeof(buf)), -E2BIG);

	/* No dictionary, yet an offset or a hash. */
	h = header_with_dict(0);
	h.dict_offset = BP_PACK_HEADER_SIZE;
	bp_pack_header_encode(&h, buf);
	ck_assert_int_eq(header_result(buf, sizeof(buf)), -EBADMSG);
	h = header_with_dict(0);
	h.dict_hash = 1;
	bp_pack_header_encode(&h, buf);
	ck_assert_int_eq(header_result(buf, sizeof(buf)), -EBADMSG);

	/* A dictionary that does not start right after the header. */
	h = header_with_dict(100);
	h.dict_offset = 0;
	bp_pack_header_encode(&h, buf);
	ck_assert_int_eq(header_result(buf, sizeof(buf)), -EBADMSG);
	h.dict_offset = BP_PACK_HEADER_SIZE + 8;
	bp_pack_header_encode(&h, buf);
	ck_assert_int_eq(header_result(buf, sizeof(buf)), -EBADMSG);

	/* Data that does not start right after the dictionary. */
	h = header_with_dict(100);
	h.data_offset += 1;
	bp_pack_header_encode(&h, buf);
	ck_assert_int_eq(header_result(buf, sizeof(buf)), -EBADMSG);
	h.data_offset -= 2;
	bp_pack_header_encode(&h, buf);
	ck_assert_int_eq(header_result(buf, sizeof(buf)), -EBADMSG);
	h = header_with_dict(0);
	h.data_offset = 0;
	bp_pack_header_encode(&h, buf);
	ck_assert_int_eq(header_result(buf, sizeof(buf)), -EBADMSG);
}
END_TEST

START_TEST(test_header_truncated)
{
	uint8_t full[BP_PACK_HEADER_SIZE];
	bp_pack_header h = header_with_dict(0);

	bp_pack_header_encode(&h, full);
	for (size_t len = 0; len < BP_PACK_HEADER_SIZE; len++) {
		/* An exactly sized copy, so a sanitizer sees any read past len. */
		uint8_t *p = malloc(len ? len : 1);

		memcpy(p, full, len);
		ck_assert_int_eq(header_result(p, len), -EBADMSG);
		free(p);
	}
}
END_TEST

/* ---- footer ------------------------------------------------------------ */

/* A footer consistent with a no-dictionary header and a file of *file_size. */
static bp_pack_footer footer_sample(uint64_t *file_size)
{
	bp_pack_footer f = {
		.index_offset = BP_PACK_HEADER_SIZE + 1000,
		.block_count = 2,
		.sample_count = 5,
		.raw_bytes = 4000,
		.max_sample = 1500,
		.fingerprint = UINT64_C(0xfeedfacecafebeef),
	};

	f.index_size = f.block_count * BP_PACK_BLOCK_ENTRY + f.sample_count * BP_PACK_SAMPLE_ENTRY;
	*file_size = f.index_offset + f.index_size + BP_PACK_FOOTER_SIZE;
	return f;
}

static int footer_result(const uint8_t *buf, uint64_t file_size, const bp_pack_header *h)
{
	bp_pack_fault f = { .what = NULL };
	bp_pack_footer out, sentinel;
	int r;

	memset(&out, 0x5a, sizeof(out));
	memcpy(&sentinel, &out, sizeof(out));
	r = bp_pack_footer_decode(buf, file_size, h, &out, &f);
	if (r < 0) {
		ck_assert_ptr_nonnull(f.what);
		ck_assert_mem_eq(&out, &sentinel, sizeof(out));
	}
	return r;
}

START_TEST(test_footer_roundtrip)
{
	bp_pack_header h = header_with_dict(0);
	uint8_t hdr[BP_PACK_HEADER_SIZE], buf[BP_PACK_FOOTER_SIZE];
	uint64_t file_size;
	bp_pack_footer in = footer_sample(&file_size), out;

	bp_pack_header_encode(&h, hdr);
	in.checksum = 12345; /* ignored by the encoder */
	bp_pack_footer_encode(&in, hdr, buf);
	ck_assert_int_eq(bp_pack_footer_decode(buf, file_size, &h, &out, NULL), 0);
	ck_assert_uint_eq(out.index_offset, in.index_offset);
	ck_assert_uint_eq(out.index_size, in.index_size);
	ck_assert_uint_eq(out.block_count, in.block_count);
	ck_assert_uint_eq(out.sample_count, in.sample_count);
	ck_assert_uint_eq(out.raw_bytes, in.raw_bytes);
	ck_assert_uint_eq(out.max_sample, in.max_sample);
	ck_assert_uint_eq(out.fingerprint, in.fingerprint);
	ck_assert_uint_eq(out.checksum, bp_pack_checksum(hdr, buf));
	ck_assert_uint_ne(out.checksum, 12345);
}
END_TEST

/* Layout and checksum exactly as PACK.md §Footer and §Checksums define them. */
START_TEST(test_footer_layout)
{
	bp_pack_header h = header_with_dict(300);
	uint8_t hdr[BP_PACK_HEADER_SIZE], buf[BP_PACK_FOOTER_SIZE];
	uint8_t covered[BP_PACK_HEADER_SIZE + 64];
	uint64_t file_size;
	bp_pack_footer in = footer_sample(&file_size);

	bp_pack_header_encode(&h, hdr);
	bp_pack_footer_encode(&in, hdr, buf);
	ck_assert_uint_eq(pt_le64(buf + FTR_INDEX_OFFSET), in.index_offset);
	ck_assert_uint_eq(pt_le64(buf + FTR_INDEX_SIZE), in.index_size);
	ck_assert_uint_eq(pt_le64(buf + FTR_BLOCK_COUNT), in.block_count);
	ck_assert_uint_eq(pt_le64(buf + FTR_SAMPLE_COUNT), in.sample_count);
	ck_assert_uint_eq(pt_le64(buf + FTR_RAW_BYTES), in.raw_bytes);
	ck_assert_uint_eq(pt_le64(buf + FTR_MAX_SAMPLE), in.max_sample);
	ck_assert_uint_eq(pt_le64(buf + FTR_FINGERPRINT), in.fingerprint);
	ck_assert_uint_eq(pt_le32(buf + FTR_VERSION), BP_PACK_VERSION);
	ck_assert_uint_eq(pt_le32(buf + FTR_SIZE), BP_PACK_FOOTER_SIZE);
	ck_assert_mem_eq(buf + FTR_MAGIC, "BPKINDEX", 8);

	memcpy(covered, hdr, BP_PACK_HEADER_SIZE);
	memcpy(covered + BP_PACK_HEADER_SIZE, buf, 64);
	ck_assert_uint_eq(pt_le64(buf + FTR_CHECKSUM),
			  XXH3_64bits_withSeed(covered, sizeof(covered), in.fingerprint));
	ck_assert_uint_eq(bp_pack_checksum(hdr, buf), pt_le64(buf + FTR_CHECKSUM));

	/* The checksum covers the header: a different header, a different sum. */
	hdr[HDR_DICT_HASH] ^= 1;
	ck_assert_uint_ne(bp_pack_checksum(hdr, buf), pt_le64(buf + FTR_CHECKSUM));
}
END_TEST

START_TEST(test_footer_rejects)
{
	bp_pack_header h = header_with_dict(0);
	uint8_t hdr[BP_PACK_HEADER_SIZE], buf[BP_PACK_FOOTER_SIZE];
	uint64_t fs;
	bp_pack_footer base = footer_sample(&fs), f;

	bp_pack_header_encode(&h, hdr);
	bp_pack_footer_encode(&base, hdr, buf);
	ck_assert_int_eq(footer_result(buf, fs, &h), 0);

	for (size_t i = 0; i < 8; i++) {
		bp_pack_footer_encode(&base, hdr, buf);
		buf[FTR_MAGIC + i] ^= 0x01;
		ck_assert_int_eq(footer_result(buf, fs, &h), -EBADMSG);
	}
	/* Version 2 (framed samples) is known; the one after version 3 (sections) is not. */
	bp_pack_footer_encode(&base, hdr, buf);
	pt_put_le32(buf + FTR_VERSION, BP_PACK_VERSION_FRAMES);
	ck_assert_int_eq(footer_result(buf, fs, &h), 0);
	bp_pack_footer_encode(&base, hdr, buf);
	pt_put_le32(buf + FTR_VERSION, BP_PACK_VERSION_SECTIONS + 1);
	ck_assert_int_eq(footer_result(buf, fs, &h), -ENOTSUP);
	bp_pack_footer_encode(&base, hdr, buf);
	pt_put_le32(buf + FTR_SIZE, 72);
	ck_assert_int_eq(footer_result(buf, fs, &h), -EBADMSG);

	/* The file is too small to hold header and footer. */
	bp_pack_footer_encode(&base, hdr, buf);
	ck_assert_int_eq(footer_result(buf, BP_PACK_HEADER_SIZE + BP_PACK_FOOTER_SIZE - 1, &h),
			 -EBADMSG);
	ck_assert_int_eq(footer_result(buf, 0, &h), -EBADMSG);
	/* The footer does not sit where file_size says. */
	ck_assert_int_eq(footer_result(buf, fs + 1, &h), -EBADMSG);
	ck_assert_int_eq(footer_result(buf, fs - 1, &h), -EBADMSG);

	/* Index starts inside the header or past the footer. */
	f = base;
	f.index_offset = BP_PACK_HEADER_SIZE - 1;
	bp_pack_footer_encode(&f, hdr, buf);
	ck_assert_int_eq(footer_result(buf, f.index_offset + f.index_size + 80, &h), -EBADMSG);
	f = base;
	f.index_offset = fs;
	bp_pack_footer_encode(&f, hdr, buf);
	ck_assert_int_eq(footer_result(buf, fs, &h), -EBADMSG);

	/* Index size disagrees with the counts. */
	f = base;
	f.sample_count++;
	bp_pack_footer_encode(&f, hdr, buf);
	ck_assert_int_eq(footer_result(buf, fs, &h), -EBADMSG);
	f = base;
	f.block_count--;
	bp_pack_footer_encode(&f, hdr, buf);
	ck_assert_int_eq(footer_result(buf, fs, &h), -EBADMSG);

	/* A pack with nothing in it. */
	f = base;
	f.sample_count = 0;
	f.block_count = 0;
	f.index_size = 0;
	f.raw_bytes = 0;
	f.max_sample = 0;
	bp_pack_footer_encode(&f, hdr, buf);
	ck_assert_int_eq(footer_result(buf, f.index_offset + BP_PACK_FOOTER_SIZE, &h), -EBADMSG);

	/* Over the largest-sample limit. */
	f = base;
	f.max_sample = BP_PACK_MAX_SAMPLE + 1;
	bp_pack_footer_encode(&f, hdr, buf);
	ck_assert_int_eq(footer_result(buf, fs, &h), -E2BIG);
}
END_TEST

/* Counts whose table sizes wrap around 2^64 to the real index size. */
START_TEST(test_footer_count_overflow)
{
	bp_pack_header h = header_with_dict(0);
	uint8_t hdr[BP_PACK_HEADER_SIZE], buf[BP_PACK_FOOTER_SIZE];
	uint64_t fs;
	bp_pack_footer base = footer_sample(&fs), f;

	bp_pack_header_encode(&h, hdr);

	/* (n + 2^60) * 16 == n * 16 (mod 2^64). */
	f = base;
	f.sample_count += UINT64_C(1) << 60;
	ck_assert_uint_eq(f.block_count * BP_PACK_BLOCK_ENTRY +
				  f.sample_count * BP_PACK_SAMPLE_ENTRY, f.index_size);
	bp_pack_footer_encode(&f, hdr, buf);
	ck_assert_int_eq(footer_result(buf, fs, &h), -EBADMSG);

	/*
	 * (b + 2^61) * 56 + (s + 2^61) * 16 == b * 56 + s * 16 (mod 2^64), and
	 * still no more blocks than samples: only the wrap itself is wrong.
	 */
	f = base;
	f.block_count += UINT64_C(1) << 61;
	f.sample_count += UINT64_C(1) << 61;
	ck_assert_uint_le(f.block_count, f.sample_count);
	ck_assert_uint_eq(f.block_count * BP_PACK_BLOCK_ENTRY +
				  f.sample_count * BP_PACK_SAMPLE_ENTRY, f.index_size);
	bp_pack_footer_encode(&f, hdr, buf);
	ck_assert_int_eq(footer_result(buf, fs, &h), -EBADMSG);

	f = base;
	f.sample_count = UINT64_MAX;
	f.block_count = UINT64_MAX;
	bp_pack_footer_encode(&f, hdr, buf);
	ck_assert_int_eq(footer_result(buf, fs, &h), -EBADMSG);

	/* index_offset + index_size wrapping. */
	f = base;
	f.index_offset = UINT64_MAX - 8;
	bp_pack_footer_encode(&f, hdr, buf);
	ck_assert_int_eq(footer_result(buf, fs, &h), -EBADMSG);
}
END_TEST

/* An index over BP_PACK_MAX_INDEX in a file big enough to hold it. */
START_TEST(test_footer_index_limit)
{
	bp_pack_header h = header_with_dict(0);
	uint8_t hdr[BP_PACK_HEADER_SIZE], buf[BP_PACK_FOOTER_SIZE];
	bp_pack_footer f = {
		.index_offset = BP_PACK_HEADER_SIZE + 4096,
		.block_count = 1,
		.raw_bytes = 1,
		.max_sample = 1,
	};

	/* One block and enough samples that the tables total just over the limit. */
	f.sample_count = (BP_PACK_MAX_INDEX - BP_PACK_BLOCK_ENTRY) / BP_PACK_SAMPLE_ENTRY + 1;
	f.index_size = BP_PACK_BLOCK_ENTRY + f.sample_count * BP_PACK_SAMPLE_ENTRY;
	ck_assert_uint_gt(f.index_size, BP_PACK_MAX_INDEX);
	bp_pack_header_encode(&h, hdr);
	bp_pack_footer_encode(&f, hdr, buf);
	ck_assert_int_eq(footer_result(buf, f.index_offset + f.index_size + BP_PACK_FOOTER_SIZE, &h),
			 -E2BIG);
}
END_TEST

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

static ZSTD_DCtx *new_dctx(void)
{
	ZSTD_DCtx *d = ZSTD_createDCtx();

	ck_assert_ptr_nonnull(d);
	ck_assert_int_eq(bp_pack_dctx_init(d), 0);
	return d;
}

/* Decode b from stored into a fresh exactly sized buffer and compare with want. */
static int decode_check(const bp_pack_block *b, const uint8_t *stored, const ZSTD_DDict *ddict,
			const uint8_t *want, bp_pack_fault *f)
{
	ZSTD_DCtx *d = new_dctx();
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
	ZSTD_DCtx *d = new_dctx();

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
	ZSTD_DCtx *d = new_dctx();

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
	ZSTD_DCtx *d = new_dctx();
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
	ZSTD_DCtx *d = new_dctx();
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
	ZSTD_DCtx *d = new_dctx();
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
	ZSTD_DCtx *d = new_dctx();
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

/* ---- small pure helpers -------------------------------------------------- */

START_TEST(test_codec_names)
{
	ck_assert_str_eq(bp_pack_codec_name(BP_CODEC_RAW), "raw");
	ck_assert_str_eq(bp_pack_codec_name(BP_CODEC_ZSTD), "zstd");
	ck_assert_str_eq(bp_pack_codec_name(BP_CODEC_ZSTD_DICT), "zstd+dict");
	ck_assert_str_eq(bp_pack_codec_name(3), "unknown");
	ck_assert_str_eq(bp_pack_codec_name(UINT32_MAX), "unknown");
}
END_TEST

START_TEST(test_dataset_fingerprint)
{
	const uint64_t a[] = { 1, 2, 3 }, b[] = { 3, 2, 1 }, c[] = { 1, 2, 4 };
	uint8_t le[24];

	ck_assert_uint_eq(bp_pack_dataset_fingerprint(a, 3), bp_pack_dataset_fingerprint(a, 3));
	ck_assert_uint_ne(bp_pack_dataset_fingerprint(a, 3), bp_pack_dataset_fingerprint(b, 3));
	ck_assert_uint_ne(bp_pack_dataset_fingerprint(a, 3), bp_pack_dataset_fingerprint(c, 3));
	ck_assert_uint_ne(bp_pack_dataset_fingerprint(a, 3), bp_pack_dataset_fingerprint(a, 2));
	/* PACK.md §Datasets: XXH3-64 of the shard fingerprints, little-endian, in order. */
	for (size_t i = 0; i < 3; i++)
		pt_put_le64(le + 8 * i, a[i]);
	ck_assert_uint_eq(bp_pack_dataset_fingerprint(a, 3), XXH3_64bits(le, sizeof(le)));
}
END_TEST

static Suite *pack_suite(void)
{
	Suite *s = suite_create("pack");
	TCase *tc;

	tc = tcase_create("header");
	tcase_add_test(tc, test_header_roundtrip);
	tcase_add_test(tc, test_header_layout);
	tcase_add_test(tc, test_header_bad_magic);
	tcase_add_test(tc, test_header_bad_version);
	tcase_add_test(tc, test_header_reserved);
	tcase_add_test(tc, test_header_dict_fields);
	tcase_add_test(tc, test_header_truncated);
	suite_add_tcase(s, tc);

	tc = tcase_create("footer");
	tcase_add_test(tc, test_footer_roundtrip);
	tcase_add_test(tc, test_footer_layout);
	tcase_add_test(tc, test_footer_rejects);
	tcase_add_test(tc, test_footer_count_overflow);
	tcase_add_test(tc, test_footer_index_limit);
	suite_add_tcase(s, tc);

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

	tc = tcase_create("pack_roundtrip");
	tcase_add_loop_test(tc, test_pack_roundtrip, 0,
			    (int)(sizeof(pack_cases) / sizeof(pack_cases[0])));
	suite_add_tcase(s, tc);

	tc = tcase_create("corruption");
	tcase_add_loop_test(tc, test_flip_every_byte, 0,
			    (int)(sizeof(flip_cases) / sizeof(flip_cases[0])));
	tcase_add_loop_test(tc, test_truncate_every_length, 0,
			    (int)(sizeof(flip_cases) / sizeof(flip_cases[0])));
	suite_add_tcase(s, tc);

	tc = tcase_create("helpers");
	tcase_add_test(tc, test_codec_names);
	tcase_add_test(tc, test_dataset_fingerprint);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr;
	int failed;

	/* Trained once here so every forked test shares the same dictionary. */
	g_dict_size = pt_dict_train(g_dict, sizeof(g_dict), 2000, 4242);

	sr = srunner_create(pack_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
