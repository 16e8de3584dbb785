/* SPDX-License-Identifier: MIT */
/*
 * test-protocol.c - the Check suite for proto/protocol.c: the control
 * messages' encoders, decoders and validators.
 *
 * Every message a daemon or client receives was chosen by its peer, so
 * besides round trips this suite checks the byte layout against
 * PROTOCOL.md's tables (offsets restated here, not taken from the encoder),
 * rejects each out-of-range field one at a time through both the encoder
 * (-EINVAL) and the decoder (-EBADMSG, bytes patched after encoding), and
 * attacks every message type generically: wrong magic, wrong length,
 * truncation at every length, trailing bytes, foreign and unknown types,
 * and every single-bit flip (which must be rejected or decode to a message
 * that re-encodes to exactly the flipped bytes).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "protocol.h"
#include "ring.h"

#define TYPE_FIRST BP_MSG_HELLO
#define TYPE_LAST  BP_MSG_METRICS_REPLY
#define TYPE_COUNT (TYPE_LAST - TYPE_FIRST + 1)

/* Big enough for any message plus room to build over-long ones. */
#define BUF_SIZE (BP_MSG_MAX + 8192)

/* Offsets as PROTOCOL.md lays them out (from the start of the message). */
enum {
	HDR_MAGIC = 0, HDR_TYPE = 4, HDR_VERSION = 6, HDR_LENGTH = 8, HDR_RESERVED = 12,

	HELLO_MIN = 16, HELLO_MAX = 18, HELLO_NAME_LEN = 20, HELLO_NAME = 24,

	OK_VERSION = 16, OK_RESERVED = 18, OK_MAX_SESSIONS = 20, OK_MAX_BATCH = 24,
	OK_SERVER_LEN = 28, OK_SERVER = 32,

	OPEN_SEED = 16, OPEN_EPOCH = 24, OPEN_BATCH = 32, OPEN_BATCH_SIZE = 40, OPEN_RANK = 44,
	OPEN_WORLD = 48, OPEN_PREFETCH = 52, OPEN_WINDOW = 56, OPEN_PLACEMENT = 60,
	OPEN_SHUFFLE = 64, OPEN_DROP_LAST = 65, OPEN_RESERVED = 66, OPEN_UUID = 68,
	OPEN_PATH_LEN = 84, OPEN_PATH = 88,

	READY_SESSION = 16, READY_FINGERPRINT = 24, READY_SAMPLES = 32, READY_BPE = 40,
	READY_DATA_SIZE = 48, READY_CTRL_SIZE = 56, READY_MAX_SAMPLE = 64,
	READY_BATCH_SIZE = 72, READY_SLOTS = 76, READY_PLACEMENT = 80, READY_RESERVED = 84,
	READY_LEN = 88,

	ERR_CODE = 16, ERR_LEN = 20, ERR_MESSAGE = 24,

	SESSION_ID = 16, SESSION_LEN = 24,

	TEXT_CODE = 16, TEXT_LEN = 20, TEXT_BYTES = 24,
};

static uint8_t g_msg[BUF_SIZE], g_out[BUF_SIZE];

/* ---- byte helpers (independent of proto/endian.h) ----------------------- */

static uint64_t rd(const uint8_t *p, int width)
{
	uint64_t v = 0;

	for (int i = width - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static void wr(uint8_t *p, int width, uint64_t v)
{
	for (int i = 0; i < width; i++, v >>= 8)
		p[i] = (uint8_t)v;
}

/* ---- sample messages ---------------------------------------------------- */

static const char SAMPLE_NAME[] = "trainer-0 (rank 3)";
static const char SAMPLE_SERVER[] = "batchd 0.1.0";
static const char SAMPLE_PATH[] = "/data/imagenet/train";
static const char SAMPLE_ERROR[] = "dataset /data/x: No such file or directory";
static const char SAMPLE_JSON[] = "{\"sessions\":1,\"gpu\":false}";
static const char SAMPLE_REASON[] = "daemon stopping (SIGTERM)";

static bp_msg_hello sample_hello(void)
{
	return (bp_msg_hello){ .min_version = 1, .max_version = 1, .name = SAMPLE_NAME,
			       .name_len = sizeof(SAMPLE_NAME) - 1 };
}

static bp_msg_hello_ok sample_hello_ok(void)
{
	return (bp_msg_hello_ok){ .version = 1, .max_sessions = 16, .max_batch_size = 4096,
				  .server = SAMPLE_SERVER,
				  .server_len = sizeof(SAMPLE_SERVER) - 1 };
}

static bp_msg_open sample_open(void)
{
	return (bp_msg_open){ .seed = UINT64_C(0x0123456789abcdef), .start_epoch = 3,
			      .start_batch = 77, .batch_size = 256, .rank = 3, .world = 8,
			      .prefetch = 16, .window = 64, .placement = 2,
			      .shuffle = BP_SHUFFLE_BLOCK, .drop_last = true,
			      .path = SAMPLE_PATH, .path_len = sizeof(SAMPLE_PATH) - 1 };
}

static bp_msg_ready sample_ready(void)
{
	return (bp_msg_ready){ .session = 42, .fingerprint = UINT64_C(0xfeedfacecafebeef),
			       .samples = 1281167, .batches_per_epoch = 625,
			       .data_size = bp_ring_arena_offset(32) + (UINT64_C(64) << 20),
			       .ctrl_size = bp_ring_ctrl_size(32), .max_sample = 1u << 20,
			       .batch_size = 256, .slots = 32, .placement = 2 };
}

static bp_msg_error sample_error(void)
{
	return (bp_msg_error){ .code = -ENOENT, .message = SAMPLE_ERROR,
			       .message_len = sizeof(SAMPLE_ERROR) - 1 };
}

static bp_msg_text sample_status_reply(void)
{
	return (bp_msg_text){ .code = 0, .text = SAMPLE_JSON, .text_len = sizeof(SAMPLE_JSON) - 1 };
}

static bp_msg_text sample_goodbye(void)
{
	return (bp_msg_text){ .code = -ESHUTDOWN, .text = SAMPLE_REASON,
			      .text_len = sizeof(SAMPLE_REASON) - 1 };
}

/* The sample message of `type`, through its encoder. */
static int encode_sample(uint16_t type, uint8_t *buf, size_t cap)
{
	bp_msg_session s = { .session = 42 };
	bp_msg_hello hello = sample_hello();
	bp_msg_hello_ok ok = sample_hello_ok();
	bp_msg_open open = sample_open();
	bp_msg_ready ready = sample_ready();
	bp_msg_error err = sample_error();
	bp_msg_text reply = sample_status_reply(), bye = sample_goodbye();

	switch (type) {
	case BP_MSG_HELLO: return bp_msg_hello_encode(&hello, buf, cap);
	case BP_MSG_HELLO_OK: return bp_msg_hello_ok_encode(&ok, buf, cap);
	case BP_MSG_OPEN: return bp_msg_open_encode(&open, buf, cap);
	case BP_MSG_READY: return bp_msg_ready_encode(&ready, buf, cap);
	case BP_MSG_ERROR: return bp_msg_error_encode(&err, buf, cap);
	case BP_MSG_CLOSE: return bp_msg_session_encode(BP_MSG_CLOSE, &s, buf, cap);
	case BP_MSG_CLOSED: return bp_msg_session_encode(BP_MSG_CLOSED, &s, buf, cap);
	case BP_MSG_STATUS: return bp_msg_status_encode(buf, cap);
	case BP_MSG_STATUS_REPLY: return bp_msg_text_encode(BP_MSG_STATUS_REPLY, &reply, buf, cap);
	case BP_MSG_GOODBYE: return bp_msg_text_encode(BP_MSG_GOODBYE, &bye, buf, cap);
	case BP_MSG_METRICS: return bp_msg_metrics_encode(buf, cap);
	case BP_MSG_METRICS_REPLY: return bp_msg_text_encode(BP_MSG_METRICS_REPLY, &reply, buf, cap);
	}
	ck_abort_msg("no sample for type %u", type);
	return -1;
}

/* Encode the sample of `type` into g_msg; @return its length. */
static size_t sample(uint16_t type)
{
	int n = encode_sample(type, g_msg, sizeof(g_msg));

	ck_assert_int_gt(n, 0);
	return (size_t)n;
}

/* Decode buf as `type` and, on success, encode the result into out. */
static int recode(uint16_t type, const uint8_t *buf, size_t len, uint8_t *out, size_t cap)
{
	int r;

	switch (type) {
	case BP_MSG_HELLO: {
		bp_msg_hello m;
		r = bp_msg_hello_decode(buf, len, &m);
		return r < 0 ? r : bp_msg_hello_encode(&m, out, cap);
	}
	case BP_MSG_HELLO_OK: {
		bp_msg_hello_ok m;
		r = bp_msg_hello_ok_decode(buf, len, &m);
		return r < 0 ? r : bp_msg_hello_ok_encode(&m, out, cap);
	}
	case BP_MSG_OPEN: {
		bp_msg_open m;
		r = bp_msg_open_decode(buf, len, &m);
		return r < 0 ? r : bp_msg_open_encode(&m, out, cap);
	}
	case BP_MSG_READY: {
		bp_msg_ready m;
		r = bp_msg_ready_decode(buf, len, &m);
		return r < 0 ? r : bp_msg_ready_encode(&m, out, cap);
	}
	case BP_MSG_ERROR: {
		bp_msg_error m;
		r = bp_msg_error_decode(buf, len, &m);
		return r < 0 ? r : bp_msg_error_encode(&m, out, cap);
	}
	case BP_MSG_CLOSE:
	case BP_MSG_CLOSED: {
		bp_msg_session m;
		r = bp_msg_session_decode(type, buf, len, &m);
		return r < 0 ? r : bp_msg_session_encode(type, &m, out, cap);
	}
	case BP_MSG_STATUS:
		r = bp_msg_status_decode(buf, len);
		return r < 0 ? r : bp_msg_status_encode(out, cap);
	case BP_MSG_METRICS:
		r = bp_msg_metrics_decode(buf, len);
		return r < 0 ? r : bp_msg_metrics_encode(out, cap);
	case BP_MSG_STATUS_REPLY:
	case BP_MSG_METRICS_REPLY:
	case BP_MSG_GOODBYE: {
		bp_msg_text m;
		r = bp_msg_text_decode(type, buf, len, &m);
		return r < 0 ? r : bp_msg_text_encode(type, &m, out, cap);
	}
	}
	ck_abort_msg("no decoder for type %u", type);
	return -1;
}

/* Decode as `type`: 0 or the decoder's errno. */
static int decode_as(uint16_t type, const uint8_t *buf, size_t len)
{
	int r = recode(type, buf, len, g_out, sizeof(g_out));

	if (r >= 0)
		ck_assert_msg(r == (int)len && memcmp(g_out, buf, len) == 0,
			      "%s: accepted bytes do not re-encode to themselves",
			      bp_msg_type_name(type));
	return r < 0 ? r : 0;
}

/* Patch `width` bytes at `off` of the sample of `type` to v and decode it. */
static int decode_patched(uint16_t type, size_t off, int width, uint64_t v)
{
	size_t len = sample(type);

	wr(g_msg + off, width, v);
	return decode_as(type, g_msg, len);
}

/*
 * Build, byte by byte, a message of `type` whose string (length field at
 * str_at - 4) is s[0..slen): the fixed part comes from the sample, the
 * string and the header length from the arguments. No validation, so it
 * can hold what no encoder would write.
 */
static size_t string_msg(uint16_t type, size_t str_at, const char *s, size_t slen)
{
	sample(type);
	wr(g_msg + str_at - 4, 4, slen);
	memcpy(g_msg + str_at, s, slen);
	wr(g_msg + HDR_LENGTH, 4, str_at + slen);
	return str_at + slen;
}

static char *repeat(char c, size_t n)
{
	static char s[BUF_SIZE];

	ck_assert_uint_le(n, sizeof(s));
	memset(s, c, n);
	return s;
}

static bool has_string(uint16_t type)
{
	return type == BP_MSG_HELLO || type == BP_MSG_HELLO_OK || type == BP_MSG_OPEN ||
	       type == BP_MSG_ERROR || type == BP_MSG_STATUS_REPLY || type == BP_MSG_GOODBYE ||
	       type == BP_MSG_METRICS_REPLY;
}

static size_t string_offset(uint16_t type)
{
	switch (type) {
	case BP_MSG_HELLO: return HELLO_NAME;
	case BP_MSG_HELLO_OK: return OK_SERVER;
	case BP_MSG_OPEN: return OPEN_PATH;
	case BP_MSG_ERROR: return ERR_MESSAGE;
	default: return TEXT_BYTES;
	}
}

/* ---- header ------------------------------------------------------------- */

START_TEST(test_header_layout)
{
	static const uint8_t want[16] = { 'B', 'D', 'P', '1', 8, 0, 1, 0,
					  16, 0, 0, 0, 0, 0, 0, 0 };
	bp_msg_header h;

	ck_assert_int_eq(bp_msg_status_encode(g_msg, sizeof(g_msg)), 16);
	ck_assert_mem_eq(g_msg, want, 16);
	ck_assert_int_eq(bp_msg_header_decode(g_msg, 16, &h), 0);
	ck_assert_uint_eq(h.magic, BP_PROTO_MAGIC);
	ck_assert_uint_eq(h.type, BP_MSG_STATUS);
	ck_assert_uint_eq(h.version, BP_PROTO_VERSION);
	ck_assert_uint_eq(h.length, 16);
	ck_assert_uint_eq(h.reserved, 0);
}
END_TEST

START_TEST(test_header_each_type)
{
	uint16_t type = (uint16_t)(TYPE_FIRST + _i);
	size_t len = sample(type);
	bp_msg_header h;

	ck_assert_int_eq(bp_msg_header_decode(g_msg, len, &h), 0);
	ck_assert_uint_eq(h.type, type);
	ck_assert_uint_eq(h.version, BP_PROTO_VERSION);
	ck_assert_uint_eq(h.length, len);
	ck_assert_uint_eq(rd(g_msg + HDR_TYPE, 2), type);
	ck_assert_uint_eq(rd(g_msg + HDR_LENGTH, 4), len);
	ck_assert_uint_eq(rd(g_msg + HDR_MAGIC, 4), BP_PROTO_MAGIC);
	ck_assert_uint_eq(rd(g_msg + HDR_RESERVED, 4), 0);
}
END_TEST

START_TEST(test_header_bad_magic)
{
	bp_msg_header h, untouched;

	memset(&h, 0xa5, sizeof(h));
	untouched = h;
	for (int i = 0; i < 4; i++) {
		sample(BP_MSG_STATUS);
		g_msg[HDR_MAGIC + i] ^= 0x20;
		ck_assert_int_eq(bp_msg_header_decode(g_msg, 16, &h), -EBADMSG);
	}
	sample(BP_MSG_STATUS);
	wr(g_msg, 4, 0x31504442u ^ 0xffffffffu);
	ck_assert_int_eq(bp_msg_header_decode(g_msg, 16, &h), -EBADMSG);
	/* Big-endian magic: a peer that forgot the byte order. */
	wr(g_msg, 4, 0x42445031u);
	ck_assert_int_eq(bp_msg_header_decode(g_msg, 16, &h), -EBADMSG);
	ck_assert_mem_eq(&h, &untouched, sizeof(h));
}
END_TEST

START_TEST(test_header_unknown_type)
{
	static const uint16_t bad[] = { 0, TYPE_LAST + 1, 13, 0x100, 0x7fff, 0xffff };
	bp_msg_header h;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		sample(BP_MSG_STATUS);
		wr(g_msg + HDR_TYPE, 2, bad[i]);
		ck_assert_int_eq(bp_msg_header_decode(g_msg, 16, &h), -EBADMSG);
	}
}
END_TEST

START_TEST(test_header_length)
{
	static const uint32_t bad[] = { 0, 15, 17, 24, BP_MSG_MAX, 0xffffffffu };
	bp_msg_header h;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		sample(BP_MSG_STATUS);
		wr(g_msg + HDR_LENGTH, 4, bad[i]);
		ck_assert_int_eq(bp_msg_header_decode(g_msg, 16, &h), -EBADMSG);
	}
	/* length agrees with a longer datagram: the header is fine, STATUS is not. */
	sample(BP_MSG_STATUS);
	wr(g_msg + HDR_LENGTH, 4, 17);
	g_msg[16] = 0;
	ck_assert_int_eq(bp_msg_header_decode(g_msg, 17, &h), 0);
	ck_assert_int_eq(bp_msg_status_decode(g_msg, 17), -EBADMSG);
	/* Shorter than a header, at every length, and no buffer at all. */
	sample(BP_MSG_STATUS);
	for (size_t n = 0; n < 16; n++)
		ck_assert_int_eq(bp_msg_header_decode(g_msg, n, &h), -EBADMSG);
	ck_assert_int_eq(bp_msg_header_decode(NULL, 16, &h), -EBADMSG);
}
END_TEST

START_TEST(test_header_over_max)
{
	bp_msg_header h;

	/* A datagram one byte over the limit is rejected even when self-consistent. */
	sample(BP_MSG_STATUS_REPLY);
	wr(g_msg + HDR_LENGTH, 4, BP_MSG_MAX + 1);
	ck_assert_int_eq(bp_msg_header_decode(g_msg, BP_MSG_MAX + 1, &h), -EBADMSG);
	wr(g_msg + HDR_LENGTH, 4, BP_MSG_MAX);
	ck_assert_int_eq(bp_msg_header_decode(g_msg, BP_MSG_MAX, &h), 0);
	ck_assert_uint_eq(h.length, BP_MSG_MAX);
}
END_TEST

START_TEST(test_header_reserved)
{
	bp_msg_header h;

	for (int i = 0; i < 4; i++) {
		sample(BP_MSG_STATUS);
		g_msg[HDR_RESERVED + i] = 1;
		ck_assert_int_eq(bp_msg_header_decode(g_msg, 16, &h), -EBADMSG);
	}
}
END_TEST

START_TEST(test_type_names)
{
	static const char *const want[] = { "HELLO", "HELLO_OK", "OPEN", "READY", "ERROR",
					    "CLOSE", "CLOSED", "STATUS", "STATUS_REPLY",
					    "GOODBYE", "METRICS", "METRICS_REPLY" };

	for (int t = TYPE_FIRST; t <= TYPE_LAST; t++)
		ck_assert_str_eq(bp_msg_type_name((uint16_t)t), want[t - TYPE_FIRST]);
	ck_assert_str_eq(bp_msg_type_name(0), "UNKNOWN");
	ck_assert_str_eq(bp_msg_type_name(TYPE_LAST + 1), "UNKNOWN");
	ck_assert_str_eq(bp_msg_type_name(0xffff), "UNKNOWN");
}
END_TEST

/* ---- version negotiation ------------------------------------------------ */

START_TEST(test_negotiation_header_version)
{
	static const uint16_t future[] = { 0, BP_PROTO_VERSION + 1, 3, 0x100, 0xffff };
	bp_msg_header h;

	for (size_t i = 0; i < sizeof(future) / sizeof(future[0]); i++) {
		size_t len = sample(BP_MSG_HELLO);

		wr(g_msg + HDR_VERSION, 2, future[i]);
		ck_assert_int_eq(bp_msg_header_decode(g_msg, len, &h), -EPROTONOSUPPORT);
		/* The version is judged before type, length and reserved ... */
		wr(g_msg + HDR_TYPE, 2, 0xffff);
		wr(g_msg + HDR_RESERVED, 4, 1);
		ck_assert_int_eq(bp_msg_header_decode(g_msg, len, &h), -EPROTONOSUPPORT);
		ck_assert_int_eq(bp_msg_header_decode(g_msg, len + 1, &h), -EPROTONOSUPPORT);
		/* ... but only with a good magic and a whole header. */
		g_msg[HDR_MAGIC] ^= 1;
		ck_assert_int_eq(bp_msg_header_decode(g_msg, len, &h), -EBADMSG);
		g_msg[HDR_MAGIC] ^= 1;
		ck_assert_int_eq(bp_msg_header_decode(g_msg, 15, &h), -EBADMSG);
	}
}
END_TEST

START_TEST(test_negotiation_body_decoders)
{
	uint16_t type = (uint16_t)(TYPE_FIRST + _i);

	/* Body decoders speak only -EBADMSG, even for a version from the future. */
	ck_assert_int_eq(decode_patched(type, HDR_VERSION, 2, BP_PROTO_VERSION + 1), -EBADMSG);
	ck_assert_int_eq(decode_patched(type, HDR_VERSION, 2, 0), -EBADMSG);
}
END_TEST

START_TEST(test_negotiation_hello_ranges)
{
	bp_msg_hello m = sample_hello(), got;
	int n;

	/* Ranges beyond this build's are well-formed: the daemon answers them with ERROR. */
	static const uint16_t ok[][2] = { { 1, 1 }, { 1, 0xffff }, { 2, 5 }, { 0xffff, 0xffff } };
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		m.min_version = ok[i][0];
		m.max_version = ok[i][1];
		n = bp_msg_hello_encode(&m, g_msg, sizeof(g_msg));
		ck_assert_int_gt(n, 0);
		ck_assert_int_eq(bp_msg_hello_decode(g_msg, (size_t)n, &got), 0);
		ck_assert_uint_eq(got.min_version, ok[i][0]);
		ck_assert_uint_eq(got.max_version, ok[i][1]);
	}
	static const uint16_t bad[][2] = { { 0, 0 }, { 0, 1 }, { 2, 1 }, { 0xffff, 1 } };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		m.min_version = bad[i][0];
		m.max_version = bad[i][1];
		ck_assert_int_eq(bp_msg_hello_encode(&m, g_msg, sizeof(g_msg)), -EINVAL);
		ck_assert_int_eq(decode_patched(BP_MSG_HELLO, HELLO_MIN, 4,
						bad[i][0] | (uint32_t)bad[i][1] << 16), -EBADMSG);
	}
}
END_TEST

START_TEST(test_negotiation_hello_ok_version)
{
	bp_msg_hello_ok m = sample_hello_ok();

	/* The chosen version must be one this build speaks. */
	ck_assert_int_eq(decode_patched(BP_MSG_HELLO_OK, OK_VERSION, 2, BP_PROTO_VERSION), 0);
	ck_assert_int_eq(decode_patched(BP_MSG_HELLO_OK, OK_VERSION, 2, 0), -EBADMSG);
	ck_assert_int_eq(decode_patched(BP_MSG_HELLO_OK, OK_VERSION, 2, BP_PROTO_VERSION + 1),
			 -EBADMSG);
	m.version = 0;
	ck_assert_int_eq(bp_msg_hello_ok_encode(&m, g_msg, sizeof(g_msg)), -EINVAL);
	m.version = BP_PROTO_VERSION + 1;
	ck_assert_int_eq(bp_msg_hello_ok_encode(&m, g_msg, sizeof(g_msg)), -EINVAL);
}
END_TEST

/* ---- round trips and layouts -------------------------------------------- */

START_TEST(test_hello_roundtrip)
{
	bp_msg_hello m = sample_hello(), got;
	char edge[BP_NAME_MAX];
	int n;

	n = bp_msg_hello_encode(&m, g_msg, sizeof(g_msg));
	ck_assert_int_eq(n, HELLO_NAME + (int)m.name_len);
	ck_assert_uint_eq(rd(g_msg + HDR_TYPE, 2), BP_MSG_HELLO);
	ck_assert_uint_eq(rd(g_msg + HELLO_MIN, 2), 1);
	ck_assert_uint_eq(rd(g_msg + HELLO_MAX, 2), 1);
	ck_assert_uint_eq(rd(g_msg + HELLO_NAME_LEN, 4), m.name_len);
	ck_assert_mem_eq(g_msg + HELLO_NAME, SAMPLE_NAME, m.name_len);
	ck_assert_int_eq(bp_msg_hello_decode(g_msg, (size_t)n, &got), 0);
	ck_assert_uint_eq(got.min_version, 1);
	ck_assert_uint_eq(got.max_version, 1);
	ck_assert_uint_eq(got.name_len, m.name_len);
	ck_assert_ptr_eq(got.name, (const char *)g_msg + HELLO_NAME);

	/* The longest name, made of the printable extremes. */
	for (size_t i = 0; i < sizeof(edge); i++)
		edge[i] = i % 2 ? '~' : ' ';
	m.name = edge;
	m.name_len = BP_NAME_MAX;
	n = bp_msg_hello_encode(&m, g_msg, sizeof(g_msg));
	ck_assert_int_eq(n, HELLO_NAME + BP_NAME_MAX);
	ck_assert_int_eq(bp_msg_hello_decode(g_msg, (size_t)n, &got), 0);
	ck_assert_mem_eq(got.name, edge, BP_NAME_MAX);

	/* An empty name, given as NULL. */
	m.name = NULL;
	m.name_len = 0;
	n = bp_msg_hello_encode(&m, g_msg, sizeof(g_msg));
	ck_assert_int_eq(n, HELLO_NAME);
	ck_assert_int_eq(bp_msg_hello_decode(g_msg, (size_t)n, &got), 0);
	ck_assert_uint_eq(got.name_len, 0);
}
END_TEST

START_TEST(test_hello_ok_roundtrip)
{
	bp_msg_hello_ok m = sample_hello_ok(), got;
	int n;

	n = bp_msg_hello_ok_encode(&m, g_msg, sizeof(g_msg));
	ck_assert_int_eq(n, OK_SERVER + (int)m.server_len);
	ck_assert_uint_eq(rd(g_msg + OK_VERSION, 2), 1);
	ck_assert_uint_eq(rd(g_msg + OK_RESERVED, 2), 0);
	ck_assert_uint_eq(rd(g_msg + OK_MAX_SESSIONS, 4), 16);
	ck_assert_uint_eq(rd(g_msg + OK_MAX_BATCH, 4), 4096);
	ck_assert_uint_eq(rd(g_msg + OK_SERVER_LEN, 4), m.server_len);
	ck_assert_mem_eq(g_msg + OK_SERVER, SAMPLE_SERVER, m.server_len);
	ck_assert_int_eq(bp_msg_hello_ok_decode(g_msg, (size_t)n, &got), 0);
	ck_assert_uint_eq(got.version, 1);
	ck_assert_uint_eq(got.max_sessions, 16);
	ck_assert_uint_eq(got.max_batch_size, 4096);
	ck_assert_uint_eq(got.server_len, m.server_len);
	ck_assert_ptr_eq(got.server, (const char *)g_msg + OK_SERVER);

	m.max_sessions = UINT32_MAX;
	m.max_batch_size = 1u << 20;
	m.server = repeat('v', 64);
	m.server_len = 64;
	n = bp_msg_hello_ok_encode(&m, g_msg, sizeof(g_msg));
	ck_assert_int_eq(n, OK_SERVER + 64);
	ck_assert_int_eq(bp_msg_hello_ok_decode(g_msg, (size_t)n, &got), 0);
	ck_assert_uint_eq(got.max_sessions, UINT32_MAX);
	ck_assert_uint_eq(got.max_batch_size, 1u << 20);
	ck_assert_uint_eq(got.server_len, 64);
}
END_TEST

START_TEST(test_open_roundtrip)
{
	bp_msg_open m = sample_open(), got;
	int n;

	for (unsigned i = 0; i < sizeof(m.device_uuid); i++)
		m.device_uuid[i] = (uint8_t)(0xa0 + i);
	n = bp_msg_open_encode(&m, g_msg, sizeof(g_msg));
	ck_assert_int_eq(n, OPEN_PATH + (int)m.path_len);
	ck_assert_uint_eq(rd(g_msg + OPEN_SEED, 8), UINT64_C(0x0123456789abcdef));
	ck_assert_uint_eq(g_msg[OPEN_SEED], 0xef); /* little-endian */
	ck_assert_uint_eq(rd(g_msg + OPEN_EPOCH, 8), 3);
	ck_assert_uint_eq(rd(g_msg + OPEN_BATCH, 8), 77);
	ck_assert_uint_eq(rd(g_msg + OPEN_BATCH_SIZE, 4), 256);
	ck_assert_uint_eq(rd(g_msg + OPEN_RANK, 4), 3);
	ck_assert_uint_eq(rd(g_msg + OPEN_WORLD, 4), 8);
	ck_assert_uint_eq(rd(g_msg + OPEN_PREFETCH, 4), 16);
	ck_assert_uint_eq(rd(g_msg + OPEN_WINDOW, 4), 64);
	ck_assert_uint_eq(rd(g_msg + OPEN_PLACEMENT, 4), 2);
	ck_assert_uint_eq(g_msg[OPEN_SHUFFLE], BP_SHUFFLE_BLOCK);
	ck_assert_uint_eq(g_msg[OPEN_DROP_LAST], 1);
	ck_assert_uint_eq(rd(g_msg + OPEN_RESERVED, 2), 0);
	ck_assert_uint_eq(g_msg[OPEN_UUID], 0xa0);
	ck_assert_uint_eq(g_msg[OPEN_UUID + 15], 0xaf);
	ck_assert_uint_eq(rd(g_msg + OPEN_PATH_LEN, 4), m.path_len);
	ck_assert_mem_eq(g_msg + OPEN_PATH, SAMPLE_PATH, m.path_len);

	ck_assert_int_eq(bp_msg_open_decode(g_msg, (size_t)n, &got), 0);
	ck_assert_uint_eq(got.seed, m.seed);
	ck_assert_uint_eq(got.start_epoch, 3);
	ck_assert_uint_eq(got.start_batch, 77);
	ck_assert_uint_eq(got.batch_size, 256);
	ck_assert_uint_eq(got.rank, 3);
	ck_assert_uint_eq(got.world, 8);
	ck_assert_uint_eq(got.prefetch, 16);
	ck_assert_uint_eq(got.window, 64);
	ck_assert_int_eq(got.placement, 2);
	ck_assert_uint_eq(got.shuffle, BP_SHUFFLE_BLOCK);
	ck_assert(got.drop_last);
	ck_assert_mem_eq(got.device_uuid, m.device_uuid, sizeof(m.device_uuid));
	ck_assert_uint_eq(got.path_len, m.path_len);
	ck_assert_ptr_eq(got.path, (const char *)g_msg + OPEN_PATH);

	/* Host placement on the wire is 0xffffffff; every limit at its edge. */
	m.placement = BP_PLACEMENT_HOST;
	m.drop_last = false;
	m.shuffle = BP_SHUFFLE_NONE;
	m.seed = m.start_epoch = m.start_batch = UINT64_MAX;
	m.batch_size = 1u << 20;
	m.world = 1u << 16;
	m.rank = m.world - 1;
	m.prefetch = 4096;
	m.window = 1u << 20;
	m.path = repeat('p', BP_PATH_MAX);
	m.path_len = BP_PATH_MAX;
	n = bp_msg_open_encode(&m, g_msg, sizeof(g_msg));
	ck_assert_int_eq(n, OPEN_PATH + BP_PATH_MAX);
	ck_assert_uint_eq(rd(g_msg + OPEN_PLACEMENT, 4), 0xffffffffu);
	ck_assert_uint_eq(g_msg[OPEN_DROP_LAST], 0);
	ck_assert_int_eq(bp_msg_open_decode(g_msg, (size_t)n, &got), 0);
	ck_assert_int_eq(got.placement, BP_PLACEMENT_HOST);
	ck_assert(!got.drop_last);
	ck_assert_uint_eq(got.rank, 65535);
	ck_assert_uint_eq(got.world, 65536);
	ck_assert_uint_eq(got.start_batch, UINT64_MAX);
	ck_assert_uint_eq(got.path_len, BP_PATH_MAX);

	/* The smallest request. */
	m = sample_open();
	m.batch_size = 1;
	m.rank = 0;
	m.world = 1;
	m.prefetch = 0;
	m.window = 0;
	m.path = "/";
	m.path_len = 1;
	n = bp_msg_open_encode(&m, g_msg, sizeof(g_msg));
	ck_assert_int_eq(n, OPEN_PATH + 1);
	ck_assert_int_eq(bp_msg_open_decode(g_msg, (size_t)n, &got), 0);
	ck_assert_uint_eq(got.world, 1);
	ck_assert_uint_eq(got.prefetch, 0);
}
END_TEST

START_TEST(test_ready_roundtrip)
{
	bp_msg_ready m = sample_ready(), got;
	int n;

	n = bp_msg_ready_encode(&m, g_msg, sizeof(g_msg));
	ck_assert_int_eq(n, READY_LEN);
	ck_assert_uint_eq(rd(g_msg + HDR_LENGTH, 4), READY_LEN);
	ck_assert_uint_eq(rd(g_msg + READY_SESSION, 8), 42);
	ck_assert_uint_eq(rd(g_msg + READY_FINGERPRINT, 8), m.fingerprint);
	ck_assert_uint_eq(rd(g_msg + READY_SAMPLES, 8), m.samples);
	ck_assert_uint_eq(rd(g_msg + READY_BPE, 8), 625);
	ck_assert_uint_eq(rd(g_msg + READY_DATA_SIZE, 8), m.data_size);
	ck_assert_uint_eq(rd(g_msg + READY_CTRL_SIZE, 8), m.ctrl_size);
	ck_assert_uint_eq(rd(g_msg + READY_MAX_SAMPLE, 8), 1u << 20);
	ck_assert_uint_eq(rd(g_msg + READY_BATCH_SIZE, 4), 256);
	ck_assert_uint_eq(rd(g_msg + READY_SLOTS, 4), 32);
	ck_assert_uint_eq(rd(g_msg + READY_PLACEMENT, 4), 2);
	ck_assert_uint_eq(rd(g_msg + READY_RESERVED, 4), 0);
	ck_assert_int_eq(bp_msg_ready_decode(g_msg, (size_t)n, &got), 0);
	ck_assert_uint_eq(got.session, m.session);
	ck_assert_uint_eq(got.fingerprint, m.fingerprint);
	ck_assert_uint_eq(got.samples, m.samples);
	ck_assert_uint_eq(got.batches_per_epoch, m.batches_per_epoch);
	ck_assert_uint_eq(got.data_size, m.data_size);
	ck_assert_uint_eq(got.ctrl_size, m.ctrl_size);
	ck_assert_uint_eq(got.max_sample, m.max_sample);
	ck_assert_uint_eq(got.batch_size, m.batch_size);
	ck_assert_uint_eq(got.slots, m.slots);
	ck_assert_int_eq(got.placement, m.placement);

	m.placement = BP_PLACEMENT_HOST;
	m.slots = BP_RING_MAX_SLOTS;
	m.ctrl_size = bp_ring_ctrl_size(m.slots);
	m.data_size = bp_ring_arena_offset(m.slots) + BP_RING_RECORD_ALIGN;
	m.max_sample = 0;
	n = bp_msg_ready_encode(&m, g_msg, sizeof(g_msg));
	ck_assert_int_eq(n, READY_LEN);
	ck_assert_int_eq(bp_msg_ready_decode(g_msg, (size_t)n, &got), 0);
	ck_assert_int_eq(got.placement, BP_PLACEMENT_HOST);
	ck_assert_uint_eq(got.slots, BP_RING_MAX_SLOTS);
	ck_assert_uint_eq(got.data_size, m.data_size);
}
END_TEST

START_TEST(test_error_roundtrip)
{
	bp_msg_error m = sample_error(), got;
	int n;

	n = bp_msg_error_encode(&m, g_msg, sizeof(g_msg));
	ck_assert_int_eq(n, ERR_MESSAGE + (int)m.message_len);
	ck_assert_uint_eq(rd(g_msg + ERR_CODE, 4), (uint32_t)-ENOENT);
	ck_assert_uint_eq(rd(g_msg + ERR_LEN, 4), m.message_len);
	ck_assert_mem_eq(g_msg + ERR_MESSAGE, SAMPLE_ERROR, m.message_len);
	ck_assert_int_eq(bp_msg_error_decode(g_msg, (size_t)n, &got), 0);
	ck_assert_int_eq(got.code, -ENOENT);
	ck_assert_uint_eq(got.message_len, m.message_len);
	ck_assert_ptr_eq(got.message, (const char *)g_msg + ERR_MESSAGE);

	/* Error text may carry any non-NUL bytes (paths are not ASCII). */
	m.code = -4095;
	m.message = repeat('\xe9', BP_ERRMSG_MAX);
	m.message_len = BP_ERRMSG_MAX;
	n = bp_msg_error_encode(&m, g_msg, sizeof(g_msg));
	ck_assert_int_eq(n, ERR_MESSAGE + BP_ERRMSG_MAX);
	ck_assert_int_eq(bp_msg_error_decode(g_msg, (size_t)n, &got), 0);
	ck_assert_int_eq(got.code, -4095);

	m.code = -1;
	m.message = NULL;
	m.message_len = 0;
	n = bp_msg_error_encode(&m, g_msg, sizeof(g_msg));
	ck_assert_int_eq(n, ERR_MESSAGE);
	ck_assert_int_eq(bp_msg_error_decode(g_msg, (size_t)n, &got), 0);
	ck_assert_int_eq(got.code, -1);
	ck_assert_uint_eq(got.message_len, 0);
}
END_TEST

START_TEST(test_session_roundtrip)
{
	static const uint16_t types[] = { BP_MSG_CLOSE, BP_MSG_CLOSED };
	static const uint64_t ids[] = { 1, 42, UINT64_MAX };

	for (size_t t = 0; t < 2; t++) {
		for (size_t i = 0; i < 3; i++) {
			bp_msg_session m = { .session = ids[i] }, got;
			int n = bp_msg_session_encode(types[t], &m, g_msg, sizeof(g_msg));

			ck_assert_int_eq(n, SESSION_LEN);
			ck_assert_uint_eq(rd(g_msg + HDR_TYPE, 2), types[t]);
			ck_assert_uint_eq(rd(g_msg + SESSION_ID, 8), ids[i]);
			ck_assert_int_eq(bp_msg_session_decode(types[t], g_msg, SESSION_LEN, &got), 0);
			ck_assert_uint_eq(got.session, ids[i]);
			/* CLOSE and CLOSED share a layout, not a type. */
			ck_assert_int_eq(bp_msg_session_decode(types[1 - t], g_msg, SESSION_LEN, &got),
					 -EBADMSG);
		}
	}
}
END_TEST

START_TEST(test_status_roundtrip)
{
	ck_assert_int_eq(bp_msg_status_encode(g_msg, 16), 16);
	ck_assert_int_eq(bp_msg_status_decode(g_msg, 16), 0);
}
END_TEST

START_TEST(test_text_roundtrip)
{
	bp_msg_text m = sample_status_reply(), got;
	int n;

	n = bp_msg_text_encode(BP_MSG_STATUS_REPLY, &m, g_msg, sizeof(g_msg));
	ck_assert_int_eq(n, TEXT_BYTES + (int)m.text_len);
	ck_assert_uint_eq(rd(g_msg + HDR_TYPE, 2), BP_MSG_STATUS_REPLY);
	ck_assert_uint_eq(rd(g_msg + TEXT_CODE, 4), 0);
	ck_assert_uint_eq(rd(g_msg + TEXT_LEN, 4), m.text_len);
	ck_assert_mem_eq(g_msg + TEXT_BYTES, SAMPLE_JSON, m.text_len);
	ck_assert_int_eq(bp_msg_text_decode(BP_MSG_STATUS_REPLY, g_msg, (size_t)n, &got), 0);
	ck_assert_int_eq(got.code, 0);
	ck_assert_uint_eq(got.text_len, m.text_len);
	ck_assert_ptr_eq(got.text, (const char *)g_msg + TEXT_BYTES);

	m = sample_goodbye();
	n = bp_msg_text_encode(BP_MSG_GOODBYE, &m, g_msg, sizeof(g_msg));
	ck_assert_int_eq(n, TEXT_BYTES + (int)m.text_len);
	ck_assert_uint_eq(rd(g_msg + TEXT_CODE, 4), (uint32_t)-ESHUTDOWN);
	ck_assert_int_eq(bp_msg_text_decode(BP_MSG_GOODBYE, g_msg, (size_t)n, &got), 0);
	ck_assert_int_eq(got.code, -ESHUTDOWN);
	ck_assert_mem_eq(got.text, SAMPLE_REASON, got.text_len);

	/* The longest text fills the largest datagram exactly. */
	m = sample_status_reply();
	m.text = repeat('x', BP_STATUS_MAX);
	m.text_len = BP_STATUS_MAX;
	n = bp_msg_text_encode(BP_MSG_STATUS_REPLY, &m, g_msg, sizeof(g_msg));
	ck_assert_int_eq(n, BP_MSG_MAX);
	ck_assert_int_eq(bp_msg_text_decode(BP_MSG_STATUS_REPLY, g_msg, (size_t)n, &got), 0);
	ck_assert_uint_eq(got.text_len, BP_STATUS_MAX);

	m = sample_goodbye();
	m.text = NULL;
	m.text_len = 0;
	n = bp_msg_text_encode(BP_MSG_GOODBYE, &m, g_msg, sizeof(g_msg));
	ck_assert_int_eq(n, TEXT_BYTES);
	ck_assert_int_eq(bp_msg_text_decode(BP_MSG_GOODBYE, g_msg, (size_t)n, &got), 0);
}
END_TEST

/* ---- every decoder, generic attacks ------------------------------------- */

START_TEST(test_reject_bad_magic)
{
	uint16_t type = (uint16_t)(TYPE_FIRST + _i);

	for (int i = 0; i < 4; i++) {
		size_t len = sample(type);

		g_msg[HDR_MAGIC + i] ^= 0x01;
		ck_assert_int_eq(decode_as(type, g_msg, len), -EBADMSG);
	}
	ck_assert_int_eq(decode_patched(type, HDR_MAGIC, 4, 0), -EBADMSG);
}
END_TEST

START_TEST(test_reject_wrong_length)
{
	uint16_t type = (uint16_t)(TYPE_FIRST + _i);
	size_t len = sample(type);

	/* The datagram and the header disagree. */
	ck_assert_int_eq(decode_as(type, g_msg, len - 1), -EBADMSG);
	g_msg[len] = 0;
	ck_assert_int_eq(decode_as(type, g_msg, len + 1), -EBADMSG);
	ck_assert_int_eq(decode_patched(type, HDR_LENGTH, 4, len - 1), -EBADMSG);
	ck_assert_int_eq(decode_patched(type, HDR_LENGTH, 4, len + 1), -EBADMSG);

	/* They agree, but the body is one byte short ... */
	len = sample(type);
	wr(g_msg + HDR_LENGTH, 4, len - 1);
	ck_assert_int_eq(decode_as(type, g_msg, len - 1), -EBADMSG);

	/* ... or carries one trailing byte, whatever its value. */
	for (int v = 0; v < 256; v += 97) {
		len = sample(type);
		wr(g_msg + HDR_LENGTH, 4, len + 1);
		g_msg[len] = (uint8_t)v;
		ck_assert_int_eq(decode_as(type, g_msg, len + 1), -EBADMSG);
	}
}
END_TEST

START_TEST(test_reject_truncated)
{
	uint16_t type = (uint16_t)(TYPE_FIRST + _i);
	size_t len = sample(type);

	/* Exactly sized copies, so a read past the end is a sanitizer report. */
	for (size_t n = 0; n < len; n++) {
		uint8_t *cut = malloc(n ? n : 1);

		ck_assert_ptr_nonnull(cut);
		sample(type);
		memcpy(cut, g_msg, n);
		ck_assert_int_eq(decode_as(type, cut, n), -EBADMSG);
		if (n >= 16) {
			/* Truncated cleanly, header length rewritten to match. */
			wr(cut + HDR_LENGTH, 4, n);
			ck_assert_int_eq(decode_as(type, cut, n), -EBADMSG);
		}
		free(cut);
	}
	ck_assert_int_eq(decode_as(type, NULL, 0), -EBADMSG);
	ck_assert_int_eq(decode_as(type, NULL, len), -EBADMSG);
}
END_TEST

START_TEST(test_reject_string_length_field)
{
	uint16_t type = (uint16_t)(TYPE_FIRST + _i);
	uint64_t slen;
	size_t at, len;

	if (!has_string(type))
		return;
	at = string_offset(type) - 4;
	len = sample(type);
	slen = rd(g_msg + at, 4);
	ck_assert_uint_eq(slen, len - string_offset(type));
	ck_assert_int_eq(decode_patched(type, at, 4, slen + 1), -EBADMSG);
	ck_assert_int_eq(decode_patched(type, at, 4, slen - 1), -EBADMSG);
	ck_assert_int_eq(decode_patched(type, at, 4, 0xffffffffu), -EBADMSG);
	ck_assert_int_eq(decode_patched(type, at, 4, 0xffffffffu - (len - 1)), -EBADMSG);
	ck_assert_int_eq(decode_patched(type, at, 4, len), -EBADMSG);
}
END_TEST

START_TEST(test_reject_foreign_types)
{
	uint16_t type = (uint16_t)(TYPE_FIRST + _i);
	size_t len;

	/* This message's bytes relabelled as every other type, and unknown ones. */
	for (int t = 0; t <= TYPE_LAST + 1; t++) {
		if (t == type)
			continue;
		ck_assert_int_eq(decode_patched(type, HDR_TYPE, 2, (uint64_t)t), -EBADMSG);
	}
	ck_assert_int_eq(decode_patched(type, HDR_TYPE, 2, 0xffff), -EBADMSG);

	/* Every other decoder turns this message down. */
	len = sample(type);
	for (int t = TYPE_FIRST; t <= TYPE_LAST; t++)
		if (t != type)
			ck_assert_int_eq(decode_as((uint16_t)t, g_msg, len), -EBADMSG);
	ck_assert_int_eq(decode_as(type, g_msg, len), 0);
}
END_TEST

START_TEST(test_reject_header_reserved)
{
	uint16_t type = (uint16_t)(TYPE_FIRST + _i);

	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(decode_patched(type, HDR_RESERVED + (size_t)i, 1, 0x80), -EBADMSG);
}
END_TEST

START_TEST(test_bit_flips)
{
	uint16_t type = (uint16_t)(TYPE_FIRST + _i);
	size_t len = sample(type);
	uint8_t orig[BP_MSG_MAX];
	int accepted = 0;

	memcpy(orig, g_msg, len);
	for (size_t bit = 0; bit < len * 8; bit++) {
		int r;

		memcpy(g_msg, orig, len);
		g_msg[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		/* decode_as checks that an accepted message re-encodes to itself. */
		r = decode_as(type, g_msg, len);
		ck_assert_msg(r == 0 || r == -EBADMSG, "bit %zu: errno %d", bit, r);
		if (bit < 16 * 8)
			ck_assert_int_eq(r, -EBADMSG); /* every header bit matters */
		accepted += r == 0;
	}
	/* Data fields (seed, fingerprint, printable names...) do accept some flips. */
	if (type != BP_MSG_STATUS && type != BP_MSG_METRICS)
		ck_assert_int_gt(accepted, 0);
}
END_TEST

/* ---- field validation, one field at a time ------------------------------ */

START_TEST(test_hello_fields)
{
	static const unsigned char bad_chars[] = { 0x00, 0x09, 0x0a, 0x1f, 0x7f, 0x80, 0xff };
	bp_msg_hello m;
	char name[BP_NAME_MAX + 1];
	size_t len;

	/* Name longer than BP_NAME_MAX. */
	m = sample_hello();
	m.name = repeat('n', BP_NAME_MAX + 1);
	m.name_len = BP_NAME_MAX + 1;
	ck_assert_int_eq(bp_msg_hello_encode(&m, g_msg, sizeof(g_msg)), -EINVAL);
	len = string_msg(BP_MSG_HELLO, HELLO_NAME, repeat('n', BP_NAME_MAX + 1), BP_NAME_MAX + 1);
	ck_assert_int_eq(decode_as(BP_MSG_HELLO, g_msg, len), -EBADMSG);
	len = string_msg(BP_MSG_HELLO, HELLO_NAME, repeat('n', BP_NAME_MAX), BP_NAME_MAX);
	ck_assert_int_eq(decode_as(BP_MSG_HELLO, g_msg, len), 0);

	/* Non-printable bytes, at the start, middle and end. */
	for (size_t c = 0; c < sizeof(bad_chars); c++) {
		for (size_t at = 0; at < 8; at += 3) {
			memcpy(name, "abcdefgh", 8);
			name[at == 6 ? 7 : at] = (char)bad_chars[c];
			m = sample_hello();
			m.name = name;
			m.name_len = 8;
			ck_assert_int_eq(bp_msg_hello_encode(&m, g_msg, sizeof(g_msg)), -EINVAL);
			len = string_msg(BP_MSG_HELLO, HELLO_NAME, name, 8);
			ck_assert_int_eq(decode_as(BP_MSG_HELLO, g_msg, len), -EBADMSG);
		}
	}

	/* A NULL name with a length. */
	m = sample_hello();
	m.name = NULL;
	ck_assert_int_eq(bp_msg_hello_encode(&m, g_msg, sizeof(g_msg)), -EINVAL);
}
END_TEST

START_TEST(test_hello_ok_fields)
{
	bp_msg_hello_ok m;
	size_t len;

	ck_assert_int_eq(decode_patched(BP_MSG_HELLO_OK, OK_RESERVED, 2, 1), -EBADMSG);
	ck_assert_int_eq(decode_patched(BP_MSG_HELLO_OK, OK_RESERVED + 1, 1, 0x80), -EBADMSG);

	ck_assert_int_eq(decode_patched(BP_MSG_HELLO_OK, OK_MAX_SESSIONS, 4, 0), -EBADMSG);
	ck_assert_int_eq(decode_patched(BP_MSG_HELLO_OK, OK_MAX_SESSIONS, 4, 1), 0);
	m = sample_hello_ok();
	m.max_sessions = 0;
	ck_assert_int_eq(bp_msg_hello_ok_encode(&m, g_msg, sizeof(g_msg)), -EINVAL);

	ck_assert_int_eq(decode_patched(BP_MSG_HELLO_OK, OK_MAX_BATCH, 4, 0), -EBADMSG);
	ck_assert_int_eq(decode_patched(BP_MSG_HELLO_OK, OK_MAX_BATCH, 4, (1u << 20) + 1),
			 -EBADMSG);
	ck_assert_int_eq(decode_patched(BP_MSG_HELLO_OK, OK_MAX_BATCH, 4, 1u << 20), 0);
	ck_assert_int_eq(decode_patched(BP_MSG_HELLO_OK, OK_MAX_BATCH, 4, 1), 0);
	m = sample_hello_ok();
	m.max_batch_size = 0;
	ck_assert_int_eq(bp_msg_hello_ok_encode(&m, g_msg, sizeof(g_msg)), -EINVAL);
	m.max_batch_size = (1u << 20) + 1;
	ck_assert_int_eq(bp_msg_hello_ok_encode(&m, g_msg, sizeof(g_msg)), -EINVAL);

	m = sample_hello_ok();
	m.server = repeat('s', 65);
	m.server_len = 65;
	ck_assert_int_eq(bp_msg_hello_ok_encode(&m, g_msg, sizeof(g_msg)), -EINVAL);
	len = string_msg(BP_MSG_HELLO_OK, OK_SERVER, repeat('s', 65), 65);
	ck_assert_int_eq(decode_as(BP_MSG_HELLO_OK, g_msg, len), -EBADMSG);

	m = sample_hello_ok();
	m.server = "batchd\n1";
	m.server_len = 8;
	ck_assert_int_eq(bp_msg_hello_ok_encode(&m, g_msg, sizeof(g_msg)), -EINVAL);
	len = string_msg(BP_MSG_HELLO_OK, OK_SERVER, "batchd\0001", 8);
	ck_assert_int_eq(decode_as(BP_MSG_HELLO_OK, g_msg, len), -EBADMSG);
	len = string_msg(BP_MSG_HELLO_OK, OK_SERVER, "batchd 1", 8);
	ck_assert_int_eq(decode_as(BP_MSG_HELLO_OK, g_msg, len), 0);
}
END_TEST

/* One OPEN field set to v: the encoder's and the decoder's verdicts. */
static void open_field(size_t off, int width, uint64_t v, bool valid, bp_msg_open m)
{
	ck_assert_int_eq(decode_patched(BP_MSG_OPEN, off, width, v), valid ? 0 : -EBADMSG);
	ck_assert_int_eq(bp_msg_open_encode(&m, g_msg, sizeof(g_msg)),
			 valid ? OPEN_PATH + (int)m.path_len : -EINVAL);
}

START_TEST(test_open_fields)
{
	bp_msg_open m;
	size_t len;

#define OPEN_CASE(field, off, width, value, valid)                                   \
	do {                                                                          \
		m = sample_open();                                                    \
		m.field = value;                                                      \
		open_field(off, width, (uint64_t)(value), valid, m);                  \
	} while (0)

	OPEN_CASE(batch_size, OPEN_BATCH_SIZE, 4, 0, false);
	OPEN_CASE(batch_size, OPEN_BATCH_SIZE, 4, 1, true);
	OPEN_CASE(batch_size, OPEN_BATCH_SIZE, 4, 1u << 20, true);
	OPEN_CASE(batch_size, OPEN_BATCH_SIZE, 4, (1u << 20) + 1, false);
	OPEN_CASE(batch_size, OPEN_BATCH_SIZE, 4, UINT32_MAX, false);

	OPEN_CASE(rank, OPEN_RANK, 4, 7, true);
	OPEN_CASE(rank, OPEN_RANK, 4, 8, false); /* == world */
	OPEN_CASE(rank, OPEN_RANK, 4, UINT32_MAX, false);
	OPEN_CASE(world, OPEN_WORLD, 4, 4, true);
	OPEN_CASE(world, OPEN_WORLD, 4, 3, false); /* == rank */
	OPEN_CASE(world, OPEN_WORLD, 4, 0, false);
	OPEN_CASE(world, OPEN_WORLD, 4, (1u << 16) + 1, false);
	OPEN_CASE(world, OPEN_WORLD, 4, UINT32_MAX, false);

	OPEN_CASE(prefetch, OPEN_PREFETCH, 4, 0, true);
	OPEN_CASE(prefetch, OPEN_PREFETCH, 4, 4096, true);
	OPEN_CASE(prefetch, OPEN_PREFETCH, 4, 4097, false);
	OPEN_CASE(window, OPEN_WINDOW, 4, 0, true);
	OPEN_CASE(window, OPEN_WINDOW, 4, 1u << 20, true);
	OPEN_CASE(window, OPEN_WINDOW, 4, (1u << 20) + 1, false);

	OPEN_CASE(placement, OPEN_PLACEMENT, 4, -1, true);
	OPEN_CASE(placement, OPEN_PLACEMENT, 4, 0, true);
	OPEN_CASE(placement, OPEN_PLACEMENT, 4, 255, true);
	OPEN_CASE(placement, OPEN_PLACEMENT, 4, 256, false);
	OPEN_CASE(placement, OPEN_PLACEMENT, 4, -2, false);
	OPEN_CASE(placement, OPEN_PLACEMENT, 4, INT32_MIN, false);
	/* Written as u32: -2 on the wire is 0xfffffffe. */
	ck_assert_int_eq(decode_patched(BP_MSG_OPEN, OPEN_PLACEMENT, 4, 0xfffffffeu), -EBADMSG);

	OPEN_CASE(shuffle, OPEN_SHUFFLE, 1, BP_SHUFFLE_NONE, true);
	OPEN_CASE(shuffle, OPEN_SHUFFLE, 1, BP_SHUFFLE_GLOBAL, true);
	OPEN_CASE(shuffle, OPEN_SHUFFLE, 1, BP_SHUFFLE_BLOCK, true);
	OPEN_CASE(shuffle, OPEN_SHUFFLE, 1, 3, false);
	OPEN_CASE(shuffle, OPEN_SHUFFLE, 1, 255, false);
#undef OPEN_CASE

	/* drop_last is a byte holding 0 or 1; reserved bytes are zero. */
	ck_assert_int_eq(decode_patched(BP_MSG_OPEN, OPEN_DROP_LAST, 1, 0), 0);
	ck_assert_int_eq(decode_patched(BP_MSG_OPEN, OPEN_DROP_LAST, 1, 2), -EBADMSG);
	ck_assert_int_eq(decode_patched(BP_MSG_OPEN, OPEN_DROP_LAST, 1, 0xff), -EBADMSG);
	ck_assert_int_eq(decode_patched(BP_MSG_OPEN, OPEN_RESERVED, 1, 1), -EBADMSG);
	ck_assert_int_eq(decode_patched(BP_MSG_OPEN, OPEN_RESERVED + 1, 1, 1), -EBADMSG);
	/* Unchecked u64s take any value. */
	ck_assert_int_eq(decode_patched(BP_MSG_OPEN, OPEN_SEED, 8, UINT64_MAX), 0);
	ck_assert_int_eq(decode_patched(BP_MSG_OPEN, OPEN_EPOCH, 8, UINT64_MAX), 0);
	ck_assert_int_eq(decode_patched(BP_MSG_OPEN, OPEN_BATCH, 8, UINT64_MAX), 0);

	/* Path: empty, too long, NULL with a length. */
	m = sample_open();
	m.path_len = 0;
	ck_assert_int_eq(bp_msg_open_encode(&m, g_msg, sizeof(g_msg)), -EINVAL);
	len = string_msg(BP_MSG_OPEN, OPEN_PATH, "", 0);
	ck_assert_int_eq(decode_as(BP_MSG_OPEN, g_msg, len), -EBADMSG);
	m.path = repeat('p', BP_PATH_MAX + 1);
	m.path_len = BP_PATH_MAX + 1;
	ck_assert_int_eq(bp_msg_open_encode(&m, g_msg, sizeof(g_msg)), -EINVAL);
	len = string_msg(BP_MSG_OPEN, OPEN_PATH, repeat('p', BP_PATH_MAX + 1), BP_PATH_MAX + 1);
	ck_assert_int_eq(decode_as(BP_MSG_OPEN, g_msg, len), -EBADMSG);
	len = string_msg(BP_MSG_OPEN, OPEN_PATH, repeat('p', BP_PATH_MAX), BP_PATH_MAX);
	ck_assert_int_eq(decode_as(BP_MSG_OPEN, g_msg, len), 0);
	m = sample_open();
	m.path = NULL;
	ck_assert_int_eq(bp_msg_open_encode(&m, g_msg, sizeof(g_msg)), -EINVAL);
}
END_TEST

START_TEST(test_open_path_nul)
{
	static const char *const paths[] = { "\0/data", "/da\0ta", "/data\0", "\0" };
	static const size_t lens[] = { 6, 6, 6, 1 };
	bp_msg_open m = sample_open();
	size_t len;

	for (size_t i = 0; i < 4; i++) {
		m.path = paths[i];
		m.path_len = (uint32_t)lens[i];
		ck_assert_int_eq(bp_msg_open_encode(&m, g_msg, sizeof(g_msg)), -EINVAL);
		len = string_msg(BP_MSG_OPEN, OPEN_PATH, paths[i], lens[i]);
		ck_assert_int_eq(decode_as(BP_MSG_OPEN, g_msg, len), -EBADMSG);
	}
	/* Paths are bytes, not text: anything but NUL goes. */
	len = string_msg(BP_MSG_OPEN, OPEN_PATH, "/d\x01\xff\n", 5);
	ck_assert_int_eq(decode_as(BP_MSG_OPEN, g_msg, len), 0);
}
END_TEST

/* Patch a READY field (and optionally the ring sizes along with it). */
static int ready_patched(size_t off, int width, uint64_t v, uint32_t slots)
{
	sample(BP_MSG_READY);
	wr(g_msg + off, width, v);
	if (slots) {
		wr(g_msg + READY_SLOTS, 4, slots);
		wr(g_msg + READY_CTRL_SIZE, 8, bp_ring_ctrl_size(slots));
		wr(g_msg + READY_DATA_SIZE, 8, bp_ring_arena_offset(slots) + (1u << 20));
	}
	return decode_as(BP_MSG_READY, g_msg, READY_LEN);
}

START_TEST(test_ready_fields)
{
	bp_msg_ready m;

#define READY_INVAL(field, value)                                                    \
	do {                                                                          \
		m = sample_ready();                                                   \
		m.field = value;                                                      \
		ck_assert_int_eq(bp_msg_ready_encode(&m, g_msg, sizeof(g_msg)), -EINVAL); \
	} while (0)

	ck_assert_int_eq(ready_patched(READY_SESSION, 8, 0, 0), -EBADMSG);
	READY_INVAL(session, 0);
	ck_assert_int_eq(ready_patched(READY_SAMPLES, 8, 0, 0), -EBADMSG);
	READY_INVAL(samples, 0);
	ck_assert_int_eq(ready_patched(READY_BPE, 8, 0, 0), -EBADMSG);
	READY_INVAL(batches_per_epoch, 0);
	ck_assert_int_eq(ready_patched(READY_BATCH_SIZE, 4, 0, 0), -EBADMSG);
	ck_assert_int_eq(ready_patched(READY_BATCH_SIZE, 4, (1u << 20) + 1, 0), -EBADMSG);
	ck_assert_int_eq(ready_patched(READY_BATCH_SIZE, 4, 1u << 20, 0), 0);
	READY_INVAL(batch_size, 0);
	READY_INVAL(batch_size, (1u << 20) + 1);
	ck_assert_int_eq(ready_patched(READY_PLACEMENT, 4, 0xffffffffu, 0), 0);
	ck_assert_int_eq(ready_patched(READY_PLACEMENT, 4, 255, 0), 0);
	ck_assert_int_eq(ready_patched(READY_PLACEMENT, 4, 256, 0), -EBADMSG);
	ck_assert_int_eq(ready_patched(READY_PLACEMENT, 4, 0xfffffffeu, 0), -EBADMSG);
	READY_INVAL(placement, -2);
	READY_INVAL(placement, 256);
	ck_assert_int_eq(ready_patched(READY_RESERVED, 4, 1, 0), -EBADMSG);
	ck_assert_int_eq(ready_patched(READY_RESERVED + 3, 1, 0x80, 0), -EBADMSG);
	/* Unchecked u64s take any value. */
	ck_assert_int_eq(ready_patched(READY_FINGERPRINT, 8, 0, 0), 0);
	ck_assert_int_eq(ready_patched(READY_MAX_SAMPLE, 8, UINT64_MAX, 0), 0);
	ck_assert_int_eq(ready_patched(READY_SESSION, 8, UINT64_MAX, 0), 0);

	/* Slots: 1 .. BP_RING_MAX_SLOTS, with sizes that follow ring.h. */
	ck_assert_int_eq(ready_patched(READY_SLOTS, 4, 1, 1), 0);
	ck_assert_int_eq(ready_patched(READY_SLOTS, 4, BP_RING_MAX_SLOTS, BP_RING_MAX_SLOTS), 0);
	ck_assert_int_eq(ready_patched(READY_SLOTS, 4, 0, 0), -EBADMSG);
	ck_assert_int_eq(ready_patched(READY_SLOTS, 4, 0, BP_RING_MAX_SLOTS + 1), -EBADMSG);
	READY_INVAL(slots, 0);
	m = sample_ready();
	m.slots = BP_RING_MAX_SLOTS + 1;
	m.ctrl_size = bp_ring_ctrl_size(m.slots);
	m.data_size = bp_ring_arena_offset(m.slots) + (1u << 20);
	ck_assert_int_eq(bp_msg_ready_encode(&m, g_msg, sizeof(g_msg)), -EINVAL);

	/* Control memfd: exactly bp_ring_ctrl_size(slots). */
	m = sample_ready();
	ck_assert_int_eq(ready_patched(READY_CTRL_SIZE, 8, m.ctrl_size + 4096, 0), -EBADMSG);
	ck_assert_int_eq(ready_patched(READY_CTRL_SIZE, 8, m.ctrl_size - 1, 0), -EBADMSG);
	ck_assert_int_eq(ready_patched(READY_CTRL_SIZE, 8, 0, 0), -EBADMSG);
	READY_INVAL(ctrl_size, m.ctrl_size + 4096);
	READY_INVAL(ctrl_size, 0);

	/* Data memfd: a non-empty arena past the descriptors, page multiple. */
	{
		uint64_t arena = bp_ring_arena_offset(32);

		ck_assert_int_eq(ready_patched(READY_DATA_SIZE, 8, arena, 0), -EBADMSG);
		ck_assert_int_eq(ready_patched(READY_DATA_SIZE, 8, arena + 4096, 0), 0);
		ck_assert_int_eq(ready_patched(READY_DATA_SIZE, 8, arena + 4097, 0), -EBADMSG);
		ck_assert_int_eq(ready_patched(READY_DATA_SIZE, 8, arena - 4096, 0), -EBADMSG);
		ck_assert_int_eq(ready_patched(READY_DATA_SIZE, 8, 0, 0), -EBADMSG);
		READY_INVAL(data_size, arena);
		READY_INVAL(data_size, arena + 1 + (1u << 20));
	}
#undef READY_INVAL
}
END_TEST

START_TEST(test_error_fields)
{
	static const int32_t bad[] = { 0, 1, 5, -4096, INT32_MIN, INT32_MAX };
	static const int32_t good[] = { -1, -EINVAL, -EPROTONOSUPPORT, -4095 };
	bp_msg_error m;
	size_t len;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		m = sample_error();
		m.code = bad[i];
		ck_assert_int_eq(bp_msg_error_encode(&m, g_msg, sizeof(g_msg)), -EINVAL);
		ck_assert_int_eq(decode_patched(BP_MSG_ERROR, ERR_CODE, 4, (uint32_t)bad[i]),
				 -EBADMSG);
	}
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		ck_assert_int_eq(decode_patched(BP_MSG_ERROR, ERR_CODE, 4, (uint32_t)good[i]), 0);

	m = sample_error();
	m.message = repeat('m', BP_ERRMSG_MAX + 1);
	m.message_len = BP_ERRMSG_MAX + 1;
	ck_assert_int_eq(bp_msg_error_encode(&m, g_msg, sizeof(g_msg)), -EINVAL);
	len = string_msg(BP_MSG_ERROR, ERR_MESSAGE, repeat('m', BP_ERRMSG_MAX + 1),
			 BP_ERRMSG_MAX + 1);
	ck_assert_int_eq(decode_as(BP_MSG_ERROR, g_msg, len), -EBADMSG);

	m = sample_error();
	m.message = "bad\0path";
	m.message_len = 8;
	ck_assert_int_eq(bp_msg_error_encode(&m, g_msg, sizeof(g_msg)), -EINVAL);
	len = string_msg(BP_MSG_ERROR, ERR_MESSAGE, "bad\0path", 8);
	ck_assert_int_eq(decode_as(BP_MSG_ERROR, g_msg, len), -EBADMSG);

	m = sample_error();
	m.message = NULL;
	ck_assert_int_eq(bp_msg_error_encode(&m, g_msg, sizeof(g_msg)), -EINVAL);
}
END_TEST

START_TEST(test_session_fields)
{
	bp_msg_session m = { .session = 0 };

	ck_assert_int_eq(decode_patched(BP_MSG_CLOSE, SESSION_ID, 8, 0), -EBADMSG);
	ck_assert_int_eq(decode_patched(BP_MSG_CLOSED, SESSION_ID, 8, 0), -EBADMSG);
	ck_assert_int_eq(decode_patched(BP_MSG_CLOSE, SESSION_ID, 8, UINT64_MAX), 0);
	ck_assert_int_eq(bp_msg_session_encode(BP_MSG_CLOSE, &m, g_msg, sizeof(g_msg)), -EINVAL);
	ck_assert_int_eq(bp_msg_session_encode(BP_MSG_CLOSED, &m, g_msg, sizeof(g_msg)), -EINVAL);
}
END_TEST

START_TEST(test_text_fields)
{
	bp_msg_text m;
	size_t len;

	/* Replies: 0 (last part) or BP_TEXT_MORE only. */
	ck_assert_int_eq(decode_patched(BP_MSG_STATUS_REPLY, TEXT_CODE, 4, (uint32_t)-1), -EBADMSG);
	ck_assert_int_eq(decode_patched(BP_MSG_STATUS_REPLY, TEXT_CODE, 4, 2), -EBADMSG);
	ck_assert_int_eq(decode_patched(BP_MSG_STATUS_REPLY, TEXT_CODE, 4, BP_TEXT_MORE), 0);
	ck_assert_int_eq(decode_patched(BP_MSG_METRICS_REPLY, TEXT_CODE, 4, 2), -EBADMSG);
	ck_assert_int_eq(decode_patched(BP_MSG_METRICS_REPLY, TEXT_CODE, 4, BP_TEXT_MORE), 0);
	m = sample_status_reply();
	m.code = -EIO;
	ck_assert_int_eq(bp_msg_text_encode(BP_MSG_STATUS_REPLY, &m, g_msg, sizeof(g_msg)),
			 -EINVAL);

	/* GOODBYE: a negative errno. */
	ck_assert_int_eq(decode_patched(BP_MSG_GOODBYE, TEXT_CODE, 4, 0), -EBADMSG);
	ck_assert_int_eq(decode_patched(BP_MSG_GOODBYE, TEXT_CODE, 4, 1), -EBADMSG);
	ck_assert_int_eq(decode_patched(BP_MSG_GOODBYE, TEXT_CODE, 4, (uint32_t)-4096), -EBADMSG);
	ck_assert_int_eq(decode_patched(BP_MSG_GOODBYE, TEXT_CODE, 4, (uint32_t)-4095), 0);
	m = sample_goodbye();
	m.code = 0;
	ck_assert_int_eq(bp_msg_text_encode(BP_MSG_GOODBYE, &m, g_msg, sizeof(g_msg)), -EINVAL);
	m.code = -4096;
	ck_assert_int_eq(bp_msg_text_encode(BP_MSG_GOODBYE, &m, g_msg, sizeof(g_msg)), -EINVAL);

	/* Longer than BP_STATUS_MAX (which also overflows BP_MSG_MAX). */
	m = sample_status_reply();
	m.text = repeat('x', BP_STATUS_MAX + 1);
	m.text_len = BP_STATUS_MAX + 1;
	ck_assert_int_eq(bp_msg_text_encode(BP_MSG_STATUS_REPLY, &m, g_msg, sizeof(g_msg)),
			 -EINVAL);
	len = string_msg(BP_MSG_STATUS_REPLY, TEXT_BYTES, repeat('x', BP_STATUS_MAX + 1),
			 BP_STATUS_MAX + 1);
	ck_assert_int_eq(decode_as(BP_MSG_STATUS_REPLY, g_msg, len), -EBADMSG);

	/* NUL bytes. */
	for (uint16_t t = BP_MSG_STATUS_REPLY; t <= BP_MSG_METRICS_REPLY; t++) {
		if (t == BP_MSG_METRICS)
			continue;
		m = t == BP_MSG_GOODBYE ? sample_goodbye() : sample_status_reply();
		m.text = "{}\0";
		m.text_len = 3;
		ck_assert_int_eq(bp_msg_text_encode(t, &m, g_msg, sizeof(g_msg)), -EINVAL);
		len = string_msg(t, TEXT_BYTES, "{}\0", 3);
		ck_assert_int_eq(decode_as(t, g_msg, len), -EBADMSG);
		len = string_msg(t, TEXT_BYTES, "{}\n", 3);
		ck_assert_int_eq(decode_as(t, g_msg, len), 0);
	}
}
END_TEST

/* ---- encoder errors ------------------------------------------------------ */

START_TEST(test_encode_enospc)
{
	uint16_t type = (uint16_t)(TYPE_FIRST + _i);
	size_t len = sample(type);
	uint8_t want[BP_MSG_MAX];

	memcpy(want, g_msg, len);
	/* Too small by any amount: -ENOSPC, and not one byte written. */
	for (size_t cap = 0; cap < len; cap++) {
		memset(g_out, 0x5a, len + 8);
		ck_assert_int_eq(encode_sample(type, g_out, cap), -ENOSPC);
		for (size_t i = 0; i < len + 8; i++)
			ck_assert_uint_eq(g_out[i], 0x5a);
	}
	/* Exactly enough, and more than enough: nothing past the message. */
	memset(g_out, 0x5a, len + 8);
	ck_assert_int_eq(encode_sample(type, g_out, len), (int)len);
	ck_assert_mem_eq(g_out, want, len);
	memset(g_out, 0x5a, len + 8);
	ck_assert_int_eq(encode_sample(type, g_out, len + 8), (int)len);
	ck_assert_mem_eq(g_out, want, len);
	for (size_t i = len; i < len + 8; i++)
		ck_assert_uint_eq(g_out[i], 0x5a);
	ck_assert_int_eq(encode_sample(type, NULL, 0), -ENOSPC);
}
END_TEST

START_TEST(test_encode_einval)
{
	bp_msg_hello hello = sample_hello();
	bp_msg_open open = sample_open();
	bp_msg_text text = sample_status_reply();
	bp_msg_session s = { .session = 1 };
	uint8_t small[8];

	/* No message. */
	ck_assert_int_eq(bp_msg_hello_encode(NULL, g_msg, sizeof(g_msg)), -EINVAL);
	ck_assert_int_eq(bp_msg_hello_ok_encode(NULL, g_msg, sizeof(g_msg)), -EINVAL);
	ck_assert_int_eq(bp_msg_open_encode(NULL, g_msg, sizeof(g_msg)), -EINVAL);
	ck_assert_int_eq(bp_msg_ready_encode(NULL, g_msg, sizeof(g_msg)), -EINVAL);
	ck_assert_int_eq(bp_msg_error_encode(NULL, g_msg, sizeof(g_msg)), -EINVAL);
	ck_assert_int_eq(bp_msg_session_encode(BP_MSG_CLOSE, NULL, g_msg, sizeof(g_msg)), -EINVAL);
	ck_assert_int_eq(bp_msg_text_encode(BP_MSG_GOODBYE, NULL, g_msg, sizeof(g_msg)), -EINVAL);

	/* No buffer, but a capacity. */
	ck_assert_int_eq(bp_msg_hello_encode(&hello, NULL, 100), -EINVAL);
	ck_assert_int_eq(bp_msg_status_encode(NULL, 16), -EINVAL);

	/* A type the encoder does not write. */
	for (int t = 0; t <= TYPE_LAST + 1; t++) {
		if (t != BP_MSG_CLOSE && t != BP_MSG_CLOSED)
			ck_assert_int_eq(bp_msg_session_encode((uint16_t)t, &s, g_msg, sizeof(g_msg)),
					 -EINVAL);
		if (t != BP_MSG_STATUS_REPLY && t != BP_MSG_GOODBYE && t != BP_MSG_METRICS_REPLY)
			ck_assert_int_eq(bp_msg_text_encode((uint16_t)t, &text, g_msg, sizeof(g_msg)),
					 -EINVAL);
	}

	/* An invalid message in a small buffer: -EINVAL wins. */
	open.world = 0;
	ck_assert_int_eq(bp_msg_open_encode(&open, small, sizeof(small)), -EINVAL);
	ck_assert_int_eq(bp_msg_open_encode(&open, NULL, 0), -EINVAL);
}
END_TEST

START_TEST(test_decode_type_argument)
{
	bp_msg_session s;
	bp_msg_text t;
	size_t len;

	/* A decoder asked for a type it does not decode: a caller bug, -EINVAL. */
	len = sample(BP_MSG_CLOSE);
	ck_assert_int_eq(bp_msg_session_decode(BP_MSG_OPEN, g_msg, len, &s), -EINVAL);
	ck_assert_int_eq(bp_msg_session_decode(0, g_msg, len, &s), -EINVAL);
	len = sample(BP_MSG_GOODBYE);
	ck_assert_int_eq(bp_msg_text_decode(BP_MSG_ERROR, g_msg, len, &t), -EINVAL);
	ck_assert_int_eq(bp_msg_text_decode(0xffff, g_msg, len, &t), -EINVAL);
}
END_TEST

START_TEST(test_decode_ret_untouched)
{
	uint16_t type = (uint16_t)(TYPE_FIRST + _i);
	union {
		bp_msg_hello hello;
		bp_msg_hello_ok ok;
		bp_msg_open open;
		bp_msg_ready ready;
		bp_msg_error error;
		bp_msg_session session;
		bp_msg_text text;
	} u, before;
	size_t len = sample(type);
	int r = -1;

	/*
	 * Damage found late, after every field was parsed: the last byte of
	 * the string (NUL) or of the fixed body (reserved, session id), or the
	 * length of a header-only message.
	 */
	if (has_string(type))
		g_msg[len - 1] = 0;
	else if (type == BP_MSG_READY)
		g_msg[len - 1] = 0xff;
	else if (type == BP_MSG_CLOSE || type == BP_MSG_CLOSED)
		wr(g_msg + SESSION_ID, 8, 0);
	else
		wr(g_msg + HDR_LENGTH, 4, ++len);
	memset(&u, 0xa5, sizeof(u));
	before = u;
	switch (type) {
	case BP_MSG_HELLO: r = bp_msg_hello_decode(g_msg, len, &u.hello); break;
	case BP_MSG_HELLO_OK: r = bp_msg_hello_ok_decode(g_msg, len, &u.ok); break;
	case BP_MSG_OPEN: r = bp_msg_open_decode(g_msg, len, &u.open); break;
	case BP_MSG_READY: r = bp_msg_ready_decode(g_msg, len, &u.ready); break;
	case BP_MSG_ERROR: r = bp_msg_error_decode(g_msg, len, &u.error); break;
	case BP_MSG_CLOSE:
	case BP_MSG_CLOSED: r = bp_msg_session_decode(type, g_msg, len, &u.session); break;
	case BP_MSG_STATUS: r = bp_msg_status_decode(g_msg, len); break;
	case BP_MSG_METRICS: r = bp_msg_metrics_decode(g_msg, len); break;
	case BP_MSG_STATUS_REPLY:
	case BP_MSG_METRICS_REPLY:
	case BP_MSG_GOODBYE: r = bp_msg_text_decode(type, g_msg, len, &u.text); break;
	}
	ck_assert_int_eq(r, -EBADMSG);
	ck_assert_mem_eq(&u, &before, sizeof(u));
}
END_TEST

static Suite *protocol_suite(void)
{
	Suite *s = suite_create("protocol");
	TCase *tc;

	tc = tcase_create("header");
	tcase_add_test(tc, test_header_layout);
	tcase_add_loop_test(tc, test_header_each_type, 0, TYPE_COUNT);
	tcase_add_test(tc, test_header_bad_magic);
	tcase_add_test(tc, test_header_unknown_type);
	tcase_add_test(tc, test_header_length);
	tcase_add_test(tc, test_header_over_max);
	tcase_add_test(tc, test_header_reserved);
	tcase_add_test(tc, test_type_names);
	suite_add_tcase(s, tc);

	tc = tcase_create("negotiation");
	tcase_add_test(tc, test_negotiation_header_version);
	tcase_add_loop_test(tc, test_negotiation_body_decoders, 0, TYPE_COUNT);
	tcase_add_test(tc, test_negotiation_hello_ranges);
	tcase_add_test(tc, test_negotiation_hello_ok_version);
	suite_add_tcase(s, tc);

	tc = tcase_create("roundtrip");
	tcase_add_test(tc, test_hello_roundtrip);
	tcase_add_test(tc, test_hello_ok_roundtrip);
	tcase_add_test(tc, test_open_roundtrip);
	tcase_add_test(tc, test_ready_roundtrip);
	tcase_add_test(tc, test_error_roundtrip);
	tcase_add_test(tc, test_session_roundtrip);
	tcase_add_test(tc, test_status_roundtrip);
	tcase_add_test(tc, test_text_roundtrip);
	suite_add_tcase(s, tc);

	tc = tcase_create("reject");
	tcase_add_loop_test(tc, test_reject_bad_magic, 0, TYPE_COUNT);
	tcase_add_loop_test(tc, test_reject_wrong_length, 0, TYPE_COUNT);
	tcase_add_loop_test(tc, test_reject_truncated, 0, TYPE_COUNT);
	tcase_add_loop_test(tc, test_reject_string_length_field, 0, TYPE_COUNT);
	tcase_add_loop_test(tc, test_reject_foreign_types, 0, TYPE_COUNT);
	tcase_add_loop_test(tc, test_reject_header_reserved, 0, TYPE_COUNT);
	tcase_add_loop_test(tc, test_bit_flips, 0, TYPE_COUNT);
	tcase_add_loop_test(tc, test_decode_ret_untouched, 0, TYPE_COUNT);
	suite_add_tcase(s, tc);

	tc = tcase_create("fields");
	tcase_add_test(tc, test_hello_fields);
	tcase_add_test(tc, test_hello_ok_fields);
	tcase_add_test(tc, test_open_fields);
	tcase_add_test(tc, test_open_path_nul);
	tcase_add_test(tc, test_ready_fields);
	tcase_add_test(tc, test_error_fields);
	tcase_add_test(tc, test_session_fields);
	tcase_add_test(tc, test_text_fields);
	suite_add_tcase(s, tc);

	tc = tcase_create("encoder_errors");
	tcase_add_loop_test(tc, test_encode_enospc, 0, TYPE_COUNT);
	tcase_add_test(tc, test_encode_einval);
	tcase_add_test(tc, test_decode_type_argument);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr;
	int failed;

	sr = srunner_create(protocol_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
