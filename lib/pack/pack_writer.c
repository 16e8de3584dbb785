/* SPDX-License-Identifier: MIT */
/*
 * pack_writer.c - stream one .bpk shard to a file descriptor.
 *
 * Blocks are written as they arrive; only the index grows in memory
 * (72 bytes a sample at one sample per block), bounded by BP_PACK_MAX_INDEX.
 * The header is final from the first byte because everything it holds (the
 * dictionary) is known up front; everything learned while streaming goes
 * into the footer, including whether some sample came as several frames
 * (the footer's version). A framed sample's frames arrive one at a time,
 * as the caller compresses them; their entries stay in memory with the
 * rest of the index, so each gets its frame count once the last is in.
 *
 * A shard with a schema also keeps every sample's fields in memory (its
 * scalar values, str bytes, bytes-field sizes and key) until finish,
 * which writes them as sections between the last block and the index and
 * ends the index with the section table (footer version 3). Without a
 * schema nothing of that exists and the bytes are those written before
 * fields did.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "endian.h"
#include "pack_file.h"
#include "pack_priv.h"
#include "pack_writer.h"

/* Level of the key blocks: keys are small and written once. */
#define KEYS_LEVEL 3

/* A growing byte buffer. */
typedef struct wbuf {
	uint8_t *p;
	size_t len, cap;
} wbuf;

/* What the writer keeps of one field until finish. */
typedef struct wfield {
	wbuf data;          /* scalar: the column; str: the bytes */
	wbuf offs;          /* str: u64 offsets, from the leading 0 */
} wfield;

/* Sections, one of each kind a schema implies: 1 + fields + SIZES + 4 key sections (or TOKENS). */
#define MAX_SECTIONS (1 + BP_FIELD_MAX + 1 + 4)

struct bp_pack_writer {
	int fd;
	int error;              /* sticky: the first failed write, or -EALREADY once finished */
	bool has_dict;
	uint8_t header[BP_PACK_HEADER_SIZE];
	uint64_t offset;        /* bytes written */
	uint64_t raw_bytes, max_sample;
	uint8_t *blocks;        /* encoded block table */
	uint64_t block_count, blocks_cap;
	uint8_t *samples;       /* encoded sample table */
	uint64_t sample_count, samples_cap;
	/* The framed sample being written: its first frame's block, its size, bytes owed. */
	uint64_t frame_head, frame_size, frame_owed;
	bool framed;            /* some sample has several frames: footer version 2 */
	/* Fields, from bp_pack_writer_set_schema on (schema.count 0 before). */
	bp_schema schema;
	bool keys;
	uint32_t bytes_fields;
	uint64_t section_count; /* what the table will hold */
	uint64_t field_samples; /* samples given their fields */
	wfield *fields;         /* schema.count */
	wbuf sizes;             /* u32 per bytes field per sample */
	wbuf key_lens, key_bytes; /* u32 per key; the keys end to end */
	uint64_t dup_key, dup_len; /* the shared key of finish's -EEXIST, in key_bytes */
	bool dup;
	uint8_t sections[MAX_SECTIONS * BP_PACK_SECTION_ENTRY];
	uint64_t sections_written;
	/* A token pack, from bp_pack_writer_set_tokens on: width, eos, the largest id seen. */
	bool tokens;
	bp_tokens tok;
};

/* Grow a table to hold `need` entries of `entry` bytes. */
static int table_reserve(uint8_t **table, uint64_t *cap, uint64_t need, size_t entry)
{
	uint64_t n = *cap ? *cap : 1024;
	uint8_t *t;

	if (need <= *cap)
		return 0;
	while (n < need)
		n *= 2;
	t = realloc(*table, n * entry);
	if (!t)
		return -ENOMEM;
	*table = t;
	*cap = n;
	return 0;
}

int bp_pack_writer_new(int fd, const void *dict, size_t dict_size, bp_pack_writer **ret)
{
	bp_pack_header h = { .version = BP_PACK_VERSION };
	bp_pack_writer *w;
	int r;

	if (dict_size > BP_PACK_MAX_DICT)
		return -E2BIG;
	if (fd < 0 || (dict_size && !dict))
		return -EINVAL;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->fd = fd;
	w->has_dict = dict_size != 0;

	if (dict_size) {
		h.dict_offset = BP_PACK_HEADER_SIZE;
		h.dict_size = dict_size;
		h.dict_hash = XXH3_64bits(dict, dict_size);
	}
	h.data_offset = BP_PACK_HEADER_SIZE + dict_size;
	bp_pack_header_encode(&h, w->header);

	r = bp_write_full(fd, w->header, sizeof(w->header));
	if (r == 0 && dict_size)
		r = bp_write_full(fd, dict, dict_size);
	if (r < 0) {
		free(w);
		return r;
	}
	w->offset = h.data_offset;
	*ret = w;
	return 0;
}

static int writer_fail(bp_pack_writer *w, int err)
{
	w->error = err;
	return err;
}

/*
 * Whether a block of raw_size bytes, stored as enc, bringing `samples` new
 * sample entries, fits the format and the tables. @return 0, -EINVAL,
 * -E2BIG, -ENOMEM; the writer is unchanged either way.
 */
static int block_room(bp_pack_writer *w, const bp_pack_encoded *enc, uint64_t raw_size,
		      size_t samples)
{
	uint64_t index_after;
	int r;

	if (raw_size > BP_PACK_MAX_BLOCK)
		return -E2BIG;
	if (enc->codec == BP_CODEC_RAW ? enc->stored_size != raw_size
				       : enc->stored_size == 0 || enc->stored_size >= raw_size)
		return -EINVAL;
	if (enc->codec > BP_CODEC_ZSTD_DICT || (enc->codec == BP_CODEC_ZSTD_DICT && !w->has_dict))
		return -EINVAL;
	index_after = (w->block_count + 1) * BP_PACK_BLOCK_ENTRY +
		      (w->sample_count + samples) * BP_PACK_SAMPLE_ENTRY +
		      w->section_count * BP_PACK_SECTION_ENTRY;
	if (index_after > BP_PACK_MAX_INDEX)
		return -E2BIG;
	if ((r = table_reserve(&w->blocks, &w->blocks_cap, w->block_count + 1,
			       BP_PACK_BLOCK_ENTRY)) < 0 ||
	    (r = table_reserve(&w->samples, &w->samples_cap, w->sample_count + samples,
			       BP_PACK_SAMPLE_ENTRY)) < 0)
		return r;
	return 0;
}

/* Write enc's stored bytes and its block entry (frames 0 for now). @return 0 or sticky error. */
static int block_write(bp_pack_writer *w, const bp_pack_encoded *enc, uint64_t raw_size,
		       uint64_t first_sample)
{
	bp_pack_block b;
	int r = bp_write_full(w->fd, enc->stored, enc->stored_size);

	if (r < 0)
		return writer_fail(w, r);
	b = (bp_pack_block){
		.offset = w->offset,
		.stored_size = enc->stored_size,
		.raw_size = raw_size,
		.first_sample = first_sample,
		.stored_hash = enc->stored_hash,
		.raw_hash = enc->raw_hash,
		.codec = enc->codec,
	};
	bp_pack_block_entry_encode(&b, w->blocks + w->block_count * BP_PACK_BLOCK_ENTRY);
	w->block_count++;
	w->offset += enc->stored_size;
	w->raw_bytes += raw_size;
	return 0;
}

/*
 * A token pack's block (or frame: sizes NULL) against its rules: its raw
 * bytes at hand, its samples (a frame itself) whole ids, none empty, none
 * over the width's ids; *ret_max its largest id. Anything passes
 * without tokens. @return 0, -EINVAL, -ERANGE.
 */
static int token_block(const bp_pack_writer *w, const bp_pack_encoded *enc, uint64_t raw_size,
		       const uint64_t *sizes, size_t n, uint64_t *ret_max)
{
	uint32_t width = w->tok.width;

	*ret_max = 0;
	if (!w->tokens)
		return 0;
	if ((!enc->raw && raw_size) || raw_size % width)
		return -EINVAL;
	for (size_t i = 0; sizes && i < n; i++) {
		if (sizes[i] == 0 || sizes[i] % width)
			return -EINVAL;
	}
	*ret_max = bp__tokens_max(enc->raw, raw_size, width);
	return *ret_max > bp_tokens_max_id(width) ? -ERANGE : 0;
}

int bp_pack_writer_add(bp_pack_writer *w, const bp_pack_encoded *enc, uint64_t raw_size,
		       const uint64_t *sample_sizes, size_t n)
{
	uint64_t sum = 0, max_id;
	int r;

	if (w->error)
		return w->error;
	if (!enc || n == 0 || !sample_sizes || w->frame_owed)
		return -EINVAL;
	if (raw_size > BP_PACK_MAX_BLOCK)
		return -E2BIG;
	for (size_t i = 0; i < n; i++) {
		if (sample_sizes[i] > BP_PACK_MAX_SAMPLE)
			return -E2BIG;
		sum += sample_sizes[i];
		if (sum > raw_size)
			return -EINVAL;
	}
	if (sum != raw_size)
		return -EINVAL;
	r = token_block(w, enc, raw_size, sample_sizes, n, &max_id);
	if (r == 0)
		r = block_room(w, enc, raw_size, n);
	if (r == 0)
		r = block_write(w, enc, raw_size, w->sample_count);
	if (r < 0)
		return r;
	if (max_id > w->tok.max_id)
		w->tok.max_id = max_id;

	sum = 0;
	for (size_t i = 0; i < n; i++) {
		bp_pack_sample_entry_encode(sum, sample_sizes[i],
					    w->samples + w->sample_count * BP_PACK_SAMPLE_ENTRY);
		w->sample_count++;
		sum += sample_sizes[i];
		if (sample_sizes[i] > w->max_sample)
			w->max_sample = sample_sizes[i];
	}
	return 0;
}

/*
 * The frames fields of the framed sample just completed: k, k - 1, ..., 1,
 * each in the last u32 of its entry (PACK.md, block table entry).
 */
static void number_frames(bp_pack_writer *w)
{
	uint32_t left = (uint32_t)(w->block_count - w->frame_head);

	for (uint64_t b = w->frame_head; b < w->block_count; b++, left--)
		bp_put_le32(w->blocks + (b + 1) * BP_PACK_BLOCK_ENTRY - 4, left);
}

int bp_pack_writer_add_frame(bp_pack_writer *w, const bp_pack_encoded *enc, uint64_t raw_size,
			     uint64_t sample_size)
{
	bool first = w->frame_owed == 0;
	uint64_t owed = first ? sample_size : w->frame_owed, max_id;
	int r;

	if (w->error)
		return w->error;
	if (sample_size > BP_PACK_MAX_SAMPLE)
		return -E2BIG;
	/* A frame but the last is at least the minimum; a first frame is never the last. */
	if (!enc || raw_size == 0 || raw_size > owed || (first && raw_size == owed) ||
	    (raw_size < owed && raw_size < BP_PACK_MIN_FRAME) ||
	    (!first && sample_size != w->frame_size))
		return -EINVAL;
	r = token_block(w, enc, raw_size, NULL, 0, &max_id);
	if (r == 0)
		r = block_room(w, enc, raw_size, first ? 1 : 0);
	if (r == 0)
		r = block_write(w, enc, raw_size, first ? w->sample_count : w->sample_count - 1);
	if (r < 0)
		return r;
	if (max_id > w->tok.max_id)
		w->tok.max_id = max_id;
	if (first) {
		w->frame_head = w->block_count - 1;
		w->frame_size = sample_size;
		bp_pack_sample_entry_encode(0, sample_size,
					    w->samples + w->sample_count * BP_PACK_SAMPLE_ENTRY);
		w->sample_count++;
		if (sample_size > w->max_sample)
			w->max_sample = sample_size;
	}
	w->frame_owed = owed - raw_size;
	if (w->frame_owed == 0) {
		number_frames(w);
		w->framed = true;
	}
	return 0;
}

/* ---- fields ------------------------------------------------------------- */

/* Room for n more bytes in b. @return 0 or -ENOMEM, b unchanged but its capacity. */
static int wbuf_reserve(wbuf *b, size_t n)
{
	size_t cap = b->cap ? b->cap : 256;
	uint8_t *p;

	if (n <= b->cap - b->len)
		return 0;
	if (n > SIZE_MAX / 2 - b->len)
		return -ENOMEM;
	while (cap - b->len < n)
		cap *= 2;
	p = realloc(b->p, cap);
	if (!p)
		return -ENOMEM;
	b->p = p;
	b->cap = cap;
	return 0;
}

/* Append to a buffer that was reserved for it. */
static void wbuf_put(wbuf *b, const void *data, size_t n)
{
	if (n)
		memcpy(b->p + b->len, data, n);
	b->len += n;
}

static void wbuf_put64(wbuf *b, uint64_t v)
{
	bp_put_le64(b->p + b->len, v);
	b->len += 8;
}

static void wbuf_put32(wbuf *b, uint32_t v)
{
	bp_put_le32(b->p + b->len, v);
	b->len += 4;
}

int bp_pack_writer_set_schema_checked(bp_pack_writer *w, const bp_schema *s, bool keys,
				      bp_pack_fault *fault)
{
	uint64_t sections = 1;
	int r;

	if (!s)
		s = bp_schema_default();
	if (w->error)
		return w->error;
	if (w->block_count || w->schema.count)
		return -EINVAL;
	r = bp_schema_check(s, fault);
	if (r < 0)
		return r;
	r = bp_schema_copy(s, &w->schema);
	if (r < 0)
		return r;
	w->fields = calloc(s->count, sizeof(*w->fields));
	if (!w->fields) {
		bp_schema_clear(&w->schema);
		return -ENOMEM;
	}
	for (uint32_t f = 0; f < s->count; f++) {
		w->schema.fields[f].fixed_size = 0;
		if (s->fields[f].type == BP_FIELD_STR) {
			/* The offsets start at 0; a failure here undoes the whole call. */
			if (wbuf_reserve(&w->fields[f].offs, 8) < 0) {
				for (uint32_t k = 0; k < f; k++)
					free(w->fields[k].offs.p);
				free(w->fields);
				w->fields = NULL;
				bp_schema_clear(&w->schema);
				return -ENOMEM;
			}
			wbuf_put64(&w->fields[f].offs, 0);
		}
		sections += s->fields[f].type != BP_FIELD_BYTES;
	}
	w->keys = keys;
	w->bytes_fields = bp_schema_bytes_fields(s);
	w->section_count = sections + (w->bytes_fields > 1) + (keys ? 4 : 0);
	return 0;
}

int bp_pack_writer_set_schema(bp_pack_writer *w, const bp_schema *s, bool keys)
{
	return bp_pack_writer_set_schema_checked(w, s, keys, NULL);
}

int bp_pack_writer_set_tokens(bp_pack_writer *w, uint32_t width, uint64_t eos)
{
	static bp_field field = { .name = "tokens", .type = BP_FIELD_BYTES };
	static const bp_schema schema = { .count = 1, .fields = &field };
	int r;

	if (!bp_tokens_max_id(width) || (eos != BP_TOKENS_NO_EOS && eos > bp_tokens_max_id(width)))
		return -EINVAL;
	r = bp_pack_writer_set_schema(w, &schema, false);
	if (r < 0)
		return r;
	w->tokens = true;
	w->tok = (bp_tokens){ .width = width, .eos = eos };
	w->section_count++;
	return 0;
}

/* Whether vals and key may be the next sample's fields. @return 0, -EINVAL, -E2BIG. */
static int fields_ok(const bp_pack_writer *w, const bp_field_value *vals, const char *key,
		     size_t key_len)
{
	uint64_t bytes = 0;

	if (!vals || (w->keys ? !key : key != NULL))
		return -EINVAL;
	if (w->field_samples >= BP_PACK_MAX_INDEX / BP_PACK_SAMPLE_ENTRY)
		return -E2BIG;
	if (w->keys) {
		if (key_len == 0 || memchr(key, 0, key_len))
			return -EINVAL;
		if (key_len > BP_KEY_MAX)
			return -E2BIG;
	}
	for (uint32_t f = 0; f < w->schema.count; f++) {
		const bp_field *fd = &w->schema.fields[f];
		const bp_field_value *v = &vals[f];

		if (fd->type == BP_FIELD_BYTES) {
			if (v->size > BP_PACK_MAX_SAMPLE - bytes)
				return -E2BIG;
			bytes += v->size;
		} else if (fd->type == BP_FIELD_STR) {
			if (v->size > BP_STR_MAX)
				return -E2BIG;
			if (v->size && !v->data)
				return -EINVAL;
		} else if (fd->type == BP_FIELD_INT64 && fd->class_count &&
			   (v->i64 < 0 || (uint64_t)v->i64 >= fd->class_count)) {
			return -EINVAL;
		}
	}
	return 0;
}

/* Room in every buffer for one more sample's fields. @return 0 or -ENOMEM. */
static int fields_reserve(bp_pack_writer *w, const bp_field_value *vals, size_t key_len)
{
	int r = wbuf_reserve(&w->sizes, (size_t)w->bytes_fields * 4);

	for (uint32_t f = 0; r == 0 && f < w->schema.count; f++) {
		uint32_t type = w->schema.fields[f].type;

		if (type == BP_FIELD_STR)
			r = wbuf_reserve(&w->fields[f].data, vals[f].size) < 0 ||
					    wbuf_reserve(&w->fields[f].offs, 8) < 0
				    ? -ENOMEM
				    : 0;
		else if (type != BP_FIELD_BYTES)
			r = wbuf_reserve(&w->fields[f].data, bp_field_scalar_size(type));
	}
	if (r == 0 && w->keys)
		r = wbuf_reserve(&w->key_lens, 4) < 0 || wbuf_reserve(&w->key_bytes, key_len) < 0
			    ? -ENOMEM
			    : 0;
	return r;
}

int bp_pack_writer_add_fields(bp_pack_writer *w, const bp_field_value *vals, const char *key,
			      size_t key_len)
{
	int r;

	if (w->error)
		return w->error;
	if (!w->schema.count || w->tokens)
		return -EINVAL;
	r = fields_ok(w, vals, key, key_len);
	if (r == 0)
		r = fields_reserve(w, vals, key_len);
	if (r < 0)
		return r;
	for (uint32_t f = 0; f < w->schema.count; f++) {
		wfield *wf = &w->fields[f];
		float f32;
		uint32_t bits;
		uint64_t bits64;

		switch (w->schema.fields[f].type) {
		case BP_FIELD_BYTES:
			wbuf_put32(&w->sizes, (uint32_t)vals[f].size);
			break;
		case BP_FIELD_STR:
			wbuf_put(&wf->data, vals[f].data, vals[f].size);
			wbuf_put64(&wf->offs, wf->data.len);
			break;
		case BP_FIELD_INT64:
			wbuf_put64(&wf->data, (uint64_t)vals[f].i64);
			break;
		case BP_FIELD_FLOAT32:
			f32 = (float)vals[f].f64;
			memcpy(&bits, &f32, sizeof(bits));
			wbuf_put32(&wf->data, bits);
			break;
		default:
			memcpy(&bits64, &vals[f].f64, sizeof(bits64));
			wbuf_put64(&wf->data, bits64);
		}
	}
	if (w->keys) {
		wbuf_put32(&w->key_lens, (uint32_t)key_len);
		wbuf_put(&w->key_bytes, key, key_len);
	}
	w->field_samples++;
	return 0;
}

int bp_pack_writer_duplicate_key(const bp_pack_writer *w, const char **ret_key, size_t *ret_len)
{
	if (!w->dup)
		return -ENOENT;
	*ret_key = (const char *)w->key_bytes.p + w->dup_key;
	*ret_len = (size_t)w->dup_len;
	return 0;
}

uint64_t bp_pack_writer_owed(const bp_pack_writer *w)
{
	return w->frame_owed;
}

uint64_t bp_pack_writer_offset(const bp_pack_writer *w)
{
	return w->offset;
}

uint64_t bp_pack_writer_samples(const bp_pack_writer *w)
{
	return w->sample_count;
}

/* ---- sections at finish ----------------------------------------------------- */

/* A key's hash and its sample, as KEY_HASH sorts them. */
typedef struct key_entry {
	uint64_t hash, id;
} key_entry;

static int entry_cmp(const void *a, const void *b)
{
	const key_entry *x = a, *y = b;

	if (x->hash != y->hash)
		return x->hash < y->hash ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

/*
 * Every sample has its fields, its bytes fields add up to its size, and
 * each bytes field's fixed size (into the schema).
 * @return 0 or -EINVAL.
 */
static int check_fields(bp_pack_writer *w)
{
	uint32_t nb = w->bytes_fields;

	if (w->field_samples != w->sample_count)
		return -EINVAL;
	for (uint64_t id = 0; id < w->sample_count; id++) {
		uint64_t sum = 0;

		/* Without bytes fields there is no row (and no buffer): every sample is empty. */
		for (uint32_t k = 0; k < nb; k++)
			sum += bp_le32(w->sizes.p + (id * nb + k) * 4);
		if (sum != bp_le64(w->samples + id * BP_PACK_SAMPLE_ENTRY + 8))
			return -EINVAL;
	}
	for (uint32_t f = 0, k = 0; f < w->schema.count; f++) {
		uint64_t first;

		if (w->schema.fields[f].type != BP_FIELD_BYTES)
			continue;
		first = bp_le32(w->sizes.p + k * 4);
		for (uint64_t id = 1; id < w->sample_count && first; id++)
			if (bp_le32(w->sizes.p + (id * nb + k) * 4) != first)
				first = 0;
		w->schema.fields[f].fixed_size = first;
		k++;
	}
	return 0;
}

/*
 * The KEY_HASH table, sorted, encoded in place; two samples with one key
 * make it -EEXIST (the key noted for bp_pack_writer_duplicate_key).
 * @return 0, -EEXIST or -ENOMEM; *ret is the table (caller frees).
 */
static int key_table(bp_pack_writer *w, key_entry **ret)
{
	uint64_t n = w->sample_count, *offs = malloc((n + 1) * sizeof(*offs));
	key_entry *e = malloc(n * sizeof(*e));
	int r = 0;

	if (!offs || !e) {
		free(offs);
		free(e);
		return -ENOMEM;
	}
	offs[0] = 0;
	for (uint64_t id = 0; id < n; id++) {
		uint32_t len = bp_le32(w->key_lens.p + id * 4);

		offs[id + 1] = offs[id] + len;
		e[id] = (key_entry){ XXH3_64bits(w->key_bytes.p + offs[id], len), id };
	}
	qsort(e, n, sizeof(*e), entry_cmp);
	for (uint64_t i = 1; i < n && r == 0; i++) {
		uint64_t a = e[i - 1].id, b = e[i].id;
		uint64_t la = offs[a + 1] - offs[a], lb = offs[b + 1] - offs[b];

		if (e[i].hash == e[i - 1].hash && la == lb &&
		    memcmp(w->key_bytes.p + offs[a], w->key_bytes.p + offs[b], la) == 0) {
			w->dup = true;
			w->dup_key = offs[a];
			w->dup_len = la;
			r = -EEXIST;
		}
	}
	free(offs);
	if (r < 0) {
		free(e);
		return r;
	}
	for (uint64_t i = 0; i < n; i++) {
		key_entry v = e[i];

		bp_put_le64((uint8_t *)&e[i], v.hash);
		bp_put_le64((uint8_t *)&e[i] + 8, v.id);
	}
	*ret = e;
	return 0;
}

/* Write a then b as the next section and list it. @return 0 or -errno (sticky for the caller). */
static int emit(bp_pack_writer *w, uint32_t kind, uint32_t field, const void *a, size_t alen,
		const void *b, size_t blen, bool hashed)
{
	bp_pack_section sec = { .kind = kind, .field = field, .offset = w->offset,
				.size = alen + blen };
	XXH3_state_t st;
	int r;

	if (hashed) {
		XXH3_64bits_reset(&st);
		XXH3_64bits_update(&st, a, alen);
		XXH3_64bits_update(&st, b, blen);
		sec.hash = XXH3_64bits_digest(&st);
	}
	if ((r = bp_write_full(w->fd, a, alen)) < 0 || (r = bp_write_full(w->fd, b, blen)) < 0)
		return r;
	w->offset += sec.size;
	bp_pack_section_entry_encode(&sec, w->sections +
					   w->sections_written++ * BP_PACK_SECTION_ENTRY);
	return 0;
}

/* The key blocks (KEYS) and their directory (KEY_DIR). */
static int write_key_blocks(bp_pack_writer *w, ZSTD_CCtx *cctx)
{
	uint64_t n = w->sample_count, blocks = n / BP_KEYS_PER_BLOCK + (n % BP_KEYS_PER_BLOCK != 0);
	uint64_t start = w->offset, bytes_at = 0;
	uint8_t *dir = malloc(blocks * BP_KEY_DIR_ENTRY), *raw = malloc(BP_KEY_BLOCK_MAX);
	uint8_t *out = malloc(ZSTD_compressBound(BP_KEY_BLOCK_MAX));
	int r = !dir || !raw || !out ? -ENOMEM : 0;

	for (uint64_t b = 0; b < blocks && r == 0; b++) {
		uint64_t first = b * BP_KEYS_PER_BLOCK;
		uint32_t count = (uint32_t)(n - first < BP_KEYS_PER_BLOCK ? n - first
									  : BP_KEYS_PER_BLOCK);
		size_t len = (size_t)count * 4;
		bp_pack_encoded enc;

		memcpy(raw, w->key_lens.p + first * 4, len);
		for (uint32_t i = 0; i < count; i++)
			len += bp_le32(raw + i * 4);
		memcpy(raw + count * 4, w->key_bytes.p + bytes_at, len - count * 4);
		bytes_at += len - count * 4;
		r = bp_pack_block_encode(cctx, NULL, KEYS_LEVEL, raw, len, out,
					 ZSTD_compressBound(BP_KEY_BLOCK_MAX), &enc);
		if (r == 0)
			r = bp_write_full(w->fd, enc.stored, enc.stored_size);
		if (r < 0)
			break;
		bp_pack_key_dir_entry_encode(&(bp_pack_key_block){
						     .offset = w->offset - start,
						     .stored_size = (uint32_t)enc.stored_size,
						     .raw_size = (uint32_t)len,
						     .codec = enc.codec,
						     .count = count,
						     .hash = enc.stored_hash,
					     }, dir + b * BP_KEY_DIR_ENTRY);
		w->offset += enc.stored_size;
	}
	if (r == 0) {
		bp_pack_section sec = { .kind = BP_SECTION_KEYS, .field = BP_SECTION_NO_FIELD,
					.offset = start, .size = w->offset - start };

		bp_pack_section_entry_encode(&sec, w->sections +
						   w->sections_written++ * BP_PACK_SECTION_ENTRY);
		r = emit(w, BP_SECTION_KEY_DIR, BP_SECTION_NO_FIELD, dir, blocks * BP_KEY_DIR_ENTRY,
			 NULL, 0, true);
	}
	free(dir);
	free(raw);
	free(out);
	return r;
}

/* KEY_HASH and KEY_HASH_DIR from the sorted table. */
static int write_key_hash(bp_pack_writer *w, const key_entry *table)
{
	uint64_t n = w->sample_count, pages = n / BP_KEY_HASH_PAGE + (n % BP_KEY_HASH_PAGE != 0);
	uint8_t *dir = malloc(pages * BP_KEY_HASH_DIR_ENTRY);
	const uint8_t *t = (const uint8_t *)table;
	int r;

	if (!dir)
		return -ENOMEM;
	for (uint64_t p = 0; p < pages; p++) {
		uint64_t first = p * BP_KEY_HASH_PAGE;
		uint64_t len = n - first < BP_KEY_HASH_PAGE ? n - first : BP_KEY_HASH_PAGE;

		bp_put_le64(dir + p * BP_KEY_HASH_DIR_ENTRY, bp_le64(t + first * BP_KEY_HASH_ENTRY));
		bp_put_le64(dir + p * BP_KEY_HASH_DIR_ENTRY + 8,
			    XXH3_64bits(t + first * BP_KEY_HASH_ENTRY, len * BP_KEY_HASH_ENTRY));
	}
	r = emit(w, BP_SECTION_KEY_HASH, BP_SECTION_NO_FIELD, t, n * BP_KEY_HASH_ENTRY, NULL, 0,
		 false);
	if (r == 0)
		r = emit(w, BP_SECTION_KEY_HASH_DIR, BP_SECTION_NO_FIELD, dir,
			 pages * BP_KEY_HASH_DIR_ENTRY, NULL, 0, true);
	free(dir);
	return r;
}

/* The schema, columns, str sections and sizes, in table order. */
static int write_field_sections(bp_pack_writer *w)
{
	uint64_t size = bp_schema_encoded_size(&w->schema);
	uint8_t *enc = malloc(size);
	int r;

	if (!enc)
		return -ENOMEM;
	bp_schema_encode(&w->schema, enc);
	r = emit(w, BP_SECTION_SCHEMA, BP_SECTION_NO_FIELD, enc, size, NULL, 0, true);
	free(enc);
	for (uint32_t f = 0; f < w->schema.count && r == 0; f++)
		if (bp_field_scalar_size(w->schema.fields[f].type))
			r = emit(w, BP_SECTION_COLUMN, f, w->fields[f].data.p, w->fields[f].data.len,
				 NULL, 0, true);
	for (uint32_t f = 0; f < w->schema.count && r == 0; f++)
		if (w->schema.fields[f].type == BP_FIELD_STR)
			r = emit(w, BP_SECTION_STR, f, w->fields[f].offs.p, w->fields[f].offs.len,
				 w->fields[f].data.p, w->fields[f].data.len, true);
	if (r == 0 && w->bytes_fields > 1)
		r = emit(w, BP_SECTION_SIZES, BP_SECTION_NO_FIELD, w->sizes.p, w->sizes.len, NULL, 0,
			 true);
	return r;
}

/*
 * A token pack's field: its samples are its one bytes field, so it has a
 * fixed size where they all have one (no sample is empty: token_block).
 */
static int token_fields(bp_pack_writer *w)
{
	uint64_t first = bp_le64(w->samples + 8);

	for (uint64_t id = 1; id < w->sample_count && first; id++)
		if (bp_le64(w->samples + id * BP_PACK_SAMPLE_ENTRY + 8) != first)
			first = 0;
	w->schema.fields[0].fixed_size = first;
	return 0;
}

/* The TOKENS section: the counts from the samples, the largest id seen. */
static int write_tokens(bp_pack_writer *w)
{
	uint8_t enc[BP_TOKENS_SIZE];

	w->tok.tokens = w->raw_bytes / w->tok.width;
	w->tok.documents = w->sample_count;
	bp_tokens_encode(&w->tok, enc);
	return emit(w, BP_SECTION_TOKENS, BP_SECTION_NO_FIELD, enc, sizeof(enc), NULL, 0, true);
}

/*
 * Everything between the last block and the index. The checks come first
 * and write nothing, so their refusals leave the writer as it was.
 */
static int write_sections(bp_pack_writer *w)
{
	key_entry *table = NULL;
	ZSTD_CCtx *cctx = NULL;
	int r = w->tokens ? token_fields(w) : check_fields(w);

	if (r == 0 && w->keys) {
		r = key_table(w, &table);
		cctx = r == 0 ? ZSTD_createCCtx() : NULL;
		if (r == 0 && !cctx)
			r = -ENOMEM;
	}
	if (r < 0) {
		free(table);
		return r;
	}
	w->sections_written = 0;
	r = write_field_sections(w);
	if (r == 0 && w->tokens)
		r = write_tokens(w);
	if (r == 0 && w->keys)
		r = write_key_blocks(w, cctx);
	if (r == 0 && w->keys)
		r = write_key_hash(w, table);
	free(table);
	ZSTD_freeCCtx(cctx);
	return r < 0 ? writer_fail(w, r) : 0;
}

int bp_pack_writer_finish(bp_pack_writer *w, bp_pack_footer *ret_footer)
{
	uint64_t bsize = w->block_count * BP_PACK_BLOCK_ENTRY;
	uint64_t ssize = w->sample_count * BP_PACK_SAMPLE_ENTRY;
	uint64_t tsize = w->section_count * BP_PACK_SECTION_ENTRY;
	uint8_t footer[BP_PACK_FOOTER_SIZE];
	XXH3_state_t st;
	bp_pack_footer f;
	int r;

	if (w->error)
		return w->error;
	if (w->block_count == 0)
		return -ENODATA;
	if (w->frame_owed)
		return -EINVAL;
	if (w->schema.count) {
		r = write_sections(w);
		if (r < 0)
			return r;
	}

	/* The fingerprint hashes the index as written: block, sample and section tables. */
	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, w->blocks, bsize);
	XXH3_64bits_update(&st, w->samples, ssize);
	XXH3_64bits_update(&st, w->sections, tsize);
	f = (bp_pack_footer){
		.index_offset = w->offset,
		.index_size = bsize + ssize + tsize,
		.block_count = w->block_count,
		.sample_count = w->sample_count,
		.raw_bytes = w->raw_bytes,
		.max_sample = w->max_sample,
		.fingerprint = XXH3_64bits_digest(&st),
		.version = w->schema.count ? BP_PACK_VERSION_SECTIONS
			   : w->framed     ? BP_PACK_VERSION_FRAMES
					   : BP_PACK_VERSION,
		.section_count = w->section_count,
	};
	bp_pack_footer_encode(&f, w->header, footer);

	if ((r = bp_write_full(w->fd, w->blocks, bsize)) < 0 ||
	    (r = bp_write_full(w->fd, w->samples, ssize)) < 0 ||
	    (r = bp_write_full(w->fd, w->sections, tsize)) < 0 ||
	    (r = bp_write_full(w->fd, footer, sizeof(footer))) < 0)
		return writer_fail(w, r);
	w->offset += bsize + ssize + tsize + sizeof(footer);
	w->error = -EALREADY;
	if (ret_footer) {
		f.checksum = bp_pack_checksum(w->header, footer);
		*ret_footer = f;
	}
	return 0;
}

void bp_pack_writer_free(bp_pack_writer *w)
{
	if (!w)
		return;
	for (uint32_t f = 0; w->fields && f < w->schema.count; f++) {
		free(w->fields[f].data.p);
		free(w->fields[f].offs.p);
	}
	free(w->fields);
	free(w->sizes.p);
	free(w->key_lens.p);
	free(w->key_bytes.p);
	bp_schema_clear(&w->schema);
	free(w->blocks);
	free(w->samples);
	free(w);
}
