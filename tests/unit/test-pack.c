/* SPDX-License-Identifier: MIT */
/*
 * test-pack.c - the Check suite for the fixed-place parts of a .bpk
 * (lib/pack/pack.c): the header and the footer, encoded and decoded byte
 * for byte as PACK.md lays them out, each field refused alone, counts
 * whose table sizes wrap; the TOKENS section of token packs, the same
 * way; and the small pure helpers (codec names, the dataset fingerprint).
 *
 * These parts are checked on bytes made by hand, without a block or an
 * index, so they are a suite apart from the rest of the format: one block
 * at a time is test-pack-block.c's; whole packs written by bp_pack_writer,
 * read back, and damaged at every byte and every length are
 * test-pack-integrity.c's; the index's semantic rules, one fault at a
 * time, are test-pack-index.c's.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <xxhash.h>

#include "pack-testlib.h"
#include "pack.h"

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

/* ---- small pure helpers -------------------------------------------------- */

/* ---- TOKENS section ------------------------------------------------------------- */

static const bp_tokens tok16 = {
	.width = 2, .eos = 50256, .tokens = 1000, .documents = 7, .max_id = 50256,
};

/* Decode buf; on failure check the reason and offset, and that *ret was not written. */
static int tokens_result(const uint8_t *buf, size_t len, const char *want, uint64_t at)
{
	bp_pack_fault f = { .what = NULL };
	bp_tokens t, sentinel;
	int r;

	memset(&t, 0x5a, sizeof(t));
	memcpy(&sentinel, &t, sizeof(t));
	r = bp_tokens_decode(buf, len, &t, &f);
	if (r < 0) {
		ck_assert_int_eq(r, -EBADMSG);
		ck_assert_str_eq(f.what, want);
		ck_assert_uint_eq(f.offset, at);
		ck_assert_int_eq(f.block, -1);
		ck_assert_mem_eq(&t, &sentinel, sizeof(t));
	}
	return r;
}

/* Field by field: a bp_tokens has padding after its width, which no decoder writes. */
static void tokens_eq(const bp_tokens *a, const bp_tokens *b)
{
	ck_assert_uint_eq(a->width, b->width);
	ck_assert_uint_eq(a->eos, b->eos);
	ck_assert_uint_eq(a->tokens, b->tokens);
	ck_assert_uint_eq(a->documents, b->documents);
	ck_assert_uint_eq(a->max_id, b->max_id);
}

START_TEST(test_tokens_layout)
{
	bp_tokens t = tok16, back;
	uint8_t buf[BP_TOKENS_SIZE];

	ck_assert_uint_eq(BP_TOKENS_SIZE, 48);
	bp_tokens_encode(&t, buf);
	ck_assert_uint_eq(pt_le32(buf), 1);
	ck_assert_uint_eq(pt_le32(buf + 4), 2);
	ck_assert_uint_eq(pt_le64(buf + 8), 50256);
	ck_assert_uint_eq(pt_le64(buf + 16), 1000);
	ck_assert_uint_eq(pt_le64(buf + 24), 7);
	ck_assert_uint_eq(pt_le64(buf + 32), 50256);
	ck_assert_uint_eq(pt_le64(buf + 40), 0);
	ck_assert_int_eq(tokens_result(buf, sizeof(buf), NULL, 0), 0);
	ck_assert_int_eq(bp_tokens_decode(buf, sizeof(buf), &back, NULL), 0);
	tokens_eq(&back, &t);

	/* No end-of-document id, and the width's largest ids. */
	t = (bp_tokens){ .width = 4, .eos = BP_TOKENS_NO_EOS, .tokens = 3, .documents = 1,
			 .max_id = 0x7fffffff };
	bp_tokens_encode(&t, buf);
	ck_assert_uint_eq(pt_le64(buf + 8), UINT64_MAX);
	ck_assert_int_eq(bp_tokens_decode(buf, sizeof(buf), &back, NULL), 0);
	tokens_eq(&back, &t);
	t = (bp_tokens){ .width = 2, .eos = 0xffff, .max_id = 0xffff };
	bp_tokens_encode(&t, buf);
	ck_assert_int_eq(bp_tokens_decode(buf, sizeof(buf), &back, NULL), 0);
	ck_assert_uint_eq(bp_tokens_max_id(2), 0xffff);
	ck_assert_uint_eq(bp_tokens_max_id(4), 0x7fffffff);
	ck_assert_uint_eq(bp_tokens_max_id(3), 0);
}
END_TEST

/* Each rule of the section broken alone, on otherwise good bytes. */
START_TEST(test_tokens_rejects)
{
	static const struct {
		size_t at, width;  /* width 4 or 8 bytes at offset at */
		uint64_t value;
		const char *what;
	} cases[] = {
		{ 0, 4, 0, "tokens section of an unknown version" },
		{ 0, 4, 2, "tokens section of an unknown version" },
		{ 4, 4, 0, "token width is neither 2 nor 4 bytes" },
		{ 4, 4, 1, "token width is neither 2 nor 4 bytes" },
		{ 4, 4, 3, "token width is neither 2 nor 4 bytes" },
		{ 4, 4, 8, "token width is neither 2 nor 4 bytes" },
		{ 40, 8, 1, "reserved tokens field is not zero" },
		{ 40, 8, UINT64_C(1) << 63, "reserved tokens field is not zero" },
		{ 32, 8, 0x10000, "largest token id beyond its width's ids" },
		{ 32, 8, UINT64_MAX, "largest token id beyond its width's ids" },
		{ 8, 8, 0x10000, "end-of-document id beyond its width's ids" },
		{ 8, 8, UINT64_MAX - 1, "end-of-document id beyond its width's ids" },
		{ 16, 8, UINT64_MAX / 2 + 1, "token count beyond any shard" },
	};
	uint8_t good[BP_TOKENS_SIZE], buf[BP_TOKENS_SIZE + 1];

	bp_tokens_encode(&tok16, good);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		memcpy(buf, good, sizeof(good));
		if (cases[i].width == 4)
			pt_put_le32(buf + cases[i].at, (uint32_t)cases[i].value);
		else
			pt_put_le64(buf + cases[i].at, cases[i].value);
		ck_assert_int_eq(tokens_result(buf, BP_TOKENS_SIZE, cases[i].what, cases[i].at),
				 -EBADMSG);
	}
	/* Width 4: ids up to 2^31 - 1, as int32 delivers them; not one more. */
	bp_tokens_encode(&(bp_tokens){ .width = 4, .max_id = 0x80000000u }, buf);
	ck_assert_int_eq(tokens_result(buf, BP_TOKENS_SIZE,
				       "largest token id beyond its width's ids", 32), -EBADMSG);
	bp_tokens_encode(&(bp_tokens){ .width = 4, .eos = 0x80000000u }, buf);
	ck_assert_int_eq(tokens_result(buf, BP_TOKENS_SIZE,
				       "end-of-document id beyond its width's ids", 8), -EBADMSG);
	/* A section of any other length, or none. */
	memcpy(buf, good, sizeof(good));
	ck_assert_int_eq(tokens_result(buf, BP_TOKENS_SIZE - 1, "tokens section is not 48 bytes", 0),
			 -EBADMSG);
	ck_assert_int_eq(tokens_result(buf, BP_TOKENS_SIZE + 1, "tokens section is not 48 bytes", 0),
			 -EBADMSG);
	ck_assert_int_eq(tokens_result(NULL, 0, "tokens section is not 48 bytes", 0), -EBADMSG);
}
END_TEST

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

	tc = tcase_create("tokens");
	tcase_add_test(tc, test_tokens_layout);
	tcase_add_test(tc, test_tokens_rejects);
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

	sr = srunner_create(pack_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
