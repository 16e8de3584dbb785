/* SPDX-License-Identifier: MIT */
/*
 * gen-pack-corpus.c - write the seed corpus for fuzz-pack.
 *
 * A fuzzer that starts from valid packs reaches the index and block checks
 * at once instead of spending its time rediscovering the magic. This writes
 * a handful of small valid packs covering each shape (one sample, many
 * samples per block, one per block, dictionary, raw blocks, empty samples,
 * samples stored as frames among small ones, samples with fields and keys
 * in every section kind, token packs) plus damaged ones (truncated,
 * garbage, a bad index byte, a bad block byte, a bad section byte), and an encoded schema
 * alone for bp_schema_decode. The output is
 * deterministic for a given zstd version; it is run by hand and the files
 * are committed:
 *
 *   build/tests/fuzz/gen-pack-corpus tests/fuzz/corpus/pack
 *
 * Every file is kept under 16 KiB so the replay stays fast.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pack-testlib.h"
#include "pack.h"
#include "pack_fields.h"

#define CORPUS_MAX_FILE (16u << 10)

static const char *out_dir;
static int failed;

static void put(const char *name, const uint8_t *buf, size_t len)
{
	char path[4096];
	int fd;

	if (len >= CORPUS_MAX_FILE) {
		fprintf(stderr, "gen-pack-corpus: %s is %zu bytes, over the limit\n", name, len);
		failed = 1;
		return;
	}
	snprintf(path, sizeof(path), "%s/%s", out_dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, buf, len) != (ssize_t)len) {
		fprintf(stderr, "gen-pack-corpus: %s: %s\n", path, strerror(errno));
		failed = 1;
	} else {
		printf("%-28s %6zu bytes\n", name, len);
	}
	if (fd >= 0)
		close(fd);
}

/* Building name's pack gave r and buf: put it; *ret (may be NULL) keeps it, else it is freed. */
static void keep(const char *name, int r, uint8_t *buf, size_t len, uint8_t **ret,
		 size_t *ret_len)
{
	if (r < 0) {
		fprintf(stderr, "gen-pack-corpus: %s: %s\n", name, strerror(-r));
		failed = 1;
		return;
	}
	put(name, buf, len);
	if (ret) {
		*ret = buf;
		*ret_len = len;
	} else {
		free(buf);
	}
}

/*
 * Build a pack of n samples of kind, per_block to a block, those over
 * frame_size (when not 0) in frames; put it as name.
 */
static void pack_framed(const char *name, size_t n, size_t min, size_t max, enum pt_kind kind,
			size_t per_block, uint64_t frame_size, const void *dict, size_t dict_size,
			uint8_t **ret, size_t *ret_len)
{
	pt_samples s;
	uint8_t *buf;
	size_t len;
	int r;

	pt_samples_make(&s, n, min, max, kind, 0xc0ffee + n);
	r = pt_pack_build_framed(&s, per_block, frame_size, dict, dict_size, 3, &buf, &len);
	pt_samples_free(&s);
	keep(name, r, buf, len, ret, ret_len);
}

static void pack(const char *name, size_t n, size_t min, size_t max, enum pt_kind kind,
		 size_t per_block, const void *dict, size_t dict_size, uint8_t **ret,
		 size_t *ret_len)
{
	pack_framed(name, n, min, max, kind, per_block, 0, dict, dict_size, ret, ret_len);
}

static char *classes[] = { "cat", "dog", "fish" };
static bp_field all_fields[] = {
	{ .name = "image", .type = BP_FIELD_BYTES },
	{ .name = "label", .type = BP_FIELD_INT64, .class_count = 3, .classes = classes },
	{ .name = "score", .type = BP_FIELD_FLOAT32 },
	{ .name = "weight", .type = BP_FIELD_FLOAT64 },
	{ .name = "caption", .type = BP_FIELD_STR },
	{ .name = "meta", .type = BP_FIELD_BYTES },
};
static const bp_schema all_schema = { .count = 6, .fields = all_fields };
/* No bytes field: every sample is empty. */
static const bp_schema scalar_schema = { .count = 2, .fields = all_fields + 3 };

/* The values of sample i (size bytes) of schema sc, nb bytes fields: the first takes 2/3. */
static void sample_values(const bp_schema *sc, uint32_t nb, size_t i, uint64_t size,
			  bp_field_value *v)
{
	uint64_t left = size;

	for (uint32_t f = 0, k = 0; f < sc->count; f++, v++) {
		switch (sc->fields[f].type) {
		case BP_FIELD_BYTES:
			v->size = ++k == nb ? left : size * 2 / 3;
			left -= v->size;
			break;
		case BP_FIELD_INT64:
			v->i64 = (int64_t)(i % 3);
			break;
		case BP_FIELD_STR:
			v->data = "a caption";
			v->size = i % 10;
			break;
		default:
			v->f64 = (double)i / 3;
		}
	}
}

/* s with fields pf, blocks of 3, in frames over frame_size: put as name; *ret (may be NULL) keeps it. */
static void build_put(const char *name, const pt_samples *s, uint64_t frame_size,
		      const pt_fields *pf, uint8_t **ret, size_t *ret_len)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	int r = pt_pack_build_fields(s, 3, frame_size, pf, &buf, &len);

	keep(name, r, buf, len, ret, ret_len);
}

/*
 * A pack of n samples of up to max bytes with schema's fields (NULL: the
 * default one) and, when keys, keys "train/<i>.jpg"; samples over
 * frame_size (when not 0) in frames. Put as name; *ret (may be NULL) keeps it.
 */
static void pack_fields(const char *name, size_t n, size_t max, const bp_schema *schema,
			bool keys, uint64_t frame_size, uint8_t **ret, size_t *ret_len)
{
	const bp_schema *sc = schema ? schema : bp_schema_default();
	bp_field_value *vals = calloc(n * sc->count, sizeof(*vals));
	char **names = calloc(n, sizeof(*names)), text[64];
	uint64_t *sizes = calloc(n, sizeof(*sizes)), st = 99;
	uint32_t nb = bp_schema_bytes_fields(sc);
	pt_fields pf = { .schema = sc, .vals = vals };
	pt_samples s;

	if (!vals || !names || !sizes)
		abort();
	for (size_t i = 0; i < n; i++) {
		sizes[i] = nb ? pt_rand_range(&st, 0, max) : 0;
		if (frame_size && i == 1)
			sizes[i] = 2 * frame_size + 100; /* three frames */
		snprintf(text, sizeof(text), "train/%zu.jpg", i);
		names[i] = strdup(text);
		sample_values(sc, nb, i, sizes[i], vals + i * sc->count);
	}
	pf.keys = keys ? (const char *const *)names : NULL;
	pt_samples_sized(&s, sizes, n, 0, 5);
	build_put(name, &s, frame_size, &pf, ret, ret_len);
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	free(vals);
	free(sizes);
	pt_samples_free(&s);
}

/* Seeds of version 3: every section kind, and damage in one. */
static void fields_seeds(void)
{
	uint8_t *full = NULL, *sec;
	uint64_t size;
	size_t len;

	pack_fields("fields-all.bpk", 12, 200, &all_schema, true, 0, &full, &len);
	pack_fields("fields-default-keys.bpk", 10, 100, NULL, true, 0, NULL, NULL);
	pack_fields("fields-no-bytes.bpk", 7, 0, &scalar_schema, false, 0, NULL, NULL);
	pack_fields("fields-frames.bpk", 3, 2000, &all_schema, true, BP_PACK_MIN_FRAME, NULL, NULL);
	if (!full)
		return;
	sec = pt_section(full, len, BP_SECTION_COLUMN, 1, &size);
	sec[3] ^= 0x20;
	put("fields-bad-column-byte.bpk", full, len);
	sec[3] ^= 0x20;
	sec = pt_section(full, len, BP_SECTION_KEYS, BP_SECTION_NO_FIELD, &size);
	sec[size - 1] ^= 0x01;
	put("fields-bad-key-byte.bpk", full, len);
	sec = pt_section(full, len, BP_SECTION_SCHEMA, BP_SECTION_NO_FIELD, &size);
	put("schema.bin", sec, size);
	free(full);
}

/* A token pack of n documents of width-byte ids (text bytes: ids below 2^31), frames over frame_size. */
static void pack_tokens(const char *name, size_t n, uint32_t width, uint64_t eos,
			uint64_t frame_size, uint8_t **ret, size_t *ret_len)
{
	pt_fields pf = { .token_width = width, .token_eos = eos };
	uint64_t st = 11, *sizes = calloc(n, sizeof(*sizes));
	pt_samples s;

	if (!sizes)
		abort();
	for (size_t i = 0; i < n; i++)
		sizes[i] = pt_rand_range(&st, 1, 60) * width;
	if (frame_size)
		sizes[1] = 2 * frame_size + 4 * width; /* three frames */
	pt_samples_sized(&s, sizes, n, 0, 9);
	build_put(name, &s, frame_size, &pf, ret, ret_len);
	free(sizes);
	pt_samples_free(&s);
}

/* Token packs of both widths, framed and not, and one with a damaged TOKENS section. */
static void token_seeds(void)
{
	uint8_t *buf = NULL, *sec;
	size_t len;

	pack_tokens("tokens-u16.bpk", 20, 2, 50256, 0, &buf, &len);
	pack_tokens("tokens-u32-frames.bpk", 3, 4, BP_TOKENS_NO_EOS, BP_PACK_MIN_FRAME, NULL, NULL);
	if (!buf)
		return;
	sec = pt_section(buf, len, BP_SECTION_TOKENS, BP_SECTION_NO_FIELD, NULL);
	sec[24] ^= 0x01;
	put("tokens-bad-section-byte.bpk", buf, len);
	free(buf);
}

int main(int argc, char **argv)
{
	uint8_t dict[1024], garbage[600], *many, *copy;
	size_t dict_size, many_len;
	uint64_t seed = 7;
	bp_pack_view v;

	if (argc != 2) {
		fprintf(stderr, "usage: %s OUTPUT-DIR\n", argv[0]);
		return 2;
	}
	out_dir = argv[1];
	dict_size = pt_dict_train(dict, sizeof(dict), 2000, 4242);

	pack("one-sample.bpk", 1, 300, 300, PT_TEXT, 1, NULL, 0, NULL, NULL);
	pack("many-per-block.bpk", 40, 0, 120, PT_MIXED, 8, NULL, 0, &many, &many_len);
	pack("one-per-block.bpk", 10, 20, 150, PT_TEXT, 1, NULL, 0, NULL, NULL);
	pack("dict.bpk", 16, 0, 0, PT_JSON, 4, dict, dict_size, NULL, NULL);
	pack("dict-one-per-block.bpk", 6, 0, 0, PT_JSON, 1, dict, dict_size, NULL, NULL);
	pack("raw-blocks.bpk", 12, 10, 100, PT_RANDOM, 3, NULL, 0, NULL, NULL);
	pack("empty-samples.bpk", 6, 0, 0, PT_TEXT, 2, NULL, 0, NULL, NULL);
	/* Frames of the minimum size: text compresses, random bytes are stored raw. */
	pack_framed("frames-text.bpk", 6, 0, 14000, PT_TEXT, 2, BP_PACK_MIN_FRAME, NULL, 0, NULL,
		    NULL);
	pack_framed("frames-raw.bpk", 2, 4500, 7000, PT_RANDOM, 1, BP_PACK_MIN_FRAME, NULL, 0,
		    NULL, NULL);
	fields_seeds();
	token_seeds();
	if (failed)
		return 1;

	/* Damaged packs, from many-per-block. */
	if (bp_pack_parse(many, many_len, &v, NULL) < 0) {
		fprintf(stderr, "gen-pack-corpus: the writer's own pack does not parse\n");
		return 1;
	}
	copy = malloc(many_len);
	put("truncated-footer.bpk", many, many_len - 7);
	put("truncated-half.bpk", many, many_len / 2);
	put("header-only.bpk", many, BP_PACK_HEADER_SIZE);
	put("empty.bin", many, 0);
	memcpy(copy, many, many_len);
	copy[v.footer.index_offset + 20] ^= 0x40;
	put("bad-index-byte.bpk", copy, many_len);
	memcpy(copy, many, many_len);
	copy[v.header.data_offset + 5] ^= 0x01;
	put("bad-block-byte.bpk", copy, many_len);
	pt_fill_random(&seed, garbage, sizeof(garbage));
	put("garbage.bin", garbage, sizeof(garbage));
	memcpy(garbage, BP_PACK_MAGIC, 8);
	put("garbage-with-magic.bin", garbage, sizeof(garbage));
	free(copy);
	free(many);
	return failed;
}
