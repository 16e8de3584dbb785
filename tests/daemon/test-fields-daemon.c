/* SPDX-License-Identifier: MIT */
/*
 * test-fields-daemon.c - samples with fields, end to end: packs written
 * here with a schema and keys, a real batchd on a temporary socket, and
 * libbatchclient reading what the daemon staged.
 *
 * The pack's samples hold two bytes fields (an image, among them some
 * large enough to be stored as frames, and a mask, empty for some
 * samples), an int64 label with class names, a float32 score, a str
 * caption (empty for some) and a key, every value a function of the
 * sample's id, so a delivered batch is checked field by field against
 * what was written. Two shuffled epochs at world 1 and 3 must deliver
 * every sample exactly once per epoch across the ranks, with every field
 * equal; a selection of a subset carries only what it names, and one of
 * scalars and text reads no block at all (the pipeline's counters say
 * so); an unknown field is refused with the dataset's fields listed, keys
 * of a pack without them with -ENODATA; a damaged key block fails the
 * batches that need it, with the reason, and the stream goes on past
 * them (a stream without keys does not notice); a pack from before fields reads
 * byte for byte as before, as one bytes field "data". The OPEN field list
 * is attacked at the protocol level (every rule of PROTOCOL.md's OPEN
 * flags), and the client's distrust of the schema in the data memfd with
 * a fake daemon that serves a READY whose schema is damaged.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <check.h>
#include <json-c/json.h>
#include <zstd.h>

#include "batchd-build.h"
#include "daemon-testlib.h"
#include "pack.h"
#include "pack_fields.h"
#include "pack_writer.h"
#include "protocol.h"
#include "ring.h"

static dt_daemon D;

#define expect dt_expect

#define FIELDS_DSET "fields.bpk"
#define NOKEYS_DSET "nokeys.bpk"
#define N_SAMPLES 600u            /* divides by world 3 and batch 8: no wrapped tail */
#define NOKEYS_SAMPLES 40u
#define PER_BLOCK 8u
#define FRAME 4096u               /* BP_PACK_MIN_FRAME: large images become frames */
#define FIELD_COUNT 5u

enum { F_IMG, F_MASK, F_LABEL, F_SCORE, F_CAPTION };

/* ---- the samples: every value a function of the id ---------------------------------- */

static size_t img_size(uint64_t id)
{
	return id % 97 == 5 ? 3 * FRAME + id : (size_t)((id * 7) % 300);
}

static size_t mask_size(uint64_t id)
{
	return id % 5 == 0 ? 0 : 16;
}

static uint8_t img_byte(uint64_t id, size_t j)
{
	return (uint8_t)(id * 31 + j * 7 + 1);
}

static uint8_t mask_byte(uint64_t id, size_t j)
{
	return (uint8_t)(0xa0 ^ id ^ (j * 13));
}

static int64_t label_of(uint64_t id)
{
	return (int64_t)(id % 3);
}

static float score_of(uint64_t id)
{
	return (float)id * 0.25f - 7.0f;
}

static size_t caption_of(uint64_t id, char *buf, size_t len)
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

/* Bytes a key is padded with: 0 but for the long-keys pack. */
static size_t key_pad;
#define KEY_BUF (BP_KEY_MAX + 1)

static size_t key_of(uint64_t id, char *buf, size_t len)
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

static bp_field schema_fields[FIELD_COUNT] = {
	{ .name = "img", .type = BP_FIELD_BYTES },
	{ .name = "mask", .type = BP_FIELD_BYTES },
	{ .name = "label", .type = BP_FIELD_INT64, .class_count = 3, .classes = class_names },
	{ .name = "score", .type = BP_FIELD_FLOAT32 },
	{ .name = "caption", .type = BP_FIELD_STR },
};

static const bp_schema pack_schema = { .count = FIELD_COUNT, .fields = schema_fields };

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

/* Write samples [0, n) with the test schema (and keys) to root/name. */
static void write_fields_pack(const char *name, uint64_t n, bool keys)
{
	char path[PATH_MAX];
	uint8_t *block = malloc(PER_BLOCK * 4096), *big = malloc(8 * FRAME);
	uint64_t sizes[PER_BLOCK];
	size_t used = 0, in_block = 0;
	ZSTD_CCtx *cctx = ZSTD_createCCtx();
	bp_pack_writer *w = NULL;
	int fd;

	ck_assert(block && big && cctx);
	dt_root_path(&D, name, path, sizeof(path));
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

static void setup(void)
{
	dt_setup_dir();
	write_fields_pack(FIELDS_DSET, N_SAMPLES, true);
	write_fields_pack(NOKEYS_DSET, NOKEYS_SAMPLES, false);
	ck_assert_msg(dt_daemon_start(&D) == 0, "batchd did not start");
}

#if BATCHD_FAULT_INJECTION
/* setup, with sessions that read keys as batches need them (no key table: fault.h). */
static void setup_key_reader(void)
{
	static const char *const env[] = { "BATCHD_FAULTS=keys:no_table", NULL };

	dt_setup_dir();
	write_fields_pack(FIELDS_DSET, N_SAMPLES, true);
	D.env = env;
	ck_assert_msg(dt_daemon_start(&D) == 0, "batchd did not start");
}
#endif

/* ---- checking a batch ---------------------------------------------------------------- */

/* The selection a stream was opened with: bit f = field f; keys. */
typedef struct want {
	uint32_t mask;
	bool keys;
} want;

/* Expected value of field f of sample id into buf (at most cap bytes). @return its size. */
static size_t expected(uint32_t f, uint64_t id, uint8_t *buf, size_t cap)
{
	int64_t l;
	float x;

	switch (f) {
	case F_IMG:
		for (size_t j = 0; j < img_size(id); j++)
			buf[j] = img_byte(id, j);
		return img_size(id);
	case F_MASK:
		for (size_t j = 0; j < mask_size(id); j++)
			buf[j] = mask_byte(id, j);
		return mask_size(id);
	case F_LABEL:
		l = label_of(id);
		memcpy(buf, &l, sizeof(l));
		return sizeof(l);
	case F_SCORE:
		x = score_of(id);
		memcpy(buf, &x, sizeof(x));
		return sizeof(x);
	default:
		return caption_of(id, (char *)buf, cap);
	}
}

/* The first selected bytes field: what bc_batch_sample and bc_batch_data give. */
static int lead_of(uint32_t mask)
{
	return mask & (1u << F_IMG) ? F_IMG : mask & (1u << F_MASK) ? F_MASK : -1;
}

/* Field f of b: every sample's value equal, and the region its values end to end. */
static void check_field(const bc_batch *b, uint32_t f, bool selected)
{
	static uint8_t want_buf[8 * FRAME];
	const uint8_t *region, *p;
	size_t rlen, len, at = 0, n;
	uint32_t count = bc_batch_count(b);

	if (!selected) {
		expect(bc_batch_field(b, f, (const void **)&region, &rlen) == -ENODATA,
		       "field %u not selected, yet bc_batch_field gives it", f);
		expect(bc_batch_field_sample(b, f, 0, (const void **)&p, &len) == -ENODATA,
		       "field %u not selected, yet bc_batch_field_sample gives it", f);
		return;
	}
	expect(bc_batch_field(b, f, (const void **)&region, &rlen) == 0, "field %u: no region", f);
	for (uint32_t i = 0; i < count; i++) {
		uint64_t id = bc_batch_sample_id(b, i);

		n = expected(f, id, want_buf, sizeof(want_buf));
		expect(bc_batch_field_sample(b, f, i, (const void **)&p, &len) == 0,
		       "field %u sample %u: no value", f, i);
		expect(len == n && memcmp(p, want_buf, n) == 0,
		       "field %u of sample %" PRIu64 ": %zu bytes, want %zu, or different bytes",
		       f, id, len, n);
		expect(p == region + at, "field %u: sample %u is not where its region has it", f, i);
		at += len;
	}
	expect(at == rlen, "field %u: region of %zu bytes, values of %zu", f, rlen, at);
	expect(bc_batch_field_sample(b, f, count, (const void **)&p, &len) == -ERANGE,
	       "field %u: sample past the batch not refused", f);
}

/* Every field of b as w selected it, the keys, and the old accessors on the lead. */
static void check_batch(const bc_batch *b, want w)
{
	uint32_t count = bc_batch_count(b);
	int lead = lead_of(w.mask);
	const void *data, *p;
	size_t len, dlen;

	for (uint32_t f = 0; f < FIELD_COUNT; f++)
		check_field(b, f, (w.mask >> f) & 1);
	expect(bc_batch_field(b, FIELD_COUNT, &p, &len) == -ERANGE, "field past the schema given");
	data = bc_batch_data(b, &dlen);
	if (lead >= 0) {
		expect(bc_batch_field(b, (uint32_t)lead, &p, &len) == 0 && p == data && len == dlen,
		       "bc_batch_data is not the first selected bytes field");
	} else {
		expect(dlen == 0, "bc_batch_data has %zu bytes with no bytes field selected", dlen);
	}
	for (uint32_t i = 0; i < count; i++) {
		uint64_t id = bc_batch_sample_id(b, i);
		char kwant[KEY_BUF];
		const char *key;
		size_t klen, kn = key_of(id, kwant, sizeof(kwant));
		const void *sp, *fp;
		size_t slen, flen;

		expect(bc_batch_sample(b, i, &sp, &slen) == 0, "bc_batch_sample %u failed", i);
		if (lead >= 0) {
			expect(bc_batch_field_sample(b, (uint32_t)lead, i, &fp, &flen) == 0 &&
			       fp == sp && flen == slen, "bc_batch_sample is not the lead field");
		} else {
			expect(slen == 0, "bc_batch_sample has bytes with no bytes field selected");
		}
		if (!w.keys) {
			expect(bc_batch_sample_key(b, i, &key, &klen) == -ENODATA,
			       "a key without keys asked for");
			continue;
		}
		expect(bc_batch_sample_key(b, i, &key, &klen) == 0, "sample %u: no key", i);
		expect(klen == kn && memcmp(key, kwant, kn) == 0, "sample %" PRIu64 ": key %.*s, want %s",
		       id, (int)klen, key, kwant);
	}
	if (w.keys) {
		const char *key;

		expect(bc_batch_sample_key(b, count, &key, &len) == -ERANGE, "key past the batch");
	}
}

/* ---- streams ------------------------------------------------------------------------- */

static bc_stream *open_fields(bc_client *c, const char *dset, const char *fields, bool keys,
			      uint32_t rank, uint32_t world)
{
	bc_stream_opts o;

	dt_opts(&o, dset, 8, BC_SHUFFLE_GLOBAL, 0x5eed);
	o.fields = fields;
	o.keys = keys;
	o.rank = rank;
	o.world = world;
	return dt_open_ok(c, &o);
}

/*
 * Two epochs of s, every batch checked as w says; seen[e * N_SAMPLES + id]
 * counts each sample's deliveries in epoch e (0 or 1).
 */
static void consume_two_epochs(bc_stream *s, want w, unsigned *seen)
{
	uint64_t per_epoch = bc_stream_batches_per_epoch(s), got = 0;

	while (got < 2 * per_epoch) {
		bc_batch *b = NULL;
		int r = bc_next(s, &b, WAIT_MS);

		if (r == BC_EPOCH_END)
			continue;
		expect(r == 0, "bc_next: %s (%s)", bc_strerror(r), bc_stream_error(s));
		check_batch(b, w);
		for (uint32_t i = 0; i < bc_batch_count(b); i++) {
			uint64_t id = bc_batch_sample_id(b, i);

			expect(id < N_SAMPLES && bc_batch_epoch(b) < 2, "id %" PRIu64 " epoch %" PRIu64,
			       id, bc_batch_epoch(b));
			seen[bc_batch_epoch(b) * N_SAMPLES + id]++;
		}
		ck_assert_int_eq(bc_release(b), 0);
		got++;
	}
}

static void every_sample_once(unsigned world, want w, const char *fields)
{
	static unsigned seen[2 * N_SAMPLES];
	bc_client *c = dt_connect_ok();
	bc_stream *s[3];

	memset(seen, 0, sizeof(seen));
	for (unsigned r = 0; r < world; r++)
		s[r] = open_fields(c, FIELDS_DSET, fields, w.keys, r, world);
	for (unsigned r = 0; r < world; r++)
		consume_two_epochs(s[r], w, seen);
	for (unsigned i = 0; i < 2 * N_SAMPLES; i++)
		expect(seen[i] == 1, "epoch %u sample %u delivered %u times across %u ranks",
		       i / N_SAMPLES, i % N_SAMPLES, seen[i], world);
	for (unsigned r = 0; r < world; r++)
		ck_assert_int_eq(bc_close(s[r]), 0);
	bc_disconnect(c);
}

START_TEST(test_all_fields)
{
	want all = { .mask = (1u << FIELD_COUNT) - 1, .keys = true };

	every_sample_once(1, all, NULL);
	every_sample_once(3, all, NULL);
}
END_TEST

static void damage_keys(const char *name);

/* memory_heap of the session whose keys are `keys` in a status of two sessions. */
static uint64_t heap_of(json_object *st, bool keys)
{
	json_object *list, *x, *k;

	ck_assert(json_object_object_get_ex(st, "sessions", &list));
	for (size_t i = 0; i < json_object_array_length(list); i++) {
		x = json_object_array_get_idx(list, i);
		if (json_object_object_get_ex(x, "keys", &k) && json_object_get_boolean(k) == keys)
			return dt_ju64(x, "memory_heap");
	}
	ck_abort_msg("no session with keys %d in the status", keys);
	return 0;
}

/* memory_heap of sessions on dset opened without and with keys, as (without, with). */
static void heaps(bc_client *c, const char *dset, uint64_t *ret_plain, uint64_t *ret_keyed)
{
	bc_stream *plain = open_fields(c, dset, "label", false, 0, 1);
	bc_stream *keyed = open_fields(c, dset, "label", true, 0, 1);
	json_object *st = dt_status_json_ok();

	*ret_plain = heap_of(st, false);
	*ret_keyed = heap_of(st, true);
	json_object_put(st);
	ck_assert_int_eq(bc_close(keyed), 0);
	ck_assert_int_eq(bc_close(plain), 0);
	ck_assert(dt_wait_sessions(D.sock, 0, TRIES));
}

START_TEST(test_keys_charged)
{
	bc_client *c = dt_connect_ok();
	uint64_t a, b, key_bytes = 0;
	char key[KEY_BUF];

	/* A small dataset's keys are read whole at open: the session holds them all. */
	for (uint64_t id = 0; id < N_SAMPLES; id++)
		key_bytes += key_of(id, key, sizeof(key)) + 4;
	heaps(c, FIELDS_DSET, &a, &b);
	expect(b >= a + key_bytes, "keys charge %" PRIu64 " heap bytes more, the table holds %"
	       PRIu64, b - a, key_bytes);
	/*
	 * Keys that cannot be read whole are read as batches need them: the
	 * reader may hold a key block of the longest keys, raw and stored.
	 */
	write_fields_pack("damaged.bpk", N_SAMPLES, true);
	damage_keys("damaged.bpk");
	heaps(c, "damaged.bpk", &a, &b);
	expect(b >= a + 2 * (uint64_t)BP_KEYS_PER_BLOCK * BP_KEY_MAX,
	       "keys charge %" PRIu64 " heap bytes more, not the key reader's", b - a);
	bc_disconnect(c);
}
END_TEST

START_TEST(test_schema)
{
	bc_client *c = dt_connect_ok();
	bc_stream *s = open_fields(c, FIELDS_DSET, "label,caption", false, 0, 1);
	const bc_field_info *fi;
	uint32_t n = 0;
	char *st;

	fi = bc_stream_schema(s, &n);
	ck_assert_uint_eq(n, FIELD_COUNT);
	for (uint32_t f = 0; f < n; f++) {
		ck_assert_str_eq(fi[f].name, schema_fields[f].name);
		ck_assert_uint_eq(fi[f].type, schema_fields[f].type);
		ck_assert_int_eq(bc_stream_field_index(s, fi[f].name), (int)f);
		ck_assert(fi[f].selected == (f == F_LABEL || f == F_CAPTION));
	}
	ck_assert_uint_eq(fi[F_LABEL].class_count, 3);
	ck_assert_str_eq(fi[F_LABEL].classes[2], "eel");
	ck_assert_ptr_null(fi[F_IMG].classes);
	/* Masks are 0 or 16 bytes: not one size; images neither. */
	ck_assert_uint_eq(fi[F_MASK].fixed_size, 0);
	ck_assert_int_eq(bc_stream_field_index(s, "nope"), -ENOENT);
	ck_assert_int_eq(bc_stream_field_index(s, NULL), -EINVAL);
	ck_assert_ptr_null(bc_stream_schema(NULL, &n));
	ck_assert_uint_eq(n, 0);
	/* The status names the session's selection. */
	st = dt_status_ok();
	expect(strstr(st, "\"fields\": \"label,caption\"") && strstr(st, "\"keys\": false"),
	       "status does not show the selection: %s", st);
	free(st);
	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
}
END_TEST

/* Two epochs of one stream of selection fields, as w; every sample once an epoch. */
static void subset(const char *fields, want w)
{
	static unsigned seen[2 * N_SAMPLES];
	bc_client *c = dt_connect_ok();
	bc_stream *s = open_fields(c, FIELDS_DSET, fields, w.keys, 0, 1);

	memset(seen, 0, sizeof(seen));
	consume_two_epochs(s, w, seen);
	for (unsigned i = 0; i < 2 * N_SAMPLES; i++)
		expect(seen[i] == 1, "%s: epoch %u sample %u delivered %u times", fields,
		       i / N_SAMPLES, i % N_SAMPLES, seen[i]);
	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
}

START_TEST(test_subset_reads_no_block)
{
	/* Labels, scores, captions and keys come from the columns: not one block is read. */
	subset("label", (want){ .mask = 1u << F_LABEL });
	subset("score,caption,label", (want){ .mask = 7u << F_LABEL, .keys = true });
	ck_assert_uint_eq(dt_status_u64("pipeline.blocks_read"), 0);
	ck_assert_uint_eq(dt_status_u64("pipeline.blocks_decoded"), 0);
	/* A second bytes field alone leads; the image is read but not delivered. */
	subset("mask,label", (want){ .mask = (1u << F_MASK) | (1u << F_LABEL) });
	expect(dt_status_u64("pipeline.blocks_decoded") > 0, "mask read no block");
}
END_TEST

START_TEST(test_refusals)
{
	bc_client *c = dt_connect_ok();
	bc_stream_opts o;
	const char *msg;

	dt_opts(&o, FIELDS_DSET, 8, BC_SHUFFLE_NONE, 0);
	o.fields = "label,nope";
	msg = dt_open_fails(c, &o, -ENOENT);
	expect(strstr(msg, "no field \"nope\"") && strstr(msg, "img (bytes)") &&
	       strstr(msg, "label (int64)") && strstr(msg, "caption (str)"),
	       "unknown field: message does not list the fields: %s", msg);
	o.fields = "label,label";
	msg = dt_open_fails(c, &o, -EINVAL);
	expect(strstr(msg, "\"label\" is selected twice"), "duplicate: %s", msg);
	/* Refused before asking: not a list of names. */
	o.fields = "label,,img";
	ck_assert_int_eq(bc_open(c, &o, &(bc_stream *){ NULL }), -EINVAL);
	o.fields = "la bel";
	ck_assert_int_eq(bc_open(c, &o, &(bc_stream *){ NULL }), -EINVAL);
	/* Keys of a pack written without them. */
	dt_opts(&o, NOKEYS_DSET, 8, BC_SHUFFLE_NONE, 0);
	o.keys = true;
	msg = dt_open_fails(c, &o, -ENODATA);
	expect(strstr(msg, "stores no keys; repack without --no-keys"), "no keys: %s", msg);
	/* The same pack without keys serves, and its connection survived the refusals. */
	o.keys = false;
	ck_assert_int_eq(bc_close(dt_open_ok(c, &o)), 0);
	bc_disconnect(c);
}
END_TEST

/*
 * Flip one byte in the middle of the KEYS section of root/name: open
 * still takes the pack (keys are read and checked on demand), the key
 * block's hash no longer matches.
 */
static void damage_keys(const char *name)
{
	bp_dataset_fault fault = { 0 };
	bp_pack_section keys;
	bp_dataset *ds = NULL;
	char path[PATH_MAX];
	uint8_t byte;
	off_t at;
	int fd;

	dt_root_path(&D, name, path, sizeof(path));
	ck_assert_int_eq(bp_dataset_openat(AT_FDCWD, path, &ds, &fault), 0);
	ck_assert_int_eq(bp_pack_index_find_section(&bp_dataset_shard(ds, 0)->index,
						    BP_SECTION_KEYS, BP_SECTION_NO_FIELD, &keys), 0);
	bp_dataset_close(ds);
	at = (off_t)(keys.offset + keys.size / 2);
	fd = open(path, O_RDWR | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, &byte, 1, at), 1);
	byte ^= 0x5a;
	ck_assert_int_eq(pwrite(fd, &byte, 1, at), 1);
	close(fd);
}

START_TEST(test_damaged_keys)
{
	bc_client *c = dt_connect_ok();
	bc_stream *s;
	bc_batch *b = NULL;
	uint64_t failed = 0;
	int r;

	/* A copy with its one key block damaged (600 keys < BP_KEYS_PER_BLOCK). */
	write_fields_pack("damaged.bpk", N_SAMPLES, true);
	damage_keys("damaged.bpk");
	/* Without keys the pack serves as it is. */
	s = open_fields(c, "damaged.bpk", "label", false, 0, 1);
	ck_assert_int_eq(bc_next(s, &b, WAIT_MS), 0);
	check_batch(b, (want){ .mask = 1u << F_LABEL });
	ck_assert_int_eq(bc_release(b), 0);
	ck_assert_int_eq(bc_close(s), 0);
	/* With keys every batch fails, saying why, and the stream goes on past each. */
	s = open_fields(c, "damaged.bpk", "label", true, 0, 1);
	for (uint64_t i = 0; i < bc_stream_batches_per_epoch(s); i++) {
		r = bc_next(s, &b, WAIT_MS);
		expect(r == -EBADMSG, "batch %" PRIu64 " with damaged keys: %s", i, bc_strerror(r));
		expect(strstr(bc_stream_error(s), "cannot read the key of sample") &&
		       strstr(bc_stream_error(s), "damaged.bpk"), "reason: %s", bc_stream_error(s));
		failed++;
	}
	/* Those taken, and those staged ahead of them. */
	expect(dt_session_u64(NULL, "failed") >= failed, "status counts %" PRIu64 " failed",
	       dt_session_u64(NULL, "failed"));
	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
}
END_TEST

#if BATCHD_FAULT_INJECTION
/*
 * Keys read as batches need them, a key block at a time (what a dataset
 * too large for a key table gets): every key as written across ranks and
 * epochs, and the reader and a batch of the longest keys charged.
 */
START_TEST(test_key_reader)
{
	want all = { .mask = (1u << FIELD_COUNT) - 1, .keys = true };
	bc_client *c;
	uint64_t a, b;

	every_sample_once(3, all, NULL);
	c = dt_connect_ok();
	heaps(c, FIELDS_DSET, &a, &b);
	expect(b >= a + 2 * (uint64_t)BP_KEYS_PER_BLOCK * BP_KEY_MAX + 8 * (uint64_t)BP_KEY_MAX,
	       "keys charge %" PRIu64 " heap bytes more, not the reader's and a batch's", b - a);
	bc_disconnect(c);
}
END_TEST
#endif

/*
 * Long keys whose table does not fit the budget while reading them as
 * batches need them does: the session opens that way, keys as written.
 */
#define LONG_KEYS 6000u

static void setup_long_keys(void)
{
	dt_setup_dir();
	key_pad = 3900;
	write_fields_pack("long.bpk", LONG_KEYS, true);
	D.memory = "20M";
	ck_assert_msg(dt_daemon_start(&D) == 0, "batchd did not start");
}

START_TEST(test_keys_over_budget)
{
	bc_client *c = dt_connect_ok();
	bc_stream *s = open_fields(c, "long.bpk", "label", true, 0, 1);
	uint64_t heap = dt_session_u64(NULL, "memory_heap");
	bc_batch *b = NULL;

	/* The table would hold 6000 keys of 3900+ bytes, over the budget: the session holds a reader. */
	expect(heap < (uint64_t)LONG_KEYS * 3900, "heap %" PRIu64 ": the key table", heap);
	expect(heap > 2 * (uint64_t)BP_KEYS_PER_BLOCK * BP_KEY_MAX, "heap %" PRIu64
	       ": no key reader", heap);
	for (int k = 0; k < 3; k++) {
		int r = bc_next(s, &b, WAIT_MS);

		expect(r == 0, "bc_next: %s (%s)", bc_strerror(r), bc_stream_error(s));
		check_batch(b, (want){ .mask = 1u << F_LABEL, .keys = true });
		ck_assert_int_eq(bc_release(b), 0);
	}
	ck_assert_int_eq(bc_close(s), 0);
	bc_disconnect(c);
}
END_TEST

/* A pack from before fields: one bytes field "data", byte for byte as before. */
START_TEST(test_plain_pack)
{
	bc_client *c = dt_connect_ok();
	bc_stream_opts o;
	const bc_field_info *fi;
	bc_stream *s;
	uint32_t n = 0;
	dt_ref ref;
	dt_run run = { 0 };
	bc_batch *b = NULL;
	const void *p, *d;
	const char *key;
	size_t len, dlen;

	dt_ref_ok(&ref, DSET_BLK);
	dt_opts(&o, DSET_BLK, 16, BC_SHUFFLE_GLOBAL, 9);
	s = dt_open_ok(c, &o);
	fi = bc_stream_schema(s, &n);
	ck_assert_uint_eq(n, 1);
	ck_assert_str_eq(fi[0].name, "data");
	ck_assert_uint_eq(fi[0].type, BC_FIELD_BYTES);
	ck_assert(fi[0].selected);
	ck_assert_int_eq(bc_next(s, &b, WAIT_MS), 0);
	d = bc_batch_data(b, &dlen);
	ck_assert_int_eq(bc_batch_field(b, 0, &p, &len), 0);
	ck_assert(p == d && len == dlen);
	ck_assert_int_eq(bc_batch_field_sample(b, 0, 1, &p, &len), 0);
	ck_assert_int_eq(bc_batch_sample(b, 1, &d, &dlen), 0);
	ck_assert(p == d && len == dlen);
	ck_assert_int_eq(bc_batch_field(b, 1, &p, &len), -ERANGE);
	ck_assert_int_eq(bc_batch_sample_key(b, 0, &key, &len), -ENODATA);
	ck_assert_int_eq(bc_release(b), 0);
	/* The rest of two epochs, every sample checked against the pack. */
	dt_consume_ok(s, &ref, 2 * bc_stream_batches_per_epoch(s) - 1, 0, &run, DSET_BLK);
	ck_assert_uint_eq(run.failures, 0);
	dt_run_free(&run);
	ck_assert_int_eq(bc_close(s), 0);
	/* Keys of a plain pack: it has none. */
	o.keys = true;
	expect(strstr(dt_open_fails(c, &o, -ENODATA), "stores no keys"), "plain pack keys");
	o.keys = false;
	o.fields = "data";
	ck_assert_int_eq(bc_close(dt_open_ok(c, &o)), 0);
	dt_ref_close(&ref);
	bc_disconnect(c);
}
END_TEST

/* ---- the OPEN field list at the protocol level ------------------------------------------ */

static bp_msg_open open_msg(const char *fields, bool keys)
{
	return (bp_msg_open){ .batch_size = 4, .world = 1, .placement = BP_PLACEMENT_HOST,
			      .keys = keys, .fields = fields,
			      .fields_len = fields ? (uint32_t)strlen(fields) : 0,
			      .path = "data/set", .path_len = 8 };
}

START_TEST(test_protocol_open_fields)
{
	static const char *const good[] = { "a", "img,label", "A-Z.z_9", "x,y,z" };
	static const char *const bad[] = { ",a", "a,", "a,,b", "a b", "a\n", "é" };
	uint8_t buf[BP_MSG_MAX];
	char many[BP_FIELD_LIST_MAX + 2];
	bp_msg_open m, got;
	int n;

	for (size_t i = 0; i < ARRAY_SIZE(good); i++) {
		m = open_msg(good[i], i & 1);
		n = bp_msg_open_encode(&m, buf, sizeof(buf));
		ck_assert_int_eq(n, 88 + 4 + (int)strlen(good[i]) + 8);
		/* Flags: the list, and the keys. */
		ck_assert_uint_eq(buf[66], 1u | (i & 1 ? 2u : 0u));
		ck_assert_int_eq(bp_msg_open_decode(buf, (size_t)n, &got), 0);
		ck_assert_uint_eq(got.fields_len, strlen(good[i]));
		ck_assert_mem_eq(got.fields, good[i], got.fields_len);
		ck_assert(got.keys == (i & 1));
		/* The path still ends the message. */
		ck_assert_ptr_eq(got.path, (const char *)buf + n - 8);
		ck_assert_mem_eq(got.path, "data/set", 8);
	}
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		m = open_msg(bad[i], false);
		ck_assert_int_eq(bp_msg_open_encode(&m, buf, sizeof(buf)), -EINVAL);
		/* Forged: the same bytes the encoder would write for a good list of that length. */
		m = open_msg("abcdefgh", false);
		m.fields_len = (uint32_t)strlen(bad[i]);
		m.fields = "abcdefgh";
		n = bp_msg_open_encode(&m, buf, sizeof(buf));
		ck_assert_int_gt(n, 0);
		memcpy(buf + 92, bad[i], strlen(bad[i]));
		ck_assert_int_eq(bp_msg_open_decode(buf, (size_t)n, &got), -EBADMSG);
	}
	/* 64 names of 64 bytes is the most; a 65th name or a 65-byte name is refused. */
	memset(many, 'n', sizeof(many));
	for (size_t i = 64; i < BP_FIELD_LIST_MAX; i += 65)
		many[i] = ',';
	many[BP_FIELD_LIST_MAX] = '\0';
	m = open_msg(many, true);
	ck_assert_int_gt(bp_msg_open_encode(&m, buf, sizeof(buf)), 0);
	many[BP_FIELD_LIST_MAX] = 'n';
	many[BP_FIELD_LIST_MAX + 1] = '\0';
	m = open_msg(many, true);
	ck_assert_int_eq(bp_msg_open_encode(&m, buf, sizeof(buf)), -EINVAL);
	m = open_msg("0123456789012345678901234567890123456789012345678901234567890123,x", false);
	ck_assert_int_gt(bp_msg_open_encode(&m, buf, sizeof(buf)), 0);
	m = open_msg("01234567890123456789012345678901234567890123456789012345678901234", false);
	ck_assert_int_eq(bp_msg_open_encode(&m, buf, sizeof(buf)), -EINVAL);
}
END_TEST

START_TEST(test_protocol_open_flags)
{
	uint8_t buf[BP_MSG_MAX], copy[BP_MSG_MAX];
	bp_msg_open m, got;
	int n;

	/* No list: the flag clear and the path right after path_len, as before fields. */
	m = open_msg(NULL, true);
	n = bp_msg_open_encode(&m, buf, sizeof(buf));
	ck_assert_int_eq(n, 96);
	ck_assert_uint_eq(buf[66], 2);
	ck_assert_int_eq(bp_msg_open_decode(buf, (size_t)n, &got), 0);
	ck_assert(got.keys && got.fields_len == 0);
	/* The list flag without a list, or an empty list, or an unknown flag. */
	memcpy(copy, buf, (size_t)n);
	copy[66] |= 1;
	ck_assert_int_eq(bp_msg_open_decode(copy, (size_t)n, &got), -EBADMSG);
	for (unsigned bit = 2; bit < 16; bit++) {
		memcpy(copy, buf, (size_t)n);
		copy[66 + bit / 8] |= (uint8_t)(1u << (bit % 8));
		ck_assert_int_eq(bp_msg_open_decode(copy, (size_t)n, &got), -EBADMSG);
	}
	m = open_msg("ab", false);
	n = bp_msg_open_encode(&m, buf, sizeof(buf));
	/* A list length that does not add up with the path's, either way. */
	for (uint32_t lie = 0; lie < 12; lie++) {
		if (lie == 2)
			continue;
		memcpy(copy, buf, (size_t)n);
		copy[88] = (uint8_t)lie;
		ck_assert_int_eq(bp_msg_open_decode(copy, (size_t)n, &got), -EBADMSG);
	}
	memcpy(copy, buf, (size_t)n);
	copy[91] = 0xff; /* a length near 2^32: no wrap into a valid message */
	ck_assert_int_eq(bp_msg_open_decode(copy, (size_t)n, &got), -EBADMSG);
	/* Every truncation of a message with a list is refused. */
	for (int cut = 0; cut < n; cut++)
		ck_assert_int_eq(bp_msg_open_decode(buf, (size_t)cut, &got), -EBADMSG);
}
END_TEST

/* ---- the client's distrust of the schema in the data memfd ----------------------------- */

/*
 * A fake daemon on its own socket: it answers HELLO, then an OPEN with a
 * READY whose data memfd is a well-formed ring in every way but the
 * schema, which `damage` breaks.
 */
enum damage { DAMAGE_BYTES, DAMAGE_OUTSIDE, DAMAGE_MASK, DAMAGE_FLAGS, DAMAGE_NONE };

typedef struct fake {
	int lfd;
	enum damage damage;
	char sock[PATH_MAX];
} fake;

#define FAKE_SLOTS 4u
#define FAKE_DATA (UINT64_C(1) << 16)

static int fake_memfd(uint64_t size, unsigned seals, uint8_t **ret_map)
{
	int fd = memfd_create("fake", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
	*ret_map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ck_assert(*ret_map != MAP_FAILED);
	ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, seals), 0);
	return fd;
}

/* The ring the fake daemon serves, with the schema damaged as f says. */
static int fake_ring(const fake *f, int *ret_ctrl)
{
	bp_ring_header *h;
	uint8_t *data, *ctrl;
	uint64_t size = bp_schema_encoded_size(&pack_schema);
	int fd = fake_memfd(FAKE_DATA, F_SEAL_SHRINK | F_SEAL_GROW, &data);

	*ret_ctrl = fake_memfd(bp_ring_ctrl_size(FAKE_SLOTS), F_SEAL_SHRINK | F_SEAL_GROW, &ctrl);
	h = (bp_ring_header *)data;
	*h = (bp_ring_header){ .magic = BP_RING_MAGIC, .version = BP_RING_VERSION,
			       .header_size = BP_RING_HEADER_SIZE, .session = 7,
			       .data_size = FAKE_DATA, .arena_offset = bp_ring_arena_offset(FAKE_SLOTS),
			       .arena_size = FAKE_DATA - bp_ring_arena_offset(FAKE_SLOTS),
			       .batches_per_epoch = 1, .slots = FAKE_SLOTS, .batch_size = 4,
			       .schema_offset = BP_RING_SCHEMA_INLINE, .schema_size = size,
			       .fields = 0x1f };
	bp_schema_encode(&pack_schema, data + BP_RING_SCHEMA_INLINE);
	switch (f->damage) {
	case DAMAGE_BYTES:
		data[BP_RING_SCHEMA_INLINE + 4] = 0xee; /* the first field's type */
		break;
	case DAMAGE_OUTSIDE:
		h->schema_offset = FAKE_DATA - 8;
		break;
	case DAMAGE_MASK:
		h->fields = UINT64_C(1) << FIELD_COUNT;
		break;
	case DAMAGE_FLAGS:
		h->flags = 0x80;
		break;
	case DAMAGE_NONE:
		break;
	}
	munmap(data, FAKE_DATA);
	munmap(ctrl, bp_ring_ctrl_size(FAKE_SLOTS));
	return fd;
}

/* Serve one connection: HELLO_OK, READY for the OPEN, CLOSED for the CLOSE. */
static void *fake_serve(void *arg)
{
	fake *f = arg;
	static uint8_t buf[BP_MSG_MAX];
	int c = accept(f->lfd, NULL, NULL), n, pr[2], pp[2], fds[4];
	bp_msg_hello_ok ok = { .version = 1, .max_sessions = 4, .max_batch_size = 64,
			       .server = "fake", .server_len = 4 };
	bp_msg_ready ready = { .session = 7, .samples = 4, .batches_per_epoch = 1,
			       .data_size = FAKE_DATA, .ctrl_size = bp_ring_ctrl_size(FAKE_SLOTS),
			       .batch_size = 4, .slots = FAKE_SLOTS, .placement = BP_PLACEMENT_HOST };
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(fds))];
	} ctl;
	struct iovec iov;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
			     .msg_controllen = sizeof(ctl.b) };
	bp_msg_session sm = { .session = 7 };

	if (c < 0 || recv(c, buf, sizeof(buf), 0) <= 0)
		return NULL;
	n = bp_msg_hello_ok_encode(&ok, buf, sizeof(buf));
	send(c, buf, (size_t)n, MSG_NOSIGNAL);
	if (recv(c, buf, sizeof(buf), 0) <= 0 || pipe(pr) < 0 || pipe(pp) < 0)
		goto out;
	fds[0] = fake_ring(f, &fds[1]);
	fds[2] = pr[1];
	fds[3] = pp[0];
	n = bp_msg_ready_encode(&ready, buf, sizeof(buf));
	iov = (struct iovec){ .iov_base = buf, .iov_len = (size_t)n };
	memset(&ctl, 0, sizeof(ctl));
	mh.msg_controllen = CMSG_SPACE(sizeof(fds));
	CMSG_FIRSTHDR(&mh)->cmsg_level = SOL_SOCKET;
	CMSG_FIRSTHDR(&mh)->cmsg_type = SCM_RIGHTS;
	CMSG_FIRSTHDR(&mh)->cmsg_len = CMSG_LEN(sizeof(fds));
	memcpy(CMSG_DATA(CMSG_FIRSTHDR(&mh)), fds, sizeof(fds));
	sendmsg(c, &mh, MSG_NOSIGNAL);
	for (int i = 0; i < 4; i++)
		close(fds[i]);
	close(pr[0]);
	close(pp[1]);
	/* The client ends the session it refused (or closes the stream it took). */
	if (recv(c, buf, sizeof(buf), 0) > 0) {
		n = bp_msg_session_encode(BP_MSG_CLOSED, &sm, buf, sizeof(buf));
		send(c, buf, (size_t)n, MSG_NOSIGNAL);
	}
out:
	close(c);
	return NULL;
}

/* bc_open against a fake daemon serving damage. @return bc_open's result; msg its message. */
static int open_fake(enum damage damage, char *msg, size_t len)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	fake f = { .damage = damage };
	bc_client *c = NULL;
	bc_stream *s = NULL;
	bc_stream_opts o;
	pthread_t t;
	int r;

	snprintf(f.sock, sizeof(f.sock), "%s/fake.sock", D.dir);
	ck_assert_uint_lt(strlen(f.sock), sizeof(sa.sun_path));
	memcpy(sa.sun_path, f.sock, strlen(f.sock) + 1);
	unlink(f.sock);
	f.lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(f.lfd, 0);
	ck_assert_int_eq(bind(f.lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(f.lfd, 1), 0);
	ck_assert_int_eq(pthread_create(&t, NULL, fake_serve, &f), 0);
	ck_assert_int_eq(bc_connect(f.sock, &c), 0);
	bc_stream_opts_init(&o);
	o.dataset = "fake";
	o.batch_size = 4;
	r = bc_open(c, &o, &s);
	snprintf(msg, len, "%s", bc_client_error(c));
	if (r == 0)
		bc_close(s);
	bc_disconnect(c);
	pthread_join(t, NULL);
	close(f.lfd);
	unlink(f.sock);
	return r;
}

START_TEST(test_client_distrusts_schema)
{
	static const struct {
		enum damage d;
		const char *mention;
	} cases[] = {
		{ DAMAGE_BYTES, "schema is damaged" },
		{ DAMAGE_OUTSIDE, "outside the session's memory" },
		{ DAMAGE_MASK, "does not fit the schema" },
		{ DAMAGE_FLAGS, "does not fit the schema" },
	};
	char msg[BP_ERRMSG_MAX + 1];

	/* The fake is good enough to be taken when nothing is damaged. */
	ck_assert_int_eq(open_fake(DAMAGE_NONE, msg, sizeof(msg)), 0);
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		ck_assert_int_eq(open_fake(cases[i].d, msg, sizeof(msg)), -EBADMSG);
		ck_assert_msg(strstr(msg, cases[i].mention), "case %zu: %s", i, msg);
	}
}
END_TEST

static void setup_dir_only(void)
{
	dt_setup_dir();
}

static Suite *fields_suite(void)
{
	Suite *s = suite_create("fields-daemon");
	TCase *tc;

	tc = dt_tcase(s, "all", setup);
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, test_all_fields);
	tcase_add_test(dt_tcase(s, "schema", setup), test_schema);
	tcase_add_test(dt_tcase(s, "keys-charged", setup), test_keys_charged);
	tcase_add_test(dt_tcase(s, "subset", setup), test_subset_reads_no_block);
	tcase_add_test(dt_tcase(s, "refusals", setup), test_refusals);
	tcase_add_test(dt_tcase(s, "plain", setup), test_plain_pack);
	tcase_add_test(dt_tcase(s, "damaged-keys", setup), test_damaged_keys);
	tcase_add_test(dt_tcase(s, "keys-over-budget", setup_long_keys), test_keys_over_budget);
#if BATCHD_FAULT_INJECTION
	tcase_add_test(dt_tcase(s, "key-reader", setup_key_reader), test_key_reader);
#endif
	tc = dt_tcase(s, "protocol", setup_dir_only);
	tcase_add_test(tc, test_protocol_open_fields);
	tcase_add_test(tc, test_protocol_open_flags);
	tcase_add_test(dt_tcase(s, "distrust", setup_dir_only), test_client_distrusts_schema);
	return s;
}

int main(void)
{
	return dt_check_main(&D, fields_suite);
}
