/* SPDX-License-Identifier: MIT */
/*
 * pack_fields.c - a shard's field sections: checking what they hold
 * against the schema, the dataset's per-sample field accessors, and the
 * key reader (PACK.md §Fields).
 *
 * The sections a batch needs (schema, scalar and str columns, the sizes
 * of the bytes fields) are checked whole when a shard opens, so that the
 * accessors after it are plain array reads. Keys are the opposite: a
 * 10^8-sample pack must not pay for them at open, so their directories
 * are read on a key reader's first use and every key block and key-hash
 * page is checked by its hash when it is read, and never before.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "endian.h"
#include "pack_fields.h"
#include "pack_priv.h"

static int fail(bp_pack_fault *fault, int err, const char *what, uint64_t offset)
{
	if (fault) {
		fault->what = what;
		fault->offset = offset;
		fault->block = -1;
	}
	return err;
}

static uint64_t sample_size(const bp_pack_index *idx, uint64_t id)
{
	uint64_t off, size;

	bp_pack_index_sample_span(idx, id, &off, &size);
	return size;
}

/* ---- the sections loaded at open ------------------------------------------ */

void bp_pack_fields_extent(const bp_pack_index *idx, uint64_t *ret_offset, uint64_t *ret_size)
{
	uint64_t end = idx->data_end;

	for (uint64_t i = 0; i < idx->section_count; i++) {
		bp_pack_section sec;

		bp_pack_index_section(idx, i, &sec);
		if (key_kind(sec.kind))
			break;
		end = sec.offset + sec.size;
	}
	*ret_offset = idx->data_end;
	*ret_size = end - idx->data_end;
}

/* An int64 or float column: every value read once for the range, classes checked. */
static int check_column(const bp_pack_index *idx, const bp_field *fd, const bp_pack_section *sec,
			bp_pack_column *col, bp_pack_fault *fault)
{
	size_t w = bp_field_scalar_size(fd->type);
	double lo = 0, hi = 0;

	if (sec->size != idx->sample_count * w)
		return fail(fault, -EBADMSG, "column size does not match the sample count",
			    sec->offset);
	for (uint64_t i = 0; i < idx->sample_count; i++) {
		const uint8_t *p = col->data + i * w;
		double v;

		if (fd->type == BP_FIELD_INT64) {
			int64_t x = (int64_t)bp_le64(p);

			if (fd->class_count && (x < 0 || (uint64_t)x >= fd->class_count))
				return fail(fault, -EBADMSG, "label outside its field's classes",
					    sec->offset + i * w);
			v = (double)x;
		} else if (fd->type == BP_FIELD_FLOAT32) {
			uint32_t bits = bp_le32(p);
			float f;

			memcpy(&f, &bits, sizeof(f));
			v = f;
		} else {
			uint64_t bits = bp_le64(p);

			memcpy(&v, &bits, sizeof(v));
		}
		if (i == 0 || v < lo)
			lo = v;
		if (i == 0 || v > hi)
			hi = v;
	}
	col->min = lo;
	col->max = hi;
	return 0;
}

/* A str column: offsets from 0, nondecreasing, each value at most BP_STR_MAX, ending at its bytes' end. */
static int check_str(const bp_pack_index *idx, const bp_pack_section *sec,
		     const bp_pack_column *col, bp_pack_fault *fault)
{
	uint64_t n = idx->sample_count, head = (n + 1) * 8, prev = 0;

	if (sec->size < head)
		return fail(fault, -EBADMSG, "str section shorter than its offsets", sec->offset);
	for (uint64_t i = 0; i <= n; i++) {
		uint64_t at = bp_le64(col->data + i * 8);

		if (i == 0 ? at != 0 : at < prev || at - prev > BP_STR_MAX)
			return fail(fault, i == 0 || at < prev ? -EBADMSG : -E2BIG,
				    i == 0 ? "str offsets do not start at 0"
				    : at < prev ? "str offsets decrease"
						: "str value over the size limit",
				    sec->offset + i * 8);
		prev = at;
	}
	if (prev != sec->size - head)
		return fail(fault, -EBADMSG, "str offsets do not end at the section's end",
			    sec->offset + n * 8);
	return 0;
}

/* SIZES (or the sample table with one bytes field): sums, and each field's fixed size. */
static int check_sizes(const bp_pack_index *idx, const bp_pack_fields *pf, uint64_t at,
		       bp_pack_fault *fault)
{
	uint32_t nb = pf->bytes_fields;

	for (uint64_t id = 0; id < idx->sample_count; id++) {
		uint64_t sum = 0;

		for (uint32_t f = 0, k = 0; f < pf->schema.count; f++) {
			const bp_field *fd = &pf->schema.fields[f];
			uint64_t size;

			if (fd->type != BP_FIELD_BYTES)
				continue;
			size = nb > 1 ? bp_le32(pf->sizes + (id * nb + k) * 4) : sample_size(idx, id);
			if (fd->fixed_size && size != fd->fixed_size)
				return fail(fault, -EBADMSG, "bytes field not of its fixed size",
					    nb > 1 ? at + (id * nb + k) * 4
						   : at + id * BP_PACK_SAMPLE_ENTRY + 8);
			sum += size;
			k++;
		}
		/* Without bytes fields a sample is empty. */
		if (nb != 1 && sum != sample_size(idx, id))
			return fail(fault, -EBADMSG, "field sizes do not add up to the sample",
				    nb ? at + id * nb * 4 : at + id * BP_PACK_SAMPLE_ENTRY + 8);
	}
	return 0;
}

/* The section after the schema, against it: what it is for, once, at its size. */
static int place_section(const bp_pack_index *idx, bp_pack_fields *pf, const bp_pack_section *sec,
			 const uint8_t *data, bp_pack_fault *fault)
{
	bp_pack_column *col;
	const bp_field *fd;

	if (sec->kind == BP_SECTION_SIZES) {
		if (pf->bytes_fields < 2)
			return fail(fault, -EBADMSG, "sizes section with fewer than two bytes fields",
				    sec->offset);
		if (sec->size != idx->sample_count * pf->bytes_fields * 4)
			return fail(fault, -EBADMSG, "sizes section does not match the sample count",
				    sec->offset);
		pf->sizes = data;
		return 0;
	}
	if (sec->field >= pf->schema.count)
		return fail(fault, -EBADMSG, "section names a field the schema lacks", sec->offset);
	fd = &pf->schema.fields[sec->field];
	col = &pf->columns[sec->field];
	if (sec->kind == BP_SECTION_COLUMN ? !bp_field_scalar_size(fd->type)
					   : fd->type != BP_FIELD_STR)
		return fail(fault, -EBADMSG, "section kind does not match its field's type",
			    sec->offset);
	col->data = data;
	col->size = sec->size;
	return sec->kind == BP_SECTION_COLUMN ? check_column(idx, fd, sec, col, fault)
					      : check_str(idx, sec, col, fault);
}

/* Decode the schema section; its faults are the file's. */
static int parse_schema(const bp_pack_section *sec, const uint8_t *data, bp_pack_fields *pf,
			bp_pack_fault *fault)
{
	int r = bp_schema_decode(data, sec->size, &pf->schema, fault);

	if (r < 0 && fault)
		fault->offset += sec->offset;
	if (r == -EINVAL)
		r = -EBADMSG;
	if (r < 0)
		return r;
	pf->bytes_fields = bp_schema_bytes_fields(&pf->schema);
	pf->columns = calloc(pf->schema.count, sizeof(*pf->columns));
	return pf->columns ? 0 : -ENOMEM;
}

/* Every section of the extent, then what must have been among them. */
static int parse_sections(const bp_pack_index *idx, const uint8_t *bytes, uint64_t offset,
			  bp_pack_fields *pf, bp_pack_fault *fault)
{
	int r = 0;

	for (uint64_t i = 0; i < idx->section_count && r == 0; i++) {
		bp_pack_section sec;
		const uint8_t *data;

		bp_pack_index_section(idx, i, &sec);
		if (key_kind(sec.kind)) {
			pf->keys = true;
			break;
		}
		data = bytes + (sec.offset - offset);
		if (XXH3_64bits(data, sec.size) != sec.hash)
			return fail(fault, -EBADMSG, "section checksum mismatch", sec.offset);
		if (i == 0)
			r = parse_schema(&sec, data, pf, fault);
		else if (sec.kind == BP_SECTION_TOKENS)
			r = bp__tokens_parse(idx, &pf->schema, data, sec.offset, &pf->tokens, fault);
		else
			r = place_section(idx, pf, &sec, data, fault);
		pf->has_tokens = pf->has_tokens || (r == 0 && sec.kind == BP_SECTION_TOKENS);
	}
	if (r < 0)
		return r;
	for (uint32_t f = 0; f < pf->schema.count; f++) {
		const bp_field *fd = &pf->schema.fields[f];

		if (fd->type != BP_FIELD_BYTES && !pf->columns[f].data)
			return fail(fault, -EBADMSG, fd->type == BP_FIELD_STR
						     ? "str field without its section"
						     : "scalar field without its column",
				    idx->data_end);
	}
	if (pf->bytes_fields > 1 && !pf->sizes)
		return fail(fault, -EBADMSG, "several bytes fields without a sizes section",
			    idx->data_end);
	return check_sizes(idx, pf, pf->sizes ? (uint64_t)(pf->sizes - bytes) + offset
					      : idx->index_offset + idx->block_count *
							BP_PACK_BLOCK_ENTRY, fault);
}

int bp_pack_fields_parse(const bp_pack_index *idx, const uint8_t *bytes, uint64_t offset,
			 uint64_t len, bp_pack_fields *ret, bp_pack_fault *fault)
{
	bp_pack_fields pf = { 0 };
	uint64_t ext_off, ext_size;
	int r;

	bp_pack_fields_extent(idx, &ext_off, &ext_size);
	if (ext_size && (!bytes || ext_off < offset || ext_off - offset > len ||
			 ext_size > len - (ext_off - offset)))
		return -EINVAL;
	if (idx->section_count == 0) {
		r = bp_schema_copy(bp_schema_default(), &pf.schema);
		pf.columns = r == 0 ? calloc(1, sizeof(*pf.columns)) : NULL;
		if (!pf.columns) {
			bp_schema_clear(&pf.schema);
			return -ENOMEM;
		}
		pf.bytes_fields = 1;
		*ret = pf;
		return 0;
	}
	r = parse_sections(idx, bytes, offset, &pf, fault);
	if (r < 0) {
		bp_pack_fields_clear(&pf);
		return r;
	}
	*ret = pf;
	return 0;
}

void bp_pack_fields_clear(bp_pack_fields *pf)
{
	if (!pf)
		return;
	bp_schema_clear(&pf->schema);
	free(pf->columns);
	*pf = (bp_pack_fields){ 0 };
}

size_t bp_pack_fields_bytes(const bp_pack_fields *pf)
{
	size_t n = pf->schema.count * (sizeof(bp_field) + sizeof(bp_pack_column));

	for (uint32_t f = 0; f < pf->schema.count; f++)
		for (uint32_t c = 0; c < pf->schema.fields[f].class_count; c++)
			n += sizeof(char *) + strlen(pf->schema.fields[f].classes[c]) + 1;
	return n;
}

/* ---- keys ------------------------------------------------------------------ */

/* KEY_DIR entry field offsets. */
enum {
	KD_OFFSET = 0,
	KD_STORED = 8,
	KD_RAW = 12,
	KD_CODEC = 16,
	KD_COUNT = 20,
	KD_HASH = 24,
};

static uint64_t count_of(uint64_t n, uint64_t per)
{
	return n / per + (n % per != 0);
}

/* Entries in key block or key-hash page i of n items, per to a group. */
static uint64_t group_len(uint64_t n, uint64_t per, uint64_t i)
{
	return i + 1 < count_of(n, per) ? per : n - i * per;
}

/* A key section of a validated index with keys (the parse proved all four are there). */
static bp_pack_section key_section(const bp_pack_index *idx, uint32_t kind)
{
	bp_pack_section sec = { 0 };

	bp_pack_index_find_section(idx, kind, BP_SECTION_NO_FIELD, &sec);
	return sec;
}

void bp_pack_key_dir_entry(const uint8_t *dir, uint64_t i, bp_pack_key_block *ret)
{
	const uint8_t *e = dir + i * BP_KEY_DIR_ENTRY;

	ret->offset = bp_le64(e + KD_OFFSET);
	ret->stored_size = bp_le32(e + KD_STORED);
	ret->raw_size = bp_le32(e + KD_RAW);
	ret->codec = bp_le32(e + KD_CODEC);
	ret->count = bp_le32(e + KD_COUNT);
	ret->hash = bp_le64(e + KD_HASH);
}

void bp_pack_key_dir_entry_encode(const bp_pack_key_block *kb, uint8_t out[BP_KEY_DIR_ENTRY])
{
	bp_put_le64(out + KD_OFFSET, kb->offset);
	bp_put_le32(out + KD_STORED, kb->stored_size);
	bp_put_le32(out + KD_RAW, kb->raw_size);
	bp_put_le32(out + KD_CODEC, kb->codec);
	bp_put_le32(out + KD_COUNT, kb->count);
	bp_put_le64(out + KD_HASH, kb->hash);
}

/* One KEY_DIR entry at file offset at, expected at `offset` in KEYS with `count` keys. */
static int check_key_entry(const bp_pack_key_block *kb, uint64_t offset, uint64_t count,
			   uint64_t keys_size, uint64_t at, bp_pack_fault *fault)
{
	if (kb->offset != offset)
		return fail(fault, -EBADMSG, "key block does not start where the previous one ends",
			    at + KD_OFFSET);
	if (kb->count != count)
		return fail(fault, -EBADMSG, "key block holds the wrong number of keys",
			    at + KD_COUNT);
	if (kb->raw_size > BP_KEY_BLOCK_MAX)
		return fail(fault, -E2BIG, "key block over the size limit", at + KD_RAW);
	if (kb->raw_size < count * 5)
		return fail(fault, -EBADMSG, "key block too small for its keys", at + KD_RAW);
	if (kb->codec == BP_CODEC_RAW ? kb->stored_size != kb->raw_size
	    : kb->codec == BP_CODEC_ZSTD ? kb->stored_size == 0 || kb->stored_size >= kb->raw_size
					 : false)
		return fail(fault, -EBADMSG, "key block's stored size does not fit its codec",
			    at + KD_STORED);
	if (kb->codec != BP_CODEC_RAW && kb->codec != BP_CODEC_ZSTD)
		return fail(fault, -ENOTSUP, "unknown key block codec", at + KD_CODEC);
	if (kb->stored_size > keys_size - offset)
		return fail(fault, -EBADMSG, "key block runs past the keys section", at + KD_STORED);
	return 0;
}

int bp_pack_key_dir_check(const bp_pack_index *idx, const uint8_t *dir, bp_pack_fault *fault)
{
	bp_pack_section ds = key_section(idx, BP_SECTION_KEY_DIR);
	bp_pack_section ks = key_section(idx, BP_SECTION_KEYS);
	uint64_t n = idx->sample_count, blocks = count_of(n, BP_KEYS_PER_BLOCK), at = 0;
	int r;

	if (XXH3_64bits(dir, ds.size) != ds.hash)
		return fail(fault, -EBADMSG, "section checksum mismatch", ds.offset);
	for (uint64_t i = 0; i < blocks; i++) {
		bp_pack_key_block kb;

		bp_pack_key_dir_entry(dir, i, &kb);
		r = check_key_entry(&kb, at, group_len(n, BP_KEYS_PER_BLOCK, i), ks.size,
				    ds.offset + i * BP_KEY_DIR_ENTRY, fault);
		if (r < 0)
			return r;
		at += kb.stored_size;
	}
	if (at != ks.size)
		return fail(fault, -EBADMSG, "key blocks do not fill the keys section",
			    ds.offset + ds.size - BP_KEY_DIR_ENTRY + KD_STORED);
	return 0;
}

int bp_pack_key_block_decode(const bp_pack_key_block *kb, uint64_t at, const uint8_t *stored,
			     ZSTD_DCtx *dctx, uint8_t *out, size_t out_cap, bp_pack_fault *fault)
{
	uint64_t sum = 0, head = (uint64_t)kb->count * 4;
	int r;

	if (out_cap < kb->raw_size || head > kb->raw_size)
		return -EINVAL;
	/* bp_pack_key_dir_check proved these; as strict for a caller's own entry. */
	if (kb->codec != BP_CODEC_RAW && kb->codec != BP_CODEC_ZSTD)
		return fail(fault, -ENOTSUP, "unknown key block codec", at);
	if (kb->codec == BP_CODEC_RAW && kb->stored_size != kb->raw_size)
		return fail(fault, -EBADMSG, "key block's stored size does not fit its codec", at);
	if (XXH3_64bits(stored, kb->stored_size) != kb->hash)
		return fail(fault, -EBADMSG, "key block checksum mismatch", at);
	if (kb->codec == BP_CODEC_RAW) {
		memcpy(out, stored, kb->raw_size);
	} else {
		r = bp_pack_frame_decode(stored, kb->stored_size, kb->raw_size, dctx, NULL, out, at,
					 fault);
		if (r < 0)
			return r;
	}
	for (uint32_t i = 0; i < kb->count; i++) {
		uint32_t len = bp_le32(out + i * 4);

		if (len == 0 || len > BP_KEY_MAX)
			return fail(fault, -EBADMSG, "key length not in 1-4096", at);
		sum += len;
	}
	if (sum != kb->raw_size - head)
		return fail(fault, -EBADMSG, "key lengths do not fill their block", at);
	if (memchr(out + head, 0, (size_t)sum))
		return fail(fault, -EBADMSG, "key holds a NUL byte", at);
	return 0;
}

void bp_pack_key_block_key(const uint8_t *raw, uint32_t count, uint32_t i, const char **ret_key,
			   size_t *ret_len)
{
	uint64_t at = (uint64_t)count * 4;

	for (uint32_t k = 0; k < i; k++)
		at += bp_le32(raw + k * 4);
	*ret_key = (const char *)raw + at;
	*ret_len = bp_le32(raw + i * 4);
}

int bp_pack_key_hash_dir_check(const bp_pack_index *idx, const uint8_t *dir,
			       bp_pack_fault *fault)
{
	bp_pack_section hs = key_section(idx, BP_SECTION_KEY_HASH_DIR);
	uint64_t pages = hs.size / BP_KEY_HASH_DIR_ENTRY;

	if (XXH3_64bits(dir, hs.size) != hs.hash)
		return fail(fault, -EBADMSG, "section checksum mismatch", hs.offset);
	for (uint64_t p = 1; p < pages; p++)
		if (bp_le64(dir + p * BP_KEY_HASH_DIR_ENTRY) <
		    bp_le64(dir + (p - 1) * BP_KEY_HASH_DIR_ENTRY))
			return fail(fault, -EBADMSG, "key-hash pages out of order",
				    hs.offset + p * BP_KEY_HASH_DIR_ENTRY);
	return 0;
}

int bp_pack_key_page_check(const bp_pack_index *idx, const uint8_t *dir, uint64_t p,
			   const uint8_t *page, uint64_t at, bp_pack_fault *fault)
{
	uint64_t n = idx->sample_count, pages = count_of(n, BP_KEY_HASH_PAGE);
	uint64_t len = group_len(n, BP_KEY_HASH_PAGE, p);
	const uint8_t *d = dir + p * BP_KEY_HASH_DIR_ENTRY;

	if (XXH3_64bits(page, len * BP_KEY_HASH_ENTRY) != bp_le64(d + 8))
		return fail(fault, -EBADMSG, "key-hash page checksum mismatch", at);
	if (bp_le64(page) != bp_le64(d))
		return fail(fault, -EBADMSG, "key-hash page does not start at its directory's hash",
			    at);
	for (uint64_t i = 0; i < len; i++) {
		const uint8_t *e = page + i * BP_KEY_HASH_ENTRY;

		if (bp_le64(e + 8) >= n)
			return fail(fault, -EBADMSG, "key-hash entry names no sample",
				    at + i * BP_KEY_HASH_ENTRY + 8);
		if (i && (bp_le64(e) < bp_le64(e - BP_KEY_HASH_ENTRY) ||
			  (bp_le64(e) == bp_le64(e - BP_KEY_HASH_ENTRY) &&
			   bp_le64(e + 8) <= bp_le64(e - BP_KEY_HASH_ENTRY + 8))))
			return fail(fault, -EBADMSG, "key-hash entries out of order",
				    at + i * BP_KEY_HASH_ENTRY);
	}
	if (p + 1 < pages &&
	    bp_le64(page + (len - 1) * BP_KEY_HASH_ENTRY) > bp_le64(d + BP_KEY_HASH_DIR_ENTRY))
		return fail(fault, -EBADMSG, "key-hash page runs past the next page's hash",
			    at + (len - 1) * BP_KEY_HASH_ENTRY);
	return 0;
}

/* ---- every byte of the keys ------------------------------------------------- */

/* What checking a shard's keys reads through and decodes into. */
typedef struct keyio {
	const bp_pack_index *idx;
	bp_pack_read_fn read;
	void *ctx;
	ZSTD_DCtx *dctx;
	uint8_t *dir;            /* KEY_DIR */
	uint64_t keys_offset;    /* KEYS' file offset */
	uint8_t stored[BP_KEY_BLOCK_MAX], raw[BP_KEY_BLOCK_MAX];
	uint8_t page[BP_KEY_HASH_PAGE * BP_KEY_HASH_ENTRY];
} keyio;

/* A whole section into a new buffer. */
static int read_section(keyio *io, const bp_pack_section *sec, uint8_t **ret,
			bp_pack_fault *fault)
{
	uint8_t *buf = malloc(sec->size ? sec->size : 1);
	int r;

	if (!buf)
		return -ENOMEM;
	r = io->read(io->ctx, buf, sec->size, sec->offset);
	if (r < 0) {
		free(buf);
		return fail(fault, r, "cannot read keys", sec->offset);
	}
	*ret = buf;
	return 0;
}

/* Key block b read and decoded into io->raw; *ret_kb its entry. */
static int load_block(keyio *io, uint64_t b, bp_pack_key_block *ret_kb, bp_pack_fault *fault)
{
	uint64_t at;
	int r;

	bp_pack_key_dir_entry(io->dir, b, ret_kb);
	at = io->keys_offset + ret_kb->offset;
	r = io->read(io->ctx, io->stored, ret_kb->stored_size, at);
	if (r < 0)
		return fail(fault, r, "cannot read keys", at);
	return bp_pack_key_block_decode(ret_kb, at, io->stored, io->dctx, io->raw, sizeof(io->raw),
					fault);
}

/* Whether samples a and b (the same key hash) have the same key. */
static int same_key(keyio *io, uint64_t a, uint64_t b, bool *ret, bp_pack_fault *fault)
{
	char first[BP_KEY_MAX];
	bp_pack_key_block kb;
	const char *key;
	size_t len, first_len;
	int r = load_block(io, a / BP_KEYS_PER_BLOCK, &kb, fault);

	if (r < 0)
		return r;
	bp_pack_key_block_key(io->raw, kb.count, (uint32_t)(a % BP_KEYS_PER_BLOCK), &key, &first_len);
	memcpy(first, key, first_len);
	r = load_block(io, b / BP_KEYS_PER_BLOCK, &kb, fault);
	if (r < 0)
		return r;
	bp_pack_key_block_key(io->raw, kb.count, (uint32_t)(b % BP_KEYS_PER_BLOCK), &key, &len);
	*ret = len == first_len && memcmp(key, first, len) == 0;
	return 0;
}

/* Every key's hash, by id, from every key block. */
static int hash_keys(keyio *io, uint64_t *hashes, bp_pack_fault *fault)
{
	uint64_t n = io->idx->sample_count;

	for (uint64_t b = 0; b < count_of(n, BP_KEYS_PER_BLOCK); b++) {
		bp_pack_key_block kb;
		int r = load_block(io, b, &kb, fault);

		if (r < 0)
			return r;
		for (uint32_t i = 0, at = kb.count * 4; i < kb.count; i++) {
			uint32_t len = bp_le32(io->raw + i * 4);

			hashes[b * BP_KEYS_PER_BLOCK + i] = XXH3_64bits(io->raw + at, len);
			at += len;
		}
	}
	return 0;
}

/* One key-hash entry against the keys and the entry before it (prev_id UINT64_MAX: none). */
static int check_hash_entry(keyio *io, const uint64_t *hashes, uint8_t *seen, uint64_t h,
			    uint64_t id, uint64_t prev_h, uint64_t prev_id, uint64_t at,
			    bp_pack_fault *fault)
{
	bool same;
	int r;

	if (seen[id / 8] & (1u << (id % 8)))
		return fail(fault, -EBADMSG, "two key-hash entries name one sample", at + 8);
	seen[id / 8] |= (uint8_t)(1u << (id % 8));
	if (hashes[id] != h)
		return fail(fault, -EBADMSG, "key-hash entry does not match its key", at);
	if (prev_id == UINT64_MAX)
		return 0;
	if (h < prev_h || (h == prev_h && id <= prev_id))
		return fail(fault, -EBADMSG, "key-hash entries out of order", at);
	if (h != prev_h)
		return 0;
	r = same_key(io, prev_id, id, &same, fault);
	if (r == 0 && same)
		r = fail(fault, -EBADMSG, "two samples have the same key", at);
	return r;
}

/* Every key-hash page, read and checked, and every entry against the keys' hashes. */
static int check_pages(keyio *io, const uint8_t *hdir, const uint64_t *hashes, uint8_t *seen,
		       bp_pack_fault *fault)
{
	bp_pack_section hs = key_section(io->idx, BP_SECTION_KEY_HASH);
	uint64_t n = io->idx->sample_count, prev_h = 0, prev_id = UINT64_MAX;
	int r;

	for (uint64_t p = 0; p < count_of(n, BP_KEY_HASH_PAGE); p++) {
		uint64_t len = group_len(n, BP_KEY_HASH_PAGE, p);
		uint64_t at = hs.offset + p * BP_KEY_HASH_PAGE * BP_KEY_HASH_ENTRY;

		r = io->read(io->ctx, io->page, len * BP_KEY_HASH_ENTRY, at);
		if (r < 0)
			return fail(fault, r, "cannot read keys", at);
		r = bp_pack_key_page_check(io->idx, hdir, p, io->page, at, fault);
		for (uint64_t i = 0; r == 0 && i < len; i++) {
			const uint8_t *e = io->page + i * BP_KEY_HASH_ENTRY;
			uint64_t h = bp_le64(e), id = bp_le64(e + 8);

			r = check_hash_entry(io, hashes, seen, h, id, prev_h, prev_id,
					     at + i * BP_KEY_HASH_ENTRY, fault);
			prev_h = h;
			prev_id = id;
		}
		if (r < 0)
			return r;
	}
	return 0;
}

int bp_pack_keys_verify(const bp_pack_index *idx, bp_pack_read_fn read, void *ctx,
			ZSTD_DCtx *dctx, bp_pack_fault *fault)
{
	bp_pack_section ds = key_section(idx, BP_SECTION_KEY_DIR);
	bp_pack_section hds = key_section(idx, BP_SECTION_KEY_HASH_DIR);
	uint64_t n = idx->sample_count, *hashes = NULL;
	uint8_t *hdir = NULL, *seen = NULL;
	keyio *io = malloc(sizeof(*io));
	int r = -ENOMEM;

	if (!io)
		return -ENOMEM;
	*io = (keyio){ .idx = idx, .read = read, .ctx = ctx, .dctx = dctx,
		       .keys_offset = key_section(idx, BP_SECTION_KEYS).offset };
	if ((r = read_section(io, &ds, &io->dir, fault)) < 0 ||
	    (r = bp_pack_key_dir_check(idx, io->dir, fault)) < 0 ||
	    (r = read_section(io, &hds, &hdir, fault)) < 0 ||
	    (r = bp_pack_key_hash_dir_check(idx, hdir, fault)) < 0)
		goto out;
	hashes = malloc(n * sizeof(*hashes));
	seen = calloc(n / 8 + 1, 1);
	r = !hashes || !seen ? -ENOMEM : hash_keys(io, hashes, fault);
	if (r == 0)
		r = check_pages(io, hdir, hashes, seen, fault);
out:
	free(hashes);
	free(seen);
	free(hdir);
	free(io->dir);
	free(io);
	return r;
}

/* ---- an open dataset's fields ------------------------------------------------ */

void bp_dataset_field_span(const bp_dataset *ds, uint64_t id, uint32_t f,
			   uint64_t *ret_offset, uint64_t *ret_size)
{
	size_t si = bp_dataset_shard_of(ds, id);
	const bp_shard *sh = bp_dataset_shard(ds, si);
	const bp_pack_fields *pf = bp_dataset_shard_fields(ds, si);
	uint64_t local = id - sh->first_sample, off = 0;
	uint32_t nb = pf->bytes_fields, rank;
	const uint8_t *row;

	if (nb == 1) {
		*ret_offset = 0;
		*ret_size = sample_size(&sh->index, local);
		return;
	}
	rank = bp_schema_bytes_rank(&pf->schema, f);
	row = pf->sizes + local * nb * 4;
	for (uint32_t k = 0; k < rank; k++)
		off += bp_le32(row + k * 4);
	*ret_offset = off;
	*ret_size = bp_le32(row + rank * 4);
}

void bp_dataset_field_scalar(const bp_dataset *ds, uint64_t id, uint32_t f, void *out)
{
	size_t si = bp_dataset_shard_of(ds, id);
	const bp_pack_fields *pf = bp_dataset_shard_fields(ds, si);
	size_t w = bp_field_scalar_size(pf->schema.fields[f].type);

	memcpy(out, pf->columns[f].data + (id - bp_dataset_shard(ds, si)->first_sample) * w, w);
}

void bp_dataset_field_str(const bp_dataset *ds, uint64_t id, uint32_t f,
			  const uint8_t **ret_data, uint64_t *ret_size)
{
	size_t si = bp_dataset_shard_of(ds, id);
	const bp_shard *sh = bp_dataset_shard(ds, si);
	const bp_pack_column *col = &bp_dataset_shard_fields(ds, si)->columns[f];
	uint64_t local = id - sh->first_sample;
	uint64_t a = bp_le64(col->data + local * 8), b = bp_le64(col->data + local * 8 + 8);

	*ret_data = col->data + (sh->footer.sample_count + 1) * 8 + a;
	*ret_size = b - a;
}

void bp_dataset_field_range(const bp_dataset *ds, uint32_t f, double *ret_min, double *ret_max)
{
	double lo = 0, hi = 0;

	for (size_t i = 0; i < bp_dataset_shard_count(ds); i++) {
		const bp_pack_column *col = &bp_dataset_shard_fields(ds, i)->columns[f];

		if (i == 0 || col->min < lo)
			lo = col->min;
		if (i == 0 || col->max > hi)
			hi = col->max;
	}
	*ret_min = lo;
	*ret_max = hi;
}

/* ---- the key reader ---------------------------------------------------------- */

/* A shard's key directories, read on first use. */
typedef struct key_dirs {
	uint8_t *dir, *hdir;
} key_dirs;

struct bp_key_reader {
	const bp_dataset *ds;
	ZSTD_DCtx *dctx;
	key_dirs *dirs;          /* per shard */
	uint8_t *stored, *raw, *page;
	size_t stored_cap, raw_cap;
	size_t shard;            /* the decoded block, when have_block */
	uint64_t block;
	bool have_block;
	bp_pack_key_block kb;
};

static int dfail(bp_dataset_fault *fault, const bp_shard *sh, int err, const bp_pack_fault *pf)
{
	if (fault) {
		fault->pack = *pf;
		snprintf(fault->shard, sizeof(fault->shard), "%s", sh->name);
	}
	return err;
}

/* len bytes at off of sh, or a fault naming what. */
static int shard_read(const bp_shard *sh, void *buf, size_t len, uint64_t off,
		      bp_dataset_fault *fault)
{
	int r = bp_shard_pread(sh, buf, len, off);

	if (r == -ENODATA)
		r = -EIO;
	if (r < 0)
		return dfail(fault, sh, r, &(bp_pack_fault){ "cannot read keys", off, -1 });
	return 0;
}

int bp_key_reader_new(const bp_dataset *ds, bp_key_reader **ret)
{
	bp_key_reader *r;

	if (!bp_dataset_has_keys(ds))
		return -ENODATA;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->ds = ds;
	r->dctx = ZSTD_createDCtx();
	r->dirs = calloc(bp_dataset_shard_count(ds), sizeof(*r->dirs));
	r->page = malloc(BP_KEY_HASH_PAGE * BP_KEY_HASH_ENTRY);
	if (!r->dctx || !r->dirs || !r->page || bp_pack_dctx_init(r->dctx) < 0) {
		bp_key_reader_free(r);
		return -ENOMEM;
	}
	*ret = r;
	return 0;
}

void bp_key_reader_free(bp_key_reader *r)
{
	if (!r)
		return;
	for (size_t i = 0; r->dirs && i < bp_dataset_shard_count(r->ds); i++) {
		free(r->dirs[i].dir);
		free(r->dirs[i].hdir);
	}
	free(r->dirs);
	ZSTD_freeDCtx(r->dctx);
	free(r->stored);
	free(r->raw);
	free(r->page);
	free(r);
}

/* One of shard si's key directories, read and checked on first use. */
static int load_dir(bp_key_reader *r, size_t si, bool hash_dir, bp_dataset_fault *fault)
{
	const bp_shard *sh = bp_dataset_shard(r->ds, si);
	uint8_t **slot = hash_dir ? &r->dirs[si].hdir : &r->dirs[si].dir;
	bp_pack_section sec = key_section(&sh->index, hash_dir ? BP_SECTION_KEY_HASH_DIR
							       : BP_SECTION_KEY_DIR);
	bp_pack_fault pf = { 0 };
	uint8_t *buf;
	int err;

	if (*slot)
		return 0;
	buf = malloc(sec.size);
	if (!buf)
		return -ENOMEM;
	err = shard_read(sh, buf, sec.size, sec.offset, fault);
	if (err == 0) {
		err = hash_dir ? bp_pack_key_hash_dir_check(&sh->index, buf, &pf)
			       : bp_pack_key_dir_check(&sh->index, buf, &pf);
		if (err < 0)
			dfail(fault, sh, err, &pf);
	}
	if (err < 0) {
		free(buf);
		return err;
	}
	*slot = buf;
	return 0;
}

/* Key block b of shard si into r->raw (kept until another is needed). */
static int load_key_block(bp_key_reader *r, size_t si, uint64_t b, bp_dataset_fault *fault)
{
	const bp_shard *sh = bp_dataset_shard(r->ds, si);
	bp_pack_fault pf = { 0 };
	uint64_t at;
	int err;

	if (r->have_block && r->shard == si && r->block == b)
		return 0;
	err = load_dir(r, si, false, fault);
	if (err < 0)
		return err;
	r->have_block = false;
	bp_pack_key_dir_entry(r->dirs[si].dir, b, &r->kb);
	if (bp_buf_reserve(&r->stored, &r->stored_cap, r->kb.stored_size) < 0 ||
	    bp_buf_reserve(&r->raw, &r->raw_cap, r->kb.raw_size) < 0)
		return -ENOMEM;
	at = key_section(&sh->index, BP_SECTION_KEYS).offset + r->kb.offset;
	err = shard_read(sh, r->stored, r->kb.stored_size, at, fault);
	if (err < 0)
		return err;
	err = bp_pack_key_block_decode(&r->kb, at, r->stored, r->dctx, r->raw, r->raw_cap, &pf);
	if (err < 0)
		return dfail(fault, sh, err, &pf);
	r->have_block = true;
	r->shard = si;
	r->block = b;
	return 0;
}

static int key_local(bp_key_reader *r, size_t si, uint64_t local, const char **ret_key,
		     size_t *ret_len, bp_dataset_fault *fault)
{
	int err = load_key_block(r, si, local / BP_KEYS_PER_BLOCK, fault);

	if (err < 0)
		return err;
	bp_pack_key_block_key(r->raw, r->kb.count, (uint32_t)(local % BP_KEYS_PER_BLOCK), ret_key,
			      ret_len);
	return 0;
}

int bp_key_reader_get(bp_key_reader *r, uint64_t id, const char **ret_key, size_t *ret_len,
		      bp_dataset_fault *fault)
{
	size_t si;

	if (id >= bp_dataset_samples(r->ds))
		return -EINVAL;
	si = bp_dataset_shard_of(r->ds, id);
	return key_local(r, si, id - bp_dataset_shard(r->ds, si)->first_sample, ret_key, ret_len,
			 fault);
}

/* The first page whose run of hash h may hold it: the last starting below h, else 0. */
static uint64_t first_page(const uint8_t *hdir, uint64_t pages, uint64_t h)
{
	uint64_t lo = 0, hi = pages; /* first page whose first hash >= h, in [lo, hi] */

	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;

		if (bp_le64(hdir + mid * BP_KEY_HASH_DIR_ENTRY) < h)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo ? lo - 1 : 0;
}

/*
 * Search shard si for key: its hash's run of entries, page by page from
 * the first that may hold it, each candidate's key compared.
 * @return 1 with *ret_local, 0 when absent, or a negative errno.
 */
static int find_in_shard(bp_key_reader *r, size_t si, const char *key, size_t len, uint64_t h,
			 uint64_t *ret_local, bp_dataset_fault *fault)
{
	const bp_shard *sh = bp_dataset_shard(r->ds, si);
	bp_pack_section hs = key_section(&sh->index, BP_SECTION_KEY_HASH);
	uint64_t n = sh->footer.sample_count, pages = count_of(n, BP_KEY_HASH_PAGE);
	int err = load_dir(r, si, true, fault);

	if (err < 0)
		return err;
	for (uint64_t p = first_page(r->dirs[si].hdir, pages, h); p < pages; p++) {
		uint64_t entries = group_len(n, BP_KEY_HASH_PAGE, p);
		uint64_t at = hs.offset + p * BP_KEY_HASH_PAGE * BP_KEY_HASH_ENTRY;
		bp_pack_fault pf = { 0 };

		/* A later page starting above h cannot continue h's run: no read for it. */
		if (p > 0 && bp_le64(r->dirs[si].hdir + p * BP_KEY_HASH_DIR_ENTRY) > h)
			return 0;

		err = shard_read(sh, r->page, entries * BP_KEY_HASH_ENTRY, at, fault);
		if (err < 0)
			return err;
		err = bp_pack_key_page_check(&sh->index, r->dirs[si].hdir, p, r->page, at, &pf);
		if (err < 0)
			return dfail(fault, sh, err, &pf);
		for (uint64_t i = 0; i < entries; i++) {
			uint64_t eh = bp_le64(r->page + i * BP_KEY_HASH_ENTRY);
			uint64_t id = bp_le64(r->page + i * BP_KEY_HASH_ENTRY + 8);
			const char *cand;
			size_t cand_len;

			if (eh < h)
				continue;
			if (eh > h)
				return 0;
			err = key_local(r, si, id, &cand, &cand_len, fault);
			if (err < 0)
				return err;
			if (cand_len == len && memcmp(cand, key, len) == 0) {
				*ret_local = id;
				return 1;
			}
		}
	}
	return 0;
}

int bp_key_reader_find(bp_key_reader *r, const char *key, size_t len, uint64_t *ret_id,
		       bp_dataset_fault *fault)
{
	uint64_t h, local = 0;

	if (!key || len == 0 || len > BP_KEY_MAX)
		return -ENOENT;
	h = XXH3_64bits(key, len);
	for (size_t si = 0; si < bp_dataset_shard_count(r->ds); si++) {
		int found = find_in_shard(r, si, key, len, h, &local, fault);

		if (found < 0)
			return found;
		if (found) {
			*ret_id = bp_dataset_shard(r->ds, si)->first_sample + local;
			return 0;
		}
	}
	return -ENOENT;
}
