/* SPDX-License-Identifier: MIT */
/*
 * fuzz-tokens.c - libFuzzer target for what `batchd-pack create --tokens`
 * parses (tools/pack/pack_tokfile.h) and the TOKENS section (lib/pack).
 *
 * The first byte says which parser gets the rest:
 *   0  a .npy file (the rest, whole) to pack_npy_parse;
 *   1  a Megatron .idx to pack_idx_parse, its .bin's size the next 8 bytes;
 *   2  a TOKENS section to bp_tokens_decode;
 *   3  a JSONL line to pack_jsonl_ids, the next byte's low bit the width;
 *   4  ids to pack_tok_convert, the next byte their type and the width.
 * Beyond "no crash, no sanitizer report" it checks the promises those
 * headers make, and a broken one aborts: what a parse accepts lies within
 * the bytes it was given and adds up (a .npy's array fills its file, an
 * index's sequences tile its .bin in order), a decoded section encodes
 * back to its bytes, accepted ids are ids of the width, and every
 * refusal says why.
 *
 * Built with tests/fuzz/replay.c as a plain program that replays the seed
 * corpus (tests/fuzz/corpus/tokens, written by gen-tokens-corpus.py) in
 * every `meson test`, and with -fsanitize=fuzzer as the fuzzer itself.
 */
#include <errno.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "endian.h"
#include "pack.h"
#include "pack_tokfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void require(bool ok, const char *what, uint64_t a, uint64_t b)
{
	if (ok)
		return;
	fprintf(stderr, "fuzz-tokens: broken promise: %s (%llu, %llu)\n", what,
		(unsigned long long)a, (unsigned long long)b);
	abort();
}

static void check_npy(const uint8_t *p, size_t n)
{
	char why[512] = "";
	pack_npy a;
	int r = pack_npy_parse(p, n, n, &a, why, sizeof(why));

	if (r < 0) {
		require(r == -EINVAL && why[0], "undocumented npy refusal", (uint64_t)-r, 0);
		return;
	}
	require(a.ndim == 1 || a.ndim == 2, "npy dimensions", a.ndim, 0);
	require(a.data_offset <= n && a.data_offset <= PACK_NPY_HEADER_MAX, "npy data offset",
		a.data_offset, n);
	require(a.ndim == 2 || a.cols == 1, "1-D npy of columns", a.cols, 0);
	require(a.cols == 0 || a.rows <= (n - a.data_offset) / a.cols, "npy shape", a.rows, a.cols);
	require(a.rows * a.cols * pack_tok_size(a.type) == n - a.data_offset,
		"npy array does not fill its file", a.rows * a.cols, n - a.data_offset);
}

static void check_idx(const uint8_t *p, size_t n)
{
	char why[512] = "";
	uint64_t bin, at = 0;
	pack_idx x;
	int r;

	if (n < 8)
		return;
	bin = bp_le64(p) % (UINT64_C(1) << 40);
	r = pack_idx_parse(p + 8, n - 8, bin, "fuzz.bin", &x, why, sizeof(why));
	if (r < 0) {
		require(r == -EINVAL && why[0], "undocumented idx refusal", (uint64_t)-r, 0);
		return;
	}
	require(x.sizes >= p + 8 && x.doc_idx + x.doc_entries * 8 == p + n,
		"idx tables outside its bytes", x.sequences, x.doc_entries);
	for (uint64_t i = 0; i < x.sequences; i++) {
		uint64_t off, count;

		pack_idx_sequence(&x, i, &off, &count);
		require(off == at && count <= (bin - at) / pack_tok_size(x.type),
			"idx sequence outside its .bin", i, off);
		at += count * pack_tok_size(x.type);
	}
	require(at == bin, "idx sequences do not fill the .bin", at, bin);
}

static void check_section(const uint8_t *p, size_t n)
{
	bp_pack_fault f = { .what = NULL };
	uint8_t again[BP_TOKENS_SIZE];
	bp_tokens t;
	int r = bp_tokens_decode(p, n, &t, &f);

	if (r < 0) {
		require(r == -EBADMSG && f.what && f.offset < BP_TOKENS_SIZE, "undocumented refusal",
			(uint64_t)-r, f.offset);
		return;
	}
	require(n == BP_TOKENS_SIZE && t.max_id <= bp_tokens_max_id(t.width) &&
			(t.eos == BP_TOKENS_NO_EOS || t.eos <= bp_tokens_max_id(t.width)),
		"accepted section beyond its rules", n, t.max_id);
	bp_tokens_encode(&t, again);
	require(memcmp(again, p, BP_TOKENS_SIZE) == 0, "section encodes to other bytes", n, 0);
}

/* The ids at p (n of width bytes) all within the width's. */
static void check_ids(const uint8_t *p, size_t n, uint32_t width)
{
	for (size_t i = 0; i < n; i++)
		require(pack_tok_get(pack_tok_of_width(width), p, i) <= bp_tokens_max_id(width),
			"accepted id beyond its width", i, width);
}

static void check_jsonl(const uint8_t *p, size_t n)
{
	static json_tokener *tok;
	uint32_t width = n && (p[0] & 1) ? 4 : 2;
	uint8_t *buf = NULL;
	size_t cap = 0, count = 0;
	char why[512] = "";
	int r;

	if (n < 1)
		return;
	if (!tok && !(tok = json_tokener_new()))
		abort();
	r = pack_jsonl_ids(tok, (const char *)p + 1, n - 1, width, 4096, &buf, &cap, &count, why,
			   sizeof(why));
	if (r == 0) {
		require(count <= 4096 && count * width <= cap, "jsonl ids beyond the buffer", count, cap);
		check_ids(buf, count, width);
	} else {
		require(r == -E2BIG || (r == -EINVAL && why[0]), "undocumented jsonl refusal",
			(uint64_t)-r, 0);
	}
	free(buf);
}

static void check_convert(const uint8_t *p, size_t n)
{
	enum pack_tok_type t;
	uint32_t width;
	size_t count, ok;
	char why[512] = "";
	uint8_t *out;

	if (n < 1)
		return;
	t = (enum pack_tok_type)(p[0] % 8);
	width = p[0] & 8 ? 4 : 2;
	count = (n - 1) / pack_tok_size(t);
	out = malloc(count * width + 1);
	if (!out)
		abort();
	ok = pack_tok_convert(t, p + 1, count, width, out, 0, why, sizeof(why));
	require(ok <= count && (ok == count || why[0]), "convert's count", ok, count);
	check_ids(out, ok, width);
	for (size_t i = 0; i < ok; i++)
		require(pack_tok_get(pack_tok_of_width(width), out, i) == pack_tok_get(t, p + 1, i),
			"converted id changed", i, width);
	free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *rest;

	if (size < 1)
		return 0;
	/* The rest exactly sized, so a read past its end is a sanitizer report. */
	rest = malloc(size - 1 ? size - 1 : 1);
	if (!rest)
		abort();
	memcpy(rest, data + 1, size - 1);
	switch (data[0] % 5) {
	case 0: check_npy(rest, size - 1); break;
	case 1: check_idx(rest, size - 1); break;
	case 2: check_section(rest, size - 1); break;
	case 3: check_jsonl(rest, size - 1); break;
	default: check_convert(rest, size - 1);
	}
	free(rest);
	return 0;
}
