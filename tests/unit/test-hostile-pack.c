/* SPDX-License-Identifier: MIT */
/*
 * test-hostile-pack.c - packs built to attack the reader: decompression
 * bombs, oversized zstd windows, an index pointing outside its file,
 * overlapping blocks, counts chosen so the size arithmetic wraps, legacy
 * zstd frames, and a footer that asks for a gigabyte of index.
 *
 * batchd opens datasets it is told to open by any local user, so a pack is
 * hostile input. Each test takes a pack made the ordinary way
 * (pack-testlib's writer), forges one thing in it, and re-seals every hash,
 * fingerprint and checksum, so that only the semantic check under test can
 * object; then it asserts the exact errno (-EBADMSG or -E2BIG) and reason.
 *
 * "Rejected" is not enough: it must be rejected before anything is sized by
 * the lie. Every test therefore runs under an allocation cap, set in the
 * forked child Check runs it in: RLIMIT_AS at the current size + 256 MiB,
 * or, under AddressSanitizer (which reserves terabytes of address space), a
 * 256 MiB cap on any single allocation with allocations over it returning
 * NULL. A reader that tried to size a buffer by a forged terabyte would get
 * NULL and return -ENOMEM, which fails the test as surely as a crash.
 *
 * The cap is hostile-fixture.c's; packs with fields, forged the same way,
 * are test-hostile-sections.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>
#include <xxhash.h>
#include <zstd.h>

#include "hostile-fixture.h"
#include "pack-testlib.h"
#include "pack.h"
#include "pack_file.h"

#define GiB (UINT64_C(1) << 30)
#define TB  (UINT64_C(1000000000000))

/* The cap is real: a bomb-sized allocation fails, a modest one works. */
START_TEST(test_cap_in_force)
{
#ifndef HOSTILE_TSAN /* no cap under TSan, which this suite is not run with */
	void *big = malloc(2 * ALLOC_CAP);
	void *modest = malloc(16 * MiB);

	ck_assert_ptr_null(big);
	ck_assert_ptr_nonnull(modest);
	memset(modest, 1, 16 * MiB);
	free(modest);
#endif
}
END_TEST

/* ---- hand-made zstd frames (RFC 8878 §3.1.1) ------------------------------ */

#define ZSTD_MAGIC_V1 UINT32_C(0xFD2FB528)
#define BLOCK_MAX (128 * 1024)

/*
 * A zstd frame of RLE blocks: `rle_total` copies of `byte`, in blocks of at
 * most 128 KiB. Its header declares content size `fcs` in an 8-byte field
 * (Frame_Content_Size_flag 3). window_byte < 0 makes it a single-segment
 * frame (window = content size, no Window_Descriptor); otherwise it is the
 * Window_Descriptor: exponent << 3 | mantissa, window = 2^(10 + exponent)
 * + mantissa/8 of that. @return the frame's size; buf must hold it.
 */
static size_t frame_rle(uint8_t *buf, size_t cap, uint32_t magic, uint64_t fcs,
			int window_byte, uint64_t rle_total, uint8_t byte)
{
	size_t n = 0;

	ck_assert_uint_ge(cap, 14 + 4 * (rle_total / BLOCK_MAX + 1));
	pt_put_le32(buf, magic);
	n = 4;
	buf[n++] = (uint8_t)(3u << 6 | (window_byte < 0 ? 1u << 5 : 0u));
	if (window_byte >= 0)
		buf[n++] = (uint8_t)window_byte;
	pt_put_le64(buf + n, fcs);
	n += 8;
	do {
		uint32_t size = rle_total > BLOCK_MAX ? BLOCK_MAX : (uint32_t)rle_total;
		uint32_t last = rle_total <= BLOCK_MAX;
		/* Block_Header: Last_Block, Block_Type 1 (RLE), Block_Size. */
		uint32_t hdr = last | 1u << 1 | size << 3;

		buf[n++] = (uint8_t)hdr;
		buf[n++] = (uint8_t)(hdr >> 8);
		buf[n++] = (uint8_t)(hdr >> 16);
		buf[n++] = byte;
		rle_total -= size;
	} while (rle_total);
	return n;
}

/* Window_Descriptor for 2^log (10 <= log <= 41). */
static int window_log(unsigned log)
{
	return (int)((log - 10) << 3);
}

/* ---- forging packs ---------------------------------------------------------- */

static uint8_t g_dict[2048];
static size_t g_dict_size;

/*
 * The base pack: `n` samples of 4096 bytes of text, one per zstd block, with
 * or without a dictionary, written by pack-testlib's writer.
 */
static void forge_base(pt_forge *g, size_t n, bool dict)
{
	pt_samples s;
	bp_pack_view v;
	uint8_t *buf;
	size_t len;

	ck_assert_uint_le(n, PT_FORGE_MAX_BLOCKS);
	base_samples(&s, n);
	ck_assert_int_eq(pt_pack_build(&s, 1, dict ? g_dict : NULL, dict ? g_dict_size : 0, 3,
				       &buf, &len), 0);
	ck_assert_int_eq(bp_pack_parse(buf, len, &v, NULL), 0);
	ck_assert_uint_eq(v.index.block_count, n);
	ck_assert_int_eq(pt_forge_from(g, buf, len), 0);
	ck_assert_uint_eq(g->ns, n);
	for (size_t i = 0; i < n; i++)
		ck_assert_uint_eq(g->blocks[i].codec, dict ? BP_CODEC_ZSTD_DICT : BP_CODEC_ZSTD);
	/* Taking it apart and laying it out again changes nothing. */
	ck_assert_uint_eq(g->f.index_offset, v.footer.index_offset);
	ck_assert_uint_eq(g->f.raw_bytes, v.footer.raw_bytes);
	ck_assert_uint_eq(g->f.max_sample, v.footer.max_sample);
	free(buf);
	pt_samples_free(&s);
}

/* Parse must fail with err and exactly this reason. */
static void expect_reject(const pt_forge *g, int err, const char *what, int64_t block)
{
	bp_pack_fault f;
	int r = pt_forge_parse(g, &f);

	ck_assert_msg(r == err, "expected %d (%s), got %d (%s)", err, what, r,
		      f.what ? f.what : "no fault");
	ck_assert_str_eq(f.what, what);
	ck_assert_int_eq(f.block, block);
}

/*
 * Seal g (which must parse), and decode block i as every reader does: a
 * DCtx set up by bp_pack_dctx_init, the shard's DDict, an output buffer of
 * the validated raw size. On success out (when not NULL, raw_size bytes)
 * gets the bytes. @return the decoder's result; ret_fault gets its fault.
 */
static int forge_decode(const pt_forge *g, size_t i, uint8_t *out, bp_pack_fault *ret_fault)
{
	bp_pack_fault f = { .what = NULL, .offset = UINT64_MAX, .block = INT64_MIN };
	ZSTD_DCtx *dctx = ZSTD_createDCtx();
	ZSTD_DDict *ddict = NULL;
	bp_pack_view v;
	bp_pack_block b;
	uint8_t *buf, *raw;
	size_t len;
	int r;

	pt_forge_seal(g, &buf, &len);
	ck_assert_int_eq(bp_pack_parse(buf, len, &v, NULL), 0);
	bp_pack_index_block(&v.index, i, &b);
	ck_assert_ptr_nonnull(dctx);
	ck_assert_int_eq(bp_pack_dctx_init(dctx), 0);
	if (v.dict) {
		ddict = ZSTD_createDDict(v.dict, v.header.dict_size);
		ck_assert_ptr_nonnull(ddict);
	}
	raw = malloc(b.raw_size ? b.raw_size : 1);
	ck_assert_ptr_nonnull(raw);
	r = bp_pack_block_decode(&b, buf + b.offset, dctx, ddict, raw, b.raw_size, &f);
	if (r < 0) {
		ck_assert_ptr_nonnull(f.what);
		ck_assert_uint_eq(f.offset, b.offset);
	} else if (out) {
		memcpy(out, raw, b.raw_size);
	}
	free(raw);
	ZSTD_freeDDict(ddict);
	ZSTD_freeDCtx(dctx);
	free(buf);
	*ret_fault = f;
	return r;
}

static void expect_decode_reject(const pt_forge *g, size_t i, const char *what)
{
	bp_pack_fault f;
	int r = forge_decode(g, i, NULL, &f);

	ck_assert_msg(r == -EBADMSG, "expected -EBADMSG (%s), got %d (%s)", what ? what : "any",
		      r, f.what ? f.what : "no fault");
	if (what)
		ck_assert_str_eq(f.what, what);
}

/*
 * Make block 0 of g the frame in frame[0..n) standing for 4096 raw bytes of
 * 'A' (the sample keeps its size, 4096), as an honest writer would describe
 * it: raw_size 4096, raw_hash of 4096 'A'.
 */
static void forge_frame_block(pt_forge *g, const uint8_t *frame, size_t n, uint32_t codec)
{
	uint8_t a[4096];

	memset(a, 'A', sizeof(a));
	pt_forge_set_stored(g, 0, frame, n, codec);
	ck_assert_uint_eq(g->ssize[0], sizeof(a));
	g->blocks[0].raw_size = sizeof(a);
	g->blocks[0].raw_hash = XXH3_64bits(a, sizeof(a));
	pt_forge_layout(g);
}

/* The control: this frame, as forged, decodes to 4096 'A' (so a lie is the only fault). */
static void expect_frame_decodes(pt_forge *g, const uint8_t *frame, size_t n, uint32_t codec)
{
	uint8_t out[4096], a[4096];
	bp_pack_fault f;

	memset(a, 'A', sizeof(a));
	forge_frame_block(g, frame, n, codec);
	ck_assert_int_eq(forge_decode(g, 0, out, &f), 0);
	ck_assert_mem_eq(out, a, sizeof(a));
}

/* ---- (a) decompression bombs ---------------------------------------------- */

/*
 * A frame declaring a terabyte, and a block entry declaring the same: the
 * index refuses the entry (block over the limit) when the footer's largest
 * sample hides it, and the footer refuses it when it does not.
 */
START_TEST(test_bomb_entry_claims_terabyte)
{
	uint8_t frame[64];
	size_t n = frame_rle(frame, sizeof(frame), ZSTD_MAGIC_V1, TB, window_log(17), 4096, 'A');
	bp_pack_fault f;
	pt_forge g;

	forge_base(&g, 4, false);
	pt_forge_set_stored(&g, 0, frame, n, BP_CODEC_ZSTD);
	g.blocks[0].raw_size = TB;
	pt_forge_layout(&g);
	/* The sample table still says 4096: only the entry lies. */
	ck_assert_int_eq(pt_forge_parse(&g, &f), -E2BIG);
	ck_assert_str_eq(f.what, "block over the size limit");
	ck_assert_int_eq(f.block, 0);
	pt_forge_expect_in_entry(&g, &f, 0);

	/* The sample says a terabyte too, and the footer's largest sample with it. */
	g.ssize[0] = TB;
	pt_forge_layout(&g);
	ck_assert_uint_eq(g.f.max_sample, TB);
	expect_reject(&g, -E2BIG, "largest sample over the size limit", -1);

	/* The footer hides the largest sample: the entry is still refused first. */
	g.f.max_sample = 4096;
	expect_reject(&g, -E2BIG, "block over the size limit", 0);

	/* Just over the block limit, frame and entry agreeing: the same refusal. */
	n = frame_rle(frame, sizeof(frame), ZSTD_MAGIC_V1, BP_PACK_MAX_BLOCK + 1, window_log(17),
		      4096, 'A');
	pt_forge_set_stored(&g, 0, frame, n, BP_CODEC_ZSTD);
	g.blocks[0].raw_size = BP_PACK_MAX_BLOCK + 1;
	g.ssize[0] = 4096;
	pt_forge_layout(&g);
	expect_reject(&g, -E2BIG, "block over the size limit", 0);
	pt_forge_free(&g);
}
END_TEST

/*
 * A frame declaring a terabyte in a block whose entry claims 4096 bytes: the
 * index is sound (it cannot see inside frames), so the decoder must refuse
 * the frame before zstd sizes anything by it.
 */
START_TEST(test_bomb_frame_claims_terabyte)
{
	uint8_t frame[64];
	size_t n;
	pt_forge g;

	forge_base(&g, 4, false);
	/* The honest frame decodes: the forgery is sound but for the lie. */
	n = frame_rle(frame, sizeof(frame), ZSTD_MAGIC_V1, 4096, window_log(17), 4096, 'A');
	expect_frame_decodes(&g, frame, n, BP_CODEC_ZSTD);

	/* Declares a terabyte, with a 128 KiB window. */
	n = frame_rle(frame, sizeof(frame), ZSTD_MAGIC_V1, TB, window_log(17), 4096, 'A');
	forge_frame_block(&g, frame, n, BP_CODEC_ZSTD);
	expect_decode_reject(&g, 0, "zstd frame declares a different size");

	/* Single segment: the window is the declared terabyte. */
	n = frame_rle(frame, sizeof(frame), ZSTD_MAGIC_V1, TB, -1, 4096, 'A');
	forge_frame_block(&g, frame, n, BP_CODEC_ZSTD);
	expect_decode_reject(&g, 0, "zstd frame declares a different size");

	/* Declares 2^64 - 1 ("unknown" to some APIs, a size to the format). */
	n = frame_rle(frame, sizeof(frame), ZSTD_MAGIC_V1, UINT64_MAX, window_log(17), 4096, 'A');
	forge_frame_block(&g, frame, n, BP_CODEC_ZSTD);
	expect_decode_reject(&g, 0, "zstd frame declares a different size");

	/* One byte more than the entry. */
	n = frame_rle(frame, sizeof(frame), ZSTD_MAGIC_V1, 4097, window_log(17), 4096, 'A');
	forge_frame_block(&g, frame, n, BP_CODEC_ZSTD);
	expect_decode_reject(&g, 0, "zstd frame declares a different size");
	pt_forge_free(&g);
}
END_TEST

/*
 * A frame whose header tells the truth about its 4096 bytes but whose blocks
 * expand to 64 MiB: decoding must stop at the output's end, not grow it.
 */
START_TEST(test_bomb_blocks_overrun)
{
	size_t cap = 14 + 4 * (64 * MiB / BLOCK_MAX + 1), n;
	uint8_t *frame = malloc(cap);
	pt_forge g;

	forge_base(&g, 4, false);
	n = frame_rle(frame, cap, ZSTD_MAGIC_V1, 4096, window_log(17), 64 * MiB, 'A');
	ck_assert_uint_lt(n, 4096); /* still "compressed": the index accepts it */
	forge_frame_block(&g, frame, n, BP_CODEC_ZSTD);
	expect_decode_reject(&g, 0, NULL);

	/* One byte short of what it declares. */
	n = frame_rle(frame, cap, ZSTD_MAGIC_V1, 4096, window_log(17), 4095, 'A');
	forge_frame_block(&g, frame, n, BP_CODEC_ZSTD);
	expect_decode_reject(&g, 0, NULL);
	free(frame);
	pt_forge_free(&g);
}
END_TEST

/* ---- (b) window over the limit --------------------------------------------- */

/* Run once without and once with a dictionary (codecs 1 and 2). */
START_TEST(test_window_over_limit)
{
	static const char over[] = "zstd frame window over the limit";
	/* zstd itself cannot parse a header whose window is over 2^31 (64-bit). */
	static const char unparsable[] = "block is not exactly one zstd frame";
	static const struct {
		int window_byte;
		const char *what;  /* NULL: decodes */
	} windows[] = {
		{ (17 - 10) << 3, NULL },           /* 128 KiB */
		{ (28 - 10) << 3, NULL },           /* 2^28: the limit itself */
		{ (28 - 10) << 3 | 1, over },       /* 2^28 + 2^25 */
		{ (29 - 10) << 3, over },           /* 2^29 */
		{ (31 - 10) << 3, over },           /* 2^31 */
		{ (31 - 10) << 3 | 7, over },       /* 2^31 + 7 * 2^28 */
		{ (32 - 10) << 3, unparsable },     /* 2^32 */
		{ 0xff, unparsable },               /* 2^41 + 7 * 2^38: the largest there is */
	};
	bool dict = _i == 1;
	uint32_t codec = dict ? BP_CODEC_ZSTD_DICT : BP_CODEC_ZSTD;
	uint8_t frame[64];
	pt_forge g;

	forge_base(&g, 4, dict);
	for (size_t w = 0; w < sizeof(windows) / sizeof(windows[0]); w++) {
		size_t n = frame_rle(frame, sizeof(frame), ZSTD_MAGIC_V1, 4096,
				     windows[w].window_byte, 4096, 'A');

		if (!windows[w].what) {
			expect_frame_decodes(&g, frame, n, codec);
		} else {
			forge_frame_block(&g, frame, n, codec);
			expect_decode_reject(&g, 0, windows[w].what);
		}
	}
	pt_forge_free(&g);
}
END_TEST

/* ---- (c) an index pointing outside the file ----------------------------------- */

START_TEST(test_index_outside_file)
{
	pt_forge g;
	bp_pack_fault f;

	forge_base(&g, 4, false);

	/* The footer puts the index past the end of the file, or inside the header. */
	g.f.index_offset += UINT64_C(1) << 40;
	expect_reject(&g, -EBADMSG, "index offset outside the file", -1);
	g.f.index_offset = UINT64_MAX;
	expect_reject(&g, -EBADMSG, "index offset outside the file", -1);
	g.f.index_offset = 8;
	expect_reject(&g, -EBADMSG, "index offset outside the file", -1);
	pt_forge_layout(&g);

	/* The index claims to run to 2^60, counts to match or not. */
	g.f.index_size = UINT64_C(1) << 60;
	expect_reject(&g, -EBADMSG, "index size does not reach the footer", -1);
	pt_forge_layout(&g);

	/* A block a terabyte past the end of the file. */
	g.blocks[2].offset = UINT64_C(1) << 40;
	expect_reject(&g, -EBADMSG, "block does not start where the previous one ends", 2);
	pt_forge_layout(&g);

	/* The last block runs past the file, by a little or wrapping around. */
	g.blocks[3].stored_size = UINT64_C(1) << 62;
	ck_assert_int_eq(pt_forge_parse(&g, &f), -EBADMSG);
	ck_assert_str_eq(f.what, "block runs past the data region");
	pt_forge_expect_in_entry(&g, &f, 3);
	g.blocks[3].stored_size = UINT64_MAX - g.blocks[3].offset + 1; /* offset + size == 0 */
	expect_reject(&g, -EBADMSG, "block runs past the data region", 3);
	g.blocks[3].stored_size = g.stored_len[3] + BP_PACK_FOOTER_SIZE;
	expect_reject(&g, -EBADMSG, "block runs past the data region", 3);
	pt_forge_layout(&g);

	/* The first block starts at 0, inside the header. */
	g.blocks[0].offset = 0;
	expect_reject(&g, -EBADMSG, "block does not start where the previous one ends", 0);
	pt_forge_layout(&g);

	/* A sample placed past its block's raw bytes. */
	g.soff[1] = UINT64_C(1) << 40;
	expect_reject(&g, -EBADMSG, "sample does not follow the previous one", 1);
	g.soff[1] = 0;

	ck_assert_int_eq(pt_forge_parse(&g, &f), 0);
	pt_forge_free(&g);
}
END_TEST

/* ---- (d) overlapping blocks ---------------------------------------------------- */

START_TEST(test_overlapping_blocks)
{
	pt_forge g;
	bp_pack_fault f;

	forge_base(&g, 4, false);

	/* Block 1 starts one byte inside block 0, its hash re-sealed over those bytes. */
	g.blocks[1].offset = g.blocks[0].offset + g.blocks[0].stored_size - 1;
	expect_reject(&g, -EBADMSG, "block does not start where the previous one ends", 1);
	pt_forge_layout(&g);

	/* Block 1 lies wholly inside block 0. */
	g.blocks[1].offset = g.blocks[0].offset;
	g.blocks[1].stored_size = g.blocks[0].stored_size / 2;
	expect_reject(&g, -EBADMSG, "block does not start where the previous one ends", 1);
	pt_forge_layout(&g);

	/* Block 0 swallows block 1; block 1 still claims its own bytes. */
	g.blocks[0].stored_size += g.blocks[1].stored_size;
	expect_reject(&g, -EBADMSG, "block does not start where the previous one ends", 1);
	pt_forge_layout(&g);

	/* Blocks 2 and 3 are the same bytes. */
	g.blocks[3].offset = g.blocks[2].offset;
	g.blocks[3].stored_size = g.blocks[2].stored_size;
	expect_reject(&g, -EBADMSG, "block does not start where the previous one ends", 3);
	pt_forge_layout(&g);

	/* Blocks listed out of order: 1 before 0 (each entry true to its bytes). */
	{
		bp_pack_block b0 = g.blocks[0];

		g.blocks[0] = g.blocks[1];
		g.blocks[1] = b0;
		g.blocks[0].first_sample = 0;
		g.blocks[1].first_sample = 1;
		expect_reject(&g, -EBADMSG, "block does not start where the previous one ends", 0);
		g.blocks[1] = g.blocks[0];
		g.blocks[0] = b0;
		g.blocks[1].first_sample = 1;
	}
	pt_forge_layout(&g);

	/* Two blocks claim the same sample. */
	g.blocks[2].first_sample = 1;
	ck_assert_int_eq(pt_forge_parse(&g, &f), -EBADMSG);
	ck_assert_str_eq(f.what, "block sample ranges out of order");
	pt_forge_expect_in_entry(&g, &f, 2);
	g.blocks[2].first_sample = 2;

	/* Two samples overlap within a block (sizes re-tiled to the block). */
	{
		pt_forge h;
		pt_samples s;
		uint8_t *buf;
		size_t len;

		base_samples(&s, 4);
		ck_assert_int_eq(pt_pack_build(&s, 4, NULL, 0, 3, &buf, &len), 0);
		ck_assert_int_eq(pt_forge_from(&h, buf, len), 0);
		ck_assert_uint_eq(h.nb, 1);
		ck_assert_uint_eq(h.ns, 4);
		ck_assert_int_eq(pt_forge_parse(&h, &f), 0);
		h.soff[2] -= 100;
		h.ssize[2] += 100;
		expect_reject(&h, -EBADMSG, "sample does not follow the previous one", 0);
		free(buf);
		pt_samples_free(&s);
		pt_forge_free(&h);
	}

	ck_assert_int_eq(pt_forge_parse(&g, &f), 0);
	pt_forge_free(&g);
}
END_TEST

/* ---- (e) huge counts ------------------------------------------------------------- */

START_TEST(test_huge_counts)
{
	pt_forge g;
	bp_pack_fault f;
	uint64_t real;

	forge_base(&g, 4, false);
	real = g.f.index_size;

	/* 2^60 more samples: 16 x 2^60 = 2^64, so the table size wraps to the real one. */
	g.f.sample_count += UINT64_C(1) << 60;
	ck_assert_uint_eq(g.f.block_count * BP_PACK_BLOCK_ENTRY +
				  g.f.sample_count * BP_PACK_SAMPLE_ENTRY, real);
	expect_reject(&g, -EBADMSG, "index size does not match the counts", -1);

	/* 2^61 more blocks (56 x 2^61 = 7 x 2^64) and 2^62 more samples: wraps too. */
	g.f.block_count += UINT64_C(1) << 61;
	g.f.sample_count = g.ns + (UINT64_C(1) << 62);
	ck_assert_uint_eq(g.f.block_count * BP_PACK_BLOCK_ENTRY +
				  g.f.sample_count * BP_PACK_SAMPLE_ENTRY, real);
	expect_reject(&g, -EBADMSG, "index size does not match the counts", -1);

	/* Exactly 2^60 of each. */
	g.f.block_count = g.f.sample_count = UINT64_C(1) << 60;
	expect_reject(&g, -EBADMSG, "index size does not match the counts", -1);
	pt_forge_layout(&g);

	/* A block whose first sample is 2^60. */
	g.blocks[3].first_sample = UINT64_C(1) << 60;
	ck_assert_int_eq(pt_forge_parse(&g, &f), -EBADMSG);
	ck_assert_str_eq(f.what, "block starts past the last sample");
	pt_forge_expect_in_entry(&g, &f, 3);
	g.blocks[3].first_sample = 3;

	/* A sample of 2^60 bytes, the footer honest about it, then hiding it. */
	g.ssize[2] = UINT64_C(1) << 60;
	pt_forge_layout(&g);
	expect_reject(&g, -E2BIG, "largest sample over the size limit", -1);
	g.f.max_sample = 4096;
	expect_reject(&g, -E2BIG, "sample over the size limit", 2);
	g.ssize[2] = 4096;
	pt_forge_layout(&g);

	/* raw_bytes of 2^60 in the footer. */
	g.f.raw_bytes = UINT64_C(1) << 60;
	expect_reject(&g, -EBADMSG, "raw byte total does not match the blocks", -1);
	pt_forge_layout(&g);

	ck_assert_int_eq(pt_forge_parse(&g, &f), 0);
	pt_forge_free(&g);
}
END_TEST

/* ---- (f) legacy and other foreign frames ---------------------------------------- */

START_TEST(test_legacy_frames)
{
	/* zstd v0.1 .. v0.7 (the decoder may have been built with legacy support). */
	static const uint32_t magics[] = {
		0xFD2FB51E, 0xFD2FB522, 0xFD2FB523, 0xFD2FB524,
		0xFD2FB525, 0xFD2FB526, 0xFD2FB527,
		0x184D2A50, 0x184D2A5F, /* skippable frames */
		0x28B52FFD,             /* byte-swapped */
	};
	bool dict = _i == 1;
	uint32_t codec = dict ? BP_CODEC_ZSTD_DICT : BP_CODEC_ZSTD;
	uint8_t frame[64];
	pt_forge g;

	forge_base(&g, 4, dict);
	for (size_t m = 0; m < sizeof(magics) / sizeof(magics[0]); m++) {
		size_t n = frame_rle(frame, sizeof(frame), magics[m], 4096, window_log(17),
				     4096, 'A');

		forge_frame_block(&g, frame, n, codec);
		expect_decode_reject(&g, 0, "block is not a zstd frame");
	}

	/*
	 * A real v0.7 frame of 4096 'A' (RLE block, end block): libzstd built
	 * with legacy support (Debian's is) decodes it happily, with none of the
	 * current decoder's limits. The pack decoder must not hand it over.
	 */
	{
		static const uint8_t v07[] = {
			0x27, 0xB5, 0x2F, 0xFD,       /* magic, v0.7 */
			0x60,                         /* FHD: single segment, 2-byte size */
			0x00, 0x0F,                   /* content size 0x0F00 + 256 = 4096 */
			0x80, 0x10, 0x00, 'A',        /* RLE block (type 2) of 4096 */
			0xC0, 0x00, 0x00,             /* end of frame (type 3) */
		};
		uint8_t a[4096], out[4096];
		size_t got = ZSTD_decompress(out, sizeof(out), v07, sizeof(v07));

		memset(a, 'A', sizeof(a));
		if (!ZSTD_isError(got)) {
			/* This libzstd has legacy support: the forgery is a valid frame. */
			ck_assert_uint_eq(got, sizeof(a));
			ck_assert_mem_eq(out, a, sizeof(a));
		}
		forge_frame_block(&g, v07, sizeof(v07), codec);
		expect_decode_reject(&g, 0, "block is not a zstd frame");
	}
	pt_forge_free(&g);
}
END_TEST

/* ---- the dataset level: files on disk ---------------------------------------------- */

/*
 * A sparse file of 64 + index_size + 80 bytes: a valid header, nothing, and
 * a footer (sealed) claiming an index of index_size bytes at offset 64.
 */
static void write_sparse_pack(const char *path, uint64_t index_size, uint64_t blocks,
			      uint64_t samples)
{
	bp_pack_header h = { .version = BP_PACK_VERSION, .data_offset = BP_PACK_HEADER_SIZE };
	bp_pack_footer f = {
		.index_offset = BP_PACK_HEADER_SIZE, .index_size = index_size,
		.block_count = blocks, .sample_count = samples,
		.raw_bytes = 1, .max_sample = 1, .fingerprint = 42,
	};
	uint8_t header[BP_PACK_HEADER_SIZE], footer[BP_PACK_FOOTER_SIZE];
	uint64_t size = BP_PACK_HEADER_SIZE + index_size + BP_PACK_FOOTER_SIZE;
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	ck_assert_int_ge(fd, 0);
	bp_pack_header_encode(&h, header);
	bp_pack_footer_encode(&f, header, footer);
	ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
	ck_assert_int_eq(pwrite(fd, header, sizeof(header), 0), (ssize_t)sizeof(header));
	ck_assert_int_eq(pwrite(fd, footer, sizeof(footer), (off_t)(size - sizeof(footer))),
			 (ssize_t)sizeof(footer));
	ck_assert_int_eq(close(fd), 0);
}

/* A footer asking for 1 GiB + 1 of index: -E2BIG, and nothing of that size allocated. */
START_TEST(test_dataset_index_over_limit)
{
	bp_dataset_fault fault;
	bp_dataset *const sentinel = (bp_dataset *)(uintptr_t)0x5a5a5a5a;
	bp_dataset *ds = sentinel; /* written only on success */
	scratch_file t;

	tmp_make(&t);
	write_sparse_pack(t.path, BP_PACK_MAX_INDEX + 1, 1, 1);
	memset(&fault, 0, sizeof(fault));
	ck_assert_int_eq(bp_dataset_openat(AT_FDCWD, t.path, &ds, &fault), -E2BIG);
	ck_assert_ptr_eq(ds, sentinel);
	ck_assert_str_eq(fault.pack.what, "index over the size limit");
	ck_assert_str_eq(fault.shard, t.path);

	/* Far over: 2^40 bytes of index (a sparse terabyte). */
	write_sparse_pack(t.path, UINT64_C(1) << 40, 1, 1);
	ck_assert_int_eq(bp_dataset_openat(AT_FDCWD, t.path, &ds, &fault), -E2BIG);
	ck_assert_str_eq(fault.pack.what, "index over the size limit");
	ck_assert_ptr_eq(ds, sentinel);

	/* At the limit but with counts that cannot fill it: refused before reading it. */
	write_sparse_pack(t.path, BP_PACK_MAX_INDEX, 1, 1);
	ck_assert_int_eq(bp_dataset_openat(AT_FDCWD, t.path, &ds, &fault), -EBADMSG);
	ck_assert_str_eq(fault.pack.what, "index size does not match the counts");
	ck_assert_ptr_eq(ds, sentinel);
	tmp_done(&t);
}
END_TEST

/*
 * The bombs through the file-level reader: the dataset opens (its index is
 * sound), the forged block fails with its reason and shard, the other
 * samples still read back, and verify names the block.
 */
START_TEST(test_dataset_frame_bombs)
{
	static const struct {
		uint64_t fcs;
		int window_byte;
		const char *what;
	} bombs[] = {
		{ TB, (17 - 10) << 3, "zstd frame declares a different size" },
		{ TB, -1, "zstd frame declares a different size" },
		{ 4096, (29 - 10) << 3, "zstd frame window over the limit" },
	};
	pt_samples s;
	scratch_file t;

	base_samples(&s, 4);
	tmp_make(&t);
	for (size_t k = 0; k < sizeof(bombs) / sizeof(bombs[0]); k++) {
		bp_dataset_fault fault;
		bp_sample_reader *rd;
		bp_dataset *ds;
		const uint8_t *data;
		uint64_t size;
		uint8_t frame[64], *buf;
		size_t n, len;
		pt_forge g;

		forge_base(&g, 4, k == 1);
		n = frame_rle(frame, sizeof(frame), ZSTD_MAGIC_V1, bombs[k].fcs,
			      bombs[k].window_byte, 4096, 'A');
		forge_frame_block(&g, frame, n, g.blocks[0].codec);
		pt_forge_seal(&g, &buf, &len);
		write_file(t.path, buf, len);

		ck_assert_int_eq(bp_dataset_openat(AT_FDCWD, t.path, &ds, &fault), 0);
		ck_assert_int_eq(bp_sample_reader_new(ds, &rd), 0);
		memset(&fault, 0, sizeof(fault));
		ck_assert_int_eq(bp_sample_reader_get(rd, 0, &data, &size, &fault), -EBADMSG);
		ck_assert_str_eq(fault.pack.what, bombs[k].what);
		ck_assert_int_eq(fault.pack.block, 0);
		ck_assert_str_eq(fault.shard, t.path);
		for (uint64_t id = 1; id < 4; id++) {
			ck_assert_int_eq(bp_sample_reader_get(rd, id, &data, &size, &fault), 0);
			ck_assert_uint_eq(size, s.sizes[id]);
			ck_assert_mem_eq(data, pt_sample(&s, id), size);
		}
		memset(&fault, 0, sizeof(fault));
		ck_assert_int_eq(bp_dataset_verify(ds, NULL, NULL, &fault), -EBADMSG);
		ck_assert_str_eq(fault.pack.what, bombs[k].what);
		ck_assert_int_eq(fault.pack.block, 0);
		bp_sample_reader_free(rd);
		bp_dataset_close(ds);
		free(buf);
		pt_forge_free(&g);
	}
	tmp_done(&t);
	pt_samples_free(&s);
}
END_TEST

static Suite *hostile_suite(void)
{
	Suite *s = suite_create("hostile-pack");
	TCase *tc;

	tc = tcase_create("cap");
	tcase_add_checked_fixture(tc, cap_allocations, NULL);
	tcase_add_test(tc, test_cap_in_force);
	suite_add_tcase(s, tc);

	tc = tcase_create("bombs");
	tcase_add_checked_fixture(tc, cap_allocations, NULL);
	tcase_add_test(tc, test_bomb_entry_claims_terabyte);
	tcase_add_test(tc, test_bomb_frame_claims_terabyte);
	tcase_add_test(tc, test_bomb_blocks_overrun);
	tcase_add_loop_test(tc, test_window_over_limit, 0, 2);
	tcase_add_loop_test(tc, test_legacy_frames, 0, 2);
	suite_add_tcase(s, tc);

	tc = tcase_create("index");
	tcase_add_checked_fixture(tc, cap_allocations, NULL);
	tcase_add_test(tc, test_index_outside_file);
	tcase_add_test(tc, test_overlapping_blocks);
	tcase_add_test(tc, test_huge_counts);
	suite_add_tcase(s, tc);

	tc = tcase_create("dataset");
	tcase_add_checked_fixture(tc, cap_allocations, NULL);
	tcase_add_test(tc, test_dataset_index_over_limit);
	tcase_add_test(tc, test_dataset_frame_bombs);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr;
	int failed;

	/* Trained once here, before Check forks, so every test shares it. */
	g_dict_size = pt_dict_train(g_dict, sizeof(g_dict), 2000, 99);

	sr = srunner_create(hostile_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
