/* SPDX-License-Identifier: MIT */
/*
 * pack-testlib.c - sample generators, shard builders and pack forgery for
 * the pack tests.
 * See pack-testlib.h for why this exists.
 */
#include "pack-testlib.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <check.h>
#include <xxhash.h>
#include <zdict.h>
#include <zstd.h>

#include "pack_writer.h"

uint64_t pt_rand(uint64_t *state)
{
	uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

uint64_t pt_rand_range(uint64_t *state, uint64_t lo, uint64_t hi)
{
	if (hi <= lo)
		return lo;
	return lo + pt_rand(state) % (hi - lo + 1);
}

void pt_fill_random(uint64_t *state, uint8_t *buf, size_t n)
{
	for (size_t i = 0; i < n; i++)
		buf[i] = (uint8_t)(pt_rand(state) >> 56);
}

static void *pt_xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p) {
		fprintf(stderr, "pack-testlib: out of memory (%zu bytes)\n", n);
		abort();
	}
	return p;
}

static const char *const pt_words[] = {
	"the", "loader", "reads", "blocks", "from", "shards", "and", "decodes",
	"samples", "into", "pinned", "buffers", "while", "trainer", "waits",
	"for", "next", "batch", "of", "tensors", "epoch", "seed", "order",
};

void pt_fill_text(uint64_t *state, uint8_t *buf, size_t n)
{
	size_t nwords = sizeof(pt_words) / sizeof(pt_words[0]);
	size_t i = 0;

	while (i < n) {
		const char *w = pt_words[pt_rand(state) % nwords];

		for (size_t j = 0; w[j] && i < n; j++)
			buf[i++] = (uint8_t)w[j];
		if (i < n)
			buf[i++] = ' ';
	}
}

size_t pt_json_record(uint64_t *state, char *buf, size_t cap)
{
	static const char *const tags[] = { "alpha", "beta", "gamma", "delta", "train", "eval" };
	static const char *const names[] = { "ada", "brian", "carol", "dennis", "edsger", "fran" };
	uint64_t r = pt_rand(state);
	int n;

	n = snprintf(buf, cap,
		     "{\"id\":%u,\"user\":\"%s_%u\",\"email\":\"%s%u@example.com\","
		     "\"score\":0.%03u,\"tags\":[\"%s\",\"%s\"],\"active\":%s,\"label\":%u}",
		     (unsigned)(r % 100000), names[(r >> 17) % 6], (unsigned)((r >> 20) % 1000),
		     names[(r >> 30) % 6], (unsigned)((r >> 33) % 1000),
		     (unsigned)((r >> 40) % 1000), tags[(r >> 50) % 6], tags[(r >> 53) % 6],
		     (r >> 56) & 1 ? "true" : "false", (unsigned)((r >> 57) % 10));
	if (n < 0 || (size_t)n >= cap)
		abort();
	return (size_t)n;
}

void pt_samples_sized(pt_samples *s, const uint64_t *sizes, size_t n, uint64_t random_mask,
		      uint64_t seed)
{
	uint64_t st = seed;

	memset(s, 0, sizeof(*s));
	s->n = n;
	s->sizes = pt_xmalloc(n * sizeof(*s->sizes));
	s->offsets = pt_xmalloc(n * sizeof(*s->offsets));
	memcpy(s->sizes, sizes, n * sizeof(*sizes));
	for (size_t i = 0; i < n; i++) {
		s->offsets[i] = s->total;
		s->total += sizes[i];
		if (sizes[i] > s->max_size)
			s->max_size = sizes[i];
	}
	s->data = pt_xmalloc(s->total ? s->total : 1);
	for (size_t i = 0; i < n; i++) {
		if (i < 64 && (random_mask >> i & 1))
			pt_fill_random(&st, s->data + s->offsets[i], sizes[i]);
		else
			pt_fill_text(&st, s->data + s->offsets[i], sizes[i]);
	}
}

void pt_samples_make(pt_samples *s, size_t n, size_t min_size, size_t max_size,
		     enum pt_kind kind, uint64_t seed)
{
	uint64_t st = seed;
	uint64_t cap = 0;

	memset(s, 0, sizeof(*s));
	s->n = n;
	s->sizes = pt_xmalloc(n * sizeof(*s->sizes));
	s->offsets = pt_xmalloc(n * sizeof(*s->offsets));
	/* Sizes first, so the data buffer is allocated once and exactly. */
	for (size_t i = 0; i < n; i++) {
		uint64_t sz = pt_rand_range(&st, min_size, max_size);

		if (kind == PT_MIXED && pt_rand(&st) % 8 == 0)
			sz = 0;
		if (kind == PT_JSON)
			sz = 256; /* upper bound; trimmed below */
		s->sizes[i] = sz;
		cap += sz;
	}
	s->data = pt_xmalloc(cap);
	for (size_t i = 0; i < n; i++) {
		uint8_t *p = s->data + s->total;
		enum pt_kind k = kind;

		if (kind == PT_MIXED)
			k = (enum pt_kind)(pt_rand(&st) % 2 ? PT_RANDOM : PT_TEXT);
		switch (k) {
		case PT_RANDOM:
			pt_fill_random(&st, p, s->sizes[i]);
			break;
		case PT_TEXT:
			pt_fill_text(&st, p, s->sizes[i]);
			break;
		case PT_JSON: {
			char rec[256];
			size_t len = pt_json_record(&st, rec, sizeof(rec));

			memcpy(p, rec, len);
			s->sizes[i] = len;
			break;
		}
		case PT_MIXED:
			abort();
		}
		s->offsets[i] = s->total;
		s->total += s->sizes[i];
		if (s->sizes[i] > s->max_size)
			s->max_size = s->sizes[i];
	}
}

void pt_samples_free(pt_samples *s)
{
	if (!s)
		return;
	free(s->data);
	free(s->sizes);
	free(s->offsets);
	memset(s, 0, sizeof(*s));
}

const uint8_t *pt_sample(const pt_samples *s, size_t i)
{
	return s->data + s->offsets[i];
}

size_t pt_dict_train(void *dict, size_t cap, size_t records, uint64_t seed)
{
	uint64_t st = seed;
	char *buf = pt_xmalloc(records * 256);
	size_t *sizes = pt_xmalloc(records * sizeof(*sizes));
	size_t off = 0, r;

	for (size_t i = 0; i < records; i++) {
		sizes[i] = pt_json_record(&st, buf + off, 256);
		off += sizes[i];
	}
	r = ZDICT_trainFromBuffer(dict, cap, buf, sizes, (unsigned)records);
	free(buf);
	free(sizes);
	if (ZDICT_isError(r)) {
		fprintf(stderr, "pack-testlib: ZDICT_trainFromBuffer: %s\n", ZDICT_getErrorName(r));
		abort();
	}
	return r;
}

/* One block of raw_size bytes at raw, encoded into *out (grown as needed). */
static int encode(ZSTD_CCtx *cctx, const ZSTD_CDict *cdict, int level, const uint8_t *raw,
		  uint64_t raw_size, uint8_t **out, bp_pack_encoded *enc)
{
	size_t cap = ZSTD_compressBound(raw_size);

	free(*out);
	*out = pt_xmalloc(cap);
	return bp_pack_block_encode(cctx, cdict, level, raw, raw_size, *out, cap, enc);
}

/* Sample i (larger than frame_size) as frames of frame_size bytes, the last the rest. */
static int write_frames(bp_pack_writer *w, ZSTD_CCtx *cctx, const ZSTD_CDict *cdict, int level,
			const pt_samples *s, size_t i, uint64_t frame_size, uint8_t **out)
{
	const uint8_t *raw = s->data + s->offsets[i];
	int r = 0;

	for (uint64_t at = 0; r == 0 && at < s->sizes[i]; at += frame_size) {
		uint64_t n = s->sizes[i] - at < frame_size ? s->sizes[i] - at : frame_size;
		bp_pack_encoded enc;

		r = encode(cctx, cdict, level, raw + at, n, out, &enc);
		if (r == 0)
			r = bp_pack_writer_add_frame(w, &enc, n, s->sizes[i]);
	}
	return r;
}

/* Blocks of up to per_block samples, a sample over frame_size (when not 0) framed alone. */
static int write_samples(bp_pack_writer *w, ZSTD_CCtx *cctx, const ZSTD_CDict *cdict,
			 int level, const pt_samples *s, size_t per_block, uint64_t frame_size)
{
	uint8_t *out = NULL;
	int r = 0;

	for (size_t first = 0, n; r == 0 && first < s->n; first += n) {
		uint64_t raw_size = 0;
		bp_pack_encoded enc;

		if (frame_size && s->sizes[first] > frame_size) {
			r = write_frames(w, cctx, cdict, level, s, first, frame_size, &out);
			n = 1;
			continue;
		}
		for (n = 0; n < per_block && first + n < s->n &&
			    !(frame_size && s->sizes[first + n] > frame_size); n++)
			raw_size += s->sizes[first + n];
		r = encode(cctx, cdict, level, s->data + s->offsets[first], raw_size, &out, &enc);
		if (r == 0)
			r = bp_pack_writer_add(w, &enc, raw_size, s->sizes + first, n);
	}
	free(out);
	return r;
}

/* Every sample's fields and key, ahead of the blocks (the writer allows it). */
static int write_fields(bp_pack_writer *w, const pt_samples *s, const pt_fields *fields)
{
	const bp_schema *schema = fields->schema ? fields->schema : bp_schema_default();
	int r;

	if (fields->token_width)
		return bp_pack_writer_set_tokens(w, fields->token_width, fields->token_eos);
	r = bp_pack_writer_set_schema(w, schema, fields->keys != NULL);

	for (size_t i = 0; r == 0 && i < s->n; i++) {
		const char *key = fields->keys ? fields->keys[i] : NULL;

		r = bp_pack_writer_add_fields(w, fields->vals + i * schema->count, key,
					      key ? strlen(key) : 0);
	}
	return r;
}

static int write_pack(int fd, const pt_samples *s, size_t per_block, uint64_t frame_size,
		      const void *dict, size_t dict_size, int level, const pt_fields *fields,
		      bp_pack_footer *ret_footer)
{
	ZSTD_CCtx *cctx = NULL;
	ZSTD_CDict *cdict = NULL;
	bp_pack_writer *w = NULL;
	int r;

	if (per_block == 0)
		return -EINVAL;
	cctx = ZSTD_createCCtx();
	if (!cctx)
		return -ENOMEM;
	if (dict_size > 0) {
		cdict = ZSTD_createCDict(dict, dict_size, level);
		if (!cdict) {
			r = -ENOMEM;
			goto free_cctx;
		}
	}
	r = bp_pack_writer_new(fd, dict_size > 0 ? dict : NULL, dict_size, &w);
	if (r < 0)
		goto free_cdict;
	if (fields)
		r = write_fields(w, s, fields);
	if (r == 0)
		r = write_samples(w, cctx, cdict, level, s, per_block, frame_size);
	if (r == 0)
		r = bp_pack_writer_finish(w, ret_footer);
	bp_pack_writer_free(w);
free_cdict:
	ZSTD_freeCDict(cdict);
free_cctx:
	ZSTD_freeCCtx(cctx);
	return r;
}

int pt_pack_write_framed(int fd, const pt_samples *s, size_t per_block, uint64_t frame_size,
			 const void *dict, size_t dict_size, int level, bp_pack_footer *ret_footer)
{
	return write_pack(fd, s, per_block, frame_size, dict, dict_size, level, NULL, ret_footer);
}

int pt_pack_write_fields(int fd, const pt_samples *s, size_t per_block, uint64_t frame_size,
			 const pt_fields *fields, bp_pack_footer *ret_footer)
{
	return write_pack(fd, s, per_block, frame_size, NULL, 0, 3, fields, ret_footer);
}

int pt_pack_build_fields(const pt_samples *s, size_t per_block, uint64_t frame_size,
			 const pt_fields *fields, uint8_t **ret_buf, size_t *ret_len)
{
	int fd, r;

	fd = memfd_create("bpk-test", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = pt_pack_write_fields(fd, s, per_block, frame_size, fields, NULL);
	if (r == 0)
		r = pt_read_fd(fd, ret_buf, ret_len);
	close(fd);
	return r;
}

/* Where a v3 pack's section table is, from its footer (tests trust their own packs). */
static uint8_t *section_table(uint8_t *buf, size_t len, uint64_t *ret_count)
{
	const uint8_t *ft = buf + len - BP_PACK_FOOTER_SIZE;
	uint64_t tables = pt_le64(ft + FTR_BLOCK_COUNT) * BP_PACK_BLOCK_ENTRY +
			  pt_le64(ft + FTR_SAMPLE_COUNT) * BP_PACK_SAMPLE_ENTRY;

	*ret_count = (pt_le64(ft + FTR_INDEX_SIZE) - tables) / BP_PACK_SECTION_ENTRY;
	return buf + pt_le64(ft + FTR_INDEX_OFFSET) + tables;
}

uint8_t *pt_section(uint8_t *buf, size_t len, uint32_t kind, uint32_t field, uint64_t *ret_size)
{
	uint64_t k;
	uint8_t *t = section_table(buf, len, &k);

	for (uint64_t i = 0; i < k; i++) {
		uint8_t *e = t + i * BP_PACK_SECTION_ENTRY;

		if (pt_le32(e) == kind && (field == BP_SECTION_NO_FIELD || pt_le32(e + 4) == field)) {
			if (ret_size)
				*ret_size = pt_le64(e + 16);
			return buf + pt_le64(e + 8);
		}
	}
	return NULL;
}

/* The key directories' hashes over the bytes they cover. */
static void reseal_keys(uint8_t *buf, size_t len)
{
	uint64_t keys_size, dir_size, hash_size, hdir_size;
	uint8_t *keys = pt_section(buf, len, BP_SECTION_KEYS, BP_SECTION_NO_FIELD, &keys_size);
	uint8_t *dir = pt_section(buf, len, BP_SECTION_KEY_DIR, BP_SECTION_NO_FIELD, &dir_size);
	uint8_t *hash = pt_section(buf, len, BP_SECTION_KEY_HASH, BP_SECTION_NO_FIELD, &hash_size);
	uint8_t *hdir = pt_section(buf, len, BP_SECTION_KEY_HASH_DIR, BP_SECTION_NO_FIELD,
				   &hdir_size);

	if (!keys || !dir || !hash || !hdir)
		return;
	for (uint64_t i = 0; i < dir_size / BP_KEY_DIR_ENTRY; i++) {
		uint8_t *e = dir + i * BP_KEY_DIR_ENTRY;
		uint64_t off = pt_le64(e), n = pt_le32(e + 8);

		if (off <= keys_size && n <= keys_size - off)
			pt_put_le64(e + 24, XXH3_64bits(keys + off, n));
	}
	for (uint64_t p = 0; p < hdir_size / BP_KEY_HASH_DIR_ENTRY; p++) {
		uint64_t first = p * BP_KEY_HASH_PAGE * BP_KEY_HASH_ENTRY;
		uint64_t n = hash_size - first < BP_KEY_HASH_PAGE * BP_KEY_HASH_ENTRY
				     ? hash_size - first
				     : BP_KEY_HASH_PAGE * BP_KEY_HASH_ENTRY;

		pt_put_le64(hdir + p * BP_KEY_HASH_DIR_ENTRY, pt_le64(hash + first));
		pt_put_le64(hdir + p * BP_KEY_HASH_DIR_ENTRY + 8, XXH3_64bits(hash + first, n));
	}
}

void pt_reseal(uint8_t *buf, size_t len, bool keys)
{
	uint8_t *ft = buf + len - BP_PACK_FOOTER_SIZE;
	uint64_t k, index_offset = pt_le64(ft + FTR_INDEX_OFFSET);
	uint8_t *t = section_table(buf, len, &k);

	if (keys)
		reseal_keys(buf, len);
	for (uint64_t i = 0; i < k; i++) {
		uint8_t *e = t + i * BP_PACK_SECTION_ENTRY;
		uint32_t kind = pt_le32(e);
		uint64_t off = pt_le64(e + 8), n = pt_le64(e + 16);

		if (kind != BP_SECTION_KEYS && kind != BP_SECTION_KEY_HASH && off <= len &&
		    n <= len - off)
			pt_put_le64(e + 24, XXH3_64bits(buf + off, n));
	}
	pt_put_le64(ft + FTR_FINGERPRINT, XXH3_64bits(buf + index_offset,
						      pt_le64(ft + FTR_INDEX_SIZE)));
	pt_put_le64(ft + FTR_CHECKSUM, bp_pack_checksum(buf, ft));
}

int pt_pack_write(int fd, const pt_samples *s, size_t per_block, const void *dict,
		  size_t dict_size, int level, bp_pack_footer *ret_footer)
{
	return pt_pack_write_framed(fd, s, per_block, 0, dict, dict_size, level, ret_footer);
}

int pt_read_fd(int fd, uint8_t **ret_buf, size_t *ret_len)
{
	struct stat st;
	uint8_t *buf;
	size_t done = 0;

	if (fstat(fd, &st) < 0)
		return -errno;
	buf = pt_xmalloc((size_t)st.st_size);
	while (done < (size_t)st.st_size) {
		ssize_t n = pread(fd, buf + done, (size_t)st.st_size - done, (off_t)done);

		if (n <= 0) {
			int e = n < 0 ? errno : EIO;

			free(buf);
			return -e;
		}
		done += (size_t)n;
	}
	*ret_buf = buf;
	*ret_len = done;
	return 0;
}

int pt_pack_build(const pt_samples *s, size_t per_block, const void *dict, size_t dict_size,
		  int level, uint8_t **ret_buf, size_t *ret_len)
{
	return pt_pack_build_framed(s, per_block, 0, dict, dict_size, level, ret_buf, ret_len);
}

int pt_pack_build_framed(const pt_samples *s, size_t per_block, uint64_t frame_size,
			 const void *dict, size_t dict_size, int level, uint8_t **ret_buf,
			 size_t *ret_len)
{
	int fd, r;

	fd = memfd_create("bpk-test", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = pt_pack_write_framed(fd, s, per_block, frame_size, dict, dict_size, level, NULL);
	if (r == 0)
		r = pt_read_fd(fd, ret_buf, ret_len);
	close(fd);
	return r;
}

uint32_t pt_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint64_t pt_le64(const uint8_t *p)
{
	return (uint64_t)pt_le32(p) | (uint64_t)pt_le32(p + 4) << 32;
}

void pt_put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

void pt_put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

ZSTD_DCtx *pt_dctx_new(void)
{
	ZSTD_DCtx *d = ZSTD_createDCtx();

	ck_assert_ptr_nonnull(d);
	ck_assert_int_eq(bp_pack_dctx_init(d), 0);
	return d;
}

/* ---- packs taken apart and forged ---------------------------------------------- */

int pt_forge_from(pt_forge *g, const uint8_t *buf, size_t len)
{
	bp_pack_view v;
	int r = bp_pack_parse(buf, len, &v, NULL);

	if (r < 0)
		return r;
	if (v.index.block_count > PT_FORGE_MAX_BLOCKS || v.index.sample_count > PT_FORGE_MAX_SAMPLES)
		return -E2BIG;
	memset(g, 0, sizeof(*g));
	memcpy(g->header, buf, BP_PACK_HEADER_SIZE);
	g->dict_size = v.header.dict_size;
	if (g->dict_size) {
		g->dict = pt_xmalloc(g->dict_size);
		memcpy(g->dict, v.dict, g->dict_size);
	}
	g->nb = v.index.block_count;
	g->ns = v.index.sample_count;
	for (size_t i = 0; i < g->nb; i++) {
		bp_pack_index_block(&v.index, i, &g->blocks[i]);
		g->stored_len[i] = g->blocks[i].stored_size;
		g->stored[i] = pt_xmalloc(g->stored_len[i] ? g->stored_len[i] : 1);
		memcpy(g->stored[i], buf + g->blocks[i].offset, g->stored_len[i]);
	}
	for (size_t i = 0; i < g->ns; i++)
		bp_pack_index_sample_span(&v.index, i, &g->soff[i], &g->ssize[i]);
	g->f.version = v.footer.version;
	pt_forge_layout(g);
	return 0;
}

void pt_forge_free(pt_forge *g)
{
	for (size_t i = 0; i < g->nb; i++)
		free(g->stored[i]);
	free(g->dict);
}

void pt_forge_layout(pt_forge *g)
{
	uint64_t at = BP_PACK_HEADER_SIZE + g->dict_size;

	g->f = (bp_pack_footer){ .block_count = g->nb, .sample_count = g->ns,
				 .version = g->f.version };
	for (size_t i = 0; i < g->nb; i++) {
		bp_pack_block *b = &g->blocks[i];

		at += g->gap[i];
		b->offset = at;
		b->stored_size = g->stored_len[i];
		b->stored_hash = XXH3_64bits(g->stored[i], g->stored_len[i]);
		if (b->codec == BP_CODEC_RAW)
			b->raw_hash = b->stored_hash;
		at += b->stored_size;
		g->f.raw_bytes += b->raw_size;
	}
	g->f.index_offset = at + g->gap[g->nb];
	g->f.index_size = g->nb * BP_PACK_BLOCK_ENTRY + g->ns * BP_PACK_SAMPLE_ENTRY;
	for (size_t i = 0; i < g->ns; i++)
		if (g->ssize[i] > g->f.max_sample)
			g->f.max_sample = g->ssize[i];
}

void pt_forge_set_stored(pt_forge *g, size_t i, const uint8_t *bytes, size_t n, uint32_t codec)
{
	free(g->stored[i]);
	g->stored[i] = pt_xmalloc(n ? n : 1);
	memcpy(g->stored[i], bytes, n);
	g->stored_len[i] = n;
	g->blocks[i].codec = codec;
	pt_forge_layout(g);
}

void pt_forge_seal(const pt_forge *g, uint8_t **ret, size_t *ret_len)
{
	size_t index_size = g->nb * BP_PACK_BLOCK_ENTRY + g->ns * BP_PACK_SAMPLE_ENTRY;
	size_t len = BP_PACK_HEADER_SIZE + g->dict_size + index_size + BP_PACK_FOOTER_SIZE;
	bp_pack_footer f = g->f;
	uint8_t *buf, *p, *index;

	for (size_t i = 0; i < g->nb; i++)
		len += g->gap[i] + g->stored_len[i];
	len += g->gap[g->nb];
	buf = pt_xmalloc(len);
	p = buf;
	memcpy(p, g->header, BP_PACK_HEADER_SIZE);
	p += BP_PACK_HEADER_SIZE;
	if (g->dict_size)
		memcpy(p, g->dict, g->dict_size);
	p += g->dict_size;
	for (size_t i = 0; i <= g->nb; i++) {
		memset(p, 0, g->gap[i]);
		p += g->gap[i];
		if (i == g->nb)
			break;
		memcpy(p, g->stored[i], g->stored_len[i]);
		p += g->stored_len[i];
	}
	index = p;
	for (size_t i = 0; i < g->nb; i++, p += BP_PACK_BLOCK_ENTRY)
		bp_pack_block_entry_encode(&g->blocks[i], p);
	for (size_t i = 0; i < g->ns; i++, p += BP_PACK_SAMPLE_ENTRY)
		bp_pack_sample_entry_encode(g->soff[i], g->ssize[i], p);
	if (g->patch_index)
		g->patch_index(index);
	f.fingerprint = XXH3_64bits(index, index_size);
	bp_pack_footer_encode(&f, g->header, p);
	*ret = buf;
	*ret_len = len;
}

uint64_t pt_forge_hash(const pt_forge *g, uint64_t offset, uint64_t size)
{
	uint8_t *buf;
	size_t len;
	uint64_t h;

	pt_forge_seal(g, &buf, &len);
	if (offset > len || size > len - offset)
		abort();
	h = XXH3_64bits(buf + offset, size);
	free(buf);
	return h;
}

int pt_forge_parse(const pt_forge *g, bp_pack_fault *ret_fault)
{
	bp_pack_fault f = { .what = NULL, .offset = UINT64_MAX, .block = INT64_MIN };
	bp_pack_view v, sentinel;
	uint8_t *buf;
	size_t len;
	int r;

	pt_forge_seal(g, &buf, &len);
	memset(&v, 0x5a, sizeof(v));
	memcpy(&sentinel, &v, sizeof(v));
	r = bp_pack_parse(buf, len, &v, &f);
	if (r < 0) {
		ck_assert_ptr_nonnull(f.what);
		ck_assert_uint_le(f.offset, len);
		ck_assert_int_ge(f.block, -1);
		ck_assert_mem_eq(&v, &sentinel, sizeof(v));
	}
	free(buf);
	if (ret_fault)
		*ret_fault = f;
	return r;
}

void pt_forge_expect_in_entry(const pt_forge *g, const bp_pack_fault *f, size_t k)
{
	uint64_t at = g->f.index_offset + k * BP_PACK_BLOCK_ENTRY;

	ck_assert_msg(f->offset >= at && f->offset < at + BP_PACK_BLOCK_ENTRY,
		      "fault offset %" PRIu64 " not in block entry %zu [%" PRIu64 ", +56)",
		      f->offset, k, at);
}
