/* SPDX-License-Identifier: MIT */
/*
 * fields-pack.c - the fields suites' samples and the packs that hold them
 * (see fields-pack.h).
 */
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <check.h>
#include <zstd.h>

#include "daemon-testlib.h"
#include "fields-pack.h"
#include "pack.h"
#include "pack_writer.h"

#define PER_BLOCK 8u

/* ---- the samples: every value a function of the id ---------------------------------- */

size_t img_size(uint64_t id)
{
	return id % 97 == 5 ? 3 * FRAME + id : (size_t)((id * 7) % 300);
}

size_t mask_size(uint64_t id)
{
	return id % 5 == 0 ? 0 : 16;
}

uint8_t img_byte(uint64_t id, size_t j)
{
	return (uint8_t)(id * 31 + j * 7 + 1);
}

uint8_t mask_byte(uint64_t id, size_t j)
{
	return (uint8_t)(0xa0 ^ id ^ (j * 13));
}

int64_t label_of(uint64_t id)
{
	return (int64_t)(id % 3);
}

float score_of(uint64_t id)
{
	return (float)id * 0.25f - 7.0f;
}

size_t caption_of(uint64_t id, char *buf, size_t len)
{
	static const char *const words[] = { "a", "small", "striped", "cat", "on", "a", "mat" };
	size_t at = 0;

	if (id % 11 == 0)
		return 0;
	for (uint64_t w = 0; w < 1 + id % 7 && at < len; w++)
		at += (size_t)snprintf(buf + at, len - at, "%s%s", w ? " " : "",
				       words[(id + w) % ARRAY_SIZE(words)]);
	return at;
}

size_t key_pad;

size_t key_of(uint64_t id, char *buf, size_t len)
{
	size_t n = (size_t)snprintf(buf, len, "dir%02u/sample-%05" PRIu64 ".jpg", (unsigned)(id % 7),
				    id);

	for (size_t i = 0; i < key_pad && n + 1 < len; i++)
		buf[n++] = (char)('a' + (id + i) % 26);
	buf[n] = '\0';
	return n;
}

/* ---- writing the packs --------------------------------------------------------------- */

static char *class_names[] = { "cat", "dog", "eel" };

bp_field schema_fields[FIELD_COUNT] = {
	{ .name = "img", .type = BP_FIELD_BYTES },
	{ .name = "mask", .type = BP_FIELD_BYTES },
	{ .name = "label", .type = BP_FIELD_INT64, .class_count = 3, .classes = class_names },
	{ .name = "score", .type = BP_FIELD_FLOAT32 },
	{ .name = "caption", .type = BP_FIELD_STR },
};

const bp_schema pack_schema = { .count = FIELD_COUNT, .fields = schema_fields };

/* Sample id's bytes: its image, then its mask (bytes fields end to end, schema order). */
static size_t sample_bytes(uint64_t id, uint8_t *out)
{
	size_t a = img_size(id), b = mask_size(id);

	for (size_t j = 0; j < a; j++)
		out[j] = img_byte(id, j);
	for (size_t j = 0; j < b; j++)
		out[a + j] = mask_byte(id, j);
	return a + b;
}

static void add_fields(bp_pack_writer *w, uint64_t id, bool keys)
{
	char caption[128], key[KEY_BUF];
	size_t clen = caption_of(id, caption, sizeof(caption)), klen = key_of(id, key, sizeof(key));
	bp_field_value v[FIELD_COUNT] = {
		[F_IMG] = { .size = img_size(id) },
		[F_MASK] = { .size = mask_size(id) },
		[F_LABEL] = { .i64 = label_of(id) },
		[F_SCORE] = { .f64 = score_of(id) },
		[F_CAPTION] = { .data = caption, .size = clen },
	};

	ck_assert_int_eq(bp_pack_writer_add_fields(w, v, keys ? key : NULL, keys ? klen : 0), 0);
}

/* One block of raw bytes, compressed, holding the n samples of sizes. */
static void add_block(bp_pack_writer *w, ZSTD_CCtx *cctx, const uint8_t *raw, size_t len,
		      const uint64_t *sizes, size_t n)
{
	size_t cap = ZSTD_compressBound(len ? len : 1);
	uint8_t *out = malloc(cap);
	bp_pack_encoded enc;

	ck_assert_ptr_nonnull(out);
	ck_assert_int_eq(bp_pack_block_encode(cctx, NULL, 3, raw, len, out, cap, &enc), 0);
	ck_assert_int_eq(bp_pack_writer_add(w, &enc, len, sizes, n), 0);
	free(out);
}

/* A large sample as frames of FRAME bytes (the last one shorter). */
static void add_framed(bp_pack_writer *w, ZSTD_CCtx *cctx, const uint8_t *raw, size_t len)
{
	for (size_t at = 0; at < len; at += FRAME) {
		size_t n = len - at < FRAME ? len - at : FRAME;
		size_t cap = ZSTD_compressBound(n);
		uint8_t *out = malloc(cap);
		bp_pack_encoded enc;

		ck_assert_ptr_nonnull(out);
		ck_assert_int_eq(bp_pack_block_encode(cctx, NULL, 3, raw + at, n, out, cap, &enc), 0);
		ck_assert_int_eq(bp_pack_writer_add_frame(w, &enc, n, len), 0);
		free(out);
	}
}

void write_fields_pack(const char *name, uint64_t n, bool keys)
{
	char path[PATH_MAX];
	uint8_t *block = malloc(PER_BLOCK * 4096), *big = malloc(8 * FRAME);
	uint64_t sizes[PER_BLOCK];
	size_t used = 0, in_block = 0;
	ZSTD_CCtx *cctx = ZSTD_createCCtx();
	bp_pack_writer *w = NULL;
	int fd;

	ck_assert(block && big && cctx);
	dt_root_path(dt_suite_daemon, name, path, sizeof(path));
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bp_pack_writer_new(fd, NULL, 0, &w), 0);
	ck_assert_int_eq(bp_pack_writer_set_schema(w, &pack_schema, keys), 0);
	for (uint64_t id = 0; id < n; id++) {
		size_t len;

		add_fields(w, id, keys);
		if (img_size(id) + mask_size(id) > 2 * FRAME) {
			if (in_block)
				add_block(w, cctx, block, used, sizes, in_block);
			used = in_block = 0;
			len = sample_bytes(id, big);
			add_framed(w, cctx, big, len);
			continue;
		}
		len = sample_bytes(id, block + used);
		sizes[in_block++] = len;
		used += len;
		if (in_block == PER_BLOCK) {
			add_block(w, cctx, block, used, sizes, in_block);
			used = in_block = 0;
		}
	}
	if (in_block)
		add_block(w, cctx, block, used, sizes, in_block);
	ck_assert_int_eq(bp_pack_writer_finish(w, NULL), 0);
	bp_pack_writer_free(w);
	close(fd);
	ZSTD_freeCCtx(cctx);
	free(block);
	free(big);
}
