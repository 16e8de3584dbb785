/* SPDX-License-Identifier: MIT */
/*
 * test-pack-index.c - the Check suite for lib/pack/pack.c's index validation:
 * every semantic rule of the block and sample tables (PACK.md §Index),
 * each broken alone in a pack that is otherwise a writer's.
 *
 * Each case takes apart a pack written by bp_pack_writer (pt_forge,
 * pack-testlib.h), changes one field and seals it again (fingerprint and
 * checksum over the lie, so only the semantic check can fire), and
 * expects that rule's documented errno with the fault placed in the entry
 * that breaks it: blocks that overlap, leave gaps or run out of order,
 * samples that do not tile their blocks, codecs and sizes that do not
 * agree, counts and sizes chosen so that the arithmetic wraps, totals that
 * lie, reserved bits set, and the seals themselves.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <xxhash.h>

#include "pack-testlib.h"
#include "pack.h"

/*
 * Rebuilt with one field changed (pt_forge, pack-testlib.h: fingerprint and
 * checksum re-sealed), a pack must be refused by the semantic check alone.
 * Build and parse c: rejected with err, the fault in block entry k. Frees c.
 */
static void expect_entry_fault(pt_forge *c, int err, size_t k)
{
	bp_pack_fault f;

	ck_assert_int_eq(pt_forge_parse(c, &f), err);
	ck_assert_int_eq(f.block, (int64_t)k);
	pt_forge_expect_in_entry(c, &f, k);
	pt_forge_free(c);
}

/*
 * The base pack: three blocks of three samples, text (zstd), random (raw),
 * text (zstd), all samples non-empty.
 */
static void base_samples(pt_samples *s)
{
	static const uint64_t sizes[9] = { 300, 200, 250, 120, 80, 100, 150, 220, 180 };

	/* Samples 3-5 (the middle block) random. */
	pt_samples_sized(s, sizes, 9, 0x38, 77);
}

static void craft_base(pt_forge *c)
{
	pt_samples s;
	uint8_t *buf;
	size_t len;

	base_samples(&s);
	ck_assert_int_eq(pt_pack_build(&s, 3, NULL, 0, 3, &buf, &len), 0);
	ck_assert_int_eq(pt_forge_from(c, buf, len), 0);
	ck_assert_uint_eq(c->dict_size, 0);
	ck_assert_uint_eq(c->nb, 3);
	ck_assert_uint_eq(c->blocks[0].codec, BP_CODEC_ZSTD);
	ck_assert_uint_eq(c->blocks[1].codec, BP_CODEC_RAW);
	ck_assert_uint_eq(c->blocks[2].codec, BP_CODEC_ZSTD);
	free(buf);
	pt_samples_free(&s);
}

/*
 * Insert, before block `at`, an empty raw block holding one empty sample:
 * valid by PACK.md (blocks hold at least one sample; samples may be empty).
 */
static void craft_insert_empty_block(pt_forge *c, size_t at)
{
	uint64_t first = at < c->nb ? c->blocks[at].first_sample : c->ns;
	size_t moved = c->nb - at;

	ck_assert_uint_lt(c->nb, PT_FORGE_MAX_BLOCKS);
	ck_assert_uint_lt(c->ns, PT_FORGE_MAX_SAMPLES);
	memmove(&c->blocks[at + 1], &c->blocks[at], moved * sizeof(c->blocks[0]));
	memmove(&c->stored[at + 1], &c->stored[at], moved * sizeof(c->stored[0]));
	memmove(&c->stored_len[at + 1], &c->stored_len[at], moved * sizeof(c->stored_len[0]));
	/* Laid out at the next block's offset, its stored and raw hash that of no bytes. */
	c->blocks[at] = (bp_pack_block){
		.first_sample = first, .sample_count = 1, .codec = BP_CODEC_RAW,
	};
	c->stored[at] = malloc(1);
	c->stored_len[at] = 0;
	c->nb++;
	for (size_t i = at + 1; i < c->nb; i++)
		c->blocks[i].first_sample++;
	memmove(&c->soff[first + 1], &c->soff[first], (c->ns - first) * sizeof(c->soff[0]));
	memmove(&c->ssize[first + 1], &c->ssize[first], (c->ns - first) * sizeof(c->ssize[0]));
	c->soff[first] = 0;
	c->ssize[first] = 0;
	c->ns++;
	pt_forge_layout(c);
	ck_assert_uint_eq(c->blocks[at].stored_hash, XXH3_64bits("", 0));
}

/* Taking a writer's pack apart and putting it back gives the same bytes. */
START_TEST(test_index_identity)
{
	pt_samples s;
	uint8_t *orig, *again;
	size_t len, len2;
	pt_forge c;

	base_samples(&s);
	ck_assert_int_eq(pt_pack_build(&s, 3, NULL, 0, 3, &orig, &len), 0);
	ck_assert_int_eq(pt_forge_from(&c, orig, len), 0);
	pt_forge_seal(&c, &again, &len2);
	ck_assert_uint_eq(len2, len);
	ck_assert_mem_eq(again, orig, len);
	ck_assert_int_eq(pt_forge_parse(&c, NULL), 0);

	/* The block table as PACK.md lays it out. */
	{
		bp_pack_view v;
		const uint8_t *e;

		ck_assert_int_eq(bp_pack_parse(orig, len, &v, NULL), 0);
		for (size_t i = 0; i < c.nb; i++) {
			e = orig + v.footer.index_offset + i * BP_PACK_BLOCK_ENTRY;
			ck_assert_uint_eq(pt_le64(e + BLK_OFFSET), c.blocks[i].offset);
			ck_assert_uint_eq(pt_le64(e + BLK_STORED_SIZE), c.blocks[i].stored_size);
			ck_assert_uint_eq(pt_le64(e + BLK_RAW_SIZE), c.blocks[i].raw_size);
			ck_assert_uint_eq(pt_le64(e + BLK_FIRST_SAMPLE), 3 * i);
			ck_assert_uint_eq(pt_le64(e + BLK_STORED_HASH), c.blocks[i].stored_hash);
			ck_assert_uint_eq(pt_le64(e + BLK_RAW_HASH), c.blocks[i].raw_hash);
			ck_assert_uint_eq(pt_le32(e + BLK_CODEC), c.blocks[i].codec);
			ck_assert_uint_eq(pt_le32(e + BLK_FRAMES), 0);
		}
		e = orig + v.footer.index_offset + c.nb * BP_PACK_BLOCK_ENTRY;
		for (size_t i = 0; i < c.ns; i++, e += BP_PACK_SAMPLE_ENTRY) {
			ck_assert_uint_eq(pt_le64(e), c.soff[i]);
			ck_assert_uint_eq(pt_le64(e + 8), s.sizes[i]);
		}
	}
	free(again);
	free(orig);
	pt_forge_free(&c);
	pt_samples_free(&s);
}
END_TEST

START_TEST(test_index_overlapping_blocks)
{
	pt_forge c;
	bp_pack_fault f;

	/* Block 0 claims the first byte of block 1 (its hash re-sealed to match). */
	craft_base(&c);
	c.blocks[0].stored_size++;
	c.blocks[0].stored_hash = pt_forge_hash(&c, c.blocks[0].offset, c.blocks[0].stored_size);
	ck_assert_int_eq(pt_forge_parse(&c, &f), -EBADMSG);
	pt_forge_free(&c);

	/* Block 1 starts one byte early, inside block 0. */
	craft_base(&c);
	c.blocks[1].offset--;
	c.blocks[1].stored_hash = pt_forge_hash(&c, c.blocks[1].offset, c.blocks[1].stored_size);
	ck_assert_int_eq(pt_forge_parse(&c, &f), -EBADMSG);
	pt_forge_free(&c);

	/* The last block runs one byte into the index. */
	craft_base(&c);
	c.blocks[2].stored_size++;
	expect_entry_fault(&c, -EBADMSG, 2);

	/* Block 2 repeats block 1. */
	craft_base(&c);
	c.blocks[2] = c.blocks[1];
	c.blocks[2].first_sample = 6;
	ck_assert_int_eq(pt_forge_parse(&c, &f), -EBADMSG);
	pt_forge_free(&c);
}
END_TEST

START_TEST(test_index_gaps)
{
	pt_forge c;
	bp_pack_fault f;

	/* A byte between blocks 0 and 1. */
	craft_base(&c);
	c.gap[1] = 1;
	pt_forge_layout(&c);
	ck_assert_int_eq(pt_forge_parse(&c, &f), -EBADMSG);
	pt_forge_free(&c);

	/* A byte between the header and block 0. */
	craft_base(&c);
	c.gap[0] = 1;
	pt_forge_layout(&c);
	ck_assert_int_eq(pt_forge_parse(&c, &f), -EBADMSG);
	pt_forge_free(&c);

	/* A byte between the last block and the index. */
	craft_base(&c);
	c.gap[c.nb] = 1;
	pt_forge_layout(&c);
	ck_assert_int_eq(pt_forge_parse(&c, &f), -EBADMSG);
	pt_forge_free(&c);
}
END_TEST

START_TEST(test_index_samples_tile)
{
	pt_forge c;
	bp_pack_fault f;

	/* A gap between samples 0 and 1 (block 0). */
	craft_base(&c);
	c.soff[1]++;
	c.ssize[1]--;
	pt_forge_layout(&c);
	ck_assert_int_eq(pt_forge_parse(&c, &f), -EBADMSG);
	pt_forge_free(&c);

	/* Sample 1 moved 10 bytes on, same size: sizes still sum to the block. */
	craft_base(&c);
	c.soff[1] += 10;
	ck_assert_int_eq(pt_forge_parse(&c, &f), -EBADMSG);
	pt_forge_free(&c);

	/* Samples 1 and 2 swapped in place: each starts where the other should. */
	craft_base(&c);
	c.soff[1] = 300 + 250;
	c.soff[2] = 300;
	c.ssize[1] = 200;
	c.ssize[2] = 250;
	ck_assert_int_eq(pt_forge_parse(&c, &f), -EBADMSG);
	pt_forge_free(&c);

	/* Sample 3 (first of block 1) does not start at 0. */
	craft_base(&c);
	c.soff[3] = 1;
	c.ssize[3]--;
	pt_forge_layout(&c);
	ck_assert_int_eq(pt_forge_parse(&c, &f), -EBADMSG);
	pt_forge_free(&c);

	/* Samples 4 and 5 overlap. */
	craft_base(&c);
	c.ssize[4]++;
	pt_forge_layout(&c);
	ck_assert_int_eq(pt_forge_parse(&c, &f), -EBADMSG);
	pt_forge_free(&c);

	/* The last sample of block 2 stops short of the block's end. */
	craft_base(&c);
	c.ssize[8]--;
	pt_forge_layout(&c);
	ck_assert_int_eq(pt_forge_parse(&c, &f), -EBADMSG);
	pt_forge_free(&c);

	/* ... or runs past it. */
	craft_base(&c);
	c.ssize[8]++;
	pt_forge_layout(&c);
	ck_assert_int_eq(pt_forge_parse(&c, &f), -EBADMSG);
	pt_forge_free(&c);

	/* Blocks split the samples differently from the sample table. */
	craft_base(&c);
	c.blocks[1].first_sample = 4;
	ck_assert_int_eq(pt_forge_parse(&c, &f), -EBADMSG);
	pt_forge_free(&c);
}
END_TEST

START_TEST(test_index_block_order)
{
	pt_forge c;
	bp_pack_fault f;

	craft_base(&c);
	c.blocks[0].first_sample = 1;
	ck_assert_int_eq(pt_forge_parse(&c, &f), -EBADMSG);
	pt_forge_free(&c);

	craft_base(&c);
	c.blocks[2].first_sample = 3; /* same as block 1: block 1 would be empty */
	ck_assert_int_eq(pt_forge_parse(&c, &f), -EBADMSG);
	pt_forge_free(&c);

	craft_base(&c);
	c.blocks[2].first_sample = 9; /* past the last sample */
	ck_assert_int_eq(pt_forge_parse(&c, &f), -EBADMSG);
	pt_forge_free(&c);

	craft_base(&c);
	c.blocks[2].first_sample = UINT64_MAX;
	ck_assert_int_eq(pt_forge_parse(&c, &f), -EBADMSG);
	pt_forge_free(&c);
}
END_TEST

START_TEST(test_index_empty_blocks)
{
	pt_forge c;
	bp_pack_fault f;

	/* Valid at the start, in the middle and at the end. */
	for (size_t at = 0; at <= 3; at++) {
		uint8_t *buf;
		size_t len;
		bp_pack_view v;
		bp_pack_sample smp;
		uint64_t id;

		craft_base(&c);
		craft_insert_empty_block(&c, at);
		id = c.blocks[at].first_sample;
		pt_forge_seal(&c, &buf, &len);
		ck_assert_int_eq(bp_pack_parse(buf, len, &v, NULL), 0);
		bp_pack_index_sample(&v.index, id, &smp);
		ck_assert_uint_eq(smp.block, at);
		ck_assert_uint_eq(smp.size, 0);
		free(buf);
		pt_forge_free(&c);
	}

	/*
	 * Block 2 starts at the same sample as the empty block 1, leaving it no
	 * samples; everything else (tiling, totals) still adds up.
	 */
	craft_base(&c);
	craft_insert_empty_block(&c, 1);
	c.blocks[2].first_sample = c.blocks[1].first_sample;
	ck_assert_int_eq(pt_forge_parse(&c, &f), -EBADMSG);
	pt_forge_free(&c);

	/*
	 * A trailing empty block whose first sample is sample_count: the empty
	 * sample is moved to the end of block 2, where it still tiles.
	 */
	craft_base(&c);
	craft_insert_empty_block(&c, 3);
	c.soff[9] = c.blocks[2].raw_size;
	c.blocks[3].first_sample = c.ns;
	ck_assert_int_eq(pt_forge_parse(&c, &f), -EBADMSG);
	c.blocks[3].first_sample = UINT64_MAX;
	ck_assert_int_eq(pt_forge_parse(&c, &f), -EBADMSG);
	pt_forge_free(&c);
}
END_TEST

START_TEST(test_index_unknown_codec)
{
	static const uint32_t codecs[] = { 3, 0x100, UINT32_MAX };
	pt_forge c;

	for (size_t i = 0; i < sizeof(codecs) / sizeof(codecs[0]); i++) {
		craft_base(&c);
		c.blocks[2].codec = codecs[i];
		expect_entry_fault(&c, -ENOTSUP, 2);
	}
}
END_TEST

START_TEST(test_index_raw_codec_sizes)
{
	pt_forge c;

	/* A zstd block relabelled raw: stored < raw. */
	craft_base(&c);
	c.blocks[0].codec = BP_CODEC_RAW;
	expect_entry_fault(&c, -EBADMSG, 0);

	/* A raw block whose two hashes differ: its bytes cannot be both. */
	craft_base(&c);
	c.blocks[1].raw_hash ^= 1;
	expect_entry_fault(&c, -EBADMSG, 1);

	/* A raw block whose raw size (and sample) is one byte short of stored. */
	craft_base(&c);
	c.blocks[1].raw_size--;
	c.ssize[5]--;
	pt_forge_layout(&c);
	expect_entry_fault(&c, -EBADMSG, 1);
}
END_TEST

START_TEST(test_index_zstd_codec_sizes)
{
	pt_forge c;

	/* A raw block relabelled zstd: stored == raw, compression did not pay. */
	craft_base(&c);
	c.blocks[1].codec = BP_CODEC_ZSTD;
	expect_entry_fault(&c, -EBADMSG, 1);

	/* A zstd block whose raw size shrank to its stored size. */
	craft_base(&c);
	c.blocks[0].raw_size = c.blocks[0].stored_size;
	c.soff[0] = 0;
	c.ssize[0] = c.blocks[0].raw_size;
	c.soff[1] = c.soff[2] = c.blocks[0].raw_size;
	c.ssize[1] = c.ssize[2] = 0;
	pt_forge_layout(&c);
	expect_entry_fault(&c, -EBADMSG, 0);

	/* A dictionary block in a pack without a dictionary. */
	craft_base(&c);
	c.blocks[0].codec = BP_CODEC_ZSTD_DICT;
	expect_entry_fault(&c, -EBADMSG, 0);
}
END_TEST

START_TEST(test_index_count_overflow)
{
	pt_forge c;
	bp_pack_fault f;

	/* Footer counts whose table sizes wrap to the real index size. */
	craft_base(&c);
	c.f.sample_count += UINT64_C(1) << 60;
	ck_assert_int_eq(pt_forge_parse(&c, &f), -EBADMSG);
	pt_forge_free(&c);

	/* Both counts + 2^61 (72 x 2^61 = 9 x 2^64): still no more blocks than samples. */
	craft_base(&c);
	c.f.block_count += UINT64_C(1) << 61;
	c.f.sample_count += UINT64_C(1) << 61;
	ck_assert_uint_eq(c.f.block_count * BP_PACK_BLOCK_ENTRY +
				  c.f.sample_count * BP_PACK_SAMPLE_ENTRY,
			  c.nb * BP_PACK_BLOCK_ENTRY + c.ns * BP_PACK_SAMPLE_ENTRY);
	ck_assert_int_eq(pt_forge_parse(&c, &f), -EBADMSG);
	pt_forge_free(&c);

	/*
	 * Block 0 holds samples of 300, 200 and 250 bytes. Replace the first two
	 * with (0, 2^64 - 16) and (2^64 - 16, 516): each starts where the last
	 * ended and the running end wraps to 500, where sample 2 starts, so a
	 * check that only compares running sums sees a perfect tiling.
	 */
	for (int honest_max = 0; honest_max < 2; honest_max++) {
		craft_base(&c);
		ck_assert_uint_eq(c.blocks[0].raw_size, 750);
		c.soff[0] = 0;
		c.ssize[0] = UINT64_MAX - 15;
		c.soff[1] = UINT64_MAX - 15;
		c.ssize[1] = 516;
		ck_assert_uint_eq(c.soff[1] + c.ssize[1], c.soff[2]);
		pt_forge_layout(&c);
		if (!honest_max)
			c.f.max_sample = 516; /* get past the footer's own limit check */
		/* Refused as over the sample limit, by the footer or by the table. */
		ck_assert_int_eq(pt_forge_parse(&c, &f), -E2BIG);
		ck_assert_int_eq(f.block, honest_max ? -1 : 0);
		pt_forge_free(&c);
	}

	/* The last sample of block 0 so large that offset + size wraps. */
	craft_base(&c);
	c.ssize[2] = UINT64_MAX;
	pt_forge_layout(&c);
	c.f.max_sample = 300;
	ck_assert_int_eq(pt_forge_parse(&c, &f), -E2BIG);
	ck_assert_int_eq(f.block, 0);
	pt_forge_free(&c);
}
END_TEST

/* A block over BP_PACK_MAX_BLOCK, everything else consistent. */
START_TEST(test_index_block_limit)
{
	pt_forge c;
	uint64_t grow = BP_PACK_MAX_BLOCK + 1;

	craft_base(&c);
	grow -= c.blocks[0].raw_size;
	c.blocks[0].raw_size += grow;
	c.ssize[2] += grow;
	ck_assert_uint_le(c.ssize[2], BP_PACK_MAX_SAMPLE);
	pt_forge_layout(&c);
	expect_entry_fault(&c, -E2BIG, 0);
}
END_TEST

START_TEST(test_index_totals)
{
	pt_forge c;
	bp_pack_fault f;

	craft_base(&c);
	c.f.raw_bytes++;
	ck_assert_int_eq(pt_forge_parse(&c, &f), -EBADMSG);
	c.f.raw_bytes -= 2;
	ck_assert_int_eq(pt_forge_parse(&c, &f), -EBADMSG);
	pt_forge_layout(&c);
	c.f.max_sample++;
	ck_assert_int_eq(pt_forge_parse(&c, &f), -EBADMSG);
	c.f.max_sample -= 2;
	ck_assert_int_eq(pt_forge_parse(&c, &f), -EBADMSG);
	c.f.max_sample = 0;
	ck_assert_int_eq(pt_forge_parse(&c, &f), -EBADMSG);
	pt_forge_layout(&c);
	ck_assert_int_eq(pt_forge_parse(&c, &f), 0);
	pt_forge_free(&c);
}
END_TEST

static void patch_block_reserved(uint8_t *index)
{
	index[1 * BP_PACK_BLOCK_ENTRY + BLK_FRAMES + 3] = 0x80;
}

START_TEST(test_index_reserved)
{
	pt_forge c;

	craft_base(&c);
	c.patch_index = patch_block_reserved;
	expect_entry_fault(&c, -EBADMSG, 1);
}
END_TEST

/* Fingerprint and checksum: the seals themselves. */
START_TEST(test_index_seals)
{
	pt_samples s;
	uint8_t *buf;
	size_t len;
	bp_pack_view v;
	bp_pack_fault f = { .what = NULL };
	uint8_t *ftr;
	bp_pack_footer fo;

	base_samples(&s);
	ck_assert_int_eq(pt_pack_build(&s, 3, NULL, 0, 3, &buf, &len), 0);
	ck_assert_int_eq(bp_pack_parse(buf, len, &v, &f), 0);
	ftr = buf + len - BP_PACK_FOOTER_SIZE;
	fo = v.footer;

	/* A wrong fingerprint under a valid checksum. */
	fo.fingerprint ^= 1;
	bp_pack_footer_encode(&fo, buf, ftr);
	f.what = NULL;
	ck_assert_int_eq(bp_pack_parse(buf, len, &v, &f), -EBADMSG);
	ck_assert_ptr_nonnull(f.what);

	/* The right fingerprint under a wrong checksum. */
	fo.fingerprint ^= 1;
	bp_pack_footer_encode(&fo, buf, ftr);
	ck_assert_int_eq(bp_pack_parse(buf, len, &v, NULL), 0);
	ftr[FTR_CHECKSUM] ^= 1;
	f.what = NULL;
	ck_assert_int_eq(bp_pack_parse(buf, len, &v, &f), -EBADMSG);
	ck_assert_ptr_nonnull(f.what);

	/* A checksum sealed over a different header. */
	{
		uint8_t other[BP_PACK_HEADER_SIZE];

		memcpy(other, buf, sizeof(other));
		other[HDR_RESERVED] = 1;
		bp_pack_footer_encode(&fo, other, ftr);
		ck_assert_int_eq(bp_pack_parse(buf, len, &v, NULL), -EBADMSG);
	}
	free(buf);
	pt_samples_free(&s);
}
END_TEST

static Suite *pack_index_suite(void)
{
	Suite *s = suite_create("pack-index");
	TCase *tc;

	tc = tcase_create("index_validation");
	tcase_add_test(tc, test_index_identity);
	tcase_add_test(tc, test_index_overlapping_blocks);
	tcase_add_test(tc, test_index_gaps);
	tcase_add_test(tc, test_index_samples_tile);
	tcase_add_test(tc, test_index_block_order);
	tcase_add_test(tc, test_index_empty_blocks);
	tcase_add_test(tc, test_index_unknown_codec);
	tcase_add_test(tc, test_index_raw_codec_sizes);
	tcase_add_test(tc, test_index_zstd_codec_sizes);
	tcase_add_test(tc, test_index_count_overflow);
	tcase_add_test(tc, test_index_block_limit);
	tcase_add_test(tc, test_index_totals);
	tcase_add_test(tc, test_index_reserved);
	tcase_add_test(tc, test_index_seals);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr;
	int failed;

	sr = srunner_create(pack_index_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
