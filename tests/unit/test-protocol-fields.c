/* SPDX-License-Identifier: MIT */
/*
 * test-protocol-fields.c - the Check suite for the control messages'
 * field validation (lib/proto/protocol.c), one field at a time.
 *
 * Every field with a rule is set out of range alone, once in the message
 * handed to the encoder (which must say -EINVAL and write nothing) and
 * once in the bytes of an otherwise valid sample patched after encoding
 * (which the decoder must reject with -EBADMSG); values just inside each
 * limit are accepted by both. Strings too long, with NUL bytes or with
 * bytes their type forbids are built by hand, since no encoder writes them.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "protocol-testlib.h"
#include "ring.h"

/* ---- field validation, one field at a time ------------------------------ */

START_TEST(test_hello_fields)
{
	static const unsigned char bad_chars[] = { 0x00, 0x09, 0x0a, 0x1f, 0x7f, 0x80, 0xff };
	bp_msg_hello m;
	char name[BP_NAME_MAX + 1];
	size_t len;

	/* Name longer than BP_NAME_MAX. */
	m = prt_sample_hello();
	m.name = prt_repeat('n', BP_NAME_MAX + 1);
	m.name_len = BP_NAME_MAX + 1;
	ck_assert_int_eq(bp_msg_hello_encode(&m, prt_msg, sizeof(prt_msg)), -EINVAL);
	len = prt_string_msg(BP_MSG_HELLO, HELLO_NAME, prt_repeat('n', BP_NAME_MAX + 1),
			     BP_NAME_MAX + 1);
	ck_assert_int_eq(prt_decode_as(BP_MSG_HELLO, prt_msg, len), -EBADMSG);
	len = prt_string_msg(BP_MSG_HELLO, HELLO_NAME, prt_repeat('n', BP_NAME_MAX), BP_NAME_MAX);
	ck_assert_int_eq(prt_decode_as(BP_MSG_HELLO, prt_msg, len), 0);

	/* Non-printable bytes, at the start, middle and end. */
	for (size_t c = 0; c < sizeof(bad_chars); c++) {
		for (size_t at = 0; at < 8; at += 3) {
			memcpy(name, "abcdefgh", 8);
			name[at == 6 ? 7 : at] = (char)bad_chars[c];
			m = prt_sample_hello();
			m.name = name;
			m.name_len = 8;
			ck_assert_int_eq(bp_msg_hello_encode(&m, prt_msg, sizeof(prt_msg)),
					 -EINVAL);
			len = prt_string_msg(BP_MSG_HELLO, HELLO_NAME, name, 8);
			ck_assert_int_eq(prt_decode_as(BP_MSG_HELLO, prt_msg, len), -EBADMSG);
		}
	}

	/* A NULL name with a length. */
	m = prt_sample_hello();
	m.name = NULL;
	ck_assert_int_eq(bp_msg_hello_encode(&m, prt_msg, sizeof(prt_msg)), -EINVAL);
}
END_TEST

START_TEST(test_hello_ok_fields)
{
	bp_msg_hello_ok m;
	size_t len;

	ck_assert_int_eq(prt_decode_patched(BP_MSG_HELLO_OK, OK_RESERVED, 2, 1), -EBADMSG);
	ck_assert_int_eq(prt_decode_patched(BP_MSG_HELLO_OK, OK_RESERVED + 1, 1, 0x80), -EBADMSG);

	ck_assert_int_eq(prt_decode_patched(BP_MSG_HELLO_OK, OK_MAX_SESSIONS, 4, 0), -EBADMSG);
	ck_assert_int_eq(prt_decode_patched(BP_MSG_HELLO_OK, OK_MAX_SESSIONS, 4, 1), 0);
	m = prt_sample_hello_ok();
	m.max_sessions = 0;
	ck_assert_int_eq(bp_msg_hello_ok_encode(&m, prt_msg, sizeof(prt_msg)), -EINVAL);

	ck_assert_int_eq(prt_decode_patched(BP_MSG_HELLO_OK, OK_MAX_BATCH, 4, 0), -EBADMSG);
	ck_assert_int_eq(prt_decode_patched(BP_MSG_HELLO_OK, OK_MAX_BATCH, 4, (1u << 20) + 1),
			 -EBADMSG);
	ck_assert_int_eq(prt_decode_patched(BP_MSG_HELLO_OK, OK_MAX_BATCH, 4, 1u << 20), 0);
	ck_assert_int_eq(prt_decode_patched(BP_MSG_HELLO_OK, OK_MAX_BATCH, 4, 1), 0);
	m = prt_sample_hello_ok();
	m.max_batch_size = 0;
	ck_assert_int_eq(bp_msg_hello_ok_encode(&m, prt_msg, sizeof(prt_msg)), -EINVAL);
	m.max_batch_size = (1u << 20) + 1;
	ck_assert_int_eq(bp_msg_hello_ok_encode(&m, prt_msg, sizeof(prt_msg)), -EINVAL);

	m = prt_sample_hello_ok();
	m.server = prt_repeat('s', 65);
	m.server_len = 65;
	ck_assert_int_eq(bp_msg_hello_ok_encode(&m, prt_msg, sizeof(prt_msg)), -EINVAL);
	len = prt_string_msg(BP_MSG_HELLO_OK, OK_SERVER, prt_repeat('s', 65), 65);
	ck_assert_int_eq(prt_decode_as(BP_MSG_HELLO_OK, prt_msg, len), -EBADMSG);

	m = prt_sample_hello_ok();
	m.server = "batchd\n1";
	m.server_len = 8;
	ck_assert_int_eq(bp_msg_hello_ok_encode(&m, prt_msg, sizeof(prt_msg)), -EINVAL);
	len = prt_string_msg(BP_MSG_HELLO_OK, OK_SERVER, "batchd\0001", 8);
	ck_assert_int_eq(prt_decode_as(BP_MSG_HELLO_OK, prt_msg, len), -EBADMSG);
	len = prt_string_msg(BP_MSG_HELLO_OK, OK_SERVER, "batchd 1", 8);
	ck_assert_int_eq(prt_decode_as(BP_MSG_HELLO_OK, prt_msg, len), 0);
}
END_TEST

/* One OPEN field set to v: the encoder's and the decoder's verdicts. */
static void open_field(size_t off, int width, uint64_t v, bool valid, bp_msg_open m)
{
	ck_assert_int_eq(prt_decode_patched(BP_MSG_OPEN, off, width, v), valid ? 0 : -EBADMSG);
	ck_assert_int_eq(bp_msg_open_encode(&m, prt_msg, sizeof(prt_msg)),
			 valid ? OPEN_PATH + (int)m.path_len : -EINVAL);
}

START_TEST(test_open_fields)
{
	bp_msg_open m;
	size_t len;

#define OPEN_CASE(field, off, width, value, valid)                                   \
	do {                                                                          \
		m = prt_sample_open();                                                    \
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
	ck_assert_int_eq(prt_decode_patched(BP_MSG_OPEN, OPEN_PLACEMENT, 4, 0xfffffffeu), -EBADMSG);

	OPEN_CASE(shuffle, OPEN_SHUFFLE, 1, BP_SHUFFLE_NONE, true);
	OPEN_CASE(shuffle, OPEN_SHUFFLE, 1, BP_SHUFFLE_GLOBAL, true);
	OPEN_CASE(shuffle, OPEN_SHUFFLE, 1, BP_SHUFFLE_BLOCK, true);
	OPEN_CASE(shuffle, OPEN_SHUFFLE, 1, 3, false);
	OPEN_CASE(shuffle, OPEN_SHUFFLE, 1, 255, false);
#undef OPEN_CASE

	/* drop_last is a byte holding 0 or 1; reserved bytes are zero. */
	ck_assert_int_eq(prt_decode_patched(BP_MSG_OPEN, OPEN_DROP_LAST, 1, 0), 0);
	ck_assert_int_eq(prt_decode_patched(BP_MSG_OPEN, OPEN_DROP_LAST, 1, 2), -EBADMSG);
	ck_assert_int_eq(prt_decode_patched(BP_MSG_OPEN, OPEN_DROP_LAST, 1, 0xff), -EBADMSG);
	ck_assert_int_eq(prt_decode_patched(BP_MSG_OPEN, OPEN_RESERVED, 1, 1), -EBADMSG);
	ck_assert_int_eq(prt_decode_patched(BP_MSG_OPEN, OPEN_RESERVED + 1, 1, 1), -EBADMSG);
	/* Unchecked u64s take any value. */
	ck_assert_int_eq(prt_decode_patched(BP_MSG_OPEN, OPEN_SEED, 8, UINT64_MAX), 0);
	ck_assert_int_eq(prt_decode_patched(BP_MSG_OPEN, OPEN_EPOCH, 8, UINT64_MAX), 0);
	ck_assert_int_eq(prt_decode_patched(BP_MSG_OPEN, OPEN_BATCH, 8, UINT64_MAX), 0);

	/* Path: empty, too long, NULL with a length. */
	m = prt_sample_open();
	m.path_len = 0;
	ck_assert_int_eq(bp_msg_open_encode(&m, prt_msg, sizeof(prt_msg)), -EINVAL);
	len = prt_string_msg(BP_MSG_OPEN, OPEN_PATH, "", 0);
	ck_assert_int_eq(prt_decode_as(BP_MSG_OPEN, prt_msg, len), -EBADMSG);
	m.path = prt_repeat('p', BP_PATH_MAX + 1);
	m.path_len = BP_PATH_MAX + 1;
	ck_assert_int_eq(bp_msg_open_encode(&m, prt_msg, sizeof(prt_msg)), -EINVAL);
	len = prt_string_msg(BP_MSG_OPEN, OPEN_PATH, prt_repeat('p', BP_PATH_MAX + 1),
			     BP_PATH_MAX + 1);
	ck_assert_int_eq(prt_decode_as(BP_MSG_OPEN, prt_msg, len), -EBADMSG);
	len = prt_string_msg(BP_MSG_OPEN, OPEN_PATH, prt_repeat('p', BP_PATH_MAX), BP_PATH_MAX);
	ck_assert_int_eq(prt_decode_as(BP_MSG_OPEN, prt_msg, len), 0);
	m = prt_sample_open();
	m.path = NULL;
	ck_assert_int_eq(bp_msg_open_encode(&m, prt_msg, sizeof(prt_msg)), -EINVAL);
}
END_TEST

START_TEST(test_open_path_nul)
{
	static const char *const paths[] = { "\0/data", "/da\0ta", "/data\0", "\0" };
	static const size_t lens[] = { 6, 6, 6, 1 };
	bp_msg_open m = prt_sample_open();
	size_t len;

	for (size_t i = 0; i < 4; i++) {
		m.path = paths[i];
		m.path_len = (uint32_t)lens[i];
		ck_assert_int_eq(bp_msg_open_encode(&m, prt_msg, sizeof(prt_msg)), -EINVAL);
		len = prt_string_msg(BP_MSG_OPEN, OPEN_PATH, paths[i], lens[i]);
		ck_assert_int_eq(prt_decode_as(BP_MSG_OPEN, prt_msg, len), -EBADMSG);
	}
	/* Paths are bytes, not text: anything but NUL goes. */
	len = prt_string_msg(BP_MSG_OPEN, OPEN_PATH, "/d\x01\xff\n", 5);
	ck_assert_int_eq(prt_decode_as(BP_MSG_OPEN, prt_msg, len), 0);
}
END_TEST

/* Patch a READY field (and optionally the ring sizes along with it). */
static int ready_patched(size_t off, int width, uint64_t v, uint32_t slots)
{
	prt_sample(BP_MSG_READY);
	prt_wr(prt_msg + off, width, v);
	if (slots) {
		prt_wr(prt_msg + READY_SLOTS, 4, slots);
		prt_wr(prt_msg + READY_CTRL_SIZE, 8, bp_ring_ctrl_size(slots));
		prt_wr(prt_msg + READY_DATA_SIZE, 8, bp_ring_arena_offset(slots) + (1u << 20));
	}
	return prt_decode_as(BP_MSG_READY, prt_msg, READY_LEN);
}

START_TEST(test_ready_fields)
{
	bp_msg_ready m;

#define READY_INVAL(field, value)                                                    \
	do {                                                                          \
		m = prt_sample_ready();                                                   \
		m.field = value;                                                      \
		ck_assert_int_eq(bp_msg_ready_encode(&m, prt_msg, sizeof(prt_msg)), -EINVAL); \
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
	m = prt_sample_ready();
	m.slots = BP_RING_MAX_SLOTS + 1;
	m.ctrl_size = bp_ring_ctrl_size(m.slots);
	m.data_size = bp_ring_arena_offset(m.slots) + (1u << 20);
	ck_assert_int_eq(bp_msg_ready_encode(&m, prt_msg, sizeof(prt_msg)), -EINVAL);

	/* Control memfd: exactly bp_ring_ctrl_size(slots). */
	m = prt_sample_ready();
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
		m = prt_sample_error();
		m.code = bad[i];
		ck_assert_int_eq(bp_msg_error_encode(&m, prt_msg, sizeof(prt_msg)), -EINVAL);
		ck_assert_int_eq(prt_decode_patched(BP_MSG_ERROR, ERR_CODE, 4, (uint32_t)bad[i]),
				 -EBADMSG);
	}
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		ck_assert_int_eq(prt_decode_patched(BP_MSG_ERROR, ERR_CODE, 4, (uint32_t)good[i]),
				 0);

	m = prt_sample_error();
	m.message = prt_repeat('m', BP_ERRMSG_MAX + 1);
	m.message_len = BP_ERRMSG_MAX + 1;
	ck_assert_int_eq(bp_msg_error_encode(&m, prt_msg, sizeof(prt_msg)), -EINVAL);
	len = prt_string_msg(BP_MSG_ERROR, ERR_MESSAGE, prt_repeat('m', BP_ERRMSG_MAX + 1),
			 BP_ERRMSG_MAX + 1);
	ck_assert_int_eq(prt_decode_as(BP_MSG_ERROR, prt_msg, len), -EBADMSG);

	m = prt_sample_error();
	m.message = "bad\0path";
	m.message_len = 8;
	ck_assert_int_eq(bp_msg_error_encode(&m, prt_msg, sizeof(prt_msg)), -EINVAL);
	len = prt_string_msg(BP_MSG_ERROR, ERR_MESSAGE, "bad\0path", 8);
	ck_assert_int_eq(prt_decode_as(BP_MSG_ERROR, prt_msg, len), -EBADMSG);

	m = prt_sample_error();
	m.message = NULL;
	ck_assert_int_eq(bp_msg_error_encode(&m, prt_msg, sizeof(prt_msg)), -EINVAL);
}
END_TEST

START_TEST(test_session_fields)
{
	bp_msg_session m = { .session = 0 };

	ck_assert_int_eq(prt_decode_patched(BP_MSG_CLOSE, SESSION_ID, 8, 0), -EBADMSG);
	ck_assert_int_eq(prt_decode_patched(BP_MSG_CLOSED, SESSION_ID, 8, 0), -EBADMSG);
	ck_assert_int_eq(prt_decode_patched(BP_MSG_CLOSE, SESSION_ID, 8, UINT64_MAX), 0);
	ck_assert_int_eq(bp_msg_session_encode(BP_MSG_CLOSE, &m, prt_msg, sizeof(prt_msg)),
			 -EINVAL);
	ck_assert_int_eq(bp_msg_session_encode(BP_MSG_CLOSED, &m, prt_msg, sizeof(prt_msg)),
			 -EINVAL);
}
END_TEST

START_TEST(test_text_fields)
{
	bp_msg_text m;
	size_t len;

	/* Replies: 0 (last part) or BP_TEXT_MORE only. */
	ck_assert_int_eq(prt_decode_patched(BP_MSG_STATUS_REPLY, TEXT_CODE, 4, (uint32_t)-1),
			 -EBADMSG);
	ck_assert_int_eq(prt_decode_patched(BP_MSG_STATUS_REPLY, TEXT_CODE, 4, 2), -EBADMSG);
	ck_assert_int_eq(prt_decode_patched(BP_MSG_STATUS_REPLY, TEXT_CODE, 4, BP_TEXT_MORE), 0);
	ck_assert_int_eq(prt_decode_patched(BP_MSG_METRICS_REPLY, TEXT_CODE, 4, 2), -EBADMSG);
	ck_assert_int_eq(prt_decode_patched(BP_MSG_METRICS_REPLY, TEXT_CODE, 4, BP_TEXT_MORE), 0);
	m = prt_sample_status_reply();
	m.code = -EIO;
	ck_assert_int_eq(bp_msg_text_encode(BP_MSG_STATUS_REPLY, &m, prt_msg, sizeof(prt_msg)),
			 -EINVAL);

	/* GOODBYE: a negative errno. */
	ck_assert_int_eq(prt_decode_patched(BP_MSG_GOODBYE, TEXT_CODE, 4, 0), -EBADMSG);
	ck_assert_int_eq(prt_decode_patched(BP_MSG_GOODBYE, TEXT_CODE, 4, 1), -EBADMSG);
	ck_assert_int_eq(prt_decode_patched(BP_MSG_GOODBYE, TEXT_CODE, 4, (uint32_t)-4096),
			 -EBADMSG);
	ck_assert_int_eq(prt_decode_patched(BP_MSG_GOODBYE, TEXT_CODE, 4, (uint32_t)-4095), 0);
	m = prt_sample_goodbye();
	m.code = 0;
	ck_assert_int_eq(bp_msg_text_encode(BP_MSG_GOODBYE, &m, prt_msg, sizeof(prt_msg)), -EINVAL);
	m.code = -4096;
	ck_assert_int_eq(bp_msg_text_encode(BP_MSG_GOODBYE, &m, prt_msg, sizeof(prt_msg)), -EINVAL);

	/* Longer than BP_STATUS_MAX (which also overflows BP_MSG_MAX). */
	m = prt_sample_status_reply();
	m.text = prt_repeat('x', BP_STATUS_MAX + 1);
	m.text_len = BP_STATUS_MAX + 1;
	ck_assert_int_eq(bp_msg_text_encode(BP_MSG_STATUS_REPLY, &m, prt_msg, sizeof(prt_msg)),
			 -EINVAL);
	len = prt_string_msg(BP_MSG_STATUS_REPLY, TEXT_BYTES, prt_repeat('x', BP_STATUS_MAX + 1),
			 BP_STATUS_MAX + 1);
	ck_assert_int_eq(prt_decode_as(BP_MSG_STATUS_REPLY, prt_msg, len), -EBADMSG);

	/* NUL bytes. */
	for (uint16_t t = BP_MSG_STATUS_REPLY; t <= BP_MSG_METRICS_REPLY; t++) {
		if (t == BP_MSG_METRICS)
			continue;
		m = t == BP_MSG_GOODBYE ? prt_sample_goodbye() : prt_sample_status_reply();
		m.text = "{}\0";
		m.text_len = 3;
		ck_assert_int_eq(bp_msg_text_encode(t, &m, prt_msg, sizeof(prt_msg)), -EINVAL);
		len = prt_string_msg(t, TEXT_BYTES, "{}\0", 3);
		ck_assert_int_eq(prt_decode_as(t, prt_msg, len), -EBADMSG);
		len = prt_string_msg(t, TEXT_BYTES, "{}\n", 3);
		ck_assert_int_eq(prt_decode_as(t, prt_msg, len), 0);
	}
}
END_TEST

static Suite *fields_suite(void)
{
	Suite *s = suite_create("protocol-fields");
	TCase *tc;

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
	return s;
}

int main(void)
{
	return prt_run(fields_suite());
}
