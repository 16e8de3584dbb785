/* SPDX-License-Identifier: MIT */
/*
 * fuzz-pack.c - libFuzzer target for the pack parser and block decoder.
 *
 * Feeds arbitrary bytes to bp_pack_parse() as a whole shard and, when they
 * are accepted, does everything a reader would: locates every sample,
 * decodes every block and, in a shard with fields, maps its sections and
 * reads every field of every sample. The same bytes also go to
 * bp_schema_decode(), whose every accepted input must encode back to
 * itself. Beyond "no crash, no sanitizer report" it checks the
 * promises pack.h makes: errors are documented negative errnos with a
 * reason, and after a successful parse every lookup is in bounds (a framed
 * sample's frames follow one another, name it and add up to it), the
 * constant-time lookup agrees with the search, and every block that
 * decodes matches its raw hash. A broken promise aborts.
 *
 * Random bytes almost never carry valid XXH3 seals, so on their own they
 * would stop at the fingerprint and checksum checks. Each input is therefore
 * run twice: as is, and "resealed": a copy whose dictionary hash, block
 * stored hashes, fingerprint and checksum are recomputed (where the fields
 * locating them are in bounds), so mutations reach the semantic index
 * checks and the zstd decoder.
 *
 * Built two ways (tests/meson.build): with -fsanitize=fuzzer as the fuzzer
 * itself, and with tests/fuzz/replay.c as a plain program that replays the
 * seed corpus in every `meson test`.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>
#include <zstd.h>

#include "pack.h"
#include "pack_fields.h"

/* Blocks whose raw size is above this are located but not decoded. */
#define FUZZ_MAX_RAW (UINT64_C(16) << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void require(bool ok, const char *what, uint64_t a, uint64_t b)
{
	if (ok)
		return;
	fprintf(stderr, "fuzz-pack: broken promise: %s (%llu, %llu)\n", what,
		(unsigned long long)a, (unsigned long long)b);
	abort();
}

static uint64_t le64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static void put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Whether [off, off + len) lies in p[0..n). */
static bool inside(uint64_t off, uint64_t len, size_t n)
{
	return off <= n && len <= n - off;
}

/* The key directories' block and page hashes, where KEYS, KEY_DIR, KEY_HASH and KEY_HASH_DIR lie in bounds. */
static void reseal_keys(uint8_t *p, size_t n, const uint8_t *sec[9])
{
	uint64_t keys_off, keys_len, dir_len, hash_off, hash_len, hdir_len;
	uint8_t *dir, *hdir;

	if (!sec[5] || !sec[6] || !sec[7] || !sec[8])
		return;
	keys_off = le64(sec[5] + 8);
	keys_len = le64(sec[5] + 16);
	dir = p + le64(sec[6] + 8);
	dir_len = le64(sec[6] + 16);
	hash_off = le64(sec[7] + 8);
	hash_len = le64(sec[7] + 16);
	hdir = p + le64(sec[8] + 8);
	hdir_len = le64(sec[8] + 16);
	for (uint64_t i = 0; i < dir_len / 32; i++) {
		uint8_t *e = dir + i * 32;
		uint64_t off = le64(e), len = le32(e + 8);

		if (off <= keys_len && len <= keys_len - off)
			put_le64(e + 24, XXH3_64bits(p + keys_off + off, len));
	}
	for (uint64_t k = 0; k < hdir_len / 16 && k * 65536 < hash_len; k++) {
		uint64_t at = k * 65536, len = hash_len - at < 65536 ? hash_len - at : 65536;

		if (len >= 8)
			put_le64(hdir + k * 16, le64(p + hash_off + at));
		put_le64(hdir + k * 16 + 8, XXH3_64bits(p + hash_off + at, len));
	}
}

/* A version-3 index's sections: the key directories, then each section's hash. */
static void reseal_sections(uint8_t *p, size_t n, uint64_t io, uint64_t is, uint64_t bc,
			    uint64_t sc)
{
	const uint8_t *sec[9] = { NULL };
	uint64_t tables, count;
	uint8_t *t;

	if (le32(p + n - BP_PACK_FOOTER_SIZE + 56) != BP_PACK_VERSION_SECTIONS ||
	    bc > is / BP_PACK_BLOCK_ENTRY || sc > is / BP_PACK_SAMPLE_ENTRY)
		return;
	tables = bc * BP_PACK_BLOCK_ENTRY + sc * BP_PACK_SAMPLE_ENTRY;
	if (tables > is)
		return;
	t = p + io + tables;
	count = (is - tables) / BP_PACK_SECTION_ENTRY;
	for (uint64_t i = 0; i < count; i++) {
		const uint8_t *e = t + i * BP_PACK_SECTION_ENTRY;
		uint32_t kind = le32(e);

		if (kind >= 5 && kind <= 8 && !sec[kind] && inside(le64(e + 8), le64(e + 16), n))
			sec[kind] = e;
	}
	reseal_keys(p, n, sec);
	for (uint64_t i = 0; i < count; i++) {
		uint8_t *e = t + i * BP_PACK_SECTION_ENTRY;
		uint32_t kind = le32(e);

		if (kind != 5 && kind != 7 && inside(le64(e + 8), le64(e + 16), n))
			put_le64(e + 24, XXH3_64bits(p + le64(e + 8), le64(e + 16)));
	}
}

/*
 * Recompute every seal of p[0..n) in place, from PACK.md's layout (not from
 * pack.c), wherever the fields that locate the sealed bytes are in bounds.
 */
static void reseal(uint8_t *p, size_t n)
{
	const size_t min = BP_PACK_HEADER_SIZE + BP_PACK_FOOTER_SIZE;
	uint8_t *ftr, covered[BP_PACK_HEADER_SIZE + 64];
	uint64_t dict_size, io, is, bc;

	if (n < min)
		return;
	dict_size = le64(p + 32);
	if (le64(p + 24) == BP_PACK_HEADER_SIZE && dict_size <= n - min)
		put_le64(p + 40, XXH3_64bits(p + BP_PACK_HEADER_SIZE, dict_size));

	ftr = p + n - BP_PACK_FOOTER_SIZE;
	io = le64(ftr);
	is = le64(ftr + 8);
	bc = le64(ftr + 16);
	if (io <= n - BP_PACK_FOOTER_SIZE && is == n - BP_PACK_FOOTER_SIZE - io) {
		for (uint64_t i = 0; i < bc && i < is / BP_PACK_BLOCK_ENTRY; i++) {
			uint8_t *e = p + io + i * BP_PACK_BLOCK_ENTRY;
			uint64_t off = le64(e), ss = le64(e + 8);

			if (off <= n && ss <= n - off) {
				uint64_t h = XXH3_64bits(p + off, ss);

				put_le64(e + 32, h);
				if (e[48] == BP_CODEC_RAW)
					put_le64(e + 40, h); /* raw blocks: raw_hash == stored_hash */
			}
		}
		reseal_sections(p, n, io, is, bc, le64(ftr + 24));
		put_le64(ftr + 48, XXH3_64bits(p + io, is));
	}
	memcpy(covered, p, BP_PACK_HEADER_SIZE);
	memcpy(covered + BP_PACK_HEADER_SIZE, ftr, 64);
	put_le64(ftr + 64, XXH3_64bits_withSeed(covered, sizeof(covered), le64(ftr + 48)));
}

static bool content_errno(int r)
{
	return r == -EBADMSG || r == -ENOTSUP || r == -E2BIG;
}

/* One decompression context for the whole run, as a reader thread keeps one. */
static ZSTD_DCtx *fuzz_dctx(void)
{
	static ZSTD_DCtx *dctx;

	if (!dctx) {
		dctx = ZSTD_createDCtx();
		if (!dctx || bp_pack_dctx_init(dctx) < 0) {
			fprintf(stderr, "fuzz-pack: cannot set up a ZSTD_DCtx\n");
			abort();
		}
	}
	return dctx;
}

/* Framed sample id's frames: in bounds, counting down, all naming it, adding up to it. */
static void check_frames(const bp_pack_index *idx, uint64_t id, const bp_pack_sample *s)
{
	uint64_t sum = 0;

	require(s->frames >= 2 && s->frames <= idx->block_count - s->block && s->offset == 0,
		"framed sample's frames out of bounds", id, s->frames);
	for (uint32_t k = 0; k < s->frames; k++) {
		bp_pack_block b;

		bp_pack_index_block(idx, s->block + k, &b);
		require(b.frames == s->frames - k && b.first_sample == id && b.sample_count == 1,
			"frame does not belong to its sample", id, k);
		sum += b.raw_size;
	}
	require(sum == s->size, "frames do not add up to their sample", id, sum);
}

static void check_samples(const bp_pack_view *v)
{
	const bp_pack_index *idx = &v->index;
	bp_pack_index fast = *idx;
	bp_pack_lookup *lk = NULL;

	if (bp_pack_lookup_new(idx, &lk) < 0)
		abort();
	fast.lookup = lk;
	for (uint64_t id = 0; id < idx->sample_count; id++) {
		bp_pack_sample s, q;
		bp_pack_block b;
		uint64_t off, size;

		bp_pack_index_sample(idx, id, &s);
		bp_pack_index_sample(&fast, id, &q);
		require(s.block == q.block && s.offset == q.offset && s.size == q.size &&
				s.frames == q.frames,
			"the lookup disagrees with the search", id, q.block);
		bp_pack_index_sample_span(idx, id, &off, &size);
		require(s.offset == off && s.size == size, "sample_span disagrees", id, off);
		require(s.block < idx->block_count, "sample in no block", id, s.block);
		if (s.frames > 1) {
			check_frames(idx, id, &s);
			require(s.size <= v->footer.max_sample, "sample over max_sample", id, s.size);
			continue;
		}
		require(s.frames == 1, "sample of no frames", id, s.block);
		bp_pack_index_block(idx, s.block, &b);
		require(id >= b.first_sample && id - b.first_sample < b.sample_count,
			"sample outside its block's range", id, s.block);
		require(s.offset <= b.raw_size && s.size <= b.raw_size - s.offset,
			"sample outside its block's bytes", id, s.block);
		require(s.size <= v->footer.max_sample, "sample over max_sample", id, s.size);
	}
	bp_pack_lookup_free(lk);
}

static void check_blocks(const bp_pack_view *v, const uint8_t *data, size_t size)
{
	const bp_pack_index *idx = &v->index;
	ZSTD_DDict *ddict = NULL;
	uint64_t raw_total = 0;

	if (v->dict) {
		/* May be NULL for a dictionary zstd refuses; dict blocks then fail cleanly. */
		ddict = ZSTD_createDDict(v->dict, v->header.dict_size);
	}
	for (uint64_t i = 0; i < idx->block_count; i++) {
		bp_pack_fault f = { .what = NULL };
		bp_pack_block b;
		uint8_t *out;
		int r;

		bp_pack_index_block(idx, i, &b);
		require(b.offset >= v->header.data_offset && b.offset <= v->footer.index_offset &&
				b.stored_size <= v->footer.index_offset - b.offset &&
				v->footer.index_offset <= size,
			"block outside the data region", i, b.offset);
		require(b.sample_count >= 1, "empty block", i, b.sample_count);
		raw_total += b.raw_size;
		if (b.raw_size > FUZZ_MAX_RAW)
			continue;
		out = malloc(b.raw_size ? b.raw_size : 1);
		if (!out)
			abort();
		r = bp_pack_block_decode(&b, data + b.offset, fuzz_dctx(), ddict, out, b.raw_size, &f);
		if (r == 0)
			require(XXH3_64bits(out, b.raw_size) == b.raw_hash,
				"block decoded to bytes that miss its raw hash", i, b.raw_size);
		else
			require(f.what && (r == -EBADMSG ||
					   (r == -EINVAL && b.codec == BP_CODEC_ZSTD_DICT && !ddict)),
				"undocumented block decode error", i, (uint64_t)-r);
		free(out);
	}
	require(raw_total == v->footer.raw_bytes, "raw_bytes disagrees with the blocks", raw_total,
		v->footer.raw_bytes);
	ZSTD_freeDDict(ddict);
}

/* A parsed shard's fields: every value of every sample within its section. */
static void check_fields(const bp_pack_view *v, const uint8_t *data, size_t size)
{
	const bp_pack_index *idx = &v->index;
	bp_pack_fault f = { .what = NULL };
	bp_pack_fields pf;
	int r = bp_pack_fields_parse(idx, data, 0, size, &pf, &f);

	if (r == -ENOMEM)
		abort();
	require(r == 0, "accepted shard whose fields do not parse", (uint64_t)-r, 0);
	require(pf.schema.count >= 1 && pf.schema.count <= BP_FIELD_MAX, "schema count", 0,
		pf.schema.count);
	for (uint32_t k = 0; k < pf.schema.count; k++) {
		const bp_field *fd = &pf.schema.fields[k];
		const bp_pack_column *col = &pf.columns[k];
		size_t w = bp_field_scalar_size(fd->type);

		if (fd->type == BP_FIELD_BYTES)
			continue;
		require(col->data >= data && col->size <= size &&
				(size_t)(col->data - data) <= size - col->size,
			"column outside the shard", k, col->size);
		if (w)
			require(col->size == idx->sample_count * w, "column size", k, col->size);
		for (uint64_t id = 0; fd->type == BP_FIELD_STR && id < idx->sample_count; id++) {
			uint64_t a = le64(col->data + id * 8), b = le64(col->data + id * 8 + 8);

			require(a <= b && b <= col->size - (idx->sample_count + 1) * 8,
				"str value outside its section", id, b);
		}
	}
	if (pf.has_tokens) {
		uint64_t bytes = 0;

		require(pf.schema.count == 1 && pf.bytes_fields == 1 && !pf.keys &&
				pf.tokens.documents == idx->sample_count &&
				(pf.tokens.width == 2 || pf.tokens.width == 4) &&
				pf.tokens.max_id <= bp_tokens_max_id(pf.tokens.width),
			"token pack's promises", pf.tokens.width, pf.tokens.documents);
		for (uint64_t id = 0; id < idx->sample_count; id++) {
			uint64_t off, sz;

			bp_pack_index_sample_span(idx, id, &off, &sz);
			require(sz && sz % pf.tokens.width == 0, "document not whole ids", id, sz);
			bytes += sz;
		}
		require(bytes == pf.tokens.tokens * pf.tokens.width, "token count", bytes,
			pf.tokens.tokens);
	}
	for (uint64_t id = 0; pf.bytes_fields > 1 && id < idx->sample_count; id++) {
		uint64_t sum = 0, off, sz;

		for (uint32_t k = 0; k < pf.bytes_fields; k++)
			sum += le32(pf.sizes + (id * pf.bytes_fields + k) * 4);
		bp_pack_index_sample_span(idx, id, &off, &sz);
		require(sum == sz, "field sizes do not add up", id, sum);
	}
	bp_pack_fields_clear(&pf);
}

/* Any bytes as a schema: what decodes encodes back to the same bytes. */
static void check_schema(const uint8_t *data, size_t size)
{
	bp_pack_fault f = { .what = NULL };
	bp_schema s;
	uint8_t *again;
	int r = bp_schema_decode(data, size, &s, &f);

	if (r == -ENOMEM)
		abort();
	if (r < 0) {
		require((r == -EINVAL || r == -E2BIG) && f.what && f.offset <= size,
			"undocumented schema decode error", (uint64_t)-r, f.offset);
		return;
	}
	require(bp_schema_check(&s, NULL) == 0, "decoded schema fails its check", s.count, 0);
	require(bp_schema_encoded_size(&s) == size, "schema encodes to another size", size,
		bp_schema_encoded_size(&s));
	again = malloc(size);
	if (!again)
		abort();
	bp_schema_encode(&s, again);
	require(memcmp(again, data, size) == 0, "schema encodes to other bytes", size, 0);
	free(again);
	bp_schema_clear(&s);
}

static void check_pack(const uint8_t *data, size_t size)
{
	bp_pack_fault f = { .what = NULL };
	bp_pack_view v;
	int r;

	r = bp_pack_parse(data, size, &v, &f);
	if (r < 0) {
		require(content_errno(r) && f.what, "undocumented parse error", (uint64_t)-r, size);
		return;
	}
	require(size >= BP_PACK_HEADER_SIZE + BP_PACK_FOOTER_SIZE, "accepted a short pack", size, 0);
	require(v.index.block_count == v.footer.block_count &&
			v.index.sample_count == v.footer.sample_count &&
			v.index.block_count >= 1 &&
			(v.index.block_count <= v.index.sample_count || v.index.framed),
		"index counts disagree with the footer", v.index.block_count,
		v.index.sample_count);
	require(v.footer.index_offset + v.footer.index_size + BP_PACK_FOOTER_SIZE == size,
		"index does not end at the footer", v.footer.index_offset, size);
	require(!v.dict == !v.header.dict_size, "dictionary pointer disagrees with dict_size",
		v.header.dict_size, 0);
	check_samples(&v);
	check_blocks(&v, data, size);
	check_fields(&v, data, size);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *copy;

	check_pack(data, size);
	check_schema(data, size);
	if (size < BP_PACK_HEADER_SIZE + BP_PACK_FOOTER_SIZE)
		return 0;
	/* Exactly sized, so reads past the end are still caught. */
	copy = malloc(size);
	if (!copy)
		abort();
	memcpy(copy, data, size);
	reseal(copy, size);
	check_pack(copy, size);
	free(copy);
	return 0;
}
