/* SPDX-License-Identifier: MIT */
/*
 * test-image.c - the Check suite for lib/image's choices, before any
 * pixel: specs and their refusals, torchvision's RandomResizedCrop box
 * (in bounds, its area and ratio in range whenever a try succeeds, the
 * center fallback when none can), Resize + CenterCrop's box, draws that
 * depend on (seed, epoch, id) and nothing else, and scratch that refuses
 * to grow past its cap. The pixels are tests/image/test_image_pixels.py's.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "image.h"
#include "image_priv.h"

static bi_spec spec(uint8_t crop)
{
	bi_spec s = { .crop = crop, .height = 224, .width = 224, .flip = 0.5f };
	char err[200];

	ck_assert_int_eq(bi_spec_check(&s, err, sizeof(err)), 0);
	return s;
}

START_TEST(test_defaults)
{
	bi_spec s = spec(BI_CROP_RANDOM_RESIZED), c = spec(BI_CROP_CENTER);

	ck_assert(fabsf(s.scale_min - 0.08f) < 1e-7f && s.scale_max == 1.0f);
	ck_assert(fabsf(s.ratio_min - 0.75f) < 1e-7f && fabsf(s.ratio_max - 4.0f / 3) < 1e-6f);
	ck_assert_uint_eq(s.max_pixels, BI_MAX_PIXELS);
	ck_assert_int_eq(s.dct_scale, 1);
	ck_assert_int_eq(c.dct_scale, -1);
	ck_assert_uint_eq(c.resize, 224);
	ck_assert_uint_eq(bi_out_bytes(&s), 3u * 224 * 224);
}
END_TEST

static void refused(bi_spec s, const char *says)
{
	char err[200] = "";

	ck_assert_int_eq(bi_spec_check(&s, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, says), "\"%s\" does not say \"%s\"", err, says);
}

START_TEST(test_refusals)
{
	refused((bi_spec){ .crop = 3, .height = 8, .width = 8 }, "crop 3");
	refused((bi_spec){ .crop = 1, .height = 0, .width = 8 }, "height and width");
	refused((bi_spec){ .crop = 1, .height = 9000, .width = 8 }, "height and width");
	refused((bi_spec){ .crop = 1, .height = 8, .width = 8, .scale_min = 0.5f, .scale_max = 0.2f },
		"scale");
	refused((bi_spec){ .crop = 1, .height = 8, .width = 8, .ratio_min = -1, .ratio_max = 2 },
		"ratio");
	refused((bi_spec){ .crop = 1, .height = 8, .width = 8, .flip = NAN }, "flip");
	refused((bi_spec){ .crop = 2, .height = 8, .width = 8, .resize = 4 }, "resize 4");
}
END_TEST

/* Every accepted box is within the source; one whose area or ratio is off is the fallback. */
START_TEST(test_random_resized_boxes)
{
	bi_spec s = spec(BI_CROP_RANDOM_RESIZED);
	const uint32_t sizes[][2] = { { 500, 375 }, { 375, 500 }, { 224, 224 }, { 4000, 30 },
				      { 1, 1 }, { 7, 3000 } };
	unsigned flips = 0, n = 0;

	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		uint32_t W = sizes[k][0], H = sizes[k][1];

		for (uint64_t id = 0; id < 500; id++, n++) {
			bi_params p;
			double area, ratio;

			bi_params_for(&s, W, H, 42, 1, id, &p);
			ck_assert(p.w >= 1 && p.h >= 1 && p.x >= 0 && p.y >= 0);
			ck_assert(p.x + p.w <= W && p.y + p.h <= H);
			ck_assert(p.x == floor(p.x) && p.w == floor(p.w));
			area = p.w * p.h / ((double)W * H);
			ratio = p.w / p.h;
			/* A try's box: area and ratio in range, up to rounding to whole pixels. */
			if (area >= 0.08 * 0.9 && ratio >= 0.75 * 0.9 && ratio <= 4.0 / 3 * 1.1)
				ck_assert(area <= 1.0);
			else /* the fallback: centered, the whole of one side */
				ck_assert(p.w == W || p.h == H);
			flips += p.flip;
		}
	}
	/* p = 0.5 over 3000 draws. */
	ck_assert_msg(flips > n * 45 / 100 && flips < n * 55 / 100, "%u flips of %u", flips, n);
}
END_TEST

START_TEST(test_fallback_is_centered)
{
	bi_spec s = spec(BI_CROP_RANDOM_RESIZED);
	bi_params p;

	/* 4000 x 30: no try fits a ratio of at most 4/3 with area >= 8%: the center crop. */
	bi_params_for(&s, 4000, 30, 1, 0, 0, &p);
	ck_assert(p.h == 30 && p.w == 40 && p.x == (4000 - 40) / 2 && p.y == 0);
}
END_TEST

START_TEST(test_center_box)
{
	bi_spec s = { .crop = BI_CROP_CENTER, .height = 224, .width = 224, .resize = 256 };
	char err[100];
	bi_params p;

	ck_assert_int_eq(bi_spec_check(&s, err, sizeof(err)), 0);
	/* 500 x 375 resized to 341 x 256; crop left round(117/2) = 58, top 16. */
	bi_params_for(&s, 500, 375, 9, 9, 9, &p);
	ck_assert(fabs(p.x - 58.0 * 500 / 341) < 1e-9 && fabs(p.y - 16.0 * 375 / 256) < 1e-9);
	ck_assert(fabs(p.w - 224.0 * 500 / 341) < 1e-9 && fabs(p.h - 224.0 * 375 / 256) < 1e-9);
	ck_assert(!p.flip);
}
END_TEST

START_TEST(test_draws_are_keyed)
{
	bi_spec s = spec(BI_CROP_RANDOM_RESIZED);
	bi_params a, b;
	unsigned same = 0;

	for (uint64_t id = 0; id < 200; id++) {
		bi_params_for(&s, 640, 480, 7, 3, id, &a);
		bi_params_for(&s, 640, 480, 7, 3, id, &b);
		ck_assert(!memcmp(&a, &b, sizeof(a)));
		bi_params_for(&s, 640, 480, 7, 4, id, &b);
		same += a.x == b.x && a.y == b.y && a.w == b.w && a.h == b.h;
		bi_params_for(&s, 640, 480, 8, 3, id, &b);
		same += a.x == b.x && a.y == b.y && a.w == b.w && a.h == b.h;
	}
	ck_assert_uint_lt(same, 4);
}
END_TEST

/* Bytes that are no image, or a JPEG with nothing in it, cost no scratch. */
START_TEST(test_refused_before_scratch)
{
	static const uint8_t png_sig[] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
	bi_spec s = spec(BI_CROP_CENTER);
	bi_scratch *sc = bi_scratch_new(1024);
	uint8_t *out = malloc(bi_out_bytes(&s)), jpeg[] = { 0xFF, 0xD8, 0xFF, 0xD9 };
	char err[200];

	ck_assert_ptr_nonnull(sc);
	ck_assert_int_eq(bi_scratch_size(sc), 0);
	/* Not images: refused before any scratch is used. */
	ck_assert_int_eq(bi_transform(sc, &s, png_sig, 4, 0, 0, 0, out, err, sizeof(err)), -ENOTSUP);
	ck_assert_int_eq(bi_transform(sc, &s, jpeg, sizeof(jpeg), 0, 0, 0, out, err, sizeof(err)),
			 -EBADMSG);
	ck_assert_msg(strstr(err, "JPEG"), "%s", err);
	ck_assert_int_eq(bi_scratch_size(sc), 0);
	bi_scratch_free(sc);
	bi_scratch_free(NULL);
	free(out);
}
END_TEST

/*
 * The SIMD passes (image_resize.c, where the CPU has them) give the C
 * passes' bytes: regions from 1 pixel wide (the SIMD horizontal pass
 * reads past a row's end, so narrow regions and a region's last row take
 * the C one), shrinks and enlargements, boxes inside and at the edges,
 * both layouts, mirrored or not. Each region sits at the end of its own
 * allocation so that a read past it is ASan's to see.
 */
START_TEST(test_simd_passes_are_the_c_ones)
{
	static const uint32_t sizes[][4] = {
		/* region w, h, out w, h */
		{ 1, 1, 1, 1 },     { 1, 9, 3, 4 },       { 2, 2, 5, 5 },     { 3, 7, 2, 2 },
		{ 4, 4, 4, 4 },     { 5, 3, 9, 2 },       { 17, 13, 7, 11 },  { 64, 48, 224, 224 },
		{ 333, 250, 224, 224 }, { 301, 487, 37, 100 }, { 900, 40, 13, 13 }, { 640, 480, 640, 480 },
	};
	bi_scratch *sc = bi_scratch_new((size_t)64 << 20);
	uint64_t rnd = 0x9E3779B97F4A7C15u;
	bool simd = bi__resize_simd(true);

	ck_assert_ptr_nonnull(sc);
	if (!simd)
		fprintf(stderr, "test-image: this CPU has no AVX2: the C passes against themselves\n");
	for (size_t c = 0; c < sizeof(sizes) / sizeof(sizes[0]); c++) {
		uint32_t w = sizes[c][0], h = sizes[c][1], ow = sizes[c][2], oh = sizes[c][3];
		size_t bytes = (size_t)w * h * 3, out_bytes = (size_t)ow * oh * 3;
		uint8_t *px = malloc(bytes), *a = malloc(out_bytes), *b = malloc(out_bytes);

		ck_assert(px && a && b);
		for (size_t i = 0; i < bytes; i++) {
			rnd = rnd * 6364136223846793005u + 1442695040888963407u;
			px[i] = (uint8_t)(rnd >> 56);
		}
		bi_region r = { .px = px, .w = w, .h = h, .stride = (size_t)w * 3, .scale = 1.0 };
		/* The whole region, and a box off its corner. */
		const double boxes[][4] = { { 0, 0, w, h }, { w / 3.0, h / 5.0, w * 0.9, h } };

		for (int k = 0; k < 2; k++)
			for (int mode = 0; mode < 4; mode++) {
				bool flip = mode & 1, nhwc = mode & 2;

				bi__resize_simd(false);
				ck_assert_int_eq(bi__resize(sc, &r, boxes[k][0], boxes[k][1], boxes[k][2],
							    boxes[k][3], ow, oh, flip, nhwc, a), 0);
				bi__resize_simd(true);
				ck_assert_int_eq(bi__resize(sc, &r, boxes[k][0], boxes[k][1], boxes[k][2],
							    boxes[k][3], ow, oh, flip, nhwc, b), 0);
				ck_assert_msg(!memcmp(a, b, out_bytes), "%ux%u to %ux%u, box %d, mode %d",
					      w, h, ow, oh, k, mode);
			}
		free(px);
		free(a);
		free(b);
	}
	bi_scratch_free(sc);
}
END_TEST

static Suite *image_suite(void)
{
	Suite *s = suite_create("image");
	TCase *tc = tcase_create("specs");

	tcase_add_test(tc, test_defaults);
	tcase_add_test(tc, test_refusals);
	suite_add_tcase(s, tc);
	tc = tcase_create("boxes");
	tcase_add_test(tc, test_random_resized_boxes);
	tcase_add_test(tc, test_fallback_is_centered);
	tcase_add_test(tc, test_center_box);
	tcase_add_test(tc, test_draws_are_keyed);
	suite_add_tcase(s, tc);
	tc = tcase_create("scratch");
	tcase_add_test(tc, test_refused_before_scratch);
	suite_add_tcase(s, tc);
	tc = tcase_create("resize");
	tcase_add_test(tc, test_simd_passes_are_the_c_ones);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(image_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
