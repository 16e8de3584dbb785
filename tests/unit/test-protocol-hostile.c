/* SPDX-License-Identifier: MIT */
/*
 * test-protocol-hostile.c - the Check suite that attacks every decoder in
 * lib/proto/protocol.c generically, one message type per loop iteration.
 *
 * Every message a daemon or client receives was chosen by its peer, so
 * each type's sample is sent with a wrong magic, a wrong length,
 * truncated at every length, with trailing bytes, a lying string length,
 * relabelled as every other type, and with every single bit flipped (which
 * must be rejected or decode to a message that re-encodes to exactly the
 * flipped bytes); a rejected decode leaves its out-parameter untouched.
 *
 * The encoders' caller errors are swept the same way: a buffer too small
 * by any amount (-ENOSPC, nothing written), and missing messages, missing
 * buffers and types an encoder or decoder does not handle (-EINVAL).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "protocol-testlib.h"

/* Types whose body ends in a length-prefixed string ... */
static bool has_string(uint16_t type)
{
	return type == BP_MSG_HELLO || type == BP_MSG_HELLO_OK || type == BP_MSG_OPEN ||
	       type == BP_MSG_ERROR || type == BP_MSG_STATUS_REPLY || type == BP_MSG_GOODBYE ||
	       type == BP_MSG_METRICS_REPLY;
}

/* ... and where that string starts. */
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

/* ---- every decoder, generic attacks ------------------------------------- */

START_TEST(test_reject_bad_magic)
{
	uint16_t type = (uint16_t)(TYPE_FIRST + _i);

	for (int i = 0; i < 4; i++) {
		size_t len = prt_sample(type);

		prt_msg[HDR_MAGIC + i] ^= 0x01;
		ck_assert_int_eq(prt_decode_as(type, prt_msg, len), -EBADMSG);
	}
	ck_assert_int_eq(prt_decode_patched(type, HDR_MAGIC, 4, 0), -EBADMSG);
}
END_TEST

START_TEST(test_reject_wrong_length)
{
	uint16_t type = (uint16_t)(TYPE_FIRST + _i);
	size_t len = prt_sample(type);

	/* The datagram and the header disagree. */
	ck_assert_int_eq(prt_decode_as(type, prt_msg, len - 1), -EBADMSG);
	prt_msg[len] = 0;
	ck_assert_int_eq(prt_decode_as(type, prt_msg, len + 1), -EBADMSG);
	ck_assert_int_eq(prt_decode_patched(type, HDR_LENGTH, 4, len - 1), -EBADMSG);
	ck_assert_int_eq(prt_decode_patched(type, HDR_LENGTH, 4, len + 1), -EBADMSG);

	/* They agree, but the body is one byte short ... */
	len = prt_sample(type);
	prt_wr(prt_msg + HDR_LENGTH, 4, len - 1);
	ck_assert_int_eq(prt_decode_as(type, prt_msg, len - 1), -EBADMSG);

	/* ... or carries one trailing byte, whatever its value. */
	for (int v = 0; v < 256; v += 97) {
		len = prt_sample(type);
		prt_wr(prt_msg + HDR_LENGTH, 4, len + 1);
		prt_msg[len] = (uint8_t)v;
		ck_assert_int_eq(prt_decode_as(type, prt_msg, len + 1), -EBADMSG);
	}
}
END_TEST

START_TEST(test_reject_truncated)
{
	uint16_t type = (uint16_t)(TYPE_FIRST + _i);
	size_t len = prt_sample(type);

	/* Exactly sized copies, so a read past the end is a sanitizer report. */
	for (size_t n = 0; n < len; n++) {
		uint8_t *cut = malloc(n ? n : 1);

		ck_assert_ptr_nonnull(cut);
		prt_sample(type);
		memcpy(cut, prt_msg, n);
		ck_assert_int_eq(prt_decode_as(type, cut, n), -EBADMSG);
		if (n >= 16) {
			/* Truncated cleanly, header length rewritten to match. */
			prt_wr(cut + HDR_LENGTH, 4, n);
			ck_assert_int_eq(prt_decode_as(type, cut, n), -EBADMSG);
		}
		free(cut);
	}
	ck_assert_int_eq(prt_decode_as(type, NULL, 0), -EBADMSG);
	ck_assert_int_eq(prt_decode_as(type, NULL, len), -EBADMSG);
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
	len = prt_sample(type);
	slen = prt_rd(prt_msg + at, 4);
	ck_assert_uint_eq(slen, len - string_offset(type));
	ck_assert_int_eq(prt_decode_patched(type, at, 4, slen + 1), -EBADMSG);
	ck_assert_int_eq(prt_decode_patched(type, at, 4, slen - 1), -EBADMSG);
	ck_assert_int_eq(prt_decode_patched(type, at, 4, 0xffffffffu), -EBADMSG);
	ck_assert_int_eq(prt_decode_patched(type, at, 4, 0xffffffffu - (len - 1)), -EBADMSG);
	ck_assert_int_eq(prt_decode_patched(type, at, 4, len), -EBADMSG);
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
		ck_assert_int_eq(prt_decode_patched(type, HDR_TYPE, 2, (uint64_t)t), -EBADMSG);
	}
	ck_assert_int_eq(prt_decode_patched(type, HDR_TYPE, 2, 0xffff), -EBADMSG);

	/* Every other decoder turns this message down. */
	len = prt_sample(type);
	for (int t = TYPE_FIRST; t <= TYPE_LAST; t++)
		if (t != type)
			ck_assert_int_eq(prt_decode_as((uint16_t)t, prt_msg, len), -EBADMSG);
	ck_assert_int_eq(prt_decode_as(type, prt_msg, len), 0);
}
END_TEST

START_TEST(test_reject_header_reserved)
{
	uint16_t type = (uint16_t)(TYPE_FIRST + _i);

	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(prt_decode_patched(type, HDR_RESERVED + (size_t)i, 1, 0x80),
				 -EBADMSG);
}
END_TEST

START_TEST(test_bit_flips)
{
	uint16_t type = (uint16_t)(TYPE_FIRST + _i);
	size_t len = prt_sample(type);
	uint8_t orig[BP_MSG_MAX];
	int accepted = 0;

	memcpy(orig, prt_msg, len);
	for (size_t bit = 0; bit < len * 8; bit++) {
		int r;

		memcpy(prt_msg, orig, len);
		prt_msg[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		/* decode_as checks that an accepted message re-encodes to itself. */
		r = prt_decode_as(type, prt_msg, len);
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
	size_t len = prt_sample(type);
	int r = -1;

	/*
	 * Damage found late, after every field was parsed: the last byte of
	 * the string (NUL) or of the fixed body (reserved, session id), or the
	 * length of a header-only message.
	 */
	if (has_string(type))
		prt_msg[len - 1] = 0;
	else if (type == BP_MSG_READY)
		prt_msg[len - 1] = 0xff;
	else if (type == BP_MSG_CLOSE || type == BP_MSG_CLOSED)
		prt_wr(prt_msg + SESSION_ID, 8, 0);
	else
		prt_wr(prt_msg + HDR_LENGTH, 4, ++len);
	memset(&u, 0xa5, sizeof(u));
	before = u;
	switch (type) {
	case BP_MSG_HELLO: r = bp_msg_hello_decode(prt_msg, len, &u.hello); break;
	case BP_MSG_HELLO_OK: r = bp_msg_hello_ok_decode(prt_msg, len, &u.ok); break;
	case BP_MSG_OPEN: r = bp_msg_open_decode(prt_msg, len, &u.open); break;
	case BP_MSG_READY: r = bp_msg_ready_decode(prt_msg, len, &u.ready); break;
	case BP_MSG_ERROR: r = bp_msg_error_decode(prt_msg, len, &u.error); break;
	case BP_MSG_CLOSE:
	case BP_MSG_CLOSED: r = bp_msg_session_decode(type, prt_msg, len, &u.session); break;
	case BP_MSG_STATUS: r = bp_msg_status_decode(prt_msg, len); break;
	case BP_MSG_METRICS: r = bp_msg_metrics_decode(prt_msg, len); break;
	case BP_MSG_STATUS_REPLY:
	case BP_MSG_METRICS_REPLY:
	case BP_MSG_GOODBYE: r = bp_msg_text_decode(type, prt_msg, len, &u.text); break;
	}
	ck_assert_int_eq(r, -EBADMSG);
	ck_assert_mem_eq(&u, &before, sizeof(u));
}
END_TEST

/* ---- encoder errors ------------------------------------------------------ */

START_TEST(test_encode_enospc)
{
	uint16_t type = (uint16_t)(TYPE_FIRST + _i);
	size_t len = prt_sample(type);
	uint8_t want[BP_MSG_MAX];

	memcpy(want, prt_msg, len);
	/* Too small by any amount: -ENOSPC, and not one byte written. */
	for (size_t cap = 0; cap < len; cap++) {
		memset(prt_out, 0x5a, len + 8);
		ck_assert_int_eq(prt_encode_sample(type, prt_out, cap), -ENOSPC);
		for (size_t i = 0; i < len + 8; i++)
			ck_assert_uint_eq(prt_out[i], 0x5a);
	}
	/* Exactly enough, and more than enough: nothing past the message. */
	memset(prt_out, 0x5a, len + 8);
	ck_assert_int_eq(prt_encode_sample(type, prt_out, len), (int)len);
	ck_assert_mem_eq(prt_out, want, len);
	memset(prt_out, 0x5a, len + 8);
	ck_assert_int_eq(prt_encode_sample(type, prt_out, len + 8), (int)len);
	ck_assert_mem_eq(prt_out, want, len);
	for (size_t i = len; i < len + 8; i++)
		ck_assert_uint_eq(prt_out[i], 0x5a);
	ck_assert_int_eq(prt_encode_sample(type, NULL, 0), -ENOSPC);
}
END_TEST

START_TEST(test_encode_einval)
{
	bp_msg_hello hello = prt_sample_hello();
	bp_msg_open open = prt_sample_open();
	bp_msg_text text = prt_sample_status_reply();
	bp_msg_session s = { .session = 1 };
	uint8_t small[8];

	/* No message. */
	ck_assert_int_eq(bp_msg_hello_encode(NULL, prt_msg, sizeof(prt_msg)), -EINVAL);
	ck_assert_int_eq(bp_msg_hello_ok_encode(NULL, prt_msg, sizeof(prt_msg)), -EINVAL);
	ck_assert_int_eq(bp_msg_open_encode(NULL, prt_msg, sizeof(prt_msg)), -EINVAL);
	ck_assert_int_eq(bp_msg_ready_encode(NULL, prt_msg, sizeof(prt_msg)), -EINVAL);
	ck_assert_int_eq(bp_msg_error_encode(NULL, prt_msg, sizeof(prt_msg)), -EINVAL);
	ck_assert_int_eq(bp_msg_session_encode(BP_MSG_CLOSE, NULL, prt_msg, sizeof(prt_msg)),
			 -EINVAL);
	ck_assert_int_eq(bp_msg_text_encode(BP_MSG_GOODBYE, NULL, prt_msg, sizeof(prt_msg)),
			 -EINVAL);

	/* No buffer, but a capacity. */
	ck_assert_int_eq(bp_msg_hello_encode(&hello, NULL, 100), -EINVAL);
	ck_assert_int_eq(bp_msg_status_encode(NULL, 16), -EINVAL);

	/* A type the encoder does not write. */
	for (int t = 0; t <= TYPE_LAST + 1; t++) {
		if (t != BP_MSG_CLOSE && t != BP_MSG_CLOSED)
			ck_assert_int_eq(bp_msg_session_encode((uint16_t)t, &s, prt_msg, sizeof(prt_msg)),
					 -EINVAL);
		if (t != BP_MSG_STATUS_REPLY && t != BP_MSG_GOODBYE && t != BP_MSG_METRICS_REPLY)
			ck_assert_int_eq(bp_msg_text_encode((uint16_t)t, &text, prt_msg, sizeof(prt_msg)),
					 -EINVAL);
	}

	/* An invalid message in a small buffer: -EINVAL wins. */
	open.world = 0;
	ck_assert_int_eq(bp_msg_open_encode(&open, small, sizeof(small)), -EINVAL);
	ck_assert_int_eq(bp_msg_open_encode(&open, NULL, 0), -EINVAL);
}
END_TEST

/*
 * The resume trailer: a stride of 0 or over 4096, a trailer that says
 * "0 and 1", the flag without the bytes, or the bytes without the flag,
 * are all refused; the encoder refuses a stride over 4096.
 */
START_TEST(test_open_resume_hostile)
{
	bp_msg_open open = prt_sample_open(), got;
	uint8_t keep[BP_MSG_MAX];
	int n;

	open.start_sample = 1000;
	open.batch_stride = 2;
	n = bp_msg_open_encode(&open, prt_msg, sizeof(prt_msg));
	ck_assert_int_gt(n, 0);
	memcpy(keep, prt_msg, (size_t)n);
	ck_assert_int_eq(bp_msg_open_decode(prt_msg, (size_t)n, &got), 0);

	/* Stride 0 and 4097 on the wire. */
	prt_wr(prt_msg + n - 4, 4, 0);
	ck_assert_int_eq(bp_msg_open_decode(prt_msg, (size_t)n, &got), -EBADMSG);
	prt_wr(prt_msg + n - 4, 4, BP_STRIDE_MAX + 1);
	ck_assert_int_eq(bp_msg_open_decode(prt_msg, (size_t)n, &got), -EBADMSG);
	prt_wr(prt_msg + n - 4, 4, UINT32_MAX);
	ck_assert_int_eq(bp_msg_open_decode(prt_msg, (size_t)n, &got), -EBADMSG);
	/* A trailer of start_sample 0 and stride 1 would not re-encode to itself. */
	prt_wr(prt_msg + n - 4, 4, 1);
	prt_wr(prt_msg + n - 12, 8, 0);
	ck_assert_int_eq(bp_msg_open_decode(prt_msg, (size_t)n, &got), -EBADMSG);

	/* The flag cleared: the trailer is 12 bytes the path length does not account for. */
	memcpy(prt_msg, keep, (size_t)n);
	prt_wr(prt_msg + OPEN_RESERVED, 2, 0);
	ck_assert_int_eq(bp_msg_open_decode(prt_msg, (size_t)n, &got), -EBADMSG);
	/* The flag on an OPEN without the bytes (the length cut by 12). */
	memcpy(prt_msg, keep, (size_t)n);
	prt_wr(prt_msg + HDR_LENGTH, 4, (uint64_t)n - 12);
	ck_assert_int_eq(bp_msg_open_decode(prt_msg, (size_t)n - 12, &got), -EBADMSG);
	/* The path length grown over the trailer. */
	memcpy(prt_msg, keep, (size_t)n);
	prt_wr(prt_msg + OPEN_PATH_LEN, 4, open.path_len + 12);
	ck_assert_int_eq(bp_msg_open_decode(prt_msg, (size_t)n, &got), -EBADMSG);

	/* The encoder: over the limit is -EINVAL, and bp_msg_open_why says why. */
	{
		char why[128] = "";

		open.batch_stride = BP_STRIDE_MAX + 1;
		ck_assert_int_eq(bp_msg_open_encode(&open, prt_msg, sizeof(prt_msg)), -EINVAL);
		ck_assert(bp_msg_open_why(&open, why, sizeof(why)));
		ck_assert_str_eq(why, "batch_stride 4097 must be 1 .. 4096");
		open.batch_stride = BP_STRIDE_MAX;
		ck_assert(!bp_msg_open_why(&open, why, sizeof(why)));
	}
}
END_TEST

START_TEST(test_decode_type_argument)
{
	bp_msg_session s;
	bp_msg_text t;
	size_t len;

	/* A decoder asked for a type it does not decode: a caller bug, -EINVAL. */
	len = prt_sample(BP_MSG_CLOSE);
	ck_assert_int_eq(bp_msg_session_decode(BP_MSG_OPEN, prt_msg, len, &s), -EINVAL);
	ck_assert_int_eq(bp_msg_session_decode(0, prt_msg, len, &s), -EINVAL);
	len = prt_sample(BP_MSG_GOODBYE);
	ck_assert_int_eq(bp_msg_text_decode(BP_MSG_ERROR, prt_msg, len, &t), -EINVAL);
	ck_assert_int_eq(bp_msg_text_decode(0xffff, prt_msg, len, &t), -EINVAL);
}
END_TEST

static Suite *hostile_suite(void)
{
	Suite *s = suite_create("protocol-hostile");
	TCase *tc;

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

	tc = tcase_create("encoder_errors");
	tcase_add_loop_test(tc, test_encode_enospc, 0, TYPE_COUNT);
	tcase_add_test(tc, test_encode_einval);
	tcase_add_test(tc, test_open_resume_hostile);
	tcase_add_test(tc, test_decode_type_argument);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return prt_run(hostile_suite());
}
