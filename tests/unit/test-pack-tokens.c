/* SPDX-License-Identifier: MIT */
/*
 * test-pack-tokens.c - the Check suite for token packs (PACK.md §Token
 * packs) from writer to reader: bp_pack_writer_set_tokens, the TOKENS
 * section as a shard opens, bp_dataset_tokens over shards, and verify.
 *
 * Documents of uint16 and uint32 ids, in blocks of several and framed
 * alone, come back id for id with the counts, width, end-of-document id
 * and largest id the section holds; the writer refuses what would make a
 * pack a reader refuses (an empty document, part of an id, an id beyond
 * int32) and stays as it was; and a reader refuses each rule of the
 * section broken alone, in a shard resealed so that only that rule is
 * wrong. The section's codec on bytes made by hand is test-pack.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <check.h>
#include <xxhash.h>

#include "pack-fields-fixture.h"
#include "pack-testlib.h"
#include "pack.h"
#include "pack_fields.h"
#include "pack_file.h"
#include "pack_writer.h"

/* n documents of 1 .. max_len ids of width bytes below limit, each ending in eos (unless none). */
static void make_docs(pt_samples *s, size_t n, size_t max_len, uint32_t width, uint64_t limit,
		      uint64_t eos, uint64_t seed)
{
	uint64_t state = seed, total = 0;

	memset(s, 0, sizeof(*s));
	s->sizes = calloc(n, sizeof(*s->sizes));
	s->offsets = calloc(n, sizeof(*s->offsets));
	ck_assert(s->sizes && s->offsets);
	for (size_t i = 0; i < n; i++) {
		s->sizes[i] = pt_rand_range(&state, 1, max_len) * width;
		s->offsets[i] = total;
		total += s->sizes[i];
		if (s->sizes[i] > s->max_size)
			s->max_size = s->sizes[i];
	}
	s->data = malloc(total);
	ck_assert_ptr_nonnull(s->data);
	s->n = n;
	s->total = total;
	for (size_t i = 0; i < n; i++) {
		for (uint64_t k = 0; k < s->sizes[i] / width; k++) {
			uint8_t *p = s->data + s->offsets[i] + k * width;
			bool last = k + 1 == s->sizes[i] / width;
			/* Small ids most often, as a tokenizer's are. */
			uint64_t v = last && eos != BP_TOKENS_NO_EOS ? eos
				     : pt_rand(&state) % (pt_rand(&state) % 4 ? 256 : limit);

			if (width == 2)
				p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8);
			else
				pt_put_le32(p, (uint32_t)v);
		}
	}
}

/* The largest id of s. */
static uint64_t docs_max(const pt_samples *s, uint32_t width)
{
	uint64_t max = 0;

	for (uint64_t at = 0; at < s->total; at += width) {
		uint64_t v = width == 2 ? (uint64_t)s->data[at] | (uint64_t)s->data[at + 1] << 8
					: pt_le32(s->data + at);

		max = v > max ? v : max;
	}
	return max;
}

/* s as a token pack in memory: blocks of per_block documents, frames over frame_size. */
static void build(const pt_samples *s, uint32_t width, uint64_t eos, size_t per_block,
		  uint64_t frame_size, uint8_t **buf, size_t *len)
{
	pt_fields f = { .token_width = width, .token_eos = eos };

	ck_assert_int_eq(pt_pack_build_fields(s, per_block, frame_size, &f, buf, len), 0);
}

/* Every document of s as ds gives it, from global id first on. */
static void check_docs(const bp_dataset *ds, const pt_samples *s, uint64_t first)
{
	bp_sample_reader *rd;

	ck_assert_int_eq(bp_sample_reader_new(ds, &rd), 0);
	for (size_t i = 0; i < s->n; i++) {
		const uint8_t *data;
		uint64_t size;

		ck_assert_int_eq(bp_sample_reader_get(rd, first + i, &data, &size, NULL), 0);
		ck_assert_uint_eq(size, s->sizes[i]);
		ck_assert_mem_eq(data, pt_sample(s, i), size);
	}
	bp_sample_reader_free(rd);
}

/* ---- round trips ------------------------------------------------------------------ */

static void roundtrip(uint32_t width, uint64_t eos, size_t n, size_t max_len, size_t per_block,
		      uint64_t frame_size)
{
	uint64_t limit = width == 2 ? 0x10000 : 0x80000000u;
	bp_dataset_fault fault = { 0 };
	const bp_schema *sc;
	bp_dataset *ds;
	pt_samples s;
	bp_tokens t;
	uint8_t *buf;
	size_t len;

	make_docs(&s, n, max_len, width, limit, eos, width * 1000 + n);
	build(&s, width, eos, per_block, frame_size, &buf, &len);
	ck_assert_int_eq(open_bytes(buf, len, &ds, &fault), 0);
	ck_assert_int_eq(bp_dataset_tokens(ds, &t), 0);
	ck_assert_uint_eq(t.width, width);
	ck_assert_uint_eq(t.eos, eos);
	ck_assert_uint_eq(t.documents, n);
	ck_assert_uint_eq(t.tokens, s.total / width);
	ck_assert_uint_eq(t.max_id, docs_max(&s, width));
	sc = bp_dataset_schema(ds);
	ck_assert_uint_eq(sc->count, 1);
	ck_assert_str_eq(sc->fields[0].name, "tokens");
	ck_assert_uint_eq(sc->fields[0].type, BP_FIELD_BYTES);
	ck_assert(!bp_dataset_has_keys(ds));
	ck_assert_uint_eq(bp_dataset_raw_bytes(ds), s.total);
	check_docs(ds, &s, 0);
	ck_assert_int_eq(bp_dataset_verify(ds, NULL, NULL, &fault), 0);
	bp_dataset_close(ds);
	free(buf);
	pt_samples_free(&s);
}

START_TEST(test_roundtrip_uint16)
{
	roundtrip(2, 50256, 300, 200, 1, 0);
	roundtrip(2, 0, 300, 200, 37, 0);
	roundtrip(2, BP_TOKENS_NO_EOS, 1, 1, 1, 0);
	/* Documents over the frame size, framed alone between blocks of several. */
	roundtrip(2, 65535, 40, 20000, 8, 8192);
}
END_TEST

START_TEST(test_roundtrip_uint32)
{
	roundtrip(4, 100000, 300, 200, 1, 0);
	roundtrip(4, BP_TOKENS_NO_EOS, 300, 200, 64, 0);
	roundtrip(4, 0x7fffffff, 40, 9000, 8, 4096);
}
END_TEST

/* Documents all of one length: the field's fixed size, as for any bytes field. */
START_TEST(test_fixed_length)
{
	uint64_t sizes[8];
	bp_dataset *ds;
	pt_samples s;
	uint8_t *buf;
	size_t len;

	make_docs(&s, 8, 1, 4, 1000, 7, 3);
	for (size_t i = 0; i < 8; i++)
		sizes[i] = s.sizes[i];
	ck_assert_uint_eq(sizes[0], 4);
	build(&s, 4, 7, 3, 0, &buf, &len);
	ck_assert_int_eq(open_bytes(buf, len, &ds, NULL), 0);
	ck_assert_uint_eq(bp_dataset_schema(ds)->fields[0].fixed_size, 4);
	bp_dataset_close(ds);
	free(buf);
	pt_samples_free(&s);
}
END_TEST

/* A pack that is not a token pack has none; a field named "tokens" does not make one. */
START_TEST(test_not_tokens)
{
	static bp_field field = { .name = "tokens", .type = BP_FIELD_BYTES };
	static const bp_schema schema = { .count = 1, .fields = &field };
	bp_field_value vals[4] = { { .size = 4 }, { .size = 4 }, { .size = 4 }, { .size = 4 } };
	pt_fields f = { .schema = &schema, .vals = vals };
	bp_dataset *ds;
	pt_samples s;
	bp_tokens t;
	uint8_t *buf;
	size_t len;

	make_docs(&s, 4, 1, 4, 1000, BP_TOKENS_NO_EOS, 4);
	ck_assert_int_eq(pt_pack_build_fields(&s, 2, 0, &f, &buf, &len), 0);
	ck_assert_int_eq(open_bytes(buf, len, &ds, NULL), 0);
	memset(&t, 0x5a, sizeof(t));
	ck_assert_int_eq(bp_dataset_tokens(ds, &t), -ENODATA);
	ck_assert_uint_eq(t.width, 0x5a5a5a5a);
	bp_dataset_close(ds);
	free(buf);
	pt_samples_free(&s);
}
END_TEST

/* ---- the writer -------------------------------------------------------------------- */

/* One raw block of the given bytes as n samples of the given sizes; raw NULL: none given. */
static int add_raw(bp_pack_writer *w, const uint8_t *raw, const uint64_t *sizes, size_t n,
		   bool with_raw)
{
	bp_pack_encoded enc;
	uint64_t total = 0;

	for (size_t i = 0; i < n; i++)
		total += sizes[i];
	enc = (bp_pack_encoded){ .raw = with_raw ? raw : NULL, .stored = raw, .stored_size = total,
				 .codec = BP_CODEC_RAW, .stored_hash = XXH3_64bits(raw, total) };
	enc.raw_hash = enc.stored_hash;
	return bp_pack_writer_add(w, &enc, total, sizes, n);
}

START_TEST(test_writer_setup)
{
	static const uint8_t ids[4] = { 1, 0, 2, 0 };
	uint64_t two = 2;
	int fd;
	bp_pack_writer *w = new_writer(&fd);

	ck_assert_int_eq(bp_pack_writer_set_tokens(w, 3, BP_TOKENS_NO_EOS), -EINVAL);
	ck_assert_int_eq(bp_pack_writer_set_tokens(w, 8, BP_TOKENS_NO_EOS), -EINVAL);
	ck_assert_int_eq(bp_pack_writer_set_tokens(w, 2, 0x10000), -EINVAL);
	ck_assert_int_eq(bp_pack_writer_set_tokens(w, 4, 0x80000000u), -EINVAL);
	ck_assert_int_eq(bp_pack_writer_set_tokens(w, 2, 0xffff), 0);
	ck_assert_int_eq(bp_pack_writer_set_tokens(w, 2, 0xffff), -EINVAL);
	ck_assert_int_eq(bp_pack_writer_set_schema(w, NULL, false), -EINVAL);
	/* A token pack's samples take no fields. */
	ck_assert_int_eq(bp_pack_writer_add_fields(w, &(bp_field_value){ .size = 2 }, NULL, 0),
			 -EINVAL);
	ck_assert_int_eq(add_raw(w, ids, &two, 1, true), 0);
	bp_pack_writer_free(w);
	close(fd);

	/* After a block, or beside a schema, it is too late. */
	w = new_writer(&fd);
	ck_assert_int_eq(add_raw(w, ids, &two, 1, true), 0);
	ck_assert_int_eq(bp_pack_writer_set_tokens(w, 2, 0), -EINVAL);
	bp_pack_writer_free(w);
	close(fd);
	w = new_writer(&fd);
	ck_assert_int_eq(bp_pack_writer_set_schema(w, NULL, false), 0);
	ck_assert_int_eq(bp_pack_writer_set_tokens(w, 2, 0), -EINVAL);
	bp_pack_writer_free(w);
	close(fd);
}
END_TEST

/* What would make a pack readers refuse is refused, and leaves the writer as it was. */
START_TEST(test_writer_refusals)
{
	uint8_t ids[16] = { 1, 0, 0, 0, 2, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0x80 };
	uint64_t sizes[3] = { 4, 0, 4 }, odd[2] = { 6, 2 }, big[2] = { 12, 4 };
	bp_pack_footer f;
	bp_dataset *ds;
	bp_tokens t;
	uint8_t *buf;
	size_t len;
	int fd;
	bp_pack_writer *w = new_writer(&fd);

	ck_assert_int_eq(bp_pack_writer_set_tokens(w, 4, 3), 0);
	ck_assert_int_eq(add_raw(w, ids, sizes, 3, true), -EINVAL);    /* an empty document */
	ck_assert_int_eq(add_raw(w, ids, odd, 2, true), -EINVAL);      /* half an id */
	ck_assert_int_eq(add_raw(w, ids, sizes, 1, false), -EINVAL);   /* no raw bytes to read */
	ck_assert_int_eq(add_raw(w, ids, big, 2, true), -ERANGE);      /* 0x80000000 */
	ck_assert_uint_eq(bp_pack_writer_samples(w), 0);
	ck_assert_uint_eq(bp_pack_writer_offset(w), BP_PACK_HEADER_SIZE);
	/* 0x7fffffff is int32's largest: in. */
	ck_assert_int_eq(add_raw(w, ids, big, 1, true), 0);
	ck_assert_int_eq(bp_pack_writer_finish(w, &f), 0);
	ck_assert_int_eq(pt_read_fd(fd, &buf, &len), 0);
	ck_assert_int_eq(open_bytes(buf, len, &ds, NULL), 0);
	ck_assert_int_eq(bp_dataset_tokens(ds, &t), 0);
	ck_assert_uint_eq(t.max_id, 0x7fffffff);
	ck_assert_uint_eq(t.tokens, 3);
	ck_assert_uint_eq(t.documents, 1);
	ck_assert_uint_eq(t.eos, 3);
	bp_dataset_close(ds);
	free(buf);
	bp_pack_writer_free(w);
	close(fd);
}
END_TEST

/* A frame holds whole ids too. */
START_TEST(test_writer_frames)
{
	static uint8_t raw[3 * BP_PACK_MIN_FRAME];
	bp_pack_encoded enc;
	int fd;
	bp_pack_writer *w = new_writer(&fd);

	ck_assert_int_eq(bp_pack_writer_set_tokens(w, 4, BP_TOKENS_NO_EOS), 0);
	enc = (bp_pack_encoded){ .raw = raw, .stored = raw, .stored_size = BP_PACK_MIN_FRAME + 2,
				 .codec = BP_CODEC_RAW };
	enc.stored_hash = enc.raw_hash = XXH3_64bits(raw, enc.stored_size);
	ck_assert_int_eq(bp_pack_writer_add_frame(w, &enc, enc.stored_size, sizeof(raw)), -EINVAL);
	enc.stored_size = BP_PACK_MIN_FRAME;
	enc.stored_hash = enc.raw_hash = XXH3_64bits(raw, enc.stored_size);
	ck_assert_int_eq(bp_pack_writer_add_frame(w, &enc, enc.stored_size, sizeof(raw)), 0);
	bp_pack_writer_free(w);
	close(fd);
}
END_TEST

/* ---- what a reader refuses ---------------------------------------------------------- */

/* A good uint16 pack of 20 documents in blocks of 4, with eos 9. */
static void good_pack(pt_samples *s, uint8_t **buf, size_t *len)
{
	make_docs(s, 20, 30, 2, 5000, 9, 77);
	build(s, 2, 9, 4, 0, buf, len);
}

/* buf (len) opened: the result, and with a fault its reason. */
static int open_fault(const uint8_t *buf, size_t len, const char **ret_what)
{
	bp_dataset_fault fault = { 0 };
	bp_dataset *ds;
	int r = open_bytes(buf, len, &ds, &fault);

	*ret_what = fault.pack.what;
	if (r == 0)
		bp_dataset_close(ds);
	return r;
}

/* Each rule of PACK.md §Token packs broken alone in a resealed shard. */
START_TEST(test_reader_rules)
{
	static const struct {
		size_t at, bytes;  /* a field of the TOKENS section */
		uint64_t value;
		const char *what;
	} cases[] = {
		/* The codec's own rules (test-pack.c has them all): one, as the open says it. */
		{ 32, 8, 0x10000, "largest token id beyond its width's ids" },
		/* The rules against the rest of the shard. */
		{ 24, 8, 19, "token pack's document count is not its sample count" },
		{ 24, 8, 21, "token pack's document count is not its sample count" },
		{ 16, 8, 0, "token count does not match the documents' bytes" },
	};
	pt_samples s;
	uint8_t *good, *buf, *sec;
	uint64_t size, tokens;
	const char *what;
	size_t len;

	good_pack(&s, &good, &len);
	buf = malloc(len);
	ck_assert_ptr_nonnull(buf);
	ck_assert_int_eq(open_fault(good, len, &what), 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		memcpy(buf, good, len);
		sec = pt_section(buf, len, BP_SECTION_TOKENS, BP_SECTION_NO_FIELD, &size);
		ck_assert_ptr_nonnull(sec);
		ck_assert_uint_eq(size, BP_TOKENS_SIZE);
		if (cases[i].bytes == 4)
			pt_put_le32(sec + cases[i].at, (uint32_t)cases[i].value);
		else
			pt_put_le64(sec + cases[i].at, cases[i].value);
		pt_reseal(buf, len, false);
		ck_assert_int_eq(open_fault(buf, len, &what), -EBADMSG);
		ck_assert_str_eq(what, cases[i].what);
	}

	/* Width 4 over documents of an odd count of uint16 ids: part of an id. */
	memcpy(buf, good, len);
	sec = pt_section(buf, len, BP_SECTION_TOKENS, BP_SECTION_NO_FIELD, NULL);
	tokens = pt_le64(sec + 16);
	pt_put_le32(sec + 4, 4);
	pt_put_le64(sec + 16, tokens / 2);
	pt_reseal(buf, len, false);
	ck_assert_int_eq(open_fault(buf, len, &what), -EBADMSG);
	ck_assert_str_eq(what, "token pack's document is not whole token ids");

	/* The schema's field renamed: a token pack's is "tokens". */
	memcpy(buf, good, len);
	sec = pt_section(buf, len, BP_SECTION_SCHEMA, BP_SECTION_NO_FIELD, &size);
	ck_assert_mem_eq(sec + size - 6, "tokens", 6);
	sec[size - 1] = 'z';
	pt_reseal(buf, len, false);
	ck_assert_int_eq(open_fault(buf, len, &what), -EBADMSG);
	ck_assert_str_eq(what, "token pack's schema is not one bytes field \"tokens\"");

	/* A byte of the section flipped without resealing: its hash. */
	memcpy(buf, good, len);
	sec = pt_section(buf, len, BP_SECTION_TOKENS, BP_SECTION_NO_FIELD, NULL);
	sec[33] ^= 1;
	ck_assert_int_eq(open_fault(buf, len, &what), -EBADMSG);
	ck_assert_str_eq(what, "section checksum mismatch");
	free(buf);
	free(good);
	pt_samples_free(&s);
}
END_TEST

/*
 * An empty document, forged: documents 0 and 1 of block 0 made one (the
 * first of 0 bytes, the second both), which keeps the samples tiling their
 * block and the token count, so only the token rule is broken.
 */
START_TEST(test_reader_empty_document)
{
	uint8_t *buf, *ft, *table;
	pt_samples s;
	const char *what;
	uint64_t a, b, max = 0;
	size_t len;

	good_pack(&s, &buf, &len);
	ft = buf + len - BP_PACK_FOOTER_SIZE;
	table = buf + pt_le64(ft) + pt_le64(ft + 16) * BP_PACK_BLOCK_ENTRY;
	a = pt_le64(table + 8);
	b = pt_le64(table + BP_PACK_SAMPLE_ENTRY + 8);
	pt_put_le64(table + 8, 0);
	pt_put_le64(table + BP_PACK_SAMPLE_ENTRY, 0);
	pt_put_le64(table + BP_PACK_SAMPLE_ENTRY + 8, a + b);
	for (size_t i = 0; i < s.n; i++)
		max = pt_le64(table + i * BP_PACK_SAMPLE_ENTRY + 8) > max
			      ? pt_le64(table + i * BP_PACK_SAMPLE_ENTRY + 8) : max;
	pt_put_le64(ft + 40, max);
	pt_reseal(buf, len, false);
	ck_assert_int_eq(open_fault(buf, len, &what), -EBADMSG);
	ck_assert_str_eq(what, "token pack's document is empty");
	free(buf);
	pt_samples_free(&s);
}
END_TEST

/* ---- datasets of several shards ------------------------------------------------------ */

/* Two shards of (width, eos) each: the open's result and fault. */
static int open_two(uint32_t wa, uint64_t ea, uint32_t wb, uint64_t eb, bp_tokens *ret,
		    const char **ret_what, uint64_t *ret_max)
{
	bp_dataset_fault fault = { 0 };
	pt_samples s[2];
	uint8_t *bufs[2];
	size_t lens[2];
	bp_dataset *ds;
	char dir[64];
	int r;

	make_docs(&s[0], 30, 50, wa, 3000, ea, 1);
	make_docs(&s[1], 45, 50, wb, 60000, eb, 2);
	build(&s[0], wa, ea, 5, 0, &bufs[0], &lens[0]);
	build(&s[1], wb, eb, 1, 0, &bufs[1], &lens[1]);
	*ret_max = docs_max(&s[0], wa) > docs_max(&s[1], wb) ? docs_max(&s[0], wa)
							     : docs_max(&s[1], wb);
	write_dir(dir, bufs, lens, 2);
	r = bp_dataset_openat(AT_FDCWD, dir, &ds, &fault);
	*ret_what = fault.pack.what;
	if (r == 0) {
		ck_assert_int_eq(bp_dataset_tokens(ds, ret), 0);
		check_docs(ds, &s[0], 0);
		check_docs(ds, &s[1], 30);
		ck_assert_int_eq(bp_dataset_verify(ds, NULL, NULL, &fault), 0);
		ck_assert_uint_eq(ret->tokens, (s[0].total + s[1].total) / wa);
		bp_dataset_close(ds);
	} else {
		ck_assert_str_eq(fault.shard, "001.bpk");
	}
	remove_dir(dir, 2);
	for (size_t i = 0; i < 2; i++) {
		free(bufs[i]);
		pt_samples_free(&s[i]);
	}
	return r;
}

START_TEST(test_multi_shard)
{
	const char *what;
	uint64_t max;
	bp_tokens t;

	ck_assert_int_eq(open_two(2, 0, 2, 0, &t, &what, &max), 0);
	ck_assert_uint_eq(t.width, 2);
	ck_assert_uint_eq(t.eos, 0);
	ck_assert_uint_eq(t.documents, 75);
	ck_assert_uint_eq(t.max_id, max);
	ck_assert_int_eq(open_two(4, BP_TOKENS_NO_EOS, 4, BP_TOKENS_NO_EOS, &t, &what, &max), 0);
	ck_assert_uint_eq(t.eos, BP_TOKENS_NO_EOS);
	ck_assert_uint_eq(t.max_id, max);

	ck_assert_int_eq(open_two(2, 0, 4, 0, &t, &what, &max), -EBADMSG);
	ck_assert_str_eq(what, "shards' token widths differ");
	ck_assert_int_eq(open_two(2, 0, 2, 1, &t, &what, &max), -EBADMSG);
	ck_assert_str_eq(what, "shards' end-of-document ids differ");
	ck_assert_int_eq(open_two(2, 0, 2, BP_TOKENS_NO_EOS, &t, &what, &max), -EBADMSG);
	ck_assert_str_eq(what, "shards' end-of-document ids differ");
}
END_TEST

/* A token shard beside a plain one with the same schema: no dataset. */
START_TEST(test_multi_shard_mixed)
{
	static bp_field field = { .name = "tokens", .type = BP_FIELD_BYTES };
	static const bp_schema schema = { .count = 1, .fields = &field };
	bp_dataset_fault fault = { 0 };
	bp_field_value vals[10];
	pt_fields plain = { .schema = &schema, .vals = vals };
	pt_samples s;
	uint8_t *bufs[2];
	size_t lens[2];
	bp_dataset *ds;
	char dir[64];

	make_docs(&s, 10, 5, 2, 100, 1, 5);
	for (size_t i = 0; i < 10; i++)
		vals[i] = (bp_field_value){ .size = s.sizes[i] };
	build(&s, 2, 1, 2, 0, &bufs[0], &lens[0]);
	ck_assert_int_eq(pt_pack_build_fields(&s, 2, 0, &plain, &bufs[1], &lens[1]), 0);
	write_dir(dir, bufs, lens, 2);
	ck_assert_int_eq(bp_dataset_openat(AT_FDCWD, dir, &ds, &fault), -EBADMSG);
	ck_assert_str_eq(fault.pack.what, "shards mix token packs and other packs");
	ck_assert_str_eq(fault.shard, "001.bpk");
	remove_dir(dir, 2);
	free(bufs[0]);
	free(bufs[1]);
	pt_samples_free(&s);
}
END_TEST

/* ---- verify -------------------------------------------------------------------------- */

/* A largest id that is not the documents' opens (it is within its width) and fails verify. */
START_TEST(test_verify_max_id)
{
	bp_dataset_fault fault = { 0 };
	uint8_t *buf, *sec;
	bp_dataset *ds;
	pt_samples s;
	size_t len;
	uint64_t max;

	good_pack(&s, &buf, &len);
	sec = pt_section(buf, len, BP_SECTION_TOKENS, BP_SECTION_NO_FIELD, NULL);
	max = pt_le64(sec + 32);
	ck_assert_uint_eq(max, docs_max(&s, 2));
	for (int d = -1; d <= 1; d += 2) {
		pt_put_le64(sec + 32, max + (uint64_t)d);
		pt_reseal(buf, len, false);
		ck_assert_int_eq(open_bytes(buf, len, &ds, &fault), 0);
		ck_assert_int_eq(bp_dataset_verify(ds, NULL, NULL, &fault), -EBADMSG);
		ck_assert_str_eq(fault.pack.what,
				 "tokens section's largest id is not the documents' largest");
		ck_assert_uint_eq(fault.pack.offset, (uint64_t)(sec - buf) + 32);
		bp_dataset_close(ds);
	}
	free(buf);
	pt_samples_free(&s);
}
END_TEST

static Suite *tokens_suite(void)
{
	Suite *s = suite_create("pack-tokens");
	TCase *tc;

	tc = tcase_create("roundtrip");
	tcase_add_test(tc, test_roundtrip_uint16);
	tcase_add_test(tc, test_roundtrip_uint32);
	tcase_add_test(tc, test_fixed_length);
	tcase_add_test(tc, test_not_tokens);
	suite_add_tcase(s, tc);

	tc = tcase_create("writer");
	tcase_add_test(tc, test_writer_setup);
	tcase_add_test(tc, test_writer_refusals);
	tcase_add_test(tc, test_writer_frames);
	suite_add_tcase(s, tc);

	tc = tcase_create("reader");
	tcase_add_test(tc, test_reader_rules);
	tcase_add_test(tc, test_reader_empty_document);
	suite_add_tcase(s, tc);

	tc = tcase_create("datasets");
	tcase_add_test(tc, test_multi_shard);
	tcase_add_test(tc, test_multi_shard_mixed);
	tcase_add_test(tc, test_verify_max_id);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr;
	int failed;

	sr = srunner_create(tokens_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
