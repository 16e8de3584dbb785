/* SPDX-License-Identifier: MIT */
/*
 * fuzz-image.c - libFuzzer target for libbatchimage's decoders (JPEG,
 * PNG, WebP) and the transform behind them.
 *
 * Each input goes through bi_transform three ways: an evaluation center
 * crop at full scale, a random-resized crop at a DCT scale with a flip, in
 * NHWC, and the same with scratch too small for most images. Beyond "no
 * crash, no sanitizer report" it checks image.h's promises: a failure is
 * one of the documented errnos with a reason, a success writes every byte
 * of the output (a canary pattern is overwritten the same way twice), and
 * the same input gives the same bytes again. A broken promise aborts.
 * Then through bi_fit (batchd-pack create --max-side's whole-image path),
 * with the same promises and a size within the one asked for.
 *
 * Built two ways (tests/fuzz/meson.build): as the fuzzer with
 * -fsanitize=fuzzer, and with replay.c as a plain program that replays the
 * seed corpus, tests/fuzz/corpus/image (from gen-image-corpus.py), in
 * every `meson test`.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bi_scratch *sc, bi_spec *s, const uint8_t *data, size_t size)
{
	size_t n = bi_out_bytes(s);
	uint8_t *a = malloc(n), *b = malloc(n);
	char err[256];
	int r;

	if (!a || !b)
		abort();
	memset(a, 0xA5, n);
	memset(b, 0x5A, n);
	r = bi_transform(sc, s, data, size, 1, 2, 3, a, err, sizeof(err));
	if (r < 0) {
		if (r != -EBADMSG && r != -ENOTSUP && r != -E2BIG && r != -ENOMEM)
			abort();
		if (!err[0])
			abort();
	} else {
		/* Every byte written, and the same ones again. */
		if (bi_transform(sc, s, data, size, 1, 2, 3, b, err, sizeof(err)) != 0 ||
		    memcmp(a, b, n))
			abort();
	}
	free(a);
	free(b);
}

/* batchd-pack's --max-side path: the whole image, shrunk to fit 20 px, twice the same. */
static void check_fit(bi_scratch *sc, const uint8_t *data, size_t size)
{
	static uint8_t a[3 * 20 * 20], b[3 * 20 * 20];
	uint32_t w, h, w2, h2;
	char err[256];
	int r;

	r = bi_fit(sc, data, size, 20, 4u << 20, a, sizeof(a), &w, &h, err, sizeof(err));
	if (r < 0) {
		if (r != -EBADMSG && r != -ENOTSUP && r != -E2BIG && r != -ENOMEM && r != -ENOBUFS)
			abort();
		if (!err[0])
			abort();
		return;
	}
	if (w == 0 || h == 0 || w > 20 || h > 20 ||
	    bi_fit(sc, data, size, 20, 4u << 20, b, sizeof(b), &w2, &h2, err, sizeof(err)) != 0 ||
	    w2 != w || h2 != h || memcmp(a, b, (size_t)3 * w * h))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	bi_spec center = { .crop = BI_CROP_CENTER, .height = 24, .width = 32, .resize = 40,
			   .max_pixels = 4u << 20 };
	bi_spec random = { .crop = BI_CROP_RANDOM_RESIZED, .height = 16, .width = 16, .flip = 0.5f,
			   .nhwc = true, .dct_scale = 1, .max_pixels = 4u << 20 };
	static bi_scratch *big, *small;
	char err[256];

	if (!big && (!(big = bi_scratch_new(64u << 20)) || !(small = bi_scratch_new(4096))))
		abort();
	if (bi_spec_check(&center, err, sizeof(err)) < 0 || bi_spec_check(&random, err, sizeof(err)) < 0)
		abort();
	check(big, &center, data, size);
	check(big, &random, data, size);
	check(small, &random, data, size);
	check_fit(big, data, size);
	return 0;
}
