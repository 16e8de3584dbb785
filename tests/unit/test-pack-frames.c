/* SPDX-License-Identifier: MIT */
/*
 * test-pack-frames.c - the Check suite for framed samples (PACK.md
 * §Frames): a sample too large for one block stored as several frames, a
 * block each, so that its blocks can be decoded in parallel.
 *
 * Writer to reader: packs mixing framed samples with blocks of small ones
 * give back every byte, size and id, through the binary search, the
 * constant-time lookup and the synchronous sample reader, with footer
 * version 2 exactly when some sample is framed. The writer refuses frames
 * that break the rules and leaves itself as it was. The validator: each
 * rule of a frame chain broken alone in a writer's pack (pt_forge, with
 * fingerprint and checksum sealed over the lie) is refused with its errno
 * and a fault placed in the entry that breaks it.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <check.h>
#include <xxhash.h>

#include "pack-testlib.h"
#include "pack.h"
#include "pack_file.h"
#include "pack_writer.h"

#define FRAME BP_PACK_MIN_FRAME

/*
 * The forge pack: small samples in blocks of 3, and two framed ones.
 * Sample 3 is 10000 bytes: frames of 4096, 4096, 1808 (blocks 1-3);
 * sample 7 is 8193 bytes: frames of 4096, 4096, 1 (blocks 5-7).
 */
static void forge_samples(pt_samples *s)
{
	static const uint64_t sizes[11] = { 300, 200, 250, 10000, 120, 80, 100, 8193, 150, 0, 180 };

	/* Sample 7 random: its 1-byte last frame is stored raw. */
	pt_samples_sized(s, sizes, 11, UINT64_C(1) << 7, 91);
}

/* Blocks of the forge pack: [0-2] [3:3] [3:2] [3:1] [4-6] [7:3] [7:2] [7:1] [8-10]. */
static void craft_framed(pt_forge *c)
{
	static const uint32_t frames[9] = { 0, 3, 2, 1, 0, 3, 2, 1, 0 };
	static const uint64_t first[9] = { 0, 3, 3, 3, 4, 7, 7, 7, 8 };
	pt_samples s;
	uint8_t *buf;
	size_t len;

	forge_samples(&s);
	ck_assert_int_eq(pt_pack_build_framed(&s, 3, FRAME, NULL, 0, 3, &buf, &len), 0);
	ck_assert_int_eq(pt_forge_from(c, buf, len), 0);
	ck_assert_uint_eq(c->nb, 9);
	ck_assert_uint_eq(c->f.version, BP_PACK_VERSION_FRAMES);
	for (size_t i = 0; i < 9; i++) {
		ck_assert_uint_eq(c->blocks[i].frames, frames[i]);
		ck_assert_uint_eq(c->blocks[i].first_sample, first[i]);
	}
	ck_assert_uint_eq(c->blocks[3].raw_size, 10000 - 2 * FRAME);
	ck_assert_uint_eq(c->blocks[7].raw_size, 1);
	free(buf);
	pt_samples_free(&s);
}

/* Parse c: rejected with err for what, the fault in block entry k. Frees c. */
static void expect_entry_fault(pt_forge *c, int err, size_t k, const char *what)
{
	bp_pack_fault f;

	ck_assert_int_eq(pt_forge_parse(c, &f), err);
	ck_assert_str_eq(f.what, what);
	ck_assert_int_eq(f.block, (int64_t)k);
	pt_forge_expect_in_entry(c, &f, k);
	pt_forge_free(c);
}

/* Parse c: rejected with err for what, the fault in sample entry k. Frees c. */
static void expect_sample_fault(pt_forge *c, int err, size_t k, const char *what)
{
	uint64_t at = c->f.index_offset + c->nb * BP_PACK_BLOCK_ENTRY + k * BP_PACK_SAMPLE_ENTRY;
	bp_pack_fault f;

	ck_assert_int_eq(pt_forge_parse(c, &f), err);
	ck_assert_str_eq(f.what, what);
	ck_assert_uint_ge(f.offset, at);
	ck_assert_uint_lt(f.offset, at + BP_PACK_SAMPLE_ENTRY);
	pt_forge_free(c);
}

/* Every sample of the parsed pack v, through its blocks, equals s's bytes. */
static void check_every_sample(const bp_pack_view *v, const uint8_t *buf, const pt_samples *s)
{
	ZSTD_DCtx *dctx = ZSTD_createDCtx();
	uint8_t *out = malloc(s->max_size + 1), *raw = malloc(s->total + 1);

	ck_assert_int_eq(bp_pack_dctx_init(dctx), 0);
	for (uint64_t id = 0; id < s->n; id++) {
		bp_pack_sample smp;
		uint64_t at = 0;

		bp_pack_index_sample(&v->index, id, &smp);
		ck_assert_uint_eq(smp.size, s->sizes[id]);
		for (uint32_t k = 0; k < smp.frames; k++) {
			bp_pack_block b;

			bp_pack_index_block(&v->index, smp.block + k, &b);
			ck_assert_uint_eq(b.frames, smp.frames > 1 ? smp.frames - k : 0);
			/* A frame holds its sample alone; a block of whole ones holds it among them. */
			if (smp.frames > 1)
				ck_assert_uint_eq(b.first_sample, id);
			ck_assert_uint_le(b.first_sample, id);
			ck_assert_uint_lt(id, b.first_sample + b.sample_count);
			ck_assert_int_eq(bp_pack_block_decode(&b, buf + b.offset, dctx, NULL, raw,
							      s->total + 1, NULL), 0);
			if (smp.frames > 1) {
				ck_assert_uint_eq(b.sample_count, 1);
				memcpy(out + at, raw, b.raw_size);
			} else {
				ck_assert_uint_le(smp.offset + smp.size, b.raw_size);
				memcpy(out, raw + smp.offset, smp.size);
			}
			at += b.raw_size;
		}
		if (smp.frames > 1)
			ck_assert_uint_eq(at, smp.size);
		ck_assert_mem_eq(out, pt_sample(s, id), s->sizes[id]);
	}
	free(out);
	free(raw);
	ZSTD_freeDCtx(dctx);
}

/* The constant-time lookup and the search agree on every id, frames included. */
static void check_lookup(bp_pack_index *idx, uint64_t blocks)
{
	bp_pack_index fast = *idx;
	bp_pack_lookup *lk;

	ck_assert_int_eq(bp_pack_lookup_new(idx, &lk), 0);
	fast.lookup = lk;
	ck_assert_uint_le(bp_pack_lookup_bytes(lk), 24 * blocks + 256);
	for (uint64_t id = 0; id < idx->sample_count; id++) {
		bp_pack_sample a, b;

		bp_pack_index_sample(idx, id, &a);
		bp_pack_index_sample(&fast, id, &b);
		ck_assert_uint_eq(a.block, b.block);
		ck_assert_uint_eq(a.offset, b.offset);
		ck_assert_uint_eq(a.size, b.size);
		ck_assert_uint_eq(a.frames, b.frames);
	}
	bp_pack_lookup_free(lk);
}

/*
 * Random and text samples of 0 .. 40 KiB with frames of 4 KiB (and then of
 * 16 KiB), in blocks of up to 4 samples: every sample back, every id looked
 * up both ways, the counts as the writer laid them.
 */
START_TEST(test_frames_roundtrip)
{
	static const uint64_t frame_sizes[2] = { FRAME, 4 * FRAME };
	pt_samples s;

	pt_samples_make(&s, 60, 0, 40 << 10, PT_MIXED, 1234);
	for (size_t k = 0; k < 2; k++) {
		uint64_t f = frame_sizes[k], framed = 0, blocks_want = 0, most = 1;
		bp_pack_view v;
		uint8_t *buf;
		size_t len;

		for (size_t i = 0; i < s.n; i++) {
			framed += s.sizes[i] > f;
			if ((s.sizes[i] + f - 1) / f > most)
				most = (s.sizes[i] + f - 1) / f;
		}
		ck_assert_uint_gt(framed, 2);
		ck_assert_uint_lt(framed, s.n);
		ck_assert_int_eq(pt_pack_build_framed(&s, 4, f, NULL, 0, 3, &buf, &len), 0);
		ck_assert_int_eq(bp_pack_parse(buf, len, &v, NULL), 0);
		ck_assert_uint_eq(v.footer.version, BP_PACK_VERSION_FRAMES);
		ck_assert_uint_eq(pt_le32(buf + len - BP_PACK_FOOTER_SIZE + FTR_VERSION), 2);
		ck_assert_uint_eq(v.index.framed, framed);
		ck_assert_uint_eq(v.index.max_frames, most);
		ck_assert_uint_eq(v.index.sample_count, s.n);
		ck_assert_uint_eq(v.footer.max_sample, s.max_size);
		ck_assert_uint_eq(v.footer.raw_bytes, s.total);
		for (size_t i = 0, run = 0; i <= s.n; i++) {
			/* Runs of whole samples in blocks of 4; a framed one ends a run. */
			if (i == s.n || s.sizes[i] > f) {
				blocks_want += (run + 3) / 4;
				run = 0;
				if (i < s.n)
					blocks_want += (s.sizes[i] + f - 1) / f;
			} else {
				run++;
			}
		}
		ck_assert_uint_eq(v.index.block_count, blocks_want);
		check_every_sample(&v, buf, &s);
		check_lookup(&v.index, v.index.block_count);
		free(buf);
	}
	pt_samples_free(&s);
}
END_TEST

/* Without a sample over the frame size the pack is a version-1 pack, byte for byte. */
START_TEST(test_frames_none_is_v1)
{
	uint8_t *a, *b;
	size_t la, lb;
	pt_samples s;
	bp_pack_view v;

	pt_samples_make(&s, 40, 0, 3000, PT_MIXED, 5);
	ck_assert_int_eq(pt_pack_build(&s, 3, NULL, 0, 3, &a, &la), 0);
	ck_assert_int_eq(pt_pack_build_framed(&s, 3, FRAME, NULL, 0, 3, &b, &lb), 0);
	ck_assert_uint_eq(la, lb);
	ck_assert_mem_eq(a, b, la);
	ck_assert_int_eq(bp_pack_parse(b, lb, &v, NULL), 0);
	ck_assert_uint_eq(v.footer.version, BP_PACK_VERSION);
	ck_assert_uint_eq(v.index.framed, 0);
	ck_assert_uint_eq(v.index.max_frames, 1);
	free(a);
	free(b);
	pt_samples_free(&s);
}
END_TEST

/* A dataset file of framed samples: bp_sample_reader gives each back whole; verify passes. */
START_TEST(test_frames_reader)
{
	int fd = memfd_create("frames", MFD_CLOEXEC);
	bp_dataset_fault fault = { 0 };
	bp_sample_reader *r;
	bp_dataset *ds;
	pt_samples s;

	pt_samples_make(&s, 30, 1, 30 << 10, PT_TEXT, 77);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pt_pack_write_framed(fd, &s, 2, FRAME, NULL, 0, 3, NULL), 0);
	ck_assert_int_eq(bp_dataset_fdopen(fd, "frames.bpk", &ds, &fault), 0);
	ck_assert_uint_gt(bp_dataset_framed(ds), 0);
	ck_assert_uint_gt(bp_dataset_blocks(ds), s.n);
	ck_assert_uint_eq(bp_dataset_max_block(ds), FRAME);
	ck_assert_uint_eq(bp_dataset_max_frames(ds), (s.max_size + FRAME - 1) / FRAME);
	ck_assert_int_eq(bp_dataset_verify(ds, NULL, NULL, &fault), 0);
	ck_assert_int_eq(bp_sample_reader_new(ds, &r), 0);
	/* Backwards, so that no block is cached from the sample before. */
	for (uint64_t id = s.n; id-- > 0;) {
		const uint8_t *data;
		uint64_t size;

		ck_assert_int_eq(bp_sample_reader_get(r, id, &data, &size, &fault), 0);
		ck_assert_uint_eq(size, s.sizes[id]);
		ck_assert_mem_eq(data, pt_sample(&s, id), size);
	}
	bp_sample_reader_free(r);
	bp_dataset_close(ds);
	close(fd);
	pt_samples_free(&s);
}
END_TEST

static int open_writer(bp_pack_writer **w)
{
	int fd = memfd_create("frames-w", MFD_CLOEXEC);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bp_pack_writer_new(fd, NULL, 0, w), 0);
	return fd;
}

static bp_pack_encoded raw_enc(const uint8_t *bytes, uint64_t n)
{
	return (bp_pack_encoded){ .stored = bytes, .stored_size = n, .codec = BP_CODEC_RAW,
				  .stored_hash = XXH3_64bits(bytes, n),
				  .raw_hash = XXH3_64bits(bytes, n) };
}

/* The writer refuses frames that break the rules, and stays as it was. */
START_TEST(test_frames_writer_rules)
{
	static uint8_t bytes[3 * FRAME];
	bp_pack_encoded small = raw_enc(bytes, 100), frame = raw_enc(bytes, FRAME);
	bp_pack_encoded whole = raw_enc(bytes, 2 * FRAME), tiny = raw_enc(bytes, 10);
	uint64_t size = 100;
	bp_pack_footer f;
	bp_pack_writer *w;
	int fd = open_writer(&w);

	/* One frame that is the whole sample; a first frame under the minimum. */
	ck_assert_int_eq(bp_pack_writer_add_frame(w, &whole, 2 * FRAME, 2 * FRAME), -EINVAL);
	ck_assert_int_eq(bp_pack_writer_add_frame(w, &small, 100, 2 * FRAME), -EINVAL);
	ck_assert_int_eq(bp_pack_writer_add_frame(w, &frame, FRAME, BP_PACK_MAX_SAMPLE + 1),
			 -E2BIG);
	ck_assert_uint_eq(bp_pack_writer_offset(w), BP_PACK_HEADER_SIZE);
	ck_assert_int_eq(bp_pack_writer_add_frame(w, &frame, FRAME, 2 * FRAME + 100), 0);
	ck_assert_uint_eq(bp_pack_writer_owed(w), FRAME + 100);
	ck_assert_uint_eq(bp_pack_writer_samples(w), 1);
	/* Mid-sample: no whole samples, no other sample's frame, no finish, nothing too large. */
	ck_assert_int_eq(bp_pack_writer_add(w, &small, 100, &size, 1), -EINVAL);
	ck_assert_int_eq(bp_pack_writer_add_frame(w, &frame, FRAME, 3 * FRAME), -EINVAL);
	ck_assert_int_eq(bp_pack_writer_finish(w, &f), -EINVAL);
	ck_assert_int_eq(bp_pack_writer_add_frame(w, &whole, 2 * FRAME, 2 * FRAME + 100), -EINVAL);
	/* None of the refusals moved the writer. */
	ck_assert_uint_eq(bp_pack_writer_owed(w), FRAME + 100);
	ck_assert_uint_eq(bp_pack_writer_samples(w), 1);
	ck_assert_uint_eq(bp_pack_writer_offset(w), BP_PACK_HEADER_SIZE + FRAME);
	/* A frame short of the end under the minimum; then one of the minimum. */
	ck_assert_int_eq(bp_pack_writer_add_frame(w, &small, 100, 2 * FRAME + 100), -EINVAL);
	ck_assert_int_eq(bp_pack_writer_add_frame(w, &frame, FRAME, 2 * FRAME + 100), 0);
	ck_assert_uint_eq(bp_pack_writer_owed(w), 100);
	ck_assert_int_eq(bp_pack_writer_add_frame(w, &tiny, 10, 2 * FRAME + 100), -EINVAL);
	/* The last frame may be small. */
	ck_assert_int_eq(bp_pack_writer_add_frame(w, &small, 100, 2 * FRAME + 100), 0);
	ck_assert_uint_eq(bp_pack_writer_owed(w), 0);
	ck_assert_int_eq(bp_pack_writer_add(w, &small, 100, &size, 1), 0);
	ck_assert_int_eq(bp_pack_writer_finish(w, &f), 0);
	ck_assert_uint_eq(f.block_count, 4);
	ck_assert_uint_eq(f.sample_count, 2);
	ck_assert_uint_eq(f.max_sample, 2 * FRAME + 100);
	ck_assert_uint_eq(f.version, BP_PACK_VERSION_FRAMES);
	bp_pack_writer_free(w);
	close(fd);
}
END_TEST

/* ---- the validator, one broken rule at a time ---- */

START_TEST(test_frames_forge_identity)
{
	pt_forge c;

	craft_framed(&c);
	ck_assert_int_eq(pt_forge_parse(&c, NULL), 0);
	pt_forge_free(&c);
}
END_TEST

/* Today's version-1 rule: the field is reserved, so a version-1 footer over frames is refused. */
START_TEST(test_frames_need_v2)
{
	pt_forge c;

	craft_framed(&c);
	c.f.version = BP_PACK_VERSION;
	expect_entry_fault(&c, -EBADMSG, 1, "reserved block field is not zero");
}
END_TEST

/* A version-2 footer over no frames; a version this build does not know. */
START_TEST(test_frames_footer_versions)
{
	bp_pack_fault f;
	pt_samples s;
	uint8_t *buf;
	size_t len;
	pt_forge c;

	pt_samples_make(&s, 10, 1, 300, PT_TEXT, 3);
	ck_assert_int_eq(pt_pack_build(&s, 3, NULL, 0, 3, &buf, &len), 0);
	ck_assert_int_eq(pt_forge_from(&c, buf, len), 0);
	c.f.version = BP_PACK_VERSION_FRAMES;
	ck_assert_int_eq(pt_forge_parse(&c, &f), -EBADMSG);
	ck_assert_str_eq(f.what, "footer version 2 without framed samples");
	c.f.version = BP_PACK_VERSION_SECTIONS + 1;
	ck_assert_int_eq(pt_forge_parse(&c, &f), -ENOTSUP);
	ck_assert_str_eq(f.what, "unsupported footer version");
	pt_forge_free(&c);
	free(buf);
	pt_samples_free(&s);
}
END_TEST

/* Frames left must count down by one: a skipped, repeated or restarted count. */
START_TEST(test_frames_sequence)
{
	pt_forge c;

	craft_framed(&c);
	c.blocks[2].frames = 1;
	expect_entry_fault(&c, -EBADMSG, 2, "framed sample's frames out of sequence");
	craft_framed(&c);
	c.blocks[3].frames = 2;
	expect_entry_fault(&c, -EBADMSG, 3, "framed sample's frames out of sequence");
	craft_framed(&c);
	c.blocks[2].frames = 3;
	expect_entry_fault(&c, -EBADMSG, 2, "framed sample's frames out of sequence");
	/* A frame after the last of its sample's. */
	craft_framed(&c);
	c.blocks[4].frames = 1;
	expect_entry_fault(&c, -EBADMSG, 4, "framed sample of one frame");
}
END_TEST

/* A one-frame "framed" sample, and a chain longer than the blocks left. */
START_TEST(test_frames_counts)
{
	pt_forge c;

	craft_framed(&c);
	c.blocks[0].frames = 1;
	expect_entry_fault(&c, -EBADMSG, 0, "framed sample of one frame");
	craft_framed(&c);
	c.blocks[5].frames = 5;
	expect_entry_fault(&c, -EBADMSG, 5, "framed sample runs past the last block");
	craft_framed(&c);
	c.blocks[8].frames = UINT32_MAX;
	expect_entry_fault(&c, -EBADMSG, 8, "framed sample runs past the last block");
}
END_TEST

/* Every frame of a sample names that sample: one naming another. */
START_TEST(test_frames_same_sample)
{
	pt_forge c;

	craft_framed(&c);
	c.blocks[2].first_sample = 4;
	expect_entry_fault(&c, -EBADMSG, 2, "frame does not continue the previous sample");
	craft_framed(&c);
	c.blocks[7].first_sample = 6;
	expect_entry_fault(&c, -EBADMSG, 7, "frame does not continue the previous sample");
}
END_TEST

/* No frame is shared: the block after a last frame starts at the very next sample. */
START_TEST(test_frames_not_shared)
{
	pt_forge c;

	/* Block 4 starting at 5: sample 4 would ride in sample 3's last frame. */
	craft_framed(&c);
	c.blocks[4].first_sample = 5;
	expect_entry_fault(&c, -EBADMSG, 4, "framed sample's last frame holds other samples");
	/* The shard ends on a framed sample while samples remain. */
	craft_framed(&c);
	free(c.stored[8]);
	c.nb = 8;
	c.ns = 8;
	pt_forge_layout(&c);
	ck_assert_int_eq(pt_forge_parse(&c, NULL), 0);
	c.ns = 9;
	c.ssize[8] = 0;
	pt_forge_layout(&c);
	expect_entry_fault(&c, -EBADMSG, 7, "framed sample's last frame holds other samples");
}
END_TEST

/* Frame sizes: a frame but the last under the minimum; an empty last frame. */
START_TEST(test_frames_sizes)
{
	pt_forge c;

	craft_framed(&c);
	c.blocks[1].raw_size = FRAME - 1;
	c.blocks[3].raw_size += 1;
	expect_entry_fault(&c, -EBADMSG, 1, "frame under the minimum frame size");
	craft_framed(&c);
	c.blocks[6].raw_size = FRAME - 1;
	expect_entry_fault(&c, -EBADMSG, 6, "frame under the minimum frame size");
	/* Sample 7's last frame, 1 byte, made empty (and the one before one larger). */
	craft_framed(&c);
	ck_assert_uint_eq(c.blocks[7].codec, BP_CODEC_RAW);
	c.blocks[7].raw_size = 0;
	pt_forge_set_stored(&c, 7, (const uint8_t *)"", 0, BP_CODEC_RAW);
	expect_entry_fault(&c, -EBADMSG, 7, "empty frame");
}
END_TEST

/* The sample's entry: its size the frames' sum exactly, at offset 0, within the limit. */
START_TEST(test_frames_sample_entry)
{
	pt_forge c;

	craft_framed(&c);
	c.ssize[3]++;
	pt_forge_layout(&c);
	expect_sample_fault(&c, -EBADMSG, 3, "framed sample's size is not the sum of its frames");
	craft_framed(&c);
	c.ssize[7]--;
	pt_forge_layout(&c);
	expect_sample_fault(&c, -EBADMSG, 7, "framed sample's size is not the sum of its frames");
	craft_framed(&c);
	c.soff[3] = 1;
	expect_sample_fault(&c, -EBADMSG, 3, "framed sample does not start its first frame");
	/* Frames whose sum is right but one more byte in a frame than the sample. */
	craft_framed(&c);
	c.blocks[3].raw_size++;
	pt_forge_layout(&c);
	expect_sample_fault(&c, -EBADMSG, 3, "framed sample's size is not the sum of its frames");
}
END_TEST

/* Totals: the footer's raw bytes and largest sample count a framed sample whole. */
START_TEST(test_frames_totals)
{
	bp_pack_fault f;
	pt_forge c;

	craft_framed(&c);
	ck_assert_uint_eq(c.f.max_sample, 10000);
	c.f.raw_bytes -= c.blocks[2].raw_size;
	ck_assert_int_eq(pt_forge_parse(&c, &f), -EBADMSG);
	ck_assert_str_eq(f.what, "raw byte total does not match the blocks");
	pt_forge_layout(&c);
	c.f.max_sample = FRAME;
	ck_assert_int_eq(pt_forge_parse(&c, &f), -EBADMSG);
	ck_assert_str_eq(f.what, "largest sample does not match the table");
	pt_forge_free(&c);
}
END_TEST

static Suite *pack_frames_suite(void)
{
	Suite *s = suite_create("pack-frames");
	TCase *tc = tcase_create("roundtrip");

	tcase_add_test(tc, test_frames_roundtrip);
	tcase_add_test(tc, test_frames_none_is_v1);
	tcase_add_test(tc, test_frames_reader);
	tcase_add_test(tc, test_frames_writer_rules);
	suite_add_tcase(s, tc);
	tc = tcase_create("validator");
	tcase_add_test(tc, test_frames_forge_identity);
	tcase_add_test(tc, test_frames_need_v2);
	tcase_add_test(tc, test_frames_footer_versions);
	tcase_add_test(tc, test_frames_sequence);
	tcase_add_test(tc, test_frames_counts);
	tcase_add_test(tc, test_frames_same_sample);
	tcase_add_test(tc, test_frames_not_shared);
	tcase_add_test(tc, test_frames_sizes);
	tcase_add_test(tc, test_frames_sample_entry);
	tcase_add_test(tc, test_frames_totals);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr;
	int failed;

	sr = srunner_create(pack_frames_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
