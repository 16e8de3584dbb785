/* SPDX-License-Identifier: MIT */
/*
 * image-transform - one image file through libbatchimage, the tensor to
 * stdout: what the pixel tests compare with PIL's and torchvision's.
 *
 *   image-transform [-c center|random] [-s H[xW]] [-r RESIZE] [-f FLIP]
 *                   [-n] [-d on|off] [-S SEED] [-E EPOCH] [-I ID] FILE
 *
 * -x BYTES: the scratch's cap (default 256 MiB; a decode thread has 48 MiB).
 * -F MAX_SIDE: bi_fit instead, the whole image within MAX_SIDE (what
 * batchd-pack create --max-side encodes), as a binary PPM (P6) on stdout;
 * -m is its max_pixels there too.
 * -n: NHWC (default NCHW). With -p it prints the box and flip chosen
 * instead ("x y w h flip"). With -t N it transforms every FILE given N
 * times, ids 0, 1, ..., and prints the mean microseconds an image (what
 * lib/image/README.md quotes); with -t N -L it decodes every JPEG FILE
 * whole at full scale instead, nothing else (libjpeg-turbo's own rate,
 * the limit docs/benchmarks.md compares the loader with). Exit 0; 1 with the reason on stderr (and
 * the errno's name first: EBADMSG, ENOTSUP, E2BIG, ...), 2 for bad
 * arguments.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "image.h"
#include "image_priv.h"

static const char *errname(int e)
{
	switch (e) {
	case EBADMSG: return "EBADMSG";
	case ENOTSUP: return "ENOTSUP";
	case E2BIG: return "E2BIG";
	case ENOMEM: return "ENOMEM";
	case EINVAL: return "EINVAL";
	default: return "E?";
	}
}

static uint8_t *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	uint8_t *b = NULL;
	size_t cap = 0, n = 0;

	if (!f)
		return NULL;
	for (;;) {
		if (n == cap) {
			uint8_t *nb = realloc(b, cap = cap ? 2 * cap : 1 << 16);

			if (!nb) {
				free(b);
				fclose(f);
				return NULL;
			}
			b = nb;
		}
		size_t got = fread(b + n, 1, cap - n, f);

		if (got == 0)
			break;
		n += got;
	}
	fclose(f);
	*len = n;
	return b;
}

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* -t: each file n times; the mean microseconds an image to stdout. */
/* One JPEG decoded whole at full scale into sc, as libjpeg-turbo alone would. @return 0 or -errno. */
static int decode_whole(bi_scratch *sc, const uint8_t *img, size_t len, char *err, size_t el)
{
	bi_region rg;
	uint32_t w, h;
	int r = bi__jpeg_probe(img, len, &w, &h, err, el);
	bi_want want = { .x1 = w, .y1 = h, .out_w = w, .out_h = h };

	return r < 0 ? r : bi__jpeg_decode(sc, img, len, &want, &rg, err, el);
}

static int timed(bi_spec *s, char **files, int nfiles, unsigned n, bool whole)
{
	bi_scratch *sc = bi_scratch_new((size_t)256 << 20);
	uint8_t *out = malloc(bi_out_bytes(s)), **img = calloc(nfiles, sizeof(*img));
	size_t *len = calloc(nfiles, sizeof(*len));
	double t0;
	char err[256];
	uint64_t id = 0;

	if (!sc || !out || !img || !len)
		return 1;
	for (int f = 0; f < nfiles; f++)
		if (!(img[f] = slurp(files[f], &len[f])))
			return 1;
	t0 = now_us();
	for (unsigned k = 0; k < n; k++)
		for (int f = 0; f < nfiles; f++, id++)
			if ((whole ? decode_whole(sc, img[f], len[f], err, sizeof(err))
				   : bi_transform(sc, s, img[f], len[f], 1, 0, id, out, err, sizeof(err))) < 0) {
				fprintf(stderr, "%s: %s\n", files[f], err);
				return 1;
			}
	printf("%.1f\n", (now_us() - t0) / (double)id);
	return 0;
}

/* -F: the image through bi_fit, as a PPM. */
static int fit(bi_scratch *sc, const uint8_t *img, size_t len, uint32_t max_side,
	       uint64_t max_pixels)
{
	uint32_t w, h, ow, oh;
	char err[256];
	uint8_t *out;
	bi_kind k;
	size_t n;
	int r = bi_probe(img, len, &k, &w, &h, err, sizeof(err));

	if (r == 0) {
		bi_fit_size(w, h, max_side, &ow, &oh);
		n = (size_t)ow * oh * 3;
		out = malloc(n);
		r = out ? bi_fit(sc, img, len, max_side, max_pixels, out, n, &ow, &oh, err,
				 sizeof(err)) : -ENOMEM;
		if (r == 0 && (printf("P6\n%u %u\n255\n", ow, oh) < 0 ||
			       fwrite(out, 1, n, stdout) != n))
			r = -EIO;
		free(out);
	}
	if (r < 0)
		fprintf(stderr, "%s: %s\n", errname(-r), err);
	return r < 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
	bi_spec s = { .crop = BI_CROP_CENTER, .height = 224, .width = 224 };
	uint64_t seed = 0, epoch = 0, id = 0;
	bool params = false, whole = false;
	unsigned times = 0;
	uint32_t fit_side = 0;
	size_t scratch = (size_t)256 << 20;
	char err[256];
	int opt, r;

	while ((opt = getopt(argc, argv, "c:s:r:f:nd:S:E:I:pm:t:x:F:L")) != -1) {
		switch (opt) {
		case 'c':
			s.crop = !strcmp(optarg, "center") ? BI_CROP_CENTER : BI_CROP_RANDOM_RESIZED;
			break;
		case 's':
			if (sscanf(optarg, "%ux%u", &s.height, &s.width) == 1)
				s.width = s.height;
			break;
		case 'r': s.resize = (uint32_t)strtoul(optarg, NULL, 10); break;
		case 'f': s.flip = strtof(optarg, NULL); break;
		case 'n': s.nhwc = true; break;
		case 'd': s.dct_scale = !strcmp(optarg, "on") ? 1 : -1; break;
		case 'S': seed = strtoull(optarg, NULL, 0); break;
		case 'E': epoch = strtoull(optarg, NULL, 0); break;
		case 'I': id = strtoull(optarg, NULL, 0); break;
		case 'p': params = true; break;
		case 'm': s.max_pixels = strtoull(optarg, NULL, 0); break;
		case 't': times = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'x': scratch = (size_t)strtoull(optarg, NULL, 0); break;
		case 'F': fit_side = (uint32_t)strtoul(optarg, NULL, 10); break;
		case 'L': whole = true; break;
		default: return 2;
		}
	}
	if (times && optind < argc && bi_spec_check(&s, err, sizeof(err)) == 0)
		return timed(&s, argv + optind, argc - optind, times, whole);
	if (optind + 1 != argc || bi_spec_check(&s, err, sizeof(err)) < 0) {
		fprintf(stderr, "image-transform: %s\n", optind + 1 != argc ? "one FILE" : err);
		return 2;
	}
	size_t len = 0;
	uint8_t *img = slurp(argv[optind], &len), *out = malloc(bi_out_bytes(&s));
	bi_scratch *sc = bi_scratch_new(scratch);

	if (!img || !out || !sc) {
		fprintf(stderr, "image-transform: %s: %s\n", argv[optind], strerror(errno));
		return 1;
	}
	if (fit_side) {
		r = fit(sc, img, len, fit_side, s.max_pixels);
		bi_scratch_free(sc);
		free(img);
		free(out);
		return r;
	}
	if (params) {
		bi_kind k;
		uint32_t w, h;
		bi_params p;

		r = bi_probe(img, len, &k, &w, &h, err, sizeof(err));
		if (r == 0) {
			bi_params_for(&s, w, h, seed, epoch, id, &p);
			printf("%.6f %.6f %.6f %.6f %d\n", p.x, p.y, p.w, p.h, p.flip);
		}
	} else {
		r = bi_transform(sc, &s, img, len, seed, epoch, id, out, err, sizeof(err));
		if (r == 0 && fwrite(out, 1, bi_out_bytes(&s), stdout) != bi_out_bytes(&s))
			r = -EIO;
	}
	if (r < 0)
		fprintf(stderr, "%s: %s\n", errname(-r), err);
	bi_scratch_free(sc);
	free(img);
	free(out);
	return r < 0 ? 1 : 0;
}
