/* SPDX-License-Identifier: MIT */
/*
 * test-fields-daemon.c - samples with fields, end to end: packs written
 * here with a schema and keys (fields-pack.h), a real batchd on a
 * temporary socket, and libbatchclient reading what the daemon staged.
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
 * on the wire and the client's distrust of the schema a daemon serves,
 * where no batchd runs, are test-fields-protocol.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>
#include <json-c/json.h>

#include "batchd-build.h"
#include "daemon-testlib.h"
#include "fields-pack.h"
#include "pack.h"
#include "pack_fields.h"

static dt_daemon D;

#define expect dt_expect

#define FIELDS_DSET "fields.bpk"
#define NOKEYS_DSET "nokeys.bpk"
#define N_SAMPLES 600u            /* divides by world 3 and batch 8: no wrapped tail */
#define NOKEYS_SAMPLES 40u

/* ---- fixtures ----------------------------------------------------------------------- */

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
	expect(strstr(msg, "stores no keys (a pack of --records has none") &&
	       strstr(msg, "open it without keys"), "no keys: %s", msg);
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
	return s;
}

int main(void)
{
	return dt_check_main(&D, fields_suite);
}
